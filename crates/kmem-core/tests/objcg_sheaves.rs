#![allow(clippy::unnecessary_literal_unwrap)] // `cpu` is an Option on purpose: APIs take one.
//! Objcg sheaves through the public API of `Kmem`: charged kmalloc objects freed by
//! their group's thread wait, still charged, for its next charged allocation; they go
//! back (uncharged) when the stock drains, when another group allocates, at the
//! limit, and never to two owners.

mod common;

use common::{config, kmem, kmem_cpu_slab, kmem_with, TestPlatform};
use kmem_core::kmalloc::KMALLOC_SIZES;
use kmem_core::memcontrol::{
    MemCgroup, MemcgStat, ObjCgroup, OBJCG_SHEAF_BYTES, OBJCG_SHEAF_MIN_SLOTS, OBJCG_SHEAF_REFILL,
    OBJCG_SHEAF_SLOTS, OBJCG_SHEAVES_MAX_BYTES,
};
use kmem_core::page::Page;
use kmem_core::percpu::InlineArea;
use kmem_core::{CpuArea, CpuRef, Gfp, Kmem, KmemCache, SlabFlags};
use std::collections::HashSet;
use std::ptr::NonNull;

type K = Kmem<TestPlatform>;

/// An area owned by the calling test until it puts it back.
fn own_area(k: &'static K) -> (&'static CpuArea, Option<CpuRef<'static>>) {
    let a = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: fresh from the pool: the calling test owns it until it puts it back, and
    // uses this one handle on it.
    (a, Some(unsafe { CpuRef::new(a) }))
}

/// The objcg sheaves of `a`: whose objects, how many.
fn held(k: &K, a: &CpuArea) -> (*const ObjCgroup, usize) {
    k.memcg().memcg_stock_of(a).unwrap().objcg_sheaves()
}

fn group(k: &'static K, name: &str) -> &'static MemCgroup {
    k.memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), name)
        .unwrap()
}

fn alloc(k: &K, cpu: Option<CpuRef<'_>>, g: &MemCgroup, size: usize) -> *mut u8 {
    k.memcg()
        .kmalloc_objcg(cpu, size, Gfp::KERNEL, g.objcg())
        .unwrap()
        .as_ptr()
}

/// A free by a context charged to `g` (its objects may wait in the objcg sheaves).
fn free(k: &K, cpu: Option<CpuRef<'_>>, g: &MemCgroup, p: *mut u8) -> bool {
    // SAFETY: the tests free their own objects (and one double free on purpose).
    unsafe { k.memcg().kfree_objcg(cpu, p, g.objcg()) }
}

fn slab_bytes(g: &MemCgroup) -> isize {
    g.stat(MemcgStat::SlabUnreclaimable)
}

/// Four sheaves' worth of `g`'s 32 B allocations are all distinct (no object of the
/// class is handed out twice); then freed.
fn handed_out_once(k: &K, cpu: Option<CpuRef<'_>>, g: &MemCgroup) {
    let many: Vec<_> = (0..4 * OBJCG_SHEAF_SLOTS)
        .map(|_| alloc(k, cpu, g, 32))
        .collect();
    assert_eq!(
        many.iter().copied().collect::<HashSet<_>>().len(),
        many.len()
    );
    for p in many {
        free(k, cpu, g, p);
    }
}

/// The base of the slab of `p`, a kmalloc-cg-32 object.
fn cg32_slab(k: &K, p: *mut u8) -> usize {
    let cfg = k
        .kmalloc_cache(32, Gfp::KERNEL | Gfp::ACCOUNT)
        .unwrap()
        .config();
    p as usize & !(cfg.slab_bytes() - 1)
}

#[test]
fn freed_charged_objects_wait_charged_and_come_back_to_the_same_group() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "g");
    let (a, cpu) = own_area(k);
    let objs: Vec<_> = (0..8).map(|_| alloc(k, cpu, g, 32)).collect();
    // What the allocations' refills left waiting (charged to g, never handed out).
    let (tag, left) = held(k, a);
    assert!(left < OBJCG_SHEAF_SLOTS);
    assert!(left == 0 || std::ptr::eq(tag, g.objcg()));
    for &p in &objs {
        assert!(free(k, cpu, g, p));
    }
    assert_eq!(held(k, a), (g.objcg() as *const ObjCgroup, left + 8));
    // Still charged while they wait: the statistics count them as allocated.
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!(slab_bytes(g), ((left + 8) * 32) as isize);
    // The group's next allocations get them back, last freed first.
    let again: Vec<_> = (0..8).map(|_| alloc(k, cpu, g, 32)).collect();
    assert_eq!(again, objs.iter().rev().copied().collect::<Vec<_>>());
    assert_eq!(held(k, a).1, left);
    for &p in &again {
        free(k, cpu, g, p);
    }
    // Draining the stock gives them back, uncharged.
    k.memcg().memcg_drain_stock(cpu.unwrap());
    assert_eq!(held(k, a), (std::ptr::null(), 0));
    assert_eq!(slab_bytes(g), 0);
    assert_eq!(g.usage(), 0);
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
}

