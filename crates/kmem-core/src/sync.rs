//! Synchronisation primitives of the core: the spin lock and the atomics every other
//! module uses.
//!
//! All atomics and locks of kmem-core come from this module so that a loom build can
//! replace them in one place. The lock is a test-and-test-and-set spin lock: the core
//! runs where no scheduler may exist (a kernel, firmware), so it cannot sleep. A
//! waiter that has spun for a while calls the platform's
//! [`Platform::relax`](crate::Platform::relax) (installed here by
//! [`Kmem::init`](crate::Kmem::init): the locks have no handle on the platform), so
//! that on an oversubscribed machine the holder gets the CPU back. The lock order of
//! every lock in the core is in the crate docs.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};

pub use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicIsize, AtomicPtr, AtomicU16, AtomicU32, AtomicU64,
    AtomicU8, AtomicUsize, Ordering,
};

/// Called by a spinning waiter after [`SPINS_BEFORE_RELAX`] failed polls.
static RELAX_HOOK: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// How many polls a waiter spins before it calls the relax hook.
pub const SPINS_BEFORE_RELAX: u32 = 128;

/// Installs the function a spinning waiter calls to give up its CPU (the platform's
/// `relax`; a kernel's default spins).
pub(crate) fn set_relax_hook(hook: fn()) {
    RELAX_HOOK.store(hook as *mut (), Ordering::Release);
}

#[cold]
pub(crate) fn relax() {
    let hook = RELAX_HOOK.load(Ordering::Acquire);
    if hook.is_null() {
        core::hint::spin_loop();
    } else {
        // SAFETY: RELAX_HOOK only ever holds null or a value stored by `set_relax_hook`,
        // which came from a `fn()`; function pointers and data pointers have the same
        // size on every target the core supports.
        let f: fn() = unsafe { core::mem::transmute::<*mut (), fn()>(hook) };
        f();
    }
}

/// The lock word of a free [`SpinLock`].
const FREE: u32 = 0;
/// The lock word of a [`SpinLock`] held through a guard.
const HELD: u32 = 1;

/// The fork generation: a lock taken by [`SpinLock::lock_forever`] (the fork
/// handlers) holds this value instead of [`HELD`]. After the fork, parent and child
/// each move it on with [`release_fork_locks`], which frees every such lock at once
/// without writing to it: the first to want one of them takes it from the old value.
/// (Each cache's node locks sit on a page of their own. Unlocked one by one after
/// a fork, they cost the parent and the child about 55 copy-on-write faults each;
/// now only the pages of the locks a process takes again are written, and a child
/// that goes on to `exec` writes none.) A lock held through a guard is [`HELD`], so a
/// new generation never frees it.
static FORK_GEN: AtomicU32 = AtomicU32::new(2);

/// Frees every lock taken with [`SpinLock::lock_forever`] in the current fork
/// generation, by starting the next one. Each such lock is taken the next time
/// someone asks for it (a write only then).
///
/// # Safety
/// The caller took every lock that is held by `lock_forever` in this generation (only
/// the fork handlers take them, all on the thread that forks; a second fork waits at
/// the first of them) and holds no reference into their data.
pub unsafe fn release_fork_locks() {
    // Past u32::MAX the generation starts again at 2: never FREE or HELD, which would
    // leave the fork's locks free to all or held for good. (A generation comes round
    // again only after 2^32 - 2 forks, and by then every lock the handlers take holds
    // a recent one: they take each at every fork.)
    let _ = FORK_GEN.fetch_update(Ordering::Release, Ordering::Relaxed, |g| {
        Some(next_generation(g))
    });
}

/// The generation after `g`, skipping [`FREE`] and [`HELD`].
const fn next_generation(g: u32) -> u32 {
    match g.wrapping_add(1) {
        FREE | HELD => HELD + 1,
        n => n,
    }
}

/// The current fork generation: it moves on at every fork whose handlers call
/// [`release_fork_locks`], in the parent and in the child alike. State that must not
/// be shared across a fork (a pool of random words) notes it and starts afresh when
/// it has moved, with no write at the fork itself.
#[inline]
pub fn fork_generation() -> u32 {
    FORK_GEN.load(Ordering::Acquire)
}

/// Whether lock word `v` means a lock held now: through a guard, or by the fork
/// handlers in the current generation.
#[inline]
fn held(v: u32) -> bool {
    v == HELD || (v != FREE && v == FORK_GEN.load(Ordering::Acquire))
}

