//! Pfn, page and address conversions (the kernel's include/asm-generic/memory_model.h
//! for SPARSEMEM_VMEMMAP, and `page_to_nid`).
//!
//! A pfn is a page's offset from the span base, in pages. The memmap of a section
//! sits at the start of the section itself (see `mmzone.rs`), so every conversion is
//! arithmetic on the span base; the checked ones consult the section table, whose
//! entries change only under the hotplug lock and are read here without a lock (a
//! section's memory stays mapped once it was online). No locks are taken.
//!
//! Also the page-tag table: a `u32` per pfn (the pages' sheaf tags, `Page::sheaf_tag`),
//! outside the span, in address space the platform reserves at `init`; a section's
//! part is opened when the section first comes online (`add_memory`) and stays open,
//! and the first descriptor of the section's memmap holds its address
//! ([`section_tag_table`]), so a tag can be reached from an address (the free fast
//! path: [`PageAllocator::sheaf_tag`]) and from a descriptor alike.

use super::descriptor::{Page, PageFlags, PAGE_SHIFT};
use super::mmzone::{MEMMAP_PAGES, PFN_SECTION_SHIFT, SECTION_SHIFT, SECTION_SIZE};
use super::PageAllocator;
use crate::percpu::{CpuArea, CpuRef};
use crate::platform::Platform;
use crate::sync::{AtomicU32, Ordering};
use core::ptr::NonNull;

/// Sets `area`'s copy of the tag-window length (`CpuArea::tag_limit`) to the shared
/// one when it is behind. The caller is the area's owner, or is about to hand the
/// area to its new owner (`cpu_area_get`).
#[inline]
pub(super) fn refresh_area_tag_limit(window: &super::TagWindow, area: &CpuArea) {
    // Acquire: the table's parts below this length are open (`TagWindow`), for the
    // owner's later reads through its copy.
    let now = window.tagged_len.load(Ordering::Acquire);
    if area.tag_limit.load(Ordering::Relaxed) != now {
        area.tag_limit.store(now, Ordering::Relaxed);
    }
}

// SAFETY (for the `unsafe` blocks of the page layer that turn a pfn into a `Page`):
// `pfn_to_page_raw` is only called with pfns of online sections inside the span, whose
// memmaps are mapped for as long as the allocator lives (sections are never unmapped).

/// The slab whose page `p` describes: `p` itself if it heads a slab, its head if it
/// is a tail page of one, else `None`. `p` is a descriptor in a mapped memmap.
#[inline(always)]
pub(crate) fn slab_head(p: &Page) -> Option<&Page> {
    // Acquire: a head that reads `SLAB` has its cache word set (`Slab::publish`).
    let flags = p.flags_acquire();
    if flags.contains(PageFlags::SLAB) {
        return Some(p);
    }
    if !flags.contains(PageFlags::TAIL) {
        return None;
    }
    // SAFETY: a tail page's `owner[0]` is its head's descriptor, in the same section
    // (blocks never cross sections), whose memmap is mapped as `p`'s is; or null.
    let head = unsafe { (p.owner[0].load(Ordering::Relaxed) as *const Page).as_ref()? };
    head.flags_acquire()
        .contains(PageFlags::SLAB)
        .then_some(head)
}

/// Bytes of the page-tag table per page of the span: a `u32` sheaf tag (one `mov`
/// loads it; a `u16` took a second instruction to widen, the compiler folding no
/// atomic load).
pub const TAG_BYTES: usize = core::mem::size_of::<u32>();

/// The part of the page-tag table for the section whose memmap starts at `first`: its
/// first descriptor's `private` word (that descriptor describes the memmap's own first
/// page, which is never managed) holds the address, stored by `online_section` once the
/// part is open; `None` without a table.
///
/// # Safety
/// `first` is the start of a mapped section memmap.
#[inline]
pub(crate) unsafe fn section_tag_table(first: usize) -> Option<NonNull<AtomicU32>> {
    // SAFETY: the caller's contract: a mapped memmap starts at `first`.
    let word = unsafe { &*(first as *const Page) }
        .private
        .load(Ordering::Relaxed);
    NonNull::new(word as *mut AtomicU32)
}

