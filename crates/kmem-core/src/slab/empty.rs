//! A node's kept empty slabs (sheaves design): slabs a free left empty beyond the
//! node's `min_partial`, kept whole — pages, descriptors, sheaf tags, objcg vector —
//! instead of going back to the page allocator, and taken again by the next refill
//! that would make a new slab. The kernel gives such a slab's pages back at once
//! (`discard_slab`), and a program that frees a batch of large objects and allocates
//! them again (10,000 blocks of 16 KiB) then pays, per slab, the page allocator's
//! free and merge, its split and allocation, and the new slab's set-up: half of its
//! instructions. A kept slab is taken like a new one (its objects by address, none of
//! its free pointers read) and needs none of that. mimalloc keeps a freed page in its
//! segment the same way, jemalloc its dirty extents.
//!
//! They go back the way the barns' idle sheaves do ([`super::barn`]): every decay
//! interval (`report_delay_ns`, 1 s by default) the slabs the list kept all interval
//! long — as many as it never went below — are discarded, to the page allocator (and
//! from there to the OS after the page reporting delay). Shrinking, memory pressure
//! and cache destruction discard them all ([`Slub::release_empty_slabs`]). And they
//! are free memory to every other cache: a new slab made from the page allocator
//! first gives back up to [`RECLAIM_PAGES`] of the other caches' kept slabs on its
//! node ([`Slub::reclaim_kept_slabs`]), so that a class's kept slabs never make
//! another class take more pages (a buffer grown through every class keeps only the
//! memory it uses, as when slabs went back at once).
//!
//! Only caches on the sheaf fast paths keep them (not slub_debug caches, whose empty
//! slabs are checked as they go, nor the CPU-slab design), and only frees of the
//! kernel's kind (`Emptied::Keep`): a buffer that outgrew its class frees its slab at
//! once, to the zone or the CPU's page lists, for the larger class (`free_outgrown`).
//!
//! A kept slab is, to the slab states table in `mod.rs`, a full slab (on no node list,
//! unfrozen) with no object in use, and nobody takes from it. Nobody may free into it
//! either: its pages name no sheaf while it is kept (`Slab::stop_fast_frees`), so a
//! double free of one of its objects never reaches a sheaf from the inline or
//! restartable paths, and the regular free, which sees no object of the slab in use,
//! reports it (a sheaf would have handed it out again beside the slab's own copy). Its
//! state still holds the freelist of its last life, which nothing reads: a refill that
//! takes it writes a new one and names the sheaves again
//! ([`Slub::reuse_kept_slab`]).
//!
//! Locking: a node's kept slabs are under its `list_lock`: every method takes the
//! locked partial list as proof (the same lock's guard). No reporting pass may start
//! under the cache list's lock: a pass takes platform locks (the heap's huge-mapping
//! list) that the fork handlers take before the cache list's, and a thread reclaiming
//! under the cache list lock once waited for the huge list's lock, held by a forking
//! thread that waited for the cache list lock (`kmem-malloc`'s fork test hung 4 times
//! in 10). The reclaim takes slabs off the lists under the lock and discards them,
//! through the CPU's page lists, after it (cache destruction waits for it:
//! `CacheList::wait_for_reclaims`); the decay and shrinking, which run under it,
//! discard to the zone inside the walks' reporting deferral
//! (`PageAllocator::with_reporting_deferred`, taken by `maybe_decay_barns` and
//! `Kmem::shrink_all`).

use super::*;
use crate::page::{Page, PageList};
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::{
    AtomicBool, AtomicUsize,
    Ordering::{Relaxed, Release},
};
use core::cell::UnsafeCell;
use core::ptr::NonNull;

/// Most pages of other caches' kept slabs a new slab gives back first
/// ([`Slub::reclaim_kept_slabs`]): one walk of the cache list per 1 MiB of new slabs.
pub const RECLAIM_PAGES: usize = 256;

/// Most pages of other caches' kept slabs one adoption takes
/// ([`Slub::adopt_kept_slabs`]): one walk of the cache list per 1 MiB of slabs.
pub const ADOPT_PAGES: usize = 256;

/// Most caches one reclaim or adoption takes kept slabs from.
const RECLAIM_CACHES: usize = 8;

