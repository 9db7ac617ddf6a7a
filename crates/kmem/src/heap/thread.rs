//! Thread mode ("thread = CPU"): each thread owns one [`CpuArea`] (kmem-core's
//! "owned" mode). The first operation of a thread that needs one takes an area from
//! the pool (or makes one) and sets a pthread key whose destructor is the thread's
//! "CPU offline": it drains the area's lists and returns it to the pool, so a program
//! that starts and joins many threads reuses a handful of areas. Also here, as the
//! thread's other slots: the area whose lock it holds in per-CPU mode (see `cpu`) and
//! its active memory cgroup (`set_active_memcg`).
//!
//! The thread-local slots are const-initialised `Cell<usize>`s with no destructor, so
//! reading them never allocates or registers anything. `THIS_AREA` holds `0` (no area
//! yet), `ATTACHING` (getting one, or initialising the heap: nested calls, e.g. from a
//! `calloc` inside `pthread_setspecific`, use the zone path), `EXITED` (the key
//! destructor ran: later allocations by other destructors use the zone path), or the
//! area's address.
//!
//! The fast paths read none of these: they read one word, `platform::fast_tls`, which
//! holds the area when the thread may use it directly (attached, no active memory
//! cgroup), [`rseq_tag`] in per-CPU mode with restartable sequences (no active memory
//! cgroup: the fast paths go straight to the CPU's sheaves), and [`no_area`]
//! otherwise (from the thread's start); every change of the slots above recomputes
//! it. The last two are the two addresses of kmem-core's zero area
//! ([`kmem_core::percpu::ZERO_CPU_AREA`]), so the inline fast paths use the word as
//! an area without testing it ([`inline_area`]): in the zero area they find no object
//! and no room, and fall to their slow halves, which test it ([`fast_cpu`]). The
//! charged paths (an attached thread with an active memory cgroup: its objcg sheaves)
//! read two more words of the same kind, the area and the objcg, recomputed with it.
//! Such a thread's fast word is its area's *charged area* (kmem-core's
//! `memcontrol::charged_area`) while that holds objects of its objcg or none: a block
//! with a CPU area's layout whose lines are its kept sheaves and inboxes, so the
//! inline paths pop charged objects and push freed ones there; else [`no_area`]. The
//! slow halves never take it for a CPU area ([`fast_cpu`] reads the charged word).
//!
//! Locking: none. An area in a thread's slot is that thread's alone until the slot
//! stops naming it (exit or [`Heap::detach_thread`]).

use super::{Heap, HEAP, MODE_THREAD, READY};
use crate::platform::{fast_tls, os};
use kmem_core::memcontrol::ObjCgroup;
use kmem_core::percpu::ZERO_CPU_AREA;
use kmem_core::{CpuArea, CpuRef, InlineArea, Platform};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::Ordering;

const ATTACHING: usize = 1;
const EXITED: usize = 2;

thread_local! {
    static THIS_AREA: Cell<usize> = const { Cell::new(0) };
    /// Per-CPU mode: the area whose local lock this thread holds (0: none), so that a
    /// nested allocation on the same thread (a callback inside an operation) uses it
    /// instead of waiting for itself.
    static HELD_AREA: Cell<usize> = const { Cell::new(0) };
    /// Per-CPU mode, while a constructor runs (`callout_enter`): the area whose lock
    /// the enclosing operation holds, half-way through it. Nothing of this thread may
    /// lock it (it would wait for itself) or act on it meanwhile: the walks over every
    /// CPU's area pass it by (`Heap::for_each_reachable_area`).
    static CALLOUT_AREA: Cell<usize> = const { Cell::new(0) };
    /// The thread's active memory cgroup (`set_active_memcg`): the address of its
    /// objcg, or 0 (allocations are not charged).
    ///
    /// Invariant: a non-zero value holds a reference on that objcg (taken by
    /// [`set_active_objcg`], handed back with the value it returns, and given up by
    /// [`restore_active_objcg`] for the value it replaces, or at the exit of a thread
    /// attached in thread mode), so the objcg outlives its time in the slot whatever
    /// order guards drop in: a group removed meanwhile stays a zombie, its charges
    /// going to its parent. A thread that exits with a group left active otherwise
    /// (per-CPU mode, a thread never attached) keeps that zombie for good.
    static ACTIVE_OBJCG: Cell<usize> = const { Cell::new(0) };
}

