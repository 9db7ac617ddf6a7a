#![allow(clippy::unnecessary_literal_unwrap)] // `cpu` is an Option on purpose: APIs take one.
//! Memory cgroups through the public API of `Kmem`: charges against a model of live
//! bytes, limits, the hierarchy, removal with live objects, cross-thread frees.

mod common;

use common::{config, kmem, Rng, TestPlatform};
use kmem_core::memcontrol::{MemCgroup, MemcgError, MemcgEvent, MemcgStat};
use kmem_core::{CpuRef, Gfp, Kmem, PAGE_SIZE};
use std::collections::HashMap;
use std::sync::Mutex;

type K = Kmem<TestPlatform>;

/// Runs `f` with a CPU area owned by the calling thread, then gives the area back
/// (its CPU-offline flush drains the memcg stock).
fn with_cpu<R>(k: &'static K, f: impl FnOnce(Option<CpuRef<'_>>) -> R) -> R {
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread until put back below.
    let r = f(Some(unsafe { CpuRef::new(area) }));
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(area) };
    r
}

/// The bytes an allocation of `size` is charged: its kmalloc class, or its pages.
fn charged_size(k: &K, p: *mut u8) -> usize {
    // SAFETY: the test's own live allocation (or null, or not the heap's).
    unsafe { k.ksize(p) }
}

/// 1 KiB objects charged to `g` until a limit refuses one (fewer than 1,000).
fn fill_to_limit(k: &K, cpu: Option<CpuRef<'_>>, g: &MemCgroup) -> Vec<*mut u8> {
    let mut held = Vec::new();
    while let Some(p) = k.memcg().kmalloc_objcg(cpu, 1024, Gfp::KERNEL, g.objcg()) {
        held.push(p.as_ptr());
        assert!(held.len() < 1000);
    }
    held
}

fn slab_and_pages(cg: &MemCgroup) -> isize {
    cg.stat(MemcgStat::SlabUnreclaimable)
        + cg.stat(MemcgStat::SlabReclaimable)
        + cg.stat(MemcgStat::KmemPages)
}

/// Random alloc/free across threads and groups (a hierarchy of three), objects freed
/// by other threads than their allocator; afterwards every group's statistics equal
/// the live bytes charged to it and its descendants, and its usage covers them
/// within a page per group. Then everything is freed and nothing stays charged.
fn charges_follow_live_bytes(stock: bool) {
    let k = kmem(2, config(1, 0));
    let root = k.memcg().root_mem_cgroup();
    let a = k.memcg().mem_cgroup_create(None, root, "a").unwrap();
    let b = k.memcg().mem_cgroup_create(None, a, "b").unwrap();
    let c = k.memcg().mem_cgroup_create(None, root, "c").unwrap();
    let groups: [&'static MemCgroup; 3] = [a, b, c];
    with_cpu(k, |cpu| k.memcg().set_memcg_stock(cpu, stock));
    // Live objects: address -> (group index, charged bytes), shared by the threads.
    let live: Mutex<HashMap<usize, (usize, usize)>> = Mutex::new(HashMap::new());
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let live = &live;
            s.spawn(move || {
                with_cpu(k, |cpu| {
                    let mut rng = Rng(0x9e37_79b9 + t * 7919);
                    for _ in 0..6000 {
                        let r = rng.next();
                        if r % 5 < 3 {
                            let g = (r >> 8) as usize % 3;
                            let size = match (r >> 16) % 10 {
                                0 => 8192 + ((r >> 24) as usize % 20000),
                                1..=3 => 1 + (r >> 24) as usize % 4096,
                                _ => 1 + (r >> 24) as usize % 256,
                            };
                            let p = k
                                .memcg()
                                .kmalloc_objcg(cpu, size, Gfp::KERNEL, groups[g].objcg())
                                .expect("no limit set");
                            let bytes = charged_size(k, p.as_ptr());
                            live.lock().unwrap().insert(p.as_ptr() as usize, (g, bytes));
                        } else {
                            // Free a random live object, whoever allocated it.
                            let victim = {
                                let mut l = live.lock().unwrap();
                                let key = l.keys().nth((r >> 8) as usize % l.len().max(1)).copied();
                                key.map(|p| (p, l.remove(&p).unwrap()))
                            };
                            if let Some((p, _)) = victim {
                                // SAFETY: allocated above, removed from the live set.
                                assert!(unsafe { k.kfree(cpu, p as *mut u8) });
                            }
                        }
                    }
                })
            });
        }
    });
    // Every thread's stock was drained when it gave its area back.
    let live = live.into_inner().unwrap();
    let mut own = [0usize; 3];
    for &(g, bytes) in live.values() {
        own[g] += bytes;
    }
    // Hierarchical: a holds b's.
    let expect = [own[0] + own[1], own[1], own[2]];
    for (i, g) in groups.iter().enumerate() {
        assert_eq!(
            slab_and_pages(g),
            expect[i] as isize,
            "stat of {}",
            g.name()
        );
        let usage = g.usage();
        let subtree = if i == 0 { 2 } else { 1 };
        assert!(
            usage >= expect[i] && usage < expect[i] + subtree * PAGE_SIZE,
            "usage of {}: {usage} for {} live bytes",
            g.name(),
            expect[i]
        );
    }
    assert_eq!(slab_and_pages(root), (own[0] + own[1] + own[2]) as isize);
    with_cpu(k, |cpu| {
        for &p in live.keys() {
            // SAFETY: still live, ours.
            assert!(unsafe { k.kfree(cpu, p as *mut u8) });
        }
    });
    for g in groups.iter().chain([&root]) {
        assert_eq!(slab_and_pages(g), 0, "{}", g.name());
        assert_eq!(g.usage(), 0, "usage of {}", g.name());
    }
}

