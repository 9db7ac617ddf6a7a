//! A node's kept empty slabs (sheaves design, `slab/empty.rs`): a slab the frees leave
//! empty past `min_partial` stays a slab of its cache, the next refills take it again
//! without the page allocator, the decay gives back what sat unused a whole interval,
//! shrinking and destruction give back all, every object stays in exactly one place,
//! and a free into a kept slab is a double free.

mod common;

use common::{check_census, config, kmem, kmem_with_decay, own_area, slow_path_traffic, stat, K};
use kmem_core::percpu::InlineArea;
use kmem_core::slab::SlubStat;
use kmem_core::vmstat::VmEvent;
use kmem_core::{CpuRef, Gfp, KmemCache, SlabFlags};
use std::collections::HashSet;
use std::ptr::NonNull;

/// A cache of 1 KiB objects, and `slabs` slabs' worth of its objects allocated on `c`.
fn cache_with_objects(
    k: &'static K,
    c: Option<CpuRef<'_>>,
    name: &'static str,
    slabs: usize,
) -> (&'static KmemCache, Vec<NonNull<u8>>) {
    let s = k
        .kmem_cache_create(c, name, 1024, 8, SlabFlags::empty(), None)
        .unwrap();
    let n = slabs * s.config().objects;
    let objs = (0..n)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    (s, objs)
}

/// Frees `objs` straight to their slabs (no CPU: no sheaf takes them).
fn free_to_slabs(k: &K, s: &KmemCache, objs: &[NonNull<u8>]) {
    for &p in objs {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.slub().free(None, s, p) });
    }
}

/// The sheaf tag of the page that holds `p` (a slab page).
fn sheaf_tag(k: &K, p: usize) -> u32 {
    k.pages
        .virt_to_slab_page(p as *const u8)
        .unwrap()
        .sheaf_tag() as u32
}

fn kept_objects(k: &K, s: &KmemCache, areas: &[CpuRef<'_>]) -> usize {
    k.slub().census(s, areas, |_| {}).in_empty_slabs
}

#[test]
fn an_emptied_slab_is_kept_and_the_next_refills_take_it_without_the_page_allocator() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let (s, objs) = cache_with_objects(k, c, "kept-1k", 24);
    let cfg = s.config();
    let slabs = s.nr_slabs(0);
    assert!(slabs >= 24, "{slabs} slabs");
    free_to_slabs(k, s, &objs);
    // Every slab is still one: `min_partial` of them on the partial list, the rest
    // kept; none went back to the page allocator.
    assert_eq!(s.nr_slabs(0), slabs, "no slab was discarded");
    // SAFETY: owned.
    let refs = [unsafe { CpuRef::new(a) }];
    let kept = kept_objects(k, s, &refs);
    assert!(
        kept >= (slabs - cfg.min_partial - 1) * cfg.objects,
        "kept {kept} objects of {slabs} slabs"
    );
    assert_eq!(kept % cfg.objects, 0, "whole slabs");
    // A kept slab's pages name no sheaf, head and tails (its objects span them all):
    // exactly the kept objects are on untagged pages.
    assert!(cfg.order > 0, "a slab with tail pages");
    let untagged = objs
        .iter()
        .filter(|p| sheaf_tag(k, p.as_ptr() as usize) == 0)
        .count();
    assert_eq!(
        untagged, kept,
        "the kept slabs' pages, and only theirs, are untagged"
    );
    assert_eq!(
        k.slub().kept_empty_pages(0),
        (kept / cfg.objects) << cfg.order,
        "the node's count of kept pages"
    );
    check_census(k, s, &refs, &HashSet::new());
    // The same number of objects again: from the partial slabs, then the kept ones,
    // taken as new slabs are; the page allocator gives nothing and no slab is made.
    let (made, free_pages) = (stat(k, s, SlubStat::AllocSlab), k.pages.nr_free_pages());
    let again: Vec<_> = (0..objs.len())
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    assert_eq!(stat(k, s, SlubStat::AllocSlab), made, "no new slab");
    assert_eq!(
        k.pages.nr_free_pages(),
        free_pages,
        "no page from the allocator"
    );
    assert_eq!(s.nr_slabs(0), slabs);
    let live: HashSet<usize> = again.iter().map(|p| p.as_ptr() as usize).collect();
    assert_eq!(live.len(), again.len(), "each object handed out once");
    check_census(k, s, &refs, &live);
    // Objects of a kept slab are usable memory (a fresh slab's handed out by address:
    // write them whole).
    for p in &again {
        // SAFETY: ours, `object_size` bytes.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0x5a, cfg.object_size) };
    }
    // A slab taken again names its cache's sheaves again, on every page (its objects'
    // frees take the inline path).
    let tag = sheaf_tag(k, again[0].as_ptr() as usize);
    assert_ne!(tag, 0);
    assert!(again
        .iter()
        .all(|p| sheaf_tag(k, p.as_ptr() as usize) == tag));
    free_to_slabs(k, s, &again);
    k.shrink_all(c);
    assert_eq!(s.nr_slabs(0), 0, "shrinking gives every kept slab back");
    assert_eq!(kept_objects(k, s, &[]), 0);
    assert_eq!(k.slub().kept_empty_pages(0), 0);
    assert!(k.pages.platform().take_log().is_empty());
}

