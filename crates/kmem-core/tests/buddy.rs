//! The buddy allocator, per-CPU lists, bulk, watermarks, NUMA, reporting: behaviour
//! through the public API of `PageAllocator`.

mod common;

use common::{allocator, config, pattern};
use kmem_core::page::{
    MEMMAP_PAGES, ONLINE_LISTED_PAGES, PCP_HIGH_MAX, PCP_MIN_HIGH, SECTION_MANAGED_PAGES,
};
use kmem_core::vmstat::{VmEvent, ZoneStat};
use kmem_core::{CpuRef, Gfp, Page, MAX_ORDER, PAGE_SIZE};
use std::ptr::NonNull;

/// Free blocks per order of a section of `pages` managed pages, all free, whose pages
/// below pfn `listed_to` have been listed (and merged back into the largest aligned
/// blocks) and the rest are still deferred (counted as the blocks they will be listed
/// as: the largest aligned ones).
fn section_blocks(pages: usize, listed_to: usize) -> [usize; 11] {
    let mut counts = [0; 11];
    let end = MEMMAP_PAGES + pages;
    for (mut pfn, to) in [(MEMMAP_PAGES, listed_to.min(end)), (listed_to, end)] {
        while pfn < to {
            let mut order = MAX_ORDER;
            while order > 0 && (!pfn.is_multiple_of(1 << order) || pfn + (1 << order) > to) {
                order -= 1;
            }
            counts[order] += 1;
            pfn += 1 << order;
        }
    }
    counts
}

/// [`section_blocks`] of a fresh section: its first [`ONLINE_LISTED_PAGES`] listed.
fn fresh_section_blocks(pages: usize) -> [usize; 11] {
    section_blocks(pages, MEMMAP_PAGES + ONLINE_LISTED_PAGES)
}

/// [`section_blocks`] of a section whose every page has been listed.
fn merged_section_blocks(pages: usize) -> [usize; 11] {
    section_blocks(pages, MEMMAP_PAGES + pages)
}

/// Pages held by CPU areas (they live as long as the allocator).
fn area_pages(pa: &kmem_core::PageAllocator<common::TestPlatform>) -> usize {
    pa.cpu_areas().nr_areas() << kmem_core::percpu::CPU_AREA_ORDER
}

#[test]
fn split_then_merge_restores_the_free_lists() {
    let pa = allocator(2, config(1, 0));
    let page = pa.alloc_pages(None, Gfp::KERNEL, 0).expect("page");
    let after_split = pa.free_area_counts(0);
    let fresh = fresh_section_blocks(SECTION_MANAGED_PAGES);
    // The first block handed out heads the free list: the resident-first rule picks
    // from the head; a fresh section lists only its first ONLINE_LISTED_PAGES, one
    // block, so that block was split down into one block of each smaller order.
    let top = ONLINE_LISTED_PAGES.trailing_zeros() as usize;
    let mut expect = fresh;
    expect[top] -= 1;
    for c in expect.iter_mut().take(top) {
        *c += 1;
    }
    assert_eq!(after_split, expect, "expand lists one buddy per order");
    assert_eq!(pa.nr_free_pages(), SECTION_MANAGED_PAGES - 1);
    // SAFETY: allocated above with order 0.
    unsafe { pa.free_pages(None, page, 0) };
    assert_eq!(
        pa.free_area_counts(0),
        fresh,
        "free merges back to the original blocks"
    );
    assert_eq!(pa.nr_free_pages(), SECTION_MANAGED_PAGES);
}

#[test]
fn blocks_are_aligned_distinct_and_writable() {
    let pa = allocator(2, config(1, 0));
    let mut held = Vec::new();
    for order in 0..=MAX_ORDER {
        for _ in 0..3 {
            let page = pa.alloc_pages(None, Gfp::KERNEL, order).expect("page");
            let addr = pa.page_address(page).as_ptr() as usize;
            assert_eq!(
                pa.page_to_pfn(page) % (1 << order),
                0,
                "order-{order} alignment"
            );
            assert_eq!(pa.virt_to_page(addr as *const u8), Some(page));
            assert_eq!(
                pa.virt_to_page((addr + (PAGE_SIZE << order) - 1) as *const u8)
                    .map(|p| pa.page_to_pfn(p)),
                Some(pa.page_to_pfn(page) + (1 << order) - 1)
            );
            // SAFETY: the block is ours: write the first and last word.
            unsafe {
                *(addr as *mut u64) = pattern(addr);
                *((addr + (PAGE_SIZE << order) - 8) as *mut u64) = pattern(addr);
            }
            held.push((addr, order, page));
        }
    }
    held.sort();
    for w in held.windows(2) {
        assert!(w[0].0 + (PAGE_SIZE << w[0].1) <= w[1].0, "blocks overlap");
    }
    for &(addr, order, page) in &held {
        // SAFETY: still ours.
        unsafe {
            assert_eq!(*(addr as *const u64), pattern(addr));
            assert_eq!(
                *((addr + (PAGE_SIZE << order) - 8) as *const u64),
                pattern(addr)
            );
            pa.free_pages(None, page, order);
        }
    }
    assert_eq!(pa.nr_free_pages(), pa.nr_managed_pages());
    assert_eq!(pa.nr_allocated_pages(), 0);
}