#[test]
fn charges_follow_live_bytes_with_the_stock() {
    charges_follow_live_bytes(true);
}

#[test]
fn charges_follow_live_bytes_without_the_stock() {
    charges_follow_live_bytes(false);
}

#[test]
fn memory_max_is_enforced_and_recovers_after_frees() {
    let k = kmem(2, config(1, 0));
    let g = k
        .memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), "limited")
        .unwrap();
    let max = 64 * 1024;
    g.set_max(max);
    with_cpu(k, |cpu| {
        let mut held = Vec::new();
        while let Some(p) = k.memcg().kmalloc_objcg(cpu, 32, Gfp::KERNEL, g.objcg()) {
            held.push(p.as_ptr());
            assert!(g.usage() <= max, "usage {} over max", g.usage());
            assert!(held.len() < 10_000, "the limit never stopped us");
        }
        // Everything fits: 64 KiB of 32-byte objects, less at most a page of stock.
        assert!(held.len() * 32 > max - PAGE_SIZE, "{} objects", held.len());
        assert!(g.events(MemcgEvent::Max) >= 1);
        assert_eq!(g.events(MemcgEvent::Oom), 1);
        // Larger requests fail too; the root and other groups are unaffected.
        assert!(k
            .memcg()
            .kmalloc_objcg(cpu, 20_000, Gfp::KERNEL, g.objcg())
            .is_none());
        let other = k
            .memcg()
            .mem_cgroup_create(cpu, k.memcg().root_mem_cgroup(), "other")
            .unwrap();
        let q = k
            .memcg()
            .kmalloc_objcg(cpu, 32, Gfp::KERNEL, other.objcg())
            .unwrap();
        // SAFETY: ours.
        unsafe { k.kfree(cpu, q.as_ptr()) };
        for p in held.drain(..held.len() / 2) {
            // SAFETY: allocated above.
            unsafe { k.kfree(cpu, p) };
        }
        let p = k
            .memcg()
            .kmalloc_objcg(cpu, 32, Gfp::KERNEL, g.objcg())
            .expect("room again after frees");
        held.push(p.as_ptr());
        for p in held {
            // SAFETY: allocated above.
            unsafe { k.kfree(cpu, p) };
        }
    });
    assert_eq!(g.usage(), 0);
}

