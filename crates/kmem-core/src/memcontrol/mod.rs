//! Memory cgroups: accounting with limits, at byte granularity for slab objects
//! (mm/memcontrol.c, with Waiman Long's "mm/memcg: Reduce kmemcache memory accounting
//! overhead" series).
//!
//! ## Types
//! - [`MemCgroup`] (`struct mem_cgroup`): a group in a hierarchy under the root
//!   ([`Memcg::root_mem_cgroup`]). Its [`PageCounter`] (`memory`) counts pages charged
//!   to it *and its descendants*, checked against `memory.max` at every level on the
//!   way up; its statistics (`memory.stat`) and per-cache object counts are
//!   hierarchical too. Events: `high`, `max`, `oom` (`memory.events`).
//! - [`ObjCgroup`] (`struct obj_cgroup`): what an accounted object points to. It names
//!   its group (`memcg`), holds the sub-page remainder of charged bytes nobody uses
//!   (`nr_charged_bytes`), and counts the pages charged through it (`nr_pages`), so
//!   `live bytes = nr_pages * PAGE_SIZE - nr_charged_bytes - bytes in stocks`.
//! - [`MemcgStock`] (`struct memcg_stock_pcp`): per CPU area, pre-charged pages of one
//!   group and pre-charged bytes of one objcg. An accounted allocation whose objcg
//!   (and cache) is the cached one subtracts its size from the stock, a free adds it
//!   back: no atomic, no shared cache line ("mm/memcg: Cache vmstat data in percpu
//!   memcg_stock_pcp", "mm/memcg: Improve refill_obj_stock() performance": statistics
//!   cached in the stock, `refill_obj_stock` uncharges only the excess, the stock is
//!   drained only when the objcg changes). The statistics are not counted per object but
//!   derived from the stock's byte movement (see [`MemcgStock`]). The stock also holds
//!   the area's objcg sheaves ([`ObjcgSheaves`]): kmalloc objects freed by a context in
//!   their own group wait there, still charged, for that group's next allocation of
//!   the class, so a charged pair in steady state neither charges nor uncharges. They
//!   live in the area's charged area (`charged_area`), which a charged thread's inline
//!   fast paths pop and push like a CPU area's sheaves.
//!
//! ## Where the objcg of an object is kept
//! A slab with accounted objects has a vector of objcg pointers, one per object
//! (`slab->obj_exts`), allocated from the plain kmalloc caches — never from a
//! `kmalloc-cg-*` cache, whose slabs are the ones needing vectors (the separate
//! kmalloc-cg caches avoid that recursion and the never-empty slab it makes). The vector's
//! address, tagged [`MEMCG_DATA_OBJEXTS`], is in the slab head page's `private` word;
//! an accounted large block has its objcg there, tagged [`MEMCG_DATA_KMEM`]. A free
//! finds the objcg there and uncharges it, whatever thread frees.
//!
//! ## Lifetimes (what keeps a group's memory alive)
//! An objcg is referenced by: its group while online (1), each stock caching it or
//! its group, each area's objcg sheaves holding it, each child group (for the parent
//! chain), and each uncharge in progress outside a stock. A removed group ("zombie") keeps its descriptor while references
//! remain or objects are still charged through its objcg; its objcg then points at the
//! parent, so later frees uncharge the parent (`memcg_reparent_objcgs`) — the parent's
//! usage already included the child's, counters being hierarchical. Zombies are freed
//! by a sweep (at group creation and removal) once unreferenced and empty: it claims
//! the reference count (0 → DEAD), reads the counts (Acquire; holders update them with
//! releases) and checks the count is still DEAD — `tests/loom_memcg.rs` models it.
//!
//! ## Locking
//! `MemcgState::lock` serialises group creation, removal and the zombie sweep; no
//! allocation or free takes it (a report walking the groups may allocate under it, so
//! it comes before the slab and page locks: the lock order in the crate docs). Page
//! counters, objcg fields and group statistics are atomics; a group's per-cache table has its own lock, taken (alone)
//! when statistics are flushed. A stock is touched only by the owner of its CPU area
//! (others may ask for a drain with [`crate::percpu::DRAIN_STOCK`]; the owner drains at
//! its next charge that misses the stock).

mod charge;
mod charged_area;
mod counter;
mod fork;
mod group;
mod intake;
mod objcg_sheaf;
mod report;
mod slab_hooks;
mod stock;
#[cfg(test)]
mod test_env;

pub use charged_area::ObjcgSheaves;
pub use counter::PageCounter;
pub use fork::ForkGroupsHeld;
pub use group::{MemCgroup, ObjCgroup};
use group::{SOLE_MIXED, SOLE_NONE};
pub use objcg_sheaf::{
    OBJCG_SHEAF_BYTES, OBJCG_SHEAF_CLASSES, OBJCG_SHEAF_MIN_SLOTS, OBJCG_SHEAF_REFILL,
    OBJCG_SHEAF_SLOTS, OBJCG_SHEAVES_MAX_BYTES,
};
pub use report::{write_memcg_files, CacheRows, MemcgFiles};
pub use stock::MemcgStock;