#[test]
fn foreign_addresses_have_no_page() {
    let pa = allocator(2, config(1, 0));
    let page = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
    let addr = pa.page_address(page).as_ptr();
    let local = 0u64;
    assert!(pa.virt_to_page(&local as *const u64 as *const u8).is_none());
    // The memmap itself is not a managed page.
    let memmap = page.as_ptr() as *const u8;
    assert!(pa.virt_to_page(memmap).is_none());
    assert!(pa.virt_to_page(addr).is_some());
    // SAFETY: allocated above.
    unsafe { pa.free_pages(None, page, 0) };
}

#[test]
fn freeing_everything_coalesces_to_max_order_blocks() {
    let pa = allocator(4, config(1, 0));
    let mut rng = 0x1234_5678u64;
    let mut held = Vec::new();
    for _ in 0..3000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let order = (rng % 6) as usize;
        held.push((pa.alloc_pages(None, Gfp::KERNEL, order).unwrap(), order));
    }
    // Free in a scrambled order.
    let n = held.len();
    for i in 0..n {
        let j = (i * 7919) % n;
        held.swap(i, j);
    }
    for (page, order) in held {
        // SAFETY: allocated above with that order.
        unsafe { pa.free_pages(None, page, order) };
    }
    let sections = pa.nr_online_sections();
    // Every page was listed on the way (more than a section was taken), and all of
    // them merged back.
    let mut expect = merged_section_blocks(SECTION_MANAGED_PAGES);
    for c in expect.iter_mut() {
        *c *= sections;
    }
    assert_eq!(pa.free_area_counts(0), expect);
    assert_eq!(pa.nr_free_pages(), pa.nr_managed_pages());
}

#[test]
fn pcp_serves_and_drain_returns_everything() {
    let pa = allocator(2, config(1, 0));
    let area = pa.cpu_area_get(0).expect("area");
    // SAFETY: this test thread owns the area.
    let cpu = unsafe { CpuRef::new(area) };
    let managed_before_pages = {
        let p = pa.alloc_pages(Some(cpu), Gfp::KERNEL, 0).unwrap();
        // SAFETY: just allocated.
        unsafe { pa.free_pages(Some(cpu), p, 0) };
        pa.nr_managed_pages()
    };
    let pcp = pa.zone_pcp_of(area, 0);
    assert!(
        pcp.count() > 0,
        "a refill leaves a batch on the per-CPU list"
    );
    let refills = pa.event(VmEvent::PcpRefill);
    // Allocation and free now stay on the list: no more refills.
    for _ in 0..1000 {
        let p = pa.alloc_pages(Some(cpu), Gfp::KERNEL, 0).unwrap();
        // SAFETY: just allocated.
        unsafe { pa.free_pages(Some(cpu), p, 0) };
    }
    assert_eq!(pa.event(VmEvent::PcpRefill), refills);
    for order in 1..=3 {
        let p = pa.alloc_pages(Some(cpu), Gfp::KERNEL, order).unwrap();
        // SAFETY: just allocated.
        unsafe { pa.free_pages(Some(cpu), p, order) };
    }
    assert!(pa.nr_free_pages() < managed_before_pages);
    pa.drain_local_pages(cpu);
    assert_eq!(pcp.count(), 0);
    assert_eq!(pa.nr_free_pages(), pa.nr_managed_pages() - area_pages(pa));
    // A drain asked by another context is done by the owner at its next call.
    let p = pa.alloc_pages(Some(cpu), Gfp::KERNEL, 0).unwrap();
    // SAFETY: just allocated.
    unsafe { pa.free_pages(Some(cpu), p, 0) };
    assert!(pcp.count() > 0);
    pa.drain_all_pages(None);
    assert!(pcp.count() > 0, "nobody but the owner touches its lists");
    let p = pa.alloc_pages(Some(cpu), Gfp::KERNEL, 0).unwrap();
    // SAFETY: just allocated.
    unsafe { pa.free_pages(Some(cpu), p, 0) };
    assert!(pa.event(VmEvent::PcpDrain) >= 2);
    // SAFETY: we own the area and stop using it.
    unsafe { pa.cpu_area_put(area) };
    assert_eq!(pcp.count(), 0);
    assert_eq!(pa.nr_free_pages(), pa.nr_managed_pages() - area_pages(pa));
}

