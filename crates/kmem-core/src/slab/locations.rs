//! The objects a tracking cache (`SLAB_STORE_USER`, slub_debug's `U`) has handed out,
//! each with its allocation and free tracks: what the kernel builds
//! `/sys/kernel/slab/<cache>/alloc_calls` and `free_calls` from (`list_locations`), and
//! what a leak scan (kmemleak) starts from. Also `orig_size`, kmalloc's record of the
//! size it was asked for (a word after the tracks in a cache with red zones or
//! tracks), and the kmalloc red zone it bounds: the slack between the request and
//! the object size holds `RED_ACTIVE` while the object is allocated.
//!
//! Locking: the walk holds each node's `list_lock`, then its `full` list's lock (as
//! `validate`), while the callback runs: the callback must not allocate or free.
//! A debug cache keeps every slab on those two lists (it never has CPU slabs or
//! sheaves), so the walk sees every object.

use super::debug::{find_not, Track, Track2, RED_ACTIVE, TRACK_SIZE};
use crate::platform::Platform;
use crate::slab::{
    get_freepointer, CacheConfig, KmemCache, Slab, SlabFlags, Slub, MAX_OBJS_PER_SLAB,
};
use core::ptr::{self, NonNull};

/// Most objects a slab may hold for the walk to see its objects (the free bitmap on
/// the stack has this many bits): every slab's ([`MAX_OBJS_PER_SLAB`]).
const MAX_WALK_OBJECTS: usize = MAX_OBJS_PER_SLAB;

/// One allocated object of a tracking cache.
#[derive(Clone, Copy, Debug)]
pub struct TrackedObject {
    /// The object's address.
    pub addr: usize,
    /// The cache's object size (what the object may hold).
    pub object_size: usize,
    /// Where it was allocated (`size`: the bytes asked for).
    pub alloc: Track,
    /// Where its slot was last freed (a previous life; zero if none).
    pub free: Track,
    /// See [`TrackedObject::quarantined`].
    pub quarantined: bool,
}

impl TrackedObject {
    /// Whether slub_debug took this object out of use after a failed check (at an
    /// allocation, at a free that was then refused, or a slab's never-used objects
    /// past a damaged freelist). Such an object counts as allocated in slabinfo but
    /// belongs to nobody: the walk tells it by the object's mark (the free-pointer
    /// word of a debug cache's object holds the handed-out mark only while a caller
    /// has it), not by the tracks' times, which a coarse clock can make equal.
    pub fn quarantined(&self) -> bool {
        self.quarantined
    }
}

