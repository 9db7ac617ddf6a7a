#![allow(clippy::unnecessary_literal_unwrap)] // `cpu` is an Option on purpose: APIs take one.
//! SLUB and kmalloc through the public API of `Kmem`.

mod common;

use common::{config, kmem, kmem_cpu_slab, pattern, TestPlatform};
use kmem_core::kmalloc::{KMALLOC_PLAIN_SIZES, KMALLOC_SIZES, NR_KMALLOC_PLAIN};
use kmem_core::slab::{SlubDesign, SlubStat};
use kmem_core::vmstat::VmEvent;
use kmem_core::{CpuRef, Gfp, Kmem, SlabFlags, PAGE_SIZE};
use std::sync::atomic::{AtomicUsize, Ordering};

type K = Kmem<TestPlatform>;

fn stat(k: &K, s: &kmem_core::KmemCache, item: SlubStat) -> u64 {
    s.stat_sum(k.pages.cpu_areas().iter(), item)
}

#[test]
fn every_kmalloc_cache_aligns_and_sizes_its_objects() {
    let k = kmem(2, config(1, 0));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    for (i, &class) in KMALLOC_PLAIN_SIZES.iter().enumerate() {
        let s = &k.kmalloc_caches()[i];
        assert_eq!(s.config().object_size, class);
        assert!(std::ptr::eq(
            k.kmalloc_cache(class, Gfp::KERNEL).unwrap(),
            s
        ));
        assert!(std::ptr::eq(
            k.kmalloc_cache(class - 1, Gfp::KERNEL).unwrap(),
            s
        ));
        if i > 0 {
            let next = k.kmalloc_cache(KMALLOC_PLAIN_SIZES[i - 1] + 1, Gfp::KERNEL);
            assert!(std::ptr::eq(next.unwrap(), s), "{}", s.name());
        }
        let align = (1usize << class.trailing_zeros()).min(PAGE_SIZE);
        assert_eq!(s.config().size % align, 0, "{}", s.name());
        let mut held = Vec::new();
        for _ in 0..2 * s.config().objects + 3 {
            let p = k.kmalloc(cpu, class, Gfp::KERNEL).unwrap();
            assert_eq!(p.as_ptr() as usize % align, 0, "{} alignment", s.name());
            // SAFETY: the test's own live allocation (or null, or not the heap's).
            assert_eq!(unsafe { k.ksize(p.as_ptr()) }, class);
            // SAFETY: ours, `class` bytes.
            unsafe { std::ptr::write_bytes(p.as_ptr(), 0xa5, class) };
            held.push(p.as_ptr());
        }
        held.sort();
        for w in held.windows(2) {
            assert!(
                w[0] as usize + class <= w[1] as usize,
                "{} overlaps",
                s.name()
            );
        }
        for p in held {
            // SAFETY: allocated above.
            unsafe { k.kfree(cpu, p) };
        }
    }
    let names: Vec<&str> = k.kmalloc_caches().iter().map(|s| s.name()).collect();
    assert_eq!(names.len(), NR_KMALLOC_PLAIN);
    assert_eq!(names[0], "kmalloc-8");
    assert_eq!(names[NR_KMALLOC_PLAIN - 1], "kmalloc-1M");
    for name in [
        "kmalloc-48",
        "kmalloc-96",
        "kmalloc-1280",
        "kmalloc-8k",
        "kmalloc-16k",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    // Every kernel class is a plain class of the same name.
    for class in KMALLOC_SIZES {
        let s = k.kmalloc_cache(class, Gfp::KERNEL).unwrap();
        assert_eq!(s.config().object_size, class);
    }
    assert!(k
        .kmalloc_cache(KMALLOC_PLAIN_SIZES[NR_KMALLOC_PLAIN - 1] + 1, Gfp::KERNEL)
        .is_none());
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(area) };
}

