//! Objcg sheaves: charged kmalloc objects kept per CPU area, charged, between a free
//! and the next allocation charged to the same objcg — the charge moves at the sheaf's
//! boundary, not with every object.
//!
//! Every charged allocation otherwise pays for a charge (the stock), an allocation, the
//! objcg's store in the slab's vector, and at its free the vector's lookup, an
//! uncharge and the free: four to five times an unaccounted pair. Here a free of a
//! `kmalloc-cg-*` object by a context running in the object's group
//! ([`Memcg::kfree_objcg`]; the heap's paths for a thread with an active group) puts
//! it, still charged and still recorded in its slab's vector, on its class's *kept
//! sheaf* when the area's sheaves hold that objcg; the next charged kmalloc of that
//! class and objcg pops it and is done. Frees by other contexts (another group, none,
//! another thread) uncharge as before. The sheaves also move the charge in steps when
//! a thread allocates or frees runs of a class: a charged kmalloc that finds its
//! class's kept sheaf empty refills it ([`OBJCG_SHEAF_REFILL`] objects, three
//! quarters of a sheaf or half of one, charged at once from the stock's pre-charged
//! bytes and recorded one by one), and a charged
//! free that finds it full gives its older half back (cleared from the vectors, freed,
//! uncharged at once) and waits there.
//!
//! The sheaves are in the area's charged area (`charged_area`), laid out so that a
//! thread running charged, whose fast word is that area, reaches them with the inline
//! fast paths of any thread: kmalloc pops a kept sheaf as it pops a CPU's main sheaf,
//! and kfree pushes any object of a `kmalloc-cg-*` slab with a vector onto its class's
//! *inbox*, without reading the vector. The slow paths take an inbox in
//! ([`Memcg::intake`]) when the kept sheaf is empty (an allocation) or the inbox full
//! (a free): the objects whose vector slots name the kept sheaves' objcg move to the
//! kept sheaf, the others are freed as any free would (uncharged from their objcg, or
//! reported). So a charged pair in steady state reads at most one vector slot per
//! object, in a loop, instead of a whole charged free's lookups — and none when the
//! object's slab holds nothing but the objcg's charged objects (`intake`).
//!
//! Objects wait charged: usage and the group statistics count them as allocated while
//! they wait — up to [`OBJCG_SHEAF_BYTES`] per class and sheaf, or four objects of the
//! larger classes: [`OBJCG_SHEAVES_MAX_BYTES`] (85 KiB, kept sheaves and inboxes) per
//! area at most, as the stock's pre-charged pages count as usage. No other context
//! touches the sheaves, so there is no lock-free protocol to model.
//!
//! The sheaves follow the stock's rules: only the area's owner touches them, and
//! [`Memcg::memcg_drain_stock`] (thread exit, reclaim at `memory.max` or
//! `memory.high`, drain requests, group removal, exact statistics) first gives every
//! object back — uncharged, cleared from its vector, freed. The kept sheaves hold one
//! objcg at a time, with a reference: a free of another objcg's object retags empty
//! sheaves and otherwise takes the usual path; a charged allocation for another objcg
//! flushes them.
//!
//! Only caches on a sheaf fast path take part: slub_debug and init_on_* caches run
//! their checks, poisoning and zeroing per object, and the CPU-slab design keeps its
//! per-object charges. A double free of the object on top of a kept sheaf or an inbox
//! is caught, as the slab layer's sheaves catch it; so is one of any object of a full
//! kept sheaf (searched whole before its older half goes back).

use super::charged_area::{has_inbox, ObjcgSheaves};
use super::*;
use crate::gfp::Gfp;
use crate::kmalloc::KMALLOC_SIZES;
use crate::slab::NO_OBJCG_CLASS;
use crate::sync::AtomicPtr;
use core::ptr::NonNull;

