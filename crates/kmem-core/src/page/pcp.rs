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
//! ## Pageblocks
//! One more list per zone holds blocks of [`PCP_THP_ORDER`] (2 MiB), as the kernel's
//! lists do since it admitted the THP order (`pcp_allowed_order`, `NR_PCP_THP`): a
//! program that allocates and frees 1–2 MiB buffers in turn then takes no zone lock,
//! merges and splits no buddies and reads no clock for each. The list:
//! - is filled only by frees (no batch refill: a batch of 2 MiB blocks is too much to
//!   hold for a guess);
//! - holds at most `pcp_thp_high` blocks, apart from `high`: at most
//!   [`PCP_THP_HIGH_MAX`], fewer when the zone's pageblock budget shared among the
//!   owned areas gives less, none when it gives less than one. The budget is a
//!   thirty-second of the zone, at least [`PCP_THP_BUDGET_FLOOR`] pages, at most a
//!   sixteenth of a heap bound (blocks on these lists are out of others' reach until
//!   their owners call in);
//! - is emptied by drains with the rest, and by the owner's housekeeping when nothing
//!   took a block off it since the last one (`decay_pcp_thp`), so a list left idle
//!   goes back to the zone and is reported.
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
/// The order of the per-CPU pageblock list: 2 MiB, the kernel's `pageblock_order`
/// and THP order with 4 KiB pages (see "Pageblocks" above).
pub const PCP_THP_ORDER: usize = 9;
/// Most pageblock-order blocks one CPU area keeps per zone.
pub const PCP_THP_HIGH_MAX: u32 = 2;
/// The pages all pageblock lists of a zone may hold together whatever the zone's size:
/// four blocks, so that a few owners keep one each in the smallest heap.
pub const PCP_THP_BUDGET_FLOOR: usize = 4 << PCP_THP_ORDER;

/// One CPU area's page-allocator state for one zone (`struct per_cpu_pages` plus
/// `struct per_cpu_zonestat`). All-zero is the valid empty state.
///
/// Invariants: `lists[o]` holds blocks of order `o` with `PG_PCP` set, all in this
/// zone; `count` is the number of pages on those lists. `thp` holds `thp_count`
/// blocks of [`PCP_THP_ORDER`] with `PG_PCP` set, all in this zone; `thp_used` is
/// non-zero once one was taken off it since the owner's last housekeeping. Only the
/// area's owner touches the lists and writes the counts.
#[repr(C, align(64))]
pub struct ZonePcp {
    count: AtomicU32,
    thp_count: AtomicU32,
    thp_used: AtomicU32,
    lists: UnsafeCell<[PageList; PCP_ORDERS]>,
    thp: UnsafeCell<PageList>,
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
    /// Pages on this area's lists for the zone, the pageblock list's included.
    #[inline]
    pub fn count(&self) -> usize {
        self.small_count() + self.thp_blocks() * (1 << PCP_THP_ORDER)
    }
    /// Pages on the lists of orders up to [`PCP_MAX_ORDER`], which `high` bounds.
    #[inline]
    pub(super) fn small_count(&self) -> usize {
        self.count.load(Ordering::Relaxed) as usize
    }
    /// Blocks on the pageblock list.
    #[inline]
    pub fn thp_blocks(&self) -> usize {
        self.thp_count.load(Ordering::Relaxed) as usize
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
    /// The pageblock list.
    ///
    /// # Safety
    /// As [`ZonePcp::lists`].
    #[inline]
    #[allow(clippy::mut_from_ref)]
    unsafe fn thp_list(&self) -> &mut PageList {
        // SAFETY: as in `lists`.
        unsafe { &mut *self.thp.get() }
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

/// `pcp_thp_high`: the pageblock-order blocks each of `owners` CPU areas may keep per
/// zone of `managed` pages, in a heap bounded to `bound` pages (0: no bound), which
/// lends them at most a sixteenth of it (see "Pageblocks" above).
pub(super) fn pcp_thp_high(managed: usize, owners: usize, bound: usize) -> u32 {
    let mut budget = (managed / 32).max(PCP_THP_BUDGET_FLOOR);
    if bound != 0 {
        budget = budget.min(bound / 16);
    }
    let blocks = (budget / owners.max(1)) >> PCP_THP_ORDER;
    blocks.min(PCP_THP_HIGH_MAX as usize) as u32
}

impl<P: Platform> PageAllocator<P> {
    /// The owner's per-CPU state of zone `nid`.
    #[inline]
    pub(super) fn zone_pcp<'a>(&self, cpu: CpuRef<'a>, nid: usize) -> &'a ZonePcp {
        // SAFETY: every CPU area reserves a `ZonePcp` slot for each possible node at a
        // fixed offset, zeroed when the area is made (a valid empty state).
        unsafe { &*cpu.area().ptr::<ZonePcp>(zone_pcp_offset(nid)) }
    }

    /// The per-CPU state of zone `nid` in `area` (for reports). Panics for a node
    /// past [`MAX_NUMNODES`], as `zone(nid)` does.
    pub fn zone_pcp_of<'a>(&self, area: &'a CpuArea, nid: usize) -> &'a ZonePcp {
        assert!(nid < MAX_NUMNODES, "node {nid} out of range");
        // SAFETY: as in `zone_pcp` (`nid` is a possible node: asserted just above);
        // shared access only reads atomics.
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
        if pcp.small_count() > high as usize
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
        let excess = pcp.small_count().saturating_sub(high as usize);
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

