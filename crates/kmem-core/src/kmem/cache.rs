//! Cache creation and destruction (`kmem_cache_create`, `kmem_cache_destroy`) and the
//! free entry points of caches and pages, with the memory controller's hooks.

use super::Kmem;
use crate::gfp::Gfp;
use crate::page::Page;
use crate::percpu::{CpuArea, CpuRef};
use crate::platform::Platform;
use crate::slab::{
    has_obj_exts, CacheConfig, CacheWithNodes, Ctor, DestroyError, KmemCache, NodeTable,
    ObjectLookup, SlabFlags, NEW_CACHE_NODES,
};
use crate::sync::Ordering::Relaxed;
use core::ptr::{self, NonNull};

impl<P: Platform> Kmem<P> {
    /// `kmem_cache_create`: a cache of `size`-byte objects aligned to `align` (0 = a
    /// word), with an optional constructor run once per object when its slab is made.
    /// `None` when the size or alignment cannot be served or memory runs out.
    pub fn kmem_cache_create(
        &'static self,
        cpu: Option<CpuRef<'_>>,
        name: &str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        ctor: Option<fn(*mut u8)>,
    ) -> Option<&'static KmemCache> {
        self.kmem_cache_create_ctor(cpu, name, size, align, flags, ctor.map(Ctor::plain))
    }

    /// [`Kmem::kmem_cache_create`] with a constructor that carries a word of context.
    pub fn kmem_cache_create_ctor(
        &'static self,
        cpu: Option<CpuRef<'_>>,
        name: &str,
        size: usize,
        align: usize,
        flags: SlabFlags,
        ctor: Option<Ctor>,
    ) -> Option<&'static KmemCache> {
        let nr_cpus = self.nr_cpus.load(Relaxed);
        let mut flags = flags | self.policy_flags(name);
        if ctor.is_some() {
            // As the kernel: zeroing would undo what the constructor set up, and
            // constructed objects keep their state while free.
            flags -= SlabFlags::INIT_ON_ALLOC | SlabFlags::INIT_ON_FREE;
        }
        let mut cfg = CacheConfig::calculate(name, size, align, flags, ctor, nr_cpus)?;
        self.harden(&mut cfg);
        self.choose_fast_path(&mut cfg);
        cfg.cpu_offset = self.pages.percpu().alloc(
            core::mem::size_of::<crate::slab::KmemCacheCpu>(),
            core::mem::align_of::<crate::slab::KmemCacheCpu>(),
        )?;
        let mem = self.slub().alloc(cpu, &self.kmem_cache, Gfp::KERNEL)?;
        let obj = mem.as_ptr() as *mut CacheWithNodes;
        // SAFETY: a fresh object of `kmem_cache`, sized and aligned for a
        // CacheWithNodes; nobody else can see it until it is on the list, and its
        // nodes live as long as the cache (they are the same object).
        let s = unsafe {
            let s = core::ptr::addr_of_mut!((*obj).cache);
            let nodes = core::ptr::addr_of_mut!((*obj).nodes);
            s.write(KmemCache::new());
            nodes.write(NEW_CACHE_NODES);
            (*s).set_config(cfg, NodeTable::of(nodes));
            s
        };
        // SAFETY: initialised above; objects of kmem_cache live until destroyed.
        let s: &'static KmemCache = unsafe { &*s };
        self.caches.add(s);
        Some(s)
    }

    /// `kmem_cache_destroy`: flushes every CPU's state of the cache, frees its empty
    /// slabs and the cache. A cache that still has objects is not destroyed: the
    /// kernel's "Objects remaining" report is printed and it stays usable. In a fork's
    /// child the parent's other threads' areas are orphaned and not flushed
    /// ([`Platform::area_orphaned`]): objects they held count as remaining.
    ///
    /// # Safety
    /// No other context uses `s` while this runs (the kernel's rule), and if it
    /// succeeds nobody uses `s` again.
    pub unsafe fn kmem_cache_destroy(
        &'static self,
        cpu: Option<CpuRef<'_>>,
        s: &'static KmemCache,
    ) -> Result<(), DestroyError> {
        let own = ptr::eq(s, &self.kmem_cache) || self.kmalloc.contains(s);
        if own {
            return Err(DestroyError::NotDestroyable);
        }
        let slub = self.slub();
        // Off the list first: walkers of the list (the barns' decay, `shrink_all`, the
        // statistics) leave it alone from here on, and one already working on it
        // finishes before `remove` gets the list lock. Put back if it survives.
        self.caches.remove(s);
        // Sheaves of `s` the barns' decay took may wait to be flushed: flush them
        // (`slab/barn_drain.rs`). A reclaim of kept slabs, or a flush of such sheaves,
        // that found `s` on the list before may still hold some of its slabs or
        // sheaves, counted: let it finish first.
        slub.drain_idle_sheaves(cpu);
        self.caches.wait_for_reclaims();
        let platform = self.pages.platform();
        for area in self
            .pages
            .cpu_areas()
            .iter()
            .filter(|a| !platform.area_orphaned(a))
        {
            // SAFETY: nobody uses `s` meanwhile (caller), so its per-CPU state in any
            // area is ours to flush: the owners do not touch it. (An orphaned area's
            // owner was left behind by a fork, maybe half-way through an update: its
            // state is not flushed, and what it holds keeps `s` from going.)
            let c = unsafe { CpuRef::new(area) };
            if cpu.is_some_and(|own| ptr::eq(own.area(), area)) {
                slub.flush_cpu_cache(c, s);
            } else {
                // Another owner's: it goes on with its other caches meanwhile.
                slub.flush_foreign_cpu_cache(c, s);
            }
        }
        slub.shrink(cpu, s);
        let mut live = 0usize;
        let mut slabs = 0usize;
        for nid in 0..self.pages.nr_nodes() {
            slabs += s.nr_slabs(nid);
            live += s.nr_slabs(nid) * s.config().objects - s.count_partial_free(nid);
        }
        if slabs > 0 {
            self.caches.add(s);
            slub.report_objects_remaining(s, live, slabs);
            return Err(DestroyError::ObjectsRemaining(live));
        }
        s.deactivate();
        // A charge stock that still counts its objects frees it when it lets go.
        if s.give_up() {
            // SAFETY: `s` is an object of kmem_cache that nobody uses any more
            // (caller), and no stock names it.
            unsafe { slub.free(cpu, &self.kmem_cache, NonNull::from(s).cast::<u8>()) };
        }
        Ok(())
    }

    /// `kmem_cache_free` with the memcg hook: uncharges an accounted object, then
    /// frees it as [`crate::slab::Slub::free`] (which reports pointers that are not
    /// objects of `s`).
    ///
    /// # Safety
    /// As [`crate::slab::Slub::free`].
    #[inline]
    pub unsafe fn kmem_cache_free(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        obj: NonNull<u8>,
    ) -> bool {
        // SAFETY: forwarded from the caller.
        unsafe { self.slub().free_accounted(cpu, s, obj, self) }
    }

    /// Per-CPU mode, without the area's lock: `kmem_cache_free`'s fast path (see
    /// [`Kmem::kfree_lockless`]). `None`: take the area's lock and call
    /// [`Kmem::kmem_cache_free`].
    ///
    /// # Safety
    /// As [`crate::slab::Slub::free`].
    #[inline]
    pub unsafe fn kmem_cache_free_lockless(
        &self,
        area: &CpuArea,
        s: &KmemCache,
        obj: NonNull<u8>,
    ) -> Option<bool> {
        let slub = self.slub();
        // SAFETY: the caller frees its object of `s`: the cache found lives.
        match unsafe { slub.lookup(obj.as_ptr()) } {
            ObjectLookup::Slab(found, slab)
                // SAFETY: `lookup` found `slab`, a slab head.
                if ptr::eq(found, s) && !unsafe { has_obj_exts(slab) } =>
            {
                // SAFETY: a valid object of `s`, given up by the caller.
                unsafe { slub.free_lockless(area, s, slab, obj.as_ptr() as usize) }
            }
            _ => None,
        }
    }

    /// `kmem_cache_free_bulk` with the memcg hook for each object.
    ///
    /// # Safety
    /// As [`crate::slab::Slub::free_bulk`].
    pub unsafe fn kmem_cache_free_bulk(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        objs: &mut [*mut u8],
    ) {
        // SAFETY: forwarded from the caller.
        unsafe { self.slub().free_bulk_accounted(cpu, s, objs, self) }
    }

    /// `__free_pages` with the memcg hook: an accounted block is uncharged first.
    ///
    /// # Safety
    /// As [`PageAllocator::free_pages`](crate::PageAllocator::free_pages).
    pub unsafe fn free_pages(&self, cpu: Option<CpuRef<'_>>, page: NonNull<Page>, order: usize) {
        // SAFETY: a block of 2^`order` pages the caller frees (its contract).
        unsafe { crate::slab::accounting::page_free_hook(self, cpu, page, order) };
        // SAFETY: forwarded from the caller.
        unsafe { self.pages.free_pages(cpu, page, order) }
    }
}
