//! Suites `percpu` and `percpu_memory`: kmem in each per-CPU mode.
//!
//! The mode is fixed when the heap starts, so each mode runs in a child process
//! (`kmem bench-child …` with `KMEM_PERCPU` set) that prints its figures as JSON; the
//! parent labels them with the mode (`thread`: a CPU area per thread; `cpu-rseq`: a
//! CPU area per CPU, alloc/free fast paths in restartable sequences, the rest under
//! the area's local lock; `cpu-cas`: the same with a double-word CAS instead of rseq;
//! `cpu-lock`: a CPU area per CPU, everything under its lock).
//!
//! - `percpu`: `fastpath_reuse` (alloc+free of one 256-byte object of a kmem_cache,
//!   op `pair`), `fastpath_reuse_2t` (the same on 2 threads, param 2), `kmalloc_kfree`
//!   (param = size, op `pair`), `cross_thread_free` (64-byte objects allocated on one
//!   thread and freed on another, op `elem`).
//! - `percpu_memory`, bench `held_after_threads`: N threads (param: 2, 64, 512) each
//!   allocate and free a working set (objects of 16 B … 2 KiB and some pages) and wait;
//!   with all of them alive, the bytes held by per-CPU caches — CPU areas, per-CPU
//!   page lists, CPU slabs and CPU partial slabs (op `held`).

use super::{BenchResult, Ctx, Suite, Timing};
use kmem::{heap, Gfp, SlabFlags};
use std::sync::{mpsc, Barrier};

pub const SUITE: Suite = Suite {
    name: "percpu",
    steps: |_| MODES.len() as u64,
    run: run_times,
    report_lines: times_lines,
};

pub const MEMORY: Suite = Suite {
    name: "percpu_memory",
    steps: |_| MODES.len() as u64,
    run: run_memory,
    report_lines: memory_lines,
};

/// The modes, as `KMEM_PERCPU` spells them.
const MODES: [&str; 4] = ["thread", "cpu-rseq", "cpu-cas", "cpu-lock"];
const THREADS: [u64; 3] = [2, 64, 512];

/// Runs `kmem bench-child <what>` in `mode`; its results, labelled.
fn child(ctx: &Ctx, what: &str, mode: &str) -> Vec<BenchResult> {
    ctx.status(format!("{what} in mode {mode}"));
    let exe = std::env::current_exe().expect("the kmem executable");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["bench-child", what]).env("KMEM_PERCPU", mode);
    if ctx.quick {
        cmd.arg("--quick");
    }
    let out = cmd.output().expect("running a benchmark child");
    ctx.tick();
    if !out.status.success() {
        eprintln!(
            "kmem bench: the {what} child in mode {mode} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return Vec::new();
    }
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    rows.iter()
        .filter_map(|r| {
            let bench = NAMES.iter().find(|n| r["bench"] == **n)?;
            let op = OPS.iter().find(|n| r["op"] == **n)?;
            Some(BenchResult {
                mode: Some(mode.to_string()),
                ns: r["ns"].as_f64(),
                cycles: r["cycles"].as_f64(),
                ops: r["ops"].as_u64(),
                bytes: r["bytes"].as_u64(),
                ..BenchResult::bytes(bench, "kmem", r["param"].as_u64().unwrap_or(0), op, 0)
            })
        })
        .collect()
}

const NAMES: [&str; 5] = [
    "fastpath_reuse",
    "fastpath_reuse_2t",
    "kmalloc_kfree",
    "cross_thread_free",
    "held_after_threads",
];
const OPS: [&str; 3] = ["pair", "elem", "held"];

fn run_times(ctx: &Ctx) -> Vec<BenchResult> {
    MODES.iter().flat_map(|m| child(ctx, "times", m)).collect()
}

fn run_memory(ctx: &Ctx) -> Vec<BenchResult> {
    MODES.iter().flat_map(|m| child(ctx, "held", m)).collect()
}

/// The child's side: measures in this process's mode and prints the JSON rows.
pub fn child_main(what: &str, quick: bool) -> Result<(), String> {
    let ctx = Ctx::quiet(quick);
    let rows = match what {
        "times" => times(&ctx),
        "held" => held(),
        _ => return Err(format!("unknown child bench '{what}'")),
    };
    println!(
        "{}",
        serde_json::to_string(&rows).map_err(|e| e.to_string())?
    );
    Ok(())
}

