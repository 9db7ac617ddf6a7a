//! The process heap: one page allocator over one reserved span, with one CPU area per
//! thread (or, in per-CPU mode, per CPU), and the huge mappings beside it. Get it with
//! [`heap`].
//!
//! This module owns the [`Heap`] type, its static and its lazy initialisation; the
//! rest of `impl Heap` lives in the submodules, one concern each:
//! - `cpu`: the CPU area an operation runs on (`Heap::cpu`, `CpuGuard`);
//! - `thread`: thread mode: a thread's area (attach, detach, the thread-exit key) and
//!   the thread's active memory cgroup;
//! - `percpu`: per-CPU mode: the CPU table, the mode, and the rseq → CAS → lock
//!   fallback of the alloc/free fast paths;
//! - `rseq_take`: per-CPU rseq mode's take of a CPU's freelist or sheaf top, on its
//!   CPU or from another with a fence;
//! - `pages`, `kmalloc`, `slab`: the kernel's interfaces (page allocator, kmalloc
//!   family, `kmem_cache_*`);
//! - `layout`: allocation by [`std::alloc::Layout`] (kmalloc, page blocks or huge
//!   mappings), the body of [`crate::KmemAlloc`];
//! - `realloc`: `realloc` (in place, moved, or grown as a mapping);
//! - `report`: text reports, `validate`, the `KMEM_STATS` exit report, allocation
//!   sites as data;
//! - `counters`: the cheap statistics (`kmem::stats::counters()` and its parts);
//! - `live`: publishing the live view (`kmem top`'s data; the reader is `crate::live`);
//! - `leaks`: the leak scan (kmemleak), public as `kmem::leaks`;
//! - `fork`: the `pthread_atfork` handlers;
//! - `platform`: [`HeapPlatform`], kmem-core's platform for the heap (the OS primitives
//!   plus the heap's slab flags, rseq take, yield and huge-mapping aging).
//!
//! ## Initialisation
//! Lazy, on the first call, thread-safe and recursion-free: the first caller moves
//! `state` from `UNINIT` to `INITIALIZING`, reads the environment (without
//! allocating), chooses the per-CPU mode and tells the core (`Heap::configure_core`), reserves the span, initialises the core and creates the
//! thread-exit key; others wait for `READY`. Nothing in it allocates through the heap.
//! What may allocate (loading the unwinder, `atexit`, `pthread_atfork`) runs just after
//! `READY` (`Heap::after_init`).
//!
//! ## Locking
//! `env` is written once before `READY` and read-only after; `state` and `mode` are
//! atomics. Lock order: the CPU table lock (making an area, per-CPU mode), then a CPU
//! area's local lock, then the huge list's lock, then kmem-core's other locks in the
//! order its crate docs number them; fork's prepare handler takes them all in that
//! order.

pub(crate) mod counters;
mod cpu;
mod fork;
mod kmalloc;
mod layout;
pub mod leaks;
pub(crate) mod live;
mod pages;
mod percpu;
mod platform;
mod realloc;
mod redzone;
mod report;
mod rseq_take;
mod sampled;
mod slab;
mod thread;

pub use kmem_core::kmalloc::{MALLOC_ALIGN, MEDIUM_FAST_MAX, SMALL_FAST_MAX};
pub use layout::{
    alloc_layout, alloc_small_fast, dealloc_fast, dealloc_other, dealloc_ptr, dealloc_rseq_fast,
    free_fast, malloc_rseq_small, malloc_small_fast, malloc_small_fast_or_tag, malloc_small_slow,
};
pub use percpu::set_percpu_mode;
pub use platform::HeapPlatform;
pub(crate) use thread::{restore_active_objcg, set_active_objcg};

/// Largest CPU id (plus one) that gets a CPU area in per-CPU mode; a CPU past it
/// allocates through the zones (correct, without per-CPU lists).
pub use crate::platform::MAX_CPU_IDS;

use crate::config::{self, EnvConfig};
use crate::huge::{HugeList, HugeOwner};
use crate::platform::os;
use kmem_core::page::PAGE_SHIFT;
use kmem_core::page::SECTION_SIZE;
use kmem_core::slab::PerCpuAccess;
use kmem_core::{Config, CpuArea, Kmem, PageAllocator, Platform};
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU8, Ordering};

