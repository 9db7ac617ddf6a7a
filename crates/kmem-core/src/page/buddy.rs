//! The buddy allocator proper: a zone's free lists, split and merge
//! (`__rmqueue_smallest`, `expand`, `__free_one_page` of mm/page_alloc.c).
//!
//! A free block of 2^order pages is aligned to its size in pfn space and its head
//! carries `PG_BUDDY` and the order. Its buddy is the block at `pfn ^ (1 << order)`;
//! when both are free they merge into one block of the next order. Blocks never cross
//! a section (4 MiB blocks, 128 MiB sections, both powers of two).
//!
//! Each list keeps recently freed (resident) blocks at the head and reported blocks
//! (contents given back, see `reporting.rs`) at the tail; allocation takes from the
//! head.
//!
//! Locking: every function taking `&mut FreeArea` runs under the zone lock of the
//! `zone` it is given (the guard is the `&mut FreeArea`); the others take that lock
//! themselves and are called with no page-layer lock held (the lock order in lib.rs).

use super::descriptor::{Page, PageFlags, MAX_ORDER, NR_ORDERS};
use super::mmzone::{FreeArea, Zone, PFN_SECTION_SHIFT};
use super::PageAllocator;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering;
use crate::vmstat::{VmEvent, ZoneStat};
use core::ptr::NonNull;

impl<P: Platform> PageAllocator<P> {
    /// Lists the free block at `pfn` on `free_area[order]`: at the head if it was freed
    /// now, at the tail if it is `reported`.
    pub(super) fn add_to_free_list(
        &self,
        fa: &mut FreeArea,
        zone: &Zone,
        pfn: usize,
        order: usize,
        reported: bool,
    ) {
        let page = self.pfn_to_page_raw(pfn);
        // SAFETY: `pfn` is a managed page of an online section of this zone (callers),
        // and the zone lock is held, which owns free blocks and their lists.
        unsafe {
            (*page).set_order(order);
            if reported {
                (*page).set_flags(PageFlags::BUDDY | PageFlags::REPORTED);
                fa.lists[order].push_tail(page);
            } else {
                (*page).set_flags(PageFlags::BUDDY);
                fa.lists[order].push_head(page);
            }
        }
        if reported {
            self.account_reported(zone, pfn, 1 << order, true);
        }
    }

    /// Lists the next block of the zone's deferred pages (the largest aligned block
    /// that fits: growing blocks after a section's first listed pages, then `MAX_ORDER`
    /// blocks but at the range's end), as reported and without
    /// counting it again (the pages counted as free and reported when their section
    /// came online). False when nothing is deferred.
    pub(super) fn grow_deferred(&self, fa: &mut FreeArea) -> bool {
        let (pfn, end) = fa.deferred;
        if pfn >= end {
            return false;
        }
        let order = largest_block(pfn, end);
        let page = self.pfn_to_page_raw(pfn);
        // SAFETY: a deferred page is a free, managed page of an online section of
        // this zone whose descriptor nobody uses (it is on no list); the zone lock is
        // held.
        unsafe {
            (*page).set_order(order);
            (*page).set_flags(PageFlags::BUDDY | PageFlags::REPORTED);
            fa.lists[order].push_tail(page);
        }
        fa.deferred.0 = pfn + (1 << order);
        true
    }

    /// Removes a free block from its list; returns whether it was reported.
    pub(super) fn del_from_free_list(
        &self,
        fa: &mut FreeArea,
        zone: &Zone,
        pfn: usize,
        order: usize,
    ) -> bool {
        let page = self.pfn_to_page_raw(pfn);
        // SAFETY: as in `add_to_free_list`; the block is on `lists[order]`.
        let reported = unsafe {
            fa.lists[order].remove(page);
            let reported = (*page).flags().contains(PageFlags::REPORTED);
            (*page).set_flags(PageFlags::empty());
            reported
        };
        if reported {
            self.account_reported(zone, pfn, 1 << order, false);
        }
        reported
    }

    /// Counts `nr` pages at `pfn` into (`add`) or out of the reported pages of their
    /// section and zone. Zone lock held (it covers the section's count).
    pub(super) fn account_reported(&self, zone: &Zone, pfn: usize, nr: usize, add: bool) {
        let s = &self.sections[pfn >> PFN_SECTION_SHIFT].nr_reported;
        let z = &zone.vm_stat[ZoneStat::NrFreeReported as usize];
        if add {
            s.store(s.load(Ordering::Relaxed) + nr as u32, Ordering::Relaxed);
            z.fetch_add(nr as isize, Ordering::Relaxed);
        } else {
            s.store(s.load(Ordering::Relaxed) - nr as u32, Ordering::Relaxed);
            z.fetch_sub(nr as isize, Ordering::Relaxed);
        }
    }

