//! Suite `cache`: Jesper Dangaard Brouer's time_bench_kmem_cache1 (his
//! prototype-kernel tree, kernel/lib/time_bench_kmem_cache1.c).
//!
//! - `fastpath_reuse`: alloc+free of one 256-byte object from a kmem_cache, in a
//!   loop (op `pair`).
//! - `n_pattern`: 256 allocations, then 256 frees (op `elem`: per alloc+free).
//! - `fastpath_reuse_2t`: `fastpath_reuse` on 2 threads at once (param 2; ns per pair
//!   per thread).
//! - `cross_thread_free`: one thread allocates 64-byte objects, another frees them
//!   (op `elem`: wall time per object).
//!
//! Peers run the same loops with the same sizes through GlobalAlloc, kmem and the
//! peers taking turns in each bench (a repetition each). `kmem` calls
//! `kmem_cache_alloc` and `kmem_cache_free` as a Rust program does, their fast paths
//! inlined into the loop; the peers' GlobalAlloc calls a C function each time.
//! `kmem[called]` (mode `called`) is kmem called as the peers are, through functions
//! that are not inlined: the like-for-like figure. `kmem[cpu-slab]`
//! is kmem in the slab layer's CPU-slab design (`KMEM_SLUB=cpu-slab`): the same loops
//! on kmem's caches in a child process (`kmem bench-child cache`), since the design is
//! fixed when the heap starts and this process's `kmem` runs sheaves.

use super::child::{self, Child, KMEM_CPU_SLAB};
use super::handoff::{spread, Handoff};
use super::peers::Peer;
use super::{BenchResult, Ctx, Suite, Timing};
use kmem::{heap, Gfp, RawKmemCache as KmemCache, SlabFlags};
use std::alloc::Layout;
use std::sync::{Barrier, OnceLock};

pub const SUITE: Suite = Suite {
    name: "cache",
    steps,
    run,
    report_lines,
};

const OBJ: usize = 256;
const N: usize = 256;

/// kmem's part, run in a child in the CPU-slab design.
pub const CHILD: Child = Child {
    what: "cache",
    measure: |ctx| measure(ctx, &[Who::Kmem(cache(OBJ))]),
    steps: |_| BENCHES,
};

/// Measurements per allocator.
const BENCHES: u64 = 4;

fn steps(_quick: bool) -> u64 {
    // kmem, kmem[called], kmem[cpu-slab] and the peers.
    BENCHES * (3 + Peer::ALL.len() as u64)
}

/// The allocator of one run: kmem's cache (inlined, or called out of line) or a peer.
#[derive(Clone, Copy)]
enum Who {
    Kmem(&'static KmemCache),
    KmemCalled(&'static KmemCache),
    Peer(Peer),
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Kmem(_) | Who::KmemCalled(_) => "kmem",
            Who::Peer(p) => p.name(),
        }
    }
    fn mode(self) -> Option<String> {
        matches!(self, Who::KmemCalled(_)).then(|| "called".to_string())
    }
    #[inline]
    fn alloc(self, layout: Layout) -> *mut u8 {
        match self {
            Who::Kmem(s) => heap()
                .kmem_cache_alloc(s, Gfp::KERNEL)
                .expect("memory")
                .as_ptr(),
            Who::KmemCalled(s) => alloc_called(std::hint::black_box(s)),
            // SAFETY: non-zero size.
            Who::Peer(p) => unsafe { p.alloc(layout) },
        }
    }
    /// # Safety
    /// `ptr` came from `alloc` of this allocator with `layout`.
    #[inline]
    unsafe fn free(self, ptr: *mut u8, layout: Layout) {
        match self {
            // SAFETY: an object of `s` (caller).
            Who::Kmem(s) => unsafe {
                heap().kmem_cache_free(s, std::ptr::NonNull::new_unchecked(ptr));
            },
            // SAFETY: an object of `s` (caller).
            Who::KmemCalled(s) => unsafe { free_called(std::hint::black_box(s), ptr) },
            // SAFETY: forwarded from the caller.
            Who::Peer(p) => unsafe { p.dealloc(ptr, layout) },
        }
    }
}

/// `kmem_cache_alloc` out of line, for `kmem[called]`.
#[inline(never)]
fn alloc_called(s: &KmemCache) -> *mut u8 {
    heap()
        .kmem_cache_alloc(s, Gfp::KERNEL)
        .expect("memory")
        .as_ptr()
}

/// `kmem_cache_free` out of line, for `kmem[called]`.
///
/// # Safety
/// `ptr` is an object of `s`, given up.
#[inline(never)]
unsafe fn free_called(s: &KmemCache, ptr: *mut u8) {
    // SAFETY: forwarded from the caller.
    unsafe { heap().kmem_cache_free(s, std::ptr::NonNull::new_unchecked(ptr)) };
}

