//! kmem-core: the Linux kernel's memory-allocation stack for `no_std`.
//!
//! This crate is the allocator itself, without an operating system: a platform
//! ([`Platform`]) supplies address space, time and a log, and everything the
//! allocator keeps — memmaps, per-CPU areas, later slab metadata — comes from the
//! memory it manages. No `alloc`, no `std`.
//!
//! Layers, bottom up (each module's doc says what it owns and its locking):
//! - [`sync`]: the spin lock and atomics.
//! - [`platform`]: the interface to the world below.
//! - [`page`], [`mmzone`]: page descriptors, sections, zones.
//! - [`percpu`]: CPU areas (per-CPU memory) and their pool.
//! - [`page_alloc`]: the buddy allocator with per-CPU page lists, bulk allocation,
//!   watermarks, memory hotplug, OOM handling.
//! - [`page_reporting`]: giving free memory back to the platform.
//! - [`vmstat`], [`show_mem`]: counters and the kernel's report formats.
//! - [`slub`], [`slub_debug`], [`slab_common`], [`kmalloc`]: the slab allocator, its
//!   debugging, the cache list, kmalloc (see each module's doc).
//! - [`memcontrol`]: memory cgroups (charging through obj_cgroups, the per-CPU stock).
//!
//! ## Linux names, kmem names
//! | Linux (mm/)                         | kmem                                       |
//! |-------------------------------------|--------------------------------------------|
//! | `struct page`                       | [`page::Page`]                             |
//! | `struct mem_section`                | [`mmzone::MemSection`]                     |
//! | `struct zone`, `free_area[]`        | [`mmzone::Zone`], [`mmzone::FreeArea`]     |
//! | `struct per_cpu_pages`              | [`page_alloc::ZonePcp`]                    |
//! | this CPU's percpu area              | [`percpu::CpuArea`] / [`percpu::CpuRef`]   |
//! | `alloc_pages_node`, `__free_pages`  | [`PageAllocator::alloc_pages_node`], [`PageAllocator::free_pages`] |
//! | `alloc_pages_bulk_array`            | [`PageAllocator::alloc_pages_bulk`]        |
//! | `drain_local_pages`, `drain_all_pages` | same names on [`PageAllocator`]         |
//! | `add_memory` / `offline_pages`      | [`PageAllocator::add_memory`] / `try_offline_section` |
//! | `page_reporting_process`            | [`PageAllocator::report_free_pages`]       |
//! | `show_free_areas`, `/proc/buddyinfo`, `/proc/zoneinfo`, `/proc/vmstat` | [`show_mem`] |
//! | `local_lock` of a CPU's data       | [`percpu::CpuArea::local_lock`]            |
//! | `this_cpu_cmpxchg_double` fast path | [`slub::Slub::alloc_lockless`], [`slub::Slub::free_lockless`] |
//! | `struct mem_cgroup`, `struct obj_cgroup` | [`memcontrol::MemCgroup`], [`memcontrol::ObjCgroup`] |
//! | `memcg_stock_pcp`                   | [`memcontrol::MemcgStock`]                 |
//! | `obj_cgroup_charge`, `refill_obj_stock` | [`Kmem::obj_cgroup_charge`], `refill_obj_stock` path of [`Kmem::obj_cgroup_uncharge`] |

#![no_std]

pub mod gfp;
pub mod kmalloc;
pub mod memcontrol;
pub mod page;
pub mod percpu;
pub mod platform;
pub mod printk;
pub mod show_mem;
pub mod slab_common;
pub mod slub;
pub mod slub_debug;
pub mod sync;
pub mod vmstat;

pub use gfp::Gfp;
pub use page::{
    Config, InitError, Page, PageAllocator, PageFlags, Shrinker, MAX_ORDER, PAGE_SHIFT, PAGE_SIZE,
};
pub use percpu::{CpuArea, CpuRef};
pub use platform::Platform;
pub use slab_common::Kmem;
pub use slub::{KmemCache, SlabFlags};

/// The page allocator's old module path: see [`page`].
// Compatibility path, removed after the slab split merges.
pub mod page_alloc {
    pub use crate::page::{
        Config, CpuDeadHook, InitError, PageAllocator, Shrinker, ZonePcp, MAX_CPU_DEAD_HOOKS,
        MAX_SHRINKERS, PCP_BATCH, PCP_HIGH_MAX, PCP_MAX_ORDER, PCP_MIN_HIGH, PCP_ORDERS,
        REPORT_CHECK_INTERVAL,
    };
}

/// Sections and zones' old module path: see [`page`].
// Compatibility path, removed after the slab split merges.
pub mod mmzone {
    pub use crate::page::{
        FreeArea, MemSection, Watermark, Zone, MAX_NUMNODES, MAX_SECTIONS, MEMMAP_PAGES,
        PAGES_PER_SECTION, PFN_SECTION_SHIFT, SECTION_MANAGED_PAGES, SECTION_SHIFT, SECTION_SIZE,
    };
}

/// Free page reporting's old module path: see [`page`].
// Compatibility path, removed after the slab split merges.
pub mod page_reporting {
    pub use crate::page::SMALL_REPORT_MAX;
}
