//! Memory cgroups: accounting with limits, at byte granularity for slab objects
//! (mm/memcontrol.c, seed 001).
//!
//! ## Types
//! - [`MemCgroup`] (`struct mem_cgroup`): a group in a hierarchy under the root
//!   ([`Kmem::root_mem_cgroup`]). Its [`PageCounter`] (`memory`) counts pages charged
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
//!   back: no atomic, no shared cache line (seed 001's patches 2–4: statistics cached
//!   in the stock, `refill_obj_stock` uncharges only the excess, the stock is drained
//!   only when the objcg changes). The statistics are not counted per object but
//!   derived from the stock's byte movement (see [`MemcgStock`]).
//!
//! ## Where the objcg of an object is kept
//! A slab with accounted objects has a vector of objcg pointers, one per object
//! (`slab->obj_exts`), allocated from the plain kmalloc caches — never from a
//! `kmalloc-cg-*` cache, whose slabs are the ones needing vectors (the split of
//! seed 001 avoids that recursion and the never-empty slab it makes). The vector's
//! address, tagged [`MEMCG_DATA_OBJEXTS`], is in the slab head page's `private` word;
//! an accounted large block has its objcg there, tagged [`MEMCG_DATA_KMEM`]. A free
//! finds the objcg there and uncharges it, whatever thread frees.
//!
//! ## Lifetimes (what keeps a group's memory alive)
//! An objcg is referenced by: its group while online (1), each stock caching it or
//! its group, each child group (for the parent chain), and each uncharge in progress
//! outside a stock. A removed group ("zombie") keeps its descriptor while references
//! remain or objects are still charged through its objcg; its objcg then points at the
//! parent, so later frees uncharge the parent (`memcg_reparent_objcgs`) — the parent's
//! usage already included the child's, counters being hierarchical. Zombies are freed
//! by a sweep (at group creation and removal) once unreferenced and empty: it claims
//! the reference count (0 → DEAD), reads the counts (Acquire; holders update them with
//! releases) and checks the count is still DEAD — `tests/loom_memcg.rs` models it.
//!
//! ## Locking
//! `MemcgState::lock` serialises group creation, removal and the zombie sweep; no
//! allocation or free takes it (a report walking the groups may allocate under it). Page counters, objcg fields and group
//! statistics are atomics; a group's per-cache table has its own lock, taken (alone)
//! when statistics are flushed. A stock is touched only by the owner of its CPU area
//! (others may ask for a drain with [`crate::percpu::DRAIN_STOCK`]; the owner drains at
//! its next charge that misses the stock).

use crate::gfp::Gfp;
use crate::page::{Page, PAGE_SHIFT, PAGE_SIZE};
use crate::percpu::{CpuRef, DRAIN_STOCK};
use crate::platform::Platform;
use crate::slab::{KmemCache, SlabFlags};
use crate::slab_common::Kmem;
use crate::sync::{
    AtomicBool, AtomicIsize, AtomicPtr, AtomicU64, AtomicUsize, Ordering::AcqRel,
    Ordering::Acquire, Ordering::Relaxed, Ordering::Release, SpinLock,
};
use core::fmt;
use core::ptr::{self, NonNull};

/// Pages charged to a page counter at once (`MEMCG_CHARGE_BATCH`); the excess waits
/// in the CPU's stock.
pub const MEMCG_CHARGE_BATCH: usize = 64;
/// Longest group name kept.
pub const MEMCG_NAME_LEN: usize = 32;
/// Caches whose object counts a group keeps by name; others count as "other".
pub const MEMCG_CACHE_SLOTS: usize = 16;
/// `page.private` tag: the word is a slab's objcg vector.
pub const MEMCG_DATA_OBJEXTS: usize = 1;
/// `page.private` tag: the word is the objcg of an accounted page block.
pub const MEMCG_DATA_KMEM: usize = 2;
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

/// `struct page_counter`: pages charged, with limits. Charging checks every level
/// from the group up to the root.
pub struct PageCounter {
    usage: AtomicUsize,
    max: AtomicUsize,
    high: AtomicUsize,
    watermark: AtomicUsize,
    failcnt: AtomicUsize,
}

impl PageCounter {
    const fn new() -> Self {
        Self {
            usage: AtomicUsize::new(0),
            max: AtomicUsize::new(usize::MAX),
            high: AtomicUsize::new(usize::MAX),
            watermark: AtomicUsize::new(0),
            failcnt: AtomicUsize::new(0),
        }
    }
    /// Pages charged now.
    pub fn usage(&self) -> usize {
        self.usage.load(Relaxed)
    }
    /// The hard limit in pages (`usize::MAX`: none).
    pub fn max(&self) -> usize {
        self.max.load(Relaxed)
    }
    /// The soft limit in pages.
    pub fn high(&self) -> usize {
        self.high.load(Relaxed)
    }
    /// The highest usage seen (`memory.peak`).
    pub fn watermark(&self) -> usize {
        self.watermark.load(Relaxed)
    }
    /// How many charges failed at this level.
    pub fn failcnt(&self) -> usize {
        self.failcnt.load(Relaxed)
    }
}

/// `struct obj_cgroup`: see the module doc.
pub struct ObjCgroup {
    memcg: AtomicPtr<MemCgroup>,
    nr_charged_bytes: AtomicUsize,
    nr_pages: AtomicUsize,
    refcnt: AtomicUsize,
}

impl ObjCgroup {
    const fn new() -> Self {
        Self {
            memcg: AtomicPtr::new(ptr::null_mut()),
            nr_charged_bytes: AtomicUsize::new(0),
            nr_pages: AtomicUsize::new(0),
            refcnt: AtomicUsize::new(1),
        }
    }
    /// The group charged through this objcg now (the parent once its group is gone).
    pub fn memcg(&self) -> &MemCgroup {
        // SAFETY: an objcg always points at a live group: its own, or after removal
        // an ancestor, which its group's reference keeps alive (module doc).
        unsafe { &*self.memcg.load(Acquire) }
    }
    /// Takes a reference. Whoever touches a removed group's objcg holds one: a stock
    /// caching it, or an uncharge in progress. Count updates made while holding it are
    /// releases, so a sweep that sees them also sees the reference (`objcg_try_kill`).
    #[inline]
    fn get(&self) {
        self.refcnt.fetch_add(1, Relaxed);
    }
    #[inline]
    fn put(&self) {
        self.refcnt.fetch_sub(1, Release);
    }
}

/// One named per-cache object count of a group.
#[derive(Clone, Copy)]
struct CacheSlot {
    key: usize,
    name: [u8; MEMCG_NAME_LEN],
    len: u8,
    objects: isize,
}

impl CacheSlot {
    const EMPTY: CacheSlot = CacheSlot {
        key: 0,
        name: [0; MEMCG_NAME_LEN],
        len: 0,
        objects: 0,
    };
}

/// `struct mem_cgroup`: see the module doc.
pub struct MemCgroup {
    name: [u8; MEMCG_NAME_LEN],
    name_len: usize,
    parent: *const MemCgroup,
    /// Pages charged to the group and its descendants.
    pub memory: PageCounter,
    stat: [AtomicIsize; NR_MEMCG_STAT],
    events: [AtomicU64; NR_MEMCG_EVENTS],
    caches: SpinLock<([CacheSlot; MEMCG_CACHE_SLOTS], isize)>,
    objcg: ObjCgroup,
    online: AtomicBool,
    nr_online_children: AtomicUsize,
    /// Link on the zombie list (`MemcgState::lock`).
    next_zombie: AtomicPtr<MemCgroup>,
    /// Link on the list of online groups (`MemcgState::lock`).
    next_group: AtomicPtr<MemCgroup>,
}

