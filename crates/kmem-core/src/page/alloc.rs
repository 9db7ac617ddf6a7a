//! The entry points of the page allocator: `alloc_pages_node` with its fast path, the
//! zonelist walk (`get_page_from_freelist`) and the slow path, `free_pages`, and the
//! preparation of a block on its way out (`prep_new_page`, compound pages,
//! `__GFP_ZERO`) and its check on the way back in (`free_page_is_bad`).
//!
//! Locking: called with no page-layer lock held. The fast paths use the caller's
//! per-CPU lists (owner only, no lock); the rest goes through `pcp.rs` and `buddy.rs`,
//! which take the zone lock, and `hotplug.rs` (the hotplug lock, outside the zone
//! lock; see the lock order in lib.rs). Shrinkers run with no lock held.

use super::block_growth::block_pages;
use super::descriptor::{Page, PageFlags, MAX_ORDER, PAGE_SIZE};
use super::mmzone::{Watermark, Zone};
use super::pcp::{PCP_MAX_ORDER, PCP_THP_ORDER};
use super::PageAllocator;
use crate::gfp::Gfp;
use crate::percpu::{CpuRef, DRAIN_PAGES};
use crate::platform::Platform;
use crate::sync::Ordering;
use crate::vmstat::{VmEvent, ZoneStat};
use core::ptr::{self, NonNull};

/// `free_page_is_bad`: why a block may not be freed as an order-`order` allocation, or
/// `None` if it may.
#[inline]
pub(super) fn free_page_is_bad(p: &Page, order: usize) -> Option<&'static str> {
    let flags = p.flags();
    if flags.intersects(PageFlags::BUDDY | PageFlags::PCP) {
        Some("freeing a free page")
    } else if !flags.contains(PageFlags::HEAD) || flags.contains(PageFlags::TAIL) {
        Some("not the head of an allocated block")
    } else if flags.contains(PageFlags::SLAB) {
        Some("freeing a slab page as pages")
    } else if p.order() != order {
        Some("freed with another order than it was allocated with")
    } else {
        None
    }
}

impl<P: Platform> PageAllocator<P> {
    /// Allocates 2^`order` contiguous pages, preferring the local node.
    #[inline]
    pub fn alloc_pages(
        &self,
        cpu: Option<CpuRef<'_>>,
        gfp: Gfp,
        order: usize,
    ) -> Option<NonNull<Page>> {
        self.alloc_pages_node(cpu, gfp, order, None)
    }

    /// Allocates 2^`order` contiguous pages on node `nid` if given (falling back to
    /// other nodes unless `Gfp::THISNODE`), else on the local node. `None` when no
    /// memory can be had (never a panic).
    #[inline]
    pub fn alloc_pages_node(
        &self,
        cpu: Option<CpuRef<'_>>,
        gfp: Gfp,
        order: usize,
        nid: Option<usize>,
    ) -> Option<NonNull<Page>> {
        let preferred = match nid {
            Some(n) if n < self.nr_nodes() => n,
            Some(_) => return None,
            None => self.local_node(cpu),
        };
        if let Some(c) = cpu {
            if order <= PCP_MAX_ORDER
                && c.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES == 0
            {
                let pcp = self.zone_pcp(c, preferred);
                // SAFETY: `c` proves ownership of the area.
                let page = unsafe { pcp.lists()[order].pop_head() };
                if let Some(page) = NonNull::new(page) {
                    pcp.add_count(-(1 << order));
                    self.zone_statistics(cpu, preferred, preferred, 1 << order);
                    return Some(self.prep_new_page(page, order, gfp));
                }
            } else if order == PCP_THP_ORDER {
                if let Some(page) = self.rmqueue_pcp_thp(c, preferred) {
                    self.zone_statistics(cpu, preferred, preferred, 1 << order);
                    return Some(self.prep_new_page(page, order, gfp));
                }
            }
        }
        self.alloc_pages_slowpath(cpu, gfp, order, preferred)
    }

