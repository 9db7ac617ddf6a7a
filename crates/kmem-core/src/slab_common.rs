//! The allocator as a whole ([`Kmem`]: page allocator + slab caches) and what all
//! caches share: the list of caches, `kmem_cache_create` / `kmem_cache_destroy`, the
//! shrinker and CPU-offline hooks, `/proc/slabinfo` and a slabtop summary
//! (mm/slab_common.c).
//!
//! Bootstrap: `kmem_cache` (the cache whose objects are `KmemCache` structs) and the
//! kmalloc caches are embedded in [`Kmem`] and set up by [`Kmem::init`]; caches made
//! later by [`Kmem::kmem_cache_create`] live in objects of `kmem_cache`. So every byte
//! of slab metadata comes from the allocator's own pages.
//!
//! Locking: `CacheList::lock` (the kernel's `slab_mutex`) guards the list; it is taken
//! before any cache's `list_lock` and never while allocating.

use crate::gfp::Gfp;
use crate::kmalloc::{KMALLOC_SIZES, NR_KMALLOC, NR_KMALLOC_TYPES};
use crate::page::PAGE_SIZE;
use crate::page_alloc::{Config, CpuDeadHook, InitError, PageAllocator, Shrinker};
use crate::percpu::{CpuRef, DRAIN_CACHES};
use crate::platform::Platform;
use crate::show_mem::LogWriter;
use crate::slab::{CacheConfig, Ctor, KmemCache, SlabFlags, Slub};
use crate::sync::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::Relaxed, SpinLock};
use core::fmt::{self, Write as _};
use core::ptr::{self, NonNull};

/// The list of every cache (`slab_caches`).
pub struct CacheList {
    lock: SpinLock<()>,
    head: AtomicPtr<KmemCache>,
}

impl CacheList {
    const fn new() -> Self {
        Self {
            lock: SpinLock::new(()),
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    fn add(&self, s: &KmemCache) {
        let _g = self.lock.lock();
        s.next.store(self.head.load(Relaxed), Relaxed);
        self.head
            .store(s as *const KmemCache as *mut KmemCache, Relaxed);
    }

    fn remove(&self, s: &KmemCache) {
        let _g = self.lock.lock();
        let mut link = &self.head;
        loop {
            let cur = link.load(Relaxed);
            if cur.is_null() {
                return;
            }
            if ptr::eq(cur, s) {
                link.store(s.next.load(Relaxed), Relaxed);
                return;
            }
            // SAFETY: caches on the list are live (removed before they are freed).
            link = unsafe { &(*cur).next };
        }
    }

    /// Calls `f` on every cache without taking the list lock: the caller holds it
    /// (the fork handlers).
    ///
    /// # Safety
    /// The caller holds the list lock, taken with `lock_forever`.
    unsafe fn for_each_locked(&self, mut f: impl FnMut(&KmemCache)) {
        let mut p = self.head.load(Relaxed);
        // SAFETY: caches on the list are live while the lock is held (caller).
        while let Some(s) = unsafe { p.as_ref() } {
            f(s);
            p = s.next.load(Relaxed);
        }
    }

    /// Calls `f` on every cache, under the list lock.
    pub fn for_each(&self, mut f: impl FnMut(&KmemCache)) {
        let _g = self.lock.lock();
        let mut p = self.head.load(Relaxed);
        // SAFETY: caches on the list are live while the lock is held.
        while let Some(s) = unsafe { p.as_ref() } {
            f(s);
            p = s.next.load(Relaxed);
        }
    }
}

/// Why a cache could not be destroyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestroyError {
    /// Objects are still allocated (this many).
    ObjectsRemaining(usize),
    /// Not a cache made by `kmem_cache_create` (the kmalloc caches stay).
    NotDestroyable,
}

/// The whole allocator: the page allocator and the slab caches above it.
pub struct Kmem<P: Platform> {
    /// The page allocator.
    pub pages: PageAllocator<P>,
    caches: CacheList,
    kmem_cache: KmemCache,
    pub(crate) kmalloc: [[KmemCache; NR_KMALLOC]; NR_KMALLOC_TYPES],
    slab_up: AtomicBool,
    nr_cpus: AtomicUsize,
    /// `fn(&str) -> SlabFlags` (as usize; 0 = none): extra flags for a cache by name
    /// (slub_debug's per-cache selection).
    debug_policy: AtomicUsize,
    /// The memory controller (groups, stocks).
    pub(crate) memcg: crate::memcontrol::MemcgState,
    /// CPU areas are shared and run SLUB's lockless fast paths (see
    /// [`Kmem::set_lockless`]).
    lockless: AtomicBool,
    /// ... with the platform's restartable sequences (see [`Kmem::set_rseq`]).
    rseq: AtomicBool,
}

impl<P: Platform> Kmem<P> {
    /// An allocator with no memory yet; [`Kmem::init`] sets it up.
    pub const fn new(platform: P) -> Self {
        Self {
            pages: PageAllocator::new(platform),
            caches: CacheList::new(),
            kmem_cache: KmemCache::new(),
            kmalloc: [const { [const { KmemCache::new() }; NR_KMALLOC] }; NR_KMALLOC_TYPES],
            slab_up: AtomicBool::new(false),
            nr_cpus: AtomicUsize::new(1),
            debug_policy: AtomicUsize::new(0),
            memcg: crate::memcontrol::MemcgState::new(),
            lockless: AtomicBool::new(false),
            rseq: AtomicBool::new(false),
        }
    }