impl<P: Platform> Slub<'_, P> {
    /// Calls `f` on every allocated object of `s` with its tracks, slab by slab, node
    /// by node (the locking rules are in the module doc: `f` must not allocate).
    /// Returns false, without calling `f`, if `s` keeps no tracks. A slab whose
    /// freelist is corrupt is skipped (which of its objects are free is unknown;
    /// `validate` reports it).
    pub fn for_each_tracked(&self, s: &KmemCache, f: &mut dyn FnMut(&TrackedObject)) -> bool {
        let cfg = s.config();
        if !cfg.flags.contains(SlabFlags::STORE_USER) {
            return false;
        }
        self.for_each_listed_slab(s, &mut |slab| self.tracked_in_slab(s, slab, f));
        true
    }

    fn tracked_in_slab(
        &self,
        s: &KmemCache,
        slab: NonNull<Page>,
        f: &mut dyn FnMut(&TrackedObject),
    ) {
        let cfg = s.config();
        if cfg.objects > MAX_WALK_OBJECTS {
            return;
        }
        let base = self.slab_base(slab);
        // SAFETY: a live slab (the caller holds its list lock).
        let st = Slab::of(unsafe { slab.as_ref() }).state();
        let mut free = [0u64; MAX_WALK_OBJECTS / 64];
        let mut p = base + st.offset() as usize;
        let mut count = 0;
        while p != base | 1 {
            if p & 1 != 0 || !self.valid_link(cfg, base, p) || count >= cfg.objects {
                return;
            }
            let idx = (p - base - cfg.red_left) / cfg.size;
            free[idx / 64] |= 1 << (idx % 64);
            count += 1;
            // SAFETY: a valid free object of this slab (checked just above).
            p = unsafe { get_freepointer(cfg, p) };
        }
        for idx in 0..cfg.objects {
            if free[idx / 64] & (1 << (idx % 64)) != 0 {
                continue;
            }
            let obj = base + idx * cfg.size + cfg.red_left;
            let (Some(alloc), Some(free)) = (
                self.get_track(cfg, obj, Track2::Alloc),
                self.get_track(cfg, obj, Track2::Free),
            ) else {
                return;
            };
            // Handed out and not freed: the handed-out mark, and an allocation track
            // at least as new as the free track. (A slot never handed out in a slab
            // a damaged freelist quarantined holds an encoded link, not the mark;
            // only the list's last, where an unhardened cache's link is 0, reads as
            // held.)
            let held = self.holds_allocated_mark(cfg, obj) && alloc.when_ns >= free.when_ns;
            f(&TrackedObject {
                addr: obj,
                object_size: cfg.object_size,
                alloc,
                free,
                quarantined: !held,
            });
        }
    }

    /// The size the caller asked for (`get_orig_size`): the `orig_size` word, or the
    /// object size for caches without one.
    pub(super) fn get_orig_size(&self, cfg: &CacheConfig, obj: usize) -> usize {
        if cfg.orig_off == 0 {
            return cfg.object_size;
        }
        // SAFETY: the word lies in the object's slot (layout); unaligned-safe read.
        let v = unsafe { ptr::read_unaligned((obj + cfg.orig_off) as *const usize) };
        v.min(cfg.object_size)
    }

    /// Writes the `orig_size` word (no effect without one).
    pub(super) fn put_orig_size(&self, cfg: &CacheConfig, obj: usize, size: usize) {
        if cfg.orig_off != 0 {
            // SAFETY: as in `get_orig_size`; the object is the caller's.
            unsafe { ptr::write_unaligned((obj + cfg.orig_off) as *mut usize, size) };
        }
    }

    /// An allocated object's kmalloc red zone: the bytes between the size asked for and
    /// the object size must still hold `RED_ACTIVE`. Else the first wrong byte, and the
    /// zone.
    pub(super) fn check_kmalloc_redzone(
        &self,
        cfg: &CacheConfig,
        obj: usize,
    ) -> Option<(usize, usize, usize)> {
        if !cfg.flags.contains(SlabFlags::RED_ZONE) || cfg.orig_off == 0 {
            return None;
        }
        let orig = self.get_orig_size(cfg, obj);
        let end = obj + cfg.object_size;
        find_not(obj + orig, cfg.object_size - orig, RED_ACTIVE).map(|bad| (bad, obj + orig, end))
    }

    /// Records that the caller asked for `size` bytes of `obj` (kmalloc's
    /// `set_orig_size`, also after an in-place krealloc): the `orig_size` word, the
    /// allocation track's size, and, for a red-zoned cache, the kmalloc red zone
    /// between `size` and the object size (`RED_ACTIVE`, checked at free and by
    /// `validate`). No effect on a cache without debug metadata. A kmalloc red zone
    /// found overwritten first is reported and restored (as `validate` would), so an
    /// in-place `krealloc` does not paint over the evidence of an overflow.
    ///
    /// # Safety
    /// `obj` is an allocated object of `s`, which the caller owns.
    pub unsafe fn set_orig_size(&self, s: &KmemCache, obj: usize, size: usize) {
        let cfg = s.config();
        if cfg.orig_off == 0 {
            return;
        }
        let size = size.min(cfg.object_size);
        // Under the node's `list_lock` when red-zoned: `validate` (which holds it)
        // checks the kmalloc red zone against the `orig_size` word, and must not see
        // the one changed without the other.
        let slab = self.pages.virt_to_head_page(obj as *const u8);
        let _list = cfg.flags.contains(SlabFlags::RED_ZONE).then(|| {
            let nid = slab.map_or(0, |p| self.pages.page_to_nid(p));
            s.node(nid).list_lock.lock()
        });
        if let (Some((bad, from, to)), Some(slab)) = (self.check_kmalloc_redzone(cfg, obj), slab) {
            let what = "kmalloc Redzone overwritten";
            self.report_bytes(s, slab, what, obj, bad, from, to, RED_ACTIVE);
        }
        self.put_orig_size(cfg, obj, size);
        if cfg.flags.contains(SlabFlags::RED_ZONE) {
            // SAFETY: the slack lies inside the object, which the caller owns.
            unsafe {
                ptr::write_bytes((obj + size) as *mut u8, RED_ACTIVE, cfg.object_size - size)
            };
        }
        if cfg.flags.contains(SlabFlags::STORE_USER) {
            let at = obj + cfg.track_off + Track2::Alloc as usize * TRACK_SIZE;
            let field = at + core::mem::offset_of!(Track, size);
            // SAFETY: the allocation track lies in the object's slot, which the
            // caller owns (no other context writes it); unaligned-safe write.
            unsafe { ptr::write_unaligned(field as *mut u32, size as u32) };
        }
    }

    /// The size the caller asked for when it allocated `obj` (its `orig_size`), or the
    /// object size for a cache that does not record it.
    ///
    /// # Safety
    /// `obj` starts an object of `s` in one of its slabs (as [`Slub::lookup`] finds
    /// it): its metadata is read there.
    pub unsafe fn orig_size(&self, s: &KmemCache, obj: usize) -> usize {
        self.get_orig_size(s.config(), obj)
    }
}

use crate::page::Page;
