//! The page layer: page descriptors, sections and zones, and the buddy page allocator
//! with per-CPU page lists (the kernel's mm/page_alloc.c with include/linux/mmzone.h,
//! mm/memory_hotplug.c and mm/page_reporting.c).
//!
//! ## What lives where
//! | file              | owns                                                             |
//! |-------------------|------------------------------------------------------------------|
//! | `mod.rs`          | [`PageAllocator`], [`Config`], `init`, accessors                 |
//! | `descriptor.rs`   | `struct page` ([`Page`], [`PageFlags`]), [`PageList`], [`PAGE_SIZE`], [`MAX_ORDER`], [`get_order`] |
//! | `mmzone.rs`       | sections ([`MemSection`]), zones ([`Zone`], [`FreeArea`]), watermarks |
//! | `memory_model.rs` | pfn / page / address conversions (`pfn_to_page`, `page_address`, ...) |
//! | `buddy.rs`        | the zone free lists: split (`expand`), merge (`__free_one_page`), listing deferred blocks |
//! | `pcp.rs`          | per-CPU page lists ([`ZonePcp`]): refill, spill, drains, `high` |
//! | `cpu_area.rs`     | CPU areas coming and going: `cpu_area_get`, `cpu_area_flush`, `cpu_area_put` |
//! | `alloc.rs`        | `alloc_pages_node`, the slow path, `free_pages`, `prep_new_page`, compound pages |
//! | `block_growth.rs` | growth net of frees (`NetGrowth`): the page blocks' clock for the slab layer's decay, and the type of the slabs' |
//! | `bulk.rs`         | `alloc_pages_bulk`, `free_pages_bulk`                            |
//! | `resize.rs`       | `grow_in_place`, `shrink_in_place`                               |
//! | `hotplug.rs`      | `add_memory`, onlining (first blocks listed, the rest deferred) and offlining sections |
//! | `reporting.rs`    | free page reporting                                              |
//! | `stat.rs`         | zone counters and events (the page layer's side of [`crate::vmstat`]) |
//! | `report.rs`       | what the page layer prints itself: `warn_alloc` with [`show_free_areas`], `bad_page` |
//! | `hooks.rs`        | shrinkers, CPU-offline hooks, fork prepare/release               |
//!
//! The page layer reads nothing above it: it uses [`crate::percpu`] (CPU areas),
//! [`crate::vmstat`] (counter types), [`crate::printk`] (log output), [`crate::gfp`],
//! [`crate::platform`] and [`crate::sync`]. `show_mem` (reports) reads it.
//!
//! ## The path of a page allocation
//! ```text
//! alloc_pages_node(cpu, gfp, order, nid)                                 alloc.rs
//!   fast:  this CPU area's per_cpu_pages list for (zone, order)          no lock
//!   else:  get_page_from_freelist: zonelist (preferred node first),
//!          watermark check, grow the node (hot-add a section) if low,    hotplug.rs
//!          rmqueue: PCP refill via rmqueue_bulk, or the zone directly    pcp.rs, buddy.rs
//!   slow:  drain per-CPU lists, run shrinkers, retry at the min watermark,
//!          then fail with None and an OOM report (unless __GFP_NOWARN)   report.rs
//! ```
//! A free goes to the owner's per-CPU list of the page's zone; when the list holds
//! more than `high` pages, `free_pcppages_bulk` gives a batch back to the buddy lists,
//! where `__free_one_page` merges each block with its buddy at `pfn ^ (1 << order)`.
//!
//! ## Locks
//! Outermost first, the order in which `fork_prepare` takes them all (where they
//! stand among the other layers' locks: the lock order in lib.rs):
//! 1. the shrinker table, then the CPU-offline hook table (`hooks.rs`); otherwise each
//!    is held only to change or copy its table, never while a hook runs nor with
//!    another lock,
//! 2. `hotplug` (section table changes: online, offline),
//! 3. `zone.lock` (a zone's free lists, its sections' reported counts): one zone at a
//!    time, except in `fork_prepare` (node order),
//! 4. the CPU-area pool lock.
//!
//! A CPU area's per-CPU page lists have no lock: only the area's owner touches them,
//! and a [`CpuRef`] is the proof of ownership. Others ask the owner to drain them
//! through a flag ([`crate::percpu::DRAIN_PAGES`]).
//!
//! ## Contexts
//! Every entry point takes `cpu: Option<CpuRef>`. `Some` is a context that owns a CPU
//! area and may use its per-CPU lists; `None` is a context the platform declares
//! unsafe for them (an interrupt, a thread that has no area or is exiting): it goes to
//! the zone under its lock, as the kernel's `free_unref_page` falls back to
//! `free_one_page` when `pcp_spin_trylock` fails. Both are correct at any time.

