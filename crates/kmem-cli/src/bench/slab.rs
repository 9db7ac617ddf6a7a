//! Suite `slab`: Christoph Lameter's slab_test, the kmalloc tests whose report the
//! cover letter of "slub: Fastpath optimization (especially for RT) V1" quotes.
//!
//! - `kmalloc_then_kfree` (test 1): 10000 times kmalloc(N), then 10000 kfree; per
//!   allocation (op `alloc`) and per free (op `free`).
//! - `kmalloc_kfree` (test 2): 10000 times kmalloc(N) then kfree at once (op `pair`).
//!
//! Sizes 8 … 16384. Peers allocate the same sizes (alignment 8) through GlobalAlloc.

use super::peers::Peer;
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

fn steps(_quick: bool) -> u64 {
    SIZES.len() as u64 * 2 * 4
}

fn run(ctx: &Ctx) -> Vec<BenchResult> {
    let mut out = Vec::new();
    let h = heap();
    let rounds: u64 = if ctx.quick { 2 } else { 10 };
    let mut ptrs = vec![std::ptr::null_mut::<u8>(); COUNT];
    for &size in &SIZES {
        ctx.status(format!("slab_test kmalloc({size})"));
        let n = COUNT as u64 * rounds;
        // Test 1, kmem.
        let t1 = ctx.alloc_then_free(
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
        );
        // Test 2, kmem.
        let t2 = ctx.measure(n, |n| {
            for _ in 0..n {
                let p = h.kmalloc(size as usize, Gfp::KERNEL).expect("memory");
                // SAFETY: allocated just above.
                unsafe { h.kfree(std::hint::black_box(p.as_ptr())) };
            }
        });
        out.extend(figures("kmem", size, t1, t2));
        for peer in Peer::ALL {
            let layout = Layout::from_size_align(size as usize, 8).unwrap();
            let t1 = ctx.alloc_then_free(
                rounds,
                &mut ptrs,
                // SAFETY: non-zero size; freed below with this layout.
                || unsafe { peer.alloc(layout) },
                // SAFETY: each pointer comes from the alloc above with this layout.
                |p| unsafe { peer.dealloc(p, layout) },
            );
            let t2 = ctx.measure(n, |n| {
                for _ in 0..n {
                    // SAFETY: non-zero size; freed with the same layout.
                    unsafe {
                        let p = peer.alloc(layout);
                        peer.dealloc(std::hint::black_box(p), layout);
                    }
                }
            });
            out.extend(figures(peer.name(), size, t1, t2));
        }
    }
    out
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

/// slab_test's report, for kmem and each peer.
fn report_lines(results: &[BenchResult]) -> String {
    let mut out = String::new();
    let cyc = |bench: &str, alloc: &str, size: u64, op: &str| {
        results
            .iter()
            .find(|r| r.bench == bench && r.allocator == alloc && r.param == size && r.op == op)
            .map(|r| r.cycles.unwrap_or(r.ns.unwrap_or(0.0)))
            .unwrap_or(0.0)
    };
    let names = super::SlabTestNames {
        title: "Kmalloc",
        alloc: "kmalloc",
        free: "kfree",
    };
    for alloc in ["kmem", "system", "mimalloc", "jemalloc"] {
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
    out
}
