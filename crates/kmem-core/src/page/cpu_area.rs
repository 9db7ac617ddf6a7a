//! CPU areas as the page layer sees them: handing one to a new owner (recycled from
//! the pool, or made from the allocator's own pages), flushing one whose owner goes
//! away (the CPU-offline hooks, the per-CPU page lists, the counter deltas), putting
//! it back. Each change of the number of owners re-divides the per-CPU list budget
//! (`pcp.rs`).
//!
//! Locking: the pool lock (inside `percpu`) while taking or returning an area; the
//! flush runs the hooks with no lock held, then drains through the zone lock. See the
//! lock order in lib.rs.

use super::PageAllocator;
use crate::gfp::Gfp;
use crate::percpu::{CpuArea, CpuRef, CPU_AREA_ORDER};
use crate::platform::Platform;
use crate::sync::Ordering;
use crate::vmstat::NR_ZONE_STAT;

impl<P: Platform> PageAllocator<P> {
    /// Gives the caller a CPU area to own: a recycled one from the pool, or a new one
    /// made from the allocator's own pages. `None` when none can be had (the caller
    /// then runs without one, on the zone path).
    #[cold]
    pub fn cpu_area_get(&self, nid: usize) -> Option<&CpuArea> {
        if !self.is_initialized() {
            return None;
        }
        let nid = self.area_node(nid);
        let area = match self.areas.pop_free() {
            Some(a) => a,
            // Every area made and owned (as many threads as MAX_CPU_AREAS): none
            // without making and zeroing a block only to give it back, at every
            // slow path of every thread beyond them.
            None if self.areas.nr_areas() >= crate::percpu::MAX_CPU_AREAS => return None,
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
        Some(self.hand_out(area, nid))
    }

    /// The last steps of handing `area` to a new owner on node `nid`: its node, its
    /// copy of the tag-window length, and the per-CPU lists' budget, re-divided among
    /// one more owner.
    fn hand_out<'s>(&'s self, area: &'s CpuArea, nid: usize) -> &'s CpuArea {
        area.set_node(nid);
        super::memory_model::refresh_area_tag_limit(&self.window, area);
        self.recalc_pcp_high();
        area
    }

    /// The node a new area is made for: `nid`, or node 0 for one past the nodes.
    fn area_node(&self, nid: usize) -> usize {
        if nid < self.nr_nodes() {
            nid
        } else {
            0
        }
    }

    /// Makes a CPU area in memory the caller provides (`mem`: [`CPU_AREA_SIZE`] zeroed
    /// bytes), owned by the caller for good: a platform that places each CPU's area
    /// where its restartable sequences compute it (`base + (cpu << shift)`, as
    /// tcmalloc places its per-CPU slabs, one load fewer than a table of areas).
    /// `None` when the allocator is not initialised or every area id is used.
    ///
    /// # Safety
    /// `mem` is valid for [`CPU_AREA_SIZE`] bytes, zeroed, page aligned, used for
    /// nothing else, and lives as long as the allocator; the area is never put back
    /// ([`PageAllocator::cpu_area_put`]).
    ///
    /// [`CPU_AREA_SIZE`]: crate::percpu::CPU_AREA_SIZE
    #[cold]
    pub unsafe fn cpu_area_in(&self, mem: core::ptr::NonNull<u8>, nid: usize) -> Option<&CpuArea> {
        if !self.is_initialized() {
            return None;
        }
        let nid = self.area_node(nid);
        // SAFETY: the caller's contract.
        let area = unsafe { self.areas.register(mem, nid) }?;
        Some(self.hand_out(area, nid))
    }

    /// Flushes an area whose owner goes away (thread exit, CPU offline) and returns it
    /// to the pool: its per-CPU pages go back to the zones, its counter deltas are
    /// folded into the zones.
    ///
    /// # Safety
    /// The caller owns `area` and neither it nor anyone else uses it afterwards unless
    /// it is handed out again by `cpu_area_get`.
    #[cold]
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
    #[cold]
    pub fn cpu_area_flush(&self, cpu: CpuRef<'_>) {
        self.hooks.run_cpu_dead(cpu);
        self.drain_local_pages(cpu);
        for nid in 0..self.nr_nodes() {
            let diffs = self.zone_pcp(cpu, nid).stat.take_diffs();
            for (i, d) in diffs.iter().enumerate().take(NR_ZONE_STAT) {
                self.zones[nid].vm_stat[i].fetch_add(*d as isize, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::pcp::PCP_HIGH_MAX;
    use super::super::test_platform::allocator;
    use super::super::Config;
    use super::*;

    /// With every area made and owned, a new owner gets none at once: no block is
    /// made, zeroed and given back for it (at every slow path of every thread beyond
    /// the areas, as it was).
    #[test]
    fn with_every_area_owned_a_new_owner_gets_none_without_making_one() {
        let pa = allocator(3, Config::default());
        let mut n = 0;
        while pa.cpu_area_get(0).is_some() {
            n += 1;
        }
        assert_eq!(n, crate::percpu::MAX_CPU_AREAS);
        let allocs = pa.zone_event(0, crate::vmstat::VmEvent::PgAlloc);
        assert!(pa.cpu_area_get(0).is_none());
        let now = pa.zone_event(0, crate::vmstat::VmEvent::PgAlloc);
        assert_eq!(now, allocs, "a block made for no area");
    }

    #[test]
    fn putting_an_area_back_flushes_it_and_raises_high_again() {
        static FLUSHED: crate::sync::AtomicUsize = crate::sync::AtomicUsize::new(0);
        let pa = allocator(1, Config::default());
        assert!(pa.register_cpu_dead(super::super::CpuDeadHook {
            flush: |_, _| {
                FLUSHED.fetch_add(1, Ordering::Relaxed);
            },
            data: core::ptr::null(),
        }));
        let areas: [_; 8] = core::array::from_fn(|_| pa.cpu_area_get(0).unwrap());
        let lowered = pa.zones[0].pcp_high();
        assert!(lowered < PCP_HIGH_MAX);
        // SAFETY: the test owns the first area alone.
        let c = unsafe { CpuRef::new(areas[0]) };
        pa.rmqueue_pcplist(c, &pa.zones[0], 0).unwrap();
        assert!(pa.zone_pcp(c, 0).count() > 0);
        for area in &areas {
            // SAFETY: each area is owned by this test and not used afterwards.
            unsafe { pa.cpu_area_put(area) };
        }
        assert_eq!(
            FLUSHED.load(Ordering::Relaxed),
            8,
            "the hooks ran for every area"
        );
        assert_eq!(pa.nr_pcp_pages(0), 0);
        assert_eq!(pa.zones[0].pcp_high(), PCP_HIGH_MAX);
        // The areas themselves plus the one page still taken.
        assert_eq!(pa.nr_allocated_pages(), 8 * (1 << CPU_AREA_ORDER) + 1);
        // A new owner gets a recycled area.
        let again = pa.cpu_area_get(0).unwrap();
        assert!(areas.iter().any(|a| core::ptr::eq(*a, again)));
        assert_eq!(pa.cpu_areas().nr_areas(), 8);
    }
}
