//! KFENCE through the Rust interfaces: at a short sample interval, allocations that
//! reach the slow path are sometimes placed in the pool (outside the heap's span);
//! such an object has its requested size as `ksize`, keeps its contents through
//! `krealloc`, and frees cleanly. The test runs itself again as a child with
//! `KMEM_KFENCE` set (read once, when the heap starts).

use kmem::{heap, Gfp};
use std::process::Command;
use std::time::{Duration, Instant};

const CHILD: &str = "KMEM_TEST_KFENCE_CHILD";

fn child() {
    let h = heap();
    let start = Instant::now();
    let mut sampled = None;
    while sampled.is_none() && start.elapsed() < Duration::from_secs(5) {
        let ps: Vec<_> = (0..200)
            .map(|i| h.kmalloc(24 + i % 100, Gfp::KERNEL).expect("memory"))
            .collect();
        for (i, p) in ps.into_iter().enumerate() {
            if sampled.is_none() && !h.page_allocator().in_span(p.as_ptr()) {
                sampled = Some((p, 24 + i % 100));
                continue;
            }
            // SAFETY: allocated above, freed once.
            unsafe { h.kfree(p.as_ptr()) };
        }
    }
    let (p, size) = sampled.expect("a sampled allocation within 5 s");
    // SAFETY: the test's own live allocation (or null, or not the heap's).
    assert_eq!(unsafe { h.ksize(p.as_ptr()) }, size, "ksize is the request");
    // SAFETY: inside the object.
    unsafe { p.as_ptr().write_bytes(0x5a, size) };
    // SAFETY: ours; moves out of the pool slot.
    let q = unsafe { h.krealloc(p.as_ptr(), size + 1000, Gfp::KERNEL) }.expect("memory");
    assert_ne!(q, p);
    // SAFETY: the first `size` bytes were copied.
    let copied = unsafe { std::slice::from_raw_parts(q.as_ptr(), size) };
    assert!(copied.iter().all(|&b| b == 0x5a));
    // SAFETY: ours, freed once.
    assert!(unsafe { h.kfree(q.as_ptr()) });
    println!("sampled ok");
}

/// Runs test `name` again as a child with `KMEM_KFENCE=kfence` (read once, when the
/// heap starts) and checks that it succeeded and printed `want`.
fn run_child(name: &str, kfence: &str, want: &str) {
    run_child_with(name, &[("KMEM_KFENCE", kfence)], want);
}

/// [`run_child`] with the environment `env`.
fn run_child_with(name: &str, env: &[(&str, &str)], want: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env(CHILD, "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(want),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sampled_objects_behave_as_kmalloc_objects() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    run_child(
        "sampled_objects_behave_as_kmalloc_objects",
        "5",
        "sampled ok",
    );
}

/// Every allocation sampled (`KMEM_KFENCE=all`): objects of every small size and
/// alignment still have kmalloc's alignment (at least 8, natural for powers of two)
/// wherever they sit on their page.
#[test]
fn sampled_objects_keep_kmalloc_alignment() {
    if std::env::var_os(CHILD).is_some() {
        let h = heap();
        for size in 1..=300usize {
            let p = h.kmalloc(size, Gfp::KERNEL).expect("memory").as_ptr() as usize;
            let want = if size.is_power_of_two() {
                size.max(8)
            } else {
                8
            };
            assert_eq!(p % want, 0, "kmalloc({size}) at {p:#x}");
            // SAFETY: allocated just above.
            unsafe { h.kfree(p as *mut u8) };
        }
        println!("aligned ok");
        return;
    }
    run_child(
        "sampled_objects_keep_kmalloc_alignment",
        "all",
        "aligned ok",
    );
}

