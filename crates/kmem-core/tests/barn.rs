//! The barn: a thread's exit hands its sheaves to it and the next thread takes them;
//! a CPU gets back the sheaf it handed in before another CPU's; barns grow while they
//! are used and give idle sheaves back after the decay interval, or when other
//! caches or large blocks grow; past their caches' bounds they keep sheaves while the
//! spill budget lasts.

mod common;

use common::{check_census, config, kmem, own_area, stat, K};
use kmem_core::slab::SlubStat;
use kmem_core::{CpuRef, Gfp, Platform, SlabFlags};
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

/// Frees `objs` of `s` in a shuffled order (so that the barn's sheaves hold objects of
/// every slab, as a program's table dropped in hash order leaves them).
fn free_shuffled(k: &K, c: Option<CpuRef<'_>>, s: &kmem_core::KmemCache, objs: Vec<NonNull<u8>>) {
    free_shuffled_seeded(k, c, s, objs, 0);
}

/// As [`free_shuffled`], in the order of the shuffle seeded by `seed`.
fn free_shuffled_seeded(
    k: &K,
    c: Option<CpuRef<'_>>,
    s: &kmem_core::KmemCache,
    mut objs: Vec<NonNull<u8>>,
    seed: u64,
) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ seed.wrapping_mul(0x2545_F491_4F6C_DD1D);
    for i in (1..objs.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        objs.swap(i, (x % (i as u64 + 1)) as usize);
    }
    for p in objs {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.slub().free(c, s, p) });
    }
}

