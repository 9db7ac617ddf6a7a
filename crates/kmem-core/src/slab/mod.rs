//! The slab allocator (SLUB, mm/slub.c), on the page allocator.
//!
//! ## Types
//! - [`KmemCache`] (`struct kmem_cache`): one object size and its slabs. Its layout is
//!   fixed at creation ([`CacheConfig`]); per node it has a [`KmemCacheNode`] (the
//!   partial list under `list_lock`); per CPU area a [`KmemCacheCpu`] at `cpu_offset`.
//! - A *slab* is a block of 2^order pages. Its metadata lives in the head page's
//!   descriptor, never inside the slab, and is read and written through the [`Slab`]
//!   view only: the [`SlabState`] (freelist offset, inuse, frozen — one word, so a
//!   single compare-and-swap updates all three), the cache, which CPU area froze the
//!   slab, and that CPU's local freelist. Tail pages carry `PG_TAIL` and a pointer to
//!   the head (`compound_head`).
//! - Freelists are chains through a free pointer inside each free object (at
//!   `offset`), ended by an *end token* `slab base | 1`, never null: a freelist value
//!   always tells its slab ("slub: Use end_token instead of NULL to terminate
//!   freelists").
//!
//! ## Slab states (who may take objects from a slab)
//! | state        | frozen | on a list            | objects go out through      |
//! |--------------|--------|----------------------|-----------------------------|
//! | CPU slab     | 1      | none                 | the CPU's `c.freelist`      |
//! | CPU partial  | 1      | one CPU's `partial`  | nobody, until it is CPU slab|
//! | node partial | 0      | node `partial` list  | `get_partial_node`, no-CPU allocations |
//! | full         | 0      | none                 | nobody                      |
//! Anybody may free into any slab: a CAS on its state pushes onto `slab.freelist`.
//! A node's fresh slab (sheaves design, `fresh.rs`) is, to this table, full or node
//! partial: its untouched tail counts in use and is on no freelist; refills on the
//! node take it by address under `list_lock`. A node's kept empty slabs (`empty.rs`)
//! are, to it, full slabs with no object in use: on no node list, nobody takes from
//! them until a refill takes one whole under `list_lock`.
//! The CPU that froze a slab frees into it without an atomic: objects go on the slab's
//! *local* freelist ([`Slab`]), which only that CPU touches, like mimalloc's
//! `local_free`. They still count as in use (they are the freezing CPU's to reuse); the
//! local list becomes the CPU freelist when the slab becomes the CPU slab again, and is
//! merged into `slab.freelist` (with `inuse` lowered) when the slab is unfrozen.
//!
//! ## Rules
//! 1. Locks: `CacheList::lock` → a node's `list_lock` (one node at a time) → a debug
//!    cache's `full` → the page allocator's locks, as the crate docs' lock order says.
//!    No `list_lock` is held across a page allocation. The lock of the decay's list
//!    of idle sheaves (`barn_drain.rs`) is innermost: nothing is taken under it.
//! 2. Every change of list membership, and every freeze or unfreeze of a slab that is
//!    or will be on a node list, happens under that node's `list_lock`; the state CAS
//!    that goes with it is done while holding the lock. Freezing a full slab (a free
//!    into it that puts it on the freer's CPU partial list) needs no lock: it is on no
//!    list. Hence: an unfrozen slab is on the node partial list exactly when it has a
//!    free object and some in use, or none in use and is not one of the node's kept
//!    empty slabs (`empty.rs`, a list under the same lock).
//! 3. Only the owner of a CPU area touches its `KmemCacheCpu` (the std default: one
//!    area per thread). The fast paths are plain loads and stores: allocation pops
//!    `c.freelist`, a free pushes when the object is in the CPU slab. `freelist` and
//!    `tid` sit together, 16-byte aligned, and `tid` advances on each operation, so a
//!    lockless per-CPU mode (a double-word CAS on the pair) fits this layout.
//! 4. A context with no CPU area (thread exit, early start) allocates under
//!    `list_lock` from a node partial slab and frees through `__slab_free`.
//!
//! ## Files
//! | file | owns |
//! |------|------|
//! | `mod.rs` | [`Slub`] (the operations, bound to the page allocator and the cache list), object lookup |
//! | `cache.rs`, `layout.rs`, `cache_list.rs` | [`KmemCache`], [`KmemCacheNode`] and where a cache's node states are ([`NodeTable`]); [`CacheConfig`] (`calculate_sizes`/`order`); the list of caches |
//! | `state.rs`, `freelist.rs` | the [`Slab`] view and [`SlabState`]; free-pointer encoding |
//! | `cpu.rs` | [`KmemCacheCpu`] and how a CPU freelist is taken and installed |
//! | `alloc.rs`, `free.rs` | the fast paths and their slow paths |
//! | `new_slab.rs`, `partial.rs`, `cpu_partial.rs` | making and discarding slabs; node partial lists; CPU partial slabs, deactivation, flushing |
//! | `lockless.rs` | per-CPU mode's lockless fast paths |
//! | `sheaf.rs`, `sheaf_slow.rs`, `barn.rs`, `barn_drain.rs` | the sheaves design: per-CPU main and spare sheaves, their slow paths, thread exit; the slow paths the front ends call straight from their misses (the swap without a call); the per-node barns; the decay's idle sheaves, flushed by whoever is about to make a slab |
//! | `refill.rs`, `fresh.rs`, `empty.rs`, `prefill.rs`, `census.rs` | sheaves to and from slabs (bulk refill and flush); a node's fresh slab, taken by address; a node's kept empty slabs; prefilled sheaves; a census of where free objects wait |
//! | `bulk.rs`, `accounting.rs` | bulk alloc/free; the [`Accounting`] interface |
//! | `debug.rs`, `report.rs`, `slabinfo.rs` | slub_debug; reports; slabinfo, slabtop, statistics files |
//!
//! ## Shared CPU areas (per-CPU mode)
//! Where CPU areas are shared by contexts that can be preempted and migrate (std's
//! per-CPU mode, a preemptible kernel), whoever holds an area's local lock is its
//! owner for everything above. With [`PerCpuAccess::Cas`] the allocation and free
//! fast paths also run without the lock (`alloc_lockless`, `free_lockless`): they
//! read `tid` then `freelist` and change the pair with a double-word CAS, so they
//! never act on a pair that moved since they read it. Every other change of the pair
//! is a CAS too, and follows one rule: a slow path first *takes* the CPU freelist
//! (CAS to 0), works on what it took, and *installs* the new freelist at the end.
//! While the pair holds 0 the lockless paths leave it alone (a pop needs an object, a
//! push needs the CPU slab), so between take and install the lock holder owns it.
//! Partial lists, frozen slabs' local freelists and statistics stay lock-only
//! (statistics counted by lockless paths may lose increments).
//! With [`PerCpuAccess::Rseq`] the lockless fast paths are the platform's restartable
//! sequences, which commit with a plain store on their CPU: the lock holder then never
//! pushes or pops on a CPU freelist; it takes one through
//! [`crate::Platform::take_cpu_freelist`] and installs a list while it is empty.

