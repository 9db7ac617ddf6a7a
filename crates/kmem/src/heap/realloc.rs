//! `realloc` on the process heap: [`Heap::realloc`] and the front ends' fast form,
//! [`Heap::realloc_object`].
//!
//! `realloc` stays in place while the object's class still holds the new size and at
//! least half of the class is used; growing a little past a class moves the object
//! to the power of two above it (see `realloc_target`), so growing buffers move no
//! more often than with the kernel's power-of-two classes. The object a move leaves,
//! from a class of `OUTGROWN_MIN` bytes up (`kmem_core::kmalloc`), goes onto the
//! spare sheaf while it has room and then back to its slab rather than to the barn, so
//! that its memory can serve the larger class soon (not in per-CPU rseq mode, whose
//! frees keep their restartable push). A page block stays while
//! it holds the new size, grows into the buddy blocks after it when they are free
//! and shrinks by freeing its upper halves. A block that `realloc` has to move to more
//! than 1 MiB (past the slab classes) moves into a direct mapping, not a page block
//! (while fewer than [`REALLOC_MAPPINGS_MAX`] huge allocations are live): a buffer that
//! grew that far is likely to grow again, and a mapping grows without a copy, into the
//! cached mapping right after it or with `mremap` (a `Vec` doubled to 8 MiB copied
//! 4 MiB at its last step into a new mapping, as page blocks end at 4 MiB). A mapping
//! resized to more than 1 MiB stays one.
//!
//! No lock of its own: as `layout` (the kmalloc and page paths follow the CPU area's
//! rules, huge mappings take the huge list's lock inside `crate::huge`).

use super::layout::{alloc_layout, dealloc_fast, dealloc_other};
use super::thread::{active_objcg, rseq_tag};
use super::Heap;
use crate::platform::fast_tls;
use kmem_core::kmalloc::{
    outgrown_to_slab, KMALLOC_MAX_CACHE_SIZE, KMALLOC_MAX_SIZE, OUTGROWN_MIN,
};
use kmem_core::page::{get_order, Page};
use kmem_core::slab::{KmemCache, ObjectLookup};
use kmem_core::{Gfp, MAX_ORDER, PAGE_SIZE};
use std::alloc::Layout;
use std::ptr::{self, NonNull};

/// Live huge allocations past which a realloc that moves a buffer above the slab
/// classes gives it a page block (up to 4 MiB) rather than a mapping
/// ([`Heap::alloc_moved`]): as many as the mapping cache keeps
/// ([`crate::huge::CACHE_SLOTS`]), so that a program that grows a round of buffers,
/// frees them and grows the next gets the round's mappings back from the cache. Past
/// it they were unmapped at their free and the next round's faulted in fresh: 100
/// buffers grown from 64 KiB to 2 MiB and freed, round after round, took 80 ms a
/// round against 28 with page blocks (recycled resident).
const REALLOC_MAPPINGS_MAX: usize = crate::huge::CACHE_SLOTS;

/// The size to allocate when a kmalloc object of class `have` moves for `new_size`
/// bytes. A small step past the class (at most a quarter: a string or buffer growing
/// a little at a time) moves to the power of two at or above `new_size`, so that the
/// classes between the powers of two (four per doubling) cost such a buffer no more
/// moves than the kernel's power-of-two classes would: it stays in place until the
/// next power of two. A bigger step (a vector doubling) or a shrink gets its own class.
fn realloc_target(have: usize, new_size: usize) -> usize {
    if new_size > have && new_size - have <= have / 4 && new_size <= KMALLOC_MAX_CACHE_SIZE {
        new_size.next_power_of_two().min(KMALLOC_MAX_CACHE_SIZE)
    } else {
        new_size
    }
}

