//! kmem for Rust programs on Linux: the Linux kernel's memory-allocation stack (kmem-core)
//! as this process's heap.
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: kmem::KmemAlloc = kmem::KmemAlloc;
//!
//! let v: Vec<String> = (0..100).map(|i| i.to_string()).collect();
//! assert_eq!(v[42], "42");
//! ```
//!
//! ## The model in one page
//! - **Pages.** The heap reserves one large span of address space and brings it online
//!   in 128 MiB *sections*; every 4 KiB page has a small descriptor (`struct page`), so
//!   any pointer finds its page, slab and cache by arithmetic, with no header in front
//!   of an object. Free pages live in a buddy allocator (blocks of 2^order pages, split
//!   and merged); free blocks that stay free for the decay interval (`KMEM_DECAY_MS`)
//!   are given back to the OS, so RSS follows live memory.
//! - **Caches.** Small objects come from *slab caches* (SLUB): a cache holds objects of
//!   one size in slabs of a few pages. `malloc`-style requests go to the kmalloc caches
//!   (8 B … 1 MiB); larger ones take whole page blocks, and above 4 MiB direct
//!   mappings (as do buffers `realloc` moves past 1 MiB).
//!   [`KmemCache<T>`] is a cache of your own type, named in the reports.
//! - **CPU areas.** Each cache and each page list has per-CPU state in a *CPU area*:
//!   the allocation and free fast paths touch only that, without a lock. By default
//!   every thread owns an area (plain loads and stores; a thread's exit gives its
//!   cached slabs and pages back); with `KMEM_PERCPU=cpu` the threads running on one CPU
//!   share that CPU's area (restartable sequences, a double-word CAS, or its lock), so
//!   what the caches hold is bounded by the CPU count instead of the thread count.
//! - **Accounting and debugging.** Memory cgroups ([`MemCgroup`]) charge allocations to a
//!   group and refuse those past its limit; slub_debug (`KMEM_DEBUG=FZPU`) adds red
//!   zones, poisoning, consistency checks and allocation tracks to chosen caches, with
//!   reports in the kernel's format.
//! - **Reading it.** [`stats()`](fn@stats) is a full snapshot for humans (slabinfo,
//!   buddyinfo, vmstat); [`stats::allocated`], [`stats::resident`] and their siblings
//!   are cheap counters for programs; [`heap()`] offers the kernel's own interfaces:
//!
//! ```
//! use kmem::{heap, Gfp};
//! let h = heap();
//! let page = h.alloc_pages(Gfp::KERNEL, 0).expect("a page");
//! let addr = h.page_address(page);
//! let p = h.kmalloc(100, Gfp::KERNEL).expect("100 bytes");
//! // SAFETY: our page and object, sized and written within their sizes, then freed
//! // once.
//! unsafe {
//!     assert!(h.ksize(p.as_ptr()) >= 100); // its kmalloc class: kmalloc-128
//!     addr.as_ptr().write_bytes(0xab, 4096);
//!     h.free_pages(page, 0);
//!     h.kfree(p.as_ptr());
//! }
//! assert!(h.buddyinfo().contains("Node 0"));
//! ```
//!
//! As Rust's allocator: `#[global_allocator] static A: kmem::KmemAlloc = kmem::KmemAlloc;`
//! ([`global`]), typed object caches ([`KmemCache`], [`KBox`]), and a statistics
//! snapshot ([`stats()`](fn@stats)).
//!
//! Modules, from the bottom up (each uses only those before it): [`platform`] (Linux:
//! mmap, madvise, getcpu, sysfs, rseq, the C library calls), [`config`] (the
//! environment, read without allocating), `huge` (direct mappings beyond the buddy
//! allocator), [`sites`] (allocation-site aggregation) and [`symbolize`] (code
//! addresses to names), [`mod@heap`] (the process heap: CPU areas per thread or per
//! CPU, the kernel's interfaces, its counters, the live view's publishing and the leak
//! scan, [`leaks`]), then the front ends: [`global`] (GlobalAlloc and the Allocator
//! API), `cache` (typed caches), [`mod@memcg`] (memory cgroups: accounting and limits
//! per tenant), [`mod@stats`] (the snapshot), [`live`] (reading any kmem process's
//! live view, `kmem top`'s data). The private modules are re-exported here.
//!
//! ## Features
//! - `serde` (off by default): `serde::Serialize` on the snapshot types ([`Stats`] and
//!   its parts, [`memcg::MemcgStats`], [`live::Snapshot`], [`sites::Location`],
//!   [`leaks::LeakReport`]).
//!
//! ## Platforms
//! Linux only (a `compile_error!` elsewhere), with glibc or musl; tested on x86_64,
//! compiled for aarch64. x86_64 adds the lockless (`cmpxchg16b`) and
//! restartable-sequence per-CPU modes; elsewhere per-CPU mode takes the CPU area's
//! lock. Stack traces (`slub_debug`'s `U`) need glibc's `backtrace` and are left empty
//! with musl; the rseq modes and the rseq CPU-id fast path need glibc's rseq
//! registration (2.35 or later): without it they fall back (`sched_getcpu`).
//! Kernels with 16 or 64 KiB pages (arm64): kmem's pages stay 4 KiB; it gives memory
//! back to the kernel in whole kernel pages (zeroing the rest), sizes its direct
//! mappings in them, aligns `valloc` to them ([`os_page_size`]), and KFENCE stays off.

#![warn(missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!(
    "kmem runs on Linux only: its platform layer is built on Linux's mmap, madvise, \
     getcpu, sysfs and rseq. On another system, use kmem-core (no_std) with your own \
     implementation of kmem_core::Platform."
);

mod cache;
pub mod config;
pub mod global;
pub mod heap;
mod huge;
mod kfence;
pub mod live;
pub mod memcg;
pub mod platform;
pub mod sites;
pub mod stats;
pub mod symbolize;

pub use cache::{KBox, KmemCache};
pub use global::KmemAlloc;
pub use heap::{heap, leaks, Heap};
pub use kmem_core::slab::KmemCache as RawKmemCache;
pub use kmem_core::{Gfp, Page, PageFlags, SlabFlags, MAX_ORDER, PAGE_SIZE};
pub use memcg::{MemCgroup, MemcgGuard};
pub use platform::linux::rss_bytes;

/// The kernel's page size (4 KiB on x86-64; 4, 16 or 64 KiB on arm64), as opposed to
/// kmem's own pages ([`PAGE_SIZE`], always 4 KiB): what `valloc` aligns to, and the
/// granule in which kmem maps and gives memory back to the kernel.
pub fn os_page_size() -> usize {
    platform::os::page_size()
}
pub use stats::{stats, Stats};