#[test]
fn a_parent_limit_binds_its_children_and_high_counts_events() {
    let k = kmem(2, config(1, 0));
    let parent = k
        .memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), "parent")
        .unwrap();
    let child = k.memcg().mem_cgroup_create(None, parent, "child").unwrap();
    parent.set_max(128 * 1024);
    child.set_high(32 * 1024);
    with_cpu(k, |cpu| {
        let held = fill_to_limit(k, cpu, child);
        assert!(parent.usage() <= 128 * 1024);
        assert_eq!(child.usage(), parent.usage());
        assert!(
            parent.events(MemcgEvent::Max) >= 1,
            "the parent's limit stopped it"
        );
        assert!(child.events(MemcgEvent::High) >= 1, "over high, counted");
        assert!(child.usage() > 32 * 1024, "high does not fail allocations");
        for p in held {
            // SAFETY: allocated above.
            unsafe { k.kfree(cpu, p) };
        }
    });
    assert_eq!(parent.usage(), 0);
}

#[test]
fn removing_a_group_with_live_objects_reparents_them() {
    let k = kmem(2, config(1, 0));
    let parent = k
        .memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), "parent")
        .unwrap();
    let child = k.memcg().mem_cgroup_create(None, parent, "child").unwrap();
    assert_eq!(k.memcg().nr_mem_cgroups(), 2);
    with_cpu(k, |cpu| {
        let held: Vec<*mut u8> = (0..100)
            .map(|i| {
                k.memcg()
                    .kmalloc_objcg(cpu, 64 + i * 40, Gfp::KERNEL, child.objcg())
                    .unwrap()
                    .as_ptr()
            })
            .collect();
        // SAFETY: the test's own live allocation (or null, or not the heap's).
        let bytes: usize = held.iter().map(|&p| unsafe { k.ksize(p) }).sum();
        // A group with children cannot go.
        // SAFETY: a group of ours (refused).
        let busy = unsafe { k.memcg().mem_cgroup_remove(cpu, parent) };
        assert_eq!(busy, Err(MemcgError::Busy));
        let objcg = child.objcg();
        // SAFETY: ours; not used as a group afterwards (its objcg is, as objects do).
        unsafe { k.memcg().mem_cgroup_remove(cpu, child) }.unwrap();
        assert_eq!(k.memcg().nr_zombie_mem_cgroups(), 1, "kept for its objects");
        assert!(
            std::ptr::eq(objcg.memcg(), parent),
            "objcg points at the parent"
        );
        assert_eq!(slab_and_pages(parent), bytes as isize);
        assert!(parent.usage() >= bytes);
        for p in held {
            // SAFETY: allocated above.
            unsafe { k.kfree(cpu, p) };
        }
        k.memcg().memcg_drain_stock(cpu.unwrap());
        assert_eq!(slab_and_pages(parent), 0);
        assert_eq!(parent.usage(), 0);
        // The sweep runs at the next create or remove.
        let other = k
            .memcg()
            .mem_cgroup_create(cpu, k.memcg().root_mem_cgroup(), "other")
            .unwrap();
        assert_eq!(k.memcg().nr_zombie_mem_cgroups(), 0);
        // SAFETY: ours, unused from here on.
        unsafe { k.memcg().mem_cgroup_remove(cpu, other) }.unwrap();
        // SAFETY: as above; its child is gone.
        unsafe { k.memcg().mem_cgroup_remove(cpu, parent) }.unwrap();
    });
    assert_eq!(k.memcg().nr_mem_cgroups(), 0);
    assert_eq!(k.memcg().nr_zombie_mem_cgroups(), 0);
    assert_eq!(k.memcg().root_mem_cgroup().usage(), 0);
}

