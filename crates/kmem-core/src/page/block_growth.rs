//! Memory's growth net of its frees: clocks for the slab layer's decay.
//!
//! The slab layer gives back the memory that idle caches hold (its barns' decay) when
//! an interval has passed or when memory grows by a step (`slab::barn`,
//! `DECAY_GROWTH_PAGES`). Its slabs are one source of growth; compound page blocks of
//! orders above the per-CPU lists' (kmalloc's large blocks of 64 KiB to 4 MiB, a
//! charged block, an oversized sheaf) are the other. Counting their allocations
//! would make a buffer allocated and freed per request look like steady growth, and
//! so would a program whose objects move from class to class (buffers grown by
//! `realloc`, every class's slabs made and discarded in turn), so both are counted
//! net of their frees, each on a [`NetGrowth`] of its own: the pages that are live,
//! the most that were live since its mark was last set, and the sum of the rises
//! above that mark: the growth. A block freed and allocated again rises above
//! nothing; a program whose blocks (or slabs) take a new high does.
//!
//! Two clocks, not one: slab pages freed in a phase lie scattered over the zone and
//! serve new slabs, but rarely a 2 MiB block. A phase of small objects freed in
//! random order, then blocks, takes new memory for its blocks while fewer slab pages
//! are live than at the first phase's peak; counted together, the decay that lets
//! the blocks take what the barns pinned came a block later (84 MiB at the `phase`
//! bench's peak against 82).
//!
//! The page allocator keeps the blocks' clock, counted where a compound block's life
//! begins and ends: `prep_new_page` (with `__GFP_COMP`), `free_pages` (a `COMPOUND`
//! head), and `grow_in_place` / `shrink_in_place` for the part that changes. A 2 MiB
//! block parked on a CPU area's pageblock list (`pcp.rs`) stays counted until it
//! leaves the list for the zone, so a buffer freed and allocated in turn costs no
//! shared counter: it is memory held for reuse, not freed. The
//! slab layer keeps the slabs' (`CacheList::slab_growth`), counted where a slab is
//! made and discarded (`Slub::count_growth`, `Slub::discard_slab`; a kept empty slab
//! stays counted). Slabs are not compound blocks at the page allocator's level (the
//! slab layer asks for none and marks its own tails).
//!
//! The marks are set back to the live pages when the slab layer's interval decay
//! runs ([`NetGrowth::set_mark`]), so memory that takes the place of memory freed
//! long ago counts again, at most once an interval for a buffer that comes and goes.
//!
//! Locking: none; relaxed atomics. A reading may be off by a block in flight on
//! another thread, and a mark set while another thread raises it may count a rise
//! twice: the clock is a heuristic, and each error is one block.

use super::pcp::{PCP_MAX_ORDER, PCP_THP_ORDER};
use super::PageAllocator;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::{AtomicUsize, Ordering::Relaxed};

/// One clock of growth net of frees (see the module).
///
/// Invariant (between concurrent updates): `high` is at least `live`'s value when
/// the mark was last set, and `growth` grew by every rise of `live` above `high`.
pub(crate) struct NetGrowth {
    /// Pages live.
    live: AtomicUsize,
    /// The most `live` was since the mark was set.
    high: AtomicUsize,
    /// The sum of `live`'s rises above `high`, in pages. Only grows (wrapping).
    growth: AtomicUsize,
}

impl NetGrowth {
    pub(crate) const fn new() -> Self {
        Self {
            live: AtomicUsize::new(0),
            high: AtomicUsize::new(0),
            growth: AtomicUsize::new(0),
        }
    }

    /// `pages` more pages live (0: nothing to count). Returns the growth before and
    /// after (equal unless they made a new high).
    #[inline]
    pub(crate) fn count_alloc(&self, pages: usize) -> (usize, usize) {
        if pages != 0 {
            let live = self.live.fetch_add(pages, Relaxed).wrapping_add(pages);
            if live > self.high.load(Relaxed) {
                return self.raise_high(live);
            }
        }
        let g = self.growth.load(Relaxed);
        (g, g)
    }