#[test]
fn a_full_sheaf_gives_back_its_older_half_and_keeps_the_latest_frees() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "cap");
    let (a, cpu) = own_area(k);
    let objs: Vec<_> = (0..100).map(|_| alloc(k, cpu, g, 16)).collect();
    for &p in &objs {
        assert!(free(k, cpu, g, p));
    }
    // Full sheaves gave their older halves back: more than half a sheaf waits, never
    // more than one, and those are the latest frees.
    let n = held(k, a).1;
    assert!(n > OBJCG_SHEAF_SLOTS / 2 && n <= OBJCG_SHEAF_SLOTS, "{n}");
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!(
        slab_bytes(g),
        (n * 16) as isize,
        "only the waiting ones charged"
    );
    let again: Vec<_> = (0..n).map(|_| alloc(k, cpu, g, 16)).collect();
    assert_eq!(
        again,
        objs.iter().rev().take(n).copied().collect::<Vec<_>>()
    );
    for &p in &again {
        free(k, cpu, g, p);
    }
    // Large classes keep four objects at most.
    let big: Vec<_> = (0..OBJCG_SHEAF_MIN_SLOTS + 3)
        .map(|_| alloc(k, cpu, g, 8192))
        .collect();
    let before = held(k, a).1;
    for &p in &big {
        free(k, cpu, g, p);
    }
    let kept = held(k, a).1 - before;
    assert!(
        kept > OBJCG_SHEAF_MIN_SLOTS / 2 && kept <= OBJCG_SHEAF_MIN_SLOTS,
        "{kept}"
    );
    // Thread exit (the area going back) drains them.
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(held(k, a).1, 0);
    assert_eq!(g.usage(), 0);
}

#[test]
fn another_groups_allocation_flushes_the_sheaves_and_its_objects_are_not_kept() {
    let k = kmem(2, config(1, 0));
    let (g, h) = (group(k, "g"), group(k, "h"));
    let (a, cpu) = own_area(k);
    let pg = alloc(k, cpu, g, 64);
    let ph = alloc(k, cpu, h, 64);
    free(k, cpu, g, pg);
    assert_eq!(held(k, a), (g.objcg() as *const ObjCgroup, 1));
    // An object of h does not join g's sheaves: it is uncharged at once.
    free(k, cpu, h, ph);
    assert_eq!(held(k, a), (g.objcg() as *const ObjCgroup, 1));
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!(slab_bytes(h), 0);
    assert_eq!(slab_bytes(g), 64);
    // h allocating on this CPU gives g's objects back first (and g's reference).
    let q = alloc(k, cpu, h, 64);
    assert_eq!(held(k, a), (std::ptr::null(), 0));
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!(slab_bytes(g), 0);
    assert_eq!(slab_bytes(h), 64);
    // Empty sheaves take the next freed object's group.
    free(k, cpu, h, q);
    assert_eq!(held(k, a), (h.objcg() as *const ObjCgroup, 1));
    // A free outside any group (or in another one) uncharges at once.
    let r = alloc(k, cpu, h, 64);
    let o = alloc(k, cpu, h, 64);
    // (What a refill left waiting stays charged to h.)
    let waiting = held(k, a).1;
    // SAFETY: ours.
    assert!(unsafe { k.kfree(cpu, r) });
    free(k, cpu, g, o);
    assert_eq!(held(k, a).1, waiting);
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!(slab_bytes(h), (waiting * 64) as isize);
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!((g.usage(), h.usage()), (0, 0));
}

#[test]
fn a_double_free_on_top_of_an_objcg_sheaf_is_refused_and_reported() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "df");
    let (a, cpu) = own_area(k);
    let p = alloc(k, cpu, g, 48);
    assert!(free(k, cpu, g, p));
    assert!(!free(k, cpu, g, p), "the bug under test: refused");
    let log = k.pages.platform().take_log();
    assert!(
        log.contains("BUG kmalloc-cg-64 (Not tainted): Object already free"),
        "{log}"
    );
    assert_eq!(held(k, a).1, 1);
    // Handed out once: the next allocations are all distinct.
    let again: Vec<_> = (0..4).map(|_| alloc(k, cpu, g, 48)).collect();
    assert_eq!(again.iter().copied().collect::<HashSet<_>>().len(), 4);
    assert_eq!(again.iter().filter(|&&q| q == p).count(), 1);
    for q in again {
        free(k, cpu, g, q);
    }
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(g.usage(), 0);
}

