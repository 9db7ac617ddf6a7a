//! The allocation stress of the reliability battery: threads doing random kmalloc /
//! kfree / krealloc and GlobalAlloc alloc / dealloc / realloc of sizes from 1 byte to
//! 8 MiB, half of the frees on another thread; every object filled with a pattern
//! derived from its address and size and checked before it is freed. At the end
//! everything is freed, the caches shrunk, the CPU areas flushed (the threads exit),
//! and the page allocator holds exactly what it held before plus the new threads'
//! CPU areas (kept for reuse): nothing leaked, nothing lost.
//! (No `#[global_allocator]` here, so std's own allocations do not blur the count.)
//! `KMEM_STRESS_SECS=N` runs N seconds instead of a fixed short batch.

mod common;

use common::{fill, sampled, verify, verify_moved, XorShift};
use kmem::{heap, Gfp, KmemAlloc};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const THREADS: usize = 4;

#[derive(Clone, Copy)]
struct Obj {
    p: usize,
    size: usize,
    align: usize,
    kmalloc: bool,
}

impl Obj {
    fn fill(&self) {
        // SAFETY: `self` is live and `size` bytes long.
        unsafe { fill(self.p as *mut u8, self.size, sampled(self.size)) };
    }

    fn verify(&self) {
        // SAFETY: as in `fill`.
        unsafe { verify(self.p as *const u8, self.size, sampled(self.size)) };
    }
}

fn release(o: Obj) {
    o.verify();
    if o.kmalloc {
        // SAFETY: from kmalloc, freed once.
        unsafe { heap().kfree(o.p as *mut u8) };
    } else {
        let layout = Layout::from_size_align(o.size, o.align).unwrap();
        // SAFETY: from KmemAlloc with this layout, freed once.
        unsafe { KmemAlloc.dealloc(o.p as *mut u8, layout) };
    }
}

/// Log-uniform sizes 1 B … 8 MiB (large ones rarer).
fn size(r: u64) -> usize {
    let bits = match r % 100 {
        0 => 23,
        1..=4 => 13 + (r >> 8) % 10,
        _ => (r >> 8) % 13,
    };
    1 + ((r >> 16) as usize & ((1usize << bits) - 1))
}

struct Counts {
    ops: AtomicU64,
    remote: AtomicU64,
}

