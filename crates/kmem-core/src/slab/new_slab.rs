//! Making and discarding slabs (`allocate_slab`, `shuffle_freelist`, `discard_slab`):
//! pages from the page allocator, every object on the new slab's freelist (in a random
//! order with `RANDOM_FREELIST`), and the pages given back when a slab is empty.
//!
//! No slab lock is held here; the page allocator takes its own (lock order in the crate
//! docs).

use super::freelist::FreePointerKey;
use super::*;
use crate::gfp::Gfp;
use crate::page::{Page, PageFlags};
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use core::ptr::NonNull;

/// Greatest common divisor.
pub(super) fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl<'a, P: Platform> Slub<'a, P> {
    // -----------------------------------------------------------------------
    // Slab creation and destruction.

    /// `allocate_slab`: pages for a new slab of `s` on `nid`, every object on the
    /// slab's freelist (and through the constructor), the slab unfrozen with no
    /// object in use.
    pub(crate) fn allocate_slab(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        nid: Option<usize>,
    ) -> Option<NonNull<Page>> {
        self.allocate_slab_taking(cpu, s, gfp, nid, &mut [], true)
            .map(|(slab, _, _)| slab)
    }

    /// [`Slub::allocate_slab`] that hands the first objects (in freelist order) to
    /// the caller instead: up to `out.len()` of them go into `out`, in use, without
    /// ever being linked (a sheaf refill from a new slab writes and then walks no free
    /// pointer for them). The rest make the freelist, unless `link_rest` is false and
    /// the slab lists its objects in address order: then they stay unlinked and
    /// counted in use, for the caller to keep as a fresh tail (`fresh.rs`). Returns the
    /// slab, how many objects went into `out`, and the first object of an unlinked
    /// rest (if any).
    pub(crate) fn allocate_slab_taking(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        nid: Option<usize>,
        out: &mut [usize],
        link_rest: bool,
    ) -> Option<(NonNull<Page>, usize, Option<usize>)> {
        let cfg = s.config();
        // Not `__GFP_COMP`: the slab marks its own tails (`Slab::mark_tails`), and its
        // growth is counted here, not as a page block's (`page/block_growth.rs`).
        let gfp = gfp - Gfp::ZERO - Gfp::COMP;
        // Other caches' kept empty slabs are free memory to this one (`empty.rs`).
        let want = nid.unwrap_or_else(|| self.pages.platform().numa_node_id());
        self.reclaim_kept_slabs(cpu, s, want % self.pages.nr_nodes());
        let slab = self.pages.alloc_pages_node(cpu, gfp, cfg.order, nid)?;
        // The barns' decay counts it; a step of it is looked at in this CPU area's
        // next slow path (this one is under way).
        self.count_growth(cpu, 1 << cfg.order);
        let base = self.slab_base(slab);
        // SAFETY: the block was just allocated: its descriptors are ours.
        let head = unsafe { slab.as_ref() };
        // The cache before the flags: a lookup of one of its addresses (a constructor
        // may call `ksize` on its object) finds the slab's cache from here on.
        Slab::of(head).set_cache(s);
        Slab::of(head).publish();
        if cfg.is_debug() || cfg.ctor.is_some() {
            // The constructor is the user's code, run while the caller may hold its
            // CPU area's sheaves or slab half-way through: the platform sends the
            // constructor's own allocations and frees around that area.
            let token = cfg.ctor.map(|_| self.pages.platform().callout_enter());
            for i in 0..cfg.objects {
                let obj = base + i * cfg.size + cfg.red_left;
                if cfg.is_debug() {
                    self.init_debug_object(cfg, obj);
                }
                if let Some(ctor) = cfg.ctor {
                    (ctor.f)(obj as *mut u8, ctor.data);
                }
            }
            if let Some(t) = token {
                self.pages.platform().callout_leave(t);
            }
        }
        let (state, taken, fresh) = self.populate_slab(cfg, base, out, link_rest);
        Slab::of(head).init(s, state);
        if cfg.order > 0 {
            Slab::of(head).mark_tails(cfg.order, cfg.tags_slabs());
        }
        head.private.store(0, Relaxed);
        let nid = self.pages.page_to_nid(slab);
        s.node(nid).nr_slabs.fetch_add(1, Relaxed);
        s.stat(cpu, SlubStat::AllocSlab);
        Some((slab, taken, fresh))
    }

    /// The objects of an empty slab at `base` as a new slab has them: up to
    /// `out.len()` of them (in freelist order) into `out`, in use, never linked; the
    /// rest its freelist, or, with `link_rest` false and objects in address order, an
    /// unlinked tail counted in use (its first object returned). Returns the slab's
    /// state, how many went into `out`, and the tail. Reads nothing of the slab
    /// (a kept empty slab's old free pointers included).
    pub(super) fn populate_slab(
        &self,
        cfg: &CacheConfig,
        base: usize,
        out: &mut [usize],
        link_rest: bool,
    ) -> (SlabState, usize, Option<usize>) {
        let n = cfg.objects;
        let taken = out.len().min(n);
        let (start, stride) = self.freelist_order(cfg);
        let (state, fresh) = if stride == 1 {
            // Address order (no RANDOM_FREELIST): plain strides, no index arithmetic.
            let first = base + cfg.red_left;
            let mut obj = first;
            for o in &mut out[..taken] {
                *o = obj;
                obj += cfg.size;
            }
            if taken == n {
                (SlabState::new(END_OFFSET, n as u64, false), None)
            } else if !link_rest {
                (SlabState::new(END_OFFSET, n as u64, false), Some(obj))
            } else {
                let last = first + (n - 1) * cfg.size;
                let off = (obj - base) as u64;
                let (key, size) = (FreePointerKey::of(cfg), cfg.size);
                while obj < last {
                    // SAFETY: the object lies in the slab, ours (new, or kept empty
                    // and taken off its list).
                    unsafe { key.set(obj, obj + size) };
                    obj += size;
                }
                // SAFETY: as above.
                unsafe { set_freepointer(cfg, last, base | 1) };
                (SlabState::new(off, taken as u64, false), None)
            }
        } else {
            (
                self.link_shuffled(cfg, base, start, stride, &mut out[..taken]),
                None,
            )
        };
        (state, taken, fresh)
    }

    /// A new slab's objects in the order of a random permutation (`shuffle_freelist`):
    /// object `k` of the order is object `(start + k * stride) % objects`; the first
    /// `out.len()` go to `out`, the rest are chained, ending in the end token. Returns
    /// the slab's state. Index arithmetic without a division per object: `stride <
    /// objects`, so one subtraction wraps it.
    fn link_shuffled(
        &self,
        cfg: &CacheConfig,
        base: usize,
        start: usize,
        stride: usize,
        out: &mut [usize],
    ) -> SlabState {
        let n = cfg.objects;
        let taken = out.len();
        let at = |i: usize| base + i * cfg.size + cfg.red_left;
        let step = |i: usize| {
            if i + stride >= n {
                i + stride - n
            } else {
                i + stride
            }
        };
        let mut i = start;
        for o in out.iter_mut() {
            *o = at(i);
            i = step(i);
        }
        if taken == n {
            return SlabState::new(END_OFFSET, n as u64, false);
        }
        let off = (at(i) - base) as u64;
        for k in taken..n {
            let j = step(i);
            let next = if k + 1 < n { at(j) } else { base | 1 };
            // SAFETY: the object lies in our new slab.
            unsafe { set_freepointer(cfg, at(i), next) };
            i = j;
        }
        SlabState::new(off, taken as u64, false)
    }

    /// The order of a new slab's freelist, as `(start, stride)`: object `k` of the
    /// list is object `(start + k * stride) % objects` of the slab. `(0, 1)` unless
    /// the cache randomises freelists; then a random start and a random stride
    /// prime to `objects`, so every object comes exactly once.
    pub(super) fn freelist_order(&self, cfg: &CacheConfig) -> (usize, usize) {
        let n = cfg.objects;
        if !cfg.flags.contains(SlabFlags::RANDOM_FREELIST) || n < 2 {
            return (0, 1);
        }
        let r = self.pages.platform().random_u64();
        let start = (r as usize) % n;
        // Walk 1..n from a random point to the first stride prime to n (1 is).
        let mut stride = 1 + ((r >> 32) as usize) % (n - 1);
        while gcd(stride, n) != 1 {
            stride = stride % (n - 1) + 1;
        }
        (start, stride)
    }

    /// Frees a discarded slab's objcg vector (`memcontrol`), a plain kmalloc object
    /// or large block (vectors never come from caches that have vectors). The object
    /// goes straight back to its slab, not onto a CPU's sheaf: shrinking must not
    /// fill (or allocate) the sheaves it has just emptied.
    pub(super) fn free_slab_obj_exts(&self, cpu: Option<CpuRef<'_>>, head: &Page) {
        let data = head.private.swap(0, Relaxed);
        if data & accounting::OBJ_EXTS == 0 {
            return;
        }
        let v = (data & !3) as *mut u8;
        // SAFETY: the vector is an object of a kmalloc cache, which lives as long as
        // the allocator.
        match unsafe { self.lookup(v) } {
            // SAFETY: the vector, ours since its slab is being discarded.
            ObjectLookup::Slab(vs, vslab) => unsafe {
                self.free_object(None, vs, vslab, v as usize);
            },
            ObjectLookup::Large(vh) => {
                // SAFETY: as above; a large block's order is on its head.
                let order = unsafe { vh.as_ref() }.order();
                // SAFETY: as above.
                unsafe { self.pages.free_pages(cpu, vh, order) };
            }
            ObjectLookup::Bad(_) => {}
        }
    }

    /// `discard_slab`: gives an empty slab's pages back.
    pub(crate) fn discard_slab(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, slab: NonNull<Page>) {
        let cfg = s.config();
        if cfg.flags.contains(SlabFlags::CONSISTENCY_CHECKS) {
            // `free_slab`'s check_object on every object: a write after free into an
            // object nobody took again is still seen when its slab goes.
            self.validate_slab(s, cfg, slab, &mut |_| {});
        }
        let nid = self.pages.page_to_nid(slab);
        s.node(nid).nr_slabs.fetch_sub(1, Relaxed);
        // Off the growth clock (`Slub::count_growth`).
        self.caches.slab_growth.count_free(1 << cfg.order);
        // SAFETY: the slab is empty and on no list: its descriptors are ours.
        let head = unsafe { slab.as_ref() };
        // The words first: the free fast paths read the sheaf tag without the
        // flags (see `slab::state::sheaf_offset`), so the tag goes before the page
        // stops being a slab.
        Slab::of(head).clear();
        head.set_flags(PageFlags::HEAD);
        self.free_slab_obj_exts(cpu, head);
        s.stat(cpu, SlubStat::FreeSlab);
        // SAFETY: allocated by `allocate_slab` with this order; nothing refers to it.
        unsafe { self.pages.free_pages(cpu, slab, cfg.order) };
    }
}