#[test]
fn a_double_free_on_a_full_objcg_sheaf_or_behind_its_back_is_never_freed_twice() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "df-full");
    let (a, cpu) = own_area(k);
    // A full sheaf: the top object freed again is still caught.
    let objs: Vec<_> = (0..OBJCG_SHEAF_SLOTS)
        .map(|_| alloc(k, cpu, g, 32))
        .collect();
    // Empty sheaves first (a refill may have left objects waiting).
    k.memcg().memcg_drain_stock(cpu.unwrap());
    for &p in &objs {
        assert!(free(k, cpu, g, p));
    }
    assert_eq!(held(k, a).1, OBJCG_SHEAF_SLOTS);
    let top = *objs.last().unwrap();
    assert!(!free(k, cpu, g, top), "refused");
    assert!(k
        .pages
        .platform()
        .take_log()
        .contains("Object already free"));
    // Below the top of a full sheaf too: the object is neither given back with the
    // sheaf's older half nor kept twice.
    for p in [objs[1], objs[12]] {
        assert!(!free(k, cpu, g, p), "refused");
        assert!(k
            .pages
            .platform()
            .take_log()
            .contains("Object already free"));
        assert_eq!(held(k, a).1, OBJCG_SHEAF_SLOTS);
    }
    // A free outside the group of an object waiting in the sheaf (the bug) frees it
    // through the regular path; the sheaf's flush finds it uncharged, reports it and
    // leaves it alone.
    let victim = objs[3];
    // SAFETY: the bug under test (the object is the sheaf's).
    assert!(unsafe { k.kfree(cpu, victim) });
    k.memcg().memcg_drain_stock(cpu.unwrap());
    let log = k.pages.platform().take_log();
    assert!(
        log.contains("BUG kmalloc-cg-32 (Not tainted): Object already free"),
        "{log}"
    );
    // Every object of the class is handed out at most once.
    handed_out_once(k, cpu, g);
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(g.usage(), 0);
}

/// The inline free of a thread whose fast word is `a`'s charged area (the heap's
/// thread running charged to `g`): `p` onto its class's inbox, or false.
fn inline_free(k: &K, a: &CpuArea, g: &MemCgroup, p: *mut u8) -> bool {
    // SAFETY: the test owns `a`, so its charged area is the test's too.
    let c = unsafe { CpuRef::new(a) };
    let w = k.memcg().charged_fast_word(c, g.objcg());
    assert_ne!(w, 0, "a charged area for g");
    // SAFETY: the charged area of an area the caller owns; `p` is the caller's.
    unsafe { k.kfree_fast(InlineArea::from_word(w), p) }
}

#[test]
fn full_objcg_sheaves_hold_their_stated_bound_and_no_more() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "bound");
    let (a, cpu) = own_area(k);
    // As many objects of every class as its sheaves hold, freed after a drain (so
    // that no refill's objects wait): a kept sheaf's worth onto the kept sheaves (the
    // charged free), and for the classes with inboxes (a kept sheaf of 16 objects or
    // more) an inbox's worth onto the inboxes (the inline free into the charged area).
    // Every sheaf is full, and that is the bound.
    let sizes = kmem_core::kmalloc::KMALLOC_SIZES;
    let cap =
        |size: usize| (OBJCG_SHEAF_BYTES / size).clamp(OBJCG_SHEAF_MIN_SLOTS, OBJCG_SHEAF_SLOTS);
    let sheaves = |size: usize| if cap(size) >= 16 { 2 } else { 1 };
    let objs: Vec<_> = sizes
        .iter()
        .flat_map(|&size| (0..sheaves(size) * cap(size)).map(move |_| size))
        .map(|size| (size, alloc(k, cpu, g, size)))
        .collect();
    k.memcg().memcg_drain_stock(cpu.unwrap());
    let mut n = std::collections::HashMap::new();
    for &(size, p) in &objs {
        let seen = n.entry(size).or_insert(0);
        *seen += 1;
        if *seen <= cap(size) {
            assert!(free(k, cpu, g, p));
        } else {
            assert!(inline_free(k, a, g, p), "room in the inbox of {size}");
        }
    }
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!(slab_bytes(g), OBJCG_SHEAVES_MAX_BYTES as isize);
    assert_eq!(held(k, a).1, objs.len());
    // More frees of every class keep it there: a full sheaf gives half back first,
    // and the inline free finds a full inbox without room.
    let more: Vec<_> = sizes
        .iter()
        .flat_map(|&size| (0..cap(size) + 1).map(move |_| size))
        .map(|size| alloc(k, cpu, g, size))
        .collect();
    for &p in &more {
        if !inline_free(k, a, g, p) {
            assert!(free(k, cpu, g, p));
        }
    }
    // A class without an inbox refuses every inline free (its charged line is zero
    // in the charged area too); the charged free keeps the object.
    let big = alloc(k, cpu, g, 4096);
    assert!(!inline_free(k, a, g, big));
    assert!(free(k, cpu, g, big));
    k.memcg().memcg_flush_stats(cpu);
    assert!(slab_bytes(g) <= OBJCG_SHEAVES_MAX_BYTES as isize);
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(held(k, a).1, 0);
    assert_eq!(g.usage(), 0);
}

