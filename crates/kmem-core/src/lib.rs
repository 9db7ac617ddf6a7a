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
pub mod kmem;
pub mod memcontrol;
pub mod mmzone;
pub mod page;
pub mod page_alloc;
pub mod page_reporting;
pub mod page_tmp;
pub mod percpu;
pub mod platform;
pub mod show_mem;
pub mod slab;
/// Compatibility path for other crates, removed once they use [`slab`] and [`kmem`].
pub mod slab_common {
    pub use crate::kmem::{slab_row, Kmem};
    pub use crate::slab::{
        write_slabinfo_header, write_slabinfo_row, CacheList, DestroyError, SlabRow,
    };
}
pub mod slab_flags;
/// Compatibility path for other crates, removed once they use [`slab`].
pub mod slub {
    pub use crate::slab::*;
}
/// Compatibility path for other crates, removed once they use [`slab::debug`].
pub mod slub_debug {
    pub use crate::slab::debug::*;
}
pub mod sync;
pub mod vmstat;

pub use gfp::Gfp;
pub use kmem::Kmem;
pub use page::{Page, PageFlags, MAX_ORDER, PAGE_SHIFT, PAGE_SIZE};
pub use page_alloc::{Config, InitError, PageAllocator, Shrinker};
pub use percpu::{CpuArea, CpuRef};
pub use platform::Platform;
pub use slab::{KmemCache, SlabFlags};