impl Heap {
    /// Resizes the allocation at `p` (made for `layout`) to `new_size` bytes, keeping
    /// the alignment; in place when it can (see the module doc). Null on failure, with
    /// the old allocation intact.
    ///
    /// # Safety
    /// `p` is an allocation of this heap for `layout`, owned by the caller; `new_size`
    /// rounded up to the alignment does not overflow `isize`.
    pub unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded from the caller.
        if let Some(q) = unsafe { self.realloc_object(p, layout.align(), layout.size(), new_size) }
        {
            return q;
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.realloc_other(p, layout, new_size) }
    }

    /// The common case of [`Heap::realloc`], for the front ends too: `p` is an object
    /// of a slab cache that records no request sizes. Stays in place or moves (through
    /// the front ends' fast paths: a pop, a copy of at most `old_limit` bytes, a push)
    /// with one lookup of `p`; `None` (nothing done) for everything else.
    ///
    /// # Safety
    /// `p` is an allocation of this heap, owned by the caller; `align` (a power of
    /// two) is the alignment the result must have, which `p` has whenever its class
    /// holds `new_size` bytes (C's `realloc` passes `malloc`'s alignment for
    /// `new_size`); `new_size` rounded up to `align` does not overflow `isize`.
    #[inline]
    pub unsafe fn realloc_object(
        &self,
        p: *mut u8,
        align: usize,
        old_limit: usize,
        new_size: usize,
    ) -> Option<*mut u8> {
        // SAFETY: forwarded from the caller.
        unsafe { self.realloc_object_freed(p, align, old_limit, new_size) }.map(|(q, _)| q)
    }

    /// [`Heap::realloc_object`], and whether the free of `p` after a move went through
    /// (false: it was refused and reported, a double free found at a sheaf's or a
    /// freelist's head or into a kept slab: C's `realloc` then aborts, as `free`
    /// does). True when nothing moved.
    ///
    /// # Safety
    /// As [`Heap::realloc_object`].
    #[inline]
    pub unsafe fn realloc_object_freed(
        &self,
        p: *mut u8,
        align: usize,
        old_limit: usize,
        new_size: usize,
    ) -> Option<(*mut u8, bool)> {
        // The lookup tests the span itself (`virt_to_head_page`): a pointer outside
        // it is `Bad`, as any other that is not a slab object.
        // SAFETY: `p` is the caller's allocation (this function's contract): its
        // cache lives while it does.
        let ObjectLookup::Slab(s, slab) = (unsafe { self.kmem.slub().lookup(p) }) else {
            return None;
        };
        let cfg = s.config();
        if cfg.orig_off != 0 {
            return None; // it records request sizes (slub_debug): the general path
        }
        let have = cfg.object_size;
        // Same class, or a shrink that keeps at least half of it: stays (no copy; it
        // wastes at most half its class).
        if new_size <= have && new_size >= have / 2 {
            return Some((p, true));
        }
        let layout = Layout::from_size_align(realloc_target(have, new_size), align).ok()?;
        let q = if layout.size() > KMALLOC_MAX_CACHE_SIZE {
            self.alloc_moved(layout)
        } else {
            alloc_layout(layout, false)
        };
        let mut freed = true;
        if !q.is_null() {
            // SAFETY: both allocations are ours and hold this many bytes; distinct.
            unsafe {
                ptr::copy_nonoverlapping(p, q, have.min(old_limit).min(new_size));
                if !dealloc_fast(p) {
                    freed = if new_size > have
                        && have >= OUTGROWN_MIN
                        && fast_tls::get() != rseq_tag()
                        && outgrown_to_slab(cfg, slab)
                    {
                        self.free_outgrown(s, slab, p)
                    } else {
                        dealloc_other(p)
                    };
                }
            }
        }
        Some((q, freed))
    }

    /// The new block of a realloc that moves a buffer to `layout`, more than the
    /// largest slab class holds: a direct mapping, which grows from then on without a
    /// copy (see the module doc), while fewer than [`REALLOC_MAPPINGS_MAX`] huge
    /// allocations are live; else the usual block (a page block up to 4 MiB), and so
    /// when the mapping fails (the kernel's limit on mappings, say) in a heap with no
    /// bound and no active memory cgroup. Under a bound (`KMEM_MAX`) or a group, a
    /// failed mapping is the answer, whatever refused it: the attempt has trimmed the
    /// caches and lent the bound's free pages, and the group counted its refusal,
    /// once. Not for red-zoned blocks, nor alignments above a page. Null when memory
    /// runs out.
    #[inline(never)]
    fn alloc_moved(&self, layout: Layout) -> *mut u8 {
        let (size, align) = (layout.size(), layout.align());
        if align > PAGE_SIZE || self.zoned_blocks() || self.huge.totals().0 >= REALLOC_MAPPINGS_MAX
        {
            return self.alloc(layout);
        }
        let q = self.huge_alloc_raw(size, align, false);
        if q.is_null()
            && size <= KMALLOC_MAX_SIZE
            && self.kmem.pages.max_pages() == 0
            && active_objcg().is_none()
        {
            return self.alloc(layout);
        }
        q
    }

    /// Frees `p`, an object of `s` (slab `slab`) that a realloc has just outgrown,
    /// to its slab (`Slub::free_outgrown`).
    ///
    /// # Safety
    /// `p` is an uncharged object of `s` in `slab`, given up by the caller.
    #[inline(never)]
    unsafe fn free_outgrown(&self, s: &KmemCache, slab: NonNull<Page>, p: *mut u8) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.kmem
                .slub()
                .free_outgrown(self.cpu().get(), s, slab, p as usize)
        }
    }

    /// [`Heap::realloc`] past [`Heap::realloc_object`]: large blocks, huge mappings,
    /// debug caches, KFENCE samples.
    ///
    /// # Safety
    /// As [`Heap::realloc`].
    #[inline(never)]
    unsafe fn realloc_other(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        let pa = &self.kmem.pages;
        // What to allocate if it moves.
        let mut want = new_size;
        if pa.in_span(p) {
            // SAFETY: `p` is the caller's allocation (this function's contract).
            match unsafe { self.kmem.slub().lookup(p) } {
                ObjectLookup::Slab(s, _) => {
                    let have = s.config().object_size;
                    // Same class, or a shrink that keeps at least half of it: stays
                    // (no copy; it wastes at most half its class).
                    if new_size <= have && new_size >= have / 2 {
                        // A cache that records requests (slub_debug): the new one.
                        // SAFETY: `p` is the caller's allocation (the function's
                        // contract), an object of `s` as `lookup` found.
                        unsafe { self.kmem.slub().set_orig_size(s, p as usize, new_size) };
                        return p;
                    }
                    want = realloc_target(have, new_size);
                }
                // A charged block moves (charging the new block, uncharging this), and
                // so does a red-zoned one (its tail follows the size).
                ObjectLookup::Large(head)
                    // SAFETY: `lookup` found `head`, the head of the caller's block.
                    if unsafe { self.kmem.memcg().page_objcg(head) }.is_some()
                        || self.zoned_blocks() => {}
                ObjectLookup::Large(head) => {
                    // SAFETY: the head of a live block of ours.
                    let old = unsafe { head.as_ref() }.order();
                    let new = get_order(new_size);
                    if new <= old {
                        // Shrink: give back the upper halves; the head stays, and with
                        // it the address and its alignment.
                        if new < old {
                            // SAFETY: our block; the caller gives up the bytes past
                            // `new_size`, which fit in the kept 2^new pages.
                            unsafe { pa.shrink_in_place(self.cpu().get(), head, old, new) };
                        }
                        return p;
                    }
                    // SAFETY: the caller's block (the function's contract), of order
                    // `old`, its head as `lookup` found it.
                    if new <= MAX_ORDER && unsafe { pa.grow_in_place(head, old, new, Gfp::COMP) } {
                        return p;
                    }
                }
                ObjectLookup::Bad(_) => {}
            }
        } else if align <= PAGE_SIZE && new_size > KMALLOC_MAX_CACHE_SIZE && !self.zoned_blocks() {
            // SAFETY: forwarded from the caller (`p` is ours and the caller's to resize).
            let mut grown = unsafe { self.huge.remap(self, p, new_size) };
            if grown.is_some_and(|q| q.is_null()) && self.kmem.pages.max_pages() != 0 {
                // At the bound: what the caches keep goes back first, as before a new
                // mapping (`huge_alloc_raw`), then one more try.
                self.trim_at_bound();
                // SAFETY: forwarded from the caller.
                grown = unsafe { self.huge.remap(self, p, new_size) };
            }
            if let Some(q) = grown {
                return q;
            }
        }
        // Move: allocate, copy what both hold, free. Past the slab classes the new
        // block is a mapping, which grows from then on without a copy (see the module
        // doc).
        let Ok(new_layout) = Layout::from_size_align(want, align) else {
            return ptr::null_mut();
        };
        let q = if want > KMALLOC_MAX_CACHE_SIZE {
            self.alloc_moved(new_layout)
        } else {
            self.alloc(new_layout)
        };
        if !q.is_null() {
            // SAFETY: `p` is the caller's allocation (this function's contract).
            let old_size = unsafe { self.usable_size(p) }
                .min(layout.size())
                .min(new_size);
            // SAFETY: both allocations are ours and hold `old_size` bytes; distinct.
            unsafe {
                ptr::copy_nonoverlapping(p, q, old_size);
                self.dealloc(p);
            }
        }
        q
    }
}
