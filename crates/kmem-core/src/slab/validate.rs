//! slub_debug's `validate`: a walk of a cache's listed slabs under their node's
//! locks (`list_lock`, then `full`), checking freelists, counts, red zones, poison and
//! padding, each problem reported in the kernel's format.

use super::debug::{find_not, Problem, POISON_INUSE, RED_ACTIVE, RED_INACTIVE};
use crate::page::{Page, PageFlags};
use crate::platform::Platform;
use crate::slab::{
    get_freepointer, CacheConfig, KmemCache, Slab, SlabFlags, Slub, MAX_OBJS_PER_SLAB,
};
use crate::sync::Ordering::Relaxed;
use core::ptr::NonNull;

impl<P: Platform> Slub<'_, P> {
    /// Walks every slab of `s` on the node lists (and, for a debug cache, the full
    /// list): freelists, counts, red zones, poison, padding. Each problem is reported
    /// in the kernel's format and passed to `found`; returns how many there were.
    /// (Slabs held by CPUs are not seen: flush them first for a complete walk.)
    pub fn validate(&self, s: &KmemCache, found: &mut dyn FnMut(Problem)) -> usize {
        let cfg = s.config();
        let mut n = 0;
        self.for_each_listed_slab(s, &mut |slab| n += self.validate_slab(s, cfg, slab, found));
        n
    }

    /// Calls `f` on every slab of `s` on the node lists and the full lists (a debug
    /// cache keeps its full slabs there), node by node, holding that node's
    /// `list_lock` and then its `full` lock while `f` runs.
    pub(in crate::slab) fn for_each_listed_slab(
        &self,
        s: &KmemCache,
        f: &mut dyn FnMut(NonNull<Page>),
    ) {
        for nid in 0..self.pages.nr_nodes() {
            let node = &s.node(nid);
            let list = node.list_lock.lock();
            let full = node.full.lock();
            for l in [&*list, &*full] {
                let mut p = l.first();
                while let Some(slab) = NonNull::new(p) {
                    // SAFETY: slabs on the lists are live; we hold the locks.
                    p = unsafe { slab.as_ref() }.next.load(Relaxed);
                    f(slab);
                }
            }
        }
    }

    pub(in crate::slab) fn validate_slab(
        &self,
        s: &KmemCache,
        cfg: &CacheConfig,
        slab: NonNull<Page>,
        found: &mut dyn FnMut(Problem),
    ) -> usize {
        let base = self.slab_base(slab);
        // SAFETY: a live slab (caller holds its list lock).
        let sr = unsafe { slab.as_ref() };
        let st = Slab::of(sr).state();
        let mut problems = 0;
        let mut report = |what: &'static str,
                          addr: usize,
                          this: &Self,
                          bytes: Option<(usize, usize, u8, u8, usize)>| {
            this.report_object(s, slab, what, addr, bytes);
            found(Problem {
                what,
                addr,
                slab: slab.as_ptr() as usize,
            });
        };
        if !sr.flags().contains(PageFlags::SLAB) {
            report("Not a valid slab page", base, self, None);
            return 1;
        }
        // Free objects: a bitmap on the stack (`MAX_OBJS_PER_SLAB` bits).
        let mut free = [0u64; MAX_OBJS_PER_SLAB / 64];
        let mut count = 0usize;
        let mut p = base + st.offset() as usize;
        while p != base | 1 {
            if p & 1 != 0 || !self.valid_link(cfg, base, p) || count >= cfg.objects {
                report("Freepointer corrupt", p, self, None);
                return problems + 1;
            }
            let idx = (p - base - cfg.red_left) / cfg.size;
            if idx < MAX_OBJS_PER_SLAB {
                free[idx / 64] |= 1 << (idx % 64);
            }
            count += 1;
            // SAFETY: a valid free object of this slab.
            p = unsafe { get_freepointer(cfg, p) };
        }
        let expected_free = cfg.objects - st.inuse() as usize;
        let local = Slab::of(sr).local_count();
        if count + local != expected_free && !st.frozen() {
            report("Wrong object count", base, self, None);
            problems += 1;
        }
        if !cfg.is_debug() {
            return problems;
        }
        for idx in 0..cfg.objects.min(MAX_OBJS_PER_SLAB) {
            let obj = base + idx * cfg.size + cfg.red_left;
            let is_free = free[idx / 64] & (1 << (idx % 64)) != 0;
            let zone = if is_free { RED_INACTIVE } else { RED_ACTIVE };
            if let Some((bad, from, to)) = self.check_redzones(cfg, obj, zone) {
                let last = (bad..to).rev().find(|&a| {
                    // SAFETY: inside the slot.
                    let b = unsafe { (a as *const u8).read() };
                    b != zone
                });
                // SAFETY: inside the slot.
                let first = unsafe { (bad as *const u8).read() };
                report(
                    "Redzone overwritten",
                    obj,
                    self,
                    Some((bad, last.unwrap_or(bad), first, zone, from)),
                );
                problems += 1;
            }
            if !is_free {
                if let Some((bad, from, to)) = self.check_kmalloc_redzone(cfg, obj) {
                    let last = (bad..to).rev().find(|&a| {
                        // SAFETY: inside the slot.
                        unsafe { (a as *const u8).read() != RED_ACTIVE }
                    });
                    // SAFETY: inside the slot.
                    let first = unsafe { (bad as *const u8).read() };
                    report(
                        "kmalloc Redzone overwritten",
                        obj,
                        self,
                        Some((bad, last.unwrap_or(bad), first, RED_ACTIVE, from)),
                    );
                    problems += 1;
                }
            }
            if is_free {
                if let Some((bad, from, _, expect)) = self.check_poison(cfg, obj) {
                    // SAFETY: inside the slot.
                    let first = unsafe { (bad as *const u8).read() };
                    report(
                        "Poison overwritten",
                        obj,
                        self,
                        Some((bad, bad, first, expect, from)),
                    );
                    problems += 1;
                }
            }
            if cfg.flags.contains(SlabFlags::POISON) {
                let pad = obj + cfg.track_off + self.tracks_len(cfg);
                let end = obj - cfg.red_left + cfg.size;
                if let Some(bad) = find_not(pad, end - pad, POISON_INUSE) {
                    // SAFETY: inside the slot.
                    let first = unsafe { (bad as *const u8).read() };
                    report(
                        "Padding overwritten",
                        obj,
                        self,
                        Some((bad, bad, first, POISON_INUSE, pad)),
                    );
                    problems += 1;
                }
            }
        }
        problems
    }
}