/// A program's change of phase: a table of 64-byte objects (twice its barn's own
/// bound: the spill keeps the rest) dropped in shuffled order, then as many bytes of
/// 128-byte objects allocated. The clock never moves, so the time decay never runs:
/// the second cache's new slabs run the barns' decay (`DECAY_GROWTH_PAGES`), the idle
/// barn gives its sheaves back, and so do the ticking CPU's sheaves of that cache; the
/// first cache's slabs empty and the second cache takes them. Without the growth
/// decay every 64-byte slab keeps a barn object and the 128-byte objects take as many
/// pages again; without the CPU's sheaves, their objects keep a share of the slabs.
#[test]
fn another_cache_s_growth_decays_an_idle_barn_and_takes_its_slabs() {
    use kmem_core::slab::barn::BARN_KEEP_SHEAVES;
    use kmem_core::slab::BARN_MAX_OBJECT_BYTES;
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let small = k
        .kmem_cache_create(c, "phase-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    let large = k
        .kmem_cache_create(c, "phase-128", 128, 8, SlabFlags::empty(), None)
        .unwrap();
    // SAFETY: owned by this test.
    let refs = [unsafe { CpuRef::new(a) }];
    let bytes = 2 * BARN_MAX_OBJECT_BYTES;
    let objs: Vec<_> = (0..bytes / 64)
        .map(|_| k.slub().alloc(c, small, Gfp::KERNEL).unwrap())
        .collect();
    free_shuffled(k, c, small, objs);
    let census = k.slub().census(small, &refs, |_| {});
    assert!(
        census.in_barns * 64 > bytes * 9 / 10,
        "the barn and its spill keep the table: {census:?}"
    );
    let pages = |s: &kmem_core::KmemCache| s.nr_slabs(0) << s.config().order;
    let small_pages = pages(small);
    let now = k.pages.platform().now_ns();
    let live: HashSet<usize> = (0..bytes / 128)
        .map(|_| k.slub().alloc(c, large, Gfp::KERNEL).unwrap().as_ptr() as usize)
        .collect();
    assert_eq!(k.pages.platform().now_ns(), now, "no time went by");
    let left = k.slub().census(small, &refs, |_| {});
    assert!(
        left.in_barns == 0 && left.barn_sheaves <= BARN_KEEP_SHEAVES,
        "the idle barn went back to its slabs: {left:?}"
    );
    // And the ticking CPU's own sheaves of the idle cache with it: no object of it
    // waits anywhere but in its slabs.
    assert_eq!(left.in_cpu_sheaves, 0, "{left:?}");
    // Both caches together hold little more than the second one needs: the first's
    // slabs became the second's (adopted, of the same order, or freed and taken
    // again from the page allocator). What the first still holds is a few partial
    // slabs and the empty ones it kept since the last new slab of the second, which
    // the next one takes.
    let need = bytes >> 12;
    let held = pages(small) + pages(large);
    let now = k.slub().census(small, &refs, |_| {});
    assert!(
        held < need + need / 4 && now.in_partial_slabs < 64 * 64,
        "{held} pages held for {need} needed ({small_pages} of 64-byte slabs before, {} now: \
         {now:?})",
        pages(small)
    );
    check_census(k, small, &refs, &HashSet::new());
    check_census(k, large, &refs, &live);
    for p in live {
        // SAFETY: ours, freed once.
        unsafe { k.slub().free(c, large, NonNull::new(p as *mut u8).unwrap()) };
    }
    k.shrink_all(c);
    // SAFETY: owned.
    unsafe { k.pages.cpu_area_put(a) };
    assert!(k.pages.platform().take_log().is_empty());
}

/// A change of phase from small objects to large blocks: a table of 64-byte objects
/// dropped in shuffled order, then as many bytes of 2 MiB kmalloc blocks allocated.
/// No slab grows and no slab slow path runs; the page blocks' growth (net of their
/// frees: `page/block_growth.rs`) runs the barns' decay from kmalloc's large path,
/// and the idle barn and the CPU's sheaves go back to the slabs, which empty. A
/// buffer freed and allocated again afterwards is no growth.
#[test]
fn large_blocks_growth_decays_an_idle_barn() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let small = k
        .kmem_cache_create(c, "phase-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    // SAFETY: owned by this test.
    let refs = [unsafe { CpuRef::new(a) }];
    let bytes = 2 * kmem_core::slab::BARN_MAX_OBJECT_BYTES;
    let objs: Vec<_> = (0..bytes / 64)
        .map(|_| k.slub().alloc(c, small, Gfp::KERNEL).unwrap())
        .collect();
    free_shuffled(k, c, small, objs);
    let before = k.slub().census(small, &refs, |_| {});
    assert!(before.in_barns * 64 > bytes * 9 / 10, "{before:?}");
    let slab_pages = || small.nr_slabs(0) << small.config().order;
    let held = slab_pages();
    let now = k.pages.platform().now_ns();
    let block = 2 << 20;
    let blocks: Vec<_> = (0..bytes / block)
        .map(|_| k.kmalloc(c, block, Gfp::KERNEL).unwrap())
        .collect();
    assert_eq!(k.pages.platform().now_ns(), now, "no time went by");
    let left = k.slub().census(small, &refs, |_| {});
    assert!(
        left.in_barns == 0 && left.in_cpu_sheaves == 0,
        "the idle barn and the CPU's sheaves went back to the slabs: {left:?}"
    );
    assert!(
        slab_pages() < held / 8,
        "the emptied slabs went back: {} of {held} pages held",
        slab_pages()
    );
    check_census(k, small, &refs, &HashSet::new());
    let grown = k.pages.block_growth();
    assert_eq!(grown, bytes >> 12, "each block a new high");
    for _ in 0..100 {
        let p = k.kmalloc(c, block, Gfp::KERNEL).unwrap();
        // SAFETY: allocated just above, freed once.
        assert!(unsafe { k.kfree(c, p.as_ptr()) });
    }
    assert_eq!(
        k.pages.block_growth(),
        grown + (block >> 12),
        "the first one only"
    );
    for p in blocks {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.kfree(c, p.as_ptr()) });
    }
    // The blocks the CPU's pageblock list keeps still count live until it drains.
    let parked = k.pages.zone_pcp_of(a, 0).thp_blocks();
    assert_eq!(parked, kmem_core::page::PCP_THP_HIGH_MAX as usize);
    assert_eq!(k.pages.block_pages_live(), parked << 9);
    k.pages.drain_local_pages(refs[0]);
    assert_eq!(k.pages.block_pages_live(), 0);
    k.shrink_all(c);
    // SAFETY: owned.
    unsafe { k.pages.cpu_area_put(a) };
    assert!(k.pages.platform().take_log().is_empty());
}