// SAFETY: every field is an atomic, a lock, or written once before the group is
// shared (`name`, `parent`); `parent` points at a group kept alive by this one's
// reference on its objcg.
unsafe impl Sync for MemCgroup {}
// SAFETY: as above.
unsafe impl Send for MemCgroup {}

impl MemCgroup {
    const fn new_root() -> Self {
        let mut name = [0; MEMCG_NAME_LEN];
        name[0] = b'/';
        Self {
            name,
            name_len: 1,
            parent: ptr::null(),
            memory: PageCounter::new(),
            stat: [const { AtomicIsize::new(0) }; NR_MEMCG_STAT],
            events: [const { AtomicU64::new(0) }; NR_MEMCG_EVENTS],
            caches: SpinLock::new(([CacheSlot::EMPTY; MEMCG_CACHE_SLOTS], 0)),
            objcg: ObjCgroup::new(),
            online: AtomicBool::new(true),
            nr_online_children: AtomicUsize::new(0),
            next_zombie: AtomicPtr::new(ptr::null_mut()),
            next_group: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The group's name ("/" for the root).
    pub fn name(&self) -> &str {
        core::str::from_utf8(&self.name[..self.name_len]).unwrap_or("?")
    }
    /// The parent group (`None` for the root).
    pub fn parent(&self) -> Option<&MemCgroup> {
        // SAFETY: the parent lives while a child does (module doc).
        unsafe { self.parent.as_ref() }
    }
    /// The objcg that objects charged to this group point to.
    pub fn objcg(&self) -> &ObjCgroup {
        &self.objcg
    }
    /// Whether the group has not been removed.
    pub fn is_online(&self) -> bool {
        self.online.load(Relaxed)
    }
    /// `memory.current` in bytes (pages charged, including pre-charged stock).
    pub fn usage(&self) -> usize {
        self.memory.usage() << PAGE_SHIFT
    }
    /// Sets `memory.max` in bytes (rounded down to pages; `usize::MAX`: no limit).
    /// Like the kernel, lowering it below the usage does not fail; later charges do.
    pub fn set_max(&self, bytes: usize) {
        self.memory.max.store(bytes_to_pages(bytes), Relaxed);
    }
    /// Sets `memory.high` in bytes.
    pub fn set_high(&self, bytes: usize) {
        self.memory.high.store(bytes_to_pages(bytes), Relaxed);
    }
    /// A statistic in bytes (hierarchical; deltas still cached in CPU stocks are not
    /// in it until they are flushed).
    pub fn stat(&self, item: MemcgStat) -> isize {
        self.stat[item as usize].load(Relaxed)
    }
    /// An event count.
    pub fn events(&self, item: MemcgEvent) -> u64 {
        self.events[item as usize].load(Relaxed)
    }
    /// Calls `f(cache name, objects)` for each cache with objects charged to the group
    /// (or its descendants); caches past the slot table come as "other".
    pub fn for_each_cache(&self, mut f: impl FnMut(&str, isize)) {
        let g = self.caches.lock();
        for slot in g.0.iter().filter(|s| s.key != 0 && s.objects != 0) {
            f(
                core::str::from_utf8(&slot.name[..slot.len as usize]).unwrap_or("?"),
                slot.objects,
            );
        }
        if g.1 != 0 {
            f("other", g.1);
        }
    }

    /// The group and its ancestors, up to the root.
    fn ancestors(&self) -> impl Iterator<Item = &MemCgroup> {
        let mut cur: *const MemCgroup = self;
        core::iter::from_fn(move || {
            // SAFETY: ancestors outlive their descendants (module doc).
            let c = unsafe { cur.as_ref()? };
            cur = c.parent;
            Some(c)
        })
    }

    fn add_stat(&self, item: MemcgStat, delta: isize) {
        if delta != 0 {
            for m in self.ancestors() {
                m.stat[item as usize].fetch_add(delta, Relaxed);
            }
        }
    }

    fn add_cache_objects(&self, s: &KmemCache, delta: isize) {
        if delta == 0 {
            return;
        }
        let key = s as *const KmemCache as usize;
        let name = s.config().name().as_bytes();
        for m in self.ancestors() {
            let mut g = m.caches.lock();
            let (slots, other) = &mut *g;
            let slot = match slots.iter().position(|x| x.key == key) {
                Some(i) => Some(i),
                None => slots.iter().position(|x| x.key == 0 || x.objects == 0),
            };
            match slot {
                Some(i) => {
                    let x = &mut slots[i];
                    if x.key != key {
                        *x = CacheSlot::EMPTY;
                        x.key = key;
                        let n = name.len().min(MEMCG_NAME_LEN);
                        x.name[..n].copy_from_slice(&name[..n]);
                        x.len = n as u8;
                    }
                    x.objects += delta;
                }
                None => *other += delta,
            }
        }
    }

    fn count_event(&self, item: MemcgEvent) {
        self.events[item as usize].fetch_add(1, Relaxed);
    }

    /// `page_counter_try_charge` up the hierarchy; on failure, the group whose limit
    /// stopped it (nothing stays charged).
    fn try_charge_counters(&self, nr_pages: usize) -> Result<(), &MemCgroup> {
        for m in self.ancestors() {
            let c = &m.memory;
            let new = c.usage.fetch_add(nr_pages, Relaxed) + nr_pages;
            if new > c.max.load(Relaxed) {
                c.usage.fetch_sub(nr_pages, Relaxed);
                c.failcnt.fetch_add(1, Relaxed);
                for done in self.ancestors().take_while(|d| !ptr::eq(*d, m)) {
                    done.memory.usage.fetch_sub(nr_pages, Relaxed);
                }
                return Err(m);
            }
            if new > c.watermark.load(Relaxed) {
                c.watermark.fetch_max(new, Relaxed);
            }
        }
        Ok(())
    }

    /// `page_counter_uncharge` up the hierarchy.
    fn uncharge_counters(&self, nr_pages: usize) {
        if nr_pages != 0 {
            for m in self.ancestors() {
                m.memory.usage.fetch_sub(nr_pages, Relaxed);
            }
        }
    }

    /// The lowest group at or above this one whose usage is over `memory.high`.
    fn over_high(&self) -> Option<&MemCgroup> {
        self.ancestors()
            .find(|m| m.memory.usage() > m.memory.high())
    }
}

fn bytes_to_pages(bytes: usize) -> usize {
    if bytes == usize::MAX {
        usize::MAX
    } else {
        bytes >> PAGE_SHIFT
    }
}

/// `struct memcg_stock_pcp` (with the obj stock of seed 001): in every CPU area.
/// All-zero is the valid empty state. Only the area's owner touches it.
///
/// Invariants: `cached` is null or a group whose objcg holds a reference for this
/// stock, and `nr_pages` pages are charged to it and unused; `cached_objcg` likewise,
/// with `nr_bytes` pre-charged, unused bytes. Statistics are not counted per object:
/// since the last flush, objects of `stat_cache` worth `stat_base - nr_bytes` bytes
/// were allocated (net) for `cached_objcg` — the fast paths only move `nr_bytes`,
/// and the slow paths that add or remove bytes for other reasons (pages charged or
/// uncharged) move `stat_base` by the same amount. `objcg_pages_delta` counts pages
/// charged through `cached_objcg` not yet added to its `nr_pages`.
#[repr(C, align(64))]
pub struct MemcgStock {
    cached_objcg: AtomicPtr<ObjCgroup>,
    stat_cache: AtomicPtr<KmemCache>,
    nr_bytes: AtomicUsize,
    stat_base: AtomicUsize,
    objcg_pages_delta: AtomicIsize,
    cached: AtomicPtr<MemCgroup>,
    nr_pages: AtomicUsize,
}

impl MemcgStock {
    /// Pre-charged bytes in the stock and whose (for statistics and tests).
    pub fn obj_stock(&self) -> (*const ObjCgroup, usize) {
        (self.cached_objcg.load(Relaxed), self.nr_bytes.load(Relaxed))
    }
    /// Pre-charged pages in the stock and whose.
    pub fn page_stock(&self) -> (*const MemCgroup, usize) {
        (self.cached.load(Relaxed), self.nr_pages.load(Relaxed))
    }
}

/// Bytes of objects allocated (net) since the stock's last statistics flush:
/// `stat_base - nr_bytes`, in wrapping arithmetic (either may have moved past the
/// other).
#[inline]
fn stat_lag(st: &MemcgStock) -> isize {
    st.stat_base
        .load(Relaxed)
        .wrapping_sub(st.nr_bytes.load(Relaxed)) as isize
}

#[inline]
fn set(a: &AtomicUsize, v: usize) {
    a.store(v, Relaxed);
}

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

/// The memory controller's global state, in [`Kmem`].
pub struct MemcgState {
    root: MemCgroup,
    stock_offset: AtomicUsize,
    /// `stock_offset` while stocks are enabled, else 0 (one load on the fast path).
    stock_active: AtomicUsize,
    lock: SpinLock<ZombieList>,
    nr_groups: AtomicUsize,
}

struct ZombieList {
    head: *mut MemCgroup,
    len: usize,
    /// Online groups but the root, newest first.
    groups: *mut MemCgroup,
}
// SAFETY: only touched under `MemcgState::lock`; the groups it links are alive.
unsafe impl Send for ZombieList {}

impl MemcgState {
    pub(crate) const fn new() -> Self {
        Self {
            root: MemCgroup::new_root(),
            stock_offset: AtomicUsize::new(0),
            stock_active: AtomicUsize::new(0),
            lock: SpinLock::new(ZombieList {
                head: ptr::null_mut(),
                len: 0,
                groups: ptr::null_mut(),
            }),
            nr_groups: AtomicUsize::new(0),
        }
    }
}

/// Whether a slab has an objcg vector (some of its objects may be charged).
#[inline]
pub fn has_obj_exts(slab: NonNull<Page>) -> bool {
    // SAFETY: the head page of a slab found by a lookup: descriptors of online
    // sections are valid.
    memcg_data(unsafe { slab.as_ref() }) & MEMCG_DATA_OBJEXTS != 0
}

/// The memcg word of a page block (`page->memcg_data`).
#[inline]
fn memcg_data(head: &Page) -> usize {
    head.private.load(Acquire)
}

impl<P: Platform> Kmem<P> {
    /// Reserves the stock in every CPU area and points the root's objcg at the root
    /// (called by [`Kmem::init`]).
    pub(crate) fn memcg_init(&'static self) -> bool {
        let root = &self.memcg.root;
        root.objcg
            .memcg
            .store(root as *const MemCgroup as *mut MemCgroup, Release);
        match self
            .pages
            .percpu()
            .alloc(core::mem::size_of::<MemcgStock>(), 64)
        {
            Some(off) => {
                self.memcg.stock_offset.store(off, Relaxed);
                self.memcg.stock_active.store(off, Relaxed);
                true
            }
            None => false,
        }
    }

    /// The root group: every charge reaches it; it has no limit unless one is set.
    pub fn root_mem_cgroup(&self) -> &MemCgroup {
        &self.memcg.root
    }

    /// Groups created and not yet freed (online and zombies), not counting the root.
    pub fn nr_mem_cgroups(&self) -> usize {
        self.memcg.nr_groups.load(Relaxed)
    }

    /// Calls `f` on the root and every online group (newest first), under the
    /// groups' lock: `f` may allocate but must not create or remove groups.
    pub fn for_each_mem_cgroup(&self, mut f: impl FnMut(&MemCgroup)) {
        let l = self.memcg.lock.lock();
        f(&self.memcg.root);
        let mut p = l.groups;
        // SAFETY: online groups on the list are alive while the lock is held.
        while let Some(g) = unsafe { p.as_ref() } {
            f(g);
            p = g.next_group.load(Relaxed);
        }
    }

    /// Removed groups still kept for their charged objects or references.
    pub fn nr_zombie_mem_cgroups(&self) -> usize {
        self.memcg.lock.lock().len
    }

    /// Turns the per-CPU stock on or off (off: every charge and statistic goes to the
    /// shared counters, as before seed 001's patches; for the `memcg` benchmark).
    /// Drains the caller's stock.
    pub fn set_memcg_stock(&self, cpu: Option<CpuRef<'_>>, enabled: bool) {
        if let Some(c) = cpu {
            self.memcg_drain_stock(c);
        }
        let off = self.memcg.stock_offset.load(Relaxed);
        self.memcg
            .stock_active
            .store(if enabled { off } else { 0 }, Relaxed);
    }

    #[inline]
    fn stock<'c>(&self, cpu: Option<CpuRef<'c>>) -> Option<&'c MemcgStock> {
        let c = cpu?;
        let off = self.memcg.stock_active.load(Relaxed);
        // SAFETY: `off` was reserved in every CPU area by `memcg_init` (all-zero is
        // the empty stock); the caller owns the area.
        (off != 0).then(|| unsafe { &*c.area().ptr::<MemcgStock>(off) })
    }

