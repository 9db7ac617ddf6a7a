//! Statistics: zone counters with per-CPU deltas, and per-CPU event counters.
//!
//! Two kinds, as in the kernel's mm/vmstat.c:
//! - *Zone state items* ([`ZoneStat`], e.g. `NR_FREE_PAGES`) must be exact when read.
//!   Writers add to a small per-CPU delta and fold it into the zone's atomic counter
//!   when it passes [`STAT_THRESHOLD`]; a snapshot read adds every CPU area's delta.
//! - *Events* ([`VmEvent`], e.g. `pgalloc`, `numa_hit`) only ever grow and are allowed to
//!   be slightly stale: each CPU area counts its own with plain stores, a read sums
//!   all areas (as the kernel's NUMA events since "mm/vmstat: convert NUMA statistics
//!   to basic NUMA counters"). Contexts without a CPU area add to the zone's atomic
//!   counters instead. The page layer's `stat.rs` does the counting.
//!
//! Per-CPU counters are written only by the area's owner (relaxed load + store, no
//! read-modify-write) and read by anyone.

use crate::sync::{AtomicI32, AtomicU64, Ordering::Relaxed};

/// A per-CPU delta folds into the zone counter once its magnitude passes this.
pub const STAT_THRESHOLD: i32 = 64;

/// Zone state items (`enum zone_stat_item`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum ZoneStat {
    /// Pages free in the buddy free lists (not counting per-CPU lists).
    NrFreePages = 0,
    /// Free pages whose contents were given back to the platform.
    NrFreeReported = 1,
}

/// Number of [`ZoneStat`] items.
pub const NR_ZONE_STAT: usize = 2;

impl ZoneStat {
    /// Every item, in order.
    pub const ALL: [ZoneStat; NR_ZONE_STAT] = [ZoneStat::NrFreePages, ZoneStat::NrFreeReported];
    /// The name in /proc/vmstat and /proc/zoneinfo.
    pub fn name(self) -> &'static str {
        match self {
            ZoneStat::NrFreePages => "nr_free_pages",
            ZoneStat::NrFreeReported => "nr_free_reported",
        }
    }
}

/// Event counters kept per zone and per CPU area (`enum vm_event_item`,
/// `enum numa_stat_item`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum VmEvent {
    /// Pages allocated (`pgalloc_normal`).
    PgAlloc = 0,
    /// Pages freed (`pgfree`).
    PgFree,
    /// Allocated on the node that was asked for.
    NumaHit,
    /// Allocated on this node although another was asked for.
    NumaMiss,
    /// Asked for this node, but allocated on another.
    NumaForeign,
    /// Interleave policy got the node it wanted.
    NumaInterleave,
    /// Allocated on the node of the allocating CPU.
    NumaLocal,
    /// Allocated on a node other than that of the allocating CPU.
    NumaOther,
    /// Per-CPU list refills from the zone (`rmqueue_bulk` calls).
    PcpRefill,
    /// Per-CPU list spills to the zone (`free_pcppages_bulk` calls).
    PcpSpill,
    /// Whole per-CPU list drains (`drain_pages_zone`).
    PcpDrain,
    /// Allocations that entered reclaim: drained lists and ran shrinkers (`allocstall`).
    AllocStall,
    /// Pages freed by shrinkers on behalf of a failing allocation.
    ShrinkerFreed,
    /// Allocations that failed.
    AllocFail,
    /// Pages given back to the platform by free page reporting.
    PgReported,
    /// Sections brought online (hot-added or re-onlined).
    SectionOnline,
    /// Sections taken offline after all their pages were free and reported.
    SectionOffline,
    /// Frees of pages that were not allocated (reported as bad page state).
    BadPage,
    /// Free pages lent to the mappings outside the page allocator at the heap bound
    /// (`balloon_inflate`; `page/hotplug.rs`).
    BalloonInflate,
    /// Lent pages given back to the zone (`balloon_deflate`).
    BalloonDeflate,
}

