//! Memory cgroups in a Rust program with kmem as its global allocator: tenants under
//! different limits, the enter guard, typed caches, removal with live objects,
//! huge and page-block allocations, the statistics snapshot.

use kmem::{heap, Gfp, KmemAlloc, KmemCache, MemCgroup};
use std::collections::HashMap;

#[global_allocator]
static A: KmemAlloc = KmemAlloc;

const MIB: usize = 1 << 20;

/// The tests of this file run one at a time: removing a group or reclaiming at a
/// limit asks every CPU area to drain its stock, which gives back the objects that
/// another test's thread keeps waiting in its objcg sheaves (what one test checks).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Two tenants on two threads: one fills its 8 MiB limit and gets allocation errors
/// (handled, no abort), the other holds 24 MiB under a 64 MiB limit untouched.
#[test]
fn one_tenant_hits_its_limit_the_other_is_unaffected() {
    let _serial = serial();
    let small = MemCgroup::new("tenant-small").unwrap();
    let big = MemCgroup::new("tenant-big").unwrap();
    small.set_max(8 * MIB);
    big.set_max(64 * MIB);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _g = small.enter();
            let mut held: Vec<Vec<u8>> = Vec::new();
            let mut failed = 0;
            for i in 0..100_000usize {
                let mut v: Vec<u8> = Vec::new();
                // 1 KiB … 64 KiB buffers and small boxes.
                if v.try_reserve_exact(1024 << (i % 7)).is_err() {
                    failed += 1;
                    if failed > 20 {
                        break;
                    }
                    continue;
                }
                v.resize(v.capacity(), i as u8);
                held.push(v);
            }
            assert!(failed > 20, "the limit never stopped the small tenant");
            assert!(small.usage() <= 8 * MIB, "usage {}", small.usage());
            let st = small.stat();
            assert!(st.events_oom > 0 && st.events_max > 0, "{st:?}");
            // Held data is intact.
            for (i, v) in held.iter().enumerate() {
                let want = v[0];
                assert!(v.iter().all(|&b| b == want), "buffer {i} damaged");
            }
            drop(held);
            // Room again.
            let v: Vec<u8> = vec![7; 4 * MIB];
            assert_eq!(v[4 * MIB - 1], 7);
            drop(v);
            // Give the thread's charge stock back now (thread exit would, after
            // the scope has already returned).
            heap().detach_thread();
        });
        s.spawn(|| {
            let _g = big.enter();
            let mut map: HashMap<u32, Box<[u8; 256]>> = HashMap::new();
            for i in 0..(24 * MIB / 256) as u32 {
                map.insert(i, Box::new([i as u8; 256]));
            }
            assert!(big.usage() >= 24 * MIB, "usage {}", big.usage());
            assert_eq!(big.stat().events_oom, 0);
            assert_eq!(map[&77][0], 77);
            drop(map);
            heap().detach_thread();
        });
    });
    assert_eq!(big.stat().events_max, 0);
    assert!(small.stat().events_oom > 0);
    for g in [&big, &small] {
        let st = g.stat();
        assert_eq!(st.slab_unreclaimable + st.kmem_pages, 0, "{st:?}");
        // Spare bytes of a partly used page may stay charged (`nr_charged_bytes`).
        assert!(g.usage() <= kmem::PAGE_SIZE, "{st:?}");
    }
}

