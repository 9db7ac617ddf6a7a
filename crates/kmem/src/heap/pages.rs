//! The page allocator interface on the process heap: `alloc_pages` (charged to the
//! thread's active memory cgroup), `alloc_pages_node`, `free_pages`, the bulk calls,
//! `page_address`/`virt_to_page`, draining per-CPU page lists, `trim`
//! (`malloc_trim`) and the heap's bound.
//!
//! No lock of its own: the CPU area's rules apply (see `cpu`), and the page
//! allocator's own below them.

use super::thread::active_objcg;
use super::Heap;
use kmem_core::page::PAGE_SHIFT;
use kmem_core::{Gfp, Page};
use std::ptr::NonNull;

impl Heap {
    /// Allocates 2^`order` pages on the local node through this thread's per-CPU lists,
    /// charged to the thread's active memory cgroup if it has one.
    #[inline]
    pub fn alloc_pages(&self, gfp: Gfp, order: usize) -> Option<NonNull<Page>> {
        let guard = self.cpu();
        let cpu = guard.get();
        if gfp.contains(Gfp::COMP) {
            // A page block (an aligned `malloc`'s, too): its growth runs the barns'
            // decay, as kmalloc's large blocks' does.
            self.kmem.slub().note_block_growth(cpu, order);
        }
        match active_objcg() {
            None => self.kmem.pages.alloc_pages(cpu, gfp, order),
            Some(cg) => self.kmem.memcg().alloc_pages_objcg(cpu, gfp, order, cg),
        }
    }

    /// Allocates 2^`order` pages on node `nid` (see
    /// [`kmem_core::PageAllocator::alloc_pages_node`]).
    pub fn alloc_pages_node(&self, gfp: Gfp, order: usize, nid: usize) -> Option<NonNull<Page>> {
        self.kmem
            .pages
            .alloc_pages_node(self.cpu().get(), gfp, order, Some(nid))
    }

    /// Frees pages from [`Heap::alloc_pages`] (uncharging them if they were charged).
    ///
    /// # Safety
    /// `page` came from this heap with this `order`, and the caller stops using it.
    #[inline]
    pub unsafe fn free_pages(&self, page: NonNull<Page>, order: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem.free_pages(self.cpu().get(), page, order) }
    }

    /// Fills the `None` slots of `pages` with order-0 pages (see
    /// [`kmem_core::PageAllocator::alloc_pages_bulk`]); returns the filled count.
    pub fn alloc_pages_bulk(&self, gfp: Gfp, pages: &mut [Option<NonNull<Page>>]) -> usize {
        let guard = self.cpu();
        let cpu = guard.get();
        let Some(cg) = active_objcg() else {
            return self.kmem.pages.alloc_pages_bulk(cpu, gfp, None, pages);
        };
        // Charged: page by page, each recording its group.
        let mut filled = pages.iter().filter(|p| p.is_some()).count();
        for slot in pages.iter_mut().filter(|p| p.is_none()) {
            match self.kmem.memcg().alloc_pages_objcg(cpu, gfp, 0, cg) {
                Some(p) => {
                    *slot = Some(p);
                    filled += 1;
                }
                None => break,
            }
        }
        filled
    }

    /// Frees order-0 pages in bulk; the slots become `None`.
    ///
    /// # Safety
    /// Every `Some` page came from this heap as an order-0 page and is no longer used.
    pub unsafe fn free_pages_bulk(&self, pages: &mut [Option<NonNull<Page>>]) {
        let guard = self.cpu();
        let cpu = guard.get();
        // Charged pages are uncharged and freed one by one; the rest in bulk.
        for slot in pages.iter_mut() {
            if let Some(p) = *slot {
                // SAFETY: a page of this heap (the caller's), live until freed below.
                if unsafe { self.kmem.memcg().page_objcg(p) }.is_some() {
                    // SAFETY: an order-0 page of ours, given up by the caller.
                    unsafe { self.kmem.free_pages(cpu, p, 0) };
                    *slot = None;
                }
            }
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem.pages.free_pages_bulk(cpu, pages) }
    }

    /// The memory a page descriptor stands for.
    #[inline]
    pub fn page_address(&self, page: NonNull<Page>) -> NonNull<u8> {
        self.kmem.pages.page_address(page)
    }

    /// The descriptor of the heap page holding `addr`, if the heap manages it.
    #[inline]
    pub fn virt_to_page(&self, addr: *const u8) -> Option<NonNull<Page>> {
        self.kmem.pages.virt_to_page(addr)
    }

    /// Drains this thread's per-CPU lists.
    pub fn drain_local(&self) {
        if let Some(c) = self.cpu().get() {
            self.kmem.pages.drain_local_pages(c);
        }
    }

    /// Asks every thread to drain its per-CPU lists at its next call, and drains ours.
    pub fn drain_all(&self) {
        self.kmem.pages.drain_all_pages(self.cpu().get());
    }

    /// `malloc_trim`: first what the caches keep for reuse goes back to the page
    /// allocator — the caller's sheaves and every barn flushed to their slabs, empty
    /// slabs freed ([`Heap::shrink_all`]; other threads drain at their next call) —
    /// then every free block is given back to the OS now and free sections go
    /// offline. Returns the pages given back.
    ///
    /// Also what a program can call between two phases: the objects an earlier phase
    /// freed in random order otherwise stay in the barns (up to 4 MiB a small class)
    /// and go round again, laid out as that phase left them (BENCHMARKS.md, "`global`
    /// after `workloads`").
    pub fn trim(&self) -> usize {
        self.shrink_all();
        self.trim_after_shrink()
    }

    /// [`Heap::trim`] for an allocation that found the heap at its bound: the caches'
    /// walks only if the cache list's lock comes within a bounded wait
    /// (`Kmem::shrink_all_reclaim`), since the allocation may have been made inside a
    /// walk of that list on this thread.
    pub(super) fn trim_at_bound(&self) -> usize {
        self.kmem.shrink_all_reclaim(self.cpu().get());
        self.trim_after_shrink()
    }

    /// [`Heap::trim`]'s work after the caches' shrink: the caller's per-CPU pages, the
    /// cached huge mappings, every free block to the OS. Returns the pages given back.
    fn trim_after_shrink(&self) -> usize {
        self.drain_local();
        self.huge.trim(self) / kmem_core::PAGE_SIZE + self.kmem.pages.report_free_pages()
    }

    /// Bounds the heap at `bytes` (0 = no bound). Memory already online stays.
    pub fn set_max_bytes(&self, bytes: usize) {
        self.kmem.pages.set_max_pages(bytes >> PAGE_SHIFT);
        self.huge.set_bounded(bytes != 0);
        // The barns keep less past their own bounds in a bounded heap.
        let spill = self.kmem.barn_spill();
        spill.set_limit(kmem_core::slab::barn_spill::BarnSpill::limit_for_bound(
            bytes,
        ));
    }
}