#[test]
fn accounted_and_reclaimable_callers_get_their_own_caches() {
    let k = kmem(2, config(1, 0));
    assert_eq!(
        k.kmalloc_cache(64, Gfp::ACCOUNT).unwrap().name(),
        "kmalloc-cg-64"
    );
    assert_eq!(
        k.kmalloc_cache(64, Gfp::RECLAIMABLE).unwrap().name(),
        "kmalloc-rcl-64"
    );
    assert_eq!(
        k.kmalloc_cache(3000, Gfp::KERNEL).unwrap().name(),
        "kmalloc-3k"
    );
    // The accounted and reclaimable sets keep the kernel's classes, up to 8 KiB.
    assert_eq!(
        k.kmalloc_cache(3000, Gfp::ACCOUNT).unwrap().name(),
        "kmalloc-cg-4k"
    );
    assert_eq!(
        k.kmalloc_cache(40, Gfp::RECLAIMABLE).unwrap().name(),
        "kmalloc-rcl-64"
    );
    assert!(k.kmalloc_cache(8193, Gfp::ACCOUNT).is_none());
    assert_eq!(
        k.kmalloc_cache(100_000, Gfp::KERNEL).unwrap().name(),
        "kmalloc-128k"
    );
    let p = k.kmalloc(None, 64, Gfp::ACCOUNT).unwrap();
    let q = k.kmalloc(None, 64, Gfp::KERNEL).unwrap();
    // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
    let (ps, qs) = match unsafe { (k.slub().lookup(p.as_ptr()), k.slub().lookup(q.as_ptr())) } {
        (kmem_core::slab::ObjectLookup::Slab(a, _), kmem_core::slab::ObjectLookup::Slab(b, _)) => {
            (a.name(), b.name())
        }
        _ => panic!("not slab objects"),
    };
    assert_eq!((ps, qs), ("kmalloc-cg-64", "kmalloc-64"));
    // SAFETY: allocated above.
    unsafe {
        k.kfree(None, p.as_ptr());
        k.kfree(None, q.as_ptr());
    }
}

#[test]
fn large_kmalloc_krealloc_kcalloc() {
    let k = kmem(2, config(1, 0));
    // Above the largest kmalloc cache (1 MiB): a page block.
    let p = k.kmalloc(None, 1_100_000, Gfp::KERNEL).unwrap();
    assert_eq!(p.as_ptr() as usize % PAGE_SIZE, 0);
    // SAFETY: the test's own live allocation (or null, or not the heap's).
    assert_eq!(unsafe { k.ksize(p.as_ptr()) }, 2 << 20);
    assert!(matches!(
        // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
        unsafe { k.slub().lookup(p.as_ptr()) },
        kmem_core::slab::ObjectLookup::Large(_)
    ));
    // SAFETY: ours.
    unsafe { std::ptr::write_bytes(p.as_ptr(), 7, 1_100_000) };
    // In place while it fits.
    // SAFETY: ours.
    let q = unsafe { k.krealloc(None, p.as_ptr(), 2_000_000, Gfp::KERNEL) }.unwrap();
    assert_eq!(q, p);
    // Moves when it grows out of its pages, keeping the contents.
    // SAFETY: ours.
    let r = unsafe { k.krealloc(None, q.as_ptr(), 3_000_000, Gfp::KERNEL) }.unwrap();
    // SAFETY: ours.
    assert!(unsafe { std::slice::from_raw_parts(r.as_ptr(), 1_100_000) }
        .iter()
        .all(|&b| b == 7));
    // Accounted sizes above 8 KiB are page blocks too (the kernel's classes).
    let a = k.kmalloc(None, 100_000, Gfp::ACCOUNT).unwrap();
    // SAFETY: the test's own live allocation (or null, or not the heap's).
    assert_eq!(unsafe { k.ksize(a.as_ptr()) }, 128 * 1024);
    // SAFETY: ours.
    unsafe { k.kfree(None, a.as_ptr()) };
    // Shrinks into a slab object by moving? No: in place, it still fits.
    // SAFETY: ours.
    let s = unsafe { k.krealloc(None, r.as_ptr(), 10, Gfp::KERNEL) }.unwrap();
    assert_eq!(s, r);
    // SAFETY: ours.
    unsafe { k.kfree(None, s.as_ptr()) };
    assert!(
        k.kcalloc(None, usize::MAX / 2, 4, Gfp::NOWARN).is_none(),
        "overflow"
    );
    let z = k.kcalloc(None, 10, 10, Gfp::KERNEL).unwrap();
    // SAFETY: ours, 100 bytes.
    assert!(unsafe { std::slice::from_raw_parts(z.as_ptr(), 100) }
        .iter()
        .all(|&b| b == 0));
    // SAFETY: ours.
    unsafe { k.kfree(None, z.as_ptr()) };
    assert!(k
        .kmalloc(None, kmem_core::kmalloc::KMALLOC_MAX_SIZE + 1, Gfp::NOWARN)
        .is_none());
    // krealloc of null allocates; kfree of null does nothing.
    // SAFETY: null is allowed.
    let n = unsafe { k.krealloc(None, std::ptr::null_mut(), 40, Gfp::KERNEL) }.unwrap();
    // SAFETY: null is a no-op; `n` is ours.
    unsafe {
        k.kfree(None, std::ptr::null_mut());
        k.kfree(None, n.as_ptr());
    }
}

