//! The barn (`struct node_barn`): per cache and node, the sheaves no CPU holds — full
//! ones (objects ready to hand out) and empty ones (room for frees) — so that a CPU
//! whose sheaves ran out or filled up exchanges a whole sheaf instead of going to the
//! slabs. Bonwick's depot, tcmalloc's transfer cache.
//!
//! Locking: the barn's spin lock covers its two lists and counts. Nothing else is
//! taken under it (it is a leaf of the lock order): sheaves are put in and taken out
//! under it; refilling, flushing and freeing sheaves happen after it is dropped.
//! A sheaf on a barn list belongs to the barn: nobody else touches it.
//!
//! The barns' decay and shrinking (flushing barn sheaves to the slabs) are here too;
//! they take the barn's lock only to take sheaves off its lists, the cache list's lock
//! (try-lock, from the housekeeping) to walk the caches.

use super::sheaf::SlabSheaf;
use super::{KmemCache, Slub};
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::{Ordering::Relaxed, SpinLock};
use core::ptr::{self, NonNull};

/// Most full sheaves a barn keeps (`MAX_FULL_SHEAVES`); a CPU's full sheaf past it
/// (or past the cache's byte bound, `sheaf_size::barn_max_full`) is flushed to the slabs.
/// The kernel keeps 10; kmem lets a barn grow while it is in use, so that a program
/// that frees tens of thousands of small objects and allocates them again (a tree or a
/// table dropped and rebuilt) exchanges whole sheaves instead of going through the
/// slabs, and gives the sheaves beyond [`BARN_KEEP_SHEAVES`] back once they sat unused
/// through a decay interval ([`BarnLists::take_idle`]). The bound in bytes
/// (`sheaf_size::BARN_MAX_OBJECT_BYTES`) is what decides for every cache of 16-byte
/// objects or more; this count only caps the smallest class (4 MiB of 8-byte objects
/// would be 4,228 sheaves). At 256, the cap before, it decided for every class up to
/// 128 bytes, and a table of 200,000 16-byte objects freed at once went to its slabs
/// at a CAS an object past its first 32,000.
pub const MAX_FULL_SHEAVES: usize = 4096;
/// Most empty sheaves a barn keeps; past it an empty sheaf is freed
/// (`MAX_EMPTY_SHEAVES`). As many as full ones: the empties a barn collects are the
/// full sheaves it handed out, emptied, and a CPU that frees the objects again wants
/// them back rather than a new sheaf each time.
pub const MAX_EMPTY_SHEAVES: usize = MAX_FULL_SHEAVES;
/// Full and empty sheaves a barn keeps however long they sit unused (the kernel's
/// limit for both).
pub const BARN_KEEP_SHEAVES: usize = 10;

/// The two lists of a barn. Sheaves are linked through [`SlabSheaf::next`]; a "full"
/// sheaf is any sheaf with objects (a CPU hands in partly filled ones when it goes
/// offline), an empty one has none.
///
/// Invariant: `nr_full`/`nr_empty` are the lengths of the lists; every sheaf on
/// `full` has at least one object and every one on `empty` none.
pub struct BarnLists {
    full: *mut SlabSheaf,
    empty: *mut SlabSheaf,
    nr_full: usize,
    nr_empty: usize,
    /// The fewest full (`.0`) and empty (`.1`) sheaves the lists held since the last
    /// [`BarnLists::take_idle`]: that many sat unused all the while.
    low: (usize, usize),
}

// SAFETY: the lists own the sheaves they link (type invariant); they move between
// threads only under the barn's lock.
unsafe impl Send for BarnLists {}

impl BarnLists {
    /// Empty lists.
    pub const fn new() -> Self {
        Self {
            full: ptr::null_mut(),
            empty: ptr::null_mut(),
            nr_full: 0,
            nr_empty: 0,
            low: (0, 0),
        }
    }

    /// Full sheaves kept.
    pub fn nr_full(&self) -> usize {
        self.nr_full
    }

    /// Empty sheaves kept.
    pub fn nr_empty(&self) -> usize {
        self.nr_empty
    }

    fn push(head: &mut *mut SlabSheaf, sheaf: NonNull<SlabSheaf>) {
        // SAFETY: the sheaf is handed to the lists (caller), nobody else touches it.
        unsafe { sheaf.as_ref() }.next.store(*head, Relaxed);
        *head = sheaf.as_ptr();
    }

    fn pop(head: &mut *mut SlabSheaf) -> Option<NonNull<SlabSheaf>> {
        let sheaf = NonNull::new(*head)?;
        // SAFETY: sheaves on the lists are live and the lists' own.
        *head = unsafe { sheaf.as_ref() }.next.load(Relaxed);
        Some(sheaf)
    }

    /// `barn_get_full_sheaf`: a sheaf with objects, if the barn has one.
    pub fn get_full(&mut self) -> Option<NonNull<SlabSheaf>> {
        let s = Self::pop(&mut self.full)?;
        self.nr_full -= 1;
        self.low.0 = self.low.0.min(self.nr_full);
        Some(s)
    }