/// The heap's `mode` (see `percpu`): one CPU area per thread.
const MODE_THREAD: u8 = 0;
/// Per-CPU, every operation under the area's local lock.
const MODE_CPU_LOCK: u8 = 1;
/// Per-CPU, lockless alloc/free fast paths (double-word CAS), the rest locked.
const MODE_CPU_CAS: u8 = 2;
/// Per-CPU, restartable sequences for the alloc/free fast paths, the rest locked.
const MODE_CPU_RSEQ: u8 = 4;

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

/// The process heap. Get it with [`heap`].
pub struct Heap {
    kmem: Kmem<HeapPlatform>,
    huge: HugeList,
    /// Written once by `init_slow` before `state` becomes READY; read-only after.
    env: UnsafeCell<EnvConfig>,
    state: AtomicU8,
    /// The pthread key whose destructor takes a thread's area offline (thread mode).
    exit_key: AtomicU32,
    /// `MODE_THREAD`, `MODE_CPU_LOCK`, `MODE_CPU_CAS` or `MODE_CPU_RSEQ`, fixed at
    /// initialisation.
    mode: AtomicU8,
    /// Per-CPU mode: the area of each CPU id, made on the CPU's first use; until then
    /// the zero area ([`NO_CPU_AREA`], written into every entry at initialisation in
    /// the per-CPU modes), never null (`percpu::table_area` reads it as none). The
    /// restartable sequences of per-CPU rseq mode do not read it: they compute their
    /// CPU's area in the region the mode's areas are made in (`percpu::CPU_REGION`).
    /// Null in thread mode, which uses no entry (and so a program that never runs in
    /// per-CPU mode pays neither a relocation nor a dirty page for the table).
    cpu_table: [AtomicPtr<CpuArea>; MAX_CPU_IDS],
    /// Per-CPU mode: the CPU id + 1 of each area (by area id; 0: none).
    area_cpu: [AtomicU32; kmem_core::percpu::MAX_CPU_AREAS],
    /// Serialises making CPU areas (and fork against it).
    table_lock: kmem_core::sync::SpinLock<()>,
    /// `KMEM_ON_ERROR` resolved at initialisation: abort after a report.
    abort_on_error: AtomicBool,
    /// `KMEM_DEBUG` gives Z to `kmalloc-large`: page blocks and huge mappings carry a
    /// red zone (`redzone`). Set at initialisation.
    zoned_blocks: AtomicBool,
}

/// Set by libkmem.so when it is loaded (`set_c_front_end`): the heap serves a C
/// program, whose default after a slub_debug report is to abort.
static C_FRONT_END: AtomicBool = AtomicBool::new(false);

/// Tells the heap it serves a C program through libkmem.so (its load-time
/// constructor calls this): then `KMEM_ON_ERROR` defaults to `abort` under
/// `KMEM_DEBUG`, as C programmers expect of a memory checker. No effect once the heap
/// is initialised.
pub fn set_c_front_end() {
    C_FRONT_END.store(true, Ordering::Relaxed);
}

// SAFETY: `env` is written only during initialisation, before any other thread can
// pass the READY check that guards every read; all other fields are Sync.
unsafe impl Sync for Heap {}

/// A [`Heap::cpu_table`] entry for a CPU without an area yet: the zero area's first
/// address (CPU_AREA_SIZE zero bytes, never written: see `kmem_core::percpu::InlineArea`).
const NO_CPU_AREA: *mut CpuArea =
    &kmem_core::percpu::ZERO_CPU_AREA as *const kmem_core::percpu::ZeroCpuArea as *mut CpuArea;

static HEAP: Heap = Heap {
    kmem: Kmem::new(HeapPlatform::new()),
    huge: HugeList::new(),
    env: UnsafeCell::new(EnvConfig::DEFAULT),
    state: AtomicU8::new(UNINIT),
    exit_key: AtomicU32::new(0),
    mode: AtomicU8::new(MODE_THREAD),
    cpu_table: [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_CPU_IDS],
    area_cpu: [const { AtomicU32::new(0) }; kmem_core::percpu::MAX_CPU_AREAS],
    table_lock: kmem_core::sync::SpinLock::new(()),
    abort_on_error: AtomicBool::new(false),
    zoned_blocks: AtomicBool::new(false),
};

