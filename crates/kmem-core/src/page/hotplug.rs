//! Memory hotplug: bringing sections online as nodes need memory (`add_memory`,
//! `online_pages`) and taking wholly free, reported sections offline again
//! (`offline_pages`), so resident memory follows live memory down.
//!
//! Under a heap bound (`max_pages`) memory comes online in steps of an eighth of the
//! bound ([`PageAllocator::online_step`]; a section grows by steps), not a whole
//! section at once, and the bound is shared with memory the heap maps outside the
//! page allocator (huge mappings: [`PageAllocator::reserve_outside`]): pages online
//! plus pages lent outside never exceed it. (Onlining the whole bound with the first
//! small allocation left a bounded heap no room for any huge mapping at all.)
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
use super::{Page, PageAllocator, PageList, PAGE_SIZE};
use crate::platform::Platform;
use crate::sync::Ordering;
use crate::vmstat::{VmEvent, ZoneStat};
use core::ptr;
use core::ptr::NonNull;

/// Pages a section coming online lists on the free lists at once (the first 128 KiB
/// past the memmap, one block); the rest waits in the zone's deferred range until the
/// lists run out, and is then listed a block at a time, the largest aligned block that
/// fits (32, 64, 128 and 256 pages, then `MAX_ORDER` blocks). A small process (a
/// shell's command) allocates its CPU area and first slabs from those 32 pages, whose
/// descriptors share one page of the memmap. Listing the 2 MiB past the memmap at once,
/// as an order-9 block, made the first allocation split it down and write the
/// descriptors of its halves at 256, 128 and 64 pages, three more memmap pages, and
/// listing the next 4 MiB block a fourth: four page faults in every process that
/// starts, for memory it mostly never uses.
pub const ONLINE_LISTED_PAGES: usize = 32;

/// What the hotplug lock guards.
pub(super) struct Hotplug {
    /// Sections `0..next_section` have been used at least once.
    next_section: usize,
    /// Managed pages online now.
    online_pages: usize,
    /// Pages of the bound lent to memory outside the page allocator
    /// ([`PageAllocator::reserve_outside`]).
    outside_pages: usize,
    /// Free blocks taken off the zones for the loans (a balloon, as a guest's balloon
    /// driver takes pages from its kernel): allocated, their memory given back to the
    /// platform, each block's order in its head. They pin their sections online.
    lent: PageList,
    /// Pages of `lent`: online, but out of the bound's count. With a bound,
    /// `online_pages - lent_pages + outside_pages <= max_pages`.
    lent_pages: usize,
}

impl Hotplug {
    pub(super) const fn new() -> Self {
        Self {
            next_section: 0,
            online_pages: 0,
            outside_pages: 0,
            lent: PageList::new(),
            lent_pages: 0,
        }
    }

    /// Pages the bound counts as taken: online and not lent, plus lent outside.
    fn counted(&self) -> usize {
        self.online_pages - self.lent_pages + self.outside_pages
    }
}

