//! Bulk allocation and free (`kmem_cache_alloc_bulk`, `kmem_cache_free_bulk` with
//! `build_detached_freelist`).

use super::*;
use crate::gfp::Gfp;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::sync::Ordering::Relaxed;
use core::ptr::{self, NonNull};

impl<'a, P: Platform> Slub<'a, P> {
    // -----------------------------------------------------------------------
    // Bulk.

    /// `kmem_cache_alloc_bulk`: fills `out` with objects; returns how many (all, or 0
    /// when memory ran out — then none are kept, as the kernel's all-or-nothing).
    pub fn alloc_bulk(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        out: &mut [*mut u8],
    ) -> usize {
        for i in 0..out.len() {
            match self.alloc(cpu, s, gfp) {
                Some(p) => out[i] = p.as_ptr(),
                None => {
                    // SAFETY: the objects we just allocated, given back.
                    unsafe { self.free_bulk(cpu, s, &mut out[..i]) };
                    return 0;
                }
            }
        }
        out.len()
    }

    /// `kmem_cache_free_bulk`: frees the objects of `objs` (nulls are skipped and the
    /// slots set to null), one detached freelist per slab: consecutive objects of the
    /// same slab are chained and given back with one CAS (`build_detached_freelist`).
    ///
    /// # Safety
    /// As [`Slub::free`] for every non-null pointer.
    pub unsafe fn free_bulk(&self, cpu: Option<CpuRef<'_>>, s: &KmemCache, objs: &mut [*mut u8]) {
        let cfg = s.config();
        if cfg.off_fast_paths() {
            // Debug (and init_on_*) caches take every object on its own.
            for o in objs.iter_mut() {
                if let Some(p) = NonNull::new(core::mem::replace(o, ptr::null_mut())) {
                    // SAFETY: forwarded from the caller.
                    unsafe { self.free(cpu, s, p) };
                }
            }
            return;
        }
        if let (Some(c), true) = (cpu, cfg.fast != FastPath::CpuSlab) {
            // Sheaves: each object onto the CPU's sheaf (a full one is exchanged or
            // flushed in bulk by the sheaf layer).
            for o in objs.iter_mut() {
                if let Some(p) = NonNull::new(core::mem::replace(o, ptr::null_mut())) {
                    // SAFETY: forwarded from the caller.
                    unsafe { self.free(Some(c), s, p) };
                }
            }
            return;
        }
        let mut i = 0;
        while i < objs.len() {
            let obj = objs[i];
            objs[i] = ptr::null_mut();
            i += 1;
            if obj.is_null() {
                continue;
            }
            // SAFETY: the caller frees its objects: the caches found live.
            let slab = match unsafe { self.lookup(obj) } {
                ObjectLookup::Slab(found, slab) if ptr::eq(found, s) => slab,
                ObjectLookup::Slab(found, slab) => {
                    self.report(found, Some(slab), "Wrong slab cache", obj as usize);
                    continue;
                }
                _ => {
                    self.report(s, None, "Invalid object pointer", obj as usize);
                    continue;
                }
            };
            // Gather the following objects of the same slab into one list.
            let head = obj as usize;
            let mut tail = head;
            let mut cnt = 1u64;
            let base = self.slab_base(slab);
            while i < objs.len() {
                let next = objs[i] as usize;
                if next == 0 || next.wrapping_sub(base) >= cfg.slab_bytes() {
                    break;
                }
                // SAFETY: only compared with `s`, which the caller's objects keep.
                if !matches!(unsafe { self.lookup(next as *const u8) }, ObjectLookup::Slab(f, _) if ptr::eq(f, s))
                {
                    break;
                }
                // SAFETY: both are our objects of this slab.
                unsafe { set_freepointer(cfg, tail, next) };
                tail = next;
                cnt += 1;
                objs[i] = ptr::null_mut();
                i += 1;
            }
            if let Some(c) = cpu {
                let cc = s.cpu(c);
                if cfg.access != PerCpuAccess::Owned {
                    // (A double free at the head falls through to `slab_free`, which
                    // reports it. With rseq only the CPU's own sections push.)
                    if cfg.access == PerCpuAccess::Cas
                        && matches!(self.push_lockless(cc, cfg, base, head, tail), Push::Done)
                    {
                        cc.count(SlubStat::FreeFastpath);
                        continue;
                    }
                } else {
                    let cur = cc.freelist.load(Relaxed);
                    if cur != 0 && cur.wrapping_sub(base) < cfg.slab_bytes() {
                        // SAFETY: our objects, chained above.
                        unsafe { set_freepointer(cfg, tail, cur) };
                        cc.freelist.store(head, Relaxed);
                        cc.next_tid();
                        cc.count(SlubStat::FreeFastpath);
                        continue;
                    }
                }
            }
            // SAFETY: a chain of our objects of this slab.
            unsafe { self.slab_free(cpu, s, slab, head, tail, cnt) };
        }
    }

    /// `kmem_cache_free_bulk` with the accounting hook run for each object first (see
    /// [`Slub::free_accounted`]).
    ///
    /// # Safety
    /// As [`Slub::free_bulk`].
    pub unsafe fn free_bulk_accounted(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        objs: &mut [*mut u8],
        acct: &impl Accounting,
    ) {
        for &p in objs.iter().filter(|p| !p.is_null()) {
            // SAFETY: as in `free_bulk`: the caller's objects keep their caches.
            if let ObjectLookup::Slab(found, slab) = unsafe { self.lookup(p) } {
                if ptr::eq(found, s) {
                    // SAFETY: the head page of a live slab of `s`, whose object at `p`
                    // this bulk free gives back (the caller's).
                    unsafe { accounting::slab_free_hook(acct, cpu, s, slab.as_ref(), p as usize) };
                }
            }
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.free_bulk(cpu, s, objs) }
    }
}
