//! The memory controller's public entry points on the whole allocator (see
//! [`crate::memcontrol`] for the mechanism).

use super::Kmem;
use crate::gfp::Gfp;
use crate::memcontrol::{MemCgroup, MemcgError, ObjCgroup};
use crate::page::Page;
use crate::percpu::CpuRef;
use crate::platform::Platform;
use crate::slab::KmemCache;
use core::fmt;
use core::ptr::NonNull;

impl<P: Platform> Kmem<P> {
    /// The root group: every charge reaches it; it has no limit unless one is set.
    pub fn root_mem_cgroup(&self) -> &MemCgroup {
        self.memcg().root_mem_cgroup()
    }

    /// Groups created and not yet freed (online and zombies), not counting the root.
    pub fn nr_mem_cgroups(&self) -> usize {
        self.memcg().nr_mem_cgroups()
    }

    /// Calls `f` on the root and every online group (newest first), under the
    /// groups' lock: `f` may allocate but must not create or remove groups.
    pub fn for_each_mem_cgroup(&self, f: impl FnMut(&MemCgroup)) {
        self.memcg().for_each_mem_cgroup(f)
    }

    /// Removed groups still kept for their charged objects or references.
    pub fn nr_zombie_mem_cgroups(&self) -> usize {
        self.memcg().nr_zombie_mem_cgroups()
    }

    /// Turns the per-CPU charge stock on or off (see
    /// [`crate::memcontrol::Memcg::set_memcg_stock`]).
    pub fn set_memcg_stock(&self, cpu: Option<CpuRef<'_>>, enabled: bool) {
        self.memcg().set_memcg_stock(cpu, enabled)
    }

    /// `mem_cgroup_css_alloc`: a new group under `parent` (see
    /// [`crate::memcontrol::Memcg::mem_cgroup_create`]).
    pub fn mem_cgroup_create(
        &self,
        cpu: Option<CpuRef<'_>>,
        parent: &MemCgroup,
        name: &str,
    ) -> Result<&MemCgroup, MemcgError> {
        self.memcg().mem_cgroup_create(cpu, parent, name)
    }

    /// `rmdir` of a group (see [`crate::memcontrol::Memcg::mem_cgroup_remove`]).
    ///
    /// # Safety
    /// As [`crate::memcontrol::Memcg::mem_cgroup_remove`].
    pub unsafe fn mem_cgroup_remove(
        &self,
        cpu: Option<CpuRef<'_>>,
        cg: &MemCgroup,
    ) -> Result<(), MemcgError> {
        // SAFETY: forwarded from the caller.
        unsafe { self.memcg().mem_cgroup_remove(cpu, cg) }
    }

    /// Drains the caller's charge stock: pages and bytes back to their groups,
    /// statistics flushed.
    pub fn memcg_drain_stock(&self, c: CpuRef<'_>) {
        self.memcg().memcg_drain_stock(c)
    }

    /// `kmem_cache_alloc` charged to `objcg` (see
    /// [`crate::memcontrol::Memcg::kmem_cache_alloc_objcg`]).
    pub fn kmem_cache_alloc_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        s: &KmemCache,
        gfp: Gfp,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<u8>> {
        self.memcg().kmem_cache_alloc_objcg(cpu, s, gfp, objcg)
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
        self.memcg().kmalloc_objcg(cpu, size, gfp, objcg)
    }

    /// `alloc_pages` with `__GFP_ACCOUNT`: 2^`order` pages charged to `objcg`. Free
    /// them with [`Kmem::free_pages`] (which uncharges).
    pub fn alloc_pages_objcg(
        &self,
        cpu: Option<CpuRef<'_>>,
        gfp: Gfp,
        order: usize,
        objcg: &ObjCgroup,
    ) -> Option<NonNull<Page>> {
        self.memcg().alloc_pages_objcg(cpu, gfp, order, objcg)
    }

    /// The objcg an accounted page block is charged to.
    pub fn page_objcg(&self, head: NonNull<Page>) -> Option<&ObjCgroup> {
        self.memcg().page_objcg(head)
    }

    /// Charges `bytes` of memory kept outside the page allocator (direct mappings)
    /// to `objcg`, in whole pages; false if over the limit.
    pub fn memcg_charge_external(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        bytes: usize,
    ) -> bool {
        self.memcg().memcg_charge_external(cpu, objcg, bytes)
    }

    /// Undoes [`Kmem::memcg_charge_external`].
    pub fn memcg_uncharge_external(
        &self,
        cpu: Option<CpuRef<'_>>,
        objcg: &ObjCgroup,
        bytes: usize,
    ) {
        self.memcg().memcg_uncharge_external(cpu, objcg, bytes)
    }

    /// The group's files in cgroup v2's formats (see
    /// [`crate::memcontrol::write_memcg_files`]).
    pub fn memcg_report(&self, w: &mut dyn fmt::Write, cg: &MemCgroup) -> fmt::Result {
        self.memcg().memcg_report(w, cg)
    }
}