#[test]
fn a_flush_that_empties_a_whole_slab_keeps_it_without_linking_its_objects() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    // 4 KiB objects: a sheaf holds a slab's worth (8), so that a full sheaf flushed
    // in the order of its frees is whole slabs, one run each.
    let s = k
        .kmem_cache_create(c, "whole-4k", 4096, 8, SlabFlags::empty(), None)
        .unwrap();
    let cfg = s.config();
    assert_eq!(cfg.sheaf_capacity % cfg.objects, 0, "{cfg:?}");
    let objs: Vec<_> = (0..32 * cfg.objects)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    const FILL: u8 = 0xa7;
    for p in &objs {
        // SAFETY: ours, `object_size` bytes.
        unsafe { std::ptr::write_bytes(p.as_ptr(), FILL, cfg.object_size) };
    }
    let flushes = stat(k, s, SlubStat::SheafFlush);
    // Through the CPU's sheaves: the barn takes a few full sheaves, the rest are
    // flushed, a run a slab.
    for &p in &objs {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.slub().free(c, s, p) });
    }
    assert!(
        stat(k, s, SlubStat::SheafFlush) > flushes,
        "sheaves were flushed"
    );
    // SAFETY: owned.
    let refs = [unsafe { CpuRef::new(a) }];
    let mut kept = HashSet::new();
    let census = k.slub().census(s, &refs, |o| {
        kept.insert(o);
    });
    assert!(
        census.in_empty_slabs >= 8 * cfg.objects,
        "{} objects kept",
        census.in_empty_slabs
    );
    // The kept slabs' objects were never linked: the free pointer word of each is
    // still what the program wrote (a kept slab's freelist is never read).
    let mut untouched = 0;
    for p in objs.iter().map(|p| p.as_ptr() as usize) {
        if sheaf_tag(k, p) != 0 {
            continue; // in a sheaf or the barn, not in a kept slab
        }
        // SAFETY: an object of a kept slab: mapped memory of ours that no one uses.
        let word = unsafe { ((p + cfg.offset) as *const usize).read() };
        assert_eq!(word, usize::from_ne_bytes([FILL; 8]), "{p:#x} was linked");
        untouched += 1;
    }
    assert_eq!(untouched, census.in_empty_slabs, "every kept object");
    check_census(k, s, &refs, &HashSet::new());
    // Taken again: every object handed out once, usable whole, and freed again.
    let again: Vec<_> = (0..objs.len())
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    let live: HashSet<usize> = again.iter().map(|p| p.as_ptr() as usize).collect();
    assert_eq!(live.len(), again.len(), "each object handed out once");
    check_census(k, s, &refs, &live);
    for p in &again {
        // SAFETY: ours, `object_size` bytes.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0x5a, cfg.object_size) };
    }
    free_to_slabs(k, s, &again);
    check_census(k, s, &refs, &HashSet::new());
    assert!(k.pages.platform().take_log().is_empty());
}

/// `slabs` slabs' worth of 1 KiB objects of a new cache, allocated straight from
/// the slabs (no CPU: no sheaf), each written whole with `fill`, grouped by slab.
fn slabs_of_objects(
    k: &'static K,
    c: Option<CpuRef<'_>>,
    name: &'static str,
    slabs: usize,
    fill: u8,
) -> (&'static KmemCache, Vec<Vec<usize>>) {
    let s = k
        .kmem_cache_create(c, name, 1024, 8, SlabFlags::empty(), None)
        .unwrap();
    let cfg = s.config();
    let mut by_slab: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for _ in 0..slabs * cfg.objects {
        let p = k.slub().alloc(None, s, Gfp::KERNEL).unwrap().as_ptr() as usize;
        // SAFETY: ours, `object_size` bytes.
        unsafe { std::ptr::write_bytes(p as *mut u8, fill, cfg.object_size) };
        by_slab.entry(slab_base(s, p)).or_default().push(p);
    }
    let groups: Vec<Vec<usize>> = by_slab.into_values().collect();
    assert!(groups.iter().all(|g| g.len() == cfg.objects), "whole slabs");
    (s, groups)
}

