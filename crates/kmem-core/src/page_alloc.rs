//! The buddy page allocator with per-CPU page lists (mm/page_alloc.c).
//!
//! ## The path of a page allocation
//! ```text
//! alloc_pages_node(cpu, gfp, order, nid)
//!   fast:  this CPU area's per_cpu_pages list for (zone, order)        no lock
//!   else:  get_page_from_freelist: zonelist (preferred node first),
//!          watermark check, grow the node (hot-add a section) if low,
//!          rmqueue: PCP refill via rmqueue_bulk, or the zone directly  zone lock
//!   slow:  drain per-CPU lists, run shrinkers, retry at the min watermark,
//!          then fail with None and an OOM report (unless __GFP_NOWARN)
//! ```
//! A free goes to the owner's per-CPU list of the page's zone; when the list holds
//! more than `high` pages, `free_pcppages_bulk` gives a batch back to the buddy lists,
//! where `__free_one_page` merges each block with its buddy at `pfn ^ (1 << order)`.
//!
//! ## Contexts
//! Every entry point takes `cpu: Option<CpuRef>`. `Some` is a context that owns a CPU
//! area and may use its per-CPU lists; `None` is a context the platform declares
//! unsafe for them (seed 002: an interrupt, a thread that has no area or is exiting):
//! it goes to the zone under its lock. Both are correct at any time.
//!
//! ## Per-CPU list budget
//! All lists of a zone together hold at most a budget of pages (a fraction of the
//! zone, at least enough for a few CPUs), divided among the CPU areas owned now: with
//! many owners each gets a smaller `high`, and below [`PCP_MIN_HIGH`] the lists are
//! off and every owner uses the zone. So a thousand threads do not hoard memory.
//! Owners adopt a lowered `high` at their next free; drains are asked of owners by a
//! flag ([`crate::percpu::DRAIN_PAGES`]) and done by them.

use crate::gfp::Gfp;
use crate::mmzone::{
    FreeArea, MemSection, Watermark, Zone, MAX_NUMNODES, MAX_SECTIONS, MEMMAP_PAGES,
    PFN_SECTION_SHIFT, SECTION_MANAGED_PAGES, SECTION_SHIFT, SECTION_SIZE,
};
use crate::page::{Page, PageFlags, PageList, MAX_ORDER, PAGE_SHIFT, PAGE_SIZE};
use crate::percpu::{
    CpuArea, CpuAreaPool, CpuRef, PerCpuOffsets, CPU_AREA_DATA, CPU_AREA_ORDER, DRAIN_PAGES,
};
use crate::platform::Platform;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, SpinLock};
use crate::vmstat::{VmEvent, ZoneStat, ZoneStatPcp, NR_ZONE_STAT};
use core::cell::UnsafeCell;
use core::ptr::{self, NonNull};

/// Highest order kept on per-CPU lists (`PAGE_ALLOC_COSTLY_ORDER`).
pub const PCP_MAX_ORDER: usize = 3;
/// Orders with a per-CPU list.
pub const PCP_ORDERS: usize = PCP_MAX_ORDER + 1;
/// Default per-CPU refill/spill batch (the `btch: 31` of seed 000's report).
pub const PCP_BATCH: u32 = 31;
/// Most pages one CPU area may keep per zone (`hi: 186`, six batches).
pub const PCP_HIGH_MAX: u32 = 6 * PCP_BATCH;
/// Below this `high`, per-CPU lists are off.
pub const PCP_MIN_HIGH: u32 = 8;
/// Every this many pages freed to a per-CPU list, the owner checks whether free page
/// reporting is due (a power of two).
pub const REPORT_CHECK_INTERVAL: u64 = 1024;
/// Most shrinkers that can be registered.
pub const MAX_SHRINKERS: usize = 16;

/// Configuration fixed at [`PageAllocator::init`].
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Nodes: what the platform reports, or more with fake NUMA (each fake node is
    /// backed by real node `nid % real_nodes`, which is the platform's business).
    pub nr_nodes: usize,
    /// Bound on managed pages (a heap limit); 0 = only the span bounds the heap.
    pub max_pages: usize,
    /// Free page reporting: a free block of at least `report_order` must stay free this
    /// long before it is reported (a decay interval).
    pub report_delay_ns: u64,
    /// Smallest order that free page reporting hands back (9 = 2 MiB).
    pub report_order: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            nr_nodes: 1,
            max_pages: 0,
            report_delay_ns: 1_000_000_000,
            report_order: 9,
        }
    }
}

/// Why [`PageAllocator::init`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitError {
    /// Already initialised.
    AlreadyInitialized,
    /// The span's base is not aligned to the section size, or it is empty.
    BadSpan,
    /// `nr_nodes` is 0 or above [`MAX_NUMNODES`], or `report_order` above `MAX_ORDER`.
    BadConfig,
}

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

/// `free_page_is_bad`: why a block may not be freed as an order-`order` allocation, or
/// `None` if it may.
#[inline]
fn free_page_is_bad(p: &Page, order: usize) -> Option<&'static str> {
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

/// Offset of zone `nid`'s [`ZonePcp`] in every CPU area.
const fn zone_pcp_offset(nid: usize) -> usize {
    CPU_AREA_DATA + nid * core::mem::size_of::<ZonePcp>()
}
/// First CPU-area offset left to [`PerCpuOffsets`].
const PERCPU_DYNAMIC_START: usize = zone_pcp_offset(MAX_NUMNODES);
const _: () = assert!(PERCPU_DYNAMIC_START < crate::percpu::CPU_AREA_SIZE / 2);

