//! SLUB: the unqueued slab allocator (mm/slub.c), on the page allocator.
//!
//! ## Types
//! - [`KmemCache`] (`struct kmem_cache`): one object size and its slabs. Its layout is
//!   fixed at creation ([`CacheConfig`]); per node it has a [`KmemCacheNode`] (the
//!   partial list under `list_lock`); per CPU area a [`KmemCacheCpu`] at `cpu_offset`.
//! - A *slab* is a block of 2^order pages. Its metadata lives in the head page's
//!   descriptor (`Page::owner`), never inside the slab:
//!   `owner[0]` = [`SlabState`] (freelist offset, inuse, frozen — one word, so a single
//!   compare-and-swap updates all three), `owner[1]` = the owner's local freelist,
//!   `owner[2]` = the cache, `owner[3]` = which CPU area froze the slab and how many
//!   objects its local freelist holds.
//!   Tail pages carry `PG_TAIL` and a pointer to the head (`compound_head`).
//! - Freelists are chains through a free pointer inside each free object (at
//!   `offset`), ended by an *end token* `slab base | 1`, never null: a freelist value
//!   always tells its slab (seed 000, patch 5/7).
//!
//! ## Slab states (who may take objects from a slab)
//! | state        | frozen | on a list            | objects go out through      |
//! |--------------|--------|----------------------|-----------------------------|
//! | CPU slab     | 1      | none                 | the CPU's `c.freelist`      |
//! | CPU partial  | 1      | one CPU's `partial`  | nobody, until it is CPU slab|
//! | node partial | 0      | node `partial` list  | `get_partial_node`, no-CPU allocations |
//! | full         | 0      | none                 | nobody                      |
//! Anybody may free into any slab: a CAS on its state pushes onto `slab.freelist`.
//! The CPU that froze a slab frees into it without an atomic: objects go on the slab's
//! *local* freelist (`owner[1]`), which only that CPU touches, like mimalloc's
//! `local_free`. They still count as in use (they are the freezing CPU's to reuse); the
//! local list becomes the CPU freelist when the slab becomes the CPU slab again, and is
//! merged into `slab.freelist` (with `inuse` lowered) when the slab is unfrozen.
//!
//! ## Rules
//! 1. Lock order: `slab_caches` lock → `list_lock` (one node at a time) → zone locks of
//!    the page allocator. No `list_lock` is held across a page allocation.
//! 2. Every change of list membership, and every freeze or unfreeze of a slab that is
//!    or will be on a node list, happens under that node's `list_lock`; the state CAS
//!    that goes with it is done while holding the lock. Freezing a full slab (a free
//!    into it that puts it on the freer's CPU partial list) needs no lock: it is on no
//!    list. Hence: an unfrozen slab is on the node partial list exactly when it has a
//!    free object.
//! 3. Only the owner of a CPU area touches its `KmemCacheCpu` (the std default: one
//!    area per thread). The fast paths are plain loads and stores: allocation pops
//!    `c.freelist`, a free pushes when the object is in the CPU slab. `freelist` and
//!    `tid` sit together, 16-byte aligned, and `tid` advances on each operation, so a
//!    lockless per-CPU mode (a double-word CAS on the pair) fits this layout.
//! 4. A context with no CPU area (thread exit, early start) allocates under
//!    `list_lock` from a node partial slab and frees through `__slab_free`.
//!
//! ## Shared CPU areas (per-CPU mode)
//! Where CPU areas are shared by contexts that can be preempted and migrate (std's
//! per-CPU mode, a preemptible kernel), whoever holds an area's local lock is its
//! owner for everything above. With `CacheConfig::lockless` the allocation and free
//! fast paths also run without the lock (`alloc_lockless`, `free_lockless`): they
//! read `tid` then `freelist` and change the pair with a double-word CAS, so they
//! never act on a pair that moved since they read it. Every other change of the pair
//! is a CAS too, and follows one rule: a slow path first *takes* the CPU freelist
//! (CAS to 0), works on what it took, and *installs* the new freelist at the end.
//! While the pair holds 0 the lockless paths leave it alone (a pop needs an object, a
//! push needs the CPU slab), so between take and install the lock holder owns it.
//! Partial lists, frozen slabs' local freelists and statistics stay lock-only
//! (statistics counted by lockless paths may lose increments).

use crate::gfp::Gfp;
use crate::mmzone::MAX_NUMNODES;
use crate::page::{Page, PageFlags, PageList, PAGE_SIZE};
use crate::page_alloc::PageAllocator;
use crate::percpu::{CpuArea, CpuRef};
use crate::platform::Platform;
use crate::show_mem::LogWriter;
use crate::sync::{
    AtomicPtr, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, SpinLock,
};
use core::cell::UnsafeCell;
use core::fmt::Write as _;
use core::ptr::{self, NonNull};

/// Longest cache name kept (longer names are cut).
pub const CACHE_NAME_LEN: usize = 32;
/// Largest slab order (`slub_max_order` = `PAGE_ALLOC_COSTLY_ORDER`).
pub const SLUB_MAX_ORDER: usize = 3;
/// Largest object a cache may hold (half of the largest slab).
pub const MAX_OBJECT_SIZE: usize = PAGE_SIZE << (SLUB_MAX_ORDER - 1);
/// `tid` steps by this much per operation (room for a CPU number below it).
pub const TID_STEP: usize = 1 << 12;

bitflags::bitflags! {
    /// Cache creation flags (`SLAB_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct SlabFlags: u32 {
        /// `SLAB_HWCACHE_ALIGN`: align objects to a cache line.
        const HWCACHE_ALIGN = 1 << 0;
        /// `SLAB_RECLAIM_ACCOUNT`: objects are reclaimable (the kmalloc-rcl set).
        const RECLAIM_ACCOUNT = 1 << 1;
        /// `SLAB_ACCOUNT`: objects are charged to a memory cgroup (the kmalloc-cg set).
        const ACCOUNT = 1 << 2;
        /// F (`SLAB_CONSISTENCY_CHECKS`): check objects and slabs on every alloc/free.
        const CONSISTENCY_CHECKS = 1 << 8;
        /// Z (`SLAB_RED_ZONE`): red zones around each object.
        const RED_ZONE = 1 << 9;
        /// P (`SLAB_POISON`): poison free objects and padding.
        const POISON = 1 << 10;
        /// U (`SLAB_STORE_USER`): record where each object was allocated and freed.
        const STORE_USER = 1 << 11;
        /// T (`SLAB_TRACE`): trace every alloc and free on the log.
        const TRACE = 1 << 12;
        /// No freelist key for this cache (hardening is on by default): free pointers
        /// are stored as they are; the decode still runs, with a zero key (the `debug`
        /// bench suite's `plain` mode).
        const NO_HARDEN = 1 << 16;
        /// `init_on_alloc`: objects are zeroed when handed out.
        const INIT_ON_ALLOC = 1 << 17;
        /// `init_on_free`: objects are zeroed when freed.
        const INIT_ON_FREE = 1 << 18;
        /// `CONFIG_SLAB_FREELIST_RANDOM`: each new slab's freelist in a random order.
        const RANDOM_FREELIST = 1 << 19;
        /// All slub_debug flags: a cache with any of them leaves the fast paths.
        const DEBUG = Self::CONSISTENCY_CHECKS.bits() | Self::RED_ZONE.bits()
            | Self::POISON.bits() | Self::STORE_USER.bits() | Self::TRACE.bits();
    }
}

/// SLUB statistics (`enum stat_item`), counted per CPU area per cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum SlubStat {
    AllocFastpath = 0,
    AllocSlowpath,
    FreeFastpath,
    FreeSlowpath,
    FreeFrozen,
    FreeAddPartial,
    FreeRemovePartial,
    AllocFromPartial,
    AllocSlab,
    AllocRefill,
    AllocNodeMismatch,
    FreeSlab,
    CpuslabFlush,
    DeactivateFull,
    DeactivateEmpty,
    DeactivateToHead,
    DeactivateToTail,
    DeactivateRemoteFrees,
    CpuPartialAlloc,
    CpuPartialFree,
    CpuPartialNode,
    CpuPartialDrain,
}

/// Number of [`SlubStat`] items.
pub const NR_SLUB_STAT: usize = 22;

impl SlubStat {
    /// Every item, in order.
    pub const ALL: [SlubStat; NR_SLUB_STAT] = [
        SlubStat::AllocFastpath,
        SlubStat::AllocSlowpath,
        SlubStat::FreeFastpath,
        SlubStat::FreeSlowpath,
        SlubStat::FreeFrozen,
        SlubStat::FreeAddPartial,
        SlubStat::FreeRemovePartial,
        SlubStat::AllocFromPartial,
        SlubStat::AllocSlab,
        SlubStat::AllocRefill,
        SlubStat::AllocNodeMismatch,
        SlubStat::FreeSlab,
        SlubStat::CpuslabFlush,
        SlubStat::DeactivateFull,
        SlubStat::DeactivateEmpty,
        SlubStat::DeactivateToHead,
        SlubStat::DeactivateToTail,
        SlubStat::DeactivateRemoteFrees,
        SlubStat::CpuPartialAlloc,
        SlubStat::CpuPartialFree,
        SlubStat::CpuPartialNode,
        SlubStat::CpuPartialDrain,
    ];
    /// The name in `/sys/kernel/slab/<cache>/`.
    pub fn name(self) -> &'static str {
        match self {
            SlubStat::AllocFastpath => "alloc_fastpath",
            SlubStat::AllocSlowpath => "alloc_slowpath",
            SlubStat::FreeFastpath => "free_fastpath",
            SlubStat::FreeSlowpath => "free_slowpath",
            SlubStat::FreeFrozen => "free_frozen",
            SlubStat::FreeAddPartial => "free_add_partial",
            SlubStat::FreeRemovePartial => "free_remove_partial",
            SlubStat::AllocFromPartial => "alloc_from_partial",
            SlubStat::AllocSlab => "alloc_slab",
            SlubStat::AllocRefill => "alloc_refill",
            SlubStat::AllocNodeMismatch => "alloc_node_mismatch",
            SlubStat::FreeSlab => "free_slab",
            SlubStat::CpuslabFlush => "cpuslab_flush",
            SlubStat::DeactivateFull => "deactivate_full",
            SlubStat::DeactivateEmpty => "deactivate_empty",
            SlubStat::DeactivateToHead => "deactivate_to_head",
            SlubStat::DeactivateToTail => "deactivate_to_tail",
            SlubStat::DeactivateRemoteFrees => "deactivate_remote_frees",
            SlubStat::CpuPartialAlloc => "cpu_partial_alloc",
            SlubStat::CpuPartialFree => "cpu_partial_free",
            SlubStat::CpuPartialNode => "cpu_partial_node",
            SlubStat::CpuPartialDrain => "cpu_partial_drain",
        }
    }
}

