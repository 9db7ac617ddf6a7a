//! Suite `memcg`: what memory accounting costs, in the experiment of Waiman Long's
//! series "mm/memcg: Reduce kmemcache memory accounting overhead".
//!
//! - `kmalloc_batch4`: 2 threads, each repeating 4 × kmalloc(size) then 4 × kfree,
//!   for sizes 32 and 4096 (op `pair`: ns per kmalloc+kfree on one thread). Modes:
//!   `off` (no active group: plain kmalloc caches, no charge), `nostock` (both threads
//!   in one group, every charge and statistic on the shared counters with atomics),
//!   `stock` (the same with the per-CPU stock: bytes pre-charged and statistic deltas
//!   cached per CPU area, as the kernel's memcg_stock_pcp does since that series'
//!   patches 2–4). The modes take turns a repetition each, in three passes; each
//!   figure is the median of its three pass medians (the lowest, before, favoured
//!   whichever mode had one lucky pass).
//! - `leftover` (`bytes`, op `charged`), only if non-zero: bytes still charged to the
//!   bench's group once every object was freed, an accounting leak (reported, not a
//!   panic: benchmarks report).

use super::{BenchResult, Ctx, Suite};
use kmem::{heap, memcg, Gfp, MemCgroup};
use std::sync::Barrier;

pub const SUITE: Suite = Suite {
    name: "memcg",
    steps,
    run,
    report_lines,
};

const MODES: [&str; 3] = ["off", "nostock", "stock"];
const SIZES: [u64; 2] = [32, 4096];
const THREADS: usize = 2;
const BATCH: usize = 4;
const PASSES: usize = 3;

fn steps(_quick: bool) -> u64 {
    (MODES.len() * SIZES.len() * PASSES) as u64
}

/// `n` pairs on each of 2 threads, in batches of 4, inside `cg` if given.
fn batch4(n: u64, size: usize, cg: Option<&MemCgroup<'_>>) {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let g = cg.map(|c| c.enter());
                let h = heap();
                let mut p = [std::ptr::null_mut::<u8>(); BATCH];
                barrier.wait();
                for _ in 0..n / BATCH as u64 {
                    for slot in p.iter_mut() {
                        *slot = h.kmalloc(size, Gfp::KERNEL).expect("memory").as_ptr();
                    }
                    for &q in p.iter() {
                        // SAFETY: allocated just above, freed once.
                        unsafe { h.kfree(std::hint::black_box(q)) };
                    }
                }
                drop(g);
                // Thread exit would drain this thread's stock, but only after the
                // scope has seen it finish: drain it now.
                h.detach_thread();
            });
        }
    });
}

fn run(ctx: &Ctx) -> Vec<BenchResult> {
    let loops: u64 = if ctx.quick { 200_000 } else { 2_000_000 };
    let cg = MemCgroup::new("bench").expect("memory for a group");
    let mut passes = vec![Vec::<super::Timing>::new(); MODES.len() * SIZES.len()];
    for pass in 0..PASSES {
        for (si, &size) in SIZES.iter().enumerate() {
            ctx.status(format!("memcg kmalloc_batch4({size}) (pass {})", pass + 1));
            // The modes take turns, a repetition each (`Ctx::measure_interleaved`), so
            // that the overhead compares runs of the same stretch of time.
            let times = ctx.measure_interleaved(loops, MODES.len(), |mi, n| {
                let mode = MODES[mi];
                memcg::set_stock_enabled(mode != "nostock");
                let group = (mode != "off").then_some(&cg);
                batch4(n, size as usize, group);
            });
            for (mi, t) in times.into_iter().enumerate() {
                passes[si * MODES.len() + mi].push(t);
            }
        }
    }
    memcg::set_stock_enabled(true);
    let mut out = Vec::new();
    for (si, &size) in SIZES.iter().enumerate() {
        for (mi, &mode) in MODES.iter().enumerate() {
            let t = super::timing::median_pass(&mut passes[si * MODES.len() + mi]);
            out.push(BenchResult {
                mode: Some(mode.to_string()),
                ..BenchResult::time("kmalloc_batch4", "kmem", size, "pair", t)
            });
        }
    }
    let left = cg.usage();
    if left != 0 {
        eprintln!(
            "kmem bench memcg: {left} bytes still charged to the bench's group after every \
             object was freed and uncharged (an accounting leak)"
        );
        out.push(BenchResult::bytes(
            "leftover",
            "kmem",
            0,
            "charged",
            left as u64,
        ));
    }
    out
}

/// The series' table: run time per pair and the accounting overhead per mode.
fn report_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let ns = |mode: &str, size: u64| {
        results
            .iter()
            .find(|r| {
                r.bench == "kmalloc_batch4" && r.mode.as_deref() == Some(mode) && r.param == size
            })
            .and_then(|r| r.ns)
    };
    let _ = writeln!(
        out,
        "kmalloc_batch4 ({THREADS} threads, batches of {BATCH}): ns per kmalloc+kfree\n\
         {:<8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "size", "off", "nostock", "overhead", "stock", "overhead"
    );
    for size in SIZES {
        let (Some(off), Some(nostock), Some(stock)) =
            (ns("off", size), ns("nostock", size), ns("stock", size))
        else {
            continue;
        };
        let pct = |t: f64| (t / off - 1.0) * 100.0;
        let _ = writeln!(
            out,
            "{size:<8} {off:>9.2} {nostock:>9.2} {:>8.1}% {stock:>9.2} {:>8.1}%",
            pct(nostock),
            pct(stock)
        );
    }
    out
}
