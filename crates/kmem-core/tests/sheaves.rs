//! The sheaves design: every object in exactly one place (handed out, one sheaf slot,
//! or one slab freelist) after random operations (frees by every path, a realloc's
//! `free_outgrown` among them), CPU flushes, thread exits (areas given back) and
//! shrinks; the prefill API; the double free on a sheaf's top; hardening on refill;
//! statistics; node allocation bypassing sheaves. The barn's own tests are in
//! `barn.rs`.

mod common;

use common::{check_census, config, kmem, own_area, pattern, stat, Rng};
use kmem_core::slab::{FastPath, ObjectLookup, SlubDesign, SlubStat};
use kmem_core::{CpuRef, Gfp, SlabFlags};
use proptest::prelude::*;
use std::collections::HashSet;
use std::ptr::NonNull;

use common::K;

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        cpu: usize,
        n: usize,
    },
    Free {
        cpu: usize,
        n: usize,
        seed: u64,
    },
    Flush {
        cpu: usize,
    },
    /// The area's thread exits (the area goes back to the pool) and a new one comes.
    Exit {
        cpu: usize,
    },
    Shrink,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 1..300usize).prop_map(|(cpu, n)| Op::Alloc { cpu, n }),
        4 => (0..2usize, 1..300usize, any::<u64>()).prop_map(|(cpu, n, seed)| Op::Free { cpu, n, seed }),
        1 => (0..2usize).prop_map(|cpu| Op::Flush { cpu }),
        1 => (0..2usize).prop_map(|cpu| Op::Exit { cpu }),
        1 => Just(Op::Shrink),
    ]
}

