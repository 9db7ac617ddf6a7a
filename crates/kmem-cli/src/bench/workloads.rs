//! Suite `workloads`: classic allocator workloads — long-lived servers whose threads
//! come and go, producer/consumer pipelines, mixed object sizes — each allocator
//! called through its `GlobalAlloc` (kmem's `KmemAlloc`, system, mimalloc, jemalloc) in
//! this process, so the same code runs on all four; and `kmem[cpu-slab]`, kmem in the
//! slab layer's CPU-slab design (`KMEM_SLUB=cpu-slab`), the same code through
//! `KmemAlloc` in a child process (`kmem bench-child workloads`), since the design is
//! fixed when the heap starts and this process's `kmem` runs sheaves.
//!
//! - `larson`: Larson and Krishnan's server benchmark (param = worker threads). Each
//!   worker owns a window of 1,000 blocks of 8–1,000 bytes (sizes from the worker's
//!   xorshift generator). A thread makes 10,000 random replacements in its window
//!   (free a random block, allocate one of a random size in its place, write its first
//!   byte), then spawns its successor, hands it the live window and exits; the
//!   successor goes on with the same window, so it frees blocks that a thread now
//!   dead allocated. 40 generations of threads per worker (100 in the full form).
//!   Workers: 2 in the quick form; 1, 2 and 16 in the full form (16 runs as many
//!   threads as a 16-core machine has cores, and oversubscribes a smaller one, as a
//!   server's thread pool does).
//!   Filling the windows before and freeing them after are not timed; creating the
//!   threads is (as in the original).
//! - `xmalloc`: producer/consumer (param = threads, at least 2: half of them
//!   producers, the rest consumers). Producers allocate 64-byte objects and pass them
//!   in batches of 64 through one queue to the consumers, which free them; the batch
//!   buffers circulate in a fixed pool of 16 per producer, which bounds the objects
//!   in flight.
//! - `random_sizes`: one thread, a table of 10,000 blocks; each step frees the block
//!   of a random slot and allocates a new one in its place, of a size whose power of
//!   two is geometric (half of the sizes 8–15 bytes, a quarter 16–31, …, uniform
//!   within the power) and at most param bytes; writes its first byte. Filling the
//!   table before and emptying it after are not timed.
//! - `rebuild`: one thread, a table of 200,000 objects of param bytes (16, 64, 256),
//!   dropped and rebuilt again and again: every object freed in a random order (a
//!   hash table's, a graph's), then as many allocated again, each written whole as it
//!   comes (the next table's). What an allocator's caches do not absorb goes back to
//!   its pages and comes out again, cache line by cache line; the shuffles, the fill
//!   and the last drain are not timed.
//!
//! op `op`: ns per malloc+free (wall time over all threads / number of pairs).
//!
//! The report gives Larson's throughput line per allocator, then per bench kmem's
//! time against mimalloc's and the fastest peer's (system, mimalloc, jemalloc; never
//! `kmem[cpu-slab]`) and the CPU-slab design's against kmem's.

use super::child::{self, Child, KMEM_CPU_SLAB};
use super::handoff::{spread, Handoff};
use super::sizes;
use super::timing::{phase, Phase, Timing};
use super::{BenchResult, Ctx, Suite};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::ptr::NonNull;
use std::thread::JoinHandle;

pub const SUITE: Suite = Suite {
    name: "workloads",
    steps,
    run,
    report_lines,
};

/// kmem's part, run in a child in the CPU-slab design.
pub const CHILD: Child = Child {
    what: "workloads",
    measure: |ctx| measure(ctx, &allocators()[..1]),
    steps: |quick| benches(quick),
};

/// An allocator under test, called through its `GlobalAlloc`.
pub(super) type Alloc = &'static (dyn GlobalAlloc + Sync);

static KMEM: kmem::KmemAlloc = kmem::KmemAlloc;
static SYSTEM: System = System;
static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

