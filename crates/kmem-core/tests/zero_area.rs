//! The inline fast paths' zero area and zero line: a thread without a CPU area of its
//! own reads kmem-core's zero area (`InlineArea::zero`), where every pop finds no
//! object and every push no room, so nothing writes it; a page that carries no sheaf
//! tag (no slab, a debug cache's, a slab that was discarded) reads as the CPU area's
//! zero line, which refuses every free.

mod common;

use common::{config, kmem};
use kmem_core::percpu::CpuArea;
use kmem_core::{CpuRef, Gfp, SlabFlags};
use std::ptr::NonNull;

type K = kmem_core::Kmem<common::TestPlatform>;

/// A CPU area of `k` for this test alone, and the owner's handle on it.
fn own_area(k: &'static K) -> (&'static CpuArea, Option<CpuRef<'static>>) {
    let a = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: fresh from the pool: the calling test owns it until it puts it back, and
    // uses this one handle on it.
    (a, Some(unsafe { CpuRef::new(a) }))
}

#[test]
fn the_zero_area_gives_and_takes_nothing_and_untagged_pages_read_as_the_zero_line() {
    use kmem_core::kmalloc::{KMALLOC_PLAIN_SIZES, MEDIUM_FAST_MAX};
    use kmem_core::percpu::ZERO_CPU_AREA;
    use kmem_core::InlineArea;
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let cpu = c.unwrap();
    let s = k
        .kmem_cache_create(c, "zero-48", 48, 8, SlabFlags::empty(), None)
        .unwrap();
    // Objects of every kmalloc class the fast paths cover, and of a typed cache; one
    // of each freed and taken again so that every cache has a spare sheaf with room
    // (a push through the real area would succeed).
    let sizes: Vec<usize> = KMALLOC_PLAIN_SIZES
        .iter()
        .copied()
        .filter(|&n| n <= MEDIUM_FAST_MAX)
        .collect();
    let mut objs: Vec<(usize, NonNull<u8>)> = Vec::new();
    for &size in &sizes {
        let p = k.kmalloc(c, size, Gfp::KERNEL).unwrap();
        // SAFETY: ours, freed once.
        assert!(unsafe { k.kfree(c, p.as_ptr()) });
        objs.push((size, k.kmalloc(c, size, Gfp::KERNEL).unwrap()));
        // The sheaves are filled: the real area would pop.
        let q = k.kmalloc(c, size, Gfp::KERNEL).unwrap();
        // SAFETY: ours, freed once.
        assert!(unsafe { k.kfree(c, q.as_ptr()) });
    }
    let y = k.slub().alloc(c, s, Gfp::KERNEL).unwrap();
    // SAFETY: ours, freed once.
    assert!(unsafe { k.slub().free(c, s, y) });
    let typed = k.slub().alloc(c, s, Gfp::KERNEL).unwrap();
    let zero = InlineArea::zero();
    for &(size, p) in &objs {
        assert!(
            k.kmalloc_fast(zero, size, Gfp::KERNEL).is_none(),
            "size {size}"
        );
        // SAFETY: refused without being touched.
        assert!(!unsafe { k.kfree_fast(zero, p.as_ptr()) }, "size {size}");
    }
    assert!(k.slub().alloc_fast(zero, s, Gfp::KERNEL).is_none());
    // SAFETY: refused without being touched.
    assert!(!unsafe { k.slub().free_fast_to(zero, s, typed.as_ptr()) });
    // SAFETY: as above.
    assert!(!unsafe { k.slub().free_fast(zero, typed.as_ptr()) });
    assert!(
        ZERO_CPU_AREA.is_zero(),
        "an inline path wrote the zero area"
    );
    // The same objects through the real area: pushed (their pages are tagged).
    for &(size, p) in &objs {
        // SAFETY: ours, given up here.
        assert!(unsafe { k.kfree_fast(cpu, p.as_ptr()) }, "size {size}");
    }
    // SAFETY: ours, given up here.
    assert!(unsafe { k.slub().free_fast_to(cpu, s, typed.as_ptr()) });
    // A page the page allocator handed out (no slab) reads untagged: the real area's
    // zero line refuses it, and stays zero.
    let page = k.pages.alloc_pages(c, Gfp::KERNEL, 0).unwrap();
    let addr = k.pages.page_address(page).as_ptr();
    // SAFETY: refused without being touched.
    assert!(!unsafe { k.kfree_fast(cpu, addr) });
    // SAFETY: ours, from alloc_pages with order 0.
    unsafe { k.pages.free_pages(c, page, 0) };
    // A slab that went back to the page allocator leaves no tag behind.
    let x = k.slub().alloc(c, s, Gfp::KERNEL).unwrap();
    // SAFETY: ours.
    assert!(unsafe { k.slub().free(c, s, x) });
    k.slub().flush_cpu_cache(cpu, s);
    k.slub().shrink_barns(c, s);
    k.slub().shrink(c, s);
    assert!(
        // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
        unsafe { k.slub().cache_of(x.as_ptr()) }.is_none(),
        "the slab was discarded"
    );
    // SAFETY: refused without being touched (the page is free).
    assert!(!unsafe { k.kfree_fast(cpu, x.as_ptr()) });
    // SAFETY: 64 bytes inside the owned area; nothing writes them.
    let line = unsafe { *a.ptr::<[u8; 64]>(kmem_core::page::CPU_AREA_ZERO_LINE) };
    assert_eq!(line, [0; 64], "the zero line was written");
}

