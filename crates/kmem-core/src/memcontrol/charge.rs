//! Page charges (`try_charge_memcg`, the page stock) and the objcg's shared byte and
//! page counts used when there is no stock.
//!
//! A stock is touched only by the owner of its CPU area; others ask for a drain with
//! [`DRAIN_STOCK`].

use super::stock::set;
use super::*;
use crate::page::{PAGE_SHIFT, PAGE_SIZE};
use crate::percpu::{CpuRef, DRAIN_STOCK};
use crate::platform::Platform;
use crate::sync::{Ordering::AcqRel, Ordering::Relaxed};
use core::ptr::{self};

impl<'a, P: Platform> Memcg<'a, P> {
    // -------------------------------------------------------------------------
    // Page charges (try_charge_memcg, the page stock).

    /// Charges `nr_pages` to `memcg`: from the stock, else a batch from the counters
    /// (the excess goes to the stock), else reclaim and retry, else fail (events
    /// `max` and `oom`).
    pub(super) fn try_charge_memcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        memcg: &MemCgroup,
        nr_pages: usize,
    ) -> bool {
        let stock = self.stock(cpu);
        if let Some(st) = stock {
            if ptr::eq(st.cached.load(Relaxed), memcg) {
                let have = st.nr_pages.load(Relaxed);
                if have >= nr_pages {
                    set(&st.nr_pages, have - nr_pages);
                    return true;
                }
            }
        }
        let batch = if stock.is_some() {
            nr_pages.max(MEMCG_CHARGE_BATCH)
        } else {
            nr_pages
        };
        let mut reclaimed = false;
        loop {
            let got = match memcg.try_charge_counters(batch) {
                Ok(()) => Ok(batch),
                // The batch does not fit: exactly what is needed may.
                Err(_) if batch > nr_pages => memcg.try_charge_counters(nr_pages).map(|_| nr_pages),
                Err(limited) => Err(limited),
            };
            let limited = match got {
                Ok(got) => {
                    if got > nr_pages {
                        if let Some(st) = stock {
                            self.refill_stock(st, memcg, got - nr_pages);
                        }
                    }
                    if memcg.over_high().is_some() {
                        // `reclaim_high`'s events: every group of the path over its
                        // high, each counted up the hierarchy as Linux counts them.
                        for m in memcg.ancestors() {
                            if m.memory.usage() > m.memory.high() {
                                m.count_event(MemcgEvent::High);
                            }
                        }
                        self.reclaim_high(cpu);
                    }
                    return true;
                }
                Err(limited) => limited,
            };
            // Over memory.max at `limited` (this group or an ancestor): both events
            // are the limiting group's (Linux's `mem_over_limit`), and its ancestors'.
            limited.count_event(MemcgEvent::Max);
            if reclaimed {
                limited.count_event(MemcgEvent::Oom);
                return false;
            }
            // Reclaim: our stocks go back to their groups; others are asked to drain.
            if let Some(c) = cpu {
                self.memcg_drain_stock(c);
            }
            self.km.pages().request_all_areas(DRAIN_STOCK);
            reclaimed = true;
        }
    }

    /// `memory.high` reclaim: the stocks hold pre-charged memory; give ours back and
    /// ask the other CPU areas for theirs.
    #[cold]
    pub(super) fn reclaim_high(&self, cpu: Option<CpuRef<'_>>) {
        if let Some(c) = cpu {
            self.memcg_drain_stock(c);
        }
        self.km.pages().request_all_areas(DRAIN_STOCK);
    }

    /// Uncharges `nr_pages` from `memcg`: into the stock when it caches `memcg` (or
    /// can), else straight from the counters.
    pub(super) fn uncharge_memcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        memcg: &MemCgroup,
        nr_pages: usize,
    ) {
        match self.stock(cpu) {
            Some(st) => self.refill_stock(st, memcg, nr_pages),
            None => memcg.uncharge_counters(nr_pages),
        }
    }

    /// `refill_stock`: puts `nr_pages` charged to `memcg` in the stock; a stock over
    /// the batch goes back to the counters.
    pub(super) fn refill_stock(&self, st: &MemcgStock, memcg: &MemCgroup, nr_pages: usize) {
        if !ptr::eq(st.cached.load(Relaxed), memcg) {
            self.drain_page_stock(st);
            memcg.objcg.get();
            st.cached
                .store(memcg as *const MemCgroup as *mut MemCgroup, Relaxed);
        }
        let n = st.nr_pages.load(Relaxed) + nr_pages;
        set(&st.nr_pages, n);
        if n > MEMCG_CHARGE_BATCH {
            self.drain_page_stock(st);
        }
    }

    /// `drain_stock`: the page stock's pages go back to their group.
    pub(super) fn drain_page_stock(&self, st: &MemcgStock) {
        let old = st.cached.load(Relaxed);
        // SAFETY: a cached group is kept alive by the stock's reference on its objcg.
        if let Some(m) = unsafe { old.as_ref() } {
            m.uncharge_counters(st.nr_pages.load(Relaxed));
            set(&st.nr_pages, 0);
            st.cached.store(ptr::null_mut(), Relaxed);
            // SAFETY: the stock's reference on the group's objcg, given up now that
            // the stock no longer names it.
            unsafe { m.objcg.put() };
        }
    }

    /// Without a stock: bytes come from the objcg's shared spare bytes (atomically),
    /// else from newly charged pages.
    pub(super) fn obj_cgroup_charge_shared(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        size: usize,
    ) -> bool {
        let mut cur = objcg.nr_charged_bytes.load(Relaxed);
        while cur >= size {
            match objcg
                .nr_charged_bytes
                .compare_exchange_weak(cur, cur - size, AcqRel, Relaxed)
            {
                Ok(_) => return true,
                Err(v) => cur = v,
            }
        }
        let nr_pages = size.div_ceil(PAGE_SIZE);
        if !self.obj_cgroup_charge_pages(cpu, objcg, nr_pages) {
            return false;
        }
        let spare = (nr_pages << PAGE_SHIFT) - size;
        if spare != 0 {
            objcg.nr_charged_bytes.fetch_add(spare, AcqRel);
        }
        true
    }

    /// `obj_cgroup_charge_pages`: whole pages to the objcg's group.
    pub(super) fn obj_cgroup_charge_pages(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        nr_pages: usize,
    ) -> bool {
        if !self.try_charge_memcg(cpu, objcg.memcg(), nr_pages) {
            return false;
        }
        self.objcg_pages_add(cpu, objcg, nr_pages as isize);
        true
    }

    /// Counts pages charged through `objcg` (negative: uncharged): in the stock when it
    /// caches `objcg`, else on the objcg (wrapping: the sum over stocks and objcg is
    /// exact once every stock has drained).
    pub(super) fn objcg_pages_add(&self, cpu: Option<CpuRef<'_>>, objcg: &ObjCgroup, delta: isize) {
        match self.stock(cpu) {
            Some(st) if ptr::eq(st.cached_objcg.load(Relaxed), objcg) => {
                let d = st.objcg_pages_delta.load(Relaxed) + delta;
                st.objcg_pages_delta.store(d, Relaxed);
            }
            _ => {
                objcg.nr_pages.fetch_add(delta as usize, AcqRel);
            }
        }
    }

    /// `obj_cgroup_uncharge_pages`.
    pub(super) fn obj_cgroup_uncharge_pages(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        nr_pages: usize,
    ) {
        if nr_pages == 0 {
            return;
        }
        // Held while we touch it: once the pages are off its count, the sweep may find
        // a removed group's objcg empty. (A stock caching it holds a reference already,
        // and keeps it through this.)
        let cached =
            matches!(self.stock(cpu), Some(st) if ptr::eq(st.cached_objcg.load(Relaxed), objcg));
        if !cached {
            objcg.get();
        }
        let memcg = objcg.memcg();
        self.objcg_pages_add(cpu, objcg, -(nr_pages as isize));
        self.uncharge_memcg(cpu, memcg, nr_pages);
        if !cached {
            // SAFETY: the reference taken above.
            unsafe { objcg.put() };
        }
    }

    #[cold]
    pub(super) fn uncharge_shared_excess(&self, cpu: Option<CpuRef<'_>>, objcg: &ObjCgroup) {
        let mut cur = objcg.nr_charged_bytes.load(Relaxed);
        while cur >= PAGE_SIZE {
            let pages = cur >> PAGE_SHIFT;
            match objcg.nr_charged_bytes.compare_exchange_weak(
                cur,
                cur - (pages << PAGE_SHIFT),
                AcqRel,
                Relaxed,
            ) {
                Ok(_) => {
                    self.obj_cgroup_uncharge_pages(cpu, objcg, pages);
                    return;
                }
                Err(v) => cur = v,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The page stock and `try_charge_memcg`, on a real allocator.
    use super::super::test_env::memcg_env;
    use super::*;

    #[test]
    fn the_page_stock_keeps_a_batch_and_caps_at_it() {
        let env = memcg_env();
        let (m, cpu) = (env.memcg(), env.cpu());
        let st = m.stock(Some(cpu)).unwrap();
        let g = m
            .mem_cgroup_create(Some(cpu), m.root_mem_cgroup(), "g")
            .unwrap();
        let gp = g as *const MemCgroup;
        let root = m.root_mem_cgroup();
        let base = root.memory.usage();
        // A miss charges a whole batch; the excess waits in the stock.
        assert!(m.try_charge_memcg(Some(cpu), g, 10));
        assert_eq!(st.page_stock(), (gp, MEMCG_CHARGE_BATCH - 10));
        assert_eq!(g.memory.usage(), MEMCG_CHARGE_BATCH);
        assert_eq!(root.memory.usage(), base + MEMCG_CHARGE_BATCH);
        // A hit is one subtraction in the stock.
        assert!(m.try_charge_memcg(Some(cpu), g, 5));
        assert_eq!(st.page_stock(), (gp, MEMCG_CHARGE_BATCH - 15));
        assert_eq!(g.memory.usage(), MEMCG_CHARGE_BATCH);
        // Uncharges go to the stock while it holds at most a batch.
        m.uncharge_memcg(Some(cpu), g, 10);
        m.uncharge_memcg(Some(cpu), g, 5);
        assert_eq!(st.page_stock(), (gp, MEMCG_CHARGE_BATCH));
        assert_eq!(g.memory.usage(), MEMCG_CHARGE_BATCH);
        // A charge bigger than the stock is charged exactly (it is its own batch).
        assert!(m.try_charge_memcg(Some(cpu), g, 70));
        assert_eq!(st.page_stock(), (gp, MEMCG_CHARGE_BATCH));
        assert_eq!(g.memory.usage(), MEMCG_CHARGE_BATCH + 70);
        // Past a batch, the whole stock goes back to the counters.
        m.uncharge_memcg(Some(cpu), g, 70);
        assert_eq!(st.page_stock(), (ptr::null(), 0));
        assert_eq!(g.memory.usage(), 0);
        assert_eq!(root.memory.usage(), base);
        // The stock's reference on the group's objcg went with it.
        assert_eq!(g.objcg.refcnt.load(Relaxed), 1);
    }

    #[test]
    fn a_batch_over_max_falls_back_to_the_exact_charge() {
        let env = memcg_env();
        let (m, cpu) = (env.memcg(), env.cpu());
        let st = m.stock(Some(cpu)).unwrap();
        let g = m
            .mem_cgroup_create(Some(cpu), m.root_mem_cgroup(), "g")
            .unwrap();
        g.set_max(10 * PAGE_SIZE);
        assert!(m.try_charge_memcg(Some(cpu), g, 1));
        assert_eq!(g.memory.usage(), 1);
        assert_eq!(st.page_stock(), (ptr::null(), 0), "nothing left to stock");
        // The refused batch counts as a failure of the counter, not as an event.
        assert_eq!(g.memory.failcnt(), 1);
        assert_eq!(g.events(MemcgEvent::Max), 0);
        // Over max even after reclaim: max events, then oom, and nothing charged.
        assert!(!m.try_charge_memcg(Some(cpu), g, 10));
        assert_eq!(g.memory.usage(), 1);
        assert_eq!(
            (g.events(MemcgEvent::Max), g.events(MemcgEvent::Oom)),
            (2, 1)
        );
        assert!(m.try_charge_memcg(Some(cpu), g, 9));
        assert_eq!(g.memory.usage(), 10);
        m.uncharge_memcg(Some(cpu), g, 10);
        m.memcg_drain_stock(cpu);
        assert_eq!(g.memory.usage(), 0);
    }
}
