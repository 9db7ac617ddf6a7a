//! Free page reporting: giving free memory back to the platform, lazily.
//!
//! Free blocks that have stayed free for the decay interval are *reported*: isolated
//! from the free lists under the zone lock, handed to [`Platform::report_free`] with
//! the lock dropped (Linux: `madvise(MADV_DONTNEED)`), and put back marked
//! `PG_REPORTED` at the tail of their list. Allocation takes from the head, so recently
//! freed, still resident blocks are reused first, and a reported block is known to
//! read as zero (`__GFP_ZERO` skips clearing it).
//!
//! Every block of `report_order` (2 MiB) and above is reported once old enough, and a
//! reported 4 MiB block also gives back the memmap pages that describe only its tail
//! pages. Smaller blocks — the fragments next to pages still in use — are reported
//! too, at most [`SMALL_REPORT_MAX`] per pass: the kernel stops at pageblock order
//! (`page_reporting_order`) because a hypervisor works in 2 MiB units, but a process's
//! RSS counts every 4 KiB page, and without this a program that allocates and frees
//! 1 GiB keeps megabytes of touched fragments resident for good (`kmem bench page`
//! shows the difference).
//!
//! Age: each free block remembers when it was freed (the youngest of the parts it
//! merged from; drains of per-CPU lists count as long ago). A pass runs from the
//! allocator's own paths (a spill or refill of per-CPU lists, a zone-path allocation
//! or free, every [`REPORT_CHECK_INTERVAL`](super::REPORT_CHECK_INTERVAL)th per-CPU free) at most twice per decay
//! interval, and only when something was freed since the last one; no background
//! thread is needed. After a pass, sections whose pages are all free and reported go
//! offline (`hotplug.rs`): their memmap is discarded too, so resident memory follows
//! live memory all the way down. [`PageAllocator::report_free_pages`] runs a pass at
//! once (`malloc_trim`).
//!
//! Locking: the zone lock while isolating and putting back; none while the platform
//! works; the hotplug lock (outside any zone lock) to take a section offline. Passes
//! of a zone start one at a time (whoever moves `last_report_ns`), but a forced pass,
//! or one a half delay later, may start while another is still in its unlocked part:
//! each isolates only blocks not yet reported, under the zone lock, so they never
//! share a block. See the lock order in lib.rs.
//!
//! A `fork` while a pass has blocks isolated (in its unlocked part, which holds no
//! lock the fork handlers wait for) leaves them isolated in the child, whose copy of
//! that thread never puts them back: the child loses those free blocks (at most a
//! pass's worth) and counts them out of `NrFreePages`, as it loses what other
//! threads' CPU areas held (`Kmem::fork_release`).
//! No pass starts inside [`PageAllocator::with_reporting_deferred`], which the slab
//! layer's walks of its cache list run in (they free pages under the list's lock).

use super::descriptor::{Page, PageFlags, MAX_ORDER, PAGE_SIZE};
use super::mmzone::Zone;
use super::PageAllocator;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use crate::vmstat::{VmEvent, ZoneStat};
use core::ptr::NonNull;

/// Bytes of memmap that stay resident for a reported block: the page holding its head.
const MEMMAP_PAGE: usize = PAGE_SIZE;

/// Blocks isolated and reported per zone-lock round trip.
const REPORT_BATCH: usize = 32;
/// Most blocks below reporting order reported in one pass.
pub const SMALL_REPORT_MAX: usize = 512;
/// Most list entries looked at per order and round, so a pass never holds the zone
/// lock long on lists full of young blocks.
const SCAN_MAX: usize = 1024;

/// Every this many slab slow paths, a CPU area's owner does the housekeeping of
/// [`PageAllocator::housekeeping`] (a power of two).
pub const HOUSEKEEPING_INTERVAL: u32 = 16;

impl<P: Platform> PageAllocator<P> {
    /// Periodic housekeeping, from the slab layer's slow paths (every
    /// [`HOUSEKEEPING_INTERVAL`]th of a CPU area: `cpu`'s owner, holding no reference
    /// into its page lists): a reporting pass on every zone where one is due, then the
    /// platform's own aging ([`Platform::housekeeping`]). So memory freed to the
    /// pages, and memory the platform caches, goes back after the decay interval even
    /// when the program then only allocates from per-CPU caches and never reaches the
    /// page allocator's paths, which otherwise run the passes.
    /// Returns whether the housekeeping ran (the slab layer then does its own).
    #[inline]
    pub fn housekeeping_tick(&self, cpu: CpuRef<'_>) -> bool {
        if self.count_slow_path(cpu) {
            self.housekeeping(cpu);
            return true;
        }
        false
    }

