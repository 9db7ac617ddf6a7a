//! Memory hotplug: bringing sections online as nodes need memory (`add_memory`,
//! `online_pages`) and taking wholly free, reported sections offline again
//! (`offline_pages`), so resident memory follows live memory down.
//!
//! Locking: the hotplug lock serialises section state changes and guards the heap
//! bound's count; the zone lock is taken inside it to hand pages to the zone or take
//! them back (the lock order in lib.rs). Readers of a section's state
//! (`memory_model.rs`) take no lock: a section's memory stays mapped once it was
//! online, and its state is published with release stores.

use super::buddy::largest_block;
use super::descriptor::{MAX_ORDER, PAGE_SHIFT};
use super::mmzone::{
    MEMMAP_PAGES, PFN_SECTION_SHIFT, SECTION_OFFLINE, SECTION_ONLINE, SECTION_SHIFT, SECTION_SIZE,
};
use super::PageAllocator;
use crate::platform::Platform;
use crate::sync::Ordering;
use crate::vmstat::{VmEvent, ZoneStat};
use core::ptr;

/// Pages a section coming online lists on the free lists at once (its first two
/// blocks: the 2 MiB past the memmap and one 4 MiB block); the rest waits in the
/// zone's deferred range until the lists run out.
const ONLINE_LISTED_PAGES: usize = 1 << MAX_ORDER;

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
                let len = self.section_span_bytes(s);
                // The section's part of the tag table first: it must be open before
                // the section counts in `used_len`, where the free fast path reads it.
                let (tags, tags_len) = self.section_tags_range(s, len >> PAGE_SHIFT);
                let opened = tags == 0 || {
                    // SAFETY: the part of the table for section `s`, inside the table
                    // (sized for the span), used by nobody before the section is
                    // online (sections are used in order; an earlier attempt that
                    // failed left it unused).
                    unsafe { self.platform.tag_table_online(tags as *mut u8, tags_len) }
                };
                if !opened {
                    return false;
                }
                // SAFETY: section `s` lies in our span (checked against its length; `len`
                // stops at the span's end) and was never used: nobody else touches it.
                if !unsafe { self.platform.section_online(addr, len, nid) } {
                    return false;
                }
                hp.next_section += 1;
                let used =
                    (hp.next_section << SECTION_SHIFT).min(self.span_len.load(Ordering::Relaxed));
                self.used_len.store(used, Ordering::Release);
                if tags != 0 {
                    // After the part of the table opened above (see `TagWindow`).
                    self.window.tagged_len.store(used, Ordering::Release);
                }
                s
            }
        };
        let pages = room.min((self.section_span_bytes(nr) >> PAGE_SHIFT) - MEMMAP_PAGES);
        hp.online_pages += pages;
        self.online_section(nr, nid, pages);
        drop(hp);
        true
    }

    /// The bytes of section `nr` inside the span: [`SECTION_SIZE`], or less for a
    /// partial last section (always more than its memmap, see `init`).
    fn section_span_bytes(&self, nr: usize) -> usize {
        let span = self.span_len.load(Ordering::Relaxed);
        (span - (nr << SECTION_SHIFT)).min(SECTION_SIZE)
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
        // The first descriptor (of the memmap's own first page) names the section's
        // part of the tag table, for `Page::sheaf_tag` (see `section_tag_table`).
        let (tags, _) = self.section_tags_range(nr, 0);
        // SAFETY: the memmap is mapped (the section is online) and ours (hotplug lock).
        unsafe { &*memmap }.private.store(tags, Ordering::Relaxed);
        sec.node.store(nid as u8, Ordering::Relaxed);
        sec.nr_managed.store(pages as u32, Ordering::Relaxed);
        sec.nr_reported.store(0, Ordering::Relaxed);
        let zone = &self.zones[nid];
        let mut fa = zone.lock.lock();
        sec.state.store(SECTION_ONLINE, Ordering::Release);
        // Hand the pages over as the largest aligned blocks that fit. They were never
        // touched (or were discarded): list them as reported, behind resident blocks.
        // Past the first ONLINE_LISTED_PAGES, while the zone defers no other pages,
        // the rest is deferred (`FreeArea::deferred`): each block listed writes its
        // head's descriptor, a page of the memmap of its own.
        let start = (nr << PFN_SECTION_SHIFT) + MEMMAP_PAGES;
        let end = start + pages;
        let defer = fa.deferred.0 >= fa.deferred.1;
        let mut pfn = start;
        while pfn < end {
            if defer && pfn - start >= ONLINE_LISTED_PAGES && pfn.is_multiple_of(1 << MAX_ORDER) {
                fa.deferred = (pfn, end);
                self.account_reported(zone, pfn, end - pfn, true);
                break;
            }
            let order = largest_block(pfn, end);
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
        let mut end = start + managed as usize;
        let (dstart, dend) = fa.deferred;
        if dstart < dend && dstart >= start && dend <= end {
            // The deferred tail is on no list: forget it (it counted as reported).
            self.account_reported(zone, dstart, dend - dstart, false);
            fa.deferred = (0, 0);
            end = dstart;
        }
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
        self.clear_section_tags(nr);
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

    /// Clears what is left in the tag table for section `nr` as it goes offline (its
    /// part of the table stays open, and the free fast path reads it for any address
    /// below the tag window's `tagged_len`). Every tag is 0 by then if the slab layer
    /// cleared its slabs' tags as it discarded them; this keeps a missed clear from
    /// outliving the memmap. Only entries that read non-zero are written, so table pages never
    /// written stay untouched.
    fn clear_section_tags(&self, nr: usize) {
        let (tags, _) = self.section_tags_range(nr, 0);
        if tags == 0 {
            return;
        }
        let pages = self.section_span_bytes(nr) >> PAGE_SHIFT;
        for i in 0..pages {
            // SAFETY: entry `i` of the section's part of the table, which is open (it
            // was opened before the section first came online) and sized for its pages.
            let t = unsafe { &*(tags as *const crate::sync::AtomicU32).add(i) };
            if t.load(Ordering::Relaxed) != 0 {
                t.store(0, Ordering::Relaxed);
            }
        }
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
    use super::super::mmzone::SECTION_MANAGED_PAGES;
    use super::super::test_platform::{allocator, allocator_len};
    use super::super::{Config, InitError, PAGE_SIZE};
    use super::*;
    use crate::gfp::Gfp;

    #[test]
    fn a_span_may_end_inside_a_section() {
        // One whole section and 8 MiB of a second: its memmap (2 MiB) and 6 MiB of pages.
        let len = SECTION_SIZE + (8 << 20);
        let pa = allocator_len(len, Config::default()).unwrap();
        assert!(pa.add_memory(0));
        assert!(pa.add_memory(0));
        assert!(!pa.add_memory(0), "the span ends in the second section");
        let tail = (8 << 20) / PAGE_SIZE - MEMMAP_PAGES;
        assert_eq!(pa.nr_managed_pages(), SECTION_MANAGED_PAGES + tail);
        let base = pa.base.load(Ordering::Relaxed);
        let last = (1 << PFN_SECTION_SHIFT) + MEMMAP_PAGES + tail - 1;
        assert!(pa.pfn_to_page(last).is_some());
        assert_eq!(pa.pfn_to_page(last + 1), None);
        assert!(pa.in_span((base + len - 1) as *const u8));
        assert!(!pa.in_span((base + len) as *const u8));
        assert_eq!(pa.virt_to_page((base + len) as *const u8), None);
        // The tail's pages are handed out, and none past the span's end.
        let mut blocks = [None; 64];
        for b in blocks.iter_mut() {
            *b = pa.alloc_pages(None, Gfp::KERNEL | Gfp::NOWARN, 9);
        }
        let pfns = || blocks.iter().flatten().map(|&p| pa.page_to_pfn(p));
        assert!(pfns().any(|pfn| pfn >> PFN_SECTION_SHIFT == 1));
        assert!(pfns().all(|pfn| pfn + 512 <= last + 1));
        for b in blocks.iter().flatten() {
            // SAFETY: allocated above, freed once.
            unsafe { pa.free_pages(None, *b, 9) };
        }
        assert_eq!(pa.nr_free_pages(), SECTION_MANAGED_PAGES + tail);
    }

    #[test]
    fn a_small_span_is_a_partial_section() {
        // 4 MiB: a 2 MiB memmap and 512 pages, all of them usable.
        let pa = allocator_len(4 << 20, Config::default()).unwrap();
        assert!(pa.add_memory(0));
        assert!(!pa.add_memory(0));
        assert_eq!(pa.nr_managed_pages(), 512);
        // All but the watermark reserve can be allocated, all of it inside the span.
        let mut pages = [None; 512];
        for p in pages.iter_mut() {
            *p = pa.alloc_pages(None, Gfp::KERNEL | Gfp::NOWARN, 0);
        }
        let got = pages.iter().flatten().count();
        assert!((400..512).contains(&got), "{got} pages");
        let base = pa.base.load(Ordering::Relaxed);
        for p in pages.iter().flatten() {
            let addr = pa.page_address(*p).as_ptr() as usize;
            assert!(addr >= base + (2 << 20) && addr < base + (4 << 20));
            // SAFETY: allocated above, freed once.
            unsafe { pa.free_pages(None, *p, 0) };
        }
        assert_eq!(pa.nr_free_pages(), 512);
        // A span of no more than one memmap holds nothing; a partial last section of
        // no more than its memmap is dropped.
        let memmap = MEMMAP_PAGES * PAGE_SIZE;
        assert_eq!(
            allocator_len(memmap + PAGE_SIZE - 1, Config::default()).err(),
            Some(InitError::BadSpan)
        );
        let pa = allocator_len(SECTION_SIZE + memmap, Config::default()).unwrap();
        assert!(pa.add_memory(0));
        assert!(!pa.add_memory(0));
        let end = pa.base.load(Ordering::Relaxed) + SECTION_SIZE;
        assert!(!pa.in_span(end as *const u8));
    }

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
    fn the_free_fast_paths_lookup_reads_only_sections_ever_used() {
        use super::super::descriptor::PageFlags;
        let pa = allocator(2, Config::default());
        assert!(pa.add_memory(0));
        let base = pa.base.load(Ordering::Relaxed);
        // The second section of the span was never used: nothing of it is read.
        let unused = (base + SECTION_SIZE + (MEMMAP_PAGES + 3) * PAGE_SIZE) as *const u8;
        assert!(pa.in_span(unused));
        assert!(pa.virt_to_slab_used(unused).is_none());
        let page = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        let addr = pa.page_address(page).as_ptr();
        assert!(pa.virt_to_slab_used(addr).is_none(), "a page, not a slab");
        // SAFETY: allocated above, ours.
        let pr = unsafe { page.as_ref() };
        let flags = pr.flags();
        pr.set_flags(flags | PageFlags::SLAB);
        let found = pa.virt_to_slab_used(addr.wrapping_add(100)).unwrap();
        assert!(core::ptr::eq(found, pr));
        pr.set_flags(flags);
        // SAFETY: allocated above.
        unsafe { pa.free_pages(None, page, 0) };
        assert_eq!(pa.report_free_pages(), 512);
        assert!(!pa.sections[0].online());
        // Offline: its memmap is still mapped and reads as no slab.
        assert!(pa.virt_to_slab_used(addr).is_none());
        assert!(pa
            .virt_to_slab_used(base.wrapping_sub(8) as *const u8)
            .is_none());
    }

    #[test]
    fn a_wholly_reported_section_goes_offline_and_comes_back() {
        let pa = allocator(1, Config::default());
        assert!(pa.add_memory(0));
        // A page in use keeps the section online.
        let page = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        assert!(!pa.try_offline_section(0));
        // A sheaf tag left on the page as it goes back (a clear the slab layer
        // missed) stays in the tag table while the section is online ...
        // SAFETY: the descriptor of the page we hold.
        unsafe { page.as_ref() }.set_sheaf_tag(0x40, Ordering::Relaxed);
        let pfn = pa.page_to_pfn(page);
        let entry = || {
            let table = pa.window.table.load(Ordering::Relaxed) as *const crate::sync::AtomicU32;
            // SAFETY: the entry of a page of a section brought online (its part of the
            // table is open for good).
            unsafe { &*table.add(pfn) }.load(Ordering::Relaxed)
        };
        assert_eq!(entry(), 0x40);
        // SAFETY: allocated above.
        unsafe { pa.free_pages(None, page, 0) };
        // Freed but not reported (resident): still online.
        assert!(!pa.try_offline_section(0));
        assert_eq!(pa.report_free_pages(), 512);
        // The reporting pass took it offline already, and cleared the section's tags.
        assert!(!pa.sections[0].online());
        assert_eq!(entry(), 0, "no tag outlives its section's memmap");
        assert_eq!(pa.nr_managed_pages(), 0);
        assert_eq!(pa.nr_free_pages(), 0);
        // Its deferred pages (never listed) went with it, and none stays reported.
        let reported = &pa.zones[0].vm_stat[crate::vmstat::ZoneStat::NrFreeReported as usize];
        assert_eq!(reported.load(Ordering::Relaxed), 0);
        assert_eq!(pa.deferred_pages(0), (0, 0));
        assert_eq!(pa.zone_event(0, VmEvent::SectionOffline), 1);
        assert_eq!(pa.pfn_to_page(MEMMAP_PAGES), None);
        // The next demand brings the same section back, with a fresh memmap.
        let again = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        assert_eq!(pa.page_to_pfn(again), MEMMAP_PAGES);
        assert_eq!(pa.nr_used_sections(), 1);
        assert_eq!(pa.nr_online_sections(), 1);
        assert_eq!(pa.nr_free_pages(), SECTION_MANAGED_PAGES - 1);
        assert_eq!(
            reported.load(Ordering::Relaxed) as usize,
            SECTION_MANAGED_PAGES - 1
        );
        assert_ne!(pa.deferred_pages(0), (0, 0));
    }
}
