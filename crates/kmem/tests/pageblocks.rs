//! Blocks of 1–2 MiB (order 9, the pageblock order) a thread frees wait on its CPU
//! area's pageblock list, and its next request of that order takes the one it freed
//! last, with no zone lock (`kmem_core::page::pcp`, "Pageblocks"). One binary of its
//! own, so that no other test's thread asks for a drain meanwhile.

use kmem::{heap, stats, Gfp, KmemAlloc};
use std::alloc::{GlobalAlloc, Layout};

const MIB: usize = 1 << 20;

/// Pages on the per-CPU lists of every zone.
fn pcp_pages() -> u64 {
    stats().zones.iter().map(|z| z.pcp_pages).sum()
}

/// The vmstat event `name`.
fn event(name: &str) -> u64 {
    stats()
        .vmstat
        .iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("{name} in vmstat"))
        .value as u64
}

#[test]
fn a_buffer_of_1_to_2_mib_freed_and_asked_for_again_comes_from_the_thread_s_list() {
    let h = heap();
    let a = KmemAlloc;
    // A thread of its own: the main test thread's area may hold lists already.
    std::thread::spawn(move || {
        let p = h.kmalloc(2 * MIB, Gfp::KERNEL).expect("2 MiB");
        // SAFETY: the block is ours, 2 MiB long.
        unsafe { p.as_ptr().write_bytes(0x5a, 2 * MIB) };
        let before = pcp_pages();
        let refills = event("pcp_refill");
        // SAFETY: allocated above, freed once.
        assert!(unsafe { h.kfree(p.as_ptr()) });
        assert_eq!(pcp_pages(), before + 512, "the block waits on the list");
        // A smaller request of the same order (1.5 MiB through `GlobalAlloc`) takes
        // it back: the same address, its contents as they were left.
        let l = Layout::from_size_align(3 * MIB / 2, 8).unwrap();
        // SAFETY: a non-zero size.
        let q = unsafe { a.alloc(l) };
        assert_eq!(q, p.as_ptr());
        // SAFETY: the block is ours again.
        assert_eq!(unsafe { q.add(MIB).read() }, 0x5a);
        assert_eq!(pcp_pages(), before);
        assert_eq!(event("pcp_refill"), refills, "no zone round trip");
        // Two more of the order live at once: of the three freed, the list keeps what
        // it has room for (two in a heap of few threads, at least one) and the rest
        // goes back to the zone.
        // SAFETY: a non-zero size.
        let (r, s) = unsafe { (a.alloc(l), a.alloc(l)) };
        assert!(!r.is_null() && !s.is_null());
        // SAFETY: allocated above with `l`, each freed once.
        unsafe {
            a.dealloc(q, l);
            a.dealloc(r, l);
            a.dealloc(s, l);
        }
        let waiting = pcp_pages() - before;
        let room = kmem_core::page::PCP_THP_HIGH_MAX as u64;
        assert!(
            waiting.is_multiple_of(512) && (1..=room).contains(&(waiting / 512)),
            "{waiting} pages wait"
        );
        // A zeroed request gets zeros even from a block that waited dirty.
        let z = h
            .kmalloc(2 * MIB, Gfp::KERNEL | Gfp::ZERO)
            .expect("2 MiB zeroed");
        // SAFETY: ours, 2 MiB long.
        let bytes = unsafe { std::slice::from_raw_parts(z.as_ptr(), 2 * MIB) };
        assert!(bytes.iter().all(|&b| b == 0));
        // SAFETY: allocated above.
        unsafe { h.kfree(z.as_ptr()) };
    })
    .join()
    .unwrap();
}
