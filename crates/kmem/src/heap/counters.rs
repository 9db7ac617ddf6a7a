//! Statistics that cost (almost) nothing to read: `kmem::stats::{allocated, active,
//! resident, mapped, metadata, retained}` and all six at once, consistent with each
//! other, with [`counters`]. Exported to C as `kmem_stats_get` (libkmem.so).
//!
//! jemalloc-ctl's `stats` figures, defined for kmem (bytes; `P` = [`PAGE_SIZE`]):
//!
//! | figure      | what it counts |
//! |-------------|----------------|
//! | `allocated` | handed to the program: slab objects in use × object size (slabinfo's `active_objs` × `objsize`, so objects cached for reuse — in sheaves and barns, or on CPU freelists — count as in use, as in /proc/slabinfo), plus page blocks (large kmalloc, `alloc_pages`), plus live huge mappings |
//! | `active`    | pages in use for the program: whole slabs, page blocks, live huge mappings — the page allocator's allocated pages minus the CPU areas they hold (metadata), plus live huge bytes |
//! | `metadata`  | kmem's own memory: the memmaps of online sections (64 bytes of `struct page` per page) and the CPU areas (64 KiB each; in per-CPU rseq mode made in a region of their own rather than from the page allocator). Slab metadata lives in the memmap (SLUB keeps it in `struct page`), huge-mapping descriptors are small kmalloc objects (counted in `allocated`) |
//! | `resident`  | what kmem holds without having given it back: `active` + `metadata` + free pages not reported (buddy lists and per-CPU lists) + freed huge mappings kept for reuse. An upper bound of the RSS kmem causes (a memmap page never touched is not faulted in) |
//! | `retained`  | free pages given back to the OS (reported, or never touched since their section came online) but still mapped for reuse: jemalloc's `retained` |
//! | `mapped`    | address space mapped: online sections (128 MiB each) + live and cached huge mappings + per-CPU rseq mode's region of CPU areas (64 MiB) |
//!
//! Invariants (those [`counters`] guarantees, as one read):
//! `allocated ≤ active ≤ resident ≤ mapped`, `metadata ≤ resident`, and
//! `resident + retained ≤ mapped` (equal unless a section is only partly managed
//! under `KMEM_MAX`: its unmanaged tail is mapped, neither resident nor retained; or
//! in per-CPU rseq mode, whose region of CPU areas is mapped whole).
//!
//! Cost: none of them allocates. `active`, `resident`, `mapped`, `metadata` and
//! `retained` read atomics only: the zones' counters plus every CPU area's per-CPU
//! delta and per-CPU list length (as `zone_page_state_snapshot` does), the section
//! counts and the huge-mapping totals; no lock. `allocated` also needs the number of
//! slab objects in use, which SLUB does not keep as a counter: it walks the caches
//! (under the cache list lock) and counts the free objects on each cache's partial
//! lists (under each node's list lock, one at a time, as `/proc/slabinfo` does). So
//! it is not for signal handlers, and costs a walk of the partial lists.
//!
//! Each figure is exact when nothing allocates or frees meanwhile; under concurrent
//! use it is a sum of values read at slightly different moments.

use super::heap;
use kmem_core::page::{MEMMAP_PAGES, SECTION_SIZE};
use kmem_core::percpu::CPU_AREA_SIZE;
use kmem_core::vmstat::ZoneStat;
use kmem_core::PAGE_SIZE;

/// The six figures, read together (see the module doc for what each counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Counters {
    /// Bytes handed to the program.
    pub allocated: usize,
    /// Bytes of pages in use for the program (≥ `allocated`).
    pub active: usize,
    /// Bytes kmem holds without having given them back (≥ `active`, ≥ `metadata`).
    pub resident: usize,
    /// Bytes of address space mapped (≥ `resident` + `retained`).
    pub mapped: usize,
    /// Bytes of kmem's own metadata (memmaps, CPU areas).
    pub metadata: usize,
    /// Bytes free and given back to the OS, still mapped.
    pub retained: usize,
}

/// The page-level figures, lock-free.
#[derive(Clone, Copy, Debug)]
struct Pages {
    /// Pages managed by the zones.
    managed: usize,
    /// Free in the buddy lists (exact: zone counter plus per-CPU deltas).
    free: usize,
    /// Of those, reported (given back) or never touched.
    reported: usize,
    /// On per-CPU lists (free, resident).
    pcp: usize,
    /// Online sections.
    sections: usize,
    /// CPU areas ever made (never freed).
    cpu_areas: usize,
    /// The length of per-CPU rseq mode's region of CPU areas (`percpu::CPU_REGION`;
    /// 0: not mapped). Where it is mapped, every area is in it and none comes from
    /// the buddy lists.
    region_len: usize,
    /// Live huge mappings' bytes.
    huge_live: usize,
    /// Freed huge mappings kept for reuse.
    huge_cached: usize,
}