impl ZonePcp {
    /// Pages on this area's lists for the zone.
    #[inline]
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed) as usize
    }
    #[inline]
    fn add_count(&self, delta: i32) {
        let c = self.count.load(Ordering::Relaxed) as i32 + delta;
        self.count.store(c as u32, Ordering::Relaxed);
    }
    /// # Safety
    /// The caller is the owner of the area this belongs to, and holds no other
    /// reference to the lists.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    unsafe fn lists(&self) -> &mut [PageList; PCP_ORDERS] {
        // SAFETY: only the owner reaches the lists (type invariant), and the caller is
        // the owner holding no other reference.
        unsafe { &mut *self.lists.get() }
    }
}

/// A shrinker: a callback that frees memory its layer caches when the page allocator
/// runs out (`struct shrinker`). `scan(data, nid)` frees what it can and returns how
/// many pages it gave back.
#[derive(Clone, Copy)]
pub struct Shrinker {
    /// Frees cached memory; must not hold locks of the page allocator when called.
    pub scan: fn(data: *const (), nid: usize) -> usize,
    /// Passed back to `scan`.
    pub data: *const (),
}
// SAFETY: registering a shrinker promises that `scan` may be called with `data` from any
// thread (documented on `register_shrinker`).
unsafe impl Send for Shrinker {}

/// A CPU-offline callback (`cpuhp` teardown): run by [`PageAllocator::cpu_area_put`]
/// with the departing owner's area, before its per-CPU page lists are drained, so
/// layers above (the slab allocator) can flush their per-CPU state into it.
#[derive(Clone, Copy)]
pub struct CpuDeadHook {
    /// Flushes the layer's per-CPU state of `cpu`.
    pub flush: fn(data: *const (), cpu: CpuRef<'_>),
    /// Passed back to `flush`.
    pub data: *const (),
}
// SAFETY: registering a hook promises that `flush` may be called with `data` from any
// thread that owns a CPU area (documented on `register_cpu_dead`).
unsafe impl Send for CpuDeadHook {}

/// Most CPU-offline callbacks.
pub const MAX_CPU_DEAD_HOOKS: usize = 4;

struct Hotplug {
    /// Sections `0..next_section` have been used at least once.
    next_section: usize,
    /// Managed pages online now (bounded by `max_pages`).
    online_pages: usize,
}

/// The page allocator: sections, nodes with their zones, CPU areas.
///
/// It lives as long as anything it handed out (`'static` in practice: a `static`, or
/// leaked). Invariants are those of its parts: [`MemSection`], [`Zone`], [`ZonePcp`],
/// [`CpuAreaPool`], and `Page`'s flag rules.
pub struct PageAllocator<P: Platform> {
    pub(crate) platform: P,
    initialized: AtomicBool,
    base: AtomicUsize,
    nr_span_sections: AtomicUsize,
    nr_nodes: AtomicUsize,
    max_pages: AtomicUsize,
    pub(crate) report_delay_ns: AtomicU64,
    pub(crate) report_order: AtomicUsize,
    pub(crate) sections: [MemSection; MAX_SECTIONS],
    hotplug: SpinLock<Hotplug>,
    pub(crate) zones: [Zone; MAX_NUMNODES],
    pub(crate) areas: CpuAreaPool,
    percpu: PerCpuOffsets,
    shrinkers: SpinLock<[Option<Shrinker>; MAX_SHRINKERS]>,
    cpu_dead: SpinLock<[Option<CpuDeadHook>; MAX_CPU_DEAD_HOOKS]>,
    interleave_next: AtomicUsize,
}

// SAFETY (for the `unsafe` blocks below that turn a pfn into a `Page`): `pfn_to_page_raw`
// is only called with pfns of online sections inside the span, whose memmaps are mapped
// for as long as the allocator lives (sections are never unmapped).

impl<P: Platform> PageAllocator<P> {
    /// A page allocator with no memory yet; call [`PageAllocator::init`] before use.
    pub const fn new(platform: P) -> Self {
        Self {
            platform,
            initialized: AtomicBool::new(false),
            base: AtomicUsize::new(0),
            nr_span_sections: AtomicUsize::new(0),
            nr_nodes: AtomicUsize::new(1),
            max_pages: AtomicUsize::new(0),
            report_delay_ns: AtomicU64::new(1_000_000_000),
            report_order: AtomicUsize::new(9),
            sections: [const { MemSection::new() }; MAX_SECTIONS],
            hotplug: SpinLock::new(Hotplug {
                next_section: 0,
                online_pages: 0,
            }),
            zones: [const { Zone::new() }; MAX_NUMNODES],
            areas: CpuAreaPool::new(),
            percpu: PerCpuOffsets::new(PERCPU_DYNAMIC_START),
            shrinkers: SpinLock::new([None; MAX_SHRINKERS]),
            cpu_dead: SpinLock::new([None; MAX_CPU_DEAD_HOOKS]),
            interleave_next: AtomicUsize::new(0),
        }
    }

