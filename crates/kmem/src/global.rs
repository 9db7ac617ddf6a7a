//! kmem as Rust's allocator: [`KmemAlloc`] for `#[global_allocator]` and for
//! `allocator_api2` collections.
//!
//! Every method forwards to the process heap ([`crate::Heap::alloc`] and its
//! siblings; the heap's `layout` module says how each [`Layout`] is served). Zero-sized
//! requests of the Allocator API get dangling pointers and never reach the heap.
//!
//! Owns no state and takes no lock of its own.

use crate::heap::heap;
use allocator_api2::alloc::{AllocError, Allocator};
use std::alloc::{GlobalAlloc, Layout};
use std::ptr::{self, NonNull};
/// kmem as a Rust allocator: `#[global_allocator] static A: kmem::KmemAlloc = kmem::KmemAlloc;`
/// It is a handle to the process heap ([`heap`]); every value is the same allocator.
///
/// ```
/// #[global_allocator]
/// static GLOBAL: kmem::KmemAlloc = kmem::KmemAlloc;
///
/// let v: Vec<u64> = (0..1000).collect(); // served by kmem's kmalloc caches
/// assert_eq!(v.iter().sum::<u64>(), 499_500);
///
/// // An allocator_api2 collection on kmem, whatever the global allocator is:
/// let mut w = allocator_api2::vec::Vec::new_in(kmem::KmemAlloc);
/// w.push(7u8);
/// assert_eq!(w[0], 7);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KmemAlloc;

// SAFETY: every method forwards to the process heap, which returns memory of at least
// the layout's size and alignment (the heap's `layout` module), never hands out a block twice, and
// frees only what it handed out (anything else is reported and left alone).
unsafe impl GlobalAlloc for KmemAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        crate::heap::alloc_layout(layout, false)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the GlobalAlloc contract: `ptr` came from this allocator.
        unsafe { crate::heap::dealloc_ptr(ptr) };
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        crate::heap::alloc_layout(layout, true)
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the GlobalAlloc contract.
        unsafe { heap().realloc(ptr, layout, new_size) }
    }
}

/// A zero-sized allocation: a dangling, aligned pointer that is never freed.
fn dangling(layout: Layout) -> NonNull<[u8]> {
    // An address equal to the alignment is non-null and aligned.
    let p = ptr::without_provenance_mut::<u8>(layout.align());
    // SAFETY: `align` is never zero.
    NonNull::slice_from_raw_parts(unsafe { NonNull::new_unchecked(p) }, 0)
}

// SAFETY: as for GlobalAlloc; zero-sized requests get dangling pointers that
// `deallocate` ignores, and `grow`/`shrink` keep the contents up to the smaller size.
unsafe impl Allocator for KmemAlloc {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return Ok(dangling(layout));
        }
        let p = NonNull::new(heap().alloc(layout)).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(p, layout.size()))
    }

    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return Ok(dangling(layout));
        }
        let p = NonNull::new(heap().alloc_zeroed(layout)).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(p, layout.size()))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            // SAFETY: the Allocator contract: `ptr` came from this allocator.
            unsafe { heap().dealloc(ptr.as_ptr()) };
        }
    }

    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from the caller.
        unsafe { self.resize(ptr, old, new, false) }
    }

    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from the caller.
        unsafe { self.resize(ptr, old, new, true) }
    }

    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: forwarded from the caller.
        unsafe { self.resize(ptr, old, new, false) }
    }
}

impl KmemAlloc {
    /// grow/shrink for the Allocator API: realloc when the alignment is unchanged,
    /// else allocate + copy + free.
    ///
    /// # Safety
    /// The Allocator contract for grow/shrink.
    unsafe fn resize(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
        zero: bool,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if old.size() == 0 {
            return if zero {
                self.allocate_zeroed(new)
            } else {
                self.allocate(new)
            };
        }
        if new.size() == 0 {
            // SAFETY: ours, given up.
            unsafe { self.deallocate(ptr, old) };
            return Ok(dangling(new));
        }
        let q = if new.align() == old.align() {
            // SAFETY: forwarded from the caller.
            unsafe { heap().realloc(ptr.as_ptr(), old, new.size()) }
        } else {
            let q = heap().alloc(new);
            if !q.is_null() {
                // SAFETY: both ours; copy what both hold, then free the old one.
                unsafe {
                    ptr::copy_nonoverlapping(ptr.as_ptr(), q, old.size().min(new.size()));
                    heap().dealloc(ptr.as_ptr());
                }
            }
            q
        };
        let q = NonNull::new(q).ok_or(AllocError)?;
        if zero && new.size() > old.size() {
            // SAFETY: the grown tail is ours.
            unsafe { ptr::write_bytes(q.as_ptr().add(old.size()), 0, new.size() - old.size()) };
        }
        Ok(NonNull::slice_from_raw_parts(q, new.size()))
    }
}