    /// The stock of `area` (for statistics: reads only).
    pub fn memcg_stock_of<'c>(&self, area: &'c crate::percpu::CpuArea) -> Option<&'c MemcgStock> {
        let off = self.memcg.stock_offset.load(Relaxed);
        // SAFETY: as in `stock`; shared access reads atomics only.
        (off != 0).then(|| unsafe { &*area.ptr::<MemcgStock>(off) })
    }

    // -------------------------------------------------------------------------
    // Groups.

    /// `mem_cgroup_css_alloc`: a new group under `parent`, named `name` (cut to
    /// [`MEMCG_NAME_LEN`] bytes). Its descriptor comes from the plain kmalloc caches.
    pub fn mem_cgroup_create(
        &self,
        cpu: Option<CpuRef<'_>>,
        parent: &MemCgroup,
        name: &str,
    ) -> Result<&MemCgroup, MemcgError> {
        if !parent.is_online() {
            return Err(MemcgError::Invalid);
        }
        self.memcg_sweep(cpu);
        let p = self
            .kmalloc(cpu, core::mem::size_of::<MemCgroup>(), Gfp::KERNEL)
            .ok_or(MemcgError::NoMemory)?
            .cast::<MemCgroup>();
        let mut g = MemCgroup::new_root();
        let n = name.len().min(MEMCG_NAME_LEN);
        g.name = [0; MEMCG_NAME_LEN];
        g.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        g.name_len = n;
        g.parent = parent;
        // SAFETY: a fresh kmalloc object big enough and aligned for a MemCgroup
        // (kmalloc-N objects are aligned to N's largest power-of-two divisor ≥ 8; the
        // struct's alignment is 8).
        unsafe { p.as_ptr().write(g) };
        // SAFETY: just written; lives until the sweep frees it.
        let g = unsafe { &*p.as_ptr() };
        g.objcg.memcg.store(p.as_ptr(), Release);
        parent.objcg.get();
        parent.nr_online_children.fetch_add(1, Relaxed);
        self.memcg.nr_groups.fetch_add(1, Relaxed);
        let mut l = self.memcg.lock.lock();
        g.next_group.store(l.groups, Relaxed);
        l.groups = p.as_ptr();
        Ok(g)
    }

    /// `rmdir` of a group: takes it offline and drops its reference. Objects still
    /// charged to it are reparented: its objcg points at the parent from now on, so
    /// their frees uncharge the parent (whose usage included them all along). The
    /// descriptor is freed once nothing refers to it (at once if it is empty).
    ///
    /// # Safety
    /// `cg` came from [`Kmem::mem_cgroup_create`] of this allocator, was not removed
    /// before, and nobody uses it afterwards (no thread has it as its active group,
    /// no reference to it is kept).
    pub unsafe fn mem_cgroup_remove(
        &self,
        cpu: Option<CpuRef<'_>>,
        cg: &MemCgroup,
    ) -> Result<(), MemcgError> {
        let Some(parent) = cg.parent() else {
            return Err(MemcgError::Invalid);
        };
        if cg.nr_online_children.load(Relaxed) != 0 {
            return Err(MemcgError::Busy);
        }
        if let Some(c) = cpu {
            self.memcg_drain_stock(c);
        }
        {
            let mut z = self.memcg.lock.lock();
            // Off the list of online groups.
            let me = cg as *const MemCgroup as *mut MemCgroup;
            if z.groups == me {
                z.groups = cg.next_group.load(Relaxed);
            } else {
                let mut p = z.groups;
                // SAFETY: online groups on the list are alive (under the lock).
                while let Some(g) = unsafe { p.as_ref() } {
                    if g.next_group.load(Relaxed) == me {
                        g.next_group.store(cg.next_group.load(Relaxed), Relaxed);
                        break;
                    }
                    p = g.next_group.load(Relaxed);
                }
            }
            cg.online.store(false, Relaxed);
            parent.nr_online_children.fetch_sub(1, Relaxed);
            // memcg_reparent_objcgs.
            cg.objcg
                .memcg
                .store(parent as *const MemCgroup as *mut MemCgroup, Release);
            cg.next_zombie.store(z.head, Relaxed);
            z.head = cg as *const MemCgroup as *mut MemCgroup;
            z.len += 1;
        }
        cg.objcg.put();
        self.pages.cpu_areas().request_all(DRAIN_STOCK);
        self.memcg_sweep(cpu);
        Ok(())
    }

    /// Frees every zombie that nothing refers to and that has no charged object.
    fn memcg_sweep(&self, cpu: Option<CpuRef<'_>>) {
        loop {
            let mut freed = None;
            {
                let mut z = self.memcg.lock.lock();
                let mut link: *mut MemCgroup = ptr::null_mut();
                let mut p = z.head;
                while !p.is_null() {
                    // SAFETY: zombies on the list are alive (freed only here, after
                    // being unlinked under the lock).
                    let g = unsafe { &*p };
                    let next = g.next_zombie.load(Relaxed);
                    if Self::objcg_try_kill(&g.objcg) {
                        if link.is_null() {
                            z.head = next;
                        } else {
                            // SAFETY: `link` is a zombie on the list (as above).
                            unsafe { &*link }.next_zombie.store(next, Relaxed);
                        }
                        z.len -= 1;
                        freed = Some(g);
                        break;
                    }
                    link = p;
                    p = next;
                }
            }
            let Some(g) = freed else { return };
            // Its remaining charge: pages with no object in them.
            let pages = g.objcg.nr_pages.load(Relaxed);
            g.objcg.memcg().uncharge_counters(pages);
            // SAFETY: a zombie's parent is alive while the zombie holds its reference.
            let parent = unsafe { &*g.parent };
            self.memcg.nr_groups.fetch_sub(1, Relaxed);
            // SAFETY: allocated by `mem_cgroup_create` with kmalloc; nothing refers
            // to it (refcount dead, no charged object, unlinked).
            unsafe { self.kfree(cpu, g as *const MemCgroup as *mut u8) };
            parent.objcg.put();
        }
    }

    /// Claims a zombie's objcg for freeing if it has no reference and no charged
    /// object; else leaves it as it was.
    fn objcg_try_kill(objcg: &ObjCgroup) -> bool {
        if objcg
            .refcnt
            .compare_exchange(0, OBJCG_DEAD, Acquire, Relaxed)
            .is_err()
        {
            return false;
        }
        // Every past holder's updates are visible (its put was a release). A new
        // holder only comes to uncharge an object, which keeps the counts apart until
        // it has done so — and then it still holds its reference: so the group is
        // empty only if the counts match *and* nobody took a reference meanwhile
        // (`loom_memcg.rs` models this).
        let pages = objcg.nr_pages.load(Acquire);
        let spare = objcg.nr_charged_bytes.load(Acquire);
        if pages << PAGE_SHIFT == spare && objcg.refcnt.load(Acquire) == OBJCG_DEAD {
            return true;
        }
        objcg.refcnt.fetch_sub(OBJCG_DEAD, Relaxed);
        false
    }

    // -------------------------------------------------------------------------
    // Page charges (try_charge_memcg, the page stock).

    /// Charges `nr_pages` to `memcg`: from the stock, else a batch from the counters
    /// (the excess goes to the stock), else reclaim and retry, else fail (events
    /// `max` and `oom`).
    fn try_charge_memcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        memcg: &MemCgroup,
        nr_pages: usize,
    ) -> bool {
        let stock = self.stock(cpu);
        if let Some(st) = stock {
            if ptr::eq(st.cached.load(Relaxed), memcg) {
                let have = st.nr_pages.load(Relaxed);
                if have >= nr_pages {
                    set(&st.nr_pages, have - nr_pages);
                    return true;
                }
            }
        }
        let batch = if stock.is_some() {
            nr_pages.max(MEMCG_CHARGE_BATCH)
        } else {
            nr_pages
        };
        let mut reclaimed = false;
        loop {
            let got = match memcg.try_charge_counters(batch) {
                Ok(()) => Ok(batch),
                // The batch does not fit: exactly what is needed may.
                Err(_) if batch > nr_pages => memcg.try_charge_counters(nr_pages).map(|_| nr_pages),
                Err(limited) => Err(limited),
            };
            let limited = match got {
                Ok(got) => {
                    if got > nr_pages {
                        if let Some(st) = stock {
                            self.refill_stock(st, memcg, got - nr_pages);
                        }
                    }
                    if let Some(high) = memcg.over_high() {
                        high.count_event(MemcgEvent::High);
                        self.reclaim_high(cpu);
                    }
                    return true;
                }
                Err(limited) => limited,
            };
            // Over memory.max at `limited` (this group or an ancestor).
            limited.count_event(MemcgEvent::Max);
            if reclaimed {
                memcg.count_event(MemcgEvent::Oom);
                return false;
            }
            // Reclaim: our stocks go back to their groups; others are asked to drain.
            if let Some(c) = cpu {
                self.memcg_drain_stock(c);
            }
            self.pages.cpu_areas().request_all(DRAIN_STOCK);
            reclaimed = true;
        }
    }

    /// `memory.high` reclaim: the stocks hold pre-charged memory; give ours back and
    /// ask the other CPU areas for theirs.
    #[cold]
    fn reclaim_high(&self, cpu: Option<CpuRef<'_>>) {
        if let Some(c) = cpu {
            self.memcg_drain_stock(c);
        }
        self.pages.cpu_areas().request_all(DRAIN_STOCK);
    }

    /// Uncharges `nr_pages` from `memcg`: into the stock when it caches `memcg` (or
    /// can), else straight from the counters.
    fn uncharge_memcg(&self, cpu: Option<CpuRef<'_>>, memcg: &MemCgroup, nr_pages: usize) {
        match self.stock(cpu) {
            Some(st) => self.refill_stock(st, memcg, nr_pages),
            None => memcg.uncharge_counters(nr_pages),
        }
    }

    /// `refill_stock`: puts `nr_pages` charged to `memcg` in the stock; a stock over
    /// the batch goes back to the counters.
    fn refill_stock(&self, st: &MemcgStock, memcg: &MemCgroup, nr_pages: usize) {
        if !ptr::eq(st.cached.load(Relaxed), memcg) {
            self.drain_page_stock(st);
            memcg.objcg.get();
            st.cached
                .store(memcg as *const MemCgroup as *mut MemCgroup, Relaxed);
        }
        let n = st.nr_pages.load(Relaxed) + nr_pages;
        set(&st.nr_pages, n);
        if n > MEMCG_CHARGE_BATCH {
            self.drain_page_stock(st);
        }
    }

    /// `drain_stock`: the page stock's pages go back to their group.
    fn drain_page_stock(&self, st: &MemcgStock) {
        let old = st.cached.load(Relaxed);
        // SAFETY: a cached group is kept alive by the stock's reference on its objcg.
        if let Some(m) = unsafe { old.as_ref() } {
            m.uncharge_counters(st.nr_pages.load(Relaxed));
            set(&st.nr_pages, 0);
            st.cached.store(ptr::null_mut(), Relaxed);
            m.objcg.put();
        }
    }

    // -------------------------------------------------------------------------
    // Byte charges (obj_cgroup_charge, the obj stock).

    /// `obj_cgroup_charge` for an object of `s`: charges `size` bytes to `objcg` and
    /// counts the object in its group's statistics; false if over the limit. The fast
    /// path is one subtraction in the stock.
    #[inline]
    pub fn obj_cgroup_charge(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        s: &KmemCache,
        size: usize,
    ) -> bool {
        if let Some(st) = self.stock(cpu) {
            // consume_obj_stock
            let have = st.nr_bytes.load(Relaxed);
            if ptr::eq(st.cached_objcg.load(Relaxed), objcg)
                && ptr::eq(st.stat_cache.load(Relaxed), s)
                && have >= size
            {
                set(&st.nr_bytes, have - size);
                return true;
            }
        }
        self.obj_cgroup_charge_slow(cpu, objcg, s, size)
    }

    /// `obj_cgroup_uncharge` for an object of `s`: gives `size` bytes back. The fast
    /// path is one addition in the stock.
    #[inline]
    pub fn obj_cgroup_uncharge(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        s: &KmemCache,
        size: usize,
    ) {
        if let Some(st) = self.stock(cpu) {
            // refill_obj_stock, while the stock stays within a page.
            let n = st.nr_bytes.load(Relaxed) + size;
            if ptr::eq(st.cached_objcg.load(Relaxed), objcg)
                && ptr::eq(st.stat_cache.load(Relaxed), s)
                && n <= PAGE_SIZE
            {
                set(&st.nr_bytes, n);
                return;
            }
        }
        self.obj_cgroup_uncharge_slow(cpu, objcg, s, size)
    }

    #[cold]
    #[inline(never)]
    fn obj_cgroup_charge_slow(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        s: &KmemCache,
        size: usize,
    ) -> bool {
        if let Some(c) = cpu {
            self.check_stock_drain(c);
        }
        let Some(st) = self.stock(cpu) else {
            if !self.obj_cgroup_charge_shared(cpu, objcg, size) {
                return false;
            }
            self.mod_objcg_state_direct(objcg, s, size as isize);
            return true;
        };
        loop {
            self.obj_stock_prepare(st, objcg, s);
            let have = st.nr_bytes.load(Relaxed);
            if have >= size {
                set(&st.nr_bytes, have - size);
                self.maybe_flush_stock_stats(st);
                return true;
            }
            // Whole pages for the rest; what they hold beyond the object stays in the
            // stock (no uncharge right after a charge: seed 001's allow_uncharge).
            let nr_pages = (size - have).div_ceil(PAGE_SIZE);
            if !self.obj_cgroup_charge_pages(cpu, objcg, nr_pages) {
                return false;
            }
            // Charging may have reclaimed (drained) the stock: cache `objcg` again.
            self.obj_stock_prepare(st, objcg, s);
            let bytes = nr_pages << PAGE_SHIFT;
            set(&st.nr_bytes, st.nr_bytes.load(Relaxed) + bytes);
            set(
                &st.stat_base,
                st.stat_base.load(Relaxed).wrapping_add(bytes),
            );
        }
    }

    #[cold]
    #[inline(never)]
    fn obj_cgroup_uncharge_slow(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        s: &KmemCache,
        size: usize,
    ) {
        let Some(st) = self.stock(cpu) else {
            // Shared: spare bytes go to the objcg; whole pages back to the group. A
            // reference keeps a removed group's objcg for as long as we touch it (the
            // sweep may find it empty as soon as the bytes are back).
            objcg.get();
            self.mod_objcg_state_direct(objcg, s, -(size as isize));
            let total = objcg.nr_charged_bytes.fetch_add(size, AcqRel) + size;
            if total >= PAGE_SIZE {
                self.uncharge_shared_excess(cpu, objcg);
            }
            objcg.put();
            return;
        };
        self.obj_stock_prepare(st, objcg, s);
        let n = st.nr_bytes.load(Relaxed) + size;
        // Keep less than a page; whole pages go back (only the excess: the objcg stays
        // cached, seed 001's patch 3).
        let pages = n >> PAGE_SHIFT;
        set(&st.nr_bytes, n & (PAGE_SIZE - 1));
        set(
            &st.stat_base,
            st.stat_base.load(Relaxed).wrapping_sub(pages << PAGE_SHIFT),
        );
        self.maybe_flush_stock_stats(st);
        self.obj_cgroup_uncharge_pages(cpu, objcg, pages);
    }

    /// Makes the stock cache `objcg` (draining another) with its statistics counting
    /// objects of `s` (flushing another cache's).
    fn obj_stock_prepare(&self, st: &MemcgStock, objcg: &ObjCgroup, s: &KmemCache) {
        if !ptr::eq(st.cached_objcg.load(Relaxed), objcg) {
            self.switch_obj_stock(st, objcg);
        }
        if !ptr::eq(st.stat_cache.load(Relaxed), s) {
            self.flush_stock_stats(st);
            st.stat_cache
                .store(s as *const KmemCache as *mut KmemCache, Relaxed);
        }
    }

    /// Flushes the stock's statistics once they lag by a charge batch.
    fn maybe_flush_stock_stats(&self, st: &MemcgStock) {
        let lag = stat_lag(st);
        if lag.unsigned_abs() >= MEMCG_CHARGE_BATCH << PAGE_SHIFT {
            self.flush_stock_stats(st);
        }
    }

    /// Without a stock: bytes come from the objcg's shared spare bytes (atomically),
    /// else from newly charged pages.
    fn obj_cgroup_charge_shared(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        size: usize,
    ) -> bool {
        let mut cur = objcg.nr_charged_bytes.load(Relaxed);
        while cur >= size {
            match objcg
                .nr_charged_bytes
                .compare_exchange_weak(cur, cur - size, AcqRel, Relaxed)
            {
                Ok(_) => return true,
                Err(v) => cur = v,
            }
        }
        let nr_pages = size.div_ceil(PAGE_SIZE);
        if !self.obj_cgroup_charge_pages(cpu, objcg, nr_pages) {
            return false;
        }
        let spare = (nr_pages << PAGE_SHIFT) - size;
        if spare != 0 {
            objcg.nr_charged_bytes.fetch_add(spare, AcqRel);
        }
        true
    }

    /// `obj_cgroup_charge_pages`: whole pages to the objcg's group.
    fn obj_cgroup_charge_pages(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        nr_pages: usize,
    ) -> bool {
        if !self.try_charge_memcg(cpu, objcg.memcg(), nr_pages) {
            return false;
        }
        self.objcg_pages_add(cpu, objcg, nr_pages as isize);
        true
    }

    /// Counts pages charged through `objcg` (negative: uncharged): in the stock when it
    /// caches `objcg`, else on the objcg (wrapping: the sum over stocks and objcg is
    /// exact once every stock has drained).
    fn objcg_pages_add(&self, cpu: Option<CpuRef<'_>>, objcg: &ObjCgroup, delta: isize) {
        match self.stock(cpu) {
            Some(st) if ptr::eq(st.cached_objcg.load(Relaxed), objcg) => {
                let d = st.objcg_pages_delta.load(Relaxed) + delta;
                st.objcg_pages_delta.store(d, Relaxed);
            }
            _ => {
                objcg.nr_pages.fetch_add(delta as usize, AcqRel);
            }
        }
    }

    /// `obj_cgroup_uncharge_pages`.
    fn obj_cgroup_uncharge_pages(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        nr_pages: usize,
    ) {
        if nr_pages == 0 {
            return;
        }
        // Held while we touch it: once the pages are off its count, the sweep may find
        // a removed group's objcg empty. (A stock caching it holds a reference already,
        // and keeps it through this.)
        let cached =
            matches!(self.stock(cpu), Some(st) if ptr::eq(st.cached_objcg.load(Relaxed), objcg));
        if !cached {
            objcg.get();
        }
        let memcg = objcg.memcg();
        self.objcg_pages_add(cpu, objcg, -(nr_pages as isize));
        self.uncharge_memcg(cpu, memcg, nr_pages);
        if !cached {
            objcg.put();
        }
    }

    #[cold]
    fn uncharge_shared_excess(&self, cpu: Option<CpuRef<'_>>, objcg: &ObjCgroup) {
        let mut cur = objcg.nr_charged_bytes.load(Relaxed);
        while cur >= PAGE_SIZE {
            let pages = cur >> PAGE_SHIFT;
            match objcg.nr_charged_bytes.compare_exchange_weak(
                cur,
                cur - (pages << PAGE_SHIFT),
                AcqRel,
                Relaxed,
            ) {
                Ok(_) => {
                    self.obj_cgroup_uncharge_pages(cpu, objcg, pages);
                    return;
                }
                Err(v) => cur = v,
            }
        }
    }

    /// `drain_obj_stock` then cache `objcg`, taking back its spare bytes.
    #[cold]
    #[inline(never)]
    fn switch_obj_stock(&self, st: &MemcgStock, objcg: &ObjCgroup) {
        self.drain_obj_stock(st);
        objcg.get();
        st.cached_objcg
            .store(objcg as *const ObjCgroup as *mut ObjCgroup, Relaxed);
        let spare = if objcg.nr_charged_bytes.load(Relaxed) != 0 {
            objcg.nr_charged_bytes.swap(0, AcqRel)
        } else {
            0
        };
        set(&st.nr_bytes, spare);
        set(&st.stat_base, spare);
    }

    /// `drain_obj_stock`: statistics to the group, whole pages uncharged, the rest to
    /// the objcg's spare bytes; the reference is dropped.
    fn drain_obj_stock(&self, st: &MemcgStock) {
        let old = st.cached_objcg.load(Relaxed);
        // SAFETY: a cached objcg is kept alive by the stock's reference.
        let Some(objcg) = (unsafe { old.as_ref() }) else {
            return;
        };
        self.flush_stock_stats(st);
        st.stat_cache.store(ptr::null_mut(), Relaxed);
        let n = st.nr_bytes.load(Relaxed);
        let pages = n >> PAGE_SHIFT;
        let delta = st.objcg_pages_delta.load(Relaxed) - pages as isize;
        if delta != 0 {
            objcg.nr_pages.fetch_add(delta as usize, AcqRel);
        }
        st.objcg_pages_delta.store(0, Relaxed);
        if pages != 0 {
            objcg.memcg().uncharge_counters(pages);
        }
        let rem = n & (PAGE_SIZE - 1);
        set(&st.nr_bytes, 0);
        set(&st.stat_base, 0);
        st.cached_objcg.store(ptr::null_mut(), Relaxed);
        if rem != 0 && objcg.nr_charged_bytes.fetch_add(rem, AcqRel) + rem >= PAGE_SIZE {
            // Spare bytes from several stocks make a page: give it back.
            self.uncharge_shared_excess(None, objcg);
        }
        objcg.put();
    }

    /// `__mod_objcg_mlstate` for the stock: the objects of `stat_cache` allocated
    /// (net) since the last flush go to the group's statistics.
    fn flush_stock_stats(&self, st: &MemcgStock) {
        let bytes = stat_lag(st);
        set(&st.stat_base, st.nr_bytes.load(Relaxed));
        let objcg = st.cached_objcg.load(Relaxed);
        let cache = st.stat_cache.load(Relaxed);
        // SAFETY: the cached objcg is kept alive by the stock's reference; the stock
        // names a cache only while objects of it counted here are live or the count is
        // zero (a cache with live objects cannot be destroyed).
        let (Some(objcg), Some(s)) = (unsafe { objcg.as_ref() }, unsafe { cache.as_ref() }) else {
            return;
        };
        if bytes != 0 {
            self.mod_objcg_state_direct(objcg, s, bytes);
        }
    }

    /// `mod_objcg_state` without the stock: `bytes` of objects of `s` (negative:
    /// freed) straight into the group's statistics.
    fn mod_objcg_state_direct(&self, objcg: &ObjCgroup, s: &KmemCache, bytes: isize) {
        let cfg = s.config();
        let i = cfg.flags.contains(SlabFlags::RECLAIM_ACCOUNT) as usize;
        let memcg = objcg.memcg();
        memcg.add_stat(STAT_OF_DELTA[i], bytes);
        memcg.add_cache_objects(s, bytes / cfg.size as isize);
    }

    /// Drains the caller's stock: pages and bytes back to their groups, statistics
    /// flushed (on thread exit, on request, before reading exact statistics).
    pub fn memcg_drain_stock(&self, c: CpuRef<'_>) {
        let off = self.memcg.stock_offset.load(Relaxed);
        if off == 0 {
            return;
        }
        // SAFETY: as in `stock` (regardless of whether stocks are enabled now).
        let st = unsafe { &*c.area().ptr::<MemcgStock>(off) };
        self.drain_obj_stock(st);
        self.drain_page_stock(st);
        c.area().drain_request.fetch_and(!DRAIN_STOCK, Relaxed);
    }

    #[inline]
    fn check_stock_drain(&self, c: CpuRef<'_>) {
        if c.area().drain_request.load(Relaxed) & DRAIN_STOCK != 0 {
            self.memcg_drain_stock(c);
        }
    }

    // -------------------------------------------------------------------------
    // Slab hooks.

    /// `memcg_slab_post_alloc_hook`: records `objcg` for `obj` (charged already) in
    /// its slab's vector and counts it. False if the vector could not be allocated
    /// (the caller uncharges and frees the object).
    fn memcg_slab_post_alloc_hook(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        obj: NonNull<u8>,
        objcg: &ObjCgroup,
    ) -> bool {
        let cfg = s.config();
        let base = obj.as_ptr() as usize & !(cfg.slab_bytes() - 1);
        // SAFETY: the head page of the live slab holding the object we just got (its
        // section is online while the slab lives).
        let h = unsafe { &*self.pages.virt_to_page_raw(base as *const u8) };
        let mut data = memcg_data(h);
        if data & MEMCG_DATA_OBJEXTS == 0 {
            match self.alloc_slab_obj_exts(cpu, s, h) {
                Some(d) => data = d,
                None => return false,
            }
        }
        let vec = (data & !MEMCG_DATA_MASK) as *const AtomicPtr<ObjCgroup>;
        let idx = cfg.obj_to_index(obj.as_ptr() as usize - base);
        // SAFETY: the vector has `objects` slots; `idx` < objects for an object of the
        // slab. The slot is the object's: only its owner (us) writes it.
        unsafe { &*vec.add(idx) }.store(objcg as *const ObjCgroup as *mut ObjCgroup, Relaxed);
        true
    }

    /// `alloc_slab_obj_exts`: the slab's objcg vector, from the plain kmalloc caches.
    #[cold]
    #[inline(never)]
    fn alloc_slab_obj_exts(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        h: &Page,
    ) -> Option<usize> {
        let n = s.config().objects;
        let v = self.kcalloc(cpu, n, core::mem::size_of::<usize>(), Gfp::KERNEL)?;
        let new = v.as_ptr() as usize | MEMCG_DATA_OBJEXTS;
        // Another context may have set one (a slab can change hands): keep theirs.
        match h.private.compare_exchange(0, new, AcqRel, Acquire) {
            Ok(_) => Some(new),
            Err(cur) if cur & MEMCG_DATA_OBJEXTS != 0 => {
                // SAFETY: our unused vector.
                unsafe { self.kfree(cpu, v.as_ptr()) };
                Some(cur)
            }
            Err(_) => {
                // A stale word (left from the page allocator): replace it.
                h.private.store(new, Release);
                Some(new)
            }
        }
    }

    /// `memcg_slab_free_hook`: the object's objcg, if any, is uncharged. Called before
    /// the object is freed (after that another context may reuse its slot). Inline:
    /// for a slab without objcg vector it is one load and a branch.
    #[inline(always)]
    pub(crate) fn memcg_slab_free_hook(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        head: &Page,
        obj: usize,
    ) {
        let data = memcg_data(head);
        if data & MEMCG_DATA_OBJEXTS == 0 {
            return;
        }
        self.memcg_slab_free_hook_exts(cpu, s, data, obj);
    }

    #[inline]
    fn memcg_slab_free_hook_exts(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        data: usize,
        obj: usize,
    ) {
        let cfg = s.config();
        let vec = (data & !MEMCG_DATA_MASK) as *const AtomicPtr<ObjCgroup>;
        let idx = cfg.obj_to_index(obj & (cfg.slab_bytes() - 1));
        if idx >= cfg.objects {
            return;
        }
        // SAFETY: `idx` < objects, the vector's length; the slot belongs to the object
        // the caller frees.
        let slot = unsafe { &*vec.add(idx) };
        let p = slot.load(Relaxed);
        // SAFETY: a non-null slot names the objcg the object is charged to, kept alive
        // by that charge.
        let Some(objcg) = (unsafe { p.as_ref() }) else {
            return;
        };
        slot.store(ptr::null_mut(), Relaxed);
        self.obj_cgroup_uncharge(cpu, objcg, s, cfg.size);
    }

    // -------------------------------------------------------------------------
    // Accounted allocations.

    /// `kmem_cache_alloc` charged to `objcg`: `None` when memory runs out or the
    /// group (or an ancestor) is at `memory.max`. The boot caches and plain kmalloc
    /// caches are never accounted (objcg vectors come from them): objects of those
    /// are allocated uncharged.
    pub fn kmem_cache_alloc_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        if self.is_unaccountable(s) {
            return self.slub().alloc(cpu, s, gfp);
        }
        self.slab_alloc_charged(cpu, s, gfp, objcg)
    }

    /// Charge, allocate, record the objcg (`memcg_slab_pre/post_alloc_hook`).
    #[inline]
    fn slab_alloc_charged(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        let size = s.config().size;
        if !self.obj_cgroup_charge(cpu, objcg, s, size) {
            return None;
        }
        let Some(obj) = self.slub().alloc(cpu, s, gfp) else {
            self.obj_cgroup_uncharge(cpu, objcg, s, size);
            return None;
        };
        if !self.memcg_slab_post_alloc_hook(cpu, s, obj, objcg) {
            self.obj_cgroup_uncharge(cpu, objcg, s, size);
            // SAFETY: the object we just allocated.
            unsafe { self.slub().free(cpu, s, obj) };
            return None;
        }
        Some(obj)
    }

    /// Whether objects of `s` are never charged: the plain kmalloc caches and the
    /// `kmem_cache` cache (their objects back the accounting itself).
    fn is_unaccountable(&self, s: &KmemCache) -> bool {
        let p = s as *const KmemCache as usize;
        let plain = self.kmalloc[0].as_ptr_range();
        (plain.start as usize..plain.end as usize).contains(&p) || self.is_boot_cache(s)
    }

    /// `kmalloc` charged to `objcg` (from the `kmalloc-cg-*` caches, or whole pages
    /// for large sizes).
    #[inline]
    pub fn kmalloc_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        size: usize,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        match crate::kmalloc::kmalloc_index(size) {
            // The kmalloc-cg caches are always accountable.
            Some(i) => self.slab_alloc_charged(cpu, &self.kmalloc[1][i], gfp, objcg),
            None => self.kmalloc_large_objcg(cpu, size, gfp, objcg),
        }
    }

    #[cold]
    #[inline(never)]
    fn kmalloc_large_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        size: usize,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        if size > crate::kmalloc::KMALLOC_MAX_SIZE {
            return None;
        }
        let order = crate::kmalloc::order_for_size(size);
        let page = self.alloc_pages_objcg(cpu, gfp | Gfp::COMP, order, objcg)?;
        Some(self.pages.page_address(page))
    }

    /// `alloc_pages` with `__GFP_ACCOUNT`: 2^`order` pages charged to `objcg`. Free
    /// them with [`Kmem::free_pages`] (which uncharges).
    pub fn alloc_pages_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        gfp: Gfp,
        order: usize,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<Page>> {
        let nr = 1usize << order;
        if !self.obj_cgroup_charge_pages(cpu, objcg, nr) {
            return None;
        }
        let Some(page) = self.pages.alloc_pages(cpu, gfp, order) else {
            self.obj_cgroup_uncharge_pages(cpu, objcg, nr);
            return None;
        };
        // SAFETY: the head of the block just allocated: its descriptor is ours.
        let h = unsafe { page.as_ref() };
        h.private.store(
            objcg as *const ObjCgroup as usize | MEMCG_DATA_KMEM,
            Release,
        );
        objcg
            .memcg()
            .add_stat(MemcgStat::KmemPages, (nr << PAGE_SHIFT) as isize);
        Some(page)
    }

    /// The objcg an accounted page block is charged to.
    pub fn page_objcg(&self, head: NonNull<Page>) -> Option<&ObjCgroup> {
        // SAFETY: descriptors of online sections are valid.
        let data = memcg_data(unsafe { head.as_ref() });
        if data & MEMCG_DATA_KMEM == 0 {
            return None;
        }
        // SAFETY: the word holds the objcg charged for the block, kept alive by it.
        Some(unsafe { &*((data & !MEMCG_DATA_MASK) as *const ObjCgroup) })
    }

    /// Uncharges an accounted page block of 2^`order` pages (before it is freed).
    pub(crate) fn memcg_kmem_uncharge_page(
        &self,
        cpu: Option<CpuRef<'_>>,
        head: NonNull<Page>,
        order: usize,
    ) {
        let Some(objcg) = self.page_objcg(head) else {
            return;
        };
        // SAFETY: as in `page_objcg`.
        unsafe { head.as_ref() }.private.store(0, Release);
        let nr = 1usize << order;
        objcg
            .memcg()
            .add_stat(MemcgStat::KmemPages, -((nr << PAGE_SHIFT) as isize));
        self.obj_cgroup_uncharge_pages(cpu, objcg, nr);
    }

    /// Charges `bytes` of memory kept outside the page allocator (direct mappings)
    /// to `objcg`, in whole pages; false if over the limit.
    pub fn memcg_charge_external(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        bytes: usize,
    ) -> bool {
        let nr = bytes.div_ceil(PAGE_SIZE);
        if !self.obj_cgroup_charge_pages(cpu, objcg, nr) {
            return false;
        }
        objcg
            .memcg()
            .add_stat(MemcgStat::KmemPages, (nr << PAGE_SHIFT) as isize);
        true
    }

    /// Undoes [`Kmem::memcg_charge_external`].
    pub fn memcg_uncharge_external(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        bytes: usize,
    ) {
        let nr = bytes.div_ceil(PAGE_SIZE);
        objcg
            .memcg()
            .add_stat(MemcgStat::KmemPages, -((nr << PAGE_SHIFT) as isize));
        self.obj_cgroup_uncharge_pages(cpu, objcg, nr);
    }

    // -------------------------------------------------------------------------
    // Reports.

    /// The group's files in cgroup v2's formats (see [`write_memcg_files`]).
    pub fn memcg_report(&self, w: &mut dyn fmt::Write, cg: &MemCgroup) -> fmt::Result {
        const N: usize = MEMCG_CACHE_SLOTS + 1;
        let mut names = [[0u8; MEMCG_NAME_LEN]; N];
        let mut lens = [0usize; N];
        let mut counts = [0isize; N];
        let mut n = 0;
        cg.for_each_cache(|name, objects| {
            if n < N {
                lens[n] = name.len().min(MEMCG_NAME_LEN);
                names[n][..lens[n]].copy_from_slice(&name.as_bytes()[..lens[n]]);
                counts[n] = objects;
                n += 1;
            }
        });
        let mut list = [("", 0isize); N];
        for i in 0..n {
            list[i] = (
                core::str::from_utf8(&names[i][..lens[i]]).unwrap_or("?"),
                counts[i],
            );
        }
        write_memcg_files(w, &MemcgFiles::of(cg), &list[..n])
    }
}

