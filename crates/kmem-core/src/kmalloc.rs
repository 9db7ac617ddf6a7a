//! kmalloc: general-purpose allocation by size (include/linux/slab.h, mm/slab_common.c).
//!
//! Three sets of kmalloc caches: plain, `kmalloc-cg-*` for `__GFP_ACCOUNT` callers
//! and `kmalloc-rcl-*` for `__GFP_RECLAIMABLE` ones.
//! - The accounted and reclaimable sets have the kernel's classes (`kmalloc_index`):
//!   powers of two from 8 to 8 KiB plus 96 and 192 ([`KMALLOC_SIZES`]).
//! - The plain set, which malloc and `GlobalAlloc` use, has the kernel's classes up to
//!   128 bytes with 24, 40, 48, 56, 80 and 112 added (8-byte steps up to 64, for the
//!   three-, five- and seven-word objects Rust boxes by the thousand — `Box<Node>` of
//!   a tree with two children, `Rc<u64>`, a node holding two fat pointers — which the
//!   next 16-byte class would pad by up to a third; 16-byte steps from 64 to 128;
//!   C's `malloc`, 16-byte aligned above 8 bytes as glibc's, rounds its requests past
//!   the odd ones: [`malloc_class_size`]), then four classes per
//!   doubling (2^k × 5/4, 6/4, 7/4, 8/4) up to 8 KiB, then the powers of two up to
//!   [`KMALLOC_MAX_CACHE_SIZE`] (1 MiB) ([`KMALLOC_PLAIN_SIZES`],
//!   [`kmalloc_plain_index`]). Up to 8 KiB a request is rounded up by at most 25%
//!   instead of up to 100%; above it, where a program has few objects of each size,
//!   each class's cached objects and slabs cost more than the rounding saves (both
//!   measured: BENCHMARKS.md, "Size classes"). Sizes the kernel never sees in bulk
//!   (16 KiB – 1 MiB buffers) come from slabs and sheaves instead of the buddy lists.
//!   Every kernel class is one of them, with the same name.
//!
//! Larger sizes (and accounted or reclaimable ones above 8 KiB) come straight from the
//! page allocator (`kmalloc_large`) as blocks of up to 4 MiB. Each cache's objects
//! are aligned to the largest power of two dividing its size, up to a page
//! (kmalloc-96: 32, kmalloc-320: 64), so rounding a request up to its alignment and
//! then to a class gives an object with that alignment.
//!
//! `kfree` finds what it frees from the pointer alone (`virt_to_page`): a slab object
//! (its cache is in the slab's head page) or the head of a large block. Anything else
//! — not ours, not the start of an object — is reported and left alone.

use crate::gfp::Gfp;
use crate::page::{Page, PageAllocator, CPU_AREA_ZERO_LINE};
use crate::page::{MAX_NUMNODES, MAX_ORDER, PAGE_SIZE};
use crate::percpu::{CpuArea, CpuRef};
use crate::platform::Platform;
use crate::slab::{
    accounting, has_obj_exts, Accounting, CacheConfig, FastPath, KmemCache, KmemCacheNode,
    NodeTable, ObjectLookup, SlabFlags, Slub, SlubStats, NEW_SLUB_STATS,
};
use crate::sync::AtomicU32;
use crate::sync::Ordering::Relaxed;
use core::ptr::{self, NonNull};

/// The kernel's kmalloc size classes (the accounted and reclaimable sets), in cache
/// order.
pub const KMALLOC_SIZES: [usize; NR_KMALLOC] = [
    8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192,
];
/// Number of caches in the accounted and reclaimable sets.
pub const NR_KMALLOC: usize = 13;
/// Largest size served by a cache of the accounted and reclaimable sets (the
/// kernel's `KMALLOC_MAX_CACHE_SIZE`, two pages).
pub const KMALLOC_KERNEL_MAX_CACHE_SIZE: usize = 8192;

/// Number of caches in the plain set: 12 up to 128 bytes, 4 per doubling up to 8 KiB,
/// then the powers of two up to 1 MiB.
pub const NR_KMALLOC_PLAIN: usize = 12 + 4 * 6 + 7;
/// The plain set's size classes, in cache order.
pub const KMALLOC_PLAIN_SIZES: [usize; NR_KMALLOC_PLAIN] = plain_sizes();
/// Largest size served by a kmalloc cache (the plain set's largest class).
pub const KMALLOC_MAX_CACHE_SIZE: usize = 1 << 20;
/// Sets of kmalloc caches: plain, cg (accounted), rcl (reclaimable).
pub const NR_KMALLOC_TYPES: usize = 3;
/// kmalloc's caches in all: the plain set and the other types' sets.
pub const NR_KMALLOC_ALL: usize = NR_KMALLOC_PLAIN + (NR_KMALLOC_TYPES - 1) * NR_KMALLOC;

/// The index among all kmalloc caches of cache `i` of set `t` (0: plain).
const fn kmalloc_index_of(t: usize, i: usize) -> usize {
    if t == 0 {
        i
    } else {
        NR_KMALLOC_PLAIN + (t - 1) * NR_KMALLOC + i
    }
}
/// Largest size kmalloc serves at all (the largest buddy block).
pub const KMALLOC_MAX_SIZE: usize = PAGE_SIZE << MAX_ORDER;