fn run(ops: Vec<Op>, size: usize) {
    let k = kmem(4, config(1, 0));
    let mut areas = [
        k.pages.cpu_area_get(0).unwrap(),
        k.pages.cpu_area_get(0).unwrap(),
    ];
    // SAFETY: the test owns both areas, one at a time (every `CpuRef::new` below).
    let cpu = |a| Some(unsafe { CpuRef::new(a) });
    let s = k
        .kmem_cache_create(cpu(areas[0]), "census", size, 8, SlabFlags::empty(), None)
        .unwrap();
    assert_eq!(s.config().fast, FastPath::Sheaf);
    if size > kmem_core::slab::SLUB_LARGE_OBJECT {
        let cfg = s.config();
        assert!(cfg.order > kmem_core::slab::SLUB_MAX_ORDER && cfg.objects >= 4);
        assert_eq!(cfg.sheaf_capacity, 2);
    }
    let mut live: Vec<usize> = Vec::new();
    for op in ops {
        match op {
            Op::Alloc { cpu: i, n } => {
                for _ in 0..n {
                    // Odd batches take the front ends' sheaf slow path first.
                    let c = cpu(areas[i]);
                    let p = (n % 2 == 1)
                        .then(|| k.slub().alloc_sheaf_slow(c.unwrap(), s))
                        .flatten()
                        .or_else(|| k.slub().alloc(c, s, Gfp::KERNEL))
                        .unwrap();
                    let p = p.as_ptr() as usize;
                    // SAFETY: ours, at least 48 bytes.
                    unsafe { (p as *mut u64).write(pattern(p)) };
                    live.push(p);
                }
            }
            Op::Free { cpu: i, n, seed } => {
                let mut r = Rng(seed | 1);
                for _ in 0..n.min(live.len()) {
                    let p = live.swap_remove(r.next() as usize % live.len());
                    // SAFETY: still ours.
                    assert_eq!(unsafe { (p as *const u64).read() }, pattern(p));
                    let c = cpu(areas[i]);
                    // Some batches take the front ends' fast and sheaf slow paths.
                    // SAFETY: ours, given up (each call takes it only when it says so).
                    let ok = unsafe {
                        let fast = seed & 2 != 0;
                        if seed & 12 == 4 {
                            // As a realloc frees the object it moved out of.
                            let ObjectLookup::Slab(_, slab) = k.slub().lookup(p as *const u8)
                            else {
                                panic!("{p:#x} is not a slab object");
                            };
                            k.slub().free_outgrown(c, s, slab, p)
                        } else if fast && k.slub().free_fast_to(c.unwrap(), s, p as *mut u8) {
                            true
                        } else {
                            match fast.then(|| k.slub().free_sheaf_slow(c.unwrap(), p as *mut u8)) {
                                Some(Some(done)) => done,
                                // Not taken (e.g. an area without a spare sheaf yet).
                                _ => k.slub().free(c, s, NonNull::new(p as *mut u8).unwrap()),
                            }
                        }
                    };
                    assert!(ok);
                }
            }
            Op::Flush { cpu: i } => {
                // SAFETY: owned.
                k.slub()
                    .flush_cpu_cache(unsafe { CpuRef::new(areas[i]) }, s);
            }
            Op::Exit { cpu: i } => {
                // SAFETY: owned; not used again (replaced just below).
                unsafe { k.pages.cpu_area_put(areas[i]) };
                areas[i] = k.pages.cpu_area_get(0).unwrap();
            }
            Op::Shrink => {
                k.shrink_all(None);
            }
        }
        // SAFETY: owned.
        let refs = [unsafe { CpuRef::new(areas[0]) }, unsafe {
            CpuRef::new(areas[1])
        }];
        check_census(k, s, &refs, &live.iter().copied().collect());
    }
    assert!(
        k.pages.platform().take_log().is_empty(),
        "no reports for valid use"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_object_is_in_exactly_one_place(ops in prop::collection::vec(op(), 1..60)) {
        run(ops, 48);
    }

    /// A large-object cache: slabs beyond `SLUB_MAX_ORDER`, sheaves of two objects,
    /// barns bounded in bytes.
    #[test]
    fn every_large_object_is_in_exactly_one_place(ops in prop::collection::vec(op(), 1..30)) {
        run(ops, 20_000);
    }
}

#[test]
fn prefilled_sheaves_guarantee_their_objects() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let s = k
        .kmem_cache_create(c, "prefill-32", 32, 8, SlabFlags::empty(), None)
        .unwrap();
    let debug = k
        .kmem_cache_create(
            c,
            "prefill-dbg",
            32,
            8,
            SlabFlags::RED_ZONE | SlabFlags::POISON,
            None,
        )
        .unwrap();
    assert_eq!(
        debug.config().fast,
        FastPath::CpuSlab,
        "debug caches keep off sheaves"
    );
    let cap = s.config().sheaf_capacity;
    for (cache, n) in [(s, 10), (s, cap), (s, 3 * cap + 1), (debug, 7)] {
        let sheaf = k.slub().prefill_sheaf(c, cache, Gfp::KERNEL, n).unwrap();
        // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
        assert!(unsafe { k.slub().sheaf_size(sheaf) } >= n);
        let mut got = HashSet::new();
        for _ in 0..n {
            // SAFETY: a prefilled sheaf of `cache`, not returned yet.
            let p = unsafe { k.slub().alloc_from_sheaf(cache, Gfp::ZERO, sheaf) }.unwrap();
            // SAFETY: ours, 32 bytes, zeroed on request.
            assert_eq!(unsafe { *(p.as_ptr() as *const [u8; 32]) }, [0; 32]);
            assert!(got.insert(p.as_ptr() as usize), "handed out twice");
        }
        // SAFETY: ours; the rest goes back with the sheaf.
        unsafe { k.slub().return_sheaf(c, cache, sheaf) };
        for p in got {
            // SAFETY: ours.
            assert!(unsafe { k.slub().free(c, cache, NonNull::new(p as *mut u8).unwrap()) });
        }
    }
    // A refill tops a sheaf up; a larger one swaps it for a bigger sheaf.
    let mut sheaf = k.slub().prefill_sheaf(c, s, Gfp::KERNEL, 2).unwrap();
    // SAFETY: ours.
    unsafe {
        let one = k.slub().alloc_from_sheaf(s, Gfp::KERNEL, sheaf).unwrap();
        assert!(k.slub().free(c, s, one));
        assert!(k
            .slub()
            .refill_prefilled_sheaf(c, s, Gfp::KERNEL, &mut sheaf, cap));
        assert!(k.slub().sheaf_size(sheaf) >= cap);
        assert!(k
            .slub()
            .refill_prefilled_sheaf(c, s, Gfp::KERNEL, &mut sheaf, 2 * cap));
        assert!(k.slub().sheaf_size(sheaf) >= 2 * cap);
        k.slub().return_sheaf(c, s, sheaf);
    }
    assert!(stat(k, s, SlubStat::SheafPrefillOversize) >= 2);
    assert!(stat(k, s, SlubStat::SheafReturnFast) + stat(k, s, SlubStat::SheafReturnSlow) >= 4);
    // Everything is accounted for, and goes back.
    // SAFETY: owned.
    let refs = [unsafe { CpuRef::new(a) }];
    check_census(k, s, &refs, &HashSet::new());
    k.shrink_all(c);
    assert_eq!(s.nr_slabs(0), 0);
    assert!(k.pages.platform().take_log().is_empty());
}

