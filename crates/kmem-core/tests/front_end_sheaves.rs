//! The front ends' sheaf slow paths (`Slub::alloc_sheaf_slow` / `free_sheaf_slow`,
//! reached as `Kmem::kmalloc_sheaf_slow` / `kfree_sheaf_slow`): the swap, the one-step
//! trades at the barn, what they refuse; and a platform without a page-tag table,
//! whose frees all take the regular path.

mod common;

use common::{check_census, config, kmem, own_area, stat};
use kmem_core::slab::{SlubDesign, SlubStat};
use kmem_core::Gfp;
use std::collections::HashSet;

#[test]
fn the_front_ends_sheaf_slow_paths_swap_trade_and_refuse_as_the_regular_path_does() {
    let k = kmem(2, config(1, 0));
    let (_, c) = own_area(k);
    let cpu = c.unwrap();
    let s = k.kmalloc_cache(64, Gfp::KERNEL).unwrap();
    let cap = s.config().sheaf_capacity;
    let swaps = || stat(k, s, SlubStat::SheafSwap);
    // Only plain requests.
    for gfp in [Gfp::KERNEL | Gfp::ZERO, Gfp::KERNEL | Gfp::ACCOUNT] {
        assert!(k.kmalloc_sheaf_slow(cpu, 64, gfp).is_none());
    }
    // A fresh area: the slow path refills the main sheaf (nothing to swap).
    let mut held = vec![k.kmalloc_sheaf_slow(cpu, 64, Gfp::KERNEL).unwrap().as_ptr()];
    while let Some(p) = k.kmalloc_fast(cpu, 64, Gfp::KERNEL) {
        held.push(p.as_ptr());
    }
    assert_eq!((held.len(), swaps()), (cap, 0));
    // A swap hands over an eighth of a sheaf at least (`swap_floor`): with fewer frees in
    // the spare (the first through the regular path, which gives the area a spare
    // sheaf), the emptied main sheaf is refilled and the spare keeps them.
    let floor = cap.div_ceil(8);
    assert!(floor >= 2, "kmalloc-64's sheaves hold more than 4 objects");
    let few: Vec<*mut u8> = held.drain(held.len() - (floor - 1)..).collect();
    // SAFETY: ours, given up.
    assert!(unsafe { k.kfree(c, few[0]) });
    for &p in &few[1..] {
        // SAFETY: ours, given up.
        assert!(unsafe { k.kfree_fast(cpu, p) });
    }
    let fresh = k.kmalloc_sheaf_slow(cpu, 64, Gfp::KERNEL).unwrap().as_ptr();
    assert!(!few.contains(&fresh), "a refill, not the spare's frees");
    assert_eq!(swaps(), 0);
    held.push(fresh);
    while let Some(p) = k.kmalloc_fast(cpu, 64, Gfp::KERNEL) {
        held.push(p.as_ptr());
    }
    // One more free makes an eighth of a sheaf: now the two swap and the slow path serves
    // the spare's top, that object.
    let freed = held.pop().unwrap();
    // SAFETY: ours, given up.
    assert!(unsafe { k.kfree_fast(cpu, freed) });
    let again = k.kmalloc_sheaf_slow(cpu, 64, Gfp::KERNEL).unwrap();
    assert_eq!((again.as_ptr(), swaps()), (freed, 1));
    held.push(freed);
    while let Some(p) = k.kmalloc_fast(cpu, 64, Gfp::KERNEL) {
        held.push(p.as_ptr());
    }
    // Both sheaves are empty: the next one refills, without a swap.
    held.push(k.kmalloc_sheaf_slow(cpu, 64, Gfp::KERNEL).unwrap().as_ptr());
    assert_eq!(swaps(), 1);
    while let Some(p) = k.kmalloc_fast(cpu, 64, Gfp::KERNEL) {
        held.push(p.as_ptr());
    }
    // `cap` objects wait aside, freed at the end.
    let aside = held.split_off(2 * cap);
    // The emptied sheaf is the spare now: `cap` frees fill it on the fast path.
    let (top, rest) = held.split_at(cap);
    for &p in top {
        // SAFETY: ours, given up.
        assert!(unsafe { k.kfree_fast(cpu, p) }, "room on the spare");
    }
    let last = top[cap - 1];
    // SAFETY: refused without effect.
    assert!(!unsafe { k.kfree_fast(cpu, rest[0]) }, "the spare is full");
    // A pointer inside an object is not this path's; a double free of the full
    // spare's top is reported and refused, as the regular path does.
    // SAFETY: refused (the bugs under test).
    unsafe {
        assert_eq!(k.kfree_sheaf_slow(cpu, rest[0].wrapping_add(8)), None);
        assert_eq!(k.kfree_sheaf_slow(cpu, last), Some(false));
    }
    let log = k.pages.platform().take_log();
    assert!(log.contains("Object already free"), "{log}");
    assert_eq!(swaps(), 1, "refusals change nothing");
    // The main sheaf is empty: the full spare becomes the main one and the free goes
    // onto the emptied one; the next allocation pops the full one's top.
    // SAFETY: ours, given up.
    assert_eq!(unsafe { k.kfree_sheaf_slow(cpu, rest[0]) }, Some(true));
    assert_eq!(swaps(), 2);
    assert_eq!(k.kmalloc_fast(cpu, 64, Gfp::KERNEL).unwrap().as_ptr(), last);
    // A full spare beside a main sheaf with room for an eighth of a sheaf swaps with it
    // too, so that the CPU goes to the barn only when the sheaves are (nearly) full.
    // A double free of the main sheaf's top is caught on the way (the swap stays).
    let popped: Vec<*mut u8> = (1..floor)
        .map(|_| k.kmalloc_fast(cpu, 64, Gfp::KERNEL).unwrap().as_ptr())
        .collect();
    assert_eq!(
        popped,
        top[cap - floor..cap - 1]
            .iter()
            .rev()
            .copied()
            .collect::<Vec<_>>()
    );
    let puts = stat(k, s, SlubStat::BarnPut);
    for &p in &rest[1..] {
        // SAFETY: ours, given up.
        assert!(unsafe { k.kfree_fast(cpu, p) });
    }
    let main_top = top[cap - floor - 1];
    // SAFETY: refused (already free, in the main sheaf).
    assert_eq!(unsafe { k.kfree_sheaf_slow(cpu, main_top) }, Some(false));
    let log = k.pages.platform().take_log();
    assert!(log.contains("Object already free"), "{log}");
    assert_eq!((swaps(), stat(k, s, SlubStat::BarnPut)), (3, puts));
    // `last` and the objects popped after it (ours again) fill the sheaf that was
    // the main one.
    for &p in std::iter::once(&last).chain(&popped) {
        // SAFETY: ours, given up.
        assert!(unsafe { k.kfree_fast(cpu, p) });
    }
    // Both sheaves are full: a free (of an object from the slabs: a node given, no
    // sheaf) sends the full spare to the barn.
    let extra = k
        .kmalloc_node(c, 64, Gfp::KERNEL, Some(0))
        .unwrap()
        .as_ptr();
    // SAFETY: ours, given up (once: the fast path refuses without effect).
    unsafe {
        assert!(!k.kfree_fast(cpu, extra), "both sheaves are full");
        assert_eq!(k.kfree_sheaf_slow(cpu, extra), Some(true));
    }
    assert_eq!((swaps(), stat(k, s, SlubStat::BarnPut)), (3, puts + 1));
    for &p in &aside {
        // SAFETY: ours, given up.
        assert!(unsafe { k.kfree(c, p) });
    }
    // Every object is free again, each in exactly one place.
    check_census(k, s, &[cpu], &HashSet::new());
    assert!(k.pages.platform().take_log().is_empty(), "no other reports");
    // The CPU-slab design has no sheaves: the regular path does everything.
    let old = common::kmem_design(2, config(1, 0), None, SlubDesign::CpuSlab);
    let (_, oc) = own_area(old);
    let p = old.kmalloc(oc, 64, Gfp::KERNEL).unwrap();
    assert!(old
        .kmalloc_sheaf_slow(oc.unwrap(), 64, Gfp::KERNEL)
        .is_none());
    // SAFETY: not taken (no sheaf cache), then freed once.
    unsafe {
        assert_eq!(old.kfree_sheaf_slow(oc.unwrap(), p.as_ptr()), None);
        old.kfree(oc, p.as_ptr());
    }
}