impl<P: Platform> PageAllocator<P> {
    /// Brings more memory online for node `nid`: an offline section of that node, else
    /// a never-used section. Returns false at the heap bound, at the end of the span,
    /// and for a node past [`MAX_NUMNODES`].
    #[cold]
    pub fn add_memory(&self, nid: usize) -> bool {
        if nid >= super::MAX_NUMNODES {
            return false;
        }
        let mut hp = self.hotplug.lock();
        let max = self.max_pages();
        let room = if max == 0 {
            usize::MAX
        } else {
            max.saturating_sub(hp.counted()).min(Self::online_step(max))
        };
        if room == 0 {
            return false;
        }
        // Lent blocks come back before more memory comes online.
        if hp.lent_pages > 0 && self.return_lent(&mut hp, room) > 0 {
            return true;
        }
        // Under a bound, a section that is online in part grows first.
        if max != 0 {
            let partial = (0..hp.next_section).find(|&s| {
                let sec = &self.sections[s];
                sec.online()
                    && sec.node.load(Ordering::Relaxed) as usize == nid
                    && (sec.nr_managed.load(Ordering::Relaxed) as usize) < self.section_managed(s)
            });
            if let Some(nr) = partial {
                let pages = self.grow_section(nr, nid, room);
                hp.online_pages += pages;
                return true;
            }
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
        let start = (nr << PFN_SECTION_SHIFT) + MEMMAP_PAGES;
        let pages = run_end(start, room, self.section_managed(nr)) - start;
        hp.online_pages += pages;
        self.online_section(nr, nid, pages);
        drop(hp);
        true
    }

    /// How much memory one `add_memory` brings online under a bound of `max` pages:
    /// an eighth of it, in whole largest blocks (at least one).
    pub(super) fn online_step(max: usize) -> usize {
        (max / 8).max(1 << MAX_ORDER) & !((1 << MAX_ORDER) - 1)
    }

    /// The managed pages section `nr` has when wholly online (its span past the memmap).
    fn section_managed(&self, nr: usize) -> usize {
        (self.section_span_bytes(nr) >> PAGE_SHIFT) - MEMMAP_PAGES
    }

    /// Brings up to `want` more pages of section `nr` (online in part, on node `nid`)
    /// online, listed as reported free blocks as `online_section` lists them. Runs
    /// under the hotplug lock; returns the pages added.
    #[cold]
    fn grow_section(&self, nr: usize, nid: usize, want: usize) -> usize {
        let sec = &self.sections[nr];
        let have = sec.nr_managed.load(Ordering::Relaxed) as usize;
        let start = (nr << PFN_SECTION_SHIFT) + MEMMAP_PAGES + have;
        let end = run_end(start, want, self.section_managed(nr) - have);
        let zone = &self.zones[nid];
        let mut fa = zone.lock.lock();
        let mut pfn = start;
        while pfn < end {
            let order = largest_block(pfn, end);
            self.add_to_free_list(&mut fa, zone, pfn, order, true);
            pfn += 1 << order;
        }
        let added = end - start;
        // Under the zone lock, as `try_offline_section` reads it.
        sec.nr_managed
            .store((have + added) as u32, Ordering::Relaxed);
        zone.vm_stat[ZoneStat::NrFreePages as usize].fetch_add(added as isize, Ordering::Relaxed);
        zone.managed.fetch_add(added, Ordering::Relaxed);
        drop(fa);
        zone.setup_watermarks();
        self.recalc_pcp_high();
        added
    }

    /// Lends `pages` of the heap bound to memory outside the page allocator (a huge
    /// mapping): true if the bound has room for them beside the pages online and those
    /// lent already (always, without a bound). [`PageAllocator::release_outside`]
    /// gives them back.
    ///
    /// Free pages online count toward the bound too, and a bounded heap whose objects
    /// were freed keeps most of them online (a section goes offline only when wholly
    /// free): so when the bound has no room, free blocks are taken off the zones for
    /// the loan, their memory given back to the platform, until they cover it; a loan
    /// they cannot cover is refused, with nothing taken.
    pub fn reserve_outside(&self, pages: usize) -> bool {
        let mut hp = self.hotplug.lock();
        let max = self.max_pages();
        if max != 0 {
            let need = (hp.counted() + pages).saturating_sub(max);
            if need > 0 && !self.lend_free_blocks(&mut hp, need) {
                return false;
            }
        }
        hp.outside_pages += pages;
        true
    }

    /// Gives back `pages` lent by [`PageAllocator::reserve_outside`]; blocks lent for
    /// the loans go back to their zones as far as the bound then has room.
    pub fn release_outside(&self, pages: usize) {
        let mut hp = self.hotplug.lock();
        debug_assert!(hp.outside_pages >= pages);
        hp.outside_pages = hp.outside_pages.saturating_sub(pages);
        if hp.lent_pages > 0 {
            // With the bound lifted meanwhile (0), every lent block comes back.
            let room = match self.max_pages() {
                0 => usize::MAX,
                max => max.saturating_sub(hp.counted()),
            };
            self.return_lent(&mut hp, room);
        }
    }

    /// Takes free blocks worth `need` pages off the zones onto the lent list (the
    /// largest that fit what is still needed, then smaller), their memory given back
    /// to the platform. False, with every block put back, if the zones hold too few.
    /// Runs under the hotplug lock (zone locks inside it).
    #[cold]
    fn lend_free_blocks(&self, hp: &mut Hotplug, need: usize) -> bool {
        let mut taken = PageList::new();
        let mut got = 0;
        'zones: for nid in 0..self.nr_nodes() {
            let zone = &self.zones[nid];
            while got < need {
                let mut order = (usize::BITS - 1 - (need - got).leading_zeros()) as usize;
                order = order.min(MAX_ORDER);
                let block = loop {
                    // Straight off the free lists: `rmqueue_buddy` may start a
                    // reporting pass, which takes the hotplug lock held here.
                    let mut fa = zone.lock.lock();
                    let head = self.rmqueue_smallest(&mut fa, zone, order);
                    drop(fa);
                    if let Some((pfn, _)) = head {
                        self.mod_zone_state(None, nid, ZoneStat::NrFreePages, -(1 << order));
                        break NonNull::new(self.pfn_to_page_raw(pfn));
                    }
                    if order == 0 {
                        break None;
                    }
                    order -= 1;
                };
                let Some(page) = block else {
                    continue 'zones;
                };
                // SAFETY: a block just taken off the free lists: ours, on no list.
                unsafe {
                    page.as_ref().set_order(order);
                    taken.push_head(page.as_ptr());
                }
                got += 1 << order;
            }
            break;
        }
        if got < need {
            // SAFETY: `taken` is this function's own list of blocks it took off the
            // free lists above; nobody else reaches it.
            while let Some(page) = NonNull::new(unsafe { taken.pop_head() }) {
                // SAFETY: a block taken above: a live descriptor, its order set there.
                let order = unsafe { page.as_ref() }.order();
                self.free_lent_block(page, order, false);
            }
            return false;
        }
        // SAFETY: `taken` is this function's own list of blocks it took off the free
        // lists above; their memory is ours until they are returned.
        while let Some(page) = NonNull::new(unsafe { taken.pop_head() }) {
            // SAFETY: a block taken above: a live descriptor, its order set there.
            let order = unsafe { page.as_ref() }.order();
            let addr = self.page_address(page).as_ptr();
            // SAFETY: a block we hold: nobody reads or writes its pages while lent.
            unsafe { self.platform.report_free(addr, PAGE_SIZE << order) };
            self.zones[self.page_to_nid(page)].events[VmEvent::BalloonInflate as usize]
                .fetch_add(1 << order, Ordering::Relaxed);
            // SAFETY: on no list; the lent list is ours under the hotplug lock.
            unsafe { hp.lent.push_head(page.as_ptr()) };
        }
        hp.lent_pages += got;
        true
    }

