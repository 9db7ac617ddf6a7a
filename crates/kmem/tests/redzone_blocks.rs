//! `KMEM_DEBUG=Z` on blocks above the kmalloc caches: a page block (2 MB) and a huge
//! mapping (6 MB) carry a red zone from the size asked for; an overflow by one byte is
//! reported at free in slub_debug's format (and the block kept), intact blocks free
//! silently and keep their contents through realloc, and the usable size is the
//! request. The test runs itself again as a child with `KMEM_DEBUG=Z` (read once, when
//! the heap starts) and `KMEM_ON_ERROR=continue`.

use kmem::{heap, Gfp};
use std::alloc::Layout;
use std::process::Command;

const CHILD: &str = "KMEM_TEST_REDZONE_BLOCKS_CHILD";

/// Runs test `name` again as a child (`marker` set) with `KMEM_DEBUG=Z` and
/// `KMEM_ON_ERROR=continue`: its status, stdout and stderr.
fn run_child(name: &str, marker: &str) -> (std::process::Output, String, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env(marker, "1")
        .env("KMEM_DEBUG", "Z")
        .env("KMEM_ON_ERROR", "continue")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// Runs test `name` as a child (see [`run_child`]) that prints `done` and makes two
/// damaged blocks: checks it ran to the end with two reports, each quarantining its
/// block; its stderr.
fn two_reports(name: &str, marker: &str, done: &str) -> String {
    let (out, stdout, stderr) = run_child(name, marker);
    assert!(
        out.status.success() && stdout.contains(done),
        "{stdout}\n{stderr}"
    );
    let count = |what: &str| stderr.matches(what).count();
    assert_eq!(
        count("BUG kmalloc-large (Not tainted): Redzone overwritten"),
        2,
        "{stderr}"
    );
    assert_eq!(
        count("FIX kmalloc-large: Object not freed (quarantined)"),
        2,
        "{stderr}"
    );
    stderr
}

fn child() {
    let h = heap();
    for size in [2_000_000usize, 6_000_000] {
        // Intact: filled to the last byte asked for, grown (moves), freed.
        let layout = Layout::from_size_align(size, 8).unwrap();
        let p = h.alloc(layout);
        assert!(!p.is_null());
        assert_eq!(
            // SAFETY: the test's own live allocation (or null, or not the heap's).
            unsafe { h.usable_size(p) },
            size,
            "usable size is the request"
        );
        // SAFETY: `size` bytes are ours.
        unsafe { p.write_bytes(0x33, size) };
        // SAFETY: ours, for `layout`.
        let q = unsafe { h.realloc(p, layout, size + 4096) };
        // SAFETY: the test's own live allocation (or null, or not the heap's).
        assert_eq!(unsafe { h.usable_size(q) }, size + 4096);
        // SAFETY: the old bytes were copied.
        assert_eq!(unsafe { q.add(size - 1).read() }, 0x33);
        // SAFETY: ours.
        assert!(unsafe { h.dealloc(q) });
        // One byte past the end: reported at free.
        let p = h.alloc(layout);
        // SAFETY: the bug under test.
        unsafe { p.add(size).write(0x41) };
        // SAFETY: ours (damaged): reported and kept.
        unsafe { h.dealloc(p) };
    }
    // kmalloc above the caches takes the same path.
    let p = h.kmalloc(1_500_000, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the test's own live allocation (or null, or not the heap's).
    assert_eq!(unsafe { h.ksize(p) }, 1_500_000);
    // SAFETY: ours.
    assert!(unsafe { h.kfree(p) });
    println!("blocks done");
}

#[test]
fn overflows_of_page_blocks_and_huge_mappings_are_reported() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let stderr = two_reports(
        "overflows_of_page_blocks_and_huge_mappings_are_reported",
        CHILD,
        "blocks done",
    );
    assert!(
        stderr.contains("@offset=2000000. First byte 0x41 instead of 0xcc"),
        "{stderr}"
    );
    assert!(
        stderr.contains("@offset=6000000. First byte 0x41 instead of 0xcc"),
        "{stderr}"
    );
    assert!(
        stderr.contains("bytes of pages)") && stderr.contains("bytes mapped)"),
        "{stderr}"
    );
}

