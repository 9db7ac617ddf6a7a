//! Suite `slab`: Christoph Lameter's slab_test as in seed 000.
//!
//! - `kmalloc_then_kfree` (test 1): 10000 times kmalloc(N), then 10000 kfree; per
//!   allocation (op `alloc`) and per free (op `free`).
//! - `kmalloc_kfree` (test 2): 10000 times kmalloc(N) then kfree at once (op `pair`).
//!
//! Sizes 8 … 16384. Peers allocate the same sizes (alignment 8) through GlobalAlloc.

use super::peers::Peer;
use super::{BenchResult, Ctx, Suite};
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
        let t = ctx.alloc_then_free(
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
        out.push(BenchResult::time(
            "kmalloc_then_kfree",
            "kmem",
            size,
            "alloc",
            t[0],
        ));
        out.push(BenchResult::time(
            "kmalloc_then_kfree",
            "kmem",
            size,
            "free",
            t[1],
        ));
        // Test 2, kmem.
        let t = ctx.measure(n, |n| {
            for _ in 0..n {
                let p = h.kmalloc(size as usize, Gfp::KERNEL).expect("memory");
                // SAFETY: allocated just above.
                unsafe { h.kfree(std::hint::black_box(p.as_ptr())) };
            }
        });
        out.push(BenchResult::time("kmalloc_kfree", "kmem", size, "pair", t));
        for peer in Peer::ALL {
            let layout = Layout::from_size_align(size as usize, 8).unwrap();
            let t = ctx.alloc_then_free(
                rounds,
                &mut ptrs,
                // SAFETY: non-zero size; freed below with this layout.
                || unsafe { peer.alloc(layout) },
                // SAFETY: each pointer comes from the alloc above with this layout.
                |p| unsafe { peer.dealloc(p, layout) },
            );
            out.push(BenchResult::time(
                "kmalloc_then_kfree",
                peer.name(),
                size,
                "alloc",
                t[0],
            ));
            out.push(BenchResult::time(
                "kmalloc_then_kfree",
                peer.name(),
                size,
                "free",
                t[1],
            ));
            let t = ctx.measure(n, |n| {
                for _ in 0..n {
                    // SAFETY: non-zero size; freed with the same layout.
                    unsafe {
                        let p = peer.alloc(layout);
                        peer.dealloc(std::hint::black_box(p), layout);
                    }
                }
            });
            out.push(BenchResult::time(
                "kmalloc_kfree",
                peer.name(),
                size,
                "pair",
                t,
            ));
        }
    }
    out
}

/// The seed's lines, for kmem and each peer.
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