    /// `rmqueue_pcplist` for [`PCP_THP_ORDER`]: the block the owner freed last to its
    /// pageblock list of zone `nid`, if the list holds one and no drain is asked for.
    /// Out of line: the orders of the other lists carry nothing for it.
    #[inline(never)]
    pub(super) fn rmqueue_pcp_thp(&self, c: CpuRef<'_>, nid: usize) -> Option<NonNull<Page>> {
        let pcp = self.zone_pcp(c, nid);
        let n = pcp.thp_count.load(Ordering::Relaxed);
        if n == 0 || c.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES != 0 {
            return None;
        }
        // SAFETY: `c` proves ownership of the area.
        let page = NonNull::new(unsafe { pcp.thp_list().pop_head() })?;
        pcp.thp_count.store(n - 1, Ordering::Relaxed);
        pcp.thp_used.store(1, Ordering::Relaxed);
        Some(page)
    }

    /// The owner's housekeeping, for each zone: blocks left on its pageblock list
    /// that nothing took since the last housekeeping go back to the zone, cold, so
    /// that the reporting pass after it gives them back to the platform. A thread
    /// that freed its 2 MiB buffers and went on with small objects would otherwise
    /// keep 4 MiB resident for good; one that reuses them keeps them.
    pub(super) fn decay_pcp_thp(&self, c: CpuRef<'_>, zone: &Zone) {
        let pcp = self.zone_pcp(c, zone.nid());
        if pcp.thp_blocks() == 0 {
            return;
        }
        if pcp.thp_used.load(Ordering::Relaxed) != 0 {
            pcp.thp_used.store(0, Ordering::Relaxed);
        } else {
            self.drain_pcp_thp(c, zone, pcp);
        }
    }

    /// `free_unref_page_commit` for [`PCP_THP_ORDER`]: lists the freed block headed by
    /// `page` on the owner's pageblock list of `zone` if the list has room. `false`:
    /// not listed (no room, the list off, or a drain asked for, which this does
    /// first); the caller frees it to the zone.
    ///
    /// A `compound` block (one counted on the blocks' growth clock) stays counted
    /// while it waits on the list, marked `COMPOUND` there, and `prep_new_page` takes
    /// it back without counting it again: a buffer freed and allocated in turn pays
    /// no shared counter, and the clock sees a block held for reuse as the memory it
    /// is. It is counted out when it leaves the list for the zone, or for a request
    /// without `__GFP_COMP`.
    pub(super) fn free_pcp_thp(
        &self,
        c: CpuRef<'_>,
        zone: &Zone,
        page: NonNull<Page>,
        compound: bool,
    ) -> bool {
        if c.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES != 0 {
            self.check_drain_request(c);
            return false;
        }
        let pcp = self.zone_pcp(c, zone.nid());
        let n = pcp.thp_count.load(Ordering::Relaxed);
        if n >= zone.pcp_thp_high() {
            return false;
        }
        // SAFETY: the caller gives the block up; it is on no list.
        let p = unsafe { page.as_ref() };
        p.set_flags(if compound {
            PageFlags::PCP | PageFlags::COMPOUND
        } else {
            PageFlags::PCP
        });
        p.set_order(PCP_THP_ORDER);
        // SAFETY: `c` proves ownership of the area.
        unsafe { pcp.thp_list().push_head(page.as_ptr()) };
        pcp.thp_count.store(n + 1, Ordering::Relaxed);
        let freed = pcp.stat.count(VmEvent::PgFree, 1 << PCP_THP_ORDER);
        if freed & (REPORT_CHECK_INTERVAL - 1) < (1 << PCP_THP_ORDER) {
            // As a free to the other lists: now and then, whether reporting is due.
            self.maybe_report(Some(c), zone);
        }
        true
    }

