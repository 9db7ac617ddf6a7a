//! Allocation: the fast path (`slab_alloc_node`: pop the CPU freelist), the slow path
//! (`___slab_alloc`: the CPU slab's remote frees, CPU partial slabs, node partial slabs, a
//! new slab) and allocation by contexts without a CPU area.
//!
//! Locking: the fast path takes no lock; the slow path takes a node's `list_lock` only to
//! move slabs off the node list.

use super::*;
use crate::gfp::Gfp;
use crate::page::{Page, MAX_NUMNODES};
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use core::ptr::{self, NonNull};

/// `slab_post_alloc_hook`'s initialisation: zeroes the new object `obj` of `s` when
/// `gfp` asks for `__GFP_ZERO`. Every allocation path of the slab layer that hands out
/// an object (the platform's own fast paths too) ends here; memcg's objcg sheaves hand
/// out objects of sheaf caches only, and zero them themselves.
///
/// # Safety
/// `obj` is an object of `s` just allocated for the caller (its `object_size` bytes
/// are the caller's).
#[inline(always)]
pub unsafe fn post_alloc_init(s: &KmemCache, obj: NonNull<u8>, gfp: Gfp) {
    if gfp.contains(Gfp::ZERO) {
        // SAFETY: the object is the caller's, `object_size` bytes long.
        unsafe { ptr::write_bytes(obj.as_ptr(), 0, s.config().object_size) };
    }
}

impl<'a, P: Platform> Slub<'a, P> {
    // -----------------------------------------------------------------------
    // Allocation.

    /// `kmem_cache_alloc`: an object of `s`, or `None` when memory runs out.
    #[inline]
    pub fn alloc(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        self.alloc_node(cpu, s, gfp, None)
    }

    /// `kmem_cache_alloc_node`: an object on node `nid` if given; `None` for a node
    /// past [`MAX_NUMNODES`], which no cache has.
    #[inline]
    pub fn alloc_node(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        nid: Option<usize>,
    ) -> Option<NonNull<u8>> {
        if nid.is_some_and(|n| n >= MAX_NUMNODES) {
            return None;
        }
        let obj = self.alloc_node_unmarked(cpu, s, gfp, nid)?;
        self.note_uncharged(s, obj);
        Some(obj)
    }

    /// [`Slub::alloc`] for the memory controller's charged allocations, which record
    /// the object's objcg themselves: the same object, its slab not marked
    /// [`PageFlags::SLAB_UNCHARGED`] (see [`Slub::note_uncharged`]).
    #[inline]
    pub(crate) fn alloc_charged(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        self.alloc_node_unmarked(cpu, s, gfp, None)
    }

    /// Records that `obj`, an object of `s` just allocated, goes to its caller
    /// without a charge: when `s` is one of the accounted kmalloc caches with objcg
    /// sheaves ([`CacheConfig::objcg_class`]), its slab is marked
    /// [`PageFlags::SLAB_UNCHARGED`] (once); for every other cache, nothing. Every
    /// allocation path that can hand out such an object runs it but the memory
    /// controller's charged ones ([`Slub::alloc_charged`],
    /// [`Slub::alloc_fast_charged`]); the inline pops refuse these caches (their
    /// `inline_tag` is the zero line's), and the platform's restartable pop
    /// (`kmem`'s per-CPU rseq mode) runs it too. A charged thread's
    /// take-in trusts a slab whose objects were all charged to its objcg only while
    /// the mark is absent (`memcontrol::intake`).
    #[inline(always)]
    pub fn note_uncharged(&self, s: &KmemCache, obj: NonNull<u8>) {
        if s.config().objcg_class().is_some() {
            Self::mark_uncharged(self.pages, obj);
        }
    }

    /// [`Slub::note_uncharged`]'s mark. (Given the page allocator rather than the
    /// `Slub`, which the platform's rseq pop would otherwise build in memory on its
    /// path, before the test.)
    #[cold]
    #[inline(never)]
    fn mark_uncharged(pages: &PageAllocator<P>, obj: NonNull<u8>) {
        // The slab of an object just allocated: live while its caller holds the
        // object, so only other marks write its head's flags meanwhile, and
        // `insert_flags` is an atomic OR.
        if let Some(head) = pages.virt_to_slab_used(obj.as_ptr()) {
            if !head.flags().contains(PageFlags::SLAB_UNCHARGED) {
                head.insert_flags(PageFlags::SLAB_UNCHARGED);
            }
        }
    }

