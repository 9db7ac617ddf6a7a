//! The page descriptor (`struct page`), the intrusive page lists, and the page-size
//! constants (`PAGE_SIZE`, `MAX_ORDER`, `get_order`).
//!
//! Every 4 KiB page of every online section has one [`Page`] in its section's memmap.
//! A descriptor is 64 bytes, as the kernel's: the first half belongs to the page
//! allocator, the second half to whichever layer owns the allocated page (the slab
//! layer keeps its freelist, counters and cache there).
//!
//! ## Who may touch what
//! | state of the page                      | fields             | who                     |
//! |----------------------------------------|--------------------|-------------------------|
//! | free in the buddy (`PG_BUDDY` on head)  | flags, order, lru, private | holder of the zone lock |
//! | on a per-CPU list (`PG_PCP` on head)    | flags, order, lru  | owner of that CPU area  |
//! | allocated                               | owner words        | whoever holds the page  |
//! | reserved (memmap)                       | nothing            | nobody                  |
//!
//! Fields are atomics used with `Relaxed` loads and stores (plain moves on every
//! target), so a racy read by a debugging or reporting path is never undefined
//! behaviour; the ordering comes from the lock or the ownership in the table (the
//! zone lock's place among the others: the lock order in lib.rs).

use crate::sync::{
    AtomicPtr, AtomicU16, AtomicU32, AtomicU8, AtomicUsize, Ordering, Ordering::Relaxed,
};
use core::ptr;

/// log2 of the page size.
pub const PAGE_SHIFT: usize = 12;
/// The page size: 4 KiB.
pub const PAGE_SIZE: usize = 1 << PAGE_SHIFT;
/// The largest buddy order (`MAX_ORDER` in the kernel's newer naming, `MAX_PAGE_ORDER`):
/// blocks of 2^10 pages = 4 MiB.
pub const MAX_ORDER: usize = 10;
/// Number of buddy orders, 0..=MAX_ORDER.
pub const NR_ORDERS: usize = MAX_ORDER + 1;

/// `get_order`: the buddy order of the smallest block that holds `size` bytes (0 for
/// a size of 0). The result may exceed [`MAX_ORDER`]; callers check.
#[inline]
pub const fn get_order(size: usize) -> usize {
    let pages = size.div_ceil(PAGE_SIZE);
    if pages <= 1 {
        return 0;
    }
    (usize::BITS - (pages - 1).leading_zeros()) as usize
}

bitflags::bitflags! {
    /// Page flags (`PG_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct PageFlags: u16 {
        /// Head of a free buddy block of `order` pages (`PageBuddy`).
        const BUDDY = 1 << 0;
        /// Head of a block sitting on a per-CPU page list.
        const PCP = 1 << 1;
        /// Free and reported to the platform: its contents are discarded (`PageReported`).
        const REPORTED = 1 << 2;
        /// On a slab's head page: an object of the slab was handed out without a
        /// charge, though its cache is one of the accounted kmalloc caches with objcg
        /// sheaves (an `__GFP_ACCOUNT` request outside any memory cgroup, say). Set
        /// by the slab layer's allocation paths (`Slub::note_uncharged`), never
        /// cleared while an object of the slab is in use (a new slab's and a discarded
        /// one's flags are written whole; an empty slab that serves again, kept or
        /// partial, starts over: `Slab::start_charges_over`). The charged take-in reads it: see
        /// `memcontrol::intake`.
        /// Not the kernel's.
        const SLAB_UNCHARGED = 1 << 3;
        /// Belongs to the slab allocator (`PageSlab`).
        const SLAB = 1 << 4;
        /// Head of an allocated block: set when the page allocator hands a block out,
        /// cleared when it takes it back; a free must find it (and the order it was
        /// allocated with), so a double free or a free of a tail page is caught.
        const HEAD = 1 << 5;
        /// A tail page of a multi-page slab, marked by the slab layer
        /// (`Slab::mark_tails`); `owner[0]` points at the head page's descriptor
        /// (`compound_head`, one load). Tails of other blocks are never marked: see
        /// [`PageFlags::COMPOUND`].
        const TAIL = 1 << 6;
        /// With `TAIL`: a tail page of a slab, whose sheaf tag (in the page-tag
        /// table) mirrors the head's, so a free finds the CPU's sheaf from the
        /// object's own page, without the head. Not the kernel's (its frees go to the
        /// head through `compound_head`).
        const SLAB_TAIL = 1 << 7;
        /// With `HEAD`: the block was allocated compound (`__GFP_COMP`), so a pointer
        /// anywhere in it finds it. Its tail descriptors are left as the free lists
        /// had them (no flags): `virt_to_head_page` finds the head from a tail by the
        /// block's alignment (a block of order `o` starts at a pfn aligned to 2^o), at
        /// most one descriptor read per order. The kernel writes every tail instead
        /// (`prep_compound_page`); here a 2 MiB block's 511 tails were most of the
        /// cost of its malloc and free. A slab's head does not carry it (its tails
        /// are marked: [`PageFlags::TAIL`]). Not the kernel's.
        const COMPOUND = 1 << 8;
        /// With `HEAD`, on an allocated block that is no slab: a mark of the block's
        /// holder ([`Page::mark_held_block`]; `kmem` marks its red-zoned blocks), which
        /// the page allocator never reads. Gone when the block is freed (a freed
        /// block's flags are replaced). Not the kernel's.
        const HOLDER_MARK = 1 << 9;
    }
}

