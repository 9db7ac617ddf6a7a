//! The kmalloc family on the process heap: `kmalloc`, `kmalloc_node`, `kzalloc`,
//! `kcalloc`, `krealloc`, `ksize`, `kfree`, each charged to (or uncharging) the
//! thread's active memory cgroup.
//!
//! Fast paths: one thread-local load (the fast word, `thread::inline_area`); when it
//! says per-CPU rseq mode (`thread::rseq_tag`, tested first, its branch placed out
//! of thread mode's way: `percpu::rseq_area_first`), the restartable sequence, inline
//! (`kmalloc_rseq`, `kfree_rseq`); with the thread's area (thread mode, attached, no
//! active memory cgroup) straight to the core with that area; with an
//! active memory cgroup the same inline paths on the thread's charged area (its objcg
//! sheaves' kept sheaves and inboxes), then, out of line, the objcg sheaves' slow
//! halves (`kmalloc_charged_fast`, `kfree_charged_fast`);
//! a zeroed request (`kzalloc`, `kcalloc`; `kmem_cache_alloc` with `__GFP_ZERO` in
//! `slab`) the same pop with the object cleared whole after it (`kzalloc_fast`);
//! else, out of line, the layers (`kmalloc_layers`, `kfree_layers`: KFENCE, the sheaf
//! slow path, the memory cgroup's path, the per-CPU fallback of `percpu`). No lock of
//! its own: the CPU area's rules apply (see `cpu`).

use super::percpu::{rseq_area_first, tagged_rseq_area, Pushed, RseqArea};
use super::thread::{
    active_objcg, charged_cpu, fast_cpu, inline_area, inline_area_of, refresh_charged_fast,
    rseq_tag, thread_cpu,
};
use super::Heap;
use crate::platform::fast_tls;
use kmem_core::memcontrol::ObjCgroup;
use kmem_core::slab::ObjectLookup;
use kmem_core::{CpuRef, Gfp};
use std::ptr::NonNull;

impl Heap {
    /// `kmalloc`: `size` bytes (naturally aligned for power-of-two sizes up to a
    /// page), or `None` when memory runs out.
    /// Charged to the thread's active memory cgroup, if it has one.
    #[inline(always)]
    pub fn kmalloc(&self, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        // One load of the fast word for the rseq test and the inline pop (the compiler
        // did not merge two). The rseq test comes first, laid out so that thread mode
        // falls through to its pop: one compare-and-branch more for thread mode, where
        // per-CPU rseq mode no longer pays for a thread-mode pop that cannot succeed
        // (the tag names the zero area) — BENCHMARKS.md, "The rseq tag first".
        let w = fast_tls::get();
        if let Some(rseq) = rseq_area_first(w) {
            return self.kmalloc_rseq(rseq, size, gfp);
        }
        // SAFETY: read just now, on this thread.
        let area = unsafe { inline_area_of(w) };
        if let Some(p) = self.kmem.kmalloc_fast(area, size, gfp) {
            return Some(p);
        }
        if gfp.contains(Gfp::ZERO) && !gfp.intersects(Gfp::ACCOUNT | Gfp::RECLAIMABLE) {
            // kzalloc, kcalloc: the same pop, then the object zeroed whole. (Where `gfp`
            // is a constant, as in `kzalloc`, only its callers have this test.)
            if let Some(p) = self.kzalloc_fast(size, gfp) {
                return Some(p);
            }
        }
        if let Some((c, cg)) = charged_cpu() {
            return self.kmalloc_charged_fast(c, cg, size, gfp);
        }
        self.kmalloc_layers(size, gfp)
    }

    /// [`Heap::kmalloc`] on an attached thread with an active memory cgroup, whose
    /// inline pop (from its charged area's kept sheaf) missed: an object kept charged
    /// to its objcg in the kept sheaf of the class (the inline pop reads the plain
    /// class's line: kmalloc-cg-32's for 24 bytes), or its inbox taken in; else the
    /// layers. Not while a KFENCE sample is armed: the layers take it (charged, as the
    /// sample charges). Out of line: the inline path serves that thread's steady state.
    #[inline(never)]
    fn kmalloc_charged_fast(
        &self,
        c: CpuRef<'static>,
        cg: &ObjCgroup,
        size: usize,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        if !crate::kfence::wants_next() {
            if let Some(p) = self.kmem.memcg().kmalloc_objcg_fast(c, size, gfp, cg) {
                return Some(p);
            }
        }
        self.kmalloc_layers(size, gfp)
    }

