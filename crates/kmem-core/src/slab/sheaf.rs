//! Per-CPU sheaves (`struct slab_sheaf`, `struct slub_percpu_sheaves`): the fast path
//! of every cache without slub_debug in the sheaves design (Linux 6.18+, the only one
//! since 7.0). A sheaf is an array of object pointers; each CPU area holds a *main*
//! sheaf and a *spare* per cache. Allocation pops the main sheaf's top; a free pushes
//! onto the spare's — whatever slab the object lives in, so no free pays a CAS on a
//! slab. An empty main swaps with a spare that holds an eighth of a sheaf (`swap_floor`),
//! else is exchanged at the node's [`Barn`] for a full sheaf, else refilled from the
//! slabs with one bulk allocation; a full spare swaps with a main sheaf that has room
//! for an eighth of a sheaf, else goes to the barn for an empty sheaf, else is flushed to
//! the slabs with one bulk free. A CPU thus goes to the barn only with its sheaves
//! nearly empty or nearly full and comes back half a sheaf or more from the next trip,
//! and a swap moves an eighth of a sheaf at least. Only refill and flush
//! read or write free pointers, so a pop decodes none and freelist hardening costs
//! the fast path nothing.
//!
//! Departure from the kernel, whose frees push onto the main sheaf too: with one
//! sheaf for both, each allocation waits for the previous free's store of the count
//! (and a free for the page lookup before it), so an alloc/free pair runs as one chain
//! of dependent memory accesses (about 25 cycles here). With frees on the spare the
//! two chains are independent (13 cycles), as mimalloc keeps `free` and `local_free`
//! apart. A freed object is reused once the main sheaf runs out and the spare holds
//! an eighth of a sheaf (`swap_floor`), not at once; a CPU that frees fewer than that
//! before its main sheaf runs out gets a full sheaf from the barn, and its frees wait
//! (at most an eighth of a sheaf per cache; drains and thread exit give them back).
//!
//! ## The sheaves in the CPU area
//! Each sheaf's fill level lives in the `kmem_cache_cpu`, not in the sheaf, as a *top*
//! next to its pointer: the sheaf's address plus 8 bytes per object it holds
//! (`main_top`/`main`, `spare_top`/`spare`), so that slot `count` is at
//! `top + SHEAF_HEADER` and a fast path reaches the slots from the top alone, with no
//! load of the sheaf's pointer and no index arithmetic. A pop finds objects while the
//! main top is above the main pointer, takes the object just below the top and stores
//! the top less 8; a push finds room while the spare top is below `spare_limit`
//! (`spare + 8 * capacity`), stores the object at the top and the top plus 8. Zero
//! words (a fresh area, the zero area, a CPU without sheaves) have neither objects nor
//! room, so both fast paths fall to the slow path without a null test. (One word
//! `count | capacity << 32` before: a pop and a push each loaded the sheaf's pointer
//! as well, one instruction more on every malloc and every free; BENCHMARKS.md, "Sheaf
//! tops".) A sheaf's own `size` is valid whenever it is not one of some CPU's two
//! sheaves.
//!
//! ## Who touches what
//! The owner of the CPU area (thread mode; the local lock's holder in per-CPU mode)
//! owns the tops, `main`, `spare` and the sheaves they point to. With the platform's
//! restartable sequences ([`FastPath::SheafRseq`]) the sequences also pop from the main
//! sheaf and push onto the spare, committing by their store of the top on their CPU;
//! the lock holder then *takes* a top first ([`crate::Platform::take_cpu_freelist`]:
//! set to 0 by a sequence on that CPU, or from another CPU with a fence, so no
//! sequence is half way through), works on
//! the sheaves, and installs the new top last (Release), after the sheaf's pointer and
//! the spare's limit. While a top is 0 no sequence touches its sheaf (the rseq push
//! tests for the 0 itself: a 0 top is below any limit).
//!
//! Sheaf memory comes from a kmalloc cache through the no-CPU path (`alloc_nocpu`),
//! which never touches sheaves: no recursion, even for the cache that holds sheaves.
//!
//! Locking: the barn's lock (a leaf) around list changes only; a node's `list_lock`
//! while refilling from its partial slabs; flushes free through `__slab_free`.

use super::barn::{Barn, NO_OWNER};
use super::free::Emptied;
use super::sheaf_top::{len_of, owner_read, take_and_prefetch_next, take_below, top_of, top_slot};
use super::*;
use crate::gfp::Gfp;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::{AtomicPtr, AtomicUsize, Ordering::Relaxed, Ordering::Release};
use core::ptr::NonNull;

