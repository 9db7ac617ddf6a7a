//! kmem-core: the Linux kernel's memory-allocation stack for `no_std`.
//!
//! This crate is the allocator itself, without an operating system: a platform
//! ([`Platform`]) supplies address space, time and a log, and everything the
//! allocator keeps — memmaps, per-CPU areas, slab metadata — comes from the memory it
//! manages. No `alloc`, no `std`.
//!
//! ## Layers, bottom up
//! Each module imports only modules listed before it (no import cycles); each
//! module's doc says what it owns, its invariants and its locking.
//! - [`sync`]: the spin lock and atomics (one place for loom to replace).
//! - `prefetch`: cache-line prefetch hints for the slab layer's bulk paths.
//! - [`gfp`], [`slab_flags`]: the flag words every layer passes down.
//! - [`platform`]: the interface to the world below (memory, time, log, the
//!   per-CPU hooks of a platform with shared CPU areas).
//! - [`vmstat`], [`percpu`], [`printk`]: counters, CPU areas (per-CPU memory) and
//!   their pool, report text written without allocating.
//! - [`page`]: page descriptors, sections and zones, the buddy allocator with per-CPU
//!   page lists, bulk allocation, watermarks, memory hotplug, OOM handling, free page
//!   reporting (giving free memory back to the platform).
//! - [`show_mem`]: the page allocator's reports (buddyinfo, zoneinfo, vmstat); it only
//!   reads the page allocator.
//! - [`slab`]: SLUB — caches, slabs, the per-CPU fast paths, partial lists, bulk,
//!   slub_debug, slabinfo. It reaches accounting through [`slab::Accounting`] only.
//! - [`kmalloc`]: size classes and the kmalloc caches, on top of the slab layer.
//! - [`memcontrol`]: memory cgroups (charging through obj_cgroups, the per-CPU stock),
//!   on top of kmalloc; implements [`slab::Accounting`].
//! - [`kmem`]: [`Kmem`], the whole allocator: boot, the public entry points that cross
//!   layers, fork and CPU-offline handling.
//!
//! ## Lock order
//! Outermost first; a context holding a lock takes only locks further down this list.
//! Every lock's module points here.
//! 1. `CpuArea::local_lock` ([`percpu`]): per-CPU mode, held around one operation on
//!    a shared CPU area (a platform's own locks, e.g. a table of CPU areas, come
//!    before it).
//! 2. `MemcgState::lock` ([`memcontrol`]): group creation, removal and the zombie
//!    sweep; a report walking the groups may allocate under it, so it comes before
//!    every slab and page lock. No allocation or free takes it.
//! 3. `CacheList::lock` ([`slab`], the kernel's `slab_mutex`): the list of caches;
//!    never held while allocating.
//! 4. `KmemCacheNode::list_lock` ([`slab`]): one node's partial list, one node at a
//!    time; no `list_lock` is held across a page allocation, except that a debug
//!    cache's `full` list lock is taken inside it.
//! 5. `KmemCacheNode::full` ([`slab::debug`]): the full slabs of a debug cache.
//! 6. the page allocator's `hotplug` lock ([`page`]): section table changes.
//! 7. `Zone::lock` ([`page::Zone`]): a zone's free lists, one zone at a time.
//! 8. the CPU-area pool's free-list lock ([`percpu`]).
//!
//! Leaves, taken alone and never across a call into the allocator: a barn's lists
//! ([`slab::barn`]: sheaves are put in and taken out under it, nothing more), the
//! list of the barns' idle sheaves waiting to be flushed (`slab/barn_drain.rs`), a
//! group's per-cache statistics table ([`memcontrol`]), the shrinker and CPU-offline
//! hook tables of the page allocator (copied out under the lock, called without it).
//! Fork takes 2 ([`Kmem::fork_prepare_groups`]; a platform's own locks that come
//! before 3 next), then 3, 4 with each node's barn (every cache, every node), the idle
//! sheaves' list, 6, 7 (every zone), 8 and every memory group's statistics table in
//! this order ([`Kmem::fork_prepare`]).
//!
//! A free page reporting pass calls the platform, whose own locks (the process heap's
//! huge-mapping list) its fork handlers take before 3, so no pass starts while 3 is
//! held: the walks of the cache list that free pages run inside
//! [`PageAllocator::with_reporting_deferred`].
//!
//! ## Linux names, kmem names
//! | Linux (mm/)                         | kmem                                       |
//! |-------------------------------------|--------------------------------------------|
//! | `struct page`                       | [`page::Page`]                             |
//! | `struct slab` (the slab's fields of its head page) | [`slab::Slab`]              |
//! | `struct mem_section`                | [`page::MemSection`]                       |
//! | `struct zone`, `free_area[]`        | [`page::Zone`], [`page::FreeArea`]         |
//! | `struct per_cpu_pages`              | [`page::ZonePcp`]                          |
//! | this CPU's percpu area              | [`percpu::CpuArea`] / [`percpu::CpuRef`]   |
//! | `alloc_pages_node`, `__free_pages`  | [`PageAllocator::alloc_pages_node`], [`PageAllocator::free_pages`] |
//! | `alloc_pages_bulk_array`            | [`PageAllocator::alloc_pages_bulk`]        |
//! | `drain_local_pages`, `drain_all_pages` | same names on [`PageAllocator`]         |
//! | `add_memory` / `offline_pages`      | [`PageAllocator::add_memory`] / `try_offline_section` |
//! | `page_reporting_process`            | [`PageAllocator::report_free_pages`]       |
//! | `show_free_areas`, `/proc/buddyinfo`, `/proc/zoneinfo`, `/proc/vmstat` | [`show_mem`] |
//! | `local_lock` of a CPU's data       | [`percpu::CpuArea::local_lock`]            |
//! | `struct kmem_cache`, `kmem_cache_cpu`, `kmem_cache_node` | [`slab::KmemCache`], [`slab::KmemCacheCpu`], [`slab::KmemCacheNode`] |
//! | `slab_alloc_node`, `___slab_alloc`, `__slab_free` | [`slab::Slub::alloc_node`], `slab_alloc_slow`, `slab_free` (in [`slab`]) |
//! | `this_cpu_cmpxchg_double` fast path | [`slab::Slub::alloc_lockless`], [`slab::Slub::free_lockless`] |
//! | `kmalloc_caches[][]`, `kmalloc_index` | [`kmalloc::KmallocCaches`], [`kmalloc::kmalloc_index`] |
//! | `struct mem_cgroup`, `struct obj_cgroup` | [`memcontrol::MemCgroup`], [`memcontrol::ObjCgroup`] |
//! | `memcg_stock_pcp`                   | [`memcontrol::MemcgStock`]                 |
//! | `obj_cgroup_charge`, `refill_obj_stock` | [`memcontrol::Memcg::obj_cgroup_charge`], [`memcontrol::Memcg::obj_cgroup_uncharge`] |
//! | `memcg_slab_free_hook`              | [`slab::Accounting::slab_free_hook`]       |

#![no_std]
#![warn(missing_docs)]

pub mod gfp;
pub mod kmalloc;
pub mod kmem;
pub mod memcontrol;
pub mod page;
pub mod percpu;
pub mod platform;
pub(crate) mod prefetch;
pub mod printk;
pub mod show_mem;
pub mod slab;
pub mod slab_flags;
pub mod sync;
pub mod vmstat;

pub use gfp::Gfp;
pub use kmem::Kmem;
pub use page::{
    Config, InitError, Page, PageAllocator, PageFlags, Shrinker, MAX_ORDER, PAGE_SHIFT, PAGE_SIZE,
};
pub use percpu::{CpuArea, CpuRef, InlineArea};
pub use platform::Platform;
pub use slab::{KmemCache, SlabFlags};