/// The process heap, initialised on first use. If initialisation failed (no address
/// space could be reserved), one line on stderr says why and every allocation returns
/// `None`.
#[inline]
pub fn heap() -> &'static Heap {
    if HEAP.state.load(Ordering::Acquire) != READY {
        HEAP.init_slow();
    }
    &HEAP
}

impl Heap {
    #[cold]
    #[inline(never)]
    fn init_slow(&self) {
        if self
            .state
            .compare_exchange(UNINIT, INITIALIZING, Ordering::Acquire, Ordering::Acquire)
            .is_err()
        {
            if thread::initialising_here() {
                // Nested in our own initialisation: the heap is not ready; the
                // caller's allocation fails.
                return;
            }
            while self.state.load(Ordering::Acquire) == INITIALIZING {
                std::thread::yield_now();
            }
            return;
        }
        // Mark this thread: an allocation nested in initialisation (there should be
        // none) fails instead of waiting for itself.
        thread::mark_initialising(true);
        let env = config::from_env();
        config::warn_unknown_vars();
        let mode = percpu::resolve_mode(env.percpu);
        self.mode.store(mode, Ordering::Relaxed);
        if mode != MODE_THREAD {
            // Before READY (a release), which every per-CPU path checks first.
            for slot in &self.cpu_table {
                slot.store(NO_CPU_AREA, Ordering::Relaxed);
            }
        }
        let abort = match env.on_error {
            config::OnError::Abort => true,
            config::OnError::Continue => false,
            config::OnError::Default => C_FRONT_END.load(Ordering::Relaxed) && env.debug.any(),
        };
        self.abort_on_error.store(abort, Ordering::Relaxed);
        let z = env
            .debug
            .flags_for("kmalloc-large")
            .has(config::DebugFlags::Z);
        self.zoned_blocks.store(z, Ordering::Relaxed);
        // SAFETY: only the initialising thread gets here, before READY.
        unsafe { *self.env.get() = env };
        let ok = self.do_init(env, mode);
        self.state
            .store(if ok { READY } else { FAILED }, Ordering::Release);
        thread::mark_initialising(false);
        if ok {
            self.after_init(&env);
        }
    }

    fn do_init(&self, env: EnvConfig, mode: u8) -> bool {
        crate::platform::linux::rseq_init();
        // The KFENCE pool (a mapping, no allocation), before any thread's fast word.
        crate::kfence::init(env.kfence_ms);
        self.configure_core(mode);
        let nodes = self.kmem.pages.platform().os().setup(env.numa_fake);
        // Before the first section comes online (`KMEM_THP`).
        os::set_thp(env.thp);
        let max_pages = env.max_bytes >> PAGE_SHIFT;
        self.huge.set_bounded(max_pages > 0);
        // With a bound, the span needs the bound plus room for partly used sections
        // of every node; without one, the whole reach of the section table.
        let want = if max_pages > 0 {
            env.max_bytes + (nodes + 2) * SECTION_SIZE
        } else {
            usize::MAX
        };
        let (base, len) = match self.kmem.pages.platform().os().reserve_span(want) {
            Ok(span) => span,
            Err(e) => return init_failed(format_args!("{e}")),
        };
        let config = Config {
            nr_nodes: nodes,
            max_pages,
            report_delay_ns: env.decay_ms.saturating_mul(1_000_000),
            ..Config::default()
        };
        // SAFETY: the span was just reserved for the heap alone, and no other thread
        // uses the allocator before `state` becomes READY. HEAP is a static.
        if let Err(e) = unsafe { HEAP.kmem.init(base, len, config, os::online_cpus()) } {
            return init_failed(format_args!("cannot initialise the page allocator ({e:?})"));
        }
        if !thread::create_exit_key(self) {
            return init_failed(format_args!(
                "cannot create the thread-exit key (pthread_key_create failed)"
            ));
        }
        true
    }

    /// Sets how kmem-core's slab layer reaches per-CPU freelists, once, before the
    /// core is initialised (the rest of what the core needs from the heap is
    /// [`HeapPlatform`]).
    fn configure_core(&self, mode: u8) {
        self.kmem.set_slub_design(self.config().slub);
        self.kmem.set_percpu_access(match mode {
            MODE_CPU_CAS => PerCpuAccess::Cas,
            MODE_CPU_RSEQ => PerCpuAccess::Rseq,
            _ => PerCpuAccess::Owned,
        });
    }

