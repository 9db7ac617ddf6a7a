//! The process heap in each slab design (`KMEM_SLUB=sheaves` and `KMEM_SLUB=cpu-slab`),
//! each in a child process (the design is fixed when the heap starts): mixed sizes,
//! frees in random order and on other threads, kmem_cache objects, the heap's inline
//! fast paths and their slow paths, every object's contents checked while held; and
//! the CPU-slab design's restartable sequences in `KMEM_PERCPU=cpu-rseq` (they must pop
//! without the lock, and another CPU takes their freelists through the fence).

use kmem::{heap, Gfp, SlabFlags};
use std::process::Command;

mod common;

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
        let stdout = run_child("both_designs_run_the_heap", CHILD, &[("KMEM_SLUB", env)]);
        assert!(stdout.contains(&format!("design {want}")), "{stdout}");
    }
}

/// Runs test `name` of this binary in a child process with `marker` and `env` set (the
/// child does the work); checks it succeeded and returns what it printed.
fn run_child(name: &str, marker: &str, env: &[(&str, &str)]) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env(marker, "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{env:?}:\n{stdout}\n{stderr}");
    stdout
}

const RSEQ_CHILD: &str = "SLUB_DESIGNS_RSEQ_CHILD";

/// In the CPU-slab design with `KMEM_PERCPU=cpu-rseq`, pops and pushes on a CPU's
/// freelist are restartable sequences that count nothing; every allocation on the
/// locked path counts `alloc_fastpath` or `alloc_slowpath`. So once the CPU freelist
/// is warm, the count stays far below the allocations: it would match them if the
/// sequences missed the freelist's word (they did once, when `kmem_cache_cpu`'s
/// layout changed) and everything fell back to the lock.
fn rseq_workload() {
    use kmem::config::PerCpuMode;
    use kmem_core::slab::{SlubDesign, SlubStat};
    let h = heap();
    assert_eq!(h.kmem().slub_design(), SlubDesign::CpuSlab);
    if h.percpu_mode() != PerCpuMode::CpuRseq {
        // No restartable sequences on this machine: nothing to tell apart.
        println!("rseq unavailable");
        return;
    }
    let s = h
        .kmem_cache_create("designs-rseq-64", 64, 8, SlabFlags::empty(), None)
        .unwrap();
    let round = |n: usize| {
        let v: Vec<_> = (0..n)
            .map(|_| h.kmem_cache_alloc(s, Gfp::KERNEL).unwrap())
            .collect();
        for p in v {
            // SAFETY: ours, freed once.
            unsafe { h.kmem_cache_free(s, p) };
        }
    };
    round(200);
    let locked_pops = || {
        let areas = || h.kmem().pages.cpu_areas().iter();
        s.stat_sum(areas(), SlubStat::AllocFastpath) + s.stat_sum(areas(), SlubStat::AllocSlowpath)
    };
    let before = locked_pops();
    let n = 20_000;
    for _ in 0..n / 20 {
        round(20);
    }
    let locked = locked_pops() - before;
    assert!(
        locked < n as u64 / 4,
        "{locked} of {n} pops took the locked path"
    );
    println!("rseq pops {}", n as u64 - locked);
    global_alloc_round();
    // Another CPU's freelists taken through the fence (or pinned, where it is refused).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if let Some(fences) = common::takes_under_load(64, 200_000) {
        use kmem::platform::rseq::{allowed, can_fence};
        let elsewhere = can_fence() && allowed(0) && allowed(1);
        assert!(fences > 0 || !elsewhere, "no take reached the other CPU");
        println!("{fences} fences");
    }
}

/// `KmemAlloc` in the CPU-slab design with `KMEM_PERCPU=cpu-rseq`: its inline rseq pop
/// reads the sheaves' size table, which names no CPU-slab cache (the zero line: empty
/// sheaves), so its blocks come from the CPU slab's freelist pop instead; held
/// blocks are distinct and keep their contents, and a zeroed layout reads zero.
fn global_alloc_round() {
    use std::alloc::{GlobalAlloc, Layout};
    let a = kmem::KmemAlloc;
    let layout = Layout::from_size_align(48, 8).unwrap();
    for round in 0..4u64 {
        let held: Vec<usize> = (0..2_000)
            // SAFETY: a non-zero size; each block is written within it and freed once.
            .map(|_| unsafe {
                let p = a.alloc(layout);
                assert!(!p.is_null());
                (p as *mut u64).write(pattern(p as usize) ^ round);
                p as usize
            })
            .collect();
        let mut sorted = held.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), held.len(), "a block handed out twice");
        for &p in &held {
            // SAFETY: ours, freed once.
            unsafe {
                assert_eq!((p as *const u64).read(), pattern(p) ^ round, "corrupted");
                (p as *mut u8).write_bytes(0xff, layout.size());
                a.dealloc(p as *mut u8, layout);
            }
        }
        // SAFETY: as above.
        let z = unsafe { a.alloc_zeroed(layout) };
        // SAFETY: a block of `layout.size()` bytes, ours.
        let bytes = unsafe { std::slice::from_raw_parts(z, layout.size()) };
        assert!(
            bytes.iter().all(|&b| b == 0),
            "a zeroed block held {bytes:?}"
        );
        // SAFETY: ours, freed once.
        unsafe { a.dealloc(z, layout) };
    }
}

#[test]
fn the_cpu_slab_designs_restartable_sequences_pop_without_the_lock() {
    if std::env::var_os(RSEQ_CHILD).is_some() {
        return rseq_workload();
    }
    let stdout = run_child(
        "the_cpu_slab_designs_restartable_sequences_pop_without_the_lock",
        RSEQ_CHILD,
        &[("KMEM_SLUB", "cpu-slab"), ("KMEM_PERCPU", "cpu-rseq")],
    );
    assert!(
        stdout.contains("rseq pops") || stdout.contains("rseq unavailable"),
        "{stdout}"
    );
}
