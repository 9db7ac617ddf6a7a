//! The slab layer's interface to accounting (memcg): the object-extension vector a
//! slab may carry (`slab->obj_exts`) and the hooks a free runs before an object or a
//! page block goes back.
//!
//! The slab and kmalloc layers know nothing of memory cgroups: a layer above
//! implements [`Accounting`] (memcontrol does) and passes it to the entry points that
//! free; [`NoAccounting`] does nothing. A slab's `obj_exts` word is the head page's
//! `private` word tagged with [`OBJ_EXTS`]; its vector is allocated and read by the
//! accounting layer, and freed here when the slab is discarded (it always comes from
//! the plain kmalloc caches or the page allocator, which are never accounted).

use super::KmemCache;
use crate::page::Page;
use crate::percpu::CpuRef;
use crate::sync::Ordering::Acquire;
use core::ptr::NonNull;

/// `page.private` tag: the word is a slab's object-extension vector (`MEMCG_DATA_OBJEXTS`).
pub const OBJ_EXTS: usize = 1;
/// `page.private` tag: a page block charged by the accounting layer (`MEMCG_DATA_KMEM`);
/// a free of such a block runs [`Accounting::page_free_hook`].
pub const PAGE_CHARGED: usize = 2;

/// What a layer above the slab allocator does when memory is freed. The hooks are
/// called by the allocator's frees only; their arguments are trusted (the memory
/// controller's read the slab's vector and uncharge), hence `unsafe` to call.
pub trait Accounting {
    /// Called before the object at `obj` of `s` is freed, when its slab (head page
    /// `slab`) has an object-extension vector ([`slab_obj_exts`] is non-zero):
    /// after this call another context may reuse the object's slot.
    ///
    /// # Safety
    /// `slab` heads a live slab of `s`, `obj` is an allocated object of it that the
    /// caller is freeing, and the hook runs once for that free.
    unsafe fn slab_free_hook(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: &Page,
        obj: usize,
    );

    /// Called before a page block of 2^`order` pages (head `head`) is freed, when its
    /// head's `private` word carries [`PAGE_CHARGED`] (see [`page_free_hook`]).
    ///
    /// # Safety
    /// `head` heads a live block of 2^`order` pages of this allocator that the caller
    /// is freeing, and the hook runs once for that free.
    unsafe fn page_free_hook(&self, cpu: Option<CpuRef<'_>>, head: NonNull<Page>, order: usize);
}

/// No accounting: frees run no hook.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoAccounting;

impl Accounting for NoAccounting {
    #[inline(always)]
    unsafe fn slab_free_hook(&self, _: Option<CpuRef<'_>>, _: &KmemCache, _: &Page, _: usize) {}
    #[inline(always)]
    unsafe fn page_free_hook(&self, _: Option<CpuRef<'_>>, _: NonNull<Page>, _: usize) {}
}

/// The slab's object-extension word: its vector's address tagged [`OBJ_EXTS`], or a
/// word without that tag when it has none.
#[inline(always)]
pub fn slab_obj_exts(head: &Page) -> usize {
    head.private.load(Acquire)
}

/// Whether a slab has an object-extension vector (some of its objects may be charged).
///
/// # Safety
/// `slab` is a page descriptor of a live allocator (a slab head found by a lookup).
#[inline]
pub unsafe fn has_obj_exts(slab: NonNull<Page>) -> bool {
    // SAFETY: a valid descriptor (caller).
    slab_obj_exts(unsafe { slab.as_ref() }) & OBJ_EXTS != 0
}

/// Runs `acct`'s free hook for the object at `obj` of `s` if its slab (head page
/// `head`) has an object-extension vector: one load and a branch otherwise.
///
/// # Safety
/// As [`Accounting::slab_free_hook`].
#[inline(always)]
pub unsafe fn slab_free_hook(
    acct: &impl Accounting,
    cpu: Option<CpuRef<'_>>,
    s: &KmemCache,
    head: &Page,
    obj: usize,
) {
    if slab_obj_exts(head) & OBJ_EXTS != 0 {
        // SAFETY: forwarded from the caller.
        unsafe { acct.slab_free_hook(cpu, s, head, obj) };
    }
}

/// Runs `acct`'s page free hook for the block at `head` (2^`order` pages) if it was
/// charged: one load and a branch otherwise.
///
/// # Safety
/// As [`Accounting::page_free_hook`].
#[inline(always)]
pub unsafe fn page_free_hook(
    acct: &impl Accounting,
    cpu: Option<CpuRef<'_>>,
    head: NonNull<Page>,
    order: usize,
) {
    // SAFETY: the head page of a live block (the caller is freeing it).
    if unsafe { head.as_ref() }.private.load(Acquire) & PAGE_CHARGED != 0 {
        // SAFETY: forwarded from the caller.
        unsafe { acct.page_free_hook(cpu, head, order) };
    }
}
