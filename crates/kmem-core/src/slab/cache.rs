//! The cache (`struct kmem_cache`) and its per-node state (`struct kmem_cache_node`).
//!
//! Locking: a node's partial list is under its `list_lock` (lock order in the crate docs);
//! the cache's layout is read-only once published.

use super::*;
use crate::page::PageList;
use crate::page::MAX_NUMNODES;
use crate::percpu::CpuRef;
use crate::sync::{AtomicPtr, AtomicUsize, Ordering::Relaxed, SpinLock};
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
    /// Empty slabs kept for the next refill (sheaves design; under `list_lock`, see
    /// `empty.rs`).
    pub(crate) empty: super::empty::EmptySlabs,
}

impl KmemCacheNode {
    pub(crate) const fn new() -> Self {
        Self {
            list_lock: SpinLock::new(PageList::new()),
            full: SpinLock::new(PageList::new()),
            nr_slabs: AtomicUsize::new(0),
            barn: super::barn::Barn::new(),
            fresh: super::fresh::FreshSlab::new(),
            empty: super::empty::EmptySlabs::new(),
        }
    }
}

/// Where a cache's side state is, given to [`KmemCache::set_config`] by whoever makes
/// the cache: its `kmem_cache_node`s (node `nid`'s at `nid * stride` bytes from node
/// 0's) and the counters of the contexts without a CPU area ([`SlubStats`]). Kept
/// apart from the cache, as the kernel allocates each node's structure on its own: a
/// cache with the 16 nodes inline was 2.9 KB, so each of kmalloc's 69 caches took a
/// page or two that every process faulted in as it started, and that the fork handler
/// wrote on every fork (its locks). The counters moved out for the same reason: inline
/// they were 304 of a cache's 640 bytes, never written unless statistics are counted,
/// yet the boot, which writes every kmalloc cache's config, touched their pages too
/// (11 pages for the 69 caches; 6 without them). kmalloc keeps its caches' nodes in
/// one node-major table (node 0's row: 4 pages) and their counters in a table of their
/// own, `kmem_cache_create` both in the object with the cache ([`CacheWithNodes`]).
#[derive(Clone, Copy, Debug)]
pub struct NodeTable {
    base: *const KmemCacheNode,
    stride: usize,
    stats: *const SlubStats,
}

/// A cache's own side state, for a cache that keeps its own: one `kmem_cache_node`
/// per node, then the counters of contexts without a CPU area.
#[repr(C)]
pub struct CacheNodes {
    nodes: [KmemCacheNode; MAX_NUMNODES],
    stats: SlubStats,
}

/// [`CacheNodes`] as a fresh cache has them (a `const` for initialisers).
#[allow(clippy::declare_interior_mutable_const)]
pub const NEW_CACHE_NODES: CacheNodes = CacheNodes {
    nodes: [const { KmemCacheNode::new() }; MAX_NUMNODES],
    stats: NEW_SLUB_STATS,
};

impl NodeTable {
    /// A cache's own nodes and counters.
    pub fn of(side: *const CacheNodes) -> Self {
        Self {
            base: side.cast(),
            stride: core::mem::size_of::<KmemCacheNode>(),
            // In bounds of the same object; no reference is made.
            stats: side
                .wrapping_byte_add(core::mem::offset_of!(CacheNodes, stats))
                .cast(),
        }
    }

    /// Column `i` of a node-major table (`table[nid][i]` is cache `i`'s node `nid`),
    /// with the counters `stats`.
    pub fn column<const N: usize>(
        table: *const [[KmemCacheNode; N]; MAX_NUMNODES],
        i: usize,
        stats: *const SlubStats,
    ) -> Self {
        debug_assert!(i < N);
        Self {
            base: table.cast::<KmemCacheNode>().wrapping_add(i),
            stride: core::mem::size_of::<[KmemCacheNode; N]>(),
            stats,
        }
    }
}

/// Every node of a cache never set up (kmalloc's, when the allocator's
/// initialisation failed and its allocations fail): empty lists, an empty barn. Such
/// a cache never gets a slab, so nothing is ever put on them.
static UNSET_NODE: KmemCacheNode = KmemCacheNode::new();