/// The fast word of a thread in per-CPU mode with restartable sequences and no active
/// memory cgroup: the zero area's second address.
#[inline(always)]
pub(crate) fn rseq_tag() -> usize {
    ZERO_CPU_AREA.alternate()
}

/// The fast word of a thread that uses neither its own area nor the rseq paths
/// directly (not attached yet, exited, an active memory cgroup, KFENCE on every
/// allocation): the zero area's first address, which a thread's word holds from its
/// start.
#[inline(always)]
pub(crate) fn no_area() -> usize {
    ZERO_CPU_AREA.base()
}

/// The inline fast paths' area: the thread's fast word as it is, an area of its own
/// or the zero area (see the module doc), with no test.
#[inline(always)]
pub(crate) fn inline_area() -> InlineArea<'static> {
    // SAFETY: read just now, on this thread.
    unsafe { inline_area_of(fast_tls::get()) }
}

/// The area the `kmem_cache_*` inline fast paths use: [`inline_area`]'s, but the zero
/// area on a thread running charged (word `fast_tls::CACHE`): its charged area's
/// lines of the plain kmalloc classes hold its kept charged objects, which only
/// kmalloc's pops may hand out (`memcontrol::charged_area`), and every other line of
/// it is zero. One load, as `inline_area`'s.
#[inline(always)]
pub(crate) fn cache_area() -> InlineArea<'static> {
    // SAFETY: the cache word is the fast word or the zero area's address (set together
    // by `refresh_fast` and `enable_rseq_fast`), read on this thread: what
    // `inline_area_of` takes.
    unsafe { inline_area_of(fast_tls::get_word::<{ fast_tls::CACHE }>()) }
}

/// [`inline_area`] for a fast word `w` the caller has read.
///
/// # Safety
/// `w` is what `fast_tls::get` (or `fast_tls::get_word::<CACHE>`) returned on this
/// thread, and nothing has changed the thread's slots since (no call that may attach,
/// detach or enter a group).
#[inline(always)]
pub(crate) unsafe fn inline_area_of(w: usize) -> InlineArea<'static> {
    // SAFETY: the fast word (and the cache word, which is the fast word or the zero
    // area's address) is the address of an area this thread owns (as in `fast_cpu`),
    // of the charged area of such an area (`charged_fast_word`), or one of the zero
    // area's two addresses (`refresh_fast`; the TLS image's initial value), and `w` is
    // still that word (the caller's contract).
    unsafe { InlineArea::from_word(w) }
}

/// Recomputes the thread's fast word (`platform::fast_tls`): its area when it may use
/// it straight away — attached, no active memory cgroup — [`rseq_tag`] in per-CPU rseq
/// mode without an active memory cgroup (once the heap is READY), its charged area
/// when attached with an active memory cgroup (see [`charged_fast_word`]), else
/// [`no_area`], which sends every operation to the paths that look at the other slots.
///
/// Also the charged words: the area and the active objcg of an attached thread with
/// an active memory cgroup (else 0), read by [`charged_cpu`].
fn refresh_fast() {
    let a = slot();
    let objcg = ACTIVE_OBJCG.with(Cell::get);
    // KMEM_KFENCE=all: every allocation must reach the slow path that samples.
    let every = crate::kfence::every_allocation();
    let plain = objcg == 0 && !every;
    let charged = is_area(a) && objcg != 0;
    fast_tls::set_word::<{ fast_tls::CHARGED_AREA }>(if charged { a } else { 0 });
    fast_tls::set_word::<{ fast_tls::CHARGED_OBJCG }>(if charged { objcg } else { 0 });
    let v = if is_area(a) && plain {
        a
    } else if plain && HEAP.rseq_fast_paths() {
        rseq_tag()
    } else if charged && !every {
        charged_fast_word()
    } else {
        no_area()
    };
    fast_tls::set(v);
    fast_tls::set_word::<{ fast_tls::CACHE }>(if charged { no_area() } else { v });
}

/// The fast word of a thread running charged (its charged words set): its area's
/// charged area when that holds objects of the thread's objcg or none
/// (`Memcg::charged_fast_word`), so that the inline fast paths pop and push there;
/// else [`no_area`].
fn charged_fast_word() -> usize {
    match charged_cpu() {
        Some((c, cg)) => match HEAP.kmem.memcg().charged_fast_word_for(c, cg) {
            0 => no_area(),
            w => w,
        },
        None => no_area(),
    }
}