/// A sheaf (`struct slab_sheaf`): a header and `capacity` object slots after it.
///
/// Invariants: while no CPU holds it (as main or spare), `size` objects are in slots
/// `0..size`, each a free object of `cache` handed to nobody else, and
/// `size <= capacity`. The word just before slot 0 is `capacity`, which is never an
/// object address (the double-free test at an empty sheaf's top reads it).
#[repr(C)]
pub struct SlabSheaf {
    /// Objects in the sheaf (not kept up to date while it is one of a CPU's two sheaves).
    pub(super) size: AtomicUsize,
    /// Link on a barn list.
    pub(super) next: AtomicPtr<SlabSheaf>,
    /// The cache whose objects it holds.
    pub(super) cache: AtomicPtr<KmemCache>,
    /// Slots after the header.
    pub(super) capacity: AtomicUsize,
}

impl SlabSheaf {
    /// The next sheaf on the barn list this one is on (for walking lists taken out of
    /// a barn with [`super::barn::BarnLists::take_all`]).
    pub fn next_in_list(&self) -> *mut SlabSheaf {
        self.next.load(Relaxed)
    }
}

/// Bytes of a sheaf before its first slot.
pub const SHEAF_HEADER: usize = core::mem::size_of::<SlabSheaf>();
// The word just before slot 0 is `capacity` (`SlabSheaf`'s invariant), which the
// double-free test at an empty sheaf's top and the pop's prefetch below its last
// object read.
const _: () = assert!(
    core::mem::offset_of!(SlabSheaf, capacity) + core::mem::size_of::<usize>() == SHEAF_HEADER
);

/// The fewest objects a swap of the two sheaves hands over: an allocation that finds
/// the main sheaf empty swaps in a spare holding at least this many (else a full
/// sheaf comes from the barn, or a refill, and the spare keeps its few), and a free
/// that finds the spare full swaps with a main sheaf with at least this much room
/// (else the full spare goes to the barn). An eighth of a sheaf, rounded up (at least one
/// object).
///
/// Why: kmalloc and kfree in turn keep the objects of the two sheaves constant, and
/// each swap then comes as many operations after the last as the objects it moved.
/// Swapping whatever the other sheaf held, a CPU left with a few objects of a class
/// swapped every few operations for as long as it ran (`slab` kmalloc_kfree at 11.9
/// ns a pair where mimalloc took 5.4, in one state of the run; 4.5 in another), and
/// one left with nearly two sheaves' worth would have done the same with the roles
/// reversed. With the floor the sheaves hold an eighth to fifteen eighths of a sheaf
/// between trips to the barn, a swap moves at least an eighth of a sheaf, and a trip
/// lands at least three quarters of a sheaf from the next one.
///
/// Why an eighth: the wider the floor, the narrower that margin, and a thread whose
/// level of a class wanders by more than the margin trips to the barn again and
/// again, trading its freed objects for another thread's. With a quarter (margin half
/// a sheaf) two threads churning tables of their own (`bench preload` thread_churn)
/// traded kmalloc-8 sheaves 990 times in 2 s and ran 1.9x mimalloc's time; with an
/// eighth, 87 trades over every class, with a sixteenth 35, and without a floor about
/// a dozen (times within each other's noise); the kmalloc/kfree pair runs 0.8–0.9 of
/// mimalloc's time with an eighth or a sixteenth.
#[inline(always)]
pub(super) fn swap_floor(cap: usize) -> usize {
    cap.div_ceil(8).max(1)
}

/// `n >= swap_floor(cap)`, without the division and the `max`, for the slow paths
/// that read a sheaf's top (`n`, `cap` < 2^32; in objects, or both in bytes).
#[inline(always)]
pub(super) fn reaches_swap_floor(n: u64, cap: u64) -> bool {
    n != 0 && n * 8 >= cap
}

/// How a cache's fast path runs, chosen once when the cache is created (one compare
/// on the fast path picks it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FastPath {
    /// Sheaves, popped and pushed by the CPU area's owner with plain loads and stores;
    /// no per-object statistics. The inline fast path.
    Sheaf,
    /// Sheaves as [`FastPath::Sheaf`], counting `alloc_cpu_sheaf` / `free_cpu_sheaf`
    /// per object (statistics on).
    SheafCounted,
    /// Sheaves whose fast paths are the platform's restartable sequences; the lock
    /// holder takes a sheaf's top before it changes that sheaf.
    SheafRseq,
    /// The CPU-slab design (`kmem_cache_cpu` freelist and `tid`), reached as
    /// [`CacheConfig::access`] says; also every slub_debug cache in either design.
    #[default]
    CpuSlab,
}

