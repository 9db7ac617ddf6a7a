//! The barn: a thread's exit hands its sheaves to it and the next thread takes them;
//! a CPU gets back the sheaf it handed in before another CPU's; barns grow while they
//! are used and give idle sheaves back after the decay interval; past their caches'
//! bounds they keep sheaves while the spill budget lasts.

mod common;

use common::{check_census, config, kmem, own_area, stat, K};
use kmem_core::slab::SlubStat;
use kmem_core::{CpuRef, Gfp, SlabFlags};
use std::collections::HashSet;
use std::ptr::NonNull;

#[test]
fn a_thread_exit_hands_its_sheaves_to_the_barn_and_the_next_thread_takes_them() {
    let k = kmem(2, config(1, 0));
    let (a, ca) = own_area(k);
    let s = k
        .kmem_cache_create(ca, "exit-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    let cap = s.config().sheaf_capacity;
    assert!(cap >= 4, "capacity {cap}");
    let objs: Vec<_> = (0..3 * cap)
        .map(|_| k.slub().alloc(ca, s, Gfp::KERNEL).unwrap())
        .collect();
    for &p in &objs {
        // SAFETY: ours.
        unsafe { k.slub().free(ca, s, p) };
    }
    let slabs_before = s.nr_slabs(0);
    // SAFETY: owned; the thread "exits".
    unsafe { k.pages.cpu_area_put(a) };
    let census = k.slub().census(s, &[], |_| {});
    assert!(
        census.in_barns >= 2 * cap,
        "sheaves went to the barn: {census:?}"
    );
    assert_eq!(s.nr_slabs(0), slabs_before, "no slab was unfrozen or freed");
    // A new thread allocates: from the barn's full sheaves, no refill from slabs.
    let (b, cb) = own_area(k);
    let refills = stat(k, s, SlubStat::SheafRefill);
    let again: HashSet<usize> = (0..2 * cap)
        .map(|_| k.slub().alloc(cb, s, Gfp::KERNEL).unwrap().as_ptr() as usize)
        .collect();
    assert_eq!(again.len(), 2 * cap);
    assert!(again
        .iter()
        .all(|p| objs.iter().any(|o| o.as_ptr() as usize == *p)));
    assert!(stat(k, s, SlubStat::BarnGet) >= 1);
    assert_eq!(
        stat(k, s, SlubStat::SheafRefill),
        refills,
        "served by the barn"
    );
    for p in again {
        // SAFETY: ours.
        unsafe { k.slub().free(cb, s, NonNull::new(p as *mut u8).unwrap()) };
    }
    // Shrinking flushes the barns to the slabs and gives the pages back.
    // SAFETY: owned.
    unsafe { k.pages.cpu_area_put(b) };
    k.shrink_all(None);
    assert_eq!(s.nr_slabs(0), 0);
    assert_eq!(k.slub().census(s, &[], |_| {}).barn_sheaves, 0);
}

#[test]
fn a_cpu_gets_back_the_sheaf_it_handed_to_the_barn_before_another_cpus() {
    // Two CPUs each allocate and free three sheaves' worth: the third of each goes
    // to the barn, B's on top. A allocating again gets its own back, not B's (whose
    // objects share cache lines with what B still uses, in a real program), and B
    // then gets its own.
    let k = kmem(2, config(1, 0));
    let (a, ca) = own_area(k);
    let (b, cb) = own_area(k);
    let s = k
        .kmem_cache_create(ca, "owner-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    let cap = s.config().sheaf_capacity;
    let alloc = |c: Option<CpuRef<'_>>| -> Vec<usize> {
        (0..3 * cap)
            .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap().as_ptr() as usize)
            .collect()
    };
    let free = |c: Option<CpuRef<'_>>, objs: &[usize]| {
        for &p in objs {
            // SAFETY: ours, freed once.
            assert!(unsafe { k.slub().free(c, s, NonNull::new(p as *mut u8).unwrap()) });
        }
    };
    let (objs_a, objs_b) = (alloc(ca), alloc(cb));
    free(ca, &objs_a);
    free(cb, &objs_b);
    assert_eq!(k.slub().census(s, &[], |_| {}).barn_sheaves, 2);
    let gets = stat(k, s, SlubStat::BarnGet);
    let (mine_a, mine_b): (HashSet<usize>, HashSet<usize>) = (
        objs_a.iter().copied().collect(),
        objs_b.iter().copied().collect(),
    );
    let again_a = alloc(ca);
    assert!(
        again_a.iter().all(|p| mine_a.contains(p)),
        "A got B's objects"
    );
    let again_b = alloc(cb);
    assert!(
        again_b.iter().all(|p| mine_b.contains(p)),
        "B got A's objects"
    );
    assert_eq!(stat(k, s, SlubStat::BarnGet), gets + 2, "from the barn");
    free(ca, &again_a);
    free(cb, &again_b);
    // SAFETY: owned.
    let refs = unsafe { [CpuRef::new(a), CpuRef::new(b)] };
    check_census(k, s, &refs, &HashSet::new());
}

