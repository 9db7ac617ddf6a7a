//! Between sheaves and slabs: `refill_sheaf` (one bulk allocation from the node's
//! partial slabs, then new slabs) and `sheaf_flush` (one bulk free: the objects
//! grouped by slab, each group given back with one `__slab_free`). These are the only
//! places the sheaves design walks encoded freelists; a corrupted free pointer found
//! here is reported and never followed.
//!
//! Locking: a refill takes the node's `list_lock` while it takes objects from partial
//! slabs, and a kept empty slab if they fall short (no page allocation under it); a
//! flush takes none of its own (`__slab_free` takes `list_lock` when a slab changes
//! lists, and so does a run that empties its slab, to keep it: `keep_emptied_run`).

use super::free::Emptied;
use super::freelist::FreePointerKey;
use super::sheaf::{slot, SlabSheaf};
use super::*;
use crate::gfp::Gfp;
use crate::page::{Page, PageList};
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use core::ptr::NonNull;

/// How far ahead of the object it links a flush prefetches (objects). Each object of
/// a flush in random order costs a CAS on its slab's state, which waits for the link
/// stored just before it; a miss costs about 120 ns on the machines measured, and 32
/// objects ahead instead of 16 took 10–15% off the frees of `rebuild` at 64 and 256
/// bytes (BENCHMARKS.md, "Refills that ask ahead").
const FLUSH_PREFETCH: usize = 32;

/// What a flush will write for the object `o`: its free pointer word, and the state
/// word on its slab's head page (the slab is naturally aligned, so its base is
/// `o` rounded down to the slab's size).
#[inline(always)]
fn prefetch_flushed(cfg: &CacheConfig, o: usize) {
    crate::prefetch::prefetch_write(o + cfg.offset);
    let base = o & !(cfg.slab_bytes() - 1);
    crate::prefetch::prefetch_write(crate::page::descriptor_addr(base));
}

/// Most partial slabs a refill asks for, at its end, for the next refill: their free
/// objects then arrive while the sheaf just filled is used, instead of while the next
/// refill waits for them under the list lock (a refill asked only for the slab it was
/// about to walk, and the one after it).
const NEXT_REFILL_SLABS: usize = 4;

/// Most lines a refill prefetches of one slab before it walks its freelist.
const WALK_PREFETCH_LINES: usize = 64;

/// Before a freelist walk of the slab at `base` with `inuse` objects in use: when at
/// least a quarter of its objects are free, prefetches the free pointer words of all
/// of them (every line, for objects below a line), at most [`WALK_PREFETCH_LINES`]
/// lines. The walk follows links one load after another; a list freed in random order
/// jumps about the slab, and each cold line would cost a full miss in turn.
#[inline]
fn prefetch_free_objects(cfg: &CacheConfig, base: usize, inuse: u64) {
    let objects = cfg.objects;
    let free = objects.saturating_sub(inuse as usize);
    if free < 8 || free * 4 < objects {
        return;
    }
    const LINE: usize = 64;
    let step = cfg.size.max(LINE);
    let first = if cfg.size >= LINE {
        base + cfg.offset
    } else {
        base
    };
    let lines = (cfg.objects * cfg.size / step).min(WALK_PREFETCH_LINES);
    for k in 0..lines {
        crate::prefetch::prefetch_read(first + k * step);
    }
}

/// Slots `len..cap` of a sheaf the caller holds, as a slice to fill.
fn room<'a>(sheaf: *mut SlabSheaf, len: usize, cap: usize) -> &'a mut [usize] {
    // SAFETY: a live sheaf the caller holds alone has `cap` slots; `len <= cap`.
    unsafe { core::slice::from_raw_parts_mut(slot(sheaf, len), cap - len) }
}