/// The slab's one-word state in `owner[0]` of its head page:
/// bits 0..32 freelist offset from the slab base (1 = the end token), bits 32..48
/// `inuse`, bit 63 `frozen`.
///
/// Every change is a compare-and-swap of the whole word (AcqRel), computed by the
/// transition functions below from the value it replaces: [`SlabState::after_free`]
/// (`__slab_free`, any thread), [`SlabState::taken`] (`get_freelist`, the CPU that
/// froze the slab) and [`SlabState::after_unfreeze`] (the freezing CPU gives the slab
/// back). [`free_decision`] says what a free must hold before its CAS. The loom
/// model (`tests/loom_slab.rs`) runs these same functions against concurrent frees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabState(u64);

/// The freelist offset that stands for the end token (an empty freelist).
pub const END_OFFSET: u64 = 1;
const FROZEN: u64 = 1 << 63;

impl SlabState {
    /// A state from its fields.
    #[inline]
    pub const fn new(off: u64, inuse: u64, frozen: bool) -> Self {
        Self(off | (inuse << 32) | if frozen { FROZEN } else { 0 })
    }
    /// The raw word.
    #[inline]
    pub const fn bits(self) -> u64 {
        self.0
    }
    /// A state from its raw word.
    #[inline]
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }
    /// `__slab_free`: `cnt` objects, the first at offset `head`, pushed on the
    /// freelist (the last one's free pointer already holds the old head); the slab
    /// becomes frozen if it was or if the freer `freeze`s it (see [`free_decision`]).
    #[inline]
    pub const fn after_free(self, head: u64, cnt: u64, freeze: bool) -> Self {
        Self::new(head, self.inuse() - cnt, self.frozen() || freeze)
    }
    /// `get_freelist`: the freezing CPU takes the whole freelist; every object now
    /// counts as in use and the slab stays frozen.
    #[inline]
    pub const fn taken(objects: u64) -> Self {
        Self::new(END_OFFSET, objects, true)
    }
    /// Unfreezing: the CPU gives back `cnt` objects it held, the first at offset
    /// `head` (`None` when `cnt` is 0; the last one's free pointer already holds the
    /// old head), and the slab is no longer frozen.
    #[inline]
    pub const fn after_unfreeze(self, head: Option<u64>, cnt: u64) -> Self {
        let off = match head {
            Some(h) => h,
            None => self.offset(),
        };
        Self::new(off, self.inuse() - cnt, false)
    }
    /// Freelist offset (1 = empty).
    #[inline]
    pub const fn offset(self) -> u64 {
        self.0 & 0xffff_ffff
    }
    /// Whether the slab's own freelist is empty.
    #[inline]
    pub const fn list_empty(self) -> bool {
        self.offset() == END_OFFSET
    }
    /// Objects handed out (or held by a CPU freelist).
    #[inline]
    pub const fn inuse(self) -> u64 {
        (self.0 >> 32) & 0xffff
    }
    /// Whether a CPU owns the slab.
    #[inline]
    pub const fn frozen(self) -> bool {
        self.0 & FROZEN != 0
    }
}

/// What a free must do before its CAS on a slab in state `old` (rule 2 of the
/// module comment): a frozen slab belongs to its CPU (no lock); an unfrozen slab
/// that the free empties or makes partial changes node lists, so the free takes the
/// node's list lock — unless it was full and the freer can take it onto its own CPU
/// partial list (`can_freeze`), which freezes it instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeDecision {
    /// CAS alone.
    Plain,
    /// CAS with `freeze`: the slab joins the freer's CPU partial list.
    Freeze,
    /// Take the list lock, then decide again.
    Lock,
}

/// See [`FreeDecision`]; `locked` says the list lock is already held.
#[inline]
pub const fn free_decision(
    old: SlabState,
    cnt: u64,
    can_freeze: bool,
    locked: bool,
) -> FreeDecision {
    let inuse = old.inuse() - cnt;
    if old.frozen() || !(inuse == 0 || old.list_empty()) {
        FreeDecision::Plain
    } else if old.list_empty() && can_freeze {
        FreeDecision::Freeze
    } else if locked {
        FreeDecision::Plain
    } else {
        FreeDecision::Lock
    }
}

/// An object constructor with a word of context: `f(object, data)` runs once on every
/// object when its slab is made (the kernel's `ctor`, plus the context a typed cache
/// needs to carry its Rust constructor).
#[derive(Clone, Copy, Debug)]
pub struct Ctor {
    /// Initialises the object at the pointer.
    pub f: fn(*mut u8, usize),
    /// Passed back to `f`.
    pub data: usize,
}

impl Ctor {
    /// A constructor from a plain `fn(*mut u8)`.
    pub fn plain(f: fn(*mut u8)) -> Self {
        fn call(p: *mut u8, data: usize) {
            // SAFETY: `data` was made from a `fn(*mut u8)` by `Ctor::plain`; function
            // pointers fit in a usize on every supported target.
            let f = unsafe { core::mem::transmute::<usize, fn(*mut u8)>(data) };
            f(p);
        }
        Self {
            f: call,
            data: f as usize,
        }
    }
}

/// What a cache is, fixed when it is created.
#[derive(Clone, Copy, Debug)]
pub struct CacheConfig {
    name: [u8; CACHE_NAME_LEN],
    name_len: usize,
    /// The size the user asked for (`object_size`).
    pub object_size: usize,
    /// Bytes per object in the slab, free pointer and alignment included (`size`).
    pub size: usize,
    /// Object alignment.
    pub align: usize,
    /// Offset of the free pointer in a free object.
    pub offset: usize,
    /// Slab order (`oo_order`).
    pub order: usize,
    /// `PAGE_SIZE << order`, kept so the fast paths need no shift.
    slab_size: usize,
    /// Objects per slab (`oo_objects`).
    pub objects: usize,
    /// Node partial slabs kept even when empty (`min_partial`).
    pub min_partial: usize,
    /// Most slabs on a CPU's partial list (`cpu_partial_slabs`).
    pub cpu_partial_slabs: usize,
    /// Creation flags.
    pub flags: SlabFlags,
    /// Runs once on every object when its slab is made.
    pub ctor: Option<Ctor>,
    /// Offset of the [`KmemCacheCpu`] in every CPU area.
    pub cpu_offset: usize,
    /// `2^32 / size`, rounded up: `off * reciprocal >> 32` is the object index.
    reciprocal: u64,
    /// Bytes of left red zone before each object (debug caches with Z; else 0): an
    /// object starts `red_left` bytes into its slot.
    pub red_left: usize,
    /// End of the right red zone, from the object's start (debug caches with Z).
    pub rz_end: usize,
    /// Offset of the two tracks (alloc, free) from the object's start (with U).
    pub track_off: usize,
    /// Freelist hardening: a stored free pointer is `ptr ^ random ^ (swab(address of
    /// the pointer) & harden_mask)` (CONFIG_SLAB_FREELIST_HARDENED); 0 and 0 when off.
    pub random: usize,
    /// All ones when hardened, else 0.
    pub harden_mask: usize,
    /// CPU areas are shared and the lockless fast paths may run concurrently with an
    /// area's lock holder (per-CPU mode with `cmpxchg16b`): every change of a CPU's
    /// `(freelist, tid)` pair is then a double-word compare-and-swap.
    pub lockless: bool,
    /// The lockless fast paths are the platform's restartable sequences (with
    /// `lockless`): they commit with a plain store on the CPU they run on, so the slab
    /// layer changes a CPU's pair only by taking it through the platform's
    /// [`set_rseq_take`] hook and installing a list while it is empty.
    pub rseq: bool,
}

impl CacheConfig {
    const EMPTY: CacheConfig = CacheConfig {
        name: [0; CACHE_NAME_LEN],
        name_len: 0,
        object_size: 0,
        size: 0,
        align: 0,
        offset: 0,
        order: 0,
        slab_size: PAGE_SIZE,
        objects: 0,
        min_partial: 0,
        cpu_partial_slabs: 0,
        flags: SlabFlags::empty(),
        ctor: None,
        cpu_offset: 0,
        reciprocal: 0,
        red_left: 0,
        rz_end: 0,
        track_off: 0,
        random: 0,
        harden_mask: 0,
        lockless: false,
        rseq: false,
    };

    /// The cache's name.
    pub fn name(&self) -> &str {
        core::str::from_utf8(&self.name[..self.name_len]).unwrap_or("?")
    }

    /// The index of the object whose slot starts `off` bytes into its slab (its
    /// left red zone included).
    #[inline]
    pub fn obj_to_index(&self, off: usize) -> usize {
        ((off as u64 * self.reciprocal) >> 32) as usize
    }

    /// Bytes a slab spans.
    #[inline]
    pub fn slab_bytes(&self) -> usize {
        self.slab_size
    }

    /// Whether any slub_debug flag is set (the cache leaves the fast paths).
    #[inline]
    pub fn is_debug(&self) -> bool {
        self.flags.intersects(SlabFlags::DEBUG)
    }

    /// Whether the cache stays off the fast paths: slub_debug flags, or
    /// init_on_alloc / init_on_free (their zeroing happens in the debug path, so the
    /// fast paths test no flag for them — the kernel uses static keys instead).
    #[inline]
    pub fn off_fast_paths(&self) -> bool {
        self.flags.intersects(
            SlabFlags::DEBUG
                .union(SlabFlags::INIT_ON_ALLOC)
                .union(SlabFlags::INIT_ON_FREE),
        )
    }

    /// `calculate_sizes` + `calculate_order`: the layout for `object_size` bytes
    /// aligned to `align`. `None` if the object is too large or the alignment is not a
    /// power of two up to a page.
    pub fn calculate(
        name: &str,
        object_size: usize,
        align: usize,
        flags: SlabFlags,
        ctor: Option<Ctor>,
        nr_cpus: usize,
    ) -> Option<CacheConfig> {
        if object_size == 0 || object_size > MAX_OBJECT_SIZE {
            return None;
        }
        if align != 0 && (!align.is_power_of_two() || align > PAGE_SIZE) {
            return None;
        }
        let word = core::mem::size_of::<usize>();
        // A constructed object's contents are its constructor's: no poison (as the
        // kernel's __OBJECT_POISON).
        let flags = if ctor.is_some() {
            flags - SlabFlags::POISON
        } else {
            flags
        };
        let mut align = align.max(word);
        if flags.contains(SlabFlags::HWCACHE_ALIGN) {
            // Cache-line alignment, unless the object is small enough to share lines
            // (the kernel's calculate_alignment halves it for small objects).
            let mut ralign = 64;
            while object_size <= ralign / 2 && ralign > word {
                ralign /= 2;
            }
            align = align.max(ralign);
        }
        let mut size = object_size.next_multiple_of(word);
        let (mut red_left, mut rz_end, mut track_off) = (0, 0, 0);
        // The free pointer: in the middle of the object (a use-after-free write at
        // the start does not hit it), or after the object when a constructor's
        // contents must survive while the object is free, or when debugging (poison
        // and red zones own every byte of the object).
        let offset = if flags.intersects(SlabFlags::DEBUG) {
            // Slot: [left red zone][object][right red zone][free pointer][tracks]
            // [padding], as calculate_sizes lays out a debug cache.
            if flags.contains(SlabFlags::RED_ZONE) {
                red_left = align;
                rz_end = size + word;
            } else {
                rz_end = size;
            }
            let off = rz_end;
            track_off = off + word;
            size = track_off;
            if flags.contains(SlabFlags::STORE_USER) {
                size += 2 * crate::slub_debug::TRACK_SIZE;
            }
            size += red_left;
            off
        } else if ctor.is_some() {
            let off = size;
            size += word;
            off
        } else {
            (object_size / 2) & !(word - 1)
        };
        size = size.next_multiple_of(align);
        let (order, objects) = calculate_order(size, nr_cpus)?;
        let mut cfg = CacheConfig {
            object_size,
            size,
            align,
            offset,
            order,
            slab_size: PAGE_SIZE << order,
            objects,
            min_partial: ((usize::BITS - 1 - size.leading_zeros()) as usize / 2).clamp(5, 10),
            cpu_partial_slabs: 0,
            flags,
            ctor,
            reciprocal: (1u64 << 32).div_ceil(size as u64),
            red_left,
            rz_end,
            track_off,
            ..CacheConfig::EMPTY
        };
        // set_cpu_partial (the kernel's current values): objects a CPU keeps on
        // partial slabs, as slabs.
        let cpu_partial_objs: usize = if size >= PAGE_SIZE {
            6
        } else if size >= 1024 {
            24
        } else if size >= 256 {
            52
        } else {
            120
        };
        cfg.cpu_partial_slabs = (cpu_partial_objs * 2).div_ceil(objects);
        let n = name.len().min(CACHE_NAME_LEN);
        let mut cut = n;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        cfg.name[..cut].copy_from_slice(&name.as_bytes()[..cut]);
        cfg.name_len = cut;
        Some(cfg)
    }
}

