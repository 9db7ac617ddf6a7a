//! Memory hotplug: bringing sections online as nodes need memory (`add_memory`,
//! `online_pages`) and taking wholly free, reported sections offline again
//! (`offline_pages`), so resident memory follows live memory down.
//!
//! Locking: the hotplug lock serialises section state changes and guards the heap
//! bound's count; the zone lock is taken inside it to hand pages to the zone or take
//! them back (the lock order in lib.rs). Readers of a section's state
//! (`memory_model.rs`) take no lock: a section's memory stays mapped once it was
//! online, and its state is published with release stores.

use super::descriptor::{MAX_ORDER, PAGE_SHIFT};
use super::mmzone::{
    MEMMAP_PAGES, PFN_SECTION_SHIFT, SECTION_MANAGED_PAGES, SECTION_OFFLINE, SECTION_ONLINE,
    SECTION_SHIFT, SECTION_SIZE,
};
use super::PageAllocator;
use crate::platform::Platform;
use crate::sync::Ordering;
use crate::vmstat::{VmEvent, ZoneStat};
use core::ptr;

/// What the hotplug lock guards.
pub(super) struct Hotplug {
    /// Sections `0..next_section` have been used at least once.
    next_section: usize,
    /// Managed pages online now (bounded by `max_pages`).
    online_pages: usize,
}

impl Hotplug {
    pub(super) const fn new() -> Self {
        Self {
            next_section: 0,
            online_pages: 0,
        }
    }
}

impl<P: Platform> PageAllocator<P> {
    /// Brings more memory online for node `nid`: an offline section of that node, else
    /// a never-used section. Returns false at the heap bound or the end of the span.
    #[cold]
    pub fn add_memory(&self, nid: usize) -> bool {
        let mut hp = self.hotplug.lock();
        let max = self.max_pages();
        let room = if max == 0 {
            usize::MAX
        } else {
            max.saturating_sub(hp.online_pages)
        };
        if room == 0 {
            return false;
        }
        let pages = room.min(SECTION_MANAGED_PAGES);
        // Prefer an offline section of this node (its address space is ours already).
        let reuse = (0..hp.next_section).find(|&s| {
            let sec = &self.sections[s];
            sec.state.load(Ordering::Relaxed) == SECTION_OFFLINE
                && sec.node.load(Ordering::Relaxed) as usize == nid
        });
        let nr = match reuse {
            Some(s) => s,
            None => {
                if hp.next_section >= self.nr_span_sections.load(Ordering::Relaxed) {
                    return false;
                }
                let s = hp.next_section;
                let addr = (self.base.load(Ordering::Relaxed) + (s << SECTION_SHIFT)) as *mut u8;
                // SAFETY: section `s` lies in our span (checked against its length) and
                // was never used: nobody else touches it.
                if !unsafe { self.platform.section_online(addr, SECTION_SIZE, nid) } {
                    return false;
                }
                hp.next_section += 1;
                s
            }
        };
        hp.online_pages += pages;
        self.online_section(nr, nid, pages);
        drop(hp);
        true
    }

    /// `online_pages`: initialises a section's memmap and gives its pages to the zone.
    /// Runs under the hotplug lock.
    #[cold]
    fn online_section(&self, nr: usize, nid: usize, pages: usize) {
        let sec = &self.sections[nr];
        let memmap = self.pfn_to_page_raw(nr << PFN_SECTION_SHIFT);
        if sec.memmap_zero.load(Ordering::Relaxed) == 0 {
            // SAFETY: the memmap is the first MEMMAP_PAGES pages of an online (mapped)
            // section that nobody else uses while it is offline (hotplug lock).
            unsafe { ptr::write_bytes(memmap as *mut u8, 0, MEMMAP_PAGES << PAGE_SHIFT) };
        }
        sec.memmap_zero.store(0, Ordering::Relaxed);
        sec.node.store(nid as u8, Ordering::Relaxed);
        sec.nr_managed.store(pages as u32, Ordering::Relaxed);
        sec.nr_reported.store(0, Ordering::Relaxed);
        let zone = &self.zones[nid];
        let mut fa = zone.lock.lock();
        sec.state.store(SECTION_ONLINE, Ordering::Release);
        // Hand the pages over as the largest aligned blocks that fit. They were never
        // touched (or were discarded): list them as reported, behind resident blocks.
        let start = (nr << PFN_SECTION_SHIFT) + MEMMAP_PAGES;
        let end = start + pages;
        let mut pfn = start;
        while pfn < end {
            let mut order = MAX_ORDER;
            while order > 0 && (pfn & ((1 << order) - 1) != 0 || pfn + (1 << order) > end) {
                order -= 1;
            }
            self.add_to_free_list(&mut fa, zone, pfn, order, true);
            pfn += 1 << order;
        }
        zone.vm_stat[ZoneStat::NrFreePages as usize].fetch_add(pages as isize, Ordering::Relaxed);
        zone.managed.fetch_add(pages, Ordering::Relaxed);
        zone.nr_sections.fetch_add(1, Ordering::Relaxed);
        drop(fa);
        zone.setup_watermarks();
        zone.events[VmEvent::SectionOnline as usize].fetch_add(1, Ordering::Relaxed);
        self.recalc_pcp_high();
    }

