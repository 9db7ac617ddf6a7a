//! SLUB statistics (`enum stat_item`): the items counted per CPU area per cache and
//! their names in `/sys/kernel/slab/<cache>/`.

/// SLUB statistics (`enum stat_item`), counted per CPU area per cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum SlubStat {
    /// Allocation from the CPU freelist (the fast path).
    AllocFastpath = 0,
    /// Allocation that took the slow path.
    AllocSlowpath,
    /// Free onto the CPU freelist (the object was in the CPU slab).
    FreeFastpath,
    /// Free through `__slab_free` (a CAS on the slab state).
    FreeSlowpath,
    /// Free into a frozen slab (another CPU slab or a CPU partial slab).
    FreeFrozen,
    /// Free that put a full slab on a node partial list.
    FreeAddPartial,
    /// Free that emptied a node partial slab and took it off the list.
    FreeRemovePartial,
    /// CPU slab taken from a node partial list.
    AllocFromPartial,
    /// New slab allocated from the page allocator.
    AllocSlab,
    /// CPU freelist refilled from frees into the CPU slab.
    AllocRefill,
    /// CPU slab given up because the allocation asked for another node.
    AllocNodeMismatch,
    /// Slab given back to the page allocator.
    FreeSlab,
    /// CPU slab flushed (CPU offline, shrink, drain request).
    CpuslabFlush,
    /// CPU slab deactivated full.
    DeactivateFull,
    /// CPU slab deactivated empty (and freed).
    DeactivateEmpty,
    /// CPU slab deactivated to the head of a node partial list.
    DeactivateToHead,
    /// CPU slab deactivated to the tail of a node partial list.
    DeactivateToTail,
    /// CPU slab deactivated with objects freed into it by other CPUs.
    DeactivateRemoteFrees,
    /// CPU slab taken from the CPU partial list.
    CpuPartialAlloc,
    /// Slab put on the CPU partial list by a free.
    CpuPartialFree,
    /// Slab moved from a node partial list to the CPU partial list.
    CpuPartialNode,
    /// CPU partial list drained to the node lists (over its cap).
    CpuPartialDrain,
    /// Allocation from the CPU's main sheaf (counted per object only with statistics on).
    AllocCpuSheaf,
    /// Free onto the CPU's main sheaf (counted per object only with statistics on).
    FreeCpuSheaf,
    /// Sheaf refilled from slabs (one bulk allocation).
    SheafRefill,
    /// Sheaf flushed to slabs (one bulk free).
    SheafFlush,
    /// Main and spare sheaves swapped.
    SheafSwap,
    /// Full sheaf taken from the barn for an empty one.
    BarnGet,
    /// The barn had no full sheaf.
    BarnGetFail,
    /// Full sheaf handed to the barn.
    BarnPut,
    /// The barn had no room for a full sheaf (flushed instead).
    BarnPutFail,
    /// Sheaf allocated.
    SheafAlloc,
    /// Sheaf freed.
    SheafFree,
    /// Prefill served by a barn sheaf that held enough.
    SheafPrefillFast,
    /// Prefill served by the barn or a refill.
    SheafPrefillSlow,
    /// Prefill larger than the cache's sheaves.
    SheafPrefillOversize,
    /// Prefilled sheaf returned to the barn (or flushed when the barn is full).
    SheafReturnFast,
    /// Oversize (or sheafless cache's) prefilled sheaf returned to the slabs.
    SheafReturnSlow,
}

/// Number of [`SlubStat`] items.
pub const NR_SLUB_STAT: usize = 38;

/// A cache's counters of the contexts without a CPU area, one per [`SlubStat`] (those
/// with one count in their `kmem_cache_cpu`). Kept beside the cache's nodes
/// ([`super::NodeTable`]), not in the cache.
pub type SlubStats = [crate::sync::AtomicU64; NR_SLUB_STAT];

/// [`SlubStats`] all zero (a `const` for initialisers).
#[allow(clippy::declare_interior_mutable_const)]
pub const NEW_SLUB_STATS: SlubStats = [const { crate::sync::AtomicU64::new(0) }; NR_SLUB_STAT];

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
        SlubStat::AllocCpuSheaf,
        SlubStat::FreeCpuSheaf,
        SlubStat::SheafRefill,
        SlubStat::SheafFlush,
        SlubStat::SheafSwap,
        SlubStat::BarnGet,
        SlubStat::BarnGetFail,
        SlubStat::BarnPut,
        SlubStat::BarnPutFail,
        SlubStat::SheafAlloc,
        SlubStat::SheafFree,
        SlubStat::SheafPrefillFast,
        SlubStat::SheafPrefillSlow,
        SlubStat::SheafPrefillOversize,
        SlubStat::SheafReturnFast,
        SlubStat::SheafReturnSlow,
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
            SlubStat::AllocCpuSheaf => "alloc_cpu_sheaf",
            SlubStat::FreeCpuSheaf => "free_cpu_sheaf",
            SlubStat::SheafRefill => "sheaf_refill",
            SlubStat::SheafFlush => "sheaf_flush",
            SlubStat::SheafSwap => "sheaf_swap",
            SlubStat::BarnGet => "barn_get",
            SlubStat::BarnGetFail => "barn_get_fail",
            SlubStat::BarnPut => "barn_put",
            SlubStat::BarnPutFail => "barn_put_fail",
            SlubStat::SheafAlloc => "sheaf_alloc",
            SlubStat::SheafFree => "sheaf_free",
            SlubStat::SheafPrefillFast => "sheaf_prefill_fast",
            SlubStat::SheafPrefillSlow => "sheaf_prefill_slow",
            SlubStat::SheafPrefillOversize => "sheaf_prefill_oversize",
            SlubStat::SheafReturnFast => "sheaf_return_fast",
            SlubStat::SheafReturnSlow => "sheaf_return_slow",
        }
    }
}