/// The descriptor of one 4 KiB page (`struct page`).
///
/// Invariants (kept by the page allocator):
/// - `BUDDY` is set only on the first page of a free block of `2^order` pages that sits
///   on `free_area[order]` of its zone; the block is aligned to its size in pfn space.
/// - `PCP` is set only on the first page of a block on a per-CPU list of one CPU area.
/// - `HEAD` is set exactly on the first page of each allocated block, whose `order` is
///   the order it was allocated with.
/// - A page that is part of a block but not its head has no flags (also in a
///   `COMPOUND` block), or, in a multi-page slab, `TAIL` and then `owner[0]` names the
///   head, or `TAIL | SLAB_TAIL` and then its sheaf tag mirrors the head's too; its
///   other fields are meaningless. (So a page with `HEAD` heads the allocated block
///   that holds it: the search for a compound head relies on it.)
#[repr(C, align(64))]
pub struct Page {
    flags: AtomicU16,
    order: AtomicU8,
    _pad: u8,
    /// On a slab's head page: the id of the sole objcg its charged objects belong to
    /// (the memory controller's word: `memcontrol::slab_hooks::note_sole_objcg`), 0
    /// before any charge, 1 once they belong to several. Reset when a slab is set up
    /// (`slab::state::Slab::init`) and when an empty slab serves again (a kept one, or
    /// a partial one a refill finds with no object in use:
    /// `Slab::start_charges_over`); meaningless on other pages.
    memcg_sole: AtomicU32,
    /// Next page on whatever list the page is on (`lru.next`).
    pub(crate) next: AtomicPtr<Page>,
    /// Previous page on that list (`lru.prev`).
    pub(crate) prev: AtomicPtr<Page>,
    /// Page allocator private word: for a free buddy block, when it was freed (ns);
    /// on the head of an allocated block, `memcg_data` (zero when handed out): a
    /// slab's objcg vector or an accounted block's objcg (see `memcontrol`).
    pub(crate) private: AtomicUsize,
    /// Words owned by the holder of an allocated page (the slab layer's freelist,
    /// counters, cache pointer and list link). Zero when a block is handed out (on its
    /// head page).
    pub(crate) owner: [AtomicUsize; 4],
}

const _: () = assert!(core::mem::size_of::<Page>() == 64);

