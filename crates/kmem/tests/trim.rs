//! `Heap::trim` (`malloc_trim`): what the caches keep for reuse — objects in the
//! caller's sheaves and in the barns, empty slabs — goes back to the page allocator,
//! and from there to the OS. One test in its own binary: it compares page counts.

use kmem::{heap, Gfp};

#[test]
fn trim_gives_back_what_the_sheaves_and_barns_keep() {
    let h = heap();
    let pa = h.page_allocator();
    h.trim();
    let base = pa.nr_allocated_pages();
    // 100,000 objects of 64 B: 6.4 MB, about 1,560 pages of slabs.
    let objs: Vec<_> = (0..100_000)
        .map(|_| h.kmalloc(64, Gfp::KERNEL).expect("memory"))
        .collect();
    let used = pa.nr_allocated_pages() - base;
    assert!(used >= 1_500, "{used} pages for 6.4 MB of objects");
    for p in objs {
        // SAFETY: allocated above, freed once.
        assert!(unsafe { h.kfree(p.as_ptr()) });
    }
    h.drain_local();
    // Freed, most of them wait in full sheaves in the barn (up to 4 MiB of a small
    // class), so their slabs stay allocated: that is what trim is for.
    let kept = pa.nr_allocated_pages().saturating_sub(base);
    assert!(kept >= 256, "{kept} pages kept after the frees");
    let given_back = h.trim();
    let left = pa.nr_allocated_pages().saturating_sub(base);
    assert!(
        left < 64,
        "{left} of {kept} pages still allocated after trim ({given_back} given back)"
    );
    // The objects come back as usual afterwards.
    let p = h.kmalloc(64, Gfp::KERNEL).expect("memory");
    // SAFETY: allocated just above.
    assert!(unsafe { h.kfree(p.as_ptr()) });
    assert!(h.validate().is_empty());
}