fn read_pages() -> Pages {
    let h = heap();
    let pa = h.page_allocator();
    let region = super::percpu::cpu_region_range();
    let mut p = Pages {
        managed: 0,
        free: 0,
        reported: 0,
        pcp: 0,
        sections: 0,
        cpu_areas: pa.cpu_areas().nr_areas(),
        region_len: region.1 - region.0,
        huge_live: h.huge_totals().1,
        huge_cached: h.huge_cached_bytes(),
    };
    for nid in 0..pa.nr_nodes() {
        let z = pa.zone(nid);
        p.managed += z.managed_pages();
        p.sections += z.nr_sections();
        p.free += pa
            .zone_page_state_snapshot(nid, ZoneStat::NrFreePages)
            .max(0) as usize;
        p.reported += pa
            .zone_page_state_snapshot(nid, ZoneStat::NrFreeReported)
            .max(0) as usize;
        p.pcp += pa.nr_pcp_pages(nid);
    }
    p.reported = p.reported.min(p.free);
    p
}

impl Pages {
    fn metadata(&self) -> usize {
        (self.sections * MEMMAP_PAGES) * PAGE_SIZE + self.cpu_areas * CPU_AREA_SIZE
    }

    /// Pages allocated from the zones, CPU areas included.
    fn used(&self) -> usize {
        self.managed.saturating_sub(self.free + self.pcp)
    }

    fn active(&self) -> usize {
        // The areas the zones' pages hold are metadata, not the program's.
        let zone_areas = if self.region_len == 0 {
            self.cpu_areas
        } else {
            0
        };
        (self.used() * PAGE_SIZE).saturating_sub(zone_areas * CPU_AREA_SIZE) + self.huge_live
    }

    fn retained(&self) -> usize {
        self.reported * PAGE_SIZE
    }

    fn resident(&self) -> usize {
        self.active()
            + self.metadata()
            + (self.free - self.reported + self.pcp) * PAGE_SIZE
            + self.huge_cached
    }

    fn mapped(&self) -> usize {
        let m = self.sections * SECTION_SIZE + self.huge_live + self.huge_cached + self.region_len;
        // A racing read (a section coming online between the zone reads) must not
        // break the invariant.
        m.max(self.resident() + self.retained())
    }
}

/// Bytes of slabs and, of those, bytes of objects in use, over every cache (walks the
/// caches and their partial lists: see the module doc).
fn slab_bytes() -> (usize, usize) {
    let h = heap();
    let kmem = h.kmem();
    let (mut slabs, mut in_use) = (0, 0);
    kmem.caches().for_each(|s| {
        let r = kmem.slub().slab_row(s);
        slabs += r.num_slabs * r.pagesperslab * PAGE_SIZE;
        in_use += r.active_objs * r.objsize;
    });
    (slabs, in_use)
}

/// All six figures from one read, the invariants of the module doc holding.
///
/// ```
/// let before = kmem::stats::counters();
/// // Above the largest kmalloc cache: a page block, given back to the pages when freed.
/// let big = kmem::heap().kmalloc(2 << 20, kmem::Gfp::KERNEL).expect("2 MiB");
/// let c = kmem::stats::counters();
/// assert!(c.allocated >= before.allocated + (2 << 20));
/// assert!(c.allocated <= c.active && c.active <= c.resident && c.resident <= c.mapped);
/// // SAFETY: ours, freed once.
/// unsafe { kmem::heap().kfree(big.as_ptr()) };
/// assert!(kmem::stats::allocated() < c.allocated);
/// ```
pub fn counters() -> Counters {
    let (slabs, in_use) = slab_bytes();
    let p = read_pages();
    let active = p.active();
    Counters {
        allocated: (active.saturating_sub(slabs) + in_use).min(active),
        active,
        resident: p.resident(),
        mapped: p.mapped(),
        metadata: p.metadata(),
        retained: p.retained(),
    }
}

/// Bytes handed to the program: slab objects in use × their size, page blocks, live
/// huge mappings. Walks the slab caches (takes their list locks briefly). ≤ `active()`.
pub fn allocated() -> usize {
    counters().allocated
}

/// Bytes of pages in use for the program: slabs, page blocks, live huge mappings
/// (`allocated()` plus free space inside slabs). Lock-free.
pub fn active() -> usize {
    read_pages().active()
}

/// Bytes kmem holds and has not given back: `active()` + `metadata()` + free pages
/// not yet reported + freed huge mappings kept for reuse. Lock-free.
pub fn resident() -> usize {
    read_pages().resident()
}

/// Bytes of address space mapped: online sections, huge mappings (live and cached)
/// and per-CPU rseq mode's region of CPU areas; ≥ `resident()` + `retained()`.
/// Lock-free.
pub fn mapped() -> usize {
    read_pages().mapped()
}

/// Bytes of kmem's own metadata: section memmaps and CPU areas. Lock-free.
pub fn metadata() -> usize {
    read_pages().metadata()
}

/// Bytes free and given back to the OS (reported, or never touched) but still mapped
/// for reuse. Lock-free.
pub fn retained() -> usize {
    read_pages().retained()
}