/// The descriptor of the page holding `addr`, from the address alone: the span's base
/// is aligned to the section size (`init`), so the address gives its section's start
/// (where the section's memmap lies) and its page's index there, and the base is not
/// needed (one instruction and a register fewer on the free fast path).
///
/// # Safety
/// `addr` lies in a section of the span that was brought online once: its memmap is
/// mapped for as long as the allocator lives.
#[inline(always)]
unsafe fn used_descriptor<'p>(addr: *const u8) -> &'p Page {
    // SAFETY: the caller's contract: a mapped memmap, whose descriptors live as long
    // as the allocator.
    unsafe { &*(descriptor_addr(addr as usize) as *const Page) }
}

/// Where the descriptor of the page holding `addr` lies if `addr` is in a section of
/// the span (see [`used_descriptor`], which reads it there): computed, never
/// dereferenced here, so also an address for a prefetch, which any address is
/// harmless to.
#[inline(always)]
pub(crate) fn descriptor_addr(addr: usize) -> usize {
    let section = addr & !(SECTION_SIZE - 1);
    let idx = (addr >> PAGE_SHIFT) & ((1 << PFN_SECTION_SHIFT) - 1);
    section + idx * core::mem::size_of::<Page>()
}

impl<P: Platform> PageAllocator<P> {
    /// Page frame number of `page` (offset from the span base, in pages).
    #[inline]
    pub fn page_to_pfn(&self, page: NonNull<Page>) -> usize {
        let p = page.as_ptr() as usize;
        let section_base = p & !(SECTION_SIZE - 1);
        let index = (p - section_base) / core::mem::size_of::<Page>();
        // Wrapping: a pointer below the span (no descriptor) gives a meaningless pfn.
        (section_base.wrapping_sub(self.base.load(Ordering::Relaxed)) >> PAGE_SHIFT) + index
    }

    /// The descriptor of `pfn`, without checks: where it would be if the pfn's section
    /// is online.
    #[inline]
    pub(super) fn pfn_to_page_raw(&self, pfn: usize) -> *mut Page {
        let base = self.base.load(Ordering::Relaxed);
        let section_base = base + ((pfn >> PFN_SECTION_SHIFT) << SECTION_SHIFT);
        (section_base as *mut Page).wrapping_add(pfn & ((1 << PFN_SECTION_SHIFT) - 1))
    }

    /// The descriptor of the page holding `addr`, which the caller knows to be in an
    /// online section of the span (an object it holds): no checks.
    #[inline]
    pub(crate) fn virt_to_page_raw(&self, addr: *const u8) -> *mut Page {
        let off = (addr as usize).wrapping_sub(self.base.load(Ordering::Relaxed));
        self.pfn_to_page_raw(off >> PAGE_SHIFT)
    }

    /// The descriptor of a managed page of an online section, or `None`.
    #[inline]
    pub fn pfn_to_page(&self, pfn: usize) -> Option<NonNull<Page>> {
        let section = self.sections.get(pfn >> PFN_SECTION_SHIFT)?;
        let off = pfn & ((1 << PFN_SECTION_SHIFT) - 1);
        let managed = section.nr_managed.load(Ordering::Relaxed) as usize;
        if !section.online() || off < MEMMAP_PAGES || off >= MEMMAP_PAGES + managed {
            return None;
        }
        NonNull::new(self.pfn_to_page_raw(pfn))
    }