    /// `barn_get_empty_sheaf`: an empty sheaf, if the barn has one.
    pub fn get_empty(&mut self) -> Option<NonNull<SlabSheaf>> {
        let s = Self::pop(&mut self.empty)?;
        self.nr_empty -= 1;
        self.low.1 = self.low.1.min(self.nr_empty);
        Some(s)
    }

    /// The decay of a barn: takes off the lists (as two chains linked through
    /// [`SlabSheaf::next`], for the caller to flush and free) the sheaves beyond
    /// [`BARN_KEEP_SHEAVES`] that sat unused since the last call — as many as the
    /// lists never went below — and starts a new period.
    pub fn take_idle(&mut self) -> (*mut SlabSheaf, *mut SlabSheaf) {
        let idle = [
            self.low
                .0
                .min(self.nr_full)
                .saturating_sub(BARN_KEEP_SHEAVES),
            self.low
                .1
                .min(self.nr_empty)
                .saturating_sub(BARN_KEEP_SHEAVES),
        ];
        let mut out = [ptr::null_mut(); 2];
        for _ in 0..idle[0] {
            let Some(sh) = Self::pop(&mut self.full) else {
                break;
            };
            Self::push(&mut out[0], sh);
            self.nr_full -= 1;
        }
        for _ in 0..idle[1] {
            let Some(sh) = Self::pop(&mut self.empty) else {
                break;
            };
            Self::push(&mut out[1], sh);
            self.nr_empty -= 1;
        }
        self.low = (self.nr_full, self.nr_empty);
        (out[0], out[1])
    }

    /// `barn_put_full_sheaf`: keeps a sheaf with objects, unless the barn holds `max`
    /// already (the cache's `barn_max_full`, at most [`MAX_FULL_SHEAVES`]): then it
    /// is handed back (`Err`), for the caller to flush to the slabs.
    pub fn put_full(
        &mut self,
        sheaf: NonNull<SlabSheaf>,
        max: usize,
    ) -> Result<(), NonNull<SlabSheaf>> {
        if self.nr_full >= max {
            return Err(sheaf);
        }
        Self::push(&mut self.full, sheaf);
        self.nr_full += 1;
        Ok(())
    }

    /// `barn_put_empty_sheaf`: keeps an empty sheaf, unless the barn holds
    /// [`MAX_EMPTY_SHEAVES`] already: then it is handed back (`Err`), to be freed.
    pub fn put_empty(&mut self, sheaf: NonNull<SlabSheaf>) -> Result<(), NonNull<SlabSheaf>> {
        if self.nr_empty >= MAX_EMPTY_SHEAVES {
            return Err(sheaf);
        }
        Self::push(&mut self.empty, sheaf);
        self.nr_empty += 1;
        Ok(())
    }

    /// A CPU's whole exchange for an allocation: `empty` in, a full sheaf out, when the
    /// barn has a full one and room for the empty one; else `None` and nothing
    /// changes (the caller takes the general path: a refill, or freeing the empty one).
    #[inline]
    pub fn exchange_empty(&mut self, empty: NonNull<SlabSheaf>) -> Option<NonNull<SlabSheaf>> {
        if self.nr_empty >= MAX_EMPTY_SHEAVES {
            return None;
        }
        let full = self.get_full()?;
        Self::push(&mut self.empty, empty);
        self.nr_empty += 1;
        Some(full)
    }

    /// A CPU's whole exchange for a free: `full` in, an empty sheaf out, when the barn
    /// has an empty one and holds fewer than `max` full ones; else `None` and nothing
    /// changes (the caller takes the general path: a new empty sheaf, or the flush).
    #[inline]
    pub fn exchange_full(
        &mut self,
        full: NonNull<SlabSheaf>,
        max: usize,
    ) -> Option<NonNull<SlabSheaf>> {
        if self.nr_full >= max {
            return None;
        }
        let empty = self.get_empty()?;
        Self::push(&mut self.full, full);
        self.nr_full += 1;
        Some(empty)
    }

    /// The heads of the full and the empty list (for a census under the lock).
    pub fn heads(&self) -> [*mut SlabSheaf; 2] {
        [self.full, self.empty]
    }

    /// Takes every sheaf (shrinking): the full list and the empty list.
    pub fn take_all(&mut self) -> (*mut SlabSheaf, *mut SlabSheaf) {
        self.nr_full = 0;
        self.nr_empty = 0;
        self.low = (0, 0);
        (
            core::mem::replace(&mut self.full, ptr::null_mut()),
            core::mem::replace(&mut self.empty, ptr::null_mut()),
        )
    }
}

impl Default for BarnLists {
    fn default() -> Self {
        Self::new()
    }
}

/// A cache's barn on one node (`struct node_barn`).
pub struct Barn {
    pub(crate) lists: SpinLock<BarnLists>,
}

impl Barn {
    pub(crate) const fn new() -> Self {
        Self {
            lists: SpinLock::new(BarnLists::new()),
        }
    }