/// Which per-CPU design the slab layer runs (`KMEM_SLUB`): chosen once, before the
/// allocator starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SlubDesign {
    /// Per-CPU sheaves and per-node barns (Linux 7.0).
    #[default]
    Sheaves,
    /// The CPU slab with `tid` and the lockless double-word CAS (Linux up to 6.17).
    CpuSlab,
}

/// Slot `i` of `sheaf` (`i` may be `usize::MAX` for the word before slot 0).
#[inline(always)]
pub(super) fn slot(sheaf: *mut SlabSheaf, i: usize) -> *mut usize {
    (sheaf as usize)
        .wrapping_add(SHEAF_HEADER)
        .wrapping_add(i.wrapping_mul(core::mem::size_of::<usize>())) as *mut usize
}

/// One of the CPU's sheaves as the slow path holds it: the sheaf (may be null) and
/// its count.
#[derive(Clone, Copy)]
pub(super) struct Held {
    sheaf: *mut SlabSheaf,
    len: usize,
}

impl Held {
    const NONE: Held = Held {
        sheaf: core::ptr::null_mut(),
        len: 0,
    };

    fn cap(self) -> usize {
        match NonNull::new(self.sheaf) {
            // SAFETY: a live sheaf held by this CPU's owner.
            Some(s) => unsafe { s.as_ref() }.capacity.load(Relaxed),
            None => 0,
        }
    }
}

/// Which of the CPU's two sheaves: `Main` (allocation pops from it) or `Spare` (frees
/// push onto it).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Main,
    Spare,
}

impl KmemCacheCpu {
    /// The fast pop: the main sheaf's top object, or `None` when it has none.
    ///
    /// It also asks for the line of the object the next pop hands out (tcmalloc's
    /// per-CPU caches do the same): a sheaf's objects were freed without being
    /// touched, often long before, and a program writes a new block at once, so
    /// without the prefetch that write waits for memory (mimalloc-bench's larson
    /// preloaded, 32 threads on 2 CPUs, 80 MB of live blocks: 61% of the samples on
    /// the program's first touch of the new block; BENCHMARKS.md, "The next object's
    /// line"). Below the last object the slot read is the header's `capacity` word,
    /// never an address; a prefetch of any value is harmless.
    #[inline(always)]
    pub(super) fn sheaf_pop(&self) -> Option<usize> {
        Self::owner_pop(&self.main_top, &self.main)
    }

    /// The pop of [`KmemCacheCpu::sheaf_pop`] on either sheaf, given its top and its
    /// pointer (`sheaf_medium.rs` pops the spare with it): the top object, or `None`
    /// when the top is not above the sheaf's address (no objects, no sheaf). The
    /// owner only.
    #[inline(always)]
    pub(super) fn owner_pop(top_word: &AtomicUsize, sheaf: &AtomicPtr<SlabSheaf>) -> Option<usize> {
        // SAFETY: `AtomicPtr<T>` and `AtomicUsize` have the same size and alignment.
        let sheaf = unsafe { &*(sheaf as *const AtomicPtr<SlabSheaf> as *const AtomicUsize) };
        // SAFETY: a sheaf's top and pointer are the owner's, read and written by this
        // CPU area's owner only (`owner_read`).
        let (top, sheaf) = unsafe { (owner_read(top_word), owner_read(sheaf)) };
        if top <= sheaf {
            return None;
        }
        // SAFETY: a top above the sheaf's address means objects in the slots below the
        // top (module docs); only the owner touches them, and the top (`owner_read`).
        unsafe {
            let obj = take_below(top);
            *top_word.as_ptr() = top - core::mem::size_of::<usize>();
            Some(obj)
        }
    }

    /// Whether the CPU holds a spare sheaf (full or not). The owner only.
    #[inline]
    pub(super) fn has_spare(&self) -> bool {
        !self.spare.load(Relaxed).is_null()
    }

    /// The fast push: `obj` on the spare sheaf's top. `Err(false)`: no room (or no
    /// spare sheaf); `Err(true)`: `obj` is already the top (a double free).
    #[inline(always)]
    pub(super) fn sheaf_push(&self, obj: usize) -> Result<(), bool> {
        Self::owner_push(&self.spare_top, &self.spare_limit, obj)
    }