    /// Allocates with the interleave policy: nodes in turn (`numa_interleave`).
    pub fn alloc_pages_interleave(
        &self,
        cpu: Option<CpuRef<'_>>,
        gfp: Gfp,
        order: usize,
    ) -> Option<NonNull<Page>> {
        let target = self.interleave_next.fetch_add(1, Ordering::Relaxed) % self.nr_nodes();
        let page = self.alloc_pages_node(cpu, gfp, order, Some(target))?;
        if self.page_to_nid(page) == target {
            self.count_event(cpu, target, VmEvent::NumaInterleave, 1);
        }
        Some(page)
    }

    /// `prep_new_page`: clears the page allocator's marks; zeroes on `__GFP_ZERO`
    /// unless the block's contents were discarded (they read as zero already).
    #[inline]
    pub(super) fn prep_new_page(
        &self,
        page: NonNull<Page>,
        order: usize,
        gfp: Gfp,
    ) -> NonNull<Page> {
        // SAFETY: the block was just taken off a free or per-CPU list: we own it.
        let p = unsafe { page.as_ref() };
        let flags = p.flags();
        let known_zero = flags.contains(PageFlags::REPORTED);
        // A pageblock off a per-CPU list that still counts as a live compound block
        // (`free_pcp_thp`): no other free block carries `COMPOUND`.
        let counted = flags.contains(PageFlags::COMPOUND);
        p.set_flags(PageFlags::HEAD);
        p.set_order(order);
        for w in &p.owner {
            w.store(0, Ordering::Relaxed);
        }
        p.clear_sheaf_tag(Ordering::Relaxed);
        // On a free block it held when the block was freed; on an allocated one it is
        // the holder's (`memcg_data`).
        p.private.store(0, Ordering::Relaxed);
        if gfp.contains(Gfp::ZERO) && !known_zero {
            // SAFETY: the block was just taken off a list: ours alone.
            unsafe { self.zero_block(page, order) };
        }
        if gfp.contains(Gfp::COMP) && order > 0 {
            self.prep_compound_page(page, order);
            if !counted {
                self.count_block_alloc(block_pages(order));
            }
        } else if counted {
            self.count_block_free(block_pages(order));
        }
        page
    }

    /// Zeroes the 2^`order` pages of the block headed by `page` (`__GFP_ZERO`; the
    /// kernel's `kernel_init_pages`).
    ///
    /// # Safety
    /// The caller holds the block (allocated to it, or isolated from every list), so
    /// nobody else reads or writes its memory.
    #[inline]
    pub(crate) unsafe fn zero_block(&self, page: NonNull<Page>, order: usize) {
        let addr = self.page_address(page);
        // SAFETY: the block's pages are mapped (online section) and the caller's.
        unsafe { ptr::write_bytes(addr.as_ptr(), 0, PAGE_SIZE << order) };
    }

    /// `prep_compound_page`: marks the block of order `order` > 0 headed by `head`
    /// compound. Its tails are not written (see [`PageFlags::COMPOUND`]).
    #[inline]
    pub(super) fn prep_compound_page(&self, head: NonNull<Page>, order: usize) {
        debug_assert!(order > 0);
        // SAFETY: the caller's block: ours (nobody else writes its flags).
        let h = unsafe { head.as_ref() };
        h.set_flags(h.flags() | PageFlags::COMPOUND);
    }

    /// Whether the allocated block headed by `head` is compound.
    #[inline]
    pub(super) fn is_compound(&self, head: NonNull<Page>) -> bool {
        // SAFETY: the caller's block: its descriptor is valid.
        unsafe { head.as_ref() }
            .flags()
            .contains(PageFlags::COMPOUND)
    }

    /// Clears the tails an owner marked (a multi-page slab's: `TAIL`, the head's
    /// descriptor, a sheaf tag) before a block goes back: tails carry no flags on the
    /// free lists. A block whose second descriptor is unmarked has no marked tails
    /// (the slab layer marks all or none), so a page block costs one read here.
    #[inline]
    pub(super) fn destroy_compound_page(&self, head: NonNull<Page>, order: usize) {
        if order == 0 {
            return;
        }
        // SAFETY: the block's second descriptor is in the same memmap.
        let second = unsafe { &*head.as_ptr().add(1) };
        if !second.flags().contains(PageFlags::TAIL) {
            return;
        }
        self.clear_marked_tails(head, order);
    }

