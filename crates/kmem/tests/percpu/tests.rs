// Per-CPU mode tests, included by `percpu_rseq.rs`, `percpu_cas.rs` and
// `percpu_lock.rs`, which set `MODE` and declare `mod common;` (the mode is fixed per
// process, so each mode is its own test binary).
//
// These binaries keep the system allocator as their global allocator, so the heap is
// first used by these tests, after they chose the mode. The tests share the process
// heap and compare page counts, so they run one at a time.

use kmem::config::PerCpuMode;
use kmem::{heap, Gfp};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// Per-CPU mode on, and this test alone.
fn setup() -> MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _ = kmem::heap::set_percpu_mode(MODE);
    assert_eq!(heap().percpu_mode(), running_mode());
    g
}

/// The mode `MODE` runs as here.
fn running_mode() -> PerCpuMode {
    kmem::platform::linux::rseq_init();
    let rseq = cfg!(target_arch = "x86_64") && kmem::platform::linux::rseq_offset().is_some();
    #[cfg(target_arch = "x86_64")]
    let cas = std::arch::is_x86_feature_detected!("cmpxchg16b");
    #[cfg(not(target_arch = "x86_64"))]
    let cas = false;
    match MODE {
        PerCpuMode::CpuLock => PerCpuMode::CpuLock,
        PerCpuMode::CpuRseq if rseq => PerCpuMode::CpuRseq,
        _ if cas => PerCpuMode::CpuCas,
        _ => PerCpuMode::CpuLock,
    }
}

/// Pages allocated from the page allocator once every per-CPU cache is emptied and
/// every empty slab freed.
fn settled_pages() -> usize {
    let h = heap();
    h.flush_cpu_caches();
    h.shrink_all();
    h.flush_cpu_caches();
    h.page_allocator().nr_allocated_pages()
}

/// The regression of "slub: Drop ->page field from kmem_cache_cpu" (patch 6/7 of
/// Christoph Lameter's "slub: Fastpath optimization (especially for RT)", December
/// 2014): slabs leaked under hackbench. Here: groups of senders and receivers pass kmalloc'd messages
/// through channels (freed on the receiving thread, often on another CPU), then every
/// per-CPU cache is flushed and every slab must be back with the page allocator.
#[test]
fn hackbench_gives_every_slab_back() {
    let _s = setup();
    let h = heap();
    let before = settled_pages();
    let areas_before = h.page_allocator().cpu_areas().nr_areas();
    const GROUPS: usize = 4;
    const PAIRS: usize = 4;
    const MESSAGES: usize = 5_000;
    std::thread::scope(|s| {
        for g in 0..GROUPS {
            for p in 0..PAIRS {
                let (tx, rx) = mpsc::sync_channel::<usize>(64);
                s.spawn(move || {
                    for i in 0..MESSAGES {
                        let size = 16 + (g * 977 + p * 131 + i * 37) % 3000;
                        let m = heap().kmalloc(size, Gfp::KERNEL).expect("memory");
                        // SAFETY: ours, `size` bytes.
                        unsafe { m.as_ptr().write_bytes((i & 0xff) as u8, size) };
                        tx.send(m.as_ptr() as usize | (size << 48)).unwrap();
                    }
                });
                s.spawn(move || {
                    for (i, v) in rx.iter().enumerate() {
                        let p = (v & ((1 << 48) - 1)) as *mut u8;
                        let size = v >> 48;
                        // SAFETY: the sender's message, handed over; read then freed.
                        unsafe {
                            assert_eq!(*p, (i & 0xff) as u8);
                            assert_eq!(*p.add(size - 1), (i & 0xff) as u8);
                            assert!(heap().kfree(p));
                        }
                    }
                });
            }
        }
    });
    let new_areas = h.page_allocator().cpu_areas().nr_areas() - areas_before;
    let after = settled_pages();
    // A new CPU area takes pages of the page allocator, but in per-CPU rseq mode,
    // where the areas have a region of their own.
    let area_pages = match heap().percpu_mode() {
        PerCpuMode::CpuRseq => 0,
        _ => 1 << kmem_core::percpu::CPU_AREA_ORDER,
    };
    assert_eq!(
        after,
        before + new_areas * area_pages,
        "slab pages leaked ({new_areas} new CPU areas)"
    );
    assert!(h.validate().is_empty());
}