    /// [`Slub::alloc_node`] without [`Slub::note_uncharged`].
    #[inline]
    fn alloc_node_unmarked(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        nid: Option<usize>,
    ) -> Option<NonNull<u8>> {
        let cfg = s.config();
        let obj = match cpu {
            Some(c) if nid.is_none() && cfg.fast == FastPath::Sheaf => match s.cpu(c).sheaf_pop() {
                Some(obj) => obj,
                None => self.sheaf_alloc(c, s, gfp)?,
            },
            Some(c) if nid.is_none() && cfg.fast != FastPath::CpuSlab => {
                self.sheaf_alloc(c, s, gfp)?
            }
            Some(c) if nid.is_none() => {
                let cc = s.cpu(c);
                if cfg.access != PerCpuAccess::Owned {
                    return self.alloc_locked_lockless(c, s, gfp);
                }
                let obj = cc.freelist.load(Relaxed);
                if obj & 1 == 0 && obj != 0 {
                    // SAFETY: `obj` heads this CPU's private freelist of free objects.
                    let next = unsafe { get_freepointer(cfg, obj) };
                    if !same_slab(cfg, obj, next) {
                        return self.freelist_corrupt(c, s, gfp, obj, next);
                    }
                    cc.freelist.store(next, Relaxed);
                    cc.next_tid();
                    cc.count(SlubStat::AllocFastpath);
                    obj
                } else {
                    self.slab_alloc_slow(c, s, gfp, nid)?
                }
            }
            // kmem_cache_alloc_node with a node bypasses the sheaves.
            Some(_) if cfg.fast != FastPath::CpuSlab => self.alloc_node_bypass(s, gfp, nid)?,
            Some(c) => self.slab_alloc_slow(c, s, gfp, nid)?,
            None => self.alloc_nocpu(s, gfp, nid)?,
        };
        let obj = NonNull::new(obj as *mut u8)?;
        // SAFETY: a new object of `s`, handed to our caller.
        unsafe { post_alloc_init(s, obj, gfp) };
        Some(obj)
    }

    /// `___slab_alloc`: refill the CPU freelist and take one object.
    #[cold]
    #[inline(never)]
    pub(super) fn slab_alloc_slow(
        &self,
        c: CpuRef<'_>,
        s: &KmemCache,
        gfp: Gfp,
        nid: Option<usize>,
    ) -> Option<usize> {
        let cfg = s.config();
        // Debug caches too: their every allocation comes here, and the platform's
        // housekeeping (publishing the live view, aging caches) must still run.
        self.housekeeping_tick(c);
        if cfg.off_fast_paths() {
            return self.alloc_debug(Some(c), s, gfp, nid);
        }
        let cc = s.cpu(c);
        cc.count(SlubStat::AllocSlowpath);
        self.check_drain_request(c);
        // The slow path owns the CPU freelist from here until it installs a new one:
        // while it is 0, lockless contexts (per-CPU mode) leave it alone.
        let cur = self.take_cpu_freelist(c, cfg, cc);
        if cur != 0 {
            let slab = self.freelist_slab(cur);
            if let Some(n) = nid {
                if self.pages.page_to_nid(slab) != n {
                    cc.count(SlubStat::AllocNodeMismatch);
                    self.deactivate_slab(c, s, slab, cur);
                    return self.new_slab_objects(c, s, gfp, nid);
                }
            }
            if cur & 1 == 0 {
                // The CPU slab has objects (the right node, or frees that raced in
                // in per-CPU mode): pop one.
                return Some(self.take_first(cc, cfg, cur));
            }
            // The CPU freelist ran out: take what was freed into the slab.
            // SAFETY: the CPU slab is a live slab of `s`.
            let got = self.take_for_cpu(c, cfg, unsafe { slab.as_ref() }, slab);
            if got & 1 == 0 {
                cc.count(SlubStat::AllocRefill);
                return Some(self.take_first(cc, cfg, got));
            }
            // Full: it leaves the CPU (unfrozen, on no list).
            cc.count(SlubStat::DeactivateFull);
            self.unfreeze_full(slab);
        }
        self.new_slab_objects(c, s, gfp, nid)
    }