/// A sample that waited long for an allocation to take it (sizes above a page never
/// do) restarts the interval when it is taken: the allocations right after it are not
/// sampled again. (Counted from the arming instead, the interval was long over, and
/// the next housekeeping tick armed a second sample at once — inside the first
/// sample's own allocations when its stack trace loaded the unwinder, which stopped
/// C programs with ld.so's "Inconsistency detected" assertion.)
#[test]
fn a_late_sample_restarts_the_interval() {
    if std::env::var_os(CHILD).is_some() {
        let h = heap();
        // 350 ms of blocks above a page: the interval (100 ms) passes, the slow
        // paths' housekeeping arms a sample, and nothing takes it.
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(350) {
            let ps: Vec<_> = (0..64)
                .map(|_| h.kmalloc(16384, Gfp::KERNEL).expect("memory"))
                .collect();
            for p in ps {
                assert!(h.page_allocator().in_span(p.as_ptr()), "a block sampled");
                // SAFETY: allocated above, freed once.
                unsafe { h.kfree(p.as_ptr()) };
            }
        }
        // Then small objects, enough slow paths for several housekeeping ticks, in
        // far less than an interval: the armed sample is taken once, and only once.
        let start = Instant::now();
        let ps: Vec<_> = (0..4000)
            .map(|i| h.kmalloc(24 + i % 100, Gfp::KERNEL).expect("memory"))
            .collect();
        let elapsed = start.elapsed();
        let sampled = ps
            .iter()
            .filter(|p| !h.page_allocator().in_span(p.as_ptr()))
            .count();
        for p in ps {
            // SAFETY: allocated above, freed once.
            unsafe { h.kfree(p.as_ptr()) };
        }
        assert!(elapsed < Duration::from_millis(100), "{elapsed:?}");
        println!("sampled {sampled}");
        return;
    }
    run_child("a_late_sample_restarts_the_interval", "100", "sampled 1\n");
}

/// `KMEM_INIT` holds for sampled objects too: with every allocation sampled and
/// `KMEM_INIT=alloc` (or `free`), an object is zero when handed out, though its slot's
/// page kept what the slot's last object held while it was inaccessible.
#[test]
fn sampled_objects_are_zeroed_under_kmem_init() {
    if std::env::var_os(CHILD).is_some() {
        let h = heap();
        // More rounds than the pool has slots (255): each slot comes back.
        for round in 0..3 * 255 {
            let p = h.kmalloc(64, Gfp::KERNEL).expect("memory").as_ptr();
            // SAFETY: a fresh object of 64 bytes.
            let bytes = unsafe { std::slice::from_raw_parts_mut(p, 64) };
            assert!(bytes.iter().all(|&b| b == 0), "round {round}: {bytes:?}");
            bytes.fill(0xff);
            // SAFETY: ours, freed once.
            assert!(unsafe { h.kfree(p) });
        }
        println!("zeroed ok");
        return;
    }
    for init in ["alloc", "free"] {
        let env = [("KMEM_KFENCE", "all"), ("KMEM_INIT", init)];
        run_child_with(
            "sampled_objects_are_zeroed_under_kmem_init",
            &env,
            "zeroed ok",
        );
    }
}

/// The objects `g` has charged as `cache`'s (0 when the group lists none).
fn charged_as(g: &kmem::MemCgroup<'_>, cache: &str) -> i64 {
    let st = g.stat();
    st.caches
        .iter()
        .find(|(name, _)| name == cache)
        .map_or(0, |&(_, n)| n)
}

