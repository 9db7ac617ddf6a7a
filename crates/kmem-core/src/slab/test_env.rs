//! The slab layer for unit tests: the page layer's test platform and allocator, a list
//! of caches, and caches set up as [`crate::Kmem`]'s boot sets up its own — without
//! the whole allocator, so that tests of this layer (and of the memory controller,
//! which builds on it) stay below the layers above them.

extern crate std;

use super::{
    CacheConfig, CacheList, KmemCache, KmemCacheCpu, NodeTable, SlabFlags, Slub, NEW_CACHE_NODES,
};
use crate::page::test_platform::allocator;
use crate::page::{Config, PageAllocator};
use std::boxed::Box;
use std::string::String;

pub(crate) use crate::page::test_platform::{TestPlatform, CALL_SITE, NOW_NS};

/// A page allocator over one section and an (initially empty) list of caches.
pub(crate) struct SlabEnv {
    pub(crate) pages: &'static PageAllocator<TestPlatform>,
    pub(crate) caches: CacheList,
}

/// A fresh environment (leaked: the allocator hands out `'static` memory).
pub(crate) fn slab_env() -> &'static SlabEnv {
    let pages = allocator(1, Config::default());
    Box::leak(Box::new(SlabEnv {
        pages,
        caches: CacheList::new(),
    }))
}

impl SlabEnv {
    pub(crate) fn slub(&self) -> Slub<'_, TestPlatform> {
        Slub::new(self.pages, &self.caches)
    }

    /// Sets up `s` (not yet visible to anybody) as `Kmem`'s boot does, without
    /// freelist hardening; false if the layout or the per-CPU space cannot be had.
    pub(crate) fn setup(
        &self,
        s: &KmemCache,
        name: &str,
        size: usize,
        align: usize,
        flags: SlabFlags,
    ) -> bool {
        let Some(mut cfg) = CacheConfig::calculate(name, size, align, flags, None, 2) else {
            return false;
        };
        let Some(off) = self.pages.percpu().alloc(
            core::mem::size_of::<KmemCacheCpu>(),
            core::mem::align_of::<KmemCacheCpu>(),
        ) else {
            return false;
        };
        cfg.cpu_offset = off;
        let nodes = NodeTable::of(Box::leak(Box::new(NEW_CACHE_NODES)));
        // SAFETY: the caller's cache is not visible to anybody yet; its nodes are
        // leaked, as the test allocators are.
        unsafe { s.set_config(cfg, nodes) };
        self.caches.add(s);
        true
    }

    /// A new cache (leaked).
    pub(crate) fn cache(
        &self,
        name: &str,
        size: usize,
        align: usize,
        flags: SlabFlags,
    ) -> &'static KmemCache {
        let s: &'static KmemCache = Box::leak(Box::new(KmemCache::new()));
        assert!(self.setup(s, name, size, align, flags), "cache {name}");
        s
    }

    /// What the platform logged so far (emptied).
    pub(crate) fn take_log(&self) -> String {
        core::mem::take(&mut *self.pages.platform().log.lock().unwrap())
    }
}
