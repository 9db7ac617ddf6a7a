//! The cache (`struct kmem_cache`) and its per-node state (`struct kmem_cache_node`).
//!
//! Locking: a node's partial list is under its `list_lock` (lock order in the crate docs);
//! the cache's layout is read-only once published.

use super::*;
use crate::page::PageList;
use crate::page::MAX_NUMNODES;
use crate::percpu::CpuRef;
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::Relaxed, SpinLock};
use core::cell::UnsafeCell;
use core::ptr::{self, NonNull};

/// A cache's per-node state (`struct kmem_cache_node`).
pub struct KmemCacheNode {
    pub(crate) list_lock: SpinLock<PageList>,
    /// Full slabs of a debug cache, so `validate` sees every slab (taken inside
    /// `list_lock`; unused by other caches).
    pub(crate) full: SpinLock<PageList>,
    pub(super) nr_slabs: AtomicUsize,
    /// The node's barn of sheaves (sheaves design).
    pub(crate) barn: super::barn::Barn,
    /// The untouched tail of the node's last new slab (sheaves design; under
    /// `list_lock`, see `fresh.rs`).
    pub(crate) fresh: super::fresh::FreshSlab,
}

impl KmemCacheNode {
    const fn new() -> Self {
        Self {
            list_lock: SpinLock::new(PageList::new()),
            full: SpinLock::new(PageList::new()),
            nr_slabs: AtomicUsize::new(0),
            barn: super::barn::Barn::new(),
            fresh: super::fresh::FreshSlab::new(),
        }
    }
}

/// A slab cache (`struct kmem_cache`).
///
/// Invariant: `config` is written only while the cache is being created, before
/// `active` is set and before anybody else can see the cache; afterwards it is
/// read-only.
///
/// `repr(C)` and 64-byte aligned, the config first: the fields the fast paths read
/// share one cache line (see [`CacheConfig`]).
#[repr(C, align(64))]
pub struct KmemCache {
    config: UnsafeCell<CacheConfig>,
    active: AtomicUsize,
    pub(crate) node: [KmemCacheNode; MAX_NUMNODES],
    /// Statistics of contexts without a CPU area.
    stat: [AtomicU64; NR_SLUB_STAT],
    /// Next cache on the allocator's list of caches.
    pub(crate) next: AtomicPtr<KmemCache>,
}

// SAFETY: `config` is immutable once the cache is shared (type invariant); everything
// else is atomics and locks.
unsafe impl Sync for KmemCache {}

// SAFETY: as above; the raw pointers inside point to memory that outlives the cache.
unsafe impl Send for KmemCache {}

impl KmemCache {
    pub(crate) const fn new() -> Self {
        Self {
            config: UnsafeCell::new(CacheConfig::EMPTY),
            active: AtomicUsize::new(0),
            node: [const { KmemCacheNode::new() }; MAX_NUMNODES],
            stat: [const { AtomicU64::new(0) }; NR_SLUB_STAT],
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The cache's layout and settings.
    #[inline]
    pub fn config(&self) -> &CacheConfig {
        // SAFETY: read-only once the cache is published (type invariant).
        unsafe { &*self.config.get() }
    }

    /// # Safety
    /// The cache is not yet visible to any other context.
    pub(crate) unsafe fn set_config(&self, cfg: CacheConfig) {
        // SAFETY: nobody else can see the cache yet (caller).
        unsafe { *self.config.get() = cfg };
        self.active.store(1, crate::sync::Ordering::Release);
    }

    /// Sets the objcg sheaf class in the config ([`CacheConfig::objcg_class()`]):
    /// kmalloc's boot, for its accounted caches on a sheaf fast path.
    ///
    /// # Safety
    /// No other context reads the cache's config yet (the allocator's boot).
    pub(crate) unsafe fn set_objcg_class(&self, class: u8) {
        // SAFETY: nobody else reads the config meanwhile (caller).
        unsafe { (*self.config.get()).objcg_class = class };
    }

    /// The cache's name.
    pub fn name(&self) -> &str {
        self.config().name()
    }

    /// Whether the cache is set up and not destroyed.
    pub fn is_active(&self) -> bool {
        self.active.load(crate::sync::Ordering::Acquire) == 1
    }

    pub(crate) fn deactivate(&self) {
        self.active.store(0, crate::sync::Ordering::Release);
    }

    #[inline]
    pub(super) fn cpu<'a>(&self, cpu: CpuRef<'a>) -> &'a KmemCacheCpu {
        // SAFETY: every CPU area reserves `cpu_offset` for this cache (made by the
        // percpu allocator when the cache was created; zero is the valid empty state).
        unsafe { &*cpu.area().ptr::<KmemCacheCpu>(self.config().cpu_offset) }
    }

    /// This cache's per-CPU state in `area` (for statistics).
    pub fn cpu_of<'a>(&self, area: &'a crate::percpu::CpuArea) -> &'a KmemCacheCpu {
        // SAFETY: as in `cpu`; shared access reads atomics only.
        unsafe { &*area.ptr::<KmemCacheCpu>(self.config().cpu_offset) }
    }

    #[inline]
    pub(crate) fn stat(&self, cpu: Option<CpuRef<'_>>, item: SlubStat) {
        match cpu {
            Some(c) => self.cpu(c).count(item),
            None => {
                self.stat[item as usize].fetch_add(1, Relaxed);
            }
        }
    }

    /// Slabs of this cache on node `nid`.
    pub fn nr_slabs(&self, nid: usize) -> usize {
        self.node[nid].nr_slabs.load(Relaxed)
    }

    /// Slabs on node `nid`'s partial list.
    pub fn nr_partial(&self, nid: usize) -> usize {
        self.node[nid].list_lock.lock().len()
    }

    /// Objects free in the slabs of node `nid`'s partial list (`count_partial`), and
    /// in its fresh slab's tail.
    pub fn count_partial_free(&self, nid: usize) -> usize {
        let list = self.node[nid].list_lock.lock();
        let objects = self.config().objects;
        let mut free = 0;
        let mut p = list.first();
        while let Some(page) = NonNull::new(p) {
            // SAFETY: slabs on the list are live slab pages; we hold the list lock.
            let pr = unsafe { page.as_ref() };
            free += objects - Slab::of(pr).state().inuse() as usize;
            p = pr.next.load(Relaxed);
        }
        // The fresh tail is free too (its slab counts it in use).
        free + self.node[nid].fresh.objects(self.config(), &list)
    }

    /// A statistic summed over the no-CPU counter and the given CPU areas.
    pub fn stat_sum<'a>(
        &self,
        areas: impl Iterator<Item = &'a crate::percpu::CpuArea>,
        item: SlubStat,
    ) -> u64 {
        let mut v = self.stat[item as usize].load(Relaxed);
        for a in areas {
            v += u64::from(self.cpu_of(a).stat[item as usize].load(Relaxed));
        }
        v
    }
}
