//! A sheaf's own memory (`alloc_empty_sheaf`, `free_empty_sheaf`): an empty sheaf
//! comes from its cache's sheaf cache (a kmalloc cache chosen at creation, through
//! the no-CPU path, so no sheaf is ever needed to make one), or from pages for a
//! prefilled sheaf bigger than the cache's; a freed one goes back where it came from.
//!
//! Owns no state; no locking (the callers hold the sheaf alone).

use super::sheaf::{SlabSheaf, SHEAF_HEADER};
use super::*;
use crate::gfp::Gfp;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::{AtomicPtr, AtomicUsize};
use core::ptr::NonNull;

impl<P: Platform> Slub<'_, P> {
    /// A new empty sheaf for `s` (`alloc_empty_sheaf`), from its sheaf cache through
    /// the no-CPU path. `cpu` is where the statistic is counted (the kernel counts it
    /// per CPU too): a CPU area's line is already in use, the counters of contexts
    /// without one are a page apart from everything else.
    pub(super) fn alloc_empty_sheaf(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        capacity: usize,
    ) -> Option<NonNull<SlabSheaf>> {
        let cfg = s.config();
        let sc = if capacity == cfg.sheaf_capacity {
            // SAFETY: set at creation to a cache that lives as long as the allocator.
            unsafe { &*(cfg.sheaf_cache as *const KmemCache) }
        } else {
            return self.alloc_oversize_sheaf(s, gfp, capacity);
        };
        let p = self.alloc_nocpu(sc, gfp - Gfp::ZERO, None)?;
        s.stat(cpu, SlubStat::SheafAlloc);
        // SAFETY: a fresh object of the sheaf cache, big enough for the header and
        // `capacity` slots (sheaf_capacity chose the cache by that size).
        Some(unsafe { init_sheaf(p, s, capacity) })
    }

    /// A sheaf of a capacity other than the cache's (prefill of more objects): pages.
    #[cold]
    fn alloc_oversize_sheaf(
        &self,
        s: &KmemCache,
        gfp: Gfp,
        capacity: usize,
    ) -> Option<NonNull<SlabSheaf>> {
        let bytes = SHEAF_HEADER + capacity * core::mem::size_of::<usize>();
        let order = crate::page::get_order(bytes);
        let page = self
            .pages
            .alloc_pages_node(None, (gfp - Gfp::ZERO) | Gfp::COMP, order, None)?;
        let p = self.pages.page_address(page).as_ptr() as usize;
        // SAFETY: fresh pages, big enough.
        Some(unsafe { init_sheaf(p, s, capacity) })
    }

    /// Frees an empty sheaf (`free_empty_sheaf`); `cpu` counts the statistic, as in
    /// [`Slub::alloc_empty_sheaf`].
    pub(super) fn free_empty_sheaf(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        sheaf: NonNull<SlabSheaf>,
    ) {
        let p = sheaf.as_ptr() as usize;
        s.stat(cpu, SlubStat::SheafFree);
        // SAFETY: a sheaf is an object of a kmalloc cache, which lives as long as the
        // allocator.
        match unsafe { self.lookup(p as *const u8) } {
            ObjectLookup::Slab(sc, slab) => {
                // SAFETY: the sheaf is an object of its sheaf cache, ours to give back.
                unsafe { self.free_object(None, sc, slab, p) };
            }
            ObjectLookup::Large(head) => {
                // SAFETY: an oversize sheaf's pages, ours; the order is on the head.
                let order = unsafe { head.as_ref() }.order();
                // SAFETY: as above.
                unsafe { self.pages.free_pages(None, head, order) };
            }
            ObjectLookup::Bad(why) => self.report(s, None, why, p),
        }
    }
}

/// Writes an empty sheaf's header at `p`.
///
/// # Safety
/// `p` is fresh memory of at least `SHEAF_HEADER + capacity` words, word aligned.
unsafe fn init_sheaf(p: usize, s: &KmemCache, capacity: usize) -> NonNull<SlabSheaf> {
    let sheaf = p as *mut SlabSheaf;
    // SAFETY: fresh memory of the right size and alignment (caller).
    unsafe {
        sheaf.write(SlabSheaf {
            size: AtomicUsize::new(0),
            next: AtomicPtr::new(core::ptr::null_mut()),
            cache: AtomicPtr::new(s as *const KmemCache as *mut KmemCache),
            capacity: AtomicUsize::new(capacity),
        });
        NonNull::new_unchecked(sheaf)
    }
}
