//! The process heap: one page allocator over one reserved span, with one CPU area per
//! thread.
//!
//! ## Initialisation
//! Lazy, on the first call, thread-safe and recursion-free: the first caller moves
//! `state` from `UNINIT` to `INITIALIZING`, reads the environment (without
//! allocating), reserves the span, initialises the core and creates the thread-exit
//! key; others wait for `READY`. Nothing in it allocates through the heap.
//!
//! ## Thread = CPU
//! Each thread owns one [`CpuArea`] (std's "owned" mode): the first page allocation of
//! a thread takes one from the pool (or makes one) and registers a pthread key whose
//! destructor is the thread's "CPU offline": it drains the area's lists and returns it
//! to the pool, so a program that starts and joins many threads reuses a handful of
//! areas. The thread-local slot is a const-initialised `Cell<usize>` with no
//! destructor, so reading it never allocates or registers anything; its values are
//! `0` (no area yet), `ATTACHING` (getting one: nested calls, e.g. from a `calloc`
//! inside `pthread_setspecific`, use the zone path), `EXITED` (the key destructor ran:
//! later allocations by other destructors use the zone path), or the area's address.
//!
//! ## Per-CPU mode
//! With `KMEM_PERCPU=cpu*` (or [`set_percpu_mode`]) areas belong to CPU ids instead
//! (`cpu_table`, made on a CPU's first use; ids past [`MAX_CPU_IDS`] use the zone
//! path). An operation takes the area of the CPU it runs on (`sched_getcpu`, answered
//! from glibc's rseq area) and holds its local lock (`CpuGuard`); a nested operation
//! of the same thread (a callback inside one) reuses the held area (`HELD_AREA`). The
//! kmalloc and kmem_cache alloc/free fast paths first try, without the lock, the
//! restartable sequences of `platform::rseq` (`cpu-rseq`) or the double-word-CAS path
//! (`cpu-cas`) on that CPU's area; in `cpu-rseq` the slab layer takes a CPU freelist
//! through `rseq_take` (a sequence on that CPU). Threads own nothing, so thread
//! exit flushes nothing; [`Heap::flush_cpu_caches`] flushes every CPU's area. Lock
//! order: the table lock (making an area), then an area's local lock, then the huge
//! list, then the slab and page allocator locks; fork's prepare handler takes them all
//! in that order.

use crate::config::{self, EnvConfig, PerCpuMode};
use crate::platform::LinuxPlatform;
use kmem_core::memcontrol::ObjCgroup;
use kmem_core::mmzone::SECTION_SIZE;
use kmem_core::page::PAGE_SHIFT;
use kmem_core::slab_common::DestroyError;
use kmem_core::{
    Config, CpuArea, CpuRef, Gfp, Kmem, KmemCache, Page, PageAllocator, Platform, SlabFlags,
};
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU8, Ordering};

const UNINIT: u8 = 0;
const INITIALIZING: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

const ATTACHING: usize = 1;
const EXITED: usize = 2;

/// Largest CPU id (plus one) that gets a CPU area in per-CPU mode; a CPU past it
/// allocates through the zones (correct, without per-CPU lists).
pub const MAX_CPU_IDS: usize = 1024;

/// Per-CPU mode requested through [`set_percpu_mode`] before initialisation
/// (`MODE_UNSET`: take `KMEM_PERCPU`).
static REQUESTED_MODE: AtomicU8 = AtomicU8::new(MODE_UNSET);
const MODE_UNSET: u8 = u8::MAX;
const MODE_THREAD: u8 = 0;
/// Per-CPU, every operation under the area's local lock.
const MODE_CPU_LOCK: u8 = 1;
/// Per-CPU, lockless alloc/free fast paths (double-word CAS), the rest locked.
const MODE_CPU_CAS: u8 = 2;
/// Per-CPU, the best mechanism here (resolved at initialisation).
const MODE_CPU: u8 = 3;
/// Per-CPU, restartable sequences for the alloc/free fast paths, the rest locked.
const MODE_CPU_RSEQ: u8 = 4;

fn mode_code(mode: PerCpuMode) -> u8 {
    match mode {
        PerCpuMode::Thread => MODE_THREAD,
        PerCpuMode::CpuLock => MODE_CPU_LOCK,
        PerCpuMode::CpuCas => MODE_CPU_CAS,
        PerCpuMode::CpuRseq => MODE_CPU_RSEQ,
        PerCpuMode::Cpu => MODE_CPU,
    }
}

/// Whether this thread (and so, glibc being what it is, every thread) can run the
/// restartable sequences of `platform::rseq`.
fn rseq_possible() -> bool {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        crate::platform::linux::rseq_init();
        crate::platform::linux::rseq_offset().is_some()
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        false
    }
}

/// Whether this machine can run the lockless per-CPU fast paths.
fn lockless_possible() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        kmem_core::slub::LOCKLESS_SUPPORTED && std::arch::is_x86_feature_detected!("cmpxchg16b")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Chooses how CPU areas are assigned, before the heap's first use: [`PerCpuMode::Thread`]
/// (one per thread, the default) or a per-CPU mode (one per CPU, shared by the threads
/// that run on it). Overrides `KMEM_PERCPU`. Fails (returning the mode in force) once
/// the heap is initialised.
pub fn set_percpu_mode(mode: PerCpuMode) -> Result<(), PerCpuMode> {
    REQUESTED_MODE.store(mode_code(mode), Ordering::SeqCst);
    if HEAP.state.load(Ordering::SeqCst) != UNINIT {
        return Err(HEAP.percpu_mode());
    }
    Ok(())
}

thread_local! {
    static THIS_AREA: Cell<usize> = const { Cell::new(0) };
    /// Per-CPU mode: the area whose local lock this thread holds (0: none), so that a
    /// nested allocation on the same thread (a callback inside an operation) uses it
    /// instead of waiting for itself.
    static HELD_AREA: Cell<usize> = const { Cell::new(0) };
    /// The thread's active memory cgroup (`set_active_memcg`): the address of its
    /// objcg, or 0 (allocations are not charged).
    static ACTIVE_OBJCG: Cell<usize> = const { Cell::new(0) };
}

/// The calling context's CPU area for one operation (see [`Heap::cpu`]): the area,
/// and in per-CPU mode its local lock, released (and the thread's held-area mark
/// cleared) when the guard drops.
pub(crate) struct CpuGuard {
    /// The area's address, or 0 (no area: the zone path).
    area: usize,
    lock: Option<kmem_core::sync::SpinLockGuard<'static, ()>>,
}