    /// [`PageAllocator::housekeeping_tick`]'s count alone: counts a slow path of
    /// `cpu`'s owner and says whether this one is the interval's, whose housekeeping
    /// the caller then runs ([`PageAllocator::housekeeping_now`]).
    #[inline(always)]
    pub fn count_slow_path(&self, cpu: CpuRef<'_>) -> bool {
        let area = cpu.area();
        let n = area.slow_paths.load(Relaxed).wrapping_add(1);
        area.slow_paths.store(n, Relaxed);
        n.is_multiple_of(HOUSEKEEPING_INTERVAL)
    }

    /// Makes the next slow path of `cpu`'s owner the interval's: its housekeeping,
    /// and the slab layer's with it, runs then rather than up to
    /// [`HOUSEKEEPING_INTERVAL`] slow paths later (the slab layer, when its slabs grew
    /// by a step of the barns' decay: a cache of large objects makes few slow paths
    /// for its memory). Called by the owner.
    pub fn housekeeping_soon(&self, cpu: CpuRef<'_>) {
        let area = cpu.area();
        let n = area.slow_paths.load(Relaxed);
        area.slow_paths
            .store(n | (HOUSEKEEPING_INTERVAL - 1), Relaxed);
    }

    /// Whether the slow path [`PageAllocator::count_slow_path`] counted last was the
    /// interval's.
    #[inline]
    pub fn slow_path_housekeeping_due(&self, cpu: CpuRef<'_>) -> bool {
        cpu.area()
            .slow_paths
            .load(Relaxed)
            .is_multiple_of(HOUSEKEEPING_INTERVAL)
    }

    /// The housekeeping a counted slow path found due (see
    /// [`PageAllocator::housekeeping_tick`]).
    #[inline]
    pub fn housekeeping_now(&self, cpu: CpuRef<'_>) {
        self.housekeeping(cpu);
    }

    #[cold]
    #[inline(never)]
    fn housekeeping(&self, cpu: CpuRef<'_>) {
        // The area's copy of the tag-window length, caught up here too, not only by a
        // free the inline path refused (see `PageAllocator::sheaf_tag_inline`).
        self.refresh_tag_limit(cpu);
        for zone in &self.zones[..self.nr_nodes()] {
            self.decay_pcp_thp(cpu, zone);
            self.maybe_report(Some(cpu), zone);
        }
        self.platform.housekeeping();
    }

    /// Runs a reporting pass on `zone` if one is due. Called without locks held, and
    /// with `cpu` only by the owner of that area when it holds no reference into the
    /// area's lists (the pass drains them).
    #[inline]
    pub(super) fn maybe_report(&self, cpu: Option<CpuRef<'_>>, zone: &Zone) {
        if zone.report_pending.load(Relaxed) != 0 && self.report_deferred.load(Relaxed) == 0 {
            self.page_reporting_process(cpu, zone, false);
        }
    }

