//! The size benches of suite `workloads`: medium blocks, large blocks that come and
//! go, and the memory random sizes cost.
//!
//! - `medium` (param = block size: 16 KiB, 64 KiB, 256 KiB, 2 MiB): malloc a block,
//!   write its first byte, free it, in a loop; op `pair` = ns per malloc+free. Above
//!   the kernel's kmalloc caches (8 KiB), below kmem's direct mappings (over 4 MiB);
//!   2 MiB is a buffer per request, a page block of order 9 under kmem.
//! - `large_churn` (param = largest block in MiB, 25): blocks of 5–25 MiB (uniform,
//!   from a fixed generator) allocated, every page written, freed, one after the
//!   other; op `op` = ns per block. What decides it is whether the memory of one
//!   block is still mapped for the next (a page fault costs ~2 µs here, ~4,000 per
//!   block).
//! - `large_rounds` (param = blocks per round, 12): rounds of 12 blocks of 5–10 MiB
//!   (uniform, from a fixed generator) allocated one after the other and kept, every
//!   page written, then all freed; op `round` = ns per round. A program that builds a
//!   working set of large buffers per request, frame or phase (mimalloc-bench's
//!   mstress keeps ten to twenty such blocks live): what decides it is whether the
//!   last round's memory is still mapped for the next, all of it (about 90 MiB).
//! - Memory, each allocator in a fresh child process (`kmem bench-child rss-NAME`), so
//!   that no allocator reuses memory an earlier bench left it: `random_sizes` op
//!   `peak_rss` (bytes: the highest resident memory while the 10,000-slot table is
//!   filled and churned, minus the resident memory after the allocator's first
//!   allocation), and `large_churn` op
//!   `rss_after` (bytes: resident memory after the churn, after waiting the decay
//!   interval (1 s, kmem's `KMEM_DECAY_MS` default) and keeping busy with small
//!   allocations for 50 ms, as a running program would, minus the resident memory
//!   before the churn).
//! - `phase` op `peak_rss`, each allocator in a fresh child process of its own
//!   (`kmem bench-child phase-NAME`: memory an earlier bench left resident would take
//!   the first objects) (param = the second size, 128): one million 64-byte objects
//!   allocated, written and freed in a shuffled order, then one million 128-byte
//!   objects allocated and written; bytes: the highest resident memory, minus the
//!   resident memory before the first phase (read after one block of each size was
//!   allocated and freed on the calling thread, so every allocator's start-up is
//!   counted alike: none on that thread; other threads' first use, in the two-thread
//!   row, for all). A program whose next phase needs objects
//!   of another size: 128 MiB if the second phase reuses the first one's memory, 192
//!   if it reuses none.
//! - `phase` with param 2 MiB (`kmem bench-child phase-blocks-NAME`): the same first
//!   phase, then as many bytes (64 MiB) of 2 MiB blocks allocated and written: 64 MiB
//!   if the blocks reuse the objects' memory, 128 if they reuse none.
//! - `phase` with param 64 (`kmem bench-child phase-threads-NAME`): two threads, each
//!   with half a million 128-byte objects allocated, written and freed in a shuffled
//!   order, then (once both are done) half a million 64-byte objects each: 128 MiB at
//!   the first phase's end, and no more if the second phase reuses its memory while
//!   the other thread changes phase too.

use super::child::{self, Child};
use super::page::keep_busy;
use super::workloads::{allocators, random_sizes_table, Alloc, Rng, RANDOM_MAX};
use super::{BenchResult, Ctx};
use std::alloc::Layout;
use std::hint::black_box;
use std::time::Duration;

/// Block sizes of `medium`.
pub const MEDIUM_SIZES: [u64; 4] = [16 << 10, 64 << 10, 256 << 10, 2 << 20];
/// `large_churn`: smallest and largest block, in MiB.
const CHURN_MIN_MIB: usize = 5;
pub const CHURN_MAX_MIB: u64 = 25;
/// `large_rounds`: blocks per round, their smallest and largest size in MiB.
pub const ROUNDS_BLOCKS: u64 = 12;
const ROUNDS_MIN_MIB: usize = 5;
const ROUNDS_MAX_MIB: usize = 10;
/// The decay interval `rss_after` waits (kmem's default `KMEM_DECAY_MS`).
const DECAY: Duration = Duration::from_millis(1000);
/// `phase`: how many objects its first phase allocates (all threads together).
const PHASE_OBJECTS: usize = 1_000_000;