fn cache(size: usize) -> &'static KmemCache {
    static C256: OnceLock<usize> = OnceLock::new();
    static C64: OnceLock<usize> = OnceLock::new();
    let slot = if size == 256 { &C256 } else { &C64 };
    let p = *slot.get_or_init(|| {
        let name = format!("bench-{size}");
        heap()
            .kmem_cache_create(&name, size, 8, SlabFlags::empty(), None)
            .expect("cache") as *const KmemCache as usize
    });
    // SAFETY: the cache lives for the whole process (never destroyed).
    unsafe { &*(p as *const KmemCache) }
}

/// kmem and the peers in this process, then kmem in the CPU-slab design (a child),
/// beside kmem.
fn run(ctx: &Ctx) -> Vec<BenchResult> {
    let who: Vec<Who> = std::iter::once(Who::Kmem(cache(OBJ)))
        .chain(Peer::ALL.iter().map(|&p| Who::Peer(p)))
        .chain([Who::KmemCalled(cache(OBJ))])
        .collect();
    let mut out = measure(ctx, &who);
    out.extend(child::cpu_slab(ctx, &CHILD));
    child::beside_kmem(out)
}

/// Every bench with each of `who`, the allocators taking turns, a repetition each
/// ([`Ctx::measure_interleaved`]), so that kmem and a peer are compared over the same
/// stretch of time on a noisy machine.
fn measure(ctx: &Ctx, who: &[Who]) -> Vec<BenchResult> {
    let mut out = Vec::new();
    let loops: u64 = if ctx.quick { 200_000 } else { 2_000_000 };
    let layout = Layout::from_size_align(OBJ, 8).unwrap();
    let mut record = |bench: &'static str, param: u64, op: &'static str, times: Vec<Timing>| {
        for (w, t) in who.iter().zip(times) {
            out.push(BenchResult {
                mode: w.mode(),
                ..BenchResult::time(bench, w.name(), param, op, t)
            });
        }
    };

    ctx.status("cache fastpath_reuse".to_string());
    let t = ctx.measure_interleaved(loops, who.len(), |i, n| reuse(who[i], layout, n));
    record("fastpath_reuse", OBJ as u64, "pair", t);

    ctx.status("cache n_pattern".to_string());
    let mut ptrs = [std::ptr::null_mut::<u8>(); N];
    let rounds = (loops / N as u64).max(1);
    let t = ctx.measure_interleaved(rounds * N as u64, who.len(), |i, n| {
        let w = who[i];
        for _ in 0..n / N as u64 {
            for p in ptrs.iter_mut() {
                *p = w.alloc(layout);
            }
            for &p in ptrs.iter() {
                // SAFETY: allocated just above.
                unsafe { w.free(std::hint::black_box(p), layout) };
            }
        }
    });
    record("n_pattern", N as u64, "elem", t);

    ctx.status("cache fastpath_reuse_2t".to_string());
    let t = ctx.measure_interleaved(loops, who.len(), |i, n| {
        let barrier = Barrier::new(2);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    barrier.wait();
                    reuse(who[i], layout, n);
                });
            }
        });
    });
    record("fastpath_reuse_2t", 2, "pair", t);

    ctx.status("cache cross_thread_free".to_string());
    let l64 = Layout::from_size_align(64, 8).unwrap();
    let t = ctx.measure_interleaved(loops, who.len(), |i, n| {
        let w64 = match who[i] {
            Who::Kmem(_) => Who::Kmem(cache(64)),
            Who::KmemCalled(_) => Who::KmemCalled(cache(64)),
            p => p,
        };
        cross_thread(w64, l64, n)
    });
    record("cross_thread_free", 64, "elem", t);
    out
}

/// `n` times, allocates one object and frees it at once.
#[inline]
fn reuse(w: Who, layout: Layout, n: u64) {
    for _ in 0..n {
        let p = w.alloc(layout);
        // SAFETY: allocated just above.
        unsafe { w.free(std::hint::black_box(p), layout) };
    }
}

/// One thread allocates `n` objects in batches and hands them over (through a
/// [`Handoff`], whose waits poll instead of sleeping); another frees.
fn cross_thread(w: Who, layout: Layout, n: u64) {
    const BATCH: usize = 256;
    let q: Handoff<Vec<usize>> = Handoff::new(16, 1);
    std::thread::scope(|s| {
        s.spawn(|| {
            spread(0, 2);
            let out = q.producer();
            let mut left = n as usize;
            while left > 0 {
                let k = left.min(BATCH);
                let batch: Vec<usize> = (0..k).map(|_| w.alloc(layout) as usize).collect();
                left -= k;
                out.push(batch);
            }
        });
        s.spawn(|| {
            spread(1, 2);
            let input = q.consumer();
            while let Some(batch) = input.pop() {
                for p in batch {
                    // SAFETY: allocated by the producer with this layout, handed to us.
                    unsafe { w.free(p as *mut u8, layout) };
                }
            }
        });
    });
}