    /// `__free_one_page`: puts a block back, merging it with its free buddies.
    ///
    /// `freed_at` is when the caller's pages were freed (the platform clock, read once
    /// per lock round trip), or 0 for a *cold* free — a drain of per-CPU lists whose
    /// owner went idle or away — which does not make the merged block look recently
    /// used. A merged block is as young as its youngest part, so free page reporting
    /// never discards memory that was freed (and may be reused) a moment ago.
    pub(super) fn free_one_page_locked(
        &self,
        fa: &mut FreeArea,
        zone: &Zone,
        mut pfn: usize,
        mut order: usize,
        mut reported: bool,
        freed_at: u64,
    ) {
        let mut youngest = freed_at as usize;
        // The block stops being whatever it was (allocated head, per-CPU block): only
        // the head of the merged block carries flags when we are done.
        // SAFETY: `pfn` heads a block of an online section that the caller hands back
        // under the zone lock.
        unsafe { (*self.pfn_to_page_raw(pfn)).set_flags(PageFlags::empty()) };
        while order < MAX_ORDER {
            let buddy_pfn = pfn ^ (1 << order);
            let buddy = self.pfn_to_page_raw(buddy_pfn);
            // SAFETY: blocks are aligned to their size and never cross a section (4 MiB
            // < 128 MiB, both powers of two), so the buddy's descriptor is in the same,
            // online memmap. Pages outside the managed range never carry BUDDY.
            let b = unsafe { &*buddy };
            if !(b.is_buddy() && b.order() == order) {
                break;
            }
            if !b.flags().contains(PageFlags::REPORTED) {
                youngest = youngest.max(b.private.load(Ordering::Relaxed));
            }
            reported &= self.del_from_free_list(fa, zone, buddy_pfn, order);
            pfn &= buddy_pfn;
            order += 1;
        }
        // SAFETY: as above.
        let head = unsafe { &*self.pfn_to_page_raw(pfn) };
        head.reset();
        if !reported {
            head.private.store(youngest, Ordering::Relaxed);
            zone.report_pending.store(1, Ordering::Relaxed);
        }
        self.add_to_free_list(fa, zone, pfn, order, reported);
    }

    /// `expand`: a block of order `high` at `pfn` was taken for an order-`low`
    /// allocation; list the upper halves. Unreported halves keep the block's free time
    /// (its head's `private`), which the reporting pass reads: a half's own word holds
    /// whatever it last had (0, or the time of a free long merged away), and a block
    /// freed a moment ago, split, went back to the system at the next pass.
    fn expand(
        &self,
        fa: &mut FreeArea,
        zone: &Zone,
        pfn: usize,
        low: usize,
        mut high: usize,
        reported: bool,
    ) {
        // SAFETY: the block's head, taken off its free list under the zone lock.
        let freed_at = unsafe { &*self.pfn_to_page_raw(pfn) }
            .private
            .load(Ordering::Relaxed);
        while high > low {
            high -= 1;
            let half = pfn + (1 << high);
            if !reported {
                // SAFETY: the half's head, a page of the block the caller holds.
                unsafe { &*self.pfn_to_page_raw(half) }
                    .private
                    .store(freed_at, Ordering::Relaxed);
            }
            self.add_to_free_list(fa, zone, half, high, reported);
        }
    }

    /// `__rmqueue_smallest`: the smallest free block of at least `order`, split down.
    /// Returns its pfn and whether its contents were discarded (read as zero).
    pub(super) fn rmqueue_smallest(
        &self,
        fa: &mut FreeArea,
        zone: &Zone,
        order: usize,
    ) -> Option<(usize, bool)> {
        loop {
            for o in order..=MAX_ORDER {
                let head = fa.lists[o].first();
                if let Some(page) = NonNull::new(head) {
                    let pfn = self.page_to_pfn(page);
                    let reported = self.del_from_free_list(fa, zone, pfn, o);
                    self.expand(fa, zone, pfn, order, o, reported);
                    return Some((pfn, reported));
                }
            }
            if !self.grow_deferred(fa) {
                return None;
            }
        }
    }