    /// The push of [`KmemCacheCpu::sheaf_push`] on either sheaf, given its top and its
    /// limit (a charged area's kept sheaf is pushed with it: `charged_sheaf.rs`). The
    /// owner only.
    #[inline(always)]
    pub(super) fn owner_push(
        top_word: &AtomicUsize,
        limit_word: &AtomicUsize,
        obj: usize,
    ) -> Result<(), bool> {
        // SAFETY: a sheaf's top and limit are the owner's (`owner_read`).
        let (top, limit) = unsafe { (owner_read(top_word), owner_read(limit_word)) };
        if top >= limit {
            return Err(false);
        }
        // SAFETY: room means a sheaf whose top is below its limit: the slot at the top
        // is free, and the one below it holds the top object, or is the header's
        // capacity word (never an object) when the sheaf is empty. The top is the
        // owner's (`owner_read`).
        unsafe {
            if *top_slot(top.wrapping_sub(8)) == obj {
                return Err(true);
            }
            *top_slot(top) = obj;
            *top_word.as_ptr() = top + core::mem::size_of::<usize>();
        }
        Ok(())
    }

    /// Copies what the free fast path checks of an object (`free_mask`,
    /// `free_start_mul`, `free_start_limit`) from the cache's layout: written with
    /// every spare sheaf installed, before its top, so a spare with room always comes
    /// with its cache's checks (a `cpu_offset` belongs to one cache for good: per-CPU
    /// offsets are never given back).
    pub(super) fn set_free_checks(&self, cfg: &CacheConfig) {
        self.free_mask.store(cfg.slab_bytes() - 1, Relaxed);
        let (mul, limit) = cfg.start_test();
        self.free_start_mul.store(mul, Relaxed);
        self.free_start_limit.store(limit, Relaxed);
    }

    /// Whether `p` starts an object of the cache whose spare sheaf this is (see
    /// [`CacheConfig::starts_object_in_slab`]), from this line alone; false before the
    /// first spare sheaf is installed (a zero bound).
    ///
    /// Only the area's owner calls it (a [`CpuRef`]'s holder, on the inline sheaf
    /// path), and only the owner writes the checks ([`KmemCacheCpu::set_free_checks`],
    /// under the same rule), so it reads them with plain loads, which the compiler
    /// folds into the `and`, `imul` and `cmp` (it folds no atomic load): three
    /// instructions fewer on every free.
    #[inline(always)]
    pub(super) fn is_object_start(&self, p: usize) -> bool {
        // SAFETY: the words are the owner's (above): nothing writes them while the
        // owner reads, so plain reads of the atomics race with nothing.
        let (mask, mul, limit) = unsafe {
            (
                *self.free_mask.as_ptr(),
                *self.free_start_mul.as_ptr(),
                *self.free_start_limit.as_ptr(),
            )
        };
        ((p & mask) as u64).wrapping_mul(mul) < limit
    }

    /// Whether an allocation that found the main sheaf empty can swap in the spare:
    /// it holds at least [`swap_floor`] objects (frees since the last swap).
    ///
    /// [`FastPath::Sheaf`] only: no take ever leaves a top below its sheaf there, so
    /// the counts need no saturating subtraction.
    #[inline(always)]
    pub(super) fn can_swap_for_alloc(&self) -> bool {
        if self.main_top.load(Relaxed) > self.main.load(Relaxed) as usize {
            return false;
        }
        let spare = self.spare.load(Relaxed) as usize;
        // In bytes: both the objects and the capacity are 8 bytes a slot (0 and 0
        // without a spare).
        let n = self.spare_top.load(Relaxed).wrapping_sub(spare);
        let cap = self.spare_limit.load(Relaxed).wrapping_sub(spare);
        reaches_swap_floor(n as u64, cap as u64)
    }

    /// Swaps the main and spare sheaves, each with its top and limit ([`Slub::alloc_sheaf_slow`],
    /// [`Slub::free_sheaf_slow`]). The owner only, and only where no restartable sequence
    /// runs on the words ([`FastPath::Sheaf`]). The object checks stay: they belong
    /// to the cache, and were written when the first spare was installed.
    pub(super) fn swap_sheaves(&self) {
        let (mt, mp) = (self.main_top.load(Relaxed), self.main.load(Relaxed));
        let (st, sp) = (self.spare_top.load(Relaxed), self.spare.load(Relaxed));
        let (ml, sl) = (
            self.main_limit.load(Relaxed),
            self.spare_limit.load(Relaxed),
        );
        self.main.store(sp, Relaxed);
        self.spare.store(mp, Relaxed);
        self.main_limit.store(sl, Relaxed);
        self.spare_limit.store(ml, Relaxed);
        self.main_top.store(st, Release);
        self.spare_top.store(mt, Release);
    }

