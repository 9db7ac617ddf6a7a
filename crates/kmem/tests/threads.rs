//! 10,000 threads created and joined, allocating and freeing across each other:
//! CPU areas are recycled (bounded by the threads alive at once) and every page comes
//! back after the last one exits.

use kmem::{heap, KmemAlloc};

#[global_allocator]
static A: KmemAlloc = KmemAlloc;

#[test]
fn ten_thousand_threads_stay_bounded_and_leak_nothing() {
    let h = heap();
    let pa = h.page_allocator();
    let warm: Vec<u8> = vec![1; 1000];
    drop(warm);
    h.shrink_all();
    h.drain_local();
    let base_pages = pa.nr_allocated_pages();
    let base_areas = pa.cpu_areas().nr_areas();
    let (tx, rx) = std::sync::mpsc::channel::<Box<[u64; 16]>>();
    let collector = std::thread::spawn(move || rx.into_iter().map(|b| b[0]).sum::<u64>());
    let mut peak_pages = 0;
    const WAVE: usize = 8;
    for wave in 0..10_000 / WAVE {
        let handles: Vec<_> = (0..WAVE)
            .map(|i| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let n = (wave * WAVE + i) as u64;
                    let v: Vec<u64> = (0..100).collect();
                    let s = format!("thread {n}");
                    tx.send(Box::new([n; 16])).unwrap();
                    v.len() as u64 + s.len() as u64
                })
            })
            .collect();
        for t in handles {
            assert!(t.join().unwrap() > 100);
        }
        peak_pages = peak_pages.max(pa.nr_allocated_pages());
    }
    drop(tx);
    let total = collector.join().unwrap();
    assert_eq!(total, (0..10_000u64).sum::<u64>());
    let areas = pa.cpu_areas().nr_areas() - base_areas;
    h.shrink_all();
    h.drain_local();
    let end_pages = pa.nr_allocated_pages();
    eprintln!(
        "10,000 threads: {areas} new CPU areas, peak {} KiB allocated above the start, {} KiB at the end",
        (peak_pages - base_pages) * 4,
        end_pages.saturating_sub(base_pages) * 4
    );
    // Areas are recycled: bounded by the threads alive at once, not by 10,000.
    assert!(
        areas <= 4 * WAVE,
        "{areas} CPU areas for waves of {WAVE} threads"
    );
    // Memory held at the peak stays small (no per-thread growth).
    assert!(
        peak_pages - base_pages < 4096,
        "peak {} pages",
        peak_pages - base_pages
    );
    // At the end only the new CPU areas themselves (64 KiB each, kept for reuse) and
    // the slabs other live threads hold are left.
    assert!(
        end_pages <= base_pages + areas * 8 + 256,
        "end {end_pages} pages, start {base_pages}, {areas} areas"
    );
}

/// Threads in every state of their fast word allocate and free: before their first
/// allocation attaches them, after they detach, inside a memory cgroup (the charged
/// paths), and in their exit destructors. The inline fast paths read the zero area
/// whenever the word names no area; none of them may write it.
#[test]
fn the_zero_area_stays_zero_whatever_state_a_thread_is_in() {
    use kmem_core::percpu::ZERO_CPU_AREA;
    let cg = kmem::MemCgroup::new("zero-area").unwrap();
    use std::cell::RefCell;
    thread_local! {
        static ON_EXIT: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let cg = &cg;
            s.spawn(move || {
                let churn = |n: u64| {
                    let v: Vec<Box<[u64; 4]>> = (0..n).map(|i| Box::new([i; 4])).collect();
                    let sizes: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 1 + i * 97]).collect();
                    assert_eq!(v.len() as u64, n);
                    drop(sizes);
                };
                churn(300);
                heap().detach_thread();
                churn(300);
                {
                    let _g = cg.enter();
                    churn(300);
                }
                churn(300);
                // Freed by the thread's exit, after kmem's own destructor may have run.
                ON_EXIT.with(|v| v.borrow_mut().extend((0..50).map(|i| format!("{}", i + t))));
            });
        }
    });
    assert!(
        ZERO_CPU_AREA.is_zero(),
        "an inline fast path wrote the zero area"
    );
}