#[test]
fn a_double_free_on_the_sheaf_top_is_caught() {
    let k = kmem(2, config(1, 0));
    let (area, c) = own_area(k);
    let p = k.kmalloc(c, 40, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: ours.
    assert!(unsafe { k.kfree(c, p) });
    // SAFETY: the bug under test.
    assert!(!unsafe { k.kfree(c, p) }, "refused");
    let log = k.pages.platform().take_log();
    assert!(
        log.contains("BUG kmalloc-40 (Not tainted): Object already free"),
        "{log}"
    );
    // Only once in the sheaf: every object of the cache in exactly one place. Then
    // handed out again exactly once: frees wait in the spare until the main sheaf
    // runs out and the spare holds an eighth of a sheaf (`swap_floor`), so free a sheaf's
    // worth beside it and allocate past both.
    let s = k.kmalloc_cache(40, Gfp::KERNEL).unwrap();
    let cap = s.config().sheaf_capacity;
    // SAFETY: owned.
    let refs = [unsafe { CpuRef::new(area) }];
    check_census(k, s, &refs, &HashSet::new());
    let more: Vec<*mut u8> = (0..cap)
        .map(|_| k.kmalloc(c, 40, Gfp::KERNEL).unwrap().as_ptr())
        .collect();
    for &q in &more {
        // SAFETY: ours, given up once.
        assert!(unsafe { k.kfree(c, q) });
    }
    let again: Vec<*mut u8> = (0..4 * cap)
        .map(|_| k.kmalloc(c, 40, Gfp::KERNEL).unwrap().as_ptr())
        .collect();
    assert_eq!(again.iter().filter(|&&q| q == p).count(), 1);
}

/// A fresh heap, an area of its own and a 64-byte cache `name` that counts
/// statistics (its pushes and pops then take the regular path, `sheaf_free` and
/// `sheaf_alloc`).
fn counted_cache(
    name: &str,
) -> (
    &'static K,
    &'static kmem_core::percpu::CpuArea,
    Option<CpuRef<'static>>,
    &'static kmem_core::KmemCache,
) {
    let k = kmem(2, config(1, 0));
    let (area, c) = own_area(k);
    let s = k
        .kmem_cache_create(c, name, 64, 8, SlabFlags::STATS, None)
        .unwrap();
    (k, area, c, s)
}

/// Frees `p`, an object of `s` the caller owns and gives up, through the regular
/// path; asserts it was taken.
fn free_counted(k: &K, c: Option<CpuRef<'_>>, s: &kmem_core::KmemCache, p: *mut u8) {
    // SAFETY: the caller's object of `s`, given up once.
    assert!(unsafe { k.slub().free(c, s, NonNull::new(p).unwrap()) })
}

#[test]
fn a_full_spare_trades_places_with_a_main_sheaf_that_has_room() {
    // The regular path's rule (`sheaf_free`; a cache counting statistics pushes
    // there): a full spare and a main sheaf with room swap, so that the CPU goes to
    // the barn only when both are full.
    let (k, area, c, s) = counted_cache("swap-64");
    let cap = s.config().sheaf_capacity;
    let slub = k.slub();
    let swaps = || stat(k, s, SlubStat::SheafSwap);
    let puts = || stat(k, s, SlubStat::BarnPut);
    let free = |p: *mut u8| free_counted(k, c, s, p);
    // Straight from the slabs (a node given): no sheaf changes.
    let from_slabs = |n: usize| -> Vec<*mut u8> {
        (0..n)
            .map(|_| {
                slub.alloc_node(c, s, Gfp::KERNEL, Some(0))
                    .unwrap()
                    .as_ptr()
            })
            .collect()
    };
    // A refill, all of it taken; its objects freed fill the spare.
    let a: Vec<*mut u8> = (0..cap)
        .map(|_| slub.alloc(c, s, Gfp::KERNEL).unwrap().as_ptr())
        .collect();
    a.iter().for_each(|&p| free(p));
    // The empty main swaps with it and hands out its top, then `floor - 1` more; the
    // next one, `a[cap - floor - 1]`, is free on top of the main sheaf, which has
    // room for an eighth of a sheaf (`swap_floor`).
    let floor = cap.div_ceil(8);
    assert!(floor >= 2, "sheaves of more than 4 objects");
    let taken: Vec<*mut u8> = (0..floor)
        .map(|_| slub.alloc(c, s, Gfp::KERNEL).unwrap().as_ptr())
        .collect();
    assert_eq!(
        taken,
        a[cap - floor..].iter().rev().copied().collect::<Vec<_>>()
    );
    assert_eq!(swaps(), 1);
    from_slabs(cap).into_iter().for_each(free);
    // Spare full, main with that room: a free of the main sheaf's top swaps them and
    // is caught as a double free at the new spare's top (the swap stays).
    let main_top = a[cap - floor - 1];
    // SAFETY: refused (the bug under test).
    assert!(!unsafe { slub.free(c, s, NonNull::new(main_top).unwrap()) });
    let log = k.pages.platform().take_log();
    assert!(log.contains("Object already free"), "{log}");
    assert_eq!((swaps(), puts()), (2, 0));
    // The objects taken fill the sheaf that was the main one; with both full, the
    // next free sends the full spare to the barn.
    taken.iter().for_each(|&p| free(p));
    assert_eq!((swaps(), puts()), (2, 0));
    from_slabs(1).into_iter().for_each(free);
    assert_eq!((swaps(), puts()), (2, 1));
    // Every object in exactly one place, `main_top` once.
    // SAFETY: owned.
    let refs = [unsafe { CpuRef::new(area) }];
    check_census(k, s, &refs, &HashSet::new());
    let again: Vec<*mut u8> = (0..3 * cap)
        .map(|_| slub.alloc(c, s, Gfp::KERNEL).unwrap().as_ptr())
        .collect();
    assert_eq!(again.iter().filter(|&&q| q == main_top).count(), 1);
    assert!(k.pages.platform().take_log().is_empty());
}

#[test]
fn a_swap_moves_an_eighth_of_a_sheaf_at_least() {
    // Below `swap_floor` the two sheaves do not swap: a full spare beside a main
    // sheaf with less room goes to the barn, and an empty main sheaf beside a spare
    // with fewer objects is replaced from the barn (the spare keeps them). Else
    // kmalloc/kfree in turn would swap every few calls.
    let (k, area, c, s) = counted_cache("floor-64");
    let cap = s.config().sheaf_capacity;
    let slub = k.slub();
    let count = |st| stat(k, s, st);
    let free = |p: *mut u8| free_counted(k, c, s, p);
    let alloc = || slub.alloc(c, s, Gfp::KERNEL).unwrap().as_ptr();
    let from_slabs = |n: usize| {
        (0..n).map(|_| {
            slub.alloc_node(c, s, Gfp::KERNEL, Some(0))
                .unwrap()
                .as_ptr()
        })
    };
    // A refill taken whole and freed: the spare is full, the main sheaf empty; the
    // next allocation swaps (a whole sheaf) and leaves the main one a free slot.
    let a: Vec<*mut u8> = (0..cap).map(|_| alloc()).collect();
    a.iter().for_each(|&p| free(p));
    let first = alloc();
    assert_eq!((first, count(SlubStat::SheafSwap)), (a[cap - 1], 1));
    // Spare full again beside a main sheaf with one free slot: the spare goes to the
    // barn (no swap) and the free waits on an empty sheaf.
    let b: Vec<*mut u8> = from_slabs(cap + 1).collect();
    b.iter().for_each(|&p| free(p));
    assert_eq!(count(SlubStat::SheafSwap), 1);
    assert_eq!(count(SlubStat::BarnPut), 1);
    // Main emptied beside a spare holding one object: a full sheaf from the barn
    // (the one just put there), no swap; the spare keeps its object.
    let rest: Vec<*mut u8> = (0..cap - 1).map(|_| alloc()).collect();
    let gets = count(SlubStat::BarnGet);
    let next = alloc();
    assert_eq!(count(SlubStat::SheafSwap), 1);
    assert_eq!(count(SlubStat::BarnGet), gets + 1);
    assert_eq!(next, b[cap - 1], "the barn's sheaf's top");
    // Everything back, each object in one place.
    for p in std::iter::once(first).chain(rest).chain([next]) {
        free(p);
    }
    // SAFETY: owned.
    let refs = [unsafe { CpuRef::new(area) }];
    check_census(k, s, &refs, &HashSet::new());
    assert!(k.pages.platform().take_log().is_empty());
}

#[test]
fn a_double_free_reaching_its_slab_through_a_flush_is_caught() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let s = k
        .kmem_cache_create(c, "df-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    let n = s.config().objects;
    let objs: Vec<_> = (0..n)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    // SAFETY: owned throughout.
    let flush = || k.slub().flush_cpu_cache(unsafe { CpuRef::new(a) }, s);
    let flush_all = || {
        flush();
        k.slub().shrink_barns(c, s);
    };
    let census = || {
        let mut free = HashSet::new();
        k.slub().census(s, &[], |o| {
            free.insert(o);
        });
        free
    };
    // (The refill may have made a second slab: its rest is free from the start.)
    flush_all();
    let before = census();
    // x's slab all in use: x goes back alone and heads the slab's freelist.
    let x = objs[n / 2];
    let y = objs[n / 3];
    // SAFETY: ours.
    assert!(unsafe { k.slub().free(c, s, x) });
    flush_all();
    let slow = stat(k, s, SlubStat::FreeSlowpath);
    // y into the now partial slab: the flush's plain, inline free.
    // SAFETY: ours.
    assert!(unsafe { k.slub().free(c, s, y) });
    flush_all();
    assert_eq!(stat(k, s, SlubStat::FreeSlowpath), slow + 1);
    let mut want = before.clone();
    want.extend([x.as_ptr() as usize, y.as_ptr() as usize]);
    assert_eq!(census(), want);
    assert!(k.pages.platform().take_log().is_empty());
    // y again: the sheaf takes it (its top is not y), the flush finds y at the head
    // of its slab's freelist and reports instead of linking it twice.
    // SAFETY: the bug under test.
    unsafe { k.slub().free(c, s, y) };
    flush_all();
    let log = k.pages.platform().take_log();
    assert!(
        log.contains("BUG df-64 (Not tainted): Object already free"),
        "{log}"
    );
    let again: Vec<usize> = (0..2 * n + before.len())
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap().as_ptr() as usize)
        .collect();
    assert_eq!(
        again.iter().filter(|&&p| p == y.as_ptr() as usize).count(),
        1
    );
    assert_eq!(
        again.iter().filter(|&&p| p == x.as_ptr() as usize).count(),
        1
    );
    assert_eq!(again.iter().collect::<HashSet<_>>().len(), again.len());
}

