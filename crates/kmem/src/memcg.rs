//! Memory cgroups for Rust programs: account and limit memory per tenant, request or
//! subsystem inside one process (kmem-core's `memcontrol`).
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: kmem::KmemAlloc = kmem::KmemAlloc;
//!
//! use kmem::MemCgroup;
//! let tenant = MemCgroup::new("tenant-a").expect("memory for the group");
//! tenant.set_max(64 << 20);
//! {
//!     let _g = tenant.enter();
//!     let v: Vec<u8> = Vec::with_capacity(1 << 20); // charged to tenant-a
//!     assert!(tenant.usage() >= 1 << 20);
//!     drop(v); // uncharged, whatever thread frees it
//!     // Past memory.max an allocation fails (null) instead of growing the group.
//!     let mut w: Vec<u8> = Vec::new();
//!     assert!(w.try_reserve(128 << 20).is_err());
//! }
//! assert!(tenant.report().contains("memory.max 67108864"));
//! ```
//!
//! While a [`MemcgGuard`] lives, every allocation of its thread through
//! [`crate::KmemAlloc`], the heap's kmalloc family, [`crate::KmemCache`] and page
//! allocations is charged to the group (`set_active_memcg`); an allocation that would
//! take the group or an ancestor over `memory.max` fails (null, or `None`). A free
//! uncharges the group that was charged, on any thread. Dropping a [`MemCgroup`]
//! removes it: objects still charged to it are reparented to its parent.
//!
//! Owns the handles ([`MemCgroup`], [`MemcgGuard`]); the groups themselves are the
//! core's, and the thread's active group is the heap's thread-local slot. Locking: the
//! core's (a group's lock, the charge stock under the CPU area's rules); reports run
//! with no active group (`uncharged`), since they allocate while holding a group's
//! lock.

use crate::heap::{heap, restore_active_objcg, set_active_objcg};
use kmem_core::memcontrol::{self, write_memcg_files, MemcgError, MemcgFiles};
use std::fmt;
use std::marker::PhantomData;

/// A memory cgroup: usage, limits, statistics. Children borrow their parent, so a
/// parent outlives its children.
pub struct MemCgroup<'p> {
    cg: &'static memcontrol::MemCgroup,
    _parent: PhantomData<&'p MemCgroup<'p>>,
}

// SAFETY: the group is a set of atomics and locks in kmem's memory; the handle only
// removes it on drop, which needs ownership.
unsafe impl Send for MemCgroup<'_> {}
// SAFETY: every shared method reads or sets atomics, or takes the group's lock.
unsafe impl Sync for MemCgroup<'_> {}

impl MemCgroup<'static> {
    /// A new group under the root. `None` if kmem has no memory for it.
    pub fn new(name: &str) -> Option<MemCgroup<'static>> {
        Self::create(heap().kmem().memcg().root_mem_cgroup(), name)
    }
}

impl<'p> MemCgroup<'p> {
    fn create<'q>(parent: &memcontrol::MemCgroup, name: &str) -> Option<MemCgroup<'q>> {
        let h = heap();
        // Group descriptors are never charged to the creating thread's group.
        let prev = set_active_objcg(None);
        let cg = h
            .kmem()
            .memcg()
            .mem_cgroup_create(h.cpu().get(), parent, name);
        restore_active_objcg(prev);
        let cg = cg.ok()?;
        // SAFETY: the group lives until this handle removes it (and longer as a
        // zombie); the core's groups are never moved.
        let cg: &'static memcontrol::MemCgroup = unsafe { &*(cg as *const memcontrol::MemCgroup) };
        Some(MemCgroup {
            cg,
            _parent: PhantomData,
        })
    }

    /// A child group: its charges count in this group's usage and limits too.
    pub fn child(&self, name: &str) -> Option<MemCgroup<'_>> {
        Self::create(self.cg, name)
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        self.cg.name()
    }

    /// `memory.max`: allocations that would take the usage above `bytes` fail.
    pub fn set_max(&self, bytes: usize) {
        self.cg.set_max(bytes);
    }

    /// `memory.high`: above it, the group's pre-charged stocks are reclaimed and a
    /// `high` event counted; allocations still succeed.
    pub fn set_high(&self, bytes: usize) {
        self.cg.set_high(bytes);
    }

    /// `memory.current`: bytes charged to the group and its descendants (whole pages,
    /// including bytes pre-charged for the per-CPU stocks).
    pub fn usage(&self) -> usize {
        self.cg.usage()
    }

    /// The group's statistics and events. The calling thread's stock is flushed first
    /// (in per-CPU mode every CPU's); figures still cached in other threads' stocks
    /// (thread mode) come in when those threads switch groups or exit.
    pub fn stat(&self) -> MemcgStats {
        uncharged(|| {
            flush_local();
            MemcgStats::of(self.cg)
        })
    }

    /// The group's cgroup files (`memory.current`, `memory.max`, `memory.events`,
    /// `memory.stat`, objects per cache) as text.
    pub fn report(&self) -> String {
        uncharged(|| {
            flush_local();
            let mut s = String::new();
            let _ = heap().kmem().memcg().memcg_report(&mut s, self.cg);
            s
        })
    }

    /// Makes this group the calling thread's active group until the guard drops
    /// (guards nest: dropping one restores the group active before it). The thread's
    /// active slot holds a reference on the group's objcg, so guards dropped out of
    /// order (which leaves a group active without its guard) or forgotten
    /// (`mem::forget`) never leave freed memory active: a group removed meanwhile is
    /// kept as a zombie and its charges go to its parent until the slot lets go of it
    /// (another guard's drop, or the exit of a thread attached in thread mode;
    /// otherwise the zombie stays).
    pub fn enter(&self) -> MemcgGuard<'_> {
        let prev = set_active_objcg(Some(self.cg.objcg()));
        MemcgGuard {
            prev,
            _group: PhantomData,
            _not_send: PhantomData,
        }
    }

    /// The core's group (for reports and tests).
    pub fn raw(&self) -> &memcontrol::MemCgroup {
        self.cg
    }
}