#[test]
fn pcp_spills_above_high() {
    let pa = allocator(2, config(1, 0));
    let area = pa.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = unsafe { CpuRef::new(area) };
    let pages: Vec<_> = (0..1000)
        .map(|_| pa.alloc_pages(Some(cpu), Gfp::KERNEL, 0).unwrap())
        .collect();
    for p in pages {
        // SAFETY: allocated above.
        unsafe { pa.free_pages(Some(cpu), p, 0) };
        assert!(pa.zone_pcp_of(area, 0).count() <= PCP_HIGH_MAX as usize);
    }
    assert!(pa.event(VmEvent::PcpSpill) > 0);
    // SAFETY: owned; not used afterwards.
    unsafe { pa.cpu_area_put(area) };
    assert_eq!(pa.nr_free_pages(), pa.nr_managed_pages() - area_pages(pa));
}

#[test]
fn many_owners_share_a_bounded_budget() {
    let pa = allocator(2, config(1, 0));
    // Bring the zone online first.
    let p = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
    let mut areas = Vec::new();
    for _ in 0..1000 {
        areas.push(pa.cpu_area_get(0).expect("area"));
    }
    let high = pa.zone(0).pcp_high();
    assert!(high == 0 || high >= PCP_MIN_HIGH);
    // Every owner allocates and frees a few pages: the lists together stay within
    // the zone budget.
    let budget = (pa.zone(0).managed_pages() / 32).max(4 * PCP_HIGH_MAX as usize);
    for area in &areas {
        // SAFETY: this thread owns all these areas and uses one at a time.
        let cpu = unsafe { CpuRef::new(area) };
        let ps: Vec<_> = (0..8)
            .map(|_| pa.alloc_pages(Some(cpu), Gfp::KERNEL, 0).unwrap())
            .collect();
        for q in ps {
            // SAFETY: allocated above.
            unsafe { pa.free_pages(Some(cpu), q, 0) };
        }
    }
    assert!(
        pa.nr_pcp_pages(0) <= budget,
        "{} > {budget}",
        pa.nr_pcp_pages(0)
    );
    for area in areas {
        // SAFETY: owned and no longer used.
        unsafe { pa.cpu_area_put(area) };
    }
    assert_eq!(pa.cpu_areas().nr_owned(), 0);
    // Areas are recycled, not made anew.
    let made = pa.cpu_areas().nr_areas();
    for _ in 0..100 {
        let a = pa.cpu_area_get(0).unwrap();
        // SAFETY: owned and no longer used.
        unsafe { pa.cpu_area_put(a) };
    }
    assert_eq!(pa.cpu_areas().nr_areas(), made);
    assert!(pa.zone(0).pcp_high() >= PCP_MIN_HIGH);
    // SAFETY: allocated above.
    unsafe { pa.free_pages(None, p, 0) };
    // Area memory stays allocated (areas live forever); everything else is back.
    assert_eq!(
        pa.nr_allocated_pages(),
        made << kmem_core::percpu::CPU_AREA_ORDER
    );
}

