#![allow(clippy::unnecessary_literal_unwrap)] // `cpu` is an Option on purpose: APIs take one.
//! Objcg sheaves through the public API of `Kmem`: charged kmalloc objects freed by
//! their group's thread wait, still charged, for its next charged allocation; they go
//! back (uncharged) when the stock drains, when another group allocates, at the
//! limit, and never to two owners.

mod common;

use common::objcg::*;
use common::{config, kmem, kmem_cpu_slab, kmem_with};
use kmem_core::kmalloc::KMALLOC_SIZES;
use kmem_core::memcontrol::{
    ObjCgroup, OBJCG_SHEAF_BYTES, OBJCG_SHEAF_MIN_SLOTS, OBJCG_SHEAF_REFILL, OBJCG_SHEAF_SLOTS,
    OBJCG_SHEAVES_MAX_BYTES,
};
use kmem_core::{Gfp, SlabFlags};
use std::collections::HashSet;

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
