//! Per-CPU mode: with `KMEM_PERCPU=cpu*` (or [`set_percpu_mode`]) CPU areas belong to
//! CPU ids instead of threads (`cpu_table`, an area made on a CPU's first use; ids past
//! [`MAX_CPU_IDS`](super::MAX_CPU_IDS) use the zone path). An operation takes the area
//! of the CPU it runs on (the `cpu_id` of glibc's rseq area, else `sched_getcpu`) and
//! holds its local lock (see `cpu`), marked in the thread's held-area slot.
//!
//! The kmalloc and kmem_cache alloc/free paths without a thread area go through one
//! fallback, [`fallback`]: first, without the lock, the restartable sequences of
//! `platform::rseq` (`cpu-rseq`) or the double-word-CAS path (`cpu-cas`) on the area of
//! the CPU the thread runs on; else the locked path. In `cpu-rseq` the slab layer takes
//! a CPU freelist or a sheaf's top through [`rseq_take`](super::rseq_take) (a sequence on that CPU, or a
//! fence from another). Threads own nothing,
//! so thread exit flushes nothing; [`Heap::flush_cpu_caches`] flushes every CPU's area.
//!
//! Locking: `table_lock` serialises making areas (fork's prepare handler takes it
//! before locking every area in the table, so no area appears unseen); an area's local
//! lock covers everything but the lockless fast paths. The table itself is read
//! without a lock (entries are published once, with Release).

use super::thread::{callout_area, held_area, set_held_area};
use super::{Heap, HEAP, UNINIT};
use super::{MODE_CPU_CAS, MODE_CPU_LOCK, MODE_CPU_RSEQ, MODE_THREAD};
use crate::config::PerCpuMode;
use crate::platform::linux::write_stderr;
pub(crate) use crate::platform::Pushed;
use kmem_core::slab::ObjectLookup;
use kmem_core::sync::SpinLockGuard;
use kmem_core::{CpuArea, CpuRef, Gfp, KmemCache, Page};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};

/// Per-CPU mode requested through [`set_percpu_mode`] before initialisation
/// (`MODE_UNSET`: take `KMEM_PERCPU`).
static REQUESTED_MODE: AtomicU8 = AtomicU8::new(MODE_UNSET);
const MODE_UNSET: u8 = u8::MAX;
/// Per-CPU, the best mechanism here (a request, resolved at initialisation; never the
/// heap's `mode`).
const MODE_CPU: u8 = 3;

fn mode_code(mode: PerCpuMode) -> u8 {
    match mode {
        PerCpuMode::Thread => MODE_THREAD,
        PerCpuMode::CpuLock => MODE_CPU_LOCK,
        PerCpuMode::CpuCas => MODE_CPU_CAS,
        PerCpuMode::CpuRseq => MODE_CPU_RSEQ,
        PerCpuMode::Cpu => MODE_CPU,
    }
}