    /// Per-CPU mode with lockless fast paths: CPU areas are shared by contexts that may
    /// be preempted and migrate, which take an area's local lock for everything but
    /// the allocation and free fast paths ([`Slub::alloc_lockless`],
    /// [`Slub::free_lockless`]); every cache then updates its CPUs' `(freelist, tid)`
    /// pairs with a double-word CAS. Call before [`Kmem::init`], and only where
    /// [`crate::slab::LOCKLESS_SUPPORTED`] holds and the CPU has the instruction
    /// (`cmpxchg16b`). Returns whether it is on.
    pub fn set_lockless(&self, on: bool) -> bool {
        let on = on && crate::slab::LOCKLESS_SUPPORTED;
        self.lockless.store(on, Relaxed);
        on
    }

    /// Per-CPU mode whose lockless fast paths are the platform's restartable sequences
    /// (commits by plain stores on the CPU they run on) instead of the double-word CAS:
    /// the slab layer then takes CPU freelists through the hook set with
    /// [`crate::slab::set_rseq_take`] and never pushes or pops on them itself. Call
    /// before [`Kmem::init`], after installing the hook.
    pub fn set_rseq(&self, on: bool) {
        self.lockless
            .store(on || self.lockless.load(Relaxed), Relaxed);
        self.rseq.store(on, Relaxed);
    }

    /// Whether the lockless per-CPU fast paths are on.
    pub fn is_lockless(&self) -> bool {
        self.lockless.load(Relaxed)
    }

    /// Sets the function that adds flags (slub_debug's) to a cache by its name; call
    /// before [`Kmem::init`] so the kmalloc caches get them too.
    pub fn set_debug_policy(&self, policy: fn(&str) -> SlabFlags) {
        self.debug_policy.store(policy as usize, Relaxed);
    }

    /// Always-on hardening: a random key for the cache's freelist pointers (unless
    /// the cache asked for `NO_HARDEN`).
    fn harden(&self, cfg: &mut CacheConfig) {
        if !cfg.flags.contains(SlabFlags::NO_HARDEN) {
            cfg.random = self.pages.platform().random_u64() as usize;
            cfg.harden_mask = usize::MAX;
        }
    }