#[test]
fn a_flush_that_empties_a_partial_slab_keeps_it_without_linking_the_run() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    const FILL: u8 = 0x3c;
    let (s, groups) = slabs_of_objects(k, c, "emptied-1k", 24, FILL);
    let cfg = s.config();
    // A third of each slab's objects freed straight to it: every slab partial.
    let third = cfg.objects / 3;
    for g in &groups {
        for &p in &g[..third] {
            // SAFETY: ours, freed once.
            assert!(unsafe { k.slub().free(None, s, NonNull::new(p as *mut u8).unwrap()) });
        }
    }
    // The rest through the CPU's sheaves, slab after slab, then to the barn and from
    // there to the slabs: the runs that hold all of a slab's objects in use empty it.
    for g in &groups {
        for &p in &g[third..] {
            // SAFETY: ours, freed once.
            assert!(unsafe { k.slub().free(c, s, NonNull::new(p as *mut u8).unwrap()) });
        }
    }
    // SAFETY: owned.
    let refs = [unsafe { CpuRef::new(a) }];
    k.slub().flush_cpu_cache(refs[0], s);
    k.slub().shrink_barns(c, s);
    let kept = kept_objects(k, s, &refs);
    assert!(kept >= 12 * cfg.objects, "{kept} objects kept");
    // In the kept slabs, the objects freed by the flush's emptying runs were never
    // linked (the free pointer word is still the program's), the third freed first
    // was (a slab's freelist, then).
    let mut unlinked = 0;
    let mut linked_early = 0;
    for g in &groups {
        if sheaf_tag(k, g[0]) != 0 {
            continue; // not a kept slab
        }
        let word = |p: usize| {
            // SAFETY: an object of a kept slab: mapped memory of ours nobody uses.
            unsafe { ((p + cfg.offset) as *const usize).read() }
        };
        let fill = usize::from_ne_bytes([FILL; 8]);
        unlinked += g[third..].iter().filter(|&&p| word(p) == fill).count();
        linked_early += g[..third].iter().filter(|&&p| word(p) != fill).count();
    }
    assert!(
        unlinked >= kept / 2,
        "{unlinked} of the kept objects freed by emptying runs were left unlinked"
    );
    assert!(linked_early > 0);
    check_census(k, s, &refs, &HashSet::new());
    let again: HashSet<usize> = (0..groups.len() * cfg.objects)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap().as_ptr() as usize)
        .collect();
    assert_eq!(
        again.len(),
        groups.len() * cfg.objects,
        "each handed out once"
    );
    check_census(k, s, &refs, &again);
    assert!(k.pages.platform().take_log().is_empty());
}

#[test]
fn an_emptying_run_that_starts_at_the_freelist_s_head_is_a_double_free() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let (s, groups) = slabs_of_objects(k, c, "emptied-df-1k", 12, 0x11);
    let cfg = s.config();
    // Every slab but its last object freed straight to it (the last freed, the
    // freelist's head); in the last slab, that head freed again through the CPU,
    // then flushed: a run of one object, as many as the slab has in use.
    for g in &groups {
        for &p in &g[..cfg.objects - 1] {
            // SAFETY: ours, freed once.
            assert!(unsafe { k.slub().free(None, s, NonNull::new(p as *mut u8).unwrap()) });
        }
    }
    let g = groups.last().unwrap();
    let (head, live) = (g[cfg.objects - 2], g[cfg.objects - 1]);
    // SAFETY: the bug under test (the sheaf is empty: its top check does not see it).
    let _ = unsafe { k.slub().free(c, s, NonNull::new(head as *mut u8).unwrap()) };
    // SAFETY: owned.
    let refs = [unsafe { CpuRef::new(a) }];
    k.slub().flush_cpu_cache(refs[0], s);
    k.slub().shrink_barns(c, s);
    let log = k.pages.platform().take_log();
    assert!(log.contains("Object already free"), "{log}");
    // The slab was not kept as empty: its live object is never handed out again.
    let got: HashSet<usize> = (0..groups.len() * cfg.objects)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap().as_ptr() as usize)
        .collect();
    assert!(!got.contains(&live), "the live object handed out twice");
}