    /// `rmqueue_buddy`: takes one block straight from the zone (no per-CPU list).
    pub(super) fn rmqueue_buddy(
        &self,
        cpu: Option<CpuRef<'_>>,
        zone: &Zone,
        order: usize,
    ) -> Option<(NonNull<Page>, bool)> {
        let mut fa = zone.lock.lock();
        let got = self.rmqueue_smallest(&mut fa, zone, order);
        drop(fa);
        self.maybe_report(None, zone);
        let (pfn, reported) = got?;
        self.mod_zone_state(cpu, zone.nid(), ZoneStat::NrFreePages, -(1 << order));
        Some((NonNull::new(self.pfn_to_page_raw(pfn))?, reported))
    }

    /// `free_one_page`: frees a block straight to the zone (no per-CPU list).
    pub(super) fn free_one_page(
        &self,
        cpu: Option<CpuRef<'_>>,
        zone: &Zone,
        page: NonNull<Page>,
        order: usize,
    ) {
        let pfn = self.page_to_pfn(page);
        let now = self.platform.now_ns();
        let mut fa = zone.lock.lock();
        self.free_one_page_locked(&mut fa, zone, pfn, order, false, now);
        drop(fa);
        let nid = zone.nid();
        self.mod_zone_state(cpu, nid, ZoneStat::NrFreePages, 1 << order);
        self.count_event(cpu, nid, VmEvent::PgFree, 1 << order);
        self.maybe_report(None, zone);
    }

    /// Free blocks per order of zone `nid` (`/proc/buddyinfo`): the deferred pages as
    /// the blocks they will be listed as.
    pub fn free_area_counts(&self, nid: usize) -> [usize; NR_ORDERS] {
        let fa = self.zones[nid].lock.lock();
        let mut counts: [usize; NR_ORDERS] = core::array::from_fn(|o| fa.lists[o].len());
        let (mut pfn, end) = fa.deferred;
        while pfn < end {
            let order = largest_block(pfn, end);
            counts[order] += 1;
            pfn += 1 << order;
        }
        counts
    }

    /// The zone's deferred pages (see [`FreeArea`]'s `deferred`): pages `start..end`
    /// are free but not listed, with blank descriptors. A walk of the memmap skips
    /// them.
    pub fn deferred_pages(&self, nid: usize) -> (usize, usize) {
        self.zones[nid].lock.lock().deferred
    }
}

/// The order of the largest block that starts at `pfn` (aligned to its size) and
/// ends by `end`, at most `MAX_ORDER` (`pfn < end`).
pub(super) fn largest_block(pfn: usize, end: usize) -> usize {
    let mut order = MAX_ORDER;
    while order > 0 && (pfn & ((1 << order) - 1) != 0 || pfn + (1 << order) > end) {
        order -= 1;
    }
    order
}

#[cfg(test)]
mod tests {
    use super::super::hotplug::ONLINE_LISTED_PAGES;
    use super::super::mmzone::{MEMMAP_PAGES, SECTION_MANAGED_PAGES};
    use super::super::test_platform::allocator;
    use super::super::Config;
    use super::*;

    /// The first block of a fresh section, the one listed as it comes online: at
    /// MEMMAP_PAGES (512, aligned to order 9), of ONLINE_LISTED_PAGES (order
    /// [`TOP`]). The rest of the section is deferred: blocks of orders TOP to 8 up to
    /// 1024, then order-10 blocks.
    const FIRST: usize = MEMMAP_PAGES;
    /// The order of the first block.
    const TOP: usize = ONLINE_LISTED_PAGES.trailing_zeros() as usize;
    const _: () = assert!(ONLINE_LISTED_PAGES == 1 << TOP && TOP < 9);

    fn page<P: Platform>(pa: &PageAllocator<P>, pfn: usize) -> &Page {
        // SAFETY: the tests only ask for pfns of the online first section.
        unsafe { &*pa.pfn_to_page_raw(pfn) }
    }

    fn reported_pages<P: Platform>(pa: &PageAllocator<P>) -> usize {
        pa.sections[0].nr_reported.load(Ordering::Relaxed) as usize
    }

    #[test]
    fn a_fresh_section_is_listed_as_aligned_reported_blocks() {
        let pa = allocator(1, Config::default());
        assert!(pa.add_memory(0));
        let counts = pa.free_area_counts(0);
        // The listed block, then the deferred pages as the blocks they will be listed
        // as: one of TOP again (the first block's buddy), one of each order up to 8,
        // then order-10 blocks.
        let mut expected = [0; NR_ORDERS];
        expected[TOP] = 2;
        expected[TOP + 1..9].fill(1);
        expected[10] = (SECTION_MANAGED_PAGES - 512) >> 10;
        assert_eq!(counts, expected);
        assert_eq!(reported_pages(pa), SECTION_MANAGED_PAGES);
        let head = page(pa, FIRST);
        assert_eq!(head.flags(), PageFlags::BUDDY | PageFlags::REPORTED);
        assert_eq!(head.order(), TOP);
        assert_eq!(
            page(pa, FIRST + ONLINE_LISTED_PAGES).flags(),
            PageFlags::empty()
        );
    }