    /// Runs `f` with no reporting pass started meanwhile, on any thread (the passes
    /// `f`'s frees would have started run at the next page-path free or housekeeping
    /// tick after it: the pending mark and the zone's clock stay as they were).
    ///
    /// For the slab layer's walks of its cache list, which free pages under the list's
    /// lock: a pass runs the platform's aging ([`Platform::report_free`] and its
    /// housekeeping), whose locks the process heap's fork handlers take *before* the
    /// cache list's (the heap's huge-mapping list), and a pass must be started
    /// without locks held. A walk that gave slabs back under that lock could otherwise
    /// wait for a platform lock held by a forking thread that waits for the list.
    pub fn with_reporting_deferred<R>(&self, f: impl FnOnce() -> R) -> R {
        /// Ends the section, also when `f` unwinds.
        struct Section<'a>(&'a crate::sync::AtomicUsize);
        impl Drop for Section<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Relaxed);
            }
        }
        self.report_deferred.fetch_add(1, Relaxed);
        let _section = Section(&self.report_deferred);
        f()
    }

    /// In a fork's child: forgets the deferrals ([`PageAllocator::with_reporting_deferred`])
    /// that the parent's other threads were inside (they do not exist there, and the
    /// count would keep every pass from starting for good). The calling thread was in
    /// `fork`, inside none. Writes nothing when none was (a page written in the child
    /// is a page copied).
    ///
    /// # Safety
    /// As [`Kmem::fork_child`](crate::Kmem::fork_child): in a fork's child, by its one
    /// thread.
    pub unsafe fn fork_child(&self) {
        if self.report_deferred.load(Relaxed) != 0 {
            self.report_deferred.store(0, Relaxed);
        }
    }

    #[cold]
    #[inline(never)]
    fn page_reporting_process(&self, cpu: Option<CpuRef<'_>>, zone: &Zone, force: bool) -> usize {
        let now = self.platform.now_ns();
        let delay = self.report_delay_ns.load(Relaxed);
        let last = zone.last_report_ns.load(Relaxed);
        if !force && now.saturating_sub(last) < delay / 2 {
            return 0;
        }
        // Passes start one at a time: whoever moves `last_report_ns` runs this one
        // (the module doc says what may still overlap).
        if zone
            .last_report_ns
            .compare_exchange(last, now.max(last + 1), Relaxed, Relaxed)
            .is_err()
        {
            return 0;
        }
        // The owner running the pass first gives its per-CPU pages of this zone back
        // (as the kernel's vmstat worker drains idle lists each second): pages parked
        // there for a decay interval would otherwise stay resident for good. They go
        // back cold, so this pass reports them; refills take them again as needed.
        if let Some(c) = cpu {
            self.drain_zone_pages(c, zone);
        }
        let reported = self.report_zone(zone, now, if force { 0 } else { delay });
        if reported > 0 {
            self.offline_reported_sections(zone.nid());
        }
        self.platform.reporting_pass(now);
        reported
    }

    /// Reports the unreported free blocks that have been free for at least `delay` ns:
    /// every such block of reporting order and above, and up to
    /// [`SMALL_REPORT_MAX`] smaller ones (the fragments left next to live pages, which
    /// would otherwise stay resident for good). Returns the pages reported.
    fn report_zone(&self, zone: &Zone, now: u64, delay: u64) -> usize {
        zone.report_pending.store(0, Relaxed);
        let big_order = self.report_order.load(Relaxed);
        let mut total = 0usize;
        let mut small_left = SMALL_REPORT_MAX;
        let mut left_young = false;
        loop {
            let mut batch = [(0usize, 0usize); REPORT_BATCH];
            let mut n = 0;
            let mut fa = zone.lock.lock();
            'orders: for order in (0..=MAX_ORDER).rev() {
                let mut page = fa.lists[order].first();
                let mut scanned = 0;
                while let Some(p) = NonNull::new(page) {
                    if n == REPORT_BATCH {
                        break 'orders;
                    }
                    if order < big_order && small_left == 0 {
                        break 'orders;
                    }
                    scanned += 1;
                    if scanned > SCAN_MAX {
                        left_young = true;
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
                    if order < big_order {
                        small_left -= 1;
                    }
                }
            }
            let isolated: usize = batch[..n].iter().map(|&(_, o)| 1usize << o).sum();
            zone.vm_stat[ZoneStat::NrFreePages as usize].fetch_sub(isolated as isize, Relaxed);
            drop(fa);
            if n == 0 {
                break;
            }
            for &(pfn, order) in &batch[..n] {
                let page = NonNull::new(self.pfn_to_page_raw(pfn)).expect("memmap");
                let addr = self.page_address(page);
                // SAFETY: the block is isolated from the free lists: nobody else can
                // reach it until we put it back.
                unsafe { self.platform.report_free(addr.as_ptr(), PAGE_SIZE << order) };
                self.discard_tail_memmap(page, order);
            }
            // Put the blocks back as reported. One that merges with an unreported
            // buddy becomes unreported again, as old as that buddy: the next round
            // of this loop looks at it.
            let mut fa = zone.lock.lock();
            for &(pfn, order) in &batch[..n] {
                self.free_one_page_locked(&mut fa, zone, pfn, order, true, 0);
            }
            drop(fa);
            zone.vm_stat[ZoneStat::NrFreePages as usize].fetch_add(isolated as isize, Relaxed);
            zone.events[VmEvent::PgReported as usize].fetch_add(isolated as u64, Relaxed);
            total += isolated;
        }
        if left_young || small_left == 0 {
            zone.report_pending.store(1, Relaxed);
        }
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
            // SAFETY: these memmap pages hold only the tail descriptors of an isolated
            // block, which nobody reads (tails carry no state; a read sees zeros).
            unsafe { self.platform.report_free(first as *mut u8, end - first) };
        }
    }

    /// Takes offline the sections of node `nid` whose pages are all free and reported.
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

    /// Reports every free block now, whatever its age (below reporting order, up to
    /// [`SMALL_REPORT_MAX`] of them), and takes wholly free sections offline
    /// (`malloc_trim`). Returns the pages reported.
    #[cold]
    pub fn report_free_pages(&self) -> usize {
        let mut total = 0;
        for nid in 0..self.nr_nodes() {
            total += self.page_reporting_process(None, &self.zones[nid], true);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_platform::allocator;
    use super::super::Config;
    use super::*;
    use crate::gfp::Gfp;

    const SECOND: u64 = 1_000_000_000;

    fn fill<P: Platform>(pa: &PageAllocator<P>, page: NonNull<Page>, order: usize) {
        // SAFETY: the test holds the block.
        unsafe { core::ptr::write_bytes(pa.page_address(page).as_ptr(), 0xa5, PAGE_SIZE << order) };
    }

    fn first_byte<P: Platform>(pa: &PageAllocator<P>, page: NonNull<Page>) -> u8 {
        // SAFETY: the block's memory stays mapped whether free or not; nobody else
        // uses the allocator in this test.
        unsafe { pa.page_address(page).as_ptr().read_volatile() }
    }

    fn reported(page: NonNull<Page>) -> bool {
        // SAFETY: descriptors of an online section.
        unsafe { page.as_ref() }
            .flags()
            .contains(PageFlags::REPORTED)
    }

    #[test]
    fn only_blocks_free_for_the_delay_are_reported() {
        let pa = allocator(1, Config::default());
        assert_eq!(pa.report_delay_ns.load(Relaxed), SECOND);
        // A page in use keeps the section online when everything else is reported.
        let _pin = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        let a = pa.alloc_pages(None, Gfp::KERNEL, MAX_ORDER).unwrap();
        let b = pa.alloc_pages(None, Gfp::KERNEL, MAX_ORDER).unwrap();
        fill(pa, a, MAX_ORDER);
        fill(pa, b, MAX_ORDER);
        let zone = &pa.zones[0];
        // SAFETY: allocated above with MAX_ORDER.
        unsafe { pa.free_pages(None, a, MAX_ORDER) };
        assert!(!reported(a), "freed a moment ago");
        pa.platform().advance(SECOND);
        // Freeing `b` a delay later runs a pass: `a` has been free long enough.
        // SAFETY: as above.
        unsafe { pa.free_pages(None, b, MAX_ORDER) };
        assert!(reported(a));
        assert!(!reported(b));
        assert_eq!(first_byte(pa, a), 0, "reported memory reads as zero");
        assert_eq!(first_byte(pa, b), 0xa5, "unreported memory stays resident");
        assert_eq!(pa.zone_event(0, VmEvent::PgReported), 1 << MAX_ORDER);
        // The block and the memmap pages that describe only its tail pages.
        let memmap = (core::mem::size_of::<Page>() << MAX_ORDER) - PAGE_SIZE;
        assert_eq!(
            pa.platform().reported_bytes.load(Relaxed),
            (PAGE_SIZE << MAX_ORDER) + memmap
        );
        // `b` keeps a pass pending; it runs once `b` has aged too.
        assert_ne!(zone.report_pending.load(Relaxed), 0);
        pa.platform().advance(SECOND / 4);
        pa.maybe_report(None, zone);
        assert!(!reported(b), "passes run at most twice per delay");
        pa.platform().advance(SECOND);
        pa.maybe_report(None, zone);
        assert!(reported(b));
        assert_eq!(zone.report_pending.load(Relaxed), 0);
    }

    /// The halves of a block split for an allocation keep its free time: freed a
    /// moment ago, they are not reported at the next pass (each half's own word held
    /// 0 or the time of a free long merged away, and went back to the system at once).
    #[test]
    fn a_split_block_s_halves_keep_its_free_time() {
        let pa = allocator(1, Config::default());
        let _pin = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        let old = pa.alloc_pages(None, Gfp::KERNEL, MAX_ORDER).unwrap();
        let a = pa.alloc_pages(None, Gfp::KERNEL, MAX_ORDER).unwrap();
        // SAFETY: allocated above with MAX_ORDER.
        unsafe { pa.free_pages(None, old, MAX_ORDER) };
        pa.platform().advance(2 * SECOND);
        // `a` freed now (its free's pass reports `old`), then split: it heads the
        // list of its order.
        // SAFETY: as above.
        unsafe { pa.free_pages(None, a, MAX_ORDER) };
        assert!(reported(old) && !reported(a));
        // Every smaller free block taken first, so that the next page splits `a`.
        let mut held = [None; 64];
        let mut n = 0;
        for o in 0..MAX_ORDER {
            while pa.free_area_counts(0)[o] > 0 {
                held[n] = Some((pa.alloc_pages(None, Gfp::KERNEL, o).unwrap(), o));
                n += 1;
            }
        }
        let p = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        assert_eq!(p, a, "the block freed last, split");
        let before = pa.zone_event(0, VmEvent::PgReported);
        // A pass half a delay later: `a`'s halves are half a delay old.
        pa.platform().advance(SECOND * 3 / 5);
        pa.maybe_report(None, &pa.zones[0]);
        assert_eq!(
            pa.zone_event(0, VmEvent::PgReported),
            before,
            "a half reported"
        );
        // A delay after `a`'s free, they go.
        pa.platform().advance(SECOND / 2);
        pa.maybe_report(None, &pa.zones[0]);
        assert!(pa.zone_event(0, VmEvent::PgReported) > before);
        // SAFETY: allocated above, with these orders.
        unsafe {
            pa.free_pages(None, p, 0);
            for (b, o) in held.into_iter().flatten() {
                pa.free_pages(None, b, o);
            }
        }
    }

    /// A fork's child forgets the deferrals its parent's other threads were inside:
    /// its passes run again (the count stayed raised, and no pass ever started).
    #[test]
    fn a_fork_child_forgets_the_parent_s_deferrals() {
        let pa = allocator(1, Config::default());
        let _pin = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        let a = pa.alloc_pages(None, Gfp::KERNEL, MAX_ORDER).unwrap();
        // SAFETY: allocated above with MAX_ORDER.
        unsafe { pa.free_pages(None, a, MAX_ORDER) };
        pa.platform().advance(2 * SECOND);
        // Another thread of the parent was inside a deferral when it forked.
        pa.report_deferred.fetch_add(1, Relaxed);
        pa.maybe_report(None, &pa.zones[0]);
        assert!(!reported(a), "deferred");
        // SAFETY: one thread; the deferral counted is no thread's (as in a child).
        unsafe { pa.fork_child() };
        pa.maybe_report(None, &pa.zones[0]);
        assert!(reported(a), "the child's passes run");
    }

    #[test]
    fn small_blocks_are_reported_up_to_a_bound() {
        let pa = allocator(1, Config::default());
        // Order-0 pages with an allocated page between each pair: nothing merges.
        let mut pages = [None; 2 * SMALL_REPORT_MAX + 2];
        for slot in pages.iter_mut() {
            *slot = pa.alloc_pages(None, Gfp::KERNEL, 0);
        }
        for page in pages.iter().step_by(2).flatten() {
            // SAFETY: allocated above with order 0.
            unsafe { pa.free_pages(None, *page, 0) };
        }
        let before = pa.zone_event(0, VmEvent::PgReported);
        pa.platform().advance(2 * SECOND);
        pa.maybe_report(None, &pa.zones[0]);
        let small = pa.zone_event(0, VmEvent::PgReported) - before;
        assert_eq!(small, SMALL_REPORT_MAX as u64);
        let unreported = pages
            .iter()
            .step_by(2)
            .flatten()
            .filter(|p| !reported(**p))
            .count();
        assert_eq!(unreported, 1);
    }
}
