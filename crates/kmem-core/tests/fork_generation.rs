//! The fork handlers' locks ([`SpinLock::lock_forever`]) and the child's release of
//! them all at once ([`release_fork_locks`]), in a process of its own (the fork
//! generation is process-wide, so this is one test).

use kmem_core::sync::{fork_generation, release_fork_locks, SpinLock};

#[test]
fn a_new_fork_generation_frees_the_fork_handlers_locks_only() {
    let forked = SpinLock::new(7u32);
    let guarded = SpinLock::new(());
    forked.lock_forever();
    let g = guarded.lock();
    assert!(forked.is_locked() && forked.try_lock().is_none());
    let before = fork_generation();
    // SAFETY: stands in for a fork's child: nobody uses `forked`'s data meanwhile, and
    // nothing else in this process takes a lock with `lock_forever`.
    unsafe { release_fork_locks() };
    assert_eq!(fork_generation(), before + 1, "the generation moves on");
    assert!(!forked.is_locked(), "a past generation is free");
    assert_eq!(*forked.lock(), 7, "and taken as any free lock");
    assert!(
        guarded.is_locked() && guarded.try_lock().is_none(),
        "a guard's lock stays held"
    );
    drop(g);
    assert!(guarded.try_lock().is_some());
    // Taken again for a fork in the new generation, it is held until released.
    forked.lock_forever();
    assert!(forked.is_locked() && forked.try_lock().is_none());
    // SAFETY: taken by `lock_forever` just above; no reference into the data.
    unsafe { forked.force_unlock() };
    assert!(forked.try_lock().is_some());

    // A lock left by a past generation is taken by `lock` too (its contended path),
    // and works as any lock after that.
    let l = SpinLock::new(0u64);
    l.lock_forever();
    // SAFETY: as above.
    unsafe { release_fork_locks() };
    *l.lock() += 1;
    *l.lock() += 1;
    assert_eq!(*l.lock(), 2);
}
