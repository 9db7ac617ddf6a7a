//! Suites `percpu` and `percpu_memory`: kmem in each per-CPU mode, in both designs of
//! the slab layer.
//!
//! The mode and the design are fixed when the heap starts, so each pair runs in a
//! child process (`kmem bench-child …` with `KMEM_PERCPU` and `KMEM_SLUB` set, see
//! [`child`]) that prints its figures as JSON; the parent labels them with the mode
//! (`thread`: a CPU area per thread; `cpu-rseq`: a CPU area per CPU, alloc/free fast
//! paths in restartable sequences, the rest under the area's local lock; `cpu-cas`:
//! the same with a double-word CAS instead of rseq; `cpu-lock`: a CPU area per CPU,
//! everything under its lock). The modes in the default design, per-CPU sheaves and
//! per-node barns (`KMEM_SLUB=sheaves`), keep these names; in the CPU-slab design
//! (`KMEM_SLUB=cpu-slab`: the CPU slab with `tid` and the double-word CAS) they are
//! `thread/cpu-slab`, `cpu-rseq/cpu-slab`, `cpu-cas/cpu-slab`, `cpu-lock/cpu-slab`.
//!
//! - `percpu`: `fastpath_reuse` (alloc+free of one 256-byte object of a kmem_cache,
//!   op `pair`), `fastpath_reuse_2t` (the same on 2 threads, param 2), `kmalloc_kfree`
//!   (param = size, op `pair`), `global_pair` (`GlobalAlloc::alloc` + `dealloc` of a
//!   32-byte layout through `KmemAlloc`, what a Rust program's `Box` runs; param =
//!   size, op `pair`), `cross_thread_free` (64-byte objects allocated on one thread
//!   and freed on another, op `elem`).
//! - `percpu_memory`, bench `held_after_threads`: N threads (param: 2, 64, 512) each
//!   allocate and free a working set (objects of 16 B … 2 KiB and some pages) and wait;
//!   with all of them alive, the bytes held by per-CPU caches — CPU areas, per-CPU
//!   page lists, CPU slabs and CPU partial slabs, sheaves and the objects in them
//!   (op `held`).
//!
//! The reports compare, in each design, the per-CPU modes with thread mode, then the
//! CPU-slab design with sheaves mode by mode.

use super::child::{self, Child, DESIGNS};
use super::handoff::{spread, Handoff};
use super::{BenchResult, Ctx, Suite, Timing};
use kmem::{heap, Gfp, SlabFlags};
use std::sync::Barrier;

pub const SUITE: Suite = Suite {
    name: "percpu",
    steps: |quick| rounds(quick) as u64 * runs() * (TIMES.steps)(quick),
    run: run_times,
    report_lines: times_lines,
};

pub const MEMORY: Suite = Suite {
    name: "percpu_memory",
    steps: |quick| runs() * (HELD.steps)(quick),
    run: run_memory,
    report_lines: memory_lines,
};

/// The child of `percpu`: its six measurements.
pub const TIMES: Child = Child {
    what: "times",
    measure: times,
    steps: |_| 6,
};

/// The child of `percpu_memory`.
pub const HELD: Child = Child {
    what: "held",
    measure: |_| held(),
    steps: |_| 1,
};

/// The modes, as `KMEM_PERCPU` spells them.
const MODES: [&str; 4] = ["thread", "cpu-rseq", "cpu-cas", "cpu-lock"];
const THREADS: [u64; 3] = [2, 64, 512];

/// Children per suite: every mode in every design.
fn runs() -> u64 {
    (MODES.len() * DESIGNS.len()) as u64
}

/// The mode column's label of `mode` in `design`: the mode alone in sheaves (the
/// default), `mode/cpu-slab` in the CPU-slab design.
fn label(mode: &str, design: &str) -> String {
    if design == DESIGNS[0] {
        mode.to_string()
    } else {
        format!("{mode}/{design}")
    }
}

