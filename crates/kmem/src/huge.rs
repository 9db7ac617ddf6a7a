//! Huge allocations: larger than the largest buddy block (4 MiB), or aligned beyond
//! it. Each is a direct mapping (`mmap`) with its own descriptor — a small object from
//! kmalloc, so this metadata too comes from kmem's own pages — on a list under a spin
//! lock; `munmap` frees it and `mremap` resizes it. They are few and large, so a list
//! is enough: a lookup walks it only for pointers outside kmem's span.

use kmem_core::sync::SpinLock;
use kmem_core::{Gfp, PAGE_SIZE};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};

/// One huge allocation.
#[repr(C)]
struct HugeDesc {
    /// The address handed out.
    addr: usize,
    /// Bytes mapped at `addr` (a whole number of pages).
    len: usize,
    next: *mut HugeDesc,
}

/// The live huge allocations.
pub(crate) struct HugeList {
    head: SpinLock<HugeHead>,
    count: AtomicUsize,
    bytes: AtomicUsize,
}

struct HugeHead(*mut HugeDesc);
// SAFETY: the list is only reached under its lock; descriptors are heap objects that
// live until removed.
unsafe impl Send for HugeHead {}

fn page_round(n: usize) -> Option<usize> {
    n.checked_add(PAGE_SIZE - 1).map(|v| v & !(PAGE_SIZE - 1))
}

impl HugeList {
    pub(crate) const fn new() -> Self {
        Self {
            head: SpinLock::new(HugeHead(ptr::null_mut())),
            count: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
        }
    }

    /// Live huge allocations and their mapped bytes.
    pub(crate) fn totals(&self) -> (usize, usize) {
        (
            self.count.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    /// Maps `size` bytes aligned to `align` (fresh anonymous memory: zero). `desc`
    /// allocates the descriptor. Null when the mapping or descriptor cannot be had.
    pub(crate) fn alloc(
        &self,
        size: usize,
        align: usize,
        desc: impl FnOnce() -> Option<NonNull<u8>>,
    ) -> *mut u8 {
        let Some(len) = page_round(size.max(1)) else {
            return ptr::null_mut();
        };
        let extra = if align > PAGE_SIZE { align } else { 0 };
        let Some(map_len) = len.checked_add(extra) else {
            return ptr::null_mut();
        };
        // SAFETY: an anonymous private mapping with no address hint.
        let raw = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return ptr::null_mut();
        }
        let start = raw as usize;
        let addr = (start + align.max(PAGE_SIZE) - 1) & !(align.max(PAGE_SIZE) - 1);
        // SAFETY: both ranges are unaligned slop of the mapping made just above.
        unsafe {
            if addr > start {
                libc::munmap(raw, addr - start);
            }
            let end = start + map_len;
            if end > addr + len {
                libc::munmap((addr + len) as *mut libc::c_void, end - (addr + len));
            }
        }
        let Some(d) = desc() else {
            // SAFETY: our mapping, never handed out.
            unsafe { libc::munmap(addr as *mut libc::c_void, len) };
            return ptr::null_mut();
        };
        let d = d.as_ptr() as *mut HugeDesc;
        let mut head = self.head.lock();
        // SAFETY: `d` is a fresh heap object big and aligned enough for a HugeDesc.
        unsafe {
            d.write(HugeDesc {
                addr,
                len,
                next: head.0,
            })
        };
        head.0 = d;
        drop(head);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(len, Ordering::Relaxed);
        addr as *mut u8
    }

    /// The mapped size of the huge allocation at `p`, if it is one.
    pub(crate) fn size_of(&self, p: *const u8) -> Option<usize> {
        let head = self.head.lock();
        let mut d = head.0;
        // SAFETY: descriptors on the list are live while the lock is held.
        while let Some(desc) = unsafe { d.as_ref() } {
            if desc.addr == p as usize {
                return Some(desc.len);
            }
            d = desc.next;
        }
        None
    }

    /// Unmaps the huge allocation at `p`; returns its descriptor's memory (for the
    /// caller to free), or `None` if `p` is not one.
    ///
    /// # Safety
    /// If `p` is a huge allocation, the caller gives it up.
    pub(crate) unsafe fn free(&self, p: *mut u8) -> Option<NonNull<u8>> {
        let d = self.unlink(p)?;
        // SAFETY: unlinked, so ours alone.
        let desc = unsafe { &*d };
        // SAFETY: the mapping belongs to the allocation the caller gives up.
        unsafe { libc::munmap(desc.addr as *mut libc::c_void, desc.len) };
        self.count.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(desc.len, Ordering::Relaxed);
        NonNull::new(d as *mut u8)
    }

    fn unlink(&self, p: *mut u8) -> Option<*mut HugeDesc> {
        let mut head = self.head.lock();
        let mut link: *mut *mut HugeDesc = &mut head.0;
        // SAFETY: the links are the list head and `next` fields of live descriptors,
        // all reached under the lock.
        unsafe {
            while !(*link).is_null() {
                let d = *link;
                if (*d).addr == p as usize {
                    *link = (*d).next;
                    return Some(d);
                }
                link = &mut (*d).next;
            }
        }
        None
    }

    /// Resizes the huge allocation at `p` to `new_size` bytes with `mremap`, which may
    /// move it (keeping page alignment; alignments above a page are not kept by a move,
    /// so those callers must not come here). Returns the new address, null on failure
    /// (the old allocation is intact), or `None` if `p` is not a huge allocation.
    ///
    /// # Safety
    /// If `p` is a huge allocation, the caller owns it.
    pub(crate) unsafe fn remap(&self, p: *mut u8, new_size: usize) -> Option<*mut u8> {
        let new_len = page_round(new_size.max(1))?;
        let head = self.head.lock();
        let mut d = head.0;
        // SAFETY: live descriptors under the lock.
        while let Some(desc) = unsafe { d.as_mut() } {
            if desc.addr == p as usize {
                // SAFETY: the caller owns the mapping; MREMAP_MAYMOVE keeps its
                // contents, page aligned.
                let q = unsafe {
                    libc::mremap(
                        desc.addr as *mut libc::c_void,
                        desc.len,
                        new_len,
                        libc::MREMAP_MAYMOVE,
                    )
                };
                if q == libc::MAP_FAILED {
                    return Some(ptr::null_mut());
                }
                self.bytes.fetch_add(new_len, Ordering::Relaxed);
                self.bytes.fetch_sub(desc.len, Ordering::Relaxed);
                desc.addr = q as usize;
                desc.len = new_len;
                return Some(q as *mut u8);
            }
            d = desc.next;
        }
        None
    }
}

/// GFP flags for a descriptor.
pub(crate) const DESC_GFP: Gfp = Gfp::NOWARN;
/// Bytes a descriptor takes.
pub(crate) const DESC_SIZE: usize = std::mem::size_of::<HugeDesc>();