#[test]
fn bad_frees_are_reported_and_corrupt_nothing() {
    let k = kmem(2, config(1, 0));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    let a = k.kmalloc(cpu, 64, Gfp::KERNEL).unwrap();
    let big = k.kmalloc(cpu, 20_000, Gfp::KERNEL).unwrap();
    let mut local = [0u8; 16];
    // SAFETY: each of these is the misuse under test; none may be freed.
    unsafe {
        k.kfree(cpu, a.as_ptr().add(8));
        k.kfree(cpu, big.as_ptr().add(PAGE_SIZE));
        k.kfree(cpu, local.as_mut_ptr());
    }
    let log = k.pages.platform().take_log();
    assert!(
        log.contains("BUG kmalloc-64 (Not tainted): Invalid object pointer 0x"),
        "{log}"
    );
    assert!(log.contains("Slab 0x"), "{log}");
    assert!(
        log.contains("BUG kmalloc (Not tainted): not allocated by kmem"),
        "{log}"
    );
    assert_eq!(log.lines().filter(|l| l.starts_with("=====")).count(), 3);
    // Nothing was freed: the next allocations do not hand out `a` again.
    let mut more = Vec::new();
    for _ in 0..200 {
        let p = k.kmalloc(cpu, 64, Gfp::KERNEL).unwrap();
        assert_ne!(p, a);
        more.push(p);
    }
    // A typed free to the wrong cache is refused too.
    let s = k
        .kmem_cache_create(cpu, "obj-48", 48, 8, SlabFlags::empty(), None)
        .unwrap();
    // SAFETY: misuse under test.
    unsafe { k.slub().free(cpu, s, a) };
    assert!(k
        .pages
        .platform()
        .take_log()
        .contains("BUG kmalloc-64 (Not tainted): Wrong slab cache"));
    // SAFETY: all ours.
    unsafe {
        for p in more {
            k.kfree(cpu, p.as_ptr());
        }
        k.kfree(cpu, a.as_ptr());
        k.kfree(cpu, big.as_ptr());
        k.pages.cpu_area_put(area);
    }
}

static CTOR_CALLS: AtomicUsize = AtomicUsize::new(0);
fn ctor(p: *mut u8) {
    CTOR_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the constructor is handed a whole object (24 bytes here).
    unsafe { (p as *mut u64).write(0xC0FFEE) };
}

#[test]
fn constructor_runs_once_per_object_when_its_slab_is_made() {
    let k = kmem_cpu_slab(2, config(1, 0));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    let s = k
        .kmem_cache_create(cpu, "ctor-24", 24, 8, SlabFlags::empty(), Some(ctor))
        .unwrap();
    let per_slab = s.config().objects;
    let p = k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap();
    assert_eq!(CTOR_CALLS.load(Ordering::Relaxed), per_slab);
    // SAFETY: constructed object.
    assert_eq!(unsafe { *(p.as_ptr() as *const u64) }, 0xC0FFEE);
    // Free and reuse: no new constructor calls; the object keeps its constructed state.
    // SAFETY: ours.
    unsafe { k.slub().free(cpu, s, p) };
    for _ in 0..per_slab {
        let q = k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap();
        // SAFETY: constructed object.
        assert_eq!(unsafe { *(q.as_ptr() as *const u64) }, 0xC0FFEE);
    }
    assert_eq!(CTOR_CALLS.load(Ordering::Relaxed), per_slab);
    // One more object needs a second slab: one more round of constructors.
    let _ = k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap();
    assert_eq!(CTOR_CALLS.load(Ordering::Relaxed), 2 * per_slab);
}

#[test]
fn everything_freed_and_shrunk_gives_every_page_back() {
    everything_freed_and_shrunk(SlubDesign::CpuSlab);
    everything_freed_and_shrunk(SlubDesign::Sheaves);
}