/// After a charged slow path (which may have made the thread's charged area, or
/// given its kept sheaves to the thread's objcg): the fast word again, when the
/// thread runs charged. Nothing for other threads (one load and a test).
#[inline]
pub(crate) fn refresh_charged_fast() {
    if fast_tls::get_word::<{ fast_tls::CHARGED_AREA }>() != 0 && !crate::kfence::every_allocation()
    {
        fast_tls::set(charged_fast_word());
    }
}

/// The charged paths' test: the thread's own CPU area and its active objcg, when it
/// is attached and has an active memory cgroup (two loads of initial-exec words). The
/// charged area word is non-zero only while the fast word is [`no_area`]
/// (`refresh_fast` sets them together), so a thread on the fast paths or in per-CPU
/// rseq mode, whose word is 0, reads one word and tests it.
#[inline(always)]
pub(crate) fn charged_cpu() -> Option<(CpuRef<'static>, &'static ObjCgroup)> {
    let a = fast_tls::get_word::<{ fast_tls::CHARGED_AREA }>();
    if a == 0 {
        return None;
    }
    let objcg = fast_tls::get_word::<{ fast_tls::CHARGED_OBJCG }>();
    // SAFETY: a non-zero charged area word is an area this thread owns and the objcg
    // of its active memory cgroup (set together by `refresh_fast` from the area slot
    // and the active objcg, cleared with them); areas live forever, and the active
    // group's objcg lives while it is active (see `active_objcg`).
    Some(unsafe {
        (
            CpuRef::new(&*(a as *const CpuArea)),
            &*(objcg as *const ObjCgroup),
        )
    })
}

/// Per-CPU rseq mode: sets the thread's fast word to [`rseq_tag`] if it may take the
/// rseq fast paths (no active memory cgroup) and it is not set yet. Called from the
/// per-CPU paths, once the heap is READY.
#[inline]
pub(super) fn enable_rseq_fast() {
    if fast_tls::get() == no_area()
        && ACTIVE_OBJCG.with(Cell::get) == 0
        && !crate::kfence::every_allocation()
    {
        fast_tls::set(rseq_tag());
        fast_tls::set_word::<{ fast_tls::CACHE }>(rseq_tag());
    }
}

/// The slow paths' test: the thread's own CPU area, if it may use it without looking
/// further (an area also means the heap is READY). Two thread-local loads: the fast
/// word, and the charged area word, which is non-zero while the fast word may be a
/// charged area (never a CPU area to hand to the slow paths).
#[inline(always)]
pub(crate) fn fast_cpu() -> Option<CpuRef<'static>> {
    let v = fast_tls::get();
    // Neither of the zero area's addresses (nothing lies between them: one compare
    // tests both).
    let own = v.wrapping_sub(no_area()) > rseq_tag() - no_area()
        && fast_tls::get_word::<{ fast_tls::CHARGED_AREA }>() == 0;
    // SAFETY: a fast word that is neither of the zero area's addresses, on a thread
    // that does not run charged, is an area this thread owns (set from its area slot
    // by `refresh_fast`, reset before the area is given up); areas live forever.
    own.then(|| unsafe { CpuRef::new(&*(v as *const CpuArea)) })
}

/// The thread's area slot (see the module doc).
#[inline(always)]
pub(super) fn slot() -> usize {
    THIS_AREA.with(Cell::get)
}

/// Whether a slot value is an area's address (not 0, `ATTACHING` or `EXITED`).
#[inline(always)]
pub(super) fn is_area(slot: usize) -> bool {
    slot > EXITED
}

/// Per-CPU mode: the area whose local lock this thread holds (0: none).
#[inline(always)]
pub(super) fn held_area() -> usize {
    HELD_AREA.with(Cell::get)
}

/// Per-CPU mode: marks `area` (0: none) as the one whose lock this thread holds.
#[inline(always)]
pub(super) fn set_held_area(area: usize) {
    HELD_AREA.with(|h| h.set(area));
}

