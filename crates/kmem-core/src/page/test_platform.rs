//! A platform for the crate's unit tests: a private anonymous mapping as the span, a
//! clock the test moves by hand, a log kept in memory, and a fixed call site and thread
//! for slub_debug's tracks. (The integration tests in tests/common have the same for
//! the whole crate.)

extern crate std;

use super::{Config, PageAllocator, SECTION_SIZE};
use crate::platform::Platform;
use crate::sync::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::boxed::Box;
use std::string::String;
use std::sync::Mutex;

/// The call site the platform reports for slub_debug's tracks.
pub(crate) const CALL_SITE: usize = 0xc0de;

/// The platform clock when a test starts.
pub(crate) const NOW_NS: u64 = 1_000_000_000;

pub(crate) struct TestPlatform {
    pub(crate) clock: AtomicU64,
    pub(crate) reported_bytes: AtomicUsize,
    pub(crate) log: Mutex<String>,
}

impl TestPlatform {
    pub(crate) fn advance(&self, ns: u64) {
        self.clock.fetch_add(ns, Relaxed);
    }
    pub(crate) fn take_log(&self) -> String {
        core::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl Platform for TestPlatform {
    unsafe fn reserve_tag_table(&self, len: usize) -> *mut u8 {
        // SAFETY: an anonymous private mapping (zero-filled, readable and writable
        // from the start) with no address hint affects no existing memory.
        let raw = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(raw, libc::MAP_FAILED, "tag table");
        raw.cast()
    }
    unsafe fn section_online(&self, _addr: *mut u8, _len: usize, _nid: usize) -> bool {
        true
    }
    unsafe fn report_free(&self, addr: *mut u8, len: usize) {
        // SAFETY: the allocator reports ranges of its own span, which we mapped.
        let rc = unsafe { libc::madvise(addr.cast(), len, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0);
        self.reported_bytes.fetch_add(len, Relaxed);
    }
    fn now_ns(&self) -> u64 {
        self.clock.load(Relaxed)
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

/// A fresh allocator over a private span of `sections` sections (leaked, as the
/// allocator hands out `'static` memory).
pub(crate) fn allocator(sections: usize, config: Config) -> &'static PageAllocator<TestPlatform> {
    allocator_len(sections * SECTION_SIZE, config).unwrap()
}

/// A fresh allocator over a private span of `len` bytes at a section-aligned base, or
/// what `init` said about it.
pub(crate) fn allocator_len(
    len: usize,
    config: Config,
) -> Result<&'static PageAllocator<TestPlatform>, super::InitError> {
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
    let pa: &'static PageAllocator<TestPlatform> =
        Box::leak(Box::new(PageAllocator::new(TestPlatform {
            clock: AtomicU64::new(NOW_NS),
            reported_bytes: AtomicUsize::new(0),
            log: Mutex::new(String::new()),
        })));
    // SAFETY: the span is ours alone and nobody else uses the allocator yet.
    unsafe { pa.init(base, len, config) }?;
    Ok(pa)
}
