#![allow(clippy::unnecessary_literal_unwrap)] // `cpu` is an Option on purpose: APIs take one.
//! Charged areas through the public API of `Kmem`: the inline fast paths of a thread
//! whose fast word is its area's charged area pop charged objects of its group and
//! push freed `kmalloc-cg-*` objects onto inboxes; the slow paths keep the group's
//! own and free everyone else's the regular way (uncharged from their groups); a CPU
//! area's inline free never takes a charged object. The take-in's swap keeps order and
//! charges; double frees that reach an inbox are reported, never handed out twice; and
//! a random model of two groups on two threads (inline and regular frees, drains)
//! hands every object out once, keeps its contents and gives every charge back.

mod common;

use common::{config, kmem, TestPlatform};
use kmem_core::memcontrol::{MemCgroup, MemcgStat, ObjCgroup, OBJCG_SHEAF_SLOTS};
use kmem_core::percpu::InlineArea;
use kmem_core::{CpuArea, CpuRef, Gfp, Kmem};
use proptest::prelude::*;
use std::collections::HashSet;

type K = Kmem<TestPlatform>;

/// An area the calling test owns until it puts it back, and its handle.
fn own_area(k: &'static K) -> (&'static CpuArea, CpuRef<'static>) {
    let a = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: fresh from the pool: the calling test owns it until it puts it back.
    (a, unsafe { CpuRef::new(a) })
}

fn group(k: &'static K, name: &str) -> &'static MemCgroup {
    k.memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), name)
        .unwrap()
}

fn alloc(k: &K, c: CpuRef<'_>, g: &MemCgroup, size: usize) -> *mut u8 {
    k.memcg()
        .kmalloc_objcg(Some(c), size, Gfp::KERNEL, g.objcg())
        .unwrap()
        .as_ptr()
}

/// `c`'s charged area as a thread running charged to `g` sees it (its fast word).
fn charged_area(k: &K, c: CpuRef<'_>, g: &MemCgroup) -> InlineArea<'static> {
    let w = k.memcg().charged_fast_word(c, g.objcg());
    assert_ne!(w, 0, "a charged area for g");
    // SAFETY: the charged area of an area the test owns.
    unsafe { InlineArea::from_word(w) }
}

/// The inline free of a thread whose fast word is `c`'s charged area.
fn inline_free(k: &K, c: CpuRef<'_>, g: &MemCgroup, p: *mut u8) -> bool {
    // SAFETY: the tests free their own objects (and double frees on purpose).
    unsafe { k.kfree_fast(charged_area(k, c, g), p) }
}

/// The inline kmalloc of that thread.
fn inline_alloc(k: &K, c: CpuRef<'_>, g: &MemCgroup, size: usize) -> Option<*mut u8> {
    k.kmalloc_fast(charged_area(k, c, g), size, Gfp::KERNEL)
        .map(|p| p.as_ptr())
}

fn held(k: &K, a: &CpuArea) -> (*const ObjCgroup, usize) {
    k.memcg().memcg_stock_of(a).unwrap().objcg_sheaves()
}

fn slab_bytes(k: &K, c: CpuRef<'_>, g: &MemCgroup) -> isize {
    k.memcg().memcg_flush_stats(Some(c));
    g.stat(MemcgStat::SlabUnreclaimable)
}

#[test]
fn the_inline_paths_of_a_charged_area_pop_and_push_a_groups_objects() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "g");
    let (a, c) = own_area(k);
    // The first charged allocation fills the stock with pre-charged bytes; the second
    // makes the charged area and refills the class's kept sheaf from them.
    let zeroth = alloc(k, c, g, 32);
    let first = alloc(k, c, g, 32);
    let waiting = held(k, a).1;
    assert!(waiting > 0, "a refill leaves objects in the kept sheaf");
    // The inline pop hands them out: charged to g already, no charge made.
    let popped: Vec<_> = (0..waiting)
        .map(|_| inline_alloc(k, c, g, 32).expect("a kept object"))
        .collect();
    assert_eq!(inline_alloc(k, c, g, 32), None, "the kept sheaf is empty");
    assert_eq!(slab_bytes(k, c, g), ((waiting + 2) * 32) as isize);
    // SAFETY: ours (the regular charged free: kept, as the inbox would).
    assert!(unsafe { k.memcg().kfree_objcg(Some(c), zeroth, g.objcg()) });
    assert_eq!(held(k, a).1, 1);
    assert_eq!(alloc(k, c, g, 32), zeroth);
    // The inline free pushes them onto the class's inbox, still charged.
    for &p in popped.iter().chain([&first]) {
        assert!(inline_free(k, c, g, p));
    }
    assert_eq!(held(k, a), (g.objcg() as *const ObjCgroup, waiting + 1));
    assert_eq!(slab_bytes(k, c, g), ((waiting + 2) * 32) as isize);
    // An allocation that finds the kept sheaf empty takes the inbox in: the same
    // objects come back, nothing charged or uncharged.
    let again: HashSet<_> = (0..=waiting).map(|_| alloc(k, c, g, 32)).collect();
    let freed: HashSet<_> = popped.iter().chain([&first]).copied().collect();
    assert_eq!(again, freed);
    for &p in again.iter().chain([&zeroth]) {
        assert!(inline_free(k, c, g, p));
    }
    // The area going back gives every object back, uncharged.
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(held(k, a).1, 0);
    assert_eq!(g.usage(), 0);
}

