#![allow(clippy::unnecessary_literal_unwrap)] // `cpu` is an Option on purpose: APIs take one.
//! `Slub::free_outgrown`, the free of the object a krealloc moved out of, through the
//! public API of `Kmem`: onto the spare sheaf, then to its slabs past the barn, and an
//! emptied slab to the zone past `min_partial` and the per-CPU page lists, or, for
//! the classes whose doubles share their slab order, to the per-CPU page lists.

mod common;

use common::{config, kmem, own_area};
use kmem_core::slab::ObjectLookup;
use kmem_core::{CpuRef, Gfp};

#[test]
fn an_outgrown_object_goes_to_its_slab_and_an_emptied_slab_to_the_zone() {
    let k = kmem(2, config(1, 0));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    let s = k.kmalloc_cache(1024, Gfp::KERNEL).unwrap();
    let per = s.config().objects;
    // The node would keep this many empty slabs for an ordinary free.
    assert!(s.config().min_partial >= 5);
    let slabs_before = s.nr_slabs(0);
    // 32 slabs of objects, straight from the slabs (a node given: past the sheaves).
    let n = 32 * per;
    let objs: Vec<_> = (0..n)
        .map(|_| k.slub().alloc_node(cpu, s, Gfp::KERNEL, Some(0)).unwrap())
        .collect();
    let slabs_full = s.nr_slabs(0);
    assert!(slabs_full >= slabs_before + 32);
    let mut pcp_before = 0;
    for (i, p) in objs.iter().enumerate() {
        // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
        let ObjectLookup::Slab(found, slab) = (unsafe { k.slub().lookup(p.as_ptr()) }) else {
            panic!("{p:?} is not a slab object");
        };
        assert!(std::ptr::eq(found, s));
        // SAFETY: ours, given up here.
        assert!(unsafe { k.slub().free_outgrown(cpu, s, slab, p.as_ptr() as usize) });
        if i == 0 {
            // After the first free, which may have made the spare sheaf.
            pcp_before = k.pages.nr_pcp_pages(0);
        }
    }
    // One spare sheaf took the first of them; the rest went to their slabs, not to
    // the barn (which holds more than 32 slabs of these). Of the slabs they emptied
    // the node keeps at most one (not `min_partial`); the others went to the zone,
    // not to this CPU's page lists.
    let pinned = s.config().sheaf_capacity.div_ceil(per) + 1;
    let left = s.nr_slabs(0);
    assert!(
        left <= slabs_before + 1 + pinned,
        "{left} slabs left of {slabs_full}, {slabs_before} before"
    );
    assert_eq!(k.pages.nr_pcp_pages(0), pcp_before);
    // Nothing lost or handed out twice: as many objects again, all distinct.
    let mut again: Vec<usize> = (0..n)
        .map(|_| k.kmalloc(cpu, 1024, Gfp::KERNEL).unwrap().as_ptr() as usize)
        .collect();
    again.sort();
    assert!(again.windows(2).all(|w| w[0] + 1024 <= w[1]));
    for p in again {
        // SAFETY: ours.
        assert!(unsafe { k.kfree(cpu, p as *mut u8) });
    }
    // A second free of an outgrown object is caught at its slab's freelist head (two
    // objects of one slab, the other keeping it in use).
    let bytes = s.config().slab_bytes();
    let pair: Vec<usize> = (0..per + 1)
        .map(|_| {
            k.slub()
                .alloc_node(cpu, s, Gfp::KERNEL, Some(0))
                .unwrap()
                .as_ptr() as usize
        })
        .collect();
    let p = pair[0];
    assert!(
        pair[1..]
            .iter()
            .any(|&q| q & !(bytes - 1) == p & !(bytes - 1)),
        "two objects of one slab"
    );
    // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
    let ObjectLookup::Slab(_, slab) = (unsafe { k.slub().lookup(p as *const u8) }) else {
        panic!("not a slab object");
    };
    // SAFETY: ours; the second call is the double free under test.
    unsafe {
        assert!(k.slub().free_outgrown(cpu, s, slab, p));
        assert!(!k.slub().free_outgrown(cpu, s, slab, p));
    }
    for q in pair.into_iter().filter(|&q| q != p) {
        // SAFETY: ours.
        assert!(unsafe { k.kfree(cpu, q as *mut u8) });
    }
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(area) };
}