/// Classes with objcg sheaves: every accounted kmalloc class, `kmalloc-cg-8` …
/// `kmalloc-cg-8k`.
pub const OBJCG_SHEAF_CLASSES: usize = crate::kmalloc::NR_KMALLOC;
/// Objects a sheaf (kept or inbox) of a small class holds (kmalloc-cg-8, -16 and -32;
/// [`OBJCG_SHEAF_BYTES`] bounds the larger ones). 64 rather than 32: an inbox is
/// taken in whole, and at 32 the take-in's fixed part (about 210 instructions) came
/// every 24 charged pairs of 32 bytes; the pair ran 71.3 instructions, 65.9 at 64
/// (BENCHMARKS.md, "Charged take-ins of 48 objects").
pub const OBJCG_SHEAF_SLOTS: usize = 64;
/// Bytes of objects a class's sheaf holds: up to this, or [`OBJCG_SHEAF_MIN_SLOTS`]
/// objects of the classes of 512 bytes and more.
pub const OBJCG_SHEAF_BYTES: usize = 2048;
/// Objects the sheaf of any class holds at least. With two (the bound before), a
/// thread that allocates four 4 KiB buffers and frees them spilled half of every batch
/// to the charging path: `bench memcg` kmalloc_batch4 at 4 KiB ran 6x the unaccounted
/// time.
pub const OBJCG_SHEAF_MIN_SLOTS: usize = 4;

/// Objects a class's kept sheaf (and its inbox) holds, by class:
/// `OBJCG_SHEAF_BYTES / size` within [`OBJCG_SHEAF_MIN_SLOTS`] ..=
/// [`OBJCG_SHEAF_SLOTS`].
pub(super) const CAPACITY: [usize; OBJCG_SHEAF_CLASSES] = {
    let mut out = [0; OBJCG_SHEAF_CLASSES];
    let mut i = 0;
    while i < OBJCG_SHEAF_CLASSES {
        let n = OBJCG_SHEAF_BYTES / KMALLOC_SIZES[i];
        out[i] = if n > OBJCG_SHEAF_SLOTS {
            OBJCG_SHEAF_SLOTS
        } else if n < OBJCG_SHEAF_MIN_SLOTS {
            OBJCG_SHEAF_MIN_SLOTS
        } else {
            n
        };
        i += 1;
    }
    out
};

/// Objects a refill of class `i`'s empty kept sheaf brings: charged in one step from
/// the stock's pre-charged bytes, recorded one by one. A full kept sheaf gives back
/// its older half the same way, so a thread that allocates or frees runs of a class
/// charges and uncharges in steps of half a sheaf or more.
///
/// Half the capacity (at least two) for the classes without an inbox, whose frees
/// push onto the kept sheaf: the other half is their room. Three quarters for the
/// classes with one (up to 128 bytes): their frees go to the inbox, and the objects a
/// thread allocates and frees in turn circulate between the two sheaves, as many as
/// the refill brought, one take-in ([`Memcg::intake`]: about 140 instructions of its
/// own and 100 around it, besides a slot read per object) every that many
/// allocations. With half a sheaf (16 of kmalloc-cg-32's 32, as it held then) a
/// 32-byte pair ran 80.8 instructions against the unaccounted pair's 42, 72.3 with
/// three quarters before the take-in's swap, 64.2 with a full sheaf; the quarter
/// left is the room of the frees that reach the kept sheaf itself (the charged free's
/// slow half, `kfree_objcg`), which a full refill would send straight to giving back
/// half.
pub const OBJCG_SHEAF_REFILL: [usize; OBJCG_SHEAF_CLASSES] = {
    let mut out = [0; OBJCG_SHEAF_CLASSES];
    let mut i = 0;
    while i < OBJCG_SHEAF_CLASSES {
        out[i] = if super::charged_area::has_inbox(i) {
            CAPACITY[i] * 3 / 4
        } else {
            CAPACITY[i] / 2
        };
        i += 1;
    }
    out
};
const _: () = assert!(OBJCG_SHEAF_MIN_SLOTS / 2 >= 2);
const _: () = assert!(OBJCG_SHEAF_CLASSES < NO_OBJCG_CLASS as usize);
// `intake` marks inbox slots in a `u64`.
const _: () = assert!(OBJCG_SHEAF_SLOTS <= 64);