#[test]
fn bulk_alloc_fills_empty_slots_and_bulk_free_returns_them() {
    let pa = allocator(2, config(1, 0));
    for with_cpu in [false, true] {
        let area = pa.cpu_area_get(0).unwrap();
        // SAFETY: owned by this thread.
        let cpu = with_cpu.then(|| unsafe { CpuRef::new(area) });
        let keep = pa.alloc_pages(cpu, Gfp::KERNEL, 0).unwrap();
        let mut pages: Vec<Option<NonNull<Page>>> = vec![None; 200];
        pages[5] = Some(keep);
        let n = pa.alloc_pages_bulk(cpu, Gfp::ZERO, None, &mut pages);
        assert_eq!(n, 200);
        assert_eq!(pages[5], Some(keep), "filled slots are left alone");
        let mut addrs: Vec<usize> = pages
            .iter()
            .map(|p| pa.page_address(p.unwrap()).as_ptr() as usize)
            .collect();
        for &a in &addrs {
            // SAFETY: our pages; zeroed by __GFP_ZERO (except `keep`, which we skip).
            unsafe {
                if a != pa.page_address(keep).as_ptr() as usize {
                    assert_eq!(*(a as *const u64), 0);
                }
                *(a as *mut u64) = pattern(a);
            }
        }
        addrs.sort();
        addrs.dedup();
        assert_eq!(addrs.len(), 200, "no page handed out twice");
        // SAFETY: all allocated above, order 0.
        unsafe { pa.free_pages_bulk(cpu, &mut pages) };
        assert!(pages.iter().all(|p| p.is_none()));
        if let Some(c) = cpu {
            pa.drain_local_pages(c);
        }
        // SAFETY: owned and no longer used.
        unsafe { pa.cpu_area_put(area) };
        assert_eq!(
            pa.nr_allocated_pages(),
            pa.cpu_areas().nr_areas() << kmem_core::percpu::CPU_AREA_ORDER
        );
    }
}

/// A bulk free compares the small lists with `high`, not their count with the 2 MiB
/// blocks parked on the pageblock list (which made the spill's excess negative: a
/// panic with overflow checks, every small list drained without).
#[test]
fn a_bulk_free_beside_a_parked_pageblock_spills_nothing() {
    let pa = allocator(4, config(1, 0));
    let area = pa.cpu_area_get(0).unwrap();
    // SAFETY: owned by this test.
    let c = unsafe { CpuRef::new(area) };
    let cpu = Some(c);
    let block = pa.alloc_pages(cpu, Gfp::COMP, 9).unwrap();
    // SAFETY: ours, this order: parked on the CPU's pageblock list.
    unsafe { pa.free_pages(cpu, block, 9) };
    let pcp = pa.zone_pcp_of(area, 0);
    assert_eq!(pcp.thp_blocks(), 1);
    let mut pages: Vec<Option<NonNull<Page>>> = vec![None; 8];
    assert_eq!(pa.alloc_pages_bulk(cpu, Gfp::KERNEL, None, &mut pages), 8);
    let small = pcp.count() - (1 << 9);
    // SAFETY: all allocated above, order 0.
    unsafe { pa.free_pages_bulk(cpu, &mut pages) };
    assert_eq!(pcp.count() - (1 << 9), small + 8, "nothing spilled");
    assert_eq!(pcp.thp_blocks(), 1);
    pa.drain_local_pages(c);
    // SAFETY: owned and no longer used.
    unsafe { pa.cpu_area_put(area) };
}

/// The allocation failure report is rate limited as the kernel's `warn_alloc`: ten
/// an interval of 5 s, then the count of those held back before the next one.
#[test]
fn allocation_failure_reports_are_rate_limited() {
    let pa = allocator(1, config(1, 1024));
    let mut held = Vec::new();
    while let Some(p) = pa.alloc_pages(None, Gfp::KERNEL, 0) {
        held.push(p);
    }
    for _ in 0..30 {
        assert!(pa.alloc_pages(None, Gfp::KERNEL, 0).is_none());
    }
    let failures = pa.event(VmEvent::AllocFail);
    assert_eq!(failures, 31);
    let log = pa.platform().take_log();
    assert_eq!(
        log.matches("kmem: page allocation failure").count(),
        10,
        "{log}"
    );
    assert!(!log.contains("suppressed"));
    pa.platform().advance(5_000_000_000);
    assert!(pa.alloc_pages(None, Gfp::KERNEL, 0).is_none());
    let log = pa.platform().take_log();
    assert!(
        log.starts_with("warn_alloc: 21 callbacks suppressed\nkmem: page allocation failure"),
        "{log}"
    );
    for p in held {
        // SAFETY: allocated above, freed once.
        unsafe { pa.free_pages(None, p, 0) };
    }
}

