//! The allocator as a whole ([`Kmem`]): the page allocator, the slab caches, kmalloc
//! and the memory controller, put together (mm/slab_common.c's boot and the entry
//! points that cross layers).
//!
//! Bootstrap: `kmem_cache` (the cache whose objects are `KmemCache` structs) and the
//! kmalloc caches are embedded in [`Kmem`] and set up by [`Kmem::init`]; caches made
//! later by [`Kmem::kmem_cache_create`] live in objects of `kmem_cache`. So every byte
//! of slab metadata comes from the allocator's own pages.
//!
//! Each layer's operations are a view bound to this struct's fields: [`Kmem::slub`],
//! [`Kmem::kmalloc_ops`], [`Kmem::memcg`]. The methods here are the public entry points;
//! those that free run the memory controller's hooks ([`crate::slab::Accounting`]).
//!
//! Locking: none of its own; see the lock order in the crate docs.

mod cache;
mod kmalloc;
mod report;

use crate::kmalloc::{Kmalloc, KmallocCaches};
use crate::memcontrol::{Memcg, MemcgState};
use crate::page::Page;
use crate::page::{Config, CpuDeadHook, InitError, PageAllocator, Shrinker};
use crate::percpu::{CpuRef, DRAIN_CACHES};
use crate::platform::Platform;
use crate::slab::barn_spill::BarnSpill;
use crate::slab::{
    sheaf_capacity, Accounting, CacheConfig, CacheList, CacheNodes, CacheWithNodes, FastPath,
    KmemCache, NodeTable, PerCpuAccess, SlabFlags, Slub, SlubDesign, NEW_CACHE_NODES,
};
use crate::sync::{AtomicBool, AtomicU8, AtomicUsize, Ordering::Relaxed};
use core::ptr::NonNull;

/// The whole allocator: the page allocator and the slab caches above it.
pub struct Kmem<P: Platform> {
    /// The page allocator.
    pub pages: PageAllocator<P>,
    caches: CacheList,
    kmem_cache: KmemCache,
    /// `kmem_cache`'s node states.
    kmem_cache_nodes: CacheNodes,
    kmalloc: KmallocCaches,
    slab_up: AtomicBool,
    nr_cpus: AtomicUsize,
    /// The memory controller (groups, stocks).
    memcg: MemcgState,
    /// How per-CPU freelists are reached ([`PerCpuAccess`] as u8).
    access: AtomicU8,
    /// The slab layer's per-CPU design ([`SlubDesign`] as u8).
    design: AtomicU8,
}

impl<P: Platform> Kmem<P> {
    /// An allocator with no memory yet; [`Kmem::init`] sets it up.
    pub const fn new(platform: P) -> Self {
        Self {
            pages: PageAllocator::new(platform),
            caches: CacheList::new(),
            kmem_cache: KmemCache::new(),
            kmem_cache_nodes: NEW_CACHE_NODES,
            kmalloc: KmallocCaches::new(),
            slab_up: AtomicBool::new(false),
            nr_cpus: AtomicUsize::new(1),
            memcg: MemcgState::new(),
            access: AtomicU8::new(PerCpuAccess::Owned as u8),
            design: AtomicU8::new(SlubDesign::Sheaves as u8),
        }
    }

    /// Chooses the slab layer's per-CPU design (see [`SlubDesign`]): call before
    /// [`Kmem::init`]; once the allocator is up, the call changes nothing (caches
    /// made later keep the design the others have). Sheaves are the default.
    pub fn set_slub_design(&self, design: SlubDesign) {
        if self.is_up() {
            return;
        }
        self.design.store(design as u8, Relaxed);
    }

    /// The slab layer's per-CPU design.
    pub fn slub_design(&self) -> SlubDesign {
        match self.design.load(Relaxed) {
            1 => SlubDesign::CpuSlab,
            _ => SlubDesign::Sheaves,
        }
    }

    /// Picks a new cache's fast path, once: sheaves (with their capacity and the
    /// kmalloc cache their memory comes from) unless the design is the CPU slab or the
    /// cache stays off the fast paths (slub_debug, init_on_*); per-object statistics
    /// only for caches that count them ([`SlabFlags::STATS`]).
    pub(crate) fn choose_fast_path(&self, cfg: &mut CacheConfig) {
        cfg.access = self.percpu_access();
        if self.slub_design() == SlubDesign::CpuSlab || cfg.off_fast_paths() {
            cfg.fast = FastPath::CpuSlab;
            return;
        }
        let (capacity, bytes) = sheaf_capacity(cfg);
        cfg.sheaf_capacity = capacity;
        cfg.barn_max_full = crate::slab::barn_max_full(cfg);
        cfg.widen_small_slabs();
        cfg.sheaf_cache = self
            .kmalloc
            .cache(bytes, crate::gfp::Gfp::KERNEL)
            .map_or(0, |c| c as *const KmemCache as usize);
        cfg.cpu_partial_slabs = 0;
        cfg.fast = if cfg.access == PerCpuAccess::Rseq {
            // The platform's sequences pop and push (no per-object statistics).
            FastPath::SheafRseq
        } else if cfg.flags.contains(SlabFlags::STATS) {
            FastPath::SheafCounted
        } else {
            FastPath::Sheaf
        };
        // The lock holder works on sheaves with plain loads and stores (after taking
        // the main sheaf with rseq): the lockless paths of the CPU-slab design (CAS,
        // rseq freelists) find nothing to do.
        cfg.access = PerCpuAccess::Owned;
    }