fn everything_freed_and_shrunk(design: SlubDesign) {
    let k = common::kmem_design(4, config(1, 0), None, design);
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    let s = k
        .kmem_cache_create(cpu, "obj-200", 200, 8, SlabFlags::empty(), None)
        .unwrap();
    // What creating the cache left cached (its struct's sheaves) goes back too.
    k.shrink_all(cpu);
    k.pages.drain_local_pages(cpu.unwrap());
    let free_at_start = k.pages.nr_free_pages();
    let mut held = Vec::new();
    let mut rng = 42u64;
    for i in 0..20_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let size = [8, 24, 64, 100, 200, 500, 1500, 3000, 6000, 9000, 40_000][(rng % 11) as usize];
        let p = if i % 5 == 0 {
            (
                k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap().as_ptr(),
                usize::MAX,
            )
        } else {
            (k.kmalloc(cpu, size, Gfp::KERNEL).unwrap().as_ptr(), size)
        };
        held.push(p);
        if rng.is_multiple_of(3) {
            let (q, _) = held.swap_remove((rng >> 8) as usize % held.len());
            // SAFETY: ours (kfree also frees kmem_cache objects).
            unsafe { k.kfree(cpu, q) };
        }
    }
    for (p, _) in held {
        // SAFETY: ours.
        unsafe { k.kfree(cpu, p) };
    }
    let freed = k.shrink_all(cpu);
    assert!(freed > 0);
    if design == SlubDesign::CpuSlab {
        assert!(stat(k, s, SlubStat::AllocFastpath) > 0);
        assert!(stat(k, s, SlubStat::FreeFastpath) > 0);
    } else {
        // Sheaves: refilled in bulk, exchanged at the barn, and flushed in bulk (the
        // barn's sheaves by the shrink at the latest: its bound holds this many).
        for item in [
            SlubStat::SheafRefill,
            SlubStat::SheafFlush,
            SlubStat::BarnPut,
        ] {
            assert!(stat(k, s, item) > 0, "{}", item.name());
        }
    }
    k.pages.drain_local_pages(cpu.unwrap());
    for c in k.kmalloc_caches() {
        assert_eq!(c.nr_slabs(0), 0, "{} keeps slabs", c.name());
    }
    assert_eq!(s.nr_slabs(0), 0);
    assert_eq!(
        k.pages.nr_free_pages(),
        free_at_start,
        "every slab is back in the page allocator"
    );
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(area) };
}

#[test]
fn destroy_with_live_objects_is_refused() {
    let k = kmem(2, config(1, 0));
    let s = k
        .kmem_cache_create(None, "obj-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    let objs: Vec<_> = (0..3)
        .map(|_| k.slub().alloc(None, s, Gfp::KERNEL).unwrap())
        .collect();
    // SAFETY: nobody else uses `s`.
    let r = unsafe { k.kmem_cache_destroy(None, s) };
    assert_eq!(r, Err(kmem_core::slab::DestroyError::ObjectsRemaining(3)));
    let log = k.pages.platform().take_log();
    assert!(
        log.contains(
            "BUG obj-64 (Not tainted): Objects remaining in obj-64 on __kmem_cache_shutdown()"
        ),
        "{log}"
    );
    // Still usable; after the frees it goes.
    for o in objs {
        // SAFETY: ours.
        unsafe { k.slub().free(None, s, o) };
    }
    // SAFETY: nobody uses `s` again.
    assert_eq!(unsafe { k.kmem_cache_destroy(None, s) }, Ok(()));
    let mut names = Vec::new();
    k.caches().for_each(|c| names.push(c.name().to_string()));
    assert!(!names.iter().any(|n| n == "obj-64"));
    let kc: &'static kmem_core::KmemCache = &k.kmalloc_caches()[0];
    // SAFETY: nobody uses kmalloc-8 meanwhile; the kmalloc caches are refused anyway.
    let r = unsafe { k.kmem_cache_destroy(None, kc) };
    assert_eq!(r, Err(kmem_core::slab::DestroyError::NotDestroyable));
}

#[test]
fn bulk_alloc_and_free() {
    let k = kmem(2, config(1, 0));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    let s = k
        .kmem_cache_create(cpu, "bulk-128", 128, 8, SlabFlags::empty(), None)
        .unwrap();
    for with_cpu in [cpu, None] {
        let mut objs = vec![std::ptr::null_mut(); 500];
        assert_eq!(
            k.slub().alloc_bulk(with_cpu, s, Gfp::KERNEL, &mut objs),
            500
        );
        let mut sorted = objs.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 500);
        for &o in &objs {
            // SAFETY: ours.
            unsafe { std::ptr::write_bytes(o, 1, 128) };
        }
        // SAFETY: ours.
        unsafe { k.slub().free_bulk(with_cpu, s, &mut objs) };
        assert!(objs.iter().all(|p| p.is_null()));
    }
    k.slub().flush_cpu_cache(cpu.unwrap(), s);
    k.slub().shrink(cpu, s);
    assert_eq!(s.nr_slabs(0), 0);
}

