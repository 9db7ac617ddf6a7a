//! The list of every cache (`slab_caches`, mm/slab_common.c) and the errors of cache
//! destruction.
//!
//! Locking: `CacheList::lock` (the kernel's `slab_mutex`) guards the list; it comes
//! before any cache's `list_lock` in the lock order (crate docs) and is never held
//! while allocating.

use super::barn_drain::BarnDrain;
use super::barn_spill::BarnSpill;
use super::KmemCache;
use crate::page::{NetGrowth, MAX_NUMNODES, MAX_ORDER};
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::Relaxed, SpinLock};
use core::ptr;

/// Attempts [`CacheList::try_for_each`] makes at the list lock before it gives up:
/// 4 Mi, milliseconds of spinning (the CPU's `pause` sets how many: the test that
/// waits them out once runs in 60 ms here), longer than another thread's walk of the
/// list usually holds it (a report, a shrink). The lock records no owner, so a
/// reclaim inside its own thread's walk waits this long once before it leaves the
/// walks out; a holder slower than this (a full `validate` of a large heap under
/// slub_debug, a holder preempted for longer) makes an allocation at the memory
/// bound fail where waiting would have let it succeed.
pub const LIST_LOCK_TRIES: u32 = 1 << 22;

/// The list of every cache (`slab_caches`).
pub struct CacheList {
    pub(crate) lock: SpinLock<()>,
    head: AtomicPtr<KmemCache>,
    /// When the barns' decay last ran (the platform's clock, ns); whoever moves it
    /// runs the next one.
    pub(crate) barn_decay_ns: AtomicU64,
    /// Pages of live slabs, every cache together, and their growth net of discards
    /// (`page/block_growth.rs`): made in `Slub::count_growth`, discarded in
    /// `Slub::discard_slab`.
    pub(crate) slab_growth: NetGrowth,
    /// The slabs' and the page blocks' growth together (`PageAllocator::block_growth`;
    /// a count that wraps) as the barns' decay last read it: the decay also runs once
    /// it has grown by `barn::DECAY_GROWTH_PAGES` since (`Slub::count_growth`,
    /// `Slub::maybe_decay_barns`).
    pub(crate) grown_at_decay: AtomicUsize,
    /// Caches that keep empty slabs, per node and slab order (each cache node's
    /// kept list counts once while it holds slabs: `empty.rs`, `EmptySlabs::publish`):
    /// while not 0, a cache whose own are used up adopts others' of its order instead
    /// of making a slab ([`super::Slub::adopt_kept_slabs`]); while any of a node's is
    /// not 0, a new slab of any cache first gives some of the others' back. Counted
    /// by lists rather than slabs, it changes when a list fills or runs out, not at
    /// every slab kept or taken (an atomic add each on a path that holds a lock
    /// already).
    pub(crate) kept_lists: [[AtomicUsize; MAX_ORDER + 1]; MAX_NUMNODES],
    /// Reclaims of kept slabs (`empty.rs`) that took slabs of caches off the list's
    /// walk and discard them after the lock, and flushes of the decay's idle sheaves
    /// (`barn_drain.rs`): cache destruction waits for none to be left before it
    /// counts a cache's slabs.
    pub(crate) reclaiming: AtomicUsize,
    /// The barns' spill budget (`barn_spill.rs`).
    pub spill: BarnSpill,
    /// Idle full sheaves the barns' decay took, waiting to be flushed by whoever
    /// comes (`barn_drain.rs`).
    pub(crate) drain: BarnDrain,
}

impl CacheList {
    pub(crate) const fn new() -> Self {
        Self {
            lock: SpinLock::new(()),
            head: AtomicPtr::new(ptr::null_mut()),
            barn_decay_ns: AtomicU64::new(0),
            slab_growth: NetGrowth::new(),
            grown_at_decay: AtomicUsize::new(0),
            kept_lists: [const { [const { AtomicUsize::new(0) }; MAX_ORDER + 1] }; MAX_NUMNODES],
            reclaiming: AtomicUsize::new(0),
            spill: BarnSpill::new(),
            drain: BarnDrain::new(),
        }
    }

    pub(crate) fn add(&self, s: &KmemCache) {
        let _g = self.lock.lock();
        s.next.store(self.head.load(Relaxed), Relaxed);
        self.head
            .store(s as *const KmemCache as *mut KmemCache, Relaxed);
    }

    /// Waits until no reclaim of kept slabs that walked the list before now still
    /// holds slabs of a cache it found there (see `reclaiming`).
    pub(crate) fn wait_for_reclaims(&self) {
        while self.reclaiming.load(crate::sync::Ordering::Acquire) != 0 {
            crate::sync::relax();
        }
    }