#[test]
fn the_front_ends_slow_paths_trade_whole_sheaves_at_the_barn() {
    let k = kmem(2, config(1, 0));
    let (_, c) = own_area(k);
    let cpu = c.unwrap();
    let s = k.kmalloc_cache(64, Gfp::KERNEL).unwrap();
    let cap = s.config().sheaf_capacity;
    let n = 5 * cap;
    // What a C front end does: the fast path, else the sheaf slow path, else the
    // regular path (a fresh area has no spare sheaf yet).
    let alloc = || {
        k.kmalloc_fast(cpu, 64, Gfp::KERNEL)
            .or_else(|| k.kmalloc_sheaf_slow(cpu, 64, Gfp::KERNEL))
            .or_else(|| k.kmalloc(c, 64, Gfp::KERNEL))
            .unwrap()
            .as_ptr() as usize
    };
    let free = |p: usize| {
        let p = p as *mut u8;
        // SAFETY: each object the test holds, given up once.
        let done = unsafe {
            k.kfree_fast(cpu, p) || k.kfree_sheaf_slow(cpu, p).unwrap_or_else(|| k.kfree(c, p))
        };
        assert!(done);
    };
    let take = |n: usize| {
        let v: Vec<usize> = (0..n).map(|_| alloc()).collect();
        let set: HashSet<usize> = v.iter().copied().collect();
        assert_eq!(set.len(), n, "an object handed out twice");
        (v, set)
    };
    // Refills from the slabs, then frees that fill both sheaves and hand the rest to
    // the barn as full sheaves (new empty ones are made: the barn has none yet).
    let (first, first_set) = take(n);
    first.iter().for_each(|&p| free(p));
    check_census(k, s, &[cpu], &HashSet::new());
    let (gets, puts) = (stat(k, s, SlubStat::BarnGet), stat(k, s, SlubStat::BarnPut));
    assert!(puts >= 3, "full sheaves went to the barn: {puts}");
    // The same number again: both sheaves run dry and each further sheaf comes from
    // the barn for the emptied main one, with the objects freed before: no refill,
    // no new sheaf.
    let (refills, made) = (
        stat(k, s, SlubStat::SheafRefill),
        stat(k, s, SlubStat::SheafAlloc),
    );
    let (second, second_set) = take(n);
    assert_eq!(
        second_set, first_set,
        "the barn's sheaves hold the freed objects"
    );
    assert!(stat(k, s, SlubStat::BarnGet) >= gets + 3);
    check_census(k, s, &[cpu], &second_set);
    // And back: each full spare is traded for one of the empty sheaves the allocations
    // left in the barn.
    second.iter().for_each(|&p| free(p));
    assert!(stat(k, s, SlubStat::BarnPut) >= puts + 3);
    assert_eq!(
        (
            stat(k, s, SlubStat::SheafRefill),
            stat(k, s, SlubStat::SheafAlloc)
        ),
        (refills, made),
        "the exchanges used the barn's sheaves"
    );
    check_census(k, s, &[cpu], &HashSet::new());
    // A double free of a traded sheaf's object is still caught on the regular path.
    let p = alloc();
    free(p);
    // SAFETY: the bug under test: refused and reported.
    unsafe { assert!(!k.kfree(c, p as *mut u8)) };
    assert!(k
        .pages
        .platform()
        .take_log()
        .contains("Object already free"));
    check_census(k, s, &[cpu], &HashSet::new());
}

