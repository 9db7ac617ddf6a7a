//! The CPU area an operation runs on: [`Heap::cpu`] hands out a [`CpuGuard`] — in
//! thread mode the thread's own area (attached on first use, see `thread`), in
//! per-CPU mode the area of the CPU the thread runs on with that area's local lock
//! held (see `percpu`), or none (the zone path).
//!
//! Locking: a guard holds at most one area's local lock, marked in the thread's
//! held-area slot (`thread`) so that a nested operation of the same thread (a callback inside
//! one, a huge mapping's descriptor) reuses the held area instead of waiting for
//! itself. The mark is cleared when the guard that took the lock drops.

use super::{thread, Heap, MODE_THREAD, READY};
use kmem_core::{CpuArea, CpuRef};
use std::sync::atomic::Ordering;

/// The calling context's CPU area for one operation (see [`Heap::cpu`]): the area,
/// and in per-CPU mode its local lock, released (and the thread's held-area mark
/// cleared) when the guard drops.
pub(crate) struct CpuGuard {
    /// The area's address, or 0 (no area: the zone path).
    area: usize,
    lock: Option<kmem_core::sync::SpinLockGuard<'static, ()>>,
}

impl CpuGuard {
    /// No area: the zone path.
    const NONE: CpuGuard = CpuGuard {
        area: 0,
        lock: None,
    };

    /// An area the thread may act as owner of without taking a lock: its own thread
    /// area, or one whose lock an enclosing guard of this thread holds.
    fn unlocked(area: usize) -> CpuGuard {
        CpuGuard { area, lock: None }
    }

    /// The owner's handle on the area, for as long as the guard lives.
    #[inline]
    pub(crate) fn get(&self) -> Option<CpuRef<'_>> {
        // SAFETY: a non-zero `area` is one the calling thread may act as owner of for
        // the guard's life: its own thread area, or (per-CPU mode) an area whose local
        // lock this guard or an enclosing one on this thread holds. Areas live forever.
        (self.area != 0).then(|| unsafe { CpuRef::new(&*(self.area as *const CpuArea)) })
    }
}

impl Drop for CpuGuard {
    #[inline]
    fn drop(&mut self) {
        if self.lock.is_some() {
            thread::set_held_area(0);
        }
    }
}

impl Heap {
    /// The calling context's CPU area for one operation: in thread mode the thread's
    /// own (attached on first use); in per-CPU mode the area of the CPU it runs on,
    /// with that area's local lock held until the guard drops. `get()` is `None` where
    /// per-CPU lists must not be used (heap not ready, thread exiting, no area to be
    /// had): those callers take the zone path.
    #[inline]
    pub(crate) fn cpu(&self) -> CpuGuard {
        let v = thread::slot();
        if thread::is_area(v) {
            return CpuGuard::unlocked(v);
        }
        self.cpu_cold(v)
    }

    #[cold]
    #[inline(never)]
    fn cpu_cold(&self, slot: usize) -> CpuGuard {
        if slot != 0 || self.state.load(Ordering::Acquire) != READY {
            return CpuGuard::NONE;
        }
        if self.mode.load(Ordering::Relaxed) == MODE_THREAD {
            return CpuGuard::unlocked(
                self.attach_cold()
                    .map_or(0, |c| c.area() as *const CpuArea as usize),
            );
        }
        // Per-CPU mode. Nested in an operation of this thread: the area it holds.
        let held = thread::held_area();
        if held != 0 {
            return CpuGuard::unlocked(held);
        }
        match self.lock_this_cpu_area() {
            Some((area, lock)) => CpuGuard {
                area: area as *const CpuArea as usize,
                lock: Some(lock),
            },
            None => CpuGuard::NONE,
        }
    }
}