#[test]
fn an_allocations_take_in_of_a_groups_inbox_swaps_the_sheaves_and_both_keep_working() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "swap");
    let (a, c) = own_area(k);
    let _stock = alloc(k, c, g, 32);
    let first = alloc(k, c, g, 32);
    // Empty the kept sheaf, then free everything inline: all of it onto the inbox.
    let mut objs = vec![first];
    while let Some(p) = inline_alloc(k, c, g, 32) {
        objs.push(p);
    }
    let n = objs.len();
    assert!(n > 2, "a refill brought several");
    for &p in &objs {
        assert!(inline_free(k, c, g, p));
    }
    assert_eq!(held(k, a).1, n);
    let charged = slab_bytes(k, c, g);
    // The next allocation finds the kept sheaf empty and the inbox all g's: the
    // sheaves change places, and the pops hand the objects out last freed first, as
    // a take-in that moved them would.
    let again: Vec<_> = (0..n).map(|_| alloc_or_pop(k, c, g)).collect();
    assert_eq!(again, objs.iter().rev().copied().collect::<Vec<_>>());
    assert_eq!(held(k, a).1, 0);
    assert_eq!(slab_bytes(k, c, g), charged, "nothing charged or uncharged");
    // The emptied sheaf is the inbox now: the inline free fills it, and refuses a
    // double free of its top, which the charged free's slow half reports and leaves
    // where it is.
    assert!(inline_free(k, c, g, again[0]));
    assert!(!inline_free(k, c, g, again[0]), "the top freed again");
    // SAFETY: the bug under test.
    assert!(!unsafe { k.memcg().kfree_objcg(Some(c), again[0], g.objcg()) });
    let log = k.pages.platform().take_log();
    assert!(log.contains("Object already free"), "{log}");
    for &p in &again[1..] {
        assert!(inline_free(k, c, g, p));
    }
    assert_eq!(held(k, a).1, n);
    // And the swap works the other way too: the same objects again, each once.
    let third: HashSet<_> = (0..n).map(|_| alloc_or_pop(k, c, g)).collect();
    assert_eq!(third, objs.iter().copied().collect::<HashSet<_>>());
    assert_eq!(slab_bytes(k, c, g), charged);
    for &p in &third {
        assert!(inline_free(k, c, g, p));
    }
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(held(k, a).1, 0);
}