#[test]
fn objects_waiting_in_objcg_sheaves_go_back_when_the_group_hits_its_limit() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "limited");
    let max = 64 * 1024;
    g.set_max(max);
    let (a, cpu) = own_area(k);
    // Fill the limit with 1 KiB objects, then free some: they wait, charged.
    let mut held_objs = Vec::new();
    while let Some(p) = k.memcg().kmalloc_objcg(cpu, 1024, Gfp::KERNEL, g.objcg()) {
        held_objs.push(p.as_ptr());
    }
    for p in held_objs.drain(..OBJCG_SHEAF_MIN_SLOTS + 2) {
        free(k, cpu, g, p);
    }
    assert_eq!(
        held(k, a).1,
        OBJCG_SHEAF_MIN_SLOTS,
        "four 1 KiB objects wait"
    );
    // Another class needs the bytes they hold: the charge at the limit reclaims them.
    let small: Vec<_> = (0..32)
        .map(|_| {
            k.memcg()
                .kmalloc_objcg(cpu, 64, Gfp::KERNEL, g.objcg())
                .expect("room after reclaim")
                .as_ptr()
        })
        .collect();
    assert!(g.usage() <= max);
    assert_eq!(held(k, a).1, 0, "reclaimed");
    for p in small.into_iter().chain(held_objs) {
        free(k, cpu, g, p);
    }
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(g.usage(), 0);
}

#[test]
fn debug_caches_and_the_cpu_slab_design_charge_every_object() {
    fn red_zone_all(_: &str) -> SlabFlags {
        SlabFlags::RED_ZONE
    }
    for k in [
        kmem_with(2, config(1, 0), Some(red_zone_all)),
        kmem_cpu_slab(2, config(1, 0)),
    ] {
        let g = group(k, "percall");
        let (a, cpu) = own_area(k);
        let p = alloc(k, cpu, g, 32);
        free(k, cpu, g, p);
        assert_eq!(held(k, a).1, 0);
        k.memcg().memcg_flush_stats(cpu);
        assert_eq!(slab_bytes(g), 0);
        // SAFETY: owned; not used afterwards.
        unsafe { k.pages.cpu_area_put(a) };
    }
}

#[test]
fn zeroed_allocations_from_an_objcg_sheaf_are_zeroed() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "zero");
    let (a, cpu) = own_area(k);
    let p = alloc(k, cpu, g, 96);
    // SAFETY: ours, 96 bytes.
    unsafe { std::ptr::write_bytes(p, 0xa5, 96) };
    free(k, cpu, g, p);
    let q = k
        .memcg()
        .kmalloc_objcg(cpu, 96, Gfp::KERNEL | Gfp::ZERO, g.objcg())
        .unwrap()
        .as_ptr();
    assert_eq!(q, p, "from the sheaf");
    // SAFETY: 96 bytes of ours.
    assert!(unsafe { std::slice::from_raw_parts(q, 96) }
        .iter()
        .all(|&b| b == 0));
    free(k, cpu, g, q);
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
}