/// One row of `phase`.
struct PhaseRow {
    /// The first phase's object size.
    first: usize,
    /// The second phase's block size (the row's param).
    second: usize,
    /// Whether the second phase allocates as many bytes as the first (else as many
    /// blocks).
    same_bytes: bool,
    /// Threads that run both phases, each its share of the objects.
    threads: usize,
}

/// `phase`'s rows.
const PHASE_ROWS: [PhaseRow; 3] = [
    PhaseRow {
        first: 64,
        second: 128,
        same_bytes: false,
        threads: 1,
    },
    PhaseRow {
        first: 64,
        second: 2 << 20,
        same_bytes: true,
        threads: 1,
    },
    PhaseRow {
        first: 128,
        second: 64,
        same_bytes: false,
        threads: 2,
    },
];

/// Measurements per allocator in the in-process part.
pub fn benches() -> u64 {
    MEDIUM_SIZES.len() as u64 + 2
}

/// The memory children, one per allocator (in the order of `workloads::allocators`).
pub const RSS: [Child; 4] = [
    rss_child::<0>("rss-kmem"),
    rss_child::<1>("rss-system"),
    rss_child::<2>("rss-mimalloc"),
    rss_child::<3>("rss-jemalloc"),
];

/// The `phase` children, one per row and allocator (in the order of `PHASE_ROWS`
/// and `workloads::allocators`).
pub const PHASE: [Child; 12] = [
    phase_child::<0, 0>("phase-kmem"),
    phase_child::<1, 0>("phase-system"),
    phase_child::<2, 0>("phase-mimalloc"),
    phase_child::<3, 0>("phase-jemalloc"),
    phase_child::<0, 1>("phase-blocks-kmem"),
    phase_child::<1, 1>("phase-blocks-system"),
    phase_child::<2, 1>("phase-blocks-mimalloc"),
    phase_child::<3, 1>("phase-blocks-jemalloc"),
    phase_child::<0, 2>("phase-threads-kmem"),
    phase_child::<1, 2>("phase-threads-system"),
    phase_child::<2, 2>("phase-threads-mimalloc"),
    phase_child::<3, 2>("phase-threads-jemalloc"),
];

/// The memory child of allocator `I`.
const fn rss_child<const I: usize>(what: &'static str) -> Child {
    Child {
        what,
        measure: |ctx| memory(ctx, I),
        steps: |_| 1,
    }
}

/// The `phase` child of allocator `I` for row `R` of [`PHASE_ROWS`].
const fn phase_child<const I: usize, const R: usize>(what: &'static str) -> Child {
    Child {
        what,
        measure: |ctx| {
            let a = allocators()[I].1;
            let objects = if ctx.quick {
                PHASE_OBJECTS / 4
            } else {
                PHASE_OBJECTS
            };
            let row = &PHASE_ROWS[R];
            let peak = phase_peak(a, row, objects);
            vec![BenchResult::bytes(
                "phase",
                "kmem",
                row.second as u64,
                "peak_rss",
                peak,
            )]
        },
        steps: |_| 1,
    }
}