#[test]
fn the_guard_charges_only_while_it_lives_and_nests() {
    let _serial = serial();
    let a = MemCgroup::new("guard-a").unwrap();
    let b = MemCgroup::new("guard-b").unwrap();
    let outside = Box::new([1u8; 1000]);
    let (in_a, in_b, in_a_again);
    {
        let _ga = a.enter();
        in_a = Box::new([2u8; 1000]);
        {
            let _gb = b.enter();
            in_b = vec![3u8; 3000];
        }
        in_a_again = vec![4u8; 500];
    }
    let after = Box::new([5u8; 1000]);
    let sa = a.stat();
    let sb = b.stat();
    assert_eq!(sa.slab_unreclaimable, 1024 + 512, "{sa:?}");
    assert_eq!(sb.slab_unreclaimable, 4096, "{sb:?}");
    assert!(
        sa.caches.contains(&("kmalloc-cg-1k".to_string(), 1)),
        "{sa:?}"
    );
    drop((outside, in_a, in_b, in_a_again, after));
    assert_eq!(a.stat().slab_unreclaimable, 0);
    assert_eq!(b.stat().slab_unreclaimable, 0);
}

/// Charged objects of `g` waiting in the CPU areas' objcg sheaves.
fn waiting_in_objcg_sheaves(g: &MemCgroup) -> usize {
    let k = heap().kmem();
    let objcg = g.raw().objcg() as *const _;
    k.pages
        .cpu_areas()
        .iter()
        .filter_map(|a| k.memcg().memcg_stock_of(a))
        .map(|st| st.objcg_sheaves())
        .filter(|&(o, _)| o == objcg)
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn a_threads_charged_frees_wait_charged_for_its_next_allocations() {
    let _serial = serial();
    let g = MemCgroup::new("objcg-sheaves").unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            let _in = g.enter();
            let h = heap();
            let p: Vec<_> = (0..4)
                .map(|_| h.kmalloc(40, Gfp::KERNEL).unwrap().as_ptr())
                .collect();
            let boxed = Box::new([7u8; 200]);
            let at = std::ptr::addr_of!(*boxed) as *mut u8;
            // What the allocations' refills left waiting (charged, never handed out).
            let left = waiting_in_objcg_sheaves(&g);
            for &q in &p {
                // SAFETY: allocated above, freed once.
                assert!(unsafe { h.kfree(q) });
            }
            drop(boxed);
            // (A KFENCE sample, outside the span, goes back to KFENCE instead.)
            let sampled = p
                .iter()
                .chain([&at])
                .filter(|&&q| !h.page_allocator().in_span(q))
                .count();
            assert_eq!(waiting_in_objcg_sheaves(&g), left + 5 - sampled);
            // The next charged allocations of the class take them back, once those the
            // refills left have gone (the frees wait in the inbox of the thread's
            // charged area until the kept sheaf runs empty, as a CPU's frees wait on
            // its spare sheaf).
            let again: Vec<_> = (0..left + 4)
                .map(|_| h.kmalloc(40, Gfp::KERNEL).unwrap().as_ptr())
                .collect();
            let reused = again.iter().filter(|q| p.contains(q)).count();
            assert!(reused >= 4 - sampled, "{reused} of {p:?} in {again:?}");
            for q in again {
                // SAFETY: allocated above, freed once.
                unsafe { h.kfree(q) };
            }
            drop((p, _in));
            // As its exit would (which the scope does not wait for).
            h.detach_thread();
        });
    });
    // The thread's area going back gave every waiting object back, uncharged.
    assert_eq!(waiting_in_objcg_sheaves(&g), 0);
    assert_eq!(g.usage(), 0);
    assert_eq!(g.stat().slab_unreclaimable, 0);
}

