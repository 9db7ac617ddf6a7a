#![allow(clippy::unnecessary_literal_unwrap)] // `cpu` is an Option on purpose: APIs take one.
//! Trusted slabs through the public API of `Kmem`: a charged thread's take-in reads no
//! objcg vector slot for the objects of a slab whose charged objects are all its
//! group's (the slab's sole-objcg word, `Page::memcg_sole_id`) and none of which went
//! out uncharged (`PageFlags::SLAB_UNCHARGED`); the word and the mark, how they move
//! and when they start over.

mod common;

use common::objcg::*;
use common::{config, kmem};
use kmem_core::memcontrol::MemCgroup;
use kmem_core::page::Page;
use kmem_core::{CpuRef, Gfp, KmemCache, SlabFlags};
use std::ptr::NonNull;

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
        until_one_is(|| self.alloc(g), |p| std::ptr::eq(self.head(p), slab))
    }
}

/// Objects from `next` until one is `wanted` (the last of those returned): a slab
/// that serves again, reached within 4096 allocations.
fn until_one_is<T: Copy>(mut next: impl FnMut() -> T, wanted: impl Fn(T) -> bool) -> Vec<T> {
    let mut got = Vec::new();
    loop {
        let p = next();
        got.push(p);
        if wanted(p) {
            return got;
        }
        assert!(got.len() < 4096, "the slab serves again");
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
    let charged_until = |want: usize| until_one_is(|| alloc(k, cpu, g, 32), |p| slab(p) == want);
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

/// A take-in that checks its inbox two objects at a time never lets an object of
/// another slab through with one of the trusted slab's: an inbox holding three of a
/// group's objects from a slab only it charged, then one of another group's from
/// another slab, is not swapped in whole; the other group's object is uncharged from
/// it and never handed to the first. Fails if the pair's test looked at its first
/// object only.
#[test]
fn a_trusted_slabs_objects_do_not_carry_another_slabs_through_the_take_in() {
    let k = kmem(2, config(1, 0));
    let (g, h) = (group(k, "first"), group(k, "second"));
    let (a, cpu) = own_area(k);
    let slab = |p: *mut u8| cg32_slab(k, p);
    let word = |p: *mut u8| {
        k.pages
            .virt_to_slab_used(slab(p) as *const u8)
            .unwrap()
            .memcg_sole_id()
    };
    // Enough of g's objects to fill slabs of its own, then some of h's.
    let gs: Vec<_> = (0..512).map(|_| alloc(k, cpu, g, 32)).collect();
    let hs: Vec<_> = (0..16).map(|_| alloc(k, cpu, h, 32)).collect();
    // Three of g's objects from a slab only g charged, one of h's from another slab.
    let trusted: Vec<_> = gs
        .iter()
        .copied()
        .filter(|&p| word(p) == g.objcg().id())
        .collect();
    let mine: Vec<_> = trusted
        .iter()
        .copied()
        .filter(|&p| slab(p) == slab(trusted[0]))
        .take(3)
        .collect();
    assert_eq!(mine.len(), 3, "a slab of g's own");
    let theirs = *hs
        .iter()
        .find(|&&p| slab(p) != slab(mine[0]))
        .expect("an object of h's in another slab");
    // g's kept sheaf emptied (what its refills left waiting, allocated), so that its
    // next allocation takes the inbox in.
    let mut waiting = vec![alloc(k, cpu, g, 32)];
    while held(k, a).1 > 0 {
        waiting.push(alloc(k, cpu, g, 32));
        assert!(waiting.len() < 4096, "the kept sheaf empties");
    }
    assert!(std::ptr::eq(held(k, a).0, g.objcg()) || held(k, a).0.is_null());
    for &p in mine.iter().chain([&theirs]) {
        assert!(inline_free(k, a, g, p), "room in the inbox");
    }
    let again = alloc(k, cpu, g, 32);
    assert!(mine.contains(&again), "one of g's own comes back");
    // h's object went back uncharged from h: h's statistics count the other 15.
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!(slab_bytes(h), 15 * 32);
    // Everything else freed by its own group (the two of `mine` the take-in kept
    // wait charged to g, as a free of them would have left them).
    for &p in gs.iter().filter(|p| !mine.contains(p)).chain(&waiting) {
        free(k, cpu, g, p);
    }
    free(k, cpu, g, again);
    for &p in hs.iter().filter(|&&p| p != theirs) {
        free(k, cpu, h, p);
    }
    k.memcg().memcg_drain_stock(cpu.unwrap());
    let log = k.pages.platform().take_log();
    assert!(!log.contains("Object already free"), "{log}");
    k.memcg().memcg_flush_stats(cpu);
    assert_eq!((slab_bytes(g), slab_bytes(h)), (0, 0));
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(a) };
    assert_eq!((g.usage(), h.usage()), (0, 0));
}
