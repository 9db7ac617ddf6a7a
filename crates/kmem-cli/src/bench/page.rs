//! Suite `page`: the page allocator.
//!
//! - `page_pcp` / `page_zone`: an alloc+free pair of order 0..=3 through this thread's
//!   per-CPU lists, and straight from the zone with the lists bypassed (Jesper
//!   Dangaard Brouer's page_bench02 figures on "mm, page_allocator: Only use per-cpu
//!   allocator for irq-safe requests"). Peers: a page-aligned block of the same size.
//! - `bulk`: per-page cost of `alloc_pages_bulk` + bulk free for bulk sizes 1..128
//!   (the ARRAY-variant table, time_bulk_page_alloc_free_array, in the cover letter of
//!   Mel Gorman's series that starts with "mm/page_alloc: split per cpu page lists and
//!   zone stats"). Peers: n allocations, then n frees.
//! - `page_threads`: order-0 pairs on 1 and 2 threads at once (ns per pair per thread).
//! - `page_rss`: resident memory before, at peak and after allocating (and touching)
//!   and freeing 1 GiB in order-0..=3 blocks. "After" is read once the decay interval
//!   has passed and the program has gone on allocating a little, as a program would
//!   (and "before" after the same bit of activity).

use super::peers::Peer;
use super::{BenchResult, Ctx, Suite};
use kmem::{heap, Gfp, Page, PAGE_SIZE};
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Barrier;
use std::time::{Duration, Instant};

pub const SUITE: Suite = Suite {
    name: "page",
    steps,
    run,
    report_lines,
};

const BULK_SIZES: [u64; 9] = [1, 2, 3, 4, 8, 16, 32, 64, 128];
const THREADS: [u64; 2] = [1, 2];

fn steps(_quick: bool) -> u64 {
    let per_alloc = 4 + BULK_SIZES.len() as u64 + THREADS.len() as u64 + 1;
    4 /* page_zone */ + per_alloc * 4
}

fn run(ctx: &Ctx) -> Vec<BenchResult> {
    let mut out = Vec::new();
    let pairs: u64 = if ctx.quick { 20_000 } else { 200_000 };
    let h = heap();
    let pa = h.page_allocator();

    // page_pcp and page_zone, and the peers' page-aligned blocks, taking turns a
    // repetition each (as the other suites' contestants do).
    for order in 0..=3usize {
        ctx.status(format!("page_pcp order {order}"));
        let layout = Layout::from_size_align(PAGE_SIZE << order, PAGE_SIZE).unwrap();
        let t = ctx.measure_interleaved(pairs, 2 + Peer::ALL.len(), |i, n| match i {
            0 => {
                for _ in 0..n {
                    let p = h.alloc_pages(Gfp::KERNEL, order).expect("page");
                    // SAFETY: allocated just above with this order.
                    unsafe { h.free_pages(std::hint::black_box(p), order) };
                }
            }
            1 => {
                for _ in 0..n {
                    let p = pa.alloc_pages(None, Gfp::KERNEL, order).expect("page");
                    // SAFETY: allocated just above with this order, no CPU area.
                    unsafe { pa.free_pages(None, std::hint::black_box(p), order) };
                }
            }
            _ => {
                let peer = Peer::ALL[i - 2];
                for _ in 0..n {
                    // SAFETY: non-zero size; freed with the same layout.
                    unsafe {
                        let p = peer.alloc(layout);
                        assert!(!p.is_null());
                        peer.dealloc(std::hint::black_box(p), layout);
                    }
                }
            }
        });
        let param = order as u64;
        out.push(BenchResult::time("page_pcp", "kmem", param, "pair", t[0]));
        out.push(BenchResult::time("page_zone", "kmem", param, "pair", t[1]));
        for (k, peer) in Peer::ALL.iter().enumerate() {
            out.push(BenchResult::time(
                "page_pcp",
                peer.name(),
                param,
                "pair",
                t[2 + k],
            ));
        }
    }

    // bulk: per-page cost.
    let total_pages: u64 = if ctx.quick { 50_000 } else { 500_000 };
    for &n in &BULK_SIZES {
        ctx.status(format!("bulk {n}"));
        let rounds = (total_pages / n).max(1);
        let mut arr: Vec<Option<NonNull<Page>>> = vec![None; n as usize];
        let mut ptrs = vec![std::ptr::null_mut::<u8>(); n as usize];
        let layout = Layout::from_size_align(PAGE_SIZE, PAGE_SIZE).unwrap();
        let t = ctx.measure_interleaved(rounds * n, 1 + Peer::ALL.len(), |i, ops| {
            if i == 0 {
                for _ in 0..ops / n {
                    let got = h.alloc_pages_bulk(Gfp::KERNEL, &mut arr);
                    assert_eq!(got, n as usize);
                    // SAFETY: the pages were just allocated, order 0.
                    unsafe { h.free_pages_bulk(std::hint::black_box(&mut arr)) };
                }
                return;
            }
            let peer = Peer::ALL[i - 1];
            for _ in 0..ops / n {
                for p in ptrs.iter_mut() {
                    // SAFETY: non-zero size.
                    *p = unsafe { peer.alloc(layout) };
                }
                for &p in ptrs.iter() {
                    // SAFETY: allocated above with this layout.
                    unsafe { peer.dealloc(std::hint::black_box(p), layout) };
                }
            }
        });
        out.push(BenchResult::time("bulk", "kmem", n, "page", t[0]));
        for (k, peer) in Peer::ALL.iter().enumerate() {
            out.push(BenchResult::time("bulk", peer.name(), n, "page", t[1 + k]));
        }
    }

    // page_threads.
    for &threads in &THREADS {
        ctx.status(format!("page_threads {threads}"));
        let who: Vec<Option<Peer>> = std::iter::once(None)
            .chain(Peer::ALL.iter().copied().map(Some))
            .collect();
        let t = ctx.measure_interleaved(pairs, who.len(), |i, n| {
            threaded(threads as usize, n, who[i]);
        });
        for (k, w) in who.iter().enumerate() {
            let name = w.map_or("kmem", Peer::name);
            out.push(BenchResult::time(
                "page_threads",
                name,
                threads,
                "pair",
                t[k],
            ));
        }
    }

    // page_rss: each allocator in a fresh process of its own (resident memory is the
    // whole process's: what another allocator held or touched before would count).
    for (c, name) in RSS.iter().zip(RSS_NAMES) {
        out.extend(
            super::child::run(ctx, c, &[], &format!("a fresh process ({name})"))
                .into_iter()
                .map(|r| BenchResult {
                    allocator: name,
                    ..r
                }),
        );
    }
    out
}