/// The most bytes of objects one CPU area's objcg sheaves hold (every kept sheaf and
/// every inbox full): what `usage()` may count of objects that wait there, per charged
/// thread.
pub const OBJCG_SHEAVES_MAX_BYTES: usize = {
    let mut sum = 0;
    let mut i = 0;
    while i < OBJCG_SHEAF_CLASSES {
        let sheaves = if super::charged_area::has_inbox(i) {
            2
        } else {
            1
        };
        sum += sheaves * CAPACITY[i] * KMALLOC_SIZES[i];
        i += 1;
    }
    sum
};
// Within the stock's batch of pre-charged pages (the kernel's 64 pages, 256 KiB).
const _: () = assert!(OBJCG_SHEAVES_MAX_BYTES <= 88 << 10);

/// Zeroes the `n` bytes of object `obj` for `__GFP_ZERO` (out of line: the pop that
/// needs no call saves no registers).
///
/// # Safety
/// `obj` is a non-null object of at least `n` bytes that the caller owns.
#[cold]
#[inline(never)]
unsafe fn zero_object(obj: usize, n: usize) -> NonNull<u8> {
    // SAFETY: the caller's object, `n` bytes long.
    unsafe {
        ptr::write_bytes(obj as *mut u8, 0, n);
        NonNull::new_unchecked(obj as *mut u8)
    }
}

/// What [`Memcg::objcg_sheaf_push`] did with a freed object.
enum Keep {
    Kept,
    NoRoom,
    DoubleFree,
}

impl<'a, P: Platform> Memcg<'a, P> {
    /// The objcg sheaf class of `s`: its index when it is one of the accounted
    /// kmalloc classes with sheaves and on a sheaf fast path (set in its config at
    /// boot: one byte of the line a free reads anyway).
    #[inline]
    fn objcg_sheaf_class(&self, s: &KmemCache) -> Option<usize> {
        // NO_OBJCG_CLASS is above every class: one compare for both.
        let i = s.config().objcg_class as usize;
        (i < OBJCG_SHEAF_CLASSES).then_some(i)
    }

    /// A charged kmalloc of class `i` for `objcg` from the kept sheaves of stock
    /// `st`: the object is charged and recorded already. `None` when they hold no
    /// object of the class for `objcg` (nothing else is done: no flush).
    #[inline(always)]
    fn objcg_sheaf_pop(
        &self,
        st: &MemcgStock,
        i: usize,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        let sh = &st.sheaves;
        if !ptr::eq(sh.objcg.load(Relaxed), objcg) {
            return None;
        }
        let obj = sh.kept_line(i)?.kept_pop()?;
        if gfp.contains(Gfp::ZERO) {
            let n = self.km.caches().set(1)[i].config().object_size;
            // SAFETY: a whole object of class `i`, now the caller's.
            return Some(unsafe { zero_object(obj, n) });
        }
        // SAFETY: objects in the sheaves are non-null object addresses.
        Some(unsafe { NonNull::new_unchecked(obj as *mut u8) })
    }

    /// [`Memcg::objcg_sheaf_pop`] for the charging path of `c` (stock `st`): when it
    /// finds nothing, the kept sheaves are given back first if they hold another
    /// objcg's objects (or its reference alone), so that what `objcg` frees next can
    /// wait; then the class's inbox is taken in, else the kept sheaf refilled.
    #[inline]
    pub(super) fn objcg_sheaf_alloc(
        &self,
        c: CpuRef<'_>,
        st: &MemcgStock,
        i: usize,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        if let Some(p) = self.objcg_sheaf_pop(st, i, gfp, objcg) {
            return Some(p);
        }
        let tag = st.sheaves.objcg.load(Relaxed);
        if !tag.is_null() && !ptr::eq(tag, objcg) {
            self.flush_objcg_sheaves(c, st);
        }
        if let Some(p) = self.objcg_sheaf_intake_pop(c, st, i, gfp, objcg) {
            return Some(p);
        }
        self.objcg_sheaf_refill(c, st, i, gfp, objcg)
    }