#[test]
fn a_free_on_another_thread_uncharges_the_group_that_was_charged() {
    let k = kmem(2, config(1, 0));
    let x = k
        .memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), "x")
        .unwrap();
    let y = k
        .memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), "y")
        .unwrap();
    let ptrs: Vec<usize> = with_cpu(k, |cpu| {
        (0..500)
            .map(|_| {
                k.memcg()
                    .kmalloc_objcg(cpu, 128, Gfp::KERNEL, x.objcg())
                    .unwrap()
                    .as_ptr() as usize
            })
            .collect()
    });
    assert_eq!(slab_and_pages(x), 500 * 128);
    std::thread::scope(|s| {
        s.spawn(|| {
            with_cpu(k, |cpu| {
                // This thread charges y meanwhile: its stock caches y, not x.
                let own = k
                    .memcg()
                    .kmalloc_objcg(cpu, 128, Gfp::KERNEL, y.objcg())
                    .unwrap();
                for &p in &ptrs {
                    // SAFETY: allocated above, handed to this thread.
                    unsafe { k.kfree(cpu, p as *mut u8) };
                }
                // SAFETY: ours.
                unsafe { k.kfree(cpu, own.as_ptr()) };
            })
        });
    });
    assert_eq!(slab_and_pages(x), 0);
    assert_eq!(x.usage(), 0);
    assert_eq!(slab_and_pages(y), 0);
    assert_eq!(y.usage(), 0);
}

#[test]
fn page_allocations_and_caches_are_charged_and_reported() {
    let k = kmem(2, config(1, 0));
    let g = k
        .memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), "tenant")
        .unwrap();
    with_cpu(k, |cpu| {
        let page = k
            .memcg()
            .alloc_pages_objcg(cpu, Gfp::KERNEL, 2, g.objcg())
            .unwrap();
        assert_eq!(g.stat(MemcgStat::KmemPages), 4 * PAGE_SIZE as isize);
        // SAFETY: the test holds the object (or descriptor, sheaf) named, so what it names lives.
        assert!(unsafe { k.memcg().page_objcg(page) }.is_some());
        let s = k
            .kmem_cache_create(
                cpu,
                "tenant_obj",
                100,
                8,
                kmem_core::SlabFlags::empty(),
                None,
            )
            .unwrap();
        let objs: Vec<_> = (0..10)
            .map(|_| {
                k.memcg()
                    .kmem_cache_alloc_objcg(cpu, s, Gfp::KERNEL, g.objcg())
                    .unwrap()
            })
            .collect();
        let rcl = k
            .kmem_cache_create(
                cpu,
                "tenant_rcl",
                64,
                8,
                kmem_core::SlabFlags::RECLAIM_ACCOUNT,
                None,
            )
            .unwrap();
        let r = k
            .memcg()
            .kmem_cache_alloc_objcg(cpu, rcl, Gfp::KERNEL, g.objcg())
            .unwrap();
        k.memcg().memcg_drain_stock(cpu.unwrap());
        let mut text = String::new();
        k.memcg().memcg_report(&mut text, g).unwrap();
        assert!(text.starts_with("memcg tenant\nmemory.current "), "{text}");
        assert!(text.contains("memory.max max\n"), "{text}");
        assert!(
            text.contains(&format!("kmem_pages {}\n", 4 * PAGE_SIZE)),
            "{text}"
        );
        let obj = s.config().size;
        assert!(
            text.contains(&format!("slab_unreclaimable {}\n", 10 * obj)),
            "{text}"
        );
        assert!(
            text.contains(&format!("slab_reclaimable {}\n", rcl.config().size)),
            "{text}"
        );
        assert!(text.contains("tenant_obj           10\n"), "{text}");
        assert!(text.contains("tenant_rcl           1\n"), "{text}");
        for o in objs {
            // SAFETY: allocated above from `s`.
            assert!(unsafe { k.kmem_cache_free(cpu, s, o) });
        }
        // SAFETY: as above.
        assert!(unsafe { k.kmem_cache_free(cpu, rcl, r) });
        // SAFETY: allocated above with order 2.
        unsafe { k.free_pages(cpu, page, 2) };
        k.memcg().memcg_drain_stock(cpu.unwrap());
        assert_eq!(slab_and_pages(g), 0);
        assert_eq!(g.usage(), 0);
        let mut text = String::new();
        k.memcg().memcg_report(&mut text, g).unwrap();
        assert!(!text.contains("tenant_obj"), "{text}");
    });
}