#[test]
fn a_take_in_frees_an_inbox_object_whose_slab_is_gone_the_regular_way_and_keeps_the_rest() {
    let k = kmem(2, config(1, 0));
    let (g, h) = (group(k, "mine"), group(k, "theirs"));
    let (a, c) = own_area(k);
    let (b, cb) = own_area(k);
    // One of h's objects, alone in a slab of kmalloc-cg-64 (h's first charged
    // allocation on that area: no refill).
    let lone = alloc(k, cb, h, 64);
    k.memcg().memcg_drain_stock(cb);
    let mine: Vec<_> = (0..3).map(|_| alloc(k, c, g, 64)).collect();
    k.memcg().memcg_drain_stock(c);
    for &p in &mine[..2] {
        assert!(inline_free(k, c, g, p));
    }
    // This thread frees h's object onto its inbox; then the same object is freed
    // again on the other area, the regular way (uncharged), its slab empties and
    // the shrink gives its pages back: the inbox holds an object of no slab.
    assert!(inline_free(k, c, g, lone));
    assert!(inline_free(k, c, g, mine[2]));
    // SAFETY: the bug under test (the inbox still holds it).
    assert!(unsafe { k.kfree(Some(cb), lone) });
    k.shrink_all(Some(cb));
    assert_eq!(held(k, a).1, 4);
    // g's next allocation takes the inbox in: no swap (not all of it is g's); the
    // object of no slab goes the regular way and is reported, g's three are kept.
    let p = alloc(k, c, g, 64);
    let log = k.pages.platform().take_log();
    // Its slab went back to the page allocator: the object's address starts a free
    // block or lies inside one.
    assert!(
        (log.contains("freeing a free page") || log.contains("not allocated by kmem"))
            && log.contains("not freed"),
        "reported: {log}"
    );
    assert!(mine.contains(&p));
    let rest: Vec<_> = (0..2).map(|_| alloc(k, c, g, 64)).collect();
    let out: HashSet<_> = rest.iter().chain([&p]).copied().collect();
    assert_eq!(out, mine.iter().copied().collect::<HashSet<_>>());
    assert_eq!(held(k, a).1, 0);
    for q in out {
        assert!(inline_free(k, c, g, q));
    }
    // SAFETY: owned; not used afterwards.
    unsafe {
        k.pages.cpu_area_put(b);
        k.pages.cpu_area_put(a);
    }
    assert_eq!(g.usage(), 0);
    assert_eq!(h.usage(), 0);
}

#[test]
fn a_double_free_of_the_kept_sheafs_top_that_waits_in_the_inbox_is_reported_and_dropped() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "twice");
    let (a, c) = own_area(k);
    // More than an inbox holds.
    let objs: Vec<_> = (0..OBJCG_SHEAF_SLOTS + 8)
        .map(|_| alloc(k, c, g, 32))
        .collect();
    let top = alloc(k, c, g, 32);
    // `top` waits on the kept sheaf (the charged free's slow half keeps it there).
    // SAFETY: ours.
    assert!(unsafe { k.memcg().kfree_objcg(Some(c), top, g.objcg()) });
    // Freed again, inline: the inbox's top test cannot see the kept sheaf's top.
    assert!(
        inline_free(k, c, g, top),
        "the bug under test: onto the inbox"
    );
    // More frees fill the inbox; the first it refuses takes the inbox in.
    let mut rest = objs.iter();
    for &p in rest.by_ref() {
        if !inline_free(k, c, g, p) {
            // SAFETY: ours.
            let kept = unsafe { k.memcg().kfree_objcg_fast(c, p, g.objcg()) };
            assert_eq!(kept, Some(true));
            break;
        }
    }
    for &p in rest {
        assert!(inline_free(k, c, g, p));
    }
    let log = k.pages.platform().take_log();
    assert!(log.contains("Object already free"), "reported: {log}");
    // Every object is handed out once: `top` is on the kept sheaf once, not in its
    // slab too.
    let many: Vec<_> = (0..200).map(|_| alloc_or_pop(k, c, g)).collect();
    assert_eq!(
        many.iter().copied().collect::<HashSet<_>>().len(),
        many.len()
    );
    assert_eq!(many.iter().filter(|&&p| p == top).count(), 1);
    for p in many {
        // SAFETY: ours, freed once (the slow half when the inbox is full).
        assert!(inline_free(k, c, g, p) || unsafe { k.memcg().kfree_objcg(Some(c), p, g.objcg()) });
    }
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(g.usage(), 0);
}

