//! Per-CPU mode with restartable sequences (`KMEM_PERCPU=cpu-rseq`): one CPU area per
//! CPU; allocations and frees on the CPU slab pop and push in an rseq critical
//! section that commits with a plain store, everything else under the area's local
//! lock, which takes a CPU freelist or sheaf top with an rseq section on that CPU, or
//! from another CPU with a fence (`membarrier`). Where glibc
//! registers no rseq area the heap falls back (and the tests check that).

const MODE: kmem::config::PerCpuMode = kmem::config::PerCpuMode::CpuRseq;

mod common;

include!("percpu/tests.rs");

/// Whether the heap runs in per-CPU rseq mode here. Without restartable sequences on
/// this machine it says so: the other modes' binaries test what runs instead.
fn runs_rseq() -> bool {
    let on = heap().percpu_mode() == PerCpuMode::CpuRseq;
    if !on {
        println!("rseq unavailable");
    }
    on
}

/// The restartable sequences' pop takes the spare first (where the frees went), so a
/// free that finds the spare full trades it at the barn instead of swapping the two
/// under the lock. A thread allocating and freeing one 16 KiB block at a time (sheaves
/// of two objects) then runs without the slow path; with the swap, once both sheaves
/// were full every free swapped (`workloads` medium: 125,000 swaps in 125,000 pairs).
#[test]
fn a_medium_pair_loop_swaps_no_sheaves_under_the_lock() {
    use kmem_core::slab::SlubStat;
    let _s = setup();
    if !runs_rseq() {
        return;
    }
    let h = heap();
    let size = 16 << 10;
    let s = h.kmem().kmalloc_cache(size, Gfp::KERNEL).unwrap();
    assert!(s.config().sheaf_capacity <= 4);
    let swaps = || s.stat_sum(h.kmem().pages.cpu_areas().iter(), SlubStat::SheafSwap);
    // Both sheaves of this CPU full, and more.
    let held: Vec<*mut u8> = (0..16)
        .map(|_| h.kmalloc(size, Gfp::KERNEL).unwrap().as_ptr())
        .collect();
    for p in held {
        // SAFETY: ours, freed once.
        assert!(unsafe { h.kfree(p) });
    }
    let before = swaps();
    let n = 20_000u64;
    for i in 0..n {
        let p = h.kmalloc(size, Gfp::KERNEL).unwrap().as_ptr();
        // SAFETY: a fresh block of `size` bytes.
        unsafe { p.cast::<u64>().write(i) };
        // SAFETY: ours, freed once.
        assert!(unsafe { h.kfree(p) });
    }
    // A thread that moves to another CPU meets that CPU's sheaves as they are: a few
    // swaps may come with each move, never one a pair.
    let swapped = swaps() - before;
    assert!(swapped < n / 100, "{swapped} swaps in {n} pairs");
}

/// Runs `f` pinned to the CPU the thread runs on now (one it may run on), so that
/// the calls in `f` meet one CPU's sheaves.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn on_this_cpu<R>(f: impl FnOnce() -> R) -> R {
    let cpu = kmem::platform::linux::current_cpu();
    kmem::platform::rseq::on_cpu(cpu, f)
        .ran()
        .expect("pinned to the current CPU")
}

/// The restartable pop takes the spare sheaf before the main one: an allocation
/// right after a free gets the object just freed (its line still in the cache), even
/// while the main sheaf holds objects. On one CPU, so that both calls meet the same
/// sheaves.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn the_pop_hands_back_the_object_freed_last() {
    let _s = setup();
    if !runs_rseq() {
        return;
    }
    let h = heap();
    let reused = on_this_cpu(|| {
        let mut reused = 0;
        for round in 0..64u64 {
            // Two objects from the main sheaf (refilled if need be), so that it is not
            // empty when the free comes; the first goes back.
            let a = h.kmalloc(96, Gfp::KERNEL).unwrap().as_ptr();
            let b = h.kmalloc(96, Gfp::KERNEL).unwrap().as_ptr();
            // SAFETY: fresh objects of 96 bytes.
            unsafe { a.cast::<u64>().write(round) };
            // SAFETY: ours, freed once.
            assert!(unsafe { h.kfree(a) });
            let c = h.kmalloc(96, Gfp::KERNEL).unwrap().as_ptr();
            reused += (c == a) as u32;
            for p in [b, c] {
                // SAFETY: ours, each freed once.
                assert!(unsafe { h.kfree(p) });
            }
        }
        reused
    });
    // A preemption between the free and the allocation may move an object aside now
    // and then (a restart, a drain); the free that went to the spare comes straight
    // back otherwise.
    assert!(
        reused >= 60,
        "{reused} of 64 allocations got the object freed last"
    );
}