/// Many threads, few areas: one per CPU, whatever the number of threads.
#[test]
fn areas_follow_cpus_not_threads() {
    let _s = setup();
    let h = heap();
    std::thread::scope(|s| {
        for t in 0..64 {
            s.spawn(move || {
                let mut v = Vec::new();
                for i in 0..200 {
                    v.push(heap().kmalloc(32 + (t * 7 + i) % 500, Gfp::KERNEL).unwrap());
                }
                for p in v {
                    // SAFETY: allocated above.
                    unsafe { heap().kfree(p.as_ptr()) };
                }
            });
        }
    });
    // Owned areas: one per CPU (an area made by a thread that lost the race to
    // install its CPU's area went back to the pool, unowned).
    let areas = h.page_allocator().cpu_areas().nr_owned();
    assert!(
        areas <= common::configured_cpus(),
        "{areas} CPU areas for {} CPUs",
        common::configured_cpus()
    );
    // The bytes per-CPU caches hold are bounded by the CPU count too.
    assert!(h.percpu_held_bytes() <= common::configured_cpus() * (32 << 10) + (8 << 20));
}

/// Nested allocations inside an operation (a huge mapping's descriptor is kmalloc'd
/// while the mapping is made) reuse the held area instead of waiting for themselves;
/// every path of the global allocator works in this mode.
#[test]
fn every_allocation_path_works() {
    let _s = setup();
    let h = heap();
    for &(size, align) in &[
        (1usize, 1usize),
        (100, 8),
        (5000, 64),
        (20_000, 8),
        (3 << 20, 4096),
        (9 << 20, 8),
        (100, 1 << 16),
    ] {
        let layout = std::alloc::Layout::from_size_align(size, align).unwrap();
        let p = h.alloc(layout);
        assert!(
            !p.is_null() && (p as usize).is_multiple_of(align),
            "{size}/{align}"
        );
        // SAFETY: ours, `size` bytes.
        unsafe {
            p.write_bytes(0x5a, size);
            let q = h.realloc(p, layout, size * 2 + 1);
            assert!(!q.is_null());
            assert_eq!(*q.add(size - 1), 0x5a);
            assert!(h.dealloc(q));
        }
    }
    let cache = kmem::KmemCache::<[u64; 5]>::new("percpu_obj").unwrap();
    let boxes: Vec<_> = (0..1000).map(|i| cache.alloc([i; 5]).unwrap()).collect();
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(boxes.iter().map(|b| b[4]).sum::<u64>(), 999 * 500));
    });
    drop(boxes);
}

/// The mode is fixed once the heap runs.
#[test]
fn the_mode_cannot_change_after_start() {
    let _s = setup();
    assert_eq!(
        kmem::heap::set_percpu_mode(PerCpuMode::Thread),
        Err(running_mode())
    );
    assert_eq!(heap().percpu_mode(), running_mode());
}

/// Memory cgroups in per-CPU mode: stocks live in CPU areas shared by threads; a
/// flush drains them all and the charges come back to zero.
#[test]
fn memcg_charges_balance_across_shared_areas() {
    let _s = setup();
    let g = kmem::MemCgroup::new("percpu-tenant").unwrap();
    let (tx, rx) = mpsc::channel::<usize>();
    std::thread::scope(|s| {
        let g = &g;
        s.spawn(move || {
            let _in = g.enter();
            for i in 0..20_000 {
                let p = heap().kmalloc(24 + i % 200, Gfp::KERNEL).unwrap();
                tx.send(p.as_ptr() as usize).unwrap();
            }
        });
        s.spawn(move || {
            for p in rx {
                // SAFETY: handed over by the sender.
                unsafe { heap().kfree(p as *mut u8) };
            }
        });
    });
    heap().flush_cpu_caches();
    let st = g.stat();
    assert_eq!(st.slab_unreclaimable, 0, "{st:?}");
    assert!(g.usage() <= kmem::PAGE_SIZE, "{st:?}");
}

/// Many threads on few CPUs pop and push on the same CPU freelists at once (the
/// lockless CAS races, and the lock holders' refills and flushes between them): every
/// object carries its owner's tag over all its bytes while held, so an object handed
/// out twice is caught when the first owner checks it.
#[test]
fn racing_threads_never_share_an_object() {
    let _s = setup();
    let h = heap();
    let rounds = if common::stressing() {
        200_000
    } else {
        20_000
    };
    std::thread::scope(|s| {
        for t in 0..8u64 {
            s.spawn(move || {
                let mut held: Vec<(*mut u64, usize, u64)> = Vec::with_capacity(16);
                for r in 0..rounds {
                    let size = [8usize, 64, 192, 1024][(r as usize + t as usize) % 4];
                    for k in 0..16u64 {
                        let p = heap().kmalloc(size, Gfp::KERNEL).unwrap().as_ptr() as *mut u64;
                        let tag = t << 56 | (r as u64) << 8 | k;
                        for w in 0..size / 8 {
                            // SAFETY: ours, `size` bytes, 8-aligned.
                            unsafe { p.add(w).write(tag) };
                        }
                        held.push((p, size, tag));
                    }
                    for (p, size, tag) in held.drain(..) {
                        for w in 0..size / 8 {
                            // SAFETY: still ours.
                            assert_eq!(unsafe { p.add(w).read() }, tag, "object shared");
                        }
                        // SAFETY: allocated above.
                        unsafe { heap().kfree(p.cast()) };
                    }
                }
            });
        }
    });
    assert!(h.validate().is_empty());
}