    /// Refills class `i`'s empty kept sheaf for `objcg` (`objcg_sheaf_alloc`, after
    /// the pop missed): [`OBJCG_SHEAF_REFILL`] objects allocated and recorded, charged
    /// in one step from the bytes the stock holds pre-charged, onto the sheaf; then the
    /// pop.
    /// `None` (nothing charged or kept) when the class has no objcg sheaves, no
    /// charged area can be made, the sheaves hold another objcg's objects, the stock
    /// cannot pay for the whole refill at once, or the allocations drained the
    /// sheaves (everything given back): the caller charges one object the usual way,
    /// which may charge pages, reclaim and count events — a refill never does.
    #[cold]
    #[inline(never)]
    fn objcg_sheaf_refill(
        &self,
        c: CpuRef<'_>,
        st: &MemcgStock,
        i: usize,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        let s = self.km.caches().set(1).get(i)?;
        if self.objcg_sheaf_class(s) != Some(i) {
            return None;
        }
        self.charged_area(c, st)?;
        let sh = &st.sheaves;
        if !Self::may_keep(sh, objcg) || !sh.kept(i)?.is_empty() {
            return None;
        }
        let n = OBJCG_SHEAF_REFILL[i];
        let size = s.config().size;
        if !Self::consume_obj_stock(st, objcg, s, n * size) {
            return None;
        }
        let slub = self.km.slub();
        let plain = gfp.difference(Gfp::ZERO);
        let mut objs = [0usize; OBJCG_SHEAF_SLOTS];
        let mut got = 0;
        while got < n {
            let Some(o) = slub
                .alloc_fast_charged(c, s, plain)
                .or_else(|| slub.alloc_charged(Some(c), s, plain))
            else {
                break;
            };
            if !self.memcg_slab_post_alloc_hook(Some(c), s, o, objcg) {
                // SAFETY: the object just allocated, not recorded.
                unsafe { slub.free(Some(c), s, o) };
                break;
            }
            objs[got] = o.as_ptr() as usize;
            got += 1;
        }
        if got < n {
            self.refill_obj_stock(Some(c), objcg, s, (n - got) * size);
        }
        let objs = &objs[..got];
        // The allocations above may have reclaimed (drained the sheaves): look again.
        let kept = sh.kept(i)?;
        if !Self::may_keep(sh, objcg) || !kept.is_empty() {
            let freed = objs
                .iter()
                .filter(|&&o| self.objcg_give_back(c, s, objcg, o))
                .count();
            self.refill_obj_stock(Some(c), objcg, s, freed * size);
            return None;
        }
        Self::objcg_sheaves_take(sh, objcg);
        for (k, &o) in objs.iter().enumerate() {
            kept.set(k, o);
        }
        kept.set_len(objs.len());
        // The pop zeroes for `__GFP_ZERO`, as for any object that waited there.
        self.objcg_sheaf_pop(st, i, gfp, objcg)
    }

    /// Whether the kept sheaves may keep objects of `objcg`: they hold it, or nothing
    /// (and then take it: [`Memcg::objcg_sheaves_take`]).
    pub(super) fn may_keep(sh: &ObjcgSheaves, objcg: &ObjCgroup) -> bool {
        let tag = sh.objcg.load(Relaxed);
        ptr::eq(tag, objcg) || tag.is_null() && sh.kept_objects() == 0
    }

    /// Tags empty, untagged sheaves with `objcg` (taking a reference); nothing when
    /// they hold it already.
    pub(super) fn objcg_sheaves_take(sh: &ObjcgSheaves, objcg: &ObjCgroup) {
        if ptr::eq(sh.objcg.load(Relaxed), objcg) {
            return;
        }
        objcg.get();
        let old = sh
            .objcg
            .swap(objcg as *const ObjCgroup as *mut ObjCgroup, Relaxed);
        // SAFETY: a non-null tag holds a reference (type invariant), dropped here.
        if let Some(old) = unsafe { old.as_ref() } {
            // SAFETY: that reference (the tag no longer names it).
            unsafe { old.put() };
        }
    }