#[test]
fn without_a_tag_table_every_free_takes_the_regular_path() {
    let k = common::kmem_without_tag_table(2, config(1, 0));
    let (_, c) = own_area(k);
    let cpu = c.unwrap();
    let s = k.kmalloc_cache(64, Gfp::KERNEL).unwrap();
    let mut held = HashSet::new();
    for _ in 0..3 * s.config().sheaf_capacity {
        let p = k
            .kmalloc_fast(cpu, 64, Gfp::KERNEL)
            .or_else(|| k.kmalloc(c, 64, Gfp::KERNEL))
            .unwrap();
        assert!(held.insert(p.as_ptr() as usize), "handed out twice");
    }
    for &p in &held {
        let p = p as *mut u8;
        // SAFETY: ours, given up once: the fast paths refuse it (no tag to read), the
        // regular path frees it (onto the sheaves, found through the slab's cache).
        unsafe {
            assert!(!k.kfree_fast(cpu, p));
            assert_eq!(k.kfree_sheaf_slow(cpu, p), None);
            assert!(k.kfree(c, p));
        }
    }
    check_census(k, s, &[cpu], &HashSet::new());
    // The frees went onto the CPU's sheaves: the fast pop finds one of them. No tag is
    // kept anywhere: its slab's page reads 0.
    let p = k.kmalloc_fast(cpu, 64, Gfp::KERNEL).unwrap();
    assert!(held.contains(&(p.as_ptr() as usize)));
    let page = k.pages.virt_to_page(p.as_ptr()).unwrap();
    // SAFETY: the descriptor of a page we hold an object in.
    assert_eq!(unsafe { page.as_ref() }.sheaf_tag(), 0);
    // SAFETY: ours, given up once; a double free is still caught and refused.
    unsafe {
        assert!(k.kfree(c, p.as_ptr()));
        assert!(!k.kfree(c, p.as_ptr()));
    }
    assert!(k
        .pages
        .platform()
        .take_log()
        .contains("Object already free"));
}

