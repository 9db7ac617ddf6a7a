//! Resizing an allocated block where it stands (`grow_in_place`, `shrink_in_place`):
//! realloc of a page run without copying, by taking the following free buddies or
//! freeing the upper halves.
//!
//! Locking: called with no page-layer lock held; growing takes the zone lock to take
//! the buddies off the free lists, shrinking frees through `free_pages`. See the lock
//! order in lib.rs.

use super::alloc::free_page_is_bad;
use super::block_growth::block_pages;
use super::descriptor::{Page, PageFlags, MAX_ORDER};
use super::PageAllocator;
use crate::gfp::Gfp;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::vmstat::{VmEvent, ZoneStat};
use core::ptr::NonNull;

impl<P: Platform> PageAllocator<P> {
    /// Grows the allocated block of 2^`old` pages at `page` to 2^`new` pages where it
    /// stands, taking the following buddy blocks if they are all free (realloc of a
    /// page run). On success the block is of order `new` (compound again if it was),
    /// its new part zeroed if `gfp` asks; on failure nothing changed.
    ///
    /// # Safety
    /// `page` is a descriptor of this allocator's memory, and if it heads an allocated
    /// block, that block is the caller's, of 2^`old` pages (as for
    /// [`PageAllocator::free_pages`]). Anything else is refused, unchanged.
    pub unsafe fn grow_in_place(
        &self,
        page: NonNull<Page>,
        old: usize,
        new: usize,
        gfp: Gfp,
    ) -> bool {
        if new <= old {
            return new == old;
        }
        let pfn = self.page_to_pfn(page);
        if new > MAX_ORDER || pfn & ((1 << new) - 1) != 0 {
            return false;
        }
        // SAFETY: the caller's block.
        let p = unsafe { page.as_ref() };
        if free_page_is_bad(p, old).is_some() {
            return false;
        }
        let compound = old > 0 && self.is_compound(page);
        let nid = self.page_to_nid(page);
        let zone = &self.zones[nid];
        let mut fa = zone.lock.lock();
        // Buddies that are still deferred (a fresh section's pages right after the
        // block, never listed) are listed first, the largest aligned blocks at the
        // range's start: exactly the buddies the block needs.
        while fa.deferred.0 < fa.deferred.1
            && fa.deferred.0 >= pfn + (1 << old)
            && fa.deferred.0 < pfn + (1 << new)
        {
            self.grow_deferred(&mut fa);
        }
        for o in old..new {
            // SAFETY: pfn is aligned to 2^new, so each buddy lies in the same section.
            let b = unsafe { &*self.pfn_to_page_raw(pfn + (1 << o)) };
            if !(b.is_buddy() && b.order() == o) {
                return false;
            }
        }
        let mut reported = [false; MAX_ORDER + 1];
        for (o, r) in reported.iter_mut().enumerate().take(new).skip(old) {
            *r = self.del_from_free_list(&mut fa, zone, pfn + (1 << o), o);
        }
        drop(fa);
        self.mod_zone_state(
            None,
            nid,
            ZoneStat::NrFreePages,
            -(((1 << new) - (1 << old)) as isize),
        );
        self.count_event(
            None,
            nid,
            VmEvent::PgAlloc,
            ((1 << new) - (1 << old)) as u64,
        );
        p.set_order(new);
        if compound || gfp.contains(Gfp::COMP) {
            self.prep_compound_page(page, new);
            let counted = if compound { block_pages(old) } else { 0 };
            self.count_block_alloc(block_pages(new) - counted);
        }
        if gfp.contains(Gfp::ZERO) {
            for (o, &r) in reported.iter().enumerate().take(new).skip(old) {
                if !r {
                    // SAFETY: the buddy of order `o` taken above is ours now; its
                    // descriptor is in the same memmap (pfn is aligned to 2^new).
                    unsafe {
                        self.zero_block(NonNull::new_unchecked(page.as_ptr().add(1 << o)), o)
                    };
                }
            }
        }
        true
    }