    fn policy_flags(&self, name: &str) -> SlabFlags {
        let p = self.debug_policy.load(Relaxed);
        if p == 0 {
            return SlabFlags::empty();
        }
        // SAFETY: only `set_debug_policy` stores a non-zero value, made from a
        // `fn(&str) -> SlabFlags`.
        let f = unsafe { core::mem::transmute::<usize, fn(&str) -> SlabFlags>(p) };
        f(name)
            & (SlabFlags::DEBUG
                | SlabFlags::INIT_ON_ALLOC
                | SlabFlags::INIT_ON_FREE
                | SlabFlags::RANDOM_FREELIST
                | SlabFlags::NO_HARDEN)
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
        // SAFETY: forwarded from the caller.
        unsafe { self.pages.init(base, len, config) }?;
        self.nr_cpus.store(nr_cpus.max(1), Relaxed);
        let boot = |s: &KmemCache, name: &str, size: usize, align: usize, flags: SlabFlags| {
            let flags = flags | self.policy_flags(name);
            let mut cfg = CacheConfig::calculate(name, size, align, flags, None, nr_cpus)
                .ok_or(InitError::BadConfig)?;
            self.harden(&mut cfg);
            cfg.lockless = self.lockless.load(Relaxed);
            cfg.rseq = self.rseq.load(Relaxed);
            cfg.cpu_offset = self
                .pages
                .percpu()
                .alloc(core::mem::size_of::<crate::slab::KmemCacheCpu>(), 16)
                .ok_or(InitError::BadConfig)?;
            // SAFETY: the boot caches are not visible to anybody before init returns.
            unsafe { s.set_config(cfg) };
            self.caches.add(s);
            Ok::<(), InitError>(())
        };
        boot(
            &self.kmem_cache,
            "kmem_cache",
            core::mem::size_of::<KmemCache>(),
            64,
            SlabFlags::HWCACHE_ALIGN,
        )?;
        let mut name = NameBuf::new();
        for (t, prefix) in ["kmalloc-", "kmalloc-cg-", "kmalloc-rcl-"]
            .iter()
            .enumerate()
        {
            let flags = match t {
                1 => SlabFlags::ACCOUNT,
                2 => SlabFlags::RECLAIM_ACCOUNT,
                _ => SlabFlags::empty(),
            };
            for (i, &size) in KMALLOC_SIZES.iter().enumerate() {
                name.clear();
                let _ = write!(name, "{prefix}");
                if size >= 1024 {
                    let _ = write!(name, "{}k", size / 1024);
                } else {
                    let _ = write!(name, "{size}");
                }
                let align = (1usize << size.trailing_zeros()).min(PAGE_SIZE);
                boot(&self.kmalloc[t][i], name.as_str(), size, align, flags)?;
            }
        }
        if !self.memcg_init() {
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
        kmem.shrink_all(None)
    }

    fn cpu_dead_callback(data: *const (), cpu: CpuRef<'_>) {
        // SAFETY: registered by `init` with a `&'static Kmem<P>`.
        let kmem = unsafe { &*(data as *const Self) };
        let slub = kmem.slub();
        kmem.caches.for_each(|s| slub.flush_cpu_cache(cpu, s));
        kmem.memcg_drain_stock(cpu);
    }

    /// Whether `s` is one of the caches embedded in [`Kmem`] that accounting must
    /// not use (`kmem_cache`).
    pub(crate) fn is_boot_cache(&self, s: &KmemCache) -> bool {
        ptr::eq(s, &self.kmem_cache)
    }

    /// `kmem_cache_free` with the memcg hook: uncharges an accounted object, then
    /// frees it as [`Slub::free`] (which reports pointers that are not objects of `s`).
    ///
    /// # Safety
    /// As [`Slub::free`].
    #[inline]
    pub unsafe fn kmem_cache_free(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        obj: NonNull<u8>,
    ) -> bool {
        let slub = self.slub();
        match slub.lookup(obj.as_ptr()) {
            crate::slab::ObjectLookup::Slab(found, slab) if ptr::eq(found, s) => {
                // SAFETY: the head page of a live slab.
                self.memcg_slab_free_hook(cpu, s, unsafe { slab.as_ref() }, obj.as_ptr() as usize);
                // SAFETY: a valid object of `s`, given up by the caller.
                unsafe { slub.free_object(cpu, s, slab, obj.as_ptr() as usize) }
            }
            // SAFETY: reports only.
            _ => unsafe { slub.free(cpu, s, obj) },
        }
    }

    /// Per-CPU mode, without the area's lock: `kmem_cache_free`'s fast path (see
    /// [`Kmem::kfree_lockless`]). `None`: take the area's lock and call
    /// [`Kmem::kmem_cache_free`].
    ///
    /// # Safety
    /// As [`Slub::free`].
    #[inline]
    pub unsafe fn kmem_cache_free_lockless(
        &self,
        area: &crate::percpu::CpuArea,
        s: &KmemCache,
        obj: NonNull<u8>,
    ) -> Option<bool> {
        let slub = self.slub();
        match slub.lookup(obj.as_ptr()) {
            crate::slab::ObjectLookup::Slab(found, slab)
                if ptr::eq(found, s) && !crate::memcontrol::has_obj_exts(slab) =>
            {
                // SAFETY: a valid object of `s`, given up by the caller.
                unsafe { slub.free_lockless(area, s, slab, obj.as_ptr() as usize) }
            }
            _ => None,
        }
    }

    /// `kmem_cache_free_bulk` with the memcg hook for each object.
    ///
    /// # Safety
    /// As [`Slub::free_bulk`].
    pub unsafe fn kmem_cache_free_bulk(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        objs: &mut [*mut u8],
    ) {
        let slub = self.slub();
        for &p in objs.iter().filter(|p| !p.is_null()) {
            if let crate::slab::ObjectLookup::Slab(found, slab) = slub.lookup(p) {
                if ptr::eq(found, s) {
                    // SAFETY: the head page of a live slab.
                    self.memcg_slab_free_hook(cpu, s, unsafe { slab.as_ref() }, p as usize);
                }
            }
        }
        // SAFETY: forwarded from the caller.
        unsafe { slub.free_bulk(cpu, s, objs) }
    }

    /// `__free_pages` with the memcg hook: an accounted block is uncharged first.
    ///
    /// # Safety
    /// As [`PageAllocator::free_pages`].
    pub unsafe fn free_pages(
        &self,
        cpu: Option<CpuRef<'_>>,
        page: NonNull<crate::page::Page>,
        order: usize,
    ) {
        self.memcg_kmem_uncharge_page(cpu, page, order);
        // SAFETY: forwarded from the caller.
        unsafe { self.pages.free_pages(cpu, page, order) }
    }

    /// `pthread_atfork` prepare: takes every allocator lock in the lock order — the
    /// cache list, each cache's node list locks, then the page allocator's — so that
    /// a child of a multithreaded parent finds them all free.
    pub fn fork_prepare(&self) {
        self.caches.lock.lock_forever();
        // SAFETY: we hold the list lock (just taken).
        unsafe {
            self.caches.for_each_locked(|s| {
                for node in &s.node[..self.pages.nr_nodes()] {
                    node.list_lock.lock_forever();
                }
            });
        }
        self.pages.fork_prepare();
    }

    /// `pthread_atfork` parent and child: releases what [`Kmem::fork_prepare`] took.
    /// In the child, CPU areas of threads that do not exist there stay owned and are
    /// never touched again (their owners may have been between two stores of a list
    /// update); only their memory is lost.
    ///
    /// # Safety
    /// Called once after `fork_prepare`, by the thread that called it (or its child).
    pub unsafe fn fork_release(&self) {
        // SAFETY: every lock below was taken by `fork_prepare`, guards forgotten.
        unsafe {
            self.pages.fork_release();
            self.caches.for_each_locked(|s| {
                for node in &s.node[..self.pages.nr_nodes()] {
                    node.list_lock.force_unlock();
                }
            });
            self.caches.lock.force_unlock();
        }
    }

    /// Shrinks every cache (`kmem_cache_shrink` on each): flushes the caller's CPU
    /// state, asks other owners to flush theirs, frees empty slabs. Returns the pages
    /// freed.
    pub fn shrink_all(&self, cpu: Option<CpuRef<'_>>) -> usize {
        self.pages.cpu_areas().request_all(DRAIN_CACHES);
        let slub = self.slub();
        let mut pages = 0;
        self.caches.for_each(|s| {
            pages += slub.shrink(cpu, s) << s.config().order;
        });
        pages
    }

    /// `kmem_cache_create`: a cache of `size`-byte objects aligned to `align` (0 = a
    /// word), with an optional constructor run once per object when its slab is made.
    /// `None` when the size or alignment cannot be served or memory runs out.
    pub fn kmem_cache_create(
        &'static self,
        cpu: Option<CpuRef<'_>>,
        name: &str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        ctor: Option<fn(*mut u8)>,
    ) -> Option<&'static KmemCache> {
        self.kmem_cache_create_ctor(cpu, name, size, align, flags, ctor.map(Ctor::plain))
    }