    /// The top and pointer of one of the CPU's sheaves.
    fn parts(&self, which: Which) -> (&AtomicUsize, &AtomicPtr<SlabSheaf>) {
        match which {
            Which::Main => (&self.main_top, &self.main),
            Which::Spare => (&self.spare_top, &self.spare),
        }
    }

    /// Objects the CPU's sheaves hold (statistics; racy against the owner).
    pub fn sheaf_objects(&self) -> usize {
        len_of(self.main_top.load(Relaxed), self.main.load(Relaxed))
            + len_of(self.spare_top.load(Relaxed), self.spare.load(Relaxed))
    }

    /// Sheaves the CPU holds (statistics).
    pub fn sheaves_held(&self) -> usize {
        (!self.main.load(Relaxed).is_null()) as usize
            + (!self.spare.load(Relaxed).is_null()) as usize
    }
}

impl<'a, P: Platform> Slub<'a, P> {
    /// What every slow path of a CPU area runs first: the drain a flush asked of it,
    /// and the housekeeping tick.
    #[inline]
    fn slow_path_ticks(&self, c: CpuRef<'_>) {
        self.check_drain_request(c);
        self.housekeeping_tick(c);
    }

    /// The barn of `s` for the CPU area `c` (its node's).
    #[inline]
    pub(super) fn barn<'s>(&self, c: CpuRef<'_>, s: &'s KmemCache) -> &'s Barn {
        &s.node(self.pages_local_node(c)).barn
    }

    /// Takes one of the CPU's sheaves for the slow path (see the module docs): with
    /// restartable sequences through the platform, which leaves its top 0.
    fn take(&self, c: CpuRef<'_>, cfg: &CacheConfig, cc: &KmemCacheCpu, which: Which) -> Held {
        let (top, ptr) = cc.parts(which);
        let t = if cfg.fast == FastPath::SheafRseq {
            self.pages.platform().take_cpu_freelist(c.area().id(), top)
        } else {
            top.load(Relaxed)
        };
        let sheaf = ptr.load(Relaxed);
        Held {
            sheaf,
            len: len_of(t, sheaf),
        }
    }

    /// Installs `h` as one of the CPU's sheaves (the pointer and the spare's limit
    /// first, the top last, with Release: a sequence that reads the top sees the
    /// slots, the pointer and the limit written before).
    fn install(&self, cc: &KmemCacheCpu, which: Which, h: Held) {
        let (top, ptr) = cc.parts(which);
        if which == Which::Spare {
            if !h.sheaf.is_null() {
                // SAFETY: a sheaf a CPU installs is live and one of its cache's; its
                // header names the cache (`init_sheaf`), which outlives its sheaves.
                let s = unsafe { &*(*h.sheaf).cache.load(Relaxed) };
                cc.set_free_checks(s.config());
            }
            cc.spare_limit.store(top_of(h.sheaf, h.cap()), Relaxed);
        } else {
            cc.main_limit.store(top_of(h.sheaf, h.cap()), Relaxed);
        }
        ptr.store(h.sheaf, Relaxed);
        top.store(top_of(h.sheaf, h.len), Release);
    }

    // -----------------------------------------------------------------------
    // Slow paths.