/// A node's kept empty slabs, linked through their head pages' list links (free
/// while they are on no partial list).
///
/// Invariants (under the node's `list_lock`): every slab on `list` is a live slab of
/// the node's cache on this node, unfrozen, with no object in use, on no other list;
/// `low` is at most `list.len()` at every moment between two decays: the fewest
/// slabs the list held since the last one.
pub(crate) struct EmptySlabs {
    list: UnsafeCell<PageList>,
    low: AtomicUsize,
    /// Whether the list counts in the cache list's `kept_lists` (it did not hold
    /// nothing when last published, [`EmptySlabs::publish`]; under the lock).
    counted: AtomicBool,
}

// SAFETY: `list` is read and written only under the node's `list_lock` (every method
// takes its guard's contents as proof); `low` is atomic.
unsafe impl Sync for EmptySlabs {}

impl EmptySlabs {
    pub(super) const fn new() -> Self {
        Self {
            list: UnsafeCell::new(PageList::new()),
            low: AtomicUsize::new(0),
            counted: AtomicBool::new(false),
        }
    }

    /// The list, for the holder of the node's `list_lock` (`_locked`, its contents).
    #[allow(clippy::mut_from_ref)]
    fn list(&self, _locked: &mut PageList) -> &mut PageList {
        // SAFETY: the caller holds the node's `list_lock` (type invariant), exclusively
        // for as long as it holds `_locked` mutably.
        unsafe { &mut *self.list.get() }
    }

    /// After a change of the list (under the lock): whether it holds slabs, into
    /// `lists`, the cache list's count of kept lists of the node and order
    /// (`CacheList::kept_lists`), when that changed. Every change of the list is
    /// published before the lock goes, so a list is counted while it holds slabs.
    fn publish(&self, locked: &mut PageList, lists: &AtomicUsize) {
        let has = self.len(locked) != 0;
        if has != self.counted.load(Relaxed) {
            self.counted.store(has, Relaxed);
            if has {
                lists.fetch_add(1, Relaxed);
            } else {
                lists.fetch_sub(1, Relaxed);
            }
        }
    }

    /// Slabs kept now.
    pub(super) fn len(&self, locked: &mut PageList) -> usize {
        self.list(locked).len()
    }

    /// Calls `f` for every kept slab (census).
    pub(super) fn for_each(&self, locked: &mut PageList, mut f: impl FnMut(NonNull<Page>)) {
        let mut p = self.list(locked).first();
        while let Some(slab) = NonNull::new(p) {
            f(slab);
            // SAFETY: a kept slab: live (type invariant); we hold the lock.
            p = unsafe { slab.as_ref() }.next.load(Relaxed);
        }
    }

    /// Keeps `slab` (empty, unfrozen, on no list).
    fn push(&self, locked: &mut PageList, slab: NonNull<Page>) {
        // SAFETY: the slab is on no list (caller); we hold the lock.
        unsafe { self.list(locked).push_head(slab.as_ptr()) };
    }

    /// The most recently kept slab, if any.
    fn pop(&self, locked: &mut PageList) -> Option<NonNull<Page>> {
        let list = self.list(locked);
        // SAFETY: we hold the lock; the head is on this list.
        let slab = NonNull::new(unsafe { list.pop_head() })?;
        let len = list.len();
        self.low.store(self.low.load(Relaxed).min(len), Relaxed);
        Some(slab)
    }

    /// Takes off the list, into `out`, up to `n` of the slabs kept last (the most
    /// recently used memory), the newest first.
    fn take_newest(&self, locked: &mut PageList, n: usize, out: &mut PageList) {
        for _ in 0..n {
            let Some(slab) = self.pop(locked) else {
                break;
            };
            // SAFETY: taken off this list: on none now; `out` is the caller's own.
            unsafe { out.push_tail(slab.as_ptr()) };
        }
    }

    /// Takes off the list, into `out`, the `n` slabs kept longest, at most all.
    fn take_oldest(&self, locked: &mut PageList, n: usize, out: &mut PageList) {
        let list = self.list(locked);
        for _ in 0..n {
            let Some(slab) = NonNull::new(list.last()) else {
                break;
            };
            // SAFETY: we hold the lock; `slab` is on this list, then on none, then
            // on `out`, which is the caller's own.
            unsafe {
                list.remove(slab.as_ptr());
                out.push_tail(slab.as_ptr());
            }
        }
        let len = list.len();
        self.low.store(self.low.load(Relaxed).min(len), Relaxed);
    }

    /// The decay: takes off the list, into `out`, as many slabs as it never went below
    /// since the last decay (the oldest), and starts a new period.
    fn take_idle(&self, locked: &mut PageList, out: &mut PageList) {
        let idle = self.low.load(Relaxed).min(self.len(locked));
        self.take_oldest(locked, idle, out);
        self.low.store(self.len(locked), Relaxed);
    }
}