#[test]
fn remote_frees_from_many_threads() {
    let k = kmem(8, config(1, 0));
    let s = k
        .kmem_cache_create(None, "remote-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    let secs: u64 = std::env::var("KMEM_STRESS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let until = std::time::Instant::now()
        + std::time::Duration::from_millis(if secs > 0 { secs * 1000 } else { 800 });
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<usize>>(64);
    let rx = std::sync::Mutex::new(rx);
    std::thread::scope(|sc| {
        // Producers allocate and send; consumers free: every free is remote.
        for t in 0..2 {
            let tx = tx.clone();
            sc.spawn(move || {
                let area = k.pages.cpu_area_get(0).unwrap();
                // SAFETY: owned by this thread.
                let cpu = Some(unsafe { CpuRef::new(area) });
                while std::time::Instant::now() < until {
                    let mut batch = Vec::with_capacity(64);
                    for i in 0..64 {
                        let p = if (i + t) % 2 == 0 {
                            k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap().as_ptr()
                        } else {
                            k.kmalloc(cpu, 64 + i * 8, Gfp::KERNEL).unwrap().as_ptr()
                        };
                        // SAFETY: ours.
                        unsafe { (p as *mut u64).write(pattern(p as usize)) };
                        batch.push(p as usize);
                    }
                    if tx.send(batch).is_err() {
                        break;
                    }
                }
                // SAFETY: owned; not used afterwards.
                unsafe { k.pages.cpu_area_put(area) };
            });
        }
        drop(tx);
        for _ in 0..2 {
            let rx = &rx;
            sc.spawn(move || {
                let area = k.pages.cpu_area_get(0).unwrap();
                // SAFETY: owned by this thread.
                let cpu = Some(unsafe { CpuRef::new(area) });
                loop {
                    let batch = match rx.lock().unwrap().recv() {
                        Ok(b) => b,
                        Err(_) => break,
                    };
                    for p in batch {
                        // SAFETY: allocated by a producer, handed to us.
                        unsafe {
                            assert_eq!((p as *const u64).read(), pattern(p), "corrupted object");
                            k.kfree(cpu, p as *mut u8);
                        }
                    }
                }
                // SAFETY: owned; not used afterwards.
                unsafe { k.pages.cpu_area_put(area) };
            });
        }
    });
    // In the sheaves design remote frees fill the consumers' sheaves, which go to the
    // barn for the producers (or, past its bound, back to the slabs).
    assert!(
        stat(k, s, SlubStat::FreeSlowpath) + stat(k, s, SlubStat::BarnPut) > 0,
        "remote frees reach the barn or the slabs"
    );
    k.shrink_all(None);
    assert_eq!(s.nr_slabs(0), 0, "every object came back");
    for c in k.kmalloc_caches() {
        assert_eq!(c.nr_slabs(0), 0, "{}", c.name());
    }
}

#[test]
fn bounded_heap_shrinks_caches_before_failing() {
    let k = kmem(2, config(1, 4096));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    // Fill kmalloc-512, then free everything: empty slabs stay cached (min_partial,
    // CPU partial lists).
    let objs: Vec<_> = (0..2000)
        .map(|_| k.kmalloc(cpu, 512, Gfp::KERNEL).unwrap())
        .collect();
    for o in objs {
        // SAFETY: ours.
        unsafe { k.kfree(cpu, o.as_ptr()) };
    }
    assert!(
        k.kmalloc_cache(512, Gfp::KERNEL).unwrap().nr_slabs(0) > 0,
        "empty slabs are cached"
    );
    // Pages until the heap runs out: the shrinker must give the cached slabs back.
    let mut pages = Vec::new();
    while let Some(p) = k.pages.alloc_pages(cpu, Gfp::NOWARN, 0) {
        pages.push(p);
    }
    assert!(k.pages.event(VmEvent::ShrinkerFreed) > 0);
    assert!(pages.len() > 3500, "got only {} pages", pages.len());
    for p in pages {
        // SAFETY: ours.
        unsafe { k.pages.free_pages(cpu, p, 0) };
    }
    assert!(k.kmalloc(cpu, 512, Gfp::KERNEL).is_some());
}

#[test]
fn node_allocation_and_mismatch() {
    let k = kmem_cpu_slab(4, config(2, 0));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    let local = k.kmalloc(cpu, 64, Gfp::KERNEL).unwrap();
    let remote = k.kmalloc_node(cpu, 64, Gfp::KERNEL, Some(1)).unwrap();
    let nid = |p: *mut u8| k.pages.page_to_nid(k.pages.virt_to_page(p).unwrap());
    assert_eq!(nid(local.as_ptr()), 0);
    assert_eq!(nid(remote.as_ptr()), 1);
    let s = k.kmalloc_cache(64, Gfp::KERNEL).unwrap();
    assert!(stat(k, s, SlubStat::AllocNodeMismatch) >= 1);
    // Allocation without a CPU area also works, on any node.
    let n = k
        .kmalloc_node(None, 64, Gfp::KERNEL | Gfp::THISNODE, Some(1))
        .unwrap();
    assert_eq!(nid(n.as_ptr()), 1);
    // SAFETY: ours.
    unsafe {
        k.kfree(cpu, local.as_ptr());
        k.kfree(cpu, remote.as_ptr());
        k.kfree(None, n.as_ptr());
        k.pages.cpu_area_put(area);
    }
}

#[test]
fn slabinfo_and_slabtop_formats() {
    let k = kmem(2, config(1, 0));
    let objs: Vec<_> = (0..100)
        .map(|_| k.kmalloc(None, 32, Gfp::KERNEL).unwrap())
        .collect();
    let mut text = String::new();
    k.slabinfo(&mut text).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("slabinfo - version: 2.1"));
    assert!(lines.next().unwrap().starts_with("# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables"));
    let row = text.lines().find(|l| l.starts_with("kmalloc-32 ")).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    // name active num objsize objperslab pagesperslab : tunables 0 0 0 : slabdata a n 0
    // kmalloc-32 on 32 KiB slabs (sheaves design): 1,024 objects, 8 pages a slab.
    assert_eq!(cols[1], "100", "{row}");
    assert_eq!(cols[2], "1024");
    assert_eq!(cols[3], "32");
    assert_eq!(cols[4], "1024");
    assert_eq!(cols[5], "8");
    assert_eq!(&cols[6..10], [":", "tunables", "0", "0"]);
    assert!(row.contains(": slabdata      1      1      0"), "{row}");
    let mut top = String::new();
    k.slabtop(&mut top, 5).unwrap();
    assert!(
        top.starts_with(" Active / Total Objects (% used)    : "),
        "{top}"
    );
    assert!(top.contains("  OBJS ACTIVE  USE OBJ SIZE  SLABS OBJ/SLAB CACHE SIZE NAME"));
    assert!(top.lines().any(|l| l.ends_with("kmalloc-32")), "{top}");
    for o in objs {
        // SAFETY: ours.
        unsafe { k.kfree(None, o.as_ptr()) };
    }
}