impl Drop for MemCgroup<'_> {
    fn drop(&mut self) {
        let h = heap();
        // SAFETY: the group came from `mem_cgroup_create`; this handle is its only
        // owner, its children (which borrow it) are gone, and no guard (which borrows
        // it) is alive, so nobody uses it as a group afterwards.
        let r = unsafe { h.kmem().memcg().mem_cgroup_remove(h.cpu().get(), self.cg) };
        debug_assert!(r.is_ok(), "{r:?}");
        let _: Result<(), MemcgError> = r;
    }
}

/// The active-group guard from [`MemCgroup::enter`]; not `Send`: it belongs to the
/// thread it changed.
pub struct MemcgGuard<'g> {
    /// What was active before (with the slot's reference on it, handed back at drop).
    prev: usize,
    _group: PhantomData<&'g memcontrol::MemCgroup>,
    _not_send: PhantomData<*const ()>,
}

impl Drop for MemcgGuard<'_> {
    fn drop(&mut self) {
        restore_active_objcg(self.prev);
    }
}

/// Drains the charge stocks the caller can reach (see [`crate::Heap::drain_memcg_stocks`]).
fn flush_local() {
    heap().drain_memcg_stocks();
}

/// A group's figures (`memory.current`, `memory.max`, `memory.events`,
/// `memory.stat`), bytes unless named otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MemcgStats {
    /// The group's name ("/" for the root).
    pub name: String,
    /// The parent's name (`None` for the root).
    pub parent: Option<String>,
    /// `memory.current`.
    pub usage: u64,
    /// `memory.max` (`None`: no limit).
    pub max: Option<u64>,
    /// `memory.high` (`None`: no limit).
    pub high: Option<u64>,
    /// `memory.peak`.
    pub peak: u64,
    /// `high` events.
    pub events_high: u64,
    /// `max` events.
    pub events_max: u64,
    /// `oom` events (allocations that failed).
    pub events_oom: u64,
    /// Slab objects of reclaimable caches.
    pub slab_reclaimable: i64,
    /// Other slab objects.
    pub slab_unreclaimable: i64,
    /// Accounted page blocks and mappings.
    pub kmem_pages: i64,
    /// Objects charged per cache.
    pub caches: Vec<(String, i64)>,
}

impl MemcgStats {
    pub(crate) fn of(cg: &memcontrol::MemCgroup) -> MemcgStats {
        RawStats::of(cg).into_stats()
    }
}

/// A name of at most [`memcontrol::MEMCG_NAME_LEN`] bytes, copied.
type RawName = ([u8; memcontrol::MEMCG_NAME_LEN], usize);

fn raw_name(name: &str) -> RawName {
    let mut b = [0u8; memcontrol::MEMCG_NAME_LEN];
    let len = name.len().min(b.len());
    b[..len].copy_from_slice(&name.as_bytes()[..len]);
    (b, len)
}

fn name_string((b, len): &RawName) -> String {
    String::from_utf8_lossy(&b[..*len]).into_owned()
}

/// [`MemcgStats`] copied without allocating: under a group's statistics table lock,
/// a leaf, and the groups' lock (`all_stats`), which allocations must not be made
/// under (in per-CPU modes one waits for a CPU area's lock, whose holder, creating a
/// group or flushing a charged free's statistics, waits for them).
struct RawStats {
    name: RawName,
    parent: Option<RawName>,
    usage: u64,
    peak: u64,
    limits: [Option<u64>; 2],
    events: [u64; 3],
    stat: [i64; 3],
    caches: memcontrol::CacheRows,
}

impl RawStats {
    fn of(cg: &memcontrol::MemCgroup) -> RawStats {
        let f = MemcgFiles::of(cg);
        RawStats {
            name: raw_name(f.name),
            parent: cg.parent().map(|p| raw_name(p.name())),
            usage: f.current,
            peak: f.peak,
            limits: [f.max, f.high],
            events: f.events,
            stat: f.stat,
            caches: memcontrol::CacheRows::of(cg),
        }
    }