/// An allocation of that thread: the inline pop, else the charged slow path.
fn alloc_or_pop(k: &K, c: CpuRef<'_>, g: &MemCgroup) -> *mut u8 {
    inline_alloc(k, c, g, 32).unwrap_or_else(|| alloc(k, c, g, 32))
}

#[test]
fn an_inbox_keeps_its_groups_objects_and_frees_the_others_uncharged() {
    let k = kmem(2, config(1, 0));
    let (g, h) = (group(k, "mine"), group(k, "theirs"));
    let (a, c) = own_area(k);
    // h's objects, allocated on another area (another thread) and freed by this
    // thread while it runs charged to g.
    let (b, cb) = own_area(k);
    let theirs: Vec<_> = (0..3).map(|_| alloc(k, cb, h, 64)).collect();
    k.memcg().memcg_drain_stock(cb);
    let mine: Vec<_> = (0..3).map(|_| alloc(k, c, g, 64)).collect();
    k.memcg().memcg_drain_stock(c);
    assert_eq!(slab_bytes(k, cb, h), 3 * 64);
    // The inline free takes both: it reads no vector.
    for (&p, &q) in mine.iter().zip(&theirs) {
        assert!(inline_free(k, c, g, p));
        assert!(inline_free(k, c, g, q));
    }
    assert_eq!(held(k, a).1, 6);
    // Still charged to their own groups while they wait.
    assert_eq!(slab_bytes(k, cb, h), 3 * 64);
    // g's next allocation takes the inbox in: h's objects are uncharged and freed,
    // g's are kept and handed out again.
    let p = alloc(k, c, g, 64);
    assert!(mine.contains(&p), "one of g's own objects");
    // (Uncharged through this area's stock: its statistics flush shows it.)
    assert_eq!(slab_bytes(k, c, h), 0);
    assert_eq!(held(k, a), (g.objcg() as *const ObjCgroup, 2));
    let rest: Vec<_> = (0..2).map(|_| alloc(k, c, g, 64)).collect();
    let out: HashSet<_> = rest.iter().chain([&p]).copied().collect();
    assert_eq!(out, mine.iter().copied().collect::<HashSet<_>>());
    for q in out {
        assert!(inline_free(k, c, g, q));
    }
    // SAFETY: owned; not used afterwards.
    unsafe {
        k.pages.cpu_area_put(a);
        k.pages.cpu_area_put(b);
    }
    assert_eq!((g.usage(), h.usage()), (0, 0));
}

#[test]
fn a_full_inbox_is_taken_in_by_the_next_free_and_a_double_free_on_its_top_is_refused() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "full");
    let (a, c) = own_area(k);
    // Twice what an inbox holds.
    let objs: Vec<_> = (0..2 * OBJCG_SHEAF_SLOTS)
        .map(|_| alloc(k, c, g, 16))
        .collect();
    k.memcg().memcg_drain_stock(c);
    let mut pushed = 0;
    for &p in &objs {
        if inline_free(k, c, g, p) {
            pushed += 1;
            continue;
        }
        // The inbox is full: the charged free's slow half takes it in and keeps p.
        // SAFETY: ours.
        assert!(unsafe { k.memcg().kfree_objcg(Some(c), p, g.objcg()) });
    }
    assert!(pushed > 0 && pushed < objs.len(), "{pushed}");
    // Nothing lost: what waits is charged, the rest went back uncharged.
    let waiting = held(k, a).1;
    assert_eq!(slab_bytes(k, c, g), (waiting * 16) as isize);
    // A double free on top of the inbox: the inline free refuses it, the slow half
    // reports it and leaves the object where it is.
    let p = alloc(k, c, g, 16);
    assert!(inline_free(k, c, g, p));
    assert!(!inline_free(k, c, g, p), "the bug under test: refused");
    // SAFETY: the bug under test.
    assert!(!unsafe { k.memcg().kfree_objcg(Some(c), p, g.objcg()) });
    let log = k.pages.platform().take_log();
    assert!(
        log.contains("BUG kmalloc-cg-16 (Not tainted): Object already free"),
        "{log}"
    );
    // Every object is handed out at most once.
    let many: Vec<_> = (0..4 * 64).map(|_| alloc(k, c, g, 16)).collect();
    assert_eq!(
        many.iter().copied().collect::<HashSet<_>>().len(),
        many.len()
    );
    for q in many {
        // SAFETY: ours.
        unsafe { k.memcg().kfree_objcg(Some(c), q, g.objcg()) };
    }
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(g.usage(), 0);
}

