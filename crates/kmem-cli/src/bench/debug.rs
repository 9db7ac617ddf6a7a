//! Suite `debug`: what hardening and slub_debug cost.
//!
//! Every mode is a set of private caches created with the mode's flags (the kmalloc
//! caches are made once at start-up, so they cannot change mode mid-run):
//!
//! - `plain`: no freelist key (`SlabFlags::NO_HARDEN`); it still runs the decode and
//!   check instructions (with a zero key), so `hardened` against `plain` isolates the
//!   key, not the whole cost of hardening — that needs a build without it (README);
//! - `hardened`: the default (obfuscated free pointers, checked decode);
//! - `random`: hardened plus randomised freelists; `init:alloc`, `init:free`: hardened
//!   plus zeroing on allocation or on free;
//! - `debug:F`, `debug:Z`, `debug:P`, `debug:U`, `debug:FZPU`: slub_debug flags
//!   (these caches leave the fast paths).
//!
//! Benches, all on kmem only (`allocator` is `kmem`, `mode` names the mode):
//! - `fastpath_reuse`: alloc+free of one 256-byte object in a loop (op `pair`), as in
//!   suite `cache`; in each of three passes the modes take turns a repetition each
//!   (the fast paths' modes among themselves, the slub_debug modes, which run a
//!   tenth as many pairs, among themselves), and each figure is the median of its
//!   three pass medians;
//! - `cache_then_free` (slab_test test 1 on the mode's cache of that size): 10000
//!   allocations then 10000 frees (ops `alloc`, `free`);
//! - `cache_alloc_free` (slab_test test 2): 10000 alloc+free pairs (op `pair`).

use super::{BenchResult, Ctx, Suite};
use kmem::{heap, Gfp, RawKmemCache as KmemCache, SlabFlags};
use std::ptr::NonNull;

pub const SUITE: Suite = Suite {
    name: "debug",
    steps,
    run,
    report_lines,
};

/// The modes, in table order.
const MODES: [(&str, SlabFlags); 10] = [
    ("plain", SlabFlags::NO_HARDEN),
    ("hardened", SlabFlags::empty()),
    ("random", SlabFlags::RANDOM_FREELIST),
    ("init:alloc", SlabFlags::INIT_ON_ALLOC),
    ("init:free", SlabFlags::INIT_ON_FREE),
    ("debug:F", SlabFlags::CONSISTENCY_CHECKS),
    ("debug:Z", SlabFlags::RED_ZONE),
    ("debug:P", SlabFlags::POISON),
    ("debug:U", SlabFlags::STORE_USER),
    (
        "debug:FZPU",
        SlabFlags::CONSISTENCY_CHECKS
            .union(SlabFlags::RED_ZONE)
            .union(SlabFlags::POISON)
            .union(SlabFlags::STORE_USER),
    ),
];

/// Object sizes of the slab_test table here (a spread of the `slab` suite's 8 … 16384).
const SIZES: [u64; 6] = [8, 32, 128, 512, 2048, 8192];
const FAST_SIZE: usize = 256;
const COUNT: usize = 10_000;

/// `fastpath_reuse` runs this many passes over the modes (odd: each figure is the
/// median of its passes' medians, so one pass on a slow or a lucky stretch of a noisy
/// machine moves no mode on its own).
const FAST_PASSES: usize = 3;

fn steps(_quick: bool) -> u64 {
    (MODES.len() * (FAST_PASSES + SIZES.len() * 2)) as u64
}

/// A cache of `size` bytes in mode `mode`.
fn cache(mode: &str, flags: SlabFlags, size: usize) -> &'static KmemCache {
    heap()
        .kmem_cache_create(&format!("{mode}-{size}"), size, 8, flags, None)
        .expect("cache")
}

fn alloc(s: &KmemCache) -> *mut u8 {
    heap()
        .kmem_cache_alloc(s, Gfp::KERNEL)
        .expect("memory")
        .as_ptr()
}

/// # Safety
/// `p` came from `alloc(s)` and is given up.
unsafe fn free(s: &KmemCache, p: *mut u8) {
    // SAFETY: an object of `s` (caller).
    unsafe { heap().kmem_cache_free(s, NonNull::new_unchecked(std::hint::black_box(p))) };
}

/// slub_debug's letters cost up to microseconds per object: fewer loops there.
fn scaled(loops: u64, flags: SlabFlags) -> u64 {
    if flags.intersects(SlabFlags::DEBUG) {
        loops / 10
    } else {
        loops
    }
}