    /// How per-CPU freelists are reached (see [`PerCpuAccess`]): call before
    /// [`Kmem::init`]. [`PerCpuAccess::Cas`] needs a double-word compare-and-swap
    /// ([`crate::slab::LOCKLESS_SUPPORTED`], and the platform checks the CPU has
    /// `cmpxchg16b`); where the build has none it falls back to
    /// [`PerCpuAccess::Owned`]. [`PerCpuAccess::Rseq`] needs the platform's
    /// [`Platform::take_cpu_freelist`]. Returns the access now in force: once the
    /// allocator is up, the one chosen before (the call changes nothing, so caches made
    /// later reach their CPU state as the others do).
    pub fn set_percpu_access(&self, access: PerCpuAccess) -> PerCpuAccess {
        if self.is_up() {
            return self.percpu_access();
        }
        let access = match access {
            PerCpuAccess::Cas if !crate::slab::LOCKLESS_SUPPORTED => PerCpuAccess::Owned,
            a => a,
        };
        self.access.store(access as u8, Relaxed);
        access
    }

    /// How per-CPU freelists are reached.
    pub fn percpu_access(&self) -> PerCpuAccess {
        match self.access.load(Relaxed) {
            1 => PerCpuAccess::Cas,
            2 => PerCpuAccess::Rseq,
            _ => PerCpuAccess::Owned,
        }
    }

    /// Always-on hardening: a random key for the cache's freelist pointers (unless
    /// the cache asked for `NO_HARDEN`).
    pub(crate) fn harden(&self, cfg: &mut CacheConfig) {
        if !cfg.flags.contains(SlabFlags::NO_HARDEN) {
            cfg.random = self.pages.platform().random_u64() as usize;
            cfg.harden_mask = usize::MAX;
        }
    }

    /// The platform's flags for the cache named `name` (slub_debug's per-cache
    /// selection), limited to those a platform may choose.
    pub(crate) fn policy_flags(&self, name: &str) -> SlabFlags {
        self.pages.platform().slab_flags(name)
            & (SlabFlags::DEBUG
                | SlabFlags::INIT_ON_ALLOC
                | SlabFlags::INIT_ON_FREE
                | SlabFlags::RANDOM_FREELIST
                | SlabFlags::NO_HARDEN
                | SlabFlags::STATS)
    }

    /// Initialises the page allocator over the span (see [`PageAllocator::init`]) and
    /// the slab layer: the boot caches, the kmalloc caches, the shrinker and the
    /// CPU-offline hook. `nr_cpus` tunes slab sizes (`slub_min_objects`).
    ///
    /// # Safety
    /// As [`PageAllocator::init`].
    pub unsafe fn init(
        &'static self,
        base: *mut u8,
        len: usize,
        config: Config,
        nr_cpus: usize,
    ) -> Result<(), InitError> {
        crate::sync::set_relax_hook(P::relax);
        // SAFETY: forwarded from the caller.
        unsafe { self.pages.init(base, len, config) }?;
        self.caches.spill.set_limit(BarnSpill::limit_for_bound(
            config.max_pages.saturating_mul(crate::page::PAGE_SIZE),
        ));
        self.nr_cpus.store(nr_cpus.max(1), Relaxed);
        let boot = |s: &KmemCache,
                    nodes: NodeTable,
                    name: &str,
                    size: usize,
                    align: usize,
                    flags: SlabFlags| {
            let flags = flags | self.policy_flags(name);
            let mut cfg = CacheConfig::calculate(name, size, align, flags, None, nr_cpus)
                .ok_or(InitError::BadConfig)?;
            self.harden(&mut cfg);
            self.choose_fast_path(&mut cfg);
            cfg.cpu_offset = self
                .pages
                .percpu()
                .alloc(
                    core::mem::size_of::<crate::slab::KmemCacheCpu>(),
                    core::mem::align_of::<crate::slab::KmemCacheCpu>(),
                )
                .ok_or(InitError::BadConfig)?;
            // SAFETY: the boot caches are not visible to anybody before init returns;
            // their nodes are in the allocator with them.
            unsafe { s.set_config(cfg, nodes) };
            self.caches.add(s);
            Ok::<(), InitError>(())
        };
        boot(
            &self.kmem_cache,
            NodeTable::of(&self.kmem_cache_nodes),
            "kmem_cache",
            core::mem::size_of::<CacheWithNodes>(),
            64,
            SlabFlags::HWCACHE_ALIGN,
        )?;
        self.kmalloc.boot(boot)?;
        if !self.memcg().init() {
            return Err(InitError::BadConfig);
        }
        self.pages.register_shrinker(Shrinker {
            scan: Self::shrink_all_callback,
            data: self as *const Self as *const (),
        });
        self.pages.register_cpu_dead(CpuDeadHook {
            flush: Self::cpu_dead_callback,
            data: self as *const Self as *const (),
        });
        self.slab_up.store(true, crate::sync::Ordering::Release);
        Ok(())
    }

