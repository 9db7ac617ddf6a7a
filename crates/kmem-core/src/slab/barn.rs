//! The barn (`struct node_barn`): per cache and node, the sheaves no CPU holds — full
//! ones (objects ready to hand out) and empty ones (room for frees) — so that a CPU
//! whose sheaves ran out or filled up exchanges a whole sheaf instead of going to the
//! slabs. Bonwick's depot, tcmalloc's transfer cache. A barn remembers which CPU area
//! handed in each of the sheaves on top of its full list and gives a CPU its own back
//! first ([`BarnLists::get_full`]: kmem's, not the kernel's).
//!
//! Locking: the barn's spin lock covers its two lists, counts and owner hints. Nothing else is
//! taken under it (it is a leaf of the lock order): sheaves are put in and taken out
//! under it; refilling, flushing and freeing sheaves happen after it is dropped. Copies
//! of the two counts are written as each hold ends and read without it, to skip a
//! trade the barn cannot make ([`Barn`]).
//! A sheaf on a barn list belongs to the barn: nobody else touches it.
//!
//! The barns' decay and shrinking (flushing barn sheaves to the slabs) are here too;
//! they take the barn's lock only to take sheaves off its lists, the cache list's lock
//! (try-lock, from the housekeeping) to walk the caches.

use super::barn_spill::SpillAccount;
use super::sheaf::SlabSheaf;
use super::{KmemCache, Slub};
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::{AtomicUsize, Ordering::Relaxed, SpinLock, SpinLockGuard};
use core::ops::{Deref, DerefMut};
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

/// Pages of growth of the slabs (every cache together) and page blocks, net of their
/// frees (`page/block_growth.rs`), after which the barns' decay runs again, however
/// little time went by: 1 MiB. The decay interval is a clock for a
/// program that stops allocating; one that makes new slabs of another class instead
/// (a phase that frees a million 64-byte objects and allocates a million of 128
/// bytes) changed what it uses, and the sheaves the first class's barn kept — up to
/// its bound and the spill budget, 68 MiB — pinned every slab they came from while the
/// second class took new pages (peak resident 200 MiB against mimalloc's 132). A
/// decay that growth runs looks only at the barns that handed out no full sheaf since
/// the last decay, and these give back every full sheaf that sat there since, the ten
/// kept ones too ([`BarnLists::take_idle`]): their slabs empty, and the growing class
/// adopts or reclaims them (`empty.rs`). A barn that hands out sheaves between two
/// such ticks keeps them, whatever its pace: a structure freed and built again while
/// another class grows still comes back out of it whole.
pub const DECAY_GROWTH_PAGES: usize = 256;

/// How many of the sheaves on top of a barn's full list it remembers the owner of:
/// the CPU area that handed each one in ([`BarnLists::get_full`] gives a CPU back its
/// own sheaf first).
pub const BARN_OWNER_HINTS: usize = 8;
/// The owner of a sheaf handed in by no CPU area (a prefilled sheaf returned without
/// one), or of a sheaf past the remembered ones: nobody's.
pub const NO_OWNER: u32 = u32::MAX;

/// The two lists of a barn. Sheaves are linked through [`SlabSheaf::next`]; a "full"
/// sheaf is any sheaf with objects (a CPU hands in partly filled ones when it goes
/// offline), an empty one has none.
///
/// Invariant: `nr_full`/`nr_empty` are the lengths of the lists; every sheaf on
/// `full` has at least one object and every one on `empty` none. `owners[i]`, for `i`
/// below `nr_full` and [`BARN_OWNER_HINTS`], is the id of the CPU area that handed in
/// the `i`-th sheaf of the full list, or [`NO_OWNER`] (a hint: what it decides is
/// which sheaf a CPU gets, never whether it gets one). `over` is what the spill budget
/// was last charged for this barn (see [`super::barn_spill`]).
pub struct BarnLists {
    full: *mut SlabSheaf,
    empty: *mut SlabSheaf,
    nr_full: usize,
    nr_empty: usize,
    /// The fewest full (`.0`) and empty (`.1`) sheaves the lists held since the last
    /// [`BarnLists::take_idle`] that started a new period: that many sat unused all
    /// the while.
    low: (usize, usize),
    /// Whether a CPU took a full sheaf since the last [`BarnLists::take_idle`].
    drawn: bool,
    owners: [u32; BARN_OWNER_HINTS],
    /// Full sheaves beyond the cache's own bound, charged to the spill budget, as of
    /// the end of the last counted hold of the lock.
    over: usize,
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
            drawn: false,
            owners: [NO_OWNER; BARN_OWNER_HINTS],
            over: 0,
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

