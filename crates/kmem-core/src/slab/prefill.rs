//! Prefilled sheaves for allocations that must not fail
//! (`kmem_cache_prefill_sheaf`, `kmem_cache_alloc_from_sheaf`,
//! `kmem_cache_refill_sheaf`, `kmem_cache_return_sheaf`): a caller that will need up
//! to N objects later, where it cannot fail or wait (under its own lock), takes a
//! sheaf holding N objects first and allocates from it.
//!
//! A request up to the cache's capacity takes a barn sheaf (topped up from the slabs
//! if it holds too few) or a sheaf filled from the slabs; a larger one an *oversize*
//! sheaf of its own capacity. A returned sheaf goes to the barn (or, when the barn is
//! full or the sheaf is oversize, its objects to the slabs). Caches without sheaves (slub_debug, the CPU-slab design)
//! get oversize sheaves filled object by object, so every check runs.
//!
//! Locking: as the sheaf slow paths (the barn's lock; `list_lock` during a refill).

use super::sheaf::{barn_owner, slot, SlabSheaf};
use super::*;
use crate::gfp::Gfp;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use core::ptr::NonNull;

impl<P: Platform> Slub<'_, P> {
    /// `kmem_cache_prefill_sheaf`: a sheaf holding at least `size` objects of `s`, the
    /// caller's until [`Slub::return_sheaf`]; `None` when memory runs out.
    pub fn prefill_sheaf(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        size: usize,
    ) -> Option<NonNull<SlabSheaf>> {
        let cfg = s.config();
        let cap = cfg.sheaf_capacity;
        if size > cap || cap == 0 {
            s.stat(cpu, SlubStat::SheafPrefillOversize);
            let sheaf = self.alloc_empty_sheaf(cpu, s, gfp, size.max(1))?;
            return self.fill_to(cpu, s, gfp, sheaf, size);
        }
        let nid = self.node_of(cpu);
        let from_barn = s
            .node(nid)
            .barn
            .lock_counted(self.spill_account(s))
            .get_full(barn_owner(cpu));
        let sheaf = match from_barn {
            Some(sh) => {
                // SAFETY: a barn sheaf, ours now.
                if unsafe { sh.as_ref() }.size.load(Relaxed) >= size {
                    s.stat(cpu, SlubStat::SheafPrefillFast);
                    return Some(sh);
                }
                sh
            }
            None => self.alloc_empty_sheaf(cpu, s, gfp, cap)?,
        };
        s.stat(cpu, SlubStat::SheafPrefillSlow);
        self.fill_to(cpu, s, gfp, sheaf, size)
    }

    /// Fills `sheaf` to at least `size` objects (to its capacity for a standard
    /// sheaf), or gives everything back and returns `None`.
    fn fill_to(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        sheaf: NonNull<SlabSheaf>,
        size: usize,
    ) -> Option<NonNull<SlabSheaf>> {
        // SAFETY: a sheaf the caller holds.
        let r = unsafe { sheaf.as_ref() };
        let len = r.size.load(Relaxed);
        if len >= size {
            return Some(sheaf);
        }
        let filled = if s.config().sheaf_capacity == 0 {
            // No sheaves: object by object, through every check.
            self.fill_more(cpu, s, gfp, sheaf, size)
        } else {
            let n = self.refill_sheaf(cpu, s, gfp, sheaf.as_ptr(), len);
            r.size.store(n, Relaxed);
            n >= size
        };
        if !filled {
            self.drop_sheaf(cpu, s, sheaf);
            return None;
        }
        Some(sheaf)
    }

    /// `kmem_cache_alloc_from_sheaf`: an object from a prefilled sheaf (`None` once it
    /// is empty), zeroed for `__GFP_ZERO`.
    ///
    /// # Safety
    /// `sheaf` came from [`Slub::prefill_sheaf`] for `s` and is not returned yet.
    pub unsafe fn alloc_from_sheaf(
        &self,
        s: &KmemCache,
        gfp: Gfp,
        sheaf: NonNull<SlabSheaf>,
    ) -> Option<NonNull<u8>> {
        // SAFETY: the caller's sheaf (contract).
        let r = unsafe { sheaf.as_ref() };
        let n = r.size.load(Relaxed);
        if n == 0 {
            return None;
        }
        // SAFETY: slots 0..n hold objects.
        let obj = unsafe { *slot(sheaf.as_ptr(), n - 1) };
        r.size.store(n - 1, Relaxed);
        let obj = NonNull::new(obj as *mut u8)?;
        self.note_uncharged(s, obj);
        // SAFETY: a new object of `s`, handed to the caller.
        unsafe { post_alloc_init(s, obj, gfp) };
        Some(obj)
    }

    /// `kmem_cache_refill_sheaf`: tops a prefilled sheaf up to `size` objects (a
    /// larger request swaps it for a new sheaf). On failure the old sheaf is kept.
    ///
    /// # Safety
    /// As [`Slub::alloc_from_sheaf`].
    pub unsafe fn refill_prefilled_sheaf(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        sheaf: &mut NonNull<SlabSheaf>,
        size: usize,
    ) -> bool {
        // SAFETY: the caller's sheaf.
        let r = unsafe { sheaf.as_ref() };
        let (len, cap) = (r.size.load(Relaxed), r.capacity.load(Relaxed));
        if len >= size {
            return true;
        }
        if size <= cap {
            if s.config().sheaf_capacity == 0 {
                return self.fill_more(cpu, s, gfp, *sheaf, size);
            }
            let n = self.refill_sheaf(cpu, s, gfp, sheaf.as_ptr(), len);
            r.size.store(n, Relaxed);
            return n >= size;
        }
        let Some(new) = self.prefill_sheaf(cpu, s, gfp, size) else {
            return false;
        };
        let old = core::mem::replace(sheaf, new);
        // SAFETY: the old sheaf is the caller's, given up for the new one.
        unsafe { self.return_sheaf(cpu, s, old) };
        true
    }

    /// Object-by-object top-up of a sheaf of a cache without sheaves.
    fn fill_more(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        sheaf: NonNull<SlabSheaf>,
        size: usize,
    ) -> bool {
        // SAFETY: the caller's sheaf.
        let r = unsafe { sheaf.as_ref() };
        let mut n = r.size.load(Relaxed);
        while n < size {
            let Some(p) = self.alloc(cpu, s, gfp - Gfp::ZERO) else {
                break;
            };
            // SAFETY: slot `n` < size <= capacity.
            unsafe { *slot(sheaf.as_ptr(), n) = p.as_ptr() as usize };
            n += 1;
        }
        r.size.store(n, Relaxed);
        n >= size
    }

    /// `kmem_cache_return_sheaf`: gives back a prefilled sheaf and the objects left in
    /// it: to the barn, else (full barn, oversize sheaf) to the slabs.
    ///
    /// # Safety
    /// As [`Slub::alloc_from_sheaf`]; the caller stops using `sheaf`.
    pub unsafe fn return_sheaf(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        sheaf: NonNull<SlabSheaf>,
    ) {
        let cfg = s.config();
        // SAFETY: the caller's sheaf.
        let cap = unsafe { sheaf.as_ref() }.capacity.load(Relaxed);
        if cfg.sheaf_capacity == 0 || cap != cfg.sheaf_capacity {
            s.stat(cpu, SlubStat::SheafReturnSlow);
            self.drop_sheaf(cpu, s, sheaf);
            return;
        }
        s.stat(cpu, SlubStat::SheafReturnFast);
        self.sheaf_to_barn(cpu, s, self.node_of(cpu), sheaf);
    }

    /// Frees every object left in `sheaf` and the sheaf.
    fn drop_sheaf(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, sheaf: NonNull<SlabSheaf>) {
        // SAFETY: the caller's sheaf.
        let len = unsafe { sheaf.as_ref() }.size.load(Relaxed);
        if s.config().sheaf_capacity == 0 {
            for i in 0..len {
                // SAFETY: slots 0..len hold objects of `s` the sheaf owns.
                let p = unsafe { *slot(sheaf.as_ptr(), i) };
                if let Some(p) = NonNull::new(p as *mut u8) {
                    // SAFETY: as above, given up.
                    unsafe { self.free(cpu, s, p) };
                }
            }
            // SAFETY: the sheaf header is ours.
            unsafe { sheaf.as_ref() }.size.store(0, Relaxed);
        } else {
            self.sheaf_flush(cpu, s, sheaf.as_ptr(), len);
        }
        self.free_empty_sheaf(cpu, s, sheaf);
    }

    /// `kmem_cache_sheaf_size`: objects left in a prefilled sheaf.
    ///
    /// # Safety
    /// `sheaf` came from [`Slub::prefill_sheaf`] and was not returned yet.
    pub unsafe fn sheaf_size(&self, sheaf: NonNull<SlabSheaf>) -> usize {
        // SAFETY: a live sheaf (the caller's).
        unsafe { sheaf.as_ref() }.size.load(Relaxed)
    }

    /// The node of `cpu`'s area, or the platform's current node.
    fn node_of(&self, cpu: Option<CpuRef<'_>>) -> usize {
        match cpu {
            Some(c) => self.pages_local_node(c),
            None => self.pages.platform().numa_node_id() % self.pages.nr_nodes(),
        }
    }
}