/// Buffers grown by `krealloc` through every class from 256 B to 16 KiB, round after
/// round: each class's slabs are made as the buffers reach it and discarded as they
/// leave it (outgrown objects go to their slabs, and emptied slabs to the zone), so
/// a round makes megabytes of slabs and holds no more memory than the one before.
/// The growth clock counts slabs net of their discards: the first round's rise, then
/// at most a step more, where a count of slabs made ran the barns' decay, a walk of
/// every cache, many times a round.
#[test]
fn slabs_made_and_discarded_round_after_round_add_no_growth() {
    use kmem_core::slab::barn::DECAY_GROWTH_PAGES;
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let round = || {
        let mut bufs: Vec<NonNull<u8>> = (0..256)
            .map(|_| k.kmalloc(c, 256, Gfp::KERNEL).unwrap())
            .collect();
        let mut size = 256;
        while size < 16 << 10 {
            size *= 2;
            for b in bufs.iter_mut() {
                // SAFETY: ours, replaced by what krealloc returns.
                *b = unsafe { k.krealloc(c, b.as_ptr(), size, Gfp::KERNEL) }.unwrap();
                // SAFETY: the buffer holds `size` bytes.
                unsafe { b.as_ptr().add(size - 1).write(1) };
            }
        }
        for b in bufs {
            // SAFETY: ours, freed once.
            assert!(unsafe { k.kfree(c, b.as_ptr()) });
        }
    };
    let s16 = k.kmalloc_cache(16 << 10, Gfp::KERNEL).unwrap();
    let made = || stat(k, s16, SlubStat::AllocSlab);
    let start = k.slub().slab_growth();
    round();
    let first = k.slub().slab_growth();
    assert!(
        first - start >= (256 * (16 << 10)) >> 12,
        "the first round rises by its 16 KiB buffers at least: {}",
        first - start
    );
    let made_first = made();
    for _ in 0..8 {
        round();
    }
    assert!(
        made() - made_first >= 8 * 64,
        "every round makes kmalloc-16k's slabs again: {}",
        made() - made_first
    );
    assert!(
        k.slub().slab_growth() - first < DECAY_GROWTH_PAGES,
        "rounds after the first add less than a step: {}",
        k.slub().slab_growth() - first
    );
    k.shrink_all(c);
    // SAFETY: owned.
    unsafe { k.pages.cpu_area_put(a) };
    assert!(k.pages.platform().take_log().is_empty());
}