/// The CPU table's entry for a CPU without an area is the zero area, not null, so the
/// sequences read it with no test: to each of them it is empty sheaves with no room and
/// an empty freelist (nothing popped, nothing pushed, nothing written), and the heap
/// then takes its locked path, which makes the CPU's area. The zero area stays zero.
/// (The sequences exist on x86_64 Linux only.)
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn a_cpu_without_an_area_reads_as_empty_to_every_sequence() {
    use kmem::platform::rseq::{self, Pushed};
    use kmem_core::percpu::{CPU_AREA_SIZE, ZERO_CPU_AREA};
    let _s = setup();
    if !runs_rseq() {
        return;
    }
    let h = heap();
    let area = rseq::area().expect("registered");
    // A region of CPU areas as the heap's is before any CPU's first use: zero bytes
    // (calloc's fresh pages: untouched, nothing resident).
    let region = vec![0u8; rseq::TABLE_LEN * CPU_AREA_SIZE];
    let t = region.as_ptr();
    let s = h.kmem().kmalloc_cache(64, Gfp::KERNEL).unwrap();
    let cfg = s.config();
    let obj = h.kmalloc(64, Gfp::KERNEL).unwrap().as_ptr();
    let base = obj as usize & !(cfg.slab_bytes() - 1);
    // SAFETY: `area` is this thread's registration; every CPU's place in `region` is
    // zero bytes, whose words at any cache's offset read as its (empty) per-CPU
    // state; `obj`
    // is an object of `s` that we own, and a push that says `No` leaves it ours.
    unsafe {
        assert_eq!(rseq::sheaf_pop_at(area, t, cfg.cpu_offset), 0);
        assert_eq!(rseq::sheaf_pop(area, t, cfg), 0);
        assert_eq!(
            rseq::sheaf_push_at(area, t, cfg.cpu_offset, obj as usize),
            Pushed::No
        );
        assert_eq!(rseq::pop(area, t, cfg), 0);
        assert_eq!(rseq::push(area, t, cfg, obj as usize, base), Pushed::No);
    }
    assert!(ZERO_CPU_AREA.is_zero());
    // SAFETY: still ours (no push took it), freed once.
    assert!(unsafe { h.kfree(obj) });
    // Through the heap, on every CPU this thread may run on: the first operations there
    // met the zero area (or an area made by an earlier test) and went on as usual.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut ran = 0;
    for cpu in 0..cpus {
        let done = rseq::on_cpu(cpu, || {
            let ps: Vec<*mut u8> = (0..64)
                .map(|i| h.kmalloc(8 << (i % 8), Gfp::KERNEL).unwrap().as_ptr())
                .collect();
            for p in ps {
                // SAFETY: ours, freed once.
                assert!(unsafe { h.kfree(p) });
            }
        });
        ran += usize::from(done.ran().is_some());
    }
    assert!(ran > 0);
    assert!(ZERO_CPU_AREA.is_zero());
}