    /// Full sheaves the spill budget was last charged for (see `over`).
    pub fn over(&self) -> usize {
        self.over
    }

    /// Records the full sheaves beyond `max_full` now as the ones charged: returns
    /// (the count charged before, the count now), for the caller to charge the
    /// difference ([`SpillAccount::settle`]).
    pub(super) fn recount_over(&mut self, max_full: usize) -> (usize, usize) {
        let now = self.nr_full.saturating_sub(max_full);
        (core::mem::replace(&mut self.over, now), now)
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

    /// `barn_get_full_sheaf`: a sheaf with objects, if the barn has one, for CPU area
    /// `owner`: the newest of the sheaves it handed in itself among the remembered
    /// ones, else the newest of all.
    ///
    /// A CPU's own sheaf holds the objects it freed, in the memory it used: another
    /// CPU's holds objects whose neighbours, on the same cache lines, that CPU may
    /// still be using. Two threads that each churned small objects of their own
    /// (libkmem.so's `bench preload` thread_churn) traded sheaves at the barn as
    /// their counts of live objects wandered, until nearly every line of kmalloc-8
    /// held objects of both: their stores to those lines made each thread run up to
    /// twice as long in spells where the VM ran them on two cores (BENCHMARKS.md,
    /// "Sheaves back to the CPU that handed them in"). The owners are in the barn's
    /// own words, so a CPU that takes another's sheaf (a consumer's frees for a
    /// producer) reads no more than before.
    #[inline]
    pub fn get_full(&mut self, owner: u32) -> Option<NonNull<SlabSheaf>> {
        let seen = self.nr_full.min(BARN_OWNER_HINTS);
        let own = self.owners[..seen].iter().position(|&o| o == owner);
        let s = match own {
            Some(i) if i > 0 && owner != NO_OWNER => self.unlink_full(i)?,
            _ => {
                let s = Self::pop(&mut self.full)?;
                self.forget_owner(0);
                s
            }
        };
        self.nr_full -= 1;
        self.low.0 = self.low.0.min(self.nr_full);
        self.drawn = true;
        Some(s)
    }

    /// Takes the `i`-th sheaf (`0 < i < nr_full`) off the full list.
    fn unlink_full(&mut self, i: usize) -> Option<NonNull<SlabSheaf>> {
        let mut prev = NonNull::new(self.full)?;
        for _ in 1..i {
            // SAFETY: sheaves on the lists are live and the lists' own; the list has
            // more than `i` of them (the caller).
            prev = NonNull::new(unsafe { prev.as_ref() }.next.load(Relaxed))?;
        }
        // SAFETY: as above.
        let node = NonNull::new(unsafe { prev.as_ref() }.next.load(Relaxed))?;
        // SAFETY: as above.
        let next = unsafe { node.as_ref() }.next.load(Relaxed);
        // SAFETY: as above.
        unsafe { prev.as_ref() }.next.store(next, Relaxed);
        self.forget_owner(i);
        Some(node)
    }

    /// The owner hints after the `i`-th sheaf of the full list left it.
    fn forget_owner(&mut self, i: usize) {
        self.owners.copy_within(i + 1.., i);
        self.owners[BARN_OWNER_HINTS - 1] = NO_OWNER;
    }

    /// Puts `sheaf` on top of the full list, handed in by CPU area `owner`.
    fn push_full(&mut self, sheaf: NonNull<SlabSheaf>, owner: u32) {
        Self::push(&mut self.full, sheaf);
        self.owners.copy_within(..BARN_OWNER_HINTS - 1, 1);
        self.owners[0] = owner;
        self.nr_full += 1;
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
    ///
    /// With `undrawn_only` (the decay that growth ran, [`DECAY_GROWTH_PAGES`]) a barn
    /// that handed out a full sheaf since the last call gives nothing back and keeps
    /// its period: it is in use, and the growth is no measure of its pace. One that
    /// did not keeps none of its idle full sheaves: its cache stopped allocating while
    /// another one grows, and ten sheaves of objects scattered over its slabs would
    /// keep most of them from emptying (1,240 64-byte objects, a slab in two of 2,048).
    pub fn take_idle(&mut self, undrawn_only: bool) -> (*mut SlabSheaf, *mut SlabSheaf) {
        if core::mem::replace(&mut self.drawn, false) && undrawn_only {
            return (ptr::null_mut(), ptr::null_mut());
        }
        let keep_full = if undrawn_only { 0 } else { BARN_KEEP_SHEAVES };
        let idle = [
            self.low.0.min(self.nr_full).saturating_sub(keep_full),
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
            self.forget_owner(0);
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

    /// `barn_put_full_sheaf`: keeps a sheaf with objects, handed in by CPU area
    /// `owner`, unless the barn holds `max` already (the cache's `barn_max_full`, at
    /// most [`MAX_FULL_SHEAVES`]): then it is handed back (`Err`), for the caller to
    /// flush to the slabs.
    ///
    /// # Safety
    /// `sheaf` is a live sheaf the caller owns (from the sheaf allocator, linked in no
    /// list) and hands over: the lists link it through its `next` word and own it
    /// from then on (what comes back in `Err` is the caller's again).
    pub unsafe fn put_full(
        &mut self,
        sheaf: NonNull<SlabSheaf>,
        max: usize,
        owner: u32,
    ) -> Result<(), NonNull<SlabSheaf>> {
        if self.nr_full >= max {
            return Err(sheaf);
        }
        self.push_full(sheaf, owner);
        Ok(())
    }

    /// `barn_put_empty_sheaf`: keeps an empty sheaf, unless the barn holds
    /// [`MAX_EMPTY_SHEAVES`] already: then it is handed back (`Err`), to be freed.
    ///
    /// # Safety
    /// `sheaf` is a live sheaf the caller owns (from the sheaf allocator, linked in no
    /// list) and hands over: the lists link it through its `next` word and own it
    /// from then on (what comes back in `Err` is the caller's again).
    pub unsafe fn put_empty(
        &mut self,
        sheaf: NonNull<SlabSheaf>,
    ) -> Result<(), NonNull<SlabSheaf>> {
        if self.nr_empty >= MAX_EMPTY_SHEAVES {
            return Err(sheaf);
        }
        Self::push(&mut self.empty, sheaf);
        self.nr_empty += 1;
        Ok(())
    }

    /// A CPU's whole exchange for an allocation: `empty` in, a full sheaf out (as
    /// [`BarnLists::get_full`] picks it for CPU area `owner`), when the barn has a full
    /// one and room for the empty one; else `None` and nothing changes (the caller
    /// takes the general path: a refill, or freeing the empty one).
    ///
    /// # Safety
    /// `empty` is a live sheaf the caller owns (from the sheaf allocator, linked in no
    /// list) and hands over: the lists link it through its `next` word and own it
    /// from then on (on `None` it stays the caller's).
    #[inline]
    pub unsafe fn exchange_empty(
        &mut self,
        empty: NonNull<SlabSheaf>,
        owner: u32,
    ) -> Option<NonNull<SlabSheaf>> {
        if self.nr_empty >= MAX_EMPTY_SHEAVES {
            return None;
        }
        let full = self.get_full(owner)?;
        Self::push(&mut self.empty, empty);
        self.nr_empty += 1;
        Some(full)
    }

    /// A CPU's whole exchange for a free: `full` in (handed in by CPU area `owner`), an
    /// empty sheaf out, when the barn has an empty one and holds fewer than `max` full
    /// ones; else `None` and nothing changes (the caller takes the general path: a new
    /// empty sheaf, or the flush).
    ///
    /// # Safety
    /// `full` is a live sheaf the caller owns (from the sheaf allocator, linked in no
    /// list) and hands over: the lists link it through its `next` word and own it
    /// from then on (on `None` it stays the caller's).
    #[inline]
    pub unsafe fn exchange_full(
        &mut self,
        full: NonNull<SlabSheaf>,
        max: usize,
        owner: u32,
    ) -> Option<NonNull<SlabSheaf>> {
        if self.nr_full >= max {
            return None;
        }
        let empty = self.get_empty()?;
        self.push_full(full, owner);
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
        self.drawn = false;
        self.owners = [NO_OWNER; BARN_OWNER_HINTS];
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
///
/// Invariant: `full_hint` and `empty_hint` are written only under `lists`' lock, by
/// [`BarnGuard`]'s drop, with the lists' counts as that hold of the lock leaves them;
/// so, read without the lock, each is a count the lists had at some moment (the
/// kernel's `data_race(barn->nr_full)`). The slow paths read them first to skip a
/// trade the barn cannot make (no full sheaf for an allocation; no room, or no empty
/// sheaf, for a free) without taking the lock: a stale copy only sends a CPU the
/// longer way (a refill or a flush a trade would have spared, or a hold of the lock
/// that finds nothing), never to a sheaf that is not there.
pub struct Barn {
    lists: SpinLock<BarnLists>,
    full_hint: AtomicUsize,
    empty_hint: AtomicUsize,
}

/// A hold of a barn's lock: the lists, and, as it ends, their counts published to
/// the barn's hints (see [`Barn`]) and, for a counted hold, the spill budget brought
/// to the full list's length ([`SpillAccount::settle`]). Holds that may change the
/// number of full sheaves are counted; an uncounted one that did would leave the
/// budget behind until the barn's next counted hold.
pub(crate) struct BarnGuard<'a> {
    barn: &'a Barn,
    lists: SpinLockGuard<'a, BarnLists>,
    spill: Option<SpillAccount<'a>>,
}

impl Deref for BarnGuard<'_> {
    type Target = BarnLists;
    #[inline]
    fn deref(&self) -> &BarnLists {
        &self.lists
    }
}

impl DerefMut for BarnGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut BarnLists {
        &mut self.lists
    }
}

impl Drop for BarnGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Before the lock's release (the guard's field drops after this body).
        self.barn.full_hint.store(self.lists.nr_full, Relaxed);
        self.barn.empty_hint.store(self.lists.nr_empty, Relaxed);
        if let Some(a) = self.spill {
            a.settle(&mut self.lists);
        }
    }
}