#[test]
fn refill_never_follows_a_corrupted_free_pointer() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let s = k
        .kmem_cache_create(c, "hard-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    let cfg = *s.config();
    // Objects back on a slab's freelist: allocate a slab's worth, free, flush, shrink
    // the barn (not the slab: it stays partial while one object is held).
    let objs: Vec<_> = (0..cfg.objects)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    let keep = objs[0];
    for &p in &objs[1..] {
        // SAFETY: ours.
        unsafe { k.slub().free(c, s, p) };
    }
    // SAFETY: owned.
    k.slub().flush_cpu_cache(unsafe { CpuRef::new(a) }, s);
    k.slub().shrink_barns(c, s);
    // Overwrite the free pointer of every free object (a use-after-free write).
    let mut free = Vec::new();
    k.slub().census(s, &[], |o| free.push(o));
    assert!(free.len() > 4);
    for &o in &free {
        // SAFETY: the bug under test: a free object's free pointer word.
        unsafe { ((o + cfg.offset) as *mut usize).write(0x4141_4141_4141) };
    }
    let mut seen = HashSet::new();
    for _ in 0..3 * cfg.objects {
        let p = k.slub().alloc(c, s, Gfp::KERNEL).unwrap().as_ptr() as usize;
        assert!(
            k.pages.virt_to_page(p as *const u8).is_some(),
            "a wild pointer came out"
        );
        assert!(seen.insert(p), "handed out twice");
    }
    let l = k.pages.platform().take_log();
    assert!(
        l.contains("BUG hard-64 (Not tainted): Freepointer corrupt"),
        "{l}"
    );
    let _ = keep;
}

