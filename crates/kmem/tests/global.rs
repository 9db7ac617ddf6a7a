//! kmem as the global allocator of this test binary: std collections, threads, every
//! alignment, zero-sized types, zeroed memory, large and huge reallocs.

use kmem::KmemAlloc;
use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, Layout};
use std::collections::{BTreeMap, HashMap};

#[global_allocator]
static A: KmemAlloc = KmemAlloc;

#[test]
fn std_collections_work() {
    let mut m: HashMap<String, Vec<u32>> = HashMap::new();
    for i in 0..20_000u32 {
        m.entry(format!("key-{}", i % 5000)).or_default().push(i);
    }
    assert_eq!(m.len(), 5000);
    assert_eq!(m["key-7"], vec![7, 5007, 10007, 15007]);
    let b: BTreeMap<u32, String> = (0..10_000).map(|i| (i, i.to_string())).collect();
    assert_eq!(
        b.range(100..103)
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>(),
        ["100", "101", "102"]
    );
    let mut s = String::new();
    for i in 0..10_000 {
        s.push_str(&i.to_string());
    }
    assert_eq!(s.len(), 38890);
    // The heap served it all.
    assert!(kmem::heap().page_allocator().nr_allocated_pages() > 0);
}

#[test]
fn every_alignment_from_1_to_8_mib() {
    for shift in 0..=23 {
        let align = 1usize << shift;
        for size in [1, align / 2 + 1, align, align + 1, 3 * align] {
            let layout = Layout::from_size_align(size.max(1), align).unwrap();
            // SAFETY: non-zero size.
            let p = unsafe { alloc(layout) };
            assert!(!p.is_null(), "size {size} align {align}");
            assert_eq!(p as usize % align, 0, "size {size} align {align}");
            // SAFETY: the test's own live allocation (or null, or not the heap's).
            assert!(unsafe { kmem::heap().usable_size(p) } >= layout.size());
            // SAFETY: ours: touch both ends.
            unsafe {
                p.write(0xab);
                p.add(layout.size() - 1).write(0xcd);
                dealloc(p, layout);
            }
        }
    }
}

#[test]
fn zero_sized_types() {
    let v: Vec<()> = vec![(); 1000];
    assert_eq!(v.len(), 1000);
    let b = Box::new(());
    assert_eq!(*b, ());
    let empty: Vec<u64> = Vec::with_capacity(0);
    assert_eq!(empty.capacity(), 0);
    let mut v2: allocator_api2::vec::Vec<u64, KmemAlloc> =
        allocator_api2::vec::Vec::new_in(KmemAlloc);
    v2.push(1);
    v2.clear();
    v2.shrink_to_fit();
    let zst: allocator_api2::boxed::Box<[u8; 0], KmemAlloc> =
        allocator_api2::boxed::Box::new_in([], KmemAlloc);
    drop(zst);
}

#[test]
fn alloc_zeroed_fresh_and_reused() {
    for size in [8usize, 100, 4096, 20_000, 1 << 20, 6 << 20] {
        let layout = Layout::from_size_align(size, 8).unwrap();
        for round in 0..3 {
            // SAFETY: non-zero size.
            let p = unsafe { alloc_zeroed(layout) };
            assert!(!p.is_null());
            // SAFETY: ours, `size` bytes.
            let bytes = unsafe { std::slice::from_raw_parts_mut(p, size) };
            assert!(bytes.iter().all(|&b| b == 0), "size {size} round {round}");
            bytes.fill(0xee);
            // SAFETY: ours.
            unsafe { dealloc(p, layout) };
        }
    }
}

