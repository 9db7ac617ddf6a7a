//! `fork` in a threaded process: the `pthread_atfork` handlers, registered once the
//! heap is ready. Before `fork` every allocator lock is taken, in the heap's lock order
//! (the CPU table lock, every CPU area's local lock, the memory groups' lock, the huge
//! list's and KFENCE's locks, then the core's own order, the memory groups' statistics
//! tables last), so the child never inherits a lock held by a thread it does not
//! have; after it, parent and child release them all at once, by moving on the fork
//! generation of kmem-core's spin locks ([`kmem_core::sync::release_fork_locks`]),
//! without writing to any of them. Each cache's node locks are on a page of their own:
//! unlocking them one by one after the fork cost the parent and the child about 55
//! copy-on-write page faults each, a page copied for each while both share it, more
//! than the fork itself.
//!
//! A process with one thread takes no lock at all, as glibc's own malloc does
//! (`SINGLE_THREAD_P` in its `fork`): the thread calling `fork` is not inside the
//! allocator, and no other thread exists to be. glibc says so in
//! `__libc_single_threaded` (2.32 and later), which stays true until the process
//! first creates a thread. Every lock taken is a write to a page that the last fork
//! left write-protected: about ten copy-on-write faults in the parent of each fork,
//! which a shell, forking once for each command it runs, paid for nothing.
//!
//! The child's only thread keeps its CPU area; in thread mode the areas of the
//! parent's other threads are orphaned ([`area_orphaned`], the platform's
//! `Platform::area_orphaned`): owned by nobody, never used or flushed again, since
//! their owners may have been half-way through an update, and stop counting among the
//! owners (`CpuAreaPool::forget_owners`). The child writes two words for it beside
//! [`LOCKED`] and the pool's count of owners, no page of the areas' (each would be a
//! page copied).

use super::{HEAP, READY};
use crate::platform::os;
use kmem_core::percpu::CpuArea;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// Whether the current fork's prepare handler took the locks (written only then, so
/// a single-threaded process's fork writes none of the heap's pages). Set with the
/// table lock held and cleared before the locks are released, so concurrent forks
/// see it one at a time.
static LOCKED: AtomicBool = AtomicBool::new(false);

/// The fork generation and the forking thread's area (0: none), noted by the prepare
/// handler in thread mode, so that the child copies them with two plain loads: a
/// call in the child handler faults in code pages the child never ran (a child that
/// exits at once paid nine page faults more).
/// Also the number of areas the parent's other threads own, which the child stops
/// counting as owners (`CpuAreaPool::forget_owners`).
static PREPARED: (AtomicU32, AtomicUsize, AtomicUsize) =
    (AtomicU32::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
/// In a fork's child (thread mode, a threaded parent): the fork generation it was
/// forked in (0: this process was not such a child). An area taken in it or before,
/// but the child's own ([`SURVIVOR`]), belongs to a thread the child does not have.
static ORPHAN_GEN: AtomicU32 = AtomicU32::new(0);
/// The address of the forking thread's area in the child (0: none).
static SURVIVOR: AtomicUsize = AtomicUsize::new(0);

/// Whether `area` is owned by a thread of the parent that this fork's child does not
/// have (see the module doc).
pub(super) fn area_orphaned(area: &CpuArea) -> bool {
    let born = ORPHAN_GEN.load(Ordering::Relaxed);
    born != 0
        && area.is_owned()
        && (born.wrapping_sub(area.taken_generation()) as i32) >= 0
        && area as *const CpuArea as usize != SURVIVOR.load(Ordering::Relaxed)
}

/// Registers the handlers (once, after initialisation).
pub(super) fn register() {
    os::at_fork(fork_prepare, fork_parent, fork_child);
}

/// Before `fork`: every allocator lock is taken (see the module doc).
extern "C" fn fork_prepare() {
    if HEAP.state.load(Ordering::Acquire) != READY || os::single_threaded() {
        return;
    }
    // Per-CPU mode: the table lock (no area is being made), then the CPU areas' local
    // locks (operations take them before any other allocator lock).
    HEAP.table_lock.lock_forever();
    // Only now: a second thread's fork waits at the table lock until this fork's
    // handlers are done, so its `true` cannot be cleared by this fork's parent
    // handler, which would leave its locks held.
    LOCKED.store(true, Ordering::Relaxed);
    for area in HEAP.cpu_areas() {
        area.lock_for_fork();
    }
    // The memory groups' lock before the platform's own (a report walking the groups
    // may allocate under it), the groups' statistics tables last, in `fork_prepare`;
    // all released with the fork generation.
    let groups = HEAP.kmem.fork_prepare_groups();
    HEAP.huge.lock_for_fork();
    crate::kfence::lock_for_fork();
    HEAP.kmem.fork_prepare(&groups);
    if HEAP.mode.load(Ordering::Relaxed) == super::MODE_THREAD {
        let own = super::thread::thread_cpu().map_or(0, |c| c.area() as *const CpuArea as usize);
        let owned = HEAP.kmem.pages.cpu_areas().nr_owned();
        let generation = kmem_core::sync::fork_generation();
        PREPARED.0.store(generation, Ordering::Relaxed);
        PREPARED.1.store(own, Ordering::Relaxed);
        PREPARED
            .2
            .store(owned - usize::from(own != 0), Ordering::Relaxed);
    }
}

/// After `fork`, in the parent: release.
extern "C" fn fork_parent() {
    if !LOCKED.load(Ordering::Relaxed) {
        return;
    }
    LOCKED.store(false, Ordering::Relaxed);
    // SAFETY: every lock taken with `lock_forever` in this generation was taken by
    // fork_prepare on this thread (only the fork handlers use it, and a second fork
    // waits at the first of them), which holds no reference into their data.
    unsafe { kmem_core::sync::release_fork_locks() };
}

/// After `fork`, in the child: the same (see the module doc for the areas), and the
/// reclaims the parent's other threads had in flight forgotten
/// (`kmem_core::Kmem::fork_child`). A single-threaded parent had none.
extern "C" fn fork_child() {
    let others = LOCKED.load(Ordering::Relaxed);
    fork_parent();
    if others {
        // SAFETY: the `pthread_atfork` child handler: the child's one thread.
        unsafe { HEAP.kmem.fork_child() };
        // Thread mode's prepare noted these (0 in the other modes: no orphans).
        SURVIVOR.store(PREPARED.1.load(Ordering::Relaxed), Ordering::Relaxed);
        ORPHAN_GEN.store(PREPARED.0.load(Ordering::Relaxed), Ordering::Relaxed);
        let orphans = PREPARED.2.load(Ordering::Relaxed);
        if orphans != 0 {
            // SAFETY: the child handler, once per fork: the parent's other threads,
            // which own these areas, do not exist here.
            unsafe { HEAP.kmem.pages.cpu_areas().forget_owners(orphans) };
        }
    }
    super::live::after_fork_child();
}