#[test]
fn a_pointer_inside_a_charged_object_or_past_the_last_one_is_never_kept() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "inner");
    let (a, cpu) = own_area(k);
    // 96 B: a class whose size is no power of two, so a slab's end holds no object.
    let p = alloc(k, cpu, g, 96);
    for q in [p.wrapping_add(8), p.wrapping_add(95)] {
        assert!(!free(k, cpu, g, q), "an interior pointer is refused");
        let log = k.pages.platform().take_log();
        assert!(log.contains("Invalid object pointer"), "{log}");
    }
    // The slab's tail (past its last object) is no object either.
    let cfg = k.kmalloc_cache(96, Gfp::ACCOUNT).unwrap().config();
    assert_eq!(cfg.size, 96);
    let slab_bytes = cfg.slab_bytes();
    let base = p as usize & !(slab_bytes - 1);
    let tail = base + cfg.objects * 96;
    assert!(tail < base + slab_bytes);
    assert!(!free(k, cpu, g, tail as *mut u8));
    assert!(k
        .pages
        .platform()
        .take_log()
        .contains("Invalid object pointer"));
    assert_eq!(held(k, a).1, 0, "nothing was kept");
    // The object itself is still charged, and frees as usual.
    assert!(g.usage() > 0);
    assert!(free(k, cpu, g, p));
    assert_eq!(held(k, a).1, 1);
    k.memcg().memcg_drain_stock(cpu.unwrap());
    assert_eq!(g.usage(), 0);
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
}

#[test]
fn a_run_of_charged_allocations_is_charged_a_refill_at_a_time() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "refill");
    let (a, cpu) = own_area(k);
    // The first charged allocation finds the stock empty: charged alone (a page of
    // bytes goes into the stock). The second refills the class's sheaf from those
    // bytes: three quarters of a sheaf (the class has an inbox) allocated, recorded
    // and charged at once, one handed out.
    let first = alloc(k, cpu, g, 32);
    assert_eq!(held(k, a).1, 0);
    let second = alloc(k, cpu, g, 32);
    let class = KMALLOC_SIZES.iter().position(|&s| s == 32).unwrap();
    let refill = OBJCG_SHEAF_REFILL[class];
    assert_eq!(refill, OBJCG_SHEAF_SLOTS * 3 / 4);
    assert_eq!(held(k, a), (g.objcg() as *const ObjCgroup, refill - 1));
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!(slab_bytes(g), ((2 + refill - 1) * 32) as isize);
    // The run goes on from the sheaf, a refill at a time; every object distinct and
    // charged once.
    let mut objs = vec![first, second];
    objs.extend((0..200).map(|_| alloc(k, cpu, g, 32)));
    assert_eq!(
        objs.iter().copied().collect::<HashSet<_>>().len(),
        objs.len()
    );
    let waiting = held(k, a).1;
    assert!(waiting < refill);
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!(slab_bytes(g), ((objs.len() + waiting) * 32) as isize);
    for &p in &objs {
        free(k, cpu, g, p);
    }
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(held(k, a).1, 0);
    k.memcg().memcg_flush_stats(None);
    assert_eq!(slab_bytes(g), 0);
    assert_eq!(g.usage(), 0);
}

#[test]
fn the_accounted_kmalloc_caches_and_no_others_have_an_objcg_sheaf_class() {
    let k = kmem(2, config(1, 0));
    for (i, &size) in KMALLOC_SIZES.iter().enumerate() {
        let cg = k.kmalloc_cache(size, Gfp::KERNEL | Gfp::ACCOUNT).unwrap();
        assert_eq!(cg.config().objcg_class(), Some(i), "{}", cg.name());
        let plain = k.kmalloc_cache(size, Gfp::KERNEL).unwrap();
        assert_eq!(plain.config().objcg_class(), None, "{}", plain.name());
    }
    // The CPU-slab design charges every object: no cache has objcg sheaves.
    let c = kmem_cpu_slab(2, config(1, 0));
    for &size in &KMALLOC_SIZES {
        let cg = c.kmalloc_cache(size, Gfp::KERNEL | Gfp::ACCOUNT).unwrap();
        assert_eq!(cg.config().objcg_class(), None, "{}", cg.name());
    }
}

/// Whether `p`'s slab is marked as having handed out an object without a charge.
fn marked_uncharged(k: &K, p: *mut u8) -> bool {
    let head = k.pages.virt_to_slab_used(p).unwrap();
    head.flags()
        .contains(kmem_core::page::PageFlags::SLAB_UNCHARGED)
}