/// `medium` and `large_churn` times with each of `allocators`.
pub fn measure(ctx: &Ctx, allocators: &[(&'static str, Alloc)]) -> Vec<BenchResult> {
    // The allocators take turns, a repetition each (`Ctx::measure_interleaved`).
    let mut out = Vec::new();
    let n = allocators.len();
    let pairs: u64 = if ctx.quick { 20_000 } else { 100_000 };
    for size in MEDIUM_SIZES {
        ctx.status(format!("workloads medium {size}"));
        let times =
            ctx.measure_interleaved(pairs, n, |i, m| medium(allocators[i].1, size as usize, m));
        for (&(name, _), t) in allocators.iter().zip(times) {
            out.push(BenchResult::time("medium", name, size, "pair", t));
        }
    }
    let blocks: u64 = if ctx.quick { 12 } else { 40 };
    ctx.status("workloads large_churn".to_string());
    let times = ctx.measure_interleaved(blocks, n, |i, m| {
        large_churn(allocators[i].1, &mut Rng::new(3), m)
    });
    for (&(name, _), t) in allocators.iter().zip(times) {
        out.push(BenchResult::time("large_churn", name, CHURN_MAX_MIB, "op", t).without_bytes());
    }
    let rounds: u64 = if ctx.quick { 3 } else { 10 };
    ctx.status("workloads large_rounds".to_string());
    let times = ctx.measure_interleaved(rounds, n, |i, m| {
        large_rounds(allocators[i].1, &mut Rng::new(5), m)
    });
    for (&(name, _), t) in allocators.iter().zip(times) {
        out.push(
            BenchResult::time("large_rounds", name, ROUNDS_BLOCKS, "round", t).without_bytes(),
        );
    }
    out
}

/// The memory rows of every allocator, each from its own children.
pub fn memory_children(ctx: &Ctx) -> Vec<BenchResult> {
    let mut out = Vec::new();
    for (c, (name, _)) in RSS.iter().chain(&PHASE).zip(allocators().iter().cycle()) {
        out.extend(
            child::run(ctx, c, &[], &format!("a fresh process ({name})"))
                .into_iter()
                .map(|r| BenchResult {
                    allocator: name,
                    ..r
                }),
        );
    }
    out
}

/// In a child: allocator `i`'s `peak_rss` and `rss_after` (labelled `kmem`; the
/// parent relabels them).
fn memory(ctx: &Ctx, i: usize) -> Vec<BenchResult> {
    let a = allocators()[i].1;
    let steps = if ctx.quick { 300_000 } else { 1_000_000 };
    let small = || {
        let l = Layout::from_size_align(64, 8).expect("layout");
        // SAFETY: a non-zero size, freed with its layout.
        unsafe { a.dealloc(black_box(a.alloc(l)), l) };
    };
    // The allocator set up (its first allocation) before the first reading: what is
    // measured is the workload's memory, not the allocator's start-up.
    small();
    let before = kmem::rss_bytes();
    let mut peak = before;
    random_sizes_table(a, steps, || peak = peak.max(kmem::rss_bytes()));
    let peak_rss = peak.saturating_sub(before) as u64;

    keep_busy(small);
    let before = kmem::rss_bytes();
    large_churn(a, &mut Rng::new(3), if ctx.quick { 12 } else { 40 });
    std::thread::sleep(DECAY);
    keep_busy(small);
    let after = kmem::rss_bytes().saturating_sub(before) as u64;
    vec![
        BenchResult::bytes("random_sizes", "kmem", RANDOM_MAX, "peak_rss", peak_rss),
        BenchResult::bytes("large_churn", "kmem", CHURN_MAX_MIB, "rss_after", after),
    ]
}

/// `phase`: `n` objects of `row.first` bytes allocated, written and freed in a
/// shuffled order, then blocks of `row.second` bytes allocated and written (and freed,
/// after the last reading), by `row.threads` threads, each its share, both phases
/// together (the second begins once every thread has freed its first). Returns the
/// highest resident memory, read at each phase's end (the first's before its frees),
/// minus the resident memory before.
fn phase_peak(a: Alloc, row: &PhaseRow, n: usize) -> u64 {
    let threads = row.threads;
    let m = if row.same_bytes {
        n * row.first / row.second
    } else {
        n
    };
    let run = |table: &mut Vec<*mut u8>, size: usize, n: usize| {
        let l = Layout::from_size_align(size, 8).expect("layout");
        for i in 0..n {
            // SAFETY: a non-zero size.
            let p = unsafe { a.alloc(l) };
            assert!(!p.is_null(), "phase: out of memory");
            // SAFETY: a fresh block of `size` bytes.
            unsafe { p.write_bytes(i as u8, size) };
            table.push(p);
        }
    };
    let free = |table: &mut Vec<*mut u8>, size: usize| {
        let l = Layout::from_size_align(size, 8).expect("layout");
        for p in table.drain(..) {
            // SAFETY: allocated by `run` with `l`, freed once.
            unsafe { a.dealloc(p, l) };
        }
    };
    // Each thread's phases, with a stop at each of `STOPS`: the end of its first
    // phase's allocations (a reading), the end of its frees (every thread's are done
    // before any second phase begins), the end of its second phase (a reading).
    const STOPS: [bool; 3] = [true, false, true];
    let thread = |seed: u64, stop: &dyn Fn()| {
        let mut table: Vec<*mut u8> = Vec::with_capacity(n / threads);
        run(&mut table, row.first, n / threads);
        stop();
        Rng::new(seed).shuffle(&mut table);
        free(&mut table, row.first);
        stop();
        run(&mut table, row.second, m / threads);
        stop();
        free(&mut table, row.second);
    };
    // One block of each size first, so that what the allocator sets up on its first
    // use (kmem's heap, mimalloc's and jemalloc's arenas, glibc's heap, which this
    // program's own allocations started already) is in `before` for every allocator
    // alike.
    for size in [row.first, row.second] {
        let l = Layout::from_size_align(size, 8).expect("layout");
        // SAFETY: a non-zero size; freed at once.
        unsafe {
            let p = a.alloc(l);
            assert!(!p.is_null(), "phase: out of memory");
            a.dealloc(p, l);
        }
    }
    let before = kmem::rss_bytes();
    if threads == 1 {
        let (peak, at) = (std::cell::Cell::new(before), std::cell::Cell::new(0));
        thread(13, &|| {
            if STOPS[at.get()] {
                peak.set(peak.get().max(kmem::rss_bytes()));
            }
            at.set(at.get() + 1);
        });
        return peak.get().saturating_sub(before) as u64;
    }
    // The threads wait for each other at each stop; the caller reads between.
    let barrier = std::sync::Barrier::new(threads + 1);
    let stop = || {
        barrier.wait();
        barrier.wait();
    };
    let mut peak = before;
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (thread, stop) = (&thread, &stop);
            scope.spawn(move || thread(13 + t as u64, stop));
        }
        for read in STOPS {
            barrier.wait();
            if read {
                peak = peak.max(kmem::rss_bytes());
            }
            barrier.wait();
        }
    });
    peak.saturating_sub(before) as u64
}