    /// Pops the first object of `list` and makes the rest the CPU freelist.
    #[inline]
    pub(super) fn take_first(&self, cc: &KmemCacheCpu, cfg: &CacheConfig, list: usize) -> usize {
        // SAFETY: `list` heads a freelist this CPU now owns.
        let next = unsafe { get_freepointer(cfg, list) };
        // A corrupt link: keep the first object, drop (quarantine) the rest.
        let next = if same_slab(cfg, list, next) {
            next
        } else {
            self.report_corrupt_link(cfg, list, next);
            0
        };
        // With rseq, a plain store: the pair is empty (taken) and ours.
        cc.install_freelist(cfg.access == PerCpuAccess::Cas, next);
        list
    }

    /// A decoded free pointer outside its slab on the fast path: reported; the rest of
    /// the CPU freelist (and this object) is dropped — quarantined, never handed out —
    /// and the allocation goes on through the slow path.
    #[cold]
    #[inline(never)]
    pub(super) fn freelist_corrupt(
        &self,
        c: CpuRef<'_>,
        s: &KmemCache,
        gfp: Gfp,
        obj: usize,
        next: usize,
    ) -> Option<NonNull<u8>> {
        self.report_corrupt_link(s.config(), obj, next);
        s.cpu(c).freelist.store(0, Relaxed);
        s.cpu(c).next_tid();
        self.alloc_node(Some(c), s, gfp, None)
    }

    /// The slab a CPU freelist value (object or end token) lies in.
    #[inline]
    pub(super) fn freelist_slab(&self, v: usize) -> NonNull<Page> {
        self.pages
            .virt_to_head_page((v & !1) as *const u8)
            .expect("a CPU freelist value lies in a slab")
    }

    /// `get_freelist`: takes a frozen slab's whole freelist for the CPU (its state
    /// becomes empty, all objects in use). Returns the list or the end token.
    pub(super) fn get_freelist(&self, slab_ref: &Page, slab: NonNull<Page>) -> usize {
        let base = self.slab_base(slab);
        let objects = Slab::of(slab_ref).cache().config().objects as u64;
        loop {
            let old = Slab::of(slab_ref).state();
            let new = SlabState::taken(objects);
            if Slab::of(slab_ref).cas_state(old, new) {
                return base + old.offset() as usize;
            }
        }
    }

    /// Objects of a slab frozen by `c` for its CPU freelist: its local freelist if it
    /// has one (no atomic), else the slab's freelist (`get_freelist`).
    pub(super) fn take_for_cpu(
        &self,
        c: CpuRef<'_>,
        cfg: &CacheConfig,
        sr: &Page,
        slab: NonNull<Page>,
    ) -> usize {
        if Slab::of(sr).local_head() != 0 {
            let local = Slab::of(sr).take_local(cfg);
            Slab::of(sr).set_frozen_by(cpu_tag(c));
            return local.head;
        }
        self.get_freelist(sr, slab)
    }

