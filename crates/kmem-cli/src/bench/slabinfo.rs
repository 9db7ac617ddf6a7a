//! Suite `slabinfo`: objects per slab and bytes wasted per slab for every kmalloc
//! cache (param = object size), to hold against the /proc/slabinfo table of Joonsoo
//! Kim's "slab: implement byte sized indexes for the freelist of a slab".
//! Not a timing: `value` is the object count, `bytes` the tail waste.

use super::{BenchResult, Ctx, Suite};
use kmem::heap;

pub const SUITE: Suite = Suite {
    name: "slabinfo",
    steps: |_| 1,
    run,
    report_lines,
};

fn run(ctx: &Ctx) -> Vec<BenchResult> {
    let mut out = Vec::new();
    for s in heap().kmem().kmalloc_caches() {
        let cfg = s.config();
        let param = cfg.object_size as u64;
        out.push(
            BenchResult {
                value: Some(cfg.objects as f64),
                ..BenchResult::bytes("slabinfo", "kmem", param, "objs_per_slab", 0)
            }
            .without_bytes(),
        );
        out.push(BenchResult::bytes(
            "slabinfo",
            "kmem",
            param,
            "waste",
            (cfg.slab_bytes() - cfg.objects * cfg.size) as u64,
        ));
    }
    ctx.tick();
    out
}

/// The caches in /proc/slabinfo's format.
fn report_lines(_results: &[BenchResult]) -> String {
    format!("\n{}", heap().slabinfo())
}
