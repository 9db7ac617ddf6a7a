//! kmalloc and object caches through the process heap.

use kmem::{heap, Gfp, SlabFlags};

#[test]
fn kmalloc_round_trips() {
    let h = heap();
    for size in [
        1usize,
        8,
        24,
        96,
        100,
        192,
        1000,
        4096,
        8192,
        9000,
        100_000,
        4 << 20,
    ] {
        let p = h.kmalloc(size, Gfp::KERNEL).expect("memory");
        // SAFETY: the test's own live allocation (or null, or not the heap's).
        assert!(unsafe { h.ksize(p.as_ptr()) } >= size);
        if size.is_power_of_two() && size <= 4096 {
            assert_eq!(
                p.as_ptr() as usize % size,
                0,
                "kmalloc({size}) is naturally aligned"
            );
        }
        // SAFETY: ours, `size` bytes.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0x77, size) };
        // SAFETY: ours; grows (up to kmalloc's limit) and keeps the contents.
        let q = unsafe { h.krealloc(p.as_ptr(), (size * 2).min(4 << 20), Gfp::KERNEL) }
            .expect("memory");
        // SAFETY: the first `size` bytes were copied.
        assert!(unsafe { std::slice::from_raw_parts(q.as_ptr(), size) }
            .iter()
            .all(|&b| b == 0x77));
        // SAFETY: ours.
        unsafe { h.kfree(q.as_ptr()) };
    }
    assert!(
        h.kmalloc((4 << 20) + 1, Gfp::NOWARN).is_none(),
        "above kmalloc's limit"
    );
    let z = h.kcalloc(100, 3, Gfp::KERNEL).unwrap();
    // SAFETY: ours, 300 bytes.
    assert!(unsafe { std::slice::from_raw_parts(z.as_ptr(), 300) }
        .iter()
        .all(|&b| b == 0));
    // SAFETY: ours; null is a no-op.
    unsafe {
        h.kfree(z.as_ptr());
        h.kfree(std::ptr::null_mut());
    }
}

#[test]
fn thread_exit_flushes_the_threads_slabs() {
    let h = heap();
    let s = h
        .kmem_cache_create("exit-flush-72", 72, 8, SlabFlags::empty(), None)
        .expect("cache");
    std::thread::spawn(move || {
        let h = heap();
        let objs: Vec<_> = (0..1000)
            .map(|_| h.kmem_cache_alloc(s, Gfp::KERNEL).unwrap())
            .collect();
        for o in objs {
            // SAFETY: ours.
            unsafe { h.kmem_cache_free(s, o) };
        }
        // The thread exits holding sheaves of `s` (or, in the CPU-slab design, a CPU
        // slab and CPU partial slabs).
    })
    .join()
    .unwrap();
    let stats = h.slub_stats(s);
    assert!(stats.starts_with("alloc_fastpath "), "{stats}");
    let get = |name: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .unwrap()
    };
    // Sheaves count per sheaf (refills), the CPU slab per object.
    assert!(get("alloc_fastpath ") + get("alloc_slowpath ") + get("sheaf_refill ") >= 1);
    assert!(get("alloc_slab ") >= 1);
    assert!(
        get("cpuslab_flush ") >= 1,
        "the exiting thread flushed its sheaves (or CPU slab)"
    );
    // Its exit gave them back to the node: shrinking from here frees them all.
    h.kmem_cache_shrink(s);
    assert_eq!(s.nr_slabs(0), 0, "slabs left behind by an exited thread");
    // SAFETY: nobody else uses `s`.
    assert_eq!(unsafe { h.kmem_cache_destroy(s) }, Ok(()));
}

#[test]
fn objects_freed_on_another_thread() {
    let h = heap();
    let s = h
        .kmem_cache_create("cross-48", 48, 8, SlabFlags::empty(), None)
        .expect("cache");
    let addrs: Vec<usize> = std::thread::spawn(move || {
        (0..5000)
            .map(|i| {
                let p = heap().kmem_cache_alloc(s, Gfp::KERNEL).unwrap();
                // SAFETY: ours.
                unsafe { (p.as_ptr() as *mut u64).write(i) };
                p.as_ptr() as usize
            })
            .collect()
    })
    .join()
    .unwrap();
    let mut sorted = addrs.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), addrs.len(), "no object handed out twice");
    for (i, a) in addrs.into_iter().enumerate() {
        // SAFETY: allocated by the other thread, handed over; freed once.
        unsafe {
            assert_eq!((a as *const u64).read(), i as u64);
            h.kmem_cache_free(s, std::ptr::NonNull::new(a as *mut u8).unwrap());
        }
    }
    // Flush this thread's view too, then everything is reclaimable.
    h.kmem_cache_shrink(s);
    // SAFETY: nobody else uses `s`.
    assert_eq!(unsafe { h.kmem_cache_destroy(s) }, Ok(()));
}

