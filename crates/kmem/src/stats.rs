//! `kmem::stats()`: a snapshot of the heap's state, whose Display prints the kernel's
//! text formats (/proc/slabinfo, /proc/buddyinfo, /proc/vmstat); with the `serde`
//! feature its types implement `serde::Serialize`.
//!
//! Taking a snapshot allocates (it builds vectors and strings), so it is for programs
//! and tools, not for paths that may run inside malloc.
//!
//! Owns no state; no lock of its own (the core's walks take the slab and zone locks
//! they need, one cache or zone at a time, so a snapshot is not one instant).
//!
//! The figures that cost nothing to read (no allocation; lock-free but for
//! [`allocated`]) are here too: [`allocated`], [`active`], [`resident`], [`mapped`],
//! [`metadata`], [`retained`], or all six at once with [`counters`] (defined in
//! `counters.rs`).

pub use crate::heap::counters::{
    active, allocated, counters, mapped, metadata, resident, retained, Counters,
};

use crate::heap::heap;
use kmem_core::show_mem::write_buddyinfo_line;
use kmem_core::slab::SlubStat;
use kmem_core::slab::{write_slabinfo_header, write_slabinfo_row};
use kmem_core::vmstat::{VmEvent, ZoneStat};
use std::collections::BTreeMap;
use std::fmt;

/// The state of the heap at one moment.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Stats {
    /// Every slab cache: slabinfo figures and SLUB statistics.
    pub caches: Vec<CacheStats>,
    /// Every zone (one per node).
    pub zones: Vec<ZoneStats>,
    /// /proc/vmstat: zone counters summed over zones, then events.
    pub vmstat: Vec<VmstatItem>,
    /// The process's resident memory (bytes).
    pub rss_bytes: u64,
    /// Live huge (directly mapped) allocations.
    pub huge_allocations: u64,
    /// Bytes those map.
    pub huge_bytes: u64,
    /// Memory cgroups: the root, then every online group.
    pub memcgs: Vec<crate::memcg::MemcgStats>,
}

/// One cache.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CacheStats {
    /// The cache's name.
    pub name: String,
    /// Objects allocated or held by CPU areas (slabinfo's `active_objs`).
    pub active_objs: u64,
    /// Objects in all slabs.
    pub num_objs: u64,
    /// Bytes per object, metadata and alignment included.
    pub objsize: u64,
    /// Objects per slab.
    pub objperslab: u64,
    /// Pages per slab.
    pub pagesperslab: u64,
    /// Slabs.
    pub num_slabs: u64,
    /// SLUB stat items (`alloc_fastpath` …), summed over CPU areas.
    pub stats: BTreeMap<String, u64>,
}

/// One zone.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ZoneStats {
    /// The zone's node.
    pub node: usize,
    /// The zone's name (`Normal`).
    pub zone: String,
    /// Free pages in the buddy lists.
    pub free_pages: u64,
    /// Pages the zone manages.
    pub managed_pages: u64,
    /// Free pages given back to the OS (free page reporting).
    pub reported_pages: u64,
    /// The `min` watermark, in pages.
    pub min: u64,
    /// The `low` watermark, in pages.
    pub low: u64,
    /// The `high` watermark, in pages.
    pub high: u64,
    /// A per-CPU list's `high` (most pages it keeps).
    pub pcp_high: u64,
    /// A per-CPU list's `batch` (pages moved at once).
    pub pcp_batch: u64,
    /// Pages on all per-CPU lists of this zone.
    pub pcp_pages: u64,
    /// Free blocks per order (buddyinfo).
    pub buddyinfo: Vec<u64>,
    /// NUMA events of this zone: numa_hit, numa_miss, numa_foreign,
    /// numa_interleave, numa_local, numa_other.
    pub numa: BTreeMap<String, u64>,
}

/// One /proc/vmstat line.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct VmstatItem {
    /// The counter's name, as /proc/vmstat prints it.
    pub name: String,
    /// Its value.
    pub value: i64,
}