/// A cache together with its nodes: what a cache made by `kmem_cache_create` is (one
/// object of the `kmem_cache` cache), the cache first.
#[repr(C)]
pub struct CacheWithNodes {
    /// The cache.
    pub cache: KmemCache,
    /// Its nodes.
    pub nodes: CacheNodes,
}

/// [`KmemCache`]'s `stock_refs` bit for a cache given up by `kmem_cache_destroy`.
const CACHE_DEAD: usize = 1 << (usize::BITS - 1);

/// A slab cache (`struct kmem_cache`).
///
/// Invariant: `config` and `nodes` are written only while the cache is being created,
/// before `active` is set and before anybody else can see the cache; afterwards they
/// are read-only. `nodes` then says where the cache's `MAX_NUMNODES` node states and
/// its counters of contexts without a CPU area are ([`NodeTable`]); they live as long
/// as the cache and belong to it alone. Before, both are null: every node reads as
/// [`UNSET_NODE`] and nothing is counted.
///
/// `repr(C)` and 64-byte aligned, the config first: the fields the fast paths read
/// share one cache line (see [`CacheConfig`]).
#[repr(C, align(64))]
pub struct KmemCache {
    config: UnsafeCell<CacheConfig>,
    active: AtomicUsize,
    /// Memory cgroup charge stocks whose statistics count this cache's objects
    /// (`MemcgStock::stat_cache`), and [`CACHE_DEAD`] once `kmem_cache_destroy` has
    /// given it up: the last of the two to let go frees it (a stock flushes its
    /// statistics from the cache's config, long after its last object went).
    stock_refs: AtomicUsize,
    /// Next cache on the allocator's list of caches.
    pub(crate) next: AtomicPtr<KmemCache>,
    /// Where the node states and the counters of contexts without a CPU area are (see
    /// the invariant).
    nodes: UnsafeCell<NodeTable>,
}

// SAFETY: `config` and `nodes` are immutable once the cache is shared (type
// invariant); everything else is atomics and locks.
unsafe impl Sync for KmemCache {}

// SAFETY: as above; the raw pointers inside point to memory that outlives the cache.
unsafe impl Send for KmemCache {}

impl KmemCache {
    pub(crate) const fn new() -> Self {
        Self {
            config: UnsafeCell::new(CacheConfig::EMPTY),
            active: AtomicUsize::new(0),
            stock_refs: AtomicUsize::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
            // Until `set_config`: no table (null), read as UNSET_NODE for every node,
            // and no counters.
            // Null rather than UNSET_NODE's address, so that a `static` holding
            // caches needs no load-time relocation: with the address in each of its
            // 69 kmalloc caches, the dynamic loader wrote 12 pages of libkmem.so's
            // heap in every process, one that never mallocs included.
            nodes: UnsafeCell::new(NodeTable {
                base: ptr::null(),
                stride: 0,
                stats: ptr::null(),
            }),
        }
    }

    /// Node `nid`'s state (`get_node(s, nid)`); [`UNSET_NODE`] for a cache never set
    /// up, and for a node past [`MAX_NUMNODES`] (which the public entry points refuse
    /// first: see [`Slub::alloc_node`](crate::slab::Slub::alloc_node); their
    /// statistics read it as empty).
    #[inline]
    pub(crate) fn node(&self, nid: usize) -> &KmemCacheNode {
        // SAFETY: read-only once the cache is shared (type invariant); before
        // `set_config` only its own creator could write it, and nobody does.
        let t = unsafe { *self.nodes.get() };
        if t.base.is_null() || nid >= MAX_NUMNODES {
            return &UNSET_NODE;
        }
        // SAFETY: `nodes` names the cache's node states, which outlive it (type
        // invariant); `nid` is below MAX_NUMNODES (tested just above).
        unsafe {
            &*(t.base as *const u8)
                .wrapping_add(nid * t.stride)
                .cast::<KmemCacheNode>()
        }
    }

    /// The states of nodes `0..nr_nodes`.
    pub(crate) fn nodes(&self, nr_nodes: usize) -> impl Iterator<Item = &KmemCacheNode> {
        (0..nr_nodes).map(|nid| self.node(nid))
    }

