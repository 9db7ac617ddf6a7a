//! Taking an inbox in (`Memcg::intake`): the objects a charged thread's inline free
//! pushed onto a class's inbox, charged to whichever group they are, checked against
//! their slabs' objcg vectors and moved to the class's kept sheaf (the group's own) or
//! freed the regular way (the others: uncharged, or reported when no live object).
//! `objcg_sheaf` decides when (an allocation that finds the kept sheaf empty, a free
//! that finds the inbox full); the charged area (`charged_area`) holds both sheaves.
//!
//! In steady state — a thread allocating and freeing in one group — the kept sheaf is
//! empty and the inbox all the group's: the two sheaves change places
//! (`swap_in`), and the take-in costs a compare per object, in a loop of its own.
//! Otherwise the objects move one by one (`intake_moving`), the common prefix in a
//! loop of its own too (`intake_run`). Each loop reads the vector slots through
//! [`VectorSlots`], which looks a slab's vector up once for a run of its objects, and
//! reads no slot at all for a *trusted* slab: one whose every charged object was
//! charged to the take-in's objcg (the sole-objcg word on the slab's head page,
//! `slab_hooks::note_sole_objcg`, an objcg id) and whose objects were never handed out uncharged
//! (no `PageFlags::SLAB_UNCHARGED`, `Slub::note_uncharged`). Why that is enough is
//! [`Memcg::inbox_vector`]'s to say; `tests/loom_memcg.rs` models it.
//!
//! A double free of the kept sheaf's top that reached the inbox is reported and
//! dropped (the object stays on the kept sheaf, once); one of the inbox's top never
//! got there (the inline free refuses it). Locking: none, as for the objcg sheaves:
//! only the charged area's owner runs these.

use super::charged_area::ObjcgSheaves;
use super::*;
use crate::page::PageFlags;
use crate::sync::AtomicPtr;

/// The objcg vector slots of a class's inbox objects, read in a loop: the vector of
/// the last slab looked up is kept, by the slab's base, so a run of one slab's
/// objects costs one lookup ([`Memcg::inbox_vector`]) and a slot read each — or no
/// read at all when the lookup found the slab's objects all charged to the tag the
/// loop asks about (`trusted`).
///
/// Invariant: `limit` is 0 (nothing looked up yet, or the last lookup found no
/// vector), or `vec` is the vector of the live slab of `s` at `base` and `limit` the
/// slab's size (a power of two: slabs are naturally aligned blocks of pages);
/// `trusted` is `limit`, or 0, and is `limit` only when the lookup
/// found the slab's sole objcg to be `tag` (by its id) and no object of it handed out
/// uncharged ([`Memcg::inbox_vector`]). The slab stays live while a loop reads through the
/// cursor: it holds the object last looked up there, which the take-in still owns —
/// in the inbox's slots, whose regular frees come after the loop, or on the kept
/// sheaf as its newest object, which making room (giving the older half back) keeps.
pub(super) struct VectorSlots<'s> {
    s: &'s KmemCache,
    tag: *mut ObjCgroup,
    /// `tag`'s id (`ObjCgroup::id`), [`SOLE_NONE`] for a null tag: what a trusted
    /// slab's sole-objcg word holds.
    tag_id: u32,
    mask: usize,
    mul: u64,
    base: usize,
    limit: usize,
    trusted: usize,
    vec: *const AtomicPtr<ObjCgroup>,
}

impl<'s> VectorSlots<'s> {
    /// A cursor for the question "is this object charged to `tag`" (non-null).
    fn new(s: &'s KmemCache, tag: *mut ObjCgroup) -> Self {
        let (mask, mul) = s.config().index_parts();
        // SAFETY: a non-null tag is the kept sheaves' objcg, which holds a reference
        // (`ObjcgSheaves`' invariant) while the take-in runs.
        let tag_id = unsafe { tag.as_ref() }.map_or(SOLE_NONE, |t| t.id);
        Self {
            s,
            tag,
            tag_id,
            mask,
            mul,
            base: 0,
            limit: 0,
            trusted: 0,
            vec: ptr::null(),
        }
    }

