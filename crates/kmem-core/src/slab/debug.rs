//! slub_debug: consistency checks (F), red zones (Z), poisoning (P), allocation and
//! free tracking (U) and tracing (T) for the caches that ask for them, with the
//! kernel's reports, quarantine of what is damaged, and `validate`.
//!
//! A debug cache leaves the fast paths, as in the kernel: it never gets a CPU slab or
//! CPU partial slabs, so its CPU freelist stays empty and every allocation and free
//! reaches `Slub::alloc_debug` / `Slub::free_debug`, which do all their work under
//! the node's `list_lock` (then `full`, the list of full slabs a debug cache keeps so
//! `validate` sees every slab). No other context changes a debug slab's state
//! meanwhile, so checks and the state change are one step.
//!
//! Object slot of a debug cache (offsets from the object's start):
//! ```text
//! [left red zone: red_left][object: object_size][right red zone: ..rz_end]
//! [free pointer: offset][alloc track][free track][padding: 0x5a]
//! ```
//! Values: red zones `0xbb` while free, `0xcc` while allocated; a free object is
//! `0x6b`… ending in `0xa5`; padding `0x5a`.
//!
//! The free-pointer word, outside the object, links free objects; while
//! `alloc_debug` has an object handed out it holds `MARK_ALLOCATED`, and a
//! quarantined object's holds `MARK_QUARANTINED`. A free finds a double free
//! from it (walking the freelist only when the word is not the allocated mark, or
//! with F), so without F too a double free is reported as one, not as red zone
//! damage. An allocation writes the object's red zones, tracks and `orig_size` before
//! it drops the lock, and kmalloc's `set_orig_size` takes it, so `validate` never sees
//! an object half way between free and allocated.
//!
//! Containment: an object whose checks fail is *quarantined* — left counted in use,
//! never handed out again, and a later free of it is refused as a double free; a slab
//! whose freelist is corrupt is marked full ("Marking all objects used") and never
//! allocated from again. The program continues.

use super::{
    get_freepointer, set_freepointer, CacheConfig, KmemCache, Slab, SlabFlags, SlabState, Slub,
    SlubStat,
};
use crate::gfp::Gfp;
use crate::page::Page;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::printk::LogWriter;
use core::fmt::Write as _;
use core::ptr::{self, NonNull};

/// Red zone byte while the object is free (`SLUB_RED_INACTIVE`).
pub const RED_INACTIVE: u8 = 0xbb;
/// Red zone byte while the object is allocated (`SLUB_RED_ACTIVE`).
pub const RED_ACTIVE: u8 = 0xcc;
/// Free object byte (`POISON_FREE`).
pub const POISON_FREE: u8 = 0x6b;
/// Last byte of a free object (`POISON_END`).
pub const POISON_END: u8 = 0xa5;
/// Padding byte (`POISON_INUSE`).
pub const POISON_INUSE: u8 = 0x5a;
/// Return addresses kept per track.
pub const TRACK_FRAMES: usize = 4;
/// Bytes of one track.
pub const TRACK_SIZE: usize = core::mem::size_of::<Track>();

/// Where and when an object was allocated or freed (`struct track`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Track {
    /// Return addresses, innermost first (0 = none).
    pub frames: [usize; TRACK_FRAMES],
    /// When (platform clock, ns).
    pub when_ns: u64,
    /// Thread id.
    pub tid: u32,
    /// CPU area id.
    pub cpu: u32,
    /// Process id.
    pub pid: u32,
    /// The allocation track: the bytes the caller asked for (kmalloc's `orig_size`;
    /// the cache's object size for `kmem_cache_alloc`). The free track: 0.
    pub size: u32,
}

/// A problem `validate` (or a check) found.
#[derive(Clone, Copy, Debug)]
pub struct Problem {
    /// What is wrong, in the kernel's words ("Redzone overwritten", …).
    pub what: &'static str,
    /// The object (or slab) address.
    pub addr: usize,
    /// The slab's head page descriptor.
    pub slab: usize,
}

pub(super) enum Track2 {
    Alloc = 0,
    Free = 1,
}