    /// Gives back `obj`, an object of `s` kept charged to `objcg` (on a kept sheaf,
    /// or fresh from a refill): cleared from its vector slot and freed; the caller
    /// uncharges its bytes. False (nothing freed) when its slot no longer names
    /// `objcg`: freed again behind the sheaf's back (a double free that took the
    /// regular path, which uncharged it), reported and not freed a second time.
    #[inline(always)]
    fn objcg_give_back(
        &self,
        c: CpuRef<'_>,
        s: &KmemCache,
        objcg: *const ObjCgroup,
        obj: usize,
    ) -> bool {
        // An object of an objcg sheaf class, in a slab with a vector.
        let Some((_, _, slot, head)) = self.objcg_slot_of(obj as *mut u8) else {
            debug_assert!(false, "an objcg sheaf held a non-object");
            return false;
        };
        let slub = self.km.slub();
        let slab = NonNull::from(head);
        if !ptr::eq(slot.load(Relaxed), objcg) {
            slub.report(s, Some(slab), "Object already free", obj);
            return false;
        }
        slot.store(ptr::null_mut(), Relaxed);
        // SAFETY: an object of `s` its caller owned, cleared from its vector; given
        // up here (the caller uncharges its bytes).
        unsafe { slub.free_object(Some(c), s, slab, obj) };
        true
    }

    /// Class `i`'s kept sheaf (of `s`, tagged `objcg`) is full: its older half goes
    /// back — each object cleared from its vector and freed, their bytes uncharged in
    /// one step — so that a free can wait there. False when the sheaves hold another
    /// objcg.
    #[cold]
    #[inline(never)]
    pub(super) fn objcg_sheaf_make_room(
        &self,
        c: CpuRef<'_>,
        st: &MemcgStock,
        s: &KmemCache,
        i: usize,
        objcg: &ObjCgroup,
    ) -> bool {
        let sh = &st.sheaves;
        if !ptr::eq(sh.objcg.load(Relaxed), objcg) {
            return false;
        }
        let Some(kept) = sh.kept(i) else {
            return false;
        };
        let n = kept.len();
        let half = n / 2;
        if half == 0 {
            return false;
        }
        let mut freed = 0;
        for k in 0..half {
            if self.objcg_give_back(c, s, objcg, kept.get(k)) {
                freed += 1;
            }
        }
        for k in half..n {
            kept.set(k - half, kept.get(k));
        }
        kept.set_len(n - half);
        if freed != 0 {
            self.refill_obj_stock(Some(c), objcg, s, freed * s.config().size);
        }
        true
    }

    /// Keeps `obj` of `s` (class `i`), charged to `objcg`, on its class's kept sheaf
    /// when the sheaves hold `objcg` (or nothing: they take `objcg` then) and have
    /// room: `Some(true)`. A double free caught on top of the kept sheaf or the inbox
    /// is reported: `Some(false)`. `None`: nothing done.
    #[inline(always)]
    fn objcg_sheaf_keep_at(
        &self,
        st: &MemcgStock,
        s: &KmemCache,
        i: usize,
        objcg: &ObjCgroup,
        obj: usize,
    ) -> Option<bool> {
        match Self::objcg_sheaf_push(&st.sheaves, i, objcg, obj) {
            Keep::Kept => Some(true),
            Keep::NoRoom => None,
            Keep::DoubleFree => {
                Self::objcg_sheaf_double_free(self.km.slub(), s, obj);
                Some(false)
            }
        }
    }

    /// Reports a double free caught on top of an objcg sheaf. (Given the slab layer's
    /// two-word handle, passed in registers, rather than the controller: a cold call
    /// that takes the controller's handle makes the charged fast paths build it in
    /// memory before their first test.)
    #[cold]
    #[inline(never)]
    pub(super) fn objcg_sheaf_double_free(
        slub: crate::slab::Slub<'_, P>,
        s: &KmemCache,
        obj: usize,
    ) {
        let slab = slub.pages.virt_to_head_page(obj as *const u8);
        slub.report(s, slab, "Object already free", obj);
    }