/// The restartable pop's size tables are indexed by the size itself: every size up to
/// 1 KiB names the `kmem_cache_cpu` of its kmalloc class (and of C's `malloc` class)
/// when that cache runs on the sequences, else the CPU areas' zero line (never 0, so
/// the pop tests no offset); larger sizes have no entry. The free's target comes from
/// the object's page tag, the same tag table thread mode's free reads: every object of
/// a slab, in its first page or a tail page, names its cache's `kmem_cache_cpu`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn the_size_tables_and_the_page_tags_name_each_class_sheaves() {
    use kmem_core::kmalloc::malloc_class_size;
    use kmem_core::page::CPU_AREA_ZERO_LINE;
    use kmem_core::slab::FastPath;
    let _s = setup();
    if !runs_rseq() {
        return;
    }
    let h = heap();
    let k = h.kmem();
    let expected = |size: usize| {
        let cfg = k.kmalloc_cache(size.max(1), Gfp::KERNEL).unwrap().config();
        match cfg.fast {
            FastPath::SheafRseq => cfg.cpu_offset,
            _ => CPU_AREA_ZERO_LINE,
        }
    };
    let mut on_sequences = 0;
    for size in 0..=1024usize {
        assert_eq!(
            k.kmalloc_rseq_offset(size),
            Some(expected(size)),
            "kmalloc({size})"
        );
        let c = malloc_class_size(size);
        assert_eq!(
            k.malloc_rseq_offset(size),
            Some(expected(c)),
            "malloc({size})"
        );
        on_sequences += usize::from(expected(size) != CPU_AREA_ZERO_LINE);
    }
    assert_eq!(
        on_sequences, 1025,
        "every small class runs on the sequences"
    );
    assert_eq!(k.kmalloc_rseq_offset(1025), None);
    assert_eq!(k.malloc_rseq_offset(4096), None);
    for size in [8usize, 96, 256, 1024] {
        let cfg = k.kmalloc_cache(size, Gfp::KERNEL).unwrap().config();
        let objs: Vec<*mut u8> = (0..2 * cfg.objects)
            .map(|_| h.kmalloc(size, Gfp::KERNEL).unwrap().as_ptr())
            .collect();
        let mut in_tails = 0;
        // (KFENCE's samples lie outside the span, in its pool.)
        for &p in objs.iter().filter(|&&p| k.pages.in_span(p)) {
            assert_eq!(
                k.slub().rseq_free_target(p),
                Some(cfg.cpu_offset),
                "kmalloc-{size}"
            );
            in_tails += usize::from(p as usize & (cfg.slab_bytes() - 1) >= kmem::PAGE_SIZE);
        }
        assert_eq!(
            in_tails > 0,
            cfg.order > 0,
            "kmalloc-{size}: order {}",
            cfg.order
        );
        for p in objs {
            // SAFETY: ours, freed once.
            assert!(unsafe { h.kfree(p) });
        }
    }
    // A block past the kmalloc caches is no slab: its page names no sheaf.
    let large = 2 * kmem_core::kmalloc::KMALLOC_MAX_CACHE_SIZE;
    let big = h.kmalloc(large, Gfp::KERNEL).unwrap().as_ptr();
    let target = k.slub().rseq_free_target(big);
    assert!(
        target.is_none() || target == Some(CPU_AREA_ZERO_LINE),
        "{target:?}"
    );
    // SAFETY: ours, freed once.
    assert!(unsafe { h.kfree(big) });
}

/// `kmem_cache_alloc` and `kmem_cache_free` take the restartable pop and push too
/// (after the thread-mode attempt, out of line; the free's target from the page tag,
/// checked against the cache it is given): on one CPU, an allocation right after a
/// free gets the object just freed, and the objects in use are all distinct.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn a_kmem_cache_pair_reuses_the_object_freed_last() {
    let _s = setup();
    if !runs_rseq() {
        return;
    }
    let h = heap();
    let s = h
        .kmem_cache_create("rseq_cache_pair", 80, 8, kmem::SlabFlags::empty(), None)
        .unwrap();
    let reused = on_this_cpu(|| {
        let held: Vec<_> = (0..200)
            .map(|_| h.kmem_cache_alloc(s, Gfp::KERNEL).unwrap())
            .collect();
        let mut addrs: Vec<usize> = held.iter().map(|p| p.as_ptr() as usize).collect();
        addrs.sort_unstable();
        addrs.dedup();
        assert_eq!(addrs.len(), held.len(), "an object handed out twice");
        let mut reused = 0;
        for (i, &o) in held.iter().enumerate() {
            // SAFETY: ours, freed once.
            assert!(unsafe { h.kmem_cache_free(s, o) });
            let again = h.kmem_cache_alloc(s, Gfp::KERNEL).unwrap();
            reused += u32::from(again == o);
            // SAFETY: a fresh object of 80 bytes.
            unsafe { again.as_ptr().cast::<u64>().write(i as u64) };
            // SAFETY: ours, freed once.
            assert!(unsafe { h.kmem_cache_free(s, again) });
        }
        reused
    });
    // A preemption between the free and the allocation may move an object aside now
    // and then; otherwise the free that went to the spare comes straight back.
    assert!(
        reused >= 190,
        "{reused} of 200 allocations got the object freed last"
    );
}