mod alloc;
mod block_growth;
pub(crate) use block_growth::NetGrowth;
mod buddy;
mod bulk;
mod cpu_area;
mod descriptor;
mod hooks;
mod hotplug;
mod memory_model;
pub(crate) use memory_model::descriptor_addr;
mod mmzone;
mod pcp;
mod report;
mod reporting;
mod resize;
mod stat;

pub use descriptor::{
    get_order, Page, PageFlags, PageList, MAX_ORDER, NR_ORDERS, PAGE_SHIFT, PAGE_SIZE,
};
pub use hooks::{CpuDeadHook, Shrinker, MAX_CPU_DEAD_HOOKS, MAX_SHRINKERS};
pub use hotplug::ONLINE_LISTED_PAGES;
pub use mmzone::{
    FreeArea, MemSection, Watermark, Zone, MAX_NUMNODES, MAX_SECTIONS, MEMMAP_PAGES,
    PAGES_PER_SECTION, PFN_SECTION_SHIFT, SECTION_MANAGED_PAGES, SECTION_SHIFT, SECTION_SIZE,
};
pub use pcp::{
    ZonePcp, CPU_AREA_CHARGED_LINES, CPU_AREA_CHARGED_LINES_COUNT, CPU_AREA_ZERO_LINE, PCP_BATCH,
    PCP_HIGH_MAX, PCP_MAX_ORDER, PCP_MIN_HIGH, PCP_ORDERS, PCP_THP_BUDGET_FLOOR, PCP_THP_HIGH_MAX,
    PCP_THP_ORDER, REPORT_CHECK_INTERVAL,
};
pub use report::show_free_areas;
pub use reporting::{HOUSEKEEPING_INTERVAL, SMALL_REPORT_MAX};

use crate::percpu::{CpuAreaPool, CpuRef, PerCpuOffsets};
use crate::platform::Platform;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering, SpinLock};
use hooks::Hooks;
use hotplug::Hotplug;
use memory_model::TAG_BYTES;

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
    /// The span's base is null or not aligned to the section size, or the span holds
    /// no page beyond the first section's memmap.
    BadSpan,
    /// `nr_nodes` is 0 or above [`MAX_NUMNODES`], or `report_order` above `MAX_ORDER`.
    BadConfig,
}

/// The words the free fast path reads before the object's CPU line, on a line of their
/// own that only `init` and a section's first online write: the range check and the
/// page-tag table ([`PageAllocator::sheaf_tag`]).
///
/// They live in the allocator, not in the CPU area, so that the tag's load depends on
/// the address alone: the chain from the thread-local word to the area runs beside it
/// and the two meet at the object's CPU line. (A copy in each area's header line, one
/// instruction shorter, put the area's load in front of the tag's: a batch of frees
/// ran 20% slower; BENCHMARKS.md, "The span window back in the allocator".)
///
/// Invariant: every address from the span's base to `tagged_len` bytes on has its
/// page's tag mapped in `table`: a section's part of the table is opened before the
/// section counts in `tagged_len`, which only grows (Release; the reader's Acquire).
/// Without a table (`table` 0) `tagged_len` stays 0 and no address passes.
#[repr(C, align(64))]
pub(crate) struct TagWindow {
    /// The span's base negated (set with it): the range check adds it to the address
    /// (one `lea`) where subtracting the base takes a copy and a `sub`.
    pub(crate) neg_base: AtomicUsize,
    /// `used_len` when there is a tag table, else 0: the bytes whose tags `table` holds.
    pub(crate) tagged_len: AtomicUsize,
    /// The page-tag table's address (0: the platform gave none): four bytes a page of
    /// the span, indexed by pfn, each page's sheaf tag (see `Page::sheaf_tag`).
    pub(crate) table: AtomicUsize,
}