#[test]
fn thread_churn_with_remote_frees() {
    let k = kmem(8, config(1, 0));
    let (tx, rx) = std::sync::mpsc::channel::<Vec<usize>>();
    let rounds: usize = match std::env::var("KMEM_STRESS_SECS") {
        Ok(_) => 2000,
        Err(_) => 60,
    };
    std::thread::scope(|sc| {
        // One long-lived thread frees what short-lived threads hand it.
        sc.spawn(move || {
            let area = k.pages.cpu_area_get(0).unwrap();
            // SAFETY: owned by this thread.
            let cpu = Some(unsafe { CpuRef::new(area) });
            while let Ok(batch) = rx.recv() {
                for p in batch {
                    // SAFETY: allocated by a worker, handed over; freed once.
                    unsafe {
                        assert_eq!((p as *const u64).read(), pattern(p));
                        k.kfree(cpu, p as *mut u8);
                    }
                }
            }
            // SAFETY: owned; not used afterwards.
            unsafe { k.pages.cpu_area_put(area) };
        });
        for r in 0..rounds {
            let tx = tx.clone();
            // Short-lived workers, two at a time: each leaves CPU slabs behind that
            // its exit (cpu_area_put) must flush while remote frees hit them.
            let workers: Vec<_> = (0..2)
                .map(|w| {
                    let tx = tx.clone();
                    sc.spawn(move || {
                        let area = k.pages.cpu_area_get(0).unwrap();
                        // SAFETY: owned by this thread.
                        let cpu = Some(unsafe { CpuRef::new(area) });
                        let mut mine = Vec::new();
                        let mut theirs = Vec::new();
                        for i in 0..400usize {
                            let size = [8, 16, 48, 64, 200, 700][(i + r + w) % 6];
                            let p = k.kmalloc(cpu, size, Gfp::KERNEL).unwrap().as_ptr() as usize;
                            // SAFETY: ours, at least 8 bytes.
                            unsafe { (p as *mut u64).write(pattern(p)) };
                            if i % 2 == 0 {
                                mine.push(p)
                            } else {
                                theirs.push(p)
                            }
                        }
                        tx.send(theirs).unwrap();
                        for p in mine.into_iter().rev() {
                            // SAFETY: ours; freed once.
                            unsafe {
                                assert_eq!((p as *const u64).read(), pattern(p));
                                k.kfree(if p % 3 == 0 { None } else { cpu }, p as *mut u8);
                            }
                        }
                        // SAFETY: owned; not used afterwards.
                        unsafe { k.pages.cpu_area_put(area) };
                    })
                })
                .collect();
            for h in workers {
                h.join().unwrap();
            }
            drop(tx);
        }
        drop(tx);
    });
    k.shrink_all(None);
    for c in k.kmalloc_caches() {
        assert_eq!(c.nr_slabs(0), 0, "{} keeps slabs: objects lost", c.name());
    }
}