    /// The address of the memory `page` describes. Meaningless, though never null,
    /// for a pointer that is no descriptor of this allocator: such a pointer panics
    /// where its address would come out null.
    #[inline]
    pub fn page_address(&self, page: NonNull<Page>) -> NonNull<u8> {
        let pfn = self.page_to_pfn(page);
        let addr = self
            .base
            .load(Ordering::Relaxed)
            .wrapping_add(pfn << PAGE_SHIFT);
        match NonNull::new(addr as *mut u8) {
            Some(p) => p,
            None => not_a_descriptor(page),
        }
    }

    /// The descriptor of the managed page that contains `addr`, or `None` for an address
    /// the allocator does not manage (outside the span, offline, or a memmap page).
    #[inline]
    pub fn virt_to_page(&self, addr: *const u8) -> Option<NonNull<Page>> {
        let off = (addr as usize).wrapping_sub(self.base.load(Ordering::Relaxed));
        if off >= self.span_len.load(Ordering::Relaxed) {
            return None;
        }
        self.pfn_to_page(off >> PAGE_SHIFT)
    }

    /// The descriptor of the page holding `addr` if its section is online, managed or
    /// not (a memmap page or one past a heap bound has an all-zero descriptor: no flags,
    /// so callers that look at flags need not check the range). For lookups on hot
    /// paths (`virt_to_head_page`).
    #[inline]
    pub(crate) fn virt_to_page_any(&self, addr: *const u8) -> Option<NonNull<Page>> {
        let base = self.base.load(Ordering::Relaxed);
        let off = (addr as usize).wrapping_sub(base);
        if off >= self.span_len.load(Ordering::Relaxed) {
            return None;
        }
        // SAFETY: `span_len` is at most MAX_SECTIONS sections (set once by `init`,
        // which clamps it), so the offset's section index is in the table.
        let section = unsafe { self.sections.get_unchecked(off >> SECTION_SHIFT) };
        if !section.online() {
            return None;
        }
        // The descriptor: in the section's memmap, at the section's start.
        let page = base + (off & !(SECTION_SIZE - 1));
        let idx = (off >> PAGE_SHIFT) & ((1 << PFN_SECTION_SHIFT) - 1);
        // SAFETY: the section's memmap lies in the span, which does not start at 0
        // (`span_len` is 0 until `init` sets `base` to a mapping's address).
        Some(unsafe { NonNull::new_unchecked((page as *mut Page).wrapping_add(idx)) })
    }

    /// The head page of the slab holding `addr` (`virt_to_slab`), or `None` if `addr`
    /// is not in a slab: an object in a slab's first page costs one load of its flags
    /// (the free fast path uses [`PageAllocator::virt_to_slab_used`]).
    #[inline(always)]
    pub fn virt_to_slab(&self, addr: *const u8) -> Option<&Page> {
        let page = self.virt_to_page_any(addr)?;
        // SAFETY: descriptors of online sections are valid, and live as long as the
        // allocator (sections never go away while their pages are in use; a
        // descriptor of a free page reads as neither slab nor tail).
        slab_head(unsafe { &*page.as_ptr() })
    }

    /// [`PageAllocator::virt_to_slab`] for the free fast path: one range check, against
    /// the sections ever used rather than the span, and no look at the section's state.
    /// Every descriptor there is mapped, and one of an offline section reads as a free
    /// page or zeros, never as a slab (a section goes offline only when all its pages
    /// are free), so the flags alone decide.
    #[inline]
    pub fn virt_to_slab_used(&self, addr: *const u8) -> Option<&Page> {
        self.with_used_page(addr, slab_head)
    }

    /// `f` of the descriptor of the page holding `addr` if it lies in a section ever
    /// brought online (one range check, no section state: see
    /// [`PageAllocator::virt_to_slab_used`]), whatever the page's state; else `None`.
    /// (A closure, not an `Option<&Page>`: the option's null test would stay on the
    /// free fast path.) The free fast paths pass a reader of the page's sheaf tag,
    /// set only on a live slab's head and `SLAB_TAIL` pages and zero on every other
    /// page (see `slab::state::sheaf_offset`), so they test no flags first.
    #[inline(always)]
    pub(crate) fn with_used_page<'p, R>(
        &'p self,
        addr: *const u8,
        f: impl FnOnce(&'p Page) -> Option<R>,
    ) -> Option<R> {
        let off = (addr as usize).wrapping_add(self.window.neg_base.load(Ordering::Relaxed));
        if off >= self.used_len.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: the section was brought online once (below `used_len`).
        f(unsafe { used_descriptor(addr) })
    }

