//! SLUB's lockless per-CPU fast paths as a `no_std` kernel uses them: CPU areas are
//! shared, a context reads "its" CPU, may be preempted and migrate at any point, and
//! runs the fast path on the area it picked; anything else happens under that area's
//! local lock. Here every operation of every thread picks a random area (a migration
//! between any two operations, and between reading the CPU and the CAS), frees cross
//! threads, and every object carries its owner's tag while held.

mod common;

use common::{config, Rng, TestPlatform};
use kmem_core::percpu::CpuArea;
use kmem_core::slab::{FastPath, PerCpuAccess, SlubDesign, LOCKLESS_SUPPORTED};
use kmem_core::{CpuRef, Gfp, Kmem, SlabFlags};
use std::ptr::NonNull;
use std::sync::Mutex;

type K = Kmem<TestPlatform>;

fn alloc(k: &K, area: &CpuArea, s: &kmem_core::KmemCache) -> NonNull<u8> {
    if let Some(p) = k.slub().alloc_lockless(area, s) {
        return p;
    }
    let _lock = area.local_lock();
    // SAFETY: we hold the area's local lock: we act as its owner.
    let cpu = unsafe { CpuRef::new(area) };
    k.slub().alloc(Some(cpu), s, Gfp::KERNEL).expect("memory")
}

fn free(k: &K, area: &CpuArea, s: &kmem_core::KmemCache, p: NonNull<u8>) {
    // SAFETY: an object of `s` we own and give up.
    if let Some(ok) = unsafe { k.kmem_cache_free_lockless(area, s, p) } {
        assert!(ok);
        return;
    }
    let _lock = area.local_lock();
    // SAFETY: we hold the area's local lock: we act as its owner.
    let cpu = unsafe { CpuRef::new(area) };
    // SAFETY: as above.
    assert!(unsafe { k.kmem_cache_free(Some(cpu), s, p) });
}

#[test]
fn migrating_contexts_share_cpu_areas_safely() {
    migrating_contexts(SlubDesign::CpuSlab);
}

/// The sheaves design in the same per-CPU setting: no lockless fast path (the CAS
/// attempts decline), every sheaf operation under the area's lock, objects moving
/// between areas and threads.
#[test]
fn migrating_contexts_share_cpu_sheaves_safely() {
    migrating_contexts(SlubDesign::Sheaves);
}

fn migrating_contexts(design: SlubDesign) {
    let k: &'static K = Box::leak(Box::new(Kmem::new(TestPlatform::new())));
    k.set_slub_design(design);
    let on = k.set_percpu_access(PerCpuAccess::Cas);
    let want = if LOCKLESS_SUPPORTED {
        PerCpuAccess::Cas
    } else {
        PerCpuAccess::Owned
    };
    assert_eq!(on, want);
    let (base, len) = common::span(2);
    // SAFETY: the span is ours alone and nobody else uses the allocator yet.
    unsafe { k.init(base, len, config(1, 0), 2) }.unwrap();
    let areas: Vec<&CpuArea> = (0..2).map(|_| k.pages.cpu_area_get(0).unwrap()).collect();
    let caches: Vec<&kmem_core::KmemCache> = [24usize, 64, 200]
        .iter()
        .map(|&size| {
            let _lock = areas[0].local_lock();
            // SAFETY: we hold the area's local lock.
            let cpu = unsafe { CpuRef::new(areas[0]) };
            k.kmem_cache_create(
                Some(cpu),
                &format!("mig-{size}"),
                size,
                8,
                SlabFlags::empty(),
                None,
            )
            .unwrap()
        })
        .collect();
    if design == SlubDesign::CpuSlab {
        assert_eq!(caches[0].config().access, on);
    } else {
        assert_eq!(caches[0].config().fast, FastPath::Sheaf);
    }
    let settle = || {
        for &area in &areas {
            let _lock = area.local_lock();
            // SAFETY: we hold the area's local lock.
            let cpu = unsafe { CpuRef::new(area) };
            k.pages.cpu_area_flush(cpu);
            k.shrink_all(Some(cpu));
            k.pages.drain_local_pages(cpu);
        }
        k.pages.nr_free_pages()
    };
    let before = settle();
    let shared: Mutex<Vec<(usize, usize, u64)>> = Mutex::new(Vec::new());
    let rounds = if std::env::var_os("KMEM_STRESS_SECS").is_some() {
        400_000
    } else {
        40_000
    };
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (areas, caches, shared) = (&areas, &caches, &shared);
            s.spawn(move || {
                let mut rng = Rng(0x1234_5678 ^ ((t + 1) * 0x9e37_79b9));
                let mut held: Vec<(usize, usize, u64)> = Vec::new();
                for r in 0..rounds {
                    let x = rng.next();
                    let area = areas[(x & 1) as usize];
                    if x % 7 < 4 || held.is_empty() {
                        let ci = ((x >> 8) % 3) as usize;
                        let p = alloc(k, area, caches[ci]);
                        let tag = t << 48 | r;
                        let words = caches[ci].config().object_size / 8;
                        for w in 0..words {
                            // SAFETY: ours, 8-aligned, `object_size` bytes.
                            unsafe { p.as_ptr().cast::<u64>().add(w).write(tag) };
                        }
                        held.push((p.as_ptr() as usize, ci, tag));
                        if x.is_multiple_of(11) {
                            shared.lock().unwrap().push(held.pop().unwrap());
                        }
                    } else {
                        let i = (x >> 16) as usize % held.len();
                        let (p, ci, tag) = held.swap_remove(i);
                        let words = caches[ci].config().object_size / 8;
                        for w in 0..words {
                            // SAFETY: still ours.
                            let v = unsafe { (p as *const u64).add(w).read() };
                            assert_eq!(v, tag, "an object was handed out twice");
                        }
                        free(k, area, caches[ci], NonNull::new(p as *mut u8).unwrap());
                        // Take over an object another thread handed over.
                        if let Some(o) = shared.lock().unwrap().pop() {
                            held.push(o);
                        }
                    }
                }
                for (p, ci, _) in held {
                    free(k, areas[0], caches[ci], NonNull::new(p as *mut u8).unwrap());
                }
            });
        }
    });
    for (p, ci, _) in shared.into_inner().unwrap() {
        free(k, areas[1], caches[ci], NonNull::new(p as *mut u8).unwrap());
    }
    // Flush both "CPUs" and shrink: every slab goes back.
    assert_eq!(settle(), before, "slab pages leaked");
}
