//! Nodes, zones and memory sections: the memory model.
//!
//! ## Sections
//! The allocator owns one span of address space, its base aligned to [`SECTION_SIZE`]
//! (128 MiB); its length need not be a multiple of it (the last section may be
//! partial: its memmap, then as many pages as the span holds). Memory comes online one
//! section at a time (`add_memory`, SPARSEMEM's unit). A section's first [`MEMMAP_PAGES`] pages hold its memmap — one 64-byte
//! [`Page`] for every page of the section — the way memory hotplug places it with
//! `memmap_on_memory`; the rest are managed by the buddy allocator. So the allocator's
//! own metadata comes from the memory it manages, and `pfn_to_page` / `page_to_pfn` /
//! `virt_to_page` / `page_address` are a few instructions of arithmetic
//! (`memory_model.rs`).
//!
//! ```text
//!  span base                       section 1
//!  |<----------------- 128 MiB ----------------->|<--- ...
//!  [memmap 2 MiB][ managed pages: buddy blocks ...]
//! ```
//!
//! The first descriptor of a memmap describes the memmap's own first page, which is
//! never managed; its `private` word holds the address of the section's part of the
//! page-tag table (`memory_model.rs`), set when the section comes online.
//!
//! ## Zones
//! One zone (`Normal`) per node. A zone's free blocks hang on `free_area[order]`,
//! protected by the zone lock, which also covers the sections' reported counts. The
//! hotplug lock (section state changes) is taken outside it; see the lock order in
//! lib.rs. CPU areas' per-CPU lists are not locked: only their owner touches them.

use super::descriptor::{Page, PageList, NR_ORDERS, PAGE_SHIFT};
use crate::sync::{AtomicIsize, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering, SpinLock};
use crate::vmstat::{NR_VM_EVENTS, NR_ZONE_STAT};

/// log2 of the section size.
pub const SECTION_SHIFT: usize = 27;
/// Section size: 128 MiB.
pub const SECTION_SIZE: usize = 1 << SECTION_SHIFT;
/// Pages in one section.
pub const PAGES_PER_SECTION: usize = SECTION_SIZE >> PAGE_SHIFT;
/// log2 of [`PAGES_PER_SECTION`].
pub const PFN_SECTION_SHIFT: usize = SECTION_SHIFT - PAGE_SHIFT;
/// Pages at the start of each section that hold its memmap.
pub const MEMMAP_PAGES: usize = (PAGES_PER_SECTION * core::mem::size_of::<Page>()) >> PAGE_SHIFT;
/// Pages of a section that the buddy allocator can manage.
pub const SECTION_MANAGED_PAGES: usize = PAGES_PER_SECTION - MEMMAP_PAGES;
/// Most sections the span may hold (1 TiB of address space).
pub const MAX_SECTIONS: usize = 8192;
/// Most nodes (`MAX_NUMNODES`).
pub const MAX_NUMNODES: usize = 16;

/// Section state: never brought online.
pub(super) const SECTION_ABSENT: u8 = 0;
/// Section state: online, its pages in its node's zone.
pub(super) const SECTION_ONLINE: u8 = 1;
/// Section state: offline after all its pages were free and reported; its memmap is
/// discarded; it may be brought online again.
pub(super) const SECTION_OFFLINE: u8 = 2;

/// One entry of the section table (`struct mem_section`).
///
/// Invariants: while `state` is `SECTION_ONLINE`, the managed pages are pfn offsets
/// `MEMMAP_PAGES .. MEMMAP_PAGES + nr_managed` of the section and belong to node
/// `node`'s zone; `nr_reported` (changed under that zone's lock) counts those of them
/// that are free and reported.
pub struct MemSection {
    pub(super) state: AtomicU8,
    pub(super) node: AtomicU8,
    /// Whether the memmap reads as zero (fresh or discarded) and need not be cleared
    /// when the section comes online.
    pub(super) memmap_zero: AtomicU8,
    pub(super) nr_managed: AtomicU32,
    pub(super) nr_reported: AtomicU32,
}