impl CpuGuard {
    /// The owner's handle on the area, for as long as the guard lives.
    #[inline]
    pub(crate) fn get(&self) -> Option<CpuRef<'_>> {
        // SAFETY: a non-zero `area` is one the calling thread may act as owner of for
        // the guard's life: its own thread area, or (per-CPU mode) an area whose local
        // lock this guard or an enclosing one on this thread holds. Areas live forever.
        (self.area != 0).then(|| unsafe { CpuRef::new(&*(self.area as *const CpuArea)) })
    }
}

impl Drop for CpuGuard {
    #[inline]
    fn drop(&mut self) {
        if self.lock.is_some() {
            HELD_AREA.with(|h| h.set(0));
        }
    }
}

/// `cpu-rseq`: the slab layer's take of a CPU freelist (`slub::set_rseq_take`): a
/// restartable sequence on the area's CPU, run there (the thread pinned for the
/// moment) if it is elsewhere. If this thread may not run on that CPU, kmem assumes
/// none of its threads does (they share one affinity: documented), so no section can
/// commit there and a plain exchange is the take.
fn rseq_take(area: &CpuArea, freelist: &std::sync::atomic::AtomicUsize) -> usize {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        use crate::platform::rseq;
        let cpu = HEAP.area_cpu[area.id()].load(Ordering::Acquire);
        let fl = freelist as *const std::sync::atomic::AtomicUsize as *mut usize;
        if let (Some(r), true) = (rseq::area(), cpu != 0) {
            let cpu = cpu as usize - 1;
            // SAFETY: `r` is this thread's registered rseq area; `fl` is the freelist
            // word of a `kmem_cache_cpu` in CPU `cpu`'s area.
            let take = || unsafe { rseq::take_on(r, cpu, fl) };
            if let Some(v) = take() {
                return v;
            }
            let pinned = rseq::on_cpu(cpu, || loop {
                if let Some(v) = take() {
                    break v;
                }
            });
            if let Some(v) = pinned {
                return v;
            }
        }
    }
    // No CPU of ours runs this area's sections: a plain exchange.
    freelist.swap(0, Ordering::AcqRel)
}

/// Thread mode's fast case: the thread's own CPU area, once attached. Everything
/// else (attaching, per-CPU mode, thread exit) goes through [`Heap::cpu`].
#[inline(always)]
fn thread_cpu() -> Option<CpuRef<'static>> {
    let v = THIS_AREA.with(Cell::get);
    // SAFETY: a value above EXITED is an area this thread owns until its exit
    // destructor, which clears the slot first; areas live forever.
    (v > EXITED).then(|| unsafe { CpuRef::new(&*(v as *const CpuArea)) })
}

/// The objcg of the calling thread's active memory cgroup.
#[inline]
pub(crate) fn active_objcg() -> Option<&'static ObjCgroup> {
    let v = ACTIVE_OBJCG.with(Cell::get);
    // SAFETY: only `set_active_objcg` stores a non-zero value: the objcg of a group
    // that its caller keeps alive while it is active (the `enter` guard borrows it).
    (v != 0).then(|| unsafe { &*(v as *const ObjCgroup) })
}

/// Makes `objcg` the thread's active one (`set_active_memcg`); returns the previous.
pub(crate) fn set_active_objcg(objcg: Option<&ObjCgroup>) -> usize {
    let v = objcg.map_or(0, |o| o as *const ObjCgroup as usize);
    ACTIVE_OBJCG.with(|a| a.replace(v))
}

/// Restores a value returned by [`set_active_objcg`].
pub(crate) fn restore_active_objcg(prev: usize) {
    ACTIVE_OBJCG.with(|a| a.set(prev));
}

/// The process heap. Get it with [`heap`].
pub struct Heap {
    kmem: Kmem<LinuxPlatform>,
    huge: crate::huge::HugeList,
    /// Written once by `do_init` before `state` becomes READY; read-only after.
    env: std::cell::UnsafeCell<EnvConfig>,
    state: AtomicU8,
    exit_key: AtomicU32,
    /// `MODE_THREAD`, `MODE_CPU_LOCK` or `MODE_CPU_CAS`, fixed at initialisation.
    mode: AtomicU8,
    /// Per-CPU mode: the area of each CPU id, made on the CPU's first use.
    cpu_table: [AtomicPtr<CpuArea>; MAX_CPU_IDS],
    /// Per-CPU mode: the CPU id + 1 of each area (by area id; 0: none).
    area_cpu: [AtomicU32; kmem_core::percpu::MAX_CPU_AREAS],
    /// Serialises making CPU areas (and fork against it).
    table_lock: kmem_core::sync::SpinLock<()>,
}

// SAFETY: `env` is written only during initialisation, before any other thread can
// pass the READY check that guards every read; all other fields are Sync.
unsafe impl Sync for Heap {}

static HEAP: Heap = Heap {
    kmem: Kmem::new(LinuxPlatform::new()),
    huge: crate::huge::HugeList::new(),
    env: std::cell::UnsafeCell::new(EnvConfig {
        max_bytes: 0,
        numa_fake: 0,
        decay_ms: 1000,
        debug: crate::config::DebugConfig::EMPTY,
        percpu: crate::config::PerCpuMode::Thread,
        stats: crate::config::StatsTarget::None,
        init_on_alloc: false,
        init_on_free: false,
        harden: crate::config::Harden::On,
    }),
    state: AtomicU8::new(UNINIT),
    exit_key: AtomicU32::new(0),
    mode: AtomicU8::new(MODE_THREAD),
    cpu_table: [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_CPU_IDS],
    area_cpu: [const { AtomicU32::new(0) }; kmem_core::percpu::MAX_CPU_AREAS],
    table_lock: kmem_core::sync::SpinLock::new(()),
};