#[test]
fn bounded_heap_fails_with_none_reports_and_recovers() {
    let max = 2048;
    let pa = allocator(2, config(1, max));
    let mut held = Vec::new();
    while let Some(p) = pa.alloc_pages(None, Gfp::KERNEL, 0) {
        held.push(p);
        assert!(held.len() <= max);
    }
    assert!(
        held.len() > max - 200,
        "only the reserve below min is kept back: {}",
        held.len()
    );
    assert!(pa.nr_managed_pages() <= max);
    let log = pa.platform().take_log();
    assert!(
        log.contains("kmem: page allocation failure: order:0, mode:0x0(GFP_KERNEL)"),
        "{log}"
    );
    assert!(log.contains("Mem-Info:"));
    assert!(log.contains("Node 0 Normal: "), "{log}");
    assert!(log.contains("kB = "));
    assert!(pa.event(VmEvent::AllocStall) >= 1);
    assert!(pa.event(VmEvent::AllocFail) >= 1);
    // __GFP_HIGH may dip below min; __GFP_NOWARN fails quietly.
    let high = pa
        .alloc_pages(None, Gfp::HIGH, 0)
        .expect("reserve for __GFP_HIGH");
    held.push(high);
    while let Some(p) = pa.alloc_pages(None, Gfp::HIGH | Gfp::NOWARN, 0) {
        held.push(p);
    }
    assert!(pa.platform().take_log().is_empty(), "__GFP_NOWARN is quiet");
    // Free half: allocation works again.
    let half = held.split_off(held.len() / 2);
    for p in half {
        // SAFETY: allocated above.
        unsafe { pa.free_pages(None, p, 0) };
    }
    assert!(pa.alloc_pages(None, Gfp::KERNEL, 3).is_some());
}

#[test]
fn shrinkers_run_before_failure() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    fn scan(_data: *const (), _nid: usize) -> usize {
        CALLS.fetch_add(1, Ordering::Relaxed);
        0
    }
    let pa = allocator(2, config(1, 1024));
    assert!(pa.register_shrinker(kmem_core::Shrinker {
        scan,
        data: std::ptr::null()
    }));
    let mut held = Vec::new();
    while let Some(p) = pa.alloc_pages(None, Gfp::NOWARN, 0) {
        held.push(p);
    }
    assert!(CALLS.load(Ordering::Relaxed) >= 1);
}

#[test]
fn double_free_is_reported_and_ignored() {
    let pa = allocator(2, config(1, 0));
    let area = pa.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = unsafe { CpuRef::new(area) };
    let p = pa.alloc_pages(Some(cpu), Gfp::KERNEL, 0).unwrap();
    let q = pa.alloc_pages(None, Gfp::KERNEL, 2).unwrap();
    // SAFETY: allocated above; the second free of each is the misuse under test.
    unsafe {
        pa.free_pages(Some(cpu), p, 0);
        pa.free_pages(Some(cpu), p, 0);
        pa.free_pages(None, q, 2);
        pa.free_pages(None, q, 2);
    }
    let log = pa.platform().take_log();
    assert_eq!(
        log.matches("BUG: Bad page state in process").count(),
        2,
        "{log}"
    );
    assert!(log.contains("page dumped because: freeing a free page"));
    assert_eq!(pa.event(VmEvent::BadPage), 2);
    pa.drain_local_pages(cpu);
    // Nothing was freed twice: the counters are exact.
    assert_eq!(pa.nr_free_pages() + area_pages(pa), pa.nr_managed_pages());
    // SAFETY: owned; not used afterwards.
    unsafe { pa.cpu_area_put(area) };
}

#[test]
fn fake_numa_fallback_and_numa_events() {
    // Two fake nodes, and a bound of one section: node 0 takes it all (a bounded
    // heap brings memory online in steps of an eighth of the bound: every step to
    // node 0), so node 1 cannot grow and its allocations fall back to node 0.
    let pa = allocator(4, config(2, SECTION_MANAGED_PAGES));
    while pa.add_memory(0) {}
    assert_eq!(pa.nr_managed_pages(), SECTION_MANAGED_PAGES);
    let area = pa.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = unsafe { CpuRef::new(area) };
    let local = pa.alloc_pages(Some(cpu), Gfp::KERNEL, 0).unwrap();
    assert_eq!(pa.page_to_nid(local), 0);
    assert!(pa.zone_event(0, VmEvent::NumaHit) >= 1);
    assert!(pa.zone_event(0, VmEvent::NumaLocal) >= 1);
    let remote = pa
        .alloc_pages_node(Some(cpu), Gfp::KERNEL, 0, Some(1))
        .unwrap();
    assert_eq!(pa.page_to_nid(remote), 0, "fell back to node 0");
    assert_eq!(pa.zone_event(0, VmEvent::NumaMiss), 1);
    assert_eq!(pa.zone_event(1, VmEvent::NumaForeign), 1);
    assert!(pa
        .alloc_pages_node(Some(cpu), Gfp::THISNODE | Gfp::NOWARN, 0, Some(1))
        .is_none());
    // SAFETY: allocated above.
    unsafe {
        pa.free_pages(Some(cpu), local, 0);
        pa.free_pages(Some(cpu), remote, 0);
    }
    // SAFETY: owned; not used afterwards.
    unsafe { pa.cpu_area_put(area) };
}