fn run(ctx: &Ctx) -> Vec<BenchResult> {
    let mut out = Vec::new();
    let loops: u64 = if ctx.quick { 200_000 } else { 2_000_000 };
    let rounds: u64 = if ctx.quick { 1 } else { 5 };
    let with_mode = |r: BenchResult, mode: &str| BenchResult {
        mode: Some(mode.to_string()),
        ..r
    };
    // Warm up (clock, page tables, the page allocator) before the first mode, so
    // the baseline does not pay for the cold start.
    ctx.status("debug warm-up".to_string());
    let warm = cache("warm", SlabFlags::NO_HARDEN, FAST_SIZE);
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_millis(200) {
        for _ in 0..10_000 {
            let p = alloc(warm);
            // SAFETY: allocated just above.
            unsafe { free(warm, p) };
        }
    }

    // fastpath_reuse: the modes side by side, in interleaved passes.
    let fast: Vec<&KmemCache> = MODES
        .iter()
        .map(|&(mode, flags)| cache(mode, flags, FAST_SIZE))
        .collect();
    let mut passes: Vec<Vec<super::Timing>> = vec![Vec::new(); MODES.len()];
    // The modes that run the same number of pairs take turns.
    let groups: [Vec<usize>; 2] = [false, true].map(|debug| {
        (0..MODES.len())
            .filter(|&i| MODES[i].1.intersects(SlabFlags::DEBUG) == debug)
            .collect()
    });
    for pass in 0..FAST_PASSES {
        for group in groups.iter().filter(|g| !g.is_empty()) {
            let first = MODES[group[0]];
            ctx.status(format!(
                "debug fastpath_reuse from {} (pass {})",
                first.0,
                pass + 1
            ));
            let times = ctx.measure_interleaved(scaled(loops, first.1), group.len(), |k, n| {
                let s = fast[group[k]];
                for _ in 0..n {
                    let p = alloc(s);
                    // SAFETY: allocated just above.
                    unsafe { free(s, p) };
                }
            });
            for (k, t) in times.into_iter().enumerate() {
                passes[group[k]].push(t);
            }
        }
    }
    for (i, &(mode, _)) in MODES.iter().enumerate() {
        let t = super::timing::median_pass(&mut passes[i]);
        let r = BenchResult::time("fastpath_reuse", "kmem", FAST_SIZE as u64, "pair", t);
        out.push(with_mode(r, mode));
    }

    // slab_test on the modes' caches, the modes side by side at each size.
    let mut ptrs = vec![std::ptr::null_mut::<u8>(); COUNT];
    for &size in &SIZES {
        for (mode, flags) in MODES {
            ctx.status(format!("debug slab_test({size}) {mode}"));
            let s = cache(mode, flags, size as usize);
            let n = COUNT as u64 * rounds;
            let t = ctx.alloc_then_free(
                rounds,
                &mut ptrs,
                || alloc(s),
                // SAFETY: each pointer comes from `alloc(s)` above, freed once.
                |p| unsafe { free(s, p) },
            );
            let r = BenchResult::time("cache_then_free", "kmem", size, "alloc", t[0]);
            out.push(with_mode(r, mode));
            let r = BenchResult::time("cache_then_free", "kmem", size, "free", t[1]);
            out.push(with_mode(r, mode));

            let t = ctx.measure(scaled(n, flags), |n| {
                for _ in 0..n {
                    let p = alloc(s);
                    // SAFETY: allocated just above.
                    unsafe { free(s, p) };
                }
            });
            let r = BenchResult::time("cache_alloc_free", "kmem", size, "pair", t);
            out.push(with_mode(r, mode));
        }
    }
    out
}

/// The slab_test lines per mode, then the cost of each mode against `plain`.
fn report_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let get = |bench: &str, mode: &str, size: u64, op: &str| {
        results
            .iter()
            .find(|r| {
                r.bench == bench && r.mode.as_deref() == Some(mode) && r.param == size && r.op == op
            })
            .and_then(|r| r.cycles.or(r.ns))
    };
    for (mode, _) in MODES {
        if get("fastpath_reuse", mode, FAST_SIZE as u64, "pair").is_none() {
            continue;
        }
        let v = |bench: &str, size: u64, op: &str| get(bench, mode, size, op).unwrap_or(0.0);
        super::slab_test_lines(
            &mut out,
            mode,
            &super::SlabTestNames {
                title: "Kmem_cache",
                alloc: "kmem_cache_alloc",
                free: "kmem_cache_free",
            },
            &SIZES,
            |size| {
                (
                    v("cache_then_free", size, "alloc"),
                    v("cache_then_free", size, "free"),
                )
            },
            |size| v("cache_alloc_free", size, "pair"),
        );
    }
    let ns = |mode: &str| {
        results
            .iter()
            .find(|r| r.bench == "fastpath_reuse" && r.mode.as_deref() == Some(mode))
            .and_then(|r| r.ns)
    };
    if let Some(base) = ns("plain") {
        let _ = writeln!(out, "\nfastpath_reuse against plain ({base:.2} ns):");
        for (mode, _) in MODES.iter().skip(1) {
            if let Some(t) = ns(mode) {
                let _ = writeln!(
                    out,
                    "  {mode:<11} {t:>9.2} ns  {:+7.1}%",
                    (t / base - 1.0) * 100.0
                );
            }
        }
    }
    out
}
