//! Page blocks' growth, net of their frees: a clock for the layers above.
//!
//! The slab layer gives back the memory that idle caches hold (its barns' decay) when
//! an interval has passed or when memory grows by a step (`slab::barn`,
//! `DECAY_GROWTH_PAGES`). New slabs are one source of growth; compound page blocks of
//! orders above the per-CPU lists' (kmalloc's large blocks of 64 KiB to 4 MiB, a
//! charged block, an oversized sheaf) are the other. Counting their allocations
//! would make a buffer allocated and freed per request look like steady growth, so
//! they are counted net of their frees: [`BlockGrowth`] keeps the pages of such
//! blocks that are live, the most that were live since its mark was last set, and the
//! sum of the rises above that mark: the growth. A block freed and allocated again
//! rises above nothing; a program whose blocks take a new high does.
//!
//! The mark is set back to the live pages when the slab layer's interval decay runs
//! ([`PageAllocator::set_block_growth_mark`]), so blocks that take the place of memory
//! freed long ago count again, at most once an interval for a buffer that comes and
//! goes.
//!
//! Counted where a compound block's life begins and ends in the page allocator:
//! `prep_new_page` (with `__GFP_COMP`), `free_pages` (a `COMPOUND` head), and
//! `grow_in_place` / `shrink_in_place` for the part that changes. Slabs are not
//! compound blocks at that level (the slab layer asks for none, marks its own tails
//! and counts its own growth).
//!
//! Locking: none; relaxed atomics. A reading may be off by a block in flight on
//! another thread, and a mark set while another thread raises it may count a rise
//! twice: the clock is a heuristic, and each error is one block.

use super::pcp::PCP_MAX_ORDER;
use super::PageAllocator;
use crate::platform::Platform;
use crate::sync::{AtomicUsize, Ordering::Relaxed};

/// The page blocks' counters (see the module).
pub(crate) struct BlockGrowth {
    /// Pages of live compound blocks of orders above [`PCP_MAX_ORDER`].
    live: AtomicUsize,
    /// The most `live` was since the mark was set.
    high: AtomicUsize,
    /// The sum of `live`'s rises above `high`, in pages. Only grows (wrapping).
    growth: AtomicUsize,
}

impl BlockGrowth {
    pub(crate) const fn new() -> Self {
        Self {
            live: AtomicUsize::new(0),
            high: AtomicUsize::new(0),
            growth: AtomicUsize::new(0),
        }
    }
}

/// The pages a compound block of order `order` counts for: all of them above the
/// per-CPU lists' orders, none below (a block that small is a slab-sized request,
/// and the per-CPU path carries no shared counter).
#[inline(always)]
pub(super) fn block_pages(order: usize) -> usize {
    if order > PCP_MAX_ORDER {
        1 << order
    } else {
        0
    }
}

impl<P: Platform> PageAllocator<P> {
    /// `pages` more pages of live compound blocks (0: nothing to count).
    #[inline]
    pub(super) fn count_block_alloc(&self, pages: usize) {
        if pages == 0 {
            return;
        }
        let b = &self.block_growth;
        let live = b.live.fetch_add(pages, Relaxed).wrapping_add(pages);
        if live > b.high.load(Relaxed) {
            self.raise_block_high(live);
        }
    }

    #[cold]
    fn raise_block_high(&self, live: usize) {
        let b = &self.block_growth;
        let high = b.high.fetch_max(live, Relaxed);
        if live > high {
            b.growth.fetch_add(live - high, Relaxed);
        }
    }

    /// `pages` fewer pages of live compound blocks (0: nothing to count).
    #[inline]
    pub(super) fn count_block_free(&self, pages: usize) {
        if pages != 0 {
            self.block_growth.live.fetch_sub(pages, Relaxed);
        }
    }

    /// The page blocks' growth so far, in pages: the sum of the rises of their live
    /// pages above the mark (see the module). Only grows, wrapping.
    #[inline]
    pub fn block_growth(&self) -> usize {
        self.block_growth.growth.load(Relaxed)
    }

    /// What [`PageAllocator::block_growth`] would read once a compound block of order
    /// `order` more is live: for a caller that acts on a step of it before it takes
    /// the block.
    #[inline]
    pub fn block_growth_with(&self, order: usize) -> usize {
        let b = &self.block_growth;
        let live = b.live.load(Relaxed).wrapping_add(block_pages(order));
        let rise = live.saturating_sub(b.high.load(Relaxed));
        b.growth.load(Relaxed).wrapping_add(rise)
    }