    /// [`PageAllocator::destroy_compound_page`]'s work, for a slab's block.
    fn clear_marked_tails(&self, head: NonNull<Page>, order: usize) {
        for i in 1..(1usize << order) {
            // SAFETY: the block's descriptors are consecutive in one memmap (a block
            // never crosses a section) and ours.
            let tail = unsafe { &*head.as_ptr().add(i) };
            tail.set_flags(PageFlags::empty());
            tail.owner[0].store(0, Ordering::Relaxed);
            tail.owner[1].store(0, Ordering::Relaxed);
            tail.clear_sheaf_tag(Ordering::Relaxed);
        }
    }

    /// Whether `zone` may give 2^order pages without going under `mark`.
    #[inline]
    pub(super) fn zone_watermark_ok(
        &self,
        zone: &Zone,
        order: usize,
        mark: usize,
        exact: bool,
    ) -> bool {
        let free = if exact {
            self.zone_page_state_snapshot(zone.nid(), ZoneStat::NrFreePages)
        } else {
            self.zone_page_state(zone.nid(), ZoneStat::NrFreePages)
        };
        free - (1isize << order) >= mark as isize && free >= (1isize << order)
    }

    /// `rmqueue`: one block from `zone`, through the per-CPU list when allowed.
    fn rmqueue(
        &self,
        cpu: Option<CpuRef<'_>>,
        zone: &Zone,
        order: usize,
    ) -> Option<(NonNull<Page>, bool)> {
        match cpu {
            Some(c) if order <= PCP_MAX_ORDER && zone.pcp_high() != 0 => {
                self.rmqueue_pcplist(c, zone, order)
            }
            _ => self.rmqueue_buddy(cpu, zone, order),
        }
    }

    /// `get_page_from_freelist`: walks the zonelist from `preferred`, growing nodes
    /// that run low while the heap bound allows.
    fn get_page_from_freelist(
        &self,
        cpu: Option<CpuRef<'_>>,
        gfp: Gfp,
        order: usize,
        preferred: usize,
        wmark: Watermark,
    ) -> Option<NonNull<Page>> {
        let nr_nodes = if gfp.contains(Gfp::THISNODE) {
            1
        } else {
            self.nr_nodes()
        };
        for i in 0..nr_nodes {
            let nid = (preferred + i) % self.nr_nodes();
            let zone = &self.zones[nid];
            loop {
                let mut mark = zone.watermark(wmark);
                if wmark == Watermark::Min && gfp.contains(Gfp::HIGH) {
                    mark -= mark / 2;
                }
                // The cheap reading may be off by the per-CPU deltas; look at the exact
                // one before deciding the zone is low (`percpu_drift_mark`).
                if self.zone_watermark_ok(zone, order, mark, false)
                    || self.zone_watermark_ok(zone, order, mark, true)
                {
                    if let Some((page, reported)) = self.rmqueue(cpu, zone, order) {
                        self.zone_statistics(cpu, preferred, nid, 1 << order);
                        // Keep the "reads as zero" mark for prep_new_page.
                        if reported {
                            // SAFETY: the block is ours now.
                            unsafe { page.as_ref() }.set_flags(PageFlags::REPORTED);
                        }
                        return Some(self.prep_new_page(page, order, gfp));
                    }
                }
                if !self.add_memory(nid) {
                    break;
                }
            }
        }
        None
    }

