//! A buffer that `realloc` moves past the slab classes (1 MiB) moves into a direct
//! mapping, which then grows without a copy: over the cached mapping right after it,
//! or with `mremap`. One binary of its own: the mapping cache is process-wide.

use kmem::{heap, KmemAlloc};
use std::alloc::{GlobalAlloc, Layout};

#[global_allocator]
static A: KmemAlloc = KmemAlloc;

const M: usize = 1 << 20;

fn layout(n: usize) -> Layout {
    Layout::from_size_align(n, 8).unwrap()
}

/// A buffer of 1 MiB (the largest slab class) filled with `fill`, doubled by `GlobalAlloc::realloc` up to
/// 32 MiB (its contents checked at each step, the new half filled); returns each
/// step's address and size, and the cache's bytes after it.
fn double_to_32_mib(fill: u8) -> Vec<(*mut u8, usize, usize)> {
    let mut size = M;
    // SAFETY: a non-zero size; each realloc gets the block and layout before it.
    let mut p = unsafe { A.alloc(layout(size)) };
    assert!(!p.is_null());
    assert!(heap().page_allocator().in_span(p), "a slab object");
    // SAFETY: `size` bytes of ours.
    unsafe { p.write_bytes(fill, size) };
    let mut steps = Vec::new();
    while size < 32 * M {
        let n = size * 2;
        // SAFETY: as above.
        let q = unsafe { A.realloc(p, layout(size), n) };
        assert!(!q.is_null());
        // SAFETY: `n` bytes of ours, the first `size` copied or kept.
        unsafe {
            let old = std::slice::from_raw_parts(q, size);
            assert!(old.iter().all(|&b| b == fill), "lost bytes at {n}");
            q.add(size).write_bytes(fill, n - size);
        }
        steps.push((q, n, heap().huge_cached_bytes()));
        (p, size) = (q, n);
    }
    steps
}

#[test]
fn a_buffer_grown_past_the_classes_becomes_a_mapping_that_grows_in_place() {
    let h = heap();
    let span = h.page_allocator();
    // First round: past 1 MiB the buffer is a mapping, not a page block of the span.
    let first = double_to_32_mib(1);
    for &(q, n, _) in &first {
        assert!(!span.in_span(q), "{n} bytes: a mapping");
    }
    let &(q, n, _) = first.last().unwrap();
    // SAFETY: the buffer `double_to_32_mib` left, `n` bytes.
    unsafe { A.dealloc(q, layout(n)) };
    let cached = h.huge_cached_bytes();
    assert!(cached >= 32 * M, "freed and cached whole: {cached}");
    // Second round, on the cached mapping: the 2 MiB step takes its head (a copy of
    // 1 MiB), and every later step takes the cached bytes right after it, in place.
    let second = double_to_32_mib(2);
    let (at, _, mut before) = second[0];
    assert_eq!(at, q, "the cached mapping's head");
    assert_eq!(before, cached - 2 * M);
    for &(q, n, after) in &second[1..] {
        assert_eq!(q, at, "{n} bytes: grown where it was");
        assert_eq!(before - after, n / 2, "{n} bytes: from the cache");
        before = after;
    }
    // Shrunk to 1.5 MiB it stays a mapping, where it was; to 512 KiB it moves back
    // into a slab.
    // SAFETY: the buffer of 32 MiB, then of 1.5 MiB, given up in turn.
    unsafe {
        let s = A.realloc(at, layout(32 * M), 3 * M / 2);
        assert_eq!(s, at);
        let t = A.realloc(s, layout(3 * M / 2), 512 << 10);
        assert!(span.in_span(t));
        let bytes = std::slice::from_raw_parts(t, 512 << 10);
        assert!(bytes.iter().all(|&b| b == 2));
        A.dealloc(t, layout(512 << 10));
    }
}
