//! Accounting of slab objects and page blocks: the objcg vector of a slab
//! (`slab->obj_exts`), the post-allocation and free hooks (the slab layer's
//! [`crate::slab::Accounting`]), and the accounted allocation entry points.

use super::*;
use crate::gfp::Gfp;
use crate::page::{Page, PAGE_SHIFT, PAGE_SIZE};
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::slab::{Accounting, KmemCache, NoAccounting, Slab};
use crate::sync::{
    AtomicPtr, AtomicU32, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use core::ptr::{self, NonNull};

impl<'a, P: Platform> Memcg<'a, P> {
    // -------------------------------------------------------------------------
    // Slab hooks.

    /// `memcg_slab_post_alloc_hook`: records `objcg` for `obj` (charged already) in
    /// its slab's vector and counts it. False if the vector could not be allocated
    /// (the caller uncharges and frees the object).
    pub(super) fn memcg_slab_post_alloc_hook(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        obj: NonNull<u8>,
        objcg: &ObjCgroup,
    ) -> bool {
        let cfg = s.config();
        let base = obj.as_ptr() as usize & !(cfg.slab_bytes() - 1);
        // SAFETY: the head page of the live slab holding the object we just got (its
        // section is online while the slab lives).
        let h = unsafe { &*self.km.pages().virt_to_page_raw(base as *const u8) };
        let mut data = memcg_data(h);
        if data & MEMCG_DATA_OBJEXTS == 0 {
            match self.alloc_slab_obj_exts(cpu, s, h) {
                Some(d) => data = d,
                None => return false,
            }
        }
        let vec = (data & !MEMCG_DATA_MASK) as *const AtomicPtr<ObjCgroup>;
        let idx = cfg.obj_to_index(obj.as_ptr() as usize - base);
        note_sole_objcg(h.memcg_sole(), objcg.id);
        let objcg = objcg as *const ObjCgroup as *mut ObjCgroup;
        // SAFETY: `idx` < objects for an object of the slab. The slot is the
        // object's: only its owner (us) writes it.
        unsafe { &*vec.add(idx) }.store(objcg, Relaxed);
        true
    }

    /// `alloc_slab_obj_exts`: the slab's objcg vector, from the plain kmalloc caches:
    /// a slot per object. (The slab's sole objcg is on its head page, reset when the
    /// slab is set up or serves again empty: [`note_sole_objcg`].)
    #[cold]
    #[inline(never)]
    pub(super) fn alloc_slab_obj_exts(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        h: &Page,
    ) -> Option<usize> {
        let n = s.config().objects;
        let v = self
            .km
            .kcalloc(cpu, n, core::mem::size_of::<usize>(), Gfp::KERNEL)?;
        let new = v.as_ptr() as usize | MEMCG_DATA_OBJEXTS;
        // Frees leave the inline path before the vector is published: whoever sees
        // the vector (and charges an object of the slab) sees this first (the publish
        // below is a release), and so does whoever frees that object.
        Slab::of(h).stop_inline_frees();
        // Another context may have set one (a slab can change hands): keep theirs.
        let data = match h.private.compare_exchange(0, new, AcqRel, Acquire) {
            Ok(_) => new,
            Err(cur) if cur & MEMCG_DATA_OBJEXTS != 0 => {
                // SAFETY: our unused vector.
                unsafe { self.km.kfree(cpu, v.as_ptr(), &NoAccounting) };
                cur
            }
            Err(_) => {
                // A stale word (left from the page allocator): replace it.
                h.private.store(new, Release);
                new
            }
        };
        Some(data)
    }

    /// `memcg_slab_free_hook`: the object's objcg, if any, is uncharged. Called before
    /// the object is freed (after that another context may reuse its slot). Inline:
    /// for a slab without objcg vector it is one load and a branch.
    #[inline(always)]
    pub(crate) fn memcg_slab_free_hook(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        head: &Page,
        obj: usize,
    ) {
        let data = memcg_data(head);
        if data & MEMCG_DATA_OBJEXTS == 0 {
            return;
        }
        self.memcg_slab_free_hook_exts(cpu, s, data, obj);
    }

    /// The free hook on a slab with an objcg vector (`data`): uncharges the object.
    #[inline]
    pub(super) fn memcg_slab_free_hook_exts(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        data: usize,
        obj: usize,
    ) {
        let cfg = s.config();
        let vec = (data & !MEMCG_DATA_MASK) as *const AtomicPtr<ObjCgroup>;
        let idx = cfg.obj_to_index(obj & (cfg.slab_bytes() - 1));
        if idx >= cfg.objects {
            return;
        }
        // SAFETY: `idx` < objects, the vector's length; the slot belongs to the object
        // the caller frees.
        let slot = unsafe { &*vec.add(idx) };
        let p = slot.load(Relaxed);
        // SAFETY: a non-null slot names the objcg the object is charged to, kept alive
        // by that charge.
        let Some(objcg) = (unsafe { p.as_ref() }) else {
            return;
        };
        slot.store(ptr::null_mut(), Relaxed);
        self.refill_obj_stock(cpu, objcg, s, cfg.size);
    }

    // -------------------------------------------------------------------------
    // Accounted allocations.

    /// `kmem_cache_alloc` charged to `objcg`: `None` when memory runs out or the
    /// group (or an ancestor) is at `memory.max`. The boot caches and plain kmalloc
    /// caches are never accounted (objcg vectors come from them): objects of those
    /// are allocated uncharged.
    pub fn kmem_cache_alloc_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        if self.is_unaccountable(s) {
            return self.km.slub().alloc(cpu, s, gfp);
        }
        self.slab_alloc_charged(cpu, s, gfp, objcg)
    }

    /// Charge, allocate, record the objcg (`memcg_slab_pre/post_alloc_hook`).
    #[inline]
    pub(super) fn slab_alloc_charged(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        let size = s.config().size;
        if !self.obj_cgroup_charge(cpu, objcg, s, size) {
            return None;
        }
        // The sheaf pop first (as an unaccounted allocation would), else the regular
        // path (refill, zeroing, reports).
        let obj = cpu
            .and_then(|c| self.km.slub().alloc_fast_charged(c, s, gfp))
            .or_else(|| self.km.slub().alloc_charged(cpu, s, gfp));
        let Some(obj) = obj else {
            self.refill_obj_stock(cpu, objcg, s, size);
            return None;
        };
        if !self.memcg_slab_post_alloc_hook(cpu, s, obj, objcg) {
            self.refill_obj_stock(cpu, objcg, s, size);
            // SAFETY: the object we just allocated.
            unsafe { self.km.slub().free(cpu, s, obj) };
            return None;
        }
        Some(obj)
    }

    /// Whether objects of `s` are never charged: the plain kmalloc caches and the
    /// `kmem_cache` cache (their objects back the accounting itself).
    pub(super) fn is_unaccountable(&self, s: &KmemCache) -> bool {
        self.km.caches().is_plain(s) || ptr::eq(s, self.boot)
    }

    /// `kmalloc` charged to `objcg` (from the `kmalloc-cg-*` caches, or whole pages
    /// for large sizes).
    #[inline]
    pub fn kmalloc_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        size: usize,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        match crate::kmalloc::kmalloc_index(size) {
            // The kmalloc-cg caches are always accountable.
            Some(i) => {
                if let (Some(c), Some(st)) = (cpu, self.stock(cpu)) {
                    if let Some(p) = self.objcg_sheaf_alloc(c, st, i, gfp, objcg) {
                        return Some(p);
                    }
                }
                self.slab_alloc_charged(cpu, &self.km.caches().set(1)[i], gfp, objcg)
            }
            None => self.kmalloc_large_objcg(cpu, size, gfp, objcg),
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn kmalloc_large_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        size: usize,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        if size > crate::kmalloc::KMALLOC_MAX_SIZE {
            return None;
        }
        let order = crate::page::get_order(size);
        // A page block's growth runs the barns' decay, as an uncharged one's does.
        self.km.slub().note_block_growth(cpu, order);
        let page = self.alloc_pages_objcg(cpu, gfp | Gfp::COMP, order, objcg)?;
        Some(self.km.pages().page_address(page))
    }

    /// `alloc_pages` with `__GFP_ACCOUNT`: 2^`order` pages charged to `objcg`. Free
    /// them with [`crate::Kmem::free_pages`] (which uncharges).
    pub fn alloc_pages_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        gfp: Gfp,
        order: usize,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<Page>> {
        let nr = 1usize << order;
        if !self.obj_cgroup_charge_pages(cpu, objcg, nr) {
            return None;
        }
        let Some(page) = self.km.pages().alloc_pages(cpu, gfp, order) else {
            self.obj_cgroup_uncharge_pages(cpu, objcg, nr);
            return None;
        };
        // SAFETY: the head of the block just allocated: its descriptor is ours.
        let h = unsafe { page.as_ref() };
        h.private.store(
            objcg as *const ObjCgroup as usize | MEMCG_DATA_KMEM,
            Release,
        );
        objcg
            .memcg()
            .add_stat(MemcgStat::KmemPages, (nr << PAGE_SHIFT) as isize);
        Some(page)
    }

    /// The objcg an accounted page block is charged to.
    ///
    /// # Safety
    /// `head` heads a live page block of this allocator (its `private` word is then
    /// the block's charge, or none).
    pub unsafe fn page_objcg(&self, head: NonNull<Page>) -> Option<&'a ObjCgroup> {
        // SAFETY: a valid descriptor (caller).
        let data = memcg_data(unsafe { head.as_ref() });
        if data & MEMCG_DATA_KMEM == 0 {
            return None;
        }
        // SAFETY: the word holds the objcg charged for the block, kept alive by it.
        Some(unsafe { &*((data & !MEMCG_DATA_MASK) as *const ObjCgroup) })
    }

    /// Uncharges an accounted page block of 2^`order` pages (before it is freed).
    pub(crate) fn memcg_kmem_uncharge_page(
        &self,
        cpu: Option<CpuRef<'_>>,
        head: NonNull<Page>,
        order: usize,
    ) {
        // SAFETY: the block being freed (the caller's free hook).
        let Some(objcg) = (unsafe { self.page_objcg(head) }) else {
            return;
        };
        // SAFETY: as in `page_objcg`.
        unsafe { head.as_ref() }.private.store(0, Release);
        let nr = 1usize << order;
        objcg
            .memcg()
            .add_stat(MemcgStat::KmemPages, -((nr << PAGE_SHIFT) as isize));
        self.obj_cgroup_uncharge_pages(cpu, objcg, nr);
    }

    /// Charges `bytes` of memory kept outside the page allocator (direct mappings)
    /// to `objcg`, in whole pages; false if over the limit.
    pub fn memcg_charge_external(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        bytes: usize,
    ) -> bool {
        let nr = bytes.div_ceil(PAGE_SIZE);
        if !self.obj_cgroup_charge_pages(cpu, objcg, nr) {
            return false;
        }
        objcg
            .memcg()
            .add_stat(MemcgStat::KmemPages, (nr << PAGE_SHIFT) as isize);
        true
    }

    /// Undoes [`Memcg::memcg_charge_external`].
    ///
    /// # Safety
    /// `bytes` were charged to `objcg` by [`Memcg::memcg_charge_external`] and are
    /// not uncharged yet (see [`Memcg::obj_cgroup_uncharge`]).
    pub unsafe fn memcg_uncharge_external(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        bytes: usize,
    ) {
        let nr = bytes.div_ceil(PAGE_SIZE);
        objcg
            .memcg()
            .add_stat(MemcgStat::KmemPages, -((nr << PAGE_SHIFT) as isize));
        self.obj_cgroup_uncharge_pages(cpu, objcg, nr);
    }
}