    /// `barn_replace_empty_sheaf`: a full sheaf for an empty one (`None`: the barn has
    /// no full sheaf; the empty one stays the caller's). The empty sheaf, if given and
    /// the barn has no room for it, comes back as the second value, to be freed.
    pub(crate) fn replace_empty(
        &self,
        empty: Option<NonNull<SlabSheaf>>,
    ) -> Option<(NonNull<SlabSheaf>, Option<NonNull<SlabSheaf>>)> {
        let mut l = self.lists.lock();
        let full = l.get_full()?;
        let extra = empty.and_then(|e| l.put_empty(e).err());
        Some((full, extra))
    }

    /// `barn_replace_full_sheaf`: hands in a full sheaf and takes an empty one if the
    /// barn has one (`Ok(None)`: it had none; the caller makes one). `Err(full)`: the
    /// barn holds `max_full` full sheaves already; the caller flushes this one to the
    /// slabs.
    pub(crate) fn replace_full(
        &self,
        full: NonNull<SlabSheaf>,
        max_full: usize,
    ) -> Result<Option<NonNull<SlabSheaf>>, NonNull<SlabSheaf>> {
        let mut l = self.lists.lock();
        l.put_full(full, max_full)?;
        Ok(l.get_empty())
    }
}

impl<P: Platform> Slub<'_, P> {
    /// The slab layer's part of the housekeeping (see
    /// [`crate::page::PageAllocator::housekeeping_tick`]): once per decay interval,
    /// the barns' decay ([`Slub::decay_barns`]).
    #[inline]
    pub(super) fn housekeeping_tick(&self, c: CpuRef<'_>) {
        if self.pages.housekeeping_tick(c) {
            self.maybe_decay_barns(c);
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn maybe_decay_barns(&self, c: CpuRef<'_>) {
        let now = self.pages.platform().now_ns();
        let delay = self.pages.report_delay_ns.load(Relaxed);
        let last = self.caches.barn_decay_ns.load(Relaxed);
        if now.saturating_sub(last) < delay
            || self
                .caches
                .barn_decay_ns
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        // Never waits for the list lock: its holder may be this thread, further up.
        // Busy: the next tick tries again.
        let Some(_g) = self.caches.lock.try_lock() else {
            self.caches.barn_decay_ns.store(last, Relaxed);
            return;
        };
        // Under the list lock: no reporting pass (see `Kmem::shrink_all`).
        self.pages.with_reporting_deferred(|| {
            // SAFETY: the list lock is held.
            unsafe {
                self.caches.for_each_locked(|s| {
                    self.decay_barns(Some(c), s);
                    self.decay_empty_slabs(s);
                })
            }
        });
    }

    /// The barns' decay for `s`: the sheaves each barn kept beyond
    /// [`super::barn::BARN_KEEP_SHEAVES`] and nobody took since the last decay are
    /// flushed to the slabs and freed ([`super::barn::BarnLists::take_idle`]).
    /// Returns the sheaves freed.
    pub fn decay_barns(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache) -> usize {
        if s.config().sheaf_capacity == 0 {
            return 0;
        }
        let mut freed = 0;
        for nid in 0..self.pages.nr_nodes() {
            let (full, empty) = s.node(nid).barn.lists.lock().take_idle();
            freed += self.free_sheaf_chains(cpu, s, full, empty);
        }
        freed
    }

    /// Flushes and frees the sheaves of two chains taken off a barn (linked through
    /// [`SlabSheaf::next`]): returns how many.
    fn free_sheaf_chains(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        mut full: *mut SlabSheaf,
        mut empty: *mut SlabSheaf,
    ) -> usize {
        let mut freed = 0;
        while let Some(sh) = NonNull::new(full) {
            // SAFETY: taken from the barn: ours.
            let r = unsafe { sh.as_ref() };
            full = r.next.load(Relaxed);
            self.sheaf_flush(cpu, s, sh.as_ptr(), r.size.load(Relaxed));
            self.free_empty_sheaf(s, sh);
            freed += 1;
        }
        while let Some(sh) = NonNull::new(empty) {
            // SAFETY: as above.
            empty = unsafe { sh.as_ref() }.next.load(Relaxed);
            self.free_empty_sheaf(s, sh);
            freed += 1;
        }
        freed
    }

    /// Flushes every barn of `s` to the slabs and frees its sheaves (shrinking, memory
    /// pressure, cache destruction), and gives the nodes' fresh tails back to their
    /// slabs. Returns the sheaves freed. The sheaves' memory goes back to kmalloc
    /// caches: shrink those after (see `Kmem::shrink_all`).
    pub fn shrink_barns(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache) -> usize {
        if s.config().sheaf_capacity == 0 {
            return 0;
        }
        self.release_fresh_slabs(cpu, s);
        let mut freed = 0;
        for nid in 0..self.pages.nr_nodes() {
            let (full, empty) = s.node(nid).barn.lists.lock().take_all();
            freed += self.free_sheaf_chains(cpu, s, full, empty);
        }
        freed
    }
}
