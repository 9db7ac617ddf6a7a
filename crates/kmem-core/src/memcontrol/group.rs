//! Groups and their objcgs (`struct mem_cgroup`, `struct obj_cgroup`): the hierarchy,
//! statistics and events, group creation and removal, reparenting, and the sweep that
//! frees zombies.
//!
//! Locking: `MemcgState::lock` serialises creation, removal and the sweep; counters are
//! atomics; a group's per-cache table has its own lock.

use super::*;
use crate::gfp::Gfp;
use crate::page::PAGE_SHIFT;
use crate::percpu::{CpuRef, DRAIN_STOCK};
use crate::platform::Platform;
use crate::slab::{KmemCache, NoAccounting};
use crate::sync::{
    AtomicBool, AtomicIsize, AtomicPtr, AtomicU64, AtomicUsize, Ordering::Acquire,
    Ordering::Relaxed, Ordering::Release, SpinLock,
};
use core::ptr::{self};

/// `struct obj_cgroup`: see the module doc.
///
/// Invariant: `id` is written once, before the objcg is shared, and no other objcg of
/// the same allocator has it while this one lives, unless it is [`SOLE_MIXED`] (the
/// ids ran out), which names no objcg.
pub struct ObjCgroup {
    pub(super) memcg: AtomicPtr<MemCgroup>,
    pub(super) nr_charged_bytes: AtomicUsize,
    pub(super) nr_pages: AtomicUsize,
    pub(super) refcnt: AtomicUsize,
    /// The objcg's number in a slab's sole-objcg word (`Page::memcg_sole`, see
    /// `slab_hooks::note_sole_objcg`): [`ROOT_OBJCG_ID`] for the root's, a fresh one
    /// from [`MemcgState::new_objcg_id`] for every other group's, unique within the
    /// allocator (one `MemcgState` per `Kmem`). [`SOLE_MIXED`], which no slab trusts,
    /// until one of those is set.
    pub(super) id: u32,
}

/// A slab's sole-objcg word before any object of it was charged.
pub(super) const SOLE_NONE: u32 = 0;
/// A slab's sole-objcg word once objects of it were charged to two objcgs; also the id
/// of an objcg made after the ids ran out, so that its charges never leave a slab
/// trusted.
pub(super) const SOLE_MIXED: u32 = 1;
/// The root group's objcg id; the others count up from the next.
pub(super) const ROOT_OBJCG_ID: u32 = 2;

impl ObjCgroup {
    pub(super) const fn new() -> Self {
        Self {
            memcg: AtomicPtr::new(ptr::null_mut()),
            nr_charged_bytes: AtomicUsize::new(0),
            nr_pages: AtomicUsize::new(0),
            refcnt: AtomicUsize::new(1),
            id: SOLE_MIXED,
        }
    }
    /// The objcg's id: what a slab whose charged objects are all this objcg's holds
    /// in its sole-objcg word (`Page::memcg_sole_id`). The root's is 2, other
    /// groups' count up from 3 and are never reused (1 for all once 2^32 - 3 groups
    /// were made).
    pub fn id(&self) -> u32 {
        self.id
    }
    /// The group charged through this objcg now (the parent once its group is gone).
    pub fn memcg(&self) -> &MemCgroup {
        // SAFETY: an objcg always points at a live group: its own, or after removal
        // an ancestor, which its group's reference keeps alive (module doc).
        unsafe { &*self.memcg.load(Acquire) }
    }
    /// Takes a reference (`obj_cgroup_get`). Whoever touches a removed group's objcg
    /// holds one: a stock caching it, an uncharge in progress, a thread that has it
    /// active. Count updates made while holding it are releases, so a sweep that sees
    /// them also sees the reference (`objcg_try_kill`). A removed group is freed only
    /// once no reference is left.
    #[inline]
    pub fn get(&self) {
        self.refcnt.fetch_add(1, Relaxed);
    }
    /// Gives a reference back (`obj_cgroup_put`).
    ///
    /// # Safety
    /// The caller holds a reference it took with [`ObjCgroup::get`] (or one the
    /// controller handed it) and gives up that one: once a removed group's objcg has
    /// neither references nor charges it is freed, so a put without a reference could
    /// free a group another holder still uses.
    #[inline]
    pub unsafe fn put(&self) {
        self.refcnt.fetch_sub(1, Release);
    }
}

