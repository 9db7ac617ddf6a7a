//! Freeing: the fast path (push on the CPU freelist when the object is in the CPU slab),
//! frees into a slab this CPU froze (its local freelist), and `__slab_free` (a CAS on the
//! slab's state, with the node's `list_lock` when the free changes list membership).

use super::*;
use crate::page::Page;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use core::ptr::{self, NonNull};

impl<'a, P: Platform> Slub<'a, P> {
    // -----------------------------------------------------------------------
    // Free.

    /// `kmem_cache_free`: gives `obj` back to `s`. A pointer that is not an object of
    /// `s`, or one already at the head of a freelist (a double free), is reported
    /// (`slab_err`) and left alone; then it returns false.
    ///
    /// # Safety
    /// If `obj` is an object of `s`, the caller owns it and stops using it.
    #[inline]
    pub unsafe fn free(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, obj: NonNull<u8>) -> bool {
        // SAFETY: the caller frees its object: the cache found lives.
        match unsafe { self.lookup(obj.as_ptr()) } {
            ObjectLookup::Slab(found, slab) if ptr::eq(found, s) => {
                // SAFETY: a valid object of `s`, given up by the caller.
                unsafe { self.free_object(cpu, s, slab, obj.as_ptr() as usize) }
            }
            ObjectLookup::Slab(found, slab) => {
                self.report(found, Some(slab), "Wrong slab cache", obj.as_ptr() as usize);
                false
            }
            ObjectLookup::Large(_) | ObjectLookup::Bad(_) => {
                self.report(s, None, "Invalid object pointer", obj.as_ptr() as usize);
                false
            }
        }
    }

    /// `kmem_cache_free` with the accounting hook: for an object of `s` whose slab has
    /// an object-extension vector, `acct` runs first; then the object is freed as
    /// [`Slub::free`] frees it (pointers that are not objects of `s` are reported).
    ///
    /// # Safety
    /// As [`Slub::free`].
    #[inline]
    pub unsafe fn free_accounted(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        obj: NonNull<u8>,
        acct: &impl Accounting,
    ) -> bool {
        // SAFETY: the caller frees its object: the cache found lives.
        match unsafe { self.lookup(obj.as_ptr()) } {
            ObjectLookup::Slab(found, slab) if ptr::eq(found, s) => {
                // SAFETY: the head page of a live slab of `s` (the lookup just found it).
                let head = unsafe { slab.as_ref() };
                // SAFETY: its object at `obj`, which the caller frees (once: here).
                unsafe { accounting::slab_free_hook(acct, cpu, s, head, obj.as_ptr() as usize) };
                // SAFETY: a valid object of `s`, given up by the caller.
                unsafe { self.free_object(cpu, s, slab, obj.as_ptr() as usize) }
            }
            // SAFETY: reports only.
            _ => unsafe { self.free(cpu, s, obj) },
        }
    }

    /// Frees a checked object of slab `slab` of `s`.
    ///
    /// # Safety
    /// `obj` is the start of an object of `slab`, owned by the caller.
    ///
    /// Returns false if it refused (a double free caught at a freelist head: reported).
    #[inline]
    pub(crate) unsafe fn free_object(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        obj: usize,
    ) -> bool {
        if let Some(c) = cpu {
            let fast = s.config().fast;
            // SAFETY: a live slab of `s` (caller).
            if fast != FastPath::CpuSlab && Slab::of(unsafe { slab.as_ref() }).state().inuse() == 0
            {
                // No object of the slab is out (a kept empty slab's, `empty.rs`, whose
                // sheaf tags no longer send its objects to the inline paths): a sheaf
                // would take the object and hand it out beside the slab's own copy.
                return self.report_double_free(s, slab, obj);
            }
            if fast == FastPath::Sheaf {
                return match s.cpu(c).sheaf_push(obj) {
                    Ok(()) => true,
                    Err(false) => {
                        // SAFETY: forwarded.
                        unsafe { self.sheaf_free(c, s, obj) }
                    }
                    Err(true) => self.report_double_free(s, slab, obj),
                };
            }
            if fast != FastPath::CpuSlab {
                // SAFETY: forwarded.
                return unsafe { self.sheaf_free(c, s, obj) };
            }
            if s.config().access != PerCpuAccess::Owned {
                // SAFETY: forwarded.
                return unsafe { self.free_object_lockless(c, s, slab, obj) };
            }
            let cc = s.cpu(c);
            let cur = cc.freelist.load(Relaxed);
            // Slabs are aligned to their size (buddy blocks).
            let base = obj & !(s.config().slab_bytes() - 1);
            debug_assert_eq!(base, self.slab_base(slab));
            if cur != 0 && cur.wrapping_sub(base) < s.config().slab_bytes() {
                // The object is in this CPU's slab: push on the CPU freelist.
                if cur == obj {
                    return self.report_double_free(s, slab, obj);
                }
                // SAFETY: the object is ours (caller).
                unsafe { set_freepointer(s.config(), obj, cur) };
                cc.freelist.store(obj, Relaxed);
                cc.next_tid();
                cc.count(SlubStat::FreeFastpath);
                return true;
            }
        }
        // SAFETY: forwarded.
        unsafe { self.free_object_elsewhere(cpu, s, slab, obj) }
    }

