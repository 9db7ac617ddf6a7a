//! Bulk allocation and freeing of order-0 pages (`alloc_pages_bulk`,
//! `free_pages_bulk` / `release_pages`): many pages for one zone-lock round trip or
//! one per-CPU list refill, for callers that want a batch (the slab layer's
//! bulk paths, page-array users).
//!
//! Locking: called with no page-layer lock held. With a CPU area, pages move through
//! the owner's per-CPU lists (no lock; refill and spill take the zone lock); without
//! one, a batch at a time under the zone lock. See the lock order in lib.rs.

use super::alloc::free_page_is_bad;
use super::descriptor::{Page, PageFlags};
use super::mmzone::Watermark;
use super::pcp::PCP_BATCH;
use super::PageAllocator;
use crate::gfp::Gfp;
use crate::percpu::{CpuRef, DRAIN_PAGES};
use crate::platform::Platform;
use crate::sync::Ordering;
use crate::vmstat::{VmEvent, ZoneStat};
use core::ptr::NonNull;

impl<P: Platform> PageAllocator<P> {
    /// `alloc_pages_bulk`: fills the `None` slots of `pages` with order-0 pages of node
    /// `nid` (or the local node), taking the zone lock at most once per batch. Returns
    /// how many slots are filled in the end (it may be fewer than the array holds when
    /// memory runs out).
    pub fn alloc_pages_bulk(
        &self,
        cpu: Option<CpuRef<'_>>,
        gfp: Gfp,
        nid: Option<usize>,
        pages: &mut [Option<NonNull<Page>>],
    ) -> usize {
        let preferred = match nid {
            Some(n) if n < self.nr_nodes() => n,
            Some(_) => return pages.iter().filter(|p| p.is_some()).count(),
            None => self.local_node(cpu),
        };
        let zone = &self.zones[preferred];
        let want = pages.iter().filter(|p| p.is_none()).count();
        let mut filled = 0usize;
        let high = zone.pcp_high();
        let use_pcp = matches!(cpu, Some(c) if high != 0 && c.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES == 0);
        if want > 0 && self.zone_watermark_ok(zone, 0, zone.watermark(Watermark::Low) + want, false)
        {
            match cpu {
                Some(c) if use_pcp => {
                    let pcp = self.zone_pcp(c, preferred);
                    // SAFETY: `c` proves ownership of the area.
                    let list = unsafe { &mut pcp.lists()[0] };
                    let mut taken = 0i32;
                    for slot in pages.iter_mut().filter(|p| p.is_none()) {
                        if list.is_empty() {
                            let batch = zone.pcp_batch() as usize;
                            let n = self.rmqueue_bulk(c, zone, 0, batch.max(want - filled), list);
                            pcp.add_count(n as i32);
                            if n == 0 {
                                break;
                            }
                        }
                        // SAFETY: we own the list, and it is not empty.
                        let page = unsafe { NonNull::new_unchecked(list.pop_head()) };
                        *slot = Some(self.prep_new_page(page, 0, gfp));
                        taken += 1;
                        filled += 1;
                    }
                    pcp.add_count(-taken);
                }
                _ => {
                    // No per-CPU list: one zone lock per batch of pages taken into a
                    // stack array, prepared (zeroed) after the lock is dropped.
                    let mut slots = pages.iter_mut().filter(|p| p.is_none()).peekable();
                    while slots.peek().is_some() {
                        let mut chunk = [(0usize, false); PCP_BATCH as usize];
                        let mut got = 0usize;
                        let mut fa = zone.lock.lock();
                        while got < chunk.len() && got < want - filled {
                            let Some(taken) = self.rmqueue_smallest(&mut fa, zone, 0) else {
                                break;
                            };
                            chunk[got] = taken;
                            got += 1;
                        }
                        drop(fa);
                        self.mod_zone_state(cpu, preferred, ZoneStat::NrFreePages, -(got as isize));
                        for &(pfn, reported) in &chunk[..got] {
                            let page = NonNull::new(self.pfn_to_page_raw(pfn)).expect("memmap");
                            if reported {
                                // SAFETY: the page is ours now.
                                unsafe { page.as_ref() }.set_flags(PageFlags::REPORTED);
                            }
                            let slot = slots.next().expect("counted free slots");
                            *slot = Some(self.prep_new_page(page, 0, gfp));
                        }
                        filled += got;
                        if got < chunk.len() {
                            break;
                        }
                    }
                }
            }
            if filled > 0 {
                self.zone_statistics(cpu, preferred, preferred, filled as u64);
            }
        }
        // Whatever the fast attempt could not fill: one page at a time, through the
        // full allocation path (other nodes, growth, reclaim).
        if filled < want {
            for slot in pages.iter_mut().filter(|p| p.is_none()) {
                match self.alloc_pages_node(cpu, gfp, 0, Some(preferred)) {
                    Some(p) => *slot = Some(p),
                    None => break,
                }
            }
        }
        pages.iter().filter(|p| p.is_some()).count()
    }