    /// Gives the allocator its span of address space: `len` bytes at `base` (aligned to
    /// the section size). Memory in it comes online section by section as nodes need it
    /// (through [`Platform::section_online`]).
    ///
    /// # Safety
    /// The span is reserved for this allocator alone for as long as it lives, and no
    /// other thread uses the allocator before `init` returns.
    pub unsafe fn init(&self, base: *mut u8, len: usize, config: Config) -> Result<(), InitError> {
        if self.initialized.load(Ordering::Acquire) {
            return Err(InitError::AlreadyInitialized);
        }
        if base.is_null() || (base as usize) & (SECTION_SIZE - 1) != 0 || len < SECTION_SIZE {
            return Err(InitError::BadSpan);
        }
        if config.nr_nodes == 0 || config.nr_nodes > MAX_NUMNODES || config.report_order > MAX_ORDER
        {
            return Err(InitError::BadConfig);
        }
        self.base.store(base as usize, Ordering::Relaxed);
        self.nr_span_sections
            .store((len >> SECTION_SHIFT).min(MAX_SECTIONS), Ordering::Relaxed);
        self.nr_nodes.store(config.nr_nodes, Ordering::Relaxed);
        self.max_pages.store(config.max_pages, Ordering::Relaxed);
        self.report_delay_ns
            .store(config.report_delay_ns, Ordering::Relaxed);
        self.report_order
            .store(config.report_order, Ordering::Relaxed);
        for (nid, zone) in self.zones.iter().enumerate() {
            zone.nid.store(nid as u32, Ordering::Relaxed);
        }
        self.initialized.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether [`PageAllocator::init`] has run.
    pub fn is_initialized(&self) -> bool {
        self.initialized.load(Ordering::Acquire)
    }

    /// The platform.
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// Number of nodes.
    #[inline]
    pub fn nr_nodes(&self) -> usize {
        self.nr_nodes.load(Ordering::Relaxed)
    }

    /// The zone of node `nid`.
    #[inline]
    pub fn zone(&self, nid: usize) -> &Zone {
        &self.zones[nid]
    }

    /// The heap bound in pages (0 = none).
    pub fn max_pages(&self) -> usize {
        self.max_pages.load(Ordering::Relaxed)
    }

    /// Changes the heap bound (pages already online stay online).
    pub fn set_max_pages(&self, max: usize) {
        self.max_pages.store(max, Ordering::Relaxed);
    }

    /// The percpu offset allocator, for layers that keep per-CPU state in CPU areas.
    pub fn percpu(&self) -> &PerCpuOffsets {
        &self.percpu
    }

    /// All CPU areas.
    pub fn cpu_areas(&self) -> &CpuAreaPool {
        &self.areas
    }

    // ---------------------------------------------------------------------------
    // Memory model: pfn <-> page <-> address.

    /// Page frame number of `page` (offset from the span base, in pages).
    #[inline]
    pub fn page_to_pfn(&self, page: NonNull<Page>) -> usize {
        let p = page.as_ptr() as usize;
        let section_base = p & !(SECTION_SIZE - 1);
        let index = (p - section_base) / core::mem::size_of::<Page>();
        ((section_base - self.base.load(Ordering::Relaxed)) >> PAGE_SHIFT) + index
    }

    #[inline]
    fn pfn_to_page_raw(&self, pfn: usize) -> *mut Page {
        let base = self.base.load(Ordering::Relaxed);
        let section_base = base + ((pfn >> PFN_SECTION_SHIFT) << SECTION_SHIFT);
        (section_base as *mut Page).wrapping_add(pfn & ((1 << PFN_SECTION_SHIFT) - 1))
    }

    /// The descriptor of the page holding `addr`, which the caller knows to be in an
    /// online section of the span (an object it holds): no checks.
    #[inline]
    pub(crate) fn virt_to_page_raw(&self, addr: *const u8) -> *mut Page {
        let off = (addr as usize).wrapping_sub(self.base.load(Ordering::Relaxed));
        self.pfn_to_page_raw(off >> PAGE_SHIFT)
    }

    /// The descriptor of a managed page of an online section, or `None`.
    #[inline]
    pub fn pfn_to_page(&self, pfn: usize) -> Option<NonNull<Page>> {
        let section = self.sections.get(pfn >> PFN_SECTION_SHIFT)?;
        let off = pfn & ((1 << PFN_SECTION_SHIFT) - 1);
        let managed = section.nr_managed.load(Ordering::Relaxed) as usize;
        if !section.online() || off < MEMMAP_PAGES || off >= MEMMAP_PAGES + managed {
            return None;
        }
        NonNull::new(self.pfn_to_page_raw(pfn))
    }

    /// The address of the memory `page` describes.
    #[inline]
    pub fn page_address(&self, page: NonNull<Page>) -> NonNull<u8> {
        let addr = self.base.load(Ordering::Relaxed) + (self.page_to_pfn(page) << PAGE_SHIFT);
        // SAFETY: the base is non-null (checked at init), so base + offset is too.
        unsafe { NonNull::new_unchecked(addr as *mut u8) }
    }

    /// The descriptor of the managed page that contains `addr`, or `None` for an address
    /// the allocator does not manage (outside the span, offline, or a memmap page).
    #[inline]
    pub fn virt_to_page(&self, addr: *const u8) -> Option<NonNull<Page>> {
        let off = (addr as usize).wrapping_sub(self.base.load(Ordering::Relaxed));
        if off >= self.nr_span_sections.load(Ordering::Relaxed) << SECTION_SHIFT {
            return None;
        }
        self.pfn_to_page(off >> PAGE_SHIFT)
    }

    /// The descriptor of the page holding `addr` if its section is online, managed or
    /// not (a memmap page or one past a heap bound has an all-zero descriptor: no flags,
    /// so callers that look at flags need not check the range). For lookups on hot
    /// paths (`virt_to_head_page`).
    #[inline]
    pub(crate) fn virt_to_page_any(&self, addr: *const u8) -> Option<NonNull<Page>> {
        let off = (addr as usize).wrapping_sub(self.base.load(Ordering::Relaxed));
        if off >= self.nr_span_sections.load(Ordering::Relaxed) << SECTION_SHIFT {
            return None;
        }
        let pfn = off >> PAGE_SHIFT;
        if !self.sections[pfn >> PFN_SECTION_SHIFT].online() {
            return None;
        }
        NonNull::new(self.pfn_to_page_raw(pfn))
    }

    /// Whether `addr` lies in the allocator's span (managed or not).
    #[inline]
    pub fn in_span(&self, addr: *const u8) -> bool {
        let off = (addr as usize).wrapping_sub(self.base.load(Ordering::Relaxed));
        off < self.nr_span_sections.load(Ordering::Relaxed) << SECTION_SHIFT
    }

    /// The node of a page.
    #[inline]
    pub fn page_to_nid(&self, page: NonNull<Page>) -> usize {
        let pfn = self.page_to_pfn(page);
        self.sections[pfn >> PFN_SECTION_SHIFT]
            .node
            .load(Ordering::Relaxed) as usize
    }

    #[inline]
    fn local_node(&self, cpu: Option<CpuRef<'_>>) -> usize {
        let nid = match cpu {
            Some(c) => c.area().node(),
            None => self.platform.numa_node_id(),
        };
        if nid < self.nr_nodes() {
            nid
        } else {
            0
        }
    }

    #[inline]
    fn zone_pcp<'a>(&self, cpu: CpuRef<'a>, nid: usize) -> &'a ZonePcp {
        // SAFETY: every CPU area reserves a `ZonePcp` slot for each possible node at a
        // fixed offset, zeroed when the area is made (a valid empty state).
        unsafe { &*cpu.area().ptr::<ZonePcp>(zone_pcp_offset(nid)) }
    }