/// time_bench's lines for each allocator; kmem against system and mimalloc, and the
/// CPU-slab design against kmem.
fn report_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("\n");
    let label = |b: &str| match b {
        "fastpath_reuse" => "fastpath reuse",
        "n_pattern" => "alloc+free N-pattern",
        "fastpath_reuse_2t" => "fastpath reuse 2 threads",
        _ => "cross-thread free",
    };
    for r in results {
        let _ = writeln!(
            out,
            "Type:{} {} Per elem: {:.0} cycles(tsc) {:.3} ns",
            r.column(),
            label(r.bench),
            r.cycles.unwrap_or(0.0),
            r.ns.unwrap_or(0.0)
        );
    }
    let ns = |b: &str, a: &str| {
        results
            .iter()
            .find(|r| r.bench == b && r.column() == a)
            .and_then(|r| r.ns)
    };
    if let (Some(k), Some(s), Some(m)) = (
        ns("fastpath_reuse", "kmem"),
        ns("fastpath_reuse", "system"),
        ns("fastpath_reuse", "mimalloc"),
    ) {
        let _ = writeln!(
            out,
            "\nfastpath_reuse: kmem {k:.2} ns, system {s:.2} ns ({:.2}x), mimalloc {m:.2} ns (kmem/mimalloc {:.2})",
            s / k,
            k / m
        );
    }
    let called = |b: &str| {
        results
            .iter()
            .find(|r| r.bench == b && r.mode.as_deref() == Some("called"))
            .and_then(|r| r.ns)
    };
    if let (Some(c), Some(m)) = (called("fastpath_reuse"), ns("fastpath_reuse", "mimalloc")) {
        let _ = writeln!(
            out,
            "kmem[called] (out of line, as the peers are called): fastpath_reuse {c:.2} ns (kmem[called]/mimalloc {:.2})",
            c / m
        );
    }
    let ratios: Vec<String> = [
        "fastpath_reuse",
        "n_pattern",
        "fastpath_reuse_2t",
        "cross_thread_free",
    ]
    .iter()
    .filter_map(|&b| {
        let (c, k) = (ns(b, KMEM_CPU_SLAB)?, ns(b, "kmem")?);
        Some(format!("{b} {:.2}", c / k))
    })
    .collect();
    if !ratios.is_empty() {
        let _ = writeln!(
            out,
            "{KMEM_CPU_SLAB}/kmem (above 1: sheaves faster): {}",
            ratios.join("  ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::Timing;
    use super::*;

    #[test]
    fn report_compares_the_cpu_slab_design_with_kmem_only() {
        let t = |ns| Timing {
            ns,
            cycles: Some(ns * 2.0),
            ops: 1,
        };
        let results = child::beside_kmem(vec![
            BenchResult::time("fastpath_reuse", "kmem", 256, "pair", t(10.0)),
            BenchResult::time("fastpath_reuse", "system", 256, "pair", t(20.0)),
            BenchResult::time("fastpath_reuse", "mimalloc", 256, "pair", t(8.0)),
            child::in_cpu_slab(BenchResult::time(
                "fastpath_reuse",
                "kmem",
                256,
                "pair",
                t(12.0),
            )),
            BenchResult::time("n_pattern", "kmem", 256, "elem", t(4.0)),
            child::in_cpu_slab(BenchResult::time("n_pattern", "kmem", 256, "elem", t(6.0))),
        ]);
        let r = report_lines(&results);
        let types: Vec<&str> = r.lines().filter(|l| l.starts_with("Type:")).collect();
        assert_eq!(
            types[..3],
            [
                "Type:kmem fastpath reuse Per elem: 20 cycles(tsc) 10.000 ns",
                "Type:kmem alloc+free N-pattern Per elem: 8 cycles(tsc) 4.000 ns",
                "Type:kmem[cpu-slab] fastpath reuse Per elem: 24 cycles(tsc) 12.000 ns",
            ]
        );
        assert!(r.contains(
            "fastpath_reuse: kmem 10.00 ns, system 20.00 ns (2.00x), mimalloc 8.00 ns (kmem/mimalloc 1.25)\n"
        ), "{r}");
        assert!(
            r.ends_with(
                "kmem[cpu-slab]/kmem (above 1: sheaves faster): fastpath_reuse 1.20  n_pattern 1.50\n"
            ),
            "{r}"
        );
    }
}
