//! kmalloc's public entry points on the whole allocator: the allocations of
//! [`crate::kmalloc::Kmalloc`], and the frees that must run the memory controller's hooks
//! (`kfree` of an accounted object uncharges it).

use super::Kmem;
use crate::gfp::Gfp;
use crate::kmalloc::{MEDIUM_FAST_MAX, SMALL_FAST_MAX};
use crate::memcontrol::ObjCgroup;
use crate::percpu::{CpuArea, CpuRef, InlineArea};
use crate::platform::Platform;
use crate::slab::KmemCache;
use core::ptr::NonNull;

impl<P: Platform> Kmem<P> {
    /// The kmalloc cache serving `size` bytes for `gfp`.
    #[inline]
    pub fn kmalloc_cache(&self, size: usize, gfp: Gfp) -> Option<&KmemCache> {
        self.kmalloc.cache(size, gfp)
    }

    /// The plain kmalloc caches, smallest first.
    pub fn kmalloc_caches(&self) -> &[KmemCache] {
        self.kmalloc.set(0)
    }

    /// `kmalloc`: `size` bytes aligned to at least 8 (a kmalloc-N object for a power of
    /// two N is aligned to N), or `None`.
    #[inline]
    pub fn kmalloc(&self, cpu: Option<CpuRef<'_>>, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        self.kmalloc_ops().kmalloc(cpu, size, gfp)
    }

