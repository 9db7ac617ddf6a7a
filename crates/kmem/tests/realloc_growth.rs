//! A buffer that a realloc moves to a larger class leaves its old object in the
//! object's slab, not in a sheaf (`Slub::free_outgrown`), so that the memory can serve
//! the larger class; charged objects keep their uncharge. One binary of its own, so
//! that no other test allocates from these classes meanwhile.

use kmem::{heap, stats, KmemAlloc, MemCgroup};
use std::alloc::{GlobalAlloc, Layout};

#[global_allocator]
static A: KmemAlloc = KmemAlloc;

fn active(name: &str) -> u64 {
    stats()
        .caches
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no cache {name}"))
        .active_objs
}

/// `n` buffers of `from` bytes, each filled with its index, grown one by one to `to`
/// bytes through `GlobalAlloc::realloc`; checked and returned.
fn grow(n: usize, from: usize, to: usize) -> Vec<*mut u8> {
    let old = Layout::from_size_align(from, 8).unwrap();
    let bufs: Vec<*mut u8> = (0..n)
        .map(|i| {
            // SAFETY: a non-zero size.
            let p = unsafe { A.alloc(old) };
            assert!(!p.is_null());
            // SAFETY: `from` bytes are ours.
            unsafe { std::ptr::write_bytes(p, i as u8, from) };
            p
        })
        .collect();
    let grown: Vec<*mut u8> = bufs
        .iter()
        .map(|&p| {
            // SAFETY: allocated above with `old`; `to` does not overflow.
            let q = unsafe { A.realloc(p, old, to) };
            assert!(!q.is_null());
            q
        })
        .collect();
    for (i, &q) in grown.iter().enumerate() {
        // SAFETY: `to` bytes are ours, the first `from` copied.
        let head = unsafe { std::slice::from_raw_parts(q, from) };
        assert!(
            head.iter().all(|&b| b == i as u8),
            "buffer {i} lost its bytes"
        );
    }
    grown
}

fn free_all(bufs: Vec<*mut u8>, size: usize) {
    for q in bufs {
        // SAFETY: allocated by `grow` with this layout.
        unsafe { A.dealloc(q, Layout::from_size_align(size, 8).unwrap()) };
    }
}

#[test]
fn outgrown_objects_go_back_to_their_slabs_and_charged_ones_are_uncharged() {
    // Plain: of the 2,000 objects of kmalloc-512 the realloc leaves, all but the one
    // spare sheaf's worth are no longer held (allocated or kept by a CPU's sheaves or
    // its barn: `active_objs`). In the barn they would still count: 2,000 fit in
    // kmalloc-512's.
    let n = 2000;
    let before = active("kmalloc-512");
    let old = Layout::from_size_align(512, 8).unwrap();
    let bufs: Vec<*mut u8> = (0..n)
        .map(|_| {
            // SAFETY: a non-zero size.
            unsafe { A.alloc(old) }
        })
        .collect();
    let held = active("kmalloc-512");
    assert!(held >= before + n as u64, "{held} held, {before} before");
    free_all(bufs, 512);
    let grown = grow(n, 512, 1024);
    let after = active("kmalloc-512");
    assert!(
        after + (n as u64) <= held + 256,
        "kmalloc-512 holds {after} objects after the growth, {held} with the buffers"
    );
    free_all(grown, 1024);

    // Charged: objects of a group's caches move with their charge. After growing
    // and freeing, the group's usage is back where it was.
    let cg = MemCgroup::new("realloc-growth").unwrap();
    {
        let _g = cg.enter();
        let base = cg.usage();
        let grown = grow(500, 2048, 4096);
        assert!(
            cg.usage() >= base + 500 * 4096,
            "usage {} base {base}",
            cg.usage()
        );
        free_all(grown, 4096);
        heap().detach_thread();
        assert!(
            cg.usage() <= base + 64 * 1024,
            "usage {} after the frees, {base} before: an uncharge was lost",
            cg.usage()
        );
    }
}
