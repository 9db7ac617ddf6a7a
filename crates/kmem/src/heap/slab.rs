//! The kmem_cache interface on the process heap: `kmem_cache_create` (and a variant
//! whose constructor carries a word of context), `_destroy`, `_alloc`, `_free`,
//! `_alloc_bulk`, `_free_bulk`, `_shrink`, and shrinking every cache. Allocations are
//! charged to the thread's active memory cgroup, frees uncharge.
//!
//! Fast paths as for kmalloc: per-CPU rseq mode's restartable pop and push, tested
//! first (`percpu::rseq_area_first`, its branch out of thread mode's way); the thread's
//! own area; else the per-CPU fallback (`percpu`). No lock of its own: the CPU area's
//! rules apply (see `cpu`).

use super::percpu::{rseq_area_first, zero_if_asked, RseqArea};
use super::thread::{active_objcg, inline_area, inline_area_of, thread_cpu};
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
    /// Always inline, as `kmalloc`: the thread-mode pop is a few instructions, and the
    /// rseq half lies out of line (a caller that did not inline a larger body paid a
    /// call on every pair).
    #[inline(always)]
    pub fn kmem_cache_alloc(&self, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        // One load of the fast word for both tests: per-CPU rseq mode's tag first, in
        // the label block `rseq_area_first` lays out of line, so that thread mode
        // falls through to its inline pop with one compare and branch more, and rseq
        // mode no longer passes a thread-mode pop that cannot succeed (the zero
        // area's) and a call before its own pop.
        let w = fast_tls::get();
        if let Some(rseq) = rseq_area_first(w) {
            return self.kmem_cache_alloc_rseq(rseq, s, gfp);
        }
        // SAFETY: read just now, on this thread.
        let area = unsafe { inline_area_of(w) };
        if let Some(p) = self.kmem.slub().alloc_fast(area, s, gfp) {
            return Some(p);
        }
        self.kmem_cache_alloc_other(s, gfp)
    }

    /// [`Heap::kmem_cache_alloc`] in per-CPU rseq mode (the thread's fast word is the
    /// rseq tag): the restartable pop of a sheaf cache, inline (in the label block
    /// that `rseq_area_first` places out of thread mode's way), then, out of line,
    /// the rest.
    #[inline(always)]
    fn kmem_cache_alloc_rseq(
        &self,
        rseq: RseqArea,
        s: &KmemCache,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        if !gfp.contains(Gfp::ZERO) {
            if let Some(p) = self.rseq_sheaf_alloc(rseq, s) {
                return Some(p);
            }
        }
        self.kmem_cache_alloc_rseq_slow(rseq, s, gfp)
    }

    /// [`Heap::kmem_cache_alloc_rseq`] past the inline pop.
    #[inline(never)]
    fn kmem_cache_alloc_rseq_slow(
        &self,
        rseq: RseqArea,
        s: &KmemCache,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        if let Some(p) = self.rseq_alloc_at(rseq, s, gfp) {
            return Some(p);
        }
        self.kmem_cache_alloc_layers(s, gfp)
    }

    /// [`Heap::kmem_cache_alloc`] past its fast path in thread mode (or with the fast
    /// word of a thread on neither fast path: the layers decide).
    #[inline(never)]
    fn kmem_cache_alloc_other(&self, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        if gfp.contains(Gfp::ZERO) {
            // A zeroed object: the fast path's pop, then the object zeroed whole.
            if let Some(p) = self.kmem.slub().alloc_fast_init(inline_area(), s, gfp) {
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
    #[inline(always)]
    pub unsafe fn kmem_cache_free(&self, s: &KmemCache, p: NonNull<u8>) -> bool {
        // As in `kmem_cache_alloc`: the rseq tag first, its branch laid out of line.
        let w = fast_tls::get();
        if let Some(rseq) = rseq_area_first(w) {
            // SAFETY: forwarded from the caller.
            return unsafe { self.kmem_cache_free_rseq(rseq, s, p) };
        }
        // SAFETY: forwarded from the caller; `w` was read just now, on this thread.
        if unsafe {
            self.kmem
                .slub()
                .free_fast_to(inline_area_of(w), s, p.as_ptr())
        } {
            return true;
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem_cache_free_layers(s, p) }
    }

    /// [`Heap::kmem_cache_free`] in per-CPU rseq mode: the restartable push from the
    /// object's page, for an object of `s`, then the layers.
    ///
    /// # Safety
    /// As [`Heap::kmem_cache_free`].
    #[inline(always)]
    unsafe fn kmem_cache_free_rseq(&self, rseq: RseqArea, s: &KmemCache, p: NonNull<u8>) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.rseq_free_fast_to(rseq, p.as_ptr(), Some(s)) || self.kmem_cache_free_layers(s, p)
        }
    }

    /// [`Heap::kmem_cache_free`] past its fast paths.
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
            || match self.kmem.slub().lookup(p.as_ptr()) {
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

    /// `kmem_cache_shrink` for one cache: returns the slabs freed.
    pub fn kmem_cache_shrink(&self, s: &KmemCache) -> usize {
        self.kmem.slub().shrink(self.cpu().get(), s)
    }

    /// Shrinks every cache; returns the pages freed.
    pub fn shrink_all(&self) -> usize {
        self.kmem.shrink_all(self.cpu().get())
    }
}