#[test]
fn statistics_per_object_only_when_asked_and_node_allocations_bypass_sheaves() {
    let k = kmem(4, config(2, 0));
    let (_, c) = own_area(k);
    let plain = k
        .kmem_cache_create(c, "plain-32", 32, 8, SlabFlags::empty(), None)
        .unwrap();
    let counted = k
        .kmem_cache_create(c, "counted-32", 32, 8, SlabFlags::STATS, None)
        .unwrap();
    assert_eq!(plain.config().fast, FastPath::Sheaf);
    assert_eq!(counted.config().fast, FastPath::SheafCounted);
    for s in [plain, counted] {
        for _ in 0..100 {
            let p = k.slub().alloc(c, s, Gfp::KERNEL).unwrap();
            // SAFETY: ours.
            unsafe { k.slub().free(c, s, p) };
        }
    }
    assert_eq!(stat(k, counted, SlubStat::AllocCpuSheaf), 100);
    assert_eq!(stat(k, counted, SlubStat::FreeCpuSheaf), 100);
    assert!(
        stat(k, plain, SlubStat::AllocCpuSheaf) < 100,
        "counted per sheaf only"
    );
    // kmem_cache_alloc_node with a node: from that node's slabs, not the sheaf.
    let p = k.slub().alloc_node(c, plain, Gfp::KERNEL, Some(1)).unwrap();
    let nid = k
        .pages
        .page_to_nid(k.pages.virt_to_page(p.as_ptr()).unwrap());
    assert_eq!(nid, 1);
    // SAFETY: ours.
    unsafe { k.slub().free(c, plain, p) };
}

