//! Cache creation flags (`SLAB_*`, include/linux/slab.h): below the slab layer so the
//! platform can choose flags for a cache (slub_debug's per-cache selection).

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
        /// `CONFIG_SLUB_STATS` for this cache: count every fast-path allocation and
        /// free too (`alloc_cpu_sheaf`, `free_cpu_sheaf`); slow-path items are always
        /// counted.
        const STATS = 1 << 20;
        /// All slub_debug flags: a cache with any of them leaves the fast paths.
        const DEBUG = Self::CONSISTENCY_CHECKS.bits() | Self::RED_ZONE.bits()
            | Self::POISON.bits() | Self::STORE_USER.bits() | Self::TRACE.bits();
    }
}