/// Number of [`VmEvent`] items.
pub const NR_VM_EVENTS: usize = 20;

impl VmEvent {
    /// Every event, in order.
    pub const ALL: [VmEvent; NR_VM_EVENTS] = [
        VmEvent::PgAlloc,
        VmEvent::PgFree,
        VmEvent::NumaHit,
        VmEvent::NumaMiss,
        VmEvent::NumaForeign,
        VmEvent::NumaInterleave,
        VmEvent::NumaLocal,
        VmEvent::NumaOther,
        VmEvent::PcpRefill,
        VmEvent::PcpSpill,
        VmEvent::PcpDrain,
        VmEvent::AllocStall,
        VmEvent::ShrinkerFreed,
        VmEvent::AllocFail,
        VmEvent::PgReported,
        VmEvent::SectionOnline,
        VmEvent::SectionOffline,
        VmEvent::BadPage,
        VmEvent::BalloonInflate,
        VmEvent::BalloonDeflate,
    ];
    /// The name in /proc/vmstat.
    pub fn name(self) -> &'static str {
        match self {
            VmEvent::PgAlloc => "pgalloc_normal",
            VmEvent::PgFree => "pgfree",
            VmEvent::NumaHit => "numa_hit",
            VmEvent::NumaMiss => "numa_miss",
            VmEvent::NumaForeign => "numa_foreign",
            VmEvent::NumaInterleave => "numa_interleave",
            VmEvent::NumaLocal => "numa_local",
            VmEvent::NumaOther => "numa_other",
            VmEvent::PcpRefill => "pcp_refill",
            VmEvent::PcpSpill => "pcp_spill",
            VmEvent::PcpDrain => "pcp_drain",
            VmEvent::AllocStall => "allocstall_normal",
            VmEvent::ShrinkerFreed => "shrinker_freed",
            VmEvent::AllocFail => "pgalloc_fail",
            VmEvent::PgReported => "pgreported",
            VmEvent::SectionOnline => "section_online",
            VmEvent::SectionOffline => "section_offline",
            VmEvent::BadPage => "bad_page",
            VmEvent::BalloonInflate => "balloon_inflate",
            VmEvent::BalloonDeflate => "balloon_deflate",
        }
    }
}

/// One CPU area's statistics for one zone (`struct per_cpu_zonestat`). Lives in the
/// CPU area; written only by the area's owner, read by anyone. All-zero is valid.
#[repr(C)]
pub struct ZoneStatPcp {
    pub(crate) diff: [AtomicI32; NR_ZONE_STAT],
    pub(crate) events: [AtomicU64; NR_VM_EVENTS],
}

impl ZoneStatPcp {
    /// Counts `n` events (owner only: a load and a store, no atomic read-modify-write);
    /// returns the new count.
    #[inline]
    pub(crate) fn count(&self, ev: VmEvent, n: u64) -> u64 {
        let c = &self.events[ev as usize];
        let v = c.load(Relaxed).wrapping_add(n);
        c.store(v, Relaxed);
        v
    }
    /// Adds `delta` to the per-CPU delta of `item`; returns the amount to fold into
    /// the zone counter (zero while the delta stays under the threshold).
    #[inline]
    pub(crate) fn mod_state(&self, item: ZoneStat, delta: i32) -> i32 {
        let d = &self.diff[item as usize];
        let v = d.load(Relaxed) + delta;
        if !(-STAT_THRESHOLD..=STAT_THRESHOLD).contains(&v) {
            d.store(0, Relaxed);
            v
        } else {
            d.store(v, Relaxed);
            0
        }
    }
    /// Takes every delta out (when the area is flushed); returns them.
    pub(crate) fn take_diffs(&self) -> [i32; NR_ZONE_STAT] {
        let mut out = [0; NR_ZONE_STAT];
        for (o, d) in out.iter_mut().zip(self.diff.iter()) {
            *o = d.swap(0, Relaxed);
        }
        out
    }
}
