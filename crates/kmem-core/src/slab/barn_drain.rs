//! The barns' decay's idle full sheaves on their way to the slabs: a shared list that
//! any thread about to make a new slab helps flush, instead of taking fresh pages
//! while one thread flushes them all.
//!
//! The decay ([`Slub::maybe_decay_barns`]) takes the sheaves nobody drew from the
//! barns of every cache under the cache list's lock. A phase the program left can
//! leave tens of megabytes of objects there (a million 128-byte objects freed in
//! random order: the barns' bound and the spill budget), and flushing them, a free
//! pointer written into a cold object each, takes the decaying thread tens of
//! milliseconds. Meanwhile the program's other threads went on with the next phase:
//! finding no kept slab to adopt (the flush had not emptied them yet, and adoption
//! needs the cache list's lock, which the walk held), they took fresh pages, and a
//! two-thread program that freed a million 128-byte objects and allocated as many
//! 64-byte ones peaked 4–20 MiB above its first phase (141–157 MiB; mimalloc 133,
//! about its first phase's). Now it peaks at 133–142.
//!
//! So the walk only takes the sheaves and puts them here ([`Slub::defer_flush`]).
//! After it lets the cache list's lock go, the decaying thread flushes them
//! ([`Slub::help_drain`]), and so does every refill that would make a new slab
//! while some wait (`refill.rs`): it flushes sheaves until none is left, then adopts
//! the slabs that emptied. The flush's work is shared, and the pages it frees are the
//! ones the next phase takes.
//!
//! A sheaf names its cache. A cache's destruction must not free the cache while one
//! of its sheaves waits here or is being flushed: the decay holds the cache list's
//! `reclaiming` count from before it lets the lock go until it finds the list empty,
//! and each helper holds one while it flushes a sheaf it took; destruction takes the
//! cache off the list (waiting for a walk in progress), flushes what waits, and
//! waits for `reclaiming` to fall to 0 (`CacheList::wait_for_reclaims`), as for the
//! kept slabs' reclaim. A child forked while another thread flushes inherits that
//! thread's count, which nobody there would lower: the child's fork handler clears
//! it (`Kmem::fork_child`), and the sheaf that thread held is lost to the child.
//!
//! Locking: the list is under its own spin lock, held only to link or unlink
//! sheaves (innermost: no other lock is taken under it). Flushing runs under no lock
//! of its own (a sheaf taken off the list is the taker's alone) and never under the
//! cache list's: the page allocator's frees may run a reporting pass (see
//! `empty.rs`).

use super::sheaf::SlabSheaf;
use super::*;
use crate::page::Page;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::{
    AtomicUsize,
    Ordering::{Relaxed, Release},
    SpinLock, SpinLockGuard,
};
use core::ptr::{self, NonNull};

/// The head of a chain of sheaves linked through their `next`.
struct Chain(*mut SlabSheaf);

// SAFETY: the chain's sheaves are reached only through the lock that owns the chain.
unsafe impl Send for Chain {}

/// Idle full sheaves the decay took off the barns, waiting to be flushed.
///
/// Invariant: `waiting` is the number of sheaves on `chain` whenever the lock is
/// free; every sheaf on it is full (`size` objects), off every barn and CPU, and its
/// cache is alive until the list holds none of its sheaves and no helper flushes one
/// (see the module: `reclaiming`).
pub(crate) struct BarnDrain {
    chain: SpinLock<Chain>,
    /// Sheaves on the list: read without the lock, a hint for the refill's test.
    waiting: AtomicUsize,
}

impl BarnDrain {
    pub(crate) const fn new() -> Self {
        Self {
            chain: SpinLock::new(Chain(ptr::null_mut())),
            waiting: AtomicUsize::new(0),
        }
    }

    /// Takes the list's lock for good (the fork handlers, `CacheList::fork_lock`).
    pub(crate) fn lock_forever(&self) {
        self.chain.lock_forever();
    }

    /// Releases the lock [`BarnDrain::lock_forever`] took.
    ///
    /// # Safety
    /// As [`SpinLock::force_unlock`]: taken by `lock_forever`, by this thread (or
    /// its parent, before a fork).
    pub(crate) unsafe fn force_unlock(&self) {
        // SAFETY: forwarded from the caller.
        unsafe { self.chain.force_unlock() };
    }

    /// Whether sheaves wait to be flushed (a hint: without the lock).
    #[inline]
    pub(crate) fn pending(&self) -> bool {
        self.waiting.load(Relaxed) != 0
    }

