//! A buffer that `realloc` moves past the slab classes (1 MiB) moves into a direct
//! mapping, which then grows without a copy: over the cached mapping right after it,
//! or with `mremap`; past 128 live mappings (the cache's slots), into page blocks as
//! before. One binary of
//! its own, each test in a child process with the defaults (no `KMEM_*` variable):
//! the mapping cache and the count of mappings are process-wide.

use kmem::{heap, KmemAlloc};
use std::alloc::{GlobalAlloc, Layout};
use std::process::Command;

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

const CHILD: &str = "KMEM_TEST_REALLOC_MAPPING_CHILD";

/// Runs test `name` again in a child process whose environment has no `KMEM_*`
/// variable (the heap reads them before any test runs); true in that child, which
/// then runs the test's body.
fn in_child(name: &str) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("KMEM_") {
            c.env_remove(k);
        }
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

#[test]
fn a_buffer_grown_past_the_classes_becomes_a_mapping_that_grows_in_place() {
    if !in_child("a_buffer_grown_past_the_classes_becomes_a_mapping_that_grows_in_place") {
        return;
    }
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

/// Past 128 live huge allocations (as many as the mapping cache keeps), a buffer moved
/// past the classes takes a page block (up to 4 MiB); its contents move all the same.
#[test]
fn past_128_live_mappings_moved_buffers_take_page_blocks() {
    if !in_child("past_128_live_mappings_moved_buffers_take_page_blocks") {
        return;
    }
    let (h, n) = (heap(), 136);
    let grown: Vec<*mut u8> = (0..n)
        .map(|i| {
            // SAFETY: a non-zero size; the realloc gets the block and its layout.
            unsafe {
                let p = A.alloc(layout(M));
                assert!(!p.is_null());
                p.write_bytes(i as u8, M);
                let q = A.realloc(p, layout(M), 2 * M);
                assert!(!q.is_null());
                assert!(std::slice::from_raw_parts(q, M)
                    .iter()
                    .all(|&b| b == i as u8));
                q
            }
        })
        .collect();
    let mapped = grown
        .iter()
        .filter(|&&q| !h.page_allocator().in_span(q))
        .count();
    assert_eq!(
        mapped, 128,
        "the first 128 are mappings, the rest page blocks"
    );
    assert_eq!(h.huge_totals().0, 128);
    for q in grown {
        // SAFETY: each grown buffer, freed once.
        unsafe { A.dealloc(q, layout(2 * M)) };
    }
}