#[test]
fn the_cpu_slab_design_stays_selectable() {
    let k = common::kmem_design(2, config(1, 0), None, SlubDesign::CpuSlab);
    assert_eq!(k.slub_design(), SlubDesign::CpuSlab);
    let (_, c) = own_area(k);
    let s = k
        .kmem_cache_create(c, "old-32", 32, 8, SlabFlags::empty(), None)
        .unwrap();
    assert_eq!(
        (s.config().fast, s.config().sheaf_capacity),
        (FastPath::CpuSlab, 0)
    );
    let p = k.slub().alloc(c, s, Gfp::KERNEL).unwrap();
    // SAFETY: ours.
    unsafe { k.slub().free(c, s, p) };
    assert!(stat(k, s, SlubStat::AllocFastpath) + stat(k, s, SlubStat::AllocSlowpath) >= 1);
    assert_eq!(stat(k, s, SlubStat::SheafRefill), 0);
}

#[test]
fn kmallocs_fast_path_pops_the_class_of_every_size_its_tables_cover() {
    let k = kmem(2, config(1, 0));
    let (_, c) = own_area(k);
    let cpu = c.unwrap();
    // Every small size; above them, up to the medium table's bound, every class's
    // edges and a stride between them.
    let (small, medium) = (
        kmem_core::kmalloc::SMALL_FAST_MAX,
        kmem_core::kmalloc::MEDIUM_FAST_MAX,
    );
    let edges = kmem_core::kmalloc::KMALLOC_PLAIN_SIZES
        .iter()
        .filter(|&&c| c > small && c <= medium)
        .flat_map(|&c| [c - 1, c, c + 1]);
    let sizes: Vec<usize> = (0..=small)
        .chain(edges)
        .chain((small + 1..=medium).step_by(97))
        .filter(|&size| size <= medium)
        .collect();
    for size in sizes {
        // The regular path fills the class's main sheaf; then the fast path pops it.
        let mut p = k.kmalloc(c, size, Gfp::KERNEL).unwrap();
        let q = match k.kmalloc_fast(cpu, size, Gfp::KERNEL) {
            Some(q) => q,
            None => {
                // `p` was the main sheaf's last object (a class of few objects a
                // sheaf, met before): the regular path swaps in the spare.
                // SAFETY: ours, freed once.
                assert!(unsafe { k.kfree(c, p.as_ptr()) });
                p = k.kmalloc(c, size, Gfp::KERNEL).unwrap();
                k.kmalloc_fast(cpu, size, Gfp::KERNEL)
                    .unwrap_or_else(|| panic!("size {size}: a filled sheaf"))
            }
        };
        let want = k.kmalloc_cache(size, Gfp::KERNEL).unwrap();
        for o in [p, q] {
            // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
            let got = unsafe { k.slub().cache_of(o.as_ptr()) }.unwrap();
            assert!(std::ptr::eq(got, want), "size {size}: {}", got.name());
            // SAFETY: the test's own live allocation (or null, or not the heap's).
            assert!(unsafe { k.ksize(o.as_ptr()) } >= size);
        }
        // Zeroed, accounted and reclaimable requests take the regular path.
        for gfp in [
            Gfp::KERNEL | Gfp::ZERO,
            Gfp::KERNEL | Gfp::ACCOUNT,
            Gfp::KERNEL | Gfp::RECLAIMABLE,
        ] {
            assert!(k.kmalloc_fast(cpu, size, gfp).is_none());
        }
        // SAFETY: ours, freed once.
        unsafe {
            assert!(k.kfree(c, p.as_ptr()));
            assert!(k.kfree(c, q.as_ptr()));
        }
    }
    // Caches on the CPU-slab path (this design, or slub_debug) have no fast pop: the
    // size table sends them to the area's zero line, which stays all zero.
    let zero_line = |c: kmem_core::CpuRef<'_>| {
        // SAFETY: 64 bytes inside the owned area; nothing writes them.
        unsafe {
            *c.area()
                .ptr::<[u8; 64]>(kmem_core::page::CPU_AREA_ZERO_LINE)
        }
    };
    let old = common::kmem_design(2, config(1, 0), None, SlubDesign::CpuSlab);
    let debug = common::kmem_with(
        2,
        config(1, 0),
        Some(|name| match name {
            "kmalloc-64" => kmem_core::SlabFlags::RED_ZONE,
            _ => kmem_core::SlabFlags::empty(),
        }),
    );
    for (k, sizes) in [
        (old, 0..=kmem_core::kmalloc::SMALL_FAST_MAX),
        (debug, 57..=64),
    ] {
        let (_, c) = own_area(k);
        for size in sizes {
            // Fill every cache's sheaves that the fast path could pop by mistake.
            let p = k.kmalloc(c, size, Gfp::KERNEL).unwrap();
            let q = k.kmalloc(c, 8, Gfp::KERNEL).unwrap();
            assert!(k.kmalloc_fast(c.unwrap(), size, Gfp::KERNEL).is_none());
            // SAFETY: ours.
            unsafe { assert!(k.kfree(c, p.as_ptr()) && k.kfree(c, q.as_ptr())) };
        }
        assert_eq!(zero_line(c.unwrap()), [0; 64], "the zero line was written");
    }
    assert_eq!(zero_line(cpu), [0; 64], "the zero line was written");
}