    #[inline(always)]
    fn objcg_sheaf_push(sh: &ObjcgSheaves, i: usize, objcg: &ObjCgroup, obj: usize) -> Keep {
        if !ptr::eq(sh.objcg.load(Relaxed), objcg) {
            return Self::objcg_sheaf_retag_push(sh, i, objcg, obj);
        }
        let Some(kept) = sh.kept_line(i) else {
            return Keep::NoRoom;
        };
        // The tops first: a double free must not leave through the regular path (it
        // would free the object while a sheaf still holds it).
        if has_inbox(i) && sh.inbox(i).and_then(|b| b.last()) == Some(obj) {
            return Keep::DoubleFree;
        }
        match kept.kept_push(obj) {
            Ok(()) => Keep::Kept,
            Err(true) => Keep::DoubleFree,
            Err(false) => {
                // No room, or no kept sheaf at all: a double free of the top of a
                // full one is caught by the slow half's search.
                Keep::NoRoom
            }
        }
    }

    /// [`Memcg::objcg_sheaf_push`] when the sheaves hold another objcg (or none):
    /// empty kept sheaves take `objcg` and `obj`; sheaves holding objects keep theirs.
    #[cold]
    #[inline(never)]
    fn objcg_sheaf_retag_push(sh: &ObjcgSheaves, i: usize, objcg: &ObjCgroup, obj: usize) -> Keep {
        let Some(kept) = sh.kept(i) else {
            return Keep::NoRoom;
        };
        if sh.kept_objects() != 0 {
            return Keep::NoRoom;
        }
        if sh.inbox(i).and_then(|b| b.last()) == Some(obj) {
            return Keep::DoubleFree;
        }
        Self::objcg_sheaves_take(sh, objcg);
        kept.push(obj);
        Keep::Kept
    }

    /// Gives every object of `c`'s objcg sheaves (in stock `st`) back: the kept ones
    /// cleared from their vectors, uncharged, freed; the inboxes' freed as any free
    /// would. The sheaves end empty and untagged.
    #[cold]
    #[inline(never)]
    pub(super) fn flush_objcg_sheaves(&self, c: CpuRef<'_>, st: &MemcgStock) {
        let sh = &st.sheaves;
        // Untagged first: the frees below never come back here.
        let tag = sh.objcg.swap(ptr::null_mut(), Relaxed);
        for i in 0..OBJCG_SHEAF_CLASSES {
            let s = &self.km.caches().set(1)[i];
            let mut freed = 0;
            if let Some(kept) = sh.kept(i) {
                while let Some(obj) = kept.pop() {
                    if self.objcg_give_back(c, s, tag, obj) {
                        freed += 1;
                    }
                }
            }
            if freed != 0 {
                // SAFETY: a non-null tag holds a reference (type invariant), kept until
                // the end of the flush (and objects were kept only under a tag).
                if let Some(t) = unsafe { tag.as_ref() } {
                    self.refill_obj_stock(Some(c), t, s, freed * s.config().size);
                }
            }
        }
        for i in 0..OBJCG_SHEAF_CLASSES {
            let Some(inbox) = sh.inbox(i) else {
                continue;
            };
            let n = inbox.len();
            let mut objs = [0usize; OBJCG_SHEAF_SLOTS];
            for (k, o) in objs.iter_mut().enumerate().take(n) {
                *o = inbox.get(k);
            }
            inbox.set_len(0);
            for &o in &objs[..n] {
                // SAFETY: as in `intake`.
                unsafe { self.km.kfree(Some(c), o as *mut u8, self) };
            }
        }
        // SAFETY: a non-null tag holds a reference (type invariant), dropped here.
        if let Some(old) = unsafe { tag.as_ref() } {
            // SAFETY: that reference (the tag no longer names it).
            unsafe { old.put() };
        }
    }
}

impl<'a, P: Platform> Memcg<'a, P> {
    /// Charged kmalloc's fast path for the owner of `c`: `size` bytes charged to
    /// `objcg`, from `c`'s kept sheaves. `None` when they have no object of the
    /// class for `objcg`: the caller takes [`Memcg::kmalloc_objcg`], which also
    /// gives back sheaves that hold another objcg (kept out of this path, so that it
    /// needs nothing but the pop).
    #[inline]
    pub fn kmalloc_objcg_fast(
        &self,
        c: CpuRef<'_>,
        size: usize,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        let i = crate::kmalloc::kmalloc_index(size)?;
        let st = self.stock(Some(c))?;
        if let Some(p) = self.objcg_sheaf_pop(st, i, gfp, objcg) {
            return Some(p);
        }
        self.objcg_sheaf_intake_pop(c, st, i, gfp, objcg)
    }