/// The process heap, initialised on first use. If initialisation failed (no address
/// space could be reserved), every allocation returns `None`.
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
        match self.state.compare_exchange(
            UNINIT,
            INITIALIZING,
            Ordering::Acquire,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                // Mark this thread: an allocation nested in initialisation (there should
                // be none) fails instead of waiting for itself.
                THIS_AREA.with(|a| a.set(ATTACHING));
                let env = config::from_env();
                let mut mode = match REQUESTED_MODE.load(Ordering::SeqCst) {
                    MODE_UNSET => mode_code(env.percpu),
                    m => m,
                };
                if mode == MODE_CPU_RSEQ || mode == MODE_CPU {
                    if rseq_possible() {
                        mode = MODE_CPU_RSEQ;
                    } else {
                        if mode == MODE_CPU_RSEQ {
                            crate::platform::linux::write_stderr(
                                b"kmem: KMEM_PERCPU=cpu-rseq: no rseq registration here; using cpu-cas or cpu-lock\n",
                            );
                        }
                        mode = MODE_CPU;
                    }
                }
                if mode == MODE_CPU || mode == MODE_CPU_CAS {
                    let cas = lockless_possible();
                    if mode == MODE_CPU_CAS && !cas {
                        crate::platform::linux::write_stderr(
                            b"kmem: KMEM_PERCPU=cpu-cas: no double-word CAS here; using cpu-lock\n",
                        );
                    }
                    mode = if cas { MODE_CPU_CAS } else { MODE_CPU_LOCK };
                }
                self.mode.store(mode, Ordering::Relaxed);
                self.kmem.set_lockless(mode == MODE_CPU_CAS);
                if mode == MODE_CPU_RSEQ {
                    kmem_core::slub::set_rseq_take(rseq_take);
                    self.kmem.set_rseq(true);
                }
                // SAFETY: only the initialising thread gets here, before READY.
                unsafe { *self.env.get() = env };
                let ok = self.do_init(env);
                self.state
                    .store(if ok { READY } else { FAILED }, Ordering::Release);
                THIS_AREA.with(|a| a.set(0));
                if ok {
                    self.after_init(&env);
                }
            }
            Err(_) => {
                if THIS_AREA.with(Cell::get) == ATTACHING {
                    // Nested in our own initialisation: the heap is not ready; the
                    // caller's allocation fails.
                    return;
                }
                while self.state.load(Ordering::Acquire) == INITIALIZING {
                    std::thread::yield_now();
                }
            }
        }
    }

    fn do_init(&self, env: EnvConfig) -> bool {
        crate::platform::linux::rseq_init();
        kmem_core::sync::set_relax_hook(|| {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        });
        let nodes = self.kmem.pages.platform().setup(env.numa_fake);
        let max_pages = env.max_bytes >> PAGE_SHIFT;
        // With a bound, the span needs the bound plus room for partly used sections
        // of every node; without one, the whole reach of the section table.
        let want = if max_pages > 0 {
            env.max_bytes + (nodes + 2) * SECTION_SIZE
        } else {
            usize::MAX
        };
        let Some((base, len)) = self.kmem.pages.platform().reserve_span(want) else {
            return false;
        };
        let config = Config {
            nr_nodes: nodes,
            max_pages,
            report_delay_ns: env.decay_ms.saturating_mul(1_000_000),
            ..Config::default()
        };
        // SAFETY: sysconf has no preconditions.
        let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        // KMEM_DEBUG: slub_debug flags per cache, by name; KMEM_INIT and KMEM_HARDEN
        // for every cache.
        self.kmem.set_debug_policy(|name| {
            use crate::config::{DebugFlags, Harden};
            let env = HEAP.config();
            let d = env.debug.flags_for(name);
            let mut f = match env.harden {
                Harden::On => SlabFlags::empty(),
                Harden::Random => SlabFlags::RANDOM_FREELIST,
                Harden::Off => SlabFlags::NO_HARDEN,
            };
            if env.init_on_alloc {
                f |= SlabFlags::INIT_ON_ALLOC;
            }
            if env.init_on_free {
                f |= SlabFlags::INIT_ON_FREE;
            }
            for (bit, flag) in [
                (DebugFlags::F, SlabFlags::CONSISTENCY_CHECKS),
                (DebugFlags::Z, SlabFlags::RED_ZONE),
                (DebugFlags::P, SlabFlags::POISON),
                (DebugFlags::U, SlabFlags::STORE_USER),
                (DebugFlags::T, SlabFlags::TRACE),
            ] {
                if d.has(bit) {
                    f |= flag;
                }
            }
            f
        });
        // SAFETY: the span was just reserved for the heap alone, and no other thread
        // uses the allocator before `state` becomes READY. HEAP is a static.
        if unsafe { HEAP.kmem.init(base, len, config, cpus) }.is_err() {
            return false;
        }
        self.kmem.pages.platform().set_reporting_hook(|now| {
            let decay = HEAP.config().decay_ms.saturating_mul(1_000_000);
            HEAP.huge.age(now, decay);
        });
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: creating a key with a destructor of the right signature.
        if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit)) } != 0 {
            return false;
        }
        self.exit_key.store(key, Ordering::Relaxed);
        true
    }

    /// What may allocate or register hooks: runs once the heap is READY, so a nested
    /// allocation (atexit may call calloc) is served.
    fn after_init(&self, env: &EnvConfig) {
        if env.debug.any() {
            // Load the unwinder now (its first use allocates), for slub_debug's U.
            let mut frames = [0usize; 2];
            self.kmem.pages.platform().stack_trace(&mut frames);
        }
        if env.stats != crate::config::StatsTarget::None {
            // SAFETY: registering a plain extern "C" function.
            unsafe { libc::atexit(stats_at_exit) };
        }
        // SAFETY: registering plain extern "C" functions.
        unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
    }

    /// The configuration read from the environment at initialisation.
    pub fn config(&self) -> &EnvConfig {
        // SAFETY: `heap()` returned, so initialisation is over and `env` is read-only.
        unsafe { &*self.env.get() }
    }

    /// Writes the exit report (slabinfo, buddyinfo, vmstat, memory cgroups) to `w`, without
    /// allocating.
    pub fn write_report(&self, w: &mut dyn std::fmt::Write) -> std::fmt::Result {
        if self.config().debug.any() {
            // slub_debug is on: walk every slab first (problems are reported as found).
            let n = self.kmem.validate_all(&mut |_| {});
            writeln!(w, "kmem: validate found {n} problem(s)")?;
        }
        self.kmem.slabinfo(w)?;
        writeln!(w)?;
        kmem_core::show_mem::buddyinfo(&self.kmem.pages, w)?;
        writeln!(w)?;
        kmem_core::show_mem::vmstat(&self.kmem.pages, w)?;
        // Memory cgroups (not the root): each group's files after a blank line. Written
        // straight to `w`: nothing here allocates.
        self.drain_memcg_stocks();
        let mut res = Ok(());
        self.kmem.for_each_mem_cgroup(|cg| {
            if res.is_ok() && cg.parent().is_some() {
                res = writeln!(w).and_then(|_| self.kmem.memcg_report(w, cg));
            }
        });
        res
    }

    /// The core page allocator (for calls with an explicit context, such as `None`
    /// for the zone path that bypasses per-CPU lists).
    pub fn page_allocator(&self) -> &PageAllocator<LinuxPlatform> {
        &self.kmem.pages
    }

    /// The huge (directly mapped) allocations.
    pub(crate) fn huge(&self) -> &crate::huge::HugeList {
        &self.huge
    }

    /// Live huge allocations and their mapped bytes.
    pub fn huge_totals(&self) -> (usize, usize) {
        self.huge.totals()
    }

    /// The whole core allocator (pages and slab caches).
    pub fn kmem(&self) -> &Kmem<LinuxPlatform> {
        &self.kmem
    }

    /// The calling context's CPU area for one operation: in thread mode the thread's
    /// own (attached on first use); in per-CPU mode the area of the CPU it runs on,
    /// with that area's local lock held until the guard drops. `get()` is `None` where
    /// per-CPU lists must not be used (heap not ready, thread exiting, no area to be
    /// had): those callers take the zone path.
    #[inline]
    pub(crate) fn cpu(&self) -> CpuGuard {
        let v = THIS_AREA.with(Cell::get);
        if v > EXITED {
            return CpuGuard {
                area: v,
                lock: None,
            };
        }
        self.cpu_cold(v)
    }

    #[cold]
    #[inline(never)]
    fn cpu_cold(&self, v: usize) -> CpuGuard {
        let none = CpuGuard {
            area: 0,
            lock: None,
        };
        if v != 0 || self.state.load(Ordering::Acquire) != READY {
            return none;
        }
        if self.mode.load(Ordering::Relaxed) == MODE_THREAD {
            return CpuGuard {
                area: self
                    .attach_cold()
                    .map_or(0, |c| c.area() as *const CpuArea as usize),
                lock: None,
            };
        }
        // Per-CPU mode. Nested in an operation of this thread: the area it holds.
        let held = HELD_AREA.with(Cell::get);
        if held != 0 {
            return CpuGuard {
                area: held,
                lock: None,
            };
        }
        let Some(area) = self.area_of_cpu(crate::platform::linux::current_cpu()) else {
            return none;
        };
        let lock = area.local_lock();
        let a = area as *const CpuArea as usize;
        HELD_AREA.with(|h| h.set(a));
        CpuGuard {
            area: a,
            lock: Some(lock),
        }
    }

    /// Per-CPU mode: the area of CPU `id`, made on first use.
    fn area_of_cpu(&self, id: usize) -> Option<&'static CpuArea> {
        let slot = self.cpu_table.get(id)?;
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: table entries are areas of the pool, which live forever.
            return Some(unsafe { &*p });
        }
        // Made under the table lock, which fork's prepare handler also takes (before
        // locking every area it finds in the table), so no area appears unseen.
        let _g = self.table_lock.lock();
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: as above.
            return Some(unsafe { &*p });
        }
        let (_, node) = crate::platform::linux::getcpu();
        let area = HEAP.kmem.pages.cpu_area_get(node)?;
        // Before the area is published: the rseq take looks its CPU up.
        self.area_cpu[area.id()].store(id as u32 + 1, Ordering::Release);
        slot.store(area as *const CpuArea as *mut CpuArea, Ordering::Release);
        Some(area)
    }

    /// The mode CPU areas are assigned in (fixed at initialisation): `Thread`,
    /// `CpuCas` or `CpuLock`.
    pub fn percpu_mode(&self) -> PerCpuMode {
        match self.mode.load(Ordering::Relaxed) {
            MODE_THREAD => PerCpuMode::Thread,
            MODE_CPU_CAS => PerCpuMode::CpuCas,
            MODE_CPU_RSEQ => PerCpuMode::CpuRseq,
            _ => PerCpuMode::CpuLock,
        }
    }

    /// Per-CPU mode with lockless fast paths: the area of the CPU the caller runs on
    /// now (it may move right after; the fast paths cope). `None` otherwise, or when
    /// the CPU has no area yet.
    #[inline]
    fn lockless_area(&self) -> Option<&'static CpuArea> {
        if self.mode.load(Ordering::Relaxed) != MODE_CPU_CAS {
            return None;
        }
        let p = self
            .cpu_table
            .get(crate::platform::linux::current_cpu())?
            .load(Ordering::Acquire);
        // SAFETY: table entries are null or areas that live forever.
        unsafe { p.as_ref() }
    }

    /// `cpu-rseq`: pops an object of `s` from the CPU freelist of the CPU the thread
    /// runs on, in a restartable sequence. `None`: take the locked path.
    #[inline]
    fn rseq_alloc(&self, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            let cfg = s.config();
            if cfg.off_fast_paths() {
                return None;
            }
            let rseq = crate::platform::rseq::area()?;
            // SAFETY: `rseq` is this thread's registered area; the table has
            // MAX_CPU_IDS entries, null or CPU areas holding every cache's
            // `kmem_cache_cpu` at its offset; the caches run with `rseq` set (so the
            // slab layer changes a CPU freelist only by committing on that CPU, or
            // while it is empty).
            let obj =
                unsafe { crate::platform::rseq::pop(rseq, self.cpu_table.as_ptr().cast(), cfg) };
            let p = NonNull::new(obj as *mut u8)?;
            if gfp.contains(Gfp::ZERO) {
                // SAFETY: the object is ours now, `object_size` bytes long.
                unsafe { p.as_ptr().write_bytes(0, cfg.object_size) };
            }
            Some(p)
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        {
            let _ = (s, gfp);
            None
        }
    }

    /// `cpu-rseq`: pushes `p` (an object of `slab` of `s`) on the CPU freelist of the
    /// CPU the thread runs on if `slab` is that CPU's slab. `Some(false)`: a double
    /// free at the freelist's head (reported). `None`: take the locked path.
    ///
    /// # Safety
    /// `p` is the start of an object of `slab` of `s`, owned by the caller, who gives
    /// it up.
    #[inline]
    unsafe fn rseq_free(&self, s: &KmemCache, slab: NonNull<Page>, p: *mut u8) -> Option<bool> {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            use crate::platform::rseq::{self, Pushed};
            let cfg = s.config();
            if cfg.off_fast_paths() || kmem_core::memcontrol::has_obj_exts(slab) {
                return None;
            }
            let area = rseq::area()?;
            let obj = p as usize;
            let base = obj & !(cfg.slab_bytes() - 1);
            // SAFETY: as in `rseq_alloc`; the object is the caller's to give up.
            match unsafe { rseq::push(area, self.cpu_table.as_ptr().cast(), cfg, obj, base) } {
                Pushed::Done => Some(true),
                Pushed::AtHead => Some(self.kmem.slub().double_free(s, slab, obj)),
                Pushed::No => None,
            }
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        {
            let _ = (s, slab, p);
            None
        }
    }

    /// Per-CPU mode: every CPU's area, for reports and flushes.
    fn cpu_areas(&self) -> impl Iterator<Item = &'static CpuArea> + '_ {
        self.cpu_table.iter().filter_map(|p| {
            // SAFETY: table entries are null or areas that live forever.
            unsafe { p.load(Ordering::Acquire).as_ref() }
        })
    }

    /// Empties every per-CPU cache now — CPU slabs and partials, per-CPU page lists,
    /// memcg stocks — so that their memory goes back to the page allocator: in per-CPU
    /// mode every CPU's area (each under its lock); in thread mode the caller's own
    /// (other threads' are asked to drain at their next call).
    pub fn flush_cpu_caches(&self) {
        if self.mode.load(Ordering::Relaxed) == MODE_THREAD {
            if let Some(c) = self.cpu().get() {
                self.kmem.pages.cpu_area_flush(c);
            }
            self.kmem.pages.drain_all_pages(None);
            return;
        }
        self.for_each_cpu_area_locked(|c| self.kmem.pages.cpu_area_flush(c));
    }

    /// Per-CPU mode: runs `f` as the owner of every CPU's area in turn, under its local
    /// lock (or, for an area this thread already holds, under that hold).
    fn for_each_cpu_area_locked(&self, mut f: impl FnMut(CpuRef<'_>)) {
        let held = HELD_AREA.with(Cell::get);
        for area in self.cpu_areas() {
            let _lock = (area as *const CpuArea as usize != held).then(|| area.local_lock());
            // SAFETY: we hold the area's local lock (here or in an enclosing operation
            // of this thread): we act as its owner.
            f(unsafe { CpuRef::new(area) });
        }
    }

    /// Drains memcg charge stocks into the groups' counters: the caller's own in thread
    /// mode (other threads' drain when they switch groups or exit), every CPU's in
    /// per-CPU mode.
    pub fn drain_memcg_stocks(&self) {
        if self.mode.load(Ordering::Relaxed) == MODE_THREAD {
            if let Some(c) = self.cpu().get() {
                self.kmem.memcg_drain_stock(c);
            }
            return;
        }
        self.for_each_cpu_area_locked(|c| self.kmem.memcg_drain_stock(c));
    }

    /// Bytes kept by per-CPU caches: the CPU areas themselves, pages on per-CPU lists,
    /// and the slabs frozen for CPUs (CPU slabs and CPU partial slabs).
    pub fn percpu_held_bytes(&self) -> usize {
        let pa = &self.kmem.pages;
        let areas: Vec<&CpuArea> = pa.cpu_areas().iter().filter(|a| a.is_owned()).collect();
        let mut bytes = areas.len() * kmem_core::percpu::CPU_AREA_SIZE;
        bytes += (0..pa.nr_nodes())
            .map(|n| pa.nr_pcp_pages(n))
            .sum::<usize>()
            * kmem_core::PAGE_SIZE;
        self.kmem.caches().for_each(|s| {
            for a in &areas {
                bytes += s.cpu_of(a).held_slabs() * s.config().slab_bytes();
            }
        });
        bytes
    }

    #[cold]
    #[inline(never)]
    fn attach_cold(&self) -> Option<CpuRef<'static>> {
        if self.state.load(Ordering::Acquire) != READY {
            return None;
        }
        THIS_AREA.with(|a| a.set(ATTACHING));
        let nid = self.kmem.pages.platform().numa_node_id();
        let Some(area) = HEAP.kmem.pages.cpu_area_get(nid) else {
            THIS_AREA.with(|a| a.set(0));
            return None;
        };
        let ptr = area as *const CpuArea as *mut libc::c_void;
        // SAFETY: the key was created at initialisation; a non-null value makes the
        // destructor run at thread exit. (glibc may allocate here for high keys: that
        // nested allocation sees ATTACHING and takes the zone path.)
        unsafe { libc::pthread_setspecific(self.exit_key.load(Ordering::Relaxed), ptr) };
        THIS_AREA.with(|a| a.set(ptr as usize));
        // SAFETY: we own the area now.
        Some(unsafe { CpuRef::new(area) })
    }

    /// Flushes the calling thread's CPU area and returns it to the pool now, as thread
    /// exit does; the thread's later allocations take the zone path.
    pub fn detach_thread(&self) {
        if self.mode.load(Ordering::Relaxed) != MODE_THREAD {
            // Per-CPU mode: threads own no area.
            return;
        }
        let v = THIS_AREA.with(Cell::get);
        THIS_AREA.with(|a| a.set(EXITED));
        if v > EXITED {
            // SAFETY: the key exists; clearing the value stops the destructor from
            // running for an area we give back here.
            unsafe {
                libc::pthread_setspecific(self.exit_key.load(Ordering::Relaxed), std::ptr::null())
            };
            // SAFETY: this thread owned the area and the slot no longer names it.
            unsafe { self.kmem.pages.cpu_area_put(&*(v as *const CpuArea)) };
        }
    }

    // -------------------------------------------------------------------------
    // Pages.

    /// Allocates 2^`order` pages on the local node through this thread's per-CPU lists,
    /// charged to the thread's active memory cgroup if it has one.
    #[inline]
    pub fn alloc_pages(&self, gfp: Gfp, order: usize) -> Option<NonNull<Page>> {
        let guard = self.cpu();
        let cpu = guard.get();
        match active_objcg() {
            None => self.kmem.pages.alloc_pages(cpu, gfp, order),
            Some(cg) => self.kmem.alloc_pages_objcg(cpu, gfp, order, cg),
        }
    }

    /// Allocates 2^`order` pages on node `nid` (see [`PageAllocator::alloc_pages_node`]).
    pub fn alloc_pages_node(&self, gfp: Gfp, order: usize, nid: usize) -> Option<NonNull<Page>> {
        self.kmem
            .pages
            .alloc_pages_node(self.cpu().get(), gfp, order, Some(nid))
    }

    /// Frees pages from [`Heap::alloc_pages`] (uncharging them if they were charged).
    ///
    /// # Safety
    /// `page` came from this heap with this `order`, and the caller stops using it.
    #[inline]
    pub unsafe fn free_pages(&self, page: NonNull<Page>, order: usize) {
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem.free_pages(self.cpu().get(), page, order) }
    }

    /// Fills the `None` slots of `pages` with order-0 pages (see
    /// [`PageAllocator::alloc_pages_bulk`]); returns the filled count.
    pub fn alloc_pages_bulk(&self, gfp: Gfp, pages: &mut [Option<NonNull<Page>>]) -> usize {
        let guard = self.cpu();
        let cpu = guard.get();
        let Some(cg) = active_objcg() else {
            return self.kmem.pages.alloc_pages_bulk(cpu, gfp, None, pages);
        };
        // Charged: page by page, each recording its group.
        let mut filled = pages.iter().filter(|p| p.is_some()).count();
        for slot in pages.iter_mut().filter(|p| p.is_none()) {
            match self.kmem.alloc_pages_objcg(cpu, gfp, 0, cg) {
                Some(p) => {
                    *slot = Some(p);
                    filled += 1;
                }
                None => break,
            }
        }
        filled
    }

    /// Frees order-0 pages in bulk; the slots become `None`.
    ///
    /// # Safety
    /// Every `Some` page came from this heap as an order-0 page and is no longer used.
    pub unsafe fn free_pages_bulk(&self, pages: &mut [Option<NonNull<Page>>]) {
        let guard = self.cpu();
        let cpu = guard.get();
        // Charged pages are uncharged and freed one by one; the rest in bulk.
        for slot in pages.iter_mut() {
            if let Some(p) = *slot {
                if self.kmem.page_objcg(p).is_some() {
                    // SAFETY: an order-0 page of ours, given up by the caller.
                    unsafe { self.kmem.free_pages(cpu, p, 0) };
                    *slot = None;
                }
            }
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem.pages.free_pages_bulk(cpu, pages) }
    }

    /// The memory a page descriptor stands for.
    #[inline]
    pub fn page_address(&self, page: NonNull<Page>) -> NonNull<u8> {
        self.kmem.pages.page_address(page)
    }

    /// The descriptor of the heap page holding `addr`, if the heap manages it.
    #[inline]
    pub fn virt_to_page(&self, addr: *const u8) -> Option<NonNull<Page>> {
        self.kmem.pages.virt_to_page(addr)
    }

    /// Drains this thread's per-CPU lists.
    pub fn drain_local(&self) {
        if let Some(c) = self.cpu().get() {
            self.kmem.pages.drain_local_pages(c);
        }
    }

    /// Asks every thread to drain its per-CPU lists at its next call, and drains ours.
    pub fn drain_all(&self) {
        self.kmem.pages.drain_all_pages(self.cpu().get());
    }

    /// Gives every free 2 MiB block back to the OS now and takes free sections offline
    /// (`malloc_trim`); returns the pages given back.
    pub fn trim(&self) -> usize {
        self.drain_local();
        self.huge.trim() / kmem_core::PAGE_SIZE + self.kmem.pages.report_free_pages()
    }

    // -------------------------------------------------------------------------
    // kmalloc.

    /// `kmalloc`: `size` bytes (naturally aligned for power-of-two sizes up to a
    /// page), or `None` when memory runs out.
    /// Charged to the thread's active memory cgroup, if it has one.
    #[inline(always)]
    pub fn kmalloc(&self, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        match active_objcg() {
            None => match thread_cpu() {
                Some(c) => self.kmem.kmalloc(Some(c), size, gfp),
                None => self.kmalloc_cold(size, gfp),
            },
            Some(cg) => self.kmalloc_charged(size, gfp, cg),
        }
    }

    /// [`Heap::kmalloc`] without a thread area: per-CPU mode (the lockless fast path,
    /// else under the CPU area's lock), a thread's first allocation, the zone path.
    #[inline(never)]
    fn kmalloc_cold(&self, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        if self.mode.load(Ordering::Relaxed) == MODE_CPU_RSEQ {
            if let Some(p) = self
                .kmem
                .kmalloc_cache(size, gfp)
                .and_then(|s| self.rseq_alloc(s, gfp))
            {
                return Some(p);
            }
        }
        if let Some(area) = self.lockless_area() {
            if let Some(p) = self.kmem.kmalloc_lockless(area, size, gfp) {
                return Some(p);
            }
        }
        self.kmem.kmalloc(self.cpu().get(), size, gfp)
    }

    /// [`Heap::kmalloc`] under an active memory cgroup.
    #[inline(never)]
    fn kmalloc_charged(&self, size: usize, gfp: Gfp, cg: &ObjCgroup) -> Option<NonNull<u8>> {
        self.kmem.kmalloc_objcg(self.cpu().get(), size, gfp, cg)
    }

    /// `kmalloc_node`: as [`Heap::kmalloc`], on node `nid` (not charged: node
    /// placement and accounting do not combine yet).
    pub fn kmalloc_node(&self, size: usize, gfp: Gfp, nid: usize) -> Option<NonNull<u8>> {
        self.kmem
            .kmalloc_node(self.cpu().get(), size, gfp, Some(nid))
    }

    /// `kzalloc`: zeroed [`Heap::kmalloc`].
    pub fn kzalloc(&self, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        self.kmalloc(size, gfp | Gfp::ZERO)
    }

    /// `kcalloc`: `n * size` zeroed bytes; `None` on overflow.
    pub fn kcalloc(&self, n: usize, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        self.kmalloc(n.checked_mul(size)?, gfp | Gfp::ZERO)
    }

    /// `krealloc`: see [`Kmem::krealloc`]; a moved allocation is charged to the
    /// active memory cgroup.
    ///
    /// # Safety
    /// `p` is null or an allocation of this heap that the caller owns.
    pub unsafe fn krealloc(&self, p: *mut u8, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.kmem
                .krealloc_objcg(self.cpu().get(), p, size, gfp, active_objcg())
        }
    }

    /// `ksize`: the usable size of the allocation at `p` (0 if it is not one).
    pub fn ksize(&self, p: *const u8) -> usize {
        self.kmem.ksize(p)
    }

    /// `kfree`: frees `p` (null: nothing). A pointer that is not the start of one of
    /// this heap's allocations (or is already free at a freelist's head) is reported on
    /// stderr and not freed: then it returns false.
    ///
    /// # Safety
    /// If `p` is one of this heap's allocations, the caller owns it and stops using it.
    #[inline]
    pub unsafe fn kfree(&self, p: *mut u8) -> bool {
        match thread_cpu() {
            // SAFETY: forwarded from the caller.
            Some(c) => unsafe { self.kmem.kfree(Some(c), p) },
            // SAFETY: forwarded from the caller.
            None => unsafe { self.kfree_cold(p) },
        }
    }

    /// [`Heap::kfree`] without a thread area (see [`Heap::kmalloc_cold`]).
    ///
    /// # Safety
    /// As [`Heap::kfree`].
    #[inline(never)]
    unsafe fn kfree_cold(&self, p: *mut u8) -> bool {
        if self.mode.load(Ordering::Relaxed) == MODE_CPU_RSEQ {
            if let kmem_core::slub::ObjectLookup::Slab(s, slab) = self.kmem.slub().lookup(p) {
                // SAFETY: a checked object of `slab`, given up by the caller.
                if let Some(r) = unsafe { self.rseq_free(s, slab, p) } {
                    return r;
                }
            }
        }
        if let Some(area) = self.lockless_area() {
            // SAFETY: forwarded from the caller.
            if let Some(r) = unsafe { self.kmem.kfree_lockless(area, p) } {
                return r;
            }
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem.kfree(self.cpu().get(), p) }
    }

    // -------------------------------------------------------------------------
    // Object caches.

    /// `kmem_cache_create`: see [`Kmem::kmem_cache_create`].
    pub fn kmem_cache_create(
        &self,
        name: &str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        ctor: Option<fn(*mut u8)>,
    ) -> Option<&'static KmemCache> {
        HEAP.kmem
            .kmem_cache_create(self.cpu().get(), name, size, align, flags, ctor)
    }

    /// [`Heap::kmem_cache_create`] with a constructor that carries a word of context.
    pub fn kmem_cache_create_ctor(
        &self,
        name: &str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        ctor: Option<kmem_core::slub::Ctor>,
    ) -> Option<&'static KmemCache> {
        HEAP.kmem
            .kmem_cache_create_ctor(self.cpu().get(), name, size, align, flags, ctor)
    }

    /// `kmem_cache_destroy`: refused (with the kernel's report) while objects remain.
    ///
    /// # Safety
    /// No other thread uses `s` meanwhile, and nobody uses it after a success.
    pub unsafe fn kmem_cache_destroy(&self, s: &'static KmemCache) -> Result<(), DestroyError> {
        // SAFETY: forwarded from the caller.
        unsafe { HEAP.kmem.kmem_cache_destroy(self.cpu().get(), s) }
    }

    /// `kmem_cache_alloc`, charged to the thread's active memory cgroup if any.
    #[inline]
    pub fn kmem_cache_alloc(&self, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        match active_objcg() {
            None => match thread_cpu() {
                Some(c) => self.kmem.slub().alloc(Some(c), s, gfp),
                None => self.kmem_cache_alloc_cold(s, gfp),
            },
            Some(cg) => self.kmem_cache_alloc_charged(s, gfp, cg),
        }
    }

    /// [`Heap::kmem_cache_alloc`] without a thread area (see [`Heap::kmalloc_cold`]).
    #[inline(never)]
    fn kmem_cache_alloc_cold(&self, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        if self.mode.load(Ordering::Relaxed) == MODE_CPU_RSEQ {
            if let Some(p) = self.rseq_alloc(s, gfp) {
                return Some(p);
            }
        }
        if let Some(area) = self.lockless_area() {
            if let Some(p) = self.kmem.slub().alloc_lockless(area, s) {
                if gfp.contains(Gfp::ZERO) {
                    // SAFETY: the object is ours now, `object_size` bytes long.
                    unsafe { p.as_ptr().write_bytes(0, s.config().object_size) };
                }
                return Some(p);
            }
        }
        self.kmem.slub().alloc(self.cpu().get(), s, gfp)
    }

    /// [`Heap::kmem_cache_alloc`] under an active memory cgroup.
    #[inline(never)]
    fn kmem_cache_alloc_charged(
        &self,
        s: &KmemCache,
        gfp: Gfp,
        cg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        self.kmem
            .kmem_cache_alloc_objcg(self.cpu().get(), s, gfp, cg)
    }

    /// `kmem_cache_free`: a pointer that is not an object of `s` is reported. An
    /// accounted object uncharges its group.
    ///
    /// # Safety
    /// If `p` is an object of `s`, the caller owns it and stops using it.
    #[inline]
    pub unsafe fn kmem_cache_free(&self, s: &KmemCache, p: NonNull<u8>) -> bool {
        match thread_cpu() {
            // SAFETY: forwarded from the caller.
            Some(c) => unsafe { self.kmem.kmem_cache_free(Some(c), s, p) },
            // SAFETY: forwarded from the caller.
            None => unsafe { self.kmem_cache_free_cold(s, p) },
        }
    }

    /// [`Heap::kmem_cache_free`] without a thread area (see [`Heap::kmalloc_cold`]).
    ///
    /// # Safety
    /// As [`Heap::kmem_cache_free`].
    #[inline(never)]
    unsafe fn kmem_cache_free_cold(&self, s: &KmemCache, p: NonNull<u8>) -> bool {
        if self.mode.load(Ordering::Relaxed) == MODE_CPU_RSEQ {
            match self.kmem.slub().lookup(p.as_ptr()) {
                kmem_core::slub::ObjectLookup::Slab(found, slab) if std::ptr::eq(found, s) => {
                    // SAFETY: a checked object of `slab`, given up by the caller.
                    if let Some(r) = unsafe { self.rseq_free(s, slab, p.as_ptr()) } {
                        return r;
                    }
                }
                _ => {}
            }
        }
        if let Some(area) = self.lockless_area() {
            // SAFETY: forwarded from the caller.
            if let Some(r) = unsafe { self.kmem.kmem_cache_free_lockless(area, s, p) } {
                return r;
            }
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem.kmem_cache_free(self.cpu().get(), s, p) }
    }

    /// `kmem_cache_alloc_bulk`: all of `out` filled (returns its length) or none (0).
    /// Under an active memory cgroup each object is allocated and charged in turn.
    pub fn kmem_cache_alloc_bulk(&self, s: &KmemCache, gfp: Gfp, out: &mut [*mut u8]) -> usize {
        let Some(cg) = active_objcg() else {
            return self.kmem.slub().alloc_bulk(self.cpu().get(), s, gfp, out);
        };
        let guard = self.cpu();
        let cpu = guard.get();
        for i in 0..out.len() {
            match self.kmem.kmem_cache_alloc_objcg(cpu, s, gfp, cg) {
                Some(p) => out[i] = p.as_ptr(),
                None => {
                    // SAFETY: the objects allocated just above.
                    unsafe { self.kmem.kmem_cache_free_bulk(cpu, s, &mut out[..i]) };
                    return 0;
                }
            }
        }
        out.len()
    }

    /// `kmem_cache_free_bulk`: frees every non-null entry and nulls it.
    ///
    /// # Safety
    /// As [`Heap::kmem_cache_free`] for every non-null entry.
    pub unsafe fn kmem_cache_free_bulk(&self, s: &KmemCache, objs: &mut [*mut u8]) {
        // SAFETY: forwarded from the caller.
        unsafe { self.kmem.kmem_cache_free_bulk(self.cpu().get(), s, objs) }
    }

    /// `kmem_cache_shrink` for one cache: returns the slabs freed.
    pub fn kmem_cache_shrink(&self, s: &KmemCache) -> usize {
        self.kmem.slub().shrink(self.cpu().get(), s)
    }

    /// Shrinks every cache; returns the pages freed.
    pub fn shrink_all(&self) -> usize {
        self.kmem.shrink_all(self.cpu().get())
    }

    // -------------------------------------------------------------------------
    // Reports.

    /// `/proc/slabinfo` for the heap.
    pub fn slabinfo(&self) -> String {
        let mut s = String::new();
        let _ = self.kmem.slabinfo(&mut s);
        s
    }

    /// `validate` on every cache: walks every slab on the node lists (and a debug
    /// cache's full slabs) checking freelists, counts, red zones, poison; problems are
    /// reported on stderr in the kernel's format and returned.
    pub fn validate(&self) -> Vec<kmem_core::slub_debug::Problem> {
        let mut v = Vec::new();
        self.kmem.validate_all(&mut |p| v.push(p));
        v
    }

    /// A cache's SLUB statistics (`alloc_fastpath 123` lines).
    pub fn slub_stats(&self, s: &KmemCache) -> String {
        let mut out = String::new();
        let _ = self.kmem.slub_stats(s, &mut out);
        out
    }

    /// A slabtop-style summary, the `limit` largest caches.
    pub fn slabtop(&self, limit: usize) -> String {
        let mut s = String::new();
        let _ = self.kmem.slabtop(&mut s, limit);
        s
    }

    /// `/proc/buddyinfo` for the heap.
    pub fn buddyinfo(&self) -> String {
        let mut s = String::new();
        let _ = kmem_core::show_mem::buddyinfo(&self.kmem.pages, &mut s);
        s
    }

    /// `/proc/zoneinfo` for the heap.
    pub fn zoneinfo(&self) -> String {
        let mut s = String::new();
        let _ = kmem_core::show_mem::zoneinfo(&self.kmem.pages, &mut s);
        s
    }

    /// `/proc/vmstat` for the heap.
    pub fn vmstat(&self) -> String {
        let mut s = String::new();
        let _ = kmem_core::show_mem::vmstat(&self.kmem.pages, &mut s);
        s
    }

    /// The OOM report's `Mem-Info:` block for the heap (`show_free_areas`).
    pub fn show_free_areas(&self) -> String {
        let mut s = String::new();
        let _ = kmem_core::show_mem::show_free_areas(&self.kmem.pages, &mut s);
        s
    }

    /// Bounds the heap at `bytes` (0 = no bound). Memory already online stays.
    pub fn set_max_bytes(&self, bytes: usize) {
        self.kmem.pages.set_max_pages(bytes >> PAGE_SHIFT);
    }
}

