//! Cache layout (`calculate_sizes`, `calculate_order`): where each object, its free
//! pointer, red zones and tracks sit in a slot, how many objects a slab of which order
//! holds. Fixed when a cache is created; no locking.

use super::*;
use crate::page::{MAX_ORDER, PAGE_SIZE};

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
///
/// `repr(C)`, the fields the fast paths read first: a cache is 64-byte aligned and
/// starts with its config, so an allocation or free reads one cache line of it.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct CacheConfig {
    /// Which fast path the cache runs (sheaves, and how; or the CPU slab).
    pub fast: FastPath,
    /// How the per-CPU freelists are reached (owner only, lockless CAS, or the
    /// platform's restartable sequences).
    pub access: PerCpuAccess,
    /// For an accounted kmalloc cache (`kmalloc-cg-*`) on a sheaf fast path, its
    /// index among them, the class of its objcg sheaves; [`NO_OBJCG_CLASS`] for every
    /// other cache. Set once at boot; read by a charged free from the line it reads
    /// anyway (in the padding before `flags`).
    pub(crate) objcg_class: u8,
    /// Creation flags.
    pub flags: SlabFlags,
    /// Bytes per object in the slab, free pointer and alignment included (`size`).
    pub size: usize,
    /// `PAGE_SIZE << order`, kept so the fast paths need no shift.
    slab_size: usize,
    /// The multiplier of the object-start test ([`start_test`]).
    start_mul: u64,
    /// The bound of the object-start test ([`start_test`]).
    start_limit: u64,
    /// Offset of the [`KmemCacheCpu`] in every CPU area.
    pub cpu_offset: usize,
    /// The cache's sheaf tag on the inline sheaf path: what its slabs' pages carry in
    /// the page-tag table, `cpu_offset - CPU_AREA_ZERO_LINE`, when the cache runs
    /// [`FastPath::Sheaf`], else 0, the tag of the CPU areas' zero line, whose sheaves
    /// are always empty (`state::sheaf_offset`). `kmem_cache_alloc`'s inline pop
    /// goes to it with no test of the fast path's kind, and `kmem_cache_free`'s
    /// compares it with the page's tag as it is. Set with the config
    /// ([`CacheConfig::with_inline_tag`]); 0 too for the accounted kmalloc caches
    /// with objcg sheaves, whose uncharged allocations must take a path that marks
    /// their slabs (`KmemCache::set_objcg_class`, `Slub::note_uncharged`), though
    /// their slabs carry the tag: `kfree`'s inline path takes their objects, while
    /// `kmem_cache_free` on such a cache, which compares this tag, takes the regular
    /// path.
    pub(crate) inline_tag: usize,
    /// Slots of the cache's sheaves (0: no sheaves, the CPU-slab path).
    pub sheaf_capacity: usize,
    /// Offset of the free pointer in a free object (the CPU-slab fast path reads it
    /// with the hardening words, on the line after).
    pub offset: usize,
    /// `2^32 / size`, rounded up: `off * reciprocal >> 32` is the object index.
    pub(super) reciprocal: u64,
    /// Objects per slab (`oo_objects`).
    pub objects: usize,
    /// `objects * size`: the end of the last object's slot in a slab.
    objects_end: usize,
    name: [u8; CACHE_NAME_LEN],
    name_len: usize,
    /// The size the user asked for (`object_size`).
    pub object_size: usize,
    /// Object alignment.
    pub align: usize,
    /// Slab order (`oo_order`).
    pub order: usize,
    /// Whether objects of twice `size` get slabs of this `order` too (up to
    /// kmalloc-128 and from kmalloc-1536 to kmalloc-8k in the sheaves design, on 32 KiB
    /// slabs like the classes twice their size): a slab that `Slub::free_outgrown`
    /// empties then serves the larger class's next slab as it is, and goes to the
    /// CPU's page lists, not to the zone to merge.
    pub doubled_same_order: bool,
    /// Node partial slabs kept even when empty (`min_partial`).
    pub min_partial: usize,
    /// Most slabs on a CPU's partial list (`cpu_partial_slabs`).
    pub cpu_partial_slabs: usize,
    /// Runs once on every object when its slab is made.
    pub ctor: Option<Ctor>,
    /// Bytes of left red zone before each object (debug caches with Z; else 0): an
    /// object starts `red_left` bytes into its slot.
    pub red_left: usize,
    /// End of the right red zone, from the object's start (debug caches with Z).
    pub rz_end: usize,
    /// Offset of the two tracks (alloc, free) from the object's start (with U).
    pub track_off: usize,
    /// Debug caches with red zones or tracks: offset from the object of the word that
    /// holds the size the caller asked for (kmalloc's `orig_size`; the object size for
    /// `kmem_cache_alloc`), after the tracks; 0: none.
    pub orig_off: usize,
    /// Freelist hardening: a stored free pointer is `ptr ^ random ^ (swab(address of
    /// the pointer) & harden_mask)` (CONFIG_SLAB_FREELIST_HARDENED); 0 and 0 when off.
    pub random: usize,
    /// All ones when hardened, else 0.
    pub harden_mask: usize,
    /// Most full sheaves a barn of this cache keeps (see `sheaf_size::barn_max_full`).
    pub barn_max_full: usize,
    /// The cache (a `&'static KmemCache` as an address) whose objects hold this
    /// cache's sheaves; 0 without sheaves.
    pub(crate) sheaf_cache: usize,
}

