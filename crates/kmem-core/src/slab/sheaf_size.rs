//! How big a cache's sheaves are and how many full ones its barn keeps: the kernel's
//! count rule for a sheaf's capacity (from the objects a slab holds, grown to fill the
//! sheaf's own kmalloc class), then bounds in bytes, so that what the per-CPU sheaves
//! and the barns keep for reuse stays small next to the objects in use. Computed once
//! per cache (`Kmem::kmem_cache_create` stores them in the cache's config).
//!
//! Owns no state; no locking.

use super::sheaf::SHEAF_HEADER;
use super::CacheConfig;

/// Most bytes of objects one sheaf holds: caches of objects above 1 KiB get smaller
/// sheaves (down to 2 objects), so that the freed objects a CPU keeps for reuse are
/// bounded in bytes, not only in count. Measured on the random_sizes mix: with the
/// kernel's count-based capacities, the sheaves of the medium classes held more
/// memory than the objects in use.
pub const SHEAF_MAX_OBJECT_BYTES: usize = 32 << 10;

/// Most bytes of objects the full sheaves of one barn hold, for caches of objects
/// up to [`BARN_SMALL_OBJECT`] bytes: a table, tree or batch of small objects freed
/// and rebuilt (tens of thousands of them) is exchanged at the barn in whole sheaves
/// instead of being flushed into its slabs and walked out of them again, two cache
/// misses an object (`global` hashmap_churn: 7.1 -> 5.3 ms; `slab`
/// kmalloc_then_kfree 10,000 frees 3.1–8.0 -> 2.5–5.0 ns each). kmalloc-32's barn then
/// keeps up to 1,057 sheaves of 124 objects: this bound decides for every class from
/// 16 bytes up, not [`super::barn::MAX_FULL_SHEAVES`] (at a cap of 256 sheaves,
/// `workloads` rebuild's 200,000 16-byte objects went 32,000 to the barn and the rest
/// into their slabs at a CAS each: frees 11–13 ns against 4 with all of them banked). 4 MiB rather than 1: at 1 MiB a batch of
/// 10,000 256-byte objects overflowed kmalloc-256's barn (68 sheaves of 60), so more
/// than half of each batch was flushed into slabs that then emptied, were discarded
/// and were made again for the next batch (106 instructions a malloc+free where
/// mimalloc runs 87; 6.7 -> 3.2 ns a free, mimalloc's 3.3). Idle sheaves still go back
/// after the decay interval ([`super::barn::BARN_KEEP_SHEAVES`]).
pub const BARN_MAX_OBJECT_BYTES: usize = 4 << 20;

/// [`BARN_MAX_OBJECT_BYTES`] for caches of larger objects: a few medium objects are
/// already many bytes, and measured on the random_sizes mix the medium classes' sheaves
/// and barns held more memory than the objects in use when they kept more.
pub const BARN_MAX_LARGE_OBJECT_BYTES: usize = 256 << 10;

/// The largest object size whose caches get the small-object barn bound (the size up
/// to which the kernel gives a sheaf at least 32 objects).
pub const BARN_SMALL_OBJECT: usize = 512;

/// A cache's sheaf capacity, chosen as the kernel chooses it — from the objects a slab
/// holds (clamped to 4..=120, and at least 32 for objects up to 512 bytes), then grown
/// until the sheaf fills its own kmalloc size class (kmalloc-32's sheaves hold 124);
/// then cut to [`SHEAF_MAX_OBJECT_BYTES`] of objects (at least 2), and, for objects
/// that pack a cache line (8, 16, 32 bytes), to whole lines of them.
/// Returns (capacity, bytes of the sheaf).
///
/// Whole lines: a refill of an empty sheaf from a new slab takes a sheaf's worth of
/// its objects by address and leaves the rest to the next refill, maybe another
/// CPU's (`fresh.rs`), so a capacity of whole lines splits the slab between lines.
/// kmalloc-8's 124 split one line between two CPUs every refill: with two threads
/// each churning small objects of its own, 11–18 of a thread's live blocks shared a
/// line with the other's (BENCHMARKS.md, "Sheaves back to the CPU that handed them
/// in"); it holds 120.
pub fn sheaf_capacity(cfg: &CacheConfig) -> (usize, usize) {
    let (cap, bytes) = sheaf_fill_class(cfg);
    let cap = cap.min((SHEAF_MAX_OBJECT_BYTES / cfg.size).max(2));
    let per_line = if cfg.size < 64 && 64 % cfg.size == 0 {
        64 / cfg.size
    } else {
        1
    };
    let whole = cap - cap % per_line;
    (if whole > 0 { whole } else { cap }, bytes)
}

/// How many full sheaves a barn of the cache keeps: [`barn::MAX_FULL_SHEAVES`],
/// or fewer when they would hold more than [`BARN_MAX_OBJECT_BYTES`] of objects
/// ([`BARN_MAX_LARGE_OBJECT_BYTES`] for objects above [`BARN_SMALL_OBJECT`] bytes),
/// at least 2.
///
/// [`barn::MAX_FULL_SHEAVES`]: super::barn::MAX_FULL_SHEAVES
pub fn barn_max_full(cfg: &CacheConfig) -> usize {
    let sheaf = (cfg.sheaf_capacity * cfg.size).max(1);
    (barn_max_bytes(cfg.size) / sheaf).clamp(2, super::barn::MAX_FULL_SHEAVES)
}

/// The bytes of objects a barn of `size`-byte objects may hold in full sheaves.
pub fn barn_max_bytes(size: usize) -> usize {
    if size <= BARN_SMALL_OBJECT {
        BARN_MAX_OBJECT_BYTES
    } else {
        BARN_MAX_LARGE_OBJECT_BYTES
    }
}