/// The first byte in `[addr, addr + len)` that is not `value`.
/// Compares a word at a time (poison checks of large objects run on every
/// allocation), then finds the byte within the first word that differs.
pub(super) fn find_not(addr: usize, len: usize, value: u8) -> Option<usize> {
    const W: usize = core::mem::size_of::<u64>();
    let splat = u64::from_ne_bytes([value; W]);
    let mut i = 0;
    while i + W <= len {
        // SAFETY: callers pass ranges inside a slab of ours; unaligned read.
        if unsafe { ptr::read_unaligned((addr + i) as *const u64) } != splat {
            break;
        }
        i += W;
    }
    (i..len)
        .find(|&j| {
            // SAFETY: as above.
            unsafe { ((addr + j) as *const u8).read() != value }
        })
        .map(|j| addr + j)
}

/// Both red zones of `obj` (a red-zoned cache) set to `value`: `RED_ACTIVE` while
/// allocated, `RED_INACTIVE` while free.
fn fill_redzones(cfg: &CacheConfig, obj: usize, value: u8) {
    if cfg.flags.contains(SlabFlags::RED_ZONE) {
        fill(obj - cfg.red_left, cfg.red_left, value);
        fill(obj + cfg.object_size, cfg.rz_end - cfg.object_size, value);
    }
}

/// The free-pointer word of an allocated object of a debug cache (which lies after
/// the object and its red zones, see the module comment) while `alloc_debug` has
/// handed it out: the word links nothing then.
const MARK_ALLOCATED: usize = 0;
/// The free-pointer word of a quarantined object: never handed out again, and a later
/// free of it is a double free (without it, the red zones restored by the report
/// would let that free pass, and the object would be handed out again).
const MARK_QUARANTINED: usize = 0x0bad_0bad_0bad_0bad_u64 as usize;

/// Writes `mark` into the free-pointer word of `obj`, an object of a debug cache that
/// is not on a freelist.
/// No effect where the word lies inside the object (a cache that leaves the fast
/// paths for `KMEM_INIT` alone, without slub_debug flags): the program's bytes are
/// not the allocator's to mark.
fn set_mark(cfg: &CacheConfig, obj: usize, mark: usize) {
    if has_marks(cfg) {
        // SAFETY: the word lies in the object's slot, past the object (checked just
        // above); the caller holds the object off every freelist, under its node's
        // `list_lock`.
        unsafe { ptr::write((obj + cfg.offset) as *mut usize, mark) };
    }
}

/// The raw free-pointer word of `obj` (a mark, or an encoded link while it is
/// free), where it holds marks; else [`MARK_ALLOCATED`].
fn get_mark(cfg: &CacheConfig, obj: usize) -> usize {
    if !has_marks(cfg) {
        return MARK_ALLOCATED;
    }
    // SAFETY: as in `set_mark`: a word of the object's slot past the object; read
    // under the list lock.
    unsafe { ptr::read((obj + cfg.offset) as *const usize) }
}

/// Whether the free-pointer word of `cfg`'s objects lies outside the object, where
/// the marks go (every slub_debug cache: see the module comment).
fn has_marks(cfg: &CacheConfig) -> bool {
    cfg.offset >= cfg.object_size
}

fn fill(addr: usize, len: usize, value: u8) {
    // SAFETY: callers pass ranges inside a slab of ours that they own.
    unsafe { ptr::write_bytes(addr as *mut u8, value, len) };
}

