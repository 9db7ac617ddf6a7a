//! Per-CPU page lists (`struct per_cpu_pages`): each CPU area keeps, for every zone,
//! short lists of free blocks of order 0..=[`PCP_MAX_ORDER`], so most allocations
//! and frees touch no lock. Refill (`rmqueue_bulk`) and spill (`free_pcppages_bulk`)
//! move a batch between a list and the zone under one zone-lock round trip; drains
//! empty the lists.
//!
//! ## Budget
//! All lists of a zone together hold at most a budget of pages (a fraction of the
//! zone, at least enough for a few CPUs), divided among the CPU areas owned now: with
//! many owners each gets a smaller `high`, and below [`PCP_MIN_HIGH`] the lists are
//! off and every owner uses the zone. So a thousand threads do not hoard memory.
//! Owners adopt a lowered `high` at their next free.
//!
//! ## Locking
//! A [`ZonePcp`] lives in its CPU area; only the area's owner (the holder of a
//! [`CpuRef`] to it) touches its lists or writes its counts, without a lock. Anyone
//! may read the counts. Drains are asked of owners by a flag
//! ([`crate::percpu::DRAIN_PAGES`]) and done by them. Refill and spill take the zone
//! lock (the lock order in lib.rs).

use super::descriptor::{Page, PageFlags, PageList, PAGE_SIZE};
use super::mmzone::{Zone, MAX_NUMNODES};
use super::PageAllocator;
use crate::percpu::{CpuArea, CpuRef, CPU_AREA_DATA, CPU_AREA_ORDER, CPU_AREA_SIZE, DRAIN_PAGES};
use crate::platform::Platform;
use crate::sync::{AtomicU32, Ordering};
use crate::vmstat::{VmEvent, ZoneStat, ZoneStatPcp};
use core::cell::UnsafeCell;
use core::ptr::NonNull;

/// Highest order kept on per-CPU lists (`PAGE_ALLOC_COSTLY_ORDER`).
pub const PCP_MAX_ORDER: usize = 3;
/// Orders with a per-CPU list.
pub const PCP_ORDERS: usize = PCP_MAX_ORDER + 1;
/// Default per-CPU refill/spill batch: what the kernel's `zone_batchsize()` gives a
/// zone of 512 MiB or more (`btch: 31` in its `show_free_areas` report).
pub const PCP_BATCH: u32 = 31;
/// Most pages one CPU area may keep per zone: six batches, as the kernel's
/// `pageset_set_batch()` set `high` (`hi: 186`).
pub const PCP_HIGH_MAX: u32 = 6 * PCP_BATCH;
/// Below this `high`, per-CPU lists are off.
pub const PCP_MIN_HIGH: u32 = 8;
/// Every this many pages freed to a per-CPU list, the owner checks whether free page
/// reporting is due (a power of two).
pub const REPORT_CHECK_INTERVAL: u64 = 1024;

/// One CPU area's page-allocator state for one zone (`struct per_cpu_pages` plus
/// `struct per_cpu_zonestat`). All-zero is the valid empty state.
///
/// Invariants: `lists[o]` holds blocks of order `o` with `PG_PCP` set, all in this
/// zone; `count` is the number of pages on all lists. Only the area's owner touches
/// `lists` and writes `count`.
#[repr(C, align(64))]
pub struct ZonePcp {
    count: AtomicU32,
    lists: UnsafeCell<[PageList; PCP_ORDERS]>,
    pub(crate) stat: ZoneStatPcp,
}

/// Offset of zone `nid`'s [`ZonePcp`] in every CPU area.
const fn zone_pcp_offset(nid: usize) -> usize {
    CPU_AREA_DATA + nid * core::mem::size_of::<ZonePcp>()
}
/// Offset of a 64-byte line of every CPU area that nothing writes: all zero, as a
/// new area is. Read as a `kmem_cache_cpu` it has empty sheaves and no room, so a
/// fast path given its offset instead of a cache's (kmalloc's size table, for a
/// class without the inline sheaf path) falls to its slow path with no test of its
/// own.
pub const CPU_AREA_ZERO_LINE: usize = zone_pcp_offset(MAX_NUMNODES);
pub use crate::percpu::{CPU_AREA_CHARGED_LINES, CPU_AREA_CHARGED_LINES_COUNT};
/// First CPU-area offset left to [`crate::percpu::PerCpuOffsets`].
pub(super) const PERCPU_DYNAMIC_START: usize = CPU_AREA_ZERO_LINE + 64;
const _: () = assert!(CPU_AREA_ZERO_LINE.is_multiple_of(64));
const _: () = assert!(PERCPU_DYNAMIC_START < CPU_AREA_SIZE / 2);
const _: () = assert!(CPU_AREA_SIZE == PAGE_SIZE << CPU_AREA_ORDER);