#[test]
fn the_decay_gives_back_the_slabs_kept_unused_for_a_whole_interval() {
    // A decay interval the test's clock never reaches: only the calls below decay.
    let k = kmem_with_decay(u64::MAX / 2);
    let (a, c) = own_area(k);
    let (s, objs) = cache_with_objects(k, c, "decay-1k", 16);
    let cfg = s.config();
    free_to_slabs(k, s, &objs);
    let slabs = s.nr_slabs(0);
    // SAFETY: owned.
    let refs = [unsafe { CpuRef::new(a) }];
    let kept = kept_objects(k, s, &refs) / cfg.objects;
    assert!(kept >= 8, "{kept} kept");
    // The first decay starts the period: the slabs were kept during part of it only.
    assert_eq!(k.slub().decay_empty_slabs(s), 0);
    assert_eq!(s.nr_slabs(0), slabs);
    // The partial slabs' objects and then some taken in this period (held by the
    // CPU's sheaves and the caller): the refills took kept slabs, and those left were
    // idle all along.
    let used: Vec<_> = (0..(cfg.min_partial + 4) * cfg.objects)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    let after_use = kept_objects(k, s, &refs) / cfg.objects;
    assert!(after_use < kept, "the refills took kept slabs");
    let gone = k.slub().decay_empty_slabs(s);
    assert_eq!(
        gone, after_use,
        "the slabs idle the whole interval went back"
    );
    assert_eq!(s.nr_slabs(0), slabs - gone);
    assert_eq!(kept_objects(k, s, &refs), 0);
    let live: HashSet<usize> = used.iter().map(|p| p.as_ptr() as usize).collect();
    check_census(k, s, &refs, &live);
    free_to_slabs(k, s, &used);
    k.shrink_all(c);
    assert_eq!(s.nr_slabs(0), 0);
}

#[test]
fn the_housekeeping_decay_gives_kept_slabs_back_after_two_intervals() {
    let delay = 1_000_000;
    let k = kmem_with_decay(delay);
    let (_, c) = own_area(k);
    let pf = k.pages.platform();
    let (s, objs) = cache_with_objects(k, c, "tick-1k", 16);
    free_to_slabs(k, s, &objs);
    let slabs = s.nr_slabs(0);
    assert!(kept_objects(k, s, &[]) > 0);
    // Slow-path traffic on another cache runs the housekeeping tick; two decay
    // intervals later the kept slabs of `s`, never taken, are gone.
    let interval = kmem_core::page::HOUSEKEEPING_INTERVAL as usize;
    for _ in 0..2 {
        pf.advance(2 * delay);
        slow_path_traffic(k, c, 64, 200, 2 * interval);
    }
    assert_eq!(kept_objects(k, s, &[]), 0, "decayed");
    assert!(s.nr_slabs(0) < slabs);
}

#[test]
fn a_cache_with_kept_slabs_is_destroyed() {
    let k = kmem(2, config(1, 0));
    let (_, c) = own_area(k);
    let (s, objs) = cache_with_objects(k, c, "destroy-1k", 12);
    free_to_slabs(k, s, &objs);
    assert!(kept_objects(k, s, &[]) > 0);
    // `kmem_cache_destroy` refuses a cache with slabs left after its shrink (objects
    // remaining): the kept slabs must have gone back.
    // SAFETY: nobody uses `s` any more.
    unsafe { k.kmem_cache_destroy(c, s) }.expect("no slab remains");
    assert!(k.pages.platform().take_log().is_empty());
}

#[test]
fn a_free_into_a_kept_slab_is_a_double_free_and_changes_nothing() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let (s, objs) = cache_with_objects(k, c, "df-kept-1k", 16);
    free_to_slabs(k, s, &objs);
    // SAFETY: owned.
    let refs = [unsafe { CpuRef::new(a) }];
    let mut kept = HashSet::new();
    k.slub().census(s, &refs, |o| {
        kept.insert(o);
    });
    // The first object (not on any freelist's head) of a kept slab, freed again.
    let victim = objs
        .iter()
        .map(|p| p.as_ptr() as usize)
        .find(|o| kept.contains(o))
        .expect("an object of a kept slab");
    let before = kept_objects(k, s, &refs);
    let p = NonNull::new(victim as *mut u8).unwrap();
    // The inline free (as the heap's front ends run it) refuses it: the kept slab's
    // pages name no sheaf.
    // SAFETY: the bug under test; a refused free changes nothing.
    assert!(!unsafe { k.kfree_fast(InlineArea::owned(c.unwrap()), victim as *mut u8) });
    // The regular free with a CPU, which would push onto its sheaf, and without one,
    // which frees to the slab: both report it and change nothing.
    for cpu in [c, None] {
        // SAFETY: the bug under test: its slab has no object in use.
        assert!(!unsafe { k.slub().free(cpu, s, p) });
        let log = k.pages.platform().take_log();
        assert!(log.contains("Object already free"), "{log}");
    }
    assert_eq!(
        kept_objects(k, s, &refs),
        before,
        "the slab is still kept, empty"
    );
    check_census(k, s, &refs, &HashSet::new());
    // Taken again: every object handed out once.
    let again: HashSet<usize> = (0..objs.len())
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap().as_ptr() as usize)
        .collect();
    assert_eq!(again.len(), objs.len());
    check_census(k, s, &refs, &again);
}

