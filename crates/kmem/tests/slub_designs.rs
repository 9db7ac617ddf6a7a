//! The process heap in each slab design (`KMEM_SLUB=sheaves` and `KMEM_SLUB=cpu-slab`),
//! each in a child process (the design is fixed when the heap starts): mixed sizes,
//! frees in random order and on other threads, kmem_cache objects, the heap's inline
//! fast paths and their slow paths, every object's contents checked while held.

use kmem::{heap, Gfp, SlabFlags};
use std::process::Command;

const CHILD: &str = "SLUB_DESIGNS_CHILD";

fn pattern(p: usize) -> u64 {
    (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn workload() {
    let h = heap();
    let s = h
        .kmem_cache_create("designs-72", 72, 8, SlabFlags::empty(), None)
        .unwrap();
    let mut x = 0x1234_5678_u64;
    let mut rng = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut held: Vec<(usize, usize, bool)> = Vec::new();
    for _ in 0..60_000 {
        let r = rng();
        if r % 5 < 3 || held.is_empty() {
            let cached = r % 7 == 0;
            let size = if cached {
                72
            } else {
                8 + (r >> 8) as usize % 2000
            };
            let p = if cached {
                h.kmem_cache_alloc(s, Gfp::KERNEL)
            } else {
                h.kmalloc(size, Gfp::KERNEL)
            }
            .unwrap()
            .as_ptr() as usize;
            // SAFETY: ours, at least 8 bytes, 8-aligned.
            unsafe { (p as *mut u64).write(pattern(p)) };
            held.push((p, size, cached));
        } else {
            let (p, _, cached) = held.swap_remove((r >> 16) as usize % held.len());
            // SAFETY: still ours.
            assert_eq!(unsafe { (p as *const u64).read() }, pattern(p), "corrupted");
            // SAFETY: ours, freed once.
            let ok = unsafe {
                if cached {
                    h.kmem_cache_free(s, std::ptr::NonNull::new(p as *mut u8).unwrap())
                } else {
                    h.kfree(p as *mut u8)
                }
            };
            assert!(ok);
        }
    }
    // Half of what is left is freed by another thread.
    let theirs = held.split_off(held.len() / 2);
    std::thread::spawn(move || {
        for (p, _, cached) in theirs {
            // SAFETY: handed over, freed once.
            unsafe {
                assert_eq!((p as *const u64).read(), pattern(p));
                if cached {
                    heap().kmem_cache_free(s, std::ptr::NonNull::new(p as *mut u8).unwrap());
                } else {
                    heap().kfree(p as *mut u8);
                }
            }
        }
    })
    .join()
    .unwrap();
    for (p, _, cached) in held {
        // SAFETY: ours, freed once.
        unsafe {
            if cached {
                h.kmem_cache_free(s, std::ptr::NonNull::new(p as *mut u8).unwrap());
            } else {
                h.kfree(p as *mut u8);
            }
        }
    }
    h.flush_cpu_caches();
    h.kmem_cache_shrink(s);
    assert_eq!(s.nr_slabs(0), 0, "every object of the cache came back");
    println!("design {:?}", h.kmem().slub_design());
}

#[test]
fn both_designs_run_the_heap() {
    if std::env::var_os(CHILD).is_some() {
        return workload();
    }
    for (env, want) in [("sheaves", "Sheaves"), ("cpu-slab", "CpuSlab")] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "both_designs_run_the_heap", "--nocapture"])
            .env(CHILD, "1")
            .env("KMEM_SLUB", env)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "KMEM_SLUB={env}:\n{stdout}\n{stderr}");
        assert!(stdout.contains(&format!("design {want}")), "{stdout}");
    }
}
