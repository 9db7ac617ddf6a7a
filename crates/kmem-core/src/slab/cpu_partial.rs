//! CPU partial slabs and flushing a CPU's state (`put_cpu_partial`,
//! `__unfreeze_partials`, `deactivate_slab`, `flush_slab`): what a CPU holds goes back to
//! the node lists, on overflow, on CPU offline (thread exit) and on request.

use super::*;
use crate::page::Page;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use core::ptr::{self, NonNull};

impl<'a, P: Platform> Slub<'a, P> {
    /// `put_cpu_partial`: a frozen slab joins the CPU partial list; over the cap, the
    /// list is unfrozen to the node lists first.
    pub(super) fn put_cpu_partial(&self, c: CpuRef<'_>, s: &KmemCache, slab: NonNull<Page>) {
        let cc = s.cpu(c);
        if cc.nr_partial.load(Relaxed) >= s.config().cpu_partial_slabs {
            self.unfreeze_partials(c, s);
            cc.count(SlubStat::CpuPartialDrain);
        }
        // SAFETY: the slab is frozen for us now.
        unsafe { slab.as_ref() }
            .next
            .store(cc.partial.load(Relaxed), Relaxed);
        cc.partial.store(slab.as_ptr(), Relaxed);
        cc.nr_partial
            .store(cc.nr_partial.load(Relaxed) + 1, Relaxed);
    }

    /// `__unfreeze_partials`: every slab of the CPU partial list goes back to its node.
    pub(super) fn unfreeze_partials(&self, c: CpuRef<'_>, s: &KmemCache) {
        self.unfreeze_partials_as(c, s, Some(c));
    }

    /// [`Slub::unfreeze_partials`], the emptied slabs discarded through `pages`' page
    /// lists (`None`: to the zone).
    fn unfreeze_partials_as(&self, c: CpuRef<'_>, s: &KmemCache, pages: Option<CpuRef<'_>>) {
        let cc = s.cpu(c);
        let mut p = cc.partial.swap(ptr::null_mut(), Relaxed);
        cc.nr_partial.store(0, Relaxed);
        while let Some(slab) = NonNull::new(p) {
            // SAFETY: a frozen slab of our CPU partial list.
            p = unsafe { slab.as_ref() }.next.load(Relaxed);
            self.unfreeze_one(pages, s, slab);
        }
    }

    /// `deactivate_slab`: the CPU slab leaves the CPU; the CPU freelist `cur` (objects
    /// or end token) merges back into the slab.
    pub(super) fn deactivate_slab(
        &self,
        c: CpuRef<'_>,
        s: &KmemCache,
        slab: NonNull<Page>,
        cur: usize,
    ) {
        self.deactivate_slab_as(c, s, slab, cur, Some(c));
    }

    /// [`Slub::deactivate_slab`], an emptied slab discarded through `pages`' page
    /// lists (`None`: to the zone).
    fn deactivate_slab_as(
        &self,
        c: CpuRef<'_>,
        s: &KmemCache,
        slab: NonNull<Page>,
        cur: usize,
        pages: Option<CpuRef<'_>>,
    ) {
        let cfg = s.config();
        let cc = s.cpu(c);
        // Count the CPU freelist and find its tail.
        let mut chain = Chain::EMPTY;
        let mut p = cur;
        while p & 1 == 0 {
            if chain.count == 0 {
                chain.head = p;
            }
            chain.count += 1;
            chain.tail = p;
            // SAFETY: objects on the CPU freelist are free objects of the slab.
            let next = unsafe { get_freepointer(cfg, p) };
            if !same_slab(cfg, p, next) || chain.count > cfg.objects as u64 {
                // Corrupt: keep what came before; the rest stays counted in use.
                self.report_corrupt_link(cfg, p, next);
                break;
            }
            p = next;
        }
        // SAFETY: a live slab, frozen for us.
        let sr = unsafe { slab.as_ref() };
        let nid = self.pages.page_to_nid(slab);
        let mut list = s.node(nid).list_lock.lock();
        let (old, new) = self.unfreeze_merge(cfg, sr, slab, chain);
        if !old.list_empty() {
            cc.count(SlubStat::DeactivateRemoteFrees);
        }
        if new.inuse() == 0 && list.len() >= cfg.min_partial {
            drop(list);
            cc.count(SlubStat::DeactivateEmpty);
            self.discard_slab(pages, s, slab);
        } else if !new.list_empty() {
            let to_tail = new.inuse() == 0;
            self.add_partial(&mut list, slab, to_tail);
            cc.count(if to_tail {
                SlubStat::DeactivateToTail
            } else {
                SlubStat::DeactivateToHead
            });
        } else {
            cc.count(SlubStat::DeactivateFull);
        }
    }

    /// `flush_slab` + `unfreeze_partials`: all of this CPU's state of `s` goes back
    /// to the nodes (CPU going offline, shrink).
    pub fn flush_cpu_cache(&self, c: CpuRef<'_>, s: &KmemCache) {
        self.flush_cpu_cache_as(c, s, Some(c));
    }

    /// [`Slub::flush_cpu_cache`] of an area whose owner goes on using it meanwhile,
    /// but not `s` (`kmem_cache_destroy`, which flushes every area's state of the
    /// cache): `s`'s state in it only. What that flush frees goes to the zone and the
    /// barns, not through the area's page lists or its sheaves of the sheaf caches,
    /// which its owner's operations on other caches use at the same time.
    pub(crate) fn flush_foreign_cpu_cache(&self, c: CpuRef<'_>, s: &KmemCache) {
        self.flush_cpu_cache_as(c, s, None);
    }

    /// [`Slub::flush_cpu_cache`], with `own` for everything that is not `s`'s state
    /// in `c`: the page lists and sheaves that what it frees goes through, or `None`.
    fn flush_cpu_cache_as(&self, c: CpuRef<'_>, s: &KmemCache, own: Option<CpuRef<'_>>) {
        if s.config().fast != FastPath::CpuSlab {
            self.flush_cpu_sheaves(c, s, own);
            return;
        }
        let cc = s.cpu(c);
        let cur = self.take_cpu_freelist(c, s.config(), cc);
        if cur != 0 {
            let slab = self.freelist_slab(cur);
            self.deactivate_slab_as(c, s, slab, cur, own);
            cc.count(SlubStat::CpuslabFlush);
        }
        self.unfreeze_partials_as(c, s, own);
    }

    /// Does what others asked of this area's owner (`DRAIN_CACHES`).
    #[inline]
    pub(super) fn check_drain_request(&self, c: CpuRef<'_>) {
        if c.area().drain_request.load(Relaxed) & crate::percpu::DRAIN_CACHES != 0 {
            self.flush_request(c);
        }
    }

    /// Never waits for the cache list's lock (as the barns' decay and the kept slabs'
    /// reclaim): its holder may be this thread, further up, allocating inside a walk
    /// of the list (`kmem::stats`, slabinfo), which a request from any thread's
    /// `shrink_all` would have made wait for itself. The request then stays, for the
    /// next slow path.
    #[cold]
    pub(super) fn flush_request(&self, c: CpuRef<'_>) {
        let Some(_g) = self.caches.lock.try_lock() else {
            return;
        };
        c.area()
            .drain_request
            .fetch_and(!crate::percpu::DRAIN_CACHES, Relaxed);
        // Under the cache list's lock: no reporting pass (see `Kmem::shrink_all`).
        self.pages.with_reporting_deferred(|| {
            // SAFETY: the list's lock is held (just taken).
            unsafe { self.caches.for_each_locked(|s| self.flush_cpu_cache(c, s)) };
        });
    }
}
