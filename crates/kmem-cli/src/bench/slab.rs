//! Suite `slab`: Christoph Lameter's slab_test, the kmalloc tests whose report the
//! cover letter of "slub: Fastpath optimization (especially for RT) V1" quotes.
//!
//! - `kmalloc_then_kfree` (test 1): 10000 times kmalloc(N), then 10000 kfree; per
//!   allocation (op `alloc`) and per free (op `free`).
//! - `kmalloc_kfree` (test 2): 10000 times kmalloc(N) then kfree at once (op `pair`).
//!
//! Sizes 8 … 16384. Peers allocate the same sizes (alignment 8) through GlobalAlloc.
//! `kmem` calls `Heap::kmalloc` and `kfree` as a Rust program does, their fast paths
//! inlined into the loop (and the size class of a size fixed for the loop worked out
//! once); the peers' GlobalAlloc calls a C function each time. `kmem[called]` (mode
//! `called`) is kmem called as the peers are: through functions that are not inlined,
//! with the size passed at each call — the like-for-like figure.
//! At each size the allocators take turns, a repetition each
//! ([`Ctx::measure_phases_interleaved`], [`Ctx::measure_interleaved`]), so that kmem and
//! a peer are compared over the same stretch of time on a noisy machine.
//! `kmem[cpu-slab]` is kmem in the slab layer's CPU-slab design (`KMEM_SLUB=cpu-slab`):
//! the same kmalloc tests in a child process (`kmem bench-child slab`), since the
//! design is fixed when the heap starts and this process's `kmem` runs sheaves.

use super::child::{self, Child, KMEM_CPU_SLAB};
use super::peers::Peer;
use super::slab_test::then_phases;
use super::{BenchResult, Ctx, Suite, Timing};
use kmem::{heap, Gfp};
use std::alloc::Layout;

pub const SUITE: Suite = Suite {
    name: "slab",
    steps,
    run,
    report_lines,
};

const SIZES: [u64; 12] = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];
const COUNT: usize = 10_000;

/// kmem's part, run in a child in the CPU-slab design.
pub const CHILD: Child = Child {
    what: "slab",
    measure: |ctx| measure(ctx, &[]),
    steps: |_| SIZES.len() as u64 * 2,
};

fn steps(_quick: bool) -> u64 {
    // Two measurements per size for kmem, kmem[called], kmem[cpu-slab] and each peer.
    SIZES.len() as u64 * 2 * (3 + Peer::ALL.len() as u64)
}

/// kmem and the peers in this process, then kmem in the CPU-slab design (a child),
/// beside kmem.
fn run(ctx: &Ctx) -> Vec<BenchResult> {
    let mut out = measure(ctx, &Peer::ALL);
    out.extend(child::cpu_slab(ctx, &CHILD));
    child::beside_kmem(out)
}

/// Both tests at every size with kmem and each of `peers`, taking turns.
fn measure(ctx: &Ctx, peers: &[Peer]) -> Vec<BenchResult> {
    let mut out = Vec::new();
    let h = heap();
    let rounds: u64 = if ctx.quick { 2 } else { 10 };
    let mut ptrs = vec![std::ptr::null_mut::<u8>(); COUNT];
    // The contestants: kmem (`None`), then the peers, then kmem called out of line
    // (only beside peers: the CPU-slab child has none).
    let called = !peers.is_empty();
    let who: Vec<Option<Peer>> = std::iter::once(None)
        .chain(peers.iter().copied().map(Some))
        .chain(called.then_some(None))
        .collect();
    let is_called = |i: usize| called && i == who.len() - 1;
    for &size in &SIZES {
        ctx.status(format!("slab_test kmalloc({size})"));
        let n = COUNT as u64 * rounds;
        let layout = Layout::from_size_align(size as usize, 8).unwrap();
        // Test 1.
        let t1 = ctx.measure_phases_interleaved(n, who.len(), |i, _| match who[i] {
            None if is_called(i) => then_phases(
                rounds,
                &mut ptrs,
                || kmalloc_called(std::hint::black_box(size as usize)),
                // SAFETY: each pointer comes from the kmalloc above, freed once.
                |p| unsafe { kfree_called(p) },
            ),
            None => then_phases(
                rounds,
                &mut ptrs,
                || {
                    h.kmalloc(size as usize, Gfp::KERNEL)
                        .expect("memory")
                        .as_ptr()
                },
                // SAFETY: each pointer comes from the kmalloc above, freed once.
                |p| unsafe {
                    h.kfree(p);
                },
            ),
            Some(peer) => then_phases(
                rounds,
                &mut ptrs,
                // SAFETY: non-zero size; freed below with this layout.
                || unsafe { peer.alloc(layout) },
                // SAFETY: each pointer comes from the alloc above with this layout.
                |p| unsafe { peer.dealloc(p, layout) },
            ),
        });
        // Test 2.
        let t2 = ctx.measure_interleaved(n, who.len(), |i, n| match who[i] {
            None if is_called(i) => {
                for _ in 0..n {
                    let p = kmalloc_called(std::hint::black_box(size as usize));
                    // SAFETY: allocated just above.
                    unsafe { kfree_called(std::hint::black_box(p)) };
                }
            }
            None => {
                for _ in 0..n {
                    let p = h.kmalloc(size as usize, Gfp::KERNEL).expect("memory");
                    // SAFETY: allocated just above.
                    unsafe { h.kfree(std::hint::black_box(p.as_ptr())) };
                }
            }
            Some(peer) => {
                for _ in 0..n {
                    // SAFETY: non-zero size; freed with the same layout.
                    unsafe {
                        let p = peer.alloc(layout);
                        peer.dealloc(std::hint::black_box(p), layout);
                    }
                }
            }
        });
        for (k, w) in who.iter().enumerate() {
            let name = w.map_or("kmem", Peer::name);
            let rows = figures(name, size, t1[k], t2[k]);
            out.extend(rows.map(|r| BenchResult {
                mode: is_called(k).then(|| "called".to_string()),
                ..r
            }));
        }
    }
    out
}