// The fast paths' fields share the first cache line.
const _: () = assert!(core::mem::offset_of!(CacheConfig, sheaf_capacity) + 8 <= 64);

/// The objcg class byte of a cache without objcg sheaves ([`CacheConfig::objcg_class()`]
/// is `None`).
pub(crate) const NO_OBJCG_CLASS: u8 = u8::MAX;

// The objcg class shares the first word with the fast path's kind.
const _: () = assert!(core::mem::offset_of!(CacheConfig, objcg_class) < 8);

/// How far into an object its free pointer may sit. The kernel puts it in the middle
/// (`s->offset = ALIGN_DOWN(object_size / 2, sizeof(void *))`), away from both ends, so
/// that a small overflow of the previous object or a write through a stale pointer to
/// the start misses it. For objects above a page that puts it on the object's second
/// page or beyond: every free to the slab then writes a page the program may never
/// have touched (a 16 KiB buffer of which the first few KiB were used), which costs a
/// page fault and resident memory. Half a page in keeps it clear of both ends and on
/// the first page. Measured: `global` realloc_grow (1,000 buffers doubled from 8 B to
/// 16 KiB, half of each written) held 26 MB resident against mimalloc's 13.
pub const FREEPTR_MAX_OFFSET: usize = PAGE_SIZE / 2;

/// The object-start test for objects of `size` bytes, `objects` to a slab: a
/// multiplier `m` and a bound `l` such that, for every offset `off` below the slab's
/// size (at most 4 MiB), `off * m` (mod 2^64) is below `l` exactly when `off` is a
/// multiple of `size` below `objects * size`.
///
/// Why (Lemire, Kaser and Kurz's divisibility test, with the index folded in): let
/// `m = ceil(2^64 / size)` and `e = m * size - 2^64`, so `0 <= e < size`; for a power
/// of two (`e` would be 0) take `m = 2^64 / size + 1` instead, so `e = size`. Then:
/// - `off = i * size`: `off * m = i * 2^64 + i * e`, so the product is `i * e`
///   (below 2^22: no wrap), which is below `l = objects * e` exactly when
///   `i < objects`.
/// - `off = i * size + r`, `0 < r < size`: the product is `i * e + r * m`, where
///   `2^64 / size <= r * m < 2^64 - 2^64 / size + size`, so it lies in
///   `[2^64 / size, 2^64)`, at least 2^43 for sizes up to 2 MiB: above any `l`.
pub(crate) fn start_test(size: usize, objects: usize) -> (u64, u64) {
    let size = size as u64;
    let m = if size.is_power_of_two() {
        (u64::MAX / size).wrapping_add(2)
    } else {
        u64::MAX / size + 1
    };
    let e = m.wrapping_mul(size);
    (m, e * objects as u64)
}