pub(super) fn allocators() -> [(&'static str, Alloc); 4] {
    [
        ("kmem", &KMEM),
        ("system", &SYSTEM),
        ("mimalloc", &MIMALLOC),
        ("jemalloc", &JEMALLOC),
    ]
}

/// The peers of the report's ratios.
const PEERS: [&str; 3] = ["system", "mimalloc", "jemalloc"];

/// larson: blocks per window, their sizes, replacements per thread.
const LARSON_BLOCKS: usize = 1000;
const LARSON_MIN: usize = 8;
const LARSON_MAX: usize = 1000;
const LARSON_K: u64 = 10_000;

/// xmalloc: object size, objects per batch, batch buffers per producer.
const XMALLOC_SIZE: usize = 64;
const XMALLOC_BATCH: usize = 64;
const XMALLOC_POOL: usize = 16;
const XMALLOC_THREADS: u64 = 2;

/// random_sizes: slots, largest size.
const RANDOM_SLOTS: usize = 10_000;
pub(super) const RANDOM_MAX: u64 = 65536;

/// rebuild: objects in the table, their sizes.
const REBUILD_OBJECTS: usize = 200_000;
const REBUILD_SIZES: [u64; 3] = [16, 64, 256];

/// The worker counts of `larson`.
fn larson_threads(quick: bool) -> &'static [u64] {
    if quick {
        &[2]
    } else {
        &[1, 2, 16]
    }
}

/// Thread generations per `larson` worker.
fn larson_generations(quick: bool) -> u32 {
    if quick {
        40
    } else {
        100
    }
}

/// Measurements per allocator.
fn benches(quick: bool) -> u64 {
    larson_threads(quick).len() as u64 + 2 + REBUILD_SIZES.len() as u64 + sizes::benches()
}

fn steps(quick: bool) -> u64 {
    benches(quick) * (allocators().len() as u64 + 1)
        + (sizes::RSS.len() + sizes::PHASE.len()) as u64
}

/// The in-process allocators, then kmem in the CPU-slab design (a child), beside kmem;
/// then each allocator's memory figures from a fresh child (see `sizes`).
fn run(ctx: &Ctx) -> Vec<BenchResult> {
    let mut out = measure(ctx, &allocators());
    out.extend(child::cpu_slab(ctx, &CHILD));
    out.extend(sizes::memory_children(ctx));
    child::beside_kmem(out)
}

/// Every bench with each of `allocators`.
fn measure(ctx: &Ctx, allocators: &[(&'static str, Alloc)]) -> Vec<BenchResult> {
    let mut out = Vec::new();
    // The allocators take turns, a repetition each (`Ctx::measure_interleaved`).
    let n = allocators.len();
    let mut push = |bench: &'static str, param: u64, op: &'static str, times: Vec<Timing>| {
        for (&(name, _), t) in allocators.iter().zip(times) {
            out.push(BenchResult::time(bench, name, param, op, t));
        }
    };
    let gens = larson_generations(ctx.quick);
    for &threads in larson_threads(ctx.quick) {
        ctx.status(format!("workloads larson {threads}"));
        let ops = threads * u64::from(gens) * LARSON_K;
        let times = ctx.measure_phases_interleaved(ops, n, |i, _| {
            larson(allocators[i].1, threads as usize, gens, LARSON_K)
        });
        push("larson", threads, "op", first_phase(times));
    }
    let objects: u64 = if ctx.quick { 500_000 } else { 2_000_000 };
    ctx.status("workloads xmalloc".to_string());
    let times = ctx.measure_interleaved(objects, n, |i, m| {
        xmalloc(allocators[i].1, XMALLOC_THREADS as usize, m)
    });
    push("xmalloc", XMALLOC_THREADS, "op", times);
    let steps: u64 = if ctx.quick { 1_000_000 } else { 4_000_000 };
    ctx.status("workloads random_sizes".to_string());
    let times = ctx.measure_phases_interleaved(steps, n, |i, m| {
        random_sizes(allocators[i].1, RANDOM_MAX as usize, m)
    });
    push("random_sizes", RANDOM_MAX, "op", first_phase(times));
    let rounds: u64 = if ctx.quick { 2 } else { 5 };
    for size in REBUILD_SIZES {
        ctx.status(format!("workloads rebuild {size}"));
        let ops = rounds * REBUILD_OBJECTS as u64;
        let times = ctx
            .measure_phases_interleaved(ops, n, |i, m| rebuild(allocators[i].1, size as usize, m));
        push("rebuild", size, "op", first_phase(times));
    }
    out.extend(sizes::measure(ctx, allocators));
    out
}

/// The first phase's medians of each contestant.
fn first_phase(times: Vec<[Timing; 2]>) -> Vec<Timing> {
    times.into_iter().map(|[t, _]| t).collect()
}

/// A per-thread xorshift64 generator.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        // Any non-zero state will do; spread small seeds over the word.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    #[inline]
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform in `0..n` (`n` > 0).
    #[inline]
    pub(super) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// Shuffles `v` in place (Fisher–Yates).
    pub(super) fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// The layout of a block of `size` bytes (malloc-like: 8-byte aligned).
#[inline]
fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).expect("block size")
}

