//! A mapping that finds a bounded heap at its bound trims the caches first, walking
//! the cache list. When that mapping was asked for inside a walk of the list on the
//! same thread (a program reading every cache's figures and building its own text
//! from them), the trim must not wait for the lock its own thread holds: the mapping
//! fails (null) instead. (Own process: the bound is process-wide.)

use kmem::heap;
use std::alloc::Layout;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn a_mapping_past_the_bound_inside_a_walk_of_the_caches_fails_instead_of_waiting() {
    std::env::remove_var("KMEM_MAX");
    std::env::set_var("KMEM_KFENCE", "off");
    let h = heap();
    h.set_max_bytes(64 << 20);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let big = Layout::from_size_align(80 << 20, 8).unwrap();
        let mut got = None;
        h.kmem().caches().for_each(|_| {
            if got.is_none() {
                got = Some(h.alloc(big));
            }
        });
        let p = got.expect("a cache on the list");
        // Outside the walk the same request trims with the walks, and still fails.
        let q = h.alloc(big);
        tx.send((p.is_null(), q.is_null())).unwrap();
    });
    let (inside, outside) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the mapping inside the walk returned (no wait for the list's own lock)");
    assert!(inside && outside, "past the bound: null");
}