impl<P: Platform> Slub<'_, P> {
    /// Fills `sheaf`'s slots from `len` up to its capacity with objects of `s` from
    /// the partial slabs of the CPU's node, then from new slabs; returns the new
    /// count (less than the capacity only when memory ran out).
    ///
    /// The objects taken are stacked so that the first one taken is popped first: a
    /// new slab's objects then go out in address order, as a bump allocator's or
    /// mimalloc's free lists hand them out. Measured: a C++ `std::map` of 50,000
    /// string keys built and walked (the `preload` suite's cpp_map) ran 29.8 ms
    /// instead of 33.5 with the objects handed out from the top of each slab down
    /// (mimalloc 27.0); nodes allocated one after another and later walked in that
    /// order then lie in ascending addresses, which the hardware prefetchers follow
    /// best.
    pub(super) fn refill_sheaf(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        sheaf: *mut SlabSheaf,
        mut len: usize,
    ) -> usize {
        // SAFETY: a live sheaf the caller holds.
        let cap = unsafe { &*sheaf }.capacity.load(Relaxed);
        let nid = match cpu {
            Some(c) => self.pages_local_node(c),
            None => self.pages.platform().numa_node_id() % self.pages.nr_nodes(),
        };
        s.stat(cpu, SlubStat::SheafRefill);
        let start = len;
        while len < cap {
            let (got, kept) = self.take_from_node(s, nid, room(sheaf, len, cap), true);
            len += got;
            if len == cap {
                break;
            }
            // A new slab (a kept empty one first, its own, taken with the partial
            // slabs, or adopted, `empty.rs`): its first objects straight into the
            // sheaf, the rest the node's fresh tail (`fresh.rs`), or linked onto the
            // partial list of the slab's node.
            let Some((slab, took, fresh)) = kept
                .or_else(|| self.adopt_and_pop_kept(cpu, s, nid))
                .or_else(|| self.drain_then_adopt(cpu, s, nid))
                .map(|slab| self.reuse_kept_slab(s, slab, room(sheaf, len, cap), false))
                .or_else(|| {
                    self.allocate_slab_taking(cpu, s, gfp, Some(nid), room(sheaf, len, cap), false)
                })
            else {
                break;
            };
            len += took;
            let nn = self.pages.page_to_nid(slab);
            if let Some(next) = fresh {
                self.keep_fresh(cpu, s, nn, slab, next);
            } else if took < s.config().objects {
                let mut list = s.node(nn).list_lock.lock();
                self.add_partial(&mut list, slab, false);
            }
        }
        room(sheaf, start, len).reverse();
        len
    }

    /// Takes up to `out.len()` objects from node `nid`'s partial slabs, then from its
    /// fresh slab, into `out`, under its `list_lock`; returns how many. A slab left
    /// without free objects leaves the list; one with a corrupted free pointer is
    /// reported and quarantined (what was taken before the bad link is kept).
    pub(super) fn take_from_partial(&self, s: &KmemCache, nid: usize, out: &mut [usize]) -> usize {
        self.take_from_node(s, nid, out, false).0
    }

    /// [`Slub::take_from_partial`], and, with `kept` asked for, when the list and
    /// the fresh tail left `out` short, one of the node's kept empty slabs, off its
    /// list under the same hold of the lock (`None`: the node keeps none, or it was
    /// not asked for). A refill then takes the list's lock once, not once for the
    /// partial slabs and again for the kept one.
    fn take_from_node(
        &self,
        s: &KmemCache,
        nid: usize,
        out: &mut [usize],
        kept: bool,
    ) -> (usize, Option<NonNull<Page>>) {
        let cfg = s.config();
        let mut got = 0;
        let mut list = s.node(nid).list_lock.lock();
        // The first slab's free objects are asked for here, each next one's while the
        // one before it is walked (and the descriptor after that one's), so that the
        // misses of a freelist freed in random order come in parallel.
        if let Some(first) = NonNull::new(list.first()) {
            self.prefetch_partial(cfg, first);
        }
        while got < out.len() {
            let Some(slab) = NonNull::new(list.first()) else {
                break;
            };
            // SAFETY: a node-list slab: live and unfrozen; we hold the lock, so only
            // frees change its state meanwhile, and they only push in front.
            let sr = unsafe { slab.as_ref() };
            let base = self.slab_base(slab);
            loop {
                let old = Slab::of(sr).state();
                if old.list_empty() {
                    // Cannot happen (rule 2); a full slab leaves the list.
                    self.remove_partial(&mut list, slab);
                    break;
                }
                let free = (cfg.objects as u64).saturating_sub(old.inuse()) as usize;
                if got + free < out.len() {
                    if let Some(next) = NonNull::new(sr.next.load(Relaxed)) {
                        self.prefetch_partial(cfg, next);
                    }
                }
                let mut obj = base + old.offset() as usize;
                let mut k = got;
                let mut corrupt = false;
                while k < out.len() && obj & 1 == 0 {
                    // SAFETY: `obj` is on the slab's freelist, which only we take
                    // from (list_lock); frees only push in front of its head, and a
                    // changed head makes the CAS below fail.
                    let next = unsafe { get_freepointer(cfg, obj) };
                    if !same_slab(cfg, obj, next) {
                        self.report_corrupt_link(cfg, obj, next);
                        corrupt = true;
                        break;
                    }
                    out[k] = obj;
                    k += 1;
                    obj = next;
                }
                let new = if corrupt {
                    // Keep what was taken; the rest of the slab is quarantined:
                    // counted in use for good, off the list.
                    SlabState::new(END_OFFSET, cfg.objects as u64, false)
                } else {
                    SlabState::new((obj - base) as u64, old.inuse() + (k - got) as u64, false)
                };
                if Slab::of(sr).cas_state(old, new) {
                    if old.inuse() == 0 {
                        // Nothing of it was in use at the CAS, and nobody else
                        // takes from it while we hold the lock.
                        Slab::of(sr).start_charges_over();
                    }
                    got = k;
                    if new.list_empty() {
                        self.remove_partial(&mut list, slab);
                    }
                    break;
                }
            }
        }
        if got < out.len() {
            got += self.take_fresh(s, nid, &list, &mut out[got..]);
            let slab = if kept && got < out.len() {
                self.pop_kept_locked(s, nid, &mut list)
            } else {
                None
            };
            return (got, slab);
        }
        // Filled from the list: the slabs the next refill will walk, asked for now
        // (after the lock), so that their lines arrive while this sheaf is used.
        let next = self.next_refill_slabs(cfg, &list, out.len());
        drop(list);
        for &(base, inuse) in next.iter().flatten() {
            prefetch_free_objects(cfg, base, inuse);
        }
        (got, None)
    }

    /// The first slabs of a node's partial list (the caller holds it locked), as many
    /// as hold `want` free objects, at most [`NEXT_REFILL_SLABS`]: each one's address
    /// and objects in use, for [`prefetch_free_objects`].
    fn next_refill_slabs(
        &self,
        cfg: &CacheConfig,
        list: &PageList,
        want: usize,
    ) -> [Option<(usize, u64)>; NEXT_REFILL_SLABS] {
        let mut next = [None; NEXT_REFILL_SLABS];
        let mut slab = list.first();
        let mut free = 0;
        for entry in &mut next {
            let Some(sl) = NonNull::new(slab) else {
                break;
            };
            // SAFETY: a slab on the node list the caller holds locked: live.
            let sr = unsafe { sl.as_ref() };
            let inuse = Slab::of(sr).state().inuse();
            *entry = Some((self.slab_base(sl), inuse));
            free += (cfg.objects as u64).saturating_sub(inuse) as usize;
            if free >= want {
                break;
            }
            slab = sr.next.load(Relaxed);
        }
        next
    }

    /// Prefetches, for a walk soon, the free objects of the partial slab `slab`
    /// ([`prefetch_free_objects`], from its state) and the descriptor of the slab
    /// after it on its list.
    #[inline]
    fn prefetch_partial(&self, cfg: &CacheConfig, slab: NonNull<Page>) {
        // SAFETY: a slab on a node list the caller holds locked: a live descriptor.
        let sr = unsafe { slab.as_ref() };
        crate::prefetch::prefetch_read(sr.next.load(Relaxed) as usize);
        prefetch_free_objects(cfg, self.slab_base(slab), Slab::of(sr).state().inuse());
    }

    /// Gives the objects in slots `0..len` of `sheaf` back to their slabs (one
    /// `__slab_free` per run of objects of one slab) and leaves the sheaf empty.
    #[inline]
    pub(super) fn sheaf_flush(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        sheaf: *mut SlabSheaf,
        len: usize,
    ) {
        self.sheaf_flush_as(cpu, s, sheaf, len, Emptied::Keep);
    }

    /// [`Slub::sheaf_flush`], with what becomes of a slab the flush empties.
    pub(super) fn sheaf_flush_as(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        sheaf: *mut SlabSheaf,
        len: usize,
        emptied: Emptied,
    ) {
        if len == 0 {
            return;
        }
        let cfg = s.config();
        s.stat(cpu, SlubStat::SheafFlush);
        let key = FreePointerKey::of(cfg);
        let slab_bytes = cfg.slab_bytes();
        // SAFETY: slots 0..len hold objects of `s` the sheaf owns.
        let objs = unsafe { core::slice::from_raw_parts(slot(sheaf, 0), len) };
        for &o in &objs[..len.min(FLUSH_PREFETCH)] {
            prefetch_flushed(cfg, o);
        }
        // A run that is all of its slab's objects in use empties it, and a free of the
        // kernel's kind then keeps the slab (`empty.rs`) without their links.
        let keeps = emptied == Emptied::Keep && Self::keeps_empty_slabs(cfg);
        let mut i = 0;
        while i < len {
            if let Some(&o) = objs.get(i + FLUSH_PREFETCH) {
                prefetch_flushed(cfg, o);
            }
            let start = i;
            let head = objs[i];
            let base = head & !(slab_bytes - 1);
            i += 1;
            while i < len && objs[i].wrapping_sub(base) < slab_bytes {
                if let Some(&o) = objs.get(i + FLUSH_PREFETCH) {
                    prefetch_flushed(cfg, o);
                }
                i += 1;
            }
            let run = &objs[start..i];
            let cnt = run.len() as u64;
            let slab = self.freelist_slab(base);
            // SAFETY: the slab of the sheaf's objects: live. (Its state, read without
            // the lock, only decides whether to take it.)
            let empties = keeps && Slab::of(unsafe { slab.as_ref() }).state().inuse() == cnt;
            // SAFETY: the run's objects, the sheaf's, are given up if it is kept.
            if empties && unsafe { self.keep_emptied_run(cpu, s, slab, head, cnt) } {
                continue;
            }
            for pair in run.windows(2) {
                // SAFETY: both are free objects of this slab, owned by the sheaf.
                unsafe { key.set(pair[0], pair[1]) };
            }
            let tail = objs[i - 1];
            // SAFETY: a chain of the sheaf's objects of this slab, given up.
            if !unsafe { self.flush_run_plain(cpu, s, slab, base, head, tail, cnt) } {
                // SAFETY: a chain of the sheaf's objects of this slab, given up (the
                // plain run changed nothing).
                unsafe { self.slab_free_as(cpu, s, slab, head, tail, cnt, emptied) };
            }
        }
        // SAFETY: a live sheaf the caller holds.
        unsafe { &*sheaf }.size.store(0, Relaxed);
    }

    /// The common case of a flushed run, inline: the slab is on its node's partial
    /// list, keeps objects in use after the run and no CPU owns it, so the free is one
    /// CAS and changes no list (`FreeDecision::Plain` without the lock). Returns false,
    /// having changed nothing the caller relies on, for every other case (or a lost
    /// race): `__slab_free` then does the whole job, the reports included.
    ///
    /// # Safety
    /// As [`Slub::slab_free`]; `base` is the slab's address.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn flush_run_plain(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        base: usize,
        head: usize,
        tail: usize,
        cnt: u64,
    ) -> bool {
        // SAFETY: a live slab of `s` (the caller's objects are in it).
        let sr = Slab::of(unsafe { slab.as_ref() });
        let old = sr.state();
        if old.frozen() || old.list_empty() || old.inuse() <= cnt {
            return false;
        }
        let prior = base + old.offset() as usize;
        if prior == head {
            return false; // a double free: `__slab_free` reports it
        }
        // SAFETY: our objects (caller); `__slab_free` rewrites it if the CAS fails.
        unsafe { set_freepointer(s.config(), tail, prior) };
        if !sr.cas_state(old, old.after_free((head - base) as u64, cnt, false)) {
            return false;
        }
        s.stat(cpu, SlubStat::FreeSlowpath);
        true
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::test_env::slab_env;
    use super::*;
    use std::vec::Vec;

    /// The slabs a refill asks for ahead are the node list's first, as many as hold the
    /// objects wanted, at most `NEXT_REFILL_SLABS`, each with its address and the
    /// objects in use read from its state.
    #[test]
    fn next_refill_slabs_are_the_first_partial_slabs_holding_the_objects_wanted() {
        let env = slab_env();
        let s = env.cache("next-refill", 256, 8, SlabFlags::empty());
        let slub = env.slub();
        let cfg = s.config();
        let per_slab = cfg.objects;
        // Six slabs' worth of objects, then three of each slab freed: six partial
        // slabs with three free objects each.
        let objs: Vec<usize> = (0..6 * per_slab)
            .map(|_| slub.alloc(None, s, Gfp::KERNEL).unwrap().as_ptr() as usize)
            .collect();
        let mut bases: Vec<usize> = objs.iter().map(|&o| o & !(cfg.slab_bytes() - 1)).collect();
        bases.dedup();
        assert_eq!(bases.len(), 6, "six slabs, filled one after another");
        for b in &bases {
            let mine: Vec<usize> = objs
                .iter()
                .copied()
                .filter(|&o| o & !(cfg.slab_bytes() - 1) == *b)
                .collect();
            for &o in &mine[..3] {
                // SAFETY: an object of `s` this test allocated and gives up.
                assert!(unsafe { slub.free(None, s, NonNull::new(o as *mut u8).unwrap()) });
            }
        }
        let list = s.node(0).list_lock.lock();
        assert_eq!(list.len(), 6);
        let mut on_list = Vec::new();
        let mut p = list.first();
        while let Some(slab) = NonNull::new(p) {
            on_list.push(slub.slab_base(slab));
            // SAFETY: a slab on the list we hold locked.
            p = unsafe { slab.as_ref() }.next.load(Relaxed);
        }
        let in_use = (per_slab - 3) as u64;
        let picked = |want| -> Vec<(usize, u64)> {
            slub.next_refill_slabs(cfg, &list, want)
                .iter()
                .flatten()
                .copied()
                .collect()
        };
        // 7 objects: three slabs of three free (the third holds the last one).
        let want: Vec<(usize, u64)> = on_list[..3].iter().map(|&b| (b, in_use)).collect();
        assert_eq!(picked(7), want);
        // 3 objects: the first slab alone.
        assert_eq!(picked(3), want[..1]);
        // More than the list holds: at most NEXT_REFILL_SLABS of them.
        let want: Vec<(usize, u64)> = on_list[..NEXT_REFILL_SLABS]
            .iter()
            .map(|&b| (b, in_use))
            .collect();
        assert_eq!(picked(1000), want);
    }
}