    /// Returns lent blocks to their zones, up to `room` pages (whole blocks), as
    /// reported free blocks (their memory was given back). Returns the pages.
    #[cold]
    fn return_lent(&self, hp: &mut Hotplug, room: usize) -> usize {
        let mut back = 0;
        while back < room {
            // SAFETY: the lent list is ours under the hotplug lock.
            let Some(page) = NonNull::new(unsafe { hp.lent.pop_head() }) else {
                break;
            };
            // SAFETY: a lent block: ours, its order in its head.
            let order = unsafe { page.as_ref() }.order();
            if back + (1 << order) > room {
                // SAFETY: popped off the lent list just now (on no other list); back
                // onto it, under the hotplug lock that guards it.
                unsafe { hp.lent.push_head(page.as_ptr()) };
                break;
            }
            self.free_lent_block(page, order, true);
            self.zones[self.page_to_nid(page)].events[VmEvent::BalloonDeflate as usize]
                .fetch_add(1 << order, Ordering::Relaxed);
            back += 1 << order;
        }
        hp.lent_pages -= back;
        back
    }

    /// Puts a block taken by [`PageAllocator::lend_free_blocks`] back on its zone's
    /// free lists (merged with its free buddies), `reported` if its memory was given
    /// back to the platform. No reporting pass starts here (the hotplug lock is held).
    fn free_lent_block(&self, page: NonNull<Page>, order: usize, reported: bool) {
        let nid = self.page_to_nid(page);
        let zone = &self.zones[nid];
        let pfn = self.page_to_pfn(page);
        let mut fa = zone.lock.lock();
        self.free_one_page_locked(&mut fa, zone, pfn, order, reported, 0);
        drop(fa);
        self.mod_zone_state(None, nid, ZoneStat::NrFreePages, 1 << order);
    }

