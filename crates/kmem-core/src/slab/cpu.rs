//! A cache's per-CPU state (`struct kmem_cache_cpu`): the CPU freelist and `tid`, the
//! CPU partial list and statistics, and the ways a CPU freelist is taken and installed
//! in each per-CPU mode.
//!
//! Only the owner of a CPU area (or the holder of its local lock) changes its
//! `kmem_cache_cpu`, except for the lockless fast paths of per-CPU mode, which change the
//! `(freelist, tid)` pair with a double-word CAS or a restartable sequence (see [`super`]).

use super::sheaf::SlabSheaf;
use super::*;
use crate::page::Page;
use crate::percpu::CpuRef;
use crate::sync::{
    AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed,
};

/// A cache's per-CPU state (`struct kmem_cache_cpu`), in every CPU area at
/// `cpu_offset`. All-zero is valid (no CPU slab, empty partial list).
///
/// Invariants (owner only): `freelist` is 0 (no CPU slab), or an object of the CPU
/// slab, or that slab's end token; the CPU slab is the slab its value lies in.
/// `partial` heads a list of frozen slabs linked through `Page::next`, `nr_partial`
/// long.
///
/// Layout: the first 64 bytes (the struct is 64-byte aligned) hold everything the
/// sheaves design's fast paths read, so a free reads this line and the slab's page
/// descriptor and nothing of the cache: the spare sheaf, its top and its limit, the
/// checks of an object's start (`free_*`, copies of the cache's layout written with the
/// spare sheaf, see [`KmemCacheCpu::set_free_checks`]; all zero, as in a fresh area,
/// refuses every pointer), the main sheaf and its top. The CPU-slab design's
/// `(freelist, tid)` pair follows, 16-byte aligned for its double-word CAS.
///
/// A sheaf's fill level is a *top*: the sheaf's own address plus 8 bytes per object
/// it holds (`sheaf + 8 * count`), so slot `count - 1` is at `top + SHEAF_HEADER - 8`
/// and the fast paths reach the slots from the top alone (see `sheaf`'s module docs).
/// A sheaf is empty when its top is at most its address (0 when no sheaf is held, or
/// while a restartable sequence's lock holder has taken it); the spare has room while
/// its top is below `spare_limit` (`spare + 8 * capacity`, 0 without a spare; the main
/// sheaf's `main_limit` likewise).
#[repr(C, align(64))]
pub struct KmemCacheCpu {
    /// Sheaves design: the spare sheaf's top (`spare + 8 * count`).
    pub(super) spare_top: AtomicUsize,
    /// Sheaves design: the spare sheaf, which frees push onto.
    pub(super) spare: AtomicPtr<SlabSheaf>,
    /// Sheaves design: `spare + 8 * capacity` (0 without a spare): the top at which
    /// the spare is full.
    pub(super) spare_limit: AtomicUsize,
    /// The cache's `slab_bytes() - 1` (0 until the first spare sheaf is installed).
    pub(super) free_mask: AtomicUsize,
    /// The multiplier of the cache's object-start test (`CacheConfig::start_test`).
    pub(super) free_start_mul: AtomicU64,
    /// The bound of the cache's object-start test.
    pub(super) free_start_limit: AtomicU64,
    /// Sheaves design: the main sheaf's top (`main + 8 * count`, see `sheaf`).
    pub(super) main_top: AtomicUsize,
    /// Sheaves design: the main sheaf, which allocations pop from.
    pub(super) main: AtomicPtr<SlabSheaf>,
    /// Sheaves design: `main + 8 * capacity` (0 without a main sheaf), which a swap of
    /// the two sheaves makes the spare's limit without reading the sheaf's header. Not
    /// read by a fast path, so outside their line.
    pub(super) main_limit: AtomicUsize,
    pub(super) nr_partial: AtomicUsize,
    pub(super) freelist: AtomicUsize,
    pub(super) tid: AtomicUsize,
    pub(super) partial: AtomicPtr<Page>,
    /// SLUB statistics, `unsigned int` as the kernel's (wrapping; summed as u64).
    pub(super) stat: [AtomicU32; NR_SLUB_STAT],
}