    #[cold]
    fn raise_high(&self, live: usize) -> (usize, usize) {
        let high = self.high.fetch_max(live, Relaxed);
        let rise = live.saturating_sub(high);
        let g = self.growth.fetch_add(rise, Relaxed);
        (g, g.wrapping_add(rise))
    }

    /// `pages` fewer pages live (0: nothing to count).
    #[inline]
    pub(crate) fn count_free(&self, pages: usize) {
        if pages != 0 {
            self.live.fetch_sub(pages, Relaxed);
        }
    }

    /// The growth so far, in pages: the sum of the rises of the live pages above the
    /// mark. Only grows, wrapping.
    #[inline]
    pub(crate) fn growth(&self) -> usize {
        self.growth.load(Relaxed)
    }

    /// What [`NetGrowth::growth`] would read once `pages` more are live.
    #[inline]
    pub(crate) fn growth_with(&self, pages: usize) -> usize {
        let live = self.live.load(Relaxed).wrapping_add(pages);
        let rise = live.saturating_sub(self.high.load(Relaxed));
        self.growth.load(Relaxed).wrapping_add(rise)
    }

    /// The pages live.
    pub(crate) fn live(&self) -> usize {
        self.live.load(Relaxed)
    }

    /// Sets the mark to the live pages: from now on only rises above them count.
    pub(crate) fn set_mark(&self) {
        self.high.store(self.live.load(Relaxed), Relaxed);
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
        self.block_growth.count_alloc(pages);
    }

    /// `pages` fewer pages of live compound blocks (0: nothing to count).
    #[inline]
    pub(super) fn count_block_free(&self, pages: usize) {
        self.block_growth.count_free(pages);
    }

    /// The page blocks' growth so far, in pages: the sum of the rises of their live
    /// pages above the mark (see the module). Only grows, wrapping.
    #[inline]
    pub fn block_growth(&self) -> usize {
        self.block_growth.growth()
    }

    /// What [`PageAllocator::block_growth`] would read once `cpu`'s owner has taken a
    /// compound block of order `order` more: for a caller that acts on a step of it
    /// before it takes the block. A block its pageblock list holds counts already.
    #[inline]
    pub fn block_growth_with(&self, cpu: Option<CpuRef<'_>>, order: usize) -> usize {
        let parked = order == PCP_THP_ORDER
            && cpu.is_some_and(|c| self.zone_pcp(c, self.local_node(cpu)).thp_blocks() > 0);
        let pages = if parked { 0 } else { block_pages(order) };
        self.block_growth.growth_with(pages)
    }

    /// Pages of live compound blocks of orders above the per-CPU lists', those parked
    /// on the per-CPU pageblock lists included.
    pub fn block_pages_live(&self) -> usize {
        self.block_growth.live()
    }

    /// Sets the blocks' mark to their live pages: from now on only rises above them
    /// count (the slab layer's interval decay calls it).
    pub fn set_block_growth_mark(&self) {
        self.block_growth.set_mark();
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
        assert_eq!(pa.block_growth_with(None, 9), 512, "no new high");
        assert_eq!(pa.block_growth_with(None, 10), 1024, "a rise of 512");
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
        // SAFETY: a descriptor of `pa`; a block it heads is the test's.
        assert!(unsafe { pa.grow_in_place(p, 3, 6, Gfp::KERNEL) });
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
        // SAFETY: a descriptor of `pa`; a block it heads is the test's.
        assert!(unsafe { pa.grow_in_place(q, 4, 5, Gfp::COMP) });
        assert_eq!(pa.block_pages_live(), 32);
        // SAFETY: ours, of order 5.
        unsafe { pa.free_pages(None, q, 5) };
        assert_eq!(pa.block_pages_live(), 0);
    }
}
