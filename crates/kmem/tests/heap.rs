//! The process heap through its public API: pages, bulk, thread areas, reports.

use kmem::{heap, Gfp, PAGE_SIZE};
use std::ptr::NonNull;

#[test]
fn pages_round_trip_through_the_heap() {
    let h = heap();
    for order in 0..=kmem::MAX_ORDER {
        let page = h.alloc_pages(Gfp::ZERO, order).expect("pages");
        let addr = h.page_address(page);
        assert_eq!(
            addr.as_ptr() as usize % (PAGE_SIZE << order),
            0,
            "naturally aligned"
        );
        // SAFETY: the block is ours.
        unsafe {
            let bytes = std::slice::from_raw_parts_mut(addr.as_ptr(), PAGE_SIZE << order);
            assert!(bytes.iter().all(|&b| b == 0), "__GFP_ZERO");
            bytes.fill(0x5a);
        }
        assert_eq!(h.virt_to_page(addr.as_ptr()), Some(page));
        // SAFETY: allocated above with this order.
        unsafe { h.free_pages(page, order) };
    }
}

#[test]
fn bulk_through_the_heap() {
    let h = heap();
    let mut pages: Vec<Option<NonNull<kmem::Page>>> = vec![None; 128];
    assert_eq!(h.alloc_pages_bulk(Gfp::KERNEL, &mut pages), 128);
    let mut addrs: Vec<usize> = pages
        .iter()
        .map(|p| h.page_address(p.unwrap()).as_ptr() as usize)
        .collect();
    addrs.sort();
    addrs.dedup();
    assert_eq!(addrs.len(), 128);
    // SAFETY: allocated above, order 0.
    unsafe { h.free_pages_bulk(&mut pages) };
    assert!(pages.iter().all(Option::is_none));
}

#[test]
fn thread_areas_are_recycled() {
    let h = heap();
    // Warm up: make sure a few areas exist.
    let pa = h.page_allocator();
    for round in 0..300 {
        std::thread::spawn(move || {
            let h = heap();
            let pages: Vec<_> = (0..20)
                .map(|_| h.alloc_pages(Gfp::KERNEL, 0).unwrap())
                .collect();
            for p in pages {
                // SAFETY: allocated above.
                unsafe { h.free_pages(p, 0) };
            }
        })
        .join()
        .unwrap();
        if round == 10 {
            // Other tests in this binary run threads too; allow for them.
            assert!(pa.cpu_areas().nr_areas() < 64);
        }
    }
    assert!(
        pa.cpu_areas().nr_areas() < 64,
        "300 threads made {} areas",
        pa.cpu_areas().nr_areas()
    );
}

#[test]
fn reports_name_the_zone() {
    let h = heap();
    let p = h.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert!(h.buddyinfo().starts_with("Node 0, zone   Normal "));
    assert!(h.zoneinfo().contains("  pages free     "));
    assert!(h.vmstat().contains("pgalloc_normal "));
    assert!(h.show_free_areas().starts_with("Mem-Info:\n"));
    // SAFETY: allocated above.
    unsafe { h.free_pages(p, 0) };
}