    /// `__alloc_pages_slowpath`: the per-CPU list was empty (or not to be used). Tries
    /// the zones at the low, then the min watermark; then reclaims (drains, shrinkers)
    /// and tries once more; then fails with an OOM report.
    #[cold]
    #[inline(never)]
    fn alloc_pages_slowpath(
        &self,
        cpu: Option<CpuRef<'_>>,
        gfp: Gfp,
        order: usize,
        preferred: usize,
    ) -> Option<NonNull<Page>> {
        if order > MAX_ORDER || !self.is_initialized() {
            return None;
        }
        if let Some(c) = cpu {
            self.check_drain_request(c);
        }
        if let Some(p) = self.get_page_from_freelist(cpu, gfp, order, preferred, Watermark::Low) {
            return Some(p);
        }
        if let Some(p) = self.get_page_from_freelist(cpu, gfp, order, preferred, Watermark::Min) {
            return Some(p);
        }
        // Reclaim: our own lists now, everybody else's at their next call, then the
        // layers above through their shrinkers.
        self.count_event(cpu, preferred, VmEvent::AllocStall, 1);
        if let Some(c) = cpu {
            self.drain_local_pages(c);
        }
        self.request_all_areas(DRAIN_PAGES);
        let freed = self.shrink_caches(preferred);
        self.count_event(cpu, preferred, VmEvent::ShrinkerFreed, freed as u64);
        if let Some(p) = self.get_page_from_freelist(cpu, gfp, order, preferred, Watermark::Min) {
            return Some(p);
        }
        self.count_event(cpu, preferred, VmEvent::AllocFail, 1);
        if !gfp.contains(Gfp::NOWARN) {
            self.warn_alloc(gfp, order, preferred);
        }
        None
    }