impl TagWindow {
    const fn new() -> Self {
        Self {
            neg_base: AtomicUsize::new(0),
            tagged_len: AtomicUsize::new(0),
            table: AtomicUsize::new(0),
        }
    }
}

/// The page allocator: sections, nodes with their zones, CPU areas.
///
/// It lives as long as anything it handed out (`'static` in practice: a `static`, or
/// leaked). Invariants are those of its parts: [`MemSection`], [`Zone`], [`ZonePcp`],
/// [`CpuAreaPool`], and `Page`'s flag rules.
pub struct PageAllocator<P: Platform> {
    pub(crate) platform: P,
    initialized: AtomicBool,
    /// The span's first byte; pfn 0 is the page there.
    base: AtomicUsize,
    /// What the free fast path reads to find a page's sheaf tag (see [`TagWindow`]).
    pub(crate) window: TagWindow,
    /// Sections the span holds, the last one possibly partial (bounded by
    /// [`MAX_SECTIONS`]).
    nr_span_sections: AtomicUsize,
    /// The span's length in bytes: whole pages, ending inside the last section, at
    /// most `MAX_SECTIONS` sections (`init` clamps it, and `virt_to_page_any` relies on
    /// it to index the section table unchecked).
    span_len: AtomicUsize,
    /// Bytes from the base that sections ever brought online cover (`next_section`
    /// sections, clamped to the span): mapped for good, so a descriptor anywhere in
    /// them can be read, whether its section is online or offline now (an offline
    /// section's memmap reads as free pages or zeros). Only grows, with a release
    /// store after the section is mapped. The range check of the lookups through a
    /// descriptor (`with_used_page`); the free fast path checks the tag window's copy
    /// (`TagWindow::tagged_len`).
    used_len: AtomicUsize,
    nr_nodes: AtomicUsize,
    max_pages: AtomicUsize,
    pub(crate) report_delay_ns: AtomicU64,
    pub(crate) report_order: AtomicUsize,
    /// Sections running with reporting passes deferred
    /// ([`PageAllocator::with_reporting_deferred`]): no pass starts while not 0.
    pub(crate) report_deferred: AtomicUsize,
    pub(crate) sections: [MemSection; MAX_SECTIONS],
    hotplug: SpinLock<Hotplug>,
    pub(crate) zones: [Zone; MAX_NUMNODES],
    pub(crate) areas: CpuAreaPool,
    percpu: PerCpuOffsets,
    hooks: Hooks,
    /// The next node of the interleave policy.
    interleave_next: AtomicUsize,
    /// Live page blocks and their growth (`block_growth.rs`).
    block_growth: NetGrowth,
    /// `warn_alloc`'s rate limit (`nopage_rs`).
    pub(crate) warn_alloc_rs: crate::printk::RateLimit,
}

impl<P: Platform> PageAllocator<P> {
    /// A page allocator with no memory yet; call [`PageAllocator::init`] before use.
    pub const fn new(platform: P) -> Self {
        Self {
            platform,
            initialized: AtomicBool::new(false),
            base: AtomicUsize::new(0),
            window: TagWindow::new(),
            nr_span_sections: AtomicUsize::new(0),
            span_len: AtomicUsize::new(0),
            used_len: AtomicUsize::new(0),
            nr_nodes: AtomicUsize::new(1),
            max_pages: AtomicUsize::new(0),
            report_delay_ns: AtomicU64::new(1_000_000_000),
            report_order: AtomicUsize::new(9),
            report_deferred: AtomicUsize::new(0),
            sections: [const { MemSection::new() }; MAX_SECTIONS],
            hotplug: SpinLock::new(Hotplug::new()),
            zones: Zone::all(),
            areas: CpuAreaPool::new(),
            percpu: PerCpuOffsets::new(pcp::PERCPU_DYNAMIC_START),
            hooks: Hooks::new(),
            interleave_next: AtomicUsize::new(0),
            block_growth: NetGrowth::new(),
            warn_alloc_rs: crate::printk::RateLimit::new(
                crate::printk::DEFAULT_RATELIMIT_INTERVAL_NS,
                crate::printk::DEFAULT_RATELIMIT_BURST,
            ),
        }
    }

