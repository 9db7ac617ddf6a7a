//! A platform for tests: a private mmap'd span, a clock the test moves by hand, and a
//! log captured in memory.
#![allow(dead_code)]

pub mod objcg;

use kmem_core::page::SECTION_SIZE;
use kmem_core::percpu::CpuArea;
use kmem_core::slab::SlubStat;
use kmem_core::{Config, CpuRef, Kmem, KmemCache, PageAllocator, Platform};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

pub struct TestPlatform {
    pub clock: AtomicU64,
    pub reported_bytes: AtomicUsize,
    pub onlined: AtomicUsize,
    /// Calls of [`Platform::housekeeping`].
    pub housekeeping: AtomicUsize,
    pub log: Mutex<String>,
    pub echo: bool,
    /// slub_debug flags by cache name ([`Platform::slab_flags`]).
    pub policy: Option<fn(&str) -> kmem_core::SlabFlags>,
    /// Give no page-tag table ([`Platform::reserve_tag_table`]'s default).
    pub no_tag_table: bool,
}

impl TestPlatform {
    pub fn new() -> Self {
        Self {
            clock: AtomicU64::new(1_000_000_000),
            reported_bytes: AtomicUsize::new(0),
            onlined: AtomicUsize::new(0),
            housekeeping: AtomicUsize::new(0),
            log: Mutex::new(String::new()),
            echo: std::env::var_os("KMEM_TEST_ECHO").is_some(),
            policy: None,
            no_tag_table: false,
        }
    }
    pub fn advance(&self, ns: u64) {
        self.clock.fetch_add(ns, Ordering::Relaxed);
    }
    pub fn take_log(&self) -> String {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

impl Platform for TestPlatform {
    unsafe fn reserve_tag_table(&self, len: usize) -> *mut u8 {
        if self.no_tag_table {
            return core::ptr::null_mut();
        }
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
        self.onlined.fetch_add(1, Ordering::Relaxed);
        true
    }
    unsafe fn report_free(&self, addr: *mut u8, len: usize) {
        // SAFETY: the allocator reports ranges of its own span, which we mapped.
        let rc = unsafe { libc::madvise(addr.cast(), len, libc::MADV_DONTNEED) };
        assert_eq!(rc, 0);
        self.reported_bytes.fetch_add(len, Ordering::Relaxed);
    }
    fn now_ns(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }
    fn housekeeping(&self) {
        self.housekeeping.fetch_add(1, Ordering::Relaxed);
    }
    fn stack_trace(&self, frames: &mut [usize]) {
        // A recognisable "call site" for the U tests.
        if let Some(f) = frames.first_mut() {
            *f = 0xc0de;
        }
    }
    fn thread_and_pid(&self) -> (u32, u32) {
        (7, 42)
    }
    fn slab_flags(&self, cache: &str) -> kmem_core::SlabFlags {
        self.policy
            .map_or(kmem_core::SlabFlags::empty(), |p| p(cache))
    }
    fn log(&self, text: &str) {
        if self.echo {
            eprint!("{text}");
        }
        self.log.lock().unwrap().push_str(text);
    }
}

/// A fresh allocator over a private span of `sections` sections (leaked: tests hand
/// out `'static` references, as real users do).
pub fn allocator(sections: usize, config: Config) -> &'static PageAllocator<TestPlatform> {
    let (base, len) = span(sections);
    let pa: &'static PageAllocator<TestPlatform> =
        Box::leak(Box::new(PageAllocator::new(TestPlatform::new())));
    // SAFETY: the span is ours alone and nobody else uses the allocator yet.
    unsafe { pa.init(base, len, config) }.unwrap();
    pa
}

/// A private span of `sections` sections, aligned to the section size.
pub fn span(sections: usize) -> (*mut u8, usize) {
    let len = sections * SECTION_SIZE;
    // Reserve len + SECTION_SIZE and align the base up to a section boundary.
    // SAFETY: an anonymous private mapping with no address hint.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + SECTION_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(raw, libc::MAP_FAILED);
    let base = ((raw as usize + SECTION_SIZE - 1) & !(SECTION_SIZE - 1)) as *mut u8;
    (base, len)
}

/// A fresh whole allocator (pages + slab) over a private span.
pub fn kmem(sections: usize, config: Config) -> &'static Kmem<TestPlatform> {
    kmem_with(sections, config, None)
}

/// As [`kmem`], in the slab layer's CPU-slab design (`KMEM_SLUB=cpu-slab`), for tests
/// of that design's own behaviour (CPU slabs, their statistics and freelist order).
#[allow(dead_code)]
pub fn kmem_cpu_slab(sections: usize, config: Config) -> &'static Kmem<TestPlatform> {
    kmem_design(sections, config, None, kmem_core::slab::SlubDesign::CpuSlab)
}