/// `n` times: malloc `size` bytes, write the first, free.
fn medium(a: Alloc, size: usize, n: u64) {
    let l = Layout::from_size_align(size, 8).expect("layout");
    for i in 0..n {
        // SAFETY: a non-zero size.
        let p = unsafe { a.alloc(l) };
        assert!(!p.is_null(), "medium: out of memory");
        // SAFETY: a fresh block of `size` bytes.
        unsafe { p.write_volatile(i as u8) };
        // SAFETY: allocated just above with `l`.
        unsafe { a.dealloc(black_box(p), l) };
    }
}

/// `n` blocks of 5–25 MiB, each allocated, written page by page and freed.
fn large_churn(a: Alloc, rng: &mut Rng, n: u64) {
    for _ in 0..n {
        let mib =
            CHURN_MIN_MIB + rng.below((CHURN_MAX_MIB as usize - CHURN_MIN_MIB + 1) as u64) as usize;
        let size = (mib << 20) + rng.below(1 << 20) as usize;
        let l = Layout::from_size_align(size, 8).expect("layout");
        // SAFETY: a non-zero size.
        let p = unsafe { a.alloc(l) };
        assert!(!p.is_null(), "large_churn: out of memory");
        let mut off = 0;
        while off < size {
            // SAFETY: inside the block.
            unsafe { p.add(off).write_volatile(1) };
            off += 4096;
        }
        // SAFETY: allocated just above with `l`.
        unsafe { a.dealloc(black_box(p), l) };
    }
}