    /// Gives the allocator its span of address space: `len` bytes at `base`. Memory in
    /// it comes online section by section as nodes need it (through
    /// [`Platform::section_online`]); nothing in it is touched before that.
    ///
    /// What the span must be:
    /// - `base` aligned to [`SECTION_SIZE`] (128 MiB): `page_to_pfn` finds a
    ///   descriptor's section by masking its address, so this cannot be relaxed.
    /// - `len` any length above [`MEMMAP_PAGES`] pages (2 MiB) plus one page; it is
    ///   rounded down to whole pages and to at most [`MAX_SECTIONS`] sections. It need
    ///   not be a multiple of the section size: the last section may be partial (its
    ///   first 2 MiB are its memmap, the rest is managed), and a last partial section
    ///   of no more than its memmap is left unused. A span of 4 MiB manages 512 pages.
    /// - Its contents need not be anything at `init`: the platform makes each section
    ///   read as zero when it brings it online (memory that was never written, like a
    ///   `static` in `.bss` or a fresh anonymous mapping, already does).
    ///
    /// The allocator's own metadata (memmaps, slab and per-CPU structures) comes out of
    /// the span, so the managed pages are all the memory there is.
    ///
    /// # Safety
    /// The span is reserved for this allocator alone for as long as it lives, and no
    /// other thread uses the allocator before `init` returns.
    pub unsafe fn init(&self, base: *mut u8, len: usize, config: Config) -> Result<(), InitError> {
        if self.initialized.load(Ordering::Acquire) {
            return Err(InitError::AlreadyInitialized);
        }
        // Whole pages, whole sections at most MAX_SECTIONS, and no last partial section
        // that would hold its memmap only.
        let max_len = MAX_SECTIONS.saturating_mul(SECTION_SIZE);
        let mut len = len.min(max_len) & !(PAGE_SIZE - 1);
        if len & (SECTION_SIZE - 1) <= MEMMAP_PAGES << PAGE_SHIFT {
            len &= !(SECTION_SIZE - 1);
        }
        if base.is_null() || (base as usize) & (SECTION_SIZE - 1) != 0 || len == 0 {
            return Err(InitError::BadSpan);
        }
        if config.nr_nodes == 0 || config.nr_nodes > MAX_NUMNODES || config.report_order > MAX_ORDER
        {
            return Err(InitError::BadConfig);
        }
        self.base.store(base as usize, Ordering::Relaxed);
        self.window
            .neg_base
            .store((base as usize).wrapping_neg(), Ordering::Relaxed);
        self.nr_span_sections
            .store(len.div_ceil(SECTION_SIZE), Ordering::Relaxed);
        self.span_len.store(len, Ordering::Relaxed);
        let table_len = ((len >> PAGE_SHIFT) * TAG_BYTES).next_multiple_of(PAGE_SIZE);
        // SAFETY: once, before the allocator is used (this function's contract).
        let table = unsafe { self.platform.reserve_tag_table(table_len) };
        self.window.table.store(table as usize, Ordering::Relaxed);
        self.nr_nodes.store(config.nr_nodes, Ordering::Relaxed);
        self.max_pages.store(config.max_pages, Ordering::Relaxed);
        self.report_delay_ns
            .store(config.report_delay_ns, Ordering::Relaxed);
        self.report_order
            .store(config.report_order, Ordering::Relaxed);
        self.initialized.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether [`PageAllocator::init`] has run.
    #[inline]
    pub fn is_initialized(&self) -> bool {
        self.initialized.load(Ordering::Acquire)
    }

    /// The platform.
    #[inline]
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// Asks the owner of every owned CPU area to do `work` (`DRAIN_*`) at its next
    /// call; an orphaned area ([`Platform::area_orphaned`]: a fork's child) has no
    /// owner to do it and is left unwritten (each write would copy a page).
    pub(crate) fn request_all_areas(&self, work: u32) {
        self.areas
            .request_all(work, |a| self.platform.area_orphaned(a));
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

    /// The node a context allocates from by default: its CPU area's, else the one the
    /// platform names (node 0 if that is past the configured nodes).
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
}

#[cfg(test)]
pub(crate) mod test_platform;