#[test]
fn double_frees_at_a_freelist_head_are_caught() {
    let k = kmem(2, config(1, 0));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    for ctx in [cpu, None] {
        let p = k.kmalloc(ctx, 64, Gfp::KERNEL).unwrap().as_ptr();
        let other = k.kmalloc(ctx, 64, Gfp::KERNEL).unwrap().as_ptr();
        // SAFETY: the second free of `p` is the misuse under test.
        unsafe {
            assert!(k.kfree(ctx, p));
            assert!(!k.kfree(ctx, p), "the second free is refused");
        }
        let log = k.pages.platform().take_log();
        assert!(
            log.contains("BUG kmalloc-64 (Not tainted): Object already free"),
            "{log}"
        );
        // The freelist is intact: two allocations give two different objects.
        let a = k.kmalloc(ctx, 64, Gfp::KERNEL).unwrap().as_ptr();
        let b = k.kmalloc(ctx, 64, Gfp::KERNEL).unwrap().as_ptr();
        assert_ne!(a, b);
        // SAFETY: ours.
        unsafe {
            k.kfree(ctx, a);
            k.kfree(ctx, b);
            k.kfree(ctx, other);
        }
    }
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(area) };
}

#[test]
fn freelist_pointers_are_hardened() {
    let k = kmem_cpu_slab(2, config(1, 0));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    let s = k
        .kmem_cache_create(cpu, "hard-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    let cfg = *s.config();
    assert_ne!(cfg.random, 0, "hardening is on by default");
    let a = k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap().as_ptr();
    let b = k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: ours.
    unsafe {
        k.slub().free(cpu, s, std::ptr::NonNull::new(b).unwrap());
        k.slub().free(cpu, s, std::ptr::NonNull::new(a).unwrap());
    }
    // `a` is free and points at `b`, but not in the clear.
    // SAFETY: reading the free pointer word of a free object of ours.
    let raw = unsafe { (a.add(cfg.offset) as *const usize).read() };
    assert_ne!(raw, b as usize, "the stored free pointer is obfuscated");
    // A use-after-free write over it: the allocator reports and never follows it.
    // SAFETY: the bug under test.
    unsafe { (a.add(cfg.offset) as *mut usize).write(0x4141_4141_4141) };
    let mut seen = std::collections::HashSet::new();
    for _ in 0..300 {
        let p = k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap().as_ptr() as usize;
        assert!(
            k.pages.virt_to_page(p as *const u8).is_some(),
            "a wild pointer came out"
        );
        assert!(seen.insert(p), "handed out twice");
    }
    let l = k.pages.platform().take_log();
    assert!(
        l.contains("BUG hard-64 (Not tainted): Freepointer corrupt"),
        "{l}"
    );
    // A cache can opt out (the bench's plain mode).
    let plain = k
        .kmem_cache_create(cpu, "plain-64", 64, 8, SlabFlags::NO_HARDEN, None)
        .unwrap();
    assert_eq!(plain.config().random, 0);
}

#[test]
fn init_on_alloc_free_and_random_freelists() {
    let k = kmem_cpu_slab(2, config(1, 0));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    let s = k
        .kmem_cache_create(
            cpu,
            "init-96",
            96,
            8,
            SlabFlags::INIT_ON_ALLOC | SlabFlags::INIT_ON_FREE,
            None,
        )
        .unwrap();
    let p = k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap();
    // SAFETY: ours, 96 bytes.
    unsafe {
        assert!(std::slice::from_raw_parts(p.as_ptr(), 96)
            .iter()
            .all(|&b| b == 0));
        std::ptr::write_bytes(p.as_ptr(), 0xee, 96);
        k.slub().free(cpu, s, p);
    }
    // init_on_free cleared it (but for the free pointer word).
    let off = s.config().offset;
    // SAFETY: reading a free object of ours.
    let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), 96) };
    assert!(bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b == 0 || (off..off + 8).contains(&i)));
    // init caches stay off the fast paths; an immediate double free is still caught.
    // SAFETY: the bug under test: `p` is already free.
    assert!(!unsafe { k.slub().free(cpu, s, p) });
    assert!(k
        .pages
        .platform()
        .take_log()
        .contains("Object already free"));
    // Random freelists: two new slabs hand out their objects in different orders,
    // every object exactly once.
    let r = k
        .kmem_cache_create(cpu, "rand-128", 128, 8, SlabFlags::RANDOM_FREELIST, None)
        .unwrap();
    let per = r.config().objects;
    let mut orders = Vec::new();
    for _ in 0..3 {
        let objs: Vec<usize> = (0..per)
            .map(|_| k.slub().alloc(cpu, r, Gfp::KERNEL).unwrap().as_ptr() as usize)
            .collect();
        let base = objs[0] & !(r.config().slab_bytes() - 1);
        let idx: Vec<usize> = objs.iter().map(|o| (o - base) / 128).collect();
        let mut sorted = idx.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), per, "every object once");
        orders.push(idx);
    }
    assert!(
        orders.windows(2).any(|w| w[0] != w[1]),
        "orders differ between slabs"
    );
    assert!(
        orders
            .iter()
            .any(|o| o.windows(2).any(|w| w[1] != w[0] + 1)),
        "not first-to-last"
    );
}