/// Index of the plain set's first class above 1 KiB (1280).
const PLAIN_ABOVE_1K: usize = 24;
/// Index of the plain set's first class above 8 KiB (16 KiB).
const PLAIN_ABOVE_8K: usize = 36;

const fn plain_sizes() -> [usize; NR_KMALLOC_PLAIN] {
    let mut out = [0; NR_KMALLOC_PLAIN];
    let small = [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128];
    let mut i = 0;
    while i < small.len() {
        out[i] = small[i];
        i += 1;
    }
    let mut base = 128;
    while base < 8192 {
        let mut q = 5;
        while q <= 8 {
            out[i] = base / 4 * q;
            i += 1;
            q += 1;
        }
        base *= 2;
    }
    while i < NR_KMALLOC_PLAIN {
        base *= 2;
        out[i] = base;
        i += 1;
    }
    out
}

/// The plain class index for sizes 1..=1024 by `(size - 1) / 8`.
const PLAIN_SIZE_INDEX: [u8; 128] = plain_size_index();

const fn plain_size_index() -> [u8; 128] {
    let mut out = [0u8; 128];
    let mut j = 0;
    let mut class = 0;
    while j < 128 {
        let size = (j + 1) * 8;
        while KMALLOC_PLAIN_SIZES[class] < size {
            class += 1;
        }
        out[j] = class as u8;
        j += 1;
    }
    out
}

/// [`PLAIN_SIZE_INDEX`] for C's `malloc`: the class of [`malloc_class_size`] (which
/// maps the eight sizes of an entry to one class).
const MALLOC_SIZE_INDEX: [u8; 128] = {
    let mut out = [0u8; 128];
    let mut j = 0;
    while j < 128 {
        out[j] = PLAIN_SIZE_INDEX[(malloc_class_size((j + 1) * 8) - 1) >> 3];
        j += 1;
    }
    out
};

const _: () = assert!(KMALLOC_PLAIN_SIZES[PLAIN_ABOVE_1K - 1] == 1024);
const _: () = assert!(KMALLOC_PLAIN_SIZES[PLAIN_ABOVE_8K - 1] == 8192);
const _: () = assert!(KMALLOC_PLAIN_SIZES[NR_KMALLOC_PLAIN - 1] == KMALLOC_MAX_CACHE_SIZE);

/// The plain set's cache for `size` bytes (index into [`KMALLOC_PLAIN_SIZES`]), or
/// `None` above [`KMALLOC_MAX_CACHE_SIZE`]. Size 0 gets the smallest cache. One table
/// load up to 1 KiB; up to 8 KiB, the doubling from the top bit and the quarter from
/// the two bits below it; above, the power of two.
#[inline(always)]
pub fn kmalloc_plain_index(size: usize) -> Option<usize> {
    if size <= 1024 {
        return Some(PLAIN_SIZE_INDEX[size.saturating_sub(1) >> 3] as usize);
    }
    // size - 1 in [2^k, 2^(k+1)), k >= 10.
    let k = (usize::BITS - 1 - (size - 1).leading_zeros()) as usize;
    if size <= 8192 {
        // Class 2^k * (5 + quarter) / 4.
        let quarter = ((size - 1) >> (k - 2)) & 3;
        return Some(PLAIN_ABOVE_1K + (k - 10) * 4 + quarter);
    }
    if size > KMALLOC_MAX_CACHE_SIZE {
        return None;
    }
    // Class 2^(k+1), k >= 13.
    Some(PLAIN_ABOVE_8K + (k - 13))
}

/// `size_index`: cache index for sizes 1..=192 by `(size - 1) / 8`.
const SIZE_INDEX: [u8; 24] = [
    0, 1, 2, 2, 3, 3, 3, 3, // 8, 16, 24-32, 40-64
    4, 4, 4, 4, // 72-96
    5, 5, 5, 5, // 104-128
    6, 6, 6, 6, 6, 6, 6, 6, // 136-192
];

/// `kmalloc_index`: the kernel's class for `size` bytes (index into
/// [`KMALLOC_SIZES`]; the accounted and reclaimable sets), or `None` above
/// [`KMALLOC_KERNEL_MAX_CACHE_SIZE`]. Size 0 gets the smallest cache.
#[inline]
pub fn kmalloc_index(size: usize) -> Option<usize> {
    if size <= 192 {
        return Some(SIZE_INDEX[size.saturating_sub(1) / 8] as usize);
    }
    if size > KMALLOC_KERNEL_MAX_CACHE_SIZE {
        return None;
    }
    // 256 -> 7, 512 -> 8, ... 8192 -> 12.
    let log = usize::BITS - (size - 1).leading_zeros();
    Some(log as usize - 1)
}

/// Which set of kmalloc caches serves `gfp`.
#[inline]
pub fn kmalloc_type(gfp: Gfp) -> usize {
    if gfp.contains(Gfp::ACCOUNT) {
        1
    } else if gfp.contains(Gfp::RECLAIMABLE) {
        2
    } else {
        0
    }
}