impl Barn {
    pub(crate) const fn new() -> Self {
        Self {
            lists: SpinLock::new(BarnLists::new()),
            full_hint: AtomicUsize::new(0),
            empty_hint: AtomicUsize::new(0),
        }
    }

    /// Takes the barn's lock, for a hold that changes no count of full sheaves (a
    /// census, an empty sheaf taken).
    #[inline]
    pub(crate) fn lock(&self) -> BarnGuard<'_> {
        BarnGuard {
            barn: self,
            lists: self.lists.lock(),
            spill: None,
        }
    }

    /// Takes the barn's lock for a counted hold (see [`BarnGuard`]).
    #[inline]
    pub(crate) fn lock_counted<'a>(&'a self, spill: SpillAccount<'a>) -> BarnGuard<'a> {
        BarnGuard {
            barn: self,
            lists: self.lists.lock(),
            spill: Some(spill),
        }
    }

    /// [`Barn::lock_counted`] if the lock is free.
    #[inline]
    pub(crate) fn try_lock_counted<'a>(&'a self, spill: SpillAccount<'a>) -> Option<BarnGuard<'a>> {
        Some(BarnGuard {
            barn: self,
            lists: self.lists.try_lock()?,
            spill: Some(spill),
        })
    }

    /// Full sheaves the barn held a moment ago (read without the lock; see [`Barn`]).
    #[inline]
    pub(crate) fn nr_full_hint(&self) -> usize {
        self.full_hint.load(Relaxed)
    }

    /// Empty sheaves the barn held a moment ago (read without the lock).
    #[inline]
    pub(crate) fn nr_empty_hint(&self) -> usize {
        self.empty_hint.load(Relaxed)
    }

    /// The fork handlers' hold of the lock (see [`SpinLock::lock_forever`]).
    pub(crate) fn lock_forever(&self) {
        self.lists.lock_forever();
    }

    /// Releases what [`Barn::lock_forever`] took.
    ///
    /// # Safety
    /// As [`SpinLock::force_unlock`].
    pub(crate) unsafe fn force_unlock(&self) {
        // SAFETY: forwarded from the caller.
        unsafe { self.lists.force_unlock() }
    }

    /// `barn_replace_empty_sheaf`: a full sheaf for an empty one, for CPU area `owner`
    /// (`None`: the barn has no full sheaf; the empty one stays the caller's). The
    /// empty sheaf, if given and the barn has no room for it, comes back as the second
    /// value, to be freed. A barn that held no full sheaf a moment ago is not locked.
    pub(crate) fn replace_empty<'a>(
        &'a self,
        empty: Option<NonNull<SlabSheaf>>,
        owner: u32,
        spill: SpillAccount<'a>,
    ) -> Option<(NonNull<SlabSheaf>, Option<NonNull<SlabSheaf>>)> {
        if self.nr_full_hint() == 0 {
            return None;
        }
        let mut l = self.lock_counted(spill);
        let full = l.get_full(owner)?;
        // SAFETY: `empty` is the caller's own sheaf, off its CPU (this function's
        // crate-internal callers pass the one they took).
        let extra = empty.and_then(|e| unsafe { l.put_empty(e) }.err());
        Some((full, extra))
    }

    /// `barn_replace_full_sheaf`: hands in a full sheaf (CPU area `owner`'s) and takes
    /// an empty one if the barn has one (`Ok(None)`: it had none; the caller makes
    /// one). `Err(full)`: the barn holds as many full sheaves as the spill account
    /// allows already ([`SpillAccount::cap`]; or did a moment ago: then its lock is not
    /// taken); the caller flushes this one to the slabs.
    pub(crate) fn replace_full<'a>(
        &'a self,
        full: NonNull<SlabSheaf>,
        spill: SpillAccount<'a>,
        owner: u32,
    ) -> Result<Option<NonNull<SlabSheaf>>, NonNull<SlabSheaf>> {
        let hint = self.nr_full_hint();
        let max_full = spill.cap_at(hint);
        if hint >= max_full {
            return Err(full);
        }
        let mut l = self.lock_counted(spill);
        // SAFETY: `full` is the caller's own sheaf, off its CPU (as in
        // `replace_empty`).
        unsafe { l.put_full(full, max_full, owner) }?;
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
            self.maybe_decay_barns(c, 0);
        }
    }

    /// Counts `pages` of a new slab on the slabs' growth clock, net of their discards
    /// (`CacheList::slab_growth`; [`Slub::discard_slab`] counts the slab's end), which
    /// the barns' decay reads with the page blocks'
    /// ([`crate::page::PageAllocator::block_growth`], [`DECAY_GROWTH_PAGES`]). At a
    /// step of the slabs' growth, the CPU area
    /// `cpu` (its owner calls, from within a slow path) runs its housekeeping, and with
    /// it the decay, in its next slow path; kmalloc's large path runs the decay at a
    /// step itself ([`Slub::note_block_growth`]).
    ///
    /// Net, not every slab made: a program whose objects move from class to class
    /// (buffers grown by `realloc` through every class, each class's slabs emptied as
    /// the next one fills) makes and discards slabs at the same pace and holds no more
    /// memory; counted by slabs made, it ran the decay, a walk of every cache that
    /// flushed the barns the next round wanted, once a megabyte of them.
    pub(crate) fn count_growth(&self, cpu: Option<CpuRef<'_>>, pages: usize) {
        let (before, after) = self.caches.slab_growth.count_alloc(pages);
        if let Some(c) = cpu {
            if before / DECAY_GROWTH_PAGES != after / DECAY_GROWTH_PAGES {
                self.pages.housekeeping_soon(c);
            }
        }
    }

    /// The slabs' growth so far, in pages, every cache together: the sum of the rises
    /// of their live pages above the mark, net of discards (`page/block_growth.rs`).
    /// Only grows, wrapping.
    pub fn slab_growth(&self) -> usize {
        self.caches.slab_growth.growth()
    }

    /// Pages of live slabs (kept empty ones included), every cache together.
    pub fn slab_pages_live(&self) -> usize {
        self.caches.slab_growth.live()
    }

    /// kmalloc (or a page allocation with `__GFP_COMP` through the heap) is about to
    /// take a page block of order `order`: at a step of the page
    /// blocks' growth (net of their frees, [`DECAY_GROWTH_PAGES`]) that the block
    /// makes, the barns' decay runs first, so that the block can take what it gives
    /// back. A phase that moves from small objects to large blocks makes no slab slow
    /// path, where the decay otherwise runs; a buffer allocated and freed per request
    /// raises no growth (see `page/block_growth.rs`).
    #[inline]
    pub fn note_block_growth(&self, cpu: Option<CpuRef<'_>>, order: usize) {
        let Some(c) = cpu else {
            return;
        };
        let now = self.pages.block_growth();
        let then = self.pages.block_growth_with(cpu, order);
        if now / DECAY_GROWTH_PAGES != then / DECAY_GROWTH_PAGES {
            self.maybe_decay_barns(c, then.wrapping_sub(now));
        }
    }

    /// The barns' decay, when due: a decay interval after the last one, or once the
    /// caches' slabs and the page blocks together have grown by [`DECAY_GROWTH_PAGES`]
    /// since it (see there; net of their frees), counting `ahead` pages of
    /// growth the caller is about to make.
    #[cold]
    #[inline(never)]
    pub(super) fn maybe_decay_barns(&self, c: CpuRef<'_>, ahead: usize) {
        let caches = self.caches;
        let now = self.pages.platform().now_ns();
        let last = caches.barn_decay_ns.load(Relaxed);
        let grown = (caches.slab_growth.growth())
            .wrapping_add(self.pages.block_growth())
            .wrapping_add(ahead);
        let grown_last = caches.grown_at_decay.load(Relaxed);
        // Each clock has its mark; whoever moves the one that is due runs the decay.
        let by_growth = now.saturating_sub(last) < self.pages.report_delay_ns.load(Relaxed);
        let moved = if !by_growth {
            caches
                .barn_decay_ns
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        } else {
            grown.wrapping_sub(grown_last) >= DECAY_GROWTH_PAGES
                && caches
                    .grown_at_decay
                    .compare_exchange(grown_last, grown, Relaxed, Relaxed)
                    .is_ok()
        };
        if !moved {
            return;
        }
        // Never waits for the list lock: its holder may be this thread, further up.
        // Busy: the next tick tries again.
        let Some(g) = caches.lock.try_lock() else {
            if by_growth {
                caches.grown_at_decay.store(grown_last, Relaxed);
            } else {
                caches.barn_decay_ns.store(last, Relaxed);
            }
            return;
        };
        // The interval's decay covers the growth's too, and page blocks that take the
        // place of memory freed since count again.
        caches.grown_at_decay.store(grown, Relaxed);
        if !by_growth {
            caches.slab_growth.set_mark();
            self.pages.set_block_growth_mark();
        }
        // Under the list lock: no reporting pass (see `Kmem::shrink_all`).
        self.pages.with_reporting_deferred(|| {
            // SAFETY: the list lock is held.
            unsafe {
                self.caches.for_each_locked(|s| {
                    self.decay_barns(Some(c), s, by_growth);
                    // Growth too: a new slab reclaims others' kept slabs a megabyte
                    // at a time, and a class of large slabs needs whole blocks.
                    self.decay_empty_slabs(s);
                })
            }
        });
        // The idle full sheaves the walk took, flushed after the lock, with the help
        // of every refill about to make a slab meanwhile (`barn_drain.rs`).
        self.drain_after_walk(Some(c), g);
    }

    /// The barns' decay for `s`, in the walk of [`Slub::maybe_decay_barns`] (the
    /// cache list's lock held): the sheaves each barn kept beyond
    /// [`super::barn::BARN_KEEP_SHEAVES`] and nobody took since the last decay are
    /// taken ([`super::barn::BarnLists::take_idle`]; with `by_growth`, only from
    /// barns that handed out no full sheaf since then), the empty ones freed and the
    /// full ones put on the list that the walk's caller and the refills flush after
    /// the lock (`barn_drain.rs`; [`Slub::drain_idle_sheaves`] flushes them at once).
    /// Returns the sheaves taken.
    ///
    /// When growth decays full sheaves of `s`, `s` is a cache of a phase the program
    /// left: the sheaves of `s` that the CPU area `cpu` holds are flushed too, and its
    /// barns shrunk. Its two sheaves hold up to 250 objects of 64 bytes, scattered:
    /// they kept one 64-byte slab in 64 from emptying, and with it most of the 256 KiB
    /// blocks another class's slabs need (a million 64-byte objects freed, then 64 KiB
    /// blocks allocated: 124 MiB at the peak). Other CPU areas' sheaves stay (asking
    /// their owners would flush every cache of theirs). Run where a slow path starts,
    /// as a drain request's flush is.
    pub fn decay_barns(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, by_growth: bool) -> usize {
        if s.config().sheaf_capacity == 0 {
            return 0;
        }
        let mut freed = 0;
        let mut idle_full = false;
        let acct = self.spill_account(s);
        for nid in 0..self.pages.nr_nodes() {
            let (full, empty) = s.node(nid).barn.lock_counted(acct).take_idle(by_growth);
            idle_full |= !full.is_null();
            freed += self.free_sheaf_chains(cpu, s, full, empty, true);
        }
        if let (true, true, Some(c)) = (by_growth, idle_full, cpu) {
            self.flush_cpu_cache(c, s);
            freed += self.empty_barns(cpu, s, true);
        }
        freed
    }

    /// Frees the sheaves of two chains taken off a barn (linked through
    /// [`SlabSheaf::next`]), the full ones flushed first, or, with `defer`, put on
    /// the list of the decay's idle sheaves instead (`barn_drain.rs`): returns how
    /// many.
    fn free_sheaf_chains(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        mut full: *mut SlabSheaf,
        mut empty: *mut SlabSheaf,
        defer: bool,
    ) -> usize {
        let mut freed = 0;
        if defer {
            freed += self.defer_flush(full);
            full = ptr::null_mut();
        }
        while let Some(sh) = NonNull::new(full) {
            // SAFETY: taken from the barn: ours.
            let r = unsafe { sh.as_ref() };
            full = r.next.load(Relaxed);
            self.sheaf_flush(cpu, s, sh.as_ptr(), r.size.load(Relaxed));
            self.free_empty_sheaf(cpu, s, sh);
            freed += 1;
        }
        while let Some(sh) = NonNull::new(empty) {
            // SAFETY: as above.
            empty = unsafe { sh.as_ref() }.next.load(Relaxed);
            self.free_empty_sheaf(cpu, s, sh);
            freed += 1;
        }
        freed
    }

    /// Takes every sheaf off the barns of `s` and gives the nodes' fresh tails back to
    /// their slabs; the sheaves go as [`Slub::free_sheaf_chains`] says (`defer`).
    /// Returns how many.
    fn empty_barns(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, defer: bool) -> usize {
        self.release_fresh_slabs(cpu, s);
        let mut freed = 0;
        let acct = self.spill_account(s);
        for nid in 0..self.pages.nr_nodes() {
            let (full, empty) = s.node(nid).barn.lock_counted(acct).take_all();
            freed += self.free_sheaf_chains(cpu, s, full, empty, defer);
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
        self.empty_barns(cpu, s, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::{AtomicPtr, AtomicUsize};

    fn sheaves<const N: usize>() -> [SlabSheaf; N] {
        core::array::from_fn(|i| SlabSheaf {
            size: AtomicUsize::new(i + 1),
            next: AtomicPtr::new(ptr::null_mut()),
            cache: AtomicPtr::new(ptr::null_mut()),
            capacity: AtomicUsize::new(16),
        })
    }

    fn ptr_of(s: &SlabSheaf) -> NonNull<SlabSheaf> {
        NonNull::from(s)
    }

    #[test]
    fn a_cpu_gets_its_own_sheaf_back_from_among_the_remembered_ones() {
        let sh = sheaves::<10>();
        let mut l = BarnLists::new();
        // Handed in bottom first: owners 1, 2, 3, 1, 4, 5, 6, 7, 8, 9.
        for (s, owner) in sh.iter().zip([1, 2, 3, 1, 4, 5, 6, 7, 8, 9]) {
            // SAFETY: test sheaves, each handed in while no list holds it.
            unsafe { l.put_full(ptr_of(s), MAX_FULL_SHEAVES, owner) }.unwrap();
        }
        // Owner 2's sheaf is ninth from the top, past the hints: the newest of all.
        assert_eq!(l.get_full(2), Some(ptr_of(&sh[9])));
        // Owner 1's newest (the fourth handed in) is sixth from the top now.
        assert_eq!(l.get_full(1), Some(ptr_of(&sh[3])));
        // Nobody's: the newest.
        assert_eq!(l.get_full(NO_OWNER), Some(ptr_of(&sh[8])));
        // Owner 3's, third from the bottom, is within the hints again.
        assert_eq!(l.get_full(3), Some(ptr_of(&sh[2])));
        // An exchange picks the same way and keeps the empty one. Owner 1's other
        // sheaf, the first handed in, left the hints when the ninth came: the newest.
        let [empty, spare, third] = sheaves::<3>();
        // SAFETY: test sheaves, each handed in while no list holds it.
        unsafe { l.put_empty(ptr_of(&empty)) }.unwrap();
        assert_eq!(
            // SAFETY: test sheaves, each handed in while no list holds it.
            unsafe { l.exchange_empty(ptr_of(&spare), 1) },
            Some(ptr_of(&sh[7]))
        );
        assert_eq!((l.nr_full(), l.nr_empty()), (5, 2));
        // Handed in again, owner 4's is found below the new one.
        // SAFETY: test sheaves, each handed in while no list holds it.
        unsafe { l.put_full(ptr_of(&third), MAX_FULL_SHEAVES, 1) }.unwrap();
        assert_eq!(l.get_full(4), Some(ptr_of(&sh[4])));
        // What is left is linked whole, newest first.
        let (mut full, _) = l.take_all();
        assert_eq!(NonNull::new(full), Some(ptr_of(&third)));
        full = third.next_in_list();
        for i in [6, 5, 1, 0] {
            assert_eq!(NonNull::new(full), Some(ptr_of(&sh[i])));
            full = sh[i].next_in_list();
        }
        assert!(full.is_null());
    }

    #[test]
    fn the_barn_s_hints_follow_its_lists_and_spare_it_the_lock() {
        let sh = sheaves::<4>();
        let [e0, e1] = sheaves::<2>();
        let barn = Barn::new();
        // A cache that keeps 2 full sheaves and does not spill.
        let budget = super::super::barn_spill::BarnSpill::new();
        let mut cfg = super::super::CacheConfig::calculate(
            "hints",
            1024,
            8,
            super::super::SlabFlags::empty(),
            None,
            2,
        )
        .unwrap();
        cfg.barn_max_full = 2;
        let acct = SpillAccount::new(&budget, &cfg);
        assert_eq!((barn.nr_full_hint(), barn.nr_empty_hint()), (0, 0));
        {
            let mut l = barn.lock();
            // SAFETY: test sheaves, each handed in while no list holds it.
            unsafe { l.put_empty(ptr_of(&e0)) }.unwrap();
            // Written as the hold ends, not before.
            assert_eq!(barn.nr_empty_hint(), 0);
        }
        assert_eq!(barn.nr_empty_hint(), 1);
        // Two full sheaves in, one empty out: the hints are the counts after each.
        assert_eq!(
            barn.replace_full(ptr_of(&sh[0]), acct, 1),
            Ok(Some(ptr_of(&e0)))
        );
        assert_eq!(barn.replace_full(ptr_of(&sh[1]), acct, 1), Ok(None));
        assert_eq!((barn.nr_full_hint(), barn.nr_empty_hint()), (2, 0));
        // At its bound, and with no full sheaf, the barn answers without its lock:
        // held here, it would spin forever otherwise.
        {
            let _held = barn.lock();
            assert_eq!(
                barn.replace_full(ptr_of(&sh[2]), acct, 1),
                Err(ptr_of(&sh[2]))
            );
        }
        let mut l = barn.lock();
        let taken = l.take_all();
        drop(l);
        assert!(!taken.0.is_null());
        assert_eq!((barn.nr_full_hint(), barn.nr_empty_hint()), (0, 0));
        {
            let _held = barn.lock();
            assert_eq!(barn.replace_empty(Some(ptr_of(&e1)), 1, acct), None);
        }
        // A full sheaf again: the trade is made under the lock.
        // SAFETY: test sheaves, each handed in while no list holds it.
        unsafe { barn.lock().put_full(ptr_of(&sh[3]), 2, 1) }.unwrap();
        assert_eq!(barn.nr_full_hint(), 1);
        assert_eq!(
            barn.replace_empty(Some(ptr_of(&e1)), 1, acct),
            Some((ptr_of(&sh[3]), None))
        );
        assert_eq!((barn.nr_full_hint(), barn.nr_empty_hint()), (0, 1));
    }
}