impl MemSection {
    pub(super) const fn new() -> Self {
        Self {
            state: AtomicU8::new(SECTION_ABSENT),
            node: AtomicU8::new(0),
            memmap_zero: AtomicU8::new(1),
            nr_managed: AtomicU32::new(0),
            nr_reported: AtomicU32::new(0),
        }
    }
    /// Whether the section is online.
    #[inline]
    pub fn online(&self) -> bool {
        self.state.load(Ordering::Acquire) == SECTION_ONLINE
    }
}

/// Watermark indices (`enum zone_watermarks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watermark {
    /// Below this only `__GFP_HIGH` allocations succeed.
    Min = 0,
    /// Below this the allocator grows the node or falls back to other nodes.
    Low = 1,
    /// Comfortable.
    High = 2,
}

/// The free lists of a zone (`zone->free_area`), under the zone lock.
pub struct FreeArea {
    /// `free_area[order]`: free blocks of 2^order pages; recently freed (resident)
    /// blocks at the head, reported blocks at the tail.
    pub(super) lists: [PageList; NR_ORDERS],
    /// Free pages `deferred.0..deferred.1` of one section of the zone that are not
    /// listed yet (the kernel's deferred struct page init): a section coming online
    /// lists its first blocks only, and the rest are listed a block at a time when the
    /// lists run out (`buddy.rs`, `grow_deferred`). They count as free and reported
    /// (never touched); their descriptors stay as the memmap was (zero), so a process
    /// that uses a few MiB writes a few pages of the memmap, not one for each of the
    /// section's 32 blocks. Listed a block at a time, the largest aligned block at
    /// `deferred.0` that fits (`buddy.rs`, `largest_block`); empty when equal.
    pub(super) deferred: (usize, usize),
}

/// A zone: the pages of one node (`struct zone`).
pub struct Zone {
    pub(super) nid: AtomicU32,
    pub(super) lock: SpinLock<FreeArea>,
    /// Pages managed by the buddy allocator (online sections' managed pages).
    pub(super) managed: AtomicUsize,
    /// Online sections of this zone.
    pub(super) nr_sections: AtomicUsize,
    pub(super) watermark: [AtomicUsize; 3],
    /// Zone state counters, without the per-CPU deltas.
    pub(super) vm_stat: [AtomicIsize; NR_ZONE_STAT],
    /// Events counted by contexts that have no CPU area.
    pub(crate) events: [AtomicU64; NR_VM_EVENTS],
    /// Per-CPU list limit for each CPU area now (`pcp->high`), 0 = lists disabled.
    pub(super) pcp_high: AtomicU32,
    /// Per-CPU list refill/spill batch (`pcp->batch`).
    pub(super) pcp_batch: AtomicU32,
    /// Pageblock-order blocks each CPU area may keep on its list now, 0 = that list
    /// off (`pcp.rs`, "Pageblocks").
    pub(super) pcp_thp_high: AtomicU32,
    /// A free created an unreported block of reporting order.
    pub(super) report_pending: AtomicU8,
    /// When free page reporting last ran (ns).
    pub(super) last_report_ns: AtomicU64,
}

impl Zone {
    pub(super) const fn new(nid: u32) -> Self {
        Self {
            nid: AtomicU32::new(nid),
            lock: SpinLock::new(FreeArea {
                lists: [const { PageList::new() }; NR_ORDERS],
                deferred: (0, 0),
            }),
            managed: AtomicUsize::new(0),
            nr_sections: AtomicUsize::new(0),
            watermark: [const { AtomicUsize::new(0) }; 3],
            vm_stat: [const { AtomicIsize::new(0) }; NR_ZONE_STAT],
            events: [const { AtomicU64::new(0) }; NR_VM_EVENTS],
            pcp_high: AtomicU32::new(0),
            pcp_batch: AtomicU32::new(1),
            pcp_thp_high: AtomicU32::new(0),
            report_pending: AtomicU8::new(0),
            last_report_ns: AtomicU64::new(0),
        }
    }
    /// Every node's zone, each with its node id from the start (a `const` for the page
    /// allocator's initialiser), so that the initialisation writes no zone's page: on
    /// one node, the other fifteen (two pages) are never touched.
    pub(super) const fn all() -> [Self; MAX_NUMNODES] {
        let mut zones = [const { core::mem::MaybeUninit::<Self>::uninit() }; MAX_NUMNODES];
        let mut nid = 0;
        while nid < MAX_NUMNODES {
            zones[nid] = core::mem::MaybeUninit::new(Self::new(nid as u32));
            nid += 1;
        }
        // SAFETY: every element was written above; `MaybeUninit<Zone>` has `Zone`'s
        // layout, and so the arrays have the same layout too.
        unsafe {
            core::mem::transmute::<[core::mem::MaybeUninit<Self>; MAX_NUMNODES], [Self; MAX_NUMNODES]>(
                zones,
            )
        }
    }