/// The decay's idle full sheaves wait on a shared list (`slab/barn_drain.rs`): the
/// next refill of any cache that would make a new slab flushes them first, and takes
/// a slab they emptied instead of pages; destroying a cache flushes its own. A
/// second thread that went on allocating while one thread flushed a barn of tens of
/// megabytes took fresh pages meanwhile.
#[test]
fn a_refill_about_to_make_a_slab_flushes_the_decay_s_sheaves_and_takes_their_slabs() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let b = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: fresh from the pool: this test's alone, one handle on it.
    let cb = Some(unsafe { CpuRef::new(b) });
    // SAFETY: as above, for both areas.
    let refs = unsafe { [CpuRef::new(a), CpuRef::new(b)] };
    let create = |name, size| {
        k.kmem_cache_create(c, name, size, 8, SlabFlags::empty(), None)
            .unwrap()
    };
    let (old, new) = (create("drain-128", 128), create("drain-64", 64));
    assert_eq!(
        old.config().order,
        new.config().order,
        "slabs one can adopt"
    );
    let objs: Vec<_> = (0..256 * old.config().objects)
        .map(|_| k.slub().alloc(c, old, Gfp::KERNEL).unwrap())
        .collect();
    let slab_of = |p: NonNull<u8>| p.as_ptr() as usize & !(old.config().slab_bytes() - 1);
    let old_slabs: HashSet<usize> = objs.iter().map(|&p| slab_of(p)).collect();
    free_shuffled(k, c, old, objs);
    let held = old.nr_slabs(0);
    // The first decay starts the barn's period; in the second nobody drew from it.
    k.slub().decay_barns(c, old, true);
    assert!(k.slub().decay_barns(c, old, true) > 0);
    let waiting = k.slub().idle_sheaves_waiting();
    assert!(waiting > 0, "the full sheaves wait to be flushed");
    let census = k.slub().census(old, &refs, |_| {});
    assert_eq!(census.in_barns + census.in_cpu_sheaves, 0, "{census:?}");
    // The other area's first object of `new`: its refill finds no slab of its own,
    // none kept by another cache, and sheaves waiting.
    let first = k.slub().alloc(cb, new, Gfp::KERNEL).unwrap();
    assert_eq!(k.slub().idle_sheaves_waiting(), 0, "flushed by the refill");
    assert!(
        old_slabs.contains(&slab_of(first)),
        "the refill took a slab the flush emptied, not pages"
    );
    assert!(
        old.nr_slabs(0) < held && new.nr_slabs(0) > 0,
        "emptied slabs changed caches: {} of {held} left, {} taken",
        old.nr_slabs(0),
        new.nr_slabs(0)
    );
    check_census(k, old, &refs, &HashSet::new());
    let live: HashSet<usize> = [first.as_ptr() as usize].into();
    check_census(k, new, &refs, &live);
    // SAFETY: ours, freed once.
    assert!(unsafe { k.slub().free(cb, new, first) });
    // Destruction flushes what waits of its cache: none of its objects remains.
    let gone = create("drain-gone", 128);
    let objs: Vec<_> = (0..16 * gone.config().objects)
        .map(|_| k.slub().alloc(c, gone, Gfp::KERNEL).unwrap())
        .collect();
    free_shuffled(k, c, gone, objs);
    k.slub().decay_barns(c, gone, true);
    k.slub().decay_barns(c, gone, true);
    assert!(k.slub().idle_sheaves_waiting() > 0);
    // SAFETY: nobody else uses the cache, and nobody will.
    assert!(unsafe { k.kmem_cache_destroy(c, gone) }.is_ok());
    assert_eq!(k.slub().idle_sheaves_waiting(), 0);
    k.shrink_all(c);
    // SAFETY: owned.
    unsafe {
        k.pages.cpu_area_put(b);
        k.pages.cpu_area_put(a);
    }
    assert!(k.pages.platform().take_log().is_empty());
}

/// Two threads change phase together, from a table of 128-byte objects freed in
/// random order to as many 64-byte ones: the growth decays that one thread runs put
/// the idle barn's sheaves on the shared list while the other goes on, and both
/// flush from it (`slab/barn_drain.rs`). Every object ends in exactly one place,
/// nothing waits on the list, and the first phase's slabs serve the second: besides
/// the empty slabs kept for later, both caches together hold little more than the
/// second phase needs.
#[test]
fn threads_changing_phase_share_the_decay_s_flush_and_lose_nothing() {
    use std::sync::Barrier;
    let k = kmem(4, config(1, 0));
    let create = |name, size| {
        k.kmem_cache_create(None, name, size, 8, SlabFlags::empty(), None)
            .unwrap()
    };
    let (old, new) = (create("phase-mt-128", 128), create("phase-mt-64", 64));
    const PER_THREAD: usize = 100_000;
    let barrier = Barrier::new(2);
    let run = |seed: u64| {
        let (a, c) = own_area(k);
        let objs: Vec<_> = (0..PER_THREAD)
            .map(|_| k.slub().alloc(c, old, Gfp::KERNEL).unwrap())
            .collect();
        free_shuffled_seeded(k, c, old, objs, seed);
        barrier.wait();
        let mine: Vec<usize> = (0..PER_THREAD)
            .map(|_| k.slub().alloc(c, new, Gfp::KERNEL).unwrap().as_ptr() as usize)
            .collect();
        barrier.wait();
        // SAFETY: owned; the thread "exits" (its sheaves go to the barns).
        unsafe { k.pages.cpu_area_put(a) };
        mine
    };
    let live: Vec<Vec<usize>> = std::thread::scope(|scope| {
        let t = [scope.spawn(|| run(1)), scope.spawn(|| run(2))];
        t.map(|h| h.join().unwrap()).into()
    });
    assert_eq!(k.slub().idle_sheaves_waiting(), 0);
    let live: HashSet<usize> = live.into_iter().flatten().collect();
    assert_eq!(live.len(), 2 * PER_THREAD, "each object handed out once");
    check_census(k, old, &[], &HashSet::new());
    check_census(k, new, &[], &live);
    // The first phase's slabs that the second did not need are kept empty, for
    // the next refill or the decay interval (`empty.rs`); the rest hold little more
    // than the second phase's objects.
    let pages = |s: &kmem_core::KmemCache| s.nr_slabs(0) << s.config().order;
    let kept = k.slub().kept_empty_pages(0);
    let need = (2 * PER_THREAD * 64) >> 12;
    assert!(
        (pages(old) + pages(new)).saturating_sub(kept) < need + need / 4,
        "{} + {} pages held ({kept} kept empty) for {need} needed",
        pages(old),
        pages(new)
    );
    for p in live {
        // SAFETY: ours, freed once.
        unsafe {
            k.slub()
                .free(None, new, NonNull::new(p as *mut u8).unwrap())
        };
    }
    k.shrink_all(None);
    assert!(k.pages.platform().take_log().is_empty());
}

