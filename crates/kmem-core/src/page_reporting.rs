//! Free page reporting: giving free memory back to the platform, lazily.
//!
//! Free blocks of at least `report_order` (2 MiB) that have stayed free for the decay
//! interval are *reported*: isolated from the free lists under the zone lock, handed to
//! [`Platform::report_free`] with the lock dropped (Linux: `madvise(MADV_DONTNEED)`),
//! and put back marked `PG_REPORTED` at the tail of their list. Allocation takes from
//! the head, so recently freed, still resident blocks are reused first, and a reported
//! block is known to read as zero (`__GFP_ZERO` skips clearing it).
//!
//! A pass runs from the allocator's own slow paths (a spill of per-CPU lists, a direct
//! free to the zone) at most twice per decay interval and only when a free produced an
//! unreported block of reporting order; no background thread is needed. After a pass,
//! sections whose pages are all free and reported go offline: their memmap is
//! discarded too, so resident memory follows live memory all the way down.
//! [`PageAllocator::report_free_pages`] runs a pass at once (`malloc_trim`).
//!
//! Locking: the zone lock while isolating and putting back; none while the platform
//! works; the hotplug lock (outside any zone lock) to take a section offline.

use crate::mmzone::Zone;
use crate::page::{Page, PageFlags, MAX_ORDER, PAGE_SIZE};

/// Bytes of memmap that stay resident for a reported block: the page holding its head.
const MEMMAP_PAGE: usize = PAGE_SIZE;
use crate::page_alloc::PageAllocator;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use crate::vmstat::{VmEvent, ZoneStat};
use core::ptr::NonNull;

/// Blocks isolated and reported per zone-lock round trip.
const REPORT_BATCH: usize = 32;

impl<P: Platform> PageAllocator<P> {
    /// Runs a reporting pass on `zone` if one is due. Called without locks held.
    #[inline]
    pub(crate) fn maybe_report(&self, zone: &Zone) {
        if zone.report_pending.load(Relaxed) != 0 {
            self.page_reporting_process(zone, false);
        }
    }

    #[cold]
    #[inline(never)]
    fn page_reporting_process(&self, zone: &Zone, force: bool) -> usize {
        let now = self.platform.now_ns();
        let delay = self.report_delay_ns.load(Relaxed);
        let last = zone.last_report_ns.load(Relaxed);
        if !force && now.saturating_sub(last) < delay / 2 {
            return 0;
        }
        // One pass per zone at a time: whoever moves `last_report_ns` runs it.
        if zone
            .last_report_ns
            .compare_exchange(last, now.max(last + 1), Relaxed, Relaxed)
            .is_err()
        {
            return 0;
        }
        let reported = self.report_zone(zone, now, if force { 0 } else { delay });
        self.offline_reported_sections(zone.nid());
        reported
    }

    /// Reports every unreported free block of reporting order that has been free for
    /// at least `delay` ns. Returns the pages reported.
    fn report_zone(&self, zone: &Zone, now: u64, delay: u64) -> usize {
        zone.report_pending.store(0, Relaxed);
        let min_order = self.report_order.load(Relaxed);
        let nid = zone.nid();
        let mut total = 0usize;
        let mut left_young = false;
        loop {
            let mut batch = [(0usize, 0usize); REPORT_BATCH];
            let mut n = 0;
            let mut fa = zone.lock.lock();
            for order in (min_order..=MAX_ORDER).rev() {
                let mut page = fa.lists[order].first();
                while let Some(p) = NonNull::new(page) {
                    if n == REPORT_BATCH {
                        break;
                    }
                    // SAFETY: `p` is on a free list of this zone and we hold its lock.
                    let pr = unsafe { p.as_ref() };
                    page = pr.next.load(Relaxed);
                    if pr.flags().contains(PageFlags::REPORTED) {
                        // Reported blocks sit behind all unreported ones.
                        break;
                    }
                    let freed_at = pr.private.load(Relaxed) as u64;
                    if now.saturating_sub(freed_at) < delay {
                        left_young = true;
                        continue;
                    }
                    let pfn = self.page_to_pfn(p);
                    self.del_from_free_list(&mut fa, zone, pfn, order);
                    batch[n] = (pfn, order);
                    n += 1;
                }
            }
            let isolated: usize = batch[..n].iter().map(|&(_, o)| 1usize << o).sum();
            zone.vm_stat[ZoneStat::NrFreePages as usize].fetch_sub(isolated as isize, Relaxed);
            drop(fa);
            if n == 0 {
                break;
            }
            for &(pfn, order) in &batch[..n] {
                let page = NonNull::new(self.pfn_to_page_unchecked(pfn)).expect("memmap");
                let addr = self.page_address(page);
                self.platform.report_free(addr.as_ptr(), PAGE_SIZE << order);
                self.discard_tail_memmap(page, order);
            }
            let mut fa = zone.lock.lock();
            let mut merged_unreported = false;
            for &(pfn, order) in &batch[..n] {
                merged_unreported |= self.free_one_page_locked(&mut fa, zone, pfn, order, true, false);
            }
            drop(fa);
            zone.vm_stat[ZoneStat::NrFreePages as usize].fetch_add(isolated as isize, Relaxed);
            zone.events[VmEvent::PgReported as usize].fetch_add(isolated as u64, Relaxed);
            total += isolated;
            // A put-back block that merged with an unreported buddy is now an
            // unreported block of its own: go round again for it.
            if n < REPORT_BATCH && !merged_unreported {
                break;
            }
        }
        if left_young {
            zone.report_pending.store(1, Relaxed);
        }
        let _ = nid;
        total
    }

    /// Discards the memmap pages that describe only tail pages of an isolated free
    /// block: a free block's tail descriptors carry no state (they read as zero when
    /// faulted back), so a reported 4 MiB block keeps one resident memmap page of 16.
    fn discard_tail_memmap(&self, head: NonNull<Page>, order: usize) {
        let first = head.as_ptr() as usize + MEMMAP_PAGE;
        let end = head.as_ptr() as usize + (core::mem::size_of::<Page>() << order);
        let first = (first + PAGE_SIZE - 1) & !(PAGE_SIZE - 1);
        if end > first {
            self.platform.report_free(first as *mut u8, end - first);
        }
    }

    fn offline_reported_sections(&self, nid: usize) {
        for nr in 0..self.nr_used_sections() {
            let sec = &self.sections[nr];
            if sec.online()
                && sec.node.load(Relaxed) as usize == nid
                && sec.nr_reported.load(Relaxed) == sec.nr_managed.load(Relaxed)
            {
                self.try_offline_section(nr);
            }
        }
    }

    /// Reports every free block of reporting order now, whatever its age, and takes
    /// wholly free sections offline (`malloc_trim`). Returns the pages reported.
    pub fn report_free_pages(&self) -> usize {
        let mut total = 0;
        for nid in 0..self.nr_nodes() {
            total += self.page_reporting_process(&self.zones[nid], true);
        }
        total
    }
}