/// `calculate_order`: the smallest slab order whose tail waste is at most 1/16 of the
/// slab (then 1/8, then 1/4) holding at least `slub_min_objects` objects (fewer if the
/// largest order cannot), as `calc_slab_order` does. Returns (order, objects).
pub fn calculate_order(size: usize, nr_cpus: usize) -> Option<(usize, usize)> {
    let fls = (usize::BITS - nr_cpus.max(1).leading_zeros()) as usize;
    let max_objects = (PAGE_SIZE << SLUB_MAX_ORDER) / size;
    let mut min_objects = (4 * (fls + 1)).min(max_objects).max(1);
    while min_objects >= 1 {
        for fraction in [16, 8, 4] {
            for order in 0..=SLUB_MAX_ORDER {
                let slab = PAGE_SIZE << order;
                if slab / size < min_objects {
                    continue;
                }
                if slab % size <= slab / fraction {
                    return Some((order, (slab / size).min(u16::MAX as usize)));
                }
            }
        }
        min_objects /= 2;
        if min_objects == 0 {
            break;
        }
    }
    // Anything that fits in the largest slab, waste or not.
    (size <= PAGE_SIZE << SLUB_MAX_ORDER).then(|| {
        let order = (0..=SLUB_MAX_ORDER)
            .find(|&o| PAGE_SIZE << o >= size)
            .unwrap_or(SLUB_MAX_ORDER);
        (order, (PAGE_SIZE << order) / size)
    })
}

/// A cache's per-CPU state (`struct kmem_cache_cpu`), in every CPU area at
/// `cpu_offset`. All-zero is valid (no CPU slab, empty partial list).
///
/// Invariants (owner only): `freelist` is 0 (no CPU slab), or an object of the CPU
/// slab, or that slab's end token; the CPU slab is the slab its value lies in.
/// `partial` heads a list of frozen slabs linked through `Page::next`, `nr_partial`
/// long.
#[repr(C, align(16))]
pub struct KmemCacheCpu {
    freelist: AtomicUsize,
    tid: AtomicUsize,
    partial: AtomicPtr<Page>,
    nr_partial: AtomicUsize,
    stat: [AtomicU64; NR_SLUB_STAT],
}

/// Per-CPU mode with restartable sequences: how the slab layer takes a CPU's
/// freelist. The platform's function must, atomically with respect to the rseq
/// critical sections of the area's CPU, replace `*freelist` (the `freelist` word of a
/// `kmem_cache_cpu` in `area`) with 0 and return what it held (an rseq section on that
/// CPU, migrating there if need be). Null: not set.
static RSEQ_TAKE: AtomicPtr<()> = AtomicPtr::new(ptr::null_mut());

/// The platform's take for per-CPU mode with restartable sequences (see
/// [`CacheConfig::rseq`]).
pub type RseqTake = fn(area: &CpuArea, freelist: &AtomicUsize) -> usize;

/// Installs the platform's rseq take (before any cache runs with `rseq`).
pub fn set_rseq_take(f: RseqTake) {
    RSEQ_TAKE.store(f as *mut (), crate::sync::Ordering::Release);
}

/// Whether this build can run the lockless per-CPU fast paths (a double-word
/// compare-and-swap on the `(freelist, tid)` pair: `cmpxchg16b` on x86_64). The
/// platform must also check that the CPU has the instruction.
pub const LOCKLESS_SUPPORTED: bool = cfg!(target_arch = "x86_64");

impl KmemCacheCpu {
    /// `this_cpu_cmpxchg_double` on `(freelist, tid)`: replaces `old` with `new` if
    /// the pair still holds `old`, atomically against every other CPU.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn cas_pair(&self, old: (usize, usize), new: (usize, usize)) -> bool {
        let ok: u8;
        // SAFETY: `freelist` and `tid` are adjacent and the struct is 16-byte aligned
        // (`repr(C, align(16))`, and every CPU area places it at a 16-aligned offset),
        // as `cmpxchg16b` requires; the platform enabled lockless mode only where the
        // CPU has the instruction. `cmpxchg16b` takes the new low word in rbx, which
        // asm operands cannot name: it is swapped in from rsi and back out, and every
        // operand has a fixed register so that none of them can be rbx.
        unsafe {
            core::arch::asm!(
                "xchg rsi, rbx",
                "lock cmpxchg16b xmmword ptr [rdi]",
                "mov rbx, rsi",
                "sete r8b",
                in("rdi") &self.freelist as *const AtomicUsize,
                inout("rsi") new.0 => _,
                out("r8b") ok,
                in("rcx") new.1,
                inout("rax") old.0 => _,
                inout("rdx") old.1 => _,
                options(nostack),
            );
        }
        ok != 0
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline]
    fn cas_pair(&self, _old: (usize, usize), _new: (usize, usize)) -> bool {
        unreachable!("lockless per-CPU mode is off where there is no double-word CAS")
    }

    /// Takes the CPU freelist (the CPU slab's objects, or 0 when there is no CPU slab)
    /// and leaves 0, advancing `tid`. The caller owns the area (thread mode) or holds
    /// its lock; in lockless mode concurrent lockless pops and pushes are beaten by the
    /// CAS.
    #[inline]
    fn take_freelist(&self, lockless: bool) -> usize {
        if !lockless {
            let v = self.freelist.load(Relaxed);
            self.freelist.store(0, Relaxed);
            self.next_tid();
            return v;
        }
        loop {
            let tid = self.tid.load(Acquire);
            let v = self.freelist.load(Acquire);
            if v == 0 {
                return 0;
            }
            if self.cas_pair((v, tid), (0, tid.wrapping_add(TID_STEP))) {
                return v;
            }
        }
    }

    /// Installs `v` as the CPU freelist, which the caller took (it is 0): while it is
    /// 0 no lockless context changes the pair (they pop from and push onto a
    /// non-empty list only), so the CAS only orders the install against them.
    #[inline]
    fn install_freelist(&self, lockless: bool, v: usize) {
        if !lockless {
            self.freelist.store(v, Relaxed);
            self.next_tid();
            return;
        }
        loop {
            let tid = self.tid.load(Acquire);
            debug_assert_eq!(self.freelist.load(Relaxed), 0);
            if self.cas_pair((0, tid), (v, tid.wrapping_add(TID_STEP))) {
                return;
            }
        }
    }

    #[inline]
    fn count(&self, item: SlubStat) {
        let c = &self.stat[item as usize];
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
    }
    #[inline]
    fn next_tid(&self) {
        self.tid
            .store(self.tid.load(Relaxed).wrapping_add(TID_STEP), Relaxed);
    }
    /// Slabs this CPU holds for the cache: its CPU slab (if any) and its CPU partial
    /// slabs (a read for statistics; racy against the owner).
    pub fn held_slabs(&self) -> usize {
        (self.freelist.load(Relaxed) != 0) as usize + self.nr_partial.load(Relaxed)
    }
    /// The transaction id (for the per-CPU mode and tests).
    pub fn tid(&self) -> usize {
        self.tid.load(Relaxed)
    }
}

/// A cache's per-node state (`struct kmem_cache_node`).
pub struct KmemCacheNode {
    pub(crate) list_lock: SpinLock<PageList>,
    /// Full slabs of a debug cache, so `validate` sees every slab (taken inside
    /// `list_lock`; unused by other caches).
    pub(crate) full: SpinLock<PageList>,
    nr_slabs: AtomicUsize,
}

impl KmemCacheNode {
    const fn new() -> Self {
        Self {
            list_lock: SpinLock::new(PageList::new()),
            full: SpinLock::new(PageList::new()),
            nr_slabs: AtomicUsize::new(0),
        }
    }
}

/// A slab cache (`struct kmem_cache`).
///
/// Invariant: `config` is written only while the cache is being created, before
/// `active` is set and before anybody else can see the cache; afterwards it is
/// read-only.
pub struct KmemCache {
    config: UnsafeCell<CacheConfig>,
    active: AtomicUsize,
    pub(crate) node: [KmemCacheNode; MAX_NUMNODES],
    /// Statistics of contexts without a CPU area.
    stat: [AtomicU64; NR_SLUB_STAT],
    /// Next cache on the allocator's list of caches.
    pub(crate) next: AtomicPtr<KmemCache>,
}

// SAFETY: `config` is immutable once the cache is shared (type invariant); everything
// else is atomics and locks.
unsafe impl Sync for KmemCache {}
// SAFETY: as above; the raw pointers inside point to memory that outlives the cache.
unsafe impl Send for KmemCache {}

impl KmemCache {
    pub(crate) const fn new() -> Self {
        Self {
            config: UnsafeCell::new(CacheConfig::EMPTY),
            active: AtomicUsize::new(0),
            node: [const { KmemCacheNode::new() }; MAX_NUMNODES],
            stat: [const { AtomicU64::new(0) }; NR_SLUB_STAT],
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The cache's layout and settings.
    #[inline]
    pub fn config(&self) -> &CacheConfig {
        // SAFETY: read-only once the cache is published (type invariant).
        unsafe { &*self.config.get() }
    }

    /// # Safety
    /// The cache is not yet visible to any other context.
    pub(crate) unsafe fn set_config(&self, cfg: CacheConfig) {
        // SAFETY: nobody else can see the cache yet (caller).
        unsafe { *self.config.get() = cfg };
        self.active.store(1, crate::sync::Ordering::Release);
    }

    /// The cache's name.
    pub fn name(&self) -> &str {
        self.config().name()
    }

    /// Whether the cache is set up and not destroyed.
    pub fn is_active(&self) -> bool {
        self.active.load(crate::sync::Ordering::Acquire) == 1
    }

    pub(crate) fn deactivate(&self) {
        self.active.store(0, crate::sync::Ordering::Release);
    }

    #[inline]
    fn cpu<'a>(&self, cpu: CpuRef<'a>) -> &'a KmemCacheCpu {
        // SAFETY: every CPU area reserves `cpu_offset` for this cache (made by the
        // percpu allocator when the cache was created; zero is the valid empty state).
        unsafe { &*cpu.area().ptr::<KmemCacheCpu>(self.config().cpu_offset) }
    }