/// One named per-cache object count of a group.
#[derive(Clone, Copy)]
pub(super) struct CacheSlot {
    pub(super) key: usize,
    pub(super) name: [u8; MEMCG_NAME_LEN],
    pub(super) len: u8,
    pub(super) objects: isize,
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
    pub(super) name: [u8; MEMCG_NAME_LEN],
    pub(super) name_len: usize,
    pub(super) parent: *const MemCgroup,
    /// Pages charged to the group and its descendants.
    pub memory: PageCounter,
    pub(super) stat: [AtomicIsize; NR_MEMCG_STAT],
    pub(super) events: [AtomicU64; NR_MEMCG_EVENTS],
    pub(super) caches: SpinLock<([CacheSlot; MEMCG_CACHE_SLOTS], isize)>,
    pub(super) objcg: ObjCgroup,
    pub(super) online: AtomicBool,
    pub(super) nr_online_children: AtomicUsize,
    /// Link on the zombie list (`MemcgState::lock`).
    pub(super) next_zombie: AtomicPtr<MemCgroup>,
    /// Link on the list of online groups (`MemcgState::lock`).
    pub(super) next_group: AtomicPtr<MemCgroup>,
}

// SAFETY: every field is an atomic, a lock, or written once before the group is
// shared (`name`, `parent`); `parent` points at a group kept alive by this one's
// reference on its objcg.
unsafe impl Sync for MemCgroup {}

// SAFETY: as above.
unsafe impl Send for MemCgroup {}

impl MemCgroup {
    pub(super) const fn new_root() -> Self {
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
    pub(super) fn ancestors(&self) -> impl Iterator<Item = &MemCgroup> {
        let mut cur: *const MemCgroup = self;
        core::iter::from_fn(move || {
            // SAFETY: ancestors outlive their descendants (module doc).
            let c = unsafe { cur.as_ref()? };
            cur = c.parent;
            Some(c)
        })
    }

    pub(super) fn add_stat(&self, item: MemcgStat, delta: isize) {
        if delta != 0 {
            for m in self.ancestors() {
                m.stat[item as usize].fetch_add(delta, Relaxed);
            }
        }
    }

    /// Counts `delta` objects of `s` in the group's and its ancestors' per-cache rows.
    ///
    /// A cache has a row (one of [`MEMCG_CACHE_SLOTS`]) from its first count while a
    /// row is free (never used, or at 0 objects), else its counts go to `other`. So
    /// that a cache's decrements land where its increments did, a cache without a row
    /// never takes one to count a decrement, and a decrement that would take a row
    /// below 0 (objects counted under `other` before the row was the cache's) puts
    /// the excess there. A row at 0 takes the cache's name again: a cache destroyed
    /// (at 0 objects, its stocks flushed) and another made at its address are two.
    pub(super) fn add_cache_objects(&self, s: &KmemCache, delta: isize) {
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
                None if delta > 0 => slots.iter().position(|x| x.key == 0 || x.objects == 0),
                None => None,
            };
            let Some(i) = slot else {
                *other += delta;
                continue;
            };
            let x = &mut slots[i];
            if x.key != key || x.objects == 0 {
                *x = CacheSlot::EMPTY;
                x.key = key;
                let n = name.len().min(MEMCG_NAME_LEN);
                x.name[..n].copy_from_slice(&name[..n]);
                x.len = n as u8;
            }
            x.objects += delta;
            if x.objects < 0 {
                *other += x.objects;
                x.objects = 0;
            }
        }
    }

    /// `memcg_memory_event`: counts `item` on the group and on its ancestors below
    /// the root (cgroup v2's hierarchical `memory.events`: a parent's file counts its
    /// subtree's events; the root has none, unless the event is its own).
    pub(super) fn count_event(&self, item: MemcgEvent) {
        self.events[item as usize].fetch_add(1, Relaxed);
        for m in self.ancestors().skip(1) {
            if m.parent.is_null() {
                break;
            }
            m.events[item as usize].fetch_add(1, Relaxed);
        }
    }

    /// `page_counter_try_charge` up the hierarchy; on failure, the group whose limit
    /// stopped it (nothing stays charged).
    pub(super) fn try_charge_counters(&self, nr_pages: usize) -> Result<(), &MemCgroup> {
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
    pub(super) fn uncharge_counters(&self, nr_pages: usize) {
        if nr_pages != 0 {
            for m in self.ancestors() {
                m.memory.usage.fetch_sub(nr_pages, Relaxed);
            }
        }
    }

    /// The lowest group at or above this one whose usage is over `memory.high`.
    pub(super) fn over_high(&self) -> Option<&MemCgroup> {
        self.ancestors()
            .find(|m| m.memory.usage() > m.memory.high())
    }
}