#[test]
fn slub_debug_caches_keep_no_empty_slab() {
    let k = kmem(2, config(1, 0));
    let (_, c) = own_area(k);
    let s = k
        .kmem_cache_create(c, "debug-1k", 1024, 8, SlabFlags::CONSISTENCY_CHECKS, None)
        .unwrap();
    let objs: Vec<_> = (0..16 * s.config().objects)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    let slabs = s.nr_slabs(0);
    free_to_slabs(k, s, &objs);
    assert_eq!(kept_objects(k, s, &[]), 0);
    assert!(
        s.nr_slabs(0) <= s.config().min_partial + 1,
        "{slabs} slabs, now {}",
        s.nr_slabs(0)
    );
}

#[test]
fn another_cache_s_new_slabs_take_the_kept_slabs_memory_first() {
    // No decay in the test's time: only the other cache's demand gives them back.
    let k = kmem_with_decay(u64::MAX / 2);
    let (_, c) = own_area(k);
    let (s, objs) = cache_with_objects(k, c, "hoard-1k", 64);
    free_to_slabs(k, s, &objs);
    let kept = kept_objects(k, s, &[]) / s.config().objects;
    assert!(kept >= 32, "{kept} kept");
    let kept_pages = kept << s.config().order;
    // Another cache makes new slabs: for each one the page allocator gives, up to 256
    // pages of the kept slabs went back first, the oldest first.
    let t = k
        .kmem_cache_create(c, "grower-2k", 2048, 8, SlabFlags::empty(), None)
        .unwrap();
    let made = stat(k, t, SlubStat::AllocSlab);
    let grown: Vec<_> = (0..t.config().objects)
        .map(|_| k.slub().alloc(c, t, Gfp::KERNEL).unwrap())
        .collect();
    assert!(
        stat(k, t, SlubStat::AllocSlab) > made,
        "a new slab of the other cache"
    );
    let left = kept_objects(k, s, &[]) / s.config().objects;
    assert!(left < kept, "kept slabs went back: {left} of {kept}");
    assert!(
        ((kept - left) << s.config().order) >= kept_pages.min(256),
        "{} pages went back",
        (kept - left) << s.config().order
    );
    // The cache's own new slabs leave its kept ones alone (it takes them instead).
    let before = kept_objects(k, s, &[]);
    let again: Vec<_> = (0..s.config().objects)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    assert!(kept_objects(k, s, &[]) <= before);
    free_to_slabs(k, t, &grown);
    free_to_slabs(k, s, &again);
    k.shrink_all(c);
    assert_eq!((s.nr_slabs(0), t.nr_slabs(0)), (0, 0));
    assert_eq!(
        k.slub().kept_empty_pages(0),
        0,
        "every kept page counted out"
    );
}

#[test]
fn a_kept_slab_with_an_objcg_vector_comes_back_charged_and_uncharges_again() {
    use kmem_core::memcontrol::MemcgStat;
    let k = kmem(2, config(1, 0));
    let (_, c) = own_area(k);
    let g = k
        .memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), "kept-g")
        .unwrap();
    let charged = |n: usize| -> Vec<usize> {
        (0..n)
            .map(|_| {
                k.memcg()
                    .kmalloc_objcg(c, 1024, Gfp::KERNEL, g.objcg())
                    .unwrap()
                    .as_ptr() as usize
            })
            .collect()
    };
    let objs = charged(512);
    // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
    let s = unsafe { k.slub().cache_of(objs[0] as *const u8) }.unwrap();
    let tag = sheaf_tag(k, objs[0]);
    assert_ne!(tag, 0, "a vectored slab's charged line");
    // Freed with no CPU: uncharged, then straight to the slabs, which empty: kept.
    for &o in &objs {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.kfree(None, o as *mut u8) });
    }
    // (The stock holds statistics back until it is drained.)
    k.memcg().memcg_drain_stock(c.unwrap());
    assert_eq!(g.stat(MemcgStat::SlabUnreclaimable), 0, "all uncharged");
    assert!(kept_objects(k, s, &[]) > 0);
    // Taken again for the group: the kept slabs' pages carry the charged line again
    // (their vectors stayed), each object charged once.
    let again = charged(512);
    assert!(again.iter().all(|&o| sheaf_tag(k, o) == tag));
    k.memcg().memcg_drain_stock(c.unwrap());
    assert_eq!(g.stat(MemcgStat::SlabUnreclaimable), 512 * 1024);
    for &o in &again {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.kfree(c, o as *mut u8) });
    }
    k.shrink_all(c);
    assert_eq!(
        g.stat(MemcgStat::SlabUnreclaimable),
        0,
        "all uncharged again"
    );
    assert_eq!(s.nr_slabs(0), 0);
    assert!(k.pages.platform().take_log().is_empty());
}