#[test]
fn slabinfo_lists_the_kmalloc_caches() {
    let h = heap();
    let p = h.kmalloc(32, Gfp::KERNEL).unwrap();
    let info = h.slabinfo();
    assert!(info.starts_with("slabinfo - version: 2.1\n"));
    let row = info
        .lines()
        .find(|l| l.starts_with("kmalloc-32 "))
        .expect("kmalloc-32 row");
    assert!(
        row.contains("    32 1024    8 : tunables    0    0    0 : slabdata"),
        "{row}"
    );
    assert!(h.slabtop(10).contains("OBJS ACTIVE  USE OBJ SIZE"));
    // SAFETY: ours.
    unsafe { h.kfree(p.as_ptr()) };
}

#[test]
fn medium_sizes_come_from_their_own_kmalloc_caches() {
    // Between the powers of two and above the kernel's 8 KiB: kmalloc caches with
    // their own names, exact usable sizes, and slabinfo rows that say what they hold.
    let h = heap();
    // Small classes' slabs depend on the number of CPUs (`slub_min_objects`); large
    // objects get slabs of four or more (`calculate_order`).
    let cfg = |size| *h.kmem().kmalloc_cache(size, Gfp::KERNEL).unwrap().config();
    let small = |size| (cfg(size).objects, cfg(size).slab_bytes() / 4096);
    for (size, name, class, (objs, pages)) in [
        (300, "kmalloc-320", 320, small(320)),
        (1100, "kmalloc-1280", 1280, small(1280)),
        (40_000, "kmalloc-64k", 65536, (4, 64)),
        (1 << 20, "kmalloc-1M", 1 << 20, (4, 1024)),
    ] {
        // From the class's slab, not a KFENCE sample (those sit outside the span).
        let p = loop {
            let p = h.kmalloc(size, Gfp::KERNEL).unwrap();
            if h.page_allocator().in_span(p.as_ptr()) {
                break p;
            }
            // SAFETY: ours, freed once.
            unsafe { h.kfree(p.as_ptr()) };
        };
        // SAFETY: the test's own live allocation (or null, or not the heap's).
        assert_eq!(unsafe { h.ksize(p.as_ptr()) }, class, "{name}");
        // SAFETY: ours, `class` bytes.
        unsafe { p.as_ptr().write_bytes(0x11, class) };
        let info = h.slabinfo();
        let row = info
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} row in\n{info}"));
        let fields: Vec<&str> = row.split_whitespace().collect();
        // name active_objs num_objs objsize objperslab pagesperslab
        assert_eq!(fields[3], class.to_string(), "{row}");
        assert_eq!(fields[4], objs.to_string(), "{row}");
        assert_eq!(fields[5], pages.to_string(), "{row}");
        assert!(fields[1].parse::<usize>().unwrap() >= 1, "{row}");
        // SAFETY: ours.
        unsafe { h.kfree(p.as_ptr()) };
    }
}

#[test]
fn stats_snapshot_serializes_and_prints_kernel_formats() {
    let h = heap();
    let p = h.kmalloc(32, Gfp::KERNEL).unwrap();
    let s = kmem::stats();
    let k32 = s.caches.iter().find(|c| c.name == "kmalloc-32").unwrap();
    // Small objects on 32 KiB slabs (the sheaves design).
    assert!(k32.active_objs >= 1 && k32.objperslab == 1024 && k32.pagesperslab == 8);
    assert!(
        k32.stats["alloc_fastpath"] + k32.stats["alloc_slowpath"] + k32.stats["sheaf_refill"] >= 1
    );
    assert_eq!(s.zones[0].buddyinfo.len(), 11);
    assert!(s.zones[0].managed_pages > 0 && s.zones[0].numa["numa_hit"] > 0);
    assert!(s.rss_bytes > 0);
    // (The crate's tests enable `serde` through their dev-dependency on kmem itself.)
    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["caches"].as_array().unwrap().len() >= 40);
        assert!(json["vmstat"][0]["name"] == "nr_free_pages");
    }
    let text = s.to_string();
    assert!(
        text.starts_with("slabinfo - version: 2.1\n# name "),
        "{text}"
    );
    assert!(text.contains(&k32.to_string()));
    assert!(text.contains("\nNode 0, zone   Normal "));
    assert!(text.contains("\nnr_free_pages "));
    assert!(text.contains("\nnuma_hit "));
    // SAFETY: ours.
    unsafe { h.kfree(p.as_ptr()) };
}

