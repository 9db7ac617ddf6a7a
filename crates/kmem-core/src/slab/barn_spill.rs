//! The barns' spill: full sheaves a barn keeps beyond its cache's own bound
//! (`sheaf_size::barn_max_full`, 4 MiB of objects), up to one budget for the whole
//! allocator ([`BARN_SPILL_BYTES`]). kmem's, not the kernel's.
//!
//! A program that frees a large structure of small objects and builds it again (a
//! table, a tree, a graph: `workloads` rebuild, 200,000 objects freed in random
//! order) hands its objects to the barn a sheaf at a time. Past the cache's bound each
//! sheaf went to its slabs, one CAS an object on a slab line that missed the cache,
//! and the allocations after walked the slabs' freelists out again: a free of 64 B
//! objects cost 13 ns and one of 256 B objects 22 ns, against mimalloc's 8 and 10,
//! whose frees store to the block and go on. Kept whole, the sheaves go back out as
//! they came in: 3.6 and 4.1 ns (BENCHMARKS.md, "The barns' spill").
//!
//! What it costs is memory a program no longer uses, held as free objects of one
//! size. The budget bounds it for every cache together, and the barns' decay gives
//! sheaves that sat unused through an interval back to their slabs
//! (`BarnLists::take_idle`), so a spilled sheaf stays at most two decay intervals
//! (`KMEM_DECAY_MS`, counted by the slow paths' housekeeping) once its cache stops
//! using it, and the slabs' and pages' decays then give its memory back as they do any
//! other. A program that frees a structure of one class and builds one of another
//! does not wait for the clock: the second class's new slabs run the decay too
//! (`barn::DECAY_GROWTH_PAGES`), and the first class's barn, from which nobody takes
//! sheaves, gives them all back within 2 MiB of them. Shrinking and memory pressure
//! flush it at once (`Slub::shrink_barns`). A
//! heap bounded by `KMEM_MAX` (or `Heap::set_max_bytes`) spills an eighth of its bound
//! at most ([`BarnSpill::limit_for_bound`]). Only caches of objects up to
//! `BARN_SMALL_OBJECT` bytes spill: for larger objects a few sheaves are already much
//! memory, and the barns of the medium classes are bounded tighter for that reason
//! (`sheaf_size::BARN_MAX_LARGE_OBJECT_BYTES`).
//!
//! Accounting: a barn's lists count the full sheaves beyond the cache's bound that
//! the budget pays for (`BarnLists::over`); a counted hold of the barn's lock
//! ([`SpillAccount`], `Barn::lock_counted`) brings that count and the budget to the
//! lists' length as the hold ends, whatever the hold did (handed in, took out, took
//! all). The budget is checked before a sheaf goes in ([`SpillAccount::cap`]) and
//! charged after, without a lock of its own, so CPUs that look at the same moment may
//! overrun it by a sheaf each.
//!
//! Locking: the budget is atomics; it is charged under a barn's lock (its last
//! statement), which is a leaf of the lock order.

use super::barn::{BarnLists, MAX_FULL_SHEAVES};
use super::sheaf_size::BARN_SMALL_OBJECT;
use super::{CacheConfig, KmemCache, Slub};
use crate::platform::Platform;
use crate::sync::{AtomicUsize, Ordering::Relaxed};

/// Most bytes of objects all the barns together keep in full sheaves beyond their
/// caches' own bounds (the sheaves' capacity in bytes, however full they are).
pub const BARN_SPILL_BYTES: usize = 64 << 20;

/// The spill budget of one allocator (in its cache list).
///
/// Invariant: `used` is the sum, over every barn, of its lists' `over` times its
/// cache's sheaf bytes, as of the end of each barn's last counted hold.
pub struct BarnSpill {
    used: AtomicUsize,
    limit: AtomicUsize,
}

impl BarnSpill {
    /// Nothing spilled; the budget [`BARN_SPILL_BYTES`].
    pub const fn new() -> Self {
        Self {
            used: AtomicUsize::new(0),
            limit: AtomicUsize::new(BARN_SPILL_BYTES),
        }
    }

