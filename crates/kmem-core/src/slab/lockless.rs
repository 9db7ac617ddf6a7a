//! Per-CPU mode with lockless fast paths (`cpu-cas`): the allocation pop and the free
//! push on a shared CPU area's `(freelist, tid)` with one double-word CAS, as SLUB's
//! `this_cpu_cmpxchg_double` fast path does, and what the holder of the area's lock does
//! in that mode.

use super::*;
use crate::gfp::Gfp;
use crate::page::Page;
use crate::percpu::{CpuArea, CpuRef};
use crate::platform::Platform;
use crate::sync::Ordering::Acquire;
use core::ptr::NonNull;

/// The outcome of a lockless push.
pub(super) enum Push {
    /// Pushed.
    Done,
    /// The object is already at the freelist's head: a double free.
    AtHead,
    /// The object's slab is not this CPU's slab (or there is none).
    NotCpuSlab,
}

impl<'a, P: Platform> Slub<'a, P> {
    /// Per-CPU mode, under the area's lock: the lockless pop, else the slow path.
    #[inline(never)]
    pub(super) fn alloc_locked_lockless(
        &self,
        c: CpuRef<'_>,
        s: &KmemCache,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        // With rseq, the lock holder pops only from what it takes (slow path).
        let popped = if s.config().access == PerCpuAccess::Rseq {
            None
        } else {
            self.pop_lockless(s.cpu(c), s.config())
        };
        let obj = match popped {
            Some(o) => o,
            None => self.slab_alloc_slow(c, s, gfp, None)?,
        };
        let obj = NonNull::new(obj as *mut u8)?;
        // SAFETY: a new object of `s`, handed to our caller.
        unsafe { post_alloc_init(s, obj, gfp) };
        Some(obj)
    }

    /// The lockless `slab_alloc` fast path of "slub: Fastpath optimization (especially
    /// for RT)" (with Joonsoo
    /// Kim's loop): read `tid` then `freelist`, read the object's free pointer, and
    /// swap `(freelist, tid)` for `(next, tid + TID_STEP)` with one double-word CAS;
    /// retry when another context (on this CPU or on another, having read the CPU id
    /// before it moved) changed the pair meanwhile. `None`: no object on the CPU
    /// freelist (or a corrupt link, left for the slow path to report).
    #[inline]
    pub(super) fn pop_lockless(&self, cc: &KmemCacheCpu, cfg: &CacheConfig) -> Option<usize> {
        loop {
            let tid = cc.tid.load(Acquire);
            let obj = cc.freelist.load(Acquire);
            if obj & 1 != 0 || obj == 0 {
                return None;
            }
            // SAFETY: `obj` was a free object of this CPU's slab when read. If another
            // context has taken it since, the word read is stale (slab memory stays
            // mapped: sections are never unmapped) and the CAS below fails, `tid`
            // having moved.
            let next = unsafe { get_freepointer_racy(cfg, obj) };
            if !same_slab(cfg, obj, next) {
                if cc.tid.load(Acquire) == tid {
                    return None;
                }
                continue;
            }
            if cc.cas_pair((obj, tid), (next, tid.wrapping_add(TID_STEP))) {
                cc.count(SlubStat::AllocFastpath);
                return Some(obj);
            }
        }
    }

    /// The lockless free fast path: pushes the chain `head..=tail` (objects of the
    /// slab at `base`, which the caller owns) on the CPU freelist with one double-word
    /// CAS, if that slab is this CPU's slab.
    #[inline]
    pub(super) fn push_lockless(
        &self,
        cc: &KmemCacheCpu,
        cfg: &CacheConfig,
        base: usize,
        head: usize,
        tail: usize,
    ) -> Push {
        loop {
            let tid = cc.tid.load(Acquire);
            let cur = cc.freelist.load(Acquire);
            if cur == 0 || cur.wrapping_sub(base) >= cfg.slab_bytes() {
                return Push::NotCpuSlab;
            }
            if cur == head {
                return Push::AtHead;
            }
            // SAFETY: the caller owns the chain; its tail's free pointer is ours.
            unsafe { set_freepointer(cfg, tail, cur) };
            if cc.cas_pair((cur, tid), (head, tid.wrapping_add(TID_STEP))) {
                return Push::Done;
            }
        }
    }

    /// Per-CPU mode, without the area's lock: the lockless allocation fast path on
    /// `area`'s freelist of `s`. `None`: take the area's lock and allocate as usual.
    #[inline]
    pub fn alloc_lockless(&self, area: &CpuArea, s: &KmemCache) -> Option<NonNull<u8>> {
        let cfg = s.config();
        if cfg.access != PerCpuAccess::Cas {
            return None;
        }
        let obj = NonNull::new(self.pop_lockless(s.cpu_of(area), cfg)? as *mut u8)?;
        self.note_uncharged(s, obj);
        Some(obj)
    }

    /// Per-CPU mode, without the area's lock: frees `obj` (an object of `slab` of `s`,
    /// checked by the caller) onto `area`'s freelist if its slab is that CPU's slab.
    /// `Some(false)`: refused, a double free at the freelist's head (reported).
    /// `None`: take the area's lock and free as usual.
    ///
    /// # Safety
    /// `obj` is the start of an object of `slab` of `s`, owned by the caller.
    #[inline]
    pub unsafe fn free_lockless(
        &self,
        area: &CpuArea,
        s: &KmemCache,
        slab: NonNull<Page>,
        obj: usize,
    ) -> Option<bool> {
        let cfg = s.config();
        if cfg.access != PerCpuAccess::Cas || cfg.off_fast_paths() {
            return None;
        }
        let cc = s.cpu_of(area);
        let base = obj & !(cfg.slab_bytes() - 1);
        match self.push_lockless(cc, cfg, base, obj, obj) {
            Push::Done => {
                cc.count(SlubStat::FreeFastpath);
                Some(true)
            }
            Push::AtHead => Some(self.report_double_free(s, slab, obj)),
            Push::NotCpuSlab => None,
        }
    }

    /// [`Slub::free_object`] in per-CPU mode with lockless fast paths, by the holder of
    /// the area's lock: the lockless push if the object is in the CPU slab, else as
    /// the owner (a slab this CPU froze, or `__slab_free`).
    ///
    /// # Safety
    /// As [`Slub::free_object`].
    #[inline(never)]
    pub(super) unsafe fn free_object_lockless(
        &self,
        c: CpuRef<'_>,
        s: &KmemCache,
        slab: NonNull<Page>,
        obj: usize,
    ) -> bool {
        let cfg = s.config();
        let cc = s.cpu(c);
        let base = obj & !(cfg.slab_bytes() - 1);
        // (With rseq the lock holder does not push: only the CPU's own sections do.)
        let pushed = if cfg.access == PerCpuAccess::Rseq {
            Push::NotCpuSlab
        } else {
            self.push_lockless(cc, cfg, base, obj, obj)
        };
        match pushed {
            Push::Done => {
                cc.count(SlubStat::FreeFastpath);
                return true;
            }
            Push::AtHead => return self.report_double_free(s, slab, obj),
            Push::NotCpuSlab => {}
        }
        // The rest is the lock holder's, as an owner's.
        // SAFETY: forwarded.
        unsafe { self.free_object_elsewhere(Some(c), s, slab, obj) }
    }
}