/// The first address of the slab holding `p` (slabs are aligned to their size).
/// Shrinks everything: no slab of `caches` left, no kept page counted, no report.
fn shrink_to_nothing(k: &K, c: Option<CpuRef<'_>>, caches: &[&KmemCache]) {
    k.shrink_all(c);
    for s in caches {
        assert_eq!(s.nr_slabs(0), 0, "{} has slabs left", s.config().name());
    }
    assert_eq!(
        k.slub().kept_empty_pages(0),
        0,
        "every kept page counted out"
    );
    assert!(k.pages.platform().take_log().is_empty());
}

fn slab_base(s: &KmemCache, p: usize) -> usize {
    p & !(s.config().slab_bytes() - 1)
}

#[test]
fn a_cache_adopts_another_cache_s_kept_slabs_of_its_order() {
    // No decay in the test's time: the kept slabs stay until the other cache asks.
    let k = kmem_with_decay(u64::MAX / 2);
    let (a, c) = own_area(k);
    let (s, objs) = cache_with_objects(k, c, "donor-1k", 16);
    let t = k
        .kmem_cache_create(c, "adopter-768", 768, 8, SlabFlags::empty(), None)
        .unwrap();
    assert_eq!(s.config().order, t.config().order, "one slab order");
    // The adopter's sheaves (and the caches their memory comes from) first: the
    // slabs those make would give the donor's kept slabs back to the page allocator.
    let warm: Vec<_> = (0..2 * t.config().sheaf_capacity)
        .map(|_| k.slub().alloc(c, t, Gfp::KERNEL).unwrap())
        .collect();
    for p in warm {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.slub().free(c, t, p) });
    }
    let t_slabs = t.nr_slabs(0);
    free_to_slabs(k, s, &objs);
    // Every slab the donor has, by the objects of its census (kept slabs' included).
    let mut donor_slabs = HashSet::new();
    k.slub().census(s, &[], |o| {
        donor_slabs.insert(slab_base(s, o));
    });
    let kept = kept_objects(k, s, &[]) / s.config().objects;
    assert!(kept >= 8, "{kept} kept");
    let s_slabs = s.nr_slabs(0);
    let pg_alloc = k.pages.event(VmEvent::PgAlloc);
    // The other cache's refills take the kept slabs as their own: every slab it has is
    // one of the donor's, its objects lie in the donor's memory, and the slabs change
    // caches in the counts. (The sheaf itself may come from the page allocator.)
    let n = (kept + t_slabs - 1) * t.config().objects;
    let got: Vec<_> = (0..n)
        .map(|_| k.slub().alloc(c, t, Gfp::KERNEL).unwrap())
        .collect();
    assert_eq!(
        kept_objects(k, s, &[]),
        0,
        "every kept slab adopted at once"
    );
    assert_eq!(
        k.pages.event(VmEvent::PgAlloc),
        pg_alloc,
        "no page from the page allocator"
    );
    assert_eq!(s.nr_slabs(0), s_slabs - kept);
    assert_eq!(
        t.nr_slabs(0),
        t_slabs + kept,
        "the adopter made no slab of its own"
    );
    assert_eq!(stat(k, t, SlubStat::AllocSlab), (t_slabs + kept) as u64);
    assert_eq!(stat(k, s, SlubStat::FreeSlab), kept as u64);
    let adopted = got
        .iter()
        .filter(|p| donor_slabs.contains(&slab_base(t, p.as_ptr() as usize)))
        .count();
    assert!(
        adopted >= (kept - 1) * t.config().objects,
        "{adopted} of {} objects in the donor's slabs",
        got.len()
    );
    // Objects of the adopted slabs are the adopter's: whole, each once, their pages
    // naming its sheaves.
    let live: HashSet<usize> = got.iter().map(|p| p.as_ptr() as usize).collect();
    assert_eq!(live.len(), got.len(), "each object handed out once");
    for p in &got {
        // SAFETY: ours, `object_size` bytes.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0x3c, t.config().object_size) };
    }
    let tag = sheaf_tag(k, got[0].as_ptr() as usize);
    assert_ne!(tag, 0);
    assert!(got.iter().all(|p| sheaf_tag(k, p.as_ptr() as usize) == tag));
    // SAFETY: owned.
    let refs = [unsafe { CpuRef::new(a) }];
    check_census(k, t, &refs, &live);
    check_census(k, s, &refs, &HashSet::new());
    // Freed, they are the adopter's kept slabs; the counts stay whole.
    free_to_slabs(k, t, &got);
    assert!(kept_objects(k, t, &[]) > 0, "kept again, as the adopter's");
    shrink_to_nothing(k, c, &[s, t]);
}