#[test]
fn a_charged_allocation_for_another_group_gives_the_waiting_objects_back() {
    let _serial = serial();
    // The front ends' charged pop only pops; the charging path behind it must still
    // give back what another group left waiting, or those objects would stay charged
    // to it (and its sheaves closed to the new group) until the thread exits.
    let a = MemCgroup::new("objcg-sheaves-a").unwrap();
    let b = MemCgroup::new("objcg-sheaves-b").unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            let h = heap();
            {
                let _in = a.enter();
                // (An array: a Vec's own buffer would be charged and wait too.)
                let p: [_; 4] =
                    std::array::from_fn(|_| h.kmalloc(40, Gfp::KERNEL).unwrap().as_ptr());
                // What the allocations' refills left waiting.
                let left = waiting_in_objcg_sheaves(&a);
                for q in p {
                    // SAFETY: allocated above, freed once.
                    assert!(unsafe { h.kfree(q) });
                }
                // Charged allocations are never KFENCE samples: all four wait.
                assert_eq!(waiting_in_objcg_sheaves(&a), left + 4);
            }
            {
                let _in = b.enter();
                let q = h.kmalloc(40, Gfp::KERNEL).unwrap().as_ptr();
                assert_eq!(waiting_in_objcg_sheaves(&a), 0);
                let left = waiting_in_objcg_sheaves(&b);
                // SAFETY: allocated above, freed once.
                assert!(unsafe { h.kfree(q) });
                assert_eq!(waiting_in_objcg_sheaves(&b), left + 1);
            }
            h.detach_thread();
        });
    });
    assert_eq!(waiting_in_objcg_sheaves(&b), 0);
    assert_eq!((a.usage(), b.usage()), (0, 0));
    assert_eq!(a.stat().slab_unreclaimable, 0);
    assert_eq!(b.stat().slab_unreclaimable, 0);
}

#[test]
fn objects_freed_by_another_groups_thread_go_back_to_their_own_group() {
    let _serial = serial();
    // A thread running in `theirs` frees objects charged to `mine` (allocated by a
    // thread in `mine`): its inline free takes them onto its charged area's inbox
    // without reading their vector; its next allocations (which take the inbox in)
    // and its exit free them the regular way, uncharged from `mine`, never kept for
    // `theirs`.
    let mine = MemCgroup::new("inbox-mine").unwrap();
    let theirs = MemCgroup::new("inbox-theirs").unwrap();
    let objs: Vec<usize> = std::thread::scope(|s| {
        s.spawn(|| {
            // (The vector before the group: its own buffer is not charged.)
            let mut v = Vec::with_capacity(40);
            let _in = mine.enter();
            let h = heap();
            for _ in 0..40 {
                v.push(h.kmalloc(64, Gfp::KERNEL).unwrap().as_ptr() as usize);
            }
            h.detach_thread();
            v
        })
        .join()
        .unwrap()
    });
    assert_eq!(mine.stat().slab_unreclaimable, 40 * 64);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _in = theirs.enter();
            let h = heap();
            // A charged allocation of the class first: the thread's fast word is its
            // charged area from then on.
            let own = h.kmalloc(64, Gfp::KERNEL).unwrap().as_ptr();
            for &p in &objs {
                // SAFETY: allocated above, freed once.
                assert!(unsafe { h.kfree(p as *mut u8) });
            }
            // Allocations take the inbox in (mine's objects go back to their slabs,
            // uncharged; were they kept for theirs, the exit's flush would find their
            // slots naming mine, report them and leave them charged).
            let again: Vec<_> = (0..40)
                .map(|_| h.kmalloc(64, Gfp::KERNEL).unwrap().as_ptr())
                .collect();
            for q in again.into_iter().chain([own]) {
                // SAFETY: allocated above, freed once.
                unsafe { h.kfree(q) };
            }
            h.detach_thread();
        });
    });
    assert_eq!(mine.stat().slab_unreclaimable, 0);
    assert_eq!(theirs.stat().slab_unreclaimable, 0);
    assert_eq!((mine.usage(), theirs.usage()), (0, 0));
}