    /// Whether `o`'s slot names the cursor's tag (false for no live slab of `s`
    /// with a vector).
    ///
    /// # Safety
    /// `o` is an inbox object of `s`'s class: it passed the inline free's checks for
    /// `s` (a slab of it, an object's start), and the caller's inbox holds it.
    #[inline(always)]
    unsafe fn names<P: Platform>(&mut self, m: &Memcg<'_, P>, o: usize) -> bool {
        // Inside the slab looked up last: one subtraction and one compare (a
        // wrapped difference is past the limit too), and the offset is the index's.
        let mut off = o.wrapping_sub(self.base);
        if off < self.trusted {
            return true;
        }
        if off >= self.limit {
            let base = o & !self.mask;
            let Some((vec, trusted)) = m.inbox_vector(self.s, base, self.tag_id) else {
                // No slab's: the next object of that slab looks again.
                (self.limit, self.trusted) = (0, 0);
                return false;
            };
            (self.base, self.limit, self.vec) = (base, self.mask + 1, vec);
            self.trusted = if trusted { self.limit } else { 0 };
            if trusted {
                return true;
            }
            off = o & self.mask;
        }
        let idx = ((off as u64 * self.mul) >> 32) as usize;
        debug_assert!(self.s.config().is_object_start(off));
        // SAFETY: the object `o` starts one of the slab at `base` (the caller's
        // contract, with the object checks of `s`, whose slab it is; a trusted slab
        // returned above without a read), so `idx` is below `objects`, the vector's
        // count of slots; the vector lives while the slab
        // does, and the slab while it holds `o` (the type's invariant).
        ptr::eq(unsafe { &*self.vec.add(idx) }.load(Relaxed), self.tag)
    }
}

impl<'a, P: Platform> Memcg<'a, P> {
    /// Takes class `i`'s inbox in, for a context charged to `objcg`: every object
    /// whose vector slot names the kept sheaves' objcg (`objcg`'s once empty sheaves
    /// take it) goes onto the kept sheaf, the older half of a full one going back to
    /// make room; every other object is freed as a free by any context would free it
    /// (uncharged from the objcg its slot names; reported if it is no live object).
    /// The inbox ends empty.
    ///
    /// One vector slot read per object, in a loop that looks up a slab's vector once
    /// for a run of its objects, and none for the objects of a trusted slab: the
    /// charged free's whole cost where the object is its own group's.
    #[cold]
    #[inline(never)]
    pub(super) fn intake(&self, c: CpuRef<'_>, st: &MemcgStock, i: usize, objcg: &ObjCgroup) {
        let sh = &st.sheaves;
        if Self::may_keep(sh, objcg) {
            Self::objcg_sheaves_take(sh, objcg);
        }
        if !self.swap_in(sh, i) {
            self.intake_moving(c, st, i);
        }
    }

    /// [`Memcg::intake`] past the swap (the kept sheaf holds objects, or the inbox
    /// objects of another objcg or of no live slab): the objects move one by one.
    /// The caller has tagged the sheaves if they may keep its objcg.
    #[cold]
    #[inline(never)]
    pub(super) fn intake_moving(&self, c: CpuRef<'_>, st: &MemcgStock, i: usize) {
        let sh = &st.sheaves;
        let (Some(inbox), Some(kept)) = (sh.inbox(i), sh.kept(i)) else {
            return;
        };
        let n = inbox.len();
        let tag = sh.objcg.load(Relaxed);
        let s = &self.km.caches().set(1)[i];
        // Out of the inbox first (its slots stay as they are until the owner's next
        // inline free, which cannot run meanwhile): a free below may drain the stock,
        // which must not find them there too.
        inbox.set_len(0);
        let (from, to) = (inbox.slots(), kept.slots());
        let cap = kept.capacity();
        let mut len = kept.len();
        // The common case first, in a loop of its own: objects of `tag` that fit.
        // SAFETY: the inbox's `n` objects passed the inline free's checks for `s`;
        // the kept sheaf has `len` of its `cap` slots in use.
        let start = unsafe { self.intake_run(s, from, n, to, cap, &mut len, tag) };
        // Inbox slots whose objects go the regular way, by bit.
        let mut others = 0u64;
        let mut slots = VectorSlots::new(s, tag);
        // No tag, or the sheaves drained while making room: nothing more is kept.
        let mut drained = tag.is_null();
        for k in start..n {
            // SAFETY: `k` < the inbox's count ≤ its capacity: its slots (ChargedSheaf).
            let o = unsafe { *from.add(k) };
            // SAFETY: an inbox object (the inline free's checks for `s`), asked about
            // a non-null tag (`drained` otherwise).
            if drained || !unsafe { slots.names(self, o) } {
                // Another objcg's object or no live one: the regular free uncharges
                // or reports it. (An object of a trusted slab never comes here: a
                // double free of one whose first free uncharged it stays on the kept
                // sheaf, and its give-back reports it: `Memcg::inbox_vector`.)
                others |= 1 << k;
                continue;
            }
            // SAFETY: `len - 1` < `len` ≤ the kept sheaf's capacity.
            if len > 0 && unsafe { *to.add(len - 1) } == o {
                // The kept sheaf's top freed again (the inbox's top test cannot see
                // it): reported, and left where it is, once. The regular free would
                // free it to its slab while the sheaf still holds it.
                Self::objcg_sheaf_double_free(self.km.slub(), s, o);
                continue;
            }
            if len == cap {
                kept.set_len(len);
                // SAFETY: a non-null tag holds a reference (type invariant).
                self.objcg_sheaf_make_room(c, st, s, i, unsafe { &*tag });
                len = kept.len();
                if len == cap || !ptr::eq(sh.objcg.load(Relaxed), tag) {
                    // Drained meanwhile: the rest goes the regular way.
                    drained = true;
                    others |= 1 << k;
                    continue;
                }
            }
            // SAFETY: `len` < `cap`, the kept sheaf's capacity.
            unsafe { *to.add(len) = o };
            len += 1;
        }
        kept.set_len(len);
        while others != 0 {
            let k = others.trailing_zeros() as usize;
            others &= others - 1;
            // SAFETY: `k` < `n`: an inbox slot, untouched since (no inline free ran).
            let o = unsafe { *from.add(k) };
            // SAFETY: the inline free took the object from its owner, who gave it up.
            unsafe { self.km.kfree(Some(c), o as *mut u8, self) };
        }
    }

