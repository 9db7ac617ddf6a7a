//! A bound set at run time (`Heap::set_max_bytes`, without KMEM_MAX) is kept as
//! KMEM_MAX's is: a huge mapping that finds the bound held by cached mappings gets
//! their room (the trim before a failure), where it once failed. (Own process: the
//! bound is process-wide.)

use kmem::heap;
use std::alloc::Layout;

#[test]
fn a_bound_set_at_run_time_trims_the_mapping_cache_before_a_mapping_fails() {
    std::env::remove_var("KMEM_MAX");
    std::env::set_var("KMEM_KFENCE", "off");
    let h = heap();
    h.set_max_bytes(64 << 20);
    let mib = |n: usize| Layout::from_size_align(n << 20, 8).unwrap();
    let (a, b) = (h.alloc(mib(24)), h.alloc(mib(24)));
    assert!(!a.is_null() && !b.is_null());
    // SAFETY: ours, freed once; both stay cached, holding 48 MiB of the bound.
    unsafe { assert!(h.dealloc(a) && h.dealloc(b)) };
    assert!(h.huge_cached_bytes() >= 48 << 20);
    // 40 MiB: a cached mapping grown by 16 MiB would pass the bound; the cache goes.
    let c = h.alloc(mib(40));
    assert!(!c.is_null(), "the cached mappings made way");
    assert!(h.huge_cached_bytes() < 48 << 20);
    let pa = h.page_allocator();
    assert!(
        pa.bound_pages() * 4096 <= 64 << 20,
        "{} pages",
        pa.bound_pages()
    );
    // SAFETY: a fresh block of 40 MiB, ours, freed once.
    unsafe {
        c.add((40 << 20) - 1).write(1);
        assert!(h.dealloc(c));
    }
    // Past the bound, a mapping still fails: null, no crash.
    assert!(h.alloc(mib(80)).is_null());
}