fn times(ctx: &Ctx) -> Vec<BenchResult> {
    let h = heap();
    let loops: u64 = if ctx.quick { 200_000 } else { 2_000_000 };
    let s = h
        .kmem_cache_create("percpu-256", 256, 8, SlabFlags::empty(), None)
        .expect("cache");
    let pair = |n: u64| {
        for _ in 0..n {
            let p = h.kmem_cache_alloc(s, Gfp::KERNEL).expect("memory");
            // SAFETY: allocated just above.
            unsafe { h.kmem_cache_free(s, std::hint::black_box(p)) };
        }
    };
    let mut out = vec![BenchResult::time(
        "fastpath_reuse",
        "kmem",
        256,
        "pair",
        ctx.measure(loops, pair),
    )];
    let t = ctx.measure(loops, |n| {
        let barrier = Barrier::new(2);
        std::thread::scope(|sc| {
            for _ in 0..2 {
                sc.spawn(|| {
                    barrier.wait();
                    pair(n);
                });
            }
        });
    });
    out.push(BenchResult::time("fastpath_reuse_2t", "kmem", 2, "pair", t));
    for size in [32usize, 256] {
        let t = ctx.measure(loops, |n| {
            for _ in 0..n {
                let p = h.kmalloc(size, Gfp::KERNEL).expect("memory");
                // SAFETY: allocated just above.
                unsafe { h.kfree(std::hint::black_box(p.as_ptr())) };
            }
        });
        out.push(BenchResult::time(
            "kmalloc_kfree",
            "kmem",
            size as u64,
            "pair",
            t,
        ));
    }
    let t: Timing = ctx.measure(loops, |n| {
        let (tx, rx) = mpsc::sync_channel::<Vec<usize>>(4);
        std::thread::scope(|sc| {
            sc.spawn(move || {
                for batch in rx {
                    for p in batch {
                        // SAFETY: allocated by the other thread, handed over.
                        unsafe { heap().kfree(p as *mut u8) };
                    }
                }
            });
            let mut left = n;
            while left > 0 {
                let k = left.min(64);
                let batch: Vec<usize> = (0..k)
                    .map(|_| h.kmalloc(64, Gfp::KERNEL).expect("memory").as_ptr() as usize)
                    .collect();
                tx.send(batch).unwrap();
                left -= k;
            }
            drop(tx);
        });
    });
    out.push(BenchResult::time(
        "cross_thread_free",
        "kmem",
        64,
        "elem",
        t,
    ));
    out
}

fn held() -> Vec<BenchResult> {
    THREADS
        .iter()
        .map(|&n| {
            let start = Barrier::new(n as usize + 1);
            let done = Barrier::new(n as usize + 1);
            let mut bytes = 0;
            std::thread::scope(|sc| {
                for t in 0..n as usize {
                    let (start, done) = (&start, &done);
                    sc.spawn(move || {
                        let h = heap();
                        let objs: Vec<_> = (0..512)
                            .map(|i| {
                                let size = 16 << ((t + i) % 8);
                                h.kmalloc(size, Gfp::KERNEL).expect("memory")
                            })
                            .collect();
                        let pages: Vec<_> = (0..8)
                            .map(|_| h.alloc_pages(Gfp::KERNEL, 0).expect("memory"))
                            .collect();
                        for p in objs {
                            // SAFETY: allocated above.
                            unsafe { h.kfree(p.as_ptr()) };
                        }
                        for p in pages {
                            // SAFETY: order-0 pages allocated above.
                            unsafe { h.free_pages(p, 0) };
                        }
                        start.wait();
                        done.wait();
                    });
                }
                // Every thread has worked and waits, alive.
                start.wait();
                bytes = heap().percpu_held_bytes();
                done.wait();
            });
            BenchResult::bytes("held_after_threads", "kmem", n, "held", bytes as u64)
        })
        .collect()
}

fn get<'a>(
    results: &'a [BenchResult],
    bench: &str,
    mode: &str,
    param: u64,
) -> Option<&'a BenchResult> {
    results
        .iter()
        .find(|r| r.bench == bench && r.mode.as_deref() == Some(mode) && r.param == param)
}

fn times_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "per-CPU modes against thread mode (ns):");
    for (bench, param) in [
        ("fastpath_reuse", 256),
        ("fastpath_reuse_2t", 2),
        ("kmalloc_kfree", 32),
        ("kmalloc_kfree", 256),
        ("cross_thread_free", 64),
    ] {
        let ns = |m| get(results, bench, m, param).and_then(|r| r.ns);
        let Some(t) = ns("thread") else { continue };
        let _ = write!(out, "  {bench:<18} {param:>4}  thread {t:>7.2}");
        for m in &MODES[1..] {
            if let Some(v) = ns(m) {
                let _ = write!(out, "  {m} {v:>7.2} ({:.2}x)", v / t);
            }
        }
        let _ = writeln!(out);
    }
    out
}

fn memory_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "bytes held by per-CPU caches with N threads alive:");
    for n in THREADS {
        let b = |m| get(results, "held_after_threads", m, n).and_then(|r| r.bytes);
        if let (Some(t), Some(c)) = (b("thread"), b("cpu-rseq")) {
            let _ = writeln!(
                out,
                "  {n:>4} threads  thread {:>9.1} KiB  cpu-rseq {:>8.1} KiB  ({:.1}x less)",
                t as f64 / 1024.0,
                c as f64 / 1024.0,
                t as f64 / c.max(1) as f64
            );
        }
    }
    out
}