    /// [`Memcg::kmalloc_objcg_fast`] when the kept sheaf is empty: the class's inbox
    /// taken in when the kept sheaves may keep `objcg`'s objects, then the pop.
    #[cold]
    #[inline(never)]
    fn objcg_sheaf_intake_pop(
        &self,
        c: CpuRef<'_>,
        st: &MemcgStock,
        i: usize,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        let sh = &st.sheaves;
        // The steady state first, without the rest of a take-in: the sheaves hold
        // `objcg`'s objects (the pop missed: the class's kept sheaf is empty) and the
        // inbox holds `objcg`'s alone.
        let tagged = ptr::eq(sh.objcg.load(Relaxed), objcg);
        if tagged && self.swap_in(sh, i) {
            return self.objcg_sheaf_pop(st, i, gfp, objcg);
        }
        if sh.inbox(i).is_none_or(|b| b.is_empty()) || !Self::may_keep(sh, objcg) {
            return None;
        }
        if tagged {
            // The swap was tried with this tag: the objects move.
            self.intake_moving(c, st, i);
        } else {
            self.intake(c, st, i, objcg);
        }
        self.objcg_sheaf_pop(st, i, gfp, objcg)
    }
}

impl<'a, P: Platform> Memcg<'a, P> {
    /// Charged kfree's fast path for the owner of `c`, running charged to `objcg`:
    /// keeps `p` in `c`'s kept sheaves when it is an object of a class with sheaves
    /// charged to `objcg`, and the sheaves hold (or can take) `objcg` and have room:
    /// `Some(true)`. A double free caught on top of the kept sheaf or the inbox is
    /// reported: `Some(false)`. `None` leaves `p` untouched for the regular free
    /// (which uncharges it). A full inbox of the class is taken in first, so that the
    /// inline free finds room again.
    ///
    /// # Safety
    /// If `p` is an object, the caller owns it and gives it up when this returns
    /// `Some(true)`.
    #[inline(always)]
    pub unsafe fn kfree_objcg_fast(
        &self,
        c: CpuRef<'_>,
        p: *mut u8,
        objcg: &ObjCgroup,
    ) -> Option<bool> {
        let (st, s, i) = self.objcg_free_target(c, p, objcg)?;
        if has_inbox(i) && st.sheaves.inbox(i).is_some_and(|b| b.len() == b.capacity()) {
            self.intake(c, st, i, objcg);
        }
        self.objcg_sheaf_keep_at(st, s, i, objcg, p as usize)
    }