/// A thread that allocated outside any group (in rseq mode its fast paths go straight
/// to the CPU's sheaves from then on) and then enters one: every allocation inside
/// comes from the accounted caches (charged), through the kernel API and through the
/// `GlobalAlloc` front end alike, and after it leaves none does.
#[test]
fn entering_a_group_after_plain_allocations_charges() {
    let _s = setup();
    let g = kmem::MemCgroup::new("percpu-late-tenant").unwrap();
    let cache = |p: usize| {
        // SAFETY: kmalloc's caches (the only ones here) live as long as the heap.
        unsafe { heap().kmem().slub().cache_of(p as *const u8) }.map(|s| s.name().to_string())
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let h = heap();
            let layout = std::alloc::Layout::from_size_align(64, 8).unwrap();
            let round = |n| -> Vec<usize> {
                (0..n)
                    .flat_map(|_| {
                        let a = h.kmalloc(64, Gfp::KERNEL).unwrap().as_ptr() as usize;
                        let b = kmem::heap::alloc_layout(layout, false) as usize;
                        assert_ne!(b, 0);
                        [a, b]
                    })
                    .collect()
            };
            let plain = round(1000);
            let inside = {
                let _in = g.enter();
                round(1000)
            };
            let outside = round(1000);
            for &p in plain.iter().chain(&outside) {
                assert_eq!(cache(p).as_deref(), Some("kmalloc-64"));
            }
            for &p in &inside {
                assert_eq!(cache(p).as_deref(), Some("kmalloc-cg-64"), "not charged");
            }
            for p in plain.into_iter().chain(inside).chain(outside) {
                // SAFETY: allocated above, freed once.
                unsafe { h.kfree(p as *mut u8) };
            }
        });
    });
    heap().flush_cpu_caches();
    assert!(g.usage() <= kmem::PAGE_SIZE, "{:?}", g.stat());
}

/// Misuse on the per-CPU paths (in rseq mode the front ends' restartable push, which
/// goes from the object's page to the CPU's sheaf): an interior pointer, an object of
/// another cache passed to `kmem_cache_free`, and a second free of the object on top
/// of the CPU's sheaf are each refused (false, with a report) and leave nothing
/// handed out twice. Run on one CPU, so that both frees of the object meet on one
/// sheaf.
#[test]
fn misuse_is_refused_on_the_per_cpu_paths() {
    let _s = setup();
    let h = heap();
    let body = || {
        let a = h
            .kmem_cache_create("percpu_misuse_a", 48, 8, kmem::SlabFlags::empty(), None)
            .unwrap();
        let b = h
            .kmem_cache_create("percpu_misuse_b", 48, 8, kmem::SlabFlags::empty(), None)
            .unwrap();
        // Frees first, so that the CPU's spare sheaves are installed and have room:
        // the frees below meet the fast paths.
        let warm: Vec<_> = (0..100)
            .map(|_| {
                (
                    h.kmalloc(64, Gfp::KERNEL).unwrap(),
                    h.kmem_cache_alloc(a, Gfp::KERNEL).unwrap(),
                )
            })
            .collect();
        for &(k, o) in &warm[..50] {
            // SAFETY: allocated above, freed once.
            unsafe {
                assert!(h.kfree(k.as_ptr()));
                assert!(h.kmem_cache_free(a, o));
            }
        }
        let p = h.kmalloc(64, Gfp::KERNEL).unwrap().as_ptr();
        let o = h.kmem_cache_alloc(a, Gfp::KERNEL).unwrap();
        // SAFETY: each call is refused (reported) without touching the object, and
        // the objects are freed once below.
        unsafe {
            assert!(!h.kfree(p.add(8)), "an interior pointer was freed");
            assert!(
                !h.kmem_cache_free(b, o),
                "an object of another cache was freed"
            );
            assert!(h.kfree(p));
            assert!(!h.kfree(p), "a double free on the sheaf's top was taken");
            assert!(h.kmem_cache_free(a, o));
            assert!(
                !h.kmem_cache_free(a, o),
                "a double free on the sheaf's top was taken (kmem_cache_free)"
            );
        }
        // Nothing was taken twice: as many distinct objects come back as there are.
        let again: Vec<usize> = (0..200)
            .map(|_| h.kmalloc(64, Gfp::KERNEL).unwrap().as_ptr() as usize)
            .collect();
        let mut sorted = again.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), again.len(), "an object handed out twice");
        assert!(!again.contains(&(p as usize + 8)), "the interior pointer came back");
        for q in again {
            // SAFETY: allocated above, freed once.
            unsafe { assert!(h.kfree(q as *mut u8)) };
        }
        for &(k, o) in &warm[50..] {
            // SAFETY: allocated above, freed once.
            unsafe {
                assert!(h.kfree(k.as_ptr()));
                assert!(h.kmem_cache_free(a, o));
            }
        }
    };
    // The CPU this thread runs on now is one it may run on.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    assert_eq!(
        kmem::platform::rseq::on_cpu(kmem::platform::linux::current_cpu(), body),
        kmem::platform::rseq::OnCpu::Ran(()),
        "pinned to the CPU it runs on"
    );
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    body();
}