fn worker(
    t: usize,
    until: Instant,
    min_ops: u64,
    to_next: mpsc::Sender<Obj>,
    from_prev: mpsc::Receiver<Obj>,
    counts: &Counts,
) {
    let mut rng = XorShift::new(0x2545_f491_4f6c_dd1d_u64 ^ ((t as u64 + 1) * 0x9e37_79b9));
    let mut live: Vec<Obj> = Vec::new();
    let mut ops = 0u64;
    while ops < min_ops || Instant::now() < until {
        // Objects other threads handed us are freed here.
        while let Ok(o) = from_prev.try_recv() {
            release(o);
        }
        let r = rng.next_u64();
        match r % 8 {
            0..=2 if live.len() < 512 => {
                let size = size(r >> 3);
                let o = if r & 8 != 0 && size <= 4 << 20 {
                    let p = heap().kmalloc(size, Gfp::KERNEL).expect("memory");
                    Obj {
                        p: p.as_ptr() as usize,
                        size,
                        align: 1,
                        kmalloc: true,
                    }
                } else {
                    let align = 1 << ((r >> 40) % 13);
                    let layout = Layout::from_size_align(size, align).unwrap();
                    // SAFETY: non-zero size.
                    let p = unsafe { KmemAlloc.alloc(layout) };
                    assert!(!p.is_null(), "out of memory");
                    assert_eq!(p as usize % align, 0);
                    Obj {
                        p: p as usize,
                        size,
                        align,
                        kmalloc: false,
                    }
                };
                o.fill();
                live.push(o);
            }
            3..=5 if !live.is_empty() => {
                let o = live.swap_remove((r >> 8) as usize % live.len());
                if r & 8 != 0 {
                    // Half of the frees happen on the next thread.
                    o.verify();
                    to_next.send(o).expect("next thread alive");
                    counts.remote.fetch_add(1, Ordering::Relaxed);
                } else {
                    release(o);
                }
            }
            6 | 7 if !live.is_empty() => {
                let i = (r >> 8) as usize % live.len();
                let o = live[i];
                o.verify();
                let new = size(r >> 16).min(4 << 20);
                let q = if o.kmalloc {
                    // SAFETY: from kmalloc; the old pointer is not used again.
                    unsafe { heap().krealloc(o.p as *mut u8, new, Gfp::KERNEL) }
                        .expect("memory")
                        .as_ptr()
                } else {
                    let layout = Layout::from_size_align(o.size, o.align).unwrap();
                    // SAFETY: from KmemAlloc with this layout; non-zero new size.
                    let q = unsafe { KmemAlloc.realloc(o.p as *mut u8, layout, new) };
                    assert!(!q.is_null(), "out of memory");
                    q
                };
                // What fits came along.
                // SAFETY: `q` holds `new` bytes.
                unsafe { verify_moved(o.p, o.size, q, new, sampled(o.size)) };
                let n = Obj {
                    p: q as usize,
                    size: new,
                    ..o
                };
                n.fill();
                live[i] = n;
            }
            _ => {}
        }
        ops += 1;
    }
    for o in live {
        release(o);
    }
    drop(to_next);
    // The previous thread may still be sending: drain until it hangs up.
    for o in from_prev {
        release(o);
    }
    counts.ops.fetch_add(ops, Ordering::Relaxed);
}

#[test]
fn threads_lose_nothing_and_every_page_comes_back() {
    let h = heap();
    let pa = h.page_allocator();
    // Warm up the paths that keep something for good (a huge mapping's cache).
    let big = Layout::from_size_align(8 << 20, 8).unwrap();
    // SAFETY: non-zero size; freed at once.
    unsafe { KmemAlloc.dealloc(KmemAlloc.alloc(big), big) };
    let settle = || {
        h.trim();
        h.shrink_all();
        h.drain_all();
    };
    settle();
    let base_pages = pa.nr_allocated_pages();
    let base_areas = pa.cpu_areas().nr_areas();

    let secs = common::stress_secs();
    let until = Instant::now() + Duration::from_secs(secs.unwrap_or(0));
    let min_ops = if secs.is_some() { 0 } else { 20_000 };
    let counts = Counts {
        ops: AtomicU64::new(0),
        remote: AtomicU64::new(0),
    };
    // A ring: thread t frees what thread t-1 hands it.
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel::<Obj>()).unzip();
    let mut rxs: Vec<Option<mpsc::Receiver<Obj>>> = rxs.into_iter().map(Some).collect();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let to_next = txs[(t + 1) % THREADS].clone();
            let from_prev = rxs[t].take().unwrap();
            let counts = &counts;
            s.spawn(move || worker(t, until, min_ops, to_next, from_prev, counts));
        }
        drop(txs);
    });
    let areas = pa.cpu_areas().nr_areas() - base_areas;
    settle();
    let end_pages = pa.nr_allocated_pages();
    eprintln!(
        "{THREADS} threads: {} operations, {} objects freed on another thread; pages {base_pages} -> {end_pages}, {areas} new CPU areas",
        counts.ops.load(Ordering::Relaxed),
        counts.remote.load(Ordering::Relaxed)
    );
    assert!(counts.remote.load(Ordering::Relaxed) > 0);
    // Exactly the new CPU areas (2^CPU_AREA_ORDER pages each) are left.
    assert_eq!(
        end_pages,
        base_pages + areas * (1 << kmem_core::percpu::CPU_AREA_ORDER),
        "pages leaked or lost"
    );
    assert!(h.validate().is_empty());
}