use crate::kmalloc::Kmalloc;
use crate::page::Page;
use crate::percpu::{CpuArea, CpuRef};
use crate::platform::Platform;
use crate::slab::KmemCache;
use crate::sync::{
    AtomicU64, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release, SpinLock,
};
use core::ptr::{self};

/// Pages charged to a page counter at once (`MEMCG_CHARGE_BATCH`); the excess waits
/// in the CPU's stock.
pub const MEMCG_CHARGE_BATCH: usize = 64;

/// Longest group name kept.
pub const MEMCG_NAME_LEN: usize = 32;

/// Caches whose object counts a group keeps by name; others count as "other".
pub const MEMCG_CACHE_SLOTS: usize = 16;

/// `page.private` tag: the word is a slab's objcg vector.
pub const MEMCG_DATA_OBJEXTS: usize = crate::slab::accounting::OBJ_EXTS;

/// `page.private` tag: the word is the objcg of an accounted page block.
pub const MEMCG_DATA_KMEM: usize = crate::slab::accounting::PAGE_CHARGED;

const MEMCG_DATA_MASK: usize = 3;

/// `refcnt` value that marks an objcg being freed by the sweep.
const OBJCG_DEAD: usize = 1 << (usize::BITS - 2);

/// Group statistics (`memory.stat`), in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum MemcgStat {
    /// Slab objects of `SLAB_RECLAIM_ACCOUNT` caches (`slab_reclaimable`).
    SlabReclaimable,
    /// Other slab objects (`slab_unreclaimable`).
    SlabUnreclaimable,
    /// Accounted page blocks: large kmalloc, page allocations, mappings.
    KmemPages,
}

/// Number of [`MemcgStat`] items.
pub const NR_MEMCG_STAT: usize = 3;

/// The statistic of each slab delta of a stock: index 1 for `SLAB_RECLAIM_ACCOUNT`
/// caches.
const STAT_OF_DELTA: [MemcgStat; 2] = [MemcgStat::SlabUnreclaimable, MemcgStat::SlabReclaimable];

/// Group events (`memory.events`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum MemcgEvent {
    /// Usage went over `memory.high` (the group's stocks were reclaimed).
    High,
    /// A charge hit `memory.max`.
    Max,
    /// A charge failed after reclaim: the allocation returned null.
    Oom,
}

/// Number of [`MemcgEvent`] items.
pub const NR_MEMCG_EVENTS: usize = 3;

/// Why a group could not be created or removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemcgError {
    /// No memory for the descriptor.
    NoMemory,
    /// The group has online children (remove them first, as `rmdir` says `EBUSY`).
    Busy,
    /// The root cannot be removed, and a removed group cannot get children.
    Invalid,
}

/// The memory controller's global state, in [`crate::Kmem`].
pub struct MemcgState {
    pub(super) root: MemCgroup,
    pub(super) stock_offset: AtomicUsize,
    /// `stock_offset` while stocks are enabled, else 0 (one load on the fast path).
    pub(super) stock_active: AtomicUsize,
    pub(super) lock: SpinLock<ZombieList>,
    pub(super) nr_groups: AtomicUsize,
    /// The id the next group's objcg gets ([`MemcgState::new_objcg_id`]).
    pub(super) next_objcg_id: AtomicU64,
}

pub(super) struct ZombieList {
    pub(super) head: *mut MemCgroup,
    pub(super) len: usize,
    /// Online groups but the root, newest first.
    pub(super) groups: *mut MemCgroup,
}

// SAFETY: only touched under `MemcgState::lock`; the groups it links are alive.
unsafe impl Send for ZombieList {}

impl MemcgState {
    pub(crate) const fn new() -> Self {
        Self {
            root: {
                let mut root = MemCgroup::new_root();
                root.objcg.id = group::ROOT_OBJCG_ID;
                root
            },
            stock_offset: AtomicUsize::new(0),
            stock_active: AtomicUsize::new(0),
            lock: SpinLock::new(ZombieList {
                head: ptr::null_mut(),
                len: 0,
                groups: ptr::null_mut(),
            }),
            nr_groups: AtomicUsize::new(0),
            next_objcg_id: AtomicU64::new(group::ROOT_OBJCG_ID as u64 + 1),
        }
    }

    /// A new objcg's id: never one an objcg of this allocator had before, nor
    /// `SOLE_NONE` or the root's; `SOLE_MIXED` once 2^32 - 3 groups were made, which
    /// only costs their slabs the trusted take-in (see `intake::inbox_vector`).
    pub(super) fn new_objcg_id(&self) -> u32 {
        let id = self.next_objcg_id.fetch_add(1, Relaxed);
        u32::try_from(id).unwrap_or(group::SOLE_MIXED)
    }
}

pub use crate::slab::has_obj_exts;