/// Runs `child` in every design and mode; its results, labelled.
fn each_mode(ctx: &Ctx, c: &Child) -> Vec<BenchResult> {
    let mut out = Vec::new();
    for design in DESIGNS {
        for mode in MODES {
            let label = label(mode, design);
            let env = [("KMEM_PERCPU", mode), ("KMEM_SLUB", design)];
            let rows = child::run(ctx, c, &env, &format!("mode {label}"));
            out.extend(rows.into_iter().map(|r| BenchResult {
                mode: Some(label.clone()),
                ..r
            }));
        }
    }
    out
}

/// Rounds of `percpu`'s children: each round runs every mode's child once, so that
/// the modes take turns (a child per mode in one block read 1.3x to 2.7x for the same
/// build, as the machine's speed drifted between the blocks).
fn rounds(quick: bool) -> usize {
    if quick {
        1
    } else {
        3
    }
}

fn run_times(ctx: &Ctx) -> Vec<BenchResult> {
    let rounds: Vec<_> = (0..rounds(ctx.quick))
        .map(|_| each_mode(ctx, &TIMES))
        .collect();
    median_rows(rounds)
}

/// Of the rows of several rounds, for each mode, bench and parameter the one with the
/// median time (the lower middle of an even count), in the order they first appear: a
/// row a round lacks (its child failed) comes from the rounds that have it.
fn median_rows(rounds: Vec<Vec<BenchResult>>) -> Vec<BenchResult> {
    let same = |a: &BenchResult, b: &BenchResult| {
        a.bench == b.bench && a.param == b.param && a.op == b.op && a.mode == b.mode
    };
    let mut keys: Vec<&BenchResult> = Vec::new();
    for r in rounds.iter().flatten() {
        if !keys.iter().any(|k| same(k, r)) {
            keys.push(r);
        }
    }
    keys.into_iter()
        .map(|key| {
            let mut all: Vec<&BenchResult> = rounds
                .iter()
                .filter_map(|r| r.iter().find(|x| same(x, key)))
                .collect();
            all.sort_by(|a, b| {
                a.ns.unwrap_or(f64::NAN)
                    .total_cmp(&b.ns.unwrap_or(f64::NAN))
            });
            all[(all.len() - 1) / 2].clone()
        })
        .collect()
}