    /// Pages of the bound lent outside the page allocator now.
    pub fn outside_pages(&self) -> usize {
        self.hotplug.lock().outside_pages
    }

    /// Pages the heap bound counts as taken now: online and not lent out, plus lent
    /// outside (at most `max_pages` with a bound).
    pub fn bound_pages(&self) -> usize {
        self.hotplug.lock().counted()
    }

    /// What the heap bound counts, read at one moment: the pages it counts as taken
    /// ([`PageAllocator::bound_pages`]), those of them outside the page allocator
    /// ([`PageAllocator::outside_pages`]: the huge mappings'), and the free pages
    /// lent to those (off the zones, their memory given back to the OS).
    pub fn bound_usage(&self) -> (usize, usize, usize) {
        let hp = self.hotplug.lock();
        (hp.counted(), hp.outside_pages, hp.lent_pages)
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
        let listed_end = if defer {
            (start + ONLINE_LISTED_PAGES).min(end)
        } else {
            end
        };
        let mut pfn = start;
        while pfn < end {
            if pfn >= listed_end {
                fa.deferred = (pfn, end);
                self.account_reported(zone, pfn, end - pfn, true);
                break;
            }
            let order = largest_block(pfn, listed_end);
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
        let (dstart, dend) = fa.deferred;
        let hole = if dstart < dend && dstart >= start && dend <= end {
            // The deferred range is on no list: forget it (it counted as reported).
            self.account_reported(zone, dstart, dend - dstart, false);
            fa.deferred = (0, 0);
            (dstart, dend)
        } else {
            (end, end)
        };
        // Every listed block: before the deferred range, and after it (a bounded
        // heap's `grow_section` lists blocks past the end it had when it came online).
        for (from, to) in [(start, hole.0), (hole.1, end)] {
            let mut pfn = from;
            while pfn < to {
                // SAFETY: every managed page of the section is in a free, reported
                // block (checked above under the zone lock) or the deferred range,
                // so `pfn` heads a listed one.
                let order = unsafe { (*self.pfn_to_page_raw(pfn)).order() };
                self.del_from_free_list(&mut fa, zone, pfn, order);
                pfn += 1 << order;
            }
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

/// The end of a run of about `want` pages from `start`: on a largest-block boundary
/// when that is short of `start + want` and past `start`, so that the next run
/// continues with whole largest blocks (two runs that meet inside one would leave its
/// two halves listed apart).
fn step_end(start: usize, want: usize) -> usize {
    let end = start + want;
    let aligned = end & !((1 << MAX_ORDER) - 1);
    if aligned > start {
        aligned
    } else {
        end
    }
}

/// The end of a run of up to `want` of the `rest` pages from `start` to the end of
/// its section: all of them when `want` covers them (the section's end is where its
/// pages end, whether or not a largest block ends there: the last section of a span
/// may stop anywhere), else [`step_end`].
fn run_end(start: usize, want: usize, rest: usize) -> usize {
    if want >= rest {
        start + rest
    } else {
        step_end(start, want)
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
    fn a_last_section_off_a_largest_block_comes_online_whole() {
        // 10 MiB of a second section: 2,048 pages past its memmap, ending half way
        // into a largest block.
        let len = SECTION_SIZE + (10 << 20);
        let pa = allocator_len(len, Config::default()).unwrap();
        while pa.add_memory(0) {}
        let tail = (10 << 20) / PAGE_SIZE - MEMMAP_PAGES;
        assert_eq!(pa.nr_managed_pages(), SECTION_MANAGED_PAGES + tail);
        assert_eq!(pa.nr_free_pages(), SECTION_MANAGED_PAGES + tail);
    }

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
        // Steps of an eighth of the bound: the first section fills in steps, then
        // the bound leaves 100 pages of a second.
        let step = PageAllocator::<super::super::test_platform::TestPlatform>::online_step(
            SECTION_MANAGED_PAGES + 100,
        );
        assert_eq!(step, 3 << MAX_ORDER);
        let mut calls = 0;
        while pa.add_memory(0) {
            calls += 1;
            assert!(pa.nr_managed_pages() <= SECTION_MANAGED_PAGES + 100);
            if calls == 1 {
                assert!(pa.nr_managed_pages() <= step, "{}", pa.nr_managed_pages());
            }
        }
        assert_eq!(calls, SECTION_MANAGED_PAGES.div_ceil(step) + 1);
        assert_eq!(pa.nr_managed_pages(), SECTION_MANAGED_PAGES + 100);
        assert_eq!(pa.nr_online_sections(), 2);
        assert_eq!(pa.nr_free_pages(), SECTION_MANAGED_PAGES + 100);
        assert_eq!(pa.zone_event(0, VmEvent::SectionOnline), 2);
        // The grown section is whole blocks: its largest ones were listed whole, and
        // it all comes back as largest blocks.
        let mut held = [None; 64];
        let mut n = 0;
        while let Some(p) = pa.alloc_pages_node(None, Gfp::NOWARN, MAX_ORDER, Some(0)) {
            held[n] = Some(p);
            n += 1;
        }
        assert!(n >= SECTION_MANAGED_PAGES / (1 << MAX_ORDER) - 1, "{n}");
        for p in held.into_iter().flatten() {
            // SAFETY: allocated above, freed once.
            unsafe { pa.free_pages(None, p, MAX_ORDER) };
        }
    }

    /// A bounded heap's section that grew while part of it was still deferred (its
    /// grown blocks listed past the deferred range) goes offline with none of its
    /// blocks left on the zone's lists (they stayed there, their memmap discarded).
    #[test]
    fn a_grown_section_goes_offline_with_every_block() {
        let pa = allocator(
            4,
            Config {
                max_pages: SECTION_MANAGED_PAGES + 100,
                ..Config::default()
            },
        );
        assert!(pa.add_memory(0));
        let (dstart, dend) = pa.deferred_pages(0);
        assert!(dstart < dend, "part of the first step deferred");
        // The same section grows: blocks listed past the deferred range.
        assert!(pa.add_memory(0));
        assert_eq!(pa.nr_online_sections(), 1);
        assert!(pa.nr_managed_pages() > dend - MEMMAP_PAGES);
        assert_eq!(pa.deferred_pages(0), (dstart, dend));
        assert!(pa.free_area_counts(0).iter().sum::<usize>() > 0);
        // All free and reported (listed so): the section goes offline with every
        // block.
        assert!(pa.try_offline_section(0));
        assert!(!pa.sections[0].online());
        assert_eq!(pa.free_area_counts(0), [0; crate::page::NR_ORDERS]);
        assert_eq!(pa.nr_free_pages(), 0);
        // It comes back whole, as any offline section.
        let p = pa.alloc_pages(None, Gfp::KERNEL, MAX_ORDER).unwrap();
        // SAFETY: allocated just above.
        unsafe { pa.free_pages(None, p, MAX_ORDER) };
    }

    #[test]
    fn pages_lent_outside_share_the_bound() {
        let max = 4 << MAX_ORDER;
        let pa = allocator(
            4,
            Config {
                max_pages: max,
                ..Config::default()
            },
        );
        // A first step online, then a loan of what is left: nothing more comes online.
        assert!(pa.add_memory(0));
        let online = pa.nr_managed_pages();
        assert!(online < max);
        let free = pa.nr_free_pages();
        assert!(pa.reserve_outside(max - online));
        assert_eq!(pa.outside_pages(), max - online);
        assert_eq!(
            pa.nr_free_pages(),
            free,
            "a loan within the room takes no page"
        );
        assert!(!pa.add_memory(0), "the loan holds the rest of the bound");
        // Given back, the bound's room is there again.
        pa.release_outside(max - online);
        assert!(pa.add_memory(0));
        assert!(pa.nr_managed_pages() > online);
        while pa.add_memory(0) {}
        assert!(pa.nr_managed_pages() <= max);
        // Without a bound every loan is granted.
        let free = allocator(4, Config::default());
        assert!(free.reserve_outside(usize::MAX / 2));
    }

    /// With the bound all online, a loan takes free blocks off the zone (a balloon):
    /// the bound's count stays whole, a loan the free pages cannot cover takes
    /// nothing, and the blocks come back when the loan does.
    #[test]
    fn loans_beyond_the_bound_take_free_blocks() {
        let max = 8 << MAX_ORDER;
        let pa = allocator(
            4,
            Config {
                max_pages: max,
                ..Config::default()
            },
        );
        while pa.add_memory(0) {}
        let online = pa.nr_managed_pages();
        // Half the bound in use, in small blocks.
        let mut held = [None; 1024];
        for h in held.iter_mut().take(max / 2 / 4) {
            *h = pa.alloc_pages_node(None, Gfp::NOWARN, 2, Some(0));
            assert!(h.is_some());
        }
        let free = pa.nr_free_pages();
        assert!(free >= max / 2 - 64, "{free}");
        assert!(
            !pa.reserve_outside(free + max - online + 1),
            "more than is free"
        );
        assert_eq!(pa.nr_free_pages(), free, "a refused loan takes nothing");
        let loan = max - online + (3 << MAX_ORDER);
        assert!(pa.reserve_outside(loan));
        assert_eq!(pa.zone_event(0, VmEvent::BalloonInflate), 3 << MAX_ORDER);
        assert_eq!(pa.nr_managed_pages(), online);
        assert_eq!(pa.nr_free_pages(), free - (3 << MAX_ORDER));
        assert!(!pa.add_memory(0), "the bound is taken");
        // Given back: the lent blocks are free again, as whole blocks.
        pa.release_outside(loan);
        assert_eq!(pa.zone_event(0, VmEvent::BalloonDeflate), 3 << MAX_ORDER);
        assert_eq!(pa.nr_free_pages(), free);
        let big = pa.alloc_pages_node(None, Gfp::NOWARN, MAX_ORDER, Some(0));
        assert!(big.is_some());
        // SAFETY: allocated just above.
        unsafe { pa.free_pages(None, big.unwrap(), MAX_ORDER) };
        // A loan out when the bound is lifted: its blocks come back at its release.
        let loan = max - online + (2 << MAX_ORDER);
        assert!(pa.reserve_outside(loan));
        pa.set_max_pages(0);
        pa.release_outside(loan);
        assert_eq!(pa.zone_event(0, VmEvent::BalloonDeflate), 5 << MAX_ORDER);
        assert_eq!(pa.nr_free_pages(), free);
        for h in held.iter().flatten() {
            // SAFETY: allocated above, freed once.
            unsafe { pa.free_pages(None, *h, 2) };
        }
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
        assert_eq!(pa.report_free_pages(), ONLINE_LISTED_PAGES);
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
        assert_eq!(pa.report_free_pages(), ONLINE_LISTED_PAGES);
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
