//! The page layer's statistics (mm/vmstat.c's side that runs inside the allocator):
//! counting events and zone state changes into the owner's per-CPU counters or the
//! zone's, and reading them back, exact (`zone_page_state_snapshot`) or cheap. The
//! counter types and their names are in [`crate::vmstat`].
//!
//! Locking: none. Per-CPU counters are written only by the CPU area's owner (a
//! [`CpuRef`]); contexts without an area add to the zone's atomics; readers sum
//! both (see the lock order in lib.rs for the locks the page layer does take).

use super::PageAllocator;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering;
use crate::vmstat::{VmEvent, ZoneStat};

impl<P: Platform> PageAllocator<P> {
    /// `__count_vm_events` for zone `nid`: into the owner's per-CPU counter, or the
    /// zone's atomic one for a context without a CPU area.
    #[inline]
    pub(super) fn count_event(&self, cpu: Option<CpuRef<'_>>, nid: usize, ev: VmEvent, n: u64) {
        match cpu {
            Some(c) => {
                self.zone_pcp(c, nid).stat.count(ev, n);
            }
            None => {
                self.zones[nid].events[ev as usize].fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// `mod_zone_page_state`: adds `delta` to zone state `item` of zone `nid`, through
    /// the owner's per-CPU delta (folded into the zone past the threshold), or straight
    /// into the zone for a context without a CPU area.
    #[inline]
    pub(super) fn mod_zone_state(
        &self,
        cpu: Option<CpuRef<'_>>,
        nid: usize,
        item: ZoneStat,
        delta: isize,
    ) {
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
    pub(super) fn zone_statistics(
        &self,
        cpu: Option<CpuRef<'_>>,
        preferred: usize,
        nid: usize,
        nr: u64,
    ) {
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
}

impl<P: Platform> PageAllocator<P> {
    /// Counts a reported bad object (the end of every `BUG` report) and lets the
    /// platform act on it ([`Platform::after_bug_report`]).
    pub fn count_bad_object(&self) {
        self.zones[0].events[VmEvent::BadPage as usize].fetch_add(1, Ordering::Relaxed);
        self.platform.after_bug_report();
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_platform::allocator;
    use super::super::Config;
    use super::*;
    use crate::vmstat::STAT_THRESHOLD;

    #[test]
    fn per_cpu_deltas_fold_past_the_threshold_and_snapshots_see_them() {
        let pa = allocator(1, Config::default());
        assert!(pa.add_memory(0));
        let area = pa.cpu_area_get(0).unwrap();
        // SAFETY: the area was just handed to this test, its only user.
        let c = unsafe { CpuRef::new(area) };
        let item = ZoneStat::NrFreeReported;
        let base = pa.zone_page_state(0, item);
        pa.mod_zone_state(Some(c), 0, item, 10);
        assert_eq!(pa.zone_page_state(0, item), base, "still a per-CPU delta");
        assert_eq!(pa.zone_page_state_snapshot(0, item), base + 10);
        pa.mod_zone_state(Some(c), 0, item, STAT_THRESHOLD as isize);
        assert_eq!(
            pa.zone_page_state(0, item),
            base + 10 + STAT_THRESHOLD as isize
        );
        assert_eq!(
            pa.zone_page_state_snapshot(0, item),
            base + 10 + STAT_THRESHOLD as isize
        );
        // Without an area: straight into the zone.
        pa.mod_zone_state(None, 0, item, -3);
        assert_eq!(
            pa.zone_page_state(0, item),
            base + 7 + STAT_THRESHOLD as isize
        );
        pa.mod_zone_state(Some(c), 0, item, -(7 + STAT_THRESHOLD as isize));
    }

    #[test]
    fn events_are_summed_over_areas_and_the_zone() {
        let pa = allocator(1, Config::default());
        let area = pa.cpu_area_get(0).unwrap();
        // SAFETY: as above.
        let c = unsafe { CpuRef::new(area) };
        let before = pa.event(VmEvent::PcpDrain);
        pa.count_event(Some(c), 0, VmEvent::PcpDrain, 2);
        pa.count_event(None, 0, VmEvent::PcpDrain, 3);
        assert_eq!(pa.zone_event(0, VmEvent::PcpDrain), before + 5);
        assert_eq!(pa.event(VmEvent::PcpDrain), before + 5);
    }

    #[test]
    fn numa_events_name_the_node_asked_for_and_the_node_used() {
        let pa = allocator(
            1,
            Config {
                nr_nodes: 2,
                ..Config::default()
            },
        );
        // Asked for node 1, got node 0, from a context on node 0.
        pa.zone_statistics(None, 1, 0, 4);
        assert_eq!(pa.zone_event(1, VmEvent::NumaForeign), 4);
        assert_eq!(pa.zone_event(0, VmEvent::NumaMiss), 4);
        assert_eq!(pa.zone_event(0, VmEvent::NumaLocal), 4);
        assert_eq!(pa.zone_event(0, VmEvent::PgAlloc), 4);
        assert_eq!(pa.event(VmEvent::NumaHit), 0);
        pa.zone_statistics(None, 1, 1, 1);
        assert_eq!(pa.zone_event(1, VmEvent::NumaHit), 1);
        assert_eq!(pa.zone_event(1, VmEvent::NumaOther), 1);
    }
}