/// The kmalloc caches (`kmalloc_caches[type][index]`): plain, `kmalloc-cg-*` and
/// `kmalloc-rcl-*`, each with one cache per size class. Embedded in the allocator and
/// set up at boot, so they need no allocation.
pub struct KmallocCaches {
    plain: [KmemCache; NR_KMALLOC_PLAIN],
    /// The accounted (0) and reclaimable (1) sets.
    kernel: [[KmemCache; NR_KMALLOC]; NR_KMALLOC_TYPES - 1],
    /// The caches' node states, node-major (`nodes[nid][i]`, `i` as in
    /// [`kmalloc_index_of`]): apart from the caches, so that node 0's of all of them
    /// share three pages and the other nodes' are never touched on one node
    /// ([`NodeTable`]).
    nodes: [[KmemCacheNode; NR_KMALLOC_ALL]; MAX_NUMNODES],
    /// The caches' counters of contexts without a CPU area, by [`kmalloc_index_of`]:
    /// apart from the caches too, so that the boot's writes to the configs stay on
    /// as few pages as they can ([`NodeTable`]).
    stats: [SlubStats; NR_KMALLOC_ALL],
    /// For sizes up to [`SMALL_FAST_MAX`], by size (one entry a byte: 4 KiB, so that
    /// the index is the size itself, with no rounding): the `cpu_offset` of the plain
    /// class's per-CPU sheaves when that cache runs the inline sheaf path, else
    /// [`CPU_AREA_ZERO_LINE`] (whose sheaves are always empty, so the pop fails
    /// without a test of the offset). Written once by [`KmallocCaches::boot`]
    /// (caches' configs never change after it), so kmalloc's fast path goes from the
    /// size to the CPU's sheaf with one table load and no load through the cache.
    small_fast: [AtomicU32; SMALL_FAST_MAX + 1],
    /// [`KmallocCaches::small_fast`] for C's `malloc`: the class of
    /// [`malloc_class_size`] (past the 8-aligned kmalloc-24, -40 and -56), by size.
    malloc_fast: [AtomicU32; SMALL_FAST_MAX + 1],
    /// [`KmallocCaches::small_fast`] for per-CPU rseq mode: the `cpu_offset` of the
    /// plain class's sheaves when that cache runs on the platform's restartable
    /// sequences ([`FastPath::SheafRseq`]), else [`CPU_AREA_ZERO_LINE`], by size, as
    /// `small_fast` is (the restartable pop finds the zero line's sheaves empty, so
    /// it tests no offset; and indexed by the size itself, it shifts nothing). A
    /// table of its own, so that the inline path's plain pops never reach sheaves that
    /// only sequences may change.
    small_rseq: [AtomicU32; SMALL_FAST_MAX + 1],
    /// [`KmallocCaches::small_rseq`] for C's `malloc`: the class of
    /// [`malloc_class_size`].
    malloc_rseq: [AtomicU32; SMALL_FAST_MAX + 1],
    /// [`KmallocCaches::small_fast`] for the sizes above [`SMALL_FAST_MAX`] up to
    /// [`MEDIUM_FAST_MAX`], by `(size + 255) / 256`: every plain class there is a
    /// multiple of 256 bytes, so one entry never spans two classes. One load instead
    /// of the class computation (`kmalloc_plain_index`: about fifteen instructions).
    medium_fast: [AtomicU32; MEDIUM_FAST_MAX / MEDIUM_FAST_STEP + 1],
}

/// The alignment C's `malloc` gives every request above 8 bytes, as glibc's does on
/// 64-bit targets (`MALLOC_ALIGNMENT`, `alignof(max_align_t)`), and jemalloc,
/// tcmalloc and mimalloc as built by distributions: programs count on it beyond what
/// C17 asks (an object of `n` bytes can need at most the largest power of two
/// dividing `n`). Rust's `System` allocator calls `malloc(n)` for any layout aligned
/// to at most 16 and at most `n` (hashbrown's tables: 16-aligned control bytes after
/// the buckets, sizes such as 52), and clang marks `operator new`'s result 16-aligned.
pub const MALLOC_ALIGN: usize = 16;

/// The size C's `malloc(size)` takes from the plain set: above 8 bytes and up to
/// 64, rounded up to a multiple of [`MALLOC_ALIGN`], which skips the 8-aligned
/// kmalloc-24, -40 and -56 (Rust's layouts, which carry their alignment, keep them).
/// Every other class is 8 bytes (for requests of at most 8) or a multiple of 16 with
/// objects 16-aligned, so other sizes stay as they are.
#[inline(always)]
pub const fn malloc_class_size(size: usize) -> usize {
    if size > 8 && size < 64 {
        (size + MALLOC_ALIGN - 1) & !(MALLOC_ALIGN - 1)
    } else {
        size
    }
}

// The boot fills the size tables a group of eight sizes at a time (8g + 1 ..= 8g + 8):
// `malloc_class_size` keeps each group within one class, as kmalloc's classes do.
const _: () = {
    let mut g = 0;
    while g < SMALL_FAST_MAX / 8 {
        let lo = malloc_class_size(g * 8 + 1);
        let hi = malloc_class_size(g * 8 + 8);
        assert!(PLAIN_SIZE_INDEX[(lo - 1) >> 3] == PLAIN_SIZE_INDEX[(hi - 1) >> 3]);
        assert!(hi <= SMALL_FAST_MAX);
        g += 1;
    }
};