#[test]
fn a_cpu_areas_inline_free_refuses_a_charged_object() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "refused");
    let (a, c) = own_area(k);
    let p = alloc(k, c, g, 128);
    k.memcg().memcg_drain_stock(c);
    // The slab has a vector: its pages carry the class's charged line, which a CPU
    // area keeps zero (no room).
    // SAFETY: would free `p` if it took it; it must not.
    assert!(!unsafe { k.kfree_fast(InlineArea::owned(c), p) });
    // The regular free uncharges it.
    // SAFETY: ours.
    assert!(unsafe { k.kfree(Some(c), p) });
    assert_eq!(slab_bytes(k, c, g), 0);
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(g.usage(), 0);
}

#[test]
fn a_charged_area_serves_another_group_only_once_its_kept_sheaves_are_given_back() {
    let k = kmem(2, config(1, 0));
    let (g, h) = (group(k, "first"), group(k, "second"));
    let (a, c) = own_area(k);
    let p0 = alloc(k, c, g, 64);
    let p = alloc(k, c, g, 64);
    assert!(held(k, a).1 > 0, "g's objects kept");
    // A thread entering h reads no charged area while g's objects are kept.
    assert_eq!(k.memcg().charged_fast_word(c, h.objcg()), 0);
    assert_ne!(k.memcg().charged_fast_word(c, g.objcg()), 0);
    // h's first allocation gives g's back; the area is h's from then on.
    let q0 = alloc(k, c, h, 64);
    let q = alloc(k, c, h, 64);
    assert_eq!(
        slab_bytes(k, c, g),
        2 * 64,
        "only p0 and p stay charged to g"
    );
    assert_ne!(k.memcg().charged_fast_word(c, h.objcg()), 0);
    assert_eq!(k.memcg().charged_fast_word(c, g.objcg()), 0);
    // p, freed by h's thread, waits in the inbox charged to g until it is taken in.
    for x in [p0, p, q0, q] {
        assert!(inline_free(k, c, h, x));
    }
    k.memcg().memcg_drain_stock(c);
    assert_eq!((g.usage(), h.usage()), (0, 0));
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
}

/// One step of the charged-paths model: `a` runs charged to g (its inline paths on
/// its charged area), `b` charged to h (the regular charged paths).
#[derive(Clone, Debug)]
enum Op {
    /// `a` allocates `n` objects of class `size` for g.
    AllocA { size: usize, n: usize },
    /// `b` allocates `n` objects of class `size` for h.
    AllocB { size: usize, n: usize },
    /// `a` frees `n` live objects (g's or h's), picked from `seed`: its inline free,
    /// else its charged free's slow half.
    FreeA { n: usize, seed: usize },
    /// `b` frees `n` live objects the regular charged way.
    FreeB { n: usize, seed: usize },
    /// `a`'s stock drained (its objcg sheaves given back).
    DrainA,
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop::sample::select(vec![16usize, 32, 64, 256]);
    prop_oneof![
        (size.clone(), 1..40usize).prop_map(|(size, n)| Op::AllocA { size, n }),
        (size, 1..20usize).prop_map(|(size, n)| Op::AllocB { size, n }),
        (1..48usize, any::<usize>()).prop_map(|(n, seed)| Op::FreeA { n, seed }),
        (1..24usize, any::<usize>()).prop_map(|(n, seed)| Op::FreeB { n, seed }),
        Just(Op::DrainA),
    ]
}