    /// A free whose object is not in the CPU slab: onto the local list of a slab this
    /// CPU froze (on its partial list), else `__slab_free` (or the debug path).
    ///
    /// # Safety
    /// As [`Slub::free_object`].
    #[inline]
    pub(super) unsafe fn free_object_elsewhere(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        obj: usize,
    ) -> bool {
        if let Some(c) = cpu {
            // SAFETY: a live slab of `s`.
            let sr = Slab::of(unsafe { slab.as_ref() });
            if sr.frozen_by() == cpu_tag(c) {
                let head = sr.local_head();
                if head == obj {
                    return self.report_double_free(s, slab, obj);
                }
                let base = obj & !(s.config().slab_bytes() - 1);
                let next = if head == 0 { base | 1 } else { head };
                // SAFETY: the object is ours (caller).
                unsafe { set_freepointer(s.config(), obj, next) };
                sr.push_local(obj, base);
                s.cpu(c).count(SlubStat::FreeFrozen);
                return true;
            }
        }
        if s.config().off_fast_paths() {
            // SAFETY: forwarded.
            return unsafe { self.free_debug(cpu, s, slab, obj) };
        }
        // SAFETY: forwarded.
        unsafe { self.slab_free(cpu, s, slab, obj, obj, 1) }
    }

    /// Frees `obj`, an object a `krealloc` has just moved to a larger class: onto the
    /// CPU's spare sheaf while it has room, as any free, but when it is full straight
    /// to the object's slab instead of trading the sheaf at the barn; a slab this
    /// empties goes back to the page allocator at once, the node keeping an empty slab
    /// only as the kernel keeps one below `min_partial`, with a bound of one partial
    /// slab. Buffers that outgrow their class by the hundred (vectors doubling) are not
    /// followed by allocations of that class, and their memory is what the larger
    /// class needs next: kept in the barn, each pins its slab. The slab goes to the
    /// zone, where it merges with its buddy for the larger class's bigger slabs
    /// (BENCHMARKS.md, "Realloc growth frees to the slab"), unless the class twice its
    /// size has slabs of its order (`CacheConfig::doubled_same_order`: up to 128 B and
    /// 1536 B to 8 KiB, all on 32 KiB slabs): then it goes to the CPU's page lists,
    /// whose head the larger class's next slab takes as it is, still in the cache, with
    /// no zone lock, merge or split (BENCHMARKS.md, "Outgrown slabs of the doubled
    /// class's order").
    /// One buffer grown and freed at a time still finds room on the spare.
    /// Without the plain sheaf fast path (statistics on, restartable sequences, no
    /// CPU) the object goes straight to its slab. Caches off the fast paths
    /// (slub_debug) and the CPU-slab design free as [`Slub::free_object`] does.
    ///
    /// # Safety
    /// As [`Slub::free_object`].
    pub unsafe fn free_outgrown(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        obj: usize,
    ) -> bool {
        let fast = s.config().fast;
        if s.config().off_fast_paths() || fast == FastPath::CpuSlab {
            // SAFETY: forwarded.
            return unsafe { self.free_object(cpu, s, slab, obj) };
        }
        // SAFETY: a live slab of `s` (caller).
        if Slab::of(unsafe { slab.as_ref() }).state().inuse() == 0 {
            // A kept slab's object (a realloc of a freed block), as `free_object`.
            return self.report_double_free(s, slab, obj);
        }
        if let (Some(c), FastPath::Sheaf) = (cpu, fast) {
            let cc = s.cpu(c);
            match cc.sheaf_push(obj) {
                Ok(()) => return true,
                Err(true) => return self.report_double_free(s, slab, obj),
                // No spare sheaf yet: the ordinary free installs one.
                // SAFETY: forwarded.
                Err(false) if !cc.has_spare() => return unsafe { self.sheaf_free(c, s, obj) },
                // The spare is full: to the slabs, not to the barn.
                // SAFETY: forwarded.
                Err(false) => return unsafe { self.spare_flush_push(c, s, obj) },
            }
        }
        // SAFETY: forwarded.
        unsafe { self.slab_free_as(cpu, s, slab, obj, obj, 1, Emptied::Release) }
    }

    /// A free of the object at the head of a freelist: it is already free. Reported
    /// (`Object already free`, as slub_debug says) and refused (returns false); for
    /// the platform's own fast paths (rseq) too.
    ///
    /// # Safety
    /// `slab` heads a live slab of `s` (the report prints its state).
    #[cold]
    #[inline(never)]
    pub unsafe fn double_free(&self, s: &KmemCache, slab: NonNull<Page>, obj: usize) -> bool {
        self.report_double_free(s, slab, obj)
    }

    /// [`Slub::double_free`] for the crate's own free paths, whose `slab` is the live
    /// slab of `s` they were freeing into.
    #[cold]
    #[inline(never)]
    pub(crate) fn report_double_free(
        &self,
        s: &KmemCache,
        slab: NonNull<Page>,
        obj: usize,
    ) -> bool {
        self.report(s, Some(slab), "Object already free", obj);
        false
    }