    /// Frees 2^`order` pages allocated with that order.
    ///
    /// A page that is already free (on a buddy or per-CPU list) is reported as a bad
    /// page and left alone: nothing is freed twice.
    ///
    /// # Safety
    /// `page` came from this allocator with this `order`, and the caller gives up every
    /// use of its memory.
    #[inline]
    pub unsafe fn free_pages(&self, cpu: Option<CpuRef<'_>>, page: NonNull<Page>, order: usize) {
        // SAFETY: the caller passes a descriptor from this allocator.
        let p = unsafe { page.as_ref() };
        if let Some(reason) = free_page_is_bad(p, order) {
            self.bad_page(page, reason);
            return;
        }
        let compound = p.flags().contains(PageFlags::COMPOUND);
        self.destroy_compound_page(page, order);
        let nid = self.page_to_nid(page);
        let zone = &self.zones[nid];
        if let Some(c) = cpu {
            let high = zone.pcp_high();
            if order <= PCP_MAX_ORDER && high != 0 {
                // (A block this small counts on no clock: `block_pages`.)
                self.free_unref_page_commit(c, zone, page, order, high);
                return;
            }
            if order == PCP_THP_ORDER && self.free_pcp_thp(c, zone, page, compound) {
                return;
            }
        }
        if compound {
            self.count_block_free(block_pages(order));
        }
        self.free_one_page(cpu, zone, page, order);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_platform::allocator;
    use super::super::Config;
    use super::*;

    fn fill<P: Platform>(pa: &PageAllocator<P>, page: NonNull<Page>, order: usize, byte: u8) {
        // SAFETY: the test holds the block.
        unsafe { ptr::write_bytes(pa.page_address(page).as_ptr(), byte, PAGE_SIZE << order) };
    }

    fn all_zero<P: Platform>(pa: &PageAllocator<P>, page: NonNull<Page>, order: usize) -> bool {
        // SAFETY: the test holds the block.
        let bytes = unsafe {
            core::slice::from_raw_parts(pa.page_address(page).as_ptr(), PAGE_SIZE << order)
        };
        bytes.iter().all(|&b| b == 0)
    }

    #[test]
    fn zeroing_is_done_when_asked_and_the_block_was_used() {
        let pa = allocator(1, Config::default());
        let page = pa.alloc_pages(None, Gfp::KERNEL, 2).unwrap();
        fill(pa, page, 2, 0xa5);
        // SAFETY: allocated above with order 2.
        unsafe { pa.free_pages(None, page, 2) };
        // The same block comes back (head of its list), dirty unless zeroing is asked.
        let again = pa.alloc_pages(None, Gfp::KERNEL, 2).unwrap();
        assert_eq!(again, page);
        assert!(!all_zero(pa, again, 2));
        // SAFETY: as above.
        unsafe { pa.free_pages(None, again, 2) };
        let zeroed = pa.alloc_pages(None, Gfp::ZERO, 2).unwrap();
        assert_eq!(zeroed, page);
        assert!(all_zero(pa, zeroed, 2));
    }

    #[test]
    fn compound_blocks_are_found_from_any_page_and_leave_their_tails_unwritten() {
        let pa = allocator(1, Config::default());
        // Neighbours on both sides, so the search passes other blocks' heads.
        let before = pa.alloc_pages(None, Gfp::COMP, 3).unwrap();
        let head = pa.alloc_pages(None, Gfp::COMP, 4).unwrap();
        let plain = pa.alloc_pages(None, Gfp::KERNEL, 4).unwrap();
        assert!(pa.is_compound(head) && !pa.is_compound(plain));
        let base = pa.page_address(head).as_ptr();
        for i in 0..16 {
            // SAFETY: descriptors of the block just allocated.
            let tail = unsafe { &*head.as_ptr().add(i) };
            if i > 0 {
                assert!(tail.flags().is_empty(), "tail {i} written");
            }
            // First and last byte of every page: the head.
            for off in [i * PAGE_SIZE, (i + 1) * PAGE_SIZE - 1] {
                assert_eq!(pa.virt_to_head_page(base.wrapping_add(off)), Some(head));
            }
        }
        // A block allocated without __GFP_COMP is not compound: its tails are their
        // own pages, as the kernel's are.
        let plain_tail = pa.page_address(plain).as_ptr().wrapping_add(5 * PAGE_SIZE);
        // SAFETY: a descriptor inside the plain block.
        let plain_tail_page = unsafe { NonNull::new_unchecked(plain.as_ptr().add(5)) };
        assert_eq!(pa.virt_to_head_page(plain_tail), Some(plain_tail_page));
        // SAFETY: allocated above with these orders.
        unsafe {
            pa.free_pages(None, head, 4);
            pa.free_pages(None, before, 3);
            pa.free_pages(None, plain, 4);
        }
        for i in 1..16 {
            // SAFETY: as above; the block is free now.
            let tail = unsafe { &*head.as_ptr().add(i) };
            assert!(tail.flags().is_empty());
            let addr = base.wrapping_add(i * PAGE_SIZE);
            assert_ne!(pa.virt_to_head_page(addr), Some(head), "free block found");
        }
    }

    #[test]
    fn bad_frees_are_named() {
        let pa = allocator(1, Config::default());
        let page = pa.alloc_pages(None, Gfp::KERNEL, 1).unwrap();
        // SAFETY: the test holds the block.
        let p = unsafe { page.as_ref() };
        assert_eq!(free_page_is_bad(p, 1), None);
        assert!(free_page_is_bad(p, 0).unwrap().contains("another order"));
        // SAFETY: a descriptor inside the block.
        let tail = unsafe { &*page.as_ptr().add(1) };
        assert!(free_page_is_bad(tail, 0).unwrap().contains("not the head"));
        p.set_flags(PageFlags::HEAD | PageFlags::SLAB);
        assert!(free_page_is_bad(p, 1).unwrap().contains("slab page"));
        p.set_flags(PageFlags::HEAD);
        // SAFETY: allocated above with order 1.
        unsafe { pa.free_pages(None, page, 1) };
        assert!(free_page_is_bad(p, 1).unwrap().contains("free page"));
        // A second free is refused and reported, and changes nothing.
        let free = pa.nr_free_pages();
        // SAFETY: deliberately wrong: the allocator must catch it.
        unsafe { pa.free_pages(None, page, 1) };
        assert_eq!(pa.nr_free_pages(), free);
        assert_eq!(pa.zone_event(0, VmEvent::BadPage), 1);
        assert!(pa
            .platform()
            .take_log()
            .contains("page dumped because: freeing a free page"));
    }
}