fn set_ones(p: *mut u8) {
    // SAFETY: the constructor gets an object of at least 8 bytes.
    unsafe { p.cast::<u64>().write(u64::MAX) };
}

#[test]
fn a_cache_with_a_constructor_adopts_no_slab() {
    let k = kmem_with_decay(u64::MAX / 2);
    let (_, c) = own_area(k);
    let (s, objs) = cache_with_objects(k, c, "donor-ctor-1k", 8);
    let t = k
        .kmem_cache_create(c, "ctor-768", 768, 8, SlabFlags::empty(), Some(set_ones))
        .unwrap();
    assert_eq!(s.config().order, t.config().order);
    free_to_slabs(k, s, &objs);
    let kept = kept_objects(k, s, &[]);
    assert!(kept > 0);
    // Its new slabs run the constructor on every object (kept slabs of another cache
    // have never been constructed for it): the other cache's kept slabs are given back
    // to the page allocator instead.
    let got: Vec<_> = (0..2 * t.config().objects)
        .map(|_| k.slub().alloc(c, t, Gfp::KERNEL).unwrap())
        .collect();
    for p in &got {
        // SAFETY: a constructed object of `t`.
        assert_eq!(unsafe { p.as_ptr().cast::<u64>().read() }, u64::MAX);
    }
    assert!(stat(k, t, SlubStat::AllocSlab) > 0, "slabs of its own");
    assert!(
        kept_objects(k, s, &[]) < kept,
        "the donor's kept slabs reclaimed"
    );
    free_to_slabs(k, t, &got);
    shrink_to_nothing(k, c, &[s, t]);
}

#[test]
fn an_adopted_slab_leaves_its_objcg_vector_behind() {
    let k = kmem_with_decay(u64::MAX / 2);
    let (_, c) = own_area(k);
    let t = k
        .kmem_cache_create(c, "plain-768", 768, 8, SlabFlags::empty(), None)
        .unwrap();
    // The adopter's sheaves first (see above), and the tag of its own slabs' pages.
    let warm: Vec<_> = (0..2 * t.config().sheaf_capacity)
        .map(|_| k.slub().alloc(c, t, Gfp::KERNEL).unwrap())
        .collect();
    let plain = sheaf_tag(k, warm[0].as_ptr() as usize);
    for p in warm {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.slub().free(c, t, p) });
    }
    let g = k
        .memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), "adopt-g")
        .unwrap();
    let objs: Vec<usize> = (0..256)
        .map(|_| {
            k.memcg()
                .kmalloc_objcg(c, 1024, Gfp::KERNEL, g.objcg())
                .unwrap()
                .as_ptr() as usize
        })
        .collect();
    // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
    let s = unsafe { k.slub().cache_of(objs[0] as *const u8) }.unwrap();
    assert_eq!(s.config().order, t.config().order);
    assert_ne!(
        sheaf_tag(k, objs[0]),
        plain,
        "a vectored slab's charged line"
    );
    for &o in &objs {
        // SAFETY: ours, freed once (no CPU: uncharged, to the slabs, which are kept).
        assert!(unsafe { k.kfree(None, o as *mut u8) });
    }
    let kept = kept_objects(k, s, &[]) / s.config().objects;
    assert!(kept > 1);
    // Adopted without the page allocator, the slabs name the adopter's sheaves as its
    // own slabs do: no vector came along (with one, its pages would carry the
    // charged line, and its frees would leave the inline path).
    let pg_alloc = k.pages.event(VmEvent::PgAlloc);
    let got: Vec<_> = (0..(kept - 1) * t.config().objects)
        .map(|_| k.slub().alloc(c, t, Gfp::KERNEL).unwrap())
        .collect();
    assert_eq!(
        k.pages.event(VmEvent::PgAlloc),
        pg_alloc,
        "adopted, not made"
    );
    assert_eq!(
        stat(k, s, SlubStat::FreeSlab),
        kept as u64,
        "kmalloc-cg-1k's slabs adopted"
    );
    assert!(got
        .iter()
        .all(|p| sheaf_tag(k, p.as_ptr() as usize) == plain));
    for p in got {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.slub().free(c, t, p) });
    }
    k.memcg().memcg_drain_stock(c.unwrap());
    shrink_to_nothing(k, c, &[s, t]);
}

