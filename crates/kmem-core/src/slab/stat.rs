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