/// The `page_rss` children, kmem's then the peers' (in [`RSS_NAMES`]' order).
pub const RSS: [super::child::Child; 4] = [
    rss_child::<0>("page-rss-kmem"),
    rss_child::<1>("page-rss-system"),
    rss_child::<2>("page-rss-mimalloc"),
    rss_child::<3>("page-rss-jemalloc"),
];

/// The allocators of [`RSS`]' children.
const RSS_NAMES: [&str; 4] = ["kmem", "system", "mimalloc", "jemalloc"];

/// The `page_rss` child of allocator `I` (0: kmem, then `Peer::ALL`): its rows,
/// labelled `kmem` (the parent names them).
const fn rss_child<const I: usize>(what: &'static str) -> super::child::Child {
    super::child::Child {
        what,
        measure: |_ctx| {
            let decay = Duration::from_millis(kmem::config::from_env().decay_ms.max(10) * 3 / 2);
            let rows = if I == 0 {
                rss_kmem(decay)
            } else {
                rss_peer(Peer::ALL[I - 1], decay)
            };
            rows.into_iter()
                .map(|r| BenchResult {
                    allocator: "kmem",
                    ..r
                })
                .collect()
        },
        steps: |_| 1,
    }
}

/// Order-0 alloc+free pairs, `n` on each of `threads` threads at once (one
/// repetition: the caller times it, ns per pair per thread).
fn threaded(threads: usize, n: u64, peer: Option<Peer>) {
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let layout = Layout::from_size_align(PAGE_SIZE, PAGE_SIZE).unwrap();
                barrier.wait();
                for _ in 0..n {
                    match peer {
                        None => {
                            let h = heap();
                            let p = h.alloc_pages(Gfp::KERNEL, 0).expect("page");
                            // SAFETY: allocated just above.
                            unsafe { h.free_pages(std::hint::black_box(p), 0) };
                        }
                        // SAFETY: non-zero size; freed with the same layout.
                        Some(peer) => unsafe {
                            let p = peer.alloc(layout);
                            peer.dealloc(std::hint::black_box(p), layout);
                        },
                    }
                }
            });
        }
    });
}

const RSS_BYTES: usize = 1 << 30;

/// Block sizes of the RSS run: orders 0..=3 in turn until 1 GiB.
fn rss_orders() -> impl Iterator<Item = usize> {
    let mut total = 0;
    let mut i = 0usize;
    std::iter::from_fn(move || {
        if total >= RSS_BYTES {
            return None;
        }
        let order = i % 4;
        i += 1;
        total += PAGE_SIZE << order;
        Some(order)
    })
}

fn touch(p: *mut u8, len: usize) {
    let mut off = 0;
    while off < len {
        // SAFETY: the caller's block is `len` bytes long.
        unsafe { p.add(off).write_volatile(1) };
        off += PAGE_SIZE;
    }
}

fn rss_kmem(decay: Duration) -> Vec<BenchResult> {
    let h = heap();
    rss_run(
        "kmem",
        decay,
        || {
            let p = h.alloc_pages(Gfp::KERNEL, 0).expect("page");
            // SAFETY: allocated just above.
            unsafe { h.free_pages(p, 0) };
        },
        |order| {
            let p = h.alloc_pages(Gfp::KERNEL, order).expect("page");
            touch(h.page_address(p).as_ptr(), PAGE_SIZE << order);
            (p, order)
        },
        // SAFETY: allocated above with this order.
        |(p, order)| unsafe { h.free_pages(p, order) },
    )
}