    /// [`Kmem::kmem_cache_create`] with a constructor that carries a word of context.
    pub fn kmem_cache_create_ctor(
        &'static self,
        cpu: Option<CpuRef<'_>>,
        name: &str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        ctor: Option<Ctor>,
    ) -> Option<&'static KmemCache> {
        let nr_cpus = self.nr_cpus.load(Relaxed);
        let mut flags = flags | self.policy_flags(name);
        if ctor.is_some() {
            // As the kernel: zeroing would undo what the constructor set up, and
            // constructed objects keep their state while free.
            flags -= SlabFlags::INIT_ON_ALLOC | SlabFlags::INIT_ON_FREE;
        }
        let mut cfg = CacheConfig::calculate(name, size, align, flags, ctor, nr_cpus)?;
        self.harden(&mut cfg);
        cfg.lockless = self.lockless.load(Relaxed);
        cfg.rseq = self.rseq.load(Relaxed);
        cfg.cpu_offset = self
            .pages
            .percpu()
            .alloc(core::mem::size_of::<crate::slab::KmemCacheCpu>(), 16)?;
        let mem = self.slub().alloc(cpu, &self.kmem_cache, Gfp::KERNEL)?;
        let s = mem.as_ptr() as *mut KmemCache;
        // SAFETY: a fresh object of `kmem_cache`, sized and aligned for a KmemCache;
        // nobody else can see it until it is on the list.
        unsafe {
            s.write(KmemCache::new());
            (*s).set_config(cfg);
        }
        // SAFETY: initialised above; objects of kmem_cache live until destroyed.
        let s: &'static KmemCache = unsafe { &*s };
        self.caches.add(s);
        Some(s)
    }