/// Runs `ops`; every object is handed out once while live, keeps its contents, and
/// every charge is given back at the end, with no report for valid use.
fn run_model(ops: Vec<Op>) {
    // The thread's fast word as the heap keeps it: its charged area while the kept
    // sheaves may serve g, else none (the zero area: the inline paths refuse).
    let word = |k: &K, c: CpuRef<'_>, g: &MemCgroup| {
        let w = k.memcg().charged_fast_word(c, g.objcg());
        // SAFETY: the charged area of an area the test owns.
        (w != 0).then(|| unsafe { InlineArea::from_word(w) })
    };
    let k = kmem(2, config(1, 0));
    let (g, h) = (group(k, "g"), group(k, "h"));
    let (a, c) = own_area(k);
    let (b, cb) = own_area(k);
    // Live objects: address -> (size, the byte written over it).
    let mut live: Vec<(*mut u8, usize, u8)> = Vec::new();
    let mut seen: HashSet<*mut u8> = HashSet::new();
    let mut stamp = 0u8;
    let take = |live: &mut Vec<(*mut u8, usize, u8)>, seed: usize| {
        let i = seed % live.len();
        let (p, size, byte) = live.swap_remove(i);
        // SAFETY: a live object of `size` bytes, written below when handed out.
        let intact = unsafe { std::slice::from_raw_parts(p, size) }
            .iter()
            .all(|&x| x == byte);
        assert!(intact, "{p:?}: contents kept while live");
        p
    };
    for op in ops {
        match op {
            Op::AllocA { size, n } | Op::AllocB { size, n } => {
                let on_a = matches!(op, Op::AllocA { .. });
                for _ in 0..n {
                    let p = if on_a {
                        word(k, c, g)
                            .and_then(|w| k.kmalloc_fast(w, size, Gfp::KERNEL))
                            .map_or_else(|| alloc(k, c, g, size), |p| p.as_ptr())
                    } else {
                        alloc(k, cb, h, size)
                    };
                    assert!(seen.insert(p), "{p:?} handed out while live");
                    stamp = stamp.wrapping_add(1);
                    // SAFETY: a fresh object of at least `size` bytes.
                    unsafe { std::ptr::write_bytes(p, stamp, size) };
                    live.push((p, size, stamp));
                }
            }
            Op::FreeA { n, seed } => {
                for j in 0..n.min(live.len()) {
                    let p = take(&mut live, seed.wrapping_add(j * 7919));
                    seen.remove(&p);
                    // SAFETY: live, freed once (the slow half when the inline free
                    // refuses it).
                    let freed = unsafe {
                        word(k, c, g).is_some_and(|w| k.kfree_fast(w, p))
                            || k.memcg().kfree_objcg(Some(c), p, g.objcg())
                    };
                    assert!(freed);
                }
            }
            Op::FreeB { n, seed } => {
                for j in 0..n.min(live.len()) {
                    let p = take(&mut live, seed.wrapping_add(j * 104729));
                    seen.remove(&p);
                    // SAFETY: live, freed once.
                    assert!(unsafe { k.memcg().kfree_objcg(Some(cb), p, h.objcg()) });
                }
            }
            Op::DrainA => k.memcg().memcg_drain_stock(c),
        }
    }
    while !live.is_empty() {
        let p = take(&mut live, 0);
        // SAFETY: live, freed once.
        assert!(unsafe { k.memcg().kfree_objcg(Some(cb), p, h.objcg()) });
    }
    // SAFETY: owned; not used afterwards.
    unsafe {
        k.pages.cpu_area_put(a);
        k.pages.cpu_area_put(b);
    }
    assert_eq!((g.usage(), h.usage()), (0, 0), "every charge given back");
    k.memcg().memcg_flush_stats(None);
    assert_eq!(g.stat(MemcgStat::SlabUnreclaimable), 0);
    assert_eq!(h.stat(MemcgStat::SlabUnreclaimable), 0);
    let log = k.pages.platform().take_log();
    assert!(log.is_empty(), "no reports for valid use: {log}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Inline and regular charged frees of two groups' objects on two threads, the
    /// take-ins (swaps and moves) and drains among them.
    #[test]
    fn charged_objects_are_handed_out_once_and_every_charge_comes_back(
        ops in prop::collection::vec(op(), 1..60)
    ) {
        run_model(ops);
    }
}