    /// `__slab_free`: gives `cnt` objects, chained `head`..`tail` through their free
    /// pointers, back to `slab` with a CAS on its state, doing what the slab's new
    /// state asks for (rule 2).
    ///
    /// # Safety
    /// The objects are objects of `slab`, owned by the caller; `tail`'s free pointer
    /// will be overwritten.
    #[inline(always)]
    pub(super) unsafe fn slab_free(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        head: usize,
        tail: usize,
        cnt: u64,
    ) -> bool {
        // SAFETY: forwarded.
        unsafe { self.slab_free_as(cpu, s, slab, head, tail, cnt, Emptied::Keep) }
    }

    /// [`Slub::slab_free`], with what becomes of a slab the free empties.
    ///
    /// # Safety
    /// As [`Slub::slab_free`].
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn slab_free_as(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: NonNull<Page>,
        head: usize,
        tail: usize,
        cnt: u64,
        emptied: Emptied,
    ) -> bool {
        let cfg = s.config();
        s.stat(cpu, SlubStat::FreeSlowpath);
        // SAFETY: a live slab of `s`.
        let sr = unsafe { slab.as_ref() };
        let base = self.slab_base(slab);
        let nid = self.pages.page_to_nid(slab);
        let node = &s.node(nid);
        let mut lock = None;
        let mut freezer: Option<CpuRef<'_>>;
        let (old, new) = loop {
            freezer = None;
            let old = Slab::of(sr).state();
            let prior = base + old.offset() as usize;
            if prior == head || old.inuse() < cnt {
                // The head again, or more objects than the slab has in use (a free
                // into an empty slab, a kept one among them: `empty.rs`).
                drop(lock);
                return self.report_double_free(s, slab, head);
            }
            // SAFETY: our objects (caller).
            unsafe { set_freepointer(cfg, tail, prior) };
            let can_freeze = cpu.is_some() && cfg.cpu_partial_slabs > 0;
            let freeze = match free_decision(old, cnt, can_freeze, lock.is_some()) {
                FreeDecision::Plain => false,
                FreeDecision::Freeze => {
                    // A full slab gets a free: it goes to our CPU partial list.
                    freezer = cpu;
                    true
                }
                FreeDecision::Lock => {
                    lock = Some(node.list_lock.lock());
                    continue;
                }
            };
            let new = old.after_free((head - base) as u64, cnt, freeze);
            if Slab::of(sr).cas_state(old, new) {
                break (old, new);
            }
        };
        if old.frozen() {
            drop(lock);
            s.stat(cpu, SlubStat::FreeFrozen);
            return true;
        }
        if let (true, Some(c)) = (new.frozen(), freezer) {
            drop(lock);
            // We froze it: its local freelist is ours from now on.
            Slab::of(sr).set_frozen_by(cpu_tag(c));
            s.stat(cpu, SlubStat::CpuPartialFree);
            self.put_cpu_partial(c, s, slab);
            return true;
        }
        let Some(mut list) = lock else {
            return true;
        };
        let (keep, pcp) = match emptied {
            Emptied::Keep => (cfg.min_partial, cpu),
            Emptied::Release => (
                cfg.min_partial.min(1),
                if cfg.doubled_same_order { cpu } else { None },
            ),
        };
        if new.inuse() == 0 && list.len() >= keep {
            self.unlist_emptied(cpu, s, &mut list, slab, old);
            if emptied == Emptied::Keep && Self::keeps_empty_slabs(cfg) {
                // Kept whole for the next refill that would make a slab (`empty.rs`).
                self.keep_empty_slab(s, nid, &mut list, slab);
                return true;
            }
            drop(list);
            // Without a CPU the pages go to the zone, where they merge at once.
            self.discard_slab(pcp, s, slab);
            return true;
        }
        if old.list_empty() {
            self.add_partial(&mut list, slab, true);
            s.stat(cpu, SlubStat::FreeAddPartial);
        }
        true
    }
}

impl<P: Platform> Slub<'_, P> {
    /// A slab a free has just emptied, whose state before was `old`, taken off the
    /// node's partial list (`locked`, held by the caller) if it was on it.
    pub(super) fn unlist_emptied(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        locked: &mut crate::page::PageList,
        slab: NonNull<Page>,
        old: SlabState,
    ) {
        if !old.list_empty() {
            self.remove_partial(locked, slab);
            s.stat(cpu, SlubStat::FreeRemovePartial);
        }
    }
}

/// What `__slab_free` does with a slab the free leaves empty.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Emptied {
    /// The kernel's way: kept on the node while it has fewer than `min_partial`
    /// partial slabs, else freed through this CPU's page lists.
    Keep,
    /// Kept only while the node has no partial slab (the `min_partial` test with a
    /// bound of one: a slab that was on the list counts itself), else freed to the
    /// zone, or to the CPU's page lists when the doubled class has slabs of its order
    /// (see [`Slub::free_outgrown`]).
    Release,
}