/// A spin lock that owns the data it protects.
///
/// Invariant: `data` is only reached through a [`SpinLockGuard`], or by the thread
/// that took the lock with [`SpinLock::lock_forever`]; at most one of them at a time:
/// the word is `HELD` exactly while a guard exists, and equal to the fork
/// generation (`FORK_GEN`) while the fork handlers hold it. Any other value than
/// these is a free lock: `FREE`, or a generation that [`release_fork_locks`] has
/// left behind (in the parent or the child of a fork).
pub struct SpinLock<T> {
    word: AtomicU32,
    data: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `T` to one thread at a time, so sharing the lock
// is sound whenever `T` may be sent between threads.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the `T` it owns.
unsafe impl<T: Send> Send for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// A new, unlocked lock.
    pub const fn new(data: T) -> Self {
        Self {
            word: AtomicU32::new(FREE),
            data: UnsafeCell::new(data),
        }
    }

    /// Takes the lock, spinning until it is free.
    #[inline]
    pub fn lock(&self) -> SpinLockGuard<'_, T> {
        if self
            .word
            .compare_exchange_weak(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        SpinLockGuard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            let mut v = self.word.load(Ordering::Relaxed);
            while held(v) {
                spins += 1;
                if spins >= SPINS_BEFORE_RELAX {
                    spins = 0;
                    relax();
                } else {
                    core::hint::spin_loop();
                }
                v = self.word.load(Ordering::Relaxed);
            }
            if self.take_free(v) {
                return;
            }
        }
    }

    /// Takes the lock from its free word `v` ([`FREE`] or a past fork generation).
    #[inline]
    fn take_free(&self, v: u32) -> bool {
        self.word
            .compare_exchange(v, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Takes the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<SpinLockGuard<'_, T>> {
        let v = self.word.load(Ordering::Relaxed);
        (!held(v) && self.take_free(v)).then(|| SpinLockGuard { lock: self })
    }

    /// Whether some context holds the lock now (a hint for assertions and reports).
    pub fn is_locked(&self) -> bool {
        held(self.word.load(Ordering::Relaxed))
    }

    /// Takes the lock and keeps it without a guard (fork handlers take every lock in
    /// one function and release them in another); release it with `force_unlock`, or
    /// with every other such lock by [`release_fork_locks`].
    pub fn lock_forever(&self) {
        core::mem::forget(self.lock());
        // Ours now: mark it as the fork handlers' (see `FORK_GEN`).
        self.word
            .store(FORK_GEN.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The data of a lock the caller holds without a guard ([`SpinLock::lock_forever`]).
    ///
    /// # Safety
    /// The caller took the lock with `lock_forever` and has not released it, and
    /// writes nothing through other references meanwhile.
    pub(crate) unsafe fn held_data(&self) -> &T {
        // SAFETY: held by the caller (see above): no guard and no other holder exists.
        unsafe { &*self.data.get() }
    }

    /// Releases a lock whose guard was forgotten with `core::mem::forget`.
    ///
    /// # Safety
    /// The caller took the lock, forgot its guard and holds no reference into the data.
    /// This serves the fork handlers, which take every lock in one function and release
    /// it in another.
    pub unsafe fn force_unlock(&self) {
        self.word.store(FREE, Ordering::Release);
    }
}

/// Access to the data of a held [`SpinLock`]; dropping it releases the lock.
pub struct SpinLockGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinLockGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while the lock is held, so no other reference to
        // the data exists (the invariant of `SpinLock`).
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for SpinLockGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only access through the guard.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for SpinLockGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.word.store(FREE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_fork_generation_never_becomes_free_or_held() {
        assert_eq!(super::next_generation(2), 3);
        assert_eq!(super::next_generation(u32::MAX - 1), u32::MAX);
        // Before, the generation after u32::MAX was FREE (0), and the next HELD (1):
        // the fork handlers' locks were then not held across a fork, or held for good.
        assert_eq!(super::next_generation(u32::MAX), 2);
        assert_eq!(super::next_generation(super::FREE), 2);
    }

    extern crate std;
    use super::*;
    use std::sync::Arc;

    #[test]
    fn lock_excludes_other_threads() {
        let lock = Arc::new(SpinLock::new(0u64));
        let threads: std::vec::Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let mut g = lock.lock();
                        // A non-atomic read-modify-write: lost updates show up as a
                        // wrong total if the lock let two threads in.
                        let v = *g;
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 40_000);
    }

    #[test]
    fn try_lock_fails_while_held() {
        let lock = SpinLock::new(());
        let g = lock.lock();
        assert!(lock.try_lock().is_none());
        assert!(lock.is_locked());
        drop(g);
        assert!(lock.try_lock().is_some());
    }
}
