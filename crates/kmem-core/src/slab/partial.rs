//! Node partial lists (`add_partial`, `remove_partial`, `get_partial_node`), unfreezing a
//! slab back to its node, and `__kmem_cache_shrink`.
//!
//! Locking: every change of list membership is under the node's `list_lock` (rule 2 of
//! [`super`]).

use super::*;
use crate::page::{Page, PageList};
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use core::ptr::NonNull;

impl<'a, P: Platform> Slub<'a, P> {
    // -----------------------------------------------------------------------
    // Node partial lists.

    /// `add_partial` (list lock held).
    pub(crate) fn add_partial(&self, list: &mut PageList, slab: NonNull<Page>, tail: bool) {
        // SAFETY: the slab is unfrozen and on no list (rule 2); we hold the lock.
        unsafe {
            if tail {
                list.push_tail(slab.as_ptr());
            } else {
                list.push_head(slab.as_ptr());
            }
        }
    }

    /// `remove_partial` (list lock held).
    pub(crate) fn remove_partial(&self, list: &mut PageList, slab: NonNull<Page>) {
        // SAFETY: the slab is on this node's partial list (rule 2); we hold the lock.
        unsafe { list.remove(slab.as_ptr()) };
    }

    /// `get_partial_node`: takes the first slab of node `nid`'s partial list as the
    /// CPU slab (frozen, its whole freelist returned), and moves a few more to the CPU
    /// partial list.
    pub(super) fn get_partial_node(
        &self,
        c: CpuRef<'_>,
        s: &KmemCache,
        nid: usize,
    ) -> Option<usize> {
        let cfg = s.config();
        let cc = s.cpu(c);
        let mut list = s.node(nid).list_lock.lock();
        let slab = NonNull::new(list.first())?;
        self.remove_partial(&mut list, slab);
        // SAFETY: a slab from the node list: live, unfrozen, ours under the lock.
        let sr = unsafe { slab.as_ref() };
        let got = loop {
            let old = Slab::of(sr).state();
            let new = SlabState::new(END_OFFSET, cfg.objects as u64, true);
            if Slab::of(sr).cas_state(old, new) {
                break self.slab_base(slab) + old.offset() as usize;
            }
        };
        if got & 1 != 0 {
            // Rule 2 says a node-list slab has a free object; should it not, the
            // slab is full: let it go (unfrozen, on no list) rather than hand out
            // the end token.
            Slab::of(sr).set_frozen(false);
            return None;
        }
        Slab::of(sr).set_frozen_by(cpu_tag(c));
        // Stock the CPU partial list with up to half its capacity.
        while cc.nr_partial.load(Relaxed) < cfg.cpu_partial_slabs / 2 {
            let Some(more) = NonNull::new(list.first()) else {
                break;
            };
            self.remove_partial(&mut list, more);
            // SAFETY: as above.
            let mr = unsafe { more.as_ref() };
            Slab::of(mr).set_frozen(true);
            Slab::of(mr).set_frozen_by(cpu_tag(c));
            mr.next.store(cc.partial.load(Relaxed), Relaxed);
            cc.partial.store(more.as_ptr(), Relaxed);
            cc.nr_partial
                .store(cc.nr_partial.load(Relaxed) + 1, Relaxed);
            cc.count(SlubStat::CpuPartialNode);
        }
        drop(list);
        Some(got)
    }

    /// Unfreezes a slab (list lock held by the caller), merging `chain` — free objects
    /// the unfreezing CPU held — and the slab's local freelist into its freelist.
    pub(super) fn unfreeze_merge(
        &self,
        cfg: &CacheConfig,
        sr: &Page,
        slab: NonNull<Page>,
        chain: Chain,
    ) -> (SlabState, SlabState) {
        let local = Slab::of(sr).take_local(cfg);
        let chain = match (chain.count, local.count) {
            (_, 0) => chain,
            (0, _) => local,
            _ => {
                // SAFETY: `chain.tail` is the last object of a chain the caller owns.
                unsafe { set_freepointer(cfg, chain.tail, local.head) };
                Chain {
                    head: chain.head,
                    tail: local.tail,
                    count: chain.count + local.count,
                }
            }
        };
        let base = self.slab_base(slab);
        loop {
            let old = Slab::of(sr).state();
            let head = if chain.count > 0 {
                // SAFETY: `chain.tail` ends a chain of free objects we own.
                unsafe { set_freepointer(cfg, chain.tail, base + old.offset() as usize) };
                Some((chain.head - base) as u64)
            } else {
                None
            };
            let new = old.after_unfreeze(head, chain.count);
            if Slab::of(sr).cas_state(old, new) {
                return (old, new);
            }
        }
    }

    /// A full CPU slab leaves its CPU: unfrozen, on no list (rule 2: no lock needed,
    /// but a concurrent free may have made it partial meanwhile — then it goes to the
    /// node list under the lock).
    pub(super) fn unfreeze_full(&self, slab: NonNull<Page>) {
        // SAFETY: the slab is a live slab; we own its frozen state.
        let sr = unsafe { slab.as_ref() };
        let s = Slab::of(sr).cache();
        let nid = self.pages.page_to_nid(slab);
        let mut list = s.node(nid).list_lock.lock();
        let (_, new) = self.unfreeze_merge(s.config(), sr, slab, Chain::EMPTY);
        if !new.list_empty() {
            self.add_partial(&mut list, slab, true);
        }
    }

    /// Unfreezes one CPU partial slab (it holds no CPU freelist) to its node.
    pub(super) fn unfreeze_one(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, slab: NonNull<Page>) {
        // SAFETY: a frozen slab we own.
        let sr = unsafe { slab.as_ref() };
        let nid = self.pages.page_to_nid(slab);
        let mut list = s.node(nid).list_lock.lock();
        let (_, new) = self.unfreeze_merge(s.config(), sr, slab, Chain::EMPTY);
        if new.inuse() == 0 && list.len() >= s.config().min_partial {
            drop(list);
            self.discard_slab(cpu, s, slab);
        } else if !new.list_empty() {
            self.add_partial(&mut list, slab, true);
        }
    }

    /// `__kmem_cache_shrink`: flushes this CPU's state of `s` and the barns, and frees
    /// the empty slabs on the node partial lists and the nodes' kept ones
    /// (`empty.rs`). Returns the slabs freed. Unlike the kernel's, which flushes every
    /// CPU's slab of `s` by IPI, it leaves other owners' sheaves of `s` alone: no
    /// owner can be made to flush at once, and a request would flush all of their
    /// caches at their next slow path. [`crate::Kmem::shrink_all`] makes that request.
    pub fn shrink(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache) -> usize {
        if let Some(c) = cpu {
            self.flush_cpu_cache(c, s);
        }
        self.shrink_barns(cpu, s);
        let mut freed = self.release_empty_slabs(s);
        for nid in 0..self.pages.nr_nodes() {
            loop {
                let mut list = s.node(nid).list_lock.lock();
                let mut p = list.first();
                let mut empty = None;
                while let Some(slab) = NonNull::new(p) {
                    // SAFETY: node-list slabs are live; we hold the lock.
                    let sr = unsafe { slab.as_ref() };
                    p = sr.next.load(Relaxed);
                    if Slab::of(sr).state().inuse() == 0 {
                        empty = Some(slab);
                        break;
                    }
                }
                let Some(slab) = empty else { break };
                self.remove_partial(&mut list, slab);
                drop(list);
                self.discard_slab(cpu, s, slab);
                freed += 1;
            }
        }
        freed
    }
}