#[test]
fn fake_numa_nodes_grow_their_own_memory() {
    let pa = allocator(4, config(2, 0));
    let area = pa.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = unsafe { CpuRef::new(area) };
    let on1 = pa
        .alloc_pages_node(Some(cpu), Gfp::KERNEL, 0, Some(1))
        .unwrap();
    assert_eq!(pa.page_to_nid(on1), 1);
    assert_eq!(pa.zone_event(1, VmEvent::NumaHit), 1);
    assert_eq!(
        pa.zone_event(1, VmEvent::NumaOther),
        1,
        "remote to a CPU on node 0"
    );
    // Interleave alternates nodes.
    let a = pa
        .alloc_pages_interleave(Some(cpu), Gfp::KERNEL, 0)
        .unwrap();
    let b = pa
        .alloc_pages_interleave(Some(cpu), Gfp::KERNEL, 0)
        .unwrap();
    assert_ne!(pa.page_to_nid(a), pa.page_to_nid(b));
    assert_eq!(pa.event(VmEvent::NumaInterleave), 2);
    let mut text = String::new();
    kmem_core::show_mem::buddyinfo(pa, &mut text).unwrap();
    assert!(text.contains("Node 0, zone   Normal "), "{text}");
    assert!(text.contains("Node 1, zone   Normal "), "{text}");
    // SAFETY: allocated above; owned area.
    unsafe {
        pa.free_pages(Some(cpu), on1, 0);
        pa.free_pages(Some(cpu), a, 0);
        pa.free_pages(Some(cpu), b, 0);
        pa.cpu_area_put(area);
    }
}

#[test]
fn reporting_waits_for_the_decay_then_offlines_free_sections() {
    let pa = allocator(8, config(1, 0));
    let area = pa.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = unsafe { CpuRef::new(area) };
    let keep = pa.alloc_pages(Some(cpu), Gfp::KERNEL, 0).unwrap();
    // Use three sections' worth of memory, touch it, give it back.
    let mut held = Vec::new();
    for _ in 0..(3 * SECTION_MANAGED_PAGES / 1024) {
        let p = pa.alloc_pages(Some(cpu), Gfp::KERNEL, MAX_ORDER).unwrap();
        // SAFETY: ours.
        unsafe { *(pa.page_address(p).as_ptr() as *mut u64) = 1 };
        held.push(p);
    }
    let online = pa.nr_online_sections();
    assert!(online >= 3);
    for p in held {
        // SAFETY: allocated above.
        unsafe { pa.free_pages(Some(cpu), p, MAX_ORDER) };
    }
    assert_eq!(
        pa.event(VmEvent::PgReported),
        0,
        "nothing is reported before the decay"
    );
    pa.platform().advance(2_000_000_000);
    // The next slow-path entry runs the pass.
    let p = pa.alloc_pages(Some(cpu), Gfp::KERNEL, 5).unwrap();
    // SAFETY: allocated above.
    unsafe { pa.free_pages(Some(cpu), p, 5) };
    assert!(pa.event(VmEvent::PgReported) > 0);
    assert!(
        pa.nr_online_sections() < online,
        "wholly free sections went offline"
    );
    assert!(pa.event(VmEvent::SectionOffline) >= 1);
    // What is still allocated: `keep` and the CPU area.
    assert_eq!(pa.nr_allocated_pages(), 1 + area_pages(pa));
    // Offline sections come back when needed, and memory reads as zero.
    let mut again = Vec::new();
    for _ in 0..(3 * SECTION_MANAGED_PAGES / 1024) {
        let p = pa.alloc_pages(Some(cpu), Gfp::ZERO, MAX_ORDER).unwrap();
        // SAFETY: ours.
        assert_eq!(unsafe { *(pa.page_address(p).as_ptr() as *const u64) }, 0);
        again.push(p);
    }
    assert!(pa.event(VmEvent::SectionOnline) as usize > online);
    assert!(
        pa.platform()
            .onlined
            .load(std::sync::atomic::Ordering::Relaxed)
            <= online + 1,
        "offline sections are reused"
    );
    for p in again {
        // SAFETY: allocated above.
        unsafe { pa.free_pages(Some(cpu), p, MAX_ORDER) };
    }
    // SAFETY: allocated above.
    unsafe { pa.free_pages(Some(cpu), keep, 0) };
    pa.drain_local_pages(cpu);
    // Trim reports everything at once.
    assert!(pa.report_free_pages() > 0);
    let reported = pa.zone_page_state_snapshot(0, ZoneStat::NrFreeReported);
    assert!(reported > 0);
    // SAFETY: owned; not used afterwards.
    unsafe { pa.cpu_area_put(area) };
}