    /// The take-in in steady state (an allocation's, or a free's that found the
    /// inbox full): when class `i`'s kept sheaf is empty and every object of its
    /// inbox is charged to the kept sheaves' objcg (the tag), the two sheaves change
    /// places, and true. (The copy in [`Memcg::intake_moving`] would have moved them
    /// all, in order: with the kept sheaf empty its top test never fires, the inline
    /// free having refused an object that was the inbox's top already.) Else false,
    /// nothing changed.
    #[inline(always)]
    pub(super) fn swap_in(&self, sh: &ObjcgSheaves, i: usize) -> bool {
        let (Some(kl), Some(il)) = (sh.kept_line(i), sh.inbox_line(i)) else {
            return false;
        };
        let (Some(kept), Some(inbox)) = (kl.kept(), il.inbox()) else {
            return false;
        };
        let n = inbox.len();
        if n == 0 || !kept.is_empty() {
            return false;
        }
        let s = &self.km.caches().set(1)[i];
        // SAFETY: the inbox's `n` objects passed the inline free's checks for `s`.
        if !unsafe { self.inbox_all_of(s, inbox.slots(), n, sh.objcg.load(Relaxed)) } {
            return false;
        }
        kl.swap_kept_with_inbox(il);
        true
    }

    /// Whether every one of the `n` objects at `from` (an inbox's) is charged to
    /// `tag` (non-null) by its slab's vector: [`Memcg::intake`]'s test before it
    /// swaps an inbox for an empty kept sheaf. One vector lookup per run of a slab's
    /// objects, then no slot read for a trusted slab's objects and one for each
    /// other; nothing written.
    ///
    /// # Safety
    /// The `n` slots at `from` hold objects that passed the inline free's checks for
    /// `s` (an inbox's).
    #[inline(never)]
    unsafe fn inbox_all_of(
        &self,
        s: &KmemCache,
        from: *const usize,
        n: usize,
        tag: *mut ObjCgroup,
    ) -> bool {
        if tag.is_null() {
            return false;
        }
        let mut slots = VectorSlots::new(s, tag);
        // SAFETY: the caller's `n` slots, inbox objects.
        let objs = unsafe { core::slice::from_raw_parts(from, n) };
        let pairs = objs.chunks_exact(2);
        let last = pairs.remainder();
        for pair in pairs {
            let (o, p) = (pair[0], pair[1]);
            // Two objects of the trusted slab (the steady state's), tested inline
            // together: `trusted` is 0 or the slab's size, a power of two, so both
            // offsets are below it exactly when their OR is.
            let (a, b) = (o.wrapping_sub(slots.base), p.wrapping_sub(slots.base));
            if a | b < slots.trusted {
                continue;
            }
            // SAFETY: inbox objects (the caller's contract), the tag non-null.
            if !unsafe { slots.names(self, o) && slots.names(self, p) } {
                return false;
            }
        }
        for &o in last {
            // SAFETY: as above.
            if o.wrapping_sub(slots.base) >= slots.trusted && !unsafe { slots.names(self, o) } {
                return false;
            }
        }
        true
    }