    /// The sheaf tag of the page holding `addr` (see `Page::sheaf_tag`) when `addr`
    /// lies in the part of the span the tag table covers, else `None`: the range check
    /// and tag, read from the page-tag table at the address's page offset, with no
    /// descriptor and no flags, against the shared length (per-CPU rseq mode's free
    /// fast path, whose threads own no area; the inline free path checks against its
    /// area's copy, [`PageAllocator::sheaf_tag_inline`]).
    #[inline(always)]
    pub(crate) fn sheaf_tag(&self, addr: *const u8) -> Option<usize> {
        // SAFETY: Acquire: the table's parts below the length were opened before it
        // counted them (`TagWindow`'s invariant).
        unsafe { self.sheaf_tag_below(self.window.tagged_len.load(Ordering::Acquire), addr) }
    }

    /// The inline free path's [`PageAllocator::sheaf_tag`]: the range check against
    /// `area`'s copy of the length (`CpuArea::tag_limit`), a plain load from the
    /// caller's own area that the compiler folds into the compare. The copy may be
    /// behind the shared length (a section brought online since the owner last
    /// looked, [`PageAllocator::refresh_tag_limit`]): an address past it is refused
    /// like one outside the span, and the caller's slow path takes it. Its other loads
    /// ([`super::TagWindow`]) depend on nothing but the address, so they run beside
    /// the load of the caller's CPU area.
    ///
    /// The caller owns `area` (its [`crate::percpu::InlineArea`]), or it is the zero
    /// area, whose copy is 0.
    #[inline(always)]
    pub(crate) fn sheaf_tag_inline(&self, area: &CpuArea, addr: *const u8) -> Option<usize> {
        // SAFETY: the copy is written only by the area's owner, the caller (or never:
        // the zero area), so a plain load races with nothing; the owner loaded it from
        // the shared length with Acquire (`refresh_tag_limit`), and it never exceeds
        // that length, so `sheaf_tag_below`'s contract holds.
        unsafe { self.sheaf_tag_below(*area.tag_limit.as_ptr(), addr) }
    }

    /// The tag of `addr`'s page if `addr` lies below `limit` bytes from the span's base.
    ///
    /// # Safety
    /// `limit` was read from `TagWindow::tagged_len` (with Acquire, by this thread),
    /// or is 0.
    #[inline(always)]
    unsafe fn sheaf_tag_below(&self, limit: usize, addr: *const u8) -> Option<usize> {
        let w = &self.window;
        let table = w.table.load(Ordering::Relaxed);
        let off = (addr as usize).wrapping_add(w.neg_base.load(Ordering::Relaxed));
        if off >= limit {
            return None;
        }
        // SAFETY: below a length the table covered when this thread read it (the
        // caller's contract), whose sections' parts of the table were opened before it
        // counted them (its Acquire; `TagWindow`'s invariant): the entry is mapped, and
        // `table` is not 0 (else the length is).
        let tag = unsafe { &*(table as *const AtomicU32).add(off >> PAGE_SHIFT) };
        Some(tag.load(Ordering::Relaxed) as usize)
    }

    /// Brings `c`'s copy of the tag-window length (see
    /// [`PageAllocator::sheaf_tag_inline`]) up to the shared one. Cheap (two loads and
    /// a compare); the free slow path, the housekeeping of slow paths and
    /// `cpu_area_get` call it.
    #[inline]
    pub fn refresh_tag_limit(&self, c: CpuRef<'_>) {
        refresh_area_tag_limit(&self.window, c.area());
    }

