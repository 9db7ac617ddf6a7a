//! GFP ("get free pages") flags: what a caller allows the page allocator to do.
//!
//! Only the flags that mean something to kmem exist. Their names follow the kernel's
//! `__GFP_*` bits.

bitflags::bitflags! {
    /// Allocation flags, as the kernel's `gfp_t`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct Gfp: u32 {
        /// `__GFP_ZERO`: hand the memory out zeroed.
        const ZERO = 1 << 0;
        /// `__GFP_NOWARN`: fail quietly; no OOM report.
        const NOWARN = 1 << 1;
        /// `__GFP_HIGH`: an important request that may dip halfway below the min watermark.
        const HIGH = 1 << 2;
        /// `__GFP_THISNODE`: only the requested node; no fallback to other nodes.
        const THISNODE = 1 << 3;
        /// `__GFP_ACCOUNT`: charge the allocation to the current memory cgroup (reserved
        /// for the accounting layer; the page allocator passes it through).
        const ACCOUNT = 1 << 4;
        /// `__GFP_RECLAIMABLE`: the memory can be reclaimed (kmalloc uses the
        /// kmalloc-rcl caches).
        const RECLAIMABLE = 1 << 5;
        /// `__GFP_COMP`: a compound block: every tail page points at the head
        /// (`PG_TAIL`), so any address inside it finds the block.
        const COMP = 1 << 6;
    }
}

impl Gfp {
    /// `GFP_KERNEL`: an ordinary allocation.
    pub const KERNEL: Gfp = Gfp::empty();
    /// `GFP_ATOMIC`: may dip into the reserves; no warning is the caller's choice.
    pub const ATOMIC: Gfp = Gfp::HIGH;
}