pub mod accounting;
mod alloc;
pub mod barn;
mod barn_drain;
pub mod barn_spill;
mod bulk;
pub(crate) mod cache;
mod cache_list;
mod census;
mod charged_sheaf;
mod cpu;
mod cpu_partial;
pub mod debug;
mod empty;
mod free;
mod freelist;
mod fresh;
mod layout;
mod locations;
mod lockless;
mod new_slab;
mod partial;
mod prefill;
mod refill;
mod report;
pub mod sheaf;
mod sheaf_fast;
mod sheaf_medium;
mod sheaf_mem;
mod sheaf_size;
mod sheaf_slow;
mod sheaf_top;
mod slabinfo;
mod stat;
mod state;
#[cfg(test)]
pub(crate) mod test_env;
mod validate;

pub use crate::slab_flags::SlabFlags;
pub use accounting::{has_obj_exts, Accounting, NoAccounting};
pub use alloc::post_alloc_init;
pub use cache::{CacheNodes, CacheWithNodes, KmemCache, KmemCacheNode, NodeTable, NEW_CACHE_NODES};
pub use cache_list::{CacheList, DestroyError};
pub use census::SheafCensus;
pub use charged_sheaf::{charged_sheaf_bytes, ChargedSheaf};
pub use cpu::{
    KmemCacheCpu, PerCpuAccess, FREELIST_OFFSET, FREE_MASK_OFFSET, FREE_START_LIMIT_OFFSET,
    FREE_START_MUL_OFFSET, LOCKLESS_SUPPORTED, MAIN_TOP_OFFSET, SHEAF_MAIN_OFFSET,
    SPARE_LIMIT_OFFSET, SPARE_OFFSET, SPARE_TOP_OFFSET,
};
use freelist::get_freepointer_racy;
pub(crate) use freelist::{get_freepointer, same_slab, set_freepointer};
pub(crate) use layout::NO_OBJCG_CLASS;
pub use layout::{calculate_order, CacheConfig, Ctor};
use lockless::Push;
pub use sheaf::{FastPath, SlabSheaf, SlubDesign};
pub use sheaf_fast::{sheaf_pop_at, sheaf_pop_at_indexed};
pub use sheaf_medium::{sheaf_pop_either_at, SMALL_OBJECT_MAX};
pub use sheaf_size::{
    barn_max_bytes, barn_max_full, sheaf_capacity, BARN_MAX_LARGE_OBJECT_BYTES,
    BARN_MAX_OBJECT_BYTES, BARN_SMALL_OBJECT, SHEAF_MAX_OBJECT_BYTES,
};
pub use slabinfo::{write_slabinfo_header, write_slabinfo_row, SlabRow};
pub use stat::{SlubStat, SlubStats, NEW_SLUB_STATS, NR_SLUB_STAT};
pub(crate) use state::*;
pub use state::{free_decision, FreeDecision, Slab, SlabState, END_OFFSET};

