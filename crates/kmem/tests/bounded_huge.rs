//! KMEM_MAX bounds the page allocator's memory and the huge mappings together: a
//! bounded heap with small objects live still makes huge mappings within the bound,
//! refuses those past it (null, never a crash), and after the small objects are freed
//! lends their free pages to the mappings. (Own process: the bound is process-wide.)

use kmem::{heap, Gfp};
use kmem_core::vmstat::VmEvent;
use std::alloc::Layout;

const MAX: usize = 64 << 20;
const PAGE: usize = 4096;

/// What the bound counts never exceeds it.
fn check_bound() {
    let pa = heap().page_allocator();
    assert!(pa.bound_pages() * PAGE <= MAX, "{} pages", pa.bound_pages());
    assert!(pa.outside_pages() * PAGE >= heap().huge_totals().1);
}

fn huge(mib: usize) -> *mut u8 {
    let p = heap().alloc(Layout::from_size_align(mib << 20, 8).unwrap());
    check_bound();
    if !p.is_null() {
        // SAFETY: a fresh allocation of that many bytes.
        unsafe { p.write_bytes(1, mib << 20) };
    }
    p
}

#[test]
fn huge_mappings_share_the_bound_with_the_pages() {
    std::env::set_var("KMEM_MAX", "64M");
    std::env::set_var("KMEM_KFENCE", "off");
    let h = heap();
    // 24 MiB of small objects: the page allocator brings memory online in steps.
    let small: Vec<_> = (0..(24 << 20) / 256)
        .map(|_| h.kmalloc(256, Gfp::KERNEL).expect("memory"))
        .collect();
    check_bound();
    assert!(
        h.page_allocator().nr_managed_pages() * PAGE < 48 << 20,
        "not the whole bound online at once"
    );
    // Room beside them for 30 MiB of mappings, not for 20 more.
    let a = huge(20);
    let b = huge(10);
    assert!(!a.is_null() && !b.is_null());
    assert!(huge(20).is_null(), "past the bound");
    // The small objects freed, their pages go to the mappings.
    for p in small {
        // SAFETY: allocated above, freed once.
        unsafe { h.kfree(p.as_ptr()) };
    }
    let c = huge(20);
    assert!(!c.is_null(), "freed pages lent to a mapping");
    let pa = h.page_allocator();
    let lent = pa.zone_event(0, VmEvent::BalloonInflate);
    assert!(lent > 0, "the loan took free pages");
    // The live view (`kmem top`) shows the bound and the loan, as the allocator
    // counts them.
    kmem::live::publish();
    let view = kmem::live::read(std::process::id()).expect("this process's view");
    let (counted, outside, on_loan) = pa.bound_usage();
    assert_eq!(view.bound_pages as usize * PAGE, MAX);
    assert_eq!(
        (
            view.bound_counted_pages as usize,
            view.bound_outside_pages as usize,
            view.bound_lent_pages as usize
        ),
        (counted, outside, on_loan)
    );
    assert!(on_loan > 0 && on_loan as u64 <= lent, "{on_loan} of {lent}");
    assert!(outside * PAGE >= h.huge_totals().1);
    // Small objects now get what the bound has left, and no more.
    let mut again = Vec::new();
    while let Some(p) = h.kmalloc(4096, Gfp::NOWARN) {
        again.push(p);
        if again.len() % 256 == 0 {
            check_bound();
        }
    }
    check_bound();
    let got = again.len() * 4096;
    assert!(got > 5 << 20 && got <= 14 << 20, "{got}");
    for p in again {
        // SAFETY: allocated above, freed once.
        unsafe { h.kfree(p.as_ptr()) };
    }
    // The mappings freed stay cached, holding their bytes of the bound.
    for p in [a, b, c] {
        // SAFETY: ours, freed once.
        assert!(unsafe { h.dealloc(p) });
    }
    check_bound();
    let cached = h.huge_cached_bytes();
    assert!(cached >= 40 << 20, "{cached}");
    assert_eq!(pa.outside_pages() * PAGE, cached);
    // Small objects get those bytes back: the page allocator's shrinker unmaps the
    // cache when the bound is short, and the lent pages return.
    let small: Vec<_> = (0..(48 << 20) / 4096)
        .map(|_| h.kmalloc(4096, Gfp::KERNEL).expect("the cache made way"))
        .collect();
    check_bound();
    assert!(h.huge_cached_bytes() < cached);
    assert!(
        pa.zone_event(0, VmEvent::BalloonDeflate) > 0,
        "lent pages came back"
    );
    for p in small {
        // SAFETY: allocated above, freed once.
        unsafe { h.kfree(p.as_ptr()) };
    }
    // And a mapping of most of the bound, once they are freed.
    let d = huge(56);
    assert!(!d.is_null(), "the whole bound again");
    // SAFETY: ours.
    assert!(unsafe { h.dealloc(d) });
    check_bound();
    // A mapping grown by `realloc` past what the bound has left beside a cached one:
    // the cache makes way, as for a new mapping, and the contents stay.
    h.trim();
    let (a, b) = (huge(24), huge(24));
    assert!(!a.is_null() && !b.is_null());
    // SAFETY: ours.
    assert!(unsafe { h.dealloc(b) });
    assert!(h.huge_cached_bytes() >= 24 << 20);
    let old = Layout::from_size_align(24 << 20, 8).unwrap();
    // SAFETY: ours, allocated with `old`; replaced by the result.
    let g = unsafe { h.realloc(a, old, 48 << 20) };
    assert!(!g.is_null(), "the cached mapping made way for the growth");
    check_bound();
    // SAFETY: the first 24 MiB were written with ones, and the block holds 48 MiB.
    unsafe {
        assert_eq!((*g, *g.add((24 << 20) - 1)), (1, 1));
        g.add(48 << 20).sub(1).write(2);
        assert!(h.dealloc(g));
    }
    check_bound();
}