    /// kmalloc's fast path alone, for malloc-like front ends: an object of the plain
    /// kmalloc cache for `size` popped from `cpu`'s main sheaf (`gfp` without
    /// `__GFP_ZERO`, `__GFP_ACCOUNT` or `__GFP_RECLAIMABLE`), or `None` — then the
    /// caller takes the regular path ([`Kmem::kmalloc`]), which refills, zeroes,
    /// charges and reports as usual. `cpu` may be the zero area
    /// ([`InlineArea::zero`]): then always `None`.
    #[inline(always)]
    pub fn kmalloc_fast<'c>(
        &self,
        cpu: impl Into<InlineArea<'c>>,
        size: usize,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        let cpu = cpu.into();
        if gfp.intersects(Gfp::ACCOUNT | Gfp::RECLAIMABLE | Gfp::ZERO) {
            return None;
        }
        if size <= SMALL_FAST_MAX {
            let off = self.kmalloc.small_fast(size);
            // SAFETY: `off` is the `cpu_offset` of a plain kmalloc cache on the inline
            // sheaf path, where every CPU area keeps its `kmem_cache_cpu`, or the
            // area's zero line, whose sheaves are empty (`small_fast`).
            return unsafe { crate::slab::sheaf_pop_at(cpu, off) };
        }
        if size <= MEDIUM_FAST_MAX {
            let off = self.kmalloc.medium_fast(size);
            // SAFETY: as for `small_fast`: `medium_fast` gives the `cpu_offset` of a
            // plain kmalloc cache on the inline sheaf path, or the zero line. Its
            // small sheaves are popped main, then spare (`sheaf_pop_either_at`).
            return unsafe { crate::slab::sheaf_pop_either_at(cpu, off) };
        }
        let s = self.kmalloc.plain(size)?;
        let off = crate::slab::sheaf_offset(s.config().inline_tag);
        // SAFETY: the offset of the cache's `inline_tag`: its `cpu_offset` when it runs
        // the inline sheaf path, else the zero line. Main, then spare, as above.
        unsafe { crate::slab::sheaf_pop_either_at(cpu, off) }
    }

    /// [`Kmem::kmalloc_fast`] for C's `malloc(size)`, `size <= SMALL_FAST_MAX`: a pop
    /// from the main sheaf of the class of
    /// [`malloc_class_size`](crate::kmalloc::malloc_class_size)`(size)`, 16-aligned
    /// for every size above 8; `None` where `kmalloc_fast` would find nothing.
    #[inline(always)]
    pub fn malloc_fast<'c>(
        &self,
        cpu: impl Into<InlineArea<'c>>,
        size: usize,
    ) -> Option<NonNull<u8>> {
        // A size past the table reads the zero line: `None`.
        let off = self.kmalloc.malloc_fast(size);
        // SAFETY: as in `kmalloc_fast` (the same pop, addressed differently):
        // `malloc_fast` gives the `cpu_offset` of a plain kmalloc cache on the inline
        // sheaf path, or the zero line. C's `malloc` is a called function: its
        // `kmem_cache_cpu` is addressed without the register barrier
        // (`CpuArea::ptr_indexed`).
        unsafe { crate::slab::sheaf_pop_at_indexed(cpu.into(), off) }
    }

    /// Per-CPU rseq mode's kmalloc fast path, before its restartable pop: for a size
    /// up to `SMALL_FAST_MAX`, the `cpu_offset` of the sheaves of the plain class for
    /// `size` when its cache runs on the platform's restartable sequences, else the
    /// CPU areas' zero line, whose sheaves are empty (see
    /// [`crate::kmalloc::KmallocCaches::small_rseq`]); `None` above it.
    #[inline(always)]
    pub fn kmalloc_rseq_offset(&self, size: usize) -> Option<usize> {
        (size <= SMALL_FAST_MAX).then(|| self.kmalloc.small_rseq(size))
    }

    /// [`Kmem::kmalloc_rseq_offset`] for C's `malloc(size)`: the class of
    /// [`malloc_class_size`](crate::kmalloc::malloc_class_size)`(size)`.
    #[inline(always)]
    pub fn malloc_rseq_offset(&self, size: usize) -> Option<usize> {
        (size <= SMALL_FAST_MAX).then(|| self.kmalloc.malloc_rseq(size))
    }

    /// kmalloc's sheaf slow path for a front end whose [`Kmem::kmalloc_fast`] missed,
    /// without the layers of the regular path (see
    /// [`crate::slab::Slub::alloc_sheaf_slow`]): the main sheaf of the plain class
    /// for `size` swapped with a spare holding frees, or replaced from the barn or the
    /// slabs. `None`: take the regular path ([`Kmem::kmalloc`]).
    #[inline]
    pub fn kmalloc_sheaf_slow(
        &self,
        cpu: CpuRef<'_>,
        size: usize,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        if gfp.intersects(Gfp::ACCOUNT | Gfp::RECLAIMABLE | Gfp::ZERO) {
            return None;
        }
        self.slub().alloc_sheaf_slow(cpu, self.kmalloc.plain(size)?)
    }

    /// [`Kmem::kmalloc_sheaf_slow`] for C's `malloc(size)`: the sheaves of the class of
    /// [`malloc_class_size`](crate::kmalloc::malloc_class_size)`(size)`.
    #[inline]
    pub fn malloc_sheaf_slow(&self, cpu: CpuRef<'_>, size: usize) -> Option<NonNull<u8>> {
        self.slub()
            .alloc_sheaf_slow(cpu, self.kmalloc.malloc_plain(size)?)
    }

    /// kfree's counterpart of [`Kmem::kmalloc_sheaf_slow`] (see
    /// [`crate::slab::Slub::free_sheaf_slow`]): `None` sends the caller to
    /// [`Kmem::kfree`]; `Some(false)` is a double free at the sheaf's top, reported.
    ///
    /// # Safety
    /// As [`Kmem::kfree`] when it returns `Some(true)`.
    #[inline]
    pub unsafe fn kfree_sheaf_slow(&self, cpu: CpuRef<'_>, p: *mut u8) -> Option<bool> {
        // SAFETY: forwarded from the caller.
        unsafe { self.slub().free_sheaf_slow(cpu, p) }
    }

    /// kfree's fast path alone (see [`crate::slab::Slub::free_fast`]): true when `p`
    /// went onto `cpu`'s spare sheaf (frees go there); false sends the caller to
    /// [`Kmem::kfree`] (always, for the zero area: [`InlineArea::zero`]).
    ///
    /// # Safety
    /// As [`Kmem::kfree`] when it returns true.
    #[inline(always)]
    pub unsafe fn kfree_fast<'c>(&self, cpu: impl Into<InlineArea<'c>>, p: *mut u8) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { self.slub().free_fast(cpu, p) }
    }

    /// [`Kmem::kfree_fast`] for C's `free`, a called function (see
    /// [`crate::slab::Slub::free_fast_indexed`]).
    ///
    /// # Safety
    /// As [`Kmem::kfree`] when it returns true.
    #[inline(always)]
    pub unsafe fn kfree_fast_indexed<'c>(
        &self,
        cpu: impl Into<InlineArea<'c>>,
        p: *mut u8,
    ) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { self.slub().free_fast_indexed(cpu, p) }
    }

    /// `kmalloc_node`: as [`Kmem::kmalloc`], on node `nid` if given.
    #[inline]
    pub fn kmalloc_node(
        &self,
        cpu: Option<CpuRef<'_>>,
        size: usize,
        gfp: Gfp,
        nid: Option<usize>,
    ) -> Option<NonNull<u8>> {
        self.kmalloc_ops().kmalloc_node(cpu, size, gfp, nid)
    }

    /// Per-CPU mode, without the area's lock: kmalloc's fast path on `area` (see
    /// [`crate::kmalloc::Kmalloc::kmalloc_lockless`]).
    #[inline]
    pub fn kmalloc_lockless(&self, area: &CpuArea, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        self.kmalloc_ops().kmalloc_lockless(area, size, gfp)
    }

    /// Per-CPU mode, without the area's lock: kfree's fast path (see
    /// [`crate::kmalloc::Kmalloc::kfree_lockless`]).
    ///
    /// # Safety
    /// As [`Kmem::kfree`].
    #[inline]
    pub unsafe fn kfree_lockless(&self, area: &CpuArea, p: *mut u8) -> Option<bool> {
        // SAFETY: forwarded from the caller.
        unsafe { self.kmalloc_ops().kfree_lockless(area, p) }
    }

    /// `kzalloc`: zeroed `kmalloc`.
    #[inline]
    pub fn kzalloc(&self, cpu: Option<CpuRef<'_>>, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        self.kmalloc(cpu, size, gfp | Gfp::ZERO)
    }

    /// `kcalloc`: `n * size` zeroed bytes; `None` if the product overflows.
    pub fn kcalloc(
        &self,
        cpu: Option<CpuRef<'_>>,
        n: usize,
        size: usize,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        self.kmalloc_ops().kcalloc(cpu, n, size, gfp)
    }

    /// `ksize`: how many bytes the allocation at `p` really has (its class size, or
    /// its pages). 0 for a pointer kmalloc did not hand out.
    ///
    /// # Safety
    /// As [`Kmalloc::ksize`](crate::kmalloc::Kmalloc::ksize): `p` is null, an
    /// allocation the caller holds, or no address this allocator handed out.
    pub unsafe fn ksize(&self, p: *const u8) -> usize {
        // SAFETY: forwarded from the caller.
        unsafe { self.kmalloc_ops().ksize(p) }
    }

    /// `kfree`: frees what kmalloc (or `kmem_cache_alloc`) handed out, uncharging an
    /// accounted object or block first. Null is a no-op; a pointer that is not ours,
    /// not the start of an object, or already free at a freelist's head is reported
    /// (`BUG kmalloc-64 (Not tainted): Invalid object pointer 0x…`) and nothing is
    /// freed: then it returns false.
    ///
    /// # Safety
    /// If `p` is one of ours, the caller owns it and stops using it.
    #[inline]
    pub unsafe fn kfree(&self, cpu: Option<CpuRef<'_>>, p: *mut u8) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { self.kmalloc_ops().kfree(cpu, p, self) }
    }

    /// `krealloc`: resizes the allocation at `p` to `new_size`, in place when it still
    /// fits its class (or pages), else by moving it. Null `p` allocates; on failure
    /// `None` is returned and `p` is left as it was.
    ///
    /// # Safety
    /// `p` is null or an allocation of ours that the caller owns.
    pub unsafe fn krealloc(
        &self,
        cpu: Option<CpuRef<'_>>,
        p: *mut u8,
        new_size: usize,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        // SAFETY: forwarded from the caller.
        unsafe { self.krealloc_objcg(cpu, p, new_size, gfp, None) }
    }

    /// [`Kmem::krealloc`] whose new allocation, if it moves, is charged to `objcg`.
    ///
    /// # Safety
    /// As [`Kmem::krealloc`].
    pub unsafe fn krealloc_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        p: *mut u8,
        new_size: usize,
        gfp: Gfp,
        objcg: Option<&ObjCgroup>,
    ) -> Option<NonNull<u8>> {
        let memcg = self.memcg();
        let alloc = |size| match objcg {
            Some(cg) => memcg.kmalloc_objcg(cpu, size, gfp, cg),
            None => self.kmalloc(cpu, size, gfp),
        };
        // SAFETY: forwarded from the caller.
        unsafe {
            self.kmalloc_ops()
                .krealloc_with(cpu, p, new_size, gfp, alloc, self)
        }
    }
}
