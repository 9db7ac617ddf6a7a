//! Constructors are the user's code, run while a new slab is made, which may be in
//! the middle of refilling the CPU's sheaves of that very cache. What a constructor
//! allocates, frees or asks of the heap must not touch that held state: before, a
//! constructor that shrank the heap (or allocated while another thread's shrink had
//! asked every thread to flush) flushed the sheaf being refilled to the barn while
//! the refill went on writing into it, and objects were handed out twice.

use kmem::{heap, KmemAlloc, KmemCache};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

#[global_allocator]
static A: KmemAlloc = KmemAlloc;

/// Allocates `n` constructed objects of `cache`: every one distinct and as `check`
/// wants it; then frees them.
fn distinct<T>(cache: &KmemCache<T>, n: usize, check: impl Fn(&T) -> bool) {
    let objs: Vec<_> = (0..n).map(|_| cache.alloc_constructed().unwrap()).collect();
    let addrs: HashSet<usize> = objs.iter().map(|b| &**b as *const T as usize).collect();
    assert_eq!(addrs.len(), n, "an object handed out twice");
    assert!(objs.iter().all(|b| check(b)), "an object not as built");
}

fn shrinking() -> [u64; 4] {
    heap().shrink_all();
    [7; 4]
}

/// A constructor that shrinks every cache (its own included) while its cache's
/// sheaf is being refilled.
#[test]
fn a_constructor_that_shrinks_the_heap_hands_out_every_object_once() {
    let cache = KmemCache::with_constructor("reentry-shrink", shrinking).unwrap();
    let n = cache.raw().config().sheaf_capacity * 8;
    for _ in 0..20 {
        distinct(&cache, n, |v| *v == [7; 4]);
        cache.shrink();
    }
}

fn allocating() -> Vec<u64> {
    let mut v = Vec::with_capacity(8);
    v.extend(0..8u64);
    // A free too, of another size.
    drop(String::from("a constructor's own garbage"));
    v
}

/// A constructor that allocates and frees while other threads shrink the heap (each
/// shrink asks every thread to flush its caches at its next slow path, which the
/// constructor's allocations reach).
#[test]
fn a_constructor_that_allocates_beside_shrinks_hands_out_every_object_once() {
    let cache = KmemCache::with_constructor("reentry-alloc", allocating).unwrap();
    let n = cache.raw().config().sheaf_capacity * 8;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                heap().shrink_all();
                std::thread::yield_now();
            }
        });
        for _ in 0..20 {
            distinct(&cache, n, |v| v.len() == 8 && v[7] == 7);
            cache.shrink();
        }
        stop.store(true, Ordering::Relaxed);
    });
}

fn flushing() -> [u64; 4] {
    heap().flush_cpu_caches();
    heap().drain_memcg_stocks();
    [9; 4]
}

const CHILD: &str = "KMEM_TEST_CONSTRUCTOR_CHILD";

/// In per-CPU mode the operation around a constructor holds its CPU area's lock: a
/// constructor that walks every CPU's area (flushing caches, draining stocks) passes
/// that one by instead of waiting for its own lock. Runs itself again as a child in
/// each per-CPU mode (read once, when the heap starts), which must finish in time.
#[test]
fn a_constructor_that_flushes_every_cpu_finishes_in_per_cpu_mode() {
    if std::env::var_os(CHILD).is_some() {
        let cache = KmemCache::with_constructor("reentry-flush", flushing).unwrap();
        let n = cache.raw().config().sheaf_capacity * 4;
        for _ in 0..5 {
            distinct(&cache, n, |v| *v == [9; 4]);
            cache.shrink();
        }
        println!("flushed ok");
        return;
    }
    for mode in ["cpu-lock", "cpu-rseq", "thread"] {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_constructor_that_flushes_every_cpu_finishes_in_per_cpu_mode",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .env("KMEM_PERCPU", mode)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if start.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                panic!("{mode}: the constructor waited for its own CPU area");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut out = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
        assert!(
            status.success() && out.contains("flushed ok"),
            "{mode}: {out}"
        );
    }
}

/// What the constructor below saw: `ksize` and `usable_size` of its own object.
static SEEN: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

fn measuring(p: *mut u8) {
    // SAFETY: the object being constructed, which this constructor holds.
    let sizes = unsafe { (heap().ksize(p), heap().usable_size(p)) };
    SEEN.lock().unwrap().push(sizes);
}

/// A constructor that asks the heap about its own object: the slab it is in reads as
/// a slab of its cache already. Before, the slab's flags said `SLAB` before its cache
/// word was written, and the lookup made a reference from the null cache word.
#[test]
fn a_constructor_may_ask_the_size_of_its_object() {
    let cache = heap()
        .kmem_cache_create(
            "reentry-ksize",
            200,
            8,
            kmem::SlabFlags::empty(),
            Some(measuring),
        )
        .unwrap();
    let size = cache.config().object_size;
    let p = heap().kmem_cache_alloc(cache, kmem::Gfp::KERNEL).unwrap();
    let seen = std::mem::take(&mut *SEEN.lock().unwrap());
    // A call per object of each slab made (a sheaf's refill may make several).
    let objects = cache.config().objects;
    assert!(
        !seen.is_empty() && seen.len().is_multiple_of(objects),
        "{} calls",
        seen.len()
    );
    assert!(seen.iter().all(|&s| s == (size, size)), "{seen:?}");
    // SAFETY: allocated above from `cache`, freed once; then nothing of it is left.
    unsafe {
        heap().kmem_cache_free(cache, p);
        heap().kmem_cache_destroy(cache).unwrap();
    }
}
