//! A node's fresh slab (sheaves design): a refill that needs a new slab leaves the
//! rest of it unlinked, the next refill takes it by address, free-object counts
//! include it, shrinking gives it back, and every object stays in exactly one place.

mod common;

use common::{config, kmem};
use kmem_core::percpu::CpuArea;
use kmem_core::slab::SlubStat;
use kmem_core::{CpuRef, Gfp, KmemCache, SlabFlags};
use std::collections::HashSet;
use std::ptr::NonNull;

type K = kmem_core::Kmem<common::TestPlatform>;

/// A CPU area of `k` for this test alone, and the owner's handle on it.
fn own_area(k: &'static K) -> (&'static CpuArea, Option<CpuRef<'static>>) {
    let a = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: fresh from the pool: the calling test owns it until it puts it back, and
    // uses this one handle on it.
    (a, Some(unsafe { CpuRef::new(a) }))
}

fn stat(k: &K, s: &KmemCache, item: SlubStat) -> u64 {
    s.stat_sum(k.pages.cpu_areas().iter(), item)
}

/// The census of `s` after checking that its free objects and `live` are disjoint,
/// each in one place, and together every object of its slabs.
fn census(
    k: &K,
    s: &KmemCache,
    areas: &[CpuRef<'_>],
    live: &HashSet<usize>,
) -> kmem_core::slab::SheafCensus {
    let mut free = HashSet::new();
    let mut twice = None;
    let c = k.slub().census(s, areas, |o| {
        if !free.insert(o) && twice.is_none() {
            twice = Some(o);
        }
    });
    assert_eq!(c.foreign, None, "no object of the cache: {c:?}");
    assert_eq!(twice, None, "an object waits in two places");
    assert!(free.is_disjoint(live), "a handed-out object is also free");
    assert_eq!(live.len() + free.len(), c.total, "objects lost: {c:?}");
    c
}

#[test]
fn a_refill_leaves_a_new_slab_s_rest_fresh_and_the_next_refill_takes_it() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let s = k
        .kmem_cache_create(c, "fresh-16", 16, 8, SlabFlags::empty(), None)
        .unwrap();
    let (n, cap) = (s.config().objects, s.config().sheaf_capacity);
    assert!(
        2 * cap <= n,
        "two sheaves fit in a slab: {n} objects, {cap}"
    );
    let mut live = HashSet::new();
    live.insert(k.slub().alloc(c, s, Gfp::KERNEL).unwrap().as_ptr() as usize);
    // The first refill: a sheaf's worth from a new slab, the rest fresh, none linked.
    let cs = census(k, s, &[c.unwrap()], &live);
    assert_eq!(cs.in_fresh_tails, n - cap, "{cs:?}");
    assert_eq!(cs.in_partial_slabs, 0, "{cs:?}");
    assert_eq!(
        s.count_partial_free(0),
        n - cap,
        "fresh objects count as free"
    );
    // Empty the sheaf and refill it: from the fresh tail, no second slab.
    while live.len() < 2 * cap {
        live.insert(k.slub().alloc(c, s, Gfp::KERNEL).unwrap().as_ptr() as usize);
    }
    assert_eq!(live.len(), 2 * cap, "no object handed out twice");
    assert_eq!(s.nr_slabs(0), 1);
    assert_eq!(stat(k, s, SlubStat::AllocSlab), 1);
    let cs = census(k, s, &[c.unwrap()], &live);
    assert_eq!(cs.in_fresh_tails, n - 2 * cap, "{cs:?}");
    // Every object handed out lies in the one slab, each at an object's start.
    let lo = *live.iter().min().unwrap();
    let base = lo & !(s.config().slab_bytes() - 1);
    for &p in &live {
        assert_eq!((p - base) % s.config().size, 0);
        assert!(p - base < n * s.config().size);
    }
    // Free everything and shrink: the tail goes back with the rest, no slab is left.
    for &p in &live {
        // SAFETY: ours.
        unsafe { k.slub().free(c, s, NonNull::new(p as *mut u8).unwrap()) };
    }
    // SAFETY: owned.
    unsafe { k.pages.cpu_area_put(a) };
    k.shrink_all(None);
    assert_eq!(s.nr_slabs(0), 0, "no object lost in a fresh tail");
    assert_eq!(k.slub().census(s, &[], |_| {}).in_fresh_tails, 0);
}

#[test]
fn shrinking_links_the_fresh_tail_onto_its_slab() {
    // (24-byte objects: more in a slab than a sheaf holds.)
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let s = k
        .kmem_cache_create(c, "fresh-24", 24, 8, SlabFlags::empty(), None)
        .unwrap();
    let (n, cap) = (s.config().objects, s.config().sheaf_capacity);
    assert!(cap < n);
    let p = k.slub().alloc(c, s, Gfp::KERNEL).unwrap();
    let live: HashSet<usize> = [p.as_ptr() as usize].into();
    assert_eq!(census(k, s, &[c.unwrap()], &live).in_fresh_tails, n - cap);
    k.slub().shrink_barns(c, s);
    // The tail is now the slab's freelist; the slab sits on the partial list.
    let cs = census(k, s, &[c.unwrap()], &live);
    assert_eq!(
        (cs.in_fresh_tails, cs.in_partial_slabs),
        (0, n - cap),
        "{cs:?}"
    );
    assert_eq!(s.nr_partial(0), 1);
    assert_eq!(s.count_partial_free(0), n - cap);
    // Allocations take the linked objects again (a refill walks them).
    let again: HashSet<usize> = (0..cap)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap().as_ptr() as usize)
        .collect();
    assert_eq!(again.len(), cap);
    assert!(again.is_disjoint(&live));
    for q in again.into_iter().chain(live) {
        // SAFETY: ours.
        unsafe { k.slub().free(c, s, NonNull::new(q as *mut u8).unwrap()) };
    }
    // SAFETY: owned.
    unsafe { k.pages.cpu_area_put(a) };
    k.shrink_all(None);
    assert_eq!(s.nr_slabs(0), 0);
    assert!(k.pages.platform().take_log().is_empty(), "no report");
}

#[test]
fn random_freelists_link_the_rest_of_a_new_slab() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let s = k
        .kmem_cache_create(c, "fresh-rnd", 32, 8, SlabFlags::RANDOM_FREELIST, None)
        .unwrap();
    let (n, cap) = (s.config().objects, s.config().sheaf_capacity);
    let p = k.slub().alloc(c, s, Gfp::KERNEL).unwrap();
    let live: HashSet<usize> = [p.as_ptr() as usize].into();
    let cs = census(k, s, &[c.unwrap()], &live);
    assert_eq!(
        (cs.in_fresh_tails, cs.in_partial_slabs),
        (0, n - cap),
        "{cs:?}"
    );
    // SAFETY: ours.
    unsafe { k.slub().free(c, s, p) };
    // SAFETY: owned.
    unsafe { k.pages.cpu_area_put(a) };
    k.shrink_all(None);
    assert_eq!(s.nr_slabs(0), 0);
}