    #[test]
    fn split_lists_the_upper_halves_and_free_merges_them_back() {
        let pa = allocator(1, Config::default());
        assert!(pa.add_memory(0));
        let zone = &pa.zones[0];
        let mut fa = zone.lock.lock();
        // The smallest block that fits an order-0 request is the first one.
        assert_eq!(pa.rmqueue_smallest(&mut fa, zone, 0), Some((FIRST, true)));
        for o in 0..TOP {
            assert_eq!(fa.lists[o].len(), 1, "order {o}");
            let half = FIRST + (1 << o);
            assert_eq!(fa.lists[o].first(), pa.pfn_to_page_raw(half));
            assert_eq!(page(pa, half).order(), o);
            assert!(page(pa, half).flags().contains(PageFlags::REPORTED));
        }
        assert!(fa.lists[TOP].is_empty());
        assert_eq!(page(pa, FIRST).flags(), PageFlags::empty());
        assert_eq!(reported_pages(pa), SECTION_MANAGED_PAGES - 1);

        // Freeing the page merges it with every half, back to the first block, which
        // is no longer reported: part of it was in use.
        pa.free_one_page_locked(&mut fa, zone, FIRST, 0, false, 5_000);
        for o in 0..TOP {
            assert!(fa.lists[o].is_empty(), "order {o}");
        }
        assert_eq!(fa.lists[TOP].first(), pa.pfn_to_page_raw(FIRST));
        let head = page(pa, FIRST);
        assert_eq!(head.flags(), PageFlags::BUDDY);
        assert_eq!(head.order(), TOP);
        assert_eq!(head.private.load(Ordering::Relaxed), 5_000);
        assert_eq!(
            reported_pages(pa),
            SECTION_MANAGED_PAGES - ONLINE_LISTED_PAGES
        );
        assert_eq!(zone.report_pending.load(Ordering::Relaxed), 1);
        // Its buddy is deferred (a blank descriptor, on no list): no merge with it.
        // Nothing else is listed; the rest waits deferred.
        for o in TOP + 1..NR_ORDERS {
            assert!(fa.lists[o].is_empty(), "order {o}");
        }
        assert_eq!(
            fa.deferred,
            (FIRST + ONLINE_LISTED_PAGES, FIRST + SECTION_MANAGED_PAGES)
        );
    }

    #[test]
    fn a_fresh_section_lists_its_first_block_and_defers_the_rest() {
        let pa = allocator(1, Config::default());
        assert!(pa.add_memory(0));
        let zone = &pa.zones[0];
        let all = SECTION_MANAGED_PAGES;
        {
            let fa = zone.lock.lock();
            let listed: usize = (0..NR_ORDERS).map(|o| fa.lists[o].len()).sum();
            assert_eq!((listed, fa.lists[TOP].len()), (1, 1));
            assert_eq!(fa.deferred, (FIRST + ONLINE_LISTED_PAGES, FIRST + all));
        }
        // The deferred pages count as free and reported, and as buddyinfo's blocks;
        // their descriptors are untouched (the first block's buddy's, in the same
        // page of the memmap, included).
        assert_eq!(reported_pages(pa), all);
        assert_eq!(pa.free_area_counts(0)[10], (all - 512) >> 10);
        for pfn in [FIRST + ONLINE_LISTED_PAGES, FIRST + 256, FIRST + 512] {
            assert_eq!(page(pa, pfn).flags(), PageFlags::empty(), "pfn {pfn}");
        }
        // A request larger than the first block lists deferred blocks, growing, until
        // one is big enough.
        {
            let mut fa = zone.lock.lock();
            assert_eq!(
                pa.rmqueue_smallest(&mut fa, zone, 8),
                Some((FIRST + 256, true))
            );
            for o in TOP..8 {
                assert_eq!(fa.lists[o].len(), 1 + usize::from(o == TOP), "order {o}");
            }
            assert_eq!(fa.deferred.0, FIRST + 512);
            assert!(fa.lists[8].is_empty() && fa.lists[9].is_empty());
            // Given back, it stays an order-8 block: its buddy (the pages below it)
            // is in pieces.
            pa.free_one_page_locked(&mut fa, zone, FIRST + 256, 8, true, 0);
            assert_eq!(fa.lists[8].first(), pa.pfn_to_page_raw(FIRST + 256));
        }
        // Taking more than the listed blocks lists deferred ones, a block at a time;
        // every page comes out once.
        let mut fa = zone.lock.lock();
        let mut taken = [0usize; 64];
        let mut n = 0;
        while let Some((pfn, reported)) = pa.rmqueue_smallest(&mut fa, zone, MAX_ORDER) {
            assert!(reported);
            taken[n] = pfn;
            n += 1;
        }
        assert_eq!(
            fa.deferred.0, fa.deferred.1,
            "everything deferred was listed"
        );
        assert_eq!(n, (all - 512) >> 10);
        let taken = &mut taken[..n];
        taken.sort_unstable();
        assert!(taken.windows(2).all(|w| w[1] == w[0] + 1024), "{taken:?}");
        // The blocks below 1024, listed on the way, are still there for smaller
        // requests, and nothing else is.
        assert_eq!(
            pa.rmqueue_smallest(&mut fa, zone, 8),
            Some((FIRST + 256, true))
        );
        let mut small = 0;
        while let Some((pfn, _)) = pa.rmqueue_smallest(&mut fa, zone, 0) {
            assert!((FIRST..FIRST + 256).contains(&pfn), "pfn {pfn}");
            small += 1;
        }
        assert_eq!(small, 256);
    }