/// The largest size [`KmallocCaches::small_fast`] covers.
pub const SMALL_FAST_MAX: usize = 1024;
// The slab layer gives the caches of larger objects, reached through `medium_fast` and
// `plain`, the medium objects' sheaf rules (`slab::sheaf_medium`).
const _: () = assert!(SMALL_FAST_MAX == crate::slab::SMALL_OBJECT_MAX);
/// The largest size [`KmallocCaches::medium_fast`] covers.
pub const MEDIUM_FAST_MAX: usize = 64 << 10;
/// The step of [`KmallocCaches::medium_fast`]'s entries (a power of two: a shift).
const MEDIUM_FAST_STEP: usize = 1 << 8;
// Every plain class between the two tables' bounds is a whole number of steps.
const _: () = {
    let mut i = 0;
    while i < NR_KMALLOC_PLAIN {
        let size = KMALLOC_PLAIN_SIZES[i];
        assert!(size <= SMALL_FAST_MAX || size.is_multiple_of(MEDIUM_FAST_STEP));
        i += 1;
    }
};

/// [`CPU_AREA_ZERO_LINE`] as a size-table entry.
const ZERO_LINE: u32 = CPU_AREA_ZERO_LINE as u32;

/// The entry of a size table at `i`, or the zero line past the table (a size no
/// fast path serves).
#[inline(always)]
fn line_of(table: &[AtomicU32], i: usize) -> usize {
    table
        .get(i)
        .map_or(CPU_AREA_ZERO_LINE, |e| e.load(Relaxed) as usize)
}

/// A size-table entry for a cache: its `cpu_offset` when its fast path is `path`.
fn sheaf_offset(cfg: &crate::slab::CacheConfig, path: FastPath) -> Option<u32> {
    let on = cfg.fast == path && cfg.cpu_offset != 0;
    u32::try_from(cfg.cpu_offset).ok().filter(|_| on)
}

impl KmallocCaches {
    /// Caches not set up yet ([`KmallocCaches::boot`] does).
    pub(crate) const fn new() -> Self {
        Self {
            plain: [const { KmemCache::new() }; NR_KMALLOC_PLAIN],
            kernel: [const { [const { KmemCache::new() }; NR_KMALLOC] }; NR_KMALLOC_TYPES - 1],
            nodes: [const { [const { KmemCacheNode::new() }; NR_KMALLOC_ALL] }; MAX_NUMNODES],
            stats: [NEW_SLUB_STATS; NR_KMALLOC_ALL],
            small_fast: [const { AtomicU32::new(ZERO_LINE) }; SMALL_FAST_MAX + 1],
            malloc_fast: [const { AtomicU32::new(ZERO_LINE) }; SMALL_FAST_MAX + 1],
            small_rseq: [const { AtomicU32::new(ZERO_LINE) }; SMALL_FAST_MAX + 1],
            malloc_rseq: [const { AtomicU32::new(ZERO_LINE) }; SMALL_FAST_MAX + 1],
            medium_fast: [const { AtomicU32::new(ZERO_LINE) };
                MEDIUM_FAST_MAX / MEDIUM_FAST_STEP + 1],
        }
    }

    /// Sets up every kmalloc cache through `create(cache, nodes, name, size, align,
    /// flags)` (the allocator's boot-cache constructor), plain set first,
    /// smallest first, and gives each accounted one on a sheaf fast path its objcg
    /// sheaf class (its index in the set); stops at the first error.
    pub(crate) fn boot<E>(
        &self,
        mut create: impl FnMut(&KmemCache, NodeTable, &str, usize, usize, SlabFlags) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut name = NameBuf::new();
        for (t, prefix) in ["kmalloc-", "kmalloc-cg-", "kmalloc-rcl-"]
            .iter()
            .enumerate()
        {
            let flags = match t {
                1 => SlabFlags::ACCOUNT,
                2 => SlabFlags::RECLAIM_ACCOUNT,
                _ => SlabFlags::empty(),
            };
            let set = self.set(t);
            for (i, s) in set.iter().enumerate() {
                let size = if t == 0 {
                    KMALLOC_PLAIN_SIZES[i]
                } else {
                    KMALLOC_SIZES[i]
                };
                name.clear();
                name.push(prefix.as_bytes());
                write_size(&mut name, size);
                let align = (1usize << size.trailing_zeros()).min(PAGE_SIZE);
                let k = kmalloc_index_of(t, i);
                let nodes = NodeTable::column(&self.nodes, k, &self.stats[k]);
                create(s, nodes, name.as_str(), size, align, flags)?;
                if t == 1 && s.config().fast != FastPath::CpuSlab {
                    // The accounted caches: their objcg sheaf class, which a charged
                    // free reads from the config (`memcontrol::objcg_sheaf`).
                    // SAFETY: boot, before the allocator is up: nothing allocates from
                    // or frees to the kmalloc caches yet, and nothing walks the cache
                    // list `create` put `s` on before the boot returns.
                    unsafe { s.set_objcg_class(i as u8) };
                }
            }
        }
        // The size tables up to `SMALL_FAST_MAX`, a group of eight sizes at a time
        // (sizes 8g + 1 ..= 8g + 8 share a class, for kmalloc and for C's `malloc`
        // alike; size 0 goes with the first): a process pays for 128 class lookups
        // at start, not 2,300 (`icount.sh` counts the start).
        // The pair of tables of a path no plain cache runs keeps the zero line it
        // starts with, unvisited: in thread mode the rseq pair, two pages of the heap's
        // `static` that the start wrote with what they held (in a `static` allocator,
        // libkmem.so's heap, every page written is a fault in every process).
        for (path, kmalloc_table, malloc_table) in [
            (FastPath::Sheaf, &self.small_fast, &self.malloc_fast),
            (FastPath::SheafRseq, &self.small_rseq, &self.malloc_rseq),
        ] {
            if !self.plain.iter().any(|s| s.config().fast == path) {
                continue;
            }
            let offset = |i: u8| sheaf_offset(self.plain[i as usize].config(), path);
            for g in 0..SMALL_FAST_MAX / 8 {
                let (k, c) = (PLAIN_SIZE_INDEX[g], MALLOC_SIZE_INDEX[g]);
                let kv = offset(k).unwrap_or(ZERO_LINE);
                let cv = offset(c).unwrap_or(ZERO_LINE);
                let first = if g == 0 { 0 } else { g * 8 + 1 };
                for size in first..=g * 8 + 8 {
                    kmalloc_table[size].store(kv, Relaxed);
                    malloc_table[size].store(cv, Relaxed);
                }
            }
        }
        for (j, fast) in self.medium_fast.iter().enumerate() {
            let size = j * MEDIUM_FAST_STEP;
            if let Some(i) = kmalloc_plain_index(size).filter(|_| size > SMALL_FAST_MAX) {
                let off = sheaf_offset(self.plain[i].config(), FastPath::Sheaf);
                fast.store(off.unwrap_or(ZERO_LINE), Relaxed);
            }
        }
        Ok(())
    }