/// The mode a resolved code stands for (`MODE_CPU` never is one).
fn code_mode(code: u8) -> PerCpuMode {
    match code {
        MODE_THREAD => PerCpuMode::Thread,
        MODE_CPU_CAS => PerCpuMode::CpuCas,
        MODE_CPU_RSEQ => PerCpuMode::CpuRseq,
        _ => PerCpuMode::CpuLock,
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

/// Whether this process may restart the sections of another CPU (`membarrier`'s rseq
/// fence, registered now), which per-CPU rseq mode's takes of another CPU's words use
/// (see [`rseq_take`](super::rseq_take)).
fn fence_possible() -> bool {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        crate::platform::rseq::can_fence()
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        false
    }
}

/// Whether threads may be pinned to a CPU, which per-CPU rseq mode's takes of another
/// CPU's words need where the fence is refused (see [`rseq_take`](super::rseq_take)).
fn pin_possible() -> bool {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        crate::platform::rseq::can_pin()
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    {
        false
    }
}

/// Per-CPU rseq mode: the CPU areas' region, where CPU `id`'s area is at `id *
/// CPU_AREA_SIZE` ([`Heap::area_of_cpu`] makes it there on the CPU's first use), so
/// that the restartable sequences find their CPU's area by a shift and an add of the
/// `cpu_id` they read (tcmalloc's `base + (cpu << shift)`), not by a load from a table
/// of areas, one load on every pop's and push's chain. Untouched, a CPU's place reads
/// as zeros, as the zero area does: no objects, no room. 0 in the other modes.
static CPU_REGION: AtomicUsize = AtomicUsize::new(0);

/// [`CPU_REGION`] as the sequences take it.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[inline(always)]
fn cpu_region() -> *const u8 {
    CPU_REGION.load(Ordering::Relaxed) as *const u8
}

/// The region's address range (`(0, 0)` where it is not mapped). Where it is, every
/// CPU area is in it (per-CPU rseq mode makes no other: threads attach none).
pub(super) fn cpu_region_range() -> (usize, usize) {
    match CPU_REGION.load(Ordering::Relaxed) {
        0 => (0, 0),
        base => (base, base + cpu_region_len()),
    }
}

fn cpu_region_len() -> usize {
    super::MAX_CPU_IDS * kmem_core::percpu::CPU_AREA_SIZE
}

/// Maps [`CPU_REGION`] (`MAX_CPU_IDS` areas' worth of address space, 64 MiB; pages
/// are made as areas are written, in 4 KiB pages: a transparent huge page would make
/// 2 MiB resident for the first CPU's area, all on that CPU's node). False where the
/// kernel refuses.
fn map_cpu_region() -> bool {
    let len = cpu_region_len();
    match crate::platform::os::map_anonymous(len) {
        Some(base) => {
            crate::platform::os::no_huge_pages(base, len);
            CPU_REGION.store(base, Ordering::Relaxed);
            true
        }
        None => false,
    }
}

/// Whether this machine can run the lockless per-CPU fast paths.
fn lockless_possible() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        kmem_core::slab::LOCKLESS_SUPPORTED && std::arch::is_x86_feature_detected!("cmpxchg16b")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The mode the heap runs in (initialisation): the one [`set_percpu_mode`] asked for,
/// else `KMEM_PERCPU`'s, with `cpu` resolved to the best mechanism here and a mechanism
/// this machine lacks replaced by the next best (with a warning when it was asked for
/// by name).
pub(super) fn resolve_mode(env: PerCpuMode) -> u8 {
    let mut mode = match REQUESTED_MODE.load(Ordering::SeqCst) {
        MODE_UNSET => mode_code(env),
        m => m,
    };
    if mode == MODE_CPU_RSEQ || mode == MODE_CPU {
        let rseq = rseq_possible();
        let takes = rseq && (fence_possible() || pin_possible());
        if takes && map_cpu_region() {
            return MODE_CPU_RSEQ;
        }
        if mode == MODE_CPU_RSEQ {
            write_stderr(if takes {
                b"kmem: KMEM_PERCPU=cpu-rseq: no room for the CPU areas' region (mmap refused); using cpu-cas or cpu-lock\n"
            } else if rseq {
                b"kmem: KMEM_PERCPU=cpu-rseq: no membarrier rseq fence here, and threads cannot be pinned to a CPU (sched_setaffinity refused); using cpu-cas or cpu-lock\n"
            } else {
                b"kmem: KMEM_PERCPU=cpu-rseq: no rseq registration here; using cpu-cas or cpu-lock\n"
            });
        }
        mode = MODE_CPU;
    }
    if mode == MODE_CPU || mode == MODE_CPU_CAS {
        let cas = lockless_possible();
        if mode == MODE_CPU_CAS && !cas {
            write_stderr(b"kmem: KMEM_PERCPU=cpu-cas: no double-word CAS here; using cpu-lock\n");
        }
        mode = if cas { MODE_CPU_CAS } else { MODE_CPU_LOCK };
    }
    mode
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

/// The path of an alloc or free without a thread area, in the heap's `mode`: in
/// `cpu-rseq` the restartable sequence (`rseq`), in `cpu-cas` the lockless CAS path
/// (`cas`); when that is not possible or gives `None` (no area for this CPU yet, an
/// empty freelist, not the CPU slab, a debug cache), the locked path (`locked`), which
/// is also the only one in thread mode and `cpu-lock`. At most one lockless attempt
/// runs before the locked path. (An allocation's attempts answer `Some(Some(p))`: the
/// outer `Option` says whether the attempt decided, the inner is the result.)
///
/// Inlined into each caller, so each attempt is a direct call as before.
#[inline(always)]
pub(super) fn fallback<R>(
    mode: u8,
    rseq: impl FnOnce() -> Option<R>,
    cas: impl FnOnce() -> Option<R>,
    locked: impl FnOnce() -> R,
) -> R {
    let fast = match mode {
        MODE_CPU_RSEQ => rseq(),
        MODE_CPU_CAS => cas(),
        _ => None,
    };
    fast.unwrap_or_else(locked)
}

/// The thread's `struct rseq` as the rseq fast paths address it.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(super) use crate::platform::rseq::RseqArea;
/// Stands in for the thread's `struct rseq` where there are no restartable sequences
/// ([`tagged_rseq_area`] never hands one out there).
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
#[derive(Clone, Copy)]
pub(super) struct RseqArea;

/// The thread's `struct rseq` when its fast word is the rseq tag (per-CPU rseq mode,
/// no active memory cgroup), else `None`: what the front ends' rseq fast paths test
/// first, from the fast word they loaded already (its load is `pure`, so the two may
/// merge; [`rseq_area_of`] takes the word itself where they did not), and pass on, so
/// that the out-of-line halves test nothing again.
#[inline(always)]
pub(super) fn tagged_rseq_area() -> Option<RseqArea> {
    rseq_area_of(crate::platform::fast_tls::get())
}

/// [`tagged_rseq_area`] for a fast word `w` the caller has read.
#[inline(always)]
pub(super) fn rseq_area_of(w: usize) -> Option<RseqArea> {
    if w != super::thread::rseq_tag() {
        return None;
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        // SAFETY: a fast word is the rseq tag only in per-CPU rseq mode
        // (`refresh_fast`, `enable_rseq_fast`: `rseq_fast_paths`), which
        // `resolve_mode` chooses only after `rseq::area` returned `Some`
        // (`rseq_possible`).
        Some(unsafe { crate::platform::rseq::area_known() })
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    None
}

/// [`rseq_area_of`] as the first test of a fast path whose thread-mode half comes
/// next, inline (`Heap::kmalloc`, `Heap::kfree`): the same answer, with the rseq
/// branch laid out away from thread mode's. The comparison is an `asm!` goto whose
/// label block is the rseq case: the compiler places such a block out of line, so
/// thread mode falls through to its pop or push with one compare-and-branch more
/// and no taken jump. (With a plain `if`, the compiler made the rseq half the
/// fall-through and thread mode's pop a jump away: BENCHMARKS.md, "The rseq tag
/// first".)
#[inline(always)]
pub(super) fn rseq_area_first(w: usize) -> Option<RseqArea> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        let tag = super::thread::rseq_tag();
        // SAFETY: a compare and a conditional jump to the label block; no memory is
        // read or written, no stack used. The label block is `rseq_area_of`'s answer
        // for a word equal to the tag.
        unsafe {
            std::arch::asm!(
                "cmp {w}, {tag}",
                "je {rseq}",
                w = in(reg) w,
                tag = in(reg) tag,
                rseq = label {
                    return rseq_area_of(tag);
                },
                options(nomem, nostack),
            );
        }
        None
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    rseq_area_of(w)
}

/// Zeroes a fresh object of `s` for `__GFP_ZERO` (the core's `post_alloc_init`, for
/// objects the platform's own fast paths handed out).
#[inline]
pub(super) fn zero_if_asked(s: &KmemCache, gfp: Gfp, p: NonNull<u8>) -> NonNull<u8> {
    // SAFETY: a new object of `s`, the caller's now.
    unsafe { kmem_core::slab::post_alloc_init(s, p, gfp) };
    p
}

/// The area a [`Heap::cpu_table`] entry names: `None` for a CPU without one yet (the
/// entry is the zero area, `NO_CPU_AREA`, or null in thread mode).
#[inline]
fn table_area(slot: &AtomicPtr<CpuArea>) -> Option<&'static CpuArea> {
    let p = slot.load(Ordering::Acquire);
    if p == super::NO_CPU_AREA || p.is_null() {
        return None;
    }
    // SAFETY: every other entry is an area of the pool (`area_of_cpu` stores nothing
    // else), and those live forever.
    Some(unsafe { &*p })
}

impl Heap {
    /// [`fallback`] in the heap's mode; the CAS attempt gets the area of the CPU the
    /// thread runs on, and the locked path the guard of [`Heap::cpu`].
    #[inline(always)]
    pub(super) fn percpu_fallback<R>(
        &self,
        rseq: impl FnOnce() -> Option<R>,
        cas: impl FnOnce(&'static CpuArea) -> Option<R>,
        locked: impl FnOnce(Option<CpuRef<'_>>) -> R,
    ) -> R {
        fallback(
            self.mode.load(Ordering::Relaxed),
            rseq,
            || self.this_cpu_area().and_then(cas),
            || locked(self.cpu().get()),
        )
    }

    /// Per-CPU mode: the area of the CPU the thread runs on, with its local lock taken
    /// and marked as this thread's held area (the caller clears the mark when it
    /// releases the lock). `None`: no area to be had (a CPU id past the table, or no
    /// memory for one).
    #[inline(always)]
    pub(super) fn lock_this_cpu_area(
        &self,
    ) -> Option<(&'static CpuArea, SpinLockGuard<'static, ()>)> {
        let area = self.area_of_cpu(crate::platform::linux::current_cpu())?;
        let lock = area.local_lock();
        set_held_area(area as *const CpuArea as usize);
        Some((area, lock))
    }

    /// Per-CPU mode: the area of CPU `id`, made on first use.
    fn area_of_cpu(&self, id: usize) -> Option<&'static CpuArea> {
        let slot = self.cpu_table.get(id)?;
        if let Some(area) = table_area(slot) {
            return Some(area);
        }
        // Made under the table lock, which fork's prepare handler also takes (before
        // locking every area it finds in the table), so no area appears unseen.
        let _g = self.table_lock.lock();
        if let Some(area) = table_area(slot) {
            return Some(area);
        }
        let (_, node) = crate::platform::linux::getcpu();
        let area = match CPU_REGION.load(Ordering::Relaxed) {
            0 => HEAP.kmem.pages.cpu_area_get(node)?,
            base => {
                // SAFETY: CPU `id`'s place in the region (`id` is below
                // `MAX_CPU_IDS`, the table's length): zeroed, page aligned,
                // `CPU_AREA_SIZE` long, and made into an area once (under the table
                // lock, its slot still empty), never put back (per-CPU areas are kept
                // for good).
                unsafe {
                    let mem = (base + id * kmem_core::percpu::CPU_AREA_SIZE) as *mut u8;
                    HEAP.kmem
                        .pages
                        .cpu_area_in(NonNull::new_unchecked(mem), node)?
                }
            }
        };
        // Before the area is published: the rseq take looks its CPU up.
        self.area_cpu[area.id()].store(id as u32 + 1, Ordering::Release);
        slot.store(area as *const CpuArea as *mut CpuArea, Ordering::Release);
        Some(area)
    }

    /// The mode CPU areas are assigned in (fixed at initialisation): `Thread`,
    /// `CpuRseq`, `CpuCas` or `CpuLock`.
    pub fn percpu_mode(&self) -> PerCpuMode {
        code_mode(self.mode.load(Ordering::Relaxed))
    }

    /// `cpu-cas`: the area of the CPU the caller runs on now (it may move right after;
    /// the fast paths cope). `None` when the CPU has no area yet.
    #[inline]
    fn this_cpu_area(&self) -> Option<&'static CpuArea> {
        table_area(self.cpu_table.get(crate::platform::linux::current_cpu())?)
    }

    /// Whether the front ends may take the rseq fast paths (per-CPU rseq mode, the
    /// heap READY): see `thread::rseq_tag`.
    pub(super) fn rseq_fast_paths(&self) -> bool {
        self.state.load(Ordering::Acquire) == super::READY
            && self.mode.load(Ordering::Relaxed) == MODE_CPU_RSEQ
    }

    /// Per-CPU rseq mode, on a path without a thread area (the per-CPU fallbacks of
    /// kmalloc, kfree, kmem_cache_alloc and kmem_cache_free): sets the thread's fast
    /// word to the rseq tag if it may take the rseq fast paths, so that from its next
    /// operation on the front ends go to them directly. On every entry, not only the
    /// allocations': a thread that only frees (a consumer of objects allocated
    /// elsewhere) or only uses kmem_cache objects ran every operation through the
    /// layers (`bench percpu` fastpath_reuse_2t, two fresh threads on a kmem_cache:
    /// 15–20 ns a pair against thread mode's 5).
    #[inline(always)]
    pub(super) fn enable_rseq_fast_paths(&self) {
        if self.rseq_fast_paths() {
            super::thread::enable_rseq_fast();
        }
    }

    /// The front ends' allocation fast path in per-CPU rseq mode (the thread's fast
    /// word is `rseq_tag()`): an object of the plain kmalloc cache for `size` from the
    /// CPU's sheaf, or `None` (the regular path refills, zeroes and reports).
    #[inline(always)]
    pub(super) fn rseq_alloc_plain(&self, rseq: RseqArea, size: usize) -> Option<NonNull<u8>> {
        if let Some(p) = self.rseq_alloc_small(rseq, size) {
            return Some(p);
        }
        let s = self.kmem.kmalloc_cache(size, Gfp::KERNEL)?;
        self.rseq_alloc(s, Gfp::KERNEL)
    }

    /// The rseq allocation fast path of a plain request up to `SMALL_FAST_MAX`
    /// bytes: from the size table straight to the CPU's main sheaf of the class (one
    /// table load, then the restartable pop; no load through the cache), `rseq`
    /// from [`tagged_rseq_area`]. `None`: not such a size, or the pop found nothing;
    /// the caller goes on.
    #[inline(always)]
    pub(super) fn rseq_alloc_small(&self, rseq: RseqArea, size: usize) -> Option<NonNull<u8>> {
        self.rseq_pop_at(rseq, self.kmem.kmalloc_rseq_offset(size)?)
    }

    /// [`Heap::rseq_alloc_small`] for C's `malloc(size)`: the class of
    /// `kmem_core::kmalloc::malloc_class_size` (16-aligned above 8 bytes).
    #[inline(always)]
    pub(super) fn rseq_malloc_small(&self, rseq: RseqArea, size: usize) -> Option<NonNull<u8>> {
        self.rseq_pop_at(rseq, self.kmem.malloc_rseq_offset(size)?)
    }

    /// The restartable pop from the CPU's sheaves of the plain class whose
    /// `kmem_cache_cpu` is at `off` (the zero line for a class off the sequences,
    /// whose sheaves are empty: `None`).
    #[inline(always)]
    fn rseq_pop_at(&self, rseq: RseqArea, off: usize) -> Option<NonNull<u8>> {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            // SAFETY: `rseq` is this thread's registered area; the region holds
            // MAX_CPU_IDS places, zero bytes or CPU areas, each holding at `off` the
            // `kmem_cache_cpu` of the class's cache, which runs on the restartable
            // sequences, or the zero line, zero in every area and never written (the
            // size tables `kmalloc_rseq_offset` and `malloc_rseq_offset` read give no
            // other offset): the lock holder changes a CPU's sheaves only after taking
            // their words on that CPU.
            let obj = unsafe { crate::platform::rseq::sheaf_pop_at(rseq, cpu_region(), off) };
            NonNull::new(obj as *mut u8)
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        {
            let _ = (rseq, off);
            None
        }
    }

    /// The front ends' free fast path in per-CPU rseq mode: `Some(true)` when `p` went
    /// onto the CPU's sheaf, `Some(false)` for a double free on its top (reported, not
    /// done), `None` for everything the regular path handles (and reports).
    ///
    /// # Safety
    /// As [`Heap::dealloc`].
    #[inline(always)]
    pub(super) unsafe fn rseq_free_ptr(&self, rseq: RseqArea, p: *mut u8) -> Option<bool> {
        // SAFETY: the caller's contract (as `Heap::dealloc`): `p` is given up, and the
        // push takes it only when it starts an object of ours.
        match unsafe { self.rseq_free_fast(rseq, p) } {
            Pushed::Done => Some(true),
            Pushed::AtHead => Some(self.rseq_double_free_at_top(p)),
            // SAFETY: forwarded from the caller.
            Pushed::No => unsafe { self.rseq_free_ptr_slow(p) },
        }
    }

    /// A free that the rseq push found on its sheaf's top ([`Pushed::AtHead`]): a
    /// double free, reported; false (not done). Reported here, where the push found
    /// it: the out-of-line path, on another CPU after a migration, would not find it
    /// on that CPU's top and would push it a second time.
    #[cold]
    #[inline(never)]
    pub(super) fn rseq_double_free_at_top(&self, p: *mut u8) -> bool {
        // SAFETY: `p` is on this CPU's sheaf top: an object of a live cache (its sheaf
        // keeps the cache from being destroyed).
        match unsafe { self.kmem.slub().lookup(p) } {
            // SAFETY: `lookup` found `slab` heading a slab of `s`, live while the
            // object the caller frees is in it.
            ObjectLookup::Slab(s, slab) => unsafe {
                self.kmem.slub().double_free(s, slab, p as usize)
            },
            _ => false,
        }
    }

    /// [`Heap::rseq_free_ptr`] once the sheaf push refused `p`: the CPU-slab design's
    /// restartable push from the object's slab.
    ///
    /// # Safety
    /// As [`Heap::dealloc`].
    #[inline(always)]
    pub(super) unsafe fn rseq_free_ptr_slow(&self, p: *mut u8) -> Option<bool> {
        // SAFETY: the caller frees its object: the cache found lives.
        match unsafe { self.kmem.slub().lookup(p) } {
            // SAFETY: a checked object of `slab`, given up by the caller.
            ObjectLookup::Slab(s, slab) => unsafe { self.rseq_free(s, slab, p) },
            _ => None,
        }
    }

    /// The rseq free fast path: from the object's own page straight to the CPU's
    /// spare sheaf of its cache (`Slub::rseq_free_target`), pushed in a restartable
    /// sequence that also checks the object's start (`rseq` from
    /// [`tagged_rseq_area`]). [`Pushed::Done`] when `p` went onto the sheaf;
    /// [`Pushed::AtHead`] when it is the sheaf's top already (a double free, for
    /// [`Heap::rseq_double_free_at_top`]); [`Pushed::No`] leaves it untouched (not a
    /// plain object of an rseq sheaf cache, a full sheaf: the regular path decides and
    /// reports).
    ///
    /// # Safety
    /// As [`Heap::dealloc`] when it returns [`Pushed::Done`].
    #[inline(always)]
    pub(super) unsafe fn rseq_free_fast(&self, rseq: RseqArea, p: *mut u8) -> Pushed {
        // SAFETY: forwarded from the caller.
        unsafe { self.rseq_free_fast_to(rseq, p, None) }
    }

    /// [`Heap::rseq_free_fast`] for `kmem_cache_free(s, p)` when `want` is `Some(s)`:
    /// also leaves an object of another cache to the regular path, which reports it
    /// (a `cpu_offset` belongs to one cache for good, so the page's sheaf tag names
    /// `s` exactly when it gives `s`'s offset).
    ///
    /// # Safety
    /// As [`Heap::rseq_free_fast`].
    #[inline(always)]
    pub(super) unsafe fn rseq_free_fast_to(
        &self,
        rseq: RseqArea,
        p: *mut u8,
        want: Option<&KmemCache>,
    ) -> Pushed {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            use crate::platform::rseq;
            let Some(off) = self.kmem.slub().rseq_free_target(p) else {
                return Pushed::No;
            };
            if want.is_some_and(|s| s.config().cpu_offset != off) {
                return Pushed::No;
            }
            let region = cpu_region();
            // SAFETY: the region and `rseq` as in `rseq_alloc_small`, for the
            // `cpu_offset` the object's page names (a cache on the restartable
            // sequences, its slab without an objcg vector), or the zero line (never
            // written: no room); the sequence checks that `p` starts one of its objects
            // before it takes it (its
            // outcome, `AtHead` included, is the caller's), and the caller gives it up.
            unsafe { rseq::sheaf_push_at(rseq, region, off, p as usize) }
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        {
            let _ = (rseq, p, want);
            Pushed::No
        }
    }

    /// `cpu-rseq`: pops an object of `s` from the CPU freelist of the CPU the thread
    /// runs on, in a restartable sequence. `None`: take the locked path.
    #[inline]
    pub(super) fn rseq_alloc(&self, s: &KmemCache, gfp: Gfp) -> Option<NonNull<u8>> {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            let cfg = s.config();
            // (A sheaf cache is never off the fast paths: debug caches run the CPU-slab
            // path in either design.)
            if cfg.fast != kmem_core::slab::FastPath::SheafRseq && cfg.off_fast_paths() {
                return None;
            }
            let rseq = crate::platform::rseq::area()?;
            // For both sequences: `rseq` is this thread's registered area; the region
            // holds MAX_CPU_IDS places, zero bytes or CPU areas holding every cache's
            // `kmem_cache_cpu` at its offset; the caches run with `rseq` set (so the
            // slab layer changes a CPU freelist only by committing on that CPU, or
            // while it is empty).
            let region = cpu_region();
            let obj = if cfg.fast == kmem_core::slab::FastPath::SheafRseq {
                // SAFETY: as above, for the sheaves design: the lock holder changes a
                // CPU's sheaves only after taking their words on that CPU.
                unsafe { crate::platform::rseq::sheaf_pop(rseq, region, cfg) }
            } else {
                // SAFETY: as above.
                unsafe { crate::platform::rseq::pop(rseq, region, cfg) }
            };
            let p = NonNull::new(obj as *mut u8)?;
            // An uncharged allocation, as the slab layer's own paths record it.
            self.kmem.slub().note_uncharged(s, p);
            Some(zero_if_asked(s, gfp, p))
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        {
            let _ = (s, gfp);
            None
        }
    }

    /// `cpu-rseq`: pushes `p` (an object of `slab` of `s`) on the CPU freelist of the
    /// CPU the thread runs on if `slab` is that CPU's slab, or, in the sheaves design,
    /// on the CPU's spare sheaf. `Some(false)`: a double free at the freelist's or
    /// sheaf's head, or into a slab with no object in use (reported). `None`: take the
    /// locked path.
    ///
    /// # Safety
    /// `p` is the start of an object of `slab` of `s`, owned by the caller, who gives
    /// it up.
    #[inline]
    pub(super) unsafe fn rseq_free(
        &self,
        s: &KmemCache,
        slab: NonNull<Page>,
        p: *mut u8,
    ) -> Option<bool> {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            use crate::platform::rseq::{self, Pushed};
            let cfg = s.config();
            // SAFETY: a live slab (caller).
            if cfg.off_fast_paths() || unsafe { kmem_core::memcontrol::has_obj_exts(slab) } {
                return None;
            }
            let obj = p as usize;
            if cfg.fast == kmem_core::slab::FastPath::SheafRseq {
                // SAFETY: a live slab of `s` (caller).
                let head = unsafe { slab.as_ref() };
                if kmem_core::slab::Slab::of(head).state().inuse() == 0 {
                    // No object of the slab is out (a kept empty slab's, whose pages
                    // name no sheaf, so the inline push sent it here): the sheaf would
                    // hand it out beside the slab's own copy. As `free_object`.
                    // SAFETY: a live slab of `s` (caller).
                    return Some(unsafe { self.kmem.slub().double_free(s, slab, obj) });
                }
            }
            let area = rseq::area()?;
            let base = obj & !(cfg.slab_bytes() - 1);
            let region = cpu_region();
            let pushed = if cfg.fast == kmem_core::slab::FastPath::SheafRseq {
                // SAFETY: as in `rseq_alloc`; the object is the caller's to give up.
                unsafe { rseq::sheaf_push(area, region, cfg, obj) }
            } else {
                // SAFETY: as in `rseq_alloc`; the object is the caller's to give up.
                unsafe { rseq::push(area, region, cfg, obj, base) }
            };
            match pushed {
                Pushed::Done => Some(true),
                // SAFETY: a live slab of `s` (caller).
                Pushed::AtHead => Some(unsafe { self.kmem.slub().double_free(s, slab, obj) }),
                Pushed::No => None,
            }
        }
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        {
            let _ = (s, slab, p);
            None
        }
    }

    /// Per-CPU mode: every CPU's area, for reports, flushes and fork.
    pub(super) fn cpu_areas(&self) -> impl Iterator<Item = &'static CpuArea> + '_ {
        self.cpu_table.iter().filter_map(table_area)
    }

    /// Runs `f` as the owner of the CPU areas the caller can reach: in thread mode the
    /// caller's own (other threads' stay theirs), in per-CPU mode every CPU's in turn,
    /// each under its local lock (or, for an area this thread already holds, under that
    /// hold; not the one a constructor's enclosing operation holds). Returns whether
    /// the heap runs in thread mode.
    fn for_each_reachable_area(&self, mut f: impl FnMut(CpuRef<'_>)) -> bool {
        if self.mode.load(Ordering::Relaxed) == MODE_THREAD {
            if let Some(c) = self.cpu().get() {
                f(c);
            }
            return true;
        }
        let held = held_area();
        // An area held half-way through an operation around a constructor (which
        // runs this) is passed by: its lock is this thread's, its state in flux.
        let callout = callout_area();
        for area in self.cpu_areas() {
            let addr = area as *const CpuArea as usize;
            if addr == callout {
                continue;
            }
            let _lock = (addr != held).then(|| area.local_lock());
            // SAFETY: we hold the area's local lock (here or in an enclosing operation
            // of this thread): we act as its owner.
            f(unsafe { CpuRef::new(area) });
        }
        false
    }

    /// Empties every per-CPU cache now — CPU slabs and partials, per-CPU page lists,
    /// memcg stocks — so that their memory goes back to the page allocator: in per-CPU
    /// mode every CPU's area (each under its lock); in thread mode the caller's own
    /// (other threads' are asked to drain at their next call).
    pub fn flush_cpu_caches(&self) {
        if self.for_each_reachable_area(|c| self.kmem.pages.cpu_area_flush(c)) {
            self.kmem.pages.drain_all_pages(None);
        }
    }

    /// Drains memcg charge stocks into the groups' counters: the caller's own in thread
    /// mode (other threads' drain when they switch groups or exit), every CPU's in
    /// per-CPU mode.
    pub fn drain_memcg_stocks(&self) {
        self.for_each_reachable_area(|c| self.kmem.memcg().memcg_drain_stock(c));
    }

    /// Bytes kept by per-CPU caches: the CPU areas themselves, pages on per-CPU lists,
    /// the slabs frozen for CPUs (CPU slabs and CPU partial slabs) and the CPUs'
    /// sheaves with the objects in them.
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
                let cc = s.cpu_of(a);
                bytes += cc.held_slabs() * s.config().slab_bytes();
                // Sheaves: the objects they hold and their own memory.
                bytes += cc.sheaf_objects() * s.config().size;
                bytes += cc.sheaves_held()
                    * (kmem_core::slab::sheaf::SHEAF_HEADER + 8 * s.config().sheaf_capacity);
            }
        });
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Runs `fallback` in `mode` with attempts that answer `rseq` and `cas`; returns
    /// the result and the attempts made, in order.
    fn run(mode: u8, rseq: Option<u32>, cas: Option<u32>) -> (u32, Vec<&'static str>) {
        let tried = RefCell::new(Vec::new());
        let r = fallback(
            mode,
            || {
                tried.borrow_mut().push("rseq");
                rseq
            },
            || {
                tried.borrow_mut().push("cas");
                cas
            },
            || {
                tried.borrow_mut().push("locked");
                0
            },
        );
        (r, tried.into_inner())
    }

    #[test]
    fn each_mode_tries_its_own_fast_path_then_the_lock() {
        assert_eq!(run(MODE_CPU_RSEQ, Some(1), Some(2)), (1, vec!["rseq"]));
        assert_eq!(
            run(MODE_CPU_RSEQ, None, Some(2)),
            (0, vec!["rseq", "locked"])
        );
        assert_eq!(run(MODE_CPU_CAS, Some(1), Some(2)), (2, vec!["cas"]));
        assert_eq!(run(MODE_CPU_CAS, Some(1), None), (0, vec!["cas", "locked"]));
        for mode in [MODE_THREAD, MODE_CPU_LOCK] {
            assert_eq!(run(mode, Some(1), Some(2)), (0, vec!["locked"]));
        }
    }

    /// The rseq test that comes first in `Heap::kmalloc` and `Heap::kfree` answers as
    /// `rseq_area_of` does: nothing for every word but the tag (null, the zero area's
    /// base, the tag's neighbours, another address), and for the tag, where glibc
    /// registered an rseq area (the only case in which a fast word holds the tag), the
    /// thread's `struct rseq`.
    #[test]
    fn the_first_rseq_test_answers_only_for_the_tag() {
        use super::super::thread::{no_area, rseq_tag};
        let local = 0u64;
        let tag = rseq_tag();
        for w in [
            0,
            no_area(),
            tag - 8,
            tag + 8,
            tag ^ (1 << 40),
            usize::MAX,
            &local as *const u64 as usize,
        ] {
            assert!(rseq_area_first(w).is_none(), "word {w:#x}");
        }
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        {
            crate::platform::linux::rseq_init();
            match crate::platform::rseq::area() {
                Some(r) => assert_eq!(rseq_area_first(tag), Some(r)),
                None => println!("glibc registers no rseq area here"),
            }
        }
    }

    #[test]
    fn modes_map_both_ways() {
        for m in [
            PerCpuMode::Thread,
            PerCpuMode::CpuLock,
            PerCpuMode::CpuCas,
            PerCpuMode::CpuRseq,
        ] {
            assert_eq!(code_mode(mode_code(m)), m);
        }
        assert_eq!(mode_code(PerCpuMode::Cpu), MODE_CPU, "resolved at start");
    }
}