impl CacheConfig {
    pub(super) const EMPTY: CacheConfig = CacheConfig {
        inline_tag: 0,
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
        start_mul: 0,
        start_limit: 0,
        objects_end: 0,
        red_left: 0,
        rz_end: 0,
        track_off: 0,
        orig_off: 0,
        random: 0,
        harden_mask: 0,
        access: PerCpuAccess::Owned,
        objcg_class: NO_OBJCG_CLASS,
        fast: FastPath::CpuSlab,
        sheaf_capacity: 0,
        barn_max_full: 0,
        sheaf_cache: 0,
        doubled_same_order: false,
    };

    /// The config with its `inline_tag` worked out from its fast path and
    /// `cpu_offset` (both final by the time a cache's config is set).
    pub(crate) fn with_inline_tag(mut self) -> Self {
        self.inline_tag = super::state::sheaf_tag_of(&self) as usize;
        self
    }

    /// The cache's name.
    pub fn name(&self) -> &str {
        core::str::from_utf8(&self.name[..self.name_len]).unwrap_or("?")
    }

    /// The class of the objcg sheaves that keep this cache's charged objects between
    /// a free and the next allocation (its index among the accounted kmalloc caches),
    /// or `None` for a cache without them.
    pub fn objcg_class(&self) -> Option<usize> {
        (self.objcg_class != NO_OBJCG_CLASS).then_some(self.objcg_class as usize)
    }

    /// The index of the object whose slot starts `off` bytes into its slab (its
    /// left red zone included).
    #[inline]
    pub fn obj_to_index(&self, off: usize) -> usize {
        ((off as u64 * self.reciprocal) >> 32) as usize
    }

    /// What [`CacheConfig::obj_to_index`] of an address needs, for a loop that keeps
    /// it in registers: the slab's mask (`slab_bytes() - 1`) and the multiplier; the
    /// index of the object at `a` is `((a & mask) * mul) >> 32`.
    #[inline]
    pub(crate) fn index_parts(&self) -> (usize, u64) {
        (self.slab_size - 1, self.reciprocal)
    }

    /// Whether `off` bytes into a slab is where an object's slot starts (its left red
    /// zone included): a multiple of the size, before the end of the last object.
    /// Any `off` (a wrapped one too); see [`CacheConfig::starts_object_in_slab`].
    #[inline]
    pub fn is_object_start(&self, off: usize) -> bool {
        off < self.objects_end && self.starts_object_in_slab(off)
    }

    /// [`CacheConfig::is_object_start`] for an `off` below the slab's size (a
    /// pointer's low bits): one multiplication and one comparison, the free fast
    /// paths' object check (see [`start_test`]).
    #[inline]
    pub fn starts_object_in_slab(&self, off: usize) -> bool {
        (off as u64).wrapping_mul(self.start_mul) < self.start_limit
    }