/// `n` rounds: [`ROUNDS_BLOCKS`] blocks of 5–10 MiB allocated and kept, each written
/// page by page, then all freed.
fn large_rounds(a: Alloc, rng: &mut Rng, n: u64) {
    let mut live = Vec::with_capacity(ROUNDS_BLOCKS as usize);
    for _ in 0..n {
        for _ in 0..ROUNDS_BLOCKS {
            let mib =
                ROUNDS_MIN_MIB + rng.below((ROUNDS_MAX_MIB - ROUNDS_MIN_MIB + 1) as u64) as usize;
            let size = (mib << 20) + rng.below(1 << 20) as usize;
            let l = Layout::from_size_align(size, 8).expect("layout");
            // SAFETY: a non-zero size.
            let p = unsafe { a.alloc(l) };
            assert!(!p.is_null(), "large_rounds: out of memory");
            for off in (0..size).step_by(4096) {
                // SAFETY: inside the block.
                unsafe { p.add(off).write_volatile(1) };
            }
            live.push((p, l));
        }
        for (p, l) in live.drain(..) {
            // SAFETY: allocated above with `l`, freed once.
            unsafe { a.dealloc(black_box(p), l) };
        }
    }
}

/// A set of size classes as the heap would serve a malloc of each size: the class (or
/// page block) size and the tail waste per object of its slab.
struct ClassSet {
    /// (object size, tail bytes per object) per class, smallest first.
    classes: Vec<(usize, f64)>,
}

impl ClassSet {
    fn new(sizes: &[usize]) -> Self {
        let classes = sizes
            .iter()
            .map(|&size| {
                let align = (1usize << size.trailing_zeros()).min(4096);
                let mut cfg = kmem_core::slab::CacheConfig::calculate(
                    "class",
                    size,
                    align,
                    kmem_core::SlabFlags::empty(),
                    None,
                    2,
                )
                .expect("a kmalloc class");
                // As the heap's plain classes are laid out (the sheaves design).
                cfg.widen_small_slabs();
                let tail = (cfg.slab_bytes() - cfg.objects * cfg.size) as f64 / cfg.objects as f64;
                (cfg.size, tail)
            })
            .collect();
        ClassSet { classes }
    }

    /// (footprint, internal waste, tail waste) of a malloc of `size` bytes: its class,
    /// or above the largest class a page block of 2^order pages.
    fn serve(&self, size: usize) -> (f64, f64, f64) {
        match self.classes.iter().find(|&&(c, _)| c >= size) {
            Some(&(c, tail)) => (c as f64 + tail, (c - size) as f64, tail),
            None => {
                let block = size.next_power_of_two().max(4096);
                (block as f64, (block - size) as f64, 0.0)
            }
        }
    }
}

/// The random_sizes mix with sizes up to `max`, exactly: (size, probability) for every
/// size the generator can draw (see `workloads::random_size`).
fn random_sizes_mix(max: usize) -> Vec<(usize, f64)> {
    let top = (max / 8).ilog2();
    let mut mix = Vec::new();
    for k in 0..=top {
        // P(trailing zeros = k), the last power taking every k >= top.
        let p = if k < top {
            0.5f64.powi(k as i32 + 1)
        } else {
            0.5f64.powi(top as i32)
        };
        let base = 8usize << k;
        for size in base..2 * base {
            mix.push((size.min(max), p / base as f64));
        }
    }
    mix
}

/// Waste of the kmem classes and of the kernel's power-of-two classes on the
/// random_sizes mix, per doubling of the request: (label, share of requests, kmem
/// internal + tail %, power-of-two internal + tail %), then the whole mix.
fn class_waste(max: usize) -> Vec<(String, f64, [f64; 2], [f64; 2])> {
    let sets = [
        ClassSet::new(&kmem_core::kmalloc::KMALLOC_PLAIN_SIZES),
        ClassSet::new(&kmem_core::kmalloc::KMALLOC_SIZES),
    ];
    let mut rows = Vec::new();
    let mut total = (0.0, [[0.0; 2]; 2], 0.0);
    let mix = random_sizes_mix(max);
    let mut k = 3;
    while 1usize << k <= max {
        let (lo, hi) = (1usize << k, 1usize << (k + 1));
        let (mut share, mut req, mut waste) = (0.0, 0.0, [[0.0; 2]; 2]);
        for &(size, p) in mix.iter().filter(|&&(s, _)| s >= lo && s < hi) {
            share += p;
            req += p * size as f64;
            for (w, set) in waste.iter_mut().zip(&sets) {
                let (_, internal, tail) = set.serve(size);
                w[0] += p * internal;
                w[1] += p * tail;
            }
        }
        total.0 += share;
        total.2 += req;
        for (t, w) in total.1.iter_mut().zip(waste) {
            t[0] += w[0];
            t[1] += w[1];
        }
        let pct = |w: [f64; 2]| [100.0 * w[0] / req, 100.0 * w[1] / req];
        rows.push((
            format!("{lo}-{}", hi - 1),
            share,
            pct(waste[0]),
            pct(waste[1]),
        ));
        k += 1;
    }
    let pct = |w: [f64; 2]| [100.0 * w[0] / total.2, 100.0 * w[1] / total.2];
    rows.push(("all".to_string(), total.0, pct(total.1[0]), pct(total.1[1])));
    rows
}