/// Takes a snapshot of the process heap.
pub fn stats() -> Stats {
    let h = heap();
    let kmem = h.kmem();
    let pa = h.page_allocator();
    let mut caches = Vec::new();
    kmem.caches().for_each(|s| {
        let r = kmem.slub().slab_row(s);
        let stats = SlubStat::ALL
            .iter()
            .map(|&i| (i.name().to_string(), s.stat_sum(pa.cpu_areas().iter(), i)))
            .collect();
        caches.push(CacheStats {
            name: r.name().to_string(),
            active_objs: r.active_objs as u64,
            num_objs: r.num_objs as u64,
            objsize: r.objsize as u64,
            objperslab: r.objperslab as u64,
            pagesperslab: r.pagesperslab as u64,
            num_slabs: r.num_slabs as u64,
            stats,
        });
    });
    let zones = (0..pa.nr_nodes())
        .map(|nid| {
            let z = pa.zone(nid);
            let numa = [
                VmEvent::NumaHit,
                VmEvent::NumaMiss,
                VmEvent::NumaForeign,
                VmEvent::NumaInterleave,
                VmEvent::NumaLocal,
                VmEvent::NumaOther,
            ]
            .iter()
            .map(|&e| (e.name().to_string(), pa.zone_event(nid, e)))
            .collect();
            use kmem_core::page::Watermark;
            ZoneStats {
                node: nid,
                zone: z.name().to_string(),
                free_pages: pa
                    .zone_page_state_snapshot(nid, ZoneStat::NrFreePages)
                    .max(0) as u64,
                managed_pages: z.managed_pages() as u64,
                reported_pages: pa
                    .zone_page_state_snapshot(nid, ZoneStat::NrFreeReported)
                    .max(0) as u64,
                min: z.watermark(Watermark::Min) as u64,
                low: z.watermark(Watermark::Low) as u64,
                high: z.watermark(Watermark::High) as u64,
                pcp_high: z.pcp_high() as u64,
                pcp_batch: z.pcp_batch() as u64,
                pcp_pages: pa.nr_pcp_pages(nid) as u64,
                buddyinfo: pa.free_area_counts(nid).iter().map(|&n| n as u64).collect(),
                numa,
            }
        })
        .collect();
    let mut vmstat: Vec<VmstatItem> = ZoneStat::ALL
        .iter()
        .map(|&i| VmstatItem {
            name: i.name().to_string(),
            value: (0..pa.nr_nodes())
                .map(|n| pa.zone_page_state_snapshot(n, i) as i64)
                .sum(),
        })
        .collect();
    vmstat.extend(VmEvent::ALL.iter().map(|&e| VmstatItem {
        name: e.name().to_string(),
        value: pa.event(e) as i64,
    }));
    let (huge_allocations, huge_bytes) = h.huge_totals();
    Stats {
        caches,
        zones,
        vmstat,
        rss_bytes: crate::platform::linux::rss_bytes() as u64,
        huge_allocations: huge_allocations as u64,
        huge_bytes: huge_bytes as u64,
        memcgs: crate::memcg::all_stats(),
    }
}

impl CacheStats {
    /// Bytes of its slabs.
    pub fn bytes(&self) -> u64 {
        self.num_slabs * self.pagesperslab * kmem_core::PAGE_SIZE as u64
    }
}

impl fmt::Display for CacheStats {
    /// The cache's /proc/slabinfo row.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let row = kmem_core::slab::SlabRow::new(
            &self.name,
            self.active_objs as usize,
            self.num_objs as usize,
            self.objsize as usize,
            self.objperslab as usize,
            self.pagesperslab as usize,
            self.num_slabs as usize,
        );
        write_slabinfo_row(f, &row)
    }
}

impl fmt::Display for ZoneStats {
    /// The zone's /proc/buddyinfo line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts: Vec<usize> = self.buddyinfo.iter().map(|&n| n as usize).collect();
        write_buddyinfo_line(f, self.node, &self.zone, &counts)
    }
}

impl fmt::Display for Stats {
    /// /proc/slabinfo, a blank line, /proc/buddyinfo, a blank line, /proc/vmstat, then
    /// each memory cgroup's files (after a blank line each; the root's are left out).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_slabinfo_header(f)?;
        for c in &self.caches {
            write!(f, "{c}")?;
        }
        writeln!(f)?;
        for z in &self.zones {
            write!(f, "{z}")?;
        }
        writeln!(f)?;
        for v in &self.vmstat {
            writeln!(f, "{} {}", v.name, v.value)?;
        }
        for m in self.memcgs.iter().filter(|m| m.parent.is_some()) {
            writeln!(f)?;
            write!(f, "{m}")?;
        }
        Ok(())
    }
}