/// `Heap::kmalloc` out of line, for `kmem[called]`.
#[inline(never)]
fn kmalloc_called(size: usize) -> *mut u8 {
    heap().kmalloc(size, Gfp::KERNEL).expect("memory").as_ptr()
}

/// `Heap::kfree` out of line, for `kmem[called]`.
///
/// # Safety
/// As `Heap::kfree`.
#[inline(never)]
unsafe fn kfree_called(p: *mut u8) {
    // SAFETY: forwarded from the caller.
    unsafe { heap().kfree(p) };
}

/// One allocator's figures at one size: test 1 per allocation and per free, then
/// test 2 per pair.
fn figures(
    alloc: &'static str,
    size: u64,
    then_free: [Timing; 2],
    pair: Timing,
) -> [BenchResult; 3] {
    [
        BenchResult::time("kmalloc_then_kfree", alloc, size, "alloc", then_free[0]),
        BenchResult::time("kmalloc_then_kfree", alloc, size, "free", then_free[1]),
        BenchResult::time("kmalloc_kfree", alloc, size, "pair", pair),
    ]
}

/// slab_test's report, for kmem, the CPU-slab design (where it ran) and each peer;
/// then the CPU-slab design against kmem.
fn report_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let cyc = |bench: &str, alloc: &str, size: u64, op: &str| {
        results
            .iter()
            .find(|r| r.bench == bench && r.column() == alloc && r.param == size && r.op == op)
            .map(|r| r.cycles.unwrap_or(r.ns.unwrap_or(0.0)))
            .unwrap_or(0.0)
    };
    let names = super::SlabTestNames {
        title: "Kmalloc",
        alloc: "kmalloc",
        free: "kfree",
    };
    let cpu_slab = results.iter().any(child::is_cpu_slab);
    let allocs = ["kmem", KMEM_CPU_SLAB, "system", "mimalloc", "jemalloc"];
    for alloc in allocs
        .into_iter()
        .filter(|&a| a != KMEM_CPU_SLAB || cpu_slab)
    {
        super::slab_test_lines(
            &mut out,
            alloc,
            &names,
            &SIZES,
            |size| {
                (
                    cyc("kmalloc_then_kfree", alloc, size, "alloc"),
                    cyc("kmalloc_then_kfree", alloc, size, "free"),
                )
            },
            |size| cyc("kmalloc_kfree", alloc, size, "pair"),
        );
    }
    if cpu_slab {
        let _ = writeln!(
            out,
            "\n{KMEM_CPU_SLAB}/kmem in cycles (above 1: sheaves faster)\n{:>8} {:>15} {:>13} {:>21}",
            "size", "test 1 kmalloc", "test 1 kfree", "test 2 kmalloc/kfree"
        );
        let ratio = |bench, size, op| {
            let (k, c) = (
                cyc(bench, "kmem", size, op),
                cyc(bench, KMEM_CPU_SLAB, size, op),
            );
            (k > 0.0 && c > 0.0).then(|| format!("{:.2}", c / k))
        };
        for size in SIZES {
            let cells = [
                ratio("kmalloc_then_kfree", size, "alloc"),
                ratio("kmalloc_then_kfree", size, "free"),
                ratio("kmalloc_kfree", size, "pair"),
            ]
            .map(|c| c.unwrap_or_else(|| "-".into()));
            let _ = writeln!(
                out,
                "{size:>8} {:>15} {:>13} {:>21}",
                cells[0], cells[1], cells[2]
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_adds_the_cpu_slab_design_beside_kmem_where_it_ran() {
        let t = |cycles| Timing {
            ns: 1.0,
            cycles: Some(cycles),
            ops: 1,
        };
        let mut results = Vec::new();
        for (alloc, c) in [("kmem", 10.0), ("system", 30.0)] {
            results.extend(figures(alloc, 8, [t(c), t(c)], t(c)));
        }
        let without = report_lines(&results);
        assert!(!without.contains(KMEM_CPU_SLAB), "{without}");
        results.extend(figures("kmem", 8, [t(15.0), t(5.0)], t(20.0)).map(child::in_cpu_slab));
        let with = report_lines(&child::beside_kmem(results));
        let kmem = with.find("\nkmem: Single").unwrap();
        let cpu_slab = with.find("\nkmem[cpu-slab]: Single").unwrap();
        let system = with.find("\nsystem: Single").unwrap();
        assert!(kmem < cpu_slab && cpu_slab < system, "{with}");
        assert!(with.contains("10000 times kmalloc(8) -> 15 cycles kfree -> 5 cycles\n"));
        assert!(
            with.contains(
                "kmem[cpu-slab]/kmem in cycles (above 1: sheaves faster)\n\
                 \x20   size  test 1 kmalloc  test 1 kfree  test 2 kmalloc/kfree\n\
                 \x20      8            1.50          0.50                  2.00\n"
            ),
            "{with}"
        );
        // Sizes without figures show dashes.
        assert!(
            with.contains("\n      16               -             -                     -\n"),
            "{with}"
        );
    }
}
