//! Memory pressure: four threads drive a bounded heap (`KMEM_MAX`) past exhaustion
//! with kmalloc of mixed sizes. Allocations fail with `None`, never a crash; the
//! page allocator stalls, drains per-CPU lists and runs the slab shrinker before it
//! fails (counted in vmstat); what the threads hold keeps its contents; after frees,
//! allocation succeeds again and every page comes back. (Own process: the bound is
//! process-wide.)

mod common;

use common::{ends, XorShift};
use kmem::{heap, Gfp, SlabFlags};
use std::ptr::NonNull;
use std::sync::Barrier;

const MAX: usize = 48 << 20;

fn stamp(p: *mut u8, len: usize) {
    // SAFETY: `p` is ours, `len` bytes.
    unsafe { common::fill(p, len, ends(len)) };
}

fn intact(p: *mut u8, len: usize) -> bool {
    // SAFETY: `p` is ours, `len` bytes, stamped.
    unsafe { common::damaged(p, p as usize, len, ends(len)) }.is_none()
}

/// Allocates until `misses` allocations in a row fail; returns what it holds.
fn fill(seed: usize, held: &mut Vec<(usize, usize)>, misses: usize) -> usize {
    let h = heap();
    let mut rng = XorShift::new(seed as u64 | 1);
    let mut failed = 0;
    let mut fails = 0;
    while failed < misses {
        let x = rng.next_u64() as usize;
        let size = match x % 10 {
            0 => 64 << 10,
            1..=3 => 4096 + x % 8192,
            _ => 8 + (x >> 8) % 1024,
        };
        match h.kmalloc(size, Gfp::NOWARN) {
            Some(p) => {
                failed = 0;
                stamp(p.as_ptr(), size);
                held.push((p.as_ptr() as usize, size));
            }
            None => {
                failed += 1;
                fails += 1;
            }
        }
    }
    fails
}

fn free_all(held: &mut Vec<(usize, usize)>, keep_every: usize) {
    let mut kept = Vec::new();
    for (i, (p, len)) in held.drain(..).enumerate() {
        assert!(intact(p as *mut u8, len), "object {p:#x} lost its contents");
        if keep_every != 0 && i % keep_every == 0 {
            kept.push((p, len));
        } else {
            // SAFETY: ours, from kmalloc.
            unsafe { heap().kfree(p as *mut u8) };
        }
    }
    *held = kept;
}

#[test]
fn a_bounded_heap_fails_cleanly_under_threads_and_recovers() {
    std::env::set_var("KMEM_MAX", MAX.to_string());
    let h = heap();
    let start_free = h.page_allocator().nr_free_pages();
    // Empty slabs for the shrinker to find, whatever the threads below do: a cache
    // filled here and emptied by another thread, whose exit puts the empty slabs on
    // the node's partial list (up to min_partial of them stay there).
    let c = h
        .kmem_cache_create("pressure-2k", 2048, 8, SlabFlags::empty(), None)
        .expect("cache");
    let objs: Vec<usize> = (0..64)
        .map(|_| h.kmem_cache_alloc(c, Gfp::KERNEL).expect("memory").as_ptr() as usize)
        .collect();
    std::thread::spawn(move || {
        for o in objs {
            // SAFETY: objects of `c`, allocated above, freed once.
            unsafe { h.kmem_cache_free(c, NonNull::new(o as *mut u8).expect("non-null")) };
        }
    })
    .join()
    .expect("no panic");
    let barrier = Barrier::new(4);
    let fails: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut held = Vec::new();
                    // Everybody exhausts the heap, then frees all but a quarter,
                    // then exhausts it again: the second time, free pages sit in
                    // other threads' lists and empty slabs in the caches.
                    let mut fails = fill(0x9e37 * (t + 1), &mut held, 20);
                    barrier.wait();
                    free_all(&mut held, 4);
                    barrier.wait();
                    fails += fill(0x51ed * (t + 7), &mut held, 20);
                    barrier.wait();
                    free_all(&mut held, 0);
                    fails
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("no panic")).sum()
    });
    assert!(fails >= 4 * 20 * 2, "every thread saw its failures");
    let stalls = common::vmstat("allocstall_normal");
    let failed = common::vmstat("pgalloc_fail");
    let shrunk = common::vmstat("shrinker_freed");
    let drained = common::vmstat("pcp_drain");
    eprintln!("stalls {stalls}, page allocation failures {failed}, shrinker freed {shrunk} pages, pcp drains {drained}");
    assert!(
        stalls >= failed && failed > 0,
        "failures come after a stall"
    );
    assert!(
        shrunk > 0,
        "the slab shrinker gave pages back under pressure"
    );
    assert!(drained > 0, "per-CPU lists were drained under pressure");
    // Everything is back: the threads exited (their CPU areas flushed), the caches
    // are shrunk, and the heap serves most of its bound in 64 KiB blocks again.
    h.shrink_all();
    h.drain_all();
    let mut big = Vec::new();
    while let Some(p) = h.kmalloc(64 << 10, Gfp::NOWARN) {
        big.push(p);
    }
    assert!(
        big.len() * (64 << 10) >= MAX * 3 / 4,
        "only {} KiB after recovery",
        big.len() * 64
    );
    for p in big {
        // SAFETY: ours.
        unsafe { h.kfree(p.as_ptr()) };
    }
    h.shrink_all();
    h.drain_all();
    assert!(h.page_allocator().nr_free_pages() >= start_free);
}