    /// The slab operations.
    #[inline]
    pub fn slub(&self) -> Slub<'_, P> {
        Slub::new(&self.pages, &self.caches)
    }

    /// The barns' spill budget (see [`crate::slab::barn_spill`]): what the barns keep
    /// beyond their caches' own bounds, and its limit.
    pub fn barn_spill(&self) -> &crate::slab::barn_spill::BarnSpill {
        &self.caches.spill
    }

    /// kmalloc's operations.
    #[inline]
    pub fn kmalloc_ops(&self) -> Kmalloc<'_, P> {
        Kmalloc::new(self.slub(), &self.kmalloc)
    }

    /// The memory controller's operations.
    #[inline]
    pub fn memcg(&self) -> Memcg<'_, P> {
        Memcg::new(&self.memcg, self.kmalloc_ops(), &self.kmem_cache)
    }

    /// Every cache.
    pub fn caches(&self) -> &CacheList {
        &self.caches
    }

    /// Whether [`Kmem::init`] completed.
    pub fn is_up(&self) -> bool {
        self.slab_up.load(crate::sync::Ordering::Acquire)
    }

    fn shrink_all_callback(data: *const (), _nid: usize) -> usize {
        // SAFETY: registered by `init` with a `&'static Kmem<P>`.
        let kmem = unsafe { &*(data as *const Self) };
        kmem.shrink_all_reclaim(None)
    }

    fn cpu_dead_callback(data: *const (), cpu: CpuRef<'_>) {
        // SAFETY: registered by `init` with a `&'static Kmem<P>`.
        let kmem = unsafe { &*(data as *const Self) };
        let slub = kmem.slub();
        // The stock first: its objcg sheaves give their objects back through this
        // area's sheaves, flushed next.
        kmem.memcg().memcg_drain_stock(cpu);
        // Under the cache list's lock: no reporting pass (see `shrink_all`).
        kmem.pages.with_reporting_deferred(|| {
            kmem.caches.for_each(|s| slub.flush_cpu_cache(cpu, s));
        });
    }

    /// `pthread_atfork` prepare, first step: the memory controller's groups' lock (2
    /// in the lock order). A platform takes its own locks that come between it and the
    /// cache list's (the process heap's huge-mapping list, KFENCE's slots) after this,
    /// then [`Kmem::fork_prepare`].
    pub fn fork_prepare_groups(&self) -> crate::memcontrol::ForkGroupsHeld {
        self.memcg().fork_lock_groups()
    }

    /// `pthread_atfork` prepare: takes every other allocator lock in the lock order —
    /// the cache list, each cache's node list locks, the page allocator's, then the
    /// memory groups' statistics tables — so that a child of a multithreaded parent
    /// finds them all free.
    pub fn fork_prepare(&self, groups: &crate::memcontrol::ForkGroupsHeld) {
        self.caches.fork_lock(self.pages.nr_nodes());
        self.pages.fork_prepare();
        self.memcg().fork_lock_stats(groups);
    }

    /// `pthread_atfork` parent and child: releases what [`Kmem::fork_prepare`] took.
    /// In the child, CPU areas of threads that do not exist there stay owned and are
    /// never touched again (their owners may have been between two stores of a list
    /// update); only their memory is lost.
    ///
    /// This unlocks each lock, a write to every cache's page. A platform whose fork
    /// handlers take nothing but `lock_forever` locks may instead free them all at
    /// once, its own included, with [`crate::sync::release_fork_locks`] (the process
    /// heap does: no page is written after the fork).
    ///
    /// # Safety
    /// Called once after `fork_prepare`, by the thread that called it and
    /// `fork_prepare_groups` (or its child).
    pub unsafe fn fork_release(&self, groups: crate::memcontrol::ForkGroupsHeld) {
        // SAFETY: taken by `fork_prepare` and `fork_prepare_groups` (caller),
        // released in the reverse order.
        unsafe {
            self.pages.fork_release();
            self.caches.fork_unlock(self.pages.nr_nodes());
            self.memcg().fork_unlock(groups);
        }
    }

    /// `pthread_atfork` child, after [`Kmem::fork_release`] (or the fork generation's
    /// release): forgets the reclaims of kept slabs and flushes of idle sheaves that
    /// the parent's other threads had in flight, which cache destruction would
    /// otherwise wait for in the child for good (`CacheList::fork_child`), and their
    /// deferrals of free page reporting, which would keep every pass from starting
    /// (`PageAllocator::fork_child`). Writes nothing when none was.
    ///
    /// # Safety
    /// Called in a fork's child, by its one thread, before it starts others: the
    /// counts it forgets belong to threads that do not exist there (in a process
    /// where they do, a reclaim in flight would be forgotten and its cache could be
    /// destroyed under it).
    pub unsafe fn fork_child(&self) {
        self.caches.fork_child();
        // SAFETY: forwarded from the caller.
        unsafe { self.pages.fork_child() };
    }

    /// Shrinks every cache (`kmem_cache_shrink` on each): flushes the caller's CPU
    /// state (its memcg stock first: the objects its objcg sheaves keep go back),
    /// asks other owners to flush theirs, frees empty slabs. Returns the pages freed.
    ///
    /// The walks free pages under the cache list's lock, so no reporting pass starts
    /// during them (`PageAllocator::with_reporting_deferred`: a pass takes platform
    /// locks that the fork handlers take before this one); the next page-path free
    /// runs it.
    pub fn shrink_all(&self, cpu: Option<CpuRef<'_>>) -> usize {
        self.shrink_all_walking(cpu, &|f| {
            self.caches.for_each(f);
            true
        })
    }

    /// [`Kmem::shrink_all`] for an allocation that found memory at its bound (the
    /// page allocator's reclaim runs it as the slab layer's shrinker, a front end
    /// before it fails a mapping): that allocation may have been made inside a walk
    /// of the cache list (`kmem::stats`, slabinfo: their text is built under its
    /// lock) on this very thread, so the walks take the list's lock only if it comes
    /// within a bounded wait ([`CacheList::try_for_each`]) and are left out
    /// otherwise. The allocation then fails or succeeds on what the rest freed,
    /// rather than wait for itself.
    pub fn shrink_all_reclaim(&self, cpu: Option<CpuRef<'_>>) -> usize {
        self.shrink_all_walking(cpu, &|f| self.caches.try_for_each(f))
    }

    /// [`Kmem::shrink_all`]'s work, each walk of the caches made by `walk` (false:
    /// the walk was not made, and the later ones are left out too).
    fn shrink_all_walking(&self, cpu: Option<CpuRef<'_>>, walk: &CacheWalk<'_>) -> usize {
        self.pages
            .request_all_areas(DRAIN_CACHES | crate::percpu::DRAIN_STOCK);
        let slub = self.slub();
        self.pages.with_reporting_deferred(|| {
            // Barns first: their sheaves are objects of kmalloc caches shrunk below;
            // the decay's idle sheaves that wait to be flushed before them.
            slub.drain_idle_sheaves(cpu);
            if let Some(c) = cpu {
                self.memcg().memcg_drain_stock(c);
                if !walk(&mut |s| slub.flush_cpu_cache(c, s)) {
                    return 0;
                }
            }
            if !walk(&mut |s| {
                slub.shrink_barns(cpu, s);
            }) {
                return 0;
            }
            let mut pages = 0;
            walk(&mut |s| {
                pages += slub.shrink(cpu, s) << s.config().order;
            });
            pages
        })
    }
}

/// A walk of every cache for [`Kmem::shrink_all`]'s work: calls the visitor on each
/// cache and returns true, or calls nothing and returns false.
type CacheWalk<'v> = dyn Fn(&mut dyn FnMut(&KmemCache)) -> bool + 'v;

/// The memory controller's free hooks, run by the slab and kmalloc layers' frees. The
/// allocator itself is the hook object, and the hooks stay out of line: the free fast
/// paths pass one pointer and build the memory controller's view only when a hook runs.
impl<P: Platform> Accounting for Kmem<P> {
    #[inline(never)]
    unsafe fn slab_free_hook(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: &Page,
        obj: usize,
    ) {
        self.memcg().memcg_slab_free_hook(cpu, s, slab, obj);
    }

    #[inline(never)]
    unsafe fn page_free_hook(&self, cpu: Option<CpuRef<'_>>, head: NonNull<Page>, order: usize) {
        self.memcg().memcg_kmem_uncharge_page(cpu, head, order);
    }
}