    /// See [`KmallocCaches::small_fast`]: for `size <= SMALL_FAST_MAX`, the
    /// `cpu_offset` of its class's sheaves if the fast path may pop them, else
    /// [`CPU_AREA_ZERO_LINE`] (never 0).
    ///
    /// Every getter of these tables answers the zero line for a size past its table
    /// (the callers' own size test comes first and makes this one free), so no
    /// size reads outside them.
    #[inline(always)]
    pub fn small_fast(&self, size: usize) -> usize {
        line_of(&self.small_fast, size)
    }

    /// [`KmallocCaches::small_fast`] for C's `malloc(size)`, `size <= SMALL_FAST_MAX`:
    /// the sheaves of the class of [`malloc_class_size`]`(size)`, or the zero line.
    #[inline(always)]
    pub fn malloc_fast(&self, size: usize) -> usize {
        line_of(&self.malloc_fast, size)
    }

    /// [`KmallocCaches::small_fast`] for `SMALL_FAST_MAX < size <= MEDIUM_FAST_MAX`.
    #[inline(always)]
    pub fn medium_fast(&self, size: usize) -> usize {
        // A shift, which the callers' size test bounds to the table (`div_ceil` did not).
        let i = size.saturating_add(MEDIUM_FAST_STEP - 1) >> MEDIUM_FAST_STEP.trailing_zeros();
        line_of(&self.medium_fast, i)
    }

    /// As [`KmallocCaches::small_fast`] for per-CPU rseq mode: for `size <=
    /// SMALL_FAST_MAX`, the `cpu_offset` of its class's sheaves if the front ends'
    /// restartable pop may take from them, else [`CPU_AREA_ZERO_LINE`] (never 0).
    #[inline(always)]
    pub fn small_rseq(&self, size: usize) -> usize {
        line_of(&self.small_rseq, size)
    }

    /// [`KmallocCaches::small_rseq`] for C's `malloc(size)`, `size <= SMALL_FAST_MAX`:
    /// the sheaves of the class of [`malloc_class_size`]`(size)` if the restartable
    /// pop may take from them, else the zero line.
    #[inline(always)]
    pub fn malloc_rseq(&self, size: usize) -> usize {
        line_of(&self.malloc_rseq, size)
    }

    /// The cache serving `size` bytes for `gfp`: `None` above
    /// [`KMALLOC_MAX_CACHE_SIZE`] (plain) or [`KMALLOC_KERNEL_MAX_CACHE_SIZE`]
    /// (accounted, reclaimable).
    #[inline]
    pub fn cache(&self, size: usize, gfp: Gfp) -> Option<&KmemCache> {
        match kmalloc_type(gfp) {
            0 => self.plain(size),
            t => Some(&self.kernel[t - 1][kmalloc_index(size)?]),
        }
    }

    /// The plain cache serving `size` bytes, `None` above [`KMALLOC_MAX_CACHE_SIZE`].
    #[inline(always)]
    pub fn plain(&self, size: usize) -> Option<&KmemCache> {
        Some(&self.plain[kmalloc_plain_index(size)?])
    }

    /// [`KmallocCaches::plain`] for C's `malloc(size)`: the cache of
    /// [`malloc_class_size`]`(size)`, by one table load up to 1 KiB.
    #[inline(always)]
    pub fn malloc_plain(&self, size: usize) -> Option<&KmemCache> {
        if size <= 1024 {
            return Some(&self.plain[MALLOC_SIZE_INDEX[size.saturating_sub(1) >> 3] as usize]);
        }
        self.plain(size)
    }

    /// The set of caches of type `t` (0 plain, 1 cg, 2 rcl), smallest first.
    #[inline]
    pub fn set(&self, t: usize) -> &[KmemCache] {
        match t {
            0 => &self.plain,
            t => &self.kernel[t - 1],
        }
    }