/// From kmalloc-1536 to kmalloc-8k a class's slabs have the order of the class twice
/// its size (32 KiB), so a slab that outgrown objects empty goes to the CPU's page
/// lists, where the larger class's next slab takes the block as it is; below (a 1 KiB
/// class on 16 KiB slabs) and above (kmalloc-16k, whose doubles take 128 KiB slabs)
/// the block goes to the zone to merge, as the first test shows for 1 KiB.
/// Every address of `objs` (objects of `size` bytes) distinct, then each freed.
fn distinct_then_freed(
    k: &kmem_core::Kmem<common::TestPlatform>,
    cpu: Option<CpuRef<'_>>,
    mut objs: Vec<usize>,
    size: usize,
) {
    objs.sort();
    assert!(
        objs.windows(2).all(|w| w[0] + size <= w[1]),
        "an object handed out twice"
    );
    for p in objs {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.kfree(cpu, p as *mut u8) });
    }
}

#[test]
fn an_outgrown_slab_of_the_doubled_class_s_order_goes_to_the_cpu_s_page_lists() {
    let k = kmem(2, config(1, 0));
    let (area, cpu) = own_area(k);
    let class = |size| k.kmalloc_cache(size, Gfp::KERNEL).unwrap().config();
    for (size, same) in [
        (1024, false),
        (2048, true),
        (4096, true),
        (8192, true),
        (16384, false),
    ] {
        assert_eq!(class(size).doubled_same_order, same, "kmalloc-{size}");
        assert_eq!(
            class(size).order == class(2 * size).order,
            same,
            "kmalloc-{size}"
        );
    }
    let s = k.kmalloc_cache(4096, Gfp::KERNEL).unwrap();
    let big = k.kmalloc_cache(8192, Gfp::KERNEL).unwrap();
    let (per, order) = (s.config().objects, s.config().order);
    let slabs_before = s.nr_slabs(0);
    // 8 slabs of objects straight from the slabs, then freed as outgrown.
    let objs: Vec<_> = (0..8 * per)
        .map(|_| k.slub().alloc_node(cpu, s, Gfp::KERNEL, Some(0)).unwrap())
        .collect();
    let mut pcp_before = 0;
    for (i, p) in objs.iter().enumerate() {
        // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
        let ObjectLookup::Slab(_, slab) = (unsafe { k.slub().lookup(p.as_ptr()) }) else {
            panic!("{p:?} is not a slab object");
        };
        // SAFETY: ours, given up here.
        assert!(unsafe { k.slub().free_outgrown(cpu, s, slab, p.as_ptr() as usize) });
        if i == 0 {
            pcp_before = k.pages.nr_pcp_pages(0);
        }
    }
    let pinned = s.config().sheaf_capacity.div_ceil(per) + 1;
    assert!(s.nr_slabs(0) <= slabs_before + 1 + pinned);
    // The emptied slabs' blocks wait on this CPU's lists (at least five of the
    // seven or eight: the lists hold 186 pages before they spill).
    let on_lists = k.pages.nr_pcp_pages(0);
    assert!(
        on_lists >= pcp_before + (5 << order),
        "{on_lists} pages on the lists, {pcp_before} before"
    );
    // The larger class's next slab (a sheaf refill's) is one of the blocks the
    // smaller one emptied, taken off the lists.
    let first = k.kmalloc(cpu, 8192, Gfp::KERNEL).unwrap();
    assert_eq!(big.nr_slabs(0), 1);
    assert_eq!(k.pages.nr_pcp_pages(0), on_lists - (1 << order));
    let base = |p: usize| p & !(s.config().slab_bytes() - 1);
    assert!(
        objs.iter()
            .any(|p| base(p.as_ptr() as usize) == base(first.as_ptr() as usize)),
        "kmalloc-8k's slab at {first:?} is none of kmalloc-4k's"
    );
    let rest: Vec<_> = (1..big.config().objects)
        .map(|_| k.kmalloc(cpu, 8192, Gfp::KERNEL).unwrap())
        .collect();
    // Nothing handed out twice: the 4 KiB class gets as many objects again.
    let again: Vec<usize> = (0..8 * per)
        .map(|_| k.kmalloc(cpu, 4096, Gfp::KERNEL).unwrap().as_ptr() as usize)
        .chain(rest.iter().chain([&first]).map(|p| p.as_ptr() as usize))
        .collect();
    distinct_then_freed(k, cpu, again, 4096);
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(area) };
}