#[test]
fn barns_grow_while_used_and_give_idle_sheaves_back_after_the_decay_interval() {
    use kmem_core::slab::barn::{BARN_KEEP_SHEAVES, MAX_FULL_SHEAVES};
    let k = common::kmem_with_decay(1_000_000);
    let (a, c) = own_area(k);
    let pf = k.pages.platform();
    let s = k
        .kmem_cache_create(c, "decay-32", 32, 8, SlabFlags::empty(), None)
        .unwrap();
    let cfg = *s.config();
    let max_full = cfg.barn_max_full;
    assert!(
        max_full > BARN_KEEP_SHEAVES && max_full <= MAX_FULL_SHEAVES,
        "{max_full}"
    );
    // The barn's bound in bytes decides, not its count cap: it keeps as many sheaves as
    // its 4 MiB of objects fill (1,057 of 124 objects here; the cap, at 256, once
    // kept 32-byte objects to a quarter of that).
    let sheaf_bytes = cfg.sheaf_capacity * cfg.size;
    let bound = kmem_core::slab::BARN_MAX_OBJECT_BYTES;
    assert!(
        max_full * sheaf_bytes <= bound && (max_full + 1) * sheaf_bytes > bound,
        "{max_full} sheaves of {sheaf_bytes} bytes"
    );
    // A table built and dropped: its sheaves go to the barn, up to its bound.
    let n = (max_full + 4) * cfg.sheaf_capacity;
    let objs: Vec<_> = (0..n)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    for &p in &objs {
        // SAFETY: ours.
        unsafe { k.slub().free(c, s, p) };
    }
    // SAFETY: owned by this test.
    let refs = [unsafe { CpuRef::new(a) }];
    let barn = |k: &K| k.slub().census(s, &refs, |_| {}).barn_sheaves;
    assert!(barn(k) >= max_full, "{} sheaves in the barn", barn(k));
    // Built again: whole sheaves from the barn, no refill from the slabs.
    let refills = stat(k, s, SlubStat::SheafRefill);
    let again: Vec<_> = (0..n)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    assert!(stat(k, s, SlubStat::SheafRefill) - refills <= 6);
    for &p in &again {
        // SAFETY: ours.
        unsafe { k.slub().free(c, s, p) };
    }
    let full = barn(k);
    // Past the cache's own bound, the spill budget pays for the rest.
    let spilled = k.barn_spill().used();
    assert!(spilled > 0, "{full} sheaves, nothing spilled");
    // Then the program moves on to other work (slow paths of another cache tick the
    // housekeeping): after a decay interval of disuse, and one more to see it, the
    // barn keeps BARN_KEEP_SHEAVES full and empty sheaves at most; the rest went back
    // to the slabs, every object in exactly one place.
    let interval = kmem_core::page::HOUSEKEEPING_INTERVAL as usize;
    for _ in 0..3 {
        pf.advance(2_000_000);
        common::slow_path_traffic(k, c, 200, 300, 2 * interval);
    }
    let left = barn(k);
    assert!(
        left <= 2 * BARN_KEEP_SHEAVES,
        "{full} sheaves before, {left} after"
    );
    assert_eq!(k.barn_spill().used(), 0, "the decay gave the spill back");
    check_census(k, s, &refs, &HashSet::new());
    assert!(k.pages.platform().take_log().is_empty());
}