    fn into_stats(self) -> MemcgStats {
        let (events, stat) = (self.events, self.stat);
        MemcgStats {
            name: name_string(&self.name),
            parent: self.parent.as_ref().map(name_string),
            usage: self.usage,
            max: self.limits[0],
            high: self.limits[1],
            peak: self.peak,
            events_high: events[0],
            events_max: events[1],
            events_oom: events[2],
            slab_reclaimable: stat[0],
            slab_unreclaimable: stat[1],
            kmem_pages: stat[2],
            caches: self
                .caches
                .iter()
                .map(|(n, objects)| (n.to_string(), objects as i64))
                .collect(),
        }
    }
}

impl fmt::Display for MemcgStats {
    /// The group's cgroup files, as [`MemCgroup::report`] prints them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files = MemcgFiles {
            name: &self.name,
            current: self.usage,
            max: self.max,
            high: self.high,
            peak: self.peak,
            events: [self.events_high, self.events_max, self.events_oom],
            stat: [
                self.slab_reclaimable,
                self.slab_unreclaimable,
                self.kmem_pages,
            ],
        };
        let caches: Vec<(&str, isize)> = self
            .caches
            .iter()
            .map(|(n, c)| (n.as_str(), *c as isize))
            .collect();
        write_memcg_files(f, &files, &caches)
    }
}

/// Every group's figures: the root first, then the online groups. Copied under the
/// groups' lock into a list made before it (see `RawStats`), again if groups came
/// meanwhile; made into strings after.
pub fn all_stats() -> Vec<MemcgStats> {
    uncharged(|| {
        flush_local();
        let memcg = heap().kmem().memcg();
        loop {
            let mut raw = Vec::with_capacity(memcg.nr_mem_cgroups() + 8);
            let mut whole = true;
            memcg.for_each_mem_cgroup(|cg| {
                if raw.len() < raw.capacity() {
                    raw.push(RawStats::of(cg));
                } else {
                    whole = false;
                }
            });
            if whole {
                return raw.into_iter().map(RawStats::into_stats).collect();
            }
        }
    })
}

/// Runs `f` with no active group: reports allocate while holding a group's lock,
/// which a charge's statistics flush would take again.
fn uncharged<R>(f: impl FnOnce() -> R) -> R {
    let prev = set_active_objcg(None);
    let r = f();
    restore_active_objcg(prev);
    r
}

/// Turns the per-CPU charge stock on or off (for the `memcg` benchmark's `nostock`
/// mode); drains the caller's stock.
pub fn set_stock_enabled(enabled: bool) {
    let h = heap();
    h.kmem().memcg().set_memcg_stock(h.cpu().get(), enabled);
}

/// Groups as the core's pointers, for C bindings (libkmem.so's `kmem_memcg_*`).
/// Nothing here allocates through Rust's allocator.
pub mod raw {
    use super::*;

    /// A new group under `parent` (the root if `None`).
    pub fn create(
        parent: Option<&'static memcontrol::MemCgroup>,
        name: &str,
    ) -> Option<&'static memcontrol::MemCgroup> {
        let h = heap();
        let parent = parent.unwrap_or_else(|| h.kmem().memcg().root_mem_cgroup());
        let prev = set_active_objcg(None);
        let cg = h
            .kmem()
            .memcg()
            .mem_cgroup_create(h.cpu().get(), parent, name);
        restore_active_objcg(prev);
        cg.ok().map(|g| {
            // SAFETY: groups live until removed (and as zombies after); never moved.
            unsafe { &*(g as *const memcontrol::MemCgroup) }
        })
    }

    /// Removes a group (its live objects are reparented).
    ///
    /// # Safety
    /// As [`kmem_core::memcontrol::Memcg::mem_cgroup_remove`]: a group from [`create`], removed
    /// once, and no thread has it active or uses it afterwards.
    pub unsafe fn remove(cg: &'static memcontrol::MemCgroup) -> Result<(), MemcgError> {
        let h = heap();
        // SAFETY: forwarded from the caller.
        unsafe { h.kmem().memcg().mem_cgroup_remove(h.cpu().get(), cg) }
    }

    /// Makes `cg` the thread's active group (`None`: no group); returns a token for
    /// [`leave`] that restores the group active before.
    ///
    /// # Safety
    /// `cg` stays alive (not removed) while it is active.
    pub unsafe fn enter(cg: Option<&'static memcontrol::MemCgroup>) -> usize {
        set_active_objcg(cg.map(|g| g.objcg()))
    }

    /// Restores the active group from an [`enter`] token.
    ///
    /// # Safety
    /// `token` came from [`enter`] on this thread, and the group it names (if any)
    /// is still alive.
    pub unsafe fn leave(token: usize) {
        restore_active_objcg(token);
    }

    /// Writes the group's report (after draining the caller's stock) to `w`.
    pub fn report(cg: &memcontrol::MemCgroup, w: &mut dyn fmt::Write) -> fmt::Result {
        let prev = set_active_objcg(None);
        flush_local();
        let r = heap().kmem().memcg().memcg_report(w, cg);
        restore_active_objcg(prev);
        r
    }
}
