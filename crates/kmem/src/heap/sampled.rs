//! The heap's side of KFENCE (`crate::kfence`): taking a sampled allocation on the
//! kmalloc slow path, and freeing, sizing and moving pool objects wherever a pointer
//! outside the span may arrive (`kfree`, `dealloc`, `ksize`, `krealloc`). The pool
//! and the reports are `kfence`'s; nothing here is on a fast path.

use super::Heap;
use crate::kfence::{self, Charge, FreeOutcome};
use kmem_core::memcontrol::ObjCgroup;
use kmem_core::{Gfp, KmemCache, Platform, SlabFlags, PAGE_SIZE};
use std::ptr::NonNull;

/// Whether `cg`'s group and its ancestors each have a page of room under their
/// `memory.max` (a snapshot: the charge that follows decides).
fn room_for_a_page(cg: &ObjCgroup) -> bool {
    let mut m = Some(cg.memcg());
    while let Some(g) = m {
        if g.memory.usage() >= g.memory.max() {
            return false;
        }
        m = g.parent();
    }
    true
}

/// Who and where: pid, thread id, CPU.
fn ids(h: &Heap) -> (u32, u32, u32) {
    let (tid, pid) = h.kmem.pages.platform().thread_and_pid();
    (pid, tid, crate::platform::linux::current_cpu() as u32)
}

impl Heap {
    /// A sampled kmalloc of `size` bytes from the KFENCE pool, if one is due and a
    /// slot is free (`None`: allocate as usual). Under an active memory cgroup the
    /// object is charged as one of the `kmalloc-cg-N` cache's, as the regular path
    /// would charge it, and a group at its limit gets no sample (the regular path then
    /// fails or reclaims as usual).
    #[cold]
    #[inline(never)]
    pub(super) fn kfence_alloc(&self, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        thread_local! {
            static SAMPLING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        // A sample's own allocations, and those of any stack trace, are never
        // sampled. The first trace loads glibc's unwinder with dlopen, which
        // allocates; a sample taken in there would trace (or install the fault
        // handler, which unwinds) again while libgcc_s is half loaded: ld.so's
        // "Inconsistency detected" assertion, or the half-loaded unwinder's abort.
        if crate::platform::linux::in_stack_trace() || SAMPLING.with(|s| s.replace(true)) {
            return None;
        }
        let p = self.kfence_alloc_sample(size, gfp);
        SAMPLING.with(|s| s.set(false));
        p
    }

    /// [`Heap::kfence_alloc`] for a thread not inside a sample already.
    fn kfence_alloc_sample(&self, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        // kmalloc's alignment: at least 8, natural for powers of two, else malloc's 16.
        let align = if size.is_power_of_two() {
            size.max(8)
        } else {
            16
        }
        .min(PAGE_SIZE);
        let objcg = super::thread::active_objcg();
        let gfp = if objcg.is_some() {
            gfp | Gfp::ACCOUNT
        } else {
            gfp
        };
        let cache = self.kmem.kmalloc_cache(size, gfp)?;
        let mut frames = [0usize; 8];
        self.kmem.pages.platform().stack_trace(&mut frames);
        // Zeroed as the cache's objects are (`KMEM_INIT`): a slot's page keeps what its
        // last object held while it is inaccessible.
        let init = SlabFlags::INIT_ON_ALLOC | SlabFlags::INIT_ON_FREE;
        let zero = gfp.contains(Gfp::ZERO) || cache.config().flags.intersects(init);
        let charge = match objcg {
            // A group (or an ancestor) without a page of room gets no sample: the
            // charge would fail, counting `max` and `oom` and draining the stocks,
            // and the regular path would do all of it again.
            Some(cg) if !room_for_a_page(cg) => return None,
            Some(cg) => {
                let memcg = self.kmem.memcg();
                if !memcg.obj_cgroup_charge(self.cpu().get(), cg, cache, cache.config().size) {
                    return None;
                }
                Charge {
                    objcg: cg as *const ObjCgroup as usize,
                    cache: cache as *const KmemCache as usize,
                }
            }
            None => Charge::NONE,
        };
        let p = kfence::alloc(size, align, zero, cache.name(), &frames, ids(self), charge);
        if p.is_none() {
            self.kfence_uncharge(charge);
        }
        NonNull::new(p?)
    }

    /// Gives back what a sampled object was charged (nothing for [`Charge::NONE`]).
    fn kfence_uncharge(&self, charge: Charge) {
        if charge.objcg == 0 {
            return;
        }
        // SAFETY: a charge names the objcg charged, which its charge keeps alive (a
        // removed group's objcg is freed only once nothing is charged to it), and one
        // of the kmalloc caches, which live as long as the heap.
        let (cg, cache) = unsafe {
            (
                &*(charge.objcg as *const ObjCgroup),
                &*(charge.cache as *const KmemCache),
            )
        };
        let size = cache.config().size;
        // SAFETY: the sample was charged one object of `cache` to `cg`, and the
        // charge comes back once, with the one free that won the slot.
        unsafe {
            self.kmem
                .memcg()
                .obj_cgroup_uncharge(self.cpu().get(), cg, cache, size)
        };
    }

    /// Frees a pool object (`kfence::owns(p)`): true if freed. A damaged canary is
    /// reported, the object freed, and `KMEM_ON_ERROR` applied; an invalid or double
    /// free is reported and refused (false).
    #[cold]
    #[inline(never)]
    pub(super) fn kfence_free(&self, p: *mut u8) -> bool {
        let mut frames = [0usize; 8];
        self.kmem.pages.platform().stack_trace(&mut frames);
        match kfence::free(p, &frames, ids(self)) {
            FreeOutcome::Freed(charge) => {
                self.kfence_uncharge(charge);
                true
            }
            FreeOutcome::Corrupted(charge) => {
                self.kfence_uncharge(charge);
                self.after_kfence_report();
                true
            }
            FreeOutcome::Invalid => false,
        }
    }

    /// After a KFENCE report of damage found at a free or at exit: stop the program
    /// unless `KMEM_ON_ERROR=continue`; a C program (libkmem.so) stops by default, as
    /// on a fault, a Rust program goes on (the kernel's way).
    fn after_kfence_report(&self) {
        use crate::config::OnError;
        let abort = match self.config().on_error {
            OnError::Abort => true,
            OnError::Continue => false,
            OnError::Default => super::C_FRONT_END.load(std::sync::atomic::Ordering::Relaxed),
        };
        if abort {
            crate::platform::linux::write_stderr(b"kmem: aborting after the KFENCE report above\n");
            // SAFETY: abort has no preconditions.
            unsafe { libc::abort() };
        }
    }

    /// krealloc of a pool object: always moves (to a regular allocation, or another
    /// sample), copying what both hold.
    ///
    /// # Safety
    /// `p` is a live pool object owned by the caller.
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn kfence_realloc(
        &self,
        p: *mut u8,
        size: usize,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        let Some(old) = kfence::size_of(p) else {
            self.kfence_free(p);
            return None;
        };
        let q = self.kmalloc(size, gfp)?;
        // SAFETY: both are ours; `old.min(size)` bytes are valid in each; distinct.
        unsafe { std::ptr::copy_nonoverlapping(p, q.as_ptr(), old.min(size)) };
        self.kfence_free(p);
        Some(q)
    }
}

/// `KMEM_KFENCE` on: at exit, the canaries of the sampled objects still allocated
/// (registered with `atexit` once the heap is ready).
pub(super) extern "C" fn kfence_check_at_exit() {
    if kfence::check_live() > 0 {
        super::HEAP.after_kfence_report();
    }
}