use crate::page::PageAllocator;
use crate::page::{Page, PageFlags, PAGE_SIZE};
use crate::platform::Platform;
use core::ptr::{self, NonNull};

/// Longest cache name kept (longer names are cut).
pub const CACHE_NAME_LEN: usize = 32;

/// Largest slab order (`slub_max_order` = `PAGE_ALLOC_COSTLY_ORDER`).
pub const SLUB_MAX_ORDER: usize = 3;

/// Objects up to this size get slabs of [`SMALL_OBJECT_SLAB_ORDER`] in the sheaves
/// design ([`CacheConfig::widen_small_slabs`]): the sizes of which the kernel's rule
/// puts 16 or more on one page.
pub const SMALL_SLAB_OBJECT_MAX: usize = 256;

/// The order of a small-object cache's slabs in the sheaves design (32 KiB, where
/// the kernel's rule gives one page), as mimalloc's small-object pages are 64 KiB.
/// A class's objects are then handed out in address order over 32 KiB instead of
/// 4 KiB, and objects allocated together are read together: a program that walks
/// what it built in the order it built it (a tracing collector, a linked structure)
/// stays in the streams the hardware prefetches. On one-page slabs each class's
/// stream broke at every page, onto a page of another class. Measured (BENCHMARKS.md,
/// "Small objects on 32 KiB slabs"): ten walks over 600,000 groups of seven 32–64 B
/// objects took 0.19–0.20 s on one-page slabs, 0.15–0.16 on 32 KiB ones (mimalloc
/// 0.15); CPython's collector over 600,000 small lists 1.46–1.53 s against
/// 1.32–1.37 (mimalloc 1.30–1.34). A refill from a new slab takes its first objects
/// without linking them and leaves the rest an unlinked fresh tail (`fresh.rs`), so
/// the larger slab's memory is touched as its objects are handed out, not when it is
/// made (caches with a constructor or a random freelist write every object then).
pub const SMALL_OBJECT_SLAB_ORDER: usize = 3;

