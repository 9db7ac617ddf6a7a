//! A node's fresh slab (sheaves design): the untouched tail of the last new slab a
//! refill made. A sheaf refill that needs a new slab takes what fills the sheaf and
//! leaves the rest of the slab unlinked: the objects from `next` to the slab's end
//! were never handed out and never carried a free pointer. The next refill on the node
//! takes them by address (after the node's partial slabs), so an object's first trip
//! to a sheaf writes and walks no free pointer — a batch that outgrows the sheaves
//! (build a structure, drop it) no longer links half of every new slab only to walk
//! the links on the next refill. mimalloc extends a fresh page's free list lazily for
//! the same reason. (The kernel links the rest of the slab, `alloc_from_new_slab`.)
//!
//! The slab's [`SlabState`] counts the fresh objects in use, as if handed out: it is
//! full to everybody else (on no list until a free comes), and it cannot become empty
//! (so it is never discarded) while the node holds its tail. Shrinking, memory
//! pressure and cache destruction give the tail back ([`Slub::release_fresh_slabs`]):
//! linked and freed to the slab like any other run of objects.
//!
//! Only caches whose new slabs list their objects in address order use it (not
//! `RANDOM_FREELIST`: a fresh tail is taken in address order).
//!
//! Locking: a node's fresh slab is read and written only under its `list_lock` (the
//! methods that touch it take the locked list as proof).

use super::freelist::FreePointerKey;
use super::*;
use crate::page::PageList;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::{AtomicPtr, AtomicUsize, Ordering::Relaxed};
use core::ptr::NonNull;

/// A node's fresh slab: `slab`'s objects from address `next` to its last one are
/// fresh (null `slab`: none).
///
/// Invariants (under the node's `list_lock`): `slab`, when set, is a live slab of the
/// node's cache on this node, not frozen; `next` is the address of one of its objects,
/// and every object from there to the end is counted in the slab's `inuse`, is on no
/// freelist and in no sheaf, and is handed to nobody.
pub(crate) struct FreshSlab {
    slab: AtomicPtr<Page>,
    next: AtomicUsize,
}

impl FreshSlab {
    pub(super) const fn new() -> Self {
        Self {
            slab: AtomicPtr::new(core::ptr::null_mut()),
            next: AtomicUsize::new(0),
        }
    }

    /// Takes the tail: `(slab, first fresh object)`, leaving the node without one.
    fn take(&self, _locked: &PageList) -> Option<(NonNull<Page>, usize)> {
        // Plain loads and stores: the list lock orders them (no locked exchange).
        let slab = NonNull::new(self.slab.load(Relaxed))?;
        self.slab.store(core::ptr::null_mut(), Relaxed);
        Some((slab, self.next.load(Relaxed)))
    }

    /// Whether the node holds a fresh slab.
    pub(super) fn is_set(&self, _locked: &PageList) -> bool {
        !self.slab.load(Relaxed).is_null()
    }

    /// Fresh objects the node holds (for counts of free objects).
    pub(super) fn objects(&self, cfg: &CacheConfig, _locked: &PageList) -> usize {
        if self.slab.load(Relaxed).is_null() {
            return 0;
        }
        // `next` lies inside the slab, and slabs are aligned to their size.
        let next = self.next.load(Relaxed);
        (objects_end(cfg, next & !(cfg.slab_bytes() - 1)) - next) / cfg.size
    }

    /// Calls `f` for every fresh object the node holds (census).
    pub(super) fn for_each(&self, cfg: &CacheConfig, _locked: &PageList, mut f: impl FnMut(usize)) {
        if self.slab.load(Relaxed).is_null() {
            return;
        }
        let next = self.next.load(Relaxed);
        let end = objects_end(cfg, next & !(cfg.slab_bytes() - 1));
        let mut obj = next;
        while obj < end {
            f(obj);
            obj += cfg.size;
        }
    }
}

/// The address just past a slab's last object.
fn objects_end(cfg: &CacheConfig, base: usize) -> usize {
    base + cfg.red_left + cfg.objects * cfg.size
}

impl<P: Platform> Slub<'_, P> {
    /// Takes up to `out.len()` objects from node `nid`'s fresh slab, by address; the
    /// node forgets the slab once its last object is out. The caller holds the node's
    /// `list_lock` (`list`).
    pub(super) fn take_fresh(
        &self,
        s: &KmemCache,
        nid: usize,
        list: &PageList,
        out: &mut [usize],
    ) -> usize {
        let fresh = &s.node(nid).fresh;
        let Some((slab, next)) = fresh.take(list) else {
            return 0;
        };
        let cfg = s.config();
        let end = objects_end(cfg, self.slab_base(slab));
        let n = ((end - next) / cfg.size).min(out.len());
        let mut obj = next;
        for o in &mut out[..n] {
            *o = obj;
            obj += cfg.size;
        }
        if obj < end {
            fresh.slab.store(slab.as_ptr(), Relaxed);
            fresh.next.store(obj, Relaxed);
        }
        n
    }

    /// Makes `slab` (new, on node `nid`, its objects from `next` on fresh: in use and
    /// unlinked) the node's fresh slab; if the node has one already (another CPU's
    /// refill got there first), the tail is freed to the slab instead.
    pub(super) fn keep_fresh(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        nid: usize,
        slab: NonNull<Page>,
        next: usize,
    ) {
        let list = s.node(nid).list_lock.lock();
        let fresh = &s.node(nid).fresh;
        if !fresh.is_set(&list) {
            fresh.slab.store(slab.as_ptr(), Relaxed);
            fresh.next.store(next, Relaxed);
            return;
        }
        drop(list);
        self.free_fresh_tail(cpu, s, slab, next);
    }

    /// Gives every node's fresh tail of `s` back to its slab (shrinking, memory
    /// pressure, cache destruction): the slab then becomes partial, or empty and
    /// discarded, like any slab after a free. Returns the objects given back.
    pub fn release_fresh_slabs(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache) -> usize {
        let mut released = 0;
        for nid in 0..self.pages.nr_nodes() {
            let list = s.node(nid).list_lock.lock();
            let taken = s.node(nid).fresh.take(&list);
            drop(list);
            if let Some((slab, next)) = taken {
                released += self.free_fresh_tail(cpu, s, slab, next);
            }
        }
        released
    }

    /// Links a fresh tail (objects from `next` to the end of `slab`, which nobody else
    /// can reach now) and frees it to its slab with one `__slab_free`. Returns how many.
    fn free_fresh_tail(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        next: usize,
    ) -> usize {
        let cfg = s.config();
        let end = objects_end(cfg, self.slab_base(slab));
        let cnt = (end - next) / cfg.size;
        if cnt == 0 {
            return 0;
        }
        let tail = end - cfg.size;
        let (key, size) = (FreePointerKey::of(cfg), cfg.size);
        let mut obj = next;
        while obj < tail {
            // SAFETY: fresh objects of the slab, ours (taken from the node).
            unsafe { key.set(obj, obj + size) };
            obj += size;
        }
        // SAFETY: a chain of objects of `slab` counted in use and held by nobody.
        unsafe { self.slab_free(cpu, s, slab, next, tail, cnt as u64) };
        cnt
    }
}