/// Layouts aligned beyond 8 bytes take the sheaf pops of the class their size rounds
/// up to: hundreds of objects of each (so that many positions in many slabs are
/// handed out), each aligned, usable for its whole size and distinct from the others.
#[test]
fn aligned_layouts_many_objects_each_aligned_and_distinct() {
    for shift in 4..=12 {
        let align = 1usize << shift;
        for size in [
            1,
            8,
            24,
            40,
            56,
            100,
            align / 2 + 1,
            align + 8,
            3 * align - 8,
        ] {
            let layout = Layout::from_size_align(size, align).unwrap();
            let ps: Vec<*mut u8> = (0..300)
                // SAFETY: non-zero size.
                .map(|_| unsafe { alloc(layout) })
                .collect();
            for (i, &p) in ps.iter().enumerate() {
                assert!(!p.is_null(), "size {size} align {align}");
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                // SAFETY: ours, `size` bytes.
                unsafe { p.write_bytes(i as u8, size) };
            }
            for (i, &p) in ps.iter().enumerate() {
                // SAFETY: ours, `size` bytes, written above.
                let bytes = unsafe { std::slice::from_raw_parts(p, size) };
                assert!(bytes.iter().all(|&b| b == i as u8), "overlap: size {size}");
                // SAFETY: ours, freed once.
                unsafe { dealloc(p, layout) };
            }
        }
    }
}

/// `alloc_zeroed` pops from the same sheaves as `alloc` and clears what it hands out:
/// objects dirtied and freed (more than the thread's two sheaves hold, so that they
/// come back through swaps and the barn) are all zero when allocated zeroed again.
#[test]
fn alloc_zeroed_reuses_dirty_objects_cleared() {
    for size in [8usize, 17, 24, 100, 250, 1000, 3000, 20_000] {
        let layout = Layout::from_size_align(size, 8).unwrap();
        let n = if size <= 1000 { 600 } else { 60 };
        for round in 0..3 {
            let ps: Vec<*mut u8> = (0..n)
                // SAFETY: non-zero size.
                .map(|_| unsafe { alloc(layout) })
                .collect();
            for &p in &ps {
                assert!(!p.is_null());
                // SAFETY: ours, `size` bytes.
                unsafe { p.write_bytes(0xa5, size) };
            }
            for &p in &ps {
                // SAFETY: ours, freed once.
                unsafe { dealloc(p, layout) };
            }
            let zs: Vec<*mut u8> = (0..n)
                // SAFETY: non-zero size.
                .map(|_| unsafe { alloc_zeroed(layout) })
                .collect();
            for &p in &zs {
                assert!(!p.is_null());
                // SAFETY: ours, `size` bytes.
                let bytes = unsafe { std::slice::from_raw_parts(p, size) };
                assert!(bytes.iter().all(|&b| b == 0), "size {size} round {round}");
            }
            for &p in &zs {
                // SAFETY: ours, freed once.
                unsafe { dealloc(p, layout) };
            }
        }
    }
}

#[test]
fn realloc_keeps_contents_and_stays_in_place_when_it_can() {
    let layout = Layout::from_size_align(50, 8).unwrap();
    // SAFETY: non-zero size; every realloc below gets our own pointer.
    unsafe {
        let p = alloc(layout);
        p.write_bytes(7, 50);
        // Within kmalloc-56: same place.
        let q = realloc(p, layout, 56);
        assert_eq!(q, p);
        // Shrinking that keeps half of the class: same place.
        let q = realloc(q, Layout::from_size_align(56, 8).unwrap(), 40);
        assert_eq!(q, p);
        // Shrinking below half: moves to a smaller class (the memory goes back).
        let q = realloc(q, Layout::from_size_align(40, 8).unwrap(), 10);
        assert_ne!(q, p);
        // (A KFENCE sample, outside the span, has exactly the size asked for.)
        let sampled = !kmem::heap().page_allocator().in_span(q);
        assert_eq!(kmem::heap().usable_size(q), if sampled { 10 } else { 16 });
        assert!(std::slice::from_raw_parts(q, 10).iter().all(|&b| b == 7));
        // Growing through the classes into pages and a huge mapping, and back.
        let mut cur = q;
        let mut cur_size = 10;
        for &n in &[
            100usize,
            5000,
            100_000,
            3 << 20,
            16 << 20,
            40 << 20,
            1 << 20,
            64,
            8,
        ] {
            let nq = realloc(cur, Layout::from_size_align(cur_size, 8).unwrap(), n);
            assert!(!nq.is_null());
            let keep = cur_size.min(n).min(10);
            assert!(
                std::slice::from_raw_parts(nq, keep).iter().all(|&b| b == 7),
                "to {n}"
            );
            if n > cur_size {
                nq.add(cur_size).write_bytes(7, n - cur_size);
            }
            cur = nq;
            cur_size = n;
        }
        // A page block (above the largest kmalloc cache, 1 MiB) shrinks where it is.
        let big = Layout::from_size_align(4 << 20, 8).unwrap();
        let b = alloc(big);
        let b2 = realloc(b, big, 1_500_000);
        assert_eq!(b2, b, "page runs shrink in place");
        assert_eq!(kmem::heap().usable_size(b2), 2 << 20);
        dealloc(b2, Layout::from_size_align(1_500_000, 8).unwrap());
        dealloc(cur, Layout::from_size_align(cur_size, 8).unwrap());
    }
}

