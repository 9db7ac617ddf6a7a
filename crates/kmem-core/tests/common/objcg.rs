//! Helpers of the objcg-sheaf and trusted-slab tests: a CPU area of the test's own,
//! groups, charged allocations and frees, the objcg sheaves' holdings, and the
//! inline free of a thread charged to a group.

use super::TestPlatform;
use kmem_core::memcontrol::{MemCgroup, MemcgStat, ObjCgroup, OBJCG_SHEAF_SLOTS};
use kmem_core::percpu::InlineArea;
use kmem_core::{CpuArea, CpuRef, Gfp, Kmem};
use std::collections::HashSet;

pub type K = Kmem<TestPlatform>;

/// An area owned by the calling test until it puts it back.
pub fn own_area(k: &'static K) -> (&'static CpuArea, Option<CpuRef<'static>>) {
    let a = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: fresh from the pool: the calling test owns it until it puts it back, and
    // uses this one handle on it.
    (a, Some(unsafe { CpuRef::new(a) }))
}

/// The objcg sheaves of `a`: whose objects, how many.
pub fn held(k: &K, a: &CpuArea) -> (*const ObjCgroup, usize) {
    k.memcg().memcg_stock_of(a).unwrap().objcg_sheaves()
}

pub fn group(k: &'static K, name: &str) -> &'static MemCgroup {
    k.memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), name)
        .unwrap()
}

pub fn alloc(k: &K, cpu: Option<CpuRef<'_>>, g: &MemCgroup, size: usize) -> *mut u8 {
    k.memcg()
        .kmalloc_objcg(cpu, size, Gfp::KERNEL, g.objcg())
        .unwrap()
        .as_ptr()
}

/// A free by a context charged to `g` (its objects may wait in the objcg sheaves).
pub fn free(k: &K, cpu: Option<CpuRef<'_>>, g: &MemCgroup, p: *mut u8) -> bool {
    // SAFETY: the tests free their own objects (and one double free on purpose).
    unsafe { k.memcg().kfree_objcg(cpu, p, g.objcg()) }
}

pub fn slab_bytes(g: &MemCgroup) -> isize {
    g.stat(MemcgStat::SlabUnreclaimable)
}

/// Four sheaves' worth of `g`'s 32 B allocations are all distinct (no object of the
/// class is handed out twice); then freed.
pub fn handed_out_once(k: &K, cpu: Option<CpuRef<'_>>, g: &MemCgroup) {
    let many: Vec<_> = (0..4 * OBJCG_SHEAF_SLOTS)
        .map(|_| alloc(k, cpu, g, 32))
        .collect();
    assert_eq!(
        many.iter().copied().collect::<HashSet<_>>().len(),
        many.len()
    );
    for p in many {
        free(k, cpu, g, p);
    }
}

/// The base of the slab of `p`, a kmalloc-cg-32 object.
pub fn cg32_slab(k: &K, p: *mut u8) -> usize {
    let cfg = k
        .kmalloc_cache(32, Gfp::KERNEL | Gfp::ACCOUNT)
        .unwrap()
        .config();
    p as usize & !(cfg.slab_bytes() - 1)
}

/// The inline free of a thread whose fast word is `a`'s charged area (the heap's
/// thread running charged to `g`): `p` onto its class's inbox, or false.
pub fn inline_free(k: &K, a: &CpuArea, g: &MemCgroup, p: *mut u8) -> bool {
    // SAFETY: the test owns `a`, so its charged area is the test's too.
    let c = unsafe { CpuRef::new(a) };
    let w = k.memcg().charged_fast_word(c, g.objcg());
    assert_ne!(w, 0, "a charged area for g");
    // SAFETY: the charged area of an area the caller owns; `p` is the caller's.
    unsafe { k.kfree_fast(InlineArea::from_word(w), p) }
}