impl ZonePcp {
    /// Pages on this area's lists for the zone.
    #[inline]
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed) as usize
    }
    #[inline]
    pub(super) fn add_count(&self, delta: i32) {
        let c = self.count.load(Ordering::Relaxed) as i32 + delta;
        self.count.store(c as u32, Ordering::Relaxed);
    }
    /// # Safety
    /// The caller is the owner of the area this belongs to, and holds no other
    /// reference to the lists.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn lists(&self) -> &mut [PageList; PCP_ORDERS] {
        // SAFETY: only the owner reaches the lists (type invariant), and the caller is
        // the owner holding no other reference.
        unsafe { &mut *self.lists.get() }
    }
    /// Lists a freed block of `order` at the head (hot end) of its list and counts
    /// the free; returns the area's `pgfree` count for the zone after it.
    ///
    /// # Safety
    /// As [`ZonePcp::lists`]; `page` heads a block of this zone that the caller gives
    /// up, and is on no list.
    #[inline]
    pub(super) unsafe fn push(&self, page: NonNull<Page>, order: usize) -> u64 {
        // SAFETY: the block is the caller's to list (contract).
        let p = unsafe { page.as_ref() };
        p.set_flags(PageFlags::PCP);
        p.set_order(order);
        // SAFETY: the caller owns the area (contract).
        unsafe { self.lists()[order].push_head(page.as_ptr()) };
        self.add_count(1 << order);
        self.stat.count(VmEvent::PgFree, 1 << order)
    }
}

/// `zone_highsize` and `zone_batchsize`: `pcp->high` and `pcp->batch` for a zone of
/// `managed` pages shared by `owners` CPU areas. A `high` of 0 turns the lists off.
pub(super) fn pcp_high_and_batch(managed: usize, owners: usize) -> (u32, u32) {
    let budget = (managed / 32).max(4 * PCP_HIGH_MAX as usize);
    let mut high = (budget / owners.max(1)).min(PCP_HIGH_MAX as usize) as u32;
    if high < PCP_MIN_HIGH {
        high = 0;
    }
    (high, PCP_BATCH.min((high / 4).max(1)))
}

