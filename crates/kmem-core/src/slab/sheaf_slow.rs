//! The sheaf slow paths a front end calls straight from its fast paths' misses
//! (malloc's and free's out-of-line halves, `KmemAlloc`), without the layers of the
//! regular paths: a swap of a CPU's two sheaves, done in a few instructions and no
//! call; else a trade of one sheaf at the barn, in one step and no call; else the
//! general exchange, refill and flush of `sheaf.rs`. Also the two halves of the
//! slow-path tick (the drain check and the housekeeping count), so that a swap that
//! finds no work due calls nothing.
//!
//! Owns no state. Locking: as `sheaf.rs` (the CPU area's owner only); the trades take
//! the barn's lock with `try_lock` only (a busy barn goes to `sheaf_alloc` /
//! `sheaf_free`, which wait for it).

use super::sheaf::{barn_owner, reaches_swap_floor, slot, SlabSheaf};
use super::sheaf_top::{len_of, take_and_prefetch_next, top_of};
use super::*;
use crate::gfp::Gfp;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering::{Relaxed, Release};
use core::ptr::NonNull;

/// Prefetches the first lines the fast paths will use of a sheaf that a trade just
/// took off the barn, from slot `first` down (a full one, popped from its top) or up
/// (an empty one, pushed from slot 0): a sheaf that waited in the barn is likely out
/// of the cache, and its lines would come one miss at a time on the fast path. Eight
/// lines (64 slots, half a small object's sheaf), unrolled: prefetching every line in
/// a loop cost a batch freed and allocated again at once (hot sheaves) 1.4
/// instructions a malloc+free (`icount.sh` `then`: 55.4, above mimalloc's 55.3);
/// these cost 0.1, and keep most of the gain (BENCHMARKS.md, "Prefetches for the bulk
/// paths").
#[inline(always)]
fn prefetch_slots(sheaf: *mut SlabSheaf, first: usize, down: bool) {
    const PREFETCH_LINES: usize = 8;
    const SLOTS_PER_LINE: usize = 64 / core::mem::size_of::<usize>();
    for k in 0..PREFETCH_LINES {
        let i = if down {
            first.wrapping_sub(k * SLOTS_PER_LINE)
        } else {
            first + k * SLOTS_PER_LINE
        };
        crate::prefetch::prefetch_write(slot(sheaf, i) as usize);
    }
}

/// An allocation's swap: the spare (which holds objects) becomes the main sheaf, and
/// its top object is taken.
#[inline(always)]
fn swap_and_pop(cc: &KmemCacheCpu) -> Option<NonNull<u8>> {
    cc.swap_sheaves();
    cc.count(SlubStat::SheafSwap);
    let obj = cc.sheaf_pop()?;
    // SAFETY: a sheaf slot below its count holds an object's address, never 0.
    Some(unsafe { NonNull::new_unchecked(obj as *mut u8) })
}