/// A group's figures as its cgroup files show them (bytes; `None` limit = "max").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemcgFiles<'a> {
    /// The group's name.
    pub name: &'a str,
    /// `memory.current`.
    pub current: u64,
    /// `memory.max`.
    pub max: Option<u64>,
    /// `memory.high`.
    pub high: Option<u64>,
    /// `memory.peak`.
    pub peak: u64,
    /// `memory.events`: high, max, oom.
    pub events: [u64; NR_MEMCG_EVENTS],
    /// `memory.stat`: slab_reclaimable, slab_unreclaimable, kmem_pages.
    pub stat: [i64; NR_MEMCG_STAT],
}

impl<'a> MemcgFiles<'a> {
    /// The figures of `cg` now.
    pub fn of(cg: &'a MemCgroup) -> Self {
        let limit = |v: usize| (v != usize::MAX).then_some((v as u64) << PAGE_SHIFT);
        MemcgFiles {
            name: cg.name(),
            current: cg.usage() as u64,
            max: limit(cg.memory.max()),
            high: limit(cg.memory.high()),
            peak: (cg.memory.watermark() as u64) << PAGE_SHIFT,
            events: [
                cg.events(MemcgEvent::High),
                cg.events(MemcgEvent::Max),
                cg.events(MemcgEvent::Oom),
            ],
            stat: [
                cg.stat(MemcgStat::SlabReclaimable) as i64,
                cg.stat(MemcgStat::SlabUnreclaimable) as i64,
                cg.stat(MemcgStat::KmemPages) as i64,
            ],
        }
    }
}