/// A slab whose charged objects are all one group's lets that group's take-in skip
/// their vector slots; an object of the same slab allocated with `__GFP_ACCOUNT`
/// outside any group (so never charged) marks the slab, and a charged thread that
/// frees it never keeps it as if charged: it is freed the regular way, nothing is
/// reported, and the group's usage ends at zero.
#[test]
fn an_uncharged_object_of_a_slab_charged_to_one_group_is_never_kept_charged() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "sole");
    let (a, cpu) = own_area(k);
    let slab = |p: *mut u8| cg32_slab(k, p);
    // Charged objects, then (from the same CPU sheaf, so the same slab) one
    // allocated uncharged; the charged ones alone leave the slab unmarked.
    let charged: Vec<_> = (0..4).map(|_| alloc(k, cpu, g, 32)).collect();
    assert!(!marked_uncharged(k, charged[0]));
    k.memcg().memcg_drain_stock(cpu.unwrap());
    let u = k
        .kmalloc(cpu, 32, Gfp::KERNEL | Gfp::ACCOUNT)
        .unwrap()
        .as_ptr();
    assert_eq!(slab(u), slab(charged[0]), "the test needs one slab");
    assert!(marked_uncharged(k, u));
    // All of them onto the inbox by the group's inline free, then a charged
    // allocation takes the inbox in.
    for &p in charged.iter().chain([&u]) {
        assert!(inline_free(k, a, g, p), "room in the inbox");
    }
    let again = alloc(k, cpu, g, 32);
    assert!(charged.contains(&again), "a kept object comes back");
    free(k, cpu, g, again);
    k.memcg().memcg_drain_stock(cpu.unwrap());
    let log = k.pages.platform().take_log();
    assert!(!log.contains("Object already free"), "{log}");
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!(slab_bytes(g), 0);
    assert_eq!(g.usage(), 0);
    // The uncharged object went back to its slab once: handed out again at most once.
    handed_out_once(k, cpu, g);
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!(g.usage(), 0);
}

/// Objects of one slab charged to two groups: a thread charged to the first group
/// whose inbox receives an object of the second keeps none of the second's, though
/// the first group charged the slab's first object (the slab is theirs no longer).
#[test]
fn a_slab_charged_to_two_groups_is_checked_object_by_object() {
    let k = kmem(2, config(1, 0));
    let (g, h) = (group(k, "first"), group(k, "second"));
    let (a, cpu) = own_area(k);
    // g charges first (its refill takes objects from the CPU's sheaf), then h, whose
    // allocation gives g's waiting objects back and refills from the same sheaf.
    let pg: Vec<_> = (0..4).map(|_| alloc(k, cpu, g, 32)).collect();
    let slab = |p: *mut u8| cg32_slab(k, p);
    let mut others = Vec::new();
    let ph = loop {
        let p = alloc(k, cpu, h, 32);
        if slab(p) == slab(pg[0]) {
            break p;
        }
        assert!(others.len() < 4096, "no object of h in g's slab");
        others.push(p);
    };
    for p in others {
        // SAFETY: ours; a free outside any group (uncharged at once).
        assert!(unsafe { k.kfree(cpu, p) });
    }
    k.memcg().memcg_drain_stock(cpu.unwrap());
    // g's thread frees its own objects and h's onto its inbox; its next allocation
    // takes the inbox in.
    for &p in pg.iter().chain([&ph]) {
        assert!(inline_free(k, a, g, p), "room in the inbox");
    }
    let again = alloc(k, cpu, g, 32);
    assert!(pg.contains(&again));
    // h's object was uncharged from h, not kept for g.
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!(slab_bytes(h), 0);
    free(k, cpu, g, again);
    k.memcg().memcg_drain_stock(cpu.unwrap());
    let log = k.pages.platform().take_log();
    assert!(!log.contains("Object already free"), "{log}");
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!((g.usage(), h.usage()), (0, 0));
}

/// Every path that hands out an object of an accounted kmalloc cache without charging
/// it marks the object's slab; the inline pops refuse such a cache (so its uncharged
/// allocations take a path that marks), and a charged allocation marks nothing.
#[test]
fn every_uncharged_allocation_path_marks_its_slab() {
    type Path = fn(&'static K, Option<CpuRef<'static>>, &KmemCache) -> *mut u8;
    let paths: [(&str, Path); 5] = [
        ("kmalloc", |k, cpu, _| {
            k.kmalloc(cpu, 32, Gfp::KERNEL | Gfp::ACCOUNT)
                .unwrap()
                .as_ptr()
        }),
        ("kmem_cache_alloc", |k, cpu, s| {
            k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap().as_ptr()
        }),
        ("kmem_cache_alloc_node", |k, cpu, s| {
            k.slub()
                .alloc_node(cpu, s, Gfp::KERNEL, Some(0))
                .unwrap()
                .as_ptr()
        }),
        ("kmem_cache_alloc_bulk", |k, cpu, s| {
            let mut out = [std::ptr::null_mut(); 3];
            assert_eq!(k.slub().alloc_bulk(cpu, s, Gfp::KERNEL, &mut out), 3);
            out[0]
        }),
        ("kmem_cache_alloc_from_sheaf", |k, cpu, s| {
            let sheaf = k.slub().prefill_sheaf(cpu, s, Gfp::KERNEL, 2).unwrap();
            // SAFETY: prefilled for `s` just above, returned once below.
            unsafe {
                let p = k.slub().alloc_from_sheaf(s, Gfp::KERNEL, sheaf).unwrap();
                k.slub().return_sheaf(cpu, s, sheaf);
                p.as_ptr()
            }
        }),
    ];
    for (name, path) in paths {
        let k = kmem(2, config(1, 0));
        let g = group(k, "charged");
        let (a, cpu) = own_area(k);
        let s = k.kmalloc_cache(32, Gfp::KERNEL | Gfp::ACCOUNT).unwrap();
        // Charged first: the slab stays unmarked.
        let charged = alloc(k, cpu, g, 32);
        assert!(
            !marked_uncharged(k, charged),
            "{name}: a charged allocation"
        );
        // The inline pops leave the cache to the regular paths.
        assert!(k.slub().alloc_fast(cpu.unwrap(), s, Gfp::KERNEL).is_none());
        assert!(k.slub().alloc_sheaf_slow(cpu.unwrap(), s).is_none());
        let p = path(k, cpu, s);
        assert!(marked_uncharged(k, p), "{name}");
        free(k, cpu, g, charged);
        // SAFETY: owned; not used afterwards.
        unsafe { k.pages.cpu_area_put(a) };
    }
}