#[test]
fn charged_kmalloc_objects_freed_outside_the_group_are_uncharged() {
    let _serial = serial();
    // Objects charged in a group, freed by threads outside any group (their frees
    // would otherwise take the inline fast path): every byte comes back.
    let g = MemCgroup::new("freed_outside").unwrap();
    // Allocated on a thread that then exits (its memcg stock goes back).
    let objs: Vec<usize> = std::thread::scope(|s| {
        s.spawn(|| {
            let v = {
                let _g = g.enter();
                (0..2000)
                    .map(|i| {
                        let p = heap().kmalloc(24 + (i % 5) * 40, Gfp::KERNEL).unwrap();
                        p.as_ptr() as usize
                    })
                    .collect()
            };
            heap().detach_thread();
            v
        })
        .join()
        .unwrap()
    });
    let charged = g.stat().slab_unreclaimable;
    assert!(charged >= 2000 * 24, "{charged}");
    let (here, there) = objs.split_at(1000);
    for &p in here {
        // SAFETY: ours, freed once.
        unsafe { heap().kfree(p as *mut u8) };
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            for &p in there {
                // SAFETY: as above.
                unsafe { heap().kfree(p as *mut u8) };
            }
            heap().detach_thread();
        });
    });
    assert_eq!(g.stat().slab_unreclaimable, 0);
    // What stays charged is the stocks' spare bytes, not the objects.
    assert!(
        g.usage() <= charged as usize / 8,
        "usage {} of {charged}",
        g.usage()
    );
}

#[derive(Debug)]
struct Session {
    id: u64,
    _payload: [u64; 12],
}

#[test]
fn typed_caches_are_charged_and_freed_on_other_threads() {
    let _serial = serial();
    let cache: KmemCache<Session> = KmemCache::new("memcg_session").unwrap();
    let g = MemCgroup::new("sessions").unwrap();
    let boxes = {
        let _g = g.enter();
        (0..1000)
            .map(|id| {
                cache
                    .alloc(Session {
                        id,
                        _payload: [id; 12],
                    })
                    .unwrap()
            })
            .collect::<Vec<_>>()
    };
    let st = g.stat();
    let size = cache.raw().config().size as i64;
    assert_eq!(st.slab_unreclaimable, 1000 * size, "{st:?}");
    assert!(
        st.caches.contains(&("memcg_session".to_string(), 1000)),
        "{st:?}"
    );
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(boxes.iter().map(|b| b.id).sum::<u64>(), 999 * 1000 / 2);
            drop(boxes);
            heap().detach_thread();
        });
    });
    assert_eq!(g.stat().slab_unreclaimable, 0);
    // At most the spare bytes of one partly used page stay charged.
    assert!(g.usage() <= kmem::PAGE_SIZE, "usage {}", g.usage());
}

#[test]
fn a_dropped_group_reparents_its_live_objects() {
    let _serial = serial();
    let parent = MemCgroup::new("parent").unwrap();
    let kept;
    {
        let child = parent.child("child").unwrap();
        child.set_max(16 * MIB);
        let _g = child.enter();
        kept = vec![9u8; 2 * MIB];
    }
    // The child is gone; its 2 MiB stay charged to the parent until freed.
    assert!(parent.usage() >= 2 * MIB);
    assert_eq!(parent.stat().kmem_pages, 2 * MIB as i64);
    assert_eq!(kept[MIB], 9);
    drop(kept);
    assert_eq!(parent.stat().kmem_pages, 0);
    // At most the spare bytes of one partly used page stay charged.
    assert!(
        parent.usage() <= kmem::PAGE_SIZE,
        "usage {}",
        parent.usage()
    );
}

#[test]
fn huge_and_page_block_allocations_are_charged_and_resized() {
    let _serial = serial();
    let g = MemCgroup::new("big-buffers").unwrap();
    g.set_max(40 * MIB);
    let _guard = g.enter();
    // A page block (1 MiB) and a direct mapping (12 MiB).
    let mut block: Vec<u8> = vec![1; MIB];
    let mut huge: Vec<u8> = vec![2; 12 * MIB];
    assert_eq!(g.stat().kmem_pages, 13 * MIB as i64);
    // Growing both moves them (charged blocks move), the charge follows.
    block.reserve_exact(2 * MIB);
    block.resize(3 * MIB, 1);
    huge.reserve_exact(8 * MIB);
    huge.resize(20 * MIB, 2);
    // 3 MiB, moved past the slab classes by a realloc, takes a mapping of 3 MiB.
    assert_eq!(g.stat().kmem_pages, (3 + 20) * MIB as i64);
    assert!(block.iter().all(|&b| b == 1) && huge.iter().all(|&b| b == 2));
    // Over the limit: the allocation fails, nothing is charged for it.
    let mut v: Vec<u8> = Vec::new();
    assert!(v.try_reserve_exact(32 * MIB).is_err());
    assert_eq!(g.stat().kmem_pages, (3 + 20) * MIB as i64);
    drop((block, huge));
    assert_eq!(g.stat().kmem_pages, 0);
    // At most the spare bytes of one partly used page stay charged.
    assert!(g.usage() <= kmem::PAGE_SIZE, "usage {}", g.usage());
}