impl<P: Platform> PageAllocator<P> {
    /// The owner's per-CPU state of zone `nid`.
    #[inline]
    pub(super) fn zone_pcp<'a>(&self, cpu: CpuRef<'a>, nid: usize) -> &'a ZonePcp {
        // SAFETY: every CPU area reserves a `ZonePcp` slot for each possible node at a
        // fixed offset, zeroed when the area is made (a valid empty state).
        unsafe { &*cpu.area().ptr::<ZonePcp>(zone_pcp_offset(nid)) }
    }

    /// The per-CPU state of zone `nid` in `area` (for reports).
    pub fn zone_pcp_of<'a>(&self, area: &'a CpuArea, nid: usize) -> &'a ZonePcp {
        // SAFETY: as in `zone_pcp`; shared access only reads atomics.
        unsafe { &*area.ptr::<ZonePcp>(zone_pcp_offset(nid)) }
    }

    /// `rmqueue_pcplist`: one block of `order` from the owner's list of `zone`,
    /// refilled from the zone with a batch when empty. Returns the block and whether
    /// its contents were discarded (read as zero).
    #[inline]
    pub(super) fn rmqueue_pcplist(
        &self,
        c: CpuRef<'_>,
        zone: &Zone,
        order: usize,
    ) -> Option<(NonNull<Page>, bool)> {
        let pcp = self.zone_pcp(c, zone.nid());
        // SAFETY: `c` proves ownership of the area.
        let lists = unsafe { pcp.lists() };
        if lists[order].is_empty() {
            let batch = zone.pcp_batch() as usize;
            let n = self.rmqueue_bulk(c, zone, order, (batch >> order).max(1), &mut lists[order]);
            pcp.add_count((n << order) as i32);
        }
        // SAFETY: we own the list.
        let page = NonNull::new(unsafe { lists[order].pop_head() })?;
        pcp.add_count(-(1 << order));
        // SAFETY: the page came off our own list.
        let reported = unsafe { page.as_ref() }
            .flags()
            .contains(PageFlags::REPORTED);
        Some((page, reported))
    }

    /// `rmqueue_bulk`: moves up to `count` blocks of `order` to a per-CPU list under one
    /// zone lock. Returns how many it moved.
    pub(super) fn rmqueue_bulk(
        &self,
        cpu: CpuRef<'_>,
        zone: &Zone,
        order: usize,
        count: usize,
        list: &mut PageList,
    ) -> usize {
        let mut fa = zone.lock.lock();
        let mut n = 0;
        while n < count {
            let Some((pfn, reported)) = self.rmqueue_smallest(&mut fa, zone, order) else {
                break;
            };
            let page = self.pfn_to_page_raw(pfn);
            let flags = if reported {
                PageFlags::PCP | PageFlags::REPORTED
            } else {
                PageFlags::PCP
            };
            // SAFETY: the block was just taken off the free lists, so this context owns
            // it; the list belongs to the caller's CPU area.
            unsafe {
                (*page).set_flags(flags);
                (*page).set_order(order);
                list.push_tail(page);
            }
            n += 1;
        }
        drop(fa);
        let nid = zone.nid();
        self.mod_zone_state(
            Some(cpu),
            nid,
            ZoneStat::NrFreePages,
            -((n << order) as isize),
        );
        self.count_event(Some(cpu), nid, VmEvent::PcpRefill, 1);
        // Allocation activity also drives free page reporting, so memory freed in a
        // burst is given back once the program goes on allocating.
        self.maybe_report(None, zone);
        n
    }

    /// `free_unref_page_commit`: lists a freed block on the owner's list of `zone`
    /// (whose `high` is `high`, non-zero), then spills a batch if the list is over
    /// `high` or a drain was asked for.
    #[inline]
    pub(super) fn free_unref_page_commit(
        &self,
        c: CpuRef<'_>,
        zone: &Zone,
        page: NonNull<Page>,
        order: usize,
        high: u32,
    ) {
        let pcp = self.zone_pcp(c, zone.nid());
        // SAFETY: `c` proves ownership of the area; the caller gives the block up.
        let freed = unsafe { pcp.push(page, order) };
        if pcp.count() > high as usize
            || c.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES != 0
        {
            self.free_pcp_slow(c, zone, pcp, high);
        } else if freed & (REPORT_CHECK_INTERVAL - 1) < (1 << order) {
            // Now and then a free that stays on the per-CPU list looks whether free
            // page reporting is due, so a program that has settled into a steady
            // state still gives back what it freed earlier.
            self.maybe_report(Some(c), zone);
        }
    }

    /// The owner's list is over `high`, or a drain was asked for: spill the excess and
    /// a batch, or drain.
    #[cold]
    #[inline(never)]
    pub(super) fn free_pcp_slow(&self, c: CpuRef<'_>, zone: &Zone, pcp: &ZonePcp, high: u32) {
        if c.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES != 0 {
            self.check_drain_request(c);
            return;
        }
        let batch = zone.pcp_batch() as usize;
        let excess = pcp.count() - high as usize;
        self.free_pcppages_bulk(c, zone, pcp, excess + batch.min(high as usize / 2), false);
    }

    /// `free_pcppages_bulk`: gives `to_free` pages (at least) from an area's lists of
    /// `zone` back to the buddy lists, coldest first, under one zone lock. A `cold`
    /// spill (a drain) does not make the blocks look recently freed.
    fn free_pcppages_bulk(
        &self,
        cpu: CpuRef<'_>,
        zone: &Zone,
        pcp: &ZonePcp,
        to_free: usize,
        cold: bool,
    ) {
        let freed_at = if cold { 0 } else { self.platform.now_ns() };
        let nid = zone.nid();
        // SAFETY: `cpu` proves we own the area `pcp` belongs to.
        let lists = unsafe { pcp.lists() };
        let mut fa = zone.lock.lock();
        let mut freed = 0usize;
        let mut order = 0;
        while freed < to_free {
            // Round-robin over the orders that still hold blocks.
            let mut tries = 0;
            while lists[order].is_empty() && tries < PCP_ORDERS {
                order = (order + 1) % PCP_ORDERS;
                tries += 1;
            }
            if tries == PCP_ORDERS {
                break;
            }
            // SAFETY: we own the list; the page on it is a PCP block of this zone.
            let Some(page) = NonNull::new(unsafe { lists[order].pop_tail() }) else {
                break;
            };
            let pfn = self.page_to_pfn(page);
            self.free_one_page_locked(&mut fa, zone, pfn, order, false, freed_at);
            freed += 1 << order;
            order = (order + 1) % PCP_ORDERS;
        }
        drop(fa);
        pcp.add_count(-(freed as i32));
        self.mod_zone_state(Some(cpu), nid, ZoneStat::NrFreePages, freed as isize);
        self.count_event(Some(cpu), nid, VmEvent::PcpSpill, 1);
        self.maybe_report(Some(cpu), zone);
    }

    /// Recomputes `pcp->high` and `pcp->batch` of every zone from its budget and the
    /// number of owned areas ([`pcp_high_and_batch`]).
    pub(super) fn recalc_pcp_high(&self) {
        let owners = self.areas.nr_owned();
        for zone in &self.zones[..self.nr_nodes()] {
            let (high, batch) = pcp_high_and_batch(zone.managed_pages(), owners);
            zone.pcp_batch.store(batch, Ordering::Relaxed);
            zone.pcp_high.store(high, Ordering::Relaxed);
        }
    }

    /// Drains the caller's own per-CPU lists of every zone (`drain_local_pages`).
    #[cold]
    pub fn drain_local_pages(&self, cpu: CpuRef<'_>) {
        cpu.area()
            .drain_request
            .fetch_and(!DRAIN_PAGES, Ordering::Relaxed);
        for nid in 0..self.nr_nodes() {
            self.drain_zone_pages(cpu, &self.zones[nid]);
        }
    }

    /// Drains the caller's own per-CPU lists of one zone (`drain_pages_zone`); the
    /// pages go back cold.
    pub(super) fn drain_zone_pages(&self, cpu: CpuRef<'_>, zone: &Zone) {
        let pcp = self.zone_pcp(cpu, zone.nid());
        if pcp.count() > 0 {
            self.free_pcppages_bulk(cpu, zone, pcp, pcp.count(), true);
            self.count_event(Some(cpu), zone.nid(), VmEvent::PcpDrain, 1);
        }
    }

    /// Asks every area's owner to drain its per-CPU lists at its next call, and drains
    /// the caller's own now (`drain_all_pages`).
    pub fn drain_all_pages(&self, cpu: Option<CpuRef<'_>>) {
        self.areas.request_all(DRAIN_PAGES);
        if let Some(c) = cpu {
            self.drain_local_pages(c);
        }
    }

    /// Does what others asked of this area's owner.
    #[inline]
    pub fn check_drain_request(&self, cpu: CpuRef<'_>) {
        if cpu.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES != 0 {
            self.drain_local_pages(cpu);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::mmzone::SECTION_MANAGED_PAGES;
    use super::super::test_platform::{allocator, TestPlatform};
    use super::super::Config;
    use super::*;

    #[test]
    fn high_shrinks_with_owners_and_turns_off() {
        // One section: its budget (managed / 32) is above the floor of four CPUs.
        let managed = SECTION_MANAGED_PAGES;
        assert_eq!(pcp_high_and_batch(managed, 0), (PCP_HIGH_MAX, PCP_BATCH));
        assert_eq!(pcp_high_and_batch(managed, 1), (PCP_HIGH_MAX, PCP_BATCH));
        assert_eq!(pcp_high_and_batch(managed, 6), (168, PCP_BATCH));
        assert_eq!(pcp_high_and_batch(managed, 100), (10, 2));
        assert_eq!(pcp_high_and_batch(managed, 126), (8, 2));
        assert_eq!(pcp_high_and_batch(managed, 127), (0, 1));
        // A tiny zone still gets the floor budget of four full lists.
        assert_eq!(pcp_high_and_batch(0, 4), (PCP_HIGH_MAX, PCP_BATCH));
        assert_eq!(pcp_high_and_batch(0, 5), (148, PCP_BATCH));
        // A big zone: more owners before `high` drops.
        let (high, _) = pcp_high_and_batch(managed * 64, 100);
        assert_eq!(high, PCP_HIGH_MAX);
    }

    fn owner(pa: &PageAllocator<TestPlatform>) -> CpuRef<'_> {
        let area = pa.cpu_area_get(0).expect("an area");
        // SAFETY: the area was just handed to this test, which is its only user.
        unsafe { CpuRef::new(area) }
    }

    #[test]
    fn an_empty_list_is_refilled_with_a_batch() {
        let pa = allocator(1, Config::default());
        let c = owner(pa);
        let zone = &pa.zones[0];
        let pcp = pa.zone_pcp(c, 0);
        assert_eq!(pcp.count(), 0);
        let (page, _) = pa.rmqueue_pcplist(c, zone, 0).unwrap();
        assert_eq!(pcp.count(), PCP_BATCH as usize - 1);
        pa.rmqueue_pcplist(c, zone, 2).unwrap();
        // Order 2: a batch of PCP_BATCH >> 2 blocks, one of them taken.
        assert_eq!(
            pcp.count(),
            PCP_BATCH as usize - 1 + ((PCP_BATCH as usize >> 2) - 1) * 4
        );
        assert_eq!(pa.zone_event(0, VmEvent::PcpRefill), 2);
        // SAFETY: the block is ours, taken off our own list.
        let p = unsafe { page.as_ref() };
        assert!(p.flags().contains(PageFlags::PCP) && p.order() == 0);
    }

    #[test]
    fn a_list_over_high_spills_to_the_zone() {
        let pa = allocator(1, Config::default());
        let c = owner(pa);
        let zone = &pa.zones[0];
        let high = zone.pcp_high();
        assert_eq!(high, PCP_HIGH_MAX);
        let pcp = pa.zone_pcp(c, 0);
        let mut taken = [None; 2 * PCP_HIGH_MAX as usize];
        for slot in taken.iter_mut() {
            *slot = Some(pa.rmqueue_buddy(None, zone, 0).unwrap().0);
        }
        let free_before = pa.zone_page_state_snapshot(0, ZoneStat::NrFreePages);
        let mut listed = 0usize;
        for page in taken.iter().flatten() {
            // SAFETY: the page is ours; make it look allocated, as a free expects.
            unsafe { page.as_ref() }.set_flags(PageFlags::HEAD);
            pa.free_unref_page_commit(c, zone, *page, 0, high);
            listed += 1;
            assert!(pcp.count() <= high as usize);
        }
        // Every spill gave back the excess and a batch: the zone got the rest.
        let spills = pa.zone_event(0, VmEvent::PcpSpill);
        assert!(spills >= 1);
        assert_eq!(
            pa.zone_page_state_snapshot(0, ZoneStat::NrFreePages),
            free_before + (listed - pcp.count()) as isize
        );
        assert_eq!(pa.nr_pcp_pages(0), pcp.count());
    }

    #[test]
    fn a_drain_request_is_done_by_the_owner_at_its_next_call() {
        let pa = allocator(1, Config::default());
        let c = owner(pa);
        let zone = &pa.zones[0];
        let (page, _) = pa.rmqueue_pcplist(c, zone, 0).unwrap();
        // SAFETY: the page is ours.
        unsafe { page.as_ref() }.set_flags(PageFlags::HEAD);
        let listed = pa.zone_pcp(c, 0).count();
        assert!(listed > 0);
        // Someone without an area asks; nothing moves until the owner acts.
        pa.drain_all_pages(None);
        assert_eq!(pa.zone_pcp(c, 0).count(), listed);
        assert_ne!(
            c.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES,
            0
        );
        // The owner's next free sees the request and drains instead of listing.
        pa.free_unref_page_commit(c, zone, page, 0, zone.pcp_high());
        assert_eq!(pa.zone_pcp(c, 0).count(), 0);
        assert_eq!(
            c.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES,
            0
        );
        assert_eq!(pa.zone_event(0, VmEvent::PcpDrain), 1);
        assert_eq!(pa.nr_allocated_pages(), 1 << CPU_AREA_ORDER);
    }
}