#[test]
fn vec_grows_to_1_gib_and_back() {
    let mut v: Vec<u8> = Vec::new();
    let target = 1usize << 30;
    while v.len() < target {
        let n = (v.len() + 1).min(target - v.len());
        let start = v.len();
        v.resize(start + n, 0);
        // Stamp the bytes at multiples of 64 KiB among those added.
        let mut i = start.next_multiple_of(1 << 16);
        while i < v.len() {
            v[i] = (i >> 16) as u8;
            i += 1 << 16;
        }
    }
    assert_eq!(v.len(), target);
    for i in (0..target).step_by(1 << 16) {
        assert_eq!(v[i], (i >> 16) as u8);
    }
    v.truncate(1 << 16);
    v.shrink_to_fit();
    assert_eq!(v[0], 0);
    assert!(v.capacity() >= 1 << 16);
    drop(v);
    let (count, _) = kmem::heap().huge_totals();
    assert!(
        count < 8,
        "huge mappings are unmapped when freed ({count} live)"
    );
}

#[test]
fn threads_pass_boxes_between_them() {
    let (tx, rx) = std::sync::mpsc::channel::<Box<[u64; 32]>>();
    let producers: Vec<_> = (0..4)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for i in 0..10_000u64 {
                    tx.send(Box::new([t * 1_000_000 + i; 32])).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let consumer = std::thread::spawn(move || {
        let mut sum = 0u64;
        for b in rx {
            assert!(b.iter().all(|&x| x == b[0]));
            sum = sum.wrapping_add(b[0]);
        }
        sum
    });
    for p in producers {
        p.join().unwrap();
    }
    let expect: u64 = (0..4u64)
        .map(|t| (0..10_000).map(|i| t * 1_000_000 + i).sum::<u64>())
        .sum();
    assert_eq!(consumer.join().unwrap(), expect);
}

#[test]
fn destructors_that_run_after_kmems_thread_exit_flush_may_allocate() {
    // A pthread key made now runs its destructor after kmem's own (keys run in order
    // of creation), so it allocates and frees after the thread's CPU area is gone.
    extern "C" fn late(v: *mut libc::c_void) {
        if !v.is_null() {
            let b: Vec<u64> = (0..1000).collect();
            let s = format!("{}", b.iter().sum::<u64>());
            assert_eq!(s, "499500");
            // SAFETY: the value is the Box leaked by the thread below.
            drop(unsafe { Box::from_raw(v as *mut [u8; 100]) });
        }
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: creating a key with a destructor of the right signature.
    assert_eq!(unsafe { libc::pthread_key_create(&mut key, Some(late)) }, 0);
    thread_local! {
        static WITH_DROP: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    for _ in 0..20 {
        std::thread::spawn(move || {
            let _ = kmem::heap().kmalloc(64, kmem::Gfp::KERNEL).map(|p| {
                // SAFETY: ours.
                unsafe { kmem::heap().kfree(p.as_ptr()) }
            });
            WITH_DROP.with(|v| v.borrow_mut().push("dropped at thread exit".to_string()));
            let b = Box::into_raw(Box::new([7u8; 100]));
            // SAFETY: a key we created; the destructor frees the box.
            unsafe { libc::pthread_setspecific(key, b as *mut libc::c_void) };
        })
        .join()
        .unwrap();
    }
}

#[test]
fn hashbrown_on_kmem() {
    let mut m: hashbrown::HashMap<u32, u32, hashbrown::DefaultHashBuilder, KmemAlloc> =
        hashbrown::HashMap::with_hasher_in(Default::default(), KmemAlloc);
    for i in 0..100_000 {
        m.insert(i, i * 2);
    }
    assert_eq!(m.get(&777), Some(&1554));
    let b = allocator_api2::boxed::Box::new_in([1u64; 64], KmemAlloc);
    assert_eq!(b.iter().sum::<u64>(), 64);
}

#[test]
fn fork_from_a_multithreaded_parent_allocates_in_the_child() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static STOP: AtomicBool = AtomicBool::new(false);
    // Threads that allocate and free all the time, so forks land in the middle.
    let workers: Vec<_> = (0..3)
        .map(|t| {
            std::thread::spawn(move || {
                let mut keep: Vec<Vec<u64>> = Vec::new();
                let mut i = 0u64;
                while !STOP.load(Ordering::Relaxed) {
                    keep.push(vec![t; (i % 300) as usize]);
                    if keep.len() > 200 {
                        keep.drain(..100);
                    }
                    let big = vec![0u8; ((i % 7) as usize + 1) << 14];
                    std::hint::black_box(&big);
                    i += 1;
                }
            })
        })
        .collect();
    let rounds = if std::env::var_os("KMEM_STRESS_SECS").is_some() {
        1000
    } else {
        100
    };
    for _ in 0..rounds {
        // SAFETY: fork; the child only allocates, checks and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let v: Vec<u64> = (0..10_000).collect();
            let b = Box::new([5u8; 3000]);
            let s = format!("{}", v.iter().sum::<u64>());
            let big = vec![1u8; 3 << 20];
            let ok = s == "49995000" && b[2999] == 5 && big[(3 << 20) - 1] == 1;
            // SAFETY: _exit skips atexit handlers and stdio of the copied process.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        // Watchdog: the child must finish within 10 seconds.
        let start = std::time::Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            if start.elapsed() > std::time::Duration::from_secs(10) {
                // SAFETY: killing our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("child {pid} hung: a lock was inherited held");
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child failed: {status}"
        );
    }
    STOP.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
}

#[test]
fn growing_buffers_move_only_at_powers_of_two() {
    // A buffer grown a few bytes at a time (a string being appended to) from 100
    // bytes to 300 KiB: the classes between the powers of two do not make it move
    // more often than the kernel's power-of-two classes would (once per power of two
    // crossed), and every byte written survives the moves.
    let (mut size, end) = (100usize, 300 << 10);
    // SAFETY: non-zero sizes; each realloc gets the current pointer and layout.
    unsafe {
        let mut p = alloc(Layout::from_size_align(size, 8).unwrap());
        p.write_bytes(0x3c, size);
        let mut moves = 0;
        while size < end {
            let next = size + 1 + size / 64;
            let q = realloc(p, Layout::from_size_align(size, 8).unwrap(), next);
            assert!(!q.is_null());
            // A KFENCE sample (outside the span, one every 100 ms: a debug build's
            // run of this loop may meet one) has the size asked for exactly, so
            // reaching one and leaving it are moves of their own: not counted.
            let span = kmem::heap().page_allocator();
            if q != p && span.in_span(p) && span.in_span(q) {
                moves += 1;
            }
            if q != p {
                assert!(std::slice::from_raw_parts(q, size)
                    .iter()
                    .all(|&b| b == 0x3c));
            }
            q.add(size).write_bytes(0x3c, next - size);
            (p, size) = (q, next);
        }
        let powers = (end.ilog2() - 100usize.ilog2()) as usize;
        assert!(
            moves <= powers + 1,
            "{moves} moves for {powers} powers of two"
        );
        dealloc(p, Layout::from_size_align(size, 8).unwrap());
    }
}