// The fast paths' words share the first cache line; the CAS pair is 16-byte aligned.
const _: () = assert!(core::mem::offset_of!(KmemCacheCpu, main) + 8 <= 64);
const _: () = assert!(core::mem::offset_of!(KmemCacheCpu, freelist) % 16 == 0);
const _: () = assert!(
    core::mem::offset_of!(KmemCacheCpu, tid) == core::mem::offset_of!(KmemCacheCpu, freelist) + 8
);

/// Offset of the CPU freelist in a [`KmemCacheCpu`] (the CPU-slab design's
/// restartable sequences pop and push there).
pub const FREELIST_OFFSET: usize = core::mem::offset_of!(KmemCacheCpu, freelist);
/// Offset of the main sheaf's top in a [`KmemCacheCpu`] (for the platform's
/// restartable sequences).
pub const MAIN_TOP_OFFSET: usize = core::mem::offset_of!(KmemCacheCpu, main_top);
/// Offset of the main sheaf pointer in a [`KmemCacheCpu`].
pub const SHEAF_MAIN_OFFSET: usize = core::mem::offset_of!(KmemCacheCpu, main);
/// Offset of the spare sheaf's top in a [`KmemCacheCpu`].
pub const SPARE_TOP_OFFSET: usize = core::mem::offset_of!(KmemCacheCpu, spare_top);
/// Offset of the spare sheaf pointer in a [`KmemCacheCpu`].
pub const SPARE_OFFSET: usize = core::mem::offset_of!(KmemCacheCpu, spare);
/// Offset of the spare sheaf's limit (`spare + 8 * capacity`) in a [`KmemCacheCpu`].
pub const SPARE_LIMIT_OFFSET: usize = core::mem::offset_of!(KmemCacheCpu, spare_limit);
/// Offset of the object-start test's mask in a [`KmemCacheCpu`] (the rseq push tests
/// the object it is given with the three `free_*` words of its CPU's line).
pub const FREE_MASK_OFFSET: usize = core::mem::offset_of!(KmemCacheCpu, free_mask);
/// Offset of the object-start test's multiplier in a [`KmemCacheCpu`].
pub const FREE_START_MUL_OFFSET: usize = core::mem::offset_of!(KmemCacheCpu, free_start_mul);
/// Offset of the object-start test's bound in a [`KmemCacheCpu`].
pub const FREE_START_LIMIT_OFFSET: usize = core::mem::offset_of!(KmemCacheCpu, free_start_limit);

/// How the per-CPU freelists of shared CPU areas are reached (set once, before the
/// allocator starts; every cache gets it in its [`CacheConfig::access`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PerCpuAccess {
    /// Only the owner of a CPU area touches its `kmem_cache_cpu`: one owner per area
    /// (std's thread mode) or whoever holds the area's local lock (per-CPU mode with
    /// locks only, `cpu-lock`). The fast paths are plain loads and stores.
    #[default]
    Owned,
    /// Per-CPU mode with SLUB's lockless fast paths (`cpu-cas`): allocation and free
    /// also run without the area's lock and change a CPU's `(freelist, tid)` pair with
    /// a double-word compare-and-swap (`cmpxchg16b`), so every change of the pair is
    /// one. Only where [`LOCKLESS_SUPPORTED`] holds and the CPU has the instruction.
    Cas,
    /// Per-CPU mode whose lockless fast paths are the platform's restartable
    /// sequences (`cpu-rseq`): they commit with a plain store on the CPU they run on,
    /// so the slab layer never pushes or pops on a CPU freelist itself; it takes one
    /// through [`crate::Platform::take_cpu_freelist`] and installs a list while it is
    /// empty.
    Rseq,
}

/// Whether this build can run the lockless per-CPU fast paths (a double-word
/// compare-and-swap on the `(freelist, tid)` pair: `cmpxchg16b` on x86_64). The
/// platform must also check that the CPU has the instruction.
pub const LOCKLESS_SUPPORTED: bool = cfg!(target_arch = "x86_64");