    /// `__pcs_replace_empty_main` + pop: the main sheaf ran out (or the cache counts
    /// statistics, or runs restartable sequences): an object from the spare (the two
    /// swap), the barn, or the slabs.
    #[inline(never)]
    pub(super) fn sheaf_alloc(&self, c: CpuRef<'_>, s: &KmemCache, gfp: Gfp) -> Option<usize> {
        let cfg = s.config();
        let cc = s.cpu(c);
        if cfg.fast == FastPath::SheafCounted {
            if let Some(obj) = cc.sheaf_pop() {
                cc.count(SlubStat::AllocCpuSheaf);
                return Some(obj);
            }
        }
        self.slow_path_ticks(c);
        let mut m = self.take(c, cfg, cc, Which::Main);
        if m.len == 0 {
            let mut f = self.take(c, cfg, cc, Which::Spare);
            if f.len < swap_floor(f.cap()) {
                // Too few frees wait in the spare to be worth a swap: a full sheaf
                // (the spare keeps them), else the spare after all.
                m = self.replace_empty_main(c, s, gfp, m);
            }
            if m.len == 0 && f.len > 0 {
                // The frees wait in the spare: it becomes the main sheaf.
                core::mem::swap(&mut m, &mut f);
                cc.count(SlubStat::SheafSwap);
            }
            self.install(cc, Which::Spare, f);
            if m.len == 0 {
                self.install(cc, Which::Main, m);
                return None;
            }
        }
        m.len -= 1;
        // SAFETY: slots 0..len of the main sheaf hold objects (it is ours now).
        let obj = unsafe { take_and_prefetch_next(m.sheaf, m.len) };
        self.install(cc, Which::Main, m);
        cc.count(SlubStat::AllocCpuSheaf);
        Some(obj)
    }

    /// An empty (or absent) main sheaf is replaced by a full one from the barn, else
    /// refilled from the slabs; the result may still be empty (memory ran out).
    fn replace_empty_main(&self, c: CpuRef<'_>, s: &KmemCache, gfp: Gfp, m: Held) -> Held {
        let cc = s.cpu(c);
        set_size(m.sheaf, 0);
        if let Some((full, extra)) = self.barn(c, s).replace_empty(
            NonNull::new(m.sheaf),
            barn_owner(Some(c)),
            self.spill_account(s),
        ) {
            cc.count(SlubStat::BarnGet);
            if let Some(e) = extra {
                self.free_empty_sheaf(Some(c), s, e);
            }
            return Held {
                sheaf: full.as_ptr(),
                len: held_size(full.as_ptr()).unwrap_or(0),
            };
        }
        cc.count(SlubStat::BarnGetFail);
        let sheaf = match NonNull::new(m.sheaf) {
            Some(sh) => sh,
            None => match self.alloc_empty_sheaf(Some(c), s, gfp, s.config().sheaf_capacity) {
                Some(sh) => sh,
                None => return m,
            },
        };
        let len = self.refill_sheaf(Some(c), s, gfp, sheaf.as_ptr(), 0);
        Held {
            sheaf: sheaf.as_ptr(),
            len,
        }
    }

    /// `__pcs_replace_full_main` + push: the spare sheaf, which takes the frees, is
    /// full (or absent, or the cache counts statistics or runs restartable
    /// sequences): it becomes the main sheaf if that one has room, else goes to the
    /// barn for an empty one (or a new one), else is flushed to the slabs; then `obj`
    /// goes on top. Returns false for a double free at the top (reported).
    ///
    /// # Safety
    /// `obj` is an object of `s` that the caller gives up.
    #[inline(never)]
    pub(super) unsafe fn sheaf_free(&self, c: CpuRef<'_>, s: &KmemCache, obj: usize) -> bool {
        let cfg = s.config();
        let cc = s.cpu(c);
        if cfg.fast == FastPath::SheafCounted {
            match cc.sheaf_push(obj) {
                Ok(()) => {
                    cc.count(SlubStat::FreeCpuSheaf);
                    return true;
                }
                Err(true) => return self.double_free_at(s, obj),
                Err(false) => {}
            }
        }
        let mut f = self.take(c, cfg, cc, Which::Spare);
        // A double free of the top of the spare as it is (before a full one goes).
        // SAFETY: slot `len - 1` of our spare sheaf, or its capacity word when empty.
        if !f.sheaf.is_null() && unsafe { *slot(f.sheaf, f.len.wrapping_sub(1)) } == obj {
            self.install(cc, Which::Spare, f);
            return self.double_free_at(s, obj);
        }
        if f.sheaf.is_null() || f.len >= f.cap() {
            let mut m = self.take(c, cfg, cc, Which::Main);
            if !f.sheaf.is_null()
                && (m.sheaf.is_null()
                    || (Self::free_may_swap(cfg.size) && m.len + swap_floor(m.cap()) <= m.cap()))
            {
                // The full spare becomes the main sheaf, and the main one, which has
                // room (an eighth of a sheaf at least: `swap_floor`), takes the frees: the
                // CPU goes to the barn only when the sheaves are nearly full (or
                // nearly empty, for an allocation), as the kernel's does when both
                // are, and lands well between the two. Trading the full spare
                // whenever the main held objects bounced a thread whose sheaves held
                // about one sheaf's worth between the barn's full and empty lists,
                // handing its freed objects to other threads, whose objects then
                // shared cache lines with its own.
                core::mem::swap(&mut m, &mut f);
                cc.count(SlubStat::SheafSwap);
                // SAFETY: slot `len - 1` of the sheaf now the spare (ours), or its
                // capacity word when empty.
                if !f.sheaf.is_null() && unsafe { *slot(f.sheaf, f.len.wrapping_sub(1)) } == obj {
                    self.install(cc, Which::Main, m);
                    self.install(cc, Which::Spare, f);
                    return self.double_free_at(s, obj);
                }
            }
            self.install(cc, Which::Main, m);
            f = self.replace_full_spare(c, s, f);
            if f.sheaf.is_null() {
                // No sheaf to be had: straight to the slab.
                self.install(cc, Which::Spare, f);
                // SAFETY: forwarded from the caller.
                return unsafe { self.free_to_slab(Some(c), s, obj) };
            }
        }
        // SAFETY: the spare sheaf is ours and has room.
        unsafe { *slot(f.sheaf, f.len) = obj };
        f.len += 1;
        self.install(cc, Which::Spare, f);
        cc.count(SlubStat::FreeCpuSheaf);
        true
    }