/// The growth decay leaves a barn in use alone: a table dropped, then built again
/// while another cache grows by many times `DECAY_GROWTH_PAGES`, takes its objects
/// back from the barn (whole sheaves, almost no refill from its slabs), the barn
/// handing out sheaves between every two ticks.
#[test]
fn another_cache_s_growth_leaves_a_barn_in_use_alone() {
    use kmem_core::slab::barn::DECAY_GROWTH_PAGES;
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let table = k
        .kmem_cache_create(c, "rebuilt-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    let other = k
        .kmem_cache_create(c, "growing-256", 256, 8, SlabFlags::empty(), None)
        .unwrap();
    let n = (2 * kmem_core::slab::BARN_MAX_OBJECT_BYTES) / 64;
    let objs: Vec<_> = (0..n)
        .map(|_| k.slub().alloc(c, table, Gfp::KERNEL).unwrap())
        .collect();
    free_shuffled(k, c, table, objs);
    let refills = stat(k, table, SlubStat::SheafRefill);
    // The other cache grows by 16 ticks' worth while the table is built again, an
    // eighth of a tick's pages between two steps of the table's.
    let steps = 16 * 8;
    let per_step = (DECAY_GROWTH_PAGES << 12) / 8 / 256;
    let mut grown = Vec::new();
    let mut again = HashSet::new();
    for i in 0..steps {
        grown.extend((0..per_step).map(|_| k.slub().alloc(c, other, Gfp::KERNEL).unwrap()));
        let end = n * (i + 1) / steps;
        while again.len() < end {
            again.insert(k.slub().alloc(c, table, Gfp::KERNEL).unwrap().as_ptr() as usize);
        }
    }
    assert!(other.nr_slabs(0) << other.config().order >= 16 * DECAY_GROWTH_PAGES);
    let refilled = stat(k, table, SlubStat::SheafRefill) - refills;
    assert!(
        refilled <= 8,
        "{refilled} refills from the slabs for {} sheaves of the table",
        n / table.config().sheaf_capacity
    );
    // SAFETY: owned by this test.
    let refs = [unsafe { CpuRef::new(a) }];
    check_census(k, table, &refs, &again);
    for p in again {
        // SAFETY: ours, freed once.
        unsafe { k.slub().free(c, table, NonNull::new(p as *mut u8).unwrap()) };
    }
    for p in grown {
        // SAFETY: ours, freed once.
        unsafe { k.slub().free(c, other, p) };
    }
    k.shrink_all(c);
    // SAFETY: owned.
    unsafe { k.pages.cpu_area_put(a) };
    assert!(k.pages.platform().take_log().is_empty());
}