/// Before the allocator calls its user's code (a slab constructor) while this thread
/// may hold a CPU area's state half-way through an operation (`Platform::
/// callout_enter`): the thread's slots say it has no area (`ATTACHING`, no held area,
/// the fast word recomputed), so that what the code allocates or frees takes the zone
/// path and never touches the held state. Returns the slots' values for
/// [`callout_leave`], packed in a word: the held area (per-CPU mode) with its low bit
/// set, else the thread's slot (an area, which is 64-aligned, or 0, `ATTACHING`,
/// `EXITED`). Nests.
pub(super) fn callout_enter() -> usize {
    let this = THIS_AREA.with(|a| a.replace(ATTACHING));
    let held = HELD_AREA.with(|h| h.replace(0));
    refresh_fast();
    if held != 0 {
        // (A nested callout holds no area: its enclosing one's stays marked.)
        CALLOUT_AREA.with(|c| c.set(held));
        held | 1
    } else {
        this
    }
}

/// Restores the slots [`callout_enter`] changed, from its token.
pub(super) fn callout_leave(token: usize) {
    let (this, held) = if token > EXITED && token & 1 == 1 {
        (0, token & !1)
    } else {
        (token, 0)
    };
    if held != 0 {
        CALLOUT_AREA.with(|c| c.set(0));
    }
    THIS_AREA.with(|a| a.set(this));
    HELD_AREA.with(|h| h.set(held));
    refresh_fast();
}

/// Per-CPU mode: the area a constructor's enclosing operation holds (0: none; see
/// `CALLOUT_AREA`).
pub(super) fn callout_area() -> usize {
    CALLOUT_AREA.with(Cell::get)
}

/// Marks this thread as the one initialising the heap (or clears the mark).
pub(super) fn mark_initialising(on: bool) {
    THIS_AREA.with(|a| a.set(if on { ATTACHING } else { 0 }));
    refresh_fast();
}

/// Whether this thread is initialising the heap (a nested call must not wait for it).
pub(super) fn initialising_here() -> bool {
    slot() == ATTACHING
}

/// Thread mode's fast case: the thread's own CPU area, once attached. Everything
/// else (attaching, per-CPU mode, thread exit) goes through [`Heap::cpu`].
#[inline(always)]
pub(super) fn thread_cpu() -> Option<CpuRef<'static>> {
    let v = slot();
    // SAFETY: a value above EXITED is an area this thread owns until its exit
    // destructor, which clears the slot first; areas live forever.
    is_area(v).then(|| unsafe { CpuRef::new(&*(v as *const CpuArea)) })
}

/// The objcg of the calling thread's active memory cgroup.
///
/// The fast words answer first where they can: a word other than [`no_area`] on a
/// thread without charged words is its own area or [`rseq_tag`], which
/// `refresh_fast` and `enable_rseq_fast` set only without an active group. They are
/// read with a load each from the thread pointer, where the slot takes a call to
/// `__tls_get_addr` in `libkmem.so` (a block of 1 MiB and more asks twice a call).
#[inline]
pub(crate) fn active_objcg() -> Option<&'static ObjCgroup> {
    if fast_tls::get() != no_area() && fast_tls::get_word::<{ fast_tls::CHARGED_AREA }>() == 0 {
        return None;
    }
    let v = ACTIVE_OBJCG.with(Cell::get);
    // SAFETY: a non-zero slot names an objcg it holds a reference on (the slot's
    // invariant): alive, if perhaps a removed group's.
    (v != 0).then(|| unsafe { &*(v as *const ObjCgroup) })
}

/// Makes `objcg` the thread's active one (`set_active_memcg`), taking a reference on
/// it for the slot; returns the previous value, whose reference passes to the caller
/// (to hand back through [`restore_active_objcg`]).
pub(crate) fn set_active_objcg(objcg: Option<&ObjCgroup>) -> usize {
    if let Some(o) = objcg {
        o.get();
    }
    let v = objcg.map_or(0, |o| o as *const ObjCgroup as usize);
    let prev = ACTIVE_OBJCG.with(|a| a.replace(v));
    refresh_fast();
    prev
}

/// Restores a value returned by [`set_active_objcg`] (its reference passes back to
/// the slot) and gives up the reference of the value it replaces: whatever order
/// the restores come in, every objcg in the slot is one it holds.
pub(crate) fn restore_active_objcg(prev: usize) {
    let cur = ACTIVE_OBJCG.with(|a| a.replace(prev));
    refresh_fast();
    put_objcg(cur);
}

/// Gives up a reference the active slot held on the objcg at `v` (0: none).
fn put_objcg(v: usize) {
    if v != 0 {
        // SAFETY: `v` left the slot with its reference (the slot's invariant), so
        // the objcg is alive until this put, which gives up that reference.
        unsafe { (*(v as *const ObjCgroup)).put() };
    }
}