    /// Frees order-0 pages in bulk (`free_pages_bulk` / `release_pages`): onto this
    /// area's per-CPU lists with one spill check per zone at the end, or, without an
    /// area, to each zone under one lock per run of same-zone pages. Slots are set to
    /// `None`.
    ///
    /// # Safety
    /// Every `Some` page came from this allocator as an order-0 page, and the caller
    /// gives up every use of them.
    pub unsafe fn free_pages_bulk(
        &self,
        cpu: Option<CpuRef<'_>>,
        pages: &mut [Option<NonNull<Page>>],
    ) {
        match cpu {
            Some(c) => {
                let mut touched = 0u32; // bit per node
                for slot in pages.iter_mut() {
                    let Some(page) = slot.take() else { continue };
                    // SAFETY: the caller passes descriptors from this allocator.
                    let p = unsafe { page.as_ref() };
                    if let Some(reason) = free_page_is_bad(p, 0) {
                        self.bad_page(page, reason);
                        continue;
                    }
                    let nid = self.page_to_nid(page);
                    let zone = &self.zones[nid];
                    if zone.pcp_high() == 0 {
                        self.free_one_page(cpu, zone, page, 0);
                        continue;
                    }
                    // SAFETY: `c` proves we own the area; the page is ours to list.
                    unsafe { self.zone_pcp(c, nid).push(page, 0) };
                    touched |= 1 << nid;
                }
                while touched != 0 {
                    let nid = touched.trailing_zeros() as usize;
                    touched &= touched - 1;
                    let zone = &self.zones[nid];
                    let pcp = self.zone_pcp(c, nid);
                    let high = zone.pcp_high();
                    // The small lists only (`high` bounds them, not the pageblock
                    // list's 2 MiB blocks).
                    if pcp.small_count() > high as usize {
                        self.free_pcp_slow(c, zone, pcp, high);
                    }
                }
            }
            None => {
                let mut i = 0;
                while i < pages.len() {
                    let Some(first) = pages[i] else {
                        i += 1;
                        continue;
                    };
                    let nid = self.page_to_nid(first);
                    let zone = &self.zones[nid];
                    let now = self.platform.now_ns();
                    let mut fa = zone.lock.lock();
                    let mut n = 0usize;
                    while i < pages.len() {
                        let Some(page) = pages[i] else {
                            i += 1;
                            continue;
                        };
                        if self.page_to_nid(page) != nid {
                            break;
                        }
                        pages[i] = None;
                        i += 1;
                        // SAFETY: the caller passes descriptors from this allocator.
                        if let Some(reason) = free_page_is_bad(unsafe { page.as_ref() }, 0) {
                            drop(fa);
                            self.bad_page(page, reason);
                            fa = zone.lock.lock();
                            continue;
                        }
                        let pfn = self.page_to_pfn(page);
                        self.free_one_page_locked(&mut fa, zone, pfn, 0, false, now);
                        n += 1;
                    }
                    drop(fa);
                    self.mod_zone_state(None, nid, ZoneStat::NrFreePages, n as isize);
                    self.count_event(None, nid, VmEvent::PgFree, n as u64);
                    self.maybe_report(None, zone);
                }
            }
        }
    }
}