fn rss_peer(peer: Peer, decay: Duration) -> Vec<BenchResult> {
    rss_run(
        peer.name(),
        decay,
        || {
            let layout = Layout::from_size_align(PAGE_SIZE, PAGE_SIZE).unwrap();
            // SAFETY: non-zero size; freed with the same layout.
            unsafe {
                let p = peer.alloc(layout);
                peer.dealloc(p, layout);
            }
        },
        |order| {
            let layout = Layout::from_size_align(PAGE_SIZE << order, PAGE_SIZE).unwrap();
            // SAFETY: non-zero size.
            let p = unsafe { peer.alloc(layout) };
            assert!(!p.is_null());
            touch(p, layout.size());
            (p, layout)
        },
        // SAFETY: allocated above with this layout.
        |(p, layout)| unsafe { peer.dealloc(p, layout) },
    )
}

/// One allocator's RSS readings: before, with 1 GiB held (`alloc(order)` allocates
/// and touches a block of `rss_orders`, `free` gives it back), and after freeing it
/// all and waiting out the decay interval. `pair` keeps the allocator busy before
/// each of the first and last readings ([`keep_busy`]).
fn rss_run<B>(
    alloc_name: &'static str,
    decay: Duration,
    pair: impl Fn(),
    alloc: impl FnMut(usize) -> B,
    free: impl FnMut(B),
) -> Vec<BenchResult> {
    keep_busy(&pair);
    let before = kmem::rss_bytes();
    let held: Vec<B> = rss_orders().map(alloc).collect();
    let peak = kmem::rss_bytes();
    held.into_iter().for_each(free);
    std::thread::sleep(decay);
    keep_busy(&pair);
    let after = kmem::rss_bytes();
    rss_results(alloc_name, before, peak, after)
}

/// Goes on allocating a little (bursts of 1000 pairs) for 50 ms, as a program that
/// keeps running would. Done before "before" too, so both readings see the allocator
/// in the same steady state.
pub(super) fn keep_busy(pair: impl Fn()) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(50) {
        for _ in 0..1000 {
            pair();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn rss_results(alloc: &'static str, before: usize, peak: usize, after: usize) -> Vec<BenchResult> {
    let param = (RSS_BYTES >> 20) as u64;
    vec![
        BenchResult::bytes("page_rss", alloc, param, "before", before as u64),
        BenchResult::bytes("page_rss", alloc, param, "peak", peak as u64),
        BenchResult::bytes("page_rss", alloc, param, "after", after as u64),
    ]
}

/// The kernel benchmarks' own lines: time_bench's "Per elem" for the pair benches
/// and the ARRAY-variant bulk table; then the ratios of this run.
fn report_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("\n");
    for r in results
        .iter()
        .filter(|r| r.allocator == "kmem" && (r.bench == "page_pcp" || r.bench == "page_zone"))
    {
        let _ = writeln!(
            out,
            "time_bench: Type:{}_order{} Per elem: {:.0} cycles(tsc) {:.3} ns",
            r.bench,
            r.param,
            r.cycles.unwrap_or(0.0),
            r.ns.unwrap_or(0.0)
        );
    }
    let _ = writeln!(
        out,
        "\nARRAY variant: time_bulk_page_alloc_free_array: step=bulk size"
    );
    for r in results
        .iter()
        .filter(|r| r.allocator == "kmem" && r.bench == "bulk")
    {
        let _ = writeln!(out, "{} {:.3}", r.param, r.ns.unwrap_or(0.0));
    }
    // PCP against zone pairs, bulk-128 against bulk-1 per page, RSS after against before.
    let ns = |bench: &str, param: u64| {
        results
            .iter()
            .find(|r| r.allocator == "kmem" && r.bench == bench && r.param == param)
            .and_then(|r| r.ns)
    };
    if let (Some(pcp), Some(zone)) = (ns("page_pcp", 0), ns("page_zone", 0)) {
        let _ = writeln!(out, "\npcp vs zone (order 0): {:.2}x faster", zone / pcp);
    }
    if let (Some(b1), Some(b128)) = (ns("bulk", 1), ns("bulk", 128)) {
        let _ = writeln!(out, "bulk-128 per page / bulk-1 per page: {:.2}", b128 / b1);
    }
    let rss = |op: &str| {
        results
            .iter()
            .find(|r| r.allocator == "kmem" && r.bench == "page_rss" && r.op == op)
            .and_then(|r| r.bytes)
    };
    if let (Some(b), Some(a)) = (rss("before"), rss("after")) {
        let _ = writeln!(
            out,
            "RSS after/before 1 GiB: {:.1} MiB / {:.1} MiB ({:+.1}%)",
            a as f64 / 1048576.0,
            b as f64 / 1048576.0,
            (a as f64 - b as f64) * 100.0 / b as f64
        );
    }
    out
}