    /// For [`Slub::free_outgrown`]: the CPU's spare sheaf, full, is flushed to its
    /// slabs (runs of one slab's objects, a CAS each; an emptied slab goes to the
    /// page allocator: `Emptied::Release`), then `obj` goes on it. The owner only, with the
    /// sheaf fast path ([`FastPath::Sheaf`]).
    ///
    /// # Safety
    /// `obj` is an object of `s` that the caller gives up.
    #[inline(never)]
    pub(super) unsafe fn spare_flush_push(&self, c: CpuRef<'_>, s: &KmemCache, obj: usize) -> bool {
        let cfg = s.config();
        let cc = s.cpu(c);
        let mut f = self.take(c, cfg, cc, Which::Spare);
        debug_assert!(!f.sheaf.is_null() && f.len >= f.cap());
        // A double free of the full spare's top (the push tests room first): flushed,
        // then pushed, it would be on its slab and on the sheaf.
        // SAFETY: slot `len - 1` of our spare sheaf, which is full.
        if unsafe { *slot(f.sheaf, f.len - 1) } == obj {
            self.install(cc, Which::Spare, f);
            return self.double_free_at(s, obj);
        }
        self.sheaf_flush_as(Some(c), s, f.sheaf, f.len, Emptied::Release);
        // SAFETY: the spare sheaf is ours and empty now.
        unsafe { *slot(f.sheaf, 0) = obj };
        f.len = 1;
        self.install(cc, Which::Spare, f);
        cc.count(SlubStat::FreeCpuSheaf);
        true
    }

    /// A spare sheaf that is full (or absent) is replaced by one with room: an empty
    /// sheaf from the barn (the full one goes there) or a new one; when the barn holds
    /// enough full sheaves the spare is flushed to the slabs. Null only when there
    /// was no sheaf at all and none could be made.
    fn replace_full_spare(&self, c: CpuRef<'_>, s: &KmemCache, f: Held) -> Held {
        let cc = s.cpu(c);
        let cap = s.config().sheaf_capacity;
        let empty_one = |sheaf: Option<NonNull<SlabSheaf>>| Held {
            sheaf: sheaf.map_or(core::ptr::null_mut(), |p| p.as_ptr()),
            len: 0,
        };
        let Some(full) = NonNull::new(f.sheaf) else {
            // No spare yet: an empty one from the barn, or a new one.
            let barn = self.barn(c, s);
            let empty = (barn.nr_empty_hint() != 0)
                .then(|| barn.lock().get_empty())
                .flatten();
            return empty_one(
                empty.or_else(|| self.alloc_empty_sheaf(Some(c), s, Gfp::NOWARN, cap)),
            );
        };
        if f.len < f.cap() {
            return f;
        }
        set_size(f.sheaf, f.len);
        match self
            .barn(c, s)
            .replace_full(full, self.spill_account(s), barn_owner(Some(c)))
        {
            Ok(empty) => {
                cc.count(SlubStat::BarnPut);
                // (No empty sheaf in the barn and none to be made: the full one is in
                // the barn now; the object goes to its slab.)
                empty_one(empty.or_else(|| self.alloc_empty_sheaf(Some(c), s, Gfp::NOWARN, cap)))
            }
            Err(full) => {
                cc.count(SlubStat::BarnPutFail);
                self.sheaf_flush(Some(c), s, full.as_ptr(), f.len);
                empty_one(Some(full))
            }
        }
    }

