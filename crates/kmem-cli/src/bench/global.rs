//! Suite `global`: typical Rust allocation patterns, each allocator called through
//! its `GlobalAlloc` (kmem's `KmemAlloc` included) by way of one adapter to the
//! Allocator API, so the same collection code runs on every allocator in one process.
//!
//! - `vec_push`: grow a `Vec<u64>` by push to `param` elements.
//! - `box_tree`: build and drop a binary tree of `param` boxed nodes.
//! - `string_build`: build `param` short strings ("item-12345"), keep them, drop them.
//! - `hashmap_churn`: insert `param` entries (`u64` -> `Vec<u8>` of 0..32 bytes) into a
//!   HashMap, remove every other one, insert them again, drop the map.
//! - `realloc_grow`: grow `param` buffers round-robin from 8 bytes to 16 KiB.
//! - `record_walk`: build `param` records (each a boxed record holding boxes of 8,
//!   16 and 40 bytes and a 20-byte name), each linked to the next one built, follow
//!   the list ten times reading every part (as a tracing collector does over its
//!   list of objects, or any pass over a list built by appending), drop them: how
//!   well objects allocated together are laid out to be read together.
//! - `scattered_walk`: allocate `param` objects of each of record_walk's sizes (the
//!   record and its four parts), free them all in a random order, then run
//!   record_walk on `param` records: the same question after the heap has been
//!   through random frees, as a long-running program's has (a table dropped, a cache
//!   evicted): whether what is built next is laid out in the order it is built or
//!   in the order the old objects were freed. Last in the suite: it leaves the
//!   allocators' caches holding objects in a random order, which would change what
//!   a pattern after it measures.
//!
//! op `run`: ns per whole run.

use super::{BenchResult, Ctx, Suite};
use allocator_api2::alloc::{AllocError, Allocator};
use allocator_api2::boxed::Box as ABox;
use allocator_api2::vec::Vec as AVec;
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::ptr::NonNull;

pub const SUITE: Suite = Suite {
    name: "global",
    steps,
    run,
    report_lines,
};

static KMEM: kmem::KmemAlloc = kmem::KmemAlloc;
static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
static SYSTEM: System = System;

/// Any `GlobalAlloc` as an `Allocator` (zero-sized requests get dangling pointers).
#[derive(Clone, Copy)]
struct Via(&'static (dyn GlobalAlloc + Sync));

fn dangling(layout: Layout) -> NonNull<[u8]> {
    let p = std::ptr::without_provenance_mut::<u8>(layout.align());
    // SAFETY: the alignment is never zero.
    NonNull::slice_from_raw_parts(unsafe { NonNull::new_unchecked(p) }, 0)
}

// SAFETY: forwards to a GlobalAlloc, whose contract gives the guarantees the Allocator
// API asks for; zero-sized blocks are never passed to it.
unsafe impl Allocator for Via {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return Ok(dangling(layout));
        }
        // SAFETY: non-zero size.
        let p = NonNull::new(unsafe { self.0.alloc(layout) }).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(p, layout.size()))
    }
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            // SAFETY: allocated by this GlobalAlloc with this layout (caller).
            unsafe { self.0.dealloc(ptr.as_ptr(), layout) }
        }
    }
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if old.size() == 0 || old.align() != new.align() {
            let q = self.allocate(new)?;
            // SAFETY: both blocks are ours; copy what the old one holds, free it.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr.as_ptr(), q.as_ptr() as *mut u8, old.size());
                self.deallocate(ptr, old);
            }
            return Ok(q);
        }
        // SAFETY: the GlobalAlloc realloc contract (same alignment, non-zero sizes).
        let p = NonNull::new(unsafe { self.0.realloc(ptr.as_ptr(), old, new.size()) })
            .ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(p, new.size()))
    }
}