    /// [`Heap::kmalloc`] in per-CPU rseq mode (the thread's fast word is the rseq
    /// tag): the restartable pop of a plain request, then the layers (out of line).
    /// Inline, as thread mode's pop is: out of line, with `kfree_rseq`, the call and
    /// the register saves cost `bench percpu`'s pair a sixth (BENCHMARKS.md, "cpu-rseq's
    /// fast paths inline").
    #[inline(always)]
    fn kmalloc_rseq(&self, rseq: RseqArea, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        if !gfp.intersects(Gfp::ACCOUNT | Gfp::RECLAIMABLE | Gfp::ZERO) {
            if let Some(p) = self.rseq_alloc_small(rseq, size) {
                return Some(p);
            }
        }
        self.kmalloc_layers(size, gfp)
    }

    /// [`Heap::kmalloc`] past its fast paths: an empty sheaf, `__GFP_ZERO`, an active
    /// memory cgroup, a thread without its area yet — KFENCE, the sheaf slow path, the
    /// zone path, per-CPU mode's fallbacks, the charged path.
    #[inline(never)]
    fn kmalloc_layers(&self, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        // KFENCE first: a charged allocation is sampled too (charged by the sample).
        if crate::kfence::should_sample(size) {
            if let Some(p) = self.kfence_alloc(size, gfp) {
                return Some(p);
            }
        }
        if let Some(c) = fast_cpu() {
            // Thread mode: the sheaf slow path without the layers below (after
            // KFENCE has had its sample).
            if let Some(p) = self.kmem.kmalloc_sheaf_slow(c, size, gfp) {
                return Some(p);
            }
        }
        if size > kmem_core::kmalloc::KMALLOC_MAX_CACHE_SIZE
            && self.zoned_blocks()
            && active_objcg().is_none()
        {
            return self.kmalloc_zoned_block(size, gfp);
        }
        if fast_tls::get() == rseq_tag() {
            // Per-CPU rseq mode, no active memory cgroup: the restartable pop first,
            // as `kmalloc_percpu` would, without looking at the other slots.
            if let Some(p) = self
                .kmem
                .kmalloc_cache(size, gfp)
                .and_then(|s| self.rseq_alloc(s, gfp))
            {
                return Some(p);
            }
        }
        match active_objcg() {
            None => match thread_cpu() {
                Some(c) => self.kmem.kmalloc(Some(c), size, gfp),
                None => self.kmalloc_percpu(size, gfp),
            },
            Some(cg) => self.kmalloc_charged(size, gfp, cg),
        }
    }

    /// A zeroed request of the plain kmalloc set on a thread with its own area
    /// (`kzalloc`, `kcalloc`): a pop from the class's main sheaf, as [`Heap::kmalloc`]'s
    /// inline fast path pops, then the whole object cleared, as the regular path clears
    /// it (`post_alloc_init`). `None` (nothing done) where the inline path would find
    /// nothing: the zero area (no area yet, per-CPU mode, an active memory cgroup), an
    /// empty sheaf, a class off the inline path.
    #[inline]
    fn kzalloc_fast(&self, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        let s = self.kmem.kmalloc_cache(size, gfp)?;
        self.kmem.slub().alloc_fast_init(inline_area(), s, gfp)
    }

    /// [`Heap::kmalloc`] without a thread area: per-CPU mode (rseq or CAS fast path,
    /// else under the CPU area's lock), a thread's first allocation, the zone path.
    #[inline(always)]
    fn kmalloc_percpu(&self, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        self.enable_rseq_fast_paths();
        self.percpu_fallback(
            || {
                self.kmem
                    .kmalloc_cache(size, gfp)
                    .and_then(|s| self.rseq_alloc(s, gfp))
                    .map(Some)
            },
            |area| self.kmem.kmalloc_lockless(area, size, gfp).map(Some),
            |cpu| self.kmem.kmalloc(cpu, size, gfp),
        )
    }

    /// [`Heap::kmalloc`] under an active memory cgroup; then the fast word again (the
    /// charge may have made the thread's charged area, or given it to `cg`).
    #[inline(never)]
    fn kmalloc_charged(&self, size: usize, gfp: Gfp, cg: &ObjCgroup) -> Option<NonNull<u8>> {
        let p = self
            .kmem
            .memcg()
            .kmalloc_objcg(self.cpu().get(), size, gfp, cg);
        refresh_charged_fast();
        p
    }

    /// `kmalloc_node`: as [`Heap::kmalloc`], on node `nid` (not charged: node
    /// placement and accounting do not combine yet).
    pub fn kmalloc_node(&self, size: usize, gfp: Gfp, nid: usize) -> Option<NonNull<u8>> {
        self.kmem
            .kmalloc_node(self.cpu().get(), size, gfp, Some(nid))
    }