/// An accounted cache of 64 B objects of its own (no objcg sheaves: its charges and
/// frees go the regular way), for the tests of a slab's sole-objcg word.
struct OwnCache {
    k: &'static K,
    cpu: Option<CpuRef<'static>>,
    s: &'static KmemCache,
}

impl OwnCache {
    fn new(k: &'static K, cpu: Option<CpuRef<'static>>, name: &str) -> Self {
        let s = k
            .kmem_cache_create(cpu, name, 64, 8, SlabFlags::ACCOUNT, None)
            .unwrap();
        Self { k, cpu, s }
    }

    /// An object charged to `g`.
    fn alloc(&self, g: &MemCgroup) -> NonNull<u8> {
        self.k
            .memcg()
            .kmem_cache_alloc_objcg(self.cpu, self.s, Gfp::KERNEL, g.objcg())
            .unwrap()
    }

    /// The head page of `p`'s slab.
    fn head(&self, p: NonNull<u8>) -> &'static Page {
        self.k.pages.virt_to_slab_used(p.as_ptr()).unwrap()
    }

    /// `objs` freed (uncharged), then the CPU's sheaves and the barn flushed, so that
    /// their slabs hold them again.
    fn free_and_flush(&self, objs: &[NonNull<u8>]) {
        for &p in objs {
            // SAFETY: the tests free their own objects, once.
            assert!(unsafe { self.k.kmem_cache_free(self.cpu, self.s, p) });
        }
        self.k.slub().flush_cpu_cache(self.cpu.unwrap(), self.s);
        self.k.slub().shrink_barns(self.cpu, self.s);
    }

    /// `g`'s allocations until one comes from the slab headed by `slab` (the last).
    fn alloc_until(&self, g: &MemCgroup, slab: &Page) -> Vec<NonNull<u8>> {
        let mut got = Vec::new();
        loop {
            let p = self.alloc(g);
            got.push(p);
            if std::ptr::eq(self.head(p), slab) {
                return got;
            }
            assert!(got.len() < 4096, "the slab serves again");
        }
    }
}

/// A slab's sole-objcg word (`Page::memcg_sole_id`, what a charged take-in trusts)
/// names the first group charged an object of it, turns mixed (1) at a charge to a
/// second group and stays so while the slab is in use; emptied, the slab starts
/// over when it serves again, and the next group's charges make it that group's
/// alone. Fails if an emptied slab kept its word (a slab once shared would never be
/// trusted again) or if a second group's charge left the first group's id.
#[test]
fn a_slabs_sole_objcg_word_names_its_one_group_and_starts_over_when_emptied() {
    let k = kmem(2, config(1, 0));
    let (g, h) = (group(k, "first"), group(k, "second"));
    assert!(g.objcg().id() > 2 && h.objcg().id() > g.objcg().id());
    assert_eq!(k.memcg().root_mem_cgroup().objcg().id(), 2);
    let (a, cpu) = own_area(k);
    let c = OwnCache::new(k, cpu, "sole-word");
    let mut objs: Vec<_> = (0..4).map(|_| c.alloc(g)).collect();
    let slab = c.head(objs[0]);
    assert!(
        objs.iter().all(|&p| std::ptr::eq(c.head(p), slab)),
        "one slab"
    );
    assert_eq!(slab.memcg_sole_id(), g.objcg().id());
    objs.push(c.alloc(h));
    assert!(std::ptr::eq(c.head(objs[4]), slab), "the same slab");
    assert_eq!(slab.memcg_sole_id(), 1);
    objs.push(c.alloc(g));
    assert_eq!(slab.memcg_sole_id(), 1, "mixed stays mixed");
    // Every object back: the slab is empty; allocations take it again (after the
    // other slab the first refill took from, maybe).
    c.free_and_flush(&objs);
    let again = c.alloc_until(h, slab);
    assert_eq!(slab.memcg_sole_id(), h.objcg().id());
    c.free_and_flush(&again);
    k.memcg().memcg_drain_stock(cpu.unwrap());
    assert_eq!((g.usage(), h.usage()), (0, 0));
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
}

