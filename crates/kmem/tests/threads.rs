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