impl KmemCacheCpu {
    /// `this_cpu_cmpxchg_double` on `(freelist, tid)`: replaces `old` with `new` if
    /// the pair still holds `old`, atomically against every other CPU.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub(super) fn cas_pair(&self, old: (usize, usize), new: (usize, usize)) -> bool {
        let ok: u8;
        // SAFETY: `freelist` and `tid` are adjacent and the struct is 16-byte aligned
        // (`repr(C, align(16))`, and every CPU area places it at a 16-aligned offset),
        // as `cmpxchg16b` requires; the platform enabled lockless mode only where the
        // CPU has the instruction. `cmpxchg16b` takes the new low word in rbx, which
        // asm operands cannot name: it is swapped in from rsi and back out, and every
        // operand has a fixed register so that none of them can be rbx.
        unsafe {
            core::arch::asm!(
                "xchg rsi, rbx",
                "lock cmpxchg16b xmmword ptr [rdi]",
                "mov rbx, rsi",
                "sete r8b",
                in("rdi") &self.freelist as *const AtomicUsize,
                inout("rsi") new.0 => _,
                out("r8b") ok,
                in("rcx") new.1,
                inout("rax") old.0 => _,
                inout("rdx") old.1 => _,
                options(nostack),
            );
        }
        ok != 0
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline]
    pub(super) fn cas_pair(&self, _old: (usize, usize), _new: (usize, usize)) -> bool {
        unreachable!("lockless per-CPU mode is off where there is no double-word CAS")
    }

    /// Takes the CPU freelist (the CPU slab's objects, or 0 when there is no CPU slab)
    /// and leaves 0, advancing `tid`. The caller owns the area (thread mode) or holds
    /// its lock; in lockless mode concurrent lockless pops and pushes are beaten by the
    /// CAS.
    #[inline]
    pub(super) fn take_freelist(&self, lockless: bool) -> usize {
        if !lockless {
            let v = self.freelist.load(Relaxed);
            self.freelist.store(0, Relaxed);
            self.next_tid();
            return v;
        }
        loop {
            let tid = self.tid.load(Acquire);
            let v = self.freelist.load(Acquire);
            if v == 0 {
                return 0;
            }
            if self.cas_pair((v, tid), (0, tid.wrapping_add(TID_STEP))) {
                return v;
            }
        }
    }

    /// Installs `v` as the CPU freelist, which the caller took (it is 0): while it is
    /// 0 no lockless context changes the pair (they pop from and push onto a
    /// non-empty list only), so the CAS only orders the install against them.
    #[inline]
    pub(super) fn install_freelist(&self, lockless: bool, v: usize) {
        if !lockless {
            self.freelist.store(v, Relaxed);
            self.next_tid();
            return;
        }
        loop {
            let tid = self.tid.load(Acquire);
            debug_assert_eq!(self.freelist.load(Relaxed), 0);
            if self.cas_pair((0, tid), (v, tid.wrapping_add(TID_STEP))) {
                return;
            }
        }
    }

    #[inline]
    pub(super) fn count(&self, item: SlubStat) {
        let c = &self.stat[item as usize];
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
    }
    #[inline]
    pub(super) fn next_tid(&self) {
        self.tid
            .store(self.tid.load(Relaxed).wrapping_add(TID_STEP), Relaxed);
    }
    /// Slabs this CPU holds for the cache: its CPU slab (if any) and its CPU partial
    /// slabs (a read for statistics; racy against the owner).
    pub fn held_slabs(&self) -> usize {
        (self.freelist.load(Relaxed) != 0) as usize + self.nr_partial.load(Relaxed)
    }
    /// The transaction id (for the per-CPU mode and tests).
    pub fn tid(&self) -> usize {
        self.tid.load(Relaxed)
    }
}

impl<P: Platform> Slub<'_, P> {
    /// Takes `c`'s CPU freelist of a cache (see [`KmemCacheCpu::take_freelist`]); with
    /// restartable sequences through the platform.
    #[inline]
    pub(super) fn take_cpu_freelist(
        &self,
        c: CpuRef<'_>,
        cfg: &CacheConfig,
        cc: &KmemCacheCpu,
    ) -> usize {
        if cfg.access == PerCpuAccess::Rseq {
            let v = self
                .pages
                .platform()
                .take_cpu_freelist(c.area().id(), &cc.freelist);
            cc.next_tid();
            return v;
        }
        cc.take_freelist(cfg.access == PerCpuAccess::Cas)
    }
}