impl<P: Platform> Slub<'_, P> {
    fn slot_end(cfg: &CacheConfig, obj: usize) -> usize {
        obj - cfg.red_left + cfg.size
    }

    /// `init_object` for a new slab: a free object's red zones, poison and padding.
    pub(crate) fn init_debug_object(&self, cfg: &CacheConfig, obj: usize) {
        self.set_free_state(cfg, obj);
        let pad_start = obj + cfg.track_off + self.tracks_len(cfg);
        if cfg.flags.contains(SlabFlags::POISON) {
            fill(
                pad_start,
                Self::slot_end(cfg, obj) - pad_start,
                POISON_INUSE,
            );
        }
        if cfg.flags.contains(SlabFlags::STORE_USER) || cfg.orig_off != 0 {
            fill(obj + cfg.track_off, self.tracks_len(cfg), 0);
        }
    }

    /// Bytes of metadata after the free pointer: the tracks, then the `orig_size` word.
    pub(super) fn tracks_len(&self, cfg: &CacheConfig) -> usize {
        let tracks = if cfg.flags.contains(SlabFlags::STORE_USER) {
            2 * TRACK_SIZE
        } else {
            0
        };
        if cfg.orig_off != 0 {
            cfg.orig_off + core::mem::size_of::<usize>() - cfg.track_off
        } else {
            tracks
        }
    }

    /// Poison and inactive red zones of a free object.
    fn set_free_state(&self, cfg: &CacheConfig, obj: usize) {
        if cfg.flags.contains(SlabFlags::POISON) {
            fill(obj, cfg.object_size - 1, POISON_FREE);
            fill(obj + cfg.object_size - 1, 1, POISON_END);
        }
        fill_redzones(cfg, obj, RED_INACTIVE);
    }

    /// Red zones of `obj` hold `value`? Else the first wrong byte.
    pub(super) fn check_redzones(
        &self,
        cfg: &CacheConfig,
        obj: usize,
        value: u8,
    ) -> Option<(usize, usize, usize)> {
        if !cfg.flags.contains(SlabFlags::RED_ZONE) {
            return None;
        }
        let left = obj - cfg.red_left;
        if let Some(bad) = find_not(left, cfg.red_left, value) {
            return Some((bad, left, obj));
        }
        let right = obj + cfg.object_size;
        find_not(right, cfg.rz_end - cfg.object_size, value)
            .map(|bad| (bad, right, obj + cfg.rz_end))
    }

    /// Poison of a free `obj` intact? Else the first wrong byte, the range it was
    /// checked in and the byte expected there: `POISON_FREE` up to the last byte,
    /// then `POISON_END` in the last (the kernel's `check_bytes_and_report` on each in
    /// turn), so a report's damaged range stops before the end marker and its FIX
    /// restores each part with its own byte.
    pub(super) fn check_poison(
        &self,
        cfg: &CacheConfig,
        obj: usize,
    ) -> Option<(usize, usize, usize, u8)> {
        if !cfg.flags.contains(SlabFlags::POISON) {
            return None;
        }
        let last = obj + cfg.object_size - 1;
        if let Some(bad) = find_not(obj, cfg.object_size - 1, POISON_FREE) {
            return Some((bad, obj, last, POISON_FREE));
        }
        find_not(last, 1, POISON_END).map(|bad| (bad, last, last + 1, POISON_END))
    }

    fn set_track(
        &self,
        cfg: &CacheConfig,
        obj: usize,
        which: Track2,
        cpu: Option<CpuRef<'_>>,
        frames: &[usize; TRACK_FRAMES],
    ) {
        if !cfg.flags.contains(SlabFlags::STORE_USER) {
            return;
        }
        let (tid, pid) = self.pages.platform().thread_and_pid();
        let t = Track {
            frames: *frames,
            when_ns: self.pages.platform().now_ns(),
            tid,
            cpu: cpu.map_or(u32::MAX, |c| c.area().id() as u32),
            pid,
            size: match which {
                Track2::Alloc => cfg.object_size as u32,
                Track2::Free => 0,
            },
        };
        let at = obj + cfg.track_off + which as usize * TRACK_SIZE;
        // SAFETY: the track slots lie in the object's slot, ours under the list lock;
        // unaligned-safe write.
        unsafe { ptr::write_unaligned(at as *mut Track, t) };
    }

    pub(super) fn get_track(&self, cfg: &CacheConfig, obj: usize, which: Track2) -> Option<Track> {
        if !cfg.flags.contains(SlabFlags::STORE_USER) {
            return None;
        }
        let at = obj + cfg.track_off + which as usize * TRACK_SIZE;
        // SAFETY: as in `set_track`.
        Some(unsafe { ptr::read_unaligned(at as *const Track) })
    }

    fn capture(&self, cfg: &CacheConfig) -> [usize; TRACK_FRAMES] {
        let mut frames = [0usize; TRACK_FRAMES];
        if cfg.flags.contains(SlabFlags::STORE_USER) {
            self.pages.platform().stack_trace(&mut frames);
        }
        frames
    }

    /// Is `obj` on the slab's freelist (`on_freelist`)? Walks at most `objects` links.
    fn on_freelist(&self, cfg: &CacheConfig, slab: NonNull<Page>, obj: usize) -> bool {
        // SAFETY: a live slab.
        let st = Slab::of(unsafe { slab.as_ref() }).state();
        let base = self.slab_base(slab);
        let mut p = base + st.offset() as usize;
        for _ in 0..cfg.objects {
            if p & 1 != 0 || !self.valid_link(cfg, base, p) {
                return false;
            }
            if p == obj {
                return true;
            }
            // SAFETY: a free object of this slab (checked just above).
            p = unsafe { get_freepointer(cfg, p) };
        }
        false
    }

    /// Whether `p` is a freelist value of this slab: its end token or an object.
    pub(super) fn valid_link(&self, cfg: &CacheConfig, base: usize, p: usize) -> bool {
        if p == base | 1 {
            return true;
        }
        let off = p.wrapping_sub(base).wrapping_sub(cfg.red_left);
        off < cfg.objects * cfg.size && off.is_multiple_of(cfg.size)
    }

    /// `alloc_debug_processing`: one object of debug cache `s`, checked.
    #[cold]
    #[inline(never)]
    pub(crate) fn alloc_debug(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        nid: Option<usize>,
    ) -> Option<usize> {
        let cfg = s.config();
        s.stat(cpu, SlubStat::AllocSlowpath);
        let frames = self.capture(cfg);
        let asked = nid;
        let mut nid =
            nid.unwrap_or_else(|| cpu.map_or(0, |c| c.area().node()) % self.pages.nr_nodes());
        loop {
            let node = &s.node(nid);
            let mut list = node.list_lock.lock();
            let Some(slab) = NonNull::new(list.first()) else {
                drop(list);
                nid = self.debug_partial_for(cpu, s, gfp, nid, asked.is_some())?;
                continue;
            };
            // SAFETY: a node-list slab: live, unfrozen, ours under the lock.
            let sr = unsafe { slab.as_ref() };
            let base = self.slab_base(slab);
            let old = Slab::of(sr).state();
            let obj = base + old.offset() as usize;
            let next = if old.list_empty() {
                obj
            } else {
                // SAFETY: a free object of this slab.
                unsafe { get_freepointer(cfg, obj) }
            };
            if old.list_empty()
                || !self.valid_link(cfg, base, obj)
                || !self.valid_link(cfg, base, next)
            {
                // A corrupt freelist: report, and never allocate from this slab again.
                self.report_object(s, slab, "Freepointer corrupt", obj, None);
                self.quarantine_slab(s, slab, &mut list);
                self.log_fix(s, "Marking all objects used");
                continue;
            }
            let new = SlabState::new((next - base) as u64, old.inuse() + 1, false);
            if !Slab::of(sr).cas_state(old, new) {
                continue;
            }
            if new.list_empty() {
                self.remove_partial(&mut list, slab);
                // SAFETY: full debug slabs live on `full`, under `list_lock` then `full`.
                unsafe { node.full.lock().push_head(slab.as_ptr()) };
            }
            // The object is ours now: check what it should look like while free.
            if let Some((bad, from, to, expect)) = self.check_poison(cfg, obj) {
                self.report_bytes(s, slab, "Poison overwritten", obj, bad, from, to, expect);
                self.quarantine_object(cfg, obj);
                self.log_fix(s, "Marking object used (quarantined)");
                continue;
            }
            if let Some((bad, from, to)) = self.check_redzones(cfg, obj, RED_INACTIVE) {
                self.report_bytes(
                    s,
                    slab,
                    "Redzone overwritten",
                    obj,
                    bad,
                    from,
                    to,
                    RED_INACTIVE,
                );
                self.quarantine_object(cfg, obj);
                self.log_fix(s, "Marking object used (quarantined)");
                continue;
            }
            // The allocated object's metadata, written before the lock is dropped: a
            // `validate` (which holds it) sees the object free or allocated, never
            // between the two.
            fill_redzones(cfg, obj, RED_ACTIVE);
            self.set_track(cfg, obj, Track2::Alloc, cpu, &frames);
            self.put_orig_size(cfg, obj, cfg.object_size);
            set_mark(cfg, obj, MARK_ALLOCATED);
            drop(list);
            if cfg.flags.contains(SlabFlags::INIT_ON_ALLOC) {
                fill(obj, cfg.object_size, 0);
            }
            if cfg.flags.contains(SlabFlags::TRACE) {
                self.trace(s, "alloc", obj, new);
            }
            s.stat(cpu, SlubStat::AllocFromPartial);
            return Some(obj);
        }
    }

    /// `alloc_debug` found no partial slab on node `nid`: the node whose list has one
    /// now (`None`: no memory). As the kernel's `get_partial`, a request that is not
    /// bound to its node (no `__GFP_THISNODE`) takes another node's partial slab
    /// before a new slab, except that a node asked for by name first gets a new slab
    /// of its own if it has the memory. A new slab goes on the list of the node it
    /// came from: the page allocator may have fallen back to another (looking at the
    /// asked node again would find it empty, and make slabs until memory ran out).
    #[cold]
    fn debug_partial_for(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        nid: usize,
        asked: bool,
    ) -> Option<usize> {
        let bound = gfp.contains(Gfp::THISNODE);
        let own = if asked && !bound {
            self.allocate_slab(cpu, s, gfp | Gfp::THISNODE | Gfp::NOWARN, Some(nid))
        } else {
            None
        };
        let slab = match own {
            Some(slab) => slab,
            None => {
                if !bound {
                    let others = (0..self.pages.nr_nodes()).filter(|&n| n != nid);
                    for n in others {
                        if !s.node(n).list_lock.lock().first().is_null() {
                            return Some(n);
                        }
                    }
                }
                self.allocate_slab(cpu, s, gfp, Some(nid))?
            }
        };
        let nid = self.pages.page_to_nid(slab);
        let mut list = s.node(nid).list_lock.lock();
        self.add_partial(&mut list, slab, false);
        Some(nid)
    }

    /// `free_debug_processing`: checks and frees `obj` of debug cache `s`; false
    /// (reported, quarantined) if a check fails.
    ///
    /// # Safety
    /// `obj` is the start of an object of `slab` (looked up by the caller).
    #[cold]
    #[inline(never)]
    pub(crate) unsafe fn free_debug(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        obj: usize,
    ) -> bool {
        let cfg = s.config();
        s.stat(cpu, SlubStat::FreeSlowpath);
        let frames = self.capture(cfg);
        let nid = self.pages.page_to_nid(slab);
        let node = &s.node(nid);
        let mut list = node.list_lock.lock();
        // SAFETY: a live slab of `s`.
        let sr = unsafe { slab.as_ref() };
        if self.freed_before(cfg, slab, obj) {
            drop(list);
            self.report_object(s, slab, "Object already free", obj, None);
            return false;
        }
        // The slot's red zone (its first damaged side) and the kmalloc red zone, each
        // reported and restored (as the kernel's `check_object` checks each), so a
        // later `validate` does not report an overflow past the request again.
        let slot = self.check_redzones(cfg, obj, RED_ACTIVE);
        let kmalloc = self.check_kmalloc_redzone(cfg, obj);
        if slot.is_some() || kmalloc.is_some() {
            // The free happened: its track says so; the mark keeps the object out of
            // use and tells the walks it is nobody's.
            self.set_track(cfg, obj, Track2::Free, cpu, &frames);
            set_mark(cfg, obj, MARK_QUARANTINED);
            let damaged = [
                slot.map(|z| ("Redzone overwritten", z)),
                kmalloc.map(|z| ("kmalloc Redzone overwritten", z)),
            ];
            for (what, (bad, from, to)) in damaged.into_iter().flatten() {
                self.report_bytes(s, slab, what, obj, bad, from, to, RED_ACTIVE);
            }
            drop(list);
            self.log_fix(s, "Object not freed (quarantined)");
            return false;
        }
        let base = self.slab_base(slab);
        let old = Slab::of(sr).state();
        if base + old.offset() as usize == obj {
            // Already at the head of the slab's freelist: a double free, caught
            // without F too (as the fast path does for other caches).
            drop(list);
            self.report_object(s, slab, "Object already free", obj, None);
            return false;
        }
        if cfg.flags.contains(SlabFlags::INIT_ON_FREE) {
            // SAFETY: the object is ours, being freed (poison, if any, follows).
            unsafe { init_on_free(cfg, obj) };
        }
        self.set_track(cfg, obj, Track2::Free, cpu, &frames);
        self.set_free_state(cfg, obj);
        if cfg.flags.contains(SlabFlags::CONSISTENCY_CHECKS) && old.inuse() == 0 {
            drop(list);
            self.report_object(s, slab, "Slab has no objects in use", obj, None);
            return false;
        }
        // SAFETY: `obj` is ours to link.
        unsafe { set_freepointer(cfg, obj, base + old.offset() as usize) };
        let new = SlabState::new((obj - base) as u64, old.inuse() - 1, false);
        let swapped = Slab::of(sr).cas_state(old, new);
        debug_assert!(swapped, "debug slabs change only under the list lock");
        if old.list_empty() {
            // SAFETY: a full debug slab is on `full` (under list_lock, then full).
            unsafe { node.full.lock().remove(slab.as_ptr()) };
            self.add_partial(&mut list, slab, true);
        }
        if cfg.flags.contains(SlabFlags::TRACE) {
            self.trace(s, "free", obj, new);
        }
        if new.inuse() == 0 && list.len() > cfg.min_partial {
            self.remove_partial(&mut list, slab);
            drop(list);
            self.discard_slab(cpu, s, slab);
        }
        true
    }

    /// Marks a slab full for good: its freelist is dropped (objects on it are lost,
    /// never handed out).
    fn quarantine_slab(
        &self,
        s: &KmemCache,
        slab: NonNull<Page>,
        list: &mut crate::page::PageList,
    ) {
        // SAFETY: a node-list slab under the lock.
        let sr = unsafe { slab.as_ref() };
        loop {
            let old = Slab::of(sr).state();
            let new = SlabState::new(1, s.config().objects as u64, false);
            if Slab::of(sr).cas_state(old, new) {
                break;
            }
        }
        self.remove_partial(list, slab);
        let nid = self.pages.page_to_nid(slab);
        // SAFETY: as in alloc_debug.
        unsafe { s.node(nid).full.lock().push_head(slab.as_ptr()) };
    }

    /// Whether the free-pointer word of `obj`, an object of a debug cache on no
    /// freelist, holds [`MARK_ALLOCATED`]: `alloc_debug` handed it out and it was
    /// not freed or quarantined since (under its node's `list_lock`). True for a
    /// cache without marks.
    pub(super) fn holds_allocated_mark(&self, cfg: &CacheConfig, obj: usize) -> bool {
        get_mark(cfg, obj) == MARK_ALLOCATED
    }

    /// An object taken off the freelist and kept out of use after a report: it counts
    /// as allocated from now on, so its red zones get the allocated pattern, and later
    /// checks (validate, the exit validation) see a consistent object instead of
    /// reporting the same damage again as a red zone mismatch.
    fn quarantine_object(&self, cfg: &CacheConfig, obj: usize) {
        fill_redzones(cfg, obj, RED_ACTIVE);
        self.put_orig_size(cfg, obj, cfg.object_size);
        set_mark(cfg, obj, MARK_QUARANTINED);
    }

    /// Whether a free of `obj` (under its node's `list_lock`) frees it a second time:
    /// it was quarantined (its free-pointer word holds [`MARK_QUARANTINED`]), or it is
    /// on the slab's freelist. The list is walked with F, or when the word is not
    /// [`MARK_ALLOCATED`] (an object handed out by `alloc_debug` holds the mark until
    /// it is freed), so a double free is named as one without F too, and never taken
    /// for red zone damage (a free object's red zones hold `RED_INACTIVE`).
    fn freed_before(&self, cfg: &CacheConfig, slab: NonNull<Page>, obj: usize) -> bool {
        let mark = get_mark(cfg, obj);
        if mark == MARK_QUARANTINED {
            return true;
        }
        (mark != MARK_ALLOCATED || cfg.flags.contains(SlabFlags::CONSISTENCY_CHECKS))
            && self.on_freelist(cfg, slab, obj)
    }

    // -----------------------------------------------------------------------
    // Reports.

    fn header(&self, w: &mut LogWriter<'_, P>, s: &KmemCache, what: &str) {
        let _ = writeln!(
            w,
            "============================================================================="
        );
        let _ = writeln!(w, "BUG {} (Not tainted): {}", s.name(), what);
        let _ = writeln!(
            w,
            "-----------------------------------------------------------------------------"
        );
        let _ = writeln!(w);
    }

    fn log_fix(&self, s: &KmemCache, what: &str) {
        let mut w = LogWriter::new(self.pages.platform());
        let _ = writeln!(w, "FIX {}: {}", s.name(), what);
    }

    fn trace(&self, s: &KmemCache, op: &str, obj: usize, st: SlabState) {
        let mut w = LogWriter::new(self.pages.platform());
        let _ = writeln!(
            w,
            "TRACE {} {} 0x{:016x} inuse={} fp=0x{:x}",
            s.name(),
            op,
            obj,
            st.inuse(),
            st.offset()
        );
    }

    /// A report about bytes that are not what they should be, with the object's
    /// trailer and dumps (`check_bytes_and_report`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn report_bytes(
        &self,
        s: &KmemCache,
        slab: NonNull<Page>,
        what: &str,
        obj: usize,
        bad: usize,
        from: usize,
        to: usize,
        expect: u8,
    ) {
        // The damaged range: from the first bad byte to the last in [from, to).
        let mut last = bad;
        for a in bad..to {
            // SAFETY: inside the object's slot.
            if unsafe { (a as *const u8).read() } != expect {
                last = a;
            }
        }
        // SAFETY: inside the slot.
        let first = unsafe { (bad as *const u8).read() };
        self.report_object(s, slab, what, obj, Some((bad, last, first, expect, from)));
        // `restore_bytes`: put the expected bytes back, so a later validate does not
        // report the same damage again (the object stays quarantined regardless).
        fill(bad, last + 1 - bad, expect);
        let mut w = LogWriter::new(self.pages.platform());
        let region = what.strip_suffix(" overwritten").unwrap_or(what);
        let _ = writeln!(
            w,
            "FIX {}: Restoring {region} 0x{bad:016x}-0x{last:016x}=0x{expect:x}",
            s.name()
        );
    }

    /// `slab_err` + `print_trailer`: the header, INFO lines (range, tracks, slab,
    /// object), and hex dumps of the red zones, object and padding.
    #[cold]
    pub(crate) fn report_object(
        &self,
        s: &KmemCache,
        slab: NonNull<Page>,
        what: &str,
        obj: usize,
        bytes: Option<(usize, usize, u8, u8, usize)>,
    ) {
        let cfg = s.config();
        let mut w = LogWriter::new(self.pages.platform());
        self.header(&mut w, s, what);
        if let Some((bad, last, first, expect, _)) = bytes {
            let _ = writeln!(w, "INFO: 0x{bad:016x}-0x{last:016x} @offset={}. First byte 0x{first:x} instead of 0x{expect:x}", bad.wrapping_sub(obj));
        }
        let now = self.pages.platform().now_ns();
        let base = self.slab_base(slab);
        let in_slab = obj & 1 == 0 && self.valid_link(cfg, base, obj);
        for (label, which) in [("Allocated", Track2::Alloc), ("Freed", Track2::Free)] {
            if !in_slab {
                break;
            }
            if let Some(t) = self.get_track(cfg, obj, which) {
                if t.when_ns == 0 {
                    continue;
                }
                let _ = write!(w, "INFO: {label} in ");
                let _ = self.pages.platform().symbolize(t.frames[0], &mut w);
                let _ = writeln!(
                    w,
                    " age={} cpu={} pid={} tid={}",
                    now.saturating_sub(t.when_ns) / 1_000_000,
                    t.cpu,
                    t.pid,
                    t.tid
                );
                for &f in t.frames.iter().skip(1).filter(|&&f| f != 0) {
                    let _ = write!(w, " ");
                    let _ = self.pages.platform().symbolize(f, &mut w);
                    let _ = writeln!(w);
                }
            }
        }
        // SAFETY: a live slab.
        let sr = unsafe { slab.as_ref() };
        let st = Slab::of(sr).state();
        let _ = writeln!(
            w,
            "INFO: Slab 0x{:016x} objects={} used={} fp=0x{:016x} flags=0x{:x}",
            slab.as_ptr() as usize,
            cfg.objects,
            st.inuse(),
            base + st.offset() as usize,
            sr.flags().bits()
        );
        let slot = obj.wrapping_sub(cfg.red_left);
        let mark = if in_slab { get_mark(cfg, obj) } else { 0 };
        let fp =
            if in_slab && !(has_marks(cfg) && [MARK_ALLOCATED, MARK_QUARANTINED].contains(&mark)) {
                // SAFETY: an object slot of this slab.
                unsafe { get_freepointer(cfg, obj) }
            } else {
                // Not in the slab, or a mark: no link (decoding a mark would print the
                // hardening key).
                0
            };
        let _ = writeln!(
            w,
            "INFO: Object 0x{obj:016x} @offset={} fp=0x{fp:016x}",
            obj.wrapping_sub(base)
        );
        let _ = writeln!(w);
        if in_slab {
            if cfg.red_left > 0 {
                dump(&mut w, "Redzone", slot, cfg.red_left);
            }
            dump(&mut w, "Object", obj, cfg.object_size.min(128));
            if cfg.rz_end > cfg.object_size {
                dump(
                    &mut w,
                    "Redzone",
                    obj + cfg.object_size,
                    cfg.rz_end - cfg.object_size,
                );
            }
            let pad = obj + cfg.track_off + self.tracks_len(cfg);
            let end = slot + cfg.size;
            if cfg.flags.contains(SlabFlags::POISON) && end > pad {
                dump(&mut w, "Padding", pad, end - pad);
            }
        }
        drop(w);
        self.pages.count_bad_object();
    }
}