#[test]
fn the_typed_free_fast_path_takes_only_objects_of_the_cache_it_is_given() {
    let k = kmem(2, config(1, 0));
    let (a, c) = own_area(k);
    let cpu = c.unwrap();
    let s = k
        .kmem_cache_create(c, "own-48", 48, 8, SlabFlags::empty(), None)
        .unwrap();
    let t = k
        .kmem_cache_create(c, "other-48", 48, 8, SlabFlags::empty(), None)
        .unwrap();
    // One object of each cache (and of kmalloc-64), each cache's spare sheaf given
    // room as in the test above: one object freed first, then another taken.
    let (x0, y0, m0) = (
        k.slub().alloc(c, s, Gfp::KERNEL).unwrap(),
        k.slub().alloc(c, t, Gfp::KERNEL).unwrap(),
        k.kmalloc(c, 48, Gfp::KERNEL).unwrap(),
    );
    // SAFETY: ours, freed once.
    unsafe {
        assert!(k.slub().free(c, s, x0));
        assert!(k.slub().free(c, t, y0));
        assert!(k.kfree(c, m0.as_ptr()));
    }
    let x = k.slub().alloc(c, s, Gfp::KERNEL).unwrap();
    let y = k.slub().alloc(c, t, Gfp::KERNEL).unwrap();
    let m = k.kmalloc(c, 48, Gfp::KERNEL).unwrap();
    // Another cache's object, of the same size or not, is refused untouched.
    // SAFETY: refused without being touched.
    unsafe {
        assert!(!k.slub().free_fast_to(cpu, s, y.as_ptr()));
        assert!(!k.slub().free_fast_to(cpu, t, x.as_ptr()));
        assert!(!k.slub().free_fast_to(cpu, s, m.as_ptr()));
        assert!(!k.slub().free_fast_to(cpu, t, m.as_ptr()));
    }
    // Each cache's own object is pushed, and comes back from its own cache only (once
    // the main sheaf is used up and the spare, where frees go, holds an eighth of a sheaf:
    // two sheaves' worth of `s` are freed after it).
    let cap = s.config().sheaf_capacity;
    let more: Vec<_> = (0..2 * cap)
        .map(|_| k.slub().alloc(c, s, Gfp::KERNEL).unwrap())
        .collect();
    // SAFETY: ours, given up here.
    unsafe {
        assert!(k.slub().free_fast_to(cpu, s, x.as_ptr()));
        assert!(k.slub().free_fast_to(cpu, t, y.as_ptr()));
        for &p in &more {
            assert!(k.slub().free(c, s, p));
        }
    }
    let mut from_s = Vec::new();
    for _ in 0..1000 {
        from_s.push(k.slub().alloc(c, s, Gfp::KERNEL).unwrap());
    }
    assert!(from_s.contains(&x) && !from_s.contains(&y) && !from_s.contains(&m));
    // SAFETY: all ours, freed once; the refused kmalloc object is still live.
    unsafe {
        for p in from_s {
            assert!(k.slub().free(c, s, p));
        }
        assert!(k.kfree(c, m.as_ptr()));
        k.pages.cpu_area_put(a);
    }
}