/// A table of 64-byte objects larger than the barn's own bound, dropped and built
/// again: the barn keeps full sheaves past its bound while the spill budget (set here
/// to 12 sheaves) has room, charged sheaf by sheaf, and flushes the rest to the slabs;
/// built again, the table takes the kept sheaves back and the budget is given back as
/// the barn comes down to its bound. With no budget the barn keeps its bound, as
/// before the spill. Every object is in exactly one place throughout.
#[test]
fn a_barn_keeps_sheaves_past_its_bound_while_the_spill_budget_lasts() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let s = k
        .kmem_cache_create(c, "spill-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    let cfg = *s.config();
    let (max_full, cap) = (cfg.barn_max_full, cfg.sheaf_capacity);
    let sheaf_bytes = cap * cfg.size;
    // SAFETY: owned by this test.
    let refs = [unsafe { CpuRef::new(a) }];
    let full_in_barn = |k: &K| k.slub().census(s, &refs, |_| {}).in_barns / cap;
    let round = |k: &K, limit: usize| -> (usize, usize, u64) {
        k.barn_spill().set_limit(limit);
        let n = (max_full + 20) * cap;
        let objs: Vec<_> = (0..n)
            .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
            .collect();
        let flushes = stat(k, s, SlubStat::BarnPutFail);
        for &p in &objs {
            // SAFETY: ours, freed once.
            assert!(unsafe { k.slub().free(c, s, p) });
        }
        let kept = (full_in_barn(k), k.barn_spill().used());
        let flushed = stat(k, s, SlubStat::BarnPutFail) - flushes;
        check_census(k, s, &refs, &HashSet::new());
        // Built again: the kept sheaves come back out, and with them the budget.
        let again: HashSet<usize> = (0..n)
            .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap().as_ptr() as usize)
            .collect();
        assert_eq!(again.len(), n, "an object handed out twice");
        assert!(full_in_barn(k) <= max_full);
        assert_eq!(k.barn_spill().used(), 0, "the budget came back");
        for &p in &again {
            // SAFETY: ours, freed once.
            unsafe { k.slub().free(c, s, NonNull::new(p as *mut u8).unwrap()) };
        }
        k.shrink_all(c);
        assert_eq!(k.barn_spill().used(), 0, "shrinking gives the spill back");
        (kept.0, kept.1, flushed)
    };
    let (kept, used, flushed) = round(k, 12 * sheaf_bytes);
    assert_eq!(kept, max_full + 12, "its bound and 12 sheaves of spill");
    assert_eq!(used, 12 * sheaf_bytes);
    assert!(flushed > 0, "the sheaves past the budget went to the slabs");
    let (kept0, used0, flushed0) = round(k, 0);
    assert_eq!(
        (kept0, used0),
        (max_full, 0),
        "no budget: the bound, as before"
    );
    // The same sheaves were handed in: kept or flushed.
    assert_eq!(kept0 + flushed0 as usize, kept + flushed as usize);
    let (kept, used, _) = round(k, kmem_core::slab::barn_spill::BARN_SPILL_BYTES);
    assert_eq!(
        kept,
        kept0 + flushed0 as usize,
        "the default budget holds it all"
    );
    assert_eq!(used, (kept - max_full) * sheaf_bytes);
    // SAFETY: owned.
    unsafe { k.pages.cpu_area_put(a) };
    assert!(k.pages.platform().take_log().is_empty());
}

/// A bounded heap spills an eighth of its bound at most; an unbounded one the whole
/// budget.
#[test]
fn a_bounded_heap_spills_an_eighth_of_its_bound() {
    use kmem_core::slab::barn_spill::BARN_SPILL_BYTES;
    let page = kmem_core::PAGE_SIZE;
    assert_eq!(kmem(2, config(1, 0)).barn_spill().limit(), BARN_SPILL_BYTES);
    let k = kmem(2, config(1, (64 << 20) / page));
    assert_eq!(k.barn_spill().limit(), 8 << 20);
    let k = kmem(2, config(1, (4 << 30) / page));
    assert_eq!(
        k.barn_spill().limit(),
        BARN_SPILL_BYTES,
        "at most the budget"
    );
}