    /// [`Memcg::intake_moving`]'s common case: moves the inbox's objects from the first
    /// (`from`, `n` of them) onto the kept sheaf (`to`, `len` of its `cap` slots in
    /// use) for as long as each is charged to `tag` (non-null), is not the kept
    /// sheaf's top freed again, and fits. Returns how many it moved (the first it did
    /// not move is where the full loop goes on). A loop of its own, with few live
    /// values: inside the full loop, with its slow cases, the compiler kept the count and
    /// the slots on the stack (about 30 instructions an object).
    ///
    /// # Safety
    /// The `n` slots at `from` hold objects that passed the inline free's checks for
    /// `s` (an inbox's); `to` has `cap` slots, of which the first `len` hold objects.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn intake_run(
        &self,
        s: &KmemCache,
        from: *const usize,
        n: usize,
        to: *mut usize,
        cap: usize,
        len: &mut usize,
        tag: *mut ObjCgroup,
    ) -> usize {
        if tag.is_null() {
            return 0;
        }
        let mut l = *len;
        let fit = n.min(cap - l);
        // SAFETY: `l - 1` < `l` ≤ `cap` (caller).
        let mut top = if l > 0 { unsafe { *to.add(l - 1) } } else { 0 };
        let mut slots = VectorSlots::new(s, tag);
        let mut k = 0;
        while k < fit {
            // SAFETY: `k` < `n`: one of the caller's slots.
            let o = unsafe { *from.add(k) };
            // SAFETY: an inbox object (caller), the tag non-null (tested above).
            if o == top || !unsafe { slots.names(self, o) } {
                break;
            }
            // SAFETY: `l` < `cap`: at most `cap - len` objects come here.
            unsafe { *to.add(l) = o };
            l += 1;
            top = o;
            k += 1;
        }
        *len = l;
        k
    }

    /// The objcg vector of the slab at `base` when it is still a slab of `s` with a
    /// vector, else `None` (a double free whose regular free discarded the slab: the
    /// regular free reports it); with it, whether the slab is *trusted* for the
    /// objcg `tag_id` numbers (the take-in's tag): the sole-objcg word on its head
    /// page ([`note_sole_objcg`](super::slab_hooks)) is `tag_id` and no object of it
    /// was handed out uncharged (no [`PageFlags::SLAB_UNCHARGED`]).
    /// `base` is the base of an inbox object of `s`'s class (slabs are aligned to
    /// their size).
    ///
    /// Why a trusted slab's objects need no slot read: an inbox object `o` is one
    /// the program freed, so its last allocation came before (and the take-in runs
    /// on the thread that took the free in). That allocation either charged `o` —
    /// then the slab's sole word moved to `o`'s objcg's id or past it before (its
    /// last reset, and the mark's last clearing, came before that allocation: both
    /// happen only while no object of the slab is in use, and every object the
    /// sheaves, barns, kept sheaves and inboxes hold counts as in use on its slab,
    /// `o` among them until the take-in gives it back; see
    /// `Slab::start_charges_over`), and since it moves one way only in between,
    /// reading the tag's id now means `o` was charged to
    /// the tag (no other live objcg has its id, and `o`'s lives while `o` is charged),
    /// and its slot, which nobody else writes while `o` is live, names the tag — or
    /// charged nothing, and then marked the slab before it returned
    /// (`Slub::note_uncharged`), a mark this read sees. Nothing else hands out an
    /// object of an accounted kmalloc cache (the inline and restartable pops, which do
    /// not mark, are never given these caches' offsets: their contracts say so).
    ///
    /// That holds for a program that frees what it allocated, once. A double free
    /// whose first free went the regular way (uncharging the object, its slot now
    /// empty) is kept here as if charged: the kept sheaf may hand it out again, or
    /// its give-back reports it ("Object already free") and leaves it, uncounted.
    /// Before trusted slabs the take-in freed it a second time; below a sheaf's top,
    /// a double free can hand an object out twice either way.
    #[inline(always)]
    fn inbox_vector(
        &self,
        s: &KmemCache,
        base: usize,
        tag_id: u32,
    ) -> Option<(*const AtomicPtr<ObjCgroup>, bool)> {
        // SAFETY: an inbox object passed the inline free's range check (the inbox's
        // invariant), and a slab never crosses a section, so its base is in the same
        // online section.
        let h = unsafe { self.km.pages().descriptor_in_window(base) };
        let flags = h.flags();
        // The cache word compared as an address: a slab being discarded reads `SLAB`
        // with the word already 0, of which no reference may be made.
        let cache = crate::slab::Slab::of(h).cache_addr();
        if !flags.contains(PageFlags::SLAB) || cache != Some(ptr::from_ref(s) as usize) {
            return None;
        }
        let vec = objcg_vector(h)?;
        // The head page's word, in the line the flags came from.
        let sole = h.memcg_sole().load(Relaxed);
        let trusted = sole == tag_id && sole > SOLE_MIXED;
        Some((vec, trusted && !flags.contains(PageFlags::SLAB_UNCHARGED)))
    }
}