/// Writes a group's files: `memory.current`, `memory.max`, `memory.high`,
/// `memory.peak`, `memory.events` (cgroup v2 formats, one line each), `memory.stat`
/// (`kernel`, `kmem_pages`, `slab`, `slab_reclaimable`, `slab_unreclaimable`), then
/// objects per cache (cgroup v1's `memory.kmem.slabinfo`, short form).
pub fn write_memcg_files(
    w: &mut dyn fmt::Write,
    f: &MemcgFiles<'_>,
    caches: &[(&str, isize)],
) -> fmt::Result {
    let limit = |v: Option<u64>| -> LimitFmt { LimitFmt(v) };
    writeln!(w, "memcg {}", f.name)?;
    writeln!(w, "memory.current {}", f.current)?;
    writeln!(w, "memory.max {}", limit(f.max))?;
    writeln!(w, "memory.high {}", limit(f.high))?;
    writeln!(w, "memory.peak {}", f.peak)?;
    writeln!(
        w,
        "memory.events high {} max {} oom {}",
        f.events[0], f.events[1], f.events[2]
    )?;
    let [sr, su, kp] = f.stat;
    writeln!(w, "memory.stat")?;
    writeln!(w, "kernel {}", sr + su + kp)?;
    writeln!(w, "kmem_pages {kp}")?;
    writeln!(w, "slab {}", sr + su)?;
    writeln!(w, "slab_reclaimable {sr}")?;
    writeln!(w, "slab_unreclaimable {su}")?;
    writeln!(w, "memory.kmem.slabinfo")?;
    for (name, n) in caches {
        writeln!(w, "{name:<20} {n}")?;
    }
    Ok(())
}

/// A limit as cgroup files print it: bytes, or `max`.
struct LimitFmt(Option<u64>);

impl fmt::Display for LimitFmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("max"),
            Some(v) => write!(f, "{v}"),
        }
    }
}
