//! Temporary: page-allocator helpers the slab layer needs; moved into page/ when the page split lands.

use crate::page::{Page, PageFlags};
use crate::page_alloc::PageAllocator;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use core::ptr::NonNull;

impl<P: Platform> PageAllocator<P> {
    /// The head page of the slab (or block) holding `addr` (`virt_to_slab`), or `None`
    /// if `addr` is not in a page the allocator manages.
    #[inline]
    pub fn virt_to_head_page(&self, addr: *const u8) -> Option<NonNull<Page>> {
        let page = self.virt_to_page_any(addr)?;
        // SAFETY: descriptors of online sections are valid.
        let p = unsafe { page.as_ref() };
        if p.flags().contains(PageFlags::TAIL) {
            NonNull::new(p.owner[0].load(Relaxed) as *mut Page)
        } else {
            Some(page)
        }
    }
}

impl<P: Platform> PageAllocator<P> {
    /// Counts a refused object free (reported by the slab layer).
    pub(crate) fn count_bad_object(&self) {
        self.zones[0].events[crate::vmstat::VmEvent::BadPage as usize].fetch_add(1, Relaxed);
    }
}