    /// Whether `s` is one of the kmalloc caches.
    pub fn contains(&self, s: &KmemCache) -> bool {
        (0..NR_KMALLOC_TYPES).any(|t| self.set(t).iter().any(|k| ptr::eq(k, s)))
    }

    /// Whether `s` is one of the plain kmalloc caches (those never charged).
    pub fn is_plain(&self, s: &KmemCache) -> bool {
        let plain = self.plain.as_ptr_range();
        (plain.start..plain.end).contains(&(s as *const KmemCache))
    }
}

/// A kmalloc class's name suffix as the kernel writes it: bytes, `Nk` for whole KiB,
/// `NM` for whole MiB (kmalloc-96, kmalloc-1280, kmalloc-8k, kmalloc-1M). Digits
/// written by hand: through `core::fmt` the boot's 69 names took 26,000 more
/// instructions, a fifth of what the heap's start runs.
fn write_size(w: &mut NameBuf, size: usize) {
    let (n, unit) = if size >= 1 << 20 && size.is_multiple_of(1 << 20) {
        (size >> 20, Some(b'M'))
    } else if size >= 1024 && size.is_multiple_of(1024) {
        (size / 1024, Some(b'k'))
    } else {
        (size, None)
    };
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    w.push(&digits[i..]);
    if let Some(u) = unit {
        w.push(&[u]);
    }
}

/// kmalloc's operations, bound to the slab layer and the kmalloc caches. A small
/// `Copy` view, taken by value: its methods get the pointers in registers, so building
/// one costs the fast paths nothing.
pub struct Kmalloc<'a, P: Platform> {
    slub: Slub<'a, P>,
    caches: &'a KmallocCaches,
}

impl<P: Platform> Clone for Kmalloc<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P: Platform> Copy for Kmalloc<'_, P> {}

impl<'a, P: Platform> Kmalloc<'a, P> {
    /// kmalloc over `slub` with `caches`.
    #[inline]
    pub(crate) fn new(slub: Slub<'a, P>, caches: &'a KmallocCaches) -> Self {
        Self { slub, caches }
    }