#[test]
fn objcg_vectors_go_back_with_their_slabs() {
    let k = kmem(2, config(1, 0));
    let g = k
        .memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), "v")
        .unwrap();
    with_cpu(k, |cpu| {
        // The area's charged area (its objcg sheaves' block, kept with the area for
        // good, as the area itself) is made by the first charged allocation.
        let first = k.memcg().kmalloc_objcg(cpu, 32, Gfp::KERNEL, g.objcg());
        // SAFETY: allocated just above.
        unsafe { k.kfree(cpu, first.unwrap().as_ptr()) };
        k.memcg().memcg_drain_stock(cpu.unwrap());
        k.shrink_all(cpu);
        k.pages.drain_local_pages(cpu.unwrap());
        let before = k.pages.nr_free_pages();
        let held: Vec<_> = (0..5000)
            .map(|_| {
                k.memcg()
                    .kmalloc_objcg(cpu, 32, Gfp::KERNEL, g.objcg())
                    .unwrap()
                    .as_ptr()
            })
            .collect();
        for p in held {
            // SAFETY: allocated above.
            unsafe { k.kfree(cpu, p) };
        }
        k.shrink_all(cpu);
        k.pages.drain_local_pages(cpu.unwrap());
        assert_eq!(
            k.pages.nr_free_pages(),
            before,
            "slabs and vectors all freed"
        );
    });
}

/// `Kmem::fork_prepare_groups` and `fork_prepare` take the memory controller's locks
/// too, the groups' lock and every group's statistics table (taken by charged frees'
/// flushes for every ancestor), and hold them until the release: a fork's child, which
/// has only the forking thread, finds none held by another thread, whose first group
/// creation or statistics flush would otherwise spin for good.
#[test]
fn the_fork_handlers_hold_the_memory_groups_locks() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let k = kmem(2, config(1, 0));
    let memcg = k.memcg();
    let g = memcg
        .mem_cgroup_create(None, memcg.root_mem_cgroup(), "forked")
        .unwrap();
    let held = k.fork_prepare_groups();
    k.fork_prepare(&held);
    let (groups, stats, root_stats) = (
        AtomicBool::new(false),
        AtomicBool::new(false),
        AtomicBool::new(false),
    );
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let _ = k.memcg().nr_zombie_mem_cgroups();
            groups.store(true, SeqCst);
        });
        sc.spawn(|| {
            g.for_each_cache(|_, _| ());
            stats.store(true, SeqCst);
        });
        sc.spawn(|| {
            k.memcg().root_mem_cgroup().for_each_cache(|_, _| ());
            root_stats.store(true, SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        let during = [&groups, &stats, &root_stats].map(|b| b.load(SeqCst));
        // SAFETY: taken just above by this thread, which keeps no reference into them.
        unsafe { k.fork_release(held) };
        // (Released first: the threads end, and the scope with them.)
        assert_eq!(
            during, [false; 3],
            "the groups' lock, a group's and the root's statistics tables: free"
        );
    });
    assert!(groups.load(SeqCst) && stats.load(SeqCst) && root_stats.load(SeqCst));
}