const _: () = assert!(SMALL_OBJECT_SLAB_ORDER <= SLUB_MAX_ORDER);

/// Most objects one slab holds: a `SLUB_MAX_ORDER` slab of the smallest object, a
/// word (4,096 on 64-bit targets: kmalloc-8's 32 KiB slab). Larger orders serve only
/// objects above [`SLUB_LARGE_OBJECT`]. The walks that keep a bitmap of a slab's free
/// objects on the stack (`validate.rs`, `locations.rs`) size it by this bound, and
/// `CacheConfig::calculate` and `widen_small_slabs` keep every cache within it.
pub const MAX_OBJS_PER_SLAB: usize = (PAGE_SIZE << SLUB_MAX_ORDER) / core::mem::size_of::<usize>();

// The bitmaps are arrays of 64-bit words.
const _: () = assert!(MAX_OBJS_PER_SLAB.is_multiple_of(64));

/// Objects larger than this (a quarter of a `SLUB_MAX_ORDER` slab: 8 KiB) get slabs
/// of higher orders, up to the largest buddy block, so that a slab holds several of
/// them (see `layout::calculate_order`).
pub const SLUB_LARGE_OBJECT: usize = (PAGE_SIZE << SLUB_MAX_ORDER) / 4;

/// Largest object a cache may hold: a quarter of the largest buddy block (1 MiB), so
/// a slab of large objects holds at least four.
pub const MAX_OBJECT_SIZE: usize = (PAGE_SIZE << crate::page::MAX_ORDER) / 4;

/// `tid` steps by this much per operation (room for a CPU number below it).
pub const TID_STEP: usize = 1 << 12;

/// The slab allocator's operations, bound to its page allocator and list of caches.
pub struct Slub<'a, P: Platform> {
    pub(crate) pages: &'a PageAllocator<P>,
    pub(crate) caches: &'a CacheList,
}

impl<P: Platform> Clone for Slub<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: Platform> Copy for Slub<'_, P> {}