impl Page {
    /// The page's sheaf tag, the free fast path's word (the slab layer's: see
    /// `slab::state::Slab::init`): on every page of a live slab of a cache on the
    /// inline sheaf path whose slab has no objcg vector, the cache's `cpu_offset` less
    /// [`crate::page::CPU_AREA_ZERO_LINE`]; 0 on every other page, which the free fast
    /// path reads as the CPU area's zero line (no room: it refuses). Cleared when the
    /// slab goes ([`Page::set_sheaf_tag`] by the slab layer; a slab's marked tails
    /// by the page allocator when it takes the block back).
    ///
    /// It lives in the allocator's page-tag table, not in the descriptor, so that the
    /// free fast path finds it from the object's address with a shift and one load
    /// (`PageAllocator::sheaf_tag`); always 0 where the platform gave no table.
    #[inline]
    pub fn sheaf_tag(&self) -> usize {
        self.tag_slot().map_or(0, |t| t.load(Relaxed) as usize)
    }
    /// Sets the page's sheaf tag (the slab layer and the page allocator; see
    /// [`Page::sheaf_tag`]); without a table, nothing.
    #[inline]
    pub(crate) fn set_sheaf_tag(&self, tag: u32, order: Ordering) {
        if let Some(t) = self.tag_slot() {
            t.store(tag, order);
        }
    }
    /// Clears the page's sheaf tag if it has one (the page allocator, on blocks it
    /// hands out or takes back). It reads the entry first and writes only a non-zero
    /// one, as the offline step does (`clear_section_tags`): the table's pages under
    /// memory no slab ever used stay unwritten, where a store of 0 made one resident for
    /// each 4 MiB of page blocks (a read maps none).
    #[inline]
    pub(crate) fn clear_sheaf_tag(&self, order: Ordering) {
        if let Some(t) = self.tag_slot() {
            if t.load(Relaxed) != 0 {
                t.store(0, order);
            }
        }
    }
    /// Sets the sheaf tags of the `n` pages of the block this page heads (see
    /// [`Page::sheaf_tag`]): one lookup of the section's table, then `n` stores (a
    /// block never crosses a section). Without a table, nothing.
    pub(crate) fn set_block_sheaf_tags(&self, n: usize, tag: u32, order: Ordering) {
        if let Some(t) = self.tag_slot() {
            let first = t as *const AtomicU32;
            for i in 0..n {
                // SAFETY: the block's pages are consecutive descriptors of one section,
                // whose part of the table has an entry for each of them, in order.
                unsafe { &*first.add(i) }.store(tag, order);
            }
        }
    }
    /// This page's entry of the tag table: found from the descriptor's address alone,
    /// through the first descriptor of its section's memmap (see
    /// [`super::memory_model::section_tag_table`]).
    #[inline]
    fn tag_slot(&self) -> Option<&AtomicU32> {
        let me = self as *const Page as usize;
        let first = me & !(super::SECTION_SIZE - 1);
        // SAFETY: every `Page` is a descriptor in the memmap at the start of an online
        // section (descriptors are never made elsewhere), whose first descriptor is
        // mapped and holds the section's part of the table.
        let table = unsafe { super::memory_model::section_tag_table(first) }?;
        let idx = (me - first) / core::mem::size_of::<Page>();
        // SAFETY: the section's part of the table has an entry for each of its pages
        // and is open while the section is online (`online_section`).
        Some(unsafe { &*table.as_ptr().add(idx) })
    }
    /// The page's flags.
    #[inline]
    pub fn flags(&self) -> PageFlags {
        PageFlags::from_bits_retain(self.flags.load(Relaxed))
    }
    #[inline]
    pub(crate) fn set_flags(&self, f: PageFlags) {
        self.flags.store(f.bits(), Relaxed);
    }
    /// [`Page::set_flags`] with Release: words written before it are seen by a
    /// reader of [`Page::flags_acquire`] that sees these flags.
    #[inline]
    pub(crate) fn publish_flags(&self, f: PageFlags) {
        self.flags.store(f.bits(), Ordering::Release);
    }
    /// The page's flags, read with Acquire (see [`Page::publish_flags`]).
    #[inline]
    pub(crate) fn flags_acquire(&self) -> PageFlags {
        PageFlags::from_bits_retain(self.flags.load(Ordering::Acquire))
    }
    /// Adds `f` to the page's flags, atomically: for a live slab's head page, whose
    /// flags others read (lookups) and nobody replaces while it lives.
    #[inline]
    pub(crate) fn insert_flags(&self, f: PageFlags) {
        self.flags.fetch_or(f.bits(), Relaxed);
    }
    /// Takes `f` out of the page's flags, atomically (see [`Page::insert_flags`]).
    #[inline]
    pub(crate) fn remove_flags(&self, f: PageFlags) {
        self.flags.fetch_and(!f.bits(), Relaxed);
    }
    /// Marks the allocated block this page heads for its holder
    /// ([`PageFlags::HOLDER_MARK`]); false, and no mark, on a page that heads no
    /// allocated block or heads a slab. Only the holder's own accounting reads it.
    pub fn mark_held_block(&self) -> bool {
        let f = self.flags();
        if !f.contains(PageFlags::HEAD) || f.intersects(PageFlags::SLAB | PageFlags::TAIL) {
            return false;
        }
        self.insert_flags(PageFlags::HOLDER_MARK);
        true
    }
    /// Whether this page heads an allocated block its holder marked
    /// ([`Page::mark_held_block`]).
    #[inline]
    pub fn held_block_marked(&self) -> bool {
        let f = self.flags();
        f.contains(PageFlags::HEAD | PageFlags::HOLDER_MARK) && !f.contains(PageFlags::SLAB)
    }
    /// Whether this page heads a free buddy block.
    #[inline]
    pub fn is_buddy(&self) -> bool {
        self.flags().contains(PageFlags::BUDDY)
    }
    /// The order recorded for this block (meaningful for free blocks and PCP pages).
    #[inline]
    pub fn order(&self) -> usize {
        self.order.load(Relaxed) as usize
    }
    #[inline]
    pub(crate) fn set_order(&self, order: usize) {
        self.order.store(order as u8, Relaxed);
    }
    /// The slab's sole-objcg word (see the field; on a slab's head page).
    #[inline]
    pub(crate) fn memcg_sole(&self) -> &AtomicU32 {
        &self.memcg_sole
    }
    /// On a live slab's head page, whose objects the memory controller charged: 0
    /// while none was charged, the id of the objcg (`ObjCgroup::id`) they were all
    /// charged to, or 1 once they went to several. Meaningless on other pages.
    #[inline]
    pub fn memcg_sole_id(&self) -> u32 {
        self.memcg_sole.load(Relaxed)
    }
    /// Resets a descriptor to the state of a page inside a free or allocated block.
    #[inline]
    pub(crate) fn reset(&self) {
        self.flags.store(0, Relaxed);
        self.order.store(0, Relaxed);
        self.next.store(ptr::null_mut(), Relaxed);
        self.prev.store(ptr::null_mut(), Relaxed);
        self.private.store(0, Relaxed);
        self.memcg_sole.store(0, Relaxed);
    }
}

