//! A census of a cache's free objects, wherever they wait: the sheaves of the CPU areas
//! the caller owns, the barns, the freelists of the node partial slabs and the nodes'
//! fresh slab tails — so that
//! tests and `validate` can check that every object is in exactly one place (handed
//! out, in one sheaf slot, or on one slab freelist) and none is lost.
//!
//! Locking: each barn's lock and each node's `list_lock` while their part is walked;
//! the CPU areas' sheaves are read as their owner (the caller).

use super::sheaf::{slot, SlabSheaf};
use super::*;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use core::ptr::NonNull;

/// What a census found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SheafCensus {
    /// Objects in the CPU areas' main and spare sheaves.
    pub in_cpu_sheaves: usize,
    /// Objects in the barns' sheaves.
    pub in_barns: usize,
    /// Sheaves in the barns (full and empty).
    pub barn_sheaves: usize,
    /// Objects on the freelists of node partial slabs.
    pub in_partial_slabs: usize,
    /// Objects in the nodes' fresh slab tails (never handed out, unlinked).
    pub in_fresh_tails: usize,
    /// Objects of the nodes' kept empty slabs (`empty.rs`): all of each.
    pub in_empty_slabs: usize,
    /// Objects the cache's slabs hold in all (`nr_slabs * objects`).
    pub total: usize,
    /// A sheaf slot or freelist entry that is not the start of an object of the cache
    /// (the first one found), if any.
    pub foreign: Option<usize>,
}

impl<P: Platform> Slub<'_, P> {
    /// Calls `f` for every free object of `s` in the sheaves of `areas` (which the
    /// caller owns), in the barns, on the node partial slabs' freelists and in the
    /// nodes' kept empty slabs, and
    /// counts them.
    pub fn census(
        &self,
        s: &KmemCache,
        areas: &[CpuRef<'_>],
        mut f: impl FnMut(usize),
    ) -> SheafCensus {
        let cfg = s.config();
        let mut c = SheafCensus::default();
        let mut visit = |obj: usize, c: &mut SheafCensus| {
            // The slab's cache by address first: only a slab of `s`, which the caller
            // holds, is then looked up (a foreign entry may lie in the slab of a cache
            // being destroyed).
            let of_s = self.cache_addr_of(obj as *const u8) == Some(s as *const KmemCache as usize);
            // SAFETY: the slab is one of `s`, whose cache lives (the caller's).
            let ok = of_s
                && matches!(unsafe { self.lookup(obj as *const u8) }, ObjectLookup::Slab(found, _) if core::ptr::eq(found, s));
            if !ok && c.foreign.is_none() {
                c.foreign = Some(obj);
            }
            f(obj);
        };
        for &a in areas {
            let cc = s.cpu(a);
            let main = cc.main.load(Relaxed);
            if !main.is_null() {
                let len = super::sheaf_top::len_of(cc.main_top.load(Relaxed), main);
                walk(main, len, |o| visit(o, &mut c));
                c.in_cpu_sheaves += len;
            }
            let spare = cc.spare.load(Relaxed);
            if !spare.is_null() {
                let len = super::sheaf_top::len_of(cc.spare_top.load(Relaxed), spare);
                walk(spare, len, |o| visit(o, &mut c));
                c.in_cpu_sheaves += len;
            }
        }
        for nid in 0..self.pages.nr_nodes() {
            c.total += s.nr_slabs(nid) * cfg.objects;
            let lists = s.node(nid).barn.lock();
            for mut p in lists.heads() {
                while let Some(sh) = NonNull::new(p) {
                    // SAFETY: barn sheaves are live; we hold the barn's lock.
                    let r = unsafe { sh.as_ref() };
                    let len = r.size.load(Relaxed);
                    walk(sh.as_ptr(), len, |o| visit(o, &mut c));
                    c.in_barns += len;
                    c.barn_sheaves += 1;
                    p = r.next.load(Relaxed);
                }
            }
            drop(lists);
            let mut list = s.node(nid).list_lock.lock();
            let mut p = list.first();
            while let Some(slab) = NonNull::new(p) {
                // SAFETY: node-list slabs are live; we hold the list lock, so their
                // freelists only grow at the head meanwhile.
                let sr = unsafe { slab.as_ref() };
                let st = Slab::of(sr).state();
                let base = self.slab_base(slab);
                let mut obj = base + st.offset() as usize;
                let mut n = 0;
                while obj & 1 == 0 && n < cfg.objects {
                    visit(obj, &mut c);
                    n += 1;
                    // SAFETY: a free object of the slab's freelist.
                    let next = unsafe { get_freepointer(cfg, obj) };
                    if !same_slab(cfg, obj, next) {
                        break;
                    }
                    obj = next;
                }
                c.in_partial_slabs += n;
                p = sr.next.load(Relaxed);
            }
            let mut fresh = 0;
            s.node(nid).fresh.for_each(cfg, &list, |o| {
                visit(o, &mut c);
                fresh += 1;
            });
            c.in_fresh_tails += fresh;
            let mut kept = 0;
            s.node(nid).empty.for_each(&mut list, |slab| {
                // All of a kept slab's objects are free (its freelist is stale).
                let first = self.slab_base(slab) + cfg.red_left;
                for k in 0..cfg.objects {
                    visit(first + k * cfg.size, &mut c);
                }
                kept += cfg.objects;
            });
            c.in_empty_slabs += kept;
        }
        c
    }
}

/// Calls `g` for the objects in slots `0..len` of `sheaf`.
fn walk(sheaf: *mut SlabSheaf, len: usize, mut g: impl FnMut(usize)) {
    for i in 0..len {
        // SAFETY: slots 0..len of a sheaf hold objects (type invariant); the caller
        // holds the sheaf (its owner, or under the barn's lock).
        g(unsafe { *slot(sheaf, i) });
    }
}
