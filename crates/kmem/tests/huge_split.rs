//! A cached huge mapping much larger than a request is split: the request takes what
//! it needs and the rest stays cached. Taken whole, an 8 MiB request after a 96 MiB
//! buffer was freed held 96 MiB, reported it as usable, and charged all of it to its
//! memory cgroup, which refused it at a limit the request fits. (Own process: the
//! cache is process-wide.)

use kmem::{heap, MemCgroup};
use std::alloc::Layout;

#[test]
fn a_cached_mapping_much_larger_than_a_request_is_split() {
    std::env::remove_var("KMEM_MAX");
    std::env::set_var("KMEM_KFENCE", "off");
    std::env::set_var("KMEM_THP", "off");
    let h = heap();
    let mib = |n: usize| Layout::from_size_align(n << 20, 8).unwrap();
    let big = h.alloc(mib(96));
    assert!(!big.is_null());
    // SAFETY: ours, freed once: it stays cached.
    assert!(unsafe { h.dealloc(big) });
    let cached = h.huge_cached_bytes();
    assert!(cached >= 96 << 20);
    // In a group limited to 32 MiB: an 8 MiB buffer fits, charged for what it holds.
    let g = MemCgroup::new("huge-split").expect("a group");
    g.set_max(32 << 20);
    let p = {
        let _active = g.enter();
        h.alloc(mib(8))
    };
    assert!(!p.is_null(), "8 MiB under a 32 MiB limit");
    assert_eq!(p, big, "the cached mapping's head");
    // SAFETY: the test's own live allocation (or null, or not the heap's).
    assert_eq!(unsafe { h.usable_size(p) }, 8 << 20);
    assert!(
        g.usage() >= 8 << 20 && g.usage() < 16 << 20,
        "{}",
        g.usage()
    );
    assert_eq!(
        h.huge_cached_bytes(),
        cached - (8 << 20),
        "the tail stays cached"
    );
    // SAFETY: the 8 MiB are ours.
    unsafe { p.write_bytes(1, 8 << 20) };
    // The tail serves the next request as a mapping of its own.
    let q = h.alloc(mib(80));
    assert_eq!(q as usize, big as usize + (8 << 20), "the tail");
    // SAFETY: ours, freed once each.
    unsafe {
        q.write_bytes(2, 80 << 20);
        assert!(h.dealloc(p) && h.dealloc(q));
    }
    assert!(g.usage() < 8 << 20);
}