/// `KmemAlloc` (`GlobalAlloc`, what a Rust program's `Box` and `Vec` run) takes the
/// restartable pop and push right after its thread-mode attempt misses, on the fast
/// word that attempt loaded: on one CPU an allocation right after a free gets the
/// object just freed, the objects in use are all distinct, a zeroed layout comes back
/// zeroed although the object it pops was dirtied, and an aligned layout pops from
/// the class of its rounded size, aligned.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn the_global_allocator_pops_and_pushes_the_cpu_s_sheaves() {
    use std::alloc::{GlobalAlloc, Layout};
    let _s = setup();
    if !runs_rseq() {
        return;
    }
    let a = kmem::KmemAlloc;
    let (reused, zeroed_reused) = on_this_cpu(|| {
        for layout in [
            Layout::from_size_align(48, 8).unwrap(),
            Layout::from_size_align(40, 32).unwrap(),
        ] {
            let held: Vec<*mut u8> = (0..200)
                // SAFETY: non-zero sizes; each block freed once below with its layout.
                .map(|_| unsafe { a.alloc(layout) })
                .collect();
            let mut addrs: Vec<usize> = held.iter().map(|&p| p as usize).collect();
            assert!(addrs
                .iter()
                .all(|&p| p != 0 && p.is_multiple_of(layout.align())));
            addrs.sort_unstable();
            addrs.dedup();
            assert_eq!(addrs.len(), held.len(), "a block handed out twice");
            for p in held {
                // SAFETY: allocated above with `layout`.
                unsafe { a.dealloc(p, layout) };
            }
        }
        let layout = Layout::from_size_align(48, 8).unwrap();
        let (mut reused, mut zeroed_reused) = (0, 0);
        for i in 0..200u8 {
            // SAFETY: a non-zero size; the block is written within it, freed once.
            let p = unsafe { a.alloc(layout) };
            assert!(!p.is_null());
            // SAFETY: as above.
            unsafe {
                p.write_bytes(i | 1, layout.size());
                a.dealloc(p, layout);
            }
            // SAFETY: as above.
            let q = unsafe { a.alloc(layout) };
            reused += u32::from(q == p);
            // SAFETY: as above.
            unsafe {
                q.write_bytes(0xff, layout.size());
                a.dealloc(q, layout);
            }
            // SAFETY: as above; read within the block.
            let z = unsafe { a.alloc_zeroed(layout) };
            zeroed_reused += u32::from(z == q);
            // SAFETY: as above.
            let bytes = unsafe { std::slice::from_raw_parts(z, layout.size()) };
            assert!(
                bytes.iter().all(|&b| b == 0),
                "a zeroed block held {bytes:?}"
            );
            // SAFETY: as above.
            unsafe { a.dealloc(z, layout) };
        }
        (reused, zeroed_reused)
    });
    // A preemption between the free and the allocation may move a block aside now
    // and then; otherwise the free that went to the spare comes straight back.
    assert!(
        reused >= 190,
        "{reused} of 200 allocations got the block freed last"
    );
    assert!(
        zeroed_reused >= 190,
        "{zeroed_reused} of 200 zeroed allocations got the dirtied block back"
    );
}

/// A flush from another CPU takes a CPU's sheaves with a fence (`membarrier`'s rseq
/// restart on that CPU) while a thread there pops and pushes: nothing handed out
/// twice, nothing changed while held, and the fences ran.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn another_cpu_s_sheaves_are_taken_with_a_fence() {
    use kmem::platform::rseq;
    let _s = setup();
    if !runs_rseq() {
        return;
    }
    if !rseq::can_fence() {
        // A kernel before 5.10, or a policy that refuses `membarrier`: takes pin.
        println!("no fence here");
        return;
    }
    let Some(fences) = common::takes_under_load(64, 200_000) else {
        println!("one CPU: no other CPU to take from");
        return;
    };
    if rseq::allowed(0) && rseq::allowed(1) {
        assert!(fences > 0, "no take reached the other CPU");
    }
    println!("{fences} fences");
}

/// The CPU areas of per-CPU rseq mode take no pages of the page allocator (they sit in
/// a region of their own), so the statistics count none of those pages as theirs:
/// `active` is at least the pages allocated (before, each area's 64 KiB came off it,
/// down to 0 on a small heap); and `mapped` counts the region.
#[test]
fn the_statistics_count_the_region_s_cpu_areas_as_metadata_only() {
    let _s = setup();
    if !runs_rseq() {
        return;
    }
    let h = heap();
    let held: Vec<*mut u8> = (0..1000)
        .map(|_| h.kmalloc(64, Gfp::KERNEL).unwrap().as_ptr())
        .collect();
    let pa = h.page_allocator();
    let pages = pa.nr_allocated_pages();
    let sections: usize = (0..pa.nr_nodes())
        .map(|nid| pa.zone(nid).nr_sections())
        .sum();
    let c = kmem::stats::counters();
    assert!(pa.cpu_areas().nr_areas() > 0);
    assert!(
        c.active >= pages * kmem_core::PAGE_SIZE,
        "{c:?}, {pages} pages"
    );
    let region = kmem::heap::MAX_CPU_IDS * kmem_core::percpu::CPU_AREA_SIZE;
    assert!(
        c.mapped >= sections * kmem_core::page::SECTION_SIZE + region,
        "{c:?}, {sections} sections"
    );
    for p in held {
        // SAFETY: ours, freed once.
        assert!(unsafe { h.kfree(p) });
    }
}