/// The memcg word of a page block (`page->memcg_data`).
#[inline]
pub(super) fn memcg_data(head: &Page) -> usize {
    head.private.load(Acquire)
}

/// The objcg vector of the slab headed by `head`, if it has one (its `memcg_data`
/// tagged [`MEMCG_DATA_OBJEXTS`]): one slot per object.
#[inline(always)]
pub(super) fn objcg_vector(head: &Page) -> Option<*const crate::sync::AtomicPtr<ObjCgroup>> {
    let data = memcg_data(head);
    (data & MEMCG_DATA_OBJEXTS != 0).then_some((data & !MEMCG_DATA_MASK) as *const _)
}

/// The memory controller's operations, bound to its state and to kmalloc (group
/// descriptors and objcg vectors come from the plain kmalloc caches, never charged).
pub struct Memcg<'a, P: Platform> {
    pub(super) state: &'a MemcgState,
    pub(super) km: Kmalloc<'a, P>,
    /// The `kmem_cache` cache (its objects back caches themselves: never charged).
    pub(super) boot: &'a KmemCache,
}

impl<P: Platform> Clone for Memcg<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P: Platform> Copy for Memcg<'_, P> {}

impl<'a, P: Platform> Memcg<'a, P> {
    /// The controller `state` over kmalloc `km`; objects of `boot` are never charged.
    pub(crate) fn new(state: &'a MemcgState, km: Kmalloc<'a, P>, boot: &'a KmemCache) -> Self {
        Self { state, km, boot }
    }

    /// Reserves the stock in every CPU area and points the root's objcg at the root
    /// (called when the allocator is initialised).
    pub(crate) fn init(&self) -> bool {
        let root = &self.state.root;
        root.objcg
            .memcg
            .store(root as *const MemCgroup as *mut MemCgroup, Release);
        match self
            .km
            .pages()
            .percpu()
            .alloc(core::mem::size_of::<MemcgStock>(), 64)
        {
            Some(off) => {
                self.state.stock_offset.store(off, Relaxed);
                self.state.stock_active.store(off, Relaxed);
                true
            }
            None => false,
        }
    }

    /// The root group: every charge reaches it; it has no limit unless one is set.
    pub fn root_mem_cgroup(&self) -> &'a MemCgroup {
        &self.state.root
    }

    /// Groups created and not yet freed (online and zombies), not counting the root.
    pub fn nr_mem_cgroups(&self) -> usize {
        self.state.nr_groups.load(Relaxed)
    }

    /// Calls `f` on the root and every online group (newest first), under the
    /// groups' lock: `f` may allocate but must not create or remove groups.
    pub fn for_each_mem_cgroup(&self, mut f: impl FnMut(&MemCgroup)) {
        let l = self.state.lock.lock();
        f(&self.state.root);
        let mut p = l.groups;
        // SAFETY: online groups on the list are alive while the lock is held.
        while let Some(g) = unsafe { p.as_ref() } {
            f(g);
            p = g.next_group.load(Relaxed);
        }
    }

    /// Removed groups still kept for their charged objects or references.
    pub fn nr_zombie_mem_cgroups(&self) -> usize {
        self.state.lock.lock().len
    }

    /// Turns the per-CPU stock on or off (off: every charge and statistic goes to the
    /// shared counters, as before the per-CPU obj stock; for the `memcg` benchmark).
    /// Drains the caller's stock.
    pub fn set_memcg_stock(&self, cpu: Option<CpuRef<'_>>, enabled: bool) {
        if let Some(c) = cpu {
            self.memcg_drain_stock(c);
        }
        let off = self.state.stock_offset.load(Relaxed);
        self.state
            .stock_active
            .store(if enabled { off } else { 0 }, Relaxed);
    }

    #[inline]
    pub(super) fn stock<'c>(&self, cpu: Option<CpuRef<'c>>) -> Option<&'c MemcgStock> {
        let c = cpu?;
        let off = self.state.stock_active.load(Relaxed);
        if off == 0 {
            return None;
        }
        debug_assert!(off + core::mem::size_of::<MemcgStock>() <= crate::percpu::CPU_AREA_SIZE);
        let base = c.area() as *const CpuArea as *const u8;
        // SAFETY: a non-zero `off` was reserved in every CPU area by `Memcg::init`
        // (all-zero is the empty stock), inside the area's memory: an in-bounds
        // offset (so the compiler knows the result is not null and tests nothing);
        // the caller owns the area.
        Some(unsafe { &*base.add(off).cast::<MemcgStock>() })
    }

    /// The stock of `area` (for statistics: reads only).
    pub fn memcg_stock_of<'c>(&self, area: &'c CpuArea) -> Option<&'c MemcgStock> {
        let off = self.state.stock_offset.load(Relaxed);
        // SAFETY: as in `stock`; shared access reads atomics only.
        (off != 0).then(|| unsafe { &*area.ptr::<MemcgStock>(off) })
    }
}