    /// Shrinks the allocated block of 2^`old` pages at `page` to 2^`new` pages where it
    /// stands, freeing the upper halves (realloc of a page run to a smaller size).
    ///
    /// # Safety
    /// `page` heads a block of this allocator of order `old`, and the caller gives up
    /// the pages past 2^`new`.
    pub unsafe fn shrink_in_place(
        &self,
        cpu: Option<CpuRef<'_>>,
        page: NonNull<Page>,
        old: usize,
        new: usize,
    ) {
        if new >= old {
            return;
        }
        // SAFETY: the caller's block.
        let p = unsafe { page.as_ref() };
        let compound = self.is_compound(page);
        self.destroy_compound_page(page, old);
        p.set_order(new);
        if compound {
            self.count_block_free(block_pages(old) - block_pages(new));
            if new > 0 {
                self.prep_compound_page(page, new);
            } else {
                p.set_flags(PageFlags::HEAD);
            }
        }
        for o in new..old {
            // SAFETY: the upper part is a block of order `o` inside ours, aligned to its
            // size; make it look allocated with that order, then free it.
            unsafe {
                let part = NonNull::new_unchecked(page.as_ptr().add(1 << o));
                part.as_ref().set_flags(PageFlags::HEAD);
                part.as_ref().set_order(o);
                self.free_pages(cpu, part, o);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::descriptor::PAGE_SIZE;
    use super::super::test_platform::allocator;
    use super::super::Config;
    use super::*;

    #[test]
    fn growing_takes_free_buddies_and_zeroes_what_was_used() {
        let pa = allocator(1, Config::default());
        let page = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        // Dirty the following page, then give it back (it stays resident).
        let next = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        assert_eq!(pa.page_to_pfn(next), pa.page_to_pfn(page) + 1);
        let next_addr = pa.page_address(next).as_ptr();
        // SAFETY: the test holds `next`.
        unsafe { next_addr.write_bytes(0xa5, PAGE_SIZE) };
        // SAFETY: allocated above with order 0.
        unsafe { pa.free_pages(None, next, 0) };
        let free = pa.nr_free_pages();
        // SAFETY: a descriptor of `pa`; a block it heads is the test's.
        assert!(unsafe { pa.grow_in_place(page, 0, 2, Gfp::ZERO) });
        assert_eq!(pa.nr_free_pages(), free - 3);
        // SAFETY: the block is the test's, now of order 2.
        let p = unsafe { page.as_ref() };
        assert_eq!((p.flags(), p.order()), (PageFlags::HEAD, 2));
        // SAFETY: as above; `next` is part of the block again.
        assert_eq!(unsafe { next_addr.read() }, 0, "the used buddy was zeroed");
        // Not aligned to the new size, or a buddy in use: nothing changes.
        let other = pa.alloc_pages(None, Gfp::KERNEL, 2).unwrap();
        // SAFETY: a descriptor of `pa`; a block it heads is the test's.
        assert!(!unsafe { pa.grow_in_place(page, 2, 3, Gfp::KERNEL) });
        assert_eq!(p.order(), 2);
        // SAFETY: allocated above with order 2.
        unsafe { pa.free_pages(None, other, 2) };
        // SAFETY: a descriptor of `pa`; a block it heads is the test's.
        assert!(unsafe { pa.grow_in_place(page, 2, 3, Gfp::KERNEL) });
        assert_eq!(p.order(), 3);
        // A page inside the block is not the head of an allocated block.
        // SAFETY: a descriptor inside the block.
        let inner = unsafe { NonNull::new_unchecked(page.as_ptr().add(1)) };
        // SAFETY: a descriptor of `pa`; a block it heads is the test's.
        assert!(!unsafe { pa.grow_in_place(inner, 0, 1, Gfp::KERNEL) });
    }

    #[test]
    fn shrinking_frees_the_upper_halves() {
        let pa = allocator(1, Config::default());
        let page = pa.alloc_pages(None, Gfp::COMP, 3).unwrap();
        let free = pa.nr_free_pages();
        // SAFETY: the test's block of order 3; it gives up the pages past the first two.
        unsafe { pa.shrink_in_place(None, page, 3, 1) };
        assert_eq!(pa.nr_free_pages(), free + 6);
        // SAFETY: the block's head and its one tail.
        let (head, tail) = unsafe { (page.as_ref(), &*page.as_ptr().add(1)) };
        assert_eq!(
            (head.flags(), head.order()),
            (PageFlags::HEAD | PageFlags::COMPOUND, 1),
            "still compound"
        );
        assert!(tail.flags().is_empty());
        let tail_addr = pa.page_address(page).as_ptr().wrapping_add(PAGE_SIZE);
        assert_eq!(pa.virt_to_head_page(tail_addr), Some(page));
        // A page given back is no longer found as part of the block.
        let gone = pa.page_address(page).as_ptr().wrapping_add(2 * PAGE_SIZE);
        assert_ne!(pa.virt_to_head_page(gone), Some(page));
        // SAFETY: now of order 1.
        unsafe { pa.free_pages(None, page, 1) };
        assert_eq!(pa.nr_free_pages(), free + 8);
    }
}