    /// A double free caught at a sheaf's top: reported, refused.
    #[cold]
    fn double_free_at(&self, s: &KmemCache, obj: usize) -> bool {
        let slab = self.pages.virt_to_head_page(obj as *const u8);
        self.report(s, slab, "Object already free", obj);
        false
    }

    /// Frees `obj` straight into its slab (no sheaf could be had).
    ///
    /// # Safety
    /// `obj` is an object of `s` that the caller gives up.
    #[cold]
    unsafe fn free_to_slab(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, obj: usize) -> bool {
        let slab = self.freelist_slab(obj);
        // SAFETY: forwarded from the caller.
        unsafe { self.slab_free(cpu, s, slab, obj, obj, 1) }
    }

    /// `pcs_flush_all` for a CPU going offline (thread exit) or asked to flush: the
    /// main and spare sheaves go to the barn — those with objects to its full list,
    /// empty ones to its empty list — instead of their objects going back slab by
    /// slab; what the barn has no room for is flushed to the slabs or freed.
    /// What no barn takes is flushed and freed through `own`'s page lists and sheaves
    /// (`c` itself, or `None`: the zone and the slabs; see
    /// [`Slub::flush_foreign_cpu_cache`]).
    pub(super) fn flush_cpu_sheaves(&self, c: CpuRef<'_>, s: &KmemCache, own: Option<CpuRef<'_>>) {
        let cfg = s.config();
        let cc = s.cpu(c);
        for which in [Which::Main, Which::Spare] {
            let h = self.take(c, cfg, cc, which);
            self.install(cc, which, Held::NONE);
            set_size(h.sheaf, h.len);
            if let Some(sheaf) = NonNull::new(h.sheaf) {
                self.sheaf_to_barn(own, s, self.pages_local_node(c), sheaf);
            }
        }
        cc.count(SlubStat::CpuslabFlush);
    }

    /// Hands a sheaf no CPU holds to node `nid`'s barn, or (no room) flushes it to the
    /// slabs and frees it.
    pub(super) fn sheaf_to_barn(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        nid: usize,
        sheaf: NonNull<SlabSheaf>,
    ) {
        // SAFETY: the sheaf is the caller's.
        let r = unsafe { sheaf.as_ref() };
        let size = r.size.load(Relaxed);
        let standard = r.capacity.load(Relaxed) == s.config().sheaf_capacity;
        let barn = &s.node(nid).barn;
        let kept = standard && {
            let acct = self.spill_account(s);
            let mut l = barn.lock_counted(acct);
            // SAFETY: a sheaf no CPU holds, the caller's (see above), handed over.
            unsafe {
                if size > 0 {
                    l.put_full(sheaf, acct.cap(), barn_owner(cpu)).is_ok()
                } else {
                    l.put_empty(sheaf).is_ok()
                }
            }
        };
        if !kept {
            self.sheaf_flush(cpu, s, sheaf.as_ptr(), size);
            self.free_empty_sheaf(cpu, s, sheaf);
        }
    }
}

/// The owner a barn records for the sheaves CPU area `c` hands in (see
/// [`super::barn::BarnLists::get_full`]): the area's id, [`NO_OWNER`] for none.
#[inline]
pub(super) fn barn_owner(c: Option<CpuRef<'_>>) -> u32 {
    c.map_or(NO_OWNER, |c| c.area().id() as u32)
}

/// The size of a sheaf the caller holds that is not a main sheaf (a CPU's spare, a
/// sheaf taken from a barn), or `None` for none.
#[inline]
fn held_size(sheaf: *mut SlabSheaf) -> Option<usize> {
    // SAFETY: a non-null sheaf the caller holds is live (freed only by its holder).
    NonNull::new(sheaf).map(|s| unsafe { s.as_ref() }.size.load(Relaxed))
}

/// Records `len` as the size of a sheaf that stops being one of a CPU's sheaves.
#[inline]
fn set_size(sheaf: *mut SlabSheaf, len: usize) {
    if let Some(sh) = NonNull::new(sheaf) {
        // SAFETY: a live sheaf the caller holds.
        unsafe { sh.as_ref() }.size.store(len, Relaxed);
    }
}