/// C's `malloc` fast path (`Kmem::malloc_fast`) takes the class of
/// `malloc_class_size`: 16-aligned objects for every size above 8 bytes (none of the
/// 8-aligned kmalloc-24, -40, -56, which `kmalloc_fast` serves for Rust's layouts),
/// with room for the size; every pop leaves the census whole.
#[test]
fn malloc_fast_hands_out_16_aligned_objects_above_8_bytes() {
    use kmem_core::kmalloc::{malloc_class_size, SMALL_FAST_MAX};
    let k = kmem(2, config(1, 0));
    let (_, c) = own_area(k);
    let cpu = c.unwrap();
    let mut held = Vec::new();
    let (mut odd_kmalloc, mut popped) = (0, 0);
    for size in 0..=SMALL_FAST_MAX {
        // Three objects of each size (so that odd slots of a class come out too), each
        // popped, or when the main sheaf is empty taken by the slow path of the class
        // `malloc` asks for (which refills it).
        let class = malloc_class_size(size);
        for _ in 0..3 {
            let p = match k.malloc_fast(cpu, size) {
                Some(p) => {
                    popped += 1;
                    p.as_ptr()
                }
                None => k
                    .kmalloc_sheaf_slow(cpu, class, Gfp::KERNEL)
                    .unwrap()
                    .as_ptr(),
            };
            // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
            let s = unsafe { k.slub().cache_of(p) }.unwrap();
            let want = k.kmalloc_cache(class, Gfp::KERNEL).unwrap();
            assert!(std::ptr::eq(s, want), "size {size}: {}", s.name());
            assert!(s.config().object_size >= size, "size {size}: {}", s.name());
            let mask = if size > 8 { 15 } else { 7 };
            assert_eq!(p as usize & mask, 0, "size {size}: {p:?} in {}", s.name());
            held.push(p);
        }
        // kmalloc's own fast path keeps the 8-byte steps.
        if let Some(p) = k.kmalloc_fast(cpu, size, Gfp::KERNEL) {
            odd_kmalloc += (p.as_ptr() as usize & 15 != 0) as usize;
            held.push(p.as_ptr());
        }
    }
    assert!(popped > 2 * SMALL_FAST_MAX, "the pops ran: {popped}");
    assert!(odd_kmalloc > 0, "kmalloc-24/-40/-56 serve kmalloc's sizes");
    for p in held {
        // SAFETY: ours, given up.
        assert!(unsafe { k.kfree(c, p) });
    }
}