#[test]
fn per_cpu_state_leaves_room_for_many_caches() {
    // Every cache takes its `kmem_cache_cpu` (sheaf pointers, statistics) in every CPU
    // area: the boot caches plus at least 100 more must fit (the `debug` bench makes 60).
    let k = kmem(2, config(1, 0));
    let (_, c) = own_area(k);
    for i in 0..100 {
        let s = k
            .kmem_cache_create(
                c,
                &format!("many-{i}"),
                16 + 8 * i,
                8,
                SlabFlags::empty(),
                None,
            )
            .unwrap_or_else(|| panic!("cache {i} did not fit"));
        let p = k.slub().alloc(c, s, Gfp::KERNEL).unwrap();
        // SAFETY: ours.
        assert!(unsafe { k.slub().free(c, s, p) });
    }
}

#[test]
fn housekeeping_reports_free_pages_while_only_sheaves_are_used() {
    // A program that freed pages and then only allocates small objects never reaches
    // the page allocator's paths, which run free page reporting: the sheaf slow paths
    // do the housekeeping every HOUSEKEEPING_INTERVAL times instead.
    let k = common::kmem_with_decay(1_000_000);
    let (area, c) = own_area(k);
    let pf = k.pages.platform();
    // Slabs for the sheaves to recycle, made (and their pages taken) up front.
    let warm: Vec<_> = (0..2000)
        .map(|_| k.kmalloc(c, 64, Gfp::KERNEL).unwrap())
        .collect();
    for o in &warm {
        // SAFETY: ours.
        unsafe { k.kfree(c, o.as_ptr()) };
    }
    // A 2 MiB block freed, old enough to report once the clock moves. It waits on
    // the CPU's pageblock list until a housekeeping finds it unused there.
    let block = k.pages.alloc_pages(c, Gfp::KERNEL, 9).unwrap();
    // SAFETY: ours, this order.
    unsafe { k.pages.free_pages(c, block, 9) };
    assert_eq!(k.pages.zone_pcp_of(area, 0).thp_blocks(), 1);
    pf.advance(10_000_000);
    let (calls, reported) = (
        pf.housekeeping.load(std::sync::atomic::Ordering::Relaxed),
        pf.reported_bytes.load(std::sync::atomic::Ordering::Relaxed),
    );
    // Only sheaf traffic: bursts that empty the main sheaf and fill the spare.
    let interval = kmem_core::page::HOUSEKEEPING_INTERVAL as usize;
    common::slow_path_traffic(k, c, 64, 200, 2 * interval);
    assert!(pf.housekeeping.load(std::sync::atomic::Ordering::Relaxed) > calls);
    assert!(
        pf.reported_bytes.load(std::sync::atomic::Ordering::Relaxed) >= reported + (2 << 20),
        "the old block was reported"
    );
    assert_eq!(k.pages.zone_pcp_of(area, 0).thp_blocks(), 0);
}