    /// Pages of live compound blocks of orders above the per-CPU lists'.
    pub fn block_pages_live(&self) -> usize {
        self.block_growth.live.load(Relaxed)
    }

    /// Sets the mark to the live pages: from now on only rises above them count (the
    /// slab layer's interval decay calls it).
    pub fn set_block_growth_mark(&self) {
        let b = &self.block_growth;
        b.high.store(b.live.load(Relaxed), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_platform::allocator;
    use super::super::Config;
    use super::*;
    use crate::gfp::Gfp;

    #[test]
    fn a_block_freed_and_allocated_again_grows_nothing_past_its_first_time() {
        let pa = allocator(1, Config::default());
        for _ in 0..100 {
            let p = pa.alloc_pages(None, Gfp::COMP, 9).unwrap();
            // SAFETY: allocated just above with order 9.
            unsafe { pa.free_pages(None, p, 9) };
        }
        assert_eq!(pa.block_growth(), 512);
        assert_eq!(pa.block_pages_live(), 0);
        assert_eq!(pa.block_growth_with(9), 512, "no new high");
        assert_eq!(pa.block_growth_with(10), 1024, "a rise of 512");
        // The mark set where nothing is live: the next block counts again, once.
        pa.set_block_growth_mark();
        for _ in 0..10 {
            let p = pa.alloc_pages(None, Gfp::COMP, 9).unwrap();
            // SAFETY: as above.
            unsafe { pa.free_pages(None, p, 9) };
        }
        assert_eq!(pa.block_growth(), 1024);
    }

    #[test]
    fn new_highs_count_their_rise_and_only_compound_blocks_above_the_pcp_orders_count() {
        let pa = allocator(1, Config::default());
        let a = pa.alloc_pages(None, Gfp::COMP, 8).unwrap();
        let b = pa.alloc_pages(None, Gfp::COMP, 8).unwrap();
        assert_eq!((pa.block_pages_live(), pa.block_growth()), (512, 512));
        // SAFETY: allocated above with order 8.
        unsafe { pa.free_pages(None, a, 8) };
        // Back up to 512 live: no new high.
        let c = pa.alloc_pages(None, Gfp::COMP, 8).unwrap();
        assert_eq!(pa.block_growth(), 512);
        // Up to 768: a rise of 256.
        let d = pa.alloc_pages(None, Gfp::COMP, 8).unwrap();
        assert_eq!((pa.block_pages_live(), pa.block_growth()), (768, 768));
        // Not compound, or of a per-CPU list's order: not counted.
        let plain = pa.alloc_pages(None, Gfp::KERNEL, 8).unwrap();
        let small = pa.alloc_pages(None, Gfp::COMP, PCP_MAX_ORDER).unwrap();
        assert_eq!((pa.block_pages_live(), pa.block_growth()), (768, 768));
        // SAFETY: allocated above with these orders.
        unsafe {
            pa.free_pages(None, plain, 8);
            pa.free_pages(None, small, PCP_MAX_ORDER);
            for p in [b, c, d] {
                pa.free_pages(None, p, 8);
            }
        }
        assert_eq!(pa.block_pages_live(), 0);
    }

    #[test]
    fn blocks_resized_in_place_count_the_part_that_changed() {
        let pa = allocator(1, Config::default());
        // A fresh allocator: the block's buddies up to order 6 are free.
        let p = pa.alloc_pages(None, Gfp::COMP, 3).unwrap();
        assert_eq!(pa.block_pages_live(), 0, "a per-CPU order");
        assert!(pa.grow_in_place(p, 3, 6, Gfp::KERNEL));
        assert_eq!(pa.block_pages_live(), 64);
        // SAFETY: our block of order 6; the pages past 2^4 are given up.
        unsafe { pa.shrink_in_place(None, p, 6, 4) };
        assert_eq!(pa.block_pages_live(), 16);
        // SAFETY: now of order 4.
        unsafe { pa.free_pages(None, p, 4) };
        assert_eq!(pa.block_pages_live(), 0);
        // A plain block made compound by its grow counts from then on.
        let q = pa.alloc_pages(None, Gfp::KERNEL, 4).unwrap();
        assert_eq!(pa.block_pages_live(), 0);
        assert!(pa.grow_in_place(q, 4, 5, Gfp::COMP));
        assert_eq!(pa.block_pages_live(), 32);
        // SAFETY: ours, of order 5.
        unsafe { pa.free_pages(None, q, 5) };
        assert_eq!(pa.block_pages_live(), 0);
    }
}