#[test]
fn the_snapshot_lists_groups_in_the_kernel_formats() {
    let _serial = serial();
    let g = MemCgroup::new("snapshot-me").unwrap();
    g.set_high(MIB);
    let held = {
        let _g = g.enter();
        vec![0u8; 100]
    };
    let report = g.report();
    assert!(
        report.starts_with("memcg snapshot-me\nmemory.current "),
        "{report}"
    );
    assert!(report.contains("memory.high 1048576\n"), "{report}");
    assert!(report.contains("slab_unreclaimable 128\n"), "{report}");
    assert!(report.contains("kmalloc-cg-128       1\n"), "{report}");
    let stats = kmem::stats();
    let mine = stats
        .memcgs
        .iter()
        .find(|m| m.name == "snapshot-me")
        .expect("the group in the snapshot");
    assert_eq!(mine.parent.as_deref(), Some("/"));
    assert_eq!(mine.high, Some(MIB as u64));
    assert!(
        mine.caches.contains(&("kmalloc-cg-128".to_string(), 1)),
        "{:?}",
        mine.caches
    );
    assert!(stats.memcgs[0].name == "/", "the root first");
    assert!(stats.to_string().contains("memcg snapshot-me\n"));
    // (The crate's tests enable `serde` through their dev-dependency on kmem itself.)
    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_string(&stats).unwrap();
        assert!(json.contains("\"snapshot-me\""));
    }
    drop(held);
}

#[test]
fn page_allocations_in_bulk_are_charged_one_by_one() {
    let _serial = serial();
    let g = MemCgroup::new("bulk-pages").unwrap();
    let h = heap();
    let mut pages = [None; 16];
    {
        let _g = g.enter();
        assert_eq!(h.alloc_pages_bulk(kmem::Gfp::KERNEL, &mut pages), 16);
        assert_eq!(g.stat().kmem_pages, 16 * kmem::PAGE_SIZE as i64);
        // `stat` drained this thread's stock: the usage is the 16 pages now.
        assert_eq!(g.usage(), 16 * kmem::PAGE_SIZE);
        g.set_max(g.usage());
        let mut more = [None; 8];
        assert!(
            h.alloc_pages_bulk(kmem::Gfp::KERNEL, &mut more) < 8,
            "the limit holds"
        );
        // SAFETY: order-0 pages of ours.
        unsafe { h.free_pages_bulk(&mut more) };
    }
    // SAFETY: order-0 pages allocated above.
    unsafe { h.free_pages_bulk(&mut pages) };
    assert!(pages.iter().all(|p| p.is_none()));
    assert_eq!(g.stat().kmem_pages, 0);
}

/// A guard forgotten (`mem::forget`, safe code) leaves its group active on the thread
/// after the group's handle is dropped: the guard's reference keeps the removed group
/// (a zombie) from being freed under the thread's charges, which once wrote into the
/// freed descriptor.
#[test]
fn a_forgotten_guard_keeps_its_removed_group_alive() {
    let _s = serial();
    let memcg = heap().kmem().memcg();
    std::thread::spawn(move || {
        let g = MemCgroup::new("forgotten").expect("a group");
        std::mem::forget(g.enter());
        let zombies = memcg.nr_zombie_mem_cgroups();
        drop(g);
        assert_eq!(
            memcg.nr_zombie_mem_cgroups(),
            zombies + 1,
            "the removed group is kept"
        );
        // Charged to it (reparented) still: allocations and frees go on.
        let v: Vec<Vec<u8>> = (0..1000).map(|i| vec![i as u8; 100]).collect();
        assert!(v.iter().enumerate().all(|(i, b)| b[99] == i as u8));
    })
    .join()
    .unwrap();
}