    /// This cache's per-CPU state in `area` (for statistics).
    pub fn cpu_of<'a>(&self, area: &'a crate::percpu::CpuArea) -> &'a KmemCacheCpu {
        // SAFETY: as in `cpu`; shared access reads atomics only.
        unsafe { &*area.ptr::<KmemCacheCpu>(self.config().cpu_offset) }
    }

    #[inline]
    pub(crate) fn stat(&self, cpu: Option<CpuRef<'_>>, item: SlubStat) {
        match cpu {
            Some(c) => self.cpu(c).count(item),
            None => {
                self.stat[item as usize].fetch_add(1, Relaxed);
            }
        }
    }

    /// Slabs of this cache on node `nid`.
    pub fn nr_slabs(&self, nid: usize) -> usize {
        self.node[nid].nr_slabs.load(Relaxed)
    }

    /// Slabs on node `nid`'s partial list.
    pub fn nr_partial(&self, nid: usize) -> usize {
        self.node[nid].list_lock.lock().len()
    }

    /// Objects free in the slabs of node `nid`'s partial list (`count_partial`).
    pub fn count_partial_free(&self, nid: usize) -> usize {
        let list = self.node[nid].list_lock.lock();
        let objects = self.config().objects;
        let mut free = 0;
        let mut p = list.first();
        while let Some(page) = NonNull::new(p) {
            // SAFETY: slabs on the list are live slab pages; we hold the list lock.
            let pr = unsafe { page.as_ref() };
            free += objects - slab_state(pr).inuse() as usize;
            p = pr.next.load(Relaxed);
        }
        free
    }

    /// A statistic summed over the no-CPU counter and the given CPU areas.
    pub fn stat_sum<'a>(
        &self,
        areas: impl Iterator<Item = &'a crate::percpu::CpuArea>,
        item: SlubStat,
    ) -> u64 {
        let mut v = self.stat[item as usize].load(Relaxed);
        for a in areas {
            v += self.cpu_of(a).stat[item as usize].load(Relaxed);
        }
        v
    }
}

// ---------------------------------------------------------------------------
// Slab page helpers.

#[inline]
pub(crate) fn slab_state(slab: &Page) -> SlabState {
    SlabState(slab.owner[0].load(Relaxed) as u64)
}

/// Freezes or unfreezes a slab, keeping its freelist and `inuse`; returns the new
/// state. The caller holds what rule 2 asks for.
fn set_frozen(slab: &Page, frozen: bool) -> SlabState {
    loop {
        let old = slab_state(slab);
        let new = SlabState::new(old.offset(), old.inuse(), frozen);
        if cas_state(slab, old, new) {
            return new;
        }
    }
}

/// The tag of the CPU area `c` in `frozen_by`.
#[inline]
fn cpu_tag(c: CpuRef<'_>) -> usize {
    c.area().id() + 1
}

/// Marks the slab as frozen by `tag` (its local freelist is empty then): `owner[3]`'s
/// high half is the tag of the CPU area that froze the slab (area id + 1; 0 = none);
/// bits 16..32 hold the offset of the local freelist's last object from the slab
/// base, bits 0..16 how many objects the local freelist holds. A slab spans at most
/// `PAGE_SIZE << SLUB_MAX_ORDER` (32 KiB) bytes and objects, so both fit.
#[inline]
fn set_frozen_by(slab: &Page, tag: usize) {
    slab.owner[3].store(tag << 32, Relaxed);
}

const _: () = assert!(PAGE_SIZE << SLUB_MAX_ORDER <= 1 << 16);

/// Objects on a frozen slab's local freelist, from its `owner[3]` word.
#[inline]
pub(crate) fn local_count(o3: usize) -> usize {
    o3 & 0xffff
}

/// `owner[3]` after pushing the object at offset `off` on the local freelist: the
/// first object pushed on an empty list is its tail.
#[inline]
fn local_push(o3: usize, off: usize) -> usize {
    if local_count(o3) == 0 {
        (o3 & !0xffff_ffff) | off << 16 | 1
    } else {
        o3 + 1
    }
}

/// A chain of free objects of one slab: first, last, how many (first = 0: none).
#[derive(Clone, Copy)]
struct Chain {
    head: usize,
    tail: usize,
    count: u64,
}

impl Chain {
    const EMPTY: Chain = Chain {
        head: 0,
        tail: 0,
        count: 0,
    };
}

/// Takes the local freelist of a slab frozen by the caller's CPU and clears the tag
/// (the caller is about to unfreeze the slab or make it its CPU slab).
fn take_local(cfg: &CacheConfig, slab: &Page) -> Chain {
    let head = slab.owner[1].load(Relaxed);
    let o3 = slab.owner[3].load(Relaxed);
    slab.owner[1].store(0, Relaxed);
    slab.owner[3].store(0, Relaxed);
    if head == 0 {
        return Chain::EMPTY;
    }
    // Slabs are aligned to their size: the head tells the base.
    let base = head & !(cfg.slab_bytes() - 1);
    Chain {
        head,
        tail: base + (o3 >> 16 & 0xffff),
        count: local_count(o3) as u64,
    }
}

#[inline]
pub(crate) fn cas_state(slab: &Page, old: SlabState, new: SlabState) -> bool {
    // AcqRel: a successful free publishes the free pointer written into the object
    // before it; a successful take of the freelist sees those writes.
    slab.owner[0]
        .compare_exchange(
            old.0 as usize,
            new.0 as usize,
            crate::sync::Ordering::AcqRel,
            crate::sync::Ordering::Acquire,
        )
        .is_ok()
}

/// Takes `c`'s CPU freelist of a cache (see [`KmemCacheCpu::take_freelist`]); with
/// restartable sequences through the platform's hook.
#[inline]
fn take_cpu_freelist(c: CpuRef<'_>, cfg: &CacheConfig, cc: &KmemCacheCpu) -> usize {
    if cfg.rseq {
        let f = RSEQ_TAKE.load(Acquire);
        let v = if f.is_null() {
            // A platform that turned rseq on without its take: nobody else can be
            // committing then but through the same missing sections; exchange.
            cc.freelist.swap(0, crate::sync::Ordering::AcqRel)
        } else {
            // SAFETY: only `set_rseq_take` stores a non-null value, made from an
            // `RseqTake`.
            let take = unsafe { core::mem::transmute::<*mut (), RseqTake>(f) };
            take(c.area(), &cc.freelist)
        };
        cc.next_tid();
        return v;
    }
    cc.take_freelist(cfg.lockless)
}

/// The outcome of a lockless push.
enum Push {
    /// Pushed.
    Done,
    /// The object is already at the freelist's head: a double free.
    AtHead,
    /// The object's slab is not this CPU's slab (or there is none).
    NotCpuSlab,
}

/// [`get_freepointer`] for the lockless pop, whose object may have been taken and be
/// written by its new owner meanwhile: a volatile read of whatever is there (the CAS
/// that follows discards it then).
///
/// # Safety
/// `obj` is (or was a moment ago) a free object of a slab of `s`: its memory is
/// mapped.
#[inline]
unsafe fn get_freepointer_racy(s: &CacheConfig, obj: usize) -> usize {
    let at = obj + s.offset;
    // SAFETY: caller: mapped slab memory, aligned for a word.
    let raw = unsafe { ptr::read_volatile(at as *const usize) };
    raw ^ freepointer_key(s, at)
}

/// Reads the free pointer of the free object at `obj`.
///
/// # Safety
/// `obj` is a free object of a slab of `s` (its free pointer word is initialised).
#[inline]
pub(crate) unsafe fn get_freepointer(s: &CacheConfig, obj: usize) -> usize {
    let at = obj + s.offset;
    // SAFETY: caller: a free object, whose word at `offset` holds its successor.
    let raw = unsafe { ptr::read(at as *const usize) };
    raw ^ freepointer_key(s, at)
}

/// The hardening key of the free pointer stored at `at`: `random ^ swab(at)` (0
/// when hardening is off).
///
/// The key does not depend on the stored word, so it is computed beside the load
/// and decoding costs one XOR on the pointer-chasing chain. Compilers reassociate
/// `raw ^ random ^ swab(at)` into two dependent XORs after the load; an empty
/// `asm!` makes the key opaque and keeps it whole.
#[inline(always)]
fn freepointer_key(s: &CacheConfig, at: usize) -> usize {
    #[allow(unused_mut)]
    let mut key = s.random ^ (at.swap_bytes() & s.harden_mask);
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    // SAFETY: an empty asm block that only claims to modify `key` in its register;
    // no memory, stack or flags are touched.
    unsafe {
        core::arch::asm!("/* {0} */", inout(reg) key, options(pure, nomem, nostack, preserves_flags));
    }
    key
}

/// # Safety
/// `obj` is an object of a slab of `s` that the caller owns (being freed).
#[inline]
pub(crate) unsafe fn set_freepointer(s: &CacheConfig, obj: usize, next: usize) {
    let at = obj + s.offset;
    // SAFETY: caller: the object is ours to write.
    unsafe { ptr::write(at as *mut usize, next ^ freepointer_key(s, at)) };
}

/// Greatest common divisor.
fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
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

/// Whether a decoded freelist value `next` found in `obj` lies in `obj`'s slab
/// (an object or the end token): slabs are aligned to their size, so both share
/// every bit above it. A value that does not is corruption (or a forged pointer).
#[inline]
pub(crate) fn same_slab(cfg: &CacheConfig, obj: usize, next: usize) -> bool {
    (obj ^ next) < cfg.slab_bytes()
}

impl<P: Platform> PageAllocator<P> {
    /// The head page of the slab (or block) holding `addr` (`virt_to_slab`), or `None`
    /// if `addr` is not in a page the allocator manages.
    #[inline]
    pub fn virt_to_head_page(&self, addr: *const u8) -> Option<NonNull<Page>> {
        let page = self.virt_to_page_any(addr)?;
        // SAFETY: descriptors of online sections are valid.
        let p = unsafe { page.as_ref() };
        if p.flags().contains(PageFlags::TAIL) {
            NonNull::new(p.owner[0].load(Relaxed) as *mut Page)
        } else {
            Some(page)
        }
    }
}

/// The slab allocator's operations, bound to its page allocator and list of caches.
pub struct Slub<'a, P: Platform> {
    pub(crate) pages: &'a PageAllocator<P>,
    pub(crate) caches: &'a crate::slab_common::CacheList,
}

impl<P: Platform> Clone for Slub<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P: Platform> Copy for Slub<'_, P> {}

