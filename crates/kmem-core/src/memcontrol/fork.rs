//! The memory controller's part of `pthread_atfork`: its locks taken before a fork of
//! a multithreaded process, so that the child, which has only the forking thread,
//! finds none of them held by a thread it does not have (its first group creation,
//! or its first flush of a group's statistics, would spin for good).
//!
//! Two steps, in the lock order (crate docs): the groups' lock (`MemcgState::lock`, 2)
//! before the cache list's, then, after every other lock fork takes, the groups'
//! per-cache statistics tables (leaves, taken on charged frees' flushes for every
//! ancestor) of the root, every online group and every zombie, which the groups'
//! lock keeps from changing meanwhile.
//!
//! Locking: as above; the statistics tables are taken while the groups' lock is held.

use super::*;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;

/// Proof that the groups' lock is held by the fork handlers
/// ([`Memcg::fork_lock_groups`]), for the step after.
pub struct ForkGroupsHeld(());

impl<P: Platform> Memcg<'_, P> {
    /// `pthread_atfork` prepare, first step: the groups' lock, kept without a guard.
    pub fn fork_lock_groups(&self) -> ForkGroupsHeld {
        self.state.lock.lock_forever();
        ForkGroupsHeld(())
    }

    /// `pthread_atfork` prepare, last step: every group's statistics table.
    pub fn fork_lock_stats(&self, _held: &ForkGroupsHeld) {
        // SAFETY: the groups' lock is held by these handlers (`_held`).
        unsafe { self.for_each_group_held(|g| g.caches.lock_forever()) };
    }

    /// Releases what [`Memcg::fork_lock_stats`] and [`Memcg::fork_lock_groups`] took.
    ///
    /// # Safety
    /// Called once after both, by the thread that called them (or its child).
    pub unsafe fn fork_unlock(&self, _held: ForkGroupsHeld) {
        // SAFETY: each table lock was taken by `fork_lock_stats`, the groups' lock by
        // `fork_lock_groups` (`_held`), guards forgotten; no reference into them is kept.
        unsafe {
            self.for_each_group_held(|g| g.caches.force_unlock());
            self.state.lock.force_unlock();
        }
    }

    /// Calls `f` on the root, every online group and every zombie.
    ///
    /// # Safety
    /// The caller holds the groups' lock without a guard (`lock_forever`).
    unsafe fn for_each_group_held(&self, mut f: impl FnMut(&MemCgroup)) {
        // SAFETY: held by the caller, who writes nothing under it meanwhile.
        let l = unsafe { self.state.lock.held_data() };
        f(&self.state.root);
        for (first, next) in [(l.groups, true), (l.head, false)] {
            let mut p = first;
            // SAFETY: groups on the lists are alive while the lock is held.
            while let Some(g) = unsafe { p.as_ref() } {
                f(g);
                p = if next {
                    g.next_group.load(Relaxed)
                } else {
                    g.next_zombie.load(Relaxed)
                };
            }
        }
    }
}
