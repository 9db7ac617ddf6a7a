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
use core::ptr::{self};

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
            // consume_obj_stock
            let have = st.nr_bytes.load(Relaxed);
            if ptr::eq(st.cached_objcg.load(Relaxed), objcg)
                && ptr::eq(st.stat_cache.load(Relaxed), s)
                && have >= size
            {
                set(&st.nr_bytes, have - size);
                return true;
            }
        }
        self.obj_cgroup_charge_slow(cpu, objcg, s, size)
    }

    /// `obj_cgroup_uncharge` for an object of `s`: gives `size` bytes back. The fast
    /// path is one addition in the stock.
    #[inline]
    pub fn obj_cgroup_uncharge(
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
            objcg.put();
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
            st.stat_cache
                .store(s as *const KmemCache as *mut KmemCache, Relaxed);
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
        st.stat_cache.store(ptr::null_mut(), Relaxed);
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
        objcg.put();
    }

    /// `__mod_objcg_mlstate` for the stock: the objects of `stat_cache` allocated
    /// (net) since the last flush go to the group's statistics.
    pub(super) fn flush_stock_stats(&self, st: &MemcgStock) {
        let bytes = stat_lag(st);
        set(&st.stat_base, st.nr_bytes.load(Relaxed));
        let objcg = st.cached_objcg.load(Relaxed);
        let cache = st.stat_cache.load(Relaxed);
        // SAFETY: the cached objcg is kept alive by the stock's reference; the stock
        // names a cache only while objects of it counted here are live or the count is
        // zero (a cache with live objects cannot be destroyed).
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
        self.drain_obj_stock(st);
        self.drain_page_stock(st);
        c.area().drain_request.fetch_and(!DRAIN_STOCK, Relaxed);
    }

    #[inline]
    pub(super) fn check_stock_drain(&self, c: CpuRef<'_>) {
        if c.area().drain_request.load(Relaxed) & DRAIN_STOCK != 0 {
            self.memcg_drain_stock(c);
        }
    }
}