fn allocators() -> [(&'static str, Via); 4] {
    [
        ("kmem", Via(&KMEM)),
        ("system", Via(&SYSTEM)),
        ("mimalloc", Via(&MIMALLOC)),
        ("jemalloc", Via(&JEMALLOC)),
    ]
}

const PATTERNS: [(&str, u64); 7] = [
    ("vec_push", 1_000_000),
    ("box_tree", 65_535),
    ("string_build", 100_000),
    ("hashmap_churn", 100_000),
    ("realloc_grow", 1_000),
    ("record_walk", 100_000),
    ("scattered_walk", 100_000),
];

fn steps(_quick: bool) -> u64 {
    (PATTERNS.len() * 4) as u64
}

fn run(ctx: &Ctx) -> Vec<BenchResult> {
    let runs: u64 = if ctx.quick { 2 } else { 8 };
    let mut out = Vec::new();
    let who = allocators();
    for (bench, n) in PATTERNS {
        ctx.status(format!("global {bench}"));
        // The allocators take turns, a repetition each (`measure_interleaved`).
        let times = ctx.measure_interleaved(runs, who.len(), |i, r| {
            let a = who[i].1;
            for _ in 0..r {
                match bench {
                    "vec_push" => vec_push(a, n),
                    "box_tree" => box_tree(a, n),
                    "string_build" => string_build(a, n),
                    "hashmap_churn" => hashmap_churn(a, n),
                    "realloc_grow" => realloc_grow(a, n),
                    "record_walk" => record_walk(a, n),
                    "scattered_walk" => scattered_walk(a, n),
                    other => unreachable!("no pattern {other}"),
                }
            }
        });
        for ((name, _), t) in who.iter().zip(times) {
            out.push(BenchResult::time(bench, name, n, "run", t));
        }
    }
    out
}

fn vec_push(a: Via, n: u64) {
    let mut v: AVec<u64, Via> = AVec::new_in(a);
    for i in 0..n {
        v.push(i);
    }
    black_box(v.len());
}

struct Node {
    left: Option<ABox<Node, Via>>,
    right: Option<ABox<Node, Via>>,
    value: u64,
}

fn tree(a: Via, depth: u32, value: u64) -> Option<ABox<Node, Via>> {
    (depth > 0).then(|| {
        ABox::new_in(
            Node {
                left: tree(a, depth - 1, value * 2),
                right: tree(a, depth - 1, value * 2 + 1),
                value,
            },
            a,
        )
    })
}

fn sum(t: &Option<ABox<Node, Via>>) -> u64 {
    t.as_ref()
        .map_or(0, |n| n.value + sum(&n.left) + sum(&n.right))
}

fn box_tree(a: Via, n: u64) {
    let depth = 64 - n.leading_zeros();
    let t = tree(a, depth, 1);
    black_box(sum(&t));
}

fn string_build(a: Via, n: u64) {
    let mut all: AVec<AVec<u8, Via>, Via> = AVec::new_in(a);
    for i in 0..n {
        let mut s: AVec<u8, Via> = AVec::new_in(a);
        s.extend_from_slice(b"item-");
        let mut digits = [0u8; 20];
        let mut k = digits.len();
        let mut x = i;
        loop {
            k -= 1;
            digits[k] = b'0' + (x % 10) as u8;
            x /= 10;
            if x == 0 {
                break;
            }
        }
        s.extend_from_slice(&digits[k..]);
        all.push(s);
    }
    black_box(all.len());
}

fn hashmap_churn(a: Via, n: u64) {
    let mut m: hashbrown::HashMap<u64, AVec<u8, Via>, hashbrown::DefaultHashBuilder, Via> =
        hashbrown::HashMap::with_hasher_in(Default::default(), a);
    let val = |i: u64| {
        let mut v = AVec::new_in(a);
        v.resize((i % 32) as usize, i as u8);
        v
    };
    for i in 0..n {
        m.insert(i, val(i));
    }
    for i in (0..n).step_by(2) {
        m.remove(&i);
    }
    for i in (0..n).step_by(2) {
        m.insert(i, val(i));
    }
    black_box(m.len());
}

fn realloc_grow(a: Via, n: u64) {
    let mut bufs: AVec<AVec<u8, Via>, Via> = AVec::new_in(a);
    for _ in 0..n {
        let mut v = AVec::new_in(a);
        v.reserve_exact(8);
        bufs.push(v);
    }
    let mut cap = 8;
    while cap < 16 * 1024 {
        cap *= 2;
        for b in bufs.iter_mut() {
            let more = cap - b.len();
            b.reserve_exact(more);
            b.resize(cap / 2, 1);
        }
    }
    black_box(bufs.len());
}

/// A record of the kind programs keep by the thousand: small boxed parts and a name,
/// and a link to the record built after it (the list a tracing collector keeps of
/// its objects, or any list built by appending).
struct Record {
    next: *const Record,
    key: ABox<u64, Via>,
    pair: ABox<[u64; 2], Via>,
    body: ABox<[u64; 5], Via>,
    name: AVec<u8, Via>,
}

/// Times `record_walk` follows the list.
const WALKS: usize = 10;

fn record_walk(a: Via, n: u64) {
    // The records as raw pointers (`ABox::into_raw`): linked, read and finally freed
    // through them alone.
    let mut all: AVec<*mut Record, Via> = AVec::with_capacity_in(n as usize, a);
    for i in 0..n {
        let mut name = AVec::with_capacity_in(20, a);
        name.extend_from_slice(b"record-");
        name.extend_from_slice(&i.to_le_bytes()[..4]);
        let r = Record {
            next: std::ptr::null(),
            key: ABox::new_in(i, a),
            pair: ABox::new_in([i, i + 1], a),
            body: ABox::new_in([i; 5], a),
            name,
        };
        let (p, _) = ABox::into_raw_with_allocator(ABox::new_in(r, a));
        if let Some(&last) = all.last() {
            // SAFETY: `last` is a live record of ours, reached through no reference.
            unsafe { (*last).next = p };
        }
        all.push(p);
    }
    let head: *const Record = all.first().map_or(std::ptr::null(), |&p| p);
    let mut total = 0u64;
    for _ in 0..WALKS {
        let mut p = head;
        while !p.is_null() {
            // SAFETY: every link points at a live record of `all`, not written while
            // the walks run.
            let r = unsafe { &*p };
            total = total.wrapping_add(*r.key + r.pair[1] + r.body[4] + r.name[0] as u64);
            p = r.next;
        }
        black_box(total);
    }
    for p in all {
        // SAFETY: each record was made by `ABox::new_in(_, a)` and is freed once.
        drop(unsafe { ABox::from_raw_in(p, a) });
    }
}

/// `scattered_walk`: `n` objects of each of a record's sizes allocated and freed in a
/// random order (`workloads`' xorshift shuffle, a fixed seed), then [`record_walk`]
/// of `n` records.
fn scattered_walk(a: Via, n: u64) {
    let layouts = [
        Layout::new::<Record>(),
        Layout::new::<u64>(),
        Layout::new::<[u64; 2]>(),
        Layout::new::<[u64; 5]>(),
        Layout::array::<u8>(20).expect("20 bytes"),
    ];
    // The list of the old objects from the process's own allocator (glibc's), the
    // same for every allocator measured.
    let mut old: Vec<(NonNull<u8>, Layout)> = Vec::with_capacity(n as usize * layouts.len());
    for i in 0..n as usize * layouts.len() {
        let layout = layouts[i % layouts.len()];
        let p = a.allocate(layout).expect("memory").cast::<u8>();
        old.push((p, layout));
    }
    super::workloads::Rng::new(3).shuffle(&mut old);
    for (p, layout) in old.drain(..) {
        // SAFETY: allocated just above from `a` with this layout, freed once.
        unsafe { a.deallocate(p, layout) };
    }
    drop(old);
    record_walk(a, n);
}

/// kmem's ratio to mimalloc and to system for each pattern.
fn report_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("\nkmem time / peer time (below 1: kmem faster)\n");
    let ns = |b: &str, a: &str| {
        results
            .iter()
            .find(|r| r.bench == b && r.allocator == a)
            .and_then(|r| r.ns)
    };
    for (bench, _) in PATTERNS {
        if let (Some(k), Some(m), Some(s), Some(j)) = (
            ns(bench, "kmem"),
            ns(bench, "mimalloc"),
            ns(bench, "system"),
            ns(bench, "jemalloc"),
        ) {
            let _ = writeln!(
                out,
                "{bench:>14}: vs mimalloc {:.2}  vs system {:.2}  vs jemalloc {:.2}",
                k / m,
                k / s,
                k / j
            );
        }
    }
    out
}