    /// The per-CPU state of zone `nid` in `area` (for reports).
    pub fn zone_pcp_of<'a>(&self, area: &'a CpuArea, nid: usize) -> &'a ZonePcp {
        // SAFETY: as in `zone_pcp`; shared access only reads atomics.
        unsafe { &*area.ptr::<ZonePcp>(zone_pcp_offset(nid)) }
    }

    // ---------------------------------------------------------------------------
    // Statistics.

    #[inline]
    fn count_event(&self, cpu: Option<CpuRef<'_>>, nid: usize, ev: VmEvent, n: u64) {
        match cpu {
            Some(c) => {
                self.zone_pcp(c, nid).stat.count(ev, n);
            }
            None => {
                self.zones[nid].events[ev as usize].fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    #[inline]
    fn mod_zone_state(&self, cpu: Option<CpuRef<'_>>, nid: usize, item: ZoneStat, delta: isize) {
        let fold = match cpu {
            Some(c) => self.zone_pcp(c, nid).stat.mod_state(item, delta as i32) as isize,
            None => delta,
        };
        if fold != 0 {
            self.zones[nid].vm_stat[item as usize].fetch_add(fold, Ordering::Relaxed);
        }
    }

    /// `zone_statistics`: the NUMA events of one allocation of `nr` pages that wanted
    /// node `preferred` and got node `nid`.
    #[inline]
    fn zone_statistics(&self, cpu: Option<CpuRef<'_>>, preferred: usize, nid: usize, nr: u64) {
        if nid == preferred {
            self.count_event(cpu, nid, VmEvent::NumaHit, nr);
        } else {
            self.count_event(cpu, preferred, VmEvent::NumaForeign, nr);
            self.count_event(cpu, nid, VmEvent::NumaMiss, nr);
        }
        let local = if nid == self.local_node(cpu) {
            VmEvent::NumaLocal
        } else {
            VmEvent::NumaOther
        };
        self.count_event(cpu, nid, local, nr);
        self.count_event(cpu, nid, VmEvent::PgAlloc, nr);
    }

    /// A zone counter, exact: the zone's value plus every CPU area's delta
    /// (`zone_page_state_snapshot`).
    pub fn zone_page_state_snapshot(&self, nid: usize, item: ZoneStat) -> isize {
        let mut v = self.zones[nid].vm_stat[item as usize].load(Ordering::Relaxed);
        for area in self.areas.iter() {
            v += self.zone_pcp_of(area, nid).stat.diff[item as usize].load(Ordering::Relaxed)
                as isize;
        }
        v
    }

    /// A zone counter without the per-CPU deltas (cheap, off by at most the threshold
    /// times the number of CPU areas).
    #[inline]
    pub fn zone_page_state(&self, nid: usize, item: ZoneStat) -> isize {
        self.zones[nid].vm_stat[item as usize].load(Ordering::Relaxed)
    }

    /// An event count of zone `nid`, summed over all CPU areas.
    pub fn zone_event(&self, nid: usize, ev: VmEvent) -> u64 {
        let mut v = self.zones[nid].events[ev as usize].load(Ordering::Relaxed);
        for area in self.areas.iter() {
            v += self.zone_pcp_of(area, nid).stat.events[ev as usize].load(Ordering::Relaxed);
        }
        v
    }

    /// An event count summed over all zones.
    pub fn event(&self, ev: VmEvent) -> u64 {
        (0..self.nr_nodes())
            .map(|nid| self.zone_event(nid, ev))
            .sum()
    }

    /// Free pages in the buddy lists of every zone (exact).
    pub fn nr_free_pages(&self) -> usize {
        (0..self.nr_nodes())
            .map(|nid| {
                self.zone_page_state_snapshot(nid, ZoneStat::NrFreePages)
                    .max(0) as usize
            })
            .sum()
    }

    /// Pages on per-CPU lists of zone `nid`, over all areas.
    pub fn nr_pcp_pages(&self, nid: usize) -> usize {
        self.areas
            .iter()
            .map(|a| self.zone_pcp_of(a, nid).count())
            .sum()
    }

    /// Managed pages of every zone.
    pub fn nr_managed_pages(&self) -> usize {
        (0..self.nr_nodes())
            .map(|nid| self.zones[nid].managed_pages())
            .sum()
    }

    /// Pages handed out and not freed: managed minus free minus per-CPU-listed pages.
    /// Exact when no allocation or free runs concurrently.
    pub fn nr_allocated_pages(&self) -> usize {
        let held: usize = (0..self.nr_nodes())
            .map(|nid| {
                self.zone_page_state_snapshot(nid, ZoneStat::NrFreePages)
                    .max(0) as usize
                    + self.nr_pcp_pages(nid)
            })
            .sum();
        self.nr_managed_pages().saturating_sub(held)
    }

    /// Free blocks per order of zone `nid` (`/proc/buddyinfo`).
    pub fn free_area_counts(&self, nid: usize) -> [usize; crate::page::NR_ORDERS] {
        let fa = self.zones[nid].lock.lock();
        core::array::from_fn(|o| fa.lists[o].len())
    }

    // ---------------------------------------------------------------------------
    // The buddy allocator proper. Functions taking `&mut FreeArea` run under the zone
    // lock of `zone`.

    fn add_to_free_list(
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

    /// Removes a free block from its list; returns whether it was reported.
    pub(crate) fn del_from_free_list(
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

    fn account_reported(&self, zone: &Zone, pfn: usize, nr: usize, add: bool) {
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
    pub(crate) fn free_one_page_locked(
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
    /// allocation; list the upper halves.
    fn expand(
        &self,
        fa: &mut FreeArea,
        zone: &Zone,
        pfn: usize,
        low: usize,
        mut high: usize,
        reported: bool,
    ) {
        while high > low {
            high -= 1;
            self.add_to_free_list(fa, zone, pfn + (1 << high), high, reported);
        }
    }

    /// `__rmqueue_smallest`: the smallest free block of at least `order`, split down.
    /// Returns its pfn and whether its contents were discarded (read as zero).
    fn rmqueue_smallest(
        &self,
        fa: &mut FreeArea,
        zone: &Zone,
        order: usize,
    ) -> Option<(usize, bool)> {
        for o in order..=MAX_ORDER {
            let head = fa.lists[o].first();
            if let Some(page) = NonNull::new(head) {
                let pfn = self.page_to_pfn(page);
                let reported = self.del_from_free_list(fa, zone, pfn, o);
                self.expand(fa, zone, pfn, order, o, reported);
                return Some((pfn, reported));
            }
        }
        None
    }

    /// Takes one block straight from the zone (no per-CPU list).
    fn rmqueue_buddy(
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

    /// `rmqueue_bulk`: moves up to `count` blocks of `order` to a per-CPU list under one
    /// zone lock. Returns how many it moved.
    fn rmqueue_bulk(
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

    /// `free_pcppages_bulk`: gives `to_free` pages (at least) from an area's lists of
    /// `zone` back to the buddy lists, coldest first, under one zone lock.
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

    // ---------------------------------------------------------------------------
    // Allocation.

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
    fn prep_new_page(&self, page: NonNull<Page>, order: usize, gfp: Gfp) -> NonNull<Page> {
        // SAFETY: the block was just taken off a free or per-CPU list: we own it.
        let p = unsafe { page.as_ref() };
        let known_zero = p.flags().contains(PageFlags::REPORTED);
        p.set_flags(PageFlags::HEAD);
        p.set_order(order);
        for w in &p.owner {
            w.store(0, Ordering::Relaxed);
        }
        // On a free block it held when the block was freed; on an allocated one it is
        // the holder's (`memcg_data`).
        p.private.store(0, Ordering::Relaxed);
        if gfp.contains(Gfp::ZERO) && !known_zero {
            let addr = self.page_address(page);
            // SAFETY: the block's 2^order pages are ours and mapped (online section).
            unsafe { ptr::write_bytes(addr.as_ptr(), 0, PAGE_SIZE << order) };
        }
        if gfp.contains(Gfp::COMP) && order > 0 {
            self.prep_compound_page(page, order);
        }
        page
    }

    /// `prep_compound_page`: every tail page of the block points at its head.
    #[cold]
    fn prep_compound_page(&self, head: NonNull<Page>, order: usize) {
        for i in 1..(1usize << order) {
            // SAFETY: the block's descriptors are consecutive in one memmap (a block
            // never crosses a section) and ours.
            let tail = unsafe { &*head.as_ptr().add(i) };
            tail.set_flags(PageFlags::TAIL);
            tail.owner[0].store(head.as_ptr() as usize, Ordering::Relaxed);
        }
    }

    /// Undoes `prep_compound_page` before a block goes back (its tails must carry no
    /// flags on the free lists).
    #[inline]
    fn destroy_compound_page(&self, head: NonNull<Page>, order: usize) {
        if order == 0 {
            return;
        }
        // SAFETY: the block's second descriptor is in the same memmap.
        let second = unsafe { &*head.as_ptr().add(1) };
        if !second.flags().contains(PageFlags::TAIL) {
            return;
        }
        for i in 1..(1usize << order) {
            // SAFETY: as in `prep_compound_page`.
            let tail = unsafe { &*head.as_ptr().add(i) };
            tail.set_flags(PageFlags::empty());
            tail.owner[0].store(0, Ordering::Relaxed);
        }
    }

    /// Whether `zone` may give 2^order pages without going under `mark`.
    #[inline]
    fn zone_watermark_ok(&self, zone: &Zone, order: usize, mark: usize, exact: bool) -> bool {
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
        let high = zone.pcp_high.load(Ordering::Relaxed);
        match cpu {
            Some(c) if order <= PCP_MAX_ORDER && high != 0 => {
                let pcp = self.zone_pcp(c, zone.nid());
                // SAFETY: `c` proves ownership of the area.
                let lists = unsafe { pcp.lists() };
                if lists[order].is_empty() {
                    let batch = zone.pcp_batch.load(Ordering::Relaxed) as usize;
                    let n = self.rmqueue_bulk(
                        c,
                        zone,
                        order,
                        (batch >> order).max(1),
                        &mut lists[order],
                    );
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
        self.areas.request_all(DRAIN_PAGES);
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

    // ---------------------------------------------------------------------------
    // Free.

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
        self.destroy_compound_page(page, order);
        let nid = self.page_to_nid(page);
        let zone = &self.zones[nid];
        if let Some(c) = cpu {
            let high = zone.pcp_high.load(Ordering::Relaxed);
            if order <= PCP_MAX_ORDER && high != 0 {
                let pcp = self.zone_pcp(c, nid);
                p.set_flags(PageFlags::PCP);
                p.set_order(order);
                // SAFETY: `c` proves ownership of the area; the block is ours to list.
                unsafe { pcp.lists()[order].push_head(page.as_ptr()) };
                pcp.add_count(1 << order);
                let freed = pcp.stat.count(VmEvent::PgFree, 1 << order);
                if pcp.count() > high as usize
                    || c.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES != 0
                {
                    self.free_pcp_slow(c, zone, pcp, high);
                } else if freed & (REPORT_CHECK_INTERVAL - 1) < (1 << order) {
                    // Now and then a free that stays on the per-CPU list looks whether
                    // free page reporting is due, so a program that has settled into
                    // a steady state still gives back what it freed earlier.
                    self.maybe_report(Some(c), zone);
                }
                return;
            }
        }
        self.free_one_page(cpu, zone, page, order);
    }

    #[cold]
    #[inline(never)]
    fn free_pcp_slow(&self, c: CpuRef<'_>, zone: &Zone, pcp: &ZonePcp, high: u32) {
        if c.area().drain_request.load(Ordering::Relaxed) & DRAIN_PAGES != 0 {
            self.check_drain_request(c);
            return;
        }
        let batch = zone.pcp_batch.load(Ordering::Relaxed) as usize;
        let excess = pcp.count() - high as usize;
        self.free_pcppages_bulk(c, zone, pcp, excess + batch.min(high as usize / 2), false);
    }

    /// Frees a block straight to the zone.
    fn free_one_page(
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

    /// Reports a page in a state it should not be in (`bad_page`): the page is left
    /// alone (leaked rather than corrupted).
    #[cold]
    #[inline(never)]
    pub fn bad_page(&self, page: NonNull<Page>, reason: &str) {
        let nid = self.page_to_nid(page);
        self.zones[nid].events[VmEvent::BadPage as usize].fetch_add(1, Ordering::Relaxed);
        crate::show_mem::report_bad_page(self, page, reason);
    }

    // ---------------------------------------------------------------------------
    // Resizing a block in place.

    /// Grows the allocated block of 2^`old` pages at `page` to 2^`new` pages where it
    /// stands, taking the following buddy blocks if they are all free (realloc of a
    /// page run). On success the block is of order `new` (compound again if it was),
    /// its new part zeroed if `gfp` asks; on failure nothing changed.
    pub fn grow_in_place(&self, page: NonNull<Page>, old: usize, new: usize, gfp: Gfp) -> bool {
        if new <= old {
            return new == old;
        }
        let pfn = self.page_to_pfn(page);
        if new > MAX_ORDER || pfn & ((1 << new) - 1) != 0 {
            return false;
        }
        // SAFETY: the caller's block.
        let p = unsafe { page.as_ref() };
        if free_page_is_bad(p, old).is_some() {
            return false;
        }
        let compound = old > 0 && {
            // SAFETY: the block's second descriptor, same memmap.
            unsafe { &*page.as_ptr().add(1) }
                .flags()
                .contains(PageFlags::TAIL)
        };
        let nid = self.page_to_nid(page);
        let zone = &self.zones[nid];
        let mut fa = zone.lock.lock();
        for o in old..new {
            // SAFETY: pfn is aligned to 2^new, so each buddy lies in the same section.
            let b = unsafe { &*self.pfn_to_page_raw(pfn + (1 << o)) };
            if !(b.is_buddy() && b.order() == o) {
                return false;
            }
        }
        let mut reported = [false; MAX_ORDER + 1];
        for (o, r) in reported.iter_mut().enumerate().take(new).skip(old) {
            *r = self.del_from_free_list(&mut fa, zone, pfn + (1 << o), o);
        }
        drop(fa);
        self.mod_zone_state(
            None,
            nid,
            ZoneStat::NrFreePages,
            -(((1 << new) - (1 << old)) as isize),
        );
        self.count_event(
            None,
            nid,
            VmEvent::PgAlloc,
            ((1 << new) - (1 << old)) as u64,
        );
        p.set_order(new);
        if compound || gfp.contains(Gfp::COMP) {
            self.prep_compound_page(page, new);
        }
        if gfp.contains(Gfp::ZERO) {
            let base = self.page_address(page).as_ptr();
            for (o, &r) in reported.iter().enumerate().take(new).skip(old) {
                if !r {
                    // SAFETY: the taken block is ours now and mapped.
                    unsafe { ptr::write_bytes(base.add(PAGE_SIZE << o), 0, PAGE_SIZE << o) };
                }
            }
        }
        true
    }

    /// Shrinks the allocated block of 2^`old` pages at `page` to 2^`new` pages where it
    /// stands, freeing the upper halves (realloc of a page run to a smaller size).
    ///
    /// # Safety
    /// `page` heads a block of this allocator of order `old`, and the caller gives up
    /// the pages past 2^`new`.
    pub unsafe fn shrink_in_place(
        &self,
        cpu: Option<CpuRef<'_>>,
        page: NonNull<Page>,
        old: usize,
        new: usize,
    ) {
        if new >= old {
            return;
        }
        // SAFETY: the caller's block.
        let p = unsafe { page.as_ref() };
        let compound = {
            // SAFETY: the block's second descriptor, same memmap.
            unsafe { &*page.as_ptr().add(1) }
                .flags()
                .contains(PageFlags::TAIL)
        };
        self.destroy_compound_page(page, old);
        p.set_order(new);
        if compound && new > 0 {
            self.prep_compound_page(page, new);
        }
        for o in new..old {
            // SAFETY: the upper part is a block of order `o` inside ours, aligned to its
            // size; make it look allocated with that order, then free it.
            unsafe {
                let part = NonNull::new_unchecked(page.as_ptr().add(1 << o));
                part.as_ref().set_flags(PageFlags::HEAD);
                part.as_ref().set_order(o);
                self.free_pages(cpu, part, o);
            }
        }
    }

    // ---------------------------------------------------------------------------
    // Bulk.

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
        let high = zone.pcp_high.load(Ordering::Relaxed);
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
                            let batch = zone.pcp_batch.load(Ordering::Relaxed) as usize;
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
                    if zone.pcp_high.load(Ordering::Relaxed) == 0 {
                        self.free_one_page(cpu, zone, page, 0);
                        continue;
                    }
                    let pcp = self.zone_pcp(c, nid);
                    p.set_flags(PageFlags::PCP);
                    p.set_order(0);
                    // SAFETY: we own the area; the page is ours to list.
                    unsafe { pcp.lists()[0].push_head(page.as_ptr()) };
                    pcp.add_count(1);
                    pcp.stat.count(VmEvent::PgFree, 1);
                    touched |= 1 << nid;
                }
                while touched != 0 {
                    let nid = touched.trailing_zeros() as usize;
                    touched &= touched - 1;
                    let zone = &self.zones[nid];
                    let pcp = self.zone_pcp(c, nid);
                    let high = zone.pcp_high.load(Ordering::Relaxed);
                    if pcp.count() > high as usize {
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

    // ---------------------------------------------------------------------------
    // CPU areas and drains.

    /// Gives the caller a CPU area to own: a recycled one from the pool, or a new one
    /// made from the allocator's own pages. `None` when none can be had (the caller
    /// then runs without one, on the zone path).
    pub fn cpu_area_get(&self, nid: usize) -> Option<&CpuArea> {
        if !self.is_initialized() {
            return None;
        }
        let nid = if nid < self.nr_nodes() { nid } else { 0 };
        let area = match self.areas.pop_free() {
            Some(a) => a,
            None => {
                let page = self.alloc_pages_node(
                    None,
                    Gfp::ZERO | Gfp::NOWARN,
                    CPU_AREA_ORDER,
                    Some(nid),
                )?;
                let mem = self.page_address(page);
                // SAFETY: the block is ours for good (areas are never freed), zeroed,
                // page aligned, and CPU_AREA_SIZE long.
                match unsafe { self.areas.register(mem, nid) } {
                    Some(a) => a,
                    None => {
                        // SAFETY: we allocated it just above and nobody saw it.
                        unsafe { self.free_pages(None, page, CPU_AREA_ORDER) };
                        return None;
                    }
                }
            }
        };
        area.set_node(nid);
        self.recalc_pcp_high();
        Some(area)
    }

    /// Flushes an area whose owner goes away (thread exit, CPU offline) and returns it
    /// to the pool: its per-CPU pages go back to the zones, its counter deltas are
    /// folded into the zones.
    ///
    /// # Safety
    /// The caller owns `area` and neither it nor anyone else uses it afterwards unless
    /// it is handed out again by `cpu_area_get`.
    pub unsafe fn cpu_area_put(&self, area: &CpuArea) {
        // SAFETY: the caller owns the area.
        let cpu = unsafe { CpuRef::new(area) };
        self.cpu_area_flush(cpu);
        self.areas.push_free(area);
        self.recalc_pcp_high();
    }

    /// Flushes an area and keeps it (per-CPU mode, where areas stay with their CPU):
    /// the CPU-offline hooks run (the slab layer's CPU slabs and partials, the memcg
    /// stock), per-CPU pages go back to the zones, counter deltas are folded in.
    pub fn cpu_area_flush(&self, cpu: CpuRef<'_>) {
        let hooks = *self.cpu_dead.lock();
        for hook in hooks.iter().flatten() {
            (hook.flush)(hook.data, cpu);
        }
        self.drain_local_pages(cpu);
        for nid in 0..self.nr_nodes() {
            let diffs = self.zone_pcp(cpu, nid).stat.take_diffs();
            for (i, d) in diffs.iter().enumerate().take(NR_ZONE_STAT) {
                self.zones[nid].vm_stat[i].fetch_add(*d as isize, Ordering::Relaxed);
            }
        }
    }

    /// Recomputes `pcp->high` and `pcp->batch` of every zone from its budget and the
    /// number of owned areas (`zone_highsize`).
    pub(crate) fn recalc_pcp_high(&self) {
        let owners = self.areas.nr_owned().max(1);
        for zone in &self.zones[..self.nr_nodes()] {
            let budget = (zone.managed_pages() / 32).max(4 * PCP_HIGH_MAX as usize);
            let mut high = (budget / owners).min(PCP_HIGH_MAX as usize) as u32;
            if high < PCP_MIN_HIGH {
                high = 0;
            }
            let batch = PCP_BATCH.min((high / 4).max(1));
            zone.pcp_batch.store(batch, Ordering::Relaxed);
            zone.pcp_high.store(high, Ordering::Relaxed);
        }
    }

    /// Drains the caller's own per-CPU lists of every zone (`drain_local_pages`).
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
    pub(crate) fn drain_zone_pages(&self, cpu: CpuRef<'_>, zone: &Zone) {
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

    // ---------------------------------------------------------------------------
    // Fork.

    /// `pthread_atfork` prepare: takes every lock of the page allocator in the lock
    /// order, so no other thread is inside a locked section when the process forks.
    pub fn fork_prepare(&self) {
        self.shrinkers.lock_forever();
        self.cpu_dead.lock_forever();
        self.hotplug.lock_forever();
        for zone in &self.zones[..self.nr_nodes()] {
            zone.lock.lock_forever();
        }
        self.areas.free_lock().lock_forever();
    }

    /// `pthread_atfork` parent and child: releases what [`PageAllocator::fork_prepare`]
    /// took.
    ///
    /// # Safety
    /// Called once after `fork_prepare`, by the thread that called it (or its child).
    pub unsafe fn fork_release(&self) {
        // SAFETY: each lock was taken by `fork_prepare` and its guard forgotten.
        unsafe {
            self.areas.free_lock().force_unlock();
            for zone in &self.zones[..self.nr_nodes()] {
                zone.lock.force_unlock();
            }
            self.hotplug.force_unlock();
            self.cpu_dead.force_unlock();
            self.shrinkers.force_unlock();
        }
    }

    // ---------------------------------------------------------------------------
    // Shrinkers.

    /// Registers a shrinker, called (without allocator locks held, from any thread)
    /// when an allocation would otherwise fail. Returns false when the table is full.
    pub fn register_shrinker(&self, shrinker: Shrinker) -> bool {
        let mut table = self.shrinkers.lock();
        match table.iter_mut().find(|s| s.is_none()) {
            Some(slot) => {
                *slot = Some(shrinker);
                true
            }
            None => false,
        }
    }

    /// Registers a CPU-offline callback (see [`CpuDeadHook`]); `flush` may be called
    /// from any thread, with `data`. Returns false when the table is full.
    pub fn register_cpu_dead(&self, hook: CpuDeadHook) -> bool {
        let mut table = self.cpu_dead.lock();
        match table.iter_mut().find(|s| s.is_none()) {
            Some(slot) => {
                *slot = Some(hook);
                true
            }
            None => false,
        }
    }

    /// Runs every shrinker; returns the pages they freed.
    pub fn shrink_caches(&self, nid: usize) -> usize {
        let table = *self.shrinkers.lock();
        table.iter().flatten().map(|s| (s.scan)(s.data, nid)).sum()
    }

    // ---------------------------------------------------------------------------
    // Memory hotplug.

    /// Brings more memory online for node `nid`: an offline section of that node, else
    /// a never-used section. Returns false at the heap bound or the end of the span.
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
            sec.state.load(Ordering::Relaxed) == crate::mmzone::SECTION_OFFLINE
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
        sec.state
            .store(crate::mmzone::SECTION_ONLINE, Ordering::Release);
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
    pub(crate) fn try_offline_section(&self, nr: usize) -> bool {
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
        sec.state
            .store(crate::mmzone::SECTION_OFFLINE, Ordering::Release);
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
    pub(crate) fn nr_used_sections(&self) -> usize {
        self.hotplug.lock().next_section
    }

    /// Sections online now.
    pub fn nr_online_sections(&self) -> usize {
        (0..self.nr_nodes())
            .map(|nid| self.zones[nid].nr_sections.load(Ordering::Relaxed))
            .sum()
    }

    pub(crate) fn pfn_to_page_unchecked(&self, pfn: usize) -> *mut Page {
        self.pfn_to_page_raw(pfn)
    }
}
