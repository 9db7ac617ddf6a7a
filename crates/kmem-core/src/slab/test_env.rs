//! The slab layer for unit tests: a platform over a private anonymous mapping, a page
//! allocator, a list of caches, and caches set up as [`crate::Kmem`]'s boot sets up its
//! own — without the whole allocator, so that tests of this layer (and of the memory
//! controller, which builds on it) stay below the layers above them.

extern crate std;

use super::{CacheConfig, CacheList, KmemCache, KmemCacheCpu, SlabFlags, Slub};
use crate::page::{Config, PageAllocator, SECTION_SIZE};
use crate::platform::Platform;
use std::boxed::Box;
use std::string::String;
use std::sync::Mutex;

/// Call site the platform reports for slub_debug's tracks.
pub(crate) const CALL_SITE: usize = 0xc0de;

/// The platform clock (fixed: nothing here depends on time passing).
pub(crate) const NOW_NS: u64 = 1_000_000_000;

pub(crate) struct TestPlatform {
    pub(crate) log: Mutex<String>,
}

impl Platform for TestPlatform {
    unsafe fn section_online(&self, _addr: *mut u8, _len: usize, _nid: usize) -> bool {
        true
    }
    unsafe fn report_free(&self, addr: *mut u8, len: usize) {
        // SAFETY: the allocator reports ranges of its own span, which we mapped.
        let rc = unsafe { libc::madvise(addr.cast(), len, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0);
    }
    fn now_ns(&self) -> u64 {
        NOW_NS
    }
    fn log(&self, text: &str) {
        self.log.lock().unwrap().push_str(text);
    }
    fn stack_trace(&self, frames: &mut [usize]) {
        if let Some(f) = frames.first_mut() {
            *f = CALL_SITE;
        }
    }
    fn thread_and_pid(&self) -> (u32, u32) {
        (7, 42)
    }
}

/// A page allocator over one section and an (initially empty) list of caches.
pub(crate) struct SlabEnv {
    pub(crate) pages: &'static PageAllocator<TestPlatform>,
    pub(crate) caches: CacheList,
}

/// A fresh environment (leaked: the allocator hands out `'static` memory).
pub(crate) fn slab_env() -> &'static SlabEnv {
    let len = SECTION_SIZE;
    // SAFETY: an anonymous private mapping with no address hint; one section more than
    // asked, so that the base can be aligned up to a section boundary.
    let raw = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len + SECTION_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(raw, libc::MAP_FAILED);
    let base = ((raw as usize + SECTION_SIZE - 1) & !(SECTION_SIZE - 1)) as *mut u8;
    let pages: &'static PageAllocator<TestPlatform> =
        Box::leak(Box::new(PageAllocator::new(TestPlatform {
            log: Mutex::new(String::new()),
        })));
    // SAFETY: the span is ours alone and nobody else uses the allocator yet.
    unsafe { pages.init(base, len, Config::default()) }.unwrap();
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
        let Some(off) = self
            .pages
            .percpu()
            .alloc(core::mem::size_of::<KmemCacheCpu>(), 16)
        else {
            return false;
        };
        cfg.cpu_offset = off;
        // SAFETY: the caller's cache is not visible to anybody yet.
        unsafe { s.set_config(cfg) };
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