    pub(crate) fn remove(&self, s: &KmemCache) {
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
    /// (the fork handlers, the barns' decay).
    ///
    /// # Safety
    /// The caller holds the list lock (the fork handlers took it with `lock_forever`).
    pub(crate) unsafe fn for_each_locked(&self, mut f: impl FnMut(&KmemCache)) {
        let mut p = self.head.load(Relaxed);
        // SAFETY: caches on the list are live while the lock is held (caller).
        while let Some(s) = unsafe { p.as_ref() } {
            f(s);
            p = s.next.load(Relaxed);
        }
    }

    /// Whether some context holds the list lock now (a hint: a caller that may hold it
    /// itself checks before walking, rather than wait for itself).
    pub fn is_locked(&self) -> bool {
        self.lock.is_locked()
    }

    /// Calls `f` on every cache under the list lock if the lock can be had within a
    /// bounded wait ([`LIST_LOCK_TRIES`] attempts); else calls nothing and returns
    /// false. For walks that may run inside another walk of the list on the same
    /// thread (the shrinker, called by the page allocator's reclaim from an
    /// allocation made in a `for_each` callback), which would wait for themselves.
    pub fn try_for_each(&self, mut f: impl FnMut(&KmemCache)) -> bool {
        let mut tries = LIST_LOCK_TRIES;
        let _g = loop {
            if let Some(g) = self.lock.try_lock() {
                break g;
            }
            if tries == 0 {
                return false;
            }
            tries -= 1;
            core::hint::spin_loop();
        };
        let mut p = self.head.load(Relaxed);
        // SAFETY: caches on the list are live while the lock is held.
        while let Some(s) = unsafe { p.as_ref() } {
            f(s);
            p = s.next.load(Relaxed);
        }
        true
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

    /// `pthread_atfork` prepare, the slab part: takes the list lock, then every
    /// cache's node list locks (lock order in the crate docs), guards forgotten.
    pub(crate) fn fork_lock(&self, nr_nodes: usize) {
        self.lock.lock_forever();
        // SAFETY: we hold the list lock (just taken).
        unsafe {
            self.for_each_locked(|s| {
                for node in s.nodes(nr_nodes) {
                    node.list_lock.lock_forever();
                    // A leaf lock: a child must not find it held by a thread that
                    // does not exist there.
                    node.barn.lock_forever();
                }
            });
        }
        // A leaf too: the decay's list of idle sheaves (`barn_drain.rs`).
        self.drain.lock_forever();
    }

    /// Releases what [`CacheList::fork_lock`] took.
    ///
    /// # Safety
    /// Called once after `fork_lock`, by the thread that called it (or its child).
    pub(crate) unsafe fn fork_unlock(&self, nr_nodes: usize) {
        // SAFETY: every lock below was taken by `fork_lock`, guards forgotten.
        unsafe {
            self.drain.force_unlock();
            self.for_each_locked(|s| {
                for node in s.nodes(nr_nodes) {
                    node.barn.force_unlock();
                    node.list_lock.force_unlock();
                }
            });
            self.lock.force_unlock();
        }
    }

    /// In a fork's child, after [`CacheList::fork_unlock`] (or the fork generation's
    /// release): forgets the reclaims and flushes that the parent's other threads had
    /// in flight (`reclaiming`). Those threads do not exist in the child, so their
    /// counts would never fall and the child's first cache destruction would wait
    /// for good; what they held off the lists (slabs taken to discard, sheaves taken
    /// to flush) is lost to the child, as their CPU areas are. The calling thread was
    /// in `fork`, inside no reclaim. Writes nothing when nothing was in flight (a
    /// page written in the child is a page copied).
    pub(crate) fn fork_child(&self) {
        if self.reclaiming.load(Relaxed) != 0 {
            self.reclaiming.store(0, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_env::slab_env;
    use super::*;

    #[test]
    fn a_fork_s_child_forgets_the_reclaims_of_the_parent_s_other_threads() {
        let env = slab_env();
        let list = &env.caches;
        // Another thread of the parent, between the walk that took slabs off a
        // cache and their discard: the list's lock let go, its count held.
        list.reclaiming.fetch_add(1, Relaxed);
        list.fork_lock(1);
        // SAFETY: taken just above by this thread, which stands in for the child.
        unsafe { list.fork_unlock(1) };
        assert_eq!(
            list.reclaiming.load(Relaxed),
            1,
            "the parent's thread is gone"
        );
        list.fork_child();
        assert_eq!(list.reclaiming.load(Relaxed), 0);
        // Cache destruction's wait returns at once.
        list.wait_for_reclaims();
        // Nothing in flight: nothing written.
        list.fork_child();
        assert_eq!(list.reclaiming.load(Relaxed), 0);
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
