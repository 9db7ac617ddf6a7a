//! The kmem_cache interface on the process heap: `kmem_cache_create` (and a variant
//! whose constructor carries a word of context), `_destroy`, `_alloc`, `_free`,
//! `_alloc_bulk`, `_free_bulk`, `_shrink`, and shrinking every cache. Allocations are
//! charged to the thread's active memory cgroup, frees uncharge.
//!
//! Fast paths as for kmalloc: the thread's own area, else the per-CPU fallback
//! (`percpu`). No lock of its own: the CPU area's rules apply (see `cpu`).

use super::percpu::{tagged_rseq_area, zero_if_asked, Pushed};
use super::thread::{active_objcg, cache_area, inline_area, rseq_tag, thread_cpu};
use super::{Heap, HEAP};
use crate::platform::fast_tls;
use kmem_core::memcontrol::ObjCgroup;
use kmem_core::slab::DestroyError;
use kmem_core::slab::ObjectLookup;
use kmem_core::{Gfp, KmemCache, SlabFlags};
use std::ptr::NonNull;

impl Heap {
    /// `kmem_cache_create`: see [`kmem_core::Kmem::kmem_cache_create`].
    pub fn kmem_cache_create(
        &self,
        name: &str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        ctor: Option<fn(*mut u8)>,
    ) -> Option<&'static KmemCache> {
        // Through the static: caches borrow the allocator for 'static.
        HEAP.kmem
            .kmem_cache_create(self.cpu().get(), name, size, align, flags, ctor)
    }

    /// [`Heap::kmem_cache_create`] with a constructor that carries a word of context.
    pub fn kmem_cache_create_ctor(
        &self,
        name: &str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        ctor: Option<kmem_core::slab::Ctor>,
    ) -> Option<&'static KmemCache> {
        HEAP.kmem
            .kmem_cache_create_ctor(self.cpu().get(), name, size, align, flags, ctor)
    }

    /// `kmem_cache_destroy`: refused (with the kernel's report) while objects remain.
    ///
    /// # Safety
    /// No other thread uses `s` meanwhile, and nobody uses it after a success.
    pub unsafe fn kmem_cache_destroy(&self, s: &'static KmemCache) -> Result<(), DestroyError> {
        // SAFETY: forwarded from the caller.
        unsafe { HEAP.kmem.kmem_cache_destroy(self.cpu().get(), s) }
    }

    /// `kmem_cache_alloc`, charged to the thread's active memory cgroup if any.
    #[inline]
    pub fn kmem_cache_alloc(&self, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        if let Some(p) = self.kmem.slub().alloc_fast(cache_area(), s, gfp) {
            return Some(p);
        }
        self.kmem_cache_alloc_other(s, gfp)
    }

    /// [`Heap::kmem_cache_alloc`] past its fast path (see `Heap::kmalloc_rseq`).
    #[inline(never)]
    fn kmem_cache_alloc_other(&self, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        if gfp.contains(Gfp::ZERO) {
            // A zeroed object: the fast path's pop, then the object zeroed whole.
            if let Some(p) = self.kmem.slub().alloc_fast_init(cache_area(), s, gfp) {
                return Some(p);
            }
        }
        if fast_tls::get() == rseq_tag() {
            // Per-CPU rseq mode, no active memory cgroup: the restartable pop before
            // the thread-local slots are looked at (here, not in `kmem_cache_alloc`,
            // so that the thread mode's fast path stays as short).
            if let Some(p) = self.rseq_alloc(s, gfp) {
                return Some(p);
            }
        }
        self.kmem_cache_alloc_layers(s, gfp)
    }

    /// [`Heap::kmem_cache_alloc_other`] past the rseq pop.
    #[inline(never)]
    fn kmem_cache_alloc_layers(&self, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        match active_objcg() {
            None => match thread_cpu() {
                Some(c) => self.kmem.slub().alloc(Some(c), s, gfp),
                None => self.kmem_cache_alloc_percpu(s, gfp),
            },
            Some(cg) => self.kmem_cache_alloc_charged(s, gfp, cg),
        }
    }

    /// [`Heap::kmem_cache_alloc`] without a thread area (see `Heap::kmalloc_percpu`).
    #[inline(always)]
    fn kmem_cache_alloc_percpu(&self, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        self.enable_rseq_fast_paths();
        self.percpu_fallback(
            || self.rseq_alloc(s, gfp).map(Some),
            |area| {
                let p = self.kmem.slub().alloc_lockless(area, s)?;
                Some(Some(zero_if_asked(s, gfp, p)))
            },
            |cpu| self.kmem.slub().alloc(cpu, s, gfp),
        )
    }

    /// [`Heap::kmem_cache_alloc`] under an active memory cgroup.
    #[inline(never)]
    fn kmem_cache_alloc_charged(
        &self,
        s: &KmemCache,
        gfp: Gfp,
        cg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        self.kmem
            .memcg()
            .kmem_cache_alloc_objcg(self.cpu().get(), s, gfp, cg)
    }

    /// `kmem_cache_free`: a pointer that is not an object of `s` is reported. An
    /// accounted object uncharges its group.
    ///
    /// # Safety
    /// If `p` is an object of `s`, the caller owns it and stops using it.
    #[inline]
    pub unsafe fn kmem_cache_free(&self, s: &KmemCache, p: NonNull<u8>) -> bool {
        // SAFETY: forwarded from the caller.
        if unsafe { self.kmem.slub().free_fast_to(inline_area(), s, p.as_ptr()) } {
            return true;
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem_cache_free_other(s, p) }
    }

    /// [`Heap::kmem_cache_free`] past its fast path.
    ///
    /// # Safety
    /// As [`Heap::kmem_cache_free`].
    #[inline(never)]
    unsafe fn kmem_cache_free_other(&self, s: &KmemCache, p: NonNull<u8>) -> bool {
        // Per-CPU rseq mode: the restartable push from the object's page, for an
        // object of `s`.
        if let Some(r) = tagged_rseq_area() {
            // SAFETY: forwarded from the caller.
            match unsafe { self.rseq_free_fast_to(r, p.as_ptr(), Some(s)) } {
                Pushed::Done => return true,
                Pushed::AtHead => return self.rseq_double_free_at_top(p.as_ptr()),
                Pushed::No => {}
            }
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem_cache_free_layers(s, p) }
    }

    /// [`Heap::kmem_cache_free_other`] past the rseq push.
    ///
    /// # Safety
    /// As [`Heap::kmem_cache_free`].
    #[inline(never)]
    unsafe fn kmem_cache_free_layers(&self, s: &KmemCache, p: NonNull<u8>) -> bool {
        match thread_cpu() {
            // SAFETY: forwarded from the caller.
            Some(c) => unsafe { self.kmem.kmem_cache_free(Some(c), s, p) },
            // SAFETY: forwarded from the caller.
            None => unsafe { self.kmem_cache_free_percpu(s, p) },
        }
    }

    /// [`Heap::kmem_cache_free`] without a thread area (see `Heap::kmalloc_percpu`).
    ///
    /// # Safety
    /// As [`Heap::kmem_cache_free`].
    #[inline(always)]
    unsafe fn kmem_cache_free_percpu(&self, s: &KmemCache, p: NonNull<u8>) -> bool {
        self.enable_rseq_fast_paths();
        self.percpu_fallback(
            // SAFETY: the caller frees its object: the cache found lives.
            || match unsafe { self.kmem.slub().lookup(p.as_ptr()) } {
                ObjectLookup::Slab(found, slab) if std::ptr::eq(found, s) => {
                    // SAFETY: a checked object of `slab`, given up by the caller.
                    unsafe { self.rseq_free(s, slab, p.as_ptr()) }
                }
                _ => None,
            },
            // SAFETY: forwarded from the caller.
            |area| unsafe { self.kmem.kmem_cache_free_lockless(area, s, p) },
            // SAFETY: forwarded from the caller.
            |cpu| unsafe { self.kmem.kmem_cache_free(cpu, s, p) },
        )
    }

    /// `kmem_cache_alloc_bulk`: all of `out` filled (returns its length) or none (0).
    /// Under an active memory cgroup each object is allocated and charged in turn.
    pub fn kmem_cache_alloc_bulk(&self, s: &KmemCache, gfp: Gfp, out: &mut [*mut u8]) -> usize {
        let Some(cg) = active_objcg() else {
            return self.kmem.slub().alloc_bulk(self.cpu().get(), s, gfp, out);
        };
        let guard = self.cpu();
        let cpu = guard.get();
        for i in 0..out.len() {
            match self.kmem.memcg().kmem_cache_alloc_objcg(cpu, s, gfp, cg) {
                Some(p) => out[i] = p.as_ptr(),
                None => {
                    // SAFETY: the objects allocated just above.
                    unsafe { self.kmem.kmem_cache_free_bulk(cpu, s, &mut out[..i]) };
                    return 0;
                }
            }
        }
        out.len()
    }

    /// `kmem_cache_free_bulk`: frees every non-null entry and nulls it.
    ///
    /// # Safety
    /// As [`Heap::kmem_cache_free`] for every non-null entry.
    pub unsafe fn kmem_cache_free_bulk(&self, s: &KmemCache, objs: &mut [*mut u8]) {
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem.kmem_cache_free_bulk(self.cpu().get(), s, objs) }
    }

    /// `kmem_cache_shrink` for one cache: the calling thread's sheaves of `s` and the
    /// barns flushed, empty slabs freed; returns the slabs freed. Other threads'
    /// sheaves of `s` stay with them ([`Heap::shrink_all`] asks every thread to
    /// flush at its next slow path).
    pub fn kmem_cache_shrink(&self, s: &KmemCache) -> usize {
        self.kmem.slub().shrink(self.cpu().get(), s)
    }

    /// Shrinks every cache; returns the pages freed.
    pub fn shrink_all(&self) -> usize {
        self.kmem.shrink_all(self.cpu().get())
    }
}