    /// `offline_pages`: takes section `nr` offline if every managed page of it is free
    /// and reported, discarding its memmap too. Returns whether it did.
    #[cold]
    pub(super) fn try_offline_section(&self, nr: usize) -> bool {
        let sec = &self.sections[nr];
        if !sec.online() {
            return false;
        }
        // The hotplug lock is held throughout, so the section cannot be brought online
        // again while its memmap is being discarded.
        let mut hp = self.hotplug.lock();
        let nid = sec.node.load(Ordering::Relaxed) as usize;
        let zone = &self.zones[nid];
        let mut fa = zone.lock.lock();
        let managed = sec.nr_managed.load(Ordering::Relaxed);
        if sec.nr_reported.load(Ordering::Relaxed) != managed || !sec.online() {
            return false;
        }
        let start = (nr << PFN_SECTION_SHIFT) + MEMMAP_PAGES;
        let end = start + managed as usize;
        let mut pfn = start;
        while pfn < end {
            // SAFETY: every managed page of the section is in a free, reported block
            // (checked above under the zone lock), so `pfn` heads one.
            let order = unsafe { (*self.pfn_to_page_raw(pfn)).order() };
            self.del_from_free_list(&mut fa, zone, pfn, order);
            pfn += 1 << order;
        }
        sec.state.store(SECTION_OFFLINE, Ordering::Release);
        zone.vm_stat[ZoneStat::NrFreePages as usize].fetch_sub(managed as isize, Ordering::Relaxed);
        zone.managed.fetch_sub(managed as usize, Ordering::Relaxed);
        zone.nr_sections.fetch_sub(1, Ordering::Relaxed);
        drop(fa);
        let memmap = self.pfn_to_page_raw(nr << PFN_SECTION_SHIFT) as *mut u8;
        // SAFETY: the section is offline (its pages are off the free lists, the hotplug
        // lock keeps it from coming back online meanwhile), so nothing reads its memmap.
        unsafe {
            self.platform
                .report_free(memmap, MEMMAP_PAGES << PAGE_SHIFT)
        };
        sec.memmap_zero.store(1, Ordering::Relaxed);
        hp.online_pages -= managed as usize;
        drop(hp);
        zone.setup_watermarks();
        zone.events[VmEvent::SectionOffline as usize].fetch_add(1, Ordering::Relaxed);
        self.recalc_pcp_high();
        true
    }

    /// Sections ever used (`0..n` may be online or offline).
    pub(super) fn nr_used_sections(&self) -> usize {
        self.hotplug.lock().next_section
    }

    /// Sections online now.
    pub fn nr_online_sections(&self) -> usize {
        (0..self.nr_nodes())
            .map(|nid| self.zones[nid].nr_sections())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_platform::allocator;
    use super::super::Config;
    use super::*;
    use crate::gfp::Gfp;

    #[test]
    fn the_heap_bound_limits_what_comes_online() {
        let pa = allocator(
            4,
            Config {
                max_pages: SECTION_MANAGED_PAGES + 100,
                ..Config::default()
            },
        );
        assert!(pa.add_memory(0));
        assert!(
            pa.add_memory(0),
            "the bound leaves 100 pages of a second section"
        );
        assert!(!pa.add_memory(0));
        assert_eq!(pa.nr_managed_pages(), SECTION_MANAGED_PAGES + 100);
        assert_eq!(pa.nr_online_sections(), 2);
        assert_eq!(pa.nr_free_pages(), SECTION_MANAGED_PAGES + 100);
        assert_eq!(pa.zone_event(0, VmEvent::SectionOnline), 2);
    }

    #[test]
    fn the_span_limits_what_comes_online() {
        let pa = allocator(2, Config::default());
        assert!(pa.add_memory(0));
        assert!(pa.add_memory(0));
        assert!(!pa.add_memory(0));
        assert_eq!(pa.nr_used_sections(), 2);
    }

    #[test]
    fn a_wholly_reported_section_goes_offline_and_comes_back() {
        let pa = allocator(1, Config::default());
        assert!(pa.add_memory(0));
        // A page in use keeps the section online.
        let page = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        assert!(!pa.try_offline_section(0));
        // SAFETY: allocated above.
        unsafe { pa.free_pages(None, page, 0) };
        // Freed but not reported (resident): still online.
        assert!(!pa.try_offline_section(0));
        assert_eq!(pa.report_free_pages(), 512);
        // The reporting pass took it offline already.
        assert!(!pa.sections[0].online());
        assert_eq!(pa.nr_managed_pages(), 0);
        assert_eq!(pa.nr_free_pages(), 0);
        assert_eq!(pa.zone_event(0, VmEvent::SectionOffline), 1);
        assert_eq!(pa.pfn_to_page(MEMMAP_PAGES), None);
        // The next demand brings the same section back, with a fresh memmap.
        let again = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        assert_eq!(pa.page_to_pfn(again), MEMMAP_PAGES);
        assert_eq!(pa.nr_used_sections(), 1);
        assert_eq!(pa.nr_online_sections(), 1);
        assert_eq!(pa.nr_free_pages(), SECTION_MANAGED_PAGES - 1);
    }
}