#[test]
fn reports_have_the_kernel_formats() {
    let pa = allocator(2, config(1, 0));
    let area = pa.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = unsafe { CpuRef::new(area) };
    let p = pa.alloc_pages(Some(cpu), Gfp::KERNEL, 0).unwrap();
    let mut zi = String::new();
    kmem_core::show_mem::zoneinfo(pa, &mut zi).unwrap();
    assert!(
        zi.starts_with("Node 0, zone   Normal\n  pages free     "),
        "{zi}"
    );
    assert!(zi.contains("        min      "));
    assert!(
        zi.contains("  pagesets\n    cpu: 0\n              count: 30\n"),
        "{zi}"
    );
    let mut vm = String::new();
    kmem_core::show_mem::vmstat(pa, &mut vm).unwrap();
    let free_line = format!("nr_free_pages {}\n", pa.nr_free_pages());
    assert!(vm.starts_with(&free_line), "{vm}");
    // One page, plus those of the CPU area itself.
    let n = 1 + (1 << kmem_core::percpu::CPU_AREA_ORDER);
    assert!(vm.contains(&format!("pgalloc_normal {n}\n")), "{vm}");
    assert!(vm.contains(&format!("numa_hit {n}\n")));
    let mut mi = String::new();
    kmem_core::show_mem::show_free_areas(pa, &mut mi).unwrap();
    assert!(
        mi.contains("Node 0 Normal per-cpu:\nCPU    0: hi:   186, btch:  31 usd:  30\n"),
        "{mi}"
    );
    // SAFETY: allocated above; owned area.
    unsafe {
        pa.free_pages(Some(cpu), p, 0);
        pa.cpu_area_put(area);
    }
}