/// A charge stock whose statistics count a cache's objects keeps the cache (its
/// config, read by the stock's next flush) after `kmem_cache_destroy`, and frees it
/// when it lets go: the flush read the freed cache, or the next cache made at its
/// address, whose name then took the destroyed one's stale counts in the group's table.
#[test]
fn a_stock_keeps_a_destroyed_cache_until_it_flushes() {
    let k = kmem(2, config(1, 0));
    let (_a, cpu) = common::own_area(k);
    let memcg = k.memcg();
    let g = memcg
        .mem_cgroup_create(cpu, memcg.root_mem_cgroup(), "stock-cache")
        .unwrap();
    let objcg = g.objcg();
    let c = k
        .kmem_cache_create(cpu, "doomed", 200, 8, kmem_core::SlabFlags::ACCOUNT, None)
        .unwrap();
    let addr = c as *const kmem_core::KmemCache as usize;
    // An object of `c` charged, another class's after it, then `c`'s freed: the stock
    // counts `c` again, its lag one object down.
    let o = memcg
        .kmem_cache_alloc_objcg(cpu, c, Gfp::KERNEL, objcg)
        .unwrap();
    let p = memcg.kmalloc_objcg(cpu, 64, Gfp::KERNEL, objcg).unwrap();
    // SAFETY: ours, freed once each.
    unsafe {
        assert!(k.kfree(cpu, p.as_ptr()));
        assert!(k.kmem_cache_free(cpu, c, o));
    }
    // Destroyed and made from no CPU: the cache's memory goes to its slab's freelist,
    // and the next cache takes it from there, unless a stock still names it.
    let caches = || {
        let mut t = String::new();
        k.slabinfo(&mut t).unwrap();
        let line = t
            .lines()
            .find(|l| l.starts_with("kmem_cache "))
            .unwrap()
            .to_string();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<usize>()
            .unwrap()
    };
    let before = caches();
    // SAFETY: nobody uses `c` again.
    assert_eq!(unsafe { k.kmem_cache_destroy(None, c) }, Ok(()));
    assert_eq!(caches(), before, "kept while the stock names it");
    let d = k
        .kmem_cache_create(
            None,
            "newcomer",
            500,
            8,
            kmem_core::SlabFlags::empty(),
            None,
        )
        .unwrap();
    assert_ne!(d as *const kmem_core::KmemCache as usize, addr);
    memcg.memcg_drain_stock(cpu.unwrap());
    assert_eq!(
        caches(),
        before,
        "`c` freed by the drain (`d` made meanwhile)"
    );
    let mut names = Vec::new();
    g.for_each_cache(|name, n| names.push((name.to_string(), n)));
    assert!(
        names.iter().all(|(name, _)| name != "newcomer"),
        "{names:?}"
    );
    // SAFETY: nobody uses `d` again.
    assert_eq!(unsafe { k.kmem_cache_destroy(None, d) }, Ok(()));
}