impl<P: Platform> Slub<'_, P> {
    /// Pages in the kept empty slabs of every cache on node `nid` (a walk of the
    /// cache list, under its lock and each cache's node lock in turn).
    pub fn kept_empty_pages(&self, nid: usize) -> usize {
        let _g = self.caches.lock.lock();
        let mut pages = 0;
        // SAFETY: the cache list lock is held.
        unsafe {
            self.caches.for_each_locked(|t| {
                let node = t.node(nid);
                let mut list = node.list_lock.lock();
                pages += node.empty.len(&mut list) << t.config().order;
            })
        };
        pages
    }

    /// Whether any cache keeps an empty slab on node `nid` (racy: a hint).
    fn any_kept(&self, nid: usize) -> bool {
        self.caches.kept_lists[nid]
            .iter()
            .any(|n| n.load(Relaxed) != 0)
    }

    /// The cache list's count of caches whose node `nid` keeps empty slabs of
    /// `s`'s order.
    fn kept_lists(&self, nid: usize, s: &KmemCache) -> &AtomicUsize {
        &self.caches.kept_lists[nid][s.config().order]
    }

    /// Whether a slab of `s` that a free of the kernel's kind leaves empty past the
    /// node's `min_partial` is kept (see the module docs).
    #[inline]
    pub(super) fn keeps_empty_slabs(cfg: &CacheConfig) -> bool {
        matches!(cfg.fast, FastPath::Sheaf | FastPath::SheafRseq) && !cfg.off_fast_paths()
    }

    /// Keeps `slab` (empty, unfrozen, on no list) on its node `nid`, whose `list_lock`
    /// the caller holds (`locked`).
    pub(super) fn keep_empty_slab(
        &self,
        s: &KmemCache,
        nid: usize,
        locked: &mut PageList,
        slab: NonNull<Page>,
    ) {
        // SAFETY: a live slab of `s` (caller).
        Slab::of(unsafe { slab.as_ref() }).stop_fast_frees(s.config());
        let empty = &s.node(nid).empty;
        empty.push(locked, slab);
        empty.publish(locked, self.kept_lists(nid, s));
    }

    /// A flush's run of `cnt` objects of `slab` that are all of its objects in use —
    /// a run that empties the slab, full until now or partial — kept as the free of
    /// the kernel's kind that empties it keeps it ([`Slub::slab_free_as`] with
    /// `Emptied::Keep`: off the partial list, onto the kept list), without linking the
    /// objects: a kept slab's freelist is never read (its next refill takes its
    /// objects by address), and for objects of a page or more each link is a store to
    /// a line, often a page, the flush has not touched. False, having changed nothing,
    /// where the node's partial list is short of `min_partial` (the slab stays there,
    /// freelist and all), the run's first object is the head of the slab's freelist
    /// (a double free), or the slab is not in that state: the caller then links the
    /// run and frees it the regular way, which reports what is wrong.
    ///
    /// Under the node's `list_lock` nobody takes objects from the slab (refills hold
    /// it), and while every object in use is the run's nobody else frees into it, so
    /// the CAS meets no other writer but a double free, which it refuses.
    ///
    /// # Safety
    /// The caller's `cnt` objects of `slab`, `head` among them, are objects of `s`
    /// it gives up when this returns true.
    pub(super) unsafe fn keep_emptied_run(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        head: usize,
        cnt: u64,
    ) -> bool {
        let cfg = s.config();
        let nid = self.pages.page_to_nid(slab);
        let base = self.slab_base(slab);
        let mut list = s.node(nid).list_lock.lock();
        // SAFETY: a live slab of `s` (the caller's objects are in it).
        let sr = Slab::of(unsafe { slab.as_ref() });
        let old = sr.state();
        if old.frozen()
            || old.inuse() != cnt
            || list.len() < cfg.min_partial
            || (!old.list_empty() && base + old.offset() as usize == head)
        {
            return false;
        }
        let new = old.after_free((head - base) as u64, cnt, false);
        if !sr.cas_state(old, new) {
            return false;
        }
        s.stat(cpu, SlubStat::FreeSlowpath);
        self.unlist_emptied(cpu, s, &mut list, slab, old);
        self.keep_empty_slab(s, nid, &mut list, slab);
        true
    }

    /// When node `nid` keeps no empty slab of `s` (its `list_lock` held just now found
    /// none): one adopted from other caches of its order, off its list and count.
    pub(super) fn adopt_and_pop_kept(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        nid: usize,
    ) -> Option<NonNull<Page>> {
        if !self.adopt_kept_slabs(cpu, s, nid) {
            return None;
        }
        self.pop_kept(s, nid)
    }

    /// A kept empty slab of `s`, off its list (its own, popped with the refill's walk
    /// of the partial list, [`Slub::pop_kept_locked`], else one adopted from other
    /// caches of its order, [`Slub::adopt_and_pop_kept`]), taken as
    /// [`Slub::allocate_slab_taking`] takes a new one (up to `out.len()` of its
    /// objects into `out`, the rest its freelist or, with `link_rest` false and
    /// objects in address order, a fresh tail), without the page allocator (and not
    /// counted as `alloc_slab`, which counts slabs made).
    pub(super) fn reuse_kept_slab(
        &self,
        s: &KmemCache,
        slab: NonNull<Page>,
        out: &mut [usize],
        link_rest: bool,
    ) -> (NonNull<Page>, usize, Option<usize>) {
        // SAFETY: taken off the kept list: a live, empty, unfrozen slab of `s` on no
        // list, which nobody else reaches (no object of it is in use).
        let head = unsafe { slab.as_ref() };
        debug_assert_eq!(Slab::of(head).state().inuse(), 0);
        let (state, taken, fresh) =
            self.populate_slab(s.config(), self.slab_base(slab), out, link_rest);
        // The cache and the objcg vector (every slot empty) are the slab's still; its
        // pages name the sheaves again (a vectored slab's, its charged line).
        let has_vector = head.private.load(Relaxed) & accounting::OBJ_EXTS != 0;
        Slab::of(head).resume_fast_frees(s.config(), has_vector);
        Slab::of(head).start_charges_over();
        Slab::of(head).set_state(state);
        (slab, taken, fresh)
    }

    /// The most recently kept slab of `s` on node `nid`, off its list and count.
    pub(super) fn pop_kept(&self, s: &KmemCache, nid: usize) -> Option<NonNull<Page>> {
        let mut list = s.node(nid).list_lock.lock();
        self.pop_kept_locked(s, nid, &mut list)
    }

    /// [`Slub::pop_kept`] for the holder of the node's `list_lock` (`locked`, its
    /// contents).
    pub(super) fn pop_kept_locked(
        &self,
        s: &KmemCache,
        nid: usize,
        locked: &mut PageList,
    ) -> Option<NonNull<Page>> {
        let empty = &s.node(nid).empty;
        let slab = empty.pop(locked)?;
        empty.publish(locked, self.kept_lists(nid, s));
        Some(slab)
    }

    /// The barns' decay's part for kept slabs (run with it, once per decay interval):
    /// on every node, the slabs of `s` kept since the last call (as many as the list
    /// never went below meanwhile, the oldest) go back to the page allocator. Returns
    /// how many.
    pub fn decay_empty_slabs(&self, s: &KmemCache) -> usize {
        self.discard_kept(s, |empty, locked, out| empty.take_idle(locked, out))
    }

    /// Discards every kept empty slab of `s` (shrinking, memory pressure, cache
    /// destruction). Returns how many.
    pub fn release_empty_slabs(&self, s: &KmemCache) -> usize {
        self.discard_kept(s, |empty, locked, out| {
            empty.take_oldest(locked, usize::MAX, out);
            empty.low.store(0, Relaxed);
        })
    }

    /// Before a new slab of `s` on node `nid` is made from the page allocator: while
    /// other caches keep empty slabs on that node, the oldest of them, up to
    /// [`RECLAIM_PAGES`] pages, go back to the page allocator first. Kept slabs save
    /// their own cache a slab's making when it allocates again; they must not hold
    /// memory another cache asks for meanwhile (buffers grown through every class,
    /// each class's slabs freed as the next one fills: kept, they would all stay,
    /// twice the memory the program uses). Skipped when the cache list's lock is
    /// busy (the next new slab tries again).
    pub(super) fn reclaim_kept_slabs(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, nid: usize) {
        if !self.any_kept(nid) {
            return;
        }
        self.reclaim_kept_slabs_slow(cpu, s, nid);
    }

    #[cold]
    #[inline(never)]
    fn reclaim_kept_slabs_slow(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, nid: usize) {
        // Taken under the cache list lock, discarded after it (the page allocator's
        // free may run a reporting pass, whose locks the fork handlers take before the
        // cache list's), through this CPU's page lists.
        let Some((mut taken, n)) =
            self.take_others_kept(s, nid, RECLAIM_PAGES, |t, node, locked, left, out| {
                if Self::keeps_empty_slabs(t.config()) {
                    let want = left.div_ceil(1 << t.config().order);
                    node.empty.take_oldest(locked, want, out);
                    node.empty.publish(locked, self.kept_lists(nid, t));
                }
            })
        else {
            return;
        };
        for (t, out) in &mut taken[..n] {
            // SAFETY: a cache found on the list, which cannot be freed before this
            // reclaim is done: its destruction removes it from the list, then waits
            // for `reclaiming` to fall to 0.
            let t = unsafe { &**t };
            // SAFETY: `out` is ours; its slabs were taken off the kept list.
            while let Some(slab) = NonNull::new(unsafe { out.pop_head() }) {
                self.discard_slab(cpu, t, slab);
            }
        }
        self.caches.reclaiming.fetch_sub(1, Release);
    }

    /// Kept slabs of caches other than `s` on node `nid`, off their lists, for a
    /// reclaim or an adoption: walks the cache list (`None` when its lock is busy) and,
    /// under each cache's node `list_lock` in turn, lets `take` move slabs of it into
    /// `out` (given the pages still wanted), until `want_pages` pages or
    /// [`RECLAIM_CACHES`] caches. Returns the lists by cache and how many. Raises
    /// `reclaiming` before the cache list lock goes: the caller lowers it when done
    /// with the caches, whose destruction waits for that
    /// (`CacheList::wait_for_reclaims`).
    #[allow(clippy::type_complexity)]
    fn take_others_kept(
        &self,
        s: &KmemCache,
        nid: usize,
        want_pages: usize,
        mut take: impl FnMut(&KmemCache, &KmemCacheNode, &mut PageList, usize, &mut PageList),
    ) -> Option<([(*const KmemCache, PageList); RECLAIM_CACHES], usize)> {
        let mut taken: [(*const KmemCache, PageList); RECLAIM_CACHES] =
            [const { (core::ptr::null(), PageList::new()) }; RECLAIM_CACHES];
        let mut n = 0;
        let _g = self.caches.lock.try_lock()?;
        self.caches.reclaiming.fetch_add(1, Relaxed);
        let mut pages = 0;
        // SAFETY: the list lock is held.
        unsafe {
            self.caches.for_each_locked(|t| {
                if pages >= want_pages
                    || n == RECLAIM_CACHES
                    || core::ptr::eq(t, s)
                    || self.kept_lists(nid, t).load(Relaxed) == 0
                {
                    return;
                }
                let node = t.node(nid);
                // A hint, as the count above: a list that held nothing when last
                // published is passed over without its lock. The count by order no
                // longer tells the caches apart (in the sheaves design the small
                // classes' slabs have the order of those from 2 KiB up).
                if !node.empty.counted.load(Relaxed) {
                    return;
                }
                let out = &mut taken[n].1;
                {
                    let mut list = node.list_lock.lock();
                    take(t, node, &mut list, want_pages - pages, out);
                }
                if !out.is_empty() {
                    pages += out.len() << t.config().order;
                    taken[n].0 = t;
                    n += 1;
                }
            })
        };
        Some((taken, n))
    }

    /// Before a refill of `s` makes a slab on node `nid` (its own kept slabs are used
    /// up): other caches' kept slabs of the same order on that node become kept slabs
    /// of `s` — up to [`ADOPT_PAGES`] pages, the most recently kept first — and the
    /// refill takes them as its own ([`Slub::reuse_kept_slab`]). Returns
    /// whether any came.
    ///
    /// A program whose phases free a batch of one size and allocate a batch of
    /// another: up to 256 B (but for the accounted set) and from 2 KiB up the kmalloc
    /// classes' slabs have one order (32 KiB), and the second class's new slabs are
    /// the first one's, without the page allocator's free and merge, split and
    /// allocation, or the slab's page words set up anew (4 KiB then 8 KiB blocks: 375
    /// instructions a pair instead of 549). Caches with a
    /// constructor adopt none (their objects would need it run); the slabs keep their
    /// memory either way, so no cache takes more pages for it. (A buffer grown by
    /// `realloc` frees its old class's slabs to the page allocator at once instead:
    /// the next class gets the memory just copied from, `free_outgrown`.)
    pub(super) fn adopt_kept_slabs(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        nid: usize,
    ) -> bool {
        let cfg = s.config();
        if self.kept_lists(nid, s).load(Relaxed) == 0
            || cfg.ctor.is_some()
            || !Self::keeps_empty_slabs(cfg)
        {
            return false;
        }
        self.adopt_kept_slabs_slow(cpu, s, nid)
    }

    #[cold]
    #[inline(never)]
    fn adopt_kept_slabs_slow(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, nid: usize) -> bool {
        let order = s.config().order;
        // Made `s`'s after the cache list lock (freeing an objcg vector may discard a
        // slab, and a page free may run a reporting pass), as the reclaim does.
        let want = ADOPT_PAGES.max(1 << order);
        let Some((mut taken, n)) =
            self.take_others_kept(s, nid, want, |t, node, locked, left, out| {
                let tc = t.config();
                if tc.order == order && Self::keeps_empty_slabs(tc) {
                    node.empty.take_newest(locked, left >> order, out);
                    node.empty.publish(locked, self.kept_lists(nid, t));
                    // Off `t`'s lists and counts under its lock, onto `s`'s under `s`'s: a
                    // census of either never finds a slab it does not count.
                    node.nr_slabs.fetch_sub(out.len(), Relaxed);
                }
            })
        else {
            return false;
        };
        let mut mine = PageList::new();
        for (t, out) in &mut taken[..n] {
            // SAFETY: a cache found on the list, alive until `reclaiming` falls (its
            // destruction waits for that: `CacheList::wait_for_reclaims`).
            let t = unsafe { &**t };
            // SAFETY: `out` is ours; its slabs were taken off `t`'s kept list.
            while let Some(slab) = NonNull::new(unsafe { out.pop_head() }) {
                // SAFETY: a kept slab taken off its list: empty, on no list, reached by
                // nobody else (its pages name no sheaf; no object of it is in use).
                let head = unsafe { slab.as_ref() };
                // `t`'s objcg vector fits `t`'s objects; `s` makes its own if it needs one.
                self.free_slab_obj_exts(cpu, head);
                t.stat(cpu, SlubStat::FreeSlab);
                Slab::of(head).init_kept(s);
                s.stat(cpu, SlubStat::AllocSlab);
                // SAFETY: on no list; `mine` is ours.
                unsafe { mine.push_tail(slab.as_ptr()) };
            }
        }
        let moved = mine.len();
        if moved > 0 {
            let node = s.node(nid);
            let mut list = node.list_lock.lock();
            // The oldest first, so that the newest ends on top.
            // SAFETY: `mine` is ours; each slab goes onto `s`'s kept list alone.
            while let Some(slab) = NonNull::new(unsafe { mine.pop_tail() }) {
                node.empty.push(&mut list, slab);
            }
            node.empty.publish(&mut list, self.kept_lists(nid, s));
            node.nr_slabs.fetch_add(moved, Relaxed);
        }
        self.caches.reclaiming.fetch_sub(1, Release);
        moved > 0
    }

    /// Takes kept slabs of `s` off each node's list with `take` (under its lock) and
    /// discards them (after it). Returns how many.
    fn discard_kept(
        &self,
        s: &KmemCache,
        take: impl Fn(&EmptySlabs, &mut PageList, &mut PageList),
    ) -> usize {
        (0..self.pages.nr_nodes())
            .map(|nid| self.discard_kept_on(s, nid, &take))
            .sum()
    }

    /// [`Slub::discard_kept`] on node `nid`.
    fn discard_kept_on(
        &self,
        s: &KmemCache,
        nid: usize,
        take: impl Fn(&EmptySlabs, &mut PageList, &mut PageList),
    ) -> usize {
        if !Self::keeps_empty_slabs(s.config()) {
            return 0;
        }
        let node = s.node(nid);
        let mut out = PageList::new();
        {
            let mut list = node.list_lock.lock();
            if node.empty.len(&mut list) == 0 && node.empty.low.load(Relaxed) == 0 {
                return 0;
            }
            take(&node.empty, &mut list, &mut out);
            node.empty.publish(&mut list, self.kept_lists(nid, s));
        }
        let mut n = 0;
        // SAFETY: `out` is ours; its slabs were taken off the kept list.
        while let Some(slab) = NonNull::new(unsafe { out.pop_head() }) {
            // Straight to the zone. Callers that hold the cache list lock (the decay,
            // shrinking every cache) defer reporting passes around their walks.
            self.discard_slab(None, s, slab);
            n += 1;
        }
        n
    }
}