/// The kernel's rule for [`sheaf_capacity`]: (capacity, bytes) filling the class —
/// a class of whole cache lines (not kmalloc-96, whose objects lie 1.5 lines apart):
/// the sheaves of two CPUs, neighbours in their sheaf cache's slab, never share a line
/// that both write their slots on (the sheaves of kmalloc-4k, -5k and -6k were 96
/// bytes).
fn sheaf_fill_class(cfg: &CacheConfig) -> (usize, usize) {
    let want = cfg.objects.clamp(4, 120).max((16384 / cfg.size).min(32));
    let bytes = SHEAF_HEADER + want * core::mem::size_of::<usize>();
    let class = match bytes {
        0..=64 => 64,
        65..=128 => 128,
        129..=192 => 192,
        b => b.next_power_of_two(),
    };
    (
        (class - SHEAF_HEADER) / core::mem::size_of::<usize>(),
        class,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slab::SlabFlags;

    #[test]
    fn capacity_fills_the_sheaf_s_size_class() {
        for size in [8usize, 16, 32, 64, 96, 256, 512, 1024] {
            let cfg = CacheConfig::calculate("c", size, 8, SlabFlags::empty(), None, 2).unwrap();
            let (cap, bytes) = sheaf_capacity(&cfg);
            assert!(cap >= 4, "size {size}: capacity {cap}");
            assert!(
                cap >= cfg.objects.clamp(4, 120),
                "size {size}: below a slab's worth"
            );
            // The class is filled, but for what a whole line of objects leaves.
            let per_line = if size < 64 { 64 / size } else { 1 };
            assert_eq!(cap % per_line, 0, "size {size}: whole lines of objects");
            let unused = bytes - (SHEAF_HEADER + cap * 8);
            assert!(unused < per_line * 8, "size {size}: {unused} bytes unused");
            // A kmalloc size class of whole cache lines: a power of two, or 192.
            assert!(
                bytes.is_power_of_two() || bytes == 192,
                "size {size}: {bytes} bytes is no size class"
            );
        }
        let k32 = CacheConfig::calculate("c", 32, 8, SlabFlags::empty(), None, 2).unwrap();
        assert_eq!(sheaf_capacity(&k32).0, 124);
        let k8 = CacheConfig::calculate("c", 8, 8, SlabFlags::empty(), None, 2).unwrap();
        assert_eq!(sheaf_capacity(&k8).0, 120);
        // Larger objects: the byte bound may leave slots unused, and the sheaf is still
        // whole cache lines.
        for size in [2048usize, 3072, 4096, 5120, 6144, 7168, 8192] {
            let cfg = CacheConfig::calculate("c", size, 8, SlabFlags::empty(), None, 2).unwrap();
            let (cap, bytes) = sheaf_capacity(&cfg);
            assert_eq!(bytes % 64, 0, "size {size}: {bytes} bytes");
            assert!(SHEAF_HEADER + cap * 8 <= bytes, "size {size}");
        }
    }

    #[test]
    fn barns_of_small_objects_hold_more_objects_and_larger_ones_fewer_bytes() {
        let barn = |size: usize| {
            let mut cfg =
                CacheConfig::calculate("c", size, 8, SlabFlags::empty(), None, 2).unwrap();
            cfg.sheaf_capacity = sheaf_capacity(&cfg).0;
            let full = barn_max_full(&cfg);
            (
                full,
                full * cfg.sheaf_capacity,
                full * cfg.sheaf_capacity * size,
            )
        };
        // kmalloc-32: 1,057 sheaves of 124 objects, just under 4 MiB of them: the byte
        // bound decides, not the count.
        assert_eq!(barn(32), (1057, 1057 * 124, 1057 * 124 * 32));
        for size in [8usize, 16, 64, 128, 256, 512] {
            let (full, objects, bytes) = barn(size);
            // The bytes decide (within one sheaf of the bound), or, for the smallest
            // objects, the count.
            let sheaf_bytes = bytes / full;
            assert!(
                full == crate::slab::barn::MAX_FULL_SHEAVES
                    || bytes + sheaf_bytes > BARN_MAX_OBJECT_BYTES,
                "size {size}: {full} sheaves, {objects} objects"
            );
            assert!(bytes <= BARN_MAX_OBJECT_BYTES, "size {size}: {bytes} bytes");
        }
        // Past BARN_SMALL_OBJECT the bound is the larger objects' one.
        for size in [1024usize, 2048, 8192] {
            let (full, _, bytes) = barn(size);
            assert!(full >= 2);
            assert!(
                bytes <= BARN_MAX_LARGE_OBJECT_BYTES,
                "size {size}: {bytes} bytes"
            );
        }
    }

    #[test]
    fn large_objects_get_sheaves_and_barns_bounded_in_bytes() {
        for size in [2048usize, 4096, 8192, 10240, 65536, 1 << 20] {
            let mut cfg =
                CacheConfig::calculate("c", size, 8, SlabFlags::empty(), None, 2).unwrap();
            let (cap, bytes) = sheaf_capacity(&cfg);
            assert!(cap >= 2, "size {size}: capacity {cap}");
            assert!(
                cap * size <= SHEAF_MAX_OBJECT_BYTES.max(2 * size),
                "size {size}: {cap} objects"
            );
            // The sheaf's memory still has room for its slots.
            assert!(SHEAF_HEADER + cap * 8 <= bytes);
            cfg.sheaf_capacity = cap;
            let full = barn_max_full(&cfg);
            assert!((2..=super::super::barn::MAX_FULL_SHEAVES).contains(&full));
            assert!(full * cap * size <= barn_max_bytes(size).max(2 * cap * size));
        }
    }
}