    /// The descriptor of the page holding `addr`, with no range check.
    ///
    /// # Safety
    /// `addr` lies in a section ever brought online: below a length of the tag window
    /// the caller (or the owner that handed it the address) read (an object the
    /// inline free path took, whose range check is against such a length).
    #[inline(always)]
    pub(crate) unsafe fn descriptor_in_window(&self, addr: usize) -> &Page {
        // SAFETY: the caller's contract: the section's memmap is mapped for good.
        unsafe { used_descriptor(addr as *const u8) }
    }

    /// [`PageAllocator::refresh_tag_limit`] for a block with a CPU area's header that
    /// is no CPU area (a memory cgroup's charged area), by its owner.
    pub(crate) fn refresh_area_tag_limit(&self, area: &CpuArea) {
        refresh_area_tag_limit(&self.window, area);
    }

    /// The address and length of section `nr`'s part of the page-tag table (0: no
    /// table), whole pages.
    pub(super) fn section_tags_range(&self, nr: usize, pages: usize) -> (usize, usize) {
        match self.window.table.load(Ordering::Relaxed) {
            0 => (0, 0),
            t => (
                t + ((nr << PFN_SECTION_SHIFT) * TAG_BYTES),
                (pages * TAG_BYTES).next_multiple_of(super::PAGE_SIZE),
            ),
        }
    }

    /// The descriptor of the page holding `addr` when it is a slab's head page or a
    /// tail page marked `SLAB_TAIL` (which carries its slab's sheaf tag); else
    /// `None`. One descriptor read, never the head's.
    #[inline(always)]
    pub fn virt_to_slab_page(&self, addr: *const u8) -> Option<&Page> {
        self.with_used_page(addr, |p| {
            p.flags()
                .intersects(PageFlags::SLAB | PageFlags::SLAB_TAIL)
                .then_some(p)
        })
    }

    /// The head page of the slab (or compound block) holding `addr` (`virt_to_slab`,
    /// `compound_head`), else the page holding `addr` itself; `None` if `addr` is not
    /// in a page the allocator manages.
    #[inline]
    pub fn virt_to_head_page(&self, addr: *const u8) -> Option<NonNull<Page>> {
        let page = self.virt_to_page_any(addr)?;
        // SAFETY: descriptors of online sections are valid.
        let p = unsafe { page.as_ref() };
        let flags = p.flags();
        if flags.contains(PageFlags::TAIL) {
            NonNull::new(p.owner[0].load(Ordering::Relaxed) as *mut Page)
        } else if flags.is_empty() {
            Some(self.compound_head(page).unwrap_or(page))
        } else {
            Some(page)
        }
    }

    /// The head of the `COMPOUND` block that holds the unmarked page `page` (one that
    /// is not itself a head), if any. Blocks are aligned to their size in pfn space,
    /// so the block of order `o` holding `page` starts at its pfn rounded down to 2^o:
    /// the first page with `HEAD` met on the way down the orders heads the allocated
    /// block that holds `page`, if one does (the pages of an allocated block other
    /// than its head carry no `HEAD`: `Page`'s invariants), and a free block's head
    /// met that way says `page` is free. A slab's head counts too (its tails are
    /// marked, so this finds it only for a page read mid-change). At most `MAX_ORDER`
    /// descriptor reads, all in `page`'s section (a block never crosses one). Under
    /// concurrent frees the answer may be stale, as any lookup's is.
    #[cold]
    fn compound_head(&self, page: NonNull<Page>) -> Option<NonNull<Page>> {
        let pfn = self.page_to_pfn(page);
        for order in 1..=super::MAX_ORDER {
            let start = pfn & !((1 << order) - 1);
            // SAFETY: `start` is in `page`'s section (sections are aligned to more than
            // the largest block), which is online: its memmap is mapped.
            let h = unsafe { &*self.pfn_to_page_raw(start) };
            let f = h.flags();
            if f.intersects(PageFlags::HEAD | PageFlags::BUDDY | PageFlags::PCP) {
                // The block that starts here holds `page` only if it is that large.
                if h.order() >= order {
                    let head = NonNull::from(h);
                    let compound = f.contains(PageFlags::HEAD)
                        && f.intersects(PageFlags::COMPOUND | PageFlags::SLAB);
                    return compound.then_some(head);
                }
            }
        }
        None
    }