/// What `kfree`-like entry points found at a pointer.
pub enum ObjectLookup<'a> {
    /// An object of this slab (head page) of this cache, at index `idx`.
    Slab(&'a KmemCache, NonNull<Page>),
    /// The head of a large (page-allocator) allocation.
    Large(NonNull<Page>),
    /// Not something that can be freed; the reason.
    Bad(&'static str),
}

impl<'a, P: Platform> Slub<'a, P> {
    /// The slab layer over `pages`, with the list of caches a CPU flush walks.
    pub fn new(pages: &'a PageAllocator<P>, caches: &'a CacheList) -> Self {
        Self { pages, caches }
    }

    #[inline]
    pub(crate) fn slab_base(&self, slab: NonNull<Page>) -> usize {
        self.pages.page_address(slab).as_ptr() as usize
    }

    /// The cache whose slab holds `ptr` (anywhere in the slab), if any. Never
    /// touches the memory at `ptr`.
    ///
    /// # Safety
    /// The cache found is not destroyed while the caller uses the reference: the
    /// caller holds an object of it that it has not freed, or knows the cache lives on
    /// (kmalloc's caches live as long as the allocator). The reference's lifetime is
    /// the allocator's; a `kmem_cache_destroy` does not shorten it.
    pub unsafe fn cache_of(&self, ptr: *const u8) -> Option<&'a KmemCache> {
        let head = self.pages.virt_to_head_page(ptr)?;
        // SAFETY: descriptors of online sections are valid.
        let h = unsafe { head.as_ref() };
        if !h.flags_acquire().contains(PageFlags::SLAB) {
            return None;
        }
        Slab::of(h).cache_if_set()
    }

    /// The address of the cache whose slab holds `ptr`, if any: [`Slub::cache_of`]
    /// without a reference, for callers that compare it with caches they hold (a
    /// cache being destroyed meanwhile is then only an address).
    pub fn cache_addr_of(&self, ptr: *const u8) -> Option<usize> {
        let head = self.pages.virt_to_head_page(ptr)?;
        // SAFETY: descriptors of online sections are valid.
        let h = unsafe { head.as_ref() };
        if !h.flags_acquire().contains(PageFlags::SLAB) {
            return None;
        }
        Slab::of(h).cache_addr()
    }

    /// [`Slub::lookup`]'s slab case alone, for fast paths: the cache and head page when
    /// `ptr` starts an object of a slab, else `None` (the caller's regular path looks
    /// again and reports). One range check against the sections ever used and the
    /// page's flags ([`PageAllocator::virt_to_slab_used`]), no section state.
    ///
    /// # Safety
    /// The cache found is not destroyed while the caller uses the reference: the
    /// caller holds an object of it that it has not freed, or knows the cache lives on
    /// (kmalloc's caches live as long as the allocator). The reference's lifetime is
    /// the allocator's; a `kmem_cache_destroy` does not shorten it.
    #[inline(always)]
    pub unsafe fn slab_object(&self, ptr: *const u8) -> Option<(&'a KmemCache, NonNull<Page>)> {
        let h = self.pages.virt_to_slab_used(ptr)?;
        let s = Slab::of(h).cache_if_set()?;
        let cfg = s.config();
        let off = (ptr as usize & (cfg.slab_bytes() - 1)).wrapping_sub(cfg.red_left);
        cfg.is_object_start(off).then(|| (s, NonNull::from(h)))
    }

    /// Finds what `ptr` is: an object at the start of a slab object, a large block, or
    /// neither (with the reason). Never touches the memory at `ptr`.
    ///
    /// # Safety
    /// The cache found is not destroyed while the caller uses the reference: the
    /// caller holds an object of it that it has not freed, or knows the cache lives on
    /// (kmalloc's caches live as long as the allocator). The reference's lifetime is
    /// the allocator's; a `kmem_cache_destroy` does not shorten it.
    #[inline]
    pub unsafe fn lookup(&self, ptr: *const u8) -> ObjectLookup<'a> {
        let Some(head) = self.pages.virt_to_head_page(ptr) else {
            return ObjectLookup::Bad("not allocated by kmem");
        };
        // SAFETY: descriptors of online sections are valid.
        let h = unsafe { head.as_ref() };
        let flags = h.flags_acquire();
        if flags.contains(PageFlags::SLAB) {
            let Some(s) = Slab::of(h).cache_if_set() else {
                return ObjectLookup::Bad("not allocated by kmem");
            };
            let cfg = s.config();
            // A slab is a buddy block: aligned to its size, so the offset of `ptr` in
            // it is its low bits.
            let off = (ptr as usize & (cfg.slab_bytes() - 1)).wrapping_sub(cfg.red_left);
            if !cfg.is_object_start(off) {
                return ObjectLookup::Bad("Invalid object pointer");
            }
            ObjectLookup::Slab(s, head)
        } else if flags.contains(PageFlags::HEAD) {
            if !ptr::eq(self.pages.page_address(head).as_ptr(), ptr) {
                return ObjectLookup::Bad("Invalid object pointer");
            }
            ObjectLookup::Large(head)
        } else if flags.intersects(PageFlags::BUDDY | PageFlags::PCP)
            && ptr::eq(self.pages.page_address(head).as_ptr(), ptr)
        {
            // The start of a free block (on a buddy list or a CPU's list): a page
            // block freed already, as the page allocator names it (`free_page_is_bad`).
            ObjectLookup::Bad("freeing a free page")
        } else {
            ObjectLookup::Bad("not allocated by kmem")
        }
    }
}