    /// `kmem_cache_destroy`: flushes every CPU's state of the cache, frees its empty
    /// slabs and the cache. A cache that still has objects is not destroyed: the
    /// kernel's "Objects remaining" report is printed and it stays usable.
    ///
    /// # Safety
    /// No other context uses `s` while this runs (the kernel's rule), and if it
    /// succeeds nobody uses `s` again.
    pub unsafe fn kmem_cache_destroy(
        &'static self,
        cpu: Option<CpuRef<'_>>,
        s: &'static KmemCache,
    ) -> Result<(), DestroyError> {
        let own =
            ptr::eq(s, &self.kmem_cache) || self.kmalloc.iter().flatten().any(|k| ptr::eq(k, s));
        if own {
            return Err(DestroyError::NotDestroyable);
        }
        let slub = self.slub();
        for area in self.pages.cpu_areas().iter() {
            // SAFETY: nobody uses `s` meanwhile (caller), so its per-CPU state in any
            // area is ours to flush: the owners do not touch it.
            let c = unsafe { CpuRef::new(area) };
            slub.flush_cpu_cache(c, s);
        }
        slub.shrink(cpu, s);
        let mut live = 0usize;
        let mut slabs = 0usize;
        for nid in 0..self.pages.nr_nodes() {
            slabs += s.nr_slabs(nid);
            live += s.nr_slabs(nid) * s.config().objects - s.count_partial_free(nid);
        }
        if slabs > 0 {
            let mut w = LogWriter::new(self.pages.platform());
            let _ = writeln!(
                w,
                "kmem_cache_destroy {}: Slab cache still has objects",
                s.name()
            );
            let _ = writeln!(
                w,
                "============================================================================="
            );
            let _ = writeln!(
                w,
                "BUG {} (Not tainted): Objects remaining in {} on __kmem_cache_shutdown()",
                s.name(),
                s.name()
            );
            let _ = writeln!(
                w,
                "-----------------------------------------------------------------------------"
            );
            let _ = writeln!(w);
            let _ = writeln!(w, "INFO: {live} objects in {slabs} slabs remain");
            return Err(DestroyError::ObjectsRemaining(live));
        }
        self.caches.remove(s);
        s.deactivate();
        // SAFETY: `s` is an object of kmem_cache that nobody uses any more (caller).
        unsafe { slub.free(cpu, &self.kmem_cache, NonNull::from(s).cast::<u8>()) };
        Ok(())
    }