    /// The cache's layout and settings.
    #[inline]
    pub fn config(&self) -> &CacheConfig {
        // SAFETY: read-only once the cache is published (type invariant).
        unsafe { &*self.config.get() }
    }

    /// Sets the cache's layout and where its node states are, and marks it active.
    ///
    /// # Safety
    /// The cache is not yet visible to any other context; the `MAX_NUMNODES` node
    /// states `nodes` names are valid, live as long as the cache and belong to it
    /// alone.
    pub(crate) unsafe fn set_config(&self, cfg: CacheConfig, nodes: NodeTable) {
        // SAFETY: nobody else can see the cache yet (caller), so nothing reads the
        // config or the node table while they are written.
        unsafe {
            *self.config.get() = cfg.with_inline_tag();
            *self.nodes.get() = nodes;
        }
        self.active.store(1, crate::sync::Ordering::Release);
    }

    /// Sets the objcg sheaf class in the config ([`CacheConfig::objcg_class()`]):
    /// kmalloc's boot, for its accounted caches on a sheaf fast path.
    ///
    /// # Safety
    /// No other context reads the cache's config yet (the allocator's boot).
    pub(crate) unsafe fn set_objcg_class(&self, class: u8) {
        // SAFETY: nobody else reads or writes the config meanwhile (caller), so this
        // is the one reference to it while the two fields change.
        let cfg = unsafe { &mut *self.config.get() };
        cfg.objcg_class = class;
        // Its uncharged allocations leave `alloc_fast` for the paths that mark their
        // slabs (`Slub::note_uncharged`); charged ones pop with `alloc_fast_charged`.
        cfg.inline_tag = 0;
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

    /// A charge stock counts this cache's objects from now on (`stock_refs`).
    pub(crate) fn stock_get(&self) {
        self.stock_refs.fetch_add(1, crate::sync::Ordering::Relaxed);
    }

    /// A charge stock stops counting this cache's objects: true when the cache was
    /// given up and this was the last stock, so that the caller frees it.
    pub(crate) fn stock_put(&self) -> bool {
        self.stock_refs.fetch_sub(1, crate::sync::Ordering::AcqRel) == CACHE_DEAD | 1
    }

    /// `kmem_cache_destroy` gives the cache up: true when no charge stock counts its
    /// objects, so that the caller frees it now (else the last stock does).
    pub(crate) fn give_up(&self) -> bool {
        self.stock_refs
            .fetch_or(CACHE_DEAD, crate::sync::Ordering::AcqRel)
            == 0
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
                if let Some(stats) = self.side_stats() {
                    stats[item as usize].fetch_add(1, Relaxed);
                }
            }
        }
    }

    /// The counters of contexts without a CPU area; `None` for a cache never set up
    /// (nothing counts for it).
    fn side_stats(&self) -> Option<&SlubStats> {
        // SAFETY: read-only once the cache is shared (type invariant).
        let t = unsafe { *self.nodes.get() };
        // SAFETY: null, or counters that live as long as the cache (type invariant).
        unsafe { t.stats.as_ref() }
    }

    /// Slabs of this cache on node `nid`.
    pub fn nr_slabs(&self, nid: usize) -> usize {
        self.node(nid).nr_slabs.load(Relaxed)
    }

    /// Slabs on node `nid`'s partial list.
    pub fn nr_partial(&self, nid: usize) -> usize {
        self.node(nid).list_lock.lock().len()
    }

    /// Objects free in the slabs of node `nid`'s partial list (`count_partial`), in
    /// its fresh slab's tail and in its kept empty slabs.
    pub fn count_partial_free(&self, nid: usize) -> usize {
        let mut list = self.node(nid).list_lock.lock();
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
        free += self.node(nid).fresh.objects(self.config(), &list);
        free + self.node(nid).empty.len(&mut list) * objects
    }

    /// A statistic summed over the no-CPU counter and the given CPU areas.
    pub fn stat_sum<'a>(
        &self,
        areas: impl Iterator<Item = &'a crate::percpu::CpuArea>,
        item: SlubStat,
    ) -> u64 {
        let mut v = self
            .side_stats()
            .map_or(0, |st| st[item as usize].load(Relaxed));
        for a in areas {
            v += u64::from(self.cpu_of(a).stat[item as usize].load(Relaxed));
        }
        v
    }
}