/// A refill that takes objects from a slab with an object still in use leaves its
/// sole-objcg word alone: a slab mixed between two groups stays mixed while one of
/// the first group's objects is out, however many of its free objects the first group
/// takes again. Fails if the word started over at every refill (the take-in would then
/// trust the slab for the first group while the second's object could still be freed
/// into its inbox).
#[test]
fn a_slab_with_an_object_in_use_keeps_its_sole_objcg_word_through_refills() {
    let k = kmem(2, config(1, 0));
    let (g, h) = (group(k, "first"), group(k, "second"));
    let (a, cpu) = own_area(k);
    let c = OwnCache::new(k, cpu, "sole-kept");
    let out = c.alloc(g);
    let slab = c.head(out);
    let mut objs = vec![c.alloc(h)];
    assert!(std::ptr::eq(c.head(objs[0]), slab), "the same slab");
    assert_eq!(slab.memcg_sole_id(), 1);
    objs.extend((0..3).map(|_| c.alloc(g)));
    // All back but `out`: the slab goes back to its node, one object in use.
    c.free_and_flush(&objs);
    let again = c.alloc_until(g, slab);
    assert_eq!(slab.memcg_sole_id(), 1, "still mixed: `out` is in use");
    c.free_and_flush(&again);
    c.free_and_flush(&[out]);
    k.memcg().memcg_drain_stock(cpu.unwrap());
    assert_eq!((g.usage(), h.usage()), (0, 0));
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
}

/// An accounted kmalloc slab marked by an uncharged allocation keeps the mark while
/// that object is out, through refills that take the slab's free objects for charged
/// allocations, and loses it once the slab is empty and serves again (its objects may
/// then all be one group's, and that group's take-in may trust it).
#[test]
fn an_emptied_slab_serves_again_without_its_uncharged_mark() {
    let k = kmem(2, config(1, 0));
    let g = group(k, "charged");
    let (a, cpu) = own_area(k);
    let s = k.kmalloc_cache(32, Gfp::KERNEL | Gfp::ACCOUNT).unwrap();
    let slab = |p: *mut u8| cg32_slab(k, p);
    // Two uncharged objects of one slab (a CPU sheaf's consecutive pops).
    let u = k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap().as_ptr();
    let v = k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap().as_ptr();
    assert_eq!(slab(u), slab(v), "the test needs one slab");
    assert!(marked_uncharged(k, u));
    // Charged allocations (which never mark) until one comes from `want`'s slab.
    let charged_until = |want: usize| {
        let mut got = Vec::new();
        loop {
            let p = alloc(k, cpu, g, 32);
            got.push(p);
            if slab(p) == want {
                return got;
            }
            assert!(got.len() < 4096, "the slab serves again");
        }
    };
    // Everything back to the slabs: the CPU's sheaves, the barn, and the group's
    // objects waiting charged in its objcg sheaves (the stock's drain).
    let give_back = |uncharged: &[*mut u8], charged: &[*mut u8]| {
        for &p in uncharged {
            // SAFETY: allocated above, freed once.
            assert!(unsafe { k.kfree(cpu, p) });
        }
        for &p in charged {
            free(k, cpu, g, p);
        }
        k.memcg().memcg_drain_stock(cpu.unwrap());
        k.slub().flush_cpu_cache(cpu.unwrap(), s);
        k.slub().shrink_barns(cpu, s);
    };
    // `u` back, `v` still out: the slab serves again from its node, still marked.
    give_back(&[u], &[]);
    let got = charged_until(slab(v));
    assert!(marked_uncharged(k, v), "`v` is still out");
    give_back(&[v], &got);
    // Now empty: the slab serves again, unmarked.
    let got = charged_until(slab(v));
    assert!(!marked_uncharged(k, v), "empty, then charged only");
    give_back(&[], &got);
    assert_eq!(g.usage(), 0);
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
}