    /// `/proc/slabinfo` (version 2.1, as SLUB prints it).
    pub fn slabinfo(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        write_slabinfo_header(w)?;
        let mut result = Ok(());
        self.caches.for_each(|s| {
            if result.is_ok() {
                result = write_slabinfo_row(w, &slab_row(self, s));
            }
        });
        result
    }

    /// `validate` on every cache (see [`Slub::validate`]); returns the problems found.
    pub fn validate_all(&self, found: &mut dyn FnMut(crate::slab::debug::Problem)) -> usize {
        let slub = self.slub();
        let mut n = 0;
        self.caches.for_each(|s| n += slub.validate(s, found));
        n
    }

    /// A cache's SLUB statistics, one `name value` line each (the files of
    /// `/sys/kernel/slab/<cache>/`), summed over every CPU area.
    pub fn slub_stats(&self, s: &KmemCache, w: &mut dyn fmt::Write) -> fmt::Result {
        for item in crate::slab::SlubStat::ALL {
            writeln!(
                w,
                "{} {}",
                item.name(),
                s.stat_sum(self.pages.cpu_areas().iter(), item)
            )?;
        }
        Ok(())
    }

    /// A slabtop-style summary: totals, then caches sorted by memory, largest first.
    pub fn slabtop(&self, w: &mut dyn fmt::Write, limit: usize) -> fmt::Result {
        let mut rows: [(usize, *const KmemCache, SlabRow); 64] =
            [(0, ptr::null(), SlabRow::default()); 64];
        let mut n = 0;
        let (
            mut objs,
            mut active,
            mut slabs,
            mut caches,
            mut active_caches,
            mut bytes,
            mut active_bytes,
        ) = (0, 0, 0, 0, 0, 0, 0);
        let (mut min_obj, mut max_obj, mut sum_obj) = (usize::MAX, 0, 0);
        self.caches.for_each(|s| {
            let r = slab_row(self, s);
            let size = (r.num_slabs << s.config().order) * PAGE_SIZE;
            objs += r.num_objs;
            active += r.active_objs;
            slabs += r.num_slabs;
            caches += 1;
            if r.num_slabs > 0 {
                active_caches += 1;
            }
            bytes += size;
            active_bytes += r.active_objs * s.config().size;
            min_obj = min_obj.min(s.config().size);
            max_obj = max_obj.max(s.config().size);
            sum_obj += s.config().size;
            // Keep the largest 64 caches by memory.
            let entry = (size, s as *const KmemCache, r);
            if n < rows.len() {
                rows[n] = entry;
                n += 1;
            } else if let Some(min) = rows.iter_mut().min_by_key(|e| e.0) {
                if min.0 < size {
                    *min = entry;
                }
            }
        });
        let rows = &mut rows[..n];
        rows.sort_unstable_by_key(|e| core::cmp::Reverse(e.0));
        let pct = |a: usize, b: usize| {
            if b == 0 {
                0.0
            } else {
                a as f64 * 100.0 / b as f64
            }
        };
        writeln!(
            w,
            " Active / Total Objects (% used)    : {active} / {objs} ({:.1}%)",
            pct(active, objs)
        )?;
        writeln!(
            w,
            " Active / Total Slabs (% used)      : {slabs} / {slabs} (100.0%)"
        )?;
        writeln!(
            w,
            " Active / Total Caches (% used)     : {active_caches} / {caches} ({:.1}%)",
            pct(active_caches, caches)
        )?;
        writeln!(
            w,
            " Active / Total Size (% used)       : {:.2}K / {:.2}K ({:.1}%)",
            active_bytes as f64 / 1024.0,
            bytes as f64 / 1024.0,
            pct(active_bytes, bytes)
        )?;
        writeln!(
            w,
            " Minimum / Average / Maximum Object : {:.2}K / {:.2}K / {:.2}K",
            if caches == 0 {
                0.0
            } else {
                min_obj as f64 / 1024.0
            },
            if caches == 0 {
                0.0
            } else {
                sum_obj as f64 / caches as f64 / 1024.0
            },
            max_obj as f64 / 1024.0
        )?;
        writeln!(w)?;
        writeln!(
            w,
            "  OBJS ACTIVE  USE OBJ SIZE  SLABS OBJ/SLAB CACHE SIZE NAME"
        )?;
        for (size, s, r) in rows.iter().take(limit) {
            // SAFETY: the pointer came from the cache list a moment ago; caches made
            // by kmem_cache_create are only freed by a destroy that the caller of
            // this report does not run concurrently.
            let s = unsafe { &**s };
            writeln!(
                w,
                "{:6} {:6} {:3.0}% {:7.2}K {:6} {:8} {:9}K {}",
                r.num_objs,
                r.active_objs,
                pct(r.active_objs, r.num_objs),
                s.config().size as f64 / 1024.0,
                r.num_slabs,
                s.config().objects,
                size / 1024,
                s.name()
            )?;
        }
        Ok(())
    }
}

