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

/// An allocation inside a walk of the cache list that finds memory at its bound runs
/// the slab layer's shrinker, which walks the list itself: it must not wait for the
/// lock its own thread holds. (It waited for good; now the shrinker leaves the
/// walks it cannot take at once, and the allocation fails or succeeds as memory
/// allows.)
#[test]
fn an_allocation_at_the_bound_inside_a_walk_returns() {
    // 8 MiB of memory at most: a bounded heap (sections of 4 MiB).
    let k = kmem(4, config(1, 2048));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (_a, c) = own_area(k);
        // Fill the bound with 64 KiB blocks.
        let mut held = Vec::new();
        while let Some(p) = k.kmalloc(c, 64 << 10, Gfp::KERNEL) {
            held.push(p);
        }
        assert!(!held.is_empty());
        let mut inside = 0;
        k.caches().for_each(|_| {
            if inside == 0 {
                // Needs pages: the page allocator's reclaim runs the shrinkers.
                if let Some(p) = k.kmalloc(c, 64 << 10, Gfp::KERNEL) {
                    held.push(p);
                }
            }
            inside += 1;
        });
        for p in &held {
            // SAFETY: ours, freed once.
            unsafe { k.kfree(c, p.as_ptr()) };
        }
        tx.send(inside).unwrap();
    });
    let n = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the allocation inside the walk returned (no wait for the list's own lock)");
    assert!(n > 0);
}