/// The class waste table of [`class_waste`] for the report.
pub fn class_waste_lines() -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "\nsize classes on the random_sizes mix (8 B - 64 KiB, exact expectation), waste as % \
         of the bytes asked: internal (class - request) + tail (slab tail per object)\n",
    );
    let _ = writeln!(
        out,
        "{:>14} {:>8} {:>22} {:>22}",
        "request (B)", "share", "kmem", "power of two (kernel)"
    );
    for (label, share, k, p) in class_waste(RANDOM_MAX as usize) {
        let _ = writeln!(
            out,
            "{label:>14} {:>7.2}% {:>9.1}% + {:>5.1}% {:>11.1}% + {:>5.1}%",
            100.0 * share,
            k[0],
            k[1],
            p[0],
            p[1]
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, System};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// The system allocator, counting live blocks (and their most at once) and
    /// checking each block's size.
    struct Rounds {
        live: AtomicUsize,
        most: AtomicUsize,
        allocs: AtomicUsize,
    }

    // SAFETY: forwards to System; the counters change nothing it returns.
    unsafe impl GlobalAlloc for Rounds {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            assert!((ROUNDS_MIN_MIB << 20..(ROUNDS_MAX_MIB + 1) << 20).contains(&l.size()));
            let n = self.live.fetch_add(1, Relaxed) + 1;
            self.most.fetch_max(n, Relaxed);
            self.allocs.fetch_add(1, Relaxed);
            // SAFETY: forwarded.
            unsafe { System.alloc(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            self.live.fetch_sub(1, Relaxed);
            // SAFETY: forwarded.
            unsafe { System.dealloc(p, l) }
        }
    }

    #[test]
    fn large_rounds_keep_a_round_live_then_free_it_all() {
        static R: Rounds = Rounds {
            live: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            allocs: AtomicUsize::new(0),
        };
        large_rounds(&R, &mut Rng::new(5), 2);
        assert_eq!(R.allocs.load(Relaxed), 2 * ROUNDS_BLOCKS as usize);
        assert_eq!(
            R.most.load(Relaxed),
            ROUNDS_BLOCKS as usize,
            "a round live at once"
        );
        assert_eq!(R.live.load(Relaxed), 0, "everything freed");
    }

    #[test]
    fn the_mix_is_a_distribution_and_the_classes_between_powers_of_two_waste_less() {
        let mix = random_sizes_mix(65536);
        let sum: f64 = mix.iter().map(|&(_, p)| p).sum();
        assert!((sum - 1.0).abs() < 1e-9, "{sum}");
        let rows = class_waste(65536);
        let (_, share, kmem, pow2) = rows.last().unwrap();
        assert!((share - 1.0).abs() < 1e-9);
        assert!(kmem[0] + kmem[1] < pow2[0] + pow2[1], "{kmem:?} {pow2:?}");
        // From 32 bytes to 8 KiB the extra classes round up less; from 64 bytes, four
        // per doubling: at most 25%, about 8% on a smooth mix, against up to a third
        // for powers of two.
        for (i, (label, _, kmem, pow2)) in rows.iter().enumerate().take(10).skip(2) {
            assert!(kmem[0] < pow2[0], "{label}: {kmem:?} {pow2:?}");
            assert!(i == 2 || kmem[0] < 12.5, "{label}: {kmem:?}");
        }
    }
}