    #[test]
    fn a_block_merges_only_with_a_free_buddy_of_its_order() {
        let pa = allocator(1, Config::default());
        assert!(pa.add_memory(0));
        let zone = &pa.zones[0];
        let mut fa = zone.lock.lock();
        let (a, _) = pa.rmqueue_smallest(&mut fa, zone, 0).unwrap();
        let (b, _) = pa.rmqueue_smallest(&mut fa, zone, 0).unwrap();
        assert_eq!((a, b), (FIRST, FIRST + 1));
        // `b`'s buddy `a` is allocated: `b` stays an order-0 block.
        pa.free_one_page_locked(&mut fa, zone, b, 0, false, 100);
        assert_eq!(fa.lists[0].len(), 1);
        assert!(page(pa, b).is_buddy() && page(pa, b).order() == 0);
        // Take an order-1 block (FIRST + 2): `a` freed now merges with `b` only.
        assert_eq!(
            pa.rmqueue_smallest(&mut fa, zone, 1),
            Some((FIRST + 2, true))
        );
        pa.free_one_page_locked(&mut fa, zone, a, 0, false, 0);
        assert!(fa.lists[0].is_empty());
        assert_eq!(fa.lists[1].first(), pa.pfn_to_page_raw(a));
        assert!(
            !page(pa, b).is_buddy(),
            "only the head of a merged block is marked"
        );
        // A cold free does not make the block young: it is as old as `b`.
        assert_eq!(page(pa, a).private.load(Ordering::Relaxed), 100);
        // Freeing the order-1 block completes the first block again.
        pa.free_one_page_locked(&mut fa, zone, FIRST + 2, 1, false, 50);
        assert_eq!(fa.lists[TOP].first(), pa.pfn_to_page_raw(FIRST));
        assert_eq!(page(pa, FIRST).private.load(Ordering::Relaxed), 100);
    }

    #[test]
    fn reported_parts_merge_into_a_reported_block() {
        let pa = allocator(1, Config::default());
        assert!(pa.add_memory(0));
        let zone = &pa.zones[0];
        let mut fa = zone.lock.lock();
        let (pfn, reported) = pa.rmqueue_smallest(&mut fa, zone, 0).unwrap();
        assert!(reported);
        zone.report_pending.store(0, Ordering::Relaxed);
        // Put back as reported (what a reporting pass does): the whole block stays
        // reported and nothing new is pending.
        pa.free_one_page_locked(&mut fa, zone, pfn, 0, true, 0);
        let head = page(pa, FIRST);
        assert_eq!(head.flags(), PageFlags::BUDDY | PageFlags::REPORTED);
        assert_eq!(fa.lists[TOP].last(), pa.pfn_to_page_raw(FIRST));
        assert_eq!(reported_pages(pa), SECTION_MANAGED_PAGES);
        assert_eq!(zone.report_pending.load(Ordering::Relaxed), 0);
    }
}
