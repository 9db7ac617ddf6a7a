//! SLUB statistics (`enum stat_item`): the items counted per CPU area per cache and
//! their names in `/sys/kernel/slab/<cache>/`.

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