    /// `kzalloc`: zeroed [`Heap::kmalloc`].
    pub fn kzalloc(&self, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        self.kmalloc(size, gfp | Gfp::ZERO)
    }

    /// `kcalloc`: `n * size` zeroed bytes; `None` on overflow.
    pub fn kcalloc(&self, n: usize, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        self.kmalloc(n.checked_mul(size)?, gfp | Gfp::ZERO)
    }

    /// `krealloc`: see [`kmem_core::Kmem::krealloc`]; a moved allocation is charged to the
    /// active memory cgroup.
    ///
    /// # Safety
    /// `p` is null or an allocation of this heap that the caller owns.
    pub unsafe fn krealloc(&self, p: *mut u8, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        if crate::kfence::owns(p) {
            // SAFETY: forwarded from the caller.
            return unsafe { self.kfence_realloc(p, size, gfp) };
        }
        // SAFETY: forwarded from the caller.
        if let Some(old) = unsafe { self.zoned_size(p) } {
            // A red-zoned block always moves (its tail follows the size).
            let q = self.kmalloc(size, gfp)?;
            // SAFETY: both are ours; `old.min(size)` bytes are valid in each; distinct.
            unsafe {
                std::ptr::copy_nonoverlapping(p, q.as_ptr(), old.min(size));
                self.kfree(p);
            }
            return Some(q);
        }
        // SAFETY: forwarded from the caller.
        unsafe {
            self.kmem
                .krealloc_objcg(self.cpu().get(), p, size, gfp, active_objcg())
        }
    }

    /// `ksize`: the usable size of the allocation at `p` (0 if it is not one).
    ///
    /// # Safety
    /// `p` is null, an allocation of this heap that the caller holds (not freed, and
    /// not being freed or resized by another thread), or no address the heap ever
    /// handed out: a red-zoned block's size is read from its own last words, and a
    /// freed object's cache may be gone.
    pub unsafe fn ksize(&self, p: *const u8) -> usize {
        if crate::kfence::owns(p) {
            return crate::kfence::size_of(p).unwrap_or(0);
        }
        // SAFETY: forwarded from the caller.
        if let Some(n) = unsafe { self.zoned_size(p) } {
            return n;
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem.ksize(p) }
    }

    /// `kfree`: frees `p` (null: nothing). A pointer that is not the start of one of
    /// this heap's allocations (or is already free at a freelist's head) is reported on
    /// stderr and not freed: then it returns false.
    ///
    /// # Safety
    /// If `p` is one of this heap's allocations, the caller owns it and stops using it.
    #[inline(always)]
    pub unsafe fn kfree(&self, p: *mut u8) -> bool {
        // One load of the fast word for both tests, the rseq tag first, as in
        // `kmalloc`.
        let w = fast_tls::get();
        if let Some(rseq) = rseq_area_first(w) {
            // SAFETY: forwarded from the caller.
            return unsafe { self.kfree_rseq(rseq, p) };
        }
        // SAFETY: forwarded from the caller; `w` was read just now, on this thread.
        if unsafe { self.kmem.kfree_fast(inline_area_of(w), p) } {
            return true;
        }
        if let Some((c, cg)) = charged_cpu() {
            // SAFETY: forwarded from the caller.
            return unsafe { self.kfree_charged_fast(c, cg, p) };
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.kfree_layers(p) }
    }

    /// [`Heap::kfree`] on a thread with an active memory cgroup, whose inline push
    /// (onto its charged area's inbox) refused `p`: an object charged to the thread's
    /// objcg may stay charged in its area's kept sheaf (a full inbox of its class
    /// taken in first); else the layers. Out of line, as `kmalloc_charged_fast`.
    ///
    /// # Safety
    /// As [`Heap::kfree`].
    #[inline(never)]
    unsafe fn kfree_charged_fast(&self, c: CpuRef<'static>, cg: &ObjCgroup, p: *mut u8) -> bool {
        // SAFETY: forwarded from the caller.
        if let Some(done) = unsafe { self.kmem.memcg().kfree_objcg_fast(c, p, cg) } {
            return done;
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.kfree_layers(p) }
    }