/// kzalloc, kcalloc and a zeroed kmem_cache_alloc pop from the same sheaves as the
/// plain calls and clear the whole object (its `ksize`, as the kernel clears a zeroed
/// kmalloc object), not only the bytes asked for: objects dirtied whole and freed come
/// back (the sheaves hand out the last freed first) all zero.
#[test]
fn zeroed_kmalloc_and_cache_objects_reuse_dirty_objects_cleared_whole() {
    let h = heap();
    let dirty_then = |ps: &[*mut u8]| {
        for &p in ps {
            // SAFETY: ours, `ksize` bytes.
            unsafe { p.write_bytes(0xa5, h.ksize(p)) };
        }
        for &p in ps {
            // SAFETY: ours, freed once.
            unsafe { h.kfree(p) };
        }
    };
    let all_zero = |p: *mut u8| {
        // SAFETY: ours, `ksize` bytes.
        unsafe { std::slice::from_raw_parts(p, h.ksize(p)) }
            .iter()
            .all(|&b| b == 0)
    };
    // Whether some object is wider than its request (then only a whole clear passes).
    let mut wider = false;
    for size in [8usize, 20, 100, 250, 1000, 3000, 20_000] {
        for round in 0..3 {
            let ps: Vec<*mut u8> = (0..64)
                .map(|_| h.kmalloc(size, Gfp::KERNEL).expect("memory").as_ptr())
                .collect();
            dirty_then(&ps);
            let zs: Vec<*mut u8> = (0..64)
                .map(|i| {
                    if i % 2 == 0 {
                        h.kzalloc(size, Gfp::KERNEL)
                    } else {
                        h.kcalloc(1, size, Gfp::KERNEL)
                    }
                    .expect("memory")
                    .as_ptr()
                })
                .collect();
            assert!(
                zs.iter().any(|p| ps.contains(p)),
                "the freed objects are reused (size {size})"
            );
            for &p in &zs {
                // SAFETY: the test's own live allocation (or null, or not the heap's).
                wider |= unsafe { h.ksize(p) } > size;
                assert!(all_zero(p), "kzalloc({size}) round {round}: not zero");
            }
            for &p in &zs {
                // SAFETY: ours, freed once.
                unsafe { h.kfree(p) };
            }
        }
    }
    assert!(wider, "no request smaller than its class");
    let s = h
        .kmem_cache_create("zeroed-200", 200, 8, SlabFlags::empty(), None)
        .expect("cache");
    for round in 0..3 {
        let ps: Vec<*mut u8> = (0..64)
            .map(|_| h.kmem_cache_alloc(s, Gfp::KERNEL).expect("memory").as_ptr())
            .collect();
        for &p in &ps {
            // SAFETY: ours, the cache's object size.
            unsafe { p.write_bytes(0x5a, 200) };
            // SAFETY: an object of `s`, freed once.
            unsafe { h.kmem_cache_free(s, std::ptr::NonNull::new(p).unwrap()) };
        }
        let zs: Vec<*mut u8> = (0..64)
            .map(|_| h.kmem_cache_alloc(s, Gfp::ZERO).expect("memory").as_ptr())
            .collect();
        assert!(
            zs.iter().any(|p| ps.contains(p)),
            "the freed objects are reused"
        );
        for &p in &zs {
            // SAFETY: ours, 200 bytes.
            let bytes = unsafe { std::slice::from_raw_parts(p, 200) };
            assert!(bytes.iter().all(|&b| b == 0), "round {round}: not zero");
            // SAFETY: an object of `s`, freed once.
            unsafe { h.kmem_cache_free(s, std::ptr::NonNull::new(p).unwrap()) };
        }
    }
}

#[test]
fn kmem_cache_free_takes_only_its_own_caches_objects() {
    // The typed free's fast path knows the object's cache from its page's tag alone
    // (compared with the cache's inline tag): an object of another cache of the same
    // size, or of a debug cache off the fast path, must be refused there and by the
    // regular path after it, and never handed out by the wrong cache.
    let h = heap();
    let a = h
        .kmem_cache_create("tag-a", 48, 8, SlabFlags::empty(), None)
        .unwrap();
    let b = h
        .kmem_cache_create("tag-b", 48, 8, SlabFlags::empty(), None)
        .unwrap();
    let dbg = h
        .kmem_cache_create("tag-red", 48, 8, SlabFlags::RED_ZONE, None)
        .unwrap();
    // Objects from the caches' slabs, not KFENCE samples (those sit outside the span,
    // on pages of their own).
    let slab_object = |s| loop {
        let p = h.kmem_cache_alloc(s, Gfp::KERNEL).unwrap();
        if h.page_allocator().in_span(p.as_ptr()) {
            break p;
        }
        // SAFETY: ours, freed once.
        unsafe { h.kmem_cache_free(s, p) };
    };
    let p = slab_object(a);
    let q = slab_object(dbg);
    // SAFETY: the misuse under test: neither object is `b`'s, so neither is freed.
    unsafe {
        assert!(!h.kmem_cache_free(b, p));
        assert!(!h.kmem_cache_free(b, q));
    }
    // SAFETY: as above: `p` is not the debug cache's.
    assert!(!unsafe { h.kmem_cache_free(dbg, p) });
    let objs: Vec<_> = (0..400)
        .map(|_| h.kmem_cache_alloc(b, Gfp::KERNEL).unwrap())
        .collect();
    assert!(!objs.contains(&p) && !objs.contains(&q));
    // SAFETY: each object goes back to its own cache, once.
    unsafe {
        assert!(h.kmem_cache_free(a, p));
        assert!(h.kmem_cache_free(dbg, q));
        for o in objs {
            assert!(h.kmem_cache_free(b, o));
        }
    }
    for s in [a, b, dbg] {
        h.kmem_cache_shrink(s);
        // SAFETY: nobody else uses these caches.
        assert_eq!(unsafe { h.kmem_cache_destroy(s) }, Ok(()));
    }
}