/// Creates the thread-exit key (initialisation); false if there is none to be had.
pub(super) fn create_exit_key(heap: &Heap) -> bool {
    match os::thread_key_create(thread_exit) {
        Some(key) => {
            heap.exit_key.store(key, Ordering::Relaxed);
            true
        }
        None => false,
    }
}

/// The pthread key destructor: the thread's CPU goes offline.
extern "C" fn thread_exit(value: *mut c_void) {
    THIS_AREA.with(|a| a.set(EXITED));
    // A group left active (guards dropped out of order, or forgotten) is given up:
    // the thread's later allocations (other keys' destructors) are not charged.
    let active = ACTIVE_OBJCG.with(|a| a.replace(0));
    refresh_fast();
    put_objcg(active);
    if value.is_null() {
        return;
    }
    // SAFETY: the value is the area this (exiting) thread owned; nothing else on the
    // thread uses it after the slot says EXITED.
    unsafe { HEAP.kmem.pages.cpu_area_put(&*(value as *const CpuArea)) };
}

impl Heap {
    /// Thread mode: gives the calling thread an area of its own (see the module doc).
    #[cold]
    #[inline(never)]
    pub(super) fn attach_cold(&self) -> Option<CpuRef<'static>> {
        if self.state.load(Ordering::Acquire) != READY {
            return None;
        }
        self.attach_keyed(self.exit_key.load(Ordering::Relaxed))
    }

    /// [`Heap::attach_cold`] with the thread-exit key `key`.
    fn attach_keyed(&self, key: u32) -> Option<CpuRef<'static>> {
        THIS_AREA.with(|a| a.set(ATTACHING));
        let nid = self.kmem.pages.platform().numa_node_id();
        let Some(area) = HEAP.kmem.pages.cpu_area_get(nid) else {
            THIS_AREA.with(|a| a.set(0));
            return None;
        };
        let ptr = area as *const CpuArea as *const c_void;
        // A non-null value makes the destructor run at thread exit. (glibc may
        // allocate here for high keys: that nested allocation sees ATTACHING and takes
        // the zone path.) Without it the area would never come back: it goes back
        // now, and the thread takes the zone path until a later slow path tries again.
        if !os::thread_key_set(key, ptr) {
            // SAFETY: we own the area, and nothing of this thread names it.
            unsafe { HEAP.kmem.pages.cpu_area_put(area) };
            THIS_AREA.with(|a| a.set(0));
            return None;
        }
        THIS_AREA.with(|a| a.set(ptr as usize));
        refresh_fast();
        // SAFETY: we own the area now.
        Some(unsafe { CpuRef::new(area) })
    }

    /// Flushes the calling thread's CPU area and returns it to the pool now, as thread
    /// exit does; the thread's later allocations take the zone path.
    pub fn detach_thread(&self) {
        if self.mode.load(Ordering::Relaxed) != MODE_THREAD {
            // Per-CPU mode: threads own no area.
            return;
        }
        let v = slot();
        THIS_AREA.with(|a| a.set(EXITED));
        refresh_fast();
        if is_area(v) {
            // Clearing the value stops the destructor from running for an area we
            // give back here.
            os::thread_key_set(self.exit_key.load(Ordering::Relaxed), std::ptr::null());
            // SAFETY: this thread owned the area and the slot no longer names it.
            unsafe { self.kmem.pages.cpu_area_put(&*(v as *const CpuArea)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_area_whose_exit_key_cannot_be_set_goes_back_to_the_pool() {
        let h = crate::heap();
        std::thread::spawn(move || {
            let pool = h.kmem.pages.cpu_areas();
            let before = pool.nr_owned();
            // No such key (pthread keys are below PTHREAD_KEYS_MAX): the call fails,
            // as it does when glibc finds no memory for a thread's table of keys.
            for _ in 0..200 {
                assert!(h.attach_keyed(u32::MAX).is_none());
                assert_eq!(slot(), 0, "the thread names no area");
            }
            // Other tests' threads come and go meanwhile, not 200 of them.
            let after = pool.nr_owned();
            assert!(after < before + 50, "{before} -> {after} areas owned");
            // The thread still allocates (the zone path), and attaches later.
            let p = h.kmalloc(64, kmem_core::Gfp::KERNEL).unwrap();
            // SAFETY: allocated just above, freed once.
            unsafe { h.kfree(p.as_ptr()) };
        })
        .join()
        .unwrap();
    }
}