/// An intrusive, null-terminated doubly linked list of pages (the kernel's `list_head`
/// of `page->lru`), with head and tail so that the all-zero value is the empty list.
///
/// Invariant: the pages on the list are linked through `next`/`prev`, `head.prev` and
/// `tail.next` are null, `len` counts them, and each page is on no other list. Callers
/// of the `unsafe` methods guarantee exclusive access to the list and its pages (the
/// zone lock or CPU-area ownership).
#[derive(Debug)]
pub struct PageList {
    head: *mut Page,
    tail: *mut Page,
    len: usize,
}

// SAFETY: a `PageList` is only pointers into memmaps that live as long as the allocator;
// moving the list to another thread is sound because every access to it and its pages
// happens under the zone lock or by the CPU area's single owner (type invariant).
unsafe impl Send for PageList {}

impl Default for PageList {
    fn default() -> Self {
        Self::new()
    }
}

impl PageList {
    /// An empty list.
    pub const fn new() -> Self {
        Self {
            head: ptr::null_mut(),
            tail: ptr::null_mut(),
            len: 0,
        }
    }
    /// Number of blocks on the list.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the list is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.is_null()
    }
    /// The first block, if any.
    #[inline]
    pub fn first(&self) -> *mut Page {
        self.head
    }
    /// The last block, if any.
    #[inline]
    pub fn last(&self) -> *mut Page {
        self.tail
    }

    /// Adds `page` at the head.
    ///
    /// # Safety
    /// `page` is a valid descriptor on no list, and the caller has exclusive access to
    /// this list and its pages.
    #[inline]
    pub unsafe fn push_head(&mut self, page: *mut Page) {
        // SAFETY: the caller guarantees `page` and the current head are valid and ours.
        unsafe {
            (*page).prev.store(ptr::null_mut(), Relaxed);
            (*page).next.store(self.head, Relaxed);
            if self.head.is_null() {
                self.tail = page;
            } else {
                (*self.head).prev.store(page, Relaxed);
            }
        }
        self.head = page;
        self.len += 1;
    }

    /// Adds `page` at the tail.
    ///
    /// # Safety
    /// As [`PageList::push_head`].
    #[inline]
    pub unsafe fn push_tail(&mut self, page: *mut Page) {
        // SAFETY: the caller guarantees `page` and the current tail are valid and ours.
        unsafe {
            (*page).next.store(ptr::null_mut(), Relaxed);
            (*page).prev.store(self.tail, Relaxed);
            if self.tail.is_null() {
                self.head = page;
            } else {
                (*self.tail).next.store(page, Relaxed);
            }
        }
        self.tail = page;
        self.len += 1;
    }

    /// Removes `page` from anywhere in the list.
    ///
    /// # Safety
    /// `page` is on this list, and the caller has exclusive access to it.
    #[inline]
    pub unsafe fn remove(&mut self, page: *mut Page) {
        // SAFETY: `page` is on this list, so its neighbours are valid pages on it too.
        unsafe {
            let next = (*page).next.load(Relaxed);
            let prev = (*page).prev.load(Relaxed);
            if prev.is_null() {
                self.head = next;
            } else {
                (*prev).next.store(next, Relaxed);
            }
            if next.is_null() {
                self.tail = prev;
            } else {
                (*next).prev.store(prev, Relaxed);
            }
            (*page).next.store(ptr::null_mut(), Relaxed);
            (*page).prev.store(ptr::null_mut(), Relaxed);
        }
        self.len -= 1;
    }

    /// Removes and returns the first block, or null.
    ///
    /// # Safety
    /// The caller has exclusive access to the list and its pages.
    #[inline]
    pub unsafe fn pop_head(&mut self) -> *mut Page {
        let page = self.head;
        if !page.is_null() {
            // SAFETY: `page` is the head of this list.
            unsafe { self.remove(page) };
        }
        page
    }

    /// Removes and returns the last block, or null.
    ///
    /// # Safety
    /// As [`PageList::pop_head`].
    #[inline]
    pub unsafe fn pop_tail(&mut self) -> *mut Page {
        let page = self.tail;
        if !page.is_null() {
            // SAFETY: `page` is the tail of this list.
            unsafe { self.remove(page) };
        }
        page
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_order_rounds_up_to_a_power_of_two_of_pages() {
        assert_eq!(get_order(0), 0);
        assert_eq!(get_order(1), 0);
        assert_eq!(get_order(PAGE_SIZE), 0);
        assert_eq!(get_order(PAGE_SIZE + 1), 1);
        assert_eq!(get_order(2 * PAGE_SIZE), 1);
        assert_eq!(get_order(3 * PAGE_SIZE), 2);
        assert_eq!(get_order(PAGE_SIZE << MAX_ORDER), MAX_ORDER);
        assert_eq!(get_order((PAGE_SIZE << MAX_ORDER) + 1), MAX_ORDER + 1);
        assert_eq!(get_order(usize::MAX), usize::BITS as usize - PAGE_SHIFT);
    }

    fn pages<const N: usize>() -> [Page; N] {
        // SAFETY: an all-zero `Page` is valid (atomics and null pointers).
        unsafe { core::mem::zeroed() }
    }

    fn order_of(list: &PageList, pages: &[Page]) -> [usize; 8] {
        let mut out = [usize::MAX; 8];
        let mut p = list.first();
        let mut i = 0;
        while !p.is_null() {
            out[i] = (p as usize - pages.as_ptr() as usize) / core::mem::size_of::<Page>();
            // SAFETY: `p` is one of `pages`, linked by the list.
            p = unsafe { (*p).next.load(Relaxed) };
            i += 1;
        }
        out
    }

    #[test]
    fn page_list_keeps_order_and_length() {
        let pages = pages::<4>();
        let ptr = |i: usize| &pages[i] as *const Page as *mut Page;
        let mut list = PageList::new();
        assert!(list.is_empty() && list.first().is_null() && list.last().is_null());
        // SAFETY: the pages are ours and on no list; the list is ours.
        unsafe {
            list.push_head(ptr(1));
            list.push_tail(ptr(2));
            list.push_head(ptr(0));
            list.push_tail(ptr(3));
        }
        assert_eq!(list.len(), 4);
        assert_eq!(order_of(&list, &pages)[..5], [0, 1, 2, 3, usize::MAX]);
        // SAFETY: page 2 is on the list.
        unsafe { list.remove(ptr(2)) };
        assert_eq!(order_of(&list, &pages)[..4], [0, 1, 3, usize::MAX]);
        assert!(pages[2].next.load(Relaxed).is_null() && pages[2].prev.load(Relaxed).is_null());
        // SAFETY: the list is ours.
        unsafe {
            assert_eq!(list.pop_tail(), ptr(3));
            assert_eq!(list.pop_head(), ptr(0));
            assert_eq!(list.pop_head(), ptr(1));
            assert!(list.pop_head().is_null() && list.pop_tail().is_null());
        }
        assert!(list.is_empty() && list.last().is_null());
        assert_eq!(list.len(), 0);
    }

    #[test]
    fn reset_clears_the_allocator_half_only() {
        let pages = pages::<1>();
        let p = &pages[0];
        p.set_flags(PageFlags::BUDDY | PageFlags::REPORTED);
        p.set_order(5);
        p.private.store(7, Relaxed);
        p.owner[0].store(9, Relaxed);
        assert!(p.is_buddy() && p.order() == 5);
        p.reset();
        assert_eq!(p.flags(), PageFlags::empty());
        assert_eq!((p.order(), p.private.load(Relaxed)), (0, 0));
        assert_eq!(p.owner[0].load(Relaxed), 9);
    }
}
