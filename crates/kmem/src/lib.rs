//! kmem for Rust programs on Linux: the platform layer under kmem-core and the
//! process heap.
//!
//! ```no_run
//! use kmem::{heap, Gfp};
//! let h = heap();
//! let page = h.alloc_pages(Gfp::KERNEL, 0).expect("a page");
//! let addr = h.page_address(page);
//! unsafe {
//!     addr.as_ptr().write_bytes(0xab, 4096);
//!     h.free_pages(page, 0);
//! }
//! print!("{}", h.buddyinfo());
//! ```
//!
//! As Rust's allocator: `#[global_allocator] static A: kmem::KmemAlloc = kmem::KmemAlloc;`
//! ([`global`]), typed object caches ([`KmemCache`], [`KBox`]), and a statistics
//! snapshot ([`stats()`](fn@stats)).
//!
//! Modules, from the bottom up (each uses only those before it): [`platform`] (Linux:
//! mmap, madvise, getcpu, sysfs, rseq, the C library calls), [`config`] (the
//! environment, read without allocating), `huge` (direct mappings beyond the buddy
//! allocator), [`mod@heap`] (the process heap: CPU areas per thread or per CPU, the
//! kernel's interfaces), then the front ends: [`global`] (GlobalAlloc and the Allocator
//! API), `cache` (typed caches), [`mod@memcg`] (memory cgroups: accounting and limits
//! per tenant), [`mod@stats`] (the snapshot). The private modules are re-exported here.
//!
//! ## Features
//! - `serde` (off by default): `serde::Serialize` on the snapshot types ([`Stats`] and
//!   its parts, [`memcg::MemcgStats`]).
//!
//! ## Platforms
//! Linux only (a `compile_error!` elsewhere), with glibc or musl; tested on x86_64,
//! compiled for aarch64. x86_64 adds the lockless (`cmpxchg16b`) and
//! restartable-sequence per-CPU modes; elsewhere per-CPU mode takes the CPU area's
//! lock. Stack traces (`slub_debug`'s `U`) need glibc's `backtrace` and are left empty
//! with musl; the rseq modes and the rseq CPU-id fast path need glibc's rseq
//! registration (2.35 or later): without it they fall back (`sched_getcpu`).

#[cfg(not(target_os = "linux"))]
compile_error!(
    "kmem runs on Linux only: its platform layer is built on Linux's mmap, madvise, \
     getcpu, sysfs and rseq. On another system, use kmem-core (no_std) with your own \
     implementation of kmem_core::Platform."
);

mod cache;
pub mod config;
mod counters;
pub mod global;
pub mod heap;
mod huge;
pub mod memcg;
pub mod platform;
pub mod stats;

pub use cache::{KBox, KmemCache};
pub use global::KmemAlloc;
pub use heap::{heap, Heap};
pub use kmem_core::slab::KmemCache as RawKmemCache;
pub use kmem_core::{Gfp, Page, PageFlags, SlabFlags, MAX_ORDER, PAGE_SIZE};
pub use memcg::{MemCgroup, MemcgGuard};
pub use platform::linux::rss_bytes;
pub use stats::{stats, Stats};