#[test]
fn threads_with_cross_thread_frees_lose_nothing() {
    use std::sync::mpsc;
    let pa = allocator(8, config(1, 0));
    let secs: u64 = std::env::var("KMEM_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let deadline = std::time::Instant::now()
        + std::time::Duration::from_millis(if secs > 0 { secs * 1000 } else { 700 });
    let nthreads = 4;
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..nthreads)
        .map(|_| mpsc::channel::<(usize, usize)>())
        .unzip();
    let txs: Vec<_> = txs;
    let leftovers: Vec<mpsc::Receiver<(usize, usize)>> = std::thread::scope(|s| {
        let handles: Vec<_> = rxs
            .into_iter()
            .enumerate()
            .map(|(t, rx)| {
                let txs = txs.clone();
                s.spawn(move || {
                    let area = pa.cpu_area_get(0).unwrap();
                    // SAFETY: this thread owns the area until it puts it back.
                    let cpu = unsafe { CpuRef::new(area) };
                    let mut rng = 0x9E37_79B9u64 + t as u64;
                    let mut held: Vec<(usize, usize)> = Vec::new();
                    let check_free = |addr: usize, order: usize| {
                        // SAFETY: the block was ours and carries our pattern.
                        unsafe {
                            assert_eq!(*(addr as *const u64), pattern(addr), "corrupted block");
                            assert_eq!(
                                *((addr + (PAGE_SIZE << order) - 8) as *const u64),
                                pattern(addr)
                            );
                        }
                        let page = pa.virt_to_page(addr as *const u8).unwrap();
                        // SAFETY: allocated with this order, and we give it up.
                        unsafe { pa.free_pages(Some(cpu), page, order) };
                    };
                    while std::time::Instant::now() < deadline {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let order = [0, 0, 0, 1, 2, 3, 4, 9][(rng % 8) as usize];
                        if let Some(p) = pa.alloc_pages(Some(cpu), Gfp::NOWARN, order) {
                            let addr = pa.page_address(p).as_ptr() as usize;
                            // SAFETY: ours now.
                            unsafe {
                                *(addr as *mut u64) = pattern(addr);
                                *((addr + (PAGE_SIZE << order) - 8) as *mut u64) = pattern(addr);
                            }
                            held.push((addr, order));
                        }
                        if held.len() > 64 {
                            let (addr, order) = held.swap_remove((rng >> 20) as usize % held.len());
                            if rng & 1 == 0 {
                                // Half of the frees happen on another thread.
                                if let Err(e) = txs[(t + 1) % nthreads].send((addr, order)) {
                                    check_free(e.0 .0, e.0 .1);
                                }
                            } else {
                                check_free(addr, order);
                            }
                        }
                        while let Ok((addr, order)) = rx.try_recv() {
                            check_free(addr, order);
                        }
                    }
                    drop(txs);
                    for (addr, order) in held {
                        check_free(addr, order);
                    }
                    // Blocks sent to us after we stop are freed by whoever outlives us;
                    // drain what has arrived, then hand the area back.
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    while let Ok((addr, order)) = rx.try_recv() {
                        check_free(addr, order);
                    }
                    // SAFETY: owned; not used afterwards.
                    unsafe { pa.cpu_area_put(area) };
                    rx
                })
            })
            .collect();
        drop(txs);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Blocks sent to a thread after it finished: freed here, from a context without
    // a CPU area.
    for rx in leftovers {
        while let Ok((addr, order)) = rx.try_recv() {
            let page = pa.virt_to_page(addr as *const u8).unwrap();
            // SAFETY: allocated with this order by a worker, never freed.
            unsafe { pa.free_pages(None, page, order) };
        }
    }
    // Everything is back: managed = free (areas excepted).
    assert_eq!(
        pa.nr_allocated_pages(),
        pa.cpu_areas().nr_areas() << kmem_core::percpu::CPU_AREA_ORDER
    );
}

#[test]
fn blocks_grow_and_shrink_in_place() {
    let pa = allocator(2, config(1, 0));
    // A fresh section: an order-4 block from a split leaves its buddies free.
    let p = pa.alloc_pages(None, Gfp::COMP, 4).unwrap();
    let addr = pa.page_address(p).as_ptr();
    // SAFETY: ours.
    unsafe { addr.write_bytes(9, PAGE_SIZE << 4) };
    assert!(
        // SAFETY: the test's block of order 4.
        unsafe { pa.grow_in_place(p, 4, 6, Gfp::COMP | Gfp::ZERO) },
        "the buddies above are free"
    );
    // SAFETY: the block is now 2^6 pages; the old part kept its bytes, the new is zero.
    unsafe {
        assert_eq!(*addr, 9);
        assert_eq!(*addr.add((PAGE_SIZE << 4) - 1), 9);
        assert_eq!(*addr.add(PAGE_SIZE << 4), 0);
        assert_eq!(*addr.add((PAGE_SIZE << 6) - 1), 0);
    }
    // Every page of the grown block finds its head.
    for i in 1..64 {
        let page = pa.pfn_to_page(pa.page_to_pfn(p) + i).unwrap();
        assert_eq!(
            pa.virt_to_head_page(pa.page_address(page).as_ptr()),
            Some(p),
            "page {i}"
        );
    }
    // A neighbour in the way stops a grow, and nothing changes.
    let q = pa.alloc_pages(None, Gfp::KERNEL, 6).unwrap();
    if pa.page_to_pfn(q) == pa.page_to_pfn(p) + 64 {
        // SAFETY: a descriptor of `pa`; a block it heads is the test's.
        assert!(!unsafe { pa.grow_in_place(p, 6, 7, Gfp::COMP) });
        // SAFETY: ours, still order 6.
        assert_eq!(unsafe { p.as_ref() }.order(), 6);
    }
    // Shrink back down: the upper halves are free again.
    let free_before = pa.nr_free_pages();
    // SAFETY: our order-6 block; we give up everything past the first 2 pages.
    unsafe { pa.shrink_in_place(None, p, 6, 1) };
    assert_eq!(pa.nr_free_pages(), free_before + 62);
    // SAFETY: the first page kept its bytes.
    assert_eq!(unsafe { *addr }, 9);
    // SAFETY: ours, order 1 now.
    unsafe {
        pa.free_pages(None, p, 1);
        pa.free_pages(None, q, 6);
    }
    assert_eq!(pa.nr_free_pages(), pa.nr_managed_pages());
    // The grows listed the deferred pages they needed (the two order-6 blocks, up to
    // 128 pages past the first): those merged back, the rest is still deferred.
    assert_eq!(
        pa.free_area_counts(0),
        section_blocks(SECTION_MANAGED_PAGES, MEMMAP_PAGES + 128)
    );
}
