//! The per-CPU charge stock (`struct memcg_stock_pcp` with its obj stock): byte charges
//! of accounted objects in one subtraction or addition on the fast path, statistics
//! derived from the stock's byte movement, and draining.
//!
//! Only the owner of a CPU area touches its stock; others ask for a drain with
//! [`DRAIN_STOCK`], done at the owner's next charge that misses the stock.

use super::*;
use crate::page::{PAGE_SHIFT, PAGE_SIZE};
use crate::percpu::{CpuRef, DRAIN_STOCK};
use crate::platform::Platform;
use crate::slab::{KmemCache, SlabFlags};
use crate::sync::{AtomicIsize, AtomicPtr, AtomicUsize, Ordering::AcqRel, Ordering::Relaxed};
use core::ptr::{self, NonNull};

/// `struct memcg_stock_pcp` (with its obj stock): in every CPU area.
/// All-zero is the valid empty state. Only the area's owner touches it.
///
/// Invariants: `cached` is null or a group whose objcg holds a reference for this
/// stock, and `nr_pages` pages are charged to it and unused; `cached_objcg` likewise,
/// with `nr_bytes` pre-charged, unused bytes. Statistics are not counted per object:
/// since the last flush, objects of `stat_cache` worth `stat_base - nr_bytes` bytes
/// were allocated (net) for `cached_objcg` — the fast paths only move `nr_bytes`,
/// and the slow paths that add or remove bytes for other reasons (pages charged or
/// uncharged) move `stat_base` by the same amount. `objcg_pages_delta` counts pages
/// charged through `cached_objcg` not yet added to its `nr_pages`.
#[repr(C, align(64))]
pub struct MemcgStock {
    pub(super) cached_objcg: AtomicPtr<ObjCgroup>,
    pub(super) stat_cache: AtomicPtr<KmemCache>,
    pub(super) nr_bytes: AtomicUsize,
    pub(super) stat_base: AtomicUsize,
    pub(super) objcg_pages_delta: AtomicIsize,
    pub(super) cached: AtomicPtr<MemCgroup>,
    pub(super) nr_pages: AtomicUsize,
    /// Charged kmalloc objects kept between a free and the next charged allocation
    /// (`objcg_sheaf`); given back first when the stock is drained.
    pub(super) sheaves: ObjcgSheaves,
}

impl MemcgStock {
    /// Pre-charged bytes in the stock and whose (for statistics and tests).
    pub fn obj_stock(&self) -> (*const ObjCgroup, usize) {
        (self.cached_objcg.load(Relaxed), self.nr_bytes.load(Relaxed))
    }
    /// Pre-charged pages in the stock and whose.
    pub fn page_stock(&self) -> (*const MemCgroup, usize) {
        (self.cached.load(Relaxed), self.nr_pages.load(Relaxed))
    }
    /// Charged objects kept in the stock's objcg sheaves, and whose.
    pub fn objcg_sheaves(&self) -> (*const ObjCgroup, usize) {
        self.sheaves.held()
    }
}

/// Bytes of objects allocated (net) since the stock's last statistics flush:
/// `stat_base - nr_bytes`, in wrapping arithmetic (either may have moved past the
/// other).
#[inline]
pub(super) fn stat_lag(st: &MemcgStock) -> isize {
    st.stat_base
        .load(Relaxed)
        .wrapping_sub(st.nr_bytes.load(Relaxed)) as isize
}

#[inline]
pub(super) fn set(a: &AtomicUsize, v: usize) {
    a.store(v, Relaxed);
}

impl<'a, P: Platform> Memcg<'a, P> {
    // -------------------------------------------------------------------------
    // Byte charges (obj_cgroup_charge, the obj stock).

    /// `obj_cgroup_charge` for an object of `s`: charges `size` bytes to `objcg` and
    /// counts the object in its group's statistics; false if over the limit. The fast
    /// path is one subtraction in the stock.
    #[inline]
    pub fn obj_cgroup_charge(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        s: &KmemCache,
        size: usize,
    ) -> bool {
        if let Some(st) = self.stock(cpu) {
            if Self::consume_obj_stock(st, objcg, s, size) {
                return true;
            }
        }
        self.obj_cgroup_charge_slow(cpu, objcg, s, size)
    }