    /// The object-start test's multiplier and bound, for the per-CPU copy of the
    /// checks ([`CacheConfig::starts_object_in_slab`]).
    #[inline]
    pub(crate) fn start_test(&self) -> (u64, u64) {
        (self.start_mul, self.start_limit)
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

    /// Whether the cache's slabs name its per-CPU sheaves in their pages (the sheaf
    /// tag, see `slab::state::sheaf_offset`): caches on the inline sheaf path and on
    /// the restartable sequences, whose front-end frees go from the page to the CPU's
    /// sheaf.
    #[inline]
    pub fn tags_slabs(&self) -> bool {
        matches!(self.fast, FastPath::Sheaf | FastPath::SheafRseq)
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

    /// Gives a cache of objects up to [`SMALL_SLAB_OBJECT_MAX`] bytes slabs of
    /// [`SMALL_OBJECT_SLAB_ORDER`] instead of the kernel's order (why: there). For
    /// caches on the sheaf fast paths only, after their sheaf capacity was chosen from
    /// the kernel's slab (the sheaves, what a CPU and a barn keep, stay as they were).
    /// The others keep the kernel's layout: slub_debug caches; the CPU-slab design,
    /// which keeps a slab per CPU; and accounted caches (`kmalloc-cg-*`,
    /// `SLAB_ACCOUNT`), whose slabs a memory cgroup has to itself more often the fewer
    /// objects they hold (trusted slabs: `memcontrol`).
    ///
    /// `min_partial`, the empty slabs a node keeps on its partial list, stays the
    /// kernel's count (5 for these sizes): scaled to the bytes of five one-page slabs
    /// (one slab), the frees and allocations of 10,000 8–128 B objects at a time ran
    /// 6–14% slower (`slab` kmalloc_then_kfree), the emptied slabs going to the kept
    /// list and back.
    pub fn widen_small_slabs(&mut self) {
        if self.size > SMALL_SLAB_OBJECT_MAX
            || self.order >= SMALL_OBJECT_SLAB_ORDER
            || self.flags.contains(SlabFlags::ACCOUNT)
            || self.off_fast_paths()
        {
            return;
        }
        let order = SMALL_OBJECT_SLAB_ORDER;
        let objects = ((PAGE_SIZE << order) / self.size).min(u16::MAX as usize);
        debug_assert!(objects <= MAX_OBJS_PER_SLAB, "{} objects", objects);
        self.order = order;
        self.slab_size = PAGE_SIZE << order;
        self.objects = objects;
        self.objects_end = objects * self.size;
        (self.start_mul, self.start_limit) = start_test(self.size, objects);
        // Twice the size is widened too when it is small, else it keeps its order.
        self.doubled_same_order = 2 * self.size <= SMALL_SLAB_OBJECT_MAX;
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
        let (mut red_left, mut rz_end, mut track_off, mut orig_off) = (0, 0, 0, 0);
        // The free pointer: in the middle of the object (a use-after-free write at
        // the start does not hit it; at most FREEPTR_MAX_OFFSET in, see there), or
        // after the object when a constructor's contents must survive while the
        // object is free, or when debugging (poison and red zones own every byte of
        // the object).
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
                size += 2 * crate::slab::debug::TRACK_SIZE;
            }
            if flags.intersects(SlabFlags::RED_ZONE | SlabFlags::STORE_USER) {
                // orig_size: red zones start at the requested size, and sites and
                // leak reports show it.
                orig_off = size;
                size += word;
            }
            size += red_left;
            off
        } else if ctor.is_some() {
            let off = size;
            size += word;
            off
        } else {
            ((object_size / 2) & !(word - 1)).min(FREEPTR_MAX_OFFSET)
        };
        size = size.next_multiple_of(align);
        let (order, objects) = calculate_order(size, nr_cpus)?;
        debug_assert!(objects <= MAX_OBJS_PER_SLAB, "{size} B: {objects} objects");
        let mut cfg = CacheConfig {
            object_size,
            size,
            align,
            offset,
            order,
            slab_size: PAGE_SIZE << order,
            objects,
            doubled_same_order: calculate_order(2 * size, nr_cpus).map(|(o, _)| o) == Some(order),
            // Empty slabs kept on the node: the kernel's 5..10, but none for slabs
            // beyond SLUB_MAX_ORDER (up to 4 MiB each, which sheaves and barns
            // already keep from churning).
            min_partial: if order > SLUB_MAX_ORDER {
                0
            } else {
                ((usize::BITS - 1 - size.leading_zeros()) as usize / 2).clamp(5, 10)
            },
            cpu_partial_slabs: 0,
            flags,
            ctor,
            reciprocal: (1u64 << 32).div_ceil(size as u64),
            start_mul: start_test(size, objects).0,
            start_limit: start_test(size, objects).1,
            objects_end: objects * size,
            red_left,
            rz_end,
            track_off,
            orig_off,
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
///
/// Objects above [`SLUB_LARGE_OBJECT`] (kmem's medium kmalloc classes, 10 KiB to
/// 1 MiB, and caches that large) would fit a `SLUB_MAX_ORDER` slab once or twice,
/// wasting up to half of it and making every few allocations a new slab: they get the
/// smallest order up to `MAX_ORDER` that holds four of them (then two, then one) with
/// at most 1/8 (then 1/4) of waste, except those that fit a `SLUB_MAX_ORDER` slab twice
/// (see `calculate_large_order`).
pub fn calculate_order(size: usize, nr_cpus: usize) -> Option<(usize, usize)> {
    if size > SLUB_LARGE_OBJECT {
        return calculate_large_order(size);
    }
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

/// [`calculate_order`] for objects above [`SLUB_LARGE_OBJECT`]. Those that fit a
/// `SLUB_MAX_ORDER` slab twice with at most 1/8 of waste (kmalloc-16k) stay on it, the
/// order of the classes below them: a slab one of these classes empties then serves
/// any of them without waiting for its buddy (a buffer grown from 8 KiB to 16 KiB;
/// BENCHMARKS.md, "Realloc growth frees to the slab").
fn calculate_large_order(size: usize) -> Option<(usize, usize)> {
    let slab = PAGE_SIZE << SLUB_MAX_ORDER;
    if slab / size >= 2 && slab % size <= slab / 8 {
        return Some((SLUB_MAX_ORDER, slab / size));
    }
    for min_objects in [4, 2, 1] {
        for fraction in [8, 4] {
            for order in SLUB_MAX_ORDER..=MAX_ORDER {
                let slab = PAGE_SIZE << order;
                if slab / size >= min_objects && slab % size <= slab / fraction {
                    return Some((order, slab / size));
                }
            }
        }
    }
    (size <= PAGE_SIZE << MAX_ORDER).then(|| (MAX_ORDER, (PAGE_SIZE << MAX_ORDER) / size))
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
    fn small_objects_widen_to_32_kib_slabs_and_the_rest_keep_the_kernel_s() {
        let widened = |size: usize, flags: SlabFlags| {
            let mut cfg = CacheConfig::calculate("c", size, 8, flags, None, 2).unwrap();
            let kernel = (cfg.order, cfg.objects, cfg.min_partial);
            cfg.widen_small_slabs();
            (kernel, cfg)
        };
        for size in [8usize, 16, 24, 32, 48, 64, 96, 128, 192, 256] {
            let ((order, objects, min_partial), cfg) = widened(size, SlabFlags::empty());
            assert!(
                order < SMALL_OBJECT_SLAB_ORDER && objects < cfg.objects,
                "{size}"
            );
            assert_eq!(cfg.order, SMALL_OBJECT_SLAB_ORDER);
            assert_eq!(cfg.slab_bytes(), PAGE_SIZE << SMALL_OBJECT_SLAB_ORDER);
            assert_eq!(cfg.objects, cfg.slab_bytes() / cfg.size, "{size}");
            assert_eq!(cfg.min_partial, min_partial, "{size}: the kernel's count");
            assert_eq!(
                cfg.doubled_same_order,
                2 * cfg.size <= SMALL_SLAB_OBJECT_MAX
            );
            // The object-start test covers the larger slab: every object's offset and
            // none between or past the last.
            for off in 0..cfg.slab_bytes() {
                let start = off % cfg.size == 0 && off / cfg.size < cfg.objects;
                assert_eq!(cfg.starts_object_in_slab(off), start, "{size} at {off}");
                assert_eq!(cfg.is_object_start(off), start, "{size} at {off}");
            }
        }
        // Larger objects, accounted and debug caches keep the kernel's layout.
        for (size, flags) in [
            (512, SlabFlags::empty()),
            (1024, SlabFlags::empty()),
            (32, SlabFlags::ACCOUNT),
            (64, SlabFlags::RED_ZONE),
        ] {
            let ((order, objects, _), cfg) = widened(size, flags);
            assert_eq!(
                (cfg.order, cfg.objects),
                (order, objects),
                "{size} {flags:?}"
            );
        }
    }

    #[test]
    fn no_slab_holds_more_objects_than_the_walks_bitmaps_have_bits() {
        // Every size from one byte to 4 KiB, then sizes a few KiB apart up to the
        // largest object, widened or not, plain, red-zoned (a larger slot) and
        // accounted (not widened): within `MAX_OBJS_PER_SLAB`, which the smallest
        // object on a widened slab reaches exactly. (Alignment and constructors only
        // make slots larger.)
        let mut most = 0;
        let sizes = (1..=4096).chain((4097..=MAX_OBJECT_SIZE).step_by(4093));
        for size in sizes {
            for flags in [SlabFlags::empty(), SlabFlags::RED_ZONE, SlabFlags::ACCOUNT] {
                let Some(mut cfg) = CacheConfig::calculate("c", size, 0, flags, None, 2) else {
                    continue;
                };
                cfg.widen_small_slabs();
                assert!(cfg.objects <= MAX_OBJS_PER_SLAB, "{size} {flags:?}");
                most = most.max(cfg.objects);
            }
        }
        assert_eq!(most, MAX_OBJS_PER_SLAB);
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
        let cfg = CacheConfig::calculate("c", 4096, 8, SlabFlags::empty(), None, 2).unwrap();
        assert_eq!(cfg.offset, 2048);
        // Above a page, half a page in: on the object's first page.
        for size in [8192usize, 16384, 1 << 20] {
            let cfg = CacheConfig::calculate("c", size, 8, SlabFlags::empty(), None, 2).unwrap();
            assert_eq!(cfg.offset, FREEPTR_MAX_OFFSET, "size {size}");
        }
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
    fn classes_from_2k_to_16k_share_one_slab_order() {
        // An emptied slab of any of them serves the others without a merge.
        for (size, objects) in [(2048usize, 16), (4096, 8), (8192, 4), (16384, 2)] {
            assert_eq!(
                calculate_order(size, 2),
                Some((SLUB_MAX_ORDER, objects)),
                "size {size}"
            );
        }
        // Above, four to a slab of a higher order; 12 KiB would waste a quarter of
        // an order-3 slab, so it gets a higher order too.
        assert_eq!(calculate_order(32768, 2), Some((5, 4)));
        let (order, objects) = calculate_order(12288, 2).unwrap();
        assert!(order > SLUB_MAX_ORDER && objects >= 4, "{order} {objects}");
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
    fn object_starts_are_exactly_the_multiples_of_the_size() {
        for size in [
            8usize,
            16,
            24,
            48,
            96,
            112,
            160,
            192,
            1000,
            1280,
            3584,
            4096,
            7168,
            65536,
            1 << 20,
        ] {
            let cfg = CacheConfig::calculate("c", size, 8, SlabFlags::empty(), None, 2).unwrap();
            for off in 0..cfg.slab_bytes() + 64 {
                let want = off % cfg.size == 0 && off / cfg.size < cfg.objects;
                assert_eq!(cfg.is_object_start(off), want, "size {size} off {off}");
                if off < cfg.slab_bytes() {
                    assert_eq!(
                        cfg.starts_object_in_slab(off),
                        want,
                        "size {size} off {off}"
                    );
                }
            }
            // Offsets that wrapped below zero (a pointer before a red zone) are refused.
            assert!(!cfg.is_object_start(usize::MAX - 7));
            assert!(!cfg.is_object_start(1 << 32));
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
