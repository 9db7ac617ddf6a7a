//! A walk of the cache list may allocate in its callback (`kmem::stats`, slabinfo: the
//! text is built under the list's lock): the allocation's slow path must not wait for
//! that lock. A `shrink_all` on any thread asks every owner, the walker included, to
//! flush its caches (`DRAIN_CACHES`), which the next slow path does under the list's
//! lock; it waited for the walker, itself, for good.

mod common;

use common::{config, kmem, own_area};
use kmem_core::Gfp;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn an_allocation_inside_a_walk_of_the_cache_list_after_a_shrink_returns() {
    let k = kmem(2, config(1, 0));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (_a, c) = own_area(k);
        let objs: Vec<_> = (0..64)
            .map(|_| k.kmalloc(c, 64, Gfp::KERNEL).unwrap())
            .collect();
        for p in &objs {
            // SAFETY: ours, freed once.
            unsafe { k.kfree(c, p.as_ptr()) };
        }
        // The caller's sheaves flushed, and a flush asked of every owner (this one).
        k.shrink_all(c);
        let mut got = Vec::new();
        k.caches().for_each(|_| {
            // Slow paths (empty sheaves), the flush request pending.
            got.push(k.kmalloc(c, 64, Gfp::KERNEL).unwrap());
        });
        for p in &got {
            // SAFETY: ours, freed once.
            unsafe { k.kfree(c, p.as_ptr()) };
        }
        // The request, left for later, is done at a slow path outside the walk.
        k.shrink_all(c);
        let _ = k.kmalloc(c, 64, Gfp::KERNEL).unwrap();
        tx.send(got.len()).unwrap();
    });
    let n = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the walk's allocations returned (no wait for the list's own lock)");
    assert!(n > 10);
}