/// Before `fork`: every allocator lock is taken (huge mappings, then the core's lock
/// order), so the child never inherits a lock held by a thread it does not have.
extern "C" fn fork_prepare() {
    if HEAP.state.load(Ordering::Acquire) != READY {
        return;
    }
    // Per-CPU mode: the table lock (no area is being made), then the CPU areas' local
    // locks (operations take them before any other allocator lock).
    HEAP.table_lock.lock_forever();
    for area in HEAP.cpu_areas() {
        area.lock_for_fork();
    }
    HEAP.huge.lock_for_fork();
    HEAP.kmem.fork_prepare();
}

/// After `fork`, in the parent: release.
extern "C" fn fork_parent() {
    if HEAP.state.load(Ordering::Acquire) != READY {
        return;
    }
    // SAFETY: after fork_prepare, on the same thread.
    unsafe {
        HEAP.kmem.fork_release();
        HEAP.huge.unlock_after_fork();
        for area in HEAP.cpu_areas() {
            area.unlock_after_fork();
        }
        HEAP.table_lock.force_unlock();
    }
}

/// After `fork`, in the child: release. The child's only thread keeps its CPU area;
/// the areas of the parent's other threads stay owned by nobody and are never used.
extern "C" fn fork_child() {
    fork_parent();
}

/// `KMEM_STATS`: the report at process exit.
extern "C" fn stats_at_exit() {
    let h = &HEAP;
    let fd = match h.config().stats {
        crate::config::StatsTarget::Stderr => 2,
        t => match t.path() {
            // SAFETY: opening a NUL-terminated path.
            Some(p) => unsafe {
                libc::open(
                    p.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                    0o644,
                )
            },
            None => return,
        },
    };
    if fd < 0 {
        crate::platform::linux::write_stderr(b"kmem: KMEM_STATS: cannot open the file\n");
        return;
    }
    let mut w = crate::platform::linux::FdWriter::new(fd);
    let _ = h.write_report(&mut w);
    w.flush();
    if fd != 2 {
        // SAFETY: we opened it.
        unsafe { libc::close(fd) };
    }
}

/// The pthread key destructor: the thread's CPU goes offline.
extern "C" fn thread_exit(value: *mut libc::c_void) {
    THIS_AREA.with(|a| a.set(EXITED));
    if value.is_null() {
        return;
    }
    // SAFETY: the value is the area this (exiting) thread owned; nothing else on the
    // thread uses it after the slot says EXITED.
    unsafe { HEAP.kmem.pages.cpu_area_put(&*(value as *const CpuArea)) };
}