    /// The slab layer.
    #[inline]
    pub fn slub(self) -> Slub<'a, P> {
        self.slub
    }

    /// The page allocator.
    #[inline]
    pub fn pages(self) -> &'a PageAllocator<P> {
        self.slub.pages
    }

    /// The kmalloc caches.
    #[inline]
    pub fn caches(self) -> &'a KmallocCaches {
        self.caches
    }

    /// `kmalloc`: `size` bytes aligned to at least 8 (a kmalloc-N object for a power of
    /// two N is aligned to N), or `None`.
    #[inline]
    pub fn kmalloc(self, cpu: Option<CpuRef<'_>>, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        self.kmalloc_node(cpu, size, gfp, None)
    }

    /// `kmalloc_node`: as [`Kmalloc::kmalloc`], on node `nid` if given.
    #[inline]
    pub fn kmalloc_node(
        self,
        cpu: Option<CpuRef<'_>>,
        size: usize,
        gfp: Gfp,
        nid: Option<usize>,
    ) -> Option<NonNull<u8>> {
        match self.caches.cache(size, gfp) {
            Some(s) => {
                let p = self.slub().alloc_node(cpu, s, gfp, nid)?;
                if s.config().orig_off != 0 {
                    // SAFETY: the object of `s` just allocated, ours.
                    unsafe { self.slub().set_orig_size(s, p.as_ptr() as usize, size) };
                }
                Some(p)
            }
            None => kmalloc_large(self.slub, cpu, size, gfp, nid),
        }
    }

    /// Per-CPU mode, without the area's lock: kmalloc's fast path on `area` (the
    /// lockless pop). `None`: take the area's lock and call [`Kmalloc::kmalloc`].
    #[inline]
    pub fn kmalloc_lockless(self, area: &CpuArea, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        let s = self.caches.cache(size, gfp)?;
        let p = self.slub.alloc_lockless(area, s)?;
        // SAFETY: a new object of `s`, handed to our caller.
        unsafe { crate::slab::post_alloc_init(s, p, gfp) };
        Some(p)
    }

    /// Per-CPU mode, without the area's lock: kfree's fast path (`p` a slab object
    /// of the CPU slab of `area`, not charged to a memory cgroup). `Some(false)`: a
    /// double free at the freelist's head, reported. `None`: take the area's lock and
    /// call [`Kmalloc::kfree`].
    ///
    /// # Safety
    /// As [`Kmalloc::kfree`].
    #[inline]
    pub unsafe fn kfree_lockless(self, area: &CpuArea, p: *mut u8) -> Option<bool> {
        let slub = self.slub;
        // SAFETY: the cache found holds the object the caller frees, so it is not
        // destroyed while this free uses it.
        match unsafe { slub.lookup(p) } {
            // SAFETY: `lookup` found `slab`, a slab head.
            ObjectLookup::Slab(s, slab) if !unsafe { accounting::has_obj_exts(slab) } => {
                // SAFETY: a checked object of `slab`, given up by the caller.
                unsafe { slub.free_lockless(area, s, slab, p as usize) }
            }
            _ => None,
        }
    }

    /// `kzalloc`: zeroed `kmalloc`.
    #[inline]
    pub fn kzalloc(self, cpu: Option<CpuRef<'_>>, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        self.kmalloc(cpu, size, gfp | Gfp::ZERO)
    }

    /// `kcalloc`: `n * size` zeroed bytes; `None` if the product overflows.
    pub fn kcalloc(
        self,
        cpu: Option<CpuRef<'_>>,
        n: usize,
        size: usize,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        self.kmalloc(cpu, n.checked_mul(size)?, gfp | Gfp::ZERO)
    }

    /// `ksize`: how many bytes the allocation at `p` really has (its class size, or
    /// its pages). 0 for a pointer kmalloc did not hand out.
    ///
    /// # Safety
    /// `p` is null, an allocation of this allocator that the caller holds (not freed,
    /// and not being freed or resized by another thread), or no address this allocator
    /// ever handed out. (A freed object's cache may be destroyed meanwhile, and a debug
    /// cache's object records its size in a word its owner writes.)
    pub unsafe fn ksize(self, p: *const u8) -> usize {
        // SAFETY: the cache of an allocation the caller holds lives (caller).
        match unsafe { self.slub.lookup(p) } {
            // A cache that records requested sizes (slub_debug Z or U) answers with
            // the request: its slack is red zone, not the caller's.
            ObjectLookup::Slab(s, _) if s.config().orig_off != 0 => {
                // SAFETY: `lookup` found `p` starting an object of a slab of `s`.
                unsafe { self.slub.orig_size(s, p as usize) }
            }
            ObjectLookup::Slab(s, _) => s.config().object_size,
            ObjectLookup::Large(head) => {
                // SAFETY: the head of a live large block.
                PAGE_SIZE << unsafe { head.as_ref() }.order()
            }
            ObjectLookup::Bad(_) => 0,
        }
    }

    /// `kfree`: frees what kmalloc (or `kmem_cache_alloc`) handed out, running
    /// `acct`'s hooks first. Null is a no-op; a pointer that is not ours, not the start
    /// of an object, or already free at a freelist's head is reported (`BUG kmalloc-64
    /// (Not tainted): Invalid object pointer 0x…`) and nothing is freed: then it
    /// returns false.
    ///
    /// # Safety
    /// If `p` is one of ours, the caller owns it and stops using it.
    #[inline(always)]
    pub unsafe fn kfree(self, cpu: Option<CpuRef<'_>>, p: *mut u8, acct: &impl Accounting) -> bool {
        if p.is_null() {
            return true;
        }
        let slub = self.slub;
        // SAFETY: the cache found holds the object the caller frees, so it is not
        // destroyed while this free uses it.
        match unsafe { slub.lookup(p) } {
            ObjectLookup::Slab(s, slab) => {
                // SAFETY: the head page of a live slab of `s`, whose object at `p` the
                // caller frees (once: this free).
                unsafe { accounting::slab_free_hook(acct, cpu, s, slab.as_ref(), p as usize) };
                // SAFETY: a checked object, given up by the caller.
                unsafe { slub.free_object(cpu, s, slab, p as usize) }
            }
            ObjectLookup::Large(head) => {
                // SAFETY: the head of a large block from kmalloc_large, given up by the
                // caller; its order is on the head page.
                let order = unsafe { head.as_ref() }.order();
                // SAFETY: as above: the block this free gives back.
                unsafe { accounting::page_free_hook(acct, cpu, head, order) };
                // SAFETY: as above.
                unsafe { slub.pages.free_pages(cpu, head, order) };
                true
            }
            ObjectLookup::Bad(why) => {
                report_bad_free(slub, p, why);
                false
            }
        }
    }

    /// `krealloc`: resizes the allocation at `p` to `new_size`, in place when it still
    /// fits its class (or pages), else by moving it to `alloc(new_size)` and freeing
    /// `p` (with `acct`'s hooks). Null `p` allocates; on failure `None` is returned and
    /// `p` is left as it was.
    ///
    /// # Safety
    /// `p` is null or an allocation of ours that the caller owns.
    pub unsafe fn krealloc_with(
        self,
        cpu: Option<CpuRef<'_>>,
        p: *mut u8,
        new_size: usize,
        gfp: Gfp,
        alloc: impl FnOnce(usize) -> Option<NonNull<u8>>,
        acct: &impl Accounting,
    ) -> Option<NonNull<u8>> {
        if p.is_null() {
            return alloc(new_size);
        }
        // What the block holds (`cap`) and what the caller asked for last (`old`; less
        // than `cap` only for a cache that records requested sizes: slub_debug).
        // SAFETY: the cache holds the caller's object (krealloc's contract).
        let (cap, old, slab_cache) = match unsafe { self.slub.lookup(p) } {
            ObjectLookup::Slab(s, slab) => (
                s.config().object_size,
                // SAFETY: `lookup` found `p` starting an object of a slab of `s`.
                unsafe { self.slub.orig_size(s, p as usize) },
                Some((s, slab)),
            ),
            ObjectLookup::Large(head) => {
                // SAFETY: the head of a live large block.
                let bytes = PAGE_SIZE << unsafe { head.as_ref() }.order();
                (bytes, bytes, None)
            }
            ObjectLookup::Bad(_) => {
                // SAFETY: reports the bad pointer; frees nothing.
                unsafe { self.kfree(cpu, p, acct) };
                return None;
            }
        };
        if new_size <= cap {
            // In place (as the kernel's __do_krealloc: while the object holds it).
            // The new request (and kmalloc red zone) of a recording cache, set before
            // growing bytes are zeroed and after shrinking ones are: the zeroed bytes
            // never lie in the red zone `validate` checks meanwhile, nor after.
            let record = || {
                if let Some((s, _)) = slab_cache {
                    // SAFETY: `p` is the caller's object of `s` (the function's
                    // contract; `lookup` found its cache).
                    unsafe { self.slub.set_orig_size(s, p as usize, new_size) };
                }
            };
            if new_size > old {
                record();
            }
            if gfp.contains(Gfp::ZERO) && new_size != old {
                let (from, to) = (old.min(new_size), old.max(new_size));
                // SAFETY: inside our own object.
                unsafe { ptr::write_bytes(p.add(from), 0, to - from) };
            }
            if new_size <= old {
                record();
            }
            // SAFETY: non-null checked above.
            return Some(unsafe { NonNull::new_unchecked(p) });
        }
        let q = alloc(new_size)?;
        // SAFETY: both are ours and distinct; `old` bytes of `p` are valid, `q` has
        // more room.
        unsafe { ptr::copy_nonoverlapping(p, q.as_ptr(), old) };
        match slab_cache {
            Some((s, slab))
                // SAFETY: `lookup` found `slab`, a slab head.
                if cap >= OUTGROWN_MIN && unsafe { outgrown_to_slab(s.config(), slab) } =>
            {
                // SAFETY: an uncharged object of `s` in `slab`, ours to give up.
                unsafe { self.slub.free_outgrown(cpu, s, slab, p as usize) };
            }
            _ => {
                // SAFETY: ours to give up.
                unsafe { self.kfree(cpu, p, acct) };
            }
        }
        Some(q)
    }
}