    /// Bytes of sheaves kept beyond their caches' bounds now.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// The budget.
    pub fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    /// Sets the budget (0: no barn keeps more than its cache's bound). Sheaves kept
    /// already stay until taken out or decayed.
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Relaxed);
    }

    /// The budget for a heap bounded at `max_bytes` (0: no bound): an eighth of the
    /// bound, at most [`BARN_SPILL_BYTES`], so that free objects kept for reuse never
    /// take much of a bounded heap (its shrinker flushes them anyway before an
    /// allocation fails).
    pub fn limit_for_bound(max_bytes: usize) -> usize {
        match max_bytes {
            0 => BARN_SPILL_BYTES,
            b => (b / 8).min(BARN_SPILL_BYTES),
        }
    }

    /// Whether a sheaf of `bytes` fits in the budget now.
    #[inline]
    fn has_room(&self, bytes: usize) -> bool {
        self.used.load(Relaxed).saturating_add(bytes) <= self.limit.load(Relaxed)
    }
}

impl Default for BarnSpill {
    fn default() -> Self {
        Self::new()
    }
}

/// What a hold of one cache's barn needs to keep the budget: the budget and the
/// cache's config (its own bound in full sheaves, `barn_max_full`, and the bytes of
/// objects a sheaf holds, [`sheaf_bytes`]). Two words, read only where they decide:
/// the common hold, within the bound, tests one count against the bound.
#[derive(Clone, Copy)]
pub struct SpillAccount<'a> {
    spill: &'a BarnSpill,
    cfg: &'a CacheConfig,
}

/// The bytes of objects a sheaf of the cache `cfg` holds, charged to the budget for
/// each of its barns' full sheaves past the bound; 0 for a cache that does not spill
/// (objects above `BARN_SMALL_OBJECT` bytes).
pub fn sheaf_bytes(cfg: &CacheConfig) -> usize {
    if cfg.size <= BARN_SMALL_OBJECT {
        cfg.sheaf_capacity * cfg.size
    } else {
        0
    }
}

impl<'a> SpillAccount<'a> {
    /// The account of the cache `cfg`'s barns.
    pub fn new(spill: &'a BarnSpill, cfg: &'a CacheConfig) -> Self {
        Self { spill, cfg }
    }

    /// How many full sheaves the barn may hold when one more is handed in now: the
    /// cache's own bound, or, while the budget has room for a sheaf, the most any
    /// barn keeps ([`MAX_FULL_SHEAVES`]).
    #[inline]
    pub fn cap(&self) -> usize {
        let bytes = sheaf_bytes(self.cfg);
        let max_full = self.cfg.barn_max_full;
        if bytes != 0 && self.spill.has_room(bytes) {
            MAX_FULL_SHEAVES.max(max_full)
        } else {
            max_full
        }
    }

    /// [`SpillAccount::cap`] for a barn that held `nr_full` full sheaves a moment ago
    /// (its hint): the cache's bound while below it, with no look at the budget.
    #[inline]
    pub fn cap_at(&self, nr_full: usize) -> usize {
        if nr_full < self.cfg.barn_max_full {
            self.cfg.barn_max_full
        } else {
            self.cap()
        }
    }

    /// At the end of a counted hold: charges or gives back the full sheaves beyond
    /// the cache's bound that the hold added or took out.
    #[inline]
    pub fn settle(&self, lists: &mut BarnLists) {
        if lists.nr_full() > self.cfg.barn_max_full || lists.over() != 0 {
            self.settle_slow(lists);
        }
    }

    #[cold]
    #[inline(never)]
    fn settle_slow(&self, lists: &mut BarnLists) {
        let bytes = sheaf_bytes(self.cfg);
        let (was, now) = lists.recount_over(self.cfg.barn_max_full);
        if now > was {
            self.spill.used.fetch_add((now - was) * bytes, Relaxed);
        } else if was > now {
            self.spill.used.fetch_sub((was - now) * bytes, Relaxed);
        }
    }
}

impl<P: Platform> Slub<'_, P> {
    /// The spill account of `s`'s barns.
    #[inline(always)]
    pub(crate) fn spill_account<'s>(&'s self, s: &'s KmemCache) -> SpillAccount<'s> {
        SpillAccount::new(&self.caches.spill, s.config())
    }
}

#[cfg(test)]
mod tests {
    use super::super::sheaf::SlabSheaf;
    use super::*;
    use crate::sync::AtomicPtr;
    use core::ptr::{self, NonNull};