#[test]
fn shrinking_gives_pages_back_without_a_reporting_pass_under_the_cache_list_lock() {
    // `shrink_all` walks the cache list under its lock and frees slabs to the zone;
    // a reporting pass, whose platform locks the process heap's fork handlers take
    // before the cache list's, must not start there. It starts at the next page-path
    // free after the walk instead.
    use std::sync::atomic::Ordering::Relaxed;
    let k = common::kmem_with_decay(1_000_000);
    let (_, c) = own_area(k);
    let pf = k.pages.platform();
    // Slabs of several classes, emptied: some stay on their nodes' partial lists
    // (`min_partial`), some in sheaves and barns, for the shrink to free.
    for size in [64, 256, 1024] {
        let v: Vec<_> = (0..3000)
            .map(|_| k.kmalloc(c, size, Gfp::KERNEL).unwrap())
            .collect();
        for o in v {
            // SAFETY: ours, freed once.
            unsafe { k.kfree(c, o.as_ptr()) };
        }
    }
    // A 2 MiB block freed to the zone (without a CPU: not to its pageblock list),
    // old enough to report once the clock moves: a pass is due from here on.
    let block = k.pages.alloc_pages(c, Gfp::KERNEL, 9).unwrap();
    // SAFETY: ours, this order.
    unsafe { k.pages.free_pages(None, block, 9) };
    pf.advance(10_000_000);
    let reported = pf.reported_bytes.load(Relaxed);
    let before = k.pages.nr_free_pages();
    // Without a CPU: every slab the shrink frees goes to the zone's free path, which
    // starts a due pass.
    let pages = k.shrink_all(None);
    assert!(pages > 0, "the shrink freed slabs");
    assert!(k.pages.nr_free_pages() > before);
    assert_eq!(
        pf.reported_bytes.load(Relaxed),
        reported,
        "no reporting pass ran inside the shrink"
    );
    // The deferred pass: the next free on the zone's path runs it.
    let p = k.pages.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
    // SAFETY: ours, this order.
    unsafe { k.pages.free_pages(None, p, 0) };
    assert!(
        pf.reported_bytes.load(Relaxed) >= reported + (2 << 20),
        "the old block was reported after the shrink"
    );
}