/// The smallest class whose objects a `krealloc` that outgrows them frees with
/// [`Slub::free_outgrown`] (past the barn, to their slabs): from here up the copy
/// costs more than the slab's CAS, and the memory the barn would hold back matters.
/// Measured on 1,000 buffers doubled from 8 B to 16 KiB (`global` realloc_grow): a run
/// touches 12.8 MB and misses a 16 MiB cache 52,000 times, against 15.6 MB and 112,000
/// with every free to the sheaves and barns; starting at 1 KiB instead left 0.6 MB and
/// 20,000 misses more (measured on the first form of this path; BENCHMARKS.md,
/// "Realloc growth frees to the slab").
pub const OUTGROWN_MIN: usize = 256;

/// Whether an outgrown object of a cache with config `cfg`, in slab `slab`, goes to
/// [`Slub::free_outgrown`]: not when the cache is off the fast paths (slub_debug: its
/// frees keep their checks) or the slab may hold charged objects (their free
/// uncharges).
///
/// # Safety
/// As [`has_obj_exts`]: `slab` is a page descriptor of a live allocator.
#[inline]
pub unsafe fn outgrown_to_slab(cfg: &CacheConfig, slab: NonNull<Page>) -> bool {
    // SAFETY: forwarded from the caller.
    !cfg.off_fast_paths() && !unsafe { has_obj_exts(slab) }
}

/// `kmalloc_large`: a compound block of 2^order pages from the buddy allocator
/// (an interior pointer finds its head: `PageFlags::COMPOUND`). At a step of the
/// page blocks' growth, the barns' decay runs (`Slub::note_block_growth`). Out of
/// line, with only what it needs, so the kmalloc fast path carries nothing for it.
#[cold]
#[inline(never)]
fn kmalloc_large<P: Platform>(
    slub: Slub<'_, P>,
    cpu: Option<CpuRef<'_>>,
    size: usize,
    gfp: Gfp,
    nid: Option<usize>,
) -> Option<NonNull<u8>> {
    if size > KMALLOC_MAX_SIZE {
        return None;
    }
    let pages = slub.pages;
    let order = crate::page::get_order(size);
    slub.note_block_growth(cpu, order);
    let page = pages.alloc_pages_node(cpu, gfp | Gfp::COMP, order, nid)?;
    Some(pages.page_address(page))
}

/// Reports a pointer `kfree` refused, naming its cache when it lies in a slab.
#[cold]
#[inline(never)]
fn report_bad_free<P: Platform>(slub: Slub<'_, P>, p: *mut u8, why: &str) {
    // SAFETY: the name is printed at once; the caller frees `p`, which it claims is
    // its own (if it is, its cache lives).
    match unsafe { slub.cache_of(p) } {
        Some(s) => slub.report(s, slub.pages.virt_to_head_page(p), why, p as usize),
        None => slub.report_named("kmalloc", None, why, p as usize),
    }
}

/// A small stack buffer for cache names.
struct NameBuf {
    buf: [u8; 32],
    len: usize,
}

impl NameBuf {
    fn new() -> Self {
        Self {
            buf: [0; 32],
            len: 0,
        }
    }
    fn clear(&mut self) {
        self.len = 0;
    }
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("?")
    }
}

impl NameBuf {
    /// Appends `bytes` (ASCII), cut at the buffer's end.
    fn push(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
    }
}

#[cfg(test)]
mod tests;