pub(super) fn bytes_to_pages(bytes: usize) -> usize {
    if bytes == usize::MAX {
        usize::MAX
    } else {
        bytes >> PAGE_SHIFT
    }
}

impl<'a, P: Platform> Memcg<'a, P> {
    // -------------------------------------------------------------------------
    // Groups.

    /// `mem_cgroup_css_alloc`: a new group under `parent`, named `name` (cut to
    /// [`MEMCG_NAME_LEN`] bytes). Its descriptor comes from the plain kmalloc caches.
    pub fn mem_cgroup_create(
        &self,
        cpu: Option<CpuRef<'_>>,
        parent: &MemCgroup,
        name: &str,
    ) -> Result<&'a MemCgroup, MemcgError> {
        if !parent.is_online() {
            return Err(MemcgError::Invalid);
        }
        self.memcg_sweep(cpu);
        let p = self
            .km
            .kmalloc(cpu, core::mem::size_of::<MemCgroup>(), Gfp::KERNEL)
            .ok_or(MemcgError::NoMemory)?
            .cast::<MemCgroup>();
        let mut g = MemCgroup::new_root();
        let n = name.len().min(MEMCG_NAME_LEN);
        g.name = [0; MEMCG_NAME_LEN];
        g.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        g.name_len = n;
        g.parent = parent;
        g.objcg.id = self.state.new_objcg_id();
        // SAFETY: a fresh kmalloc object big enough and aligned for a MemCgroup
        // (kmalloc-N objects are aligned to N's largest power-of-two divisor ≥ 8; the
        // struct's alignment is 8).
        unsafe { p.as_ptr().write(g) };
        // SAFETY: just written; lives until the sweep frees it.
        let g = unsafe { &*p.as_ptr() };
        g.objcg.memcg.store(p.as_ptr(), Release);
        parent.objcg.get();
        parent.nr_online_children.fetch_add(1, Relaxed);
        self.state.nr_groups.fetch_add(1, Relaxed);
        let mut l = self.state.lock.lock();
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
    /// `cg` came from [`Memcg::mem_cgroup_create`] of this allocator, was not removed
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
            let mut z = self.state.lock.lock();
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
        // SAFETY: the group's own reference on its objcg, held since
        // `mem_cgroup_create` and given up once, here (the caller removes `cg` once).
        unsafe { cg.objcg.put() };
        self.km.pages().request_all_areas(DRAIN_STOCK);
        self.memcg_sweep(cpu);
        Ok(())
    }

    /// Frees every zombie that nothing refers to and that has no charged object.
    pub(super) fn memcg_sweep(&self, cpu: Option<CpuRef<'_>>) {
        loop {
            let mut freed = None;
            {
                let mut z = self.state.lock.lock();
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
            self.state.nr_groups.fetch_sub(1, Relaxed);
            // SAFETY: allocated by `mem_cgroup_create` with kmalloc; nothing refers
            // to it (refcount dead, no charged object, unlinked).
            unsafe {
                self.km
                    .kfree(cpu, g as *const MemCgroup as *mut u8, &NoAccounting)
            };
            // SAFETY: the reference the freed zombie held on its parent's objcg.
            unsafe { parent.objcg.put() };
        }
    }

    /// Claims a zombie's objcg for freeing if it has no reference and no charged
    /// object; else leaves it as it was.
    pub(super) fn objcg_try_kill(objcg: &ObjCgroup) -> bool {
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
}

#[cfg(test)]
mod tests {
    //! The hierarchical page counter (`page_counter_try_charge`, `page_counter_uncharge`)
    //! on groups made by hand: a root, a child `a` and a grandchild `b`.
    use super::*;
    use crate::page::PAGE_SIZE;

    fn child(parent: &MemCgroup) -> MemCgroup {
        let mut g = MemCgroup::new_root();
        g.parent = parent;
        g
    }

    /// (usage, watermark, failcnt) of each group, in the order given.
    fn counters<const N: usize>(gs: [&MemCgroup; N]) -> [(usize, usize, usize); N] {
        gs.map(|g| (g.memory.usage(), g.memory.watermark(), g.memory.failcnt()))
    }

    #[test]
    fn a_charge_is_counted_at_every_level_up_to_the_root() {
        let root = MemCgroup::new_root();
        let a = child(&root);
        let b = child(&a);
        assert!(b.try_charge_counters(3).is_ok());
        assert_eq!(counters([&root, &a, &b]), [(3, 3, 0), (3, 3, 0), (3, 3, 0)]);
        assert!(a.try_charge_counters(2).is_ok());
        assert_eq!(counters([&root, &a, &b]), [(5, 5, 0), (5, 5, 0), (3, 3, 0)]);
        assert_eq!((a.usage(), b.usage()), (5 * PAGE_SIZE, 3 * PAGE_SIZE));
        // Uncharging goes up the same way; the watermark (`memory.peak`) stays.
        b.uncharge_counters(3);
        assert_eq!(counters([&root, &a, &b]), [(2, 5, 0), (2, 5, 0), (0, 3, 0)]);
        a.uncharge_counters(2);
        assert_eq!([root.usage(), a.usage(), b.usage()], [0, 0, 0]);
        b.uncharge_counters(0);
        assert_eq!(root.memory.usage(), 0);
    }

    #[test]
    fn a_charge_over_max_fails_names_the_refusing_group_and_counts_nowhere() {
        let root = MemCgroup::new_root();
        let a = child(&root);
        let b = child(&a);
        // memory.max in bytes, rounded down to pages.
        a.set_max(4 * PAGE_SIZE + 100);
        assert_eq!(a.memory.max(), 4);
        assert!(b.try_charge_counters(3).is_ok());
        let refused = b.try_charge_counters(2).unwrap_err();
        assert!(ptr::eq(refused, &a), "refused by {}", refused.name());
        // Nothing stays charged; the refusing level counts a failure. As the kernel's
        // page_counter_try_charge, a level below it raised its watermark on the way
        // up and keeps it; the refusing level and those above do not.
        assert_eq!(counters([&root, &a, &b]), [(3, 3, 0), (3, 3, 1), (3, 5, 0)]);
        // Up to max exactly fits (only `usage > max` fails).
        assert!(b.try_charge_counters(1).is_ok());
        assert_eq!(counters([&root, &a, &b]), [(4, 4, 0), (4, 4, 1), (4, 5, 0)]);
        // Refused at the charged group itself: the levels above are never touched.
        b.set_max(4 * PAGE_SIZE);
        assert!(ptr::eq(b.try_charge_counters(1).unwrap_err(), &b));
        assert_eq!(counters([&root, &a, &b]), [(4, 4, 0), (4, 4, 1), (4, 5, 1)]);
        // Refused at the root: a sibling's failed charge leaves the root as it was.
        root.set_max(5 * PAGE_SIZE);
        let c = child(&root);
        assert!(ptr::eq(c.try_charge_counters(2).unwrap_err(), &root));
        assert_eq!(counters([&root, &c]), [(4, 4, 1), (0, 2, 0)]);
        assert!(c.try_charge_counters(1).is_ok());
        assert_eq!(counters([&root, &a, &c]), [(5, 5, 1), (4, 4, 1), (1, 2, 0)]);
        // No limit again.
        a.set_max(usize::MAX);
        assert_eq!(a.memory.max(), usize::MAX);
    }

    #[test]
    fn over_high_names_the_lowest_group_over_its_high() {
        let root = MemCgroup::new_root();
        let a = child(&root);
        let b = child(&a);
        a.set_high(2 * PAGE_SIZE);
        assert!(b.try_charge_counters(2).is_ok());
        assert!(b.over_high().is_none(), "at high is not over it");
        // memory.high does not refuse charges.
        assert!(b.try_charge_counters(1).is_ok());
        assert!(ptr::eq(b.over_high().unwrap(), &a));
        b.set_high(PAGE_SIZE);
        assert!(ptr::eq(b.over_high().unwrap(), &b));
        assert!(root.over_high().is_none());
        b.uncharge_counters(3);
        assert!(b.over_high().is_none());
    }
}