    /// `consume_obj_stock`: charges `size` bytes of objects of `s` to `objcg` from the
    /// bytes stock `st` holds pre-charged, when it caches `objcg` and `s` and holds
    /// enough; false (nothing done: no page charged, no reclaim, no event) otherwise.
    #[inline]
    pub(super) fn consume_obj_stock(
        st: &MemcgStock,
        objcg: &ObjCgroup,
        s: &KmemCache,
        size: usize,
    ) -> bool {
        let have = st.nr_bytes.load(Relaxed);
        if ptr::eq(st.cached_objcg.load(Relaxed), objcg)
            && ptr::eq(st.stat_cache.load(Relaxed), s)
            && have >= size
        {
            set(&st.nr_bytes, have - size);
            return true;
        }
        false
    }

    /// `obj_cgroup_uncharge` for an object of `s`: gives `size` bytes back (see
    /// [`Memcg::refill_obj_stock`]).
    ///
    /// # Safety
    /// The bytes were charged to `objcg` before ([`Memcg::obj_cgroup_charge`] for an
    /// object of `s`, or a charge of yours this undoes) and are not uncharged yet.
    /// A removed group is freed once its objcg holds no charge and no reference, so an
    /// uncharge of bytes never charged would let it go while objects still name it.
    #[inline]
    pub unsafe fn obj_cgroup_uncharge(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        s: &KmemCache,
        size: usize,
    ) {
        self.refill_obj_stock(cpu, objcg, s, size);
    }

    /// `refill_obj_stock`: gives back `size` bytes charged to `objcg` for objects of
    /// `s` (the crate's uncharges, each of a charge it made). The fast path is one
    /// addition in the stock.
    #[inline]
    pub(crate) fn refill_obj_stock(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        s: &KmemCache,
        size: usize,
    ) {
        if let Some(st) = self.stock(cpu) {
            // refill_obj_stock, while the stock stays within a page.
            let n = st.nr_bytes.load(Relaxed) + size;
            if ptr::eq(st.cached_objcg.load(Relaxed), objcg)
                && ptr::eq(st.stat_cache.load(Relaxed), s)
                && n <= PAGE_SIZE
            {
                set(&st.nr_bytes, n);
                return;
            }
        }
        self.obj_cgroup_uncharge_slow(cpu, objcg, s, size)
    }