    /// `new_slab_objects`: a CPU partial slab, else a node partial slab, else a new
    /// slab becomes the CPU slab; returns its first object.
    pub(super) fn new_slab_objects(
        &self,
        c: CpuRef<'_>,
        s: &KmemCache,
        gfp: Gfp,
        nid: Option<usize>,
    ) -> Option<usize> {
        let cfg = s.config();
        let cc = s.cpu(c);
        // CPU partial list (only when any node will do or it is the right node).
        while let Some(slab) = NonNull::new(cc.partial.load(Relaxed)) {
            // SAFETY: slabs on our CPU partial list are frozen slabs we own.
            let sr = unsafe { slab.as_ref() };
            cc.partial.store(sr.next.load(Relaxed), Relaxed);
            cc.nr_partial
                .store(cc.nr_partial.load(Relaxed) - 1, Relaxed);
            if nid.is_some_and(|n| self.pages.page_to_nid(slab) != n) {
                self.unfreeze_one(Some(c), s, slab);
                continue;
            }
            let got = self.take_for_cpu(c, cfg, sr, slab);
            if got & 1 == 0 {
                cc.count(SlubStat::CpuPartialAlloc);
                return Some(self.take_first(cc, cfg, got));
            }
            // Cannot happen (a CPU partial slab keeps its free objects), but a full
            // slab must not be lost: let it go.
            self.unfreeze_full(slab);
        }
        // Node partial lists: the wanted node, then the others.
        let local = self.pages_local_node(c);
        let first = nid.unwrap_or(local);
        let nodes = if nid.is_some() && gfp.contains(Gfp::THISNODE) {
            1
        } else {
            self.pages.nr_nodes()
        };
        for i in 0..nodes {
            let n = (first + i) % self.pages.nr_nodes();
            if let Some(got) = self.get_partial_node(c, s, n) {
                cc.count(SlubStat::AllocFromPartial);
                return Some(self.take_first(cc, cfg, got));
            }
            if nid.is_some() {
                // kmem_cache_alloc_node: a new slab on the wanted node comes before
                // other nodes' partial slabs.
                break;
            }
        }
        // A new slab, frozen for this CPU with all its objects.
        let slab = self.allocate_slab(Some(c), s, gfp, nid.or(Some(local)))?;
        // SAFETY: our new slab.
        let sr = unsafe { slab.as_ref() };
        Slab::of(sr).set_state(SlabState::new(END_OFFSET, cfg.objects as u64, true));
        Slab::of(sr).set_frozen_by(cpu_tag(c));
        Some(self.take_first(cc, cfg, self.slab_base(slab) + cfg.red_left))
    }

    /// `kmem_cache_alloc_node` with a node in the sheaves design: from that node's
    /// partial slabs or a new slab there; elsewhere only when the node has no memory
    /// and the caller did not ask for `__GFP_THISNODE`.
    #[cold]
    #[inline(never)]
    fn alloc_node_bypass(&self, s: &KmemCache, gfp: Gfp, nid: Option<usize>) -> Option<usize> {
        self.alloc_nocpu(s, gfp | Gfp::THISNODE, nid).or_else(|| {
            if gfp.contains(Gfp::THISNODE) {
                None
            } else {
                self.alloc_nocpu(s, gfp, None)
            }
        })
    }

    pub(super) fn pages_local_node(&self, c: CpuRef<'_>) -> usize {
        let n = c.area().node();
        if n < self.pages.nr_nodes() {
            n
        } else {
            0
        }
    }

    /// Allocation without a CPU area: one object from a node partial slab under the
    /// list lock, or from one of the node's kept empty slabs of `s`, or from a new
    /// slab; either goes on the partial list.
    #[cold]
    #[inline(never)]
    pub(super) fn alloc_nocpu(&self, s: &KmemCache, gfp: Gfp, nid: Option<usize>) -> Option<usize> {
        let cfg = s.config();
        if cfg.off_fast_paths() {
            return self.alloc_debug(None, s, gfp, nid);
        }
        s.stat(None, SlubStat::AllocSlowpath);
        let first =
            nid.unwrap_or_else(|| self.pages.platform().numa_node_id() % self.pages.nr_nodes());
        for attempt in 0..2 {
            for i in 0..self.pages.nr_nodes() {
                let n = (first + i) % self.pages.nr_nodes();
                if nid.is_some() && n != first && gfp.contains(Gfp::THISNODE) {
                    continue;
                }
                let mut one = [0usize; 1];
                if self.take_from_partial(s, n, &mut one) == 1 {
                    s.stat(None, SlubStat::AllocFromPartial);
                    return Some(one[0]);
                }
                if attempt == 1 {
                    // Second round: a slab the node keeps empty for `s`, as a refill
                    // would take it, else a new slab on this node.
                    let slab = match self.pop_kept(s, n) {
                        Some(kept) => self.reuse_kept_slab(s, kept, &mut [], true).0,
                        None => self.allocate_slab(None, s, gfp, Some(n))?,
                    };
                    let nn = self.pages.page_to_nid(slab);
                    let mut list = s.node(nn).list_lock.lock();
                    self.add_partial(&mut list, slab, false);
                    drop(list);
                    return self.alloc_nocpu(s, gfp, Some(nn));
                }
            }
        }
        None
    }
}