/// The two header lines of `/proc/slabinfo` 2.1.
pub fn write_slabinfo_header(w: &mut dyn fmt::Write) -> fmt::Result {
    writeln!(w, "slabinfo - version: 2.1")?;
    writeln!(w, "# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>")
}

/// One `/proc/slabinfo` row (SLUB has no tunables: they print as 0).
pub fn write_slabinfo_row(w: &mut dyn fmt::Write, r: &SlabRow) -> fmt::Result {
    writeln!(
        w,
        "{:<17} {:6} {:6} {:6} {:4} {:4} : tunables {:4} {:4} {:4} : slabdata {:6} {:6} {:6}",
        r.name(),
        r.active_objs,
        r.num_objs,
        r.objsize,
        r.objperslab,
        r.pagesperslab,
        0,
        0,
        0,
        r.num_slabs,
        r.num_slabs,
        0
    )
}

/// One cache's slabinfo figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct SlabRow {
    name: [u8; crate::slab::CACHE_NAME_LEN],
    name_len: usize,
    /// Objects allocated or held by CPUs (all objects minus free ones on node lists).
    pub active_objs: usize,
    /// Objects in all slabs.
    pub num_objs: usize,
    /// Bytes per object, metadata and alignment included.
    pub objsize: usize,
    /// Objects per slab.
    pub objperslab: usize,
    /// Pages per slab.
    pub pagesperslab: usize,
    /// Slabs.
    pub num_slabs: usize,
}

impl SlabRow {
    /// A row from its figures (for reports built from a snapshot).
    pub fn new(
        name: &str,
        active_objs: usize,
        num_objs: usize,
        objsize: usize,
        objperslab: usize,
        pagesperslab: usize,
        num_slabs: usize,
    ) -> Self {
        let mut r = SlabRow {
            active_objs,
            num_objs,
            objsize,
            objperslab,
            pagesperslab,
            num_slabs,
            ..SlabRow::default()
        };
        let mut n = name.len().min(r.name.len());
        while !name.is_char_boundary(n) {
            n -= 1;
        }
        r.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        r.name_len = n;
        r
    }

    /// The cache's name.
    pub fn name(&self) -> &str {
        core::str::from_utf8(&self.name[..self.name_len]).unwrap_or("?")
    }
}

/// The slabinfo figures of `s`.
pub fn slab_row<P: Platform>(kmem: &Kmem<P>, s: &KmemCache) -> SlabRow {
    let cfg = s.config();
    let mut r = SlabRow::new(s.name(), 0, 0, cfg.size, cfg.objects, 1 << cfg.order, 0);
    for nid in 0..kmem.pages.nr_nodes() {
        let slabs = s.nr_slabs(nid);
        r.num_slabs += slabs;
        r.num_objs += slabs * s.config().objects;
        r.active_objs += (slabs * s.config().objects).saturating_sub(s.count_partial_free(nid));
    }
    r
}

/// A small stack buffer for cache names.
struct NameBuf {
    buf: [u8; 32],
    len: usize,
}

impl NameBuf {
    fn new() -> Self {
        Self {
            buf: [0; 32],
            len: 0,
        }
    }
    fn clear(&mut self) {
        self.len = 0;
    }
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("?")
    }
}

impl fmt::Write for NameBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}