/// `print_section`: 16 bytes a line, hex then ASCII.
fn dump<P: Platform>(w: &mut LogWriter<'_, P>, label: &str, addr: usize, len: usize) {
    let mut off = 0;
    while off < len {
        let n = (len - off).min(16);
        let _ = write!(w, "{label} 0x{:016x}: ", addr + off);
        let mut ascii = [b'.'; 16];
        for (i, a) in ascii.iter_mut().enumerate() {
            if i < n {
                // SAFETY: callers dump ranges inside a slot of ours.
                let b = unsafe { ((addr + off + i) as *const u8).read() };
                let _ = write!(w, "{b:02x} ");
                if b.is_ascii_graphic() {
                    *a = b;
                }
            } else {
                let _ = write!(w, "   ");
            }
        }
        let _ = writeln!(w, " {}", core::str::from_utf8(&ascii[..n]).unwrap_or(""));
        off += 16;
    }
}

/// `init_on_free`: zeroes a freed object but for its free-pointer word, which a
/// freelist may still use (a double free not caught at a head keeps the list whole).
///
/// # Safety
/// `obj` is an object of a slab of `s` that the caller owns (being freed).
#[cold]
#[inline(never)]
pub(crate) unsafe fn init_on_free(s: &CacheConfig, obj: usize) {
    let end = s.object_size;
    let fp = s.offset.min(end);
    let fp_end = (s.offset + core::mem::size_of::<usize>()).min(end);
    // SAFETY: caller: the object's `object_size` bytes are ours to write; the two
    // ranges lie within them.
    unsafe {
        ptr::write_bytes(obj as *mut u8, 0, fp);
        ptr::write_bytes((obj + fp_end) as *mut u8, 0, end - fp_end);
    }
}

pub use super::locations::TrackedObject;

#[cfg(test)]
mod tests;