/// The medium kmalloc classes (objects above 1 KiB, sheaves of 2 to 25 objects): their
/// pop takes the spare once the main sheaf is empty, and a free that finds the spare
/// full trades it at the barn rather than swapping. A thread that allocates and frees
/// one block at a time then settles on the spare: no swap and no barn trade per pair.
/// With the swap, the sheaves of two objects swapped at every pair once both were full.
/// Zeroed requests too.
#[test]
fn medium_classes_pop_the_spare_and_a_pair_loop_settles_without_swaps() {
    let k = kmem(2, config(1, 0));
    let (_, c) = own_area(k);
    let cpu = c.unwrap();
    for size in [2048, 16 << 10, 64 << 10, 256 << 10] {
        let s = k.kmalloc_cache(size, Gfp::KERNEL).unwrap();
        let cap = s.config().sheaf_capacity;
        assert!(cap < 32, "{size}: a medium class's small sheaves ({cap})");
        let alloc = || {
            k.kmalloc_fast(cpu, size, Gfp::KERNEL)
                .or_else(|| k.kmalloc_sheaf_slow(cpu, size, Gfp::KERNEL))
                .or_else(|| k.kmalloc(c, size, Gfp::KERNEL))
                .unwrap()
                .as_ptr()
        };
        let free = |p: *mut u8| {
            // SAFETY: each object the test holds, given up once.
            let done = unsafe {
                k.kfree_fast(cpu, p) || k.kfree_sheaf_slow(cpu, p).unwrap_or_else(|| k.kfree(c, p))
            };
            assert!(done);
        };
        // Both sheaves full (and a sheaf's worth more in the barn): the state in which
        // every free swapped.
        let held: Vec<*mut u8> = (0..3 * cap).map(|_| alloc()).collect();
        held.iter().for_each(|&p| free(p));
        let count =
            || [SlubStat::SheafSwap, SlubStat::BarnGet, SlubStat::BarnPut].map(|i| stat(k, s, i));
        // A few pairs to settle (the main sheaf runs empty, one full spare goes to the
        // barn), then none of the slow path's steps.
        let mut seen = HashSet::new();
        for _ in 0..2 * cap + 2 {
            let p = alloc();
            free(p);
        }
        let before = count();
        for i in 0..1000u32 {
            let p = alloc();
            // SAFETY: a fresh block of `size` bytes.
            unsafe { p.cast::<u32>().write(i) };
            seen.insert(p as usize);
            free(p);
        }
        assert_eq!(
            count(),
            before,
            "{size}: swaps, barn gets and puts in the loop"
        );
        assert_eq!(
            seen.len(),
            1,
            "{size}: the loop reused the spare's top object"
        );
        // The zeroed requests' pop (`kzalloc`, `calloc`) settles the same way, each
        // block cleared whole.
        let zalloc = || {
            let gfp = Gfp::KERNEL | Gfp::ZERO;
            k.slub()
                .alloc_fast_init(cpu, s, gfp)
                .or_else(|| k.kmalloc(c, size, gfp))
                .unwrap()
                .as_ptr()
        };
        for _ in 0..4 {
            let p = zalloc();
            free(p);
        }
        let before = count();
        for _ in 0..1000 {
            let p = zalloc();
            // SAFETY: a fresh block of `size` bytes, which the previous turn dirtied.
            let block = unsafe { std::slice::from_raw_parts_mut(p, size) };
            assert!(block.iter().all(|&b| b == 0), "{size}: cleared whole");
            block.fill(0xa5);
            free(p);
        }
        assert_eq!(count(), before, "{size}: the zeroed loop's slow path steps");
        check_census(k, s, &[cpu], &HashSet::new());
    }
}