    /// What may allocate or register hooks: runs once the heap is READY, so a nested
    /// allocation (atexit may call calloc) is served.
    fn after_init(&self, env: &EnvConfig) {
        // Cached huge mappings hold bytes of the bound (`KMEM_MAX`, or one set later):
        // the page allocator trims them before it fails for want of room.
        self.kmem.pages.register_shrinker(kmem_core::Shrinker {
            scan: trim_huge_cache,
            data: self as *const Heap as *const (),
        });
        if env.debug.any() {
            // Load the unwinder now (its first use allocates), for slub_debug's U, and
            // find kmem's own functions so that tracks start at the program's frame.
            crate::platform::linux::prepare_stack_traces();
            let mut frames = [0usize; 2];
            self.kmem.pages.platform().stack_trace(&mut frames);
        }
        if env.stats != config::StatsTarget::None {
            os::at_exit(report::stats_at_exit);
        } else if env.debug.any() {
            os::at_exit(report::validate_at_exit);
        }
        if env.kfence_ms != 0 {
            os::at_exit(sampled::kfence_check_at_exit);
        }
        if env.leaks {
            // Registered after the validation: runs before it (atexit is LIFO).
            os::at_exit(leaks::leaks_at_exit);
        }
        fork::register();
        live::start(env.live_ms);
    }

    /// The configuration read from the environment at initialisation.
    pub fn config(&self) -> &EnvConfig {
        // SAFETY: `heap()` returned, so initialisation is over and `env` is read-only.
        unsafe { &*self.env.get() }
    }

    /// The core page allocator (for calls with an explicit context, such as `None`
    /// for the zone path that bypasses per-CPU lists).
    pub fn page_allocator(&self) -> &PageAllocator<HeapPlatform> {
        &self.kmem.pages
    }

    /// Live huge allocations and their mapped bytes.
    pub fn huge_totals(&self) -> (usize, usize) {
        self.huge.totals()
    }

    /// Bytes of freed huge mappings kept mapped for reuse (see `huge`); no lock.
    pub fn huge_cached_bytes(&self) -> usize {
        self.huge.cached_bytes()
    }

    /// The whole core allocator (pages and slab caches).
    pub fn kmem(&self) -> &Kmem<HeapPlatform> {
        &self.kmem
    }
}

/// Reports why the heap could not initialise: one line on stderr, written without
/// allocating (initialisation runs once, so the line appears once). Returns `false`,
/// the result of the failed initialisation: from then on every allocation fails.
#[cold]
fn init_failed(cause: std::fmt::Arguments<'_>) -> bool {
    use std::fmt::Write;
    let mut w = crate::platform::linux::FdWriter::new(2);
    let _ = writeln!(w, "kmem: {cause}; allocations will fail");
    false
}

/// Huge mappings' descriptors are small kmalloc objects of this heap.
/// The heap's shrinker: in a bounded heap, unmaps the cached huge mappings, whose
/// bytes of the bound go back to the page allocator's room (without a bound they do
/// not give it pages: kept). Returns the pages unmapped.
fn trim_huge_cache(data: *const (), _nid: usize) -> usize {
    // SAFETY: registered with the process heap (a static) as `data`.
    let h = unsafe { &*(data as *const Heap) };
    if h.kmem.pages.max_pages() == 0 {
        return 0;
    }
    h.huge.trim(h) / kmem_core::PAGE_SIZE
}

impl HugeOwner for Heap {
    fn desc_alloc(&self) -> Option<NonNull<u8>> {
        self.kmalloc(crate::huge::DESC_SIZE, crate::huge::DESC_GFP)
    }

    unsafe fn desc_free(&self, d: NonNull<u8>) {
        // SAFETY: the caller's contract: a descriptor of ours, unused.
        unsafe { self.kfree(d.as_ptr()) };
    }

    /// `KMEM_MAX` bounds the page allocator's memory and the huge mappings together:
    /// a mapping takes its pages of the bound from the page allocator's count.
    fn reserve(&self, bytes: usize) -> bool {
        self.kmem
            .pages
            .reserve_outside(bytes.div_ceil(kmem_core::PAGE_SIZE))
    }

    fn release(&self, bytes: usize) {
        self.kmem
            .pages
            .release_outside(bytes.div_ceil(kmem_core::PAGE_SIZE));
    }
}