/// Guards dropped out of order leave a group active without its guard: the group can
/// then be dropped (removed) while the thread still charges to it. The active slot's
/// reference keeps its objcg alive as a zombie, so those charges go to its parent,
/// and a group made afterwards (which would have taken the freed group's memory)
/// gets none of them. The thread's exit gives the reference up.
#[test]
fn guards_dropped_out_of_order_never_leave_freed_memory_active() {
    let _s = serial();
    let memcg = heap().kmem().memcg();
    let parent = MemCgroup::new("out-of-order").expect("a group");
    std::thread::scope(|s| {
        s.spawn(|| {
            let zombies = memcg.nr_zombie_mem_cgroups();
            let a = parent.child("a").expect("a group");
            let g1 = a.enter();
            let g2 = a.enter();
            drop(g1);
            drop(g2); // `a` is active again, with no guard
            drop(a);
            assert_eq!(memcg.nr_zombie_mem_cgroups(), zombies + 1, "a kept");
            let b = parent.child("b").expect("a group");
            let base = parent.usage();
            let v: Vec<u8> = vec![7; 4 * MIB];
            assert!(parent.usage() >= base + 4 * MIB, "charged to a's parent");
            assert_eq!(b.usage(), 0, "nothing charged to b");
            drop(v);
            drop(b);
        })
        .join()
        .unwrap();
    });
    // The thread's exit let go of `a`: a group removal's sweep frees it.
    drop(MemCgroup::new("sweep").expect("a group"));
    let _ = heap().kmem().memcg().nr_zombie_mem_cgroups();
}

/// `kmem_cache_alloc` on a plain kmalloc cache, on a thread with an active group,
/// hands out an object of that cache, uncharged (the plain caches are never
/// charged), which `kmem_cache_free` of the same cache takes back. The thread's
/// charged area keeps the charged twin's objects (`kmalloc-cg-32`) on the plain
/// class's line for kmalloc's inline pop; `kmem_cache_alloc` must not pop them.
#[test]
fn kmem_cache_alloc_of_a_plain_kmalloc_cache_stays_uncharged_in_a_group() {
    let _s = serial();
    let h = heap();
    let plain = h.kmem().kmalloc_cache(32, Gfp::KERNEL).expect("kmalloc-32");
    std::thread::scope(|s| {
        s.spawn(|| {
            let g = MemCgroup::new("plain-cache").expect("a group");
            let _active = g.enter();
            // Charged kmalloc fills the thread's kept sheaf of the class.
            let held: Vec<_> = (0..4)
                .map(|_| h.kmalloc(32, Gfp::KERNEL).expect("memory"))
                .collect();
            for p in held {
                // SAFETY: ours, freed once.
                unsafe { h.kfree(p.as_ptr()) };
            }
            let charged = g.usage();
            for zeroed in [false, true] {
                let gfp = if zeroed { Gfp::ZERO } else { Gfp::KERNEL };
                let qs: Vec<_> = (0..64)
                    .map(|_| h.kmem_cache_alloc(plain, gfp).expect("memory"))
                    .collect();
                for q in qs {
                    // SAFETY: ours, freed once.
                    let ok = unsafe { h.kmem_cache_free(plain, q) };
                    assert!(ok, "an object of kmalloc-32 (zeroed: {zeroed})");
                }
            }
            assert!(g.usage() <= charged, "plain objects charged");
        })
        .join()
        .unwrap();
    });
}