/// The slab layer's free hooks, for objects and page blocks charged through this
/// controller.
impl<P: Platform> Accounting for Memcg<'_, P> {
    #[inline]
    unsafe fn slab_free_hook(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        slab: &Page,
        obj: usize,
    ) {
        self.memcg_slab_free_hook(cpu, s, slab, obj);
    }

    #[inline]
    unsafe fn page_free_hook(&self, cpu: Option<CpuRef<'_>>, head: NonNull<Page>, order: usize) {
        self.memcg_kmem_uncharge_page(cpu, head, order);
    }
}

/// Records in `sole`, a slab's sole-objcg word (`Page::memcg_sole` on its head page),
/// that an object of the slab is being charged to the objcg numbered `id`
/// (`ObjCgroup::id`). The word only moves one way while an object of the slab is in
/// use: from
/// [`SOLE_NONE`] (nothing charged yet) to the first objcg's id, and from there to
/// [`SOLE_MIXED`] at the first charge to another; so a reader that finds an objcg's
/// id there knows that every object of the slab charged before the read was charged
/// to that objcg. No write when the word already says so. (`Slab::init` resets it
/// before a new slab's first object is handed out, `Slab::start_charges_over`
/// before an empty slab's objects are handed out again: never while one is in use.)
#[inline(always)]
fn note_sole_objcg(sole: &AtomicU32, id: u32) {
    let cur = sole.load(Relaxed);
    if cur == id || cur == SOLE_MIXED {
        return;
    }
    if cur == SOLE_NONE {
        match sole.compare_exchange(SOLE_NONE, id, Relaxed, Relaxed) {
            Ok(_) => return,
            Err(now) if now == id || now == SOLE_MIXED => return,
            Err(_) => {}
        }
    }
    sole.store(SOLE_MIXED, Relaxed);
}