/// A live block: whoever holds it owns it.
#[derive(Debug)]
struct Block {
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: a Block is the sole handle to its memory (like a Box), and every allocator
// here is `Sync`: any thread may free what another allocated.
unsafe impl Send for Block {}

/// Allocates `size` (> 0) bytes from `a` and writes `tag` into the first byte.
#[inline]
fn alloc(a: Alloc, size: usize, tag: u8) -> Block {
    debug_assert!(size > 0);
    let l = layout(size);
    // SAFETY: the size is not zero.
    let p = unsafe { a.alloc(l) };
    let Some(ptr) = NonNull::new(p) else {
        std::alloc::handle_alloc_error(l)
    };
    // SAFETY: a fresh block of at least one byte.
    unsafe { ptr.as_ptr().write(tag) };
    Block { ptr, size }
}

/// Frees `b` into `a`.
///
/// # Safety
/// `b` came from [`alloc`] with `a` and is not used (nor freed) again.
#[inline]
unsafe fn free(a: Alloc, b: &Block) {
    // SAFETY: allocated by `a` with this layout (caller).
    unsafe { a.dealloc(black_box(b.ptr.as_ptr()), layout(b.size)) }
}

/// A table of live blocks of one allocator and the generator that picks slots and
/// sizes; frees what it holds when dropped.
struct Window {
    a: Alloc,
    blocks: Vec<Block>,
    rng: Rng,
}

impl Window {
    /// `n` blocks of sizes drawn by `size`.
    fn fill(a: Alloc, n: usize, seed: u64, size: impl Fn(&mut Rng) -> usize) -> Self {
        let mut rng = Rng::new(seed);
        let blocks = (0..n).map(|i| alloc(a, size(&mut rng), i as u8)).collect();
        Window { a, blocks, rng }
    }

