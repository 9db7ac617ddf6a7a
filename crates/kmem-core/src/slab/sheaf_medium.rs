//! The sheaves of medium objects (above [`SMALL_OBJECT_MAX`], 1 KiB): their allocation
//! pops the spare sheaf once the main one is empty, and a free that finds the spare
//! full trades it at the barn instead of swapping it with the main sheaf.
//!
//! These caches get small sheaves (2 to 25 objects: `SHEAF_MAX_OBJECT_BYTES` bounds
//! what a sheaf holds), and the general rule — allocations pop the main sheaf, frees
//! push the spare, the two swap when one runs out — made a thread that allocates and
//! frees one block at a time swap every object or two: each pair moves an object from
//! the main sheaf to the spare. Once both were full, every free found the spare full
//! and the main sheaf with room, and swapped (`icount.sh` large, a 64 KiB
//! malloc+free: 105 instructions, 27 of them the swap; in `KMEM_PERCPU=cpu-rseq`,
//! where a swap is the locked slow path, `workloads` medium took 45–75 ns a pair,
//! 125,000 swaps in 125,000 pairs). Popping the spare when the main sheaf is empty,
//! and not swapping on a free, the main sheaf runs empty and the pop and the push
//! then share the spare with no slow path. The restartable sequences' pop takes the
//! spare the same way, for every cache (`platform::rseq` in the `kmem` crate).
//!
//! The caches of small objects keep the general rule: their sheaves hold 20 to 124
//! objects, a swap moves an eighth of a sheaf at least (`swap_floor`), and their
//! inline pop stays one test (`sheaf_pop_at`).
//!
//! Owns no state. Locking: as `sheaf.rs` (the CPU area's owner only).

use super::*;
use crate::percpu::InlineArea;
use crate::platform::Platform;
use core::ptr::NonNull;

/// The largest object whose cache keeps the general rule (see the module docs): the
/// largest size the inline fast paths' size tables reach (kmalloc's `SMALL_FAST_MAX`),
/// which pop the main sheaf only.
pub const SMALL_OBJECT_MAX: usize = 1024;

/// kmalloc's fast path for the medium classes: [`sheaf_pop_at`], and when the main
/// sheaf is empty the top object of the spare, where the frees went, without a swap.
///
/// For any cache on the inline sheaf path; the medium ones are where it matters, and
/// the zeroed requests' pop (`Slub::alloc_fast_init`) takes it for every cache.
///
/// # Safety
/// As [`sheaf_pop_at`].
#[inline(always)]
pub unsafe fn sheaf_pop_either_at(c: InlineArea<'_>, cpu_offset: usize) -> Option<NonNull<u8>> {
    // SAFETY: as in `sheaf_pop_at`: every CPU area keeps the cache's `kmem_cache_cpu`
    // at that offset (the zero area's zero words: no objects in either sheaf).
    let cc = unsafe { &*c.area().ptr::<KmemCacheCpu>(cpu_offset) };
    let obj = match cc.sheaf_pop() {
        Some(obj) => obj,
        None => KmemCacheCpu::owner_pop(&cc.spare_top, &cc.spare)?,
    };
    // SAFETY: a sheaf slot below its count holds an object's address, never 0.
    Some(unsafe { NonNull::new_unchecked(obj as *mut u8) })
}

impl<P: Platform> Slub<'_, P> {
    /// Whether a free that found the spare full may swap it with a main sheaf that has
    /// room (an eighth of a sheaf, `swap_floor`): only for a cache of small objects
    /// (`object_size`, the slot size, at most [`SMALL_OBJECT_MAX`]). See the module
    /// docs. On the restartable sequences too, although their pop takes the spare for
    /// every cache: for small objects the swap saves a trip to the barn (a batch of
    /// 1,000 32-byte mallocs then frees, preloaded in `KMEM_PERCPU=cpu-rseq`, eight
    /// runs of each taking turns: 9.2–9.6 ns a malloc+free with it, 9.3–9.9 trading
    /// every full spare at the barn).
    #[inline(always)]
    pub(super) fn free_may_swap(object_size: usize) -> bool {
        object_size <= SMALL_OBJECT_MAX
    }
}