    /// Puts the chain `head` (linked through `next`, null-ended) on the list; returns
    /// how many sheaves it held.
    fn push_chain(&self, head: NonNull<SlabSheaf>) -> usize {
        let mut tail = head;
        let mut n = 1;
        // SAFETY: a chain the caller owns, of live sheaves.
        while let Some(next) = NonNull::new(unsafe { tail.as_ref() }.next.load(Relaxed)) {
            tail = next;
            n += 1;
        }
        let mut l = self.chain.lock();
        // SAFETY: as above: the tail is ours until the lock goes.
        unsafe { tail.as_ref() }.next.store(l.0, Relaxed);
        l.0 = head.as_ptr();
        self.waiting.fetch_add(n, Relaxed);
        n
    }

    /// Takes one sheaf off the list.
    fn pop(&self) -> Option<NonNull<SlabSheaf>> {
        if !self.pending() {
            return None;
        }
        let mut l = self.chain.lock();
        let sh = NonNull::new(l.0)?;
        // SAFETY: on the list: live, reached only under the lock, which we hold.
        l.0 = unsafe { sh.as_ref() }.next.load(Relaxed);
        self.waiting.fetch_sub(1, Relaxed);
        Some(sh)
    }
}

impl<P: Platform> Slub<'_, P> {
    /// Puts the chain of full sheaves `full` (taken off a barn of `s` by the decay,
    /// linked through `next`) on the list of sheaves waiting to be flushed. Returns
    /// how many. The caller holds the cache list's lock (the decay's walk), and
    /// raises `reclaiming` before it lets it go, until [`Slub::help_drain`] finds the
    /// list empty.
    pub(super) fn defer_flush(&self, full: *mut SlabSheaf) -> usize {
        let Some(head) = NonNull::new(full) else {
            return 0;
        };
        self.caches.drain.push_chain(head)
    }

    /// Flushes sheaves waiting on the list to their slabs and frees them, one at a
    /// time, until none is left (other threads may take some meanwhile). Returns how
    /// many this call flushed. Runs under no lock (see the module).
    #[cold]
    #[inline(never)]
    pub(super) fn help_drain(&self, cpu: Option<CpuRef<'_>>) -> usize {
        let mut done = 0;
        loop {
            // Raised before the sheaf leaves the list: a destruction that finds the
            // list without it finds this count instead.
            self.caches.reclaiming.fetch_add(1, Relaxed);
            let Some(sh) = self.caches.drain.pop() else {
                self.caches.reclaiming.fetch_sub(1, Release);
                return done;
            };
            // SAFETY: taken off the list: ours, full, and its cache alive while our
            // count holds (see the module).
            let (s, n) = unsafe {
                let r = sh.as_ref();
                (&*r.cache.load(Relaxed), r.size.load(Relaxed))
            };
            self.sheaf_flush(cpu, s, sh.as_ptr(), n);
            self.free_empty_sheaf(cpu, s, sh);
            self.caches.reclaiming.fetch_sub(1, Release);
            done += 1;
        }
    }

    /// Flushes the barns' idle sheaves that wait to be flushed (see the module) to
    /// their slabs and frees them, with no lock held; returns how many this call
    /// flushed. The decay that took them does it, and so do refills about to make a
    /// slab, shrinking and cache destruction; this is for any other caller that wants
    /// them back in their slabs now.
    pub fn drain_idle_sheaves(&self, cpu: Option<CpuRef<'_>>) -> usize {
        if !self.caches.drain.pending() {
            return 0;
        }
        self.help_drain(cpu)
    }

    /// Idle sheaves the barns' decay took that wait to be flushed (a snapshot).
    pub fn idle_sheaves_waiting(&self) -> usize {
        self.caches.drain.waiting.load(Relaxed)
    }

    /// For a refill of `s` on node `nid` that found no slab to take and is about to
    /// make one: while the decay's sheaves wait on the list, flushes them (see the
    /// module), then takes one of the slabs that emptied: its own cache's, else one
    /// adopted from another cache of its order. `None` when none waited or no kept
    /// slab came of it.
    #[inline]
    pub(super) fn drain_then_adopt(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        nid: usize,
    ) -> Option<NonNull<Page>> {
        if !self.caches.drain.pending() || self.help_drain(cpu) == 0 {
            return None;
        }
        self.pop_kept(s, nid)
            .or_else(|| self.adopt_and_pop_kept(cpu, s, nid))
    }

    /// For the decay, after its walk put sheaves on the list: with the cache list's
    /// lock `g` still held, raises `reclaiming` (so no cache whose sheaves wait can be
    /// destroyed), lets the lock go and flushes until the list is empty.
    pub(super) fn drain_after_walk<T>(&self, cpu: Option<CpuRef<'_>>, g: SpinLockGuard<'_, T>) {
        self.caches.reclaiming.fetch_add(1, Relaxed);
        drop(g);
        self.help_drain(cpu);
        // The list was empty a moment ago; sheaves others took are under their counts.
        self.caches.reclaiming.fetch_sub(1, Release);
    }
}