    /// The config of a cache whose barns keep `max_full` full sheaves of `bytes`
    /// bytes of objects (0: a cache of objects too large to spill).
    fn config(max_full: usize, bytes: usize) -> CacheConfig {
        let mut cfg = CacheConfig::calculate(
            "spill",
            if bytes == 0 { 1024 } else { 40 },
            8,
            crate::SlabFlags::empty(),
            None,
            2,
        )
        .unwrap();
        cfg.barn_max_full = max_full;
        cfg.sheaf_capacity = bytes / cfg.size.max(1);
        if bytes != 0 {
            assert_eq!(sheaf_bytes(&cfg), bytes, "{}-byte objects", cfg.size);
        }
        cfg
    }

    /// Sheaves of one object each, for the lists to link.
    fn sheaves<const N: usize>() -> [SlabSheaf; N] {
        core::array::from_fn(|_| SlabSheaf {
            size: AtomicUsize::new(1),
            next: AtomicPtr::new(ptr::null_mut()),
            cache: AtomicPtr::new(ptr::null_mut()),
            capacity: AtomicUsize::new(16),
        })
    }

    /// The cap is the cache's bound unless the budget has room for one more sheaf;
    /// a cache that does not spill never gets more.
    #[test]
    fn the_cap_rises_while_the_budget_has_room_for_a_sheaf() {
        let spill = BarnSpill::new();
        spill.set_limit(1200);
        let (cfg, no_spill) = (config(4, 480), config(4, 0));
        let a = SpillAccount::new(&spill, &cfg);
        assert_eq!(a.cap(), MAX_FULL_SHEAVES);
        spill.used.store(720, Relaxed);
        assert_eq!(a.cap(), MAX_FULL_SHEAVES, "720 + 480 fits 1200");
        spill.used.store(721, Relaxed);
        assert_eq!(a.cap(), 4, "a sheaf no longer fits");
        assert_eq!(a.cap_at(4), 4);
        spill.used.store(0, Relaxed);
        assert_eq!(a.cap_at(4), MAX_FULL_SHEAVES);
        assert_eq!(
            a.cap_at(3),
            4,
            "below the bound the budget is not looked at"
        );
        assert_eq!(SpillAccount::new(&spill, &no_spill).cap(), 4, "no spill");
        spill.set_limit(0);
        assert_eq!(a.cap(), 4, "no budget");
    }

    /// Settling charges the sheaves past the bound that a hold added and gives back
    /// those it took out, whichever way they went (one at a time, or all at once).
    #[test]
    fn settling_charges_and_gives_back_the_sheaves_past_the_bound() {
        let spill = BarnSpill::new();
        let cfg = config(2, 120);
        let a = SpillAccount::new(&spill, &cfg);
        let sh = sheaves::<6>();
        let p = |i: usize| NonNull::from(&sh[i]);
        let mut l = BarnLists::new();
        for i in 0..2 {
            // SAFETY: test sheaves, each handed in while no list holds it.
            unsafe { l.put_full(p(i), a.cap(), 1) }.unwrap();
            a.settle(&mut l);
        }
        assert_eq!((spill.used(), l.over()), (0, 0), "within the bound");
        for i in 2..5 {
            // SAFETY: test sheaves, each handed in while no list holds it.
            unsafe { l.put_full(p(i), a.cap(), 1) }.unwrap();
        }
        a.settle(&mut l);
        assert_eq!((spill.used(), l.over()), (3 * 120, 3), "three past it");
        l.get_full(1).unwrap();
        a.settle(&mut l);
        assert_eq!((spill.used(), l.over()), (2 * 120, 2));
        let _ = l.take_all();
        a.settle(&mut l);
        assert_eq!((spill.used(), l.over()), (0, 0), "all given back");
        // Past the budget, the cap is the bound again: the fifth is refused.
        spill.set_limit(300);
        for i in 0..4 {
            // SAFETY: test sheaves, each handed in while no list holds it.
            unsafe { l.put_full(p(i), a.cap(), 1) }.unwrap();
            a.settle(&mut l);
        }
        assert_eq!(spill.used(), 2 * 120);
        assert!(
            // SAFETY: test sheaves, each handed in while no list holds it.
            unsafe { l.put_full(p(4), a.cap(), 1) }.is_err(),
            "240 + 120 > 300"
        );
    }
}