/// A free of an object whose slab has no object in use and is kept whole for the next
/// refill (its objects all went back to it, past the node's `min_partial` empty slabs)
/// is a double free: refused and reported on every path, the restartable sequences'
/// too, which once pushed it onto the CPU's spare sheaf to be handed out beside the
/// slab's own copy.
#[test]
fn a_free_into_a_kept_slab_is_refused() {
    use std::collections::HashSet;
    let _s = setup();
    let h = heap();
    let a = h
        .kmem_cache_create("percpu_emptied_df", 1024, 8, kmem::SlabFlags::empty(), None)
        .unwrap();
    let per = a.config().objects;
    let n = 16 * per;
    let body = || {
        // A slab's worth first, half of it freed, so that this CPU's spare sheaf is
        // installed and has room: the frees below meet the fast paths.
        let warm: Vec<_> = (0..per)
            .map(|_| h.kmem_cache_alloc(a, Gfp::KERNEL).unwrap())
            .collect();
        for &p in &warm[..per / 2] {
            // SAFETY: ours, freed once.
            assert!(unsafe { h.kmem_cache_free(a, p) });
        }
        let objs: Vec<_> = (0..n)
            .map(|_| h.kmem_cache_alloc(a, Gfp::KERNEL).unwrap())
            .collect();
        // Straight to their slabs (no CPU: no sheaf takes them), which empty.
        for &p in &objs {
            // SAFETY: ours, freed once.
            assert!(unsafe { h.kmem().slub().free(None, a, p) });
        }
        let emptied: HashSet<usize> = objs.iter().map(|p| p.as_ptr() as usize).collect();
        // The first object of each slab kept whole (past the node's `min_partial`
        // empty slabs: its pages name no sheaf, so the inline pushes refuse it and
        // the paths behind them decide), freed again by `kmem_cache_free` and `kfree`.
        // (An empty slab still on the partial list names its sheaf: a second free of
        // its object goes onto the sheaf undetected, as in the kernel.)
        let kept = |p: &&std::ptr::NonNull<u8>| {
            let page = h.kmem().pages.virt_to_slab_page(p.as_ptr()).unwrap();
            page.sheaf_tag() == 0
        };
        let victims: Vec<_> = objs.iter().step_by(per).filter(kept).collect();
        assert!(victims.len() >= 4, "{} kept slabs", victims.len());
        for (i, p) in victims.into_iter().enumerate() {
            // SAFETY: the bug under test; a refused free changes nothing.
            let taken = unsafe {
                if i % 2 == 0 {
                    h.kmem_cache_free(a, *p)
                } else {
                    h.kfree(p.as_ptr())
                }
            };
            assert!(!taken, "a free into a kept slab was taken ({i})");
        }
        // Every object handed out once: as many as were freed, all distinct.
        let again: Vec<_> = (0..n + per / 2)
            .map(|_| h.kmem_cache_alloc(a, Gfp::KERNEL).unwrap())
            .collect();
        let distinct: HashSet<usize> = again.iter().map(|p| p.as_ptr() as usize).collect();
        assert_eq!(distinct.len(), again.len(), "an object handed out twice");
        assert!(distinct.len() >= emptied.len());
        for p in again.into_iter().chain(warm[per / 2..].iter().copied()) {
            // SAFETY: ours, freed once.
            assert!(unsafe { h.kmem_cache_free(a, p) });
        }
    };
    // The CPU this thread runs on now is one it may run on.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    assert_eq!(
        kmem::platform::rseq::on_cpu(kmem::platform::linux::current_cpu(), body),
        kmem::platform::rseq::OnCpu::Ran(()),
        "pinned to the CPU it runs on"
    );
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    body();
    // SAFETY: every object of the cache is freed.
    unsafe { h.kmem_cache_destroy(a) }.unwrap();
}