    /// [`PageAllocator::free_pcppages_bulk`] for the pageblock list, as a drain: gives
    /// all its blocks back to the zone under one zone lock, cold (old enough for the
    /// next reporting pass: a drain's, or the idle list's at housekeeping).
    fn drain_pcp_thp(&self, cpu: CpuRef<'_>, zone: &Zone, pcp: &ZonePcp) {
        // SAFETY: `cpu` proves we own the area `pcp` belongs to.
        let list = unsafe { pcp.thp_list() };
        let mut fa = zone.lock.lock();
        let (mut n, mut counted) = (0, 0);
        // SAFETY: we own the list (each pop); a block on it is a PCP block of this zone.
        while let Some(page) = NonNull::new(unsafe { list.pop_tail() }) {
            // SAFETY: as above: the block is ours until it is freed below.
            if unsafe { page.as_ref() }
                .flags()
                .contains(PageFlags::COMPOUND)
            {
                counted += 1 << PCP_THP_ORDER;
            }
            let pfn = self.page_to_pfn(page);
            self.free_one_page_locked(&mut fa, zone, pfn, PCP_THP_ORDER, false, 0);
            n += 1;
        }
        drop(fa);
        self.count_block_free(counted);
        pcp.thp_count.store(0, Ordering::Relaxed);
        let nid = zone.nid();
        let pages = (n << PCP_THP_ORDER) as isize;
        self.mod_zone_state(Some(cpu), nid, ZoneStat::NrFreePages, pages);
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
            let thp_high = pcp_thp_high(zone.managed_pages(), owners, self.max_pages());
            zone.pcp_thp_high.store(thp_high, Ordering::Relaxed);
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
            if pcp.small_count() > 0 {
                self.free_pcppages_bulk(cpu, zone, pcp, pcp.small_count(), true);
            }
            if pcp.thp_blocks() > 0 {
                self.drain_pcp_thp(cpu, zone, pcp);
            }
            self.count_event(Some(cpu), zone.nid(), VmEvent::PcpDrain, 1);
        }
    }

    /// Asks every area's owner to drain its per-CPU lists at its next call, and drains
    /// the caller's own now (`drain_all_pages`).
    pub fn drain_all_pages(&self, cpu: Option<CpuRef<'_>>) {
        self.request_all_areas(DRAIN_PAGES);
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
    fn pageblock_lists_shrink_with_owners_and_turn_off() {
        let managed = SECTION_MANAGED_PAGES;
        // One section: the floor of four blocks, two at most for each area.
        assert_eq!(pcp_thp_high(managed, 1, 0), PCP_THP_HIGH_MAX);
        assert_eq!(pcp_thp_high(managed, 2, 0), 2);
        assert_eq!(pcp_thp_high(managed, 3, 0), 1);
        assert_eq!(pcp_thp_high(managed, 4, 0), 1);
        assert_eq!(pcp_thp_high(managed, 5, 0), 0);
        // A zone of 64 sections (8 GiB): a thirty-second of it is about 4 MiB an owner
        // for 64 owners, 2 MiB for 126, less for 127.
        assert_eq!(pcp_thp_high(managed * 64, 32, 0), 2);
        assert_eq!(pcp_thp_high(managed * 64, 64, 0), 1);
        assert_eq!(pcp_thp_high(managed * 64, 126, 0), 1);
        assert_eq!(pcp_thp_high(managed * 64, 127, 0), 0);
        // A heap bounded to 64 MiB lends a sixteenth, two blocks; to 16 MiB none.
        assert_eq!(pcp_thp_high(managed, 1, 16384), 2);
        assert_eq!(pcp_thp_high(managed, 2, 16384), 1);
        assert_eq!(pcp_thp_high(managed, 1, 4096), 0);
        // The allocator keeps it with `high`.
        let pa = allocator(1, Config::default());
        let _c = owner(pa);
        assert_eq!(pa.zones[0].pcp_thp_high(), PCP_THP_HIGH_MAX);
    }

    #[test]
    fn pageblocks_freed_wait_on_the_owner_s_list_counted_live() {
        use crate::gfp::Gfp;
        const O: usize = PCP_THP_ORDER;
        let pa = allocator(1, Config::default());
        let c = owner(pa);
        let blocks: [_; 3] =
            core::array::from_fn(|_| pa.alloc_pages(Some(c), Gfp::COMP, O).unwrap());
        assert_eq!(pa.block_pages_live(), 3 << O);
        let growth = pa.block_growth();
        let free_before = pa.nr_free_pages();
        for b in blocks {
            // SAFETY: allocated above with this order, freed once.
            unsafe { pa.free_pages(Some(c), b, O) };
        }
        // Two wait on the list (its room), still counted live; the third went back.
        let pcp = pa.zone_pcp(c, 0);
        assert_eq!(pcp.thp_blocks(), PCP_THP_HIGH_MAX as usize);
        assert_eq!(pcp.count(), 2 << O);
        assert_eq!(pa.nr_pcp_pages(0), 2 << O);
        assert_eq!(pa.nr_free_pages(), free_before + (1 << O));
        assert_eq!(pa.block_pages_live(), 2 << O);
        // A block on the list is free: a second free is refused and reported.
        let events = pa.zone_event(0, VmEvent::BadPage);
        // SAFETY: deliberately wrong: the allocator must catch it.
        unsafe { pa.free_pages(Some(c), blocks[1], O) };
        assert_eq!(pa.zone_event(0, VmEvent::BadPage), events + 1);
        assert_eq!(pcp.thp_blocks(), 2);
        // The last one freed comes back first, without counting it again.
        let again = pa.alloc_pages(Some(c), Gfp::COMP, O).unwrap();
        assert_eq!(again, blocks[1]);
        assert!(pa.is_compound(again));
        assert_eq!(pcp.thp_blocks(), 1);
        assert_eq!((pa.block_pages_live(), pa.block_growth()), (2 << O, growth));
        assert_eq!(pa.block_growth_with(Some(c), O), growth, "one more waits");
        // One taken without `__GFP_COMP` counts out.
        let plain = pa.alloc_pages(Some(c), Gfp::KERNEL, O).unwrap();
        assert_eq!(plain, blocks[0]);
        assert!(!pa.is_compound(plain));
        assert_eq!(pa.block_pages_live(), 1 << O);
        // SAFETY: allocated above with this order.
        unsafe {
            pa.free_pages(Some(c), plain, O);
            pa.free_pages(Some(c), again, O);
        }
        assert_eq!((pcp.thp_blocks(), pa.block_pages_live()), (2, 1 << O));
        // A drain gives both back; the counted one counts out.
        pa.drain_local_pages(c);
        assert_eq!((pcp.thp_blocks(), pcp.count()), (0, 0));
        assert_eq!(pa.block_pages_live(), 0);
        assert_eq!(pa.nr_free_pages(), free_before + (3 << O));
    }

    #[test]
    fn an_idle_pageblock_list_goes_back_at_the_owner_s_housekeeping() {
        use crate::gfp::Gfp;
        const O: usize = PCP_THP_ORDER;
        let pa = allocator(1, Config::default());
        let c = owner(pa);
        let zone = &pa.zones[0];
        let (a, b) = (
            pa.alloc_pages(Some(c), Gfp::COMP, O).unwrap(),
            pa.alloc_pages(Some(c), Gfp::COMP, O).unwrap(),
        );
        let free_before = pa.nr_free_pages();
        // SAFETY: allocated above with this order, each freed once.
        unsafe {
            pa.free_pages(Some(c), a, O);
            pa.free_pages(Some(c), b, O);
        }
        // Reused since the last housekeeping: kept.
        let again = pa.alloc_pages(Some(c), Gfp::COMP, O).unwrap();
        // SAFETY: as above.
        unsafe { pa.free_pages(Some(c), again, O) };
        pa.decay_pcp_thp(c, zone);
        assert_eq!(pa.zone_pcp(c, 0).thp_blocks(), 2);
        // Unused since: back to the zone, cold, and counted out.
        pa.decay_pcp_thp(c, zone);
        assert_eq!(pa.zone_pcp(c, 0).thp_blocks(), 0);
        assert_eq!(pa.nr_free_pages(), free_before + (2 << O));
        assert_eq!(pa.block_pages_live(), 0);
    }

    #[test]
    fn no_pageblock_waits_with_the_list_off_or_a_drain_asked_for() {
        use crate::gfp::Gfp;
        const O: usize = PCP_THP_ORDER;
        let pa = allocator(1, Config::default());
        let c = owner(pa);
        let zone = &pa.zones[0];
        let b = pa.alloc_pages(Some(c), Gfp::COMP, O).unwrap();
        pa.drain_all_pages(None);
        // SAFETY: allocated above with this order.
        unsafe { pa.free_pages(Some(c), b, O) };
        assert_eq!(pa.zone_pcp(c, 0).thp_blocks(), 0);
        assert_eq!(
            c.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES,
            0
        );
        zone.pcp_thp_high.store(0, Ordering::Relaxed);
        let b = pa.alloc_pages(Some(c), Gfp::COMP, O).unwrap();
        // SAFETY: as above.
        unsafe { pa.free_pages(Some(c), b, O) };
        assert_eq!(pa.zone_pcp(c, 0).thp_blocks(), 0);
        assert_eq!(pa.block_pages_live(), 0);
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