    /// `steps` times: frees the block of a random slot and allocates one of a size
    /// drawn by `size` in its place.
    #[inline]
    fn replace(&mut self, steps: u64, size: impl Fn(&mut Rng) -> usize) {
        let n = self.blocks.len() as u64;
        for _ in 0..steps {
            let i = self.rng.below(n) as usize;
            let slot = &mut self.blocks[i];
            // SAFETY: the slot's block came from `self.a`; it is overwritten at once.
            unsafe { free(self.a, slot) };
            *slot = alloc(self.a, size(&mut self.rng), i as u8);
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        for b in self.blocks.drain(..) {
            // SAFETY: every block of the window came from `self.a`, and leaves it here.
            unsafe { free(self.a, &b) };
        }
    }
}

/// The sum of two phases.
fn plus(x: Phase, y: Phase) -> Phase {
    Phase {
        ns: x.ns + y.ns,
        cycles: x.cycles.zip(y.cycles).map(|(c, d)| c + d),
    }
}

fn larson_size(rng: &mut Rng) -> usize {
    LARSON_MIN + rng.below((LARSON_MAX - LARSON_MIN + 1) as u64) as usize
}

/// What a larson thread leaves: the thread it handed its window to, or (the last
/// generation) the window.
enum Next {
    Successor(JoinHandle<Next>),
    Done(Window),
}

/// One larson thread: `k` replacements, then the window goes to a new thread (while
/// `left` generations remain) and this one exits.
fn larson_thread(mut w: Window, k: u64, left: u32) -> Next {
    w.replace(k, larson_size);
    if left == 0 {
        return Next::Done(w);
    }
    Next::Successor(std::thread::spawn(move || larson_thread(w, k, left - 1)))
}

/// Larson with `threads` workers of `generations` threads, each making `k`
/// replacements: the time of the replacements (thread creation included), and of
/// filling and freeing the windows.
fn larson(a: Alloc, threads: usize, generations: u32, k: u64) -> [Phase; 2] {
    assert!(threads >= 1 && generations >= 1);
    let mut windows: Vec<Window> = Vec::with_capacity(threads);
    let fill = phase(|| {
        windows.extend(
            (0..threads).map(|t| Window::fill(a, LARSON_BLOCKS, t as u64 + 1, larson_size)),
        );
    });
    let run = phase(|| {
        let first: Vec<JoinHandle<Next>> = windows
            .drain(..)
            .map(|w| std::thread::spawn(move || larson_thread(w, k, generations - 1)))
            .collect();
        for mut h in first {
            let w = loop {
                match h.join().expect("a larson thread panicked") {
                    Next::Successor(next) => h = next,
                    Next::Done(w) => break w,
                }
            };
            windows.push(w);
        }
    });
    let drain = phase(|| drop(std::mem::take(&mut windows)));
    [run, plus(fill, drain)]
}

/// xmalloc: `threads` / 2 producers allocate `objects` 64-byte objects in all and
/// pass them in batches to the other threads, which free them.
fn xmalloc(a: Alloc, threads: usize, objects: u64) {
    assert!(threads >= 2, "xmalloc needs a producer and a consumer");
    let producers = threads / 2;
    let consumers = threads - producers;
    let pool = XMALLOC_POOL * producers;
    // Full batches to the consumers, empty buffers back to the producers; each queue
    // can hold the whole pool, so no push ever waits. The consumers stop once every
    // producer is done with the full queue; the empty one is fed by this thread (the
    // pool) and the consumers.
    let full: Handoff<Vec<Block>> = Handoff::new(pool, producers);
    let empty: Handoff<Vec<Block>> = Handoff::new(pool, consumers + 1);
    {
        let fill = empty.producer();
        for _ in 0..pool {
            fill.push(Vec::with_capacity(XMALLOC_BATCH));
        }
    }
    std::thread::scope(|s| {
        for p in 0..producers as u64 {
            let share = objects / producers as u64 + u64::from(p < objects % producers as u64);
            let (full, empty) = (&full, &empty);
            s.spawn(move || {
                spread(p as usize, threads);
                let (out, back) = (full.producer(), empty.consumer());
                let mut left = share;
                while left > 0 {
                    let mut batch = back.pop().expect("the pool's buffers come back");
                    let k = left.min(XMALLOC_BATCH as u64);
                    for i in 0..k {
                        batch.push(alloc(a, XMALLOC_SIZE, i as u8));
                    }
                    left -= k;
                    out.push(batch);
                }
            });
        }
        for c in 0..consumers {
            let (full, empty) = (&full, &empty);
            s.spawn(move || {
                spread(producers + c, threads);
                let (input, back) = (full.consumer(), empty.producer());
                while let Some(mut batch) = input.pop() {
                    for b in batch.drain(..) {
                        // SAFETY: allocated by a producer from `a`, handed over to us.
                        unsafe { free(a, &b) };
                    }
                    back.push(batch);
                }
            });
        }
    });
}

/// A random_sizes size: a power of two from 8 on, each half as likely as the one
/// below, uniform within it, at most `max` (≥ 8).
#[inline]
fn random_size(rng: &mut Rng, max: usize) -> usize {
    let top = (max / 8).ilog2();
    let k = rng.next().trailing_zeros().min(top);
    let base = 8usize << k;
    (base + rng.below(base as u64) as usize).min(max)
}

/// random_sizes for the memory figures: fills the table, makes `steps` replacements
/// (sizes up to [`RANDOM_MAX`]) and empties it, calling `sample` after the fill and
/// every 10,000 steps.
pub(super) fn random_sizes_table(a: Alloc, steps: u64, mut sample: impl FnMut()) {
    let size = |rng: &mut Rng| random_size(rng, RANDOM_MAX as usize);
    let mut w = Window::fill(a, RANDOM_SLOTS, 7, size);
    sample();
    let mut left = steps;
    while left > 0 {
        let k = left.min(10_000);
        w.replace(k, size);
        left -= k;
        sample();
    }
}

/// random_sizes: `steps` replacements in a table of 10,000 blocks of sizes up to
/// `max`: the time of the steps, and of filling and emptying the table.
fn random_sizes(a: Alloc, max: usize, steps: u64) -> [Phase; 2] {
    assert!(max >= 8);
    let size = move |rng: &mut Rng| random_size(rng, max);
    let mut table = None;
    let fill = phase(|| table = Some(Window::fill(a, RANDOM_SLOTS, 7, size)));
    let w = table.as_mut().expect("filled");
    let run = phase(|| w.replace(steps, size));
    let drain = phase(|| drop(table.take()));
    [run, plus(fill, drain)]
}

/// rebuild: a table of [`REBUILD_OBJECTS`] objects of `size` bytes, freed in a random
/// order and allocated again (each written whole) until `ops` frees and allocations
/// are made: their time, and the rest's (the shuffles, the fill and the drain).
fn rebuild(a: Alloc, size: usize, ops: u64) -> [Phase; 2] {
    let mut rng = Rng::new(11);
    let mut untimed = Phase {
        ns: 0.0,
        cycles: Some(0.0),
    };
    let mut timed = untimed;
    let mut table: Vec<Block> = Vec::with_capacity(REBUILD_OBJECTS);
    untimed = plus(
        untimed,
        phase(|| table.extend((0..REBUILD_OBJECTS).map(|i| alloc(a, size, i as u8)))),
    );
    for _ in 0..ops.div_ceil(REBUILD_OBJECTS as u64) {
        let shuffle = phase(|| rng.shuffle(&mut table));
        let round = phase(|| {
            for b in table.iter_mut() {
                // SAFETY: the slot's block came from `a`; it is overwritten at once.
                unsafe { free(a, b) };
            }
            for (i, b) in table.iter_mut().enumerate() {
                *b = alloc(a, size, i as u8);
                // SAFETY: a fresh block of `size` bytes.
                unsafe { std::ptr::write_bytes(b.ptr.as_ptr(), i as u8, size) };
            }
        });
        untimed = plus(untimed, shuffle);
        timed = plus(timed, round);
    }
    untimed = plus(
        untimed,
        phase(|| {
            for b in table.drain(..) {
                // SAFETY: every block of the table came from `a`, and leaves it here.
                unsafe { free(a, &b) };
            }
        }),
    );
    [timed, untimed]
}

/// Larson's throughput line for each allocator, then for each bench and param kmem's
/// ratio to mimalloc and to the fastest peer (kmem[cpu-slab] is no peer), and the
/// CPU-slab design's to kmem.
fn report_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("\n");
    for r in results.iter().filter(|r| r.bench == "larson") {
        if let Some(ns) = r.ns {
            let _ = writeln!(
                out,
                "larson {} threads, {:>14}: Throughput = {:>10.0} operations per second",
                r.param,
                r.column(),
                1e9 / ns
            );
        }
    }
    out.push_str(
        "\nkmem time / peer time (below 1: kmem faster); kmem[cpu-slab] time / kmem time \
         (above 1: sheaves faster)\n",
    );
    let ns = |b: &str, p: u64, a: &str| {
        results
            .iter()
            .find(|r| r.bench == b && r.param == p && r.column() == a && r.ns.is_some())
            .and_then(|r| r.ns)
    };
    let keys = super::record::distinct(results.iter().map(|r| (r.bench, r.param)));
    for (bench, param) in keys {
        let Some(k) = ns(bench, param, "kmem") else {
            continue;
        };
        let unit = match bench {
            "random_sizes" | "medium" | "rebuild" => "B",
            "large_churn" => "MiB",
            "large_rounds" => "blocks",
            _ => "threads",
        };
        let label = format!("{bench} {param} {unit}");
        let _ = write!(out, "{label:>24}:");
        if let Some(m) = ns(bench, param, "mimalloc") {
            let _ = write!(out, " kmem/mimalloc {:.2}", k / m);
        }
        let best = PEERS
            .iter()
            .filter_map(|&p| ns(bench, param, p).map(|t| (p, t)))
            .min_by(|x, y| x.1.total_cmp(&y.1));
        if let Some((p, t)) = best {
            let _ = write!(out, "  kmem/best-peer {:.2} ({p})", k / t);
        }
        if let Some(c) = ns(bench, param, KMEM_CPU_SLAB) {
            let _ = write!(out, "  {KMEM_CPU_SLAB}/kmem {:.2}", c / k);
        }
        out.push('\n');
    }
    out.push_str(&memory_lines(results));
    out.push_str(&sizes::class_waste_lines());
    out
}

/// kmem's memory figures against mimalloc's and the smallest peer's.
fn memory_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let bytes = |b: &str, param: u64, op: &str, a: &str| {
        results
            .iter()
            .find(|r| r.bench == b && r.param == param && r.op == op && r.column() == a)
            .and_then(|r| r.bytes)
    };
    let rows = super::record::distinct(
        results
            .iter()
            .filter(|r| r.ns.is_none() && r.bytes.is_some() && r.column() == "kmem")
            .map(|r| (r.bench, r.param, r.op)),
    );
    for (bench, param, op) in rows {
        let Some(k) = bytes(bench, param, op, "kmem") else {
            continue;
        };
        let mib = |b: u64| b as f64 / (1 << 20) as f64;
        let label = match bench {
            "phase" => format!("{bench} {param} {op}"),
            _ => format!("{bench} {op}"),
        };
        let _ = write!(out, "{label:>24}: kmem {:.2} MiB", mib(k));
        for p in PEERS {
            if let Some(b) = bytes(bench, param, op, p) {
                let _ = write!(out, "  {p} {:.2}", mib(b));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashSet};
    use std::sync::Mutex;
    use std::thread::ThreadId;

    /// kmem with a record of every block: who allocated it, who freed it, its size.
    struct Counting {
        log: Mutex<Log>,
    }

    struct Log {
        /// Live blocks: address -> (allocating thread, size).
        live: BTreeMap<usize, (ThreadId, usize)>,
        allocs: u64,
        /// (allocating thread, freeing thread, size) of each free.
        frees: Vec<(ThreadId, ThreadId, usize)>,
        /// Frees of blocks not live here, or with another size.
        bad_frees: u64,
    }

    impl Counting {
        const fn new() -> Self {
            Counting {
                log: Mutex::new(Log {
                    live: BTreeMap::new(),
                    allocs: 0,
                    frees: Vec::new(),
                    bad_frees: 0,
                }),
            }
        }
    }

    // SAFETY: forwards to kmem; the bookkeeping (on the system allocator) neither
    // touches the blocks nor unwinds.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: forwarded from the caller.
            let p = unsafe { KMEM.alloc(layout) };
            if !p.is_null() {
                let me = std::thread::current().id();
                let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
                log.live.insert(p.addr(), (me, layout.size()));
                log.allocs += 1;
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            let me = std::thread::current().id();
            {
                // Forgotten before kmem may hand the address out again.
                let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
                match log.live.remove(&ptr.addr()) {
                    Some((by, size)) if size == layout.size() => log.frees.push((by, me, size)),
                    _ => log.bad_frees += 1,
                }
            }
            // SAFETY: forwarded from the caller.
            unsafe { KMEM.dealloc(ptr, layout) }
        }
    }

    /// The log, checked to be complete: every block allocated was freed once.
    fn finished(c: &Counting) -> (u64, Vec<(ThreadId, ThreadId, usize)>) {
        let log = c.log.lock().unwrap();
        assert_eq!(log.bad_frees, 0);
        assert!(log.live.is_empty(), "{} blocks never freed", log.live.len());
        assert_eq!(log.allocs, log.frees.len() as u64);
        (log.allocs, log.frees.clone())
    }

    #[test]
    fn larson_hands_live_blocks_to_the_next_thread_and_frees_everything() {
        static C: Counting = Counting::new();
        let me = std::thread::current().id();
        let (threads, gens, k) = (2, 3, 500);
        let [run, rest] = larson(&C, threads, gens, k);
        assert!(run.ns > 0.0 && rest.ns > 0.0);
        let (allocs, frees) = finished(&C);
        let replacements = threads as u64 * u64::from(gens) * k;
        assert_eq!(allocs, threads as u64 * LARSON_BLOCKS as u64 + replacements);
        assert!(frees
            .iter()
            .all(|f| (LARSON_MIN..=LARSON_MAX).contains(&f.2)));
        // Each generation of each worker is a thread of its own, and each frees.
        let workers: HashSet<_> = frees.iter().map(|f| f.1).filter(|&t| t != me).collect();
        assert_eq!(workers.len(), threads * gens as usize);
        // Every thread but a first generation frees blocks that another (now dead)
        // worker thread allocated: the handoff.
        let heirs: HashSet<_> = frees
            .iter()
            .filter(|&&(by, to, _)| by != me && to != me && by != to)
            .map(|f| f.1)
            .collect();
        assert_eq!(heirs.len(), threads * (gens as usize - 1));
        // The blocks still live at the end go back from this thread.
        assert!(frees.iter().any(|&(by, to, _)| by != me && to == me));
    }

    #[test]
    fn xmalloc_frees_every_object_on_a_consumer() {
        static C: Counting = Counting::new();
        let me = std::thread::current().id();
        for (threads, objects) in [(2, 1000), (4, 1001)] {
            xmalloc(&C, threads, objects);
            let (allocs, frees) = finished(&C);
            assert_eq!(allocs, objects);
            assert!(frees
                .iter()
                .all(|&(by, to, size)| by != to && by != me && to != me && size == XMALLOC_SIZE));
            let producers: HashSet<_> = frees.iter().map(|f| f.0).collect();
            let consumers: HashSet<_> = frees.iter().map(|f| f.1).collect();
            assert_eq!(producers.len(), threads / 2);
            assert!(producers.is_disjoint(&consumers));
            let mut log = C.log.lock().unwrap();
            log.allocs = 0;
            log.frees.clear();
        }
    }

    #[test]
    fn rebuild_frees_the_whole_table_and_makes_it_again_each_round() {
        static C: Counting = Counting::new();
        let rounds = 2;
        let [run, rest] = rebuild(&C, 64, rounds * REBUILD_OBJECTS as u64);
        assert!(run.ns > 0.0 && rest.ns > 0.0);
        let (allocs, frees) = finished(&C);
        // The fill, then a whole table per round; all of it freed by the end.
        assert_eq!(allocs, (rounds + 1) * REBUILD_OBJECTS as u64);
        assert!(frees.iter().all(|f| f.2 == 64));
    }

    #[test]
    fn random_sizes_favour_small_blocks_and_free_everything() {
        static C: Counting = Counting::new();
        let max = RANDOM_MAX as usize;
        let steps = 30_000;
        let [run, rest] = random_sizes(&C, max, steps);
        assert!(run.ns > 0.0 && rest.ns > 0.0);
        let (allocs, frees) = finished(&C);
        assert_eq!(allocs, RANDOM_SLOTS as u64 + steps);
        let me = std::thread::current().id();
        assert!(frees.iter().all(|&(by, to, _)| by == me && to == me));
        assert!(frees.iter().all(|f| (8..=max).contains(&f.2)));
        let n = frees.len() as f64;
        let share = |r: std::ops::RangeInclusive<usize>| {
            frees.iter().filter(|f| r.contains(&f.2)).count() as f64 / n
        };
        assert!((0.47..0.53).contains(&share(8..=15)), "{}", share(8..=15));
        assert!((0.22..0.28).contains(&share(16..=31)), "{}", share(16..=31));
        // The tail is there: pages and the largest size.
        assert!(share(4096..=max) > 0.0005);
        assert!(frees.iter().any(|f| f.2 == max));
    }

    #[test]
    fn report_gives_larson_throughput_and_kmem_ratios() {
        let t = |ns| super::super::Timing {
            ns,
            cycles: None,
            ops: 100,
        };
        let results = vec![
            BenchResult::time("larson", "kmem", 2, "op", t(50.0)),
            BenchResult::time("larson", "system", 2, "op", t(100.0)),
            BenchResult::time("larson", "mimalloc", 2, "op", t(40.0)),
            BenchResult::time("larson", "jemalloc", 2, "op", t(25.0)),
            // The CPU-slab design, fastest of all here: no peer of kmem's.
            child::in_cpu_slab(BenchResult::time("larson", "kmem", 2, "op", t(20.0))),
            BenchResult::time("random_sizes", "kmem", 65536, "op", t(30.0)),
            BenchResult::time("random_sizes", "mimalloc", 65536, "op", t(60.0)),
        ];
        let r = report_lines(&results);
        assert!(
            r.contains(
                "larson 2 threads,           kmem: Throughput =   20000000 operations per second"
            ),
            "{r}"
        );
        assert!(
            r.contains(
                "larson 2 threads, kmem[cpu-slab]: Throughput =   50000000 operations per second"
            ),
            "{r}"
        );
        assert!(
            r.contains(
                "larson 2 threads: kmem/mimalloc 1.25  kmem/best-peer 2.00 (jemalloc)  \
                 kmem[cpu-slab]/kmem 0.40\n"
            ),
            "{r}"
        );
        assert!(
            r.contains(
                "random_sizes 65536 B: kmem/mimalloc 0.50  kmem/best-peer 0.50 (mimalloc)\n"
            ),
            "{r}"
        );
    }
}