const CHILD_REUSE: &str = "KMEM_TEST_REDZONE_REUSE_CHILD";

/// A red-zoned block freed leaves no trailer behind: the next owner of its pages, a
/// block handed out without a trailer of its own (an alignment above a page), is not
/// taken for a red-zoned block of the old size. (It was: `malloc_usable_size`
/// answered the old request, `realloc` copied only that much, and its free reported
/// the rest as a damaged red zone.)
#[test]
fn a_freed_block_leaves_no_trailer_for_the_next_owner_of_its_pages() {
    if std::env::var_os(CHILD_REUSE).is_some() {
        let h = heap();
        for round in 0..8 {
            let a = h.kmalloc(1536 << 10, Gfp::KERNEL).unwrap().as_ptr();
            // SAFETY: ours, intact, freed once.
            assert!(unsafe { h.kfree(a) });
            let size = 1900 << 10;
            let layout = Layout::from_size_align(size, 2 << 20).unwrap();
            let q = h.alloc(layout);
            assert!(!q.is_null());
            assert!(
                // SAFETY: the test's own live allocation (or null, or not the heap's).
                unsafe { h.usable_size(q) } >= size,
                "round {round}: usable {} of {size}",
                // SAFETY: the test's own live allocation (or null, or not the heap's).
                unsafe { h.usable_size(q) }
            );
            // SAFETY: `size` bytes are ours.
            unsafe { q.write_bytes(0x5c, size) };
            // SAFETY: ours, for `layout`.
            let r = unsafe { h.realloc(q, layout, 3 << 20) };
            assert!(!r.is_null());
            // SAFETY: every byte of the old block was copied.
            let copied = unsafe { std::slice::from_raw_parts(r, size) };
            assert!(copied.iter().all(|&b| b == 0x5c), "round {round}");
            // SAFETY: ours, freed once.
            assert!(unsafe { h.dealloc(r) });
        }
        println!("reuse done");
        return;
    }
    let (out, stdout, stderr) = run_child(
        "a_freed_block_leaves_no_trailer_for_the_next_owner_of_its_pages",
        CHILD_REUSE,
    );
    assert!(
        out.status.success() && stdout.contains("reuse done") && !stderr.contains("BUG"),
        "{stdout}\n{stderr}"
    );
}

const CHILD_TRAILER: &str = "KMEM_TEST_REDZONE_TRAILER_CHILD";

/// An overflow that runs over the block's trailer (the magic and size words at its
/// end) is damage too: the block was marked red-zoned when it was made. Before, a
/// block without its magic passed for one made without a zone, and was freed
/// silently: a long overflow went unseen where a short one was caught.
#[test]
fn an_overflow_over_the_trailer_is_reported() {
    if std::env::var_os(CHILD_TRAILER).is_some() {
        let h = heap();
        // A page block (2 MiB) and a huge mapping, each overflowed to its last byte.
        for (size, len) in [(1536usize << 10, 2 << 20), (5 << 20, (5 << 20) + 4096)] {
            let p = h.alloc(Layout::from_size_align(size, 8).unwrap());
            assert!(!p.is_null());
            // SAFETY: the bug under test: from the request to the block's end (the
            // request and its 24-byte trailer rounded up to pages).
            unsafe { p.add(size).write_bytes(b'A', len - size) };
            // SAFETY: ours (damaged): reported and kept.
            unsafe { h.dealloc(p) };
        }
        println!("trailers done");
        return;
    }
    let stderr = two_reports(
        "an_overflow_over_the_trailer_is_reported",
        CHILD_TRAILER,
        "trailers done",
    );
    assert_eq!(
        stderr
            .matches("the zone's trailer (its size) overwritten")
            .count(),
        2,
        "{stderr}"
    );
}