#[test]
fn caches_of_one_order_adopt_each_other_s_slabs_from_several_threads() {
    // Four threads, each with a CPU area of its own, each a batch of one of two caches
    // of one slab order at a time, freed with no CPU (to the slabs, which are kept):
    // the caches adopt each other's kept slabs while the others free into theirs.
    // Every object handed out once, each written whole and checked, the counts and
    // the census whole at the end.
    let k = kmem_with_decay(u64::MAX / 2);
    let (_, c) = own_area(k);
    let s = k
        .kmem_cache_create(c, "swap-1k", 1024, 8, SlabFlags::empty(), None)
        .unwrap();
    let t = k
        .kmem_cache_create(c, "swap-768", 768, 8, SlabFlags::empty(), None)
        .unwrap();
    assert_eq!(s.config().order, t.config().order);
    let rounds = if std::env::var("KMEM_STRESS_SECS").is_ok() {
        400
    } else {
        40
    };
    std::thread::scope(|sc| {
        for w in 0..4usize {
            sc.spawn(move || {
                let area = k.pages.cpu_area_get(0).unwrap();
                // SAFETY: owned by this thread.
                let cpu = Some(unsafe { CpuRef::new(area) });
                for r in 0..rounds {
                    let cache = if (r + w) % 2 == 0 { s } else { t };
                    let size = cache.config().object_size;
                    let objs: Vec<_> = (0..150)
                        .map(|_| k.slub().alloc(cpu, cache, Gfp::KERNEL).unwrap())
                        .collect();
                    for p in &objs {
                        // SAFETY: ours, `size` bytes.
                        unsafe { std::ptr::write_bytes(p.as_ptr(), (w * 16 + r % 16) as u8, size) };
                    }
                    for p in &objs {
                        // SAFETY: ours; every byte is still what this thread wrote.
                        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), size) };
                        assert!(bytes.iter().all(|&b| b == (w * 16 + r % 16) as u8));
                    }
                    free_to_slabs(k, cache, &objs);
                }
                // SAFETY: owned; not used afterwards.
                unsafe { k.pages.cpu_area_put(area) };
            });
        }
    });
    check_census(k, s, &[], &HashSet::new());
    check_census(k, t, &[], &HashSet::new());
    shrink_to_nothing(k, c, &[s, t]);
}

/// An allocation without a CPU area (or on a named node, which bypasses the sheaves)
/// that finds no partial slab takes one of the node's kept empty slabs of its cache
/// before it makes a new slab.
#[test]
fn an_allocation_without_a_cpu_takes_a_kept_slab_before_a_new_one() {
    let k = kmem(2, config(1, 0));
    let (_a, c) = own_area(k);
    let (s, objs) = cache_with_objects(k, c, "kept-nocpu", 24);
    let cfg = s.config();
    let refs: Vec<CpuRef<'_>> = c.into_iter().collect();
    free_to_slabs(k, s, &objs);
    let slabs = s.nr_slabs(0);
    let kept = kept_objects(k, s, &refs);
    assert!(kept >= 2 * cfg.objects, "kept {kept}");
    // More than the partial slabs hold (some of the objects wait in the area's
    // sheaves and the barn): at least a kept slab's worth and one more past them.
    let want = slabs * cfg.objects - kept + cfg.objects + 1;
    let again: Vec<_> = (0..want)
        .map(|i| {
            let nid = (i % 2 == 0).then_some(0);
            match nid {
                Some(n) => k.slub().alloc_node(None, s, Gfp::KERNEL, Some(n)),
                None => k.slub().alloc(None, s, Gfp::KERNEL),
            }
            .unwrap()
        })
        .collect();
    assert_eq!(s.nr_slabs(0), slabs, "no new slab while kept ones wait");
    let left = kept_objects(k, s, &refs);
    assert!(left <= kept - 2 * cfg.objects, "kept {kept}, then {left}");
    let distinct: HashSet<_> = again.iter().map(|p| p.as_ptr() as usize).collect();
    assert_eq!(distinct.len(), again.len(), "nothing handed out twice");
    free_to_slabs(k, s, &again);
    check_census(k, s, &refs, &HashSet::new());
}