/// A realloc of a block already freed reaches `free_outgrown` with it: on the top of a
/// full spare (the push tests room first), or in a slab with no object in use (kept
/// whole). Both are reported and refused, as the other frees do, where the first was
/// flushed to its slab and pushed again, and the second went onto the sheaf: each
/// would have been handed out twice.
#[test]
fn an_outgrown_double_free_is_refused() {
    let k = kmem(2, config(1, 0));
    let (area, cpu) = own_area(k);
    let s = k.kmalloc_cache(1024, Gfp::KERNEL).unwrap();
    let (per, cap) = (s.config().objects, s.config().sheaf_capacity);
    let outgrown = |p: usize| {
        // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
        let ObjectLookup::Slab(_, slab) = (unsafe { k.slub().lookup(p as *const u8) }) else {
            panic!("{p:#x} is not a slab object");
        };
        // SAFETY: ours, given up (or the double free under test).
        unsafe { k.slub().free_outgrown(cpu, s, slab, p) }
    };
    // Straight from the slabs (a node given: past the sheaves).
    let from_slabs = |n: usize| -> Vec<usize> {
        (0..n)
            .map(|_| {
                k.slub()
                    .alloc_node(cpu, s, Gfp::KERNEL, Some(0))
                    .unwrap()
                    .as_ptr() as usize
            })
            .collect()
    };
    // The spare sheaf made and filled, its top object freed again.
    let objs = from_slabs(cap);
    for &p in &objs {
        assert!(outgrown(p));
    }
    assert!(!outgrown(objs[cap - 1]), "the full spare's top freed again");
    assert!(k
        .pages
        .platform()
        .take_log()
        .contains("Object already free"));
    // Slabs emptied straight to the node (no CPU), the ones past `min_partial` kept.
    let many = from_slabs(16 * per);
    for &p in &many {
        // SAFETY: ours, freed once.
        assert!(unsafe {
            k.slub()
                .free(None, s, std::ptr::NonNull::new(p as *mut u8).unwrap())
        });
    }
    let kept: Vec<usize> = many
        .iter()
        .step_by(per)
        .copied()
        .filter(|&p| {
            k.pages
                .virt_to_slab_page(p as *const u8)
                .unwrap()
                .sheaf_tag()
                == 0
        })
        .collect();
    assert!(!kept.is_empty());
    for &p in &kept {
        assert!(!outgrown(p), "{p:#x}, of a kept slab, taken");
    }
    assert!(k
        .pages
        .platform()
        .take_log()
        .contains("Object already free"));
    // Nothing handed out twice: every object of the class's slabs comes back once.
    let n = 16 * per + cap;
    let again: Vec<usize> = (0..n)
        .map(|_| k.kmalloc(cpu, 1024, Gfp::KERNEL).unwrap().as_ptr() as usize)
        .collect();
    distinct_then_freed(k, cpu, again, 1024);
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(area) };
}