/// Charged allocations are sampled too (the kernel samples them): under an active
/// memory cgroup, with every allocation sampled, a kmalloc lands in the pool, is
/// charged to the group as an object of `kmalloc-cg-128` and uncharged by its free,
/// also once its group is gone (the charge then lies with the parent). A group at its
/// limit gets neither a sample nor an object.
#[test]
fn charged_allocations_are_sampled_and_charged() {
    if std::env::var_os(CHILD).is_some() {
        let h = heap();
        let parent = kmem::MemCgroup::new("kfence-parent").expect("memory");
        let child = parent.child("kfence-child").expect("memory");
        let p = {
            let _active = child.enter();
            h.kmalloc(100, Gfp::KERNEL).expect("memory")
        };
        assert!(!h.page_allocator().in_span(p.as_ptr()), "not sampled");
        // SAFETY: the test's own live allocation (or null, or not the heap's).
        assert_eq!(unsafe { h.ksize(p.as_ptr()) }, 100);
        assert_eq!(charged_as(&child, "kmalloc-cg-128"), 1);
        assert_eq!(charged_as(&parent, "kmalloc-cg-128"), 1);
        assert!(child.usage() > 0);
        let q = {
            let _active = child.enter();
            h.kmalloc(200, Gfp::KERNEL).expect("memory")
        };
        assert!(!h.page_allocator().in_span(q.as_ptr()), "not sampled");
        assert_eq!(charged_as(&child, "kmalloc-cg-256"), 1);
        // SAFETY: ours, freed once.
        assert!(unsafe { h.kfree(q.as_ptr()) });
        assert_eq!(charged_as(&child, "kmalloc-cg-256"), 0);
        // The child goes while its sampled object lives: the object's charge is
        // reparented, and its free uncharges the parent.
        drop(child);
        assert_eq!(charged_as(&parent, "kmalloc-cg-128"), 1);
        // SAFETY: ours, freed once.
        assert!(unsafe { h.kfree(p.as_ptr()) });
        assert_eq!(charged_as(&parent, "kmalloc-cg-128"), 0);
        // A second free of the same object is refused (reported) and uncharges
        // nothing more.
        // SAFETY: a double free of a pool object is reported and refused.
        assert!(!unsafe { h.kfree(p.as_ptr()) });
        assert_eq!(charged_as(&parent, "kmalloc-cg-128"), 0);
        let full = kmem::MemCgroup::new("kfence-full").expect("memory");
        full.set_max(0);
        {
            let _active = full.enter();
            assert!(h.kmalloc(100, Gfp::KERNEL).is_none(), "over memory.max");
        }
        assert_eq!(charged_as(&full, "kmalloc-cg-128"), 0);
        // One failed allocation, one `oom` (the sample did not charge first).
        let st = full.stat();
        assert!(st.events_max > 0);
        assert_eq!(st.events_oom, 1);
        // Every allocation sampled, charged ones too: once the pool's slots ran out
        // and charged objects went to the thread's kept sheaves, a freed slot is
        // taken again before those.
        let g = kmem::MemCgroup::new("kfence-all").expect("memory");
        {
            let _active = g.enter();
            let first: Vec<_> = (0..300)
                .map(|_| h.kmalloc(40, Gfp::KERNEL).expect("memory"))
                .collect();
            for p in first {
                // SAFETY: ours, freed once.
                unsafe { h.kfree(p.as_ptr()) };
            }
            let again: Vec<_> = (0..100)
                .map(|_| h.kmalloc(40, Gfp::KERNEL).expect("memory"))
                .collect();
            let kept = again
                .iter()
                .filter(|p| h.page_allocator().in_span(p.as_ptr()))
                .count();
            assert_eq!(kept, 0, "allocations not sampled");
            for p in again {
                // SAFETY: ours, freed once.
                unsafe { h.kfree(p.as_ptr()) };
            }
        }
        println!("charged ok");
        return;
    }
    run_child(
        "charged_allocations_are_sampled_and_charged",
        "all",
        "charged ok",
    );
}

/// At a sample interval, a thread with an active memory cgroup takes samples as
/// other threads do (its kept charged sheaves step aside while one is armed), and each
/// is charged to its group until freed.
#[test]
fn a_charged_thread_takes_samples_at_the_interval() {
    if std::env::var_os(CHILD).is_some() {
        let h = heap();
        let g = kmem::MemCgroup::new("kfence-interval").expect("memory");
        let _active = g.enter();
        let start = Instant::now();
        let mut sampled = 0;
        while sampled < 2 && start.elapsed() < Duration::from_secs(5) {
            let ps: Vec<_> = (0..200)
                .map(|_| h.kmalloc(40, Gfp::KERNEL).expect("memory"))
                .collect();
            let outside = ps
                .iter()
                .filter(|p| !h.page_allocator().in_span(p.as_ptr()))
                .count();
            if outside > 0 {
                assert_eq!(charged_as(&g, "kmalloc-cg-64"), 200, "every object charged");
                sampled += outside;
            }
            for p in ps {
                // SAFETY: allocated above, freed once.
                unsafe { h.kfree(p.as_ptr()) };
            }
        }
        assert!(sampled >= 2, "{sampled} samples in 5 s");
        assert_eq!(charged_as(&g, "kmalloc-cg-64"), 0);
        println!("interval ok");
        return;
    }
    run_child(
        "a_charged_thread_takes_samples_at_the_interval",
        "5",
        "interval ok",
    );
}