    #[cold]
    #[inline(never)]
    pub(super) fn obj_cgroup_charge_slow(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        s: &KmemCache,
        size: usize,
    ) -> bool {
        if let Some(c) = cpu {
            self.check_stock_drain(c);
        }
        let Some(st) = self.stock(cpu) else {
            if !self.obj_cgroup_charge_shared(cpu, objcg, size) {
                return false;
            }
            self.mod_objcg_state_direct(objcg, s, size as isize);
            return true;
        };
        loop {
            self.obj_stock_prepare(st, objcg, s);
            let have = st.nr_bytes.load(Relaxed);
            if have >= size {
                set(&st.nr_bytes, have - size);
                self.maybe_flush_stock_stats(st);
                return true;
            }
            // Whole pages for the rest; what they hold beyond the object stays in the
            // stock (no uncharge right after a charge: `refill_obj_stock`'s `allow_uncharge`).
            let nr_pages = (size - have).div_ceil(PAGE_SIZE);
            if !self.obj_cgroup_charge_pages(cpu, objcg, nr_pages) {
                return false;
            }
            // Charging may have reclaimed (drained) the stock: cache `objcg` again.
            self.obj_stock_prepare(st, objcg, s);
            let bytes = nr_pages << PAGE_SHIFT;
            set(&st.nr_bytes, st.nr_bytes.load(Relaxed) + bytes);
            set(
                &st.stat_base,
                st.stat_base.load(Relaxed).wrapping_add(bytes),
            );
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn obj_cgroup_uncharge_slow(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        s: &KmemCache,
        size: usize,
    ) {
        let Some(st) = self.stock(cpu) else {
            // Shared: spare bytes go to the objcg; whole pages back to the group. A
            // reference keeps a removed group's objcg for as long as we touch it (the
            // sweep may find it empty as soon as the bytes are back).
            objcg.get();
            self.mod_objcg_state_direct(objcg, s, -(size as isize));
            let total = objcg.nr_charged_bytes.fetch_add(size, AcqRel) + size;
            if total >= PAGE_SIZE {
                self.uncharge_shared_excess(cpu, objcg);
            }
            // SAFETY: the reference taken above.
            unsafe { objcg.put() };
            return;
        };
        self.obj_stock_prepare(st, objcg, s);
        let n = st.nr_bytes.load(Relaxed) + size;
        // Keep less than a page; whole pages go back (only the excess: the objcg stays
        // cached, as "mm/memcg: Improve refill_obj_stock() performance" does).
        let pages = n >> PAGE_SHIFT;
        set(&st.nr_bytes, n & (PAGE_SIZE - 1));
        set(
            &st.stat_base,
            st.stat_base.load(Relaxed).wrapping_sub(pages << PAGE_SHIFT),
        );
        self.maybe_flush_stock_stats(st);
        self.obj_cgroup_uncharge_pages(cpu, objcg, pages);
    }

    /// Makes the stock cache `objcg` (draining another) with its statistics counting
    /// objects of `s` (flushing another cache's).
    pub(super) fn obj_stock_prepare(&self, st: &MemcgStock, objcg: &ObjCgroup, s: &KmemCache) {
        if !ptr::eq(st.cached_objcg.load(Relaxed), objcg) {
            self.switch_obj_stock(st, objcg);
        }
        if !ptr::eq(st.stat_cache.load(Relaxed), s) {
            self.flush_stock_stats(st);
            s.stock_get();
            let old = st
                .stat_cache
                .swap(s as *const KmemCache as *mut KmemCache, Relaxed);
            self.stat_cache_put(old);
        }
    }

    /// Lets go of a cache the stock counted (`KmemCache::stock_get`): frees it when
    /// `kmem_cache_destroy` gave it up and this was the last stock to name it.
    fn stat_cache_put(&self, old: *mut KmemCache) {
        // SAFETY: a stock's cache lives while the stock names it (its reference).
        if let Some(old) = unsafe { old.as_ref() } {
            if old.stock_put() {
                // SAFETY: an object of the kmem_cache cache, given up by its
                // destruction, that nothing names any more.
                unsafe {
                    self.km
                        .slub()
                        .free(None, self.boot, NonNull::from(old).cast())
                };
            }
        }
    }

    /// Flushes the stock's statistics once they lag by a charge batch.
    pub(super) fn maybe_flush_stock_stats(&self, st: &MemcgStock) {
        let lag = stat_lag(st);
        if lag.unsigned_abs() >= MEMCG_CHARGE_BATCH << PAGE_SHIFT {
            self.flush_stock_stats(st);
        }
    }

    /// `drain_obj_stock` then cache `objcg`, taking back its spare bytes.
    #[cold]
    #[inline(never)]
    pub(super) fn switch_obj_stock(&self, st: &MemcgStock, objcg: &ObjCgroup) {
        self.drain_obj_stock(st);
        objcg.get();
        st.cached_objcg
            .store(objcg as *const ObjCgroup as *mut ObjCgroup, Relaxed);
        let spare = if objcg.nr_charged_bytes.load(Relaxed) != 0 {
            objcg.nr_charged_bytes.swap(0, AcqRel)
        } else {
            0
        };
        set(&st.nr_bytes, spare);
        set(&st.stat_base, spare);
    }

    /// `drain_obj_stock`: statistics to the group, whole pages uncharged, the rest to
    /// the objcg's spare bytes; the reference is dropped.
    pub(super) fn drain_obj_stock(&self, st: &MemcgStock) {
        let old = st.cached_objcg.load(Relaxed);
        // SAFETY: a cached objcg is kept alive by the stock's reference.
        let Some(objcg) = (unsafe { old.as_ref() }) else {
            return;
        };
        self.flush_stock_stats(st);
        let cache = st.stat_cache.swap(ptr::null_mut(), Relaxed);
        self.stat_cache_put(cache);
        let n = st.nr_bytes.load(Relaxed);
        let pages = n >> PAGE_SHIFT;
        let delta = st.objcg_pages_delta.load(Relaxed) - pages as isize;
        if delta != 0 {
            objcg.nr_pages.fetch_add(delta as usize, AcqRel);
        }
        st.objcg_pages_delta.store(0, Relaxed);
        if pages != 0 {
            objcg.memcg().uncharge_counters(pages);
        }
        let rem = n & (PAGE_SIZE - 1);
        set(&st.nr_bytes, 0);
        set(&st.stat_base, 0);
        st.cached_objcg.store(ptr::null_mut(), Relaxed);
        if rem != 0 && objcg.nr_charged_bytes.fetch_add(rem, AcqRel) + rem >= PAGE_SIZE {
            // Spare bytes from several stocks make a page: give it back.
            self.uncharge_shared_excess(None, objcg);
        }
        // SAFETY: the stock's reference on its cached objcg, given up now that the
        // stock no longer names it.
        unsafe { objcg.put() };
    }

    /// `__mod_objcg_mlstate` for the stock: the objects of `stat_cache` allocated
    /// (net) since the last flush go to the group's statistics.
    pub(super) fn flush_stock_stats(&self, st: &MemcgStock) {
        let bytes = stat_lag(st);
        set(&st.stat_base, st.nr_bytes.load(Relaxed));
        let objcg = st.cached_objcg.load(Relaxed);
        let cache = st.stat_cache.load(Relaxed);
        // SAFETY: the cached objcg is kept alive by the stock's reference, the cache
        // by the stock's (`stat_cache_put`), even once it was destroyed.
        let (Some(objcg), Some(s)) = (unsafe { objcg.as_ref() }, unsafe { cache.as_ref() }) else {
            return;
        };
        if bytes != 0 {
            self.mod_objcg_state_direct(objcg, s, bytes);
        }
    }

    /// `mod_objcg_state` without the stock: `bytes` of objects of `s` (negative:
    /// freed) straight into the group's statistics.
    pub(super) fn mod_objcg_state_direct(&self, objcg: &ObjCgroup, s: &KmemCache, bytes: isize) {
        let cfg = s.config();
        let i = cfg.flags.contains(SlabFlags::RECLAIM_ACCOUNT) as usize;
        let memcg = objcg.memcg();
        memcg.add_stat(STAT_OF_DELTA[i], bytes);
        memcg.add_cache_objects(s, bytes / cfg.size as isize);
    }

    /// Drains the caller's stock: pages and bytes back to their groups, statistics
    /// flushed (on thread exit, on request, before reading exact statistics).
    pub fn memcg_drain_stock(&self, c: CpuRef<'_>) {
        let off = self.state.stock_offset.load(Relaxed);
        if off == 0 {
            return;
        }
        // SAFETY: as in `stock` (regardless of whether stocks are enabled now).
        let st = unsafe { &*c.area().ptr::<MemcgStock>(off) };
        self.flush_objcg_sheaves(c, st);
        self.drain_obj_stock(st);
        self.drain_page_stock(st);
        c.area().drain_request.fetch_and(!DRAIN_STOCK, Relaxed);
    }

    /// Flushes the statistics the caller's stock caches into its group, keeping its
    /// charges and the objects its objcg sheaves hold (which count as allocated).
    pub fn memcg_flush_stats(&self, cpu: Option<CpuRef<'_>>) {
        if let Some(st) = self.stock(cpu) {
            self.flush_stock_stats(st);
        }
    }

    #[inline]
    pub(super) fn check_stock_drain(&self, c: CpuRef<'_>) {
        if c.area().drain_request.load(Relaxed) & DRAIN_STOCK != 0 {
            self.memcg_drain_stock(c);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The obj stock on a real allocator: one CPU area, groups under the root, and a
    //! cache of 64-byte accounted objects whose objects the charges stand for.
    extern crate std;

    use super::super::test_env::memcg_env;
    use super::*;
    use crate::slab::test_env::TestPlatform;
    use std::vec::Vec;

    struct T {
        m: Memcg<'static, TestPlatform>,
        cpu: CpuRef<'static>,
        st: &'static MemcgStock,
        s: &'static KmemCache,
    }

    fn setup() -> T {
        let env = memcg_env();
        let (m, cpu) = (env.memcg(), env.cpu());
        let s = env.slab.cache("obj-64", 64, 8, SlabFlags::ACCOUNT);
        T {
            m,
            cpu,
            st: m.stock(Some(cpu)).unwrap(),
            s,
        }
    }

    impl T {
        fn group(&self, name: &str) -> &'static MemCgroup {
            let root = self.m.root_mem_cgroup();
            self.m
                .mem_cgroup_create(Some(self.cpu), root, name)
                .unwrap()
        }
        fn charge(&self, g: &MemCgroup, size: usize) {
            assert!(self
                .m
                .obj_cgroup_charge(Some(self.cpu), &g.objcg, self.s, size));
        }
        fn uncharge(&self, g: &MemCgroup, size: usize) {
            self.m
                .refill_obj_stock(Some(self.cpu), &g.objcg, self.s, size);
        }
        /// Everything outside the obj stock: the counters, the objcg's counts and
        /// the statistics of `g` and the root, and the page stock.
        fn shared(&self, g: &MemCgroup) -> Vec<isize> {
            let root = self.m.root_mem_cgroup();
            let mut v = Vec::new();
            for c in [g, root] {
                v.push(c.memory.usage() as isize);
                v.push(c.objcg.nr_pages.load(Relaxed) as isize);
                v.push(c.objcg.nr_charged_bytes.load(Relaxed) as isize);
                v.push(c.stat(MemcgStat::SlabUnreclaimable));
            }
            let (cached, pages) = self.st.page_stock();
            v.extend([cached as isize, pages as isize]);
            v
        }
    }

    fn objcg_of(g: &MemCgroup) -> *const ObjCgroup {
        &g.objcg
    }

    #[test]
    fn consuming_from_the_obj_stock_is_one_subtraction() {
        let t = setup();
        let g = t.group("g");
        // The first charge misses: a page for the objcg (from a fresh page batch), the
        // rest of it stays in the stock.
        t.charge(g, 64);
        assert_eq!(t.st.obj_stock(), (objcg_of(g), PAGE_SIZE - 64));
        assert_eq!(t.st.page_stock(), (g as *const _, MEMCG_CHARGE_BATCH - 1));
        assert_eq!(t.st.objcg_pages_delta.load(Relaxed), 1);
        assert_eq!(g.memory.usage(), MEMCG_CHARGE_BATCH);
        let before = t.shared(g);
        for i in 2..=10 {
            t.charge(g, 64);
            assert_eq!(t.st.obj_stock(), (objcg_of(g), PAGE_SIZE - 64 * i));
            assert_eq!(t.shared(g), before, "charge {i} touched a shared counter");
        }
        assert_eq!(t.st.objcg_pages_delta.load(Relaxed), 1);
        // Statistics wait in the stock (derived from the bytes it handed out).
        assert_eq!(stat_lag(t.st), 64 * 10);
        assert_eq!(g.stat(MemcgStat::SlabUnreclaimable), 0);
    }

    #[test]
    fn a_refill_within_a_page_stays_in_the_stock() {
        let t = setup();
        let g = t.group("g");
        t.charge(g, 64);
        t.charge(g, 64);
        let before = t.shared(g);
        t.uncharge(g, 64);
        assert_eq!(t.st.obj_stock(), (objcg_of(g), PAGE_SIZE - 64));
        assert_eq!(t.shared(g), before);
        // Up to a whole page stays: only passing it gives pages back.
        t.uncharge(g, 64);
        assert_eq!(t.st.obj_stock(), (objcg_of(g), PAGE_SIZE));
        assert_eq!(t.shared(g), before);
        assert_eq!(t.st.objcg_pages_delta.load(Relaxed), 1);
    }

    #[test]
    fn a_refill_past_a_page_uncharges_only_whole_pages() {
        let t = setup();
        let g = t.group("g");
        t.charge(g, 3000);
        assert_eq!(t.st.obj_stock().1, PAGE_SIZE - 3000);
        // The second needs another page: from the page stock.
        t.charge(g, 3000);
        assert_eq!(t.st.obj_stock().1, 2 * PAGE_SIZE - 6000);
        assert_eq!(t.st.page_stock().1, MEMCG_CHARGE_BATCH - 2);
        assert_eq!(t.st.objcg_pages_delta.load(Relaxed), 2);
        // 2192 + 3000 bytes: one page goes back (to the page stock, as the kernel's
        // obj_cgroup_uncharge_pages refills it), the remainder stays; the objcg stays
        // cached.
        t.uncharge(g, 3000);
        assert_eq!(t.st.obj_stock(), (objcg_of(g), PAGE_SIZE - 3000));
        assert_eq!(t.st.page_stock(), (g as *const _, MEMCG_CHARGE_BATCH - 1));
        assert_eq!(t.st.objcg_pages_delta.load(Relaxed), 1);
        assert_eq!(g.memory.usage(), MEMCG_CHARGE_BATCH);
        assert_eq!(g.objcg.nr_charged_bytes.load(Relaxed), 0);
        // Live bytes = pages charged through the objcg less the stock's bytes.
        assert_eq!(PAGE_SIZE - t.st.obj_stock().1, 3000);
    }

    #[test]
    fn draining_gives_pages_to_the_group_and_the_rest_to_the_objcg() {
        let t = setup();
        let g = t.group("g");
        let root = t.m.root_mem_cgroup();
        t.charge(g, 64);
        // The group's own reference, the obj stock's and the page stock's.
        assert_eq!(g.objcg.refcnt.load(Relaxed), 3);
        t.m.memcg_drain_stock(t.cpu);
        assert_eq!(t.st.obj_stock(), (ptr::null(), 0));
        assert_eq!(t.st.page_stock(), (ptr::null(), 0));
        assert_eq!(t.st.objcg_pages_delta.load(Relaxed), 0);
        assert_eq!(g.objcg.refcnt.load(Relaxed), 1);
        // The page the object lives in stays charged, counted on the objcg with its
        // unused bytes as spare; the page stock's pages went back.
        assert_eq!(g.objcg.nr_pages.load(Relaxed), 1);
        assert_eq!(g.objcg.nr_charged_bytes.load(Relaxed), PAGE_SIZE - 64);
        assert_eq!((g.memory.usage(), root.memory.usage()), (1, 1));
        // Statistics flushed, hierarchically.
        assert_eq!(g.stat(MemcgStat::SlabUnreclaimable), 64);
        assert_eq!(root.stat(MemcgStat::SlabUnreclaimable), 64);
        let mut caches = Vec::new();
        g.for_each_cache(|name, n| caches.push((std::string::String::from(name), n)));
        assert_eq!(caches, [("obj-64".into(), 1)]);
        // The stock takes the spare bytes back; with the object freed it holds a whole
        // page, which the next drain uncharges: nothing stays charged.
        t.charge(g, 64);
        assert_eq!(g.objcg.nr_charged_bytes.load(Relaxed), 0);
        assert_eq!(t.st.obj_stock(), (objcg_of(g), PAGE_SIZE - 128));
        t.uncharge(g, 64);
        t.uncharge(g, 64);
        assert_eq!(t.st.obj_stock().1, PAGE_SIZE);
        t.m.memcg_drain_stock(t.cpu);
        assert_eq!(g.objcg.nr_pages.load(Relaxed), 0);
        assert_eq!(g.objcg.nr_charged_bytes.load(Relaxed), 0);
        assert_eq!((g.memory.usage(), root.memory.usage()), (0, 0));
        assert_eq!(g.stat(MemcgStat::SlabUnreclaimable), 0);
        assert_eq!(root.stat(MemcgStat::SlabUnreclaimable), 0);
    }

    #[test]
    fn switching_to_another_objcg_drains_the_first() {
        let t = setup();
        let (g, h) = (t.group("g"), t.group("h"));
        let root = t.m.root_mem_cgroup();
        t.charge(g, 64);
        t.charge(h, 64);
        assert_eq!(t.st.obj_stock(), (objcg_of(h), PAGE_SIZE - 64));
        // g's obj stock was drained: its page on its objcg, the rest spare, statistics
        // flushed, reference dropped; h's page batch then replaced g's in the page stock.
        assert_eq!(g.objcg.nr_pages.load(Relaxed), 1);
        assert_eq!(g.objcg.nr_charged_bytes.load(Relaxed), PAGE_SIZE - 64);
        assert_eq!(g.stat(MemcgStat::SlabUnreclaimable), 64);
        assert_eq!(g.objcg.refcnt.load(Relaxed), 1);
        assert_eq!(t.st.page_stock(), (h as *const _, MEMCG_CHARGE_BATCH - 1));
        assert_eq!(g.memory.usage(), 1);
        assert_eq!(h.memory.usage(), MEMCG_CHARGE_BATCH);
        assert_eq!(root.memory.usage(), MEMCG_CHARGE_BATCH + 1);
        // Back to g: h is drained the same way, and g's spare bytes come back into the
        // stock (no new page for g).
        t.charge(g, 64);
        assert_eq!(t.st.obj_stock(), (objcg_of(g), PAGE_SIZE - 128));
        assert_eq!(g.objcg.nr_charged_bytes.load(Relaxed), 0);
        assert_eq!(g.memory.usage(), 1);
        assert_eq!(h.objcg.nr_pages.load(Relaxed), 1);
        assert_eq!(h.objcg.nr_charged_bytes.load(Relaxed), PAGE_SIZE - 64);
        assert_eq!(h.stat(MemcgStat::SlabUnreclaimable), 64);
        assert_eq!(root.stat(MemcgStat::SlabUnreclaimable), 128);
    }
}