    /// The allocator's span: its base address and length in bytes.
    #[inline]
    pub fn span(&self) -> (usize, usize) {
        (
            self.base.load(Ordering::Relaxed),
            self.span_len.load(Ordering::Relaxed),
        )
    }

    /// Whether `addr` lies in the allocator's span (managed or not).
    #[inline]
    pub fn in_span(&self, addr: *const u8) -> bool {
        let off = (addr as usize).wrapping_sub(self.base.load(Ordering::Relaxed));
        off < self.span_len.load(Ordering::Relaxed)
    }

    /// The node of a page.
    #[inline]
    pub fn page_to_nid(&self, page: NonNull<Page>) -> usize {
        let pfn = self.page_to_pfn(page);
        self.sections[pfn >> PFN_SECTION_SHIFT]
            .node
            .load(Ordering::Relaxed) as usize
    }
}

/// [`PageAllocator::page_address`] of a pointer that is no descriptor: a caller's bug.
#[cold]
#[inline(never)]
fn not_a_descriptor(page: NonNull<Page>) -> ! {
    panic!("page_address: {page:p} is not a page descriptor of this allocator")
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::mmzone::{SECTION_MANAGED_PAGES, SECTION_SIZE};
    use super::super::test_platform::allocator;
    use super::super::{Config, PAGE_SIZE};
    use super::*;
    use crate::percpu::CpuRef;

    fn base<P: Platform>(pa: &PageAllocator<P>) -> usize {
        pa.base.load(Ordering::Relaxed)
    }

    /// Pages of the tag table written so far, over the part for the sections online:
    /// those `/proc/self/pagemap` reports present and mapped by this process alone (bits
    /// 63 and 56). A page only read maps the kernel's shared zero page, present but not
    /// exclusive, which the process's RSS leaves out as well. (The mapping's `Rss` in
    /// `smaps` would say the same, but the kernel may merge it with a neighbour made by
    /// another test.)
    fn written_tag_pages<P: Platform>(pa: &PageAllocator<P>) -> usize {
        use std::os::unix::fs::FileExt;
        let table = pa.window.table.load(Ordering::Relaxed);
        let len = (pa.window.tagged_len.load(Ordering::Relaxed) >> PAGE_SHIFT) * TAG_BYTES;
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        (0..len.div_ceil(PAGE_SIZE))
            .filter(|i| {
                let vpn = (table + i * PAGE_SIZE) / PAGE_SIZE;
                let mut entry = [0u8; 8];
                pagemap.read_exact_at(&mut entry, (vpn * 8) as u64).unwrap();
                let e = u64::from_le_bytes(entry);
                e & (1 << 63) != 0 && e & (1 << 56) != 0
            })
            .count()
    }

    /// Page blocks handed out and taken back (heads and compound tails) write no entry
    /// of the tag table: the page allocator clears only tags that are set
    /// (`Page::clear_sheaf_tag`), so the table's pages under them stay unwritten and out
    /// of the RSS. A tag set through a descriptor does write its page (the check sees
    /// writes).
    #[test]
    fn page_blocks_leave_the_tag_table_unwritten() {
        use crate::gfp::Gfp;
        let pa = allocator(1, Config::default());
        assert!(pa.add_memory(0));
        assert_eq!(written_tag_pages(pa), 0);
        for round in 0..2 {
            for order in 0..=5 {
                for gfp in [Gfp::KERNEL, Gfp::COMP, Gfp::ZERO] {
                    let blocks: std::vec::Vec<_> = (0..8)
                        .map(|_| pa.alloc_pages(None, gfp, order).unwrap())
                        .collect();
                    for b in blocks {
                        // SAFETY: allocated just above with this order.
                        unsafe { pa.free_pages(None, b, order) };
                    }
                }
            }
            assert_eq!(written_tag_pages(pa), 0, "round {round}");
        }
        let page = pa.alloc_pages(None, Gfp::KERNEL, 0).unwrap();
        // SAFETY: the descriptor of the page we hold.
        let p = unsafe { page.as_ref() };
        p.set_sheaf_tag(0x40, Ordering::Relaxed);
        assert_eq!(written_tag_pages(pa), 1);
        p.clear_sheaf_tag(Ordering::Relaxed);
        assert_eq!(p.sheaf_tag(), 0);
        // SAFETY: allocated above.
        unsafe { pa.free_pages(None, page, 0) };
    }

    #[test]
    fn a_new_sections_tags_are_found_at_once_and_nothing_outside_the_span() {
        use crate::gfp::Gfp;
        let pa = allocator(2, Config::default());
        assert!(pa.add_memory(0));
        let area = pa.cpu_area_get(0).unwrap();
        // SAFETY: ours until the end of the test.
        let cpu = unsafe { CpuRef::new(area) };
        let used = pa.used_len.load(Ordering::Relaxed);
        assert_ne!(
            pa.window.table.load(Ordering::Relaxed),
            0,
            "the test platform gives a tag table"
        );
        assert_eq!(pa.window.tagged_len.load(Ordering::Relaxed), used);
        let first = (base(pa) + used) as *const u8;
        assert_eq!(pa.sheaf_tag(first), None, "past the sections online");
        assert_eq!(
            pa.sheaf_tag(first.wrapping_sub(used + 8)),
            None,
            "below the base"
        );
        // The area's copy of the length, taken with the area: the same bound.
        assert_eq!(pa.sheaf_tag_inline(area, first), None);
        let last = first.wrapping_sub(PAGE_SIZE);
        assert_eq!(
            pa.sheaf_tag_inline(area, last),
            pa.sheaf_tag(last),
            "the span's last page online"
        );
        assert!(pa.sheaf_tag(last).is_some());
        // A second section comes online: its tags are read at once.
        assert!(pa.add_memory(0));
        assert_eq!(pa.used_len.load(Ordering::Relaxed), used + SECTION_SIZE);
        assert_eq!(
            pa.window.tagged_len.load(Ordering::Relaxed),
            used + SECTION_SIZE
        );
        // 2 MiB blocks until one lies in the new section (at most a section's worth).
        let mut held = [None; SECTION_SIZE >> 21];
        let mut n = 0;
        let late = loop {
            let page = pa.alloc_pages(Some(cpu), Gfp::KERNEL, 9).unwrap();
            held[n] = Some(page);
            n += 1;
            let addr = pa.page_address(page).as_ptr();
            if addr as usize >= base(pa) + used {
                break addr;
            }
        };
        // A page allocator's block has no tag; one set through the page's descriptor
        // is the one read from the address (the table found from the address and from
        // the descriptor agree).
        assert_eq!(pa.sheaf_tag(late), Some(0));
        // Through the area's copy, once the owner catches it up: behind the shared
        // length, the copy refuses the new section (the free slow path, which catches
        // it up, then takes the object).
        assert_eq!(pa.sheaf_tag_inline(area, late), None, "the copy is behind");
        pa.refresh_tag_limit(cpu);
        assert_eq!(pa.sheaf_tag_inline(area, late), Some(0));
        assert_eq!(
            pa.sheaf_tag_inline(area, first.wrapping_add(SECTION_SIZE)),
            None
        );
        // SAFETY: a descriptor of a block we hold.
        let page = unsafe {
            pa.virt_to_page(late.wrapping_add(PAGE_SIZE))
                .unwrap()
                .as_ref()
        };
        page.set_sheaf_tag(0x1c0, Ordering::Relaxed);
        assert_eq!(pa.sheaf_tag(late.wrapping_add(PAGE_SIZE + 8)), Some(0x1c0));
        assert_eq!((pa.sheaf_tag(late), page.sheaf_tag()), (Some(0), 0x1c0));
        page.set_sheaf_tag(0, Ordering::Relaxed);
        for page in held.into_iter().flatten() {
            // SAFETY: allocated above with order 9.
            unsafe { pa.free_pages(Some(cpu), page, 9) };
        }
        // SAFETY: ours, given back once.
        unsafe { pa.cpu_area_put(area) };
    }

    #[test]
    fn conversions_round_trip_on_managed_pages() {
        let pa = allocator(2, Config::default());
        assert!(pa.add_memory(0));
        let first = MEMMAP_PAGES;
        let last = MEMMAP_PAGES + SECTION_MANAGED_PAGES - 1;
        for pfn in [first, first + 1, first + 511, last] {
            let page = pa.pfn_to_page(pfn).expect("managed page");
            assert_eq!(pa.page_to_pfn(page), pfn);
            let addr = pa.page_address(page);
            assert_eq!(addr.as_ptr() as usize, base(pa) + pfn * PAGE_SIZE);
            assert_eq!(pa.virt_to_page(addr.as_ptr()), Some(page));
            // Any byte of the page finds the same descriptor.
            // SAFETY: within the page's own 4 KiB.
            let inner = unsafe { addr.as_ptr().add(PAGE_SIZE - 1) };
            assert_eq!(pa.virt_to_page(inner), Some(page));
            assert_eq!(pa.virt_to_page_raw(inner), page.as_ptr());
            // The address a prefetch asks for is that descriptor's.
            assert_eq!(descriptor_addr(inner as usize), page.as_ptr() as usize);
            assert_eq!(pa.page_to_nid(page), 0);
        }
    }

    #[test]
    fn unmanaged_addresses_have_no_page() {
        let pa = allocator(2, Config::default());
        assert!(pa.add_memory(0));
        let base = base(pa);
        // The memmap pages of an online section: not managed, but described.
        assert_eq!(pa.pfn_to_page(0), None);
        assert_eq!(pa.pfn_to_page(MEMMAP_PAGES - 1), None);
        assert_eq!(pa.virt_to_page(base as *const u8), None);
        let memmap = pa
            .virt_to_page_any(base as *const u8)
            .expect("online section");
        // SAFETY: memmap descriptors of an online section are mapped.
        assert!(unsafe { memmap.as_ref() }.flags().is_empty());
        // The second section was never brought online; past the span is not ours.
        let second = (base + SECTION_SIZE) as *const u8;
        assert!(pa.in_span(second));
        assert_eq!(pa.virt_to_page(second), None);
        assert_eq!(pa.virt_to_page_any(second), None);
        let past = (base + 2 * SECTION_SIZE) as *const u8;
        assert!(!pa.in_span(past));
        assert_eq!(pa.virt_to_page_any(past), None);
        assert!(!pa.in_span((base - 1) as *const u8));
        assert_eq!(pa.pfn_to_page(usize::MAX), None);
    }

    #[test]
    fn sections_carry_their_node() {
        let pa = allocator(
            2,
            Config {
                nr_nodes: 2,
                ..Config::default()
            },
        );
        assert!(pa.add_memory(1));
        assert!(pa.add_memory(0));
        let on_1 = pa.pfn_to_page(MEMMAP_PAGES).unwrap();
        let on_0 = pa
            .pfn_to_page((1 << PFN_SECTION_SHIFT) + MEMMAP_PAGES)
            .unwrap();
        assert_eq!((pa.page_to_nid(on_1), pa.page_to_nid(on_0)), (1, 0));
    }
}
