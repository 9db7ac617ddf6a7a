//! What the layers above register with the page allocator — shrinkers (`struct
//! shrinker`) and CPU-offline callbacks (`cpuhp` teardown) — and the fork handlers
//! that take every page-layer lock around a `fork`.
//!
//! Locking: each table has its own lock, held only to change it or copy it out; the
//! callbacks run from the copy with no page-layer lock held, so they may allocate and
//! free. `fork_prepare` takes every lock of the page layer in the lock order (lib.rs).

use super::PageAllocator;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::SpinLock;

/// Most shrinkers that can be registered.
pub const MAX_SHRINKERS: usize = 16;
/// Most CPU-offline callbacks.
pub const MAX_CPU_DEAD_HOOKS: usize = 4;

/// A shrinker: a callback that frees memory its layer caches when the page allocator
/// runs out (`struct shrinker`). `scan(data, nid)` frees what it can and returns how
/// many pages it gave back.
#[derive(Clone, Copy)]
pub struct Shrinker {
    /// Frees cached memory; must not hold locks of the page allocator when called.
    pub scan: fn(data: *const (), nid: usize) -> usize,
    /// Passed back to `scan`.
    pub data: *const (),
}
// SAFETY: registering a shrinker promises that `scan` may be called with `data` from any
// thread (documented on `register_shrinker`).
unsafe impl Send for Shrinker {}

/// A CPU-offline callback (`cpuhp` teardown): run by [`PageAllocator::cpu_area_put`]
/// with the departing owner's area, before its per-CPU page lists are drained, so
/// layers above (the slab allocator) can flush their per-CPU state into it.
#[derive(Clone, Copy)]
pub struct CpuDeadHook {
    /// Flushes the layer's per-CPU state of `cpu`.
    pub flush: fn(data: *const (), cpu: CpuRef<'_>),
    /// Passed back to `flush`.
    pub data: *const (),
}
// SAFETY: registering a hook promises that `flush` may be called with `data` from any
// thread that owns a CPU area (documented on `register_cpu_dead`).
unsafe impl Send for CpuDeadHook {}

/// The registered callbacks.
pub(super) struct Hooks {
    shrinkers: SpinLock<[Option<Shrinker>; MAX_SHRINKERS]>,
    cpu_dead: SpinLock<[Option<CpuDeadHook>; MAX_CPU_DEAD_HOOKS]>,
}

/// Puts `item` in the first free slot of `table`; false when it is full.
fn register<T>(table: &mut [Option<T>], item: T) -> bool {
    match table.iter_mut().find(|s| s.is_none()) {
        Some(slot) => {
            *slot = Some(item);
            true
        }
        None => false,
    }
}

impl Hooks {
    pub(super) const fn new() -> Self {
        Self {
            shrinkers: SpinLock::new([None; MAX_SHRINKERS]),
            cpu_dead: SpinLock::new([None; MAX_CPU_DEAD_HOOKS]),
        }
    }

    /// Runs every CPU-offline hook for the area `cpu` owns.
    pub(super) fn run_cpu_dead(&self, cpu: CpuRef<'_>) {
        let hooks = *self.cpu_dead.lock();
        for hook in hooks.iter().flatten() {
            (hook.flush)(hook.data, cpu);
        }
    }
}

impl<P: Platform> PageAllocator<P> {
    /// Registers a shrinker, called (without allocator locks held, from any thread)
    /// when an allocation would otherwise fail. Returns false when the table is full.
    pub fn register_shrinker(&self, shrinker: Shrinker) -> bool {
        register(&mut *self.hooks.shrinkers.lock(), shrinker)
    }

    /// Registers a CPU-offline callback (see [`CpuDeadHook`]); `flush` may be called
    /// from any thread, with `data`. Returns false when the table is full.
    pub fn register_cpu_dead(&self, hook: CpuDeadHook) -> bool {
        register(&mut *self.hooks.cpu_dead.lock(), hook)
    }

    /// Runs every shrinker; returns the pages they freed.
    #[cold]
    pub fn shrink_caches(&self, nid: usize) -> usize {
        let table = *self.hooks.shrinkers.lock();
        table.iter().flatten().map(|s| (s.scan)(s.data, nid)).sum()
    }

    /// `pthread_atfork` prepare: takes every lock of the page allocator in the lock
    /// order, so no other thread is inside a locked section when the process forks.
    pub fn fork_prepare(&self) {
        self.hooks.shrinkers.lock_forever();
        self.hooks.cpu_dead.lock_forever();
        self.hotplug.lock_forever();
        for zone in &self.zones[..self.nr_nodes()] {
            zone.lock.lock_forever();
        }
        self.areas.free_lock().lock_forever();
    }

    /// `pthread_atfork` parent and child: releases what [`PageAllocator::fork_prepare`]
    /// took.
    ///
    /// # Safety
    /// Called once after `fork_prepare`, by the thread that called it (or its child).
    pub unsafe fn fork_release(&self) {
        // SAFETY: each lock was taken by `fork_prepare` and its guard forgotten.
        unsafe {
            self.areas.free_lock().force_unlock();
            for zone in &self.zones[..self.nr_nodes()] {
                zone.lock.force_unlock();
            }
            self.hotplug.force_unlock();
            self.hooks.cpu_dead.force_unlock();
            self.hooks.shrinkers.force_unlock();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_platform::allocator;
    use super::super::Config;
    use super::*;
    use crate::sync::{AtomicUsize, Ordering::Relaxed};

    #[test]
    fn tables_fill_up_and_shrinkers_add_up() {
        fn scan(data: *const (), nid: usize) -> usize {
            // SAFETY: `data` is the counter registered below, which outlives the test.
            let calls = unsafe { &*(data as *const AtomicUsize) };
            calls.fetch_add(1, Relaxed);
            nid + 2
        }
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        let pa = allocator(1, Config::default());
        let s = Shrinker {
            scan,
            data: &CALLS as *const AtomicUsize as *const (),
        };
        for _ in 0..MAX_SHRINKERS {
            assert!(pa.register_shrinker(s));
        }
        assert!(!pa.register_shrinker(s));
        assert_eq!(pa.shrink_caches(1), 3 * MAX_SHRINKERS);
        assert_eq!(CALLS.load(Relaxed), MAX_SHRINKERS);
        let hook = CpuDeadHook {
            flush: |_, _| {},
            data: core::ptr::null(),
        };
        for _ in 0..MAX_CPU_DEAD_HOOKS {
            assert!(pa.register_cpu_dead(hook));
        }
        assert!(!pa.register_cpu_dead(hook));
    }

    #[test]
    fn fork_handlers_take_and_release_every_lock() {
        let pa = allocator(1, Config::default());
        pa.fork_prepare();
        assert!(pa.zones[0].lock.is_locked());
        assert!(pa.hotplug.is_locked());
        assert!(pa.hooks.shrinkers.is_locked() && pa.hooks.cpu_dead.is_locked());
        // SAFETY: once, after fork_prepare, on the same thread.
        unsafe { pa.fork_release() };
        assert!(!pa.zones[0].lock.is_locked() && !pa.hotplug.is_locked());
        assert!(pa.add_memory(0), "usable again");
    }
}