    /// The node this zone belongs to.
    #[inline]
    pub fn nid(&self) -> usize {
        self.nid.load(Ordering::Relaxed) as usize
    }
    /// Pages managed by the zone.
    #[inline]
    pub fn managed_pages(&self) -> usize {
        self.managed.load(Ordering::Relaxed)
    }
    /// The per-CPU list limit each CPU area has now (`pcp->high`); 0 = lists off.
    #[inline]
    pub fn pcp_high(&self) -> u32 {
        self.pcp_high.load(Ordering::Relaxed)
    }
    /// The per-CPU refill/spill batch now (`pcp->batch`).
    #[inline]
    pub fn pcp_batch(&self) -> u32 {
        self.pcp_batch.load(Ordering::Relaxed)
    }
    /// The pageblock-order blocks each CPU area may keep on its list now; 0 = that
    /// list off.
    #[inline]
    pub fn pcp_thp_high(&self) -> u32 {
        self.pcp_thp_high.load(Ordering::Relaxed)
    }
    /// Online sections of this zone.
    #[inline]
    pub fn nr_sections(&self) -> usize {
        self.nr_sections.load(Ordering::Relaxed)
    }
    /// A watermark in pages.
    #[inline]
    pub fn watermark(&self, w: Watermark) -> usize {
        self.watermark[w as usize].load(Ordering::Relaxed)
    }
    /// The zone's name.
    pub fn name(&self) -> &'static str {
        "Normal"
    }
    /// Recomputes the watermarks from the managed page count, as the kernel derives
    /// them from `min_free_kbytes` (`4 * sqrt(lowmem_kbytes)`): min, then low and high a
    /// quarter and a half above it.
    pub(super) fn setup_watermarks(&self) {
        let managed = self.managed_pages();
        let kbytes = managed * 4;
        let min_kb = isqrt(kbytes * 16).clamp(128, 65536);
        let min = (min_kb / 4).min(managed / 4);
        self.watermark[0].store(min, Ordering::Relaxed);
        self.watermark[1].store(min + min / 4, Ordering::Relaxed);
        self.watermark[2].store(min + min / 2, Ordering::Relaxed);
    }
}

fn isqrt(n: usize) -> usize {
    if n < 2 {
        return n;
    }
    let mut x = n;
    let mut y = x.div_ceil(2);
    while y < x {
        x = y;
        y = (x + n / x) / 2;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memmap_fits_its_section() {
        assert_eq!(MEMMAP_PAGES, 512);
        assert_eq!(SECTION_MANAGED_PAGES, 32256);
        assert_eq!(isqrt(16), 4);
        assert_eq!(isqrt(17), 4);
        assert_eq!(isqrt(1 << 20), 1024);
    }

    #[test]
    fn every_zone_knows_its_node_from_the_start() {
        let zones = Zone::all();
        for (nid, z) in zones.iter().enumerate() {
            assert_eq!(z.nid(), nid);
            assert_eq!(z.managed.load(Ordering::Relaxed), 0);
            assert_eq!(z.pcp_batch.load(Ordering::Relaxed), 1);
        }
    }

    #[test]
    fn watermarks_grow_with_the_zone() {
        let z = Zone::new(0);
        z.managed.store(SECTION_MANAGED_PAGES, Ordering::Relaxed);
        z.setup_watermarks();
        let (min, low, high) = (
            z.watermark(Watermark::Min),
            z.watermark(Watermark::Low),
            z.watermark(Watermark::High),
        );
        assert!(min > 0 && min < low && low < high);
        z.managed
            .store(SECTION_MANAGED_PAGES * 64, Ordering::Relaxed);
        z.setup_watermarks();
        assert!(z.watermark(Watermark::Min) > min);
    }
}