impl<P: Platform> Slub<'_, P> {
    /// The sheaf slow path of an allocation from `s` for a front end whose fast pop
    /// found the main sheaf empty (thread mode, [`FastPath::Sheaf`], a plain
    /// request), without the layers between the front end and `sheaf_alloc` (KFENCE's
    /// test, the memory cgroup and per-CPU tests, the gfp and node checks): the two
    /// sheaves swap when the spare holds frees (the common case, done here in a few
    /// instructions, with the drain check and the housekeeping tick every slow path
    /// runs), else `sheaf_alloc` takes a full sheaf from the barn or refills from the
    /// slabs. `None`: not a sheaf cache, or memory ran out; take the regular path.
    ///
    /// The swap itself makes no call (the drain check and the tick are two tests;
    /// the work they may find, and everything else, is out of line), so it runs
    /// without saving registers.
    #[inline(never)]
    pub fn alloc_sheaf_slow(&self, c: CpuRef<'_>, s: &KmemCache) -> Option<NonNull<u8>> {
        // Not on the inline sheaf path, or one of the accounted kmalloc caches, whose
        // uncharged allocations take the regular path (`Slub::note_uncharged`): both
        // have the zero line's tag (`CacheConfig::inline_tag`).
        if s.config().inline_tag == 0 {
            return None;
        }
        let cc = s.cpu(c);
        if !cc.can_swap_for_alloc() {
            return self.alloc_from_barn(c, s);
        }
        if self.slow_path_work_due(c) {
            return self.alloc_sheaf_after_work(c, s);
        }
        swap_and_pop(cc)
    }

    /// [`Slub::alloc_sheaf_slow`] when the spare holds nothing either: the empty main
    /// sheaf is traded at the barn for a full one (`barn_replace_empty_sheaf`) under
    /// one hold of its lock, and the full one's top object taken — without
    /// `sheaf_alloc`'s general steps (which would take the two sheaves, re-read the
    /// object checks and install both), after the slow path's work when some is due.
    /// Else (no main sheaf yet, no full sheaf in the barn, no room there for the empty
    /// one, a busy barn) `sheaf_alloc`.
    #[inline(never)]
    fn alloc_from_barn(&self, c: CpuRef<'_>, s: &KmemCache) -> Option<NonNull<u8>> {
        if self.slow_path_work_due(c) {
            return self.alloc_sheaf_after_work(c, s);
        }
        self.trade_empty_main(c, s)
    }

    /// The trade of [`Slub::alloc_from_barn`], once the slow path's work is done.
    #[inline(always)]
    fn trade_empty_main(&self, c: CpuRef<'_>, s: &KmemCache) -> Option<NonNull<u8>> {
        let cc = s.cpu(c);
        let (top, main) = (cc.main_top.load(Relaxed), cc.main.load(Relaxed));
        let Some(empty) = NonNull::new(main) else {
            return self.sheaf_alloc_ptr(c, s);
        };
        if len_of(top, main) != 0 {
            return self.sheaf_alloc_ptr(c, s);
        }
        // SAFETY: the main sheaf is this CPU's (thread mode, the area's owner); its
        // size becomes valid as it leaves the CPU.
        unsafe { empty.as_ref() }.size.store(0, Relaxed);
        // A barn without a full sheaf a moment ago (read without its lock), or a busy
        // one, sends the exchange to `sheaf_alloc`, which refills, or waits for the
        // lock: no spin here keeps this function free of calls and register saves.
        let barn = self.barn(c, s);
        if barn.nr_full_hint() == 0 {
            return self.sheaf_alloc_ptr(c, s);
        }
        let full = match barn.try_lock_counted(self.spill_account(s)) {
            // SAFETY: this CPU's empty main sheaf, which leaves it in the trade.
            Some(mut l) => unsafe { l.exchange_empty(empty, barn_owner(Some(c))) },
            None => None,
        };
        let Some(full) = full else {
            return self.sheaf_alloc_ptr(c, s);
        };
        // SAFETY: a sheaf off the barn's full list is ours now, with `size` (at least
        // one) objects in its first slots.
        let n = unsafe { full.as_ref().size.load(Relaxed) };
        let top = n - 1;
        // SAFETY: as above: slot `top` holds an object.
        let obj = unsafe { take_and_prefetch_next(full.as_ptr(), top) };
        prefetch_slots(full.as_ptr(), top, true);
        // SAFETY: as above; its capacity is in its header.
        let cap = unsafe { full.as_ref().capacity.load(Relaxed) };
        cc.main.store(full.as_ptr(), Relaxed);
        cc.main_limit.store(top_of(full.as_ptr(), cap), Relaxed);
        cc.main_top.store(top_of(full.as_ptr(), top), Release);
        cc.count(SlubStat::BarnGet);
        cc.count(SlubStat::AllocCpuSheaf);
        // SAFETY: a sheaf slot below its size holds an object's address, never 0.
        Some(unsafe { NonNull::new_unchecked(obj as *mut u8) })
    }

    /// [`Slub::alloc_sheaf_slow`] when the tick or a drain request found work: the
    /// work, then the swap if it is still possible (a drain may have emptied both
    /// sheaves), else the barn's trade or `sheaf_alloc`.
    #[cold]
    #[inline(never)]
    fn alloc_sheaf_after_work(&self, c: CpuRef<'_>, s: &KmemCache) -> Option<NonNull<u8>> {
        self.slow_path_work(c);
        let cc = s.cpu(c);
        if !cc.can_swap_for_alloc() {
            return self.trade_empty_main(c, s);
        }
        swap_and_pop(cc)
    }

    /// `sheaf_alloc` for a plain request, as a pointer (a tail call for its callers).
    #[inline(never)]
    fn sheaf_alloc_ptr(&self, c: CpuRef<'_>, s: &KmemCache) -> Option<NonNull<u8>> {
        let obj = self.sheaf_alloc(c, s, Gfp::KERNEL)?;
        // SAFETY: a sheaf slot below its count holds an object's address, never 0.
        Some(unsafe { NonNull::new_unchecked(obj as *mut u8) })
    }

    /// [`Slub::alloc_sheaf_slow`]'s counterpart for a free whose fast push was
    /// refused: when `p` starts an object of a cache on the inline sheaf path (no
    /// objcg vector), the full spare swaps with a main sheaf that has room (the full
    /// one is allocated from next) and `p` goes onto the other, else `sheaf_free`
    /// trades the full spare at the barn or flushes it. `None`: not such an object,
    /// take the regular path; `Some(false)`: a double free at the spare's top,
    /// reported and refused.
    ///
    /// # Safety
    /// As [`Slub::free_fast`] when it returns `Some(true)`.
    #[inline(never)]
    pub unsafe fn free_sheaf_slow(&self, c: CpuRef<'_>, p: *mut u8) -> Option<bool> {
        // The inline path may have refused `p` for a copy of the tag table's length
        // that is behind: caught up, `with_free_target` below sees what the table does.
        self.pages.refresh_tag_limit(c);
        let mut done = None;
        self.with_free_target(c.into(), p, None, |cc| {
            let spare = cc.spare.load(Relaxed);
            let (top, limit) = (cc.spare_top.load(Relaxed), cc.spare_limit.load(Relaxed));
            let n = len_of(top, spare);
            let full = n > 0 && top >= limit;
            // A main sheaf with room for an eighth of a sheaf at least (in bytes, 0
            // without a sheaf): see `swap_floor`, and `sheaf_free` for why not only
            // an empty one.
            let main = cc.main.load(Relaxed) as usize;
            let mlimit = cc.main_limit.load(Relaxed);
            let mroom = mlimit.saturating_sub(cc.main_top.load(Relaxed).max(main));
            let main_room = reaches_swap_floor(mroom as u64, mlimit.saturating_sub(main) as u64);
            // SAFETY: read only when the spare is full (`&&`): its slot `n - 1` then
            // holds an object, and the sheaf is this thread's (thread mode).
            let top_ok = full && unsafe { *slot(spare, n - 1) } != p as usize;
            // SAFETY: read only when the spare is full (`&&`): a live sheaf of this
            // CPU, whose header names its cache, which outlives it.
            let may_swap = top_ok
                && main_room
                && Self::free_may_swap(unsafe { (*(*spare).cache.load(Relaxed)).config().size });
            if may_swap {
                cc.swap_sheaves();
                cc.count(SlubStat::SheafSwap);
                if cc.sheaf_push(p as usize).is_ok() {
                    done = Some(true);
                    return true;
                }
                // `p` is the top of the sheaf that was the main one: a double free,
                // which `sheaf_free` below reports (the swap stays).
            } else if top_ok {
                // SAFETY: the spare is this CPU's and full; `p` as below.
                done = unsafe { self.free_to_barn(c, cc, spare, n, p as usize) };
                if done.is_some() {
                    return true;
                }
            }
            if let Some(h) = self.pages.virt_to_slab_used(p) {
                // The tag on `p`'s page named this cache's sheaves: the slab is its.
                // SAFETY: `p` starts an object of the slab's cache (checked), which
                // the caller gives up.
                done = Some(unsafe { self.sheaf_free(c, Slab::of(h).cache(), p as usize) });
            }
            true
        });
        done
    }

    /// [`Slub::free_sheaf_slow`] when the main sheaf holds objects: the full spare
    /// (`n` objects, its top not `p`) is traded at the barn for an empty sheaf
    /// (`barn_replace_full_sheaf`) under one hold of its lock, and `p` goes on it —
    /// without `sheaf_free`'s general steps (a second lookup of `p`'s slab, taking and
    /// installing both sheaves, re-reading the object checks: the spare keeps its
    /// cache). `None`, with nothing changed: a sheaf of another capacity, or the barn
    /// has no empty sheaf or no room for a full one; `sheaf_free` does the rest.
    ///
    /// # Safety
    /// `spare` is `cc`'s spare sheaf, full with `n` objects; `p` starts an object of
    /// its cache, which the caller gives up when this returns `Some(true)`.
    #[inline(never)]
    unsafe fn free_to_barn(
        &self,
        c: CpuRef<'_>,
        cc: &KmemCacheCpu,
        spare: *mut SlabSheaf,
        n: usize,
        p: usize,
    ) -> Option<bool> {
        // SAFETY: the spare is live and this CPU's (caller); its header names its
        // cache, which outlives its sheaves.
        let sheaf = unsafe { &*spare };
        // SAFETY: as above.
        let s = unsafe { &*sheaf.cache.load(Relaxed) };
        let cfg = s.config();
        if sheaf.capacity.load(Relaxed) != cfg.sheaf_capacity {
            return None;
        }
        // Its size becomes valid as it leaves the CPU.
        sheaf.size.store(n, Relaxed);
        let full = NonNull::from(sheaf);
        // A barn that held its most full sheaves, or no empty one, a moment ago:
        // `sheaf_free` flushes, or makes an empty sheaf, without this trade (see
        // `Barn`'s hints); a busy barn: `sheaf_free` waits for it (see
        // `alloc_from_barn`).
        let barn = self.barn(c, s);
        let acct = self.spill_account(s);
        let hint = barn.nr_full_hint();
        let max_full = acct.cap_at(hint);
        if hint >= max_full || barn.nr_empty_hint() == 0 {
            return None;
        }
        // SAFETY: this CPU's full spare (caller), which leaves it in the trade.
        let empty = unsafe {
            barn.try_lock_counted(acct)?
                .exchange_full(full, max_full, barn_owner(Some(c)))?
        };
        // SAFETY: a sheaf off the barn's empty list is ours now, with room: `p`
        // goes in its first slot.
        unsafe { *slot(empty.as_ptr(), 0) = p };
        prefetch_slots(empty.as_ptr(), 0, false);
        cc.spare.store(empty.as_ptr(), Relaxed);
        cc.spare_limit
            .store(top_of(empty.as_ptr(), cfg.sheaf_capacity), Relaxed);
        cc.spare_top.store(top_of(empty.as_ptr(), 1), Release);
        cc.count(SlubStat::BarnPut);
        cc.count(SlubStat::FreeCpuSheaf);
        Some(true)
    }

    /// [`Slub::slow_path_ticks`] in two halves, for a slow path that makes no call
    /// when neither finds work: this one counts the tick and says whether a drain
    /// request or the housekeeping is due; then [`Slub::slow_path_work`] does it.
    #[inline(always)]
    fn slow_path_work_due(&self, c: CpuRef<'_>) -> bool {
        let drain = c.area().drain_request.load(Relaxed) & crate::percpu::DRAIN_CACHES != 0;
        self.pages.count_slow_path(c) | drain
    }

    /// The work [`Slub::slow_path_work_due`] found due: the drain, then (when this
    /// slow path's tick is the interval's) the housekeeping and the barns' decay.
    #[cold]
    #[inline(never)]
    fn slow_path_work(&self, c: CpuRef<'_>) {
        self.check_drain_request(c);
        if self.pages.slow_path_housekeeping_due(c) {
            self.pages.housekeeping_now(c);
            self.maybe_decay_barns(c, 0);
        }
    }
}