    /// [`Heap::kfree`] in per-CPU rseq mode (see [`Heap::kmalloc_rseq`]): the
    /// restartable push from the object's page, then the layers.
    ///
    /// # Safety
    /// As [`Heap::kfree`].
    #[inline(always)]
    unsafe fn kfree_rseq(&self, rseq: RseqArea, p: *mut u8) -> bool {
        // SAFETY: the caller's contract (as `Heap::kfree`): `p` is given up, and the
        // push takes it only when it starts an object of ours.
        match unsafe { self.rseq_free_fast(rseq, p) } {
            Pushed::Done => true,
            Pushed::AtHead => self.rseq_double_free_at_top(p),
            // SAFETY: forwarded from the caller.
            Pushed::No => unsafe { self.kfree_layers(p) },
        }
    }

    /// [`Heap::kfree`] past its fast paths: a full sheaf, a charged object, a large
    /// block, a bad pointer, per-CPU mode's fallbacks.
    ///
    /// # Safety
    /// As [`Heap::kfree`].
    #[inline(never)]
    pub(super) unsafe fn kfree_layers(&self, p: *mut u8) -> bool {
        if crate::kfence::owns(p) {
            return self.kfence_free(p);
        }
        // SAFETY: the block the caller frees (this function's contract).
        if self.zoned_blocks() && !unsafe { self.zoned_free_check(p) } {
            // An overwritten red zone: reported, the block kept (quarantined).
            return true;
        }
        if let Some(c) = fast_cpu() {
            // As in `kmalloc_layers`: the sheaf slow path without the layers below.
            // SAFETY: forwarded from the caller.
            if let Some(done) = unsafe { self.kmem.kfree_sheaf_slow(c, p) } {
                return done;
            }
            // The thread's own area (no rseq tag, no charged words): the regular free,
            // as the last arm below would find.
            // SAFETY: forwarded from the caller.
            return unsafe { self.kmem.kfree(Some(c), p) };
        }
        if let Some(rseq) = tagged_rseq_area() {
            // As in `kmalloc_layers`: the restartable push.
            // SAFETY: forwarded from the caller.
            if let Some(done) = unsafe { self.rseq_free_ptr(rseq, p) } {
                return done;
            }
        }
        if let Some((c, cg)) = charged_cpu() {
            // A thread with an active memory cgroup, its objcg sheaf of the class full:
            // half of it goes back and the object waits there; else the regular free
            // (its area without a `thread_local!` access).
            // SAFETY: forwarded from the caller.
            let done = unsafe { self.kmem.memcg().kfree_objcg_full(c, p, cg) };
            refresh_charged_fast();
            if let Some(done) = done {
                return done;
            }
            // SAFETY: forwarded from the caller.
            return unsafe { self.kmem.kfree(Some(c), p) };
        }
        match thread_cpu() {
            // SAFETY: forwarded from the caller.
            Some(c) => unsafe { self.kmem.kfree(Some(c), p) },
            // SAFETY: forwarded from the caller.
            None => unsafe { self.kfree_percpu(p) },
        }
    }

    /// [`Heap::kfree_layers`] for a caller on a thread with its own area (`c`, from
    /// `fast_cpu`) whose sheaf slow path has just refused `p`, an address in the page
    /// allocator's span: a page block, or a bad pointer. C's `free` of a block of
    /// 1 MiB and more came here through `Heap::dealloc` and the inline push and the
    /// sheaf slow path a second time.
    ///
    /// # Safety
    /// As [`Heap::kfree`].
    #[inline(never)]
    pub(super) unsafe fn kfree_past_sheaves(&self, c: CpuRef<'_>, p: *mut u8) -> bool {
        if crate::kfence::owns(p) {
            return self.kfence_free(p);
        }
        // SAFETY: the block the caller frees (this function's contract).
        if self.zoned_blocks() && !unsafe { self.zoned_free_check(p) } {
            // An overwritten red zone: reported, the block kept (quarantined).
            return true;
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem.kfree(Some(c), p) }
    }

    /// [`Heap::kfree`] without a thread area (see [`Heap::kmalloc_percpu`]).
    ///
    /// # Safety
    /// As [`Heap::kfree`].
    #[inline(always)]
    unsafe fn kfree_percpu(&self, p: *mut u8) -> bool {
        self.enable_rseq_fast_paths();
        self.percpu_fallback(
            // SAFETY: the caller frees its object: the cache found lives.
            || match unsafe { self.kmem.slub().lookup(p) } {
                // SAFETY: a checked object of `slab`, given up by the caller.
                ObjectLookup::Slab(s, slab) => unsafe { self.rseq_free(s, slab, p) },
                _ => None,
            },
            // SAFETY: forwarded from the caller.
            |area| unsafe { self.kmem.kfree_lockless(area, p) },
            // SAFETY: forwarded from the caller.
            |cpu| unsafe { self.kmem.kfree(cpu, p) },
        )
    }
}