/// What `kfree`-like entry points found at a pointer.
pub enum ObjectLookup<'a> {
    /// An object of this slab (head page) of this cache, at index `idx`.
    Slab(&'a KmemCache, NonNull<Page>),
    /// The head of a large (page-allocator) allocation.
    Large(NonNull<Page>),
    /// Not something that can be freed; the reason.
    Bad(&'static str),
}

impl<'a, P: Platform> Slub<'a, P> {
    /// The slab layer over `pages`, with the list of caches a CPU flush walks.
    pub fn new(pages: &'a PageAllocator<P>, caches: &'a crate::slab_common::CacheList) -> Self {
        Self { pages, caches }
    }

    #[inline]
    pub(crate) fn slab_base(&self, slab: NonNull<Page>) -> usize {
        self.pages.page_address(slab).as_ptr() as usize
    }

    /// The cache whose slab holds `ptr` (anywhere in the slab), if any. Never
    /// touches the memory at `ptr`.
    pub fn cache_of(&self, ptr: *const u8) -> Option<&'a KmemCache> {
        let head = self.pages.virt_to_head_page(ptr)?;
        // SAFETY: descriptors of online sections are valid.
        let h = unsafe { head.as_ref() };
        if !h.flags().contains(PageFlags::SLAB) {
            return None;
        }
        // SAFETY: a slab's head page names its cache, which outlives its slabs.
        Some(unsafe { &*(h.owner[2].load(Relaxed) as *const KmemCache) })
    }

    /// Finds what `ptr` is: an object at the start of a slab object, a large block, or
    /// neither (with the reason). Never touches the memory at `ptr`.
    #[inline]
    pub fn lookup(&self, ptr: *const u8) -> ObjectLookup<'a> {
        let Some(head) = self.pages.virt_to_head_page(ptr) else {
            return ObjectLookup::Bad("not allocated by kmem");
        };
        // SAFETY: descriptors of online sections are valid.
        let h = unsafe { head.as_ref() };
        let flags = h.flags();
        if flags.contains(PageFlags::SLAB) {
            // SAFETY: a slab's head page names its cache, which outlives its slabs.
            let s = unsafe { &*(h.owner[2].load(Relaxed) as *const KmemCache) };
            let cfg = s.config();
            // A slab is a buddy block: aligned to its size, so the offset of `ptr` in
            // it is its low bits.
            let off = (ptr as usize & (cfg.slab_bytes() - 1)).wrapping_sub(cfg.red_left);
            let idx = ((off as u64 * cfg.reciprocal) >> 32) as usize;
            if idx * cfg.size != off || idx >= cfg.objects {
                return ObjectLookup::Bad("Invalid object pointer");
            }
            ObjectLookup::Slab(s, head)
        } else if flags.contains(PageFlags::HEAD) {
            if !ptr::eq(self.pages.page_address(head).as_ptr(), ptr) {
                return ObjectLookup::Bad("Invalid object pointer");
            }
            ObjectLookup::Large(head)
        } else {
            ObjectLookup::Bad("not allocated by kmem")
        }
    }

    // -----------------------------------------------------------------------
    // Slab creation and destruction.

    /// `allocate_slab`: pages for a new slab of `s` on `nid`, every object on the
    /// slab's freelist (and through the constructor). The slab comes back with its
    /// state `state(inuse, frozen)` and the freelist either kept in the slab or
    /// returned to the caller (`take`).
    pub(crate) fn allocate_slab(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        nid: Option<usize>,
    ) -> Option<NonNull<Page>> {
        let cfg = s.config();
        let gfp = (gfp - Gfp::ZERO) | Gfp::COMP;
        let slab = self.pages.alloc_pages_node(cpu, gfp, cfg.order, nid)?;
        let base = self.slab_base(slab);
        // SAFETY: the block was just allocated: its descriptors are ours.
        let head = unsafe { slab.as_ref() };
        head.set_flags(PageFlags::HEAD | PageFlags::SLAB);
        for i in 0..cfg.objects {
            let obj = base + i * cfg.size + cfg.red_left;
            if cfg.is_debug() {
                self.init_debug_object(cfg, obj);
            }
            if let Some(ctor) = cfg.ctor {
                (ctor.f)(obj as *mut u8, ctor.data);
            }
        }
        // Chain every object, ending in the end token: first to last, or
        // (CONFIG_SLAB_FREELIST_RANDOM) in the order of a random permutation.
        // Index arithmetic without a division per object: `stride < objects`, so one
        // subtraction wraps it.
        let (start, stride) = self.freelist_order(cfg);
        let n = cfg.objects;
        let at = |i: usize| base + i * cfg.size + cfg.red_left;
        let mut i = start;
        for k in 0..n {
            let mut j = i + stride;
            if j >= n {
                j -= n;
            }
            let next = if k + 1 < n { at(j) } else { base | 1 };
            // SAFETY: the object lies in our new slab.
            unsafe { set_freepointer(cfg, at(i), next) };
            i = j;
        }
        head.owner[0].store(
            SlabState::new((at(start) - base) as u64, 0, false).0 as usize,
            Relaxed,
        );
        head.owner[1].store(0, Relaxed);
        head.owner[3].store(0, Relaxed);
        head.owner[2].store(s as *const KmemCache as usize, Relaxed);
        head.private.store(0, Relaxed);
        let nid = self.pages.page_to_nid(slab);
        s.node[nid].nr_slabs.fetch_add(1, Relaxed);
        s.stat(cpu, SlubStat::AllocSlab);
        Some(slab)
    }

    /// The order of a new slab's freelist, as `(start, stride)`: object `k` of the
    /// list is object `(start + k * stride) % objects` of the slab. `(0, 1)` unless
    /// the cache randomises freelists; then a random start and a random stride
    /// prime to `objects`, so every object comes exactly once.
    fn freelist_order(&self, cfg: &CacheConfig) -> (usize, usize) {
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
    /// or large block (vectors never come from caches that have vectors).
    fn free_slab_obj_exts(&self, cpu: Option<CpuRef<'_>>, head: &Page) {
        let data = head.private.swap(0, Relaxed);
        if data & crate::memcontrol::MEMCG_DATA_OBJEXTS == 0 {
            return;
        }
        let v = (data & !3) as *mut u8;
        match self.lookup(v) {
            // SAFETY: the vector, ours since its slab is being discarded.
            ObjectLookup::Slab(vs, vslab) => unsafe {
                self.free_object(cpu, vs, vslab, v as usize);
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
        let nid = self.pages.page_to_nid(slab);
        s.node[nid].nr_slabs.fetch_sub(1, Relaxed);
        // SAFETY: the slab is empty and on no list: its descriptors are ours.
        let head = unsafe { slab.as_ref() };
        head.set_flags(PageFlags::HEAD);
        for w in &head.owner {
            w.store(0, Relaxed);
        }
        self.free_slab_obj_exts(cpu, head);
        s.stat(cpu, SlubStat::FreeSlab);
        // SAFETY: allocated by `allocate_slab` with this order; nothing refers to it.
        unsafe { self.pages.free_pages(cpu, slab, cfg.order) };
    }

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

    // -----------------------------------------------------------------------
    // Allocation.

    /// `kmem_cache_alloc`: an object of `s`, or `None` when memory runs out.
    #[inline]
    pub fn alloc(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        self.alloc_node(cpu, s, gfp, None)
    }

    /// `kmem_cache_alloc_node`: an object on node `nid` if given.
    #[inline]
    pub fn alloc_node(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        nid: Option<usize>,
    ) -> Option<NonNull<u8>> {
        let obj = match cpu {
            Some(c) if nid.is_none() => {
                let cfg = s.config();
                let cc = s.cpu(c);
                if cfg.lockless {
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
            Some(c) => self.slab_alloc_slow(c, s, gfp, nid)?,
            None => self.alloc_nocpu(s, gfp, nid)?,
        };
        let obj = obj as *mut u8;
        if gfp.contains(Gfp::ZERO) {
            // SAFETY: the object is ours now, `object_size` bytes long.
            unsafe { ptr::write_bytes(obj, 0, s.config().object_size) };
        }
        NonNull::new(obj)
    }

    /// Per-CPU mode, under the area's lock: the lockless pop, else the slow path.
    #[inline(never)]
    fn alloc_locked_lockless(&self, c: CpuRef<'_>, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        // With rseq, the lock holder pops only from what it takes (slow path).
        let popped = if s.config().rseq {
            None
        } else {
            self.pop_lockless(s.cpu(c), s.config())
        };
        let obj = match popped {
            Some(o) => o,
            None => self.slab_alloc_slow(c, s, gfp, None)?,
        };
        if gfp.contains(Gfp::ZERO) {
            // SAFETY: the object is ours now, `object_size` bytes long.
            unsafe { ptr::write_bytes(obj as *mut u8, 0, s.config().object_size) };
        }
        NonNull::new(obj as *mut u8)
    }

    /// The lockless `slab_alloc` fast path of seed 000 (after patch 7/7, with Joonsoo
    /// Kim's loop): read `tid` then `freelist`, read the object's free pointer, and
    /// swap `(freelist, tid)` for `(next, tid + TID_STEP)` with one double-word CAS;
    /// retry when another context (on this CPU or on another, having read the CPU id
    /// before it moved) changed the pair meanwhile. `None`: no object on the CPU
    /// freelist (or a corrupt link, left for the slow path to report).
    #[inline]
    fn pop_lockless(&self, cc: &KmemCacheCpu, cfg: &CacheConfig) -> Option<usize> {
        loop {
            let tid = cc.tid.load(Acquire);
            let obj = cc.freelist.load(Acquire);
            if obj & 1 != 0 || obj == 0 {
                return None;
            }
            // SAFETY: `obj` was a free object of this CPU's slab when read. If another
            // context has taken it since, the word read is stale (slab memory stays
            // mapped: sections are never unmapped) and the CAS below fails, `tid`
            // having moved.
            let next = unsafe { get_freepointer_racy(cfg, obj) };
            if !same_slab(cfg, obj, next) {
                if cc.tid.load(Acquire) == tid {
                    return None;
                }
                continue;
            }
            if cc.cas_pair((obj, tid), (next, tid.wrapping_add(TID_STEP))) {
                cc.count(SlubStat::AllocFastpath);
                return Some(obj);
            }
        }
    }

    /// The lockless free fast path: pushes the chain `head..=tail` (objects of the
    /// slab at `base`, which the caller owns) on the CPU freelist with one double-word
    /// CAS, if that slab is this CPU's slab.
    #[inline]
    fn push_lockless(
        &self,
        cc: &KmemCacheCpu,
        cfg: &CacheConfig,
        base: usize,
        head: usize,
        tail: usize,
    ) -> Push {
        loop {
            let tid = cc.tid.load(Acquire);
            let cur = cc.freelist.load(Acquire);
            if cur == 0 || cur.wrapping_sub(base) >= cfg.slab_bytes() {
                return Push::NotCpuSlab;
            }
            if cur == head {
                return Push::AtHead;
            }
            // SAFETY: the caller owns the chain; its tail's free pointer is ours.
            unsafe { set_freepointer(cfg, tail, cur) };
            if cc.cas_pair((cur, tid), (head, tid.wrapping_add(TID_STEP))) {
                return Push::Done;
            }
        }
    }

    /// Per-CPU mode, without the area's lock: the lockless allocation fast path on
    /// `area`'s freelist of `s`. `None`: take the area's lock and allocate as usual.
    #[inline]
    pub fn alloc_lockless(&self, area: &CpuArea, s: &KmemCache) -> Option<NonNull<u8>> {
        let cfg = s.config();
        if !cfg.lockless || cfg.rseq {
            return None;
        }
        let obj = self.pop_lockless(s.cpu_of(area), cfg)?;
        NonNull::new(obj as *mut u8)
    }

    /// Per-CPU mode, without the area's lock: frees `obj` (an object of `slab` of `s`,
    /// checked by the caller) onto `area`'s freelist if its slab is that CPU's slab.
    /// `Some(false)`: refused, a double free at the freelist's head (reported).
    /// `None`: take the area's lock and free as usual.
    ///
    /// # Safety
    /// `obj` is the start of an object of `slab` of `s`, owned by the caller.
    #[inline]
    pub unsafe fn free_lockless(
        &self,
        area: &CpuArea,
        s: &KmemCache,
        slab: NonNull<Page>,
        obj: usize,
    ) -> Option<bool> {
        let cfg = s.config();
        if !cfg.lockless || cfg.rseq || cfg.off_fast_paths() {
            return None;
        }
        let cc = s.cpu_of(area);
        let base = obj & !(cfg.slab_bytes() - 1);
        match self.push_lockless(cc, cfg, base, obj, obj) {
            Push::Done => {
                cc.count(SlubStat::FreeFastpath);
                Some(true)
            }
            Push::AtHead => Some(self.double_free(s, slab, obj)),
            Push::NotCpuSlab => None,
        }
    }

    /// `___slab_alloc`: refill the CPU freelist and take one object.
    #[cold]
    #[inline(never)]
    fn slab_alloc_slow(
        &self,
        c: CpuRef<'_>,
        s: &KmemCache,
        gfp: Gfp,
        nid: Option<usize>,
    ) -> Option<usize> {
        let cfg = s.config();
        if cfg.off_fast_paths() {
            return self.alloc_debug(Some(c), s, gfp, nid);
        }
        let cc = s.cpu(c);
        cc.count(SlubStat::AllocSlowpath);
        self.check_drain_request(c);
        // The slow path owns the CPU freelist from here until it installs a new one:
        // while it is 0, lockless contexts (per-CPU mode) leave it alone.
        let cur = take_cpu_freelist(c, cfg, cc);
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
    fn take_first(&self, cc: &KmemCacheCpu, cfg: &CacheConfig, list: usize) -> usize {
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
        cc.install_freelist(cfg.lockless && !cfg.rseq, next);
        list
    }

    /// A decoded free pointer outside its slab on the fast path: reported; the rest of
    /// the CPU freelist (and this object) is dropped — quarantined, never handed out —
    /// and the allocation goes on through the slow path.
    #[cold]
    #[inline(never)]
    fn freelist_corrupt(
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

    #[cold]
    #[inline(never)]
    pub(crate) fn report_corrupt_link(&self, cfg: &CacheConfig, obj: usize, next: usize) {
        let mut w = LogWriter::new(self.pages.platform());
        let _ = writeln!(
            w,
            "============================================================================="
        );
        let _ = writeln!(w, "BUG {} (Not tainted): Freepointer corrupt", cfg.name());
        let _ = writeln!(
            w,
            "-----------------------------------------------------------------------------"
        );
        let _ = writeln!(w);
        let _ = writeln!(w, "INFO: Object 0x{obj:016x} holds a free pointer that decodes to 0x{next:016x}, outside its slab");
        let _ = writeln!(w, "FIX {}: Isolating the rest of the freelist", cfg.name());
        self.pages.count_bad_object();
    }

    /// The slab a CPU freelist value (object or end token) lies in.
    #[inline]
    fn freelist_slab(&self, v: usize) -> NonNull<Page> {
        self.pages
            .virt_to_head_page((v & !1) as *const u8)
            .expect("a CPU freelist value lies in a slab")
    }

    /// `get_freelist`: takes a frozen slab's whole freelist for the CPU (its state
    /// becomes empty, all objects in use). Returns the list or the end token.
    fn get_freelist(&self, slab_ref: &Page, slab: NonNull<Page>) -> usize {
        let base = self.slab_base(slab);
        // SAFETY: the head page names its cache.
        let objects = unsafe { &*(slab_ref.owner[2].load(Relaxed) as *const KmemCache) }
            .config()
            .objects as u64;
        loop {
            let old = slab_state(slab_ref);
            let new = SlabState::taken(objects);
            if cas_state(slab_ref, old, new) {
                return base + old.offset() as usize;
            }
        }
    }

    /// Objects of a slab frozen by `c` for its CPU freelist: its local freelist if it
    /// has one (no atomic), else the slab's freelist (`get_freelist`).
    fn take_for_cpu(
        &self,
        c: CpuRef<'_>,
        cfg: &CacheConfig,
        sr: &Page,
        slab: NonNull<Page>,
    ) -> usize {
        if sr.owner[1].load(Relaxed) != 0 {
            let local = take_local(cfg, sr);
            set_frozen_by(sr, cpu_tag(c));
            return local.head;
        }
        self.get_freelist(sr, slab)
    }

    /// Unfreezes a slab (list lock held by the caller), merging `chain` — free objects
    /// the unfreezing CPU held — and the slab's local freelist into its freelist.
    fn unfreeze_merge(
        &self,
        cfg: &CacheConfig,
        sr: &Page,
        slab: NonNull<Page>,
        chain: Chain,
    ) -> (SlabState, SlabState) {
        let local = take_local(cfg, sr);
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
            let old = slab_state(sr);
            let head = if chain.count > 0 {
                // SAFETY: `chain.tail` ends a chain of free objects we own.
                unsafe { set_freepointer(cfg, chain.tail, base + old.offset() as usize) };
                Some((chain.head - base) as u64)
            } else {
                None
            };
            let new = old.after_unfreeze(head, chain.count);
            if cas_state(sr, old, new) {
                return (old, new);
            }
        }
    }

    /// A full CPU slab leaves its CPU: unfrozen, on no list (rule 2: no lock needed,
    /// but a concurrent free may have made it partial meanwhile — then it goes to the
    /// node list under the lock).
    fn unfreeze_full(&self, slab: NonNull<Page>) {
        // SAFETY: the slab is a live slab; we own its frozen state.
        let sr = unsafe { slab.as_ref() };
        // SAFETY: the head page names its cache.
        let s = unsafe { &*(sr.owner[2].load(Relaxed) as *const KmemCache) };
        let nid = self.pages.page_to_nid(slab);
        let mut list = s.node[nid].list_lock.lock();
        let (_, new) = self.unfreeze_merge(s.config(), sr, slab, Chain::EMPTY);
        if !new.list_empty() {
            self.add_partial(&mut list, slab, true);
        }
    }

    /// `new_slab_objects`: a CPU partial slab, else a node partial slab, else a new
    /// slab becomes the CPU slab; returns its first object.
    fn new_slab_objects(
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
        sr.owner[0].store(
            SlabState::new(END_OFFSET, cfg.objects as u64, true).0 as usize,
            Relaxed,
        );
        set_frozen_by(sr, cpu_tag(c));
        Some(self.take_first(cc, cfg, self.slab_base(slab) + cfg.red_left))
    }

    fn pages_local_node(&self, c: CpuRef<'_>) -> usize {
        let n = c.area().node();
        if n < self.pages.nr_nodes() {
            n
        } else {
            0
        }
    }

    /// `get_partial_node`: takes the first slab of node `nid`'s partial list as the
    /// CPU slab (frozen, its whole freelist returned), and moves a few more to the CPU
    /// partial list.
    fn get_partial_node(&self, c: CpuRef<'_>, s: &KmemCache, nid: usize) -> Option<usize> {
        let cfg = s.config();
        let cc = s.cpu(c);
        let mut list = s.node[nid].list_lock.lock();
        let slab = NonNull::new(list.first())?;
        self.remove_partial(&mut list, slab);
        // SAFETY: a slab from the node list: live, unfrozen, ours under the lock.
        let sr = unsafe { slab.as_ref() };
        let got = loop {
            let old = slab_state(sr);
            let new = SlabState::new(END_OFFSET, cfg.objects as u64, true);
            if cas_state(sr, old, new) {
                break self.slab_base(slab) + old.offset() as usize;
            }
        };
        if got & 1 != 0 {
            // Rule 2 says a node-list slab has a free object; should it not, the
            // slab is full: let it go (unfrozen, on no list) rather than hand out
            // the end token.
            set_frozen(sr, false);
            return None;
        }
        set_frozen_by(sr, cpu_tag(c));
        // Stock the CPU partial list with up to half its capacity.
        while cc.nr_partial.load(Relaxed) < cfg.cpu_partial_slabs / 2 {
            let Some(more) = NonNull::new(list.first()) else {
                break;
            };
            self.remove_partial(&mut list, more);
            // SAFETY: as above.
            let mr = unsafe { more.as_ref() };
            set_frozen(mr, true);
            set_frozen_by(mr, cpu_tag(c));
            mr.next.store(cc.partial.load(Relaxed), Relaxed);
            cc.partial.store(more.as_ptr(), Relaxed);
            cc.nr_partial
                .store(cc.nr_partial.load(Relaxed) + 1, Relaxed);
            cc.count(SlubStat::CpuPartialNode);
        }
        drop(list);
        Some(got)
    }

    /// Allocation without a CPU area: one object from a node partial slab under the
    /// list lock, or from a new slab that goes on the partial list.
    #[cold]
    #[inline(never)]
    fn alloc_nocpu(&self, s: &KmemCache, gfp: Gfp, nid: Option<usize>) -> Option<usize> {
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
                let mut list = s.node[n].list_lock.lock();
                if let Some(slab) = NonNull::new(list.first()) {
                    // SAFETY: a node-list slab: live and unfrozen; we hold the lock.
                    let sr = unsafe { slab.as_ref() };
                    let base = self.slab_base(slab);
                    loop {
                        let old = slab_state(sr);
                        if old.list_empty() {
                            // Cannot happen (rule 2); a full slab leaves the list.
                            self.remove_partial(&mut list, slab);
                            break;
                        }
                        let obj = base + old.offset() as usize;
                        // SAFETY: `obj` heads the slab's freelist (unfrozen partial
                        // slabs always have one, rule 2); frees only push in front of
                        // it, and a changed head makes the CAS below fail.
                        let next = unsafe { get_freepointer(cfg, obj) };
                        if !same_slab(cfg, obj, next) {
                            // Corrupt: the slab leaves the list with all its objects
                            // counted in use (quarantined).
                            self.report_corrupt_link(cfg, obj, next);
                            set_frozen(sr, false);
                            loop {
                                let o = slab_state(sr);
                                if cas_state(
                                    sr,
                                    o,
                                    SlabState::new(END_OFFSET, cfg.objects as u64, false),
                                ) {
                                    break;
                                }
                            }
                            self.remove_partial(&mut list, slab);
                            break;
                        }
                        let new = SlabState::new((next - base) as u64, old.inuse() + 1, false);
                        if cas_state(sr, old, new) {
                            if new.list_empty() {
                                self.remove_partial(&mut list, slab);
                            }
                            s.stat(None, SlubStat::AllocFromPartial);
                            return Some(obj);
                        }
                    }
                }
                drop(list);
                if attempt == 1 {
                    // Second round: a new slab on this node.
                    let slab = self.allocate_slab(None, s, gfp, Some(n))?;
                    let nn = self.pages.page_to_nid(slab);
                    let mut list = s.node[nn].list_lock.lock();
                    self.add_partial(&mut list, slab, false);
                    drop(list);
                    return self.alloc_nocpu(s, gfp, Some(nn));
                }
            }
        }
        None
    }

    // -----------------------------------------------------------------------
    // Free.

    /// `kmem_cache_free`: gives `obj` back to `s`. A pointer that is not an object of
    /// `s`, or one already at the head of a freelist (a double free), is reported
    /// (`slab_err`) and left alone; then it returns false.
    ///
    /// # Safety
    /// If `obj` is an object of `s`, the caller owns it and stops using it.
    #[inline]
    pub unsafe fn free(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, obj: NonNull<u8>) -> bool {
        match self.lookup(obj.as_ptr()) {
            ObjectLookup::Slab(found, slab) if ptr::eq(found, s) => {
                // SAFETY: a valid object of `s`, given up by the caller.
                unsafe { self.free_object(cpu, s, slab, obj.as_ptr() as usize) }
            }
            ObjectLookup::Slab(found, slab) => {
                self.report(found, Some(slab), "Wrong slab cache", obj.as_ptr() as usize);
                false
            }
            ObjectLookup::Large(_) | ObjectLookup::Bad(_) => {
                self.report(s, None, "Invalid object pointer", obj.as_ptr() as usize);
                false
            }
        }
    }

    /// Frees a checked object of slab `slab` of `s`.
    ///
    /// # Safety
    /// `obj` is the start of an object of `slab`, owned by the caller.
    ///
    /// Returns false if it refused (a double free caught at a freelist head: reported).
    #[inline]
    pub(crate) unsafe fn free_object(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        obj: usize,
    ) -> bool {
        if let Some(c) = cpu {
            if s.config().lockless {
                // SAFETY: forwarded.
                return unsafe { self.free_object_lockless(c, s, slab, obj) };
            }
            let cc = s.cpu(c);
            let cur = cc.freelist.load(Relaxed);
            // Slabs are aligned to their size (buddy blocks).
            let base = obj & !(s.config().slab_bytes() - 1);
            debug_assert_eq!(base, self.slab_base(slab));
            if cur != 0 && cur.wrapping_sub(base) < s.config().slab_bytes() {
                // The object is in this CPU's slab: push on the CPU freelist.
                if cur == obj {
                    return self.double_free(s, slab, obj);
                }
                // SAFETY: the object is ours (caller).
                unsafe { set_freepointer(s.config(), obj, cur) };
                cc.freelist.store(obj, Relaxed);
                cc.next_tid();
                cc.count(SlubStat::FreeFastpath);
                return true;
            }
        }
        // SAFETY: forwarded.
        unsafe { self.free_object_elsewhere(cpu, s, slab, obj) }
    }

    /// A free whose object is not in the CPU slab: onto the local list of a slab this
    /// CPU froze (on its partial list), else `__slab_free` (or the debug path).
    ///
    /// # Safety
    /// As [`Slub::free_object`].
    #[inline]
    unsafe fn free_object_elsewhere(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        obj: usize,
    ) -> bool {
        if let Some(c) = cpu {
            // SAFETY: a live slab of `s`.
            let sr = unsafe { slab.as_ref() };
            let o3 = sr.owner[3].load(Relaxed);
            if o3 >> 32 == cpu_tag(c) {
                let head = sr.owner[1].load(Relaxed);
                if head == obj {
                    return self.double_free(s, slab, obj);
                }
                let base = obj & !(s.config().slab_bytes() - 1);
                let next = if head == 0 { base | 1 } else { head };
                // SAFETY: the object is ours (caller).
                unsafe { set_freepointer(s.config(), obj, next) };
                sr.owner[1].store(obj, Relaxed);
                sr.owner[3].store(local_push(o3, obj - base), Relaxed);
                s.cpu(c).count(SlubStat::FreeFrozen);
                return true;
            }
        }
        if s.config().off_fast_paths() {
            // SAFETY: forwarded.
            return unsafe { self.free_debug(cpu, s, slab, obj) };
        }
        // SAFETY: forwarded.
        unsafe { self.slab_free(cpu, s, slab, obj, obj, 1) }
    }

    /// [`Slub::free_object`] in per-CPU mode with lockless fast paths, by the holder of
    /// the area's lock: the lockless push if the object is in the CPU slab, else as
    /// the owner (a slab this CPU froze, or `__slab_free`).
    ///
    /// # Safety
    /// As [`Slub::free_object`].
    #[inline(never)]
    unsafe fn free_object_lockless(
        &self,
        c: CpuRef<'_>,
        s: &KmemCache,
        slab: NonNull<Page>,
        obj: usize,
    ) -> bool {
        let cfg = s.config();
        let cc = s.cpu(c);
        let base = obj & !(cfg.slab_bytes() - 1);
        // (With rseq the lock holder does not push: only the CPU's own sections do.)
        let pushed = if cfg.rseq {
            Push::NotCpuSlab
        } else {
            self.push_lockless(cc, cfg, base, obj, obj)
        };
        match pushed {
            Push::Done => {
                cc.count(SlubStat::FreeFastpath);
                return true;
            }
            Push::AtHead => return self.double_free(s, slab, obj),
            Push::NotCpuSlab => {}
        }
        // The rest is the lock holder's, as an owner's.
        // SAFETY: forwarded.
        unsafe { self.free_object_elsewhere(Some(c), s, slab, obj) }
    }

    /// A free of the object at the head of a freelist: it is already free. Reported
    /// (`Object already free`, as slub_debug says) and refused (returns false); for
    /// the platform's own fast paths (rseq) too.
    #[cold]
    #[inline(never)]
    pub fn double_free(&self, s: &KmemCache, slab: NonNull<Page>, obj: usize) -> bool {
        self.report(s, Some(slab), "Object already free", obj);
        false
    }

    /// `__slab_free`: gives `cnt` objects, chained `head`..`tail` through their free
    /// pointers, back to `slab` with a CAS on its state, doing what the slab's new
    /// state asks for (rule 2).
    ///
    /// # Safety
    /// The objects are objects of `slab`, owned by the caller; `tail`'s free pointer
    /// will be overwritten.
    #[cold]
    #[inline(never)]
    unsafe fn slab_free(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        head: usize,
        tail: usize,
        cnt: u64,
    ) -> bool {
        let cfg = s.config();
        s.stat(cpu, SlubStat::FreeSlowpath);
        // SAFETY: a live slab of `s`.
        let sr = unsafe { slab.as_ref() };
        let base = self.slab_base(slab);
        let nid = self.pages.page_to_nid(slab);
        let node = &s.node[nid];
        let mut lock = None;
        let mut freezer: Option<CpuRef<'_>>;
        let (old, new) = loop {
            freezer = None;
            let old = slab_state(sr);
            let prior = base + old.offset() as usize;
            if prior == head {
                drop(lock);
                return self.double_free(s, slab, head);
            }
            // SAFETY: our objects (caller).
            unsafe { set_freepointer(cfg, tail, prior) };
            let can_freeze = cpu.is_some() && cfg.cpu_partial_slabs > 0;
            let freeze = match free_decision(old, cnt, can_freeze, lock.is_some()) {
                FreeDecision::Plain => false,
                FreeDecision::Freeze => {
                    // A full slab gets a free: it goes to our CPU partial list.
                    freezer = cpu;
                    true
                }
                FreeDecision::Lock => {
                    lock = Some(node.list_lock.lock());
                    continue;
                }
            };
            let new = old.after_free((head - base) as u64, cnt, freeze);
            if cas_state(sr, old, new) {
                break (old, new);
            }
        };
        if old.frozen() {
            drop(lock);
            s.stat(cpu, SlubStat::FreeFrozen);
            return true;
        }
        if let (true, Some(c)) = (new.frozen(), freezer) {
            drop(lock);
            // We froze it: its local freelist is ours from now on.
            set_frozen_by(sr, cpu_tag(c));
            s.stat(cpu, SlubStat::CpuPartialFree);
            self.put_cpu_partial(c, s, slab);
            return true;
        }
        let Some(mut list) = lock else {
            return true;
        };
        if new.inuse() == 0 && list.len() >= cfg.min_partial {
            if !old.list_empty() {
                self.remove_partial(&mut list, slab);
                s.stat(cpu, SlubStat::FreeRemovePartial);
            }
            drop(list);
            self.discard_slab(cpu, s, slab);
            return true;
        }
        if old.list_empty() {
            self.add_partial(&mut list, slab, true);
            s.stat(cpu, SlubStat::FreeAddPartial);
        }
        true
    }

    /// `put_cpu_partial`: a frozen slab joins the CPU partial list; over the cap, the
    /// list is unfrozen to the node lists first.
    fn put_cpu_partial(&self, c: CpuRef<'_>, s: &KmemCache, slab: NonNull<Page>) {
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
    fn unfreeze_partials(&self, c: CpuRef<'_>, s: &KmemCache) {
        let cc = s.cpu(c);
        let mut p = cc.partial.swap(ptr::null_mut(), Relaxed);
        cc.nr_partial.store(0, Relaxed);
        while let Some(slab) = NonNull::new(p) {
            // SAFETY: a frozen slab of our CPU partial list.
            p = unsafe { slab.as_ref() }.next.load(Relaxed);
            self.unfreeze_one(Some(c), s, slab);
        }
    }

    /// Unfreezes one CPU partial slab (it holds no CPU freelist) to its node.
    fn unfreeze_one(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, slab: NonNull<Page>) {
        // SAFETY: a frozen slab we own.
        let sr = unsafe { slab.as_ref() };
        let nid = self.pages.page_to_nid(slab);
        let mut list = s.node[nid].list_lock.lock();
        let (_, new) = self.unfreeze_merge(s.config(), sr, slab, Chain::EMPTY);
        if new.inuse() == 0 && list.len() >= s.config().min_partial {
            drop(list);
            self.discard_slab(cpu, s, slab);
        } else if !new.list_empty() {
            self.add_partial(&mut list, slab, true);
        }
    }

    /// `deactivate_slab`: the CPU slab leaves the CPU; the CPU freelist `cur` (objects
    /// or end token) merges back into the slab.
    fn deactivate_slab(&self, c: CpuRef<'_>, s: &KmemCache, slab: NonNull<Page>, cur: usize) {
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
        let mut list = s.node[nid].list_lock.lock();
        let (old, new) = self.unfreeze_merge(cfg, sr, slab, chain);
        if !old.list_empty() {
            cc.count(SlubStat::DeactivateRemoteFrees);
        }
        if new.inuse() == 0 && list.len() >= cfg.min_partial {
            drop(list);
            cc.count(SlubStat::DeactivateEmpty);
            self.discard_slab(Some(c), s, slab);
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
        let cc = s.cpu(c);
        let cur = take_cpu_freelist(c, s.config(), cc);
        if cur != 0 {
            let slab = self.freelist_slab(cur);
            self.deactivate_slab(c, s, slab, cur);
            cc.count(SlubStat::CpuslabFlush);
        }
        self.unfreeze_partials(c, s);
    }

    /// Does what others asked of this area's owner (`DRAIN_CACHES`).
    #[inline]
    fn check_drain_request(&self, c: CpuRef<'_>) {
        if c.area().drain_request.load(Relaxed) & crate::percpu::DRAIN_CACHES != 0 {
            self.flush_request(c);
        }
    }

    #[cold]
    fn flush_request(&self, c: CpuRef<'_>) {
        c.area()
            .drain_request
            .fetch_and(!crate::percpu::DRAIN_CACHES, Relaxed);
        self.caches.for_each(|s| self.flush_cpu_cache(c, s));
    }

    /// `__kmem_cache_shrink`: flushes this CPU's state of `s`, asks other owners to
    /// flush theirs, and frees the empty slabs on the node partial lists. Returns the
    /// slabs freed.
    pub fn shrink(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache) -> usize {
        if let Some(c) = cpu {
            self.flush_cpu_cache(c, s);
        }
        let mut freed = 0;
        for nid in 0..self.pages.nr_nodes() {
            loop {
                let mut list = s.node[nid].list_lock.lock();
                let mut p = list.first();
                let mut empty = None;
                while let Some(slab) = NonNull::new(p) {
                    // SAFETY: node-list slabs are live; we hold the lock.
                    let sr = unsafe { slab.as_ref() };
                    p = sr.next.load(Relaxed);
                    if slab_state(sr).inuse() == 0 {
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

    // -----------------------------------------------------------------------
    // Bulk.

    /// `kmem_cache_alloc_bulk`: fills `out` with objects; returns how many (all, or 0
    /// when memory ran out — then none are kept, as the kernel's all-or-nothing).
    pub fn alloc_bulk(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        out: &mut [*mut u8],
    ) -> usize {
        for i in 0..out.len() {
            match self.alloc(cpu, s, gfp) {
                Some(p) => out[i] = p.as_ptr(),
                None => {
                    // SAFETY: the objects we just allocated, given back.
                    unsafe { self.free_bulk(cpu, s, &mut out[..i]) };
                    return 0;
                }
            }
        }
        out.len()
    }

    /// `kmem_cache_free_bulk`: frees the objects of `objs` (nulls are skipped and the
    /// slots set to null), one detached freelist per slab: consecutive objects of the
    /// same slab are chained and given back with one CAS (`build_detached_freelist`).
    ///
    /// # Safety
    /// As [`Slub::free`] for every non-null pointer.
    pub unsafe fn free_bulk(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, objs: &mut [*mut u8]) {
        let cfg = s.config();
        if cfg.off_fast_paths() {
            // Debug (and init_on_*) caches take every object on its own.
            for o in objs.iter_mut() {
                if let Some(p) = NonNull::new(core::mem::replace(o, ptr::null_mut())) {
                    // SAFETY: forwarded from the caller.
                    unsafe { self.free(cpu, s, p) };
                }
            }
            return;
        }
        let mut i = 0;
        while i < objs.len() {
            let obj = objs[i];
            objs[i] = ptr::null_mut();
            i += 1;
            if obj.is_null() {
                continue;
            }
            let slab = match self.lookup(obj) {
                ObjectLookup::Slab(found, slab) if ptr::eq(found, s) => slab,
                ObjectLookup::Slab(found, slab) => {
                    self.report(found, Some(slab), "Wrong slab cache", obj as usize);
                    continue;
                }
                _ => {
                    self.report(s, None, "Invalid object pointer", obj as usize);
                    continue;
                }
            };
            // Gather the following objects of the same slab into one list.
            let head = obj as usize;
            let mut tail = head;
            let mut cnt = 1u64;
            let base = self.slab_base(slab);
            while i < objs.len() {
                let next = objs[i] as usize;
                if next == 0 || next.wrapping_sub(base) >= cfg.slab_bytes() {
                    break;
                }
                if !matches!(self.lookup(next as *const u8), ObjectLookup::Slab(f, _) if ptr::eq(f, s))
                {
                    break;
                }
                // SAFETY: both are our objects of this slab.
                unsafe { set_freepointer(cfg, tail, next) };
                tail = next;
                cnt += 1;
                objs[i] = ptr::null_mut();
                i += 1;
            }
            if let Some(c) = cpu {
                let cc = s.cpu(c);
                if cfg.lockless {
                    // (A double free at the head falls through to `slab_free`, which
                    // reports it. With rseq only the CPU's own sections push.)
                    if !cfg.rseq
                        && matches!(self.push_lockless(cc, cfg, base, head, tail), Push::Done)
                    {
                        cc.count(SlubStat::FreeFastpath);
                        continue;
                    }
                } else {
                    let cur = cc.freelist.load(Relaxed);
                    if cur != 0 && cur.wrapping_sub(base) < cfg.slab_bytes() {
                        // SAFETY: our objects, chained above.
                        unsafe { set_freepointer(cfg, tail, cur) };
                        cc.freelist.store(head, Relaxed);
                        cc.next_tid();
                        cc.count(SlubStat::FreeFastpath);
                        continue;
                    }
                }
            }
            // SAFETY: a chain of our objects of this slab.
            unsafe { self.slab_free(cpu, s, slab, head, tail, cnt) };
        }
    }

    // -----------------------------------------------------------------------
    // Reports.

    /// `slab_err`: a report in the kernel's format; the object is left alone.
    #[cold]
    #[inline(never)]
    pub fn report(&self, s: &KmemCache, slab: Option<NonNull<Page>>, msg: &str, addr: usize) {
        self.report_named(s.name(), slab, msg, addr);
    }

    /// `slab_err` with a cache name of the caller's choosing (`kmalloc` for pointers
    /// that belong to no cache).
    #[cold]
    #[inline(never)]
    pub fn report_named(&self, name: &str, slab: Option<NonNull<Page>>, msg: &str, addr: usize) {
        let mut w = LogWriter::new(self.pages.platform());
        let _ = writeln!(
            w,
            "============================================================================="
        );
        let _ = writeln!(w, "BUG {} (Not tainted): {} 0x{:016x}", name, msg, addr);
        let _ = writeln!(
            w,
            "-----------------------------------------------------------------------------"
        );
        let _ = writeln!(w);
        if let Some(slab) = slab {
            // SAFETY: a live slab page.
            let sr = unsafe { slab.as_ref() };
            let st = slab_state(sr);
            let _ = writeln!(
                w,
                "Slab 0x{:016x} objects={} used={} fp=0x{:016x} flags=0x{:x}",
                slab.as_ptr() as usize,
                // SAFETY: the head page names its cache.
                unsafe { &*(sr.owner[2].load(Relaxed) as *const KmemCache) }
                    .config()
                    .objects,
                st.inuse(),
                self.slab_base(slab) + st.offset() as usize,
                sr.flags().bits()
            );
        }
        let _ = writeln!(w, "FIX {}: Object at 0x{:016x} not freed", name, addr);
        self.pages.count_bad_object();
    }
}

impl<P: Platform> PageAllocator<P> {
    /// Counts a refused object free (reported by the slab layer).
    pub(crate) fn count_bad_object(&self) {
        self.zones[0].events[crate::vmstat::VmEvent::BadPage as usize].fetch_add(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmalloc_32_packs_128_objects_per_page() {
        let cfg =
            CacheConfig::calculate("kmalloc-32", 32, 32, SlabFlags::empty(), None, 2).unwrap();
        assert_eq!((cfg.order, cfg.objects, cfg.size), (0, 128, 32));
        let cfg =
            CacheConfig::calculate("kmalloc-8k", 8192, 4096, SlabFlags::empty(), None, 2).unwrap();
        assert_eq!((cfg.order, cfg.objects), (3, 4));
        let cfg =
            CacheConfig::calculate("kmalloc-96", 96, 32, SlabFlags::empty(), None, 2).unwrap();
        assert_eq!(cfg.size, 96);
        assert!(cfg.slab_bytes() % 96 <= cfg.slab_bytes() / 16);
    }

    #[test]
    fn layout_rules() {
        // A constructor moves the free pointer behind the object.
        fn ctor(_: *mut u8) {}
        let cfg =
            CacheConfig::calculate("c", 24, 8, SlabFlags::empty(), Some(Ctor::plain(ctor)), 2)
                .unwrap();
        assert_eq!((cfg.offset, cfg.size), (24, 32));
        // Without one it sits in the middle, word aligned.
        let cfg = CacheConfig::calculate("c", 24, 8, SlabFlags::empty(), None, 2).unwrap();
        assert_eq!((cfg.offset, cfg.size), (8, 24));
        // Cache-line alignment for objects that span lines.
        let cfg = CacheConfig::calculate("c", 100, 0, SlabFlags::HWCACHE_ALIGN, None, 2).unwrap();
        assert_eq!(cfg.size % 64, 0);
        assert!(CacheConfig::calculate("c", 0, 8, SlabFlags::empty(), None, 2).is_none());
        assert!(CacheConfig::calculate("c", 8, 3, SlabFlags::empty(), None, 2).is_none());
        assert!(
            CacheConfig::calculate("c", MAX_OBJECT_SIZE + 1, 8, SlabFlags::empty(), None, 2)
                .is_none()
        );
        let long = CacheConfig::calculate(
            "a-very-long-cache-name-that-goes-on-and-on",
            8,
            8,
            SlabFlags::empty(),
            None,
            2,
        )
        .unwrap();
        assert_eq!(long.name().len(), CACHE_NAME_LEN);
    }

    #[test]
    fn tail_waste_stays_within_a_sixteenth() {
        for size in (8..=MAX_OBJECT_SIZE).step_by(8) {
            let (order, objects) = calculate_order(size, 2).unwrap();
            let slab = PAGE_SIZE << order;
            assert_eq!(objects, slab / size);
            assert!(objects >= 1);
            if size <= 512 {
                assert!(
                    slab % size <= slab / 16,
                    "size {size}: order {order} wastes {}",
                    slab % size
                );
            }
        }
    }

    #[test]
    fn reciprocal_finds_object_indices() {
        for size in [8usize, 24, 96, 192, 1000, 4096, 8192] {
            let cfg = CacheConfig::calculate("c", size, 8, SlabFlags::empty(), None, 2).unwrap();
            for idx in 0..cfg.objects {
                let off = idx * cfg.size;
                assert_eq!(((off as u64 * cfg.reciprocal) >> 32) as usize, idx);
                if off + 8 < cfg.slab_bytes() && cfg.size > 8 {
                    let inner = off + 8;
                    let i2 = ((inner as u64 * cfg.reciprocal) >> 32) as usize;
                    assert!(i2 * cfg.size != inner);
                }
            }
        }
    }
}