/// As [`kmem`], with a debug policy (slub_debug flags by cache name) set first.
pub fn kmem_with(
    sections: usize,
    config: Config,
    policy: Option<fn(&str) -> kmem_core::SlabFlags>,
) -> &'static Kmem<TestPlatform> {
    kmem_design(
        sections,
        config,
        policy,
        kmem_core::slab::SlubDesign::Sheaves,
    )
}

/// A fresh allocator in the given per-CPU design, with an optional debug policy.
pub fn kmem_design(
    sections: usize,
    config: Config,
    policy: Option<fn(&str) -> kmem_core::SlabFlags>,
    design: kmem_core::slab::SlubDesign,
) -> &'static Kmem<TestPlatform> {
    let (base, len) = span(sections);
    let platform = TestPlatform {
        policy,
        ..TestPlatform::new()
    };
    let k: &'static Kmem<TestPlatform> = Box::leak(Box::new(Kmem::new(platform)));
    k.set_slub_design(design);
    // SAFETY: the span is ours alone and nobody else uses the allocator yet.
    unsafe { k.init(base, len, config, 2) }.unwrap();
    k
}

/// A fresh allocator (sheaves design) over a platform that gives no page-tag table.
pub fn kmem_without_tag_table(sections: usize, config: Config) -> &'static Kmem<TestPlatform> {
    let (base, len) = span(sections);
    let platform = TestPlatform {
        no_tag_table: true,
        ..TestPlatform::new()
    };
    let k: &'static Kmem<TestPlatform> = Box::leak(Box::new(Kmem::new(platform)));
    // SAFETY: the span is ours alone and nobody else uses the allocator yet.
    unsafe { k.init(base, len, config, 2) }.unwrap();
    k
}

pub fn config(nodes: usize, max_pages: usize) -> Config {
    Config {
        nr_nodes: nodes,
        max_pages,
        ..Config::default()
    }
}

/// A pattern that depends on the address, for detecting overlap and corruption.
pub fn pattern(addr: usize) -> u64 {
    (addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xA5A5_A5A5_A5A5_A5A5
}

/// xorshift64: a small deterministic generator for randomised tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The allocator type of the tests.
pub type K = Kmem<TestPlatform>;

/// As [`kmem`] (two sections, one node), with a decay interval of `delay_ns`
/// (`Config::report_delay_ns`: the barns' and kept slabs' decay, page reporting).
#[allow(dead_code)]
pub fn kmem_with_decay(delay_ns: u64) -> &'static Kmem<TestPlatform> {
    kmem(
        2,
        Config {
            report_delay_ns: delay_ns,
            ..config(1, 0)
        },
    )
}

/// Sheaf traffic on `c` that runs the slab slow paths (and so the housekeeping tick)
/// `rounds` times or more: each round allocates `batch` objects of `size` bytes, then
/// frees them.
#[allow(dead_code)]
pub fn slow_path_traffic(k: &K, c: Option<CpuRef<'_>>, size: usize, batch: usize, rounds: usize) {
    for _ in 0..rounds {
        let v: Vec<_> = (0..batch)
            .map(|_| k.kmalloc(c, size, kmem_core::Gfp::KERNEL).unwrap())
            .collect();
        for o in v {
            // SAFETY: ours, freed once.
            unsafe { k.kfree(c, o.as_ptr()) };
        }
    }
}

/// A cache's SLUB statistic summed over every CPU area.
pub fn stat(k: &K, s: &KmemCache, item: SlubStat) -> u64 {
    s.stat_sum(k.pages.cpu_areas().iter(), item)
}

/// A CPU area of `k` for this test alone, and the owner's handle on it.
pub fn own_area(k: &'static K) -> (&'static CpuArea, Option<CpuRef<'static>>) {
    let a = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: fresh from the pool: the calling test owns it until it puts it back, and
    // uses this one handle on it.
    (a, Some(unsafe { CpuRef::new(a) }))
}

/// Checks the census of `s`: free objects (sheaves, barns, slab freelists) and `live`
/// are disjoint, all objects of `s`, and together every object of its slabs.
pub fn check_census(k: &K, s: &KmemCache, areas: &[CpuRef<'_>], live: &HashSet<usize>) {
    let mut free = HashSet::new();
    let mut twice = None;
    let c = k.slub().census(s, areas, |o| {
        if !free.insert(o) && twice.is_none() {
            twice = Some(o);
        }
    });
    assert_eq!(
        c.foreign, None,
        "a slot or link that is no object of the cache"
    );
    assert_eq!(twice, None, "an object waits in two places");
    assert!(free.is_disjoint(live), "a handed-out object is also free");
    assert_eq!(
        live.len() + free.len(),
        c.total,
        "objects lost: {c:?}, {} live",
        live.len()
    );
}