    /// What both halves of a charged free start with: `c`'s stock, and the cache and
    /// class of `p` when it is an object of a class with objcg sheaves charged to
    /// `objcg` ([`Memcg::objcg_slot_of`]).
    #[inline(always)]
    fn objcg_free_target<'c>(
        &self,
        c: CpuRef<'c>,
        p: *mut u8,
        objcg: &ObjCgroup,
    ) -> Option<(&'c MemcgStock, &'a KmemCache, usize)> {
        let st = self.stock(Some(c))?;
        let (s, i, slot, _) = self.objcg_slot_of(p)?;
        if !ptr::eq(slot.load(Relaxed), objcg) {
            return None;
        }
        Some((st, s, i))
    }

    /// The cache, objcg sheaf class, objcg vector slot and slab head page of `p` when
    /// it starts an object of a class with objcg sheaves whose slab has a vector: the
    /// slab's head from the page, the class from the cache's config, then the
    /// object-start test of the free fast paths and one multiplication for the index,
    /// side by side (these caches have no left red zone: they are on a sheaf fast
    /// path, never slub_debug's).
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    fn objcg_slot_of(
        &self,
        p: *mut u8,
    ) -> Option<(&'a KmemCache, usize, &'a AtomicPtr<ObjCgroup>, &'a Page)> {
        let h = self.km.pages().virt_to_slab_used(p)?;
        let s = crate::slab::Slab::of(h).cache();
        let i = self.objcg_sheaf_class(s)?;
        let cfg = s.config();
        debug_assert_eq!(cfg.red_left, 0);
        let off = p as usize & (cfg.slab_bytes() - 1);
        // The free fast paths' object check: a multiple of the size, before the end
        // of the last object (so the index below is one of the slab's objects).
        if !cfg.starts_object_in_slab(off) {
            return None;
        }
        let idx = cfg.obj_to_index(off);
        let vec = objcg_vector(h)?;
        // SAFETY: `idx` < objects (an object's start, checked above), the length of
        // the slab's vector, which lives while the slab does (a live slab: the caller
        // owns one of its objects).
        Some((s, i, unsafe { &*vec.add(idx) }, h))
    }

    /// [`Memcg::kfree_objcg_fast`]'s slow half, for a caller it refused, or whose
    /// inline free a charged area refused: the area's copy of the tag-window length
    /// is brought up to date and a full inbox of `p`'s class taken in; `p` on top of
    /// that inbox is a double free (reported, refused: `Some(false)`). Then, when
    /// `p`'s class's kept sheaf is full of `objcg`'s objects, its older half goes back
    /// (uncharged in one step) and `p` waits there. A `p` already in the kept sheaf is
    /// a double free too. `None` leaves `p` untouched for the regular free, as the
    /// fast half does.
    ///
    /// # Safety
    /// As [`Memcg::kfree_objcg_fast`].
    #[cold]
    #[inline(never)]
    pub unsafe fn kfree_objcg_full(
        &self,
        c: CpuRef<'_>,
        p: *mut u8,
        objcg: &ObjCgroup,
    ) -> Option<bool> {
        let st = self.stock(Some(c))?;
        self.refresh_charged_tag_limit(st);
        let (s, i, slot, _) = self.objcg_slot_of(p)?;
        if let Some(inbox) = st.sheaves.inbox(i) {
            if inbox.last() == Some(p as usize) {
                Self::objcg_sheaf_double_free(self.km.slub(), s, p as usize);
                return Some(false);
            }
            if inbox.len() == inbox.capacity() {
                self.intake(c, st, i, objcg);
            }
        }
        if !ptr::eq(slot.load(Relaxed), objcg) {
            return None;
        }
        let kept = st.sheaves.kept(i)?;
        if (0..kept.len()).any(|k| kept.get(k) == p as usize) {
            // Freed again while it waits in the kept sheaf (a full one is searched
            // whole: giving half of it back must not free an object the sheaf would
            // then hand out again).
            Self::objcg_sheaf_double_free(self.km.slub(), s, p as usize);
            return Some(false);
        }
        if let Some(done) = self.objcg_sheaf_keep_at(st, s, i, objcg, p as usize) {
            return Some(done);
        }
        if !self.objcg_sheaf_make_room(c, st, s, i, objcg) {
            return None;
        }
        self.objcg_sheaf_keep_at(st, s, i, objcg, p as usize)
    }

    /// `kfree` by a context running charged to `objcg` (its active memory cgroup):
    /// an object charged to `objcg` may wait, still charged, in the kept sheaves of
    /// `cpu` for `objcg`'s next allocation ([`Memcg::kmalloc_objcg`]); everything
    /// else is freed as [`crate::Kmem::kfree`] frees it. False when it refused (a bad
    /// pointer or a double free: reported).
    ///
    /// # Safety
    /// As [`crate::Kmem::kfree`].
    pub unsafe fn kfree_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        p: *mut u8,
        objcg: &ObjCgroup,
    ) -> bool {
        if let Some(c) = cpu {
            // SAFETY: forwarded from the caller.
            if let Some(done) = unsafe { self.kfree_objcg_fast(c, p, objcg) } {
                return done;
            }
            // SAFETY: forwarded from the caller.
            if let Some(done) = unsafe { self.kfree_objcg_full(c, p, objcg) } {
                return done;
            }
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.km.kfree(cpu, p, self) }
    }
}