fn run_memory(ctx: &Ctx) -> Vec<BenchResult> {
    each_mode(ctx, &HELD)
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
    let layout = std::alloc::Layout::from_size_align(32, 8).expect("layout");
    let t = ctx.measure(loops, |n| {
        use std::alloc::GlobalAlloc as _;
        for _ in 0..n {
            // SAFETY: a layout of non-zero size.
            let p = unsafe { kmem::KmemAlloc.alloc(layout) };
            assert!(!p.is_null(), "memory");
            // SAFETY: allocated just above with `layout`.
            unsafe { kmem::KmemAlloc.dealloc(std::hint::black_box(p), layout) };
        }
    });
    out.push(BenchResult::time("global_pair", "kmem", 32, "pair", t));
    let t: Timing = ctx.measure(loops, |n| {
        let q: Handoff<Vec<usize>> = Handoff::new(4, 1);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                spread(1, 2);
                let input = q.consumer();
                while let Some(batch) = input.pop() {
                    for p in batch {
                        // SAFETY: allocated by the other thread, handed over.
                        unsafe { heap().kfree(p as *mut u8) };
                    }
                }
            });
            sc.spawn(|| {
                spread(0, 2);
                let out = q.producer();
                let mut left = n;
                while left > 0 {
                    let k = left.min(64);
                    let batch: Vec<usize> = (0..k)
                        .map(|_| h.kmalloc(64, Gfp::KERNEL).expect("memory").as_ptr() as usize)
                        .collect();
                    out.push(batch);
                    left -= k;
                }
            });
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

/// The benches of `percpu` and their params, in report order.
const TIMED: [(&str, u64); 6] = [
    ("fastpath_reuse", 256),
    ("fastpath_reuse_2t", 2),
    ("kmalloc_kfree", 32),
    ("kmalloc_kfree", 256),
    ("global_pair", 32),
    ("cross_thread_free", 64),
];

/// Per design, each per-CPU mode against thread mode; then the CPU-slab design
/// against sheaves, mode by mode.
fn times_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let ns = |bench, param, mode: &str, design| {
        get(results, bench, &label(mode, design), param).and_then(|r| r.ns)
    };
    for design in DESIGNS {
        if design == DESIGNS[0] {
            let _ = writeln!(out, "per-CPU modes against thread mode (ns):");
        } else {
            let _ = writeln!(
                out,
                "per-CPU modes against thread mode, {design} design (ns):"
            );
        }
        for (bench, param) in TIMED {
            let Some(t) = ns(bench, param, "thread", design) else {
                continue;
            };
            let _ = write!(out, "  {bench:<18} {param:>4}  thread {t:>7.2}");
            for m in &MODES[1..] {
                if let Some(v) = ns(bench, param, m, design) {
                    let _ = write!(out, "  {m} {v:>7.2} ({:.2}x)", v / t);
                }
            }
            let _ = writeln!(out);
        }
    }
    let (new, old) = (DESIGNS[0], DESIGNS[1]);
    let _ = writeln!(
        out,
        "{old} design against {new}, each mode ({old} ns / {new} ns):"
    );
    for (bench, param) in TIMED {
        let mut line = format!("  {bench:<18} {param:>4}");
        let mut any = false;
        for m in MODES {
            if let (Some(n), Some(o)) = (ns(bench, param, m, new), ns(bench, param, m, old)) {
                let _ = write!(line, "  {m} {:.2}x", o / n);
                any = true;
            }
        }
        if any {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// Per design, with N threads alive: thread mode's bytes against cpu-rseq's; then
/// thread mode's in the CPU-slab design against sheaves.
fn memory_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let b = |mode: &str, design, n| {
        get(results, "held_after_threads", &label(mode, design), n).and_then(|r| r.bytes)
    };
    let kib = |x: u64| x as f64 / 1024.0;
    for design in DESIGNS {
        if design == DESIGNS[0] {
            let _ = writeln!(out, "bytes held by per-CPU caches with N threads alive:");
        } else {
            let _ = writeln!(
                out,
                "bytes held by per-CPU caches with N threads alive, {design} design:"
            );
        }
        for n in THREADS {
            if let (Some(t), Some(c)) = (b("thread", design, n), b("cpu-rseq", design, n)) {
                let _ = writeln!(
                    out,
                    "  {n:>4} threads  thread {:>9.1} KiB  cpu-rseq {:>8.1} KiB  ({:.1}x less)",
                    kib(t),
                    kib(c),
                    t as f64 / c.max(1) as f64
                );
            }
        }
    }
    let (new, old) = (DESIGNS[0], DESIGNS[1]);
    let _ = writeln!(
        out,
        "{old} design against {new} ({old} bytes / {new} bytes):"
    );
    for n in THREADS {
        let mut line = format!("  {n:>4} threads");
        let mut any = false;
        for m in MODES {
            if let (Some(x), Some(o)) = (b(m, new, n), b(m, old, n)) {
                let _ = write!(line, "  {m} {:.2}x", o as f64 / x.max(1) as f64);
                any = true;
            }
        }
        if any {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(bench: &'static str, mode: &str, param: u64, ns: f64) -> BenchResult {
        let t = Timing {
            ns,
            cycles: None,
            ops: 1,
        };
        BenchResult {
            mode: Some(mode.into()),
            ..BenchResult::time(bench, "kmem", param, "pair", t)
        }
    }

    fn held(mode: &str, n: u64, kib: u64) -> BenchResult {
        BenchResult {
            mode: Some(mode.into()),
            ..BenchResult::bytes("held_after_threads", "kmem", n, "held", kib << 10)
        }
    }

    #[test]
    fn rounds_give_each_mode_and_bench_its_median_row() {
        let rounds = vec![
            vec![row("a", "thread", 32, 5.0), row("a", "cpu-rseq", 32, 9.0)],
            vec![row("a", "cpu-rseq", 32, 7.0), row("a", "thread", 32, 3.0)],
            vec![row("a", "thread", 32, 4.0), row("a", "cpu-rseq", 32, 20.0)],
        ];
        let m = median_rows(rounds);
        let ns: Vec<_> = m.iter().map(|r| (r.mode.clone().unwrap(), r.ns)).collect();
        assert_eq!(
            ns,
            [
                ("thread".to_string(), Some(4.0)),
                ("cpu-rseq".into(), Some(9.0))
            ]
        );
        // Even counts take the lower middle; a row missing from a round (a failed
        // child) leaves the others.
        let two = vec![
            vec![row("a", "thread", 32, 5.0), row("b", "thread", 64, 1.0)],
            vec![row("a", "thread", 32, 3.0)],
        ];
        let m = median_rows(two);
        assert_eq!(
            m.iter().map(|r| r.ns).collect::<Vec<_>>(),
            [Some(3.0), Some(1.0)]
        );
        assert!(median_rows(Vec::new()).is_empty());
        // A mode whose first round's child failed keeps its other rounds (it was
        // dropped: the rows were keyed on the first round alone).
        let late = vec![
            vec![row("a", "thread", 32, 5.0)],
            vec![row("a", "thread", 32, 3.0), row("a", "cpu-rseq", 32, 8.0)],
            vec![row("a", "cpu-rseq", 32, 6.0), row("a", "thread", 32, 4.0)],
        ];
        let m = median_rows(late);
        let ns: Vec<_> = m.iter().map(|r| (r.mode.clone().unwrap(), r.ns)).collect();
        assert_eq!(
            ns,
            [
                ("thread".to_string(), Some(4.0)),
                ("cpu-rseq".into(), Some(6.0))
            ]
        );
    }

    #[test]
    fn modes_keep_their_names_in_sheaves_and_carry_the_design_in_cpu_slab() {
        assert_eq!(label("cpu-rseq", "sheaves"), "cpu-rseq");
        assert_eq!(label("cpu-rseq", "cpu-slab"), "cpu-rseq/cpu-slab");
        assert_eq!(runs(), 8);
        assert_eq!((SUITE.steps)(true), 48);
        assert_eq!((MEMORY.steps)(true), 8);
    }

    #[test]
    fn times_report_each_design_then_cpu_slab_against_sheaves() {
        let results = [
            row("fastpath_reuse", "thread", 256, 5.0),
            row("fastpath_reuse", "cpu-rseq", 256, 10.0),
            row("fastpath_reuse", "thread/cpu-slab", 256, 10.0),
            row("fastpath_reuse", "cpu-rseq/cpu-slab", 256, 15.0),
        ];
        assert_eq!(
            times_lines(&results),
            "per-CPU modes against thread mode (ns):\n\
             \x20 fastpath_reuse      256  thread    5.00  cpu-rseq   10.00 (2.00x)\n\
             per-CPU modes against thread mode, cpu-slab design (ns):\n\
             \x20 fastpath_reuse      256  thread   10.00  cpu-rseq   15.00 (1.50x)\n\
             cpu-slab design against sheaves, each mode (cpu-slab ns / sheaves ns):\n\
             \x20 fastpath_reuse      256  thread 2.00x  cpu-rseq 1.50x\n"
        );
    }

    #[test]
    fn memory_report_gives_thread_over_cpu_rseq_in_each_design() {
        let results = [
            held("thread", 512, 4096),
            held("cpu-rseq", 512, 512),
            held("thread/cpu-slab", 512, 8192),
            held("cpu-rseq/cpu-slab", 512, 1024),
        ];
        assert_eq!(
            memory_lines(&results),
            "bytes held by per-CPU caches with N threads alive:\n\
             \x20  512 threads  thread    4096.0 KiB  cpu-rseq    512.0 KiB  (8.0x less)\n\
             bytes held by per-CPU caches with N threads alive, cpu-slab design:\n\
             \x20  512 threads  thread    8192.0 KiB  cpu-rseq   1024.0 KiB  (8.0x less)\n\
             cpu-slab design against sheaves (cpu-slab bytes / sheaves bytes):\n\
             \x20  512 threads  thread 2.00x  cpu-rseq 2.00x\n"
        );
    }
}
