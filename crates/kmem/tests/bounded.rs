//! KMEM_MAX bounds the heap: allocations fail with None, never a crash, and succeed
//! again after frees. (Own process: the bound is process-wide.)

use kmem::{heap, Gfp};

#[test]
fn kmem_max_bounds_the_heap() {
    std::env::set_var("KMEM_MAX", "16M");
    let h = heap();
    let max_pages = (16 << 20) / 4096;
    let mut held = Vec::new();
    while let Some(p) = h.alloc_pages(Gfp::NOWARN, 0) {
        held.push(p);
        assert!(held.len() <= max_pages);
    }
    assert!(
        held.len() > max_pages * 9 / 10,
        "only {} of {max_pages}",
        held.len()
    );
    assert!(h.page_allocator().nr_managed_pages() <= max_pages);
    assert!(h.alloc_pages(Gfp::NOWARN, 5).is_none());
    for p in held.drain(..) {
        // SAFETY: allocated above.
        unsafe { h.free_pages(p, 0) };
    }
    h.drain_all();
    let big = h
        .alloc_pages(Gfp::KERNEL, 9)
        .expect("memory is back after frees");
    // SAFETY: allocated above.
    unsafe { h.free_pages(big, 9) };
    // The barns keep an eighth of the bound past their own bounds, at most.
    let spill = h.kmem().barn_spill();
    assert_eq!(spill.limit(), 2 << 20);
    h.set_max_bytes(64 << 20);
    assert_eq!(spill.limit(), 8 << 20);
    h.set_max_bytes(0);
    assert_eq!(spill.limit(), kmem_core::slab::barn_spill::BARN_SPILL_BYTES);
}