#[test]
fn large_object_slabs_work_in_both_designs() {
    // Slabs beyond order 3 (here 64 KiB objects on 256 KiB slabs): in the CPU-slab
    // design a free into the slab this CPU froze goes on its local freelist, whose
    // tail offset no longer fits 16 bits; in the sheaves design through sheaves of
    // two. Every object comes back once with its contents intact.
    for k in [kmem(4, config(1, 0)), kmem_cpu_slab(4, config(1, 0))] {
        let area = k.pages.cpu_area_get(0).unwrap();
        // SAFETY: owned by this test.
        let cpu = Some(unsafe { CpuRef::new(area) });
        let s = k.kmalloc_cache(65536, Gfp::KERNEL).unwrap();
        assert!(s.config().slab_bytes() > 65536 * 2 && s.config().objects >= 4);
        let mut held: Vec<usize> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for round in 0..6u64 {
            while held.len() < 24 {
                let p = k.kmalloc(cpu, 65536, Gfp::KERNEL).unwrap().as_ptr() as usize;
                // SAFETY: ours, 64 KiB: stamp the first and the last word.
                unsafe {
                    (p as *mut u64).write(pattern(p));
                    ((p + 65536 - 8) as *mut u64).write(pattern(p + 1));
                }
                assert!(!held.contains(&p), "handed out twice");
                seen.insert(p);
                held.push(p);
            }
            // Free every other one, from the back on odd rounds: slabs go partial,
            // empty and back.
            let mut i = (round % 2) as usize;
            while i < held.len() {
                let p = held.remove(i);
                // SAFETY: stamped above, still ours.
                unsafe {
                    assert_eq!((p as *const u64).read(), pattern(p));
                    assert_eq!(((p + 65536 - 8) as *const u64).read(), pattern(p + 1));
                    assert!(k.kfree(cpu, p as *mut u8));
                }
                i += 1;
            }
        }
        for p in held {
            // SAFETY: ours.
            unsafe { assert!(k.kfree(cpu, p as *mut u8)) };
        }
        assert!(seen.len() >= 24);
        // Everything free again: every object of those slabs comes back exactly once.
        let again: Vec<usize> = (0..seen.len())
            .map(|_| k.kmalloc(cpu, 65536, Gfp::KERNEL).unwrap().as_ptr() as usize)
            .collect();
        let distinct: std::collections::HashSet<_> = again.iter().collect();
        assert_eq!(distinct.len(), again.len(), "an object handed out twice");
        for p in again {
            // SAFETY: ours.
            unsafe { assert!(k.kfree(cpu, p as *mut u8)) };
        }
        k.shrink_all(cpu);
        assert_eq!(s.nr_slabs(0), 0, "every slab emptied and given back");
        assert!(k.pages.platform().take_log().is_empty());
        // SAFETY: owned; not used afterwards.
        unsafe { k.pages.cpu_area_put(area) };
    }
}