/// A group's per-cache rows stay true when there are more caches than rows: a cache
/// counted under "other" while every row was taken has its frees counted there too
/// (not in a row it took meanwhile), so no row goes negative and nothing stays in
/// "other" once every object is freed; and a cache destroyed and another made at its
/// address are shown by their own names.
#[test]
fn per_cache_rows_follow_their_caches_past_the_rows_and_across_a_destroy() {
    let k = kmem(2, config(1, 0));
    let (_a, cpu) = common::own_area(k);
    let memcg = k.memcg();
    let g = memcg
        .mem_cgroup_create(cpu, memcg.root_mem_cgroup(), "many-caches")
        .unwrap();
    let objcg = g.objcg();
    let rows = |g: &MemCgroup| {
        memcg.memcg_drain_stock(cpu.unwrap());
        let mut v = Vec::new();
        g.for_each_cache(|name, n| v.push((name.to_string(), n)));
        v
    };
    let n = kmem_core::memcontrol::MEMCG_CACHE_SLOTS + 1;
    let caches: Vec<_> = (0..n)
        .map(|i| {
            let name: &'static str = Box::leak(format!("rows-{i}").into_boxed_str());
            k.kmem_cache_create(cpu, name, 64, 8, kmem_core::SlabFlags::ACCOUNT, None)
                .unwrap()
        })
        .collect();
    let alloc = |c| {
        let o = memcg
            .kmem_cache_alloc_objcg(cpu, c, Gfp::KERNEL, objcg)
            .unwrap();
        memcg.memcg_drain_stock(cpu.unwrap());
        o
    };
    // One object of each: the last cache finds every row taken.
    let objs: Vec<_> = caches.iter().map(|&c| alloc(c)).collect();
    assert!(rows(g).contains(&("other".to_string(), 1)), "{:?}", rows(g));
    // The first cache's row goes to 0; the last cache's second object takes it.
    // SAFETY: ours, freed once.
    assert!(unsafe { k.kmem_cache_free(cpu, caches[0], objs[0]) });
    memcg.memcg_drain_stock(cpu.unwrap());
    let last = caches[n - 1];
    let second = alloc(last);
    // Both of the last cache's objects freed: its row and "other" both empty.
    // SAFETY: ours, freed once each.
    unsafe {
        assert!(k.kmem_cache_free(cpu, last, objs[n - 1]));
        assert!(k.kmem_cache_free(cpu, last, second));
    }
    let r = rows(g);
    assert!(r.iter().all(|(_, n)| *n > 0), "{r:?}");
    assert!(r.iter().all(|(name, _)| name != "other"), "{r:?}");
    for i in 1..n - 1 {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.kmem_cache_free(cpu, caches[i], objs[i]) });
    }
    assert_eq!(rows(g), Vec::new());
    // A cache destroyed, another made at its address: the new one's own name.
    let old = caches[1];
    let addr = old as *const kmem_core::KmemCache as usize;
    // SAFETY: nobody uses `old` again.
    assert_eq!(unsafe { k.kmem_cache_destroy(None, old) }, Ok(()));
    let new = k
        .kmem_cache_create(None, "rows-new", 64, 8, kmem_core::SlabFlags::ACCOUNT, None)
        .unwrap();
    // (Destroyed and made from no CPU: the descriptor goes back to its slab's
    // freelist, and the next one is taken from there.)
    assert_eq!(new as *const kmem_core::KmemCache as usize, addr);
    let o = alloc(new);
    assert_eq!(rows(g), vec![("rows-new".to_string(), 1)]);
    // SAFETY: ours, freed once.
    assert!(unsafe { k.kmem_cache_free(cpu, new, o) });
}

/// `memory.events` as cgroup v2 counts them: a charge refused at a parent's
/// `memory.max` counts `max` and `oom` on the parent (the group over its limit), and
/// every event counts on the group's ancestors too (below the root): a grandparent
/// sees its subtree's events, the child none of its parent's limit.
#[test]
fn memory_events_count_at_the_limiting_group_and_up_the_hierarchy() {
    let k = kmem(2, config(1, 0));
    let root = k.memcg().root_mem_cgroup();
    let top = k.memcg().mem_cgroup_create(None, root, "ev-top").unwrap();
    let parent = k.memcg().mem_cgroup_create(None, top, "ev-parent").unwrap();
    let child = k
        .memcg()
        .mem_cgroup_create(None, parent, "ev-child")
        .unwrap();
    parent.set_max(64 * 1024);
    child.set_high(16 * 1024);
    with_cpu(k, |cpu| {
        let held = fill_to_limit(k, cpu, child);
        let ev = |g: &MemCgroup| {
            [MemcgEvent::High, MemcgEvent::Max, MemcgEvent::Oom].map(|e| g.events(e))
        };
        let [c_high, c_max, c_oom] = ev(child);
        let [p_high, p_max, p_oom] = ev(parent);
        let [t_high, t_max, t_oom] = ev(top);
        assert!(
            c_high >= 1 && (c_max, c_oom) == (0, 0),
            "child {:?}",
            ev(child)
        );
        assert!(p_max >= 1 && p_oom == 1, "parent {:?}", ev(parent));
        assert_eq!(p_high, c_high, "the child's high events, counted up");
        assert_eq!((t_high, t_max, t_oom), (p_high, p_max, p_oom), "top");
        for p in held {
            // SAFETY: allocated above.
            unsafe { k.kfree(cpu, p) };
        }
    });
}
