//! A memory controller for unit tests: the slab layer's test environment with the
//! kmalloc caches booted and the controller initialised, as [`crate::Kmem`]'s init does
//! (built from the layers below, so these tests do not reach above `memcontrol`).

extern crate std;

use super::{Memcg, MemcgState};
use crate::kmalloc::{Kmalloc, KmallocCaches};
use crate::percpu::CpuRef;
use crate::slab::test_env::{slab_env, SlabEnv, TestPlatform};
use crate::slab::{KmemCache, SlabFlags};
use std::boxed::Box;

pub(super) struct MemcgEnv {
    pub(super) slab: &'static SlabEnv,
    kmalloc: KmallocCaches,
    state: MemcgState,
    boot: KmemCache,
}

/// A fresh controller (leaked, as the allocator under it).
pub(super) fn memcg_env() -> &'static MemcgEnv {
    let slab = slab_env();
    let env: &'static MemcgEnv = Box::leak(Box::new(MemcgEnv {
        slab,
        kmalloc: KmallocCaches::new(),
        state: MemcgState::new(),
        boot: KmemCache::new(),
    }));
    let size = core::mem::size_of::<crate::slab::CacheWithNodes>();
    assert!(slab.setup(&env.boot, "kmem_cache", size, 64, SlabFlags::HWCACHE_ALIGN));
    env.kmalloc
        .boot(|s, _nodes, name, size, align, flags| {
            slab.setup(s, name, size, align, flags)
                .then_some(())
                .ok_or(())
        })
        .unwrap();
    assert!(env.memcg().init());
    env
}

impl MemcgEnv {
    pub(super) fn memcg(&self) -> Memcg<'_, TestPlatform> {
        let km = Kmalloc::new(self.slab.slub(), &self.kmalloc);
        Memcg::new(&self.state, km, &self.boot)
    }

    /// A CPU area for the calling test, kept for good.
    pub(super) fn cpu(&self) -> CpuRef<'static> {
        let area = self.slab.pages.cpu_area_get(0).unwrap();
        // SAFETY: never put back; only this test uses it.
        unsafe { CpuRef::new(area) }
    }
}
