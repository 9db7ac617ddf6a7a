//! KFENCE's slot state word: a generation per allocation, and the check at exit's
//! claim, which a free waits for.

use super::*;

/// The pool (made once per process: the heap's, when another test started it),
/// and these tests one at a time: the first cycles the FIFO to get its slot back.
fn pool() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(init(1000));
    g
}

/// A pool object of `size` bytes (none while another thread installs the fault
/// handler: tried again).
fn sample(size: usize) -> usize {
    for _ in 0..1000 {
        if let Some(p) = alloc(size, 8, false, "kmalloc-64", &[], (1, 1, 0), Charge::NONE) {
            return p as usize;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("no free slot");
}

/// A free that read the state of a slot's earlier object cannot free a later one:
/// each allocation of the slot has a state word of its own.
#[test]
fn each_allocation_of_a_slot_has_a_state_word_of_its_own() {
    let _serial = pool();
    let p = sample(40);
    let slot = slot_of(p).unwrap();
    let m = &METAS[slot];
    let stale = m.state.load(Ordering::Acquire);
    assert_eq!(kind(stale), ALLOCATED);
    assert_eq!(
        free(p as *mut u8, &[], (1, 1, 0)),
        FreeOutcome::Freed(Charge::NONE)
    );
    // The slot again (the FIFO hands it out after the others): the rest held.
    let mut held = Vec::new();
    let again = loop {
        let Some(q) = alloc(40, 8, false, "kmalloc-64", &[], (1, 1, 0), Charge::NONE) else {
            break None;
        };
        if slot_of(q as usize) == Some(slot) {
            break Some(q as usize);
        }
        held.push(q as usize);
    };
    let q = again.expect("the slot comes back");
    let now = m.state.load(Ordering::Acquire);
    assert_eq!(kind(now), ALLOCATED);
    assert_ne!(now, stale, "a new generation");
    // The stale free's exchange fails; the object stays allocated.
    let (acq, rel) = (Ordering::Acquire, Ordering::AcqRel);
    let freed = stale - ALLOCATED + FREED;
    assert!(m.state.compare_exchange(stale, freed, rel, acq).is_err());
    assert_eq!(size_of(q as *const u8), Some(40));
    for x in held.into_iter().chain([q]) {
        assert_eq!(
            free(x as *mut u8, &[], (1, 1, 0)),
            FreeOutcome::Freed(Charge::NONE)
        );
    }
}

/// A free on another thread while the check at exit reads the object's canary
/// waits for it (it made the page inaccessible under the check: a fault reported
/// as a use after free), and the check leaves a live object's state as it was.
#[test]
fn a_free_waits_for_the_check_at_exit() {
    let _serial = pool();
    let p = sample(24);
    let m = &METAS[slot_of(p).unwrap()];
    let w = m.state.load(Ordering::Acquire);
    check_live();
    assert_eq!(m.state.load(Ordering::Acquire), w, "restored by the check");
    // As `check_live` claims it.
    m.state.store(w - ALLOCATED + CHECKING, Ordering::Release);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            let r = free(p as *mut u8, &[], (1, 2, 0));
            done.store(true, Ordering::Release);
            r
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        let waited = !done.load(Ordering::Acquire);
        m.state.store(w, Ordering::Release);
        assert_eq!(t.join().unwrap(), FreeOutcome::Freed(Charge::NONE));
        assert!(waited, "the free did not wait for the check");
    });
    assert_eq!(kind(m.state.load(Ordering::Acquire)), FREED);
}

#[test]
fn a_long_interval_is_never_every_allocation() {
    assert_eq!(interval_ns(ALL), ALL);
    assert_eq!(interval_ns(100), 100_000_000);
    for ms in [u64::MAX / 1_000_000 + 1, u64::MAX / 2, ALL - 1] {
        assert_eq!(interval_ns(ms), ALL - 1, "{ms} ms");
    }
}

/// The charge an allocation was given comes back with the free that releases the
/// object, once: a second free is refused and returns none.
#[test]
fn the_charge_comes_back_with_the_one_free() {
    let _serial = pool();
    let charge = Charge {
        objcg: 0x1000,
        cache: 0x2000,
    };
    let p = loop {
        if let Some(p) = alloc(48, 16, false, "kmalloc-cg-64", &[], (1, 1, 0), charge) {
            break p;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert_eq!(free(p, &[], (1, 1, 0)), FreeOutcome::Freed(charge));
    assert_eq!(free(p, &[], (1, 1, 0)), FreeOutcome::Invalid);
}

/// KFENCE's guards are kmem's 4 KiB pages: it runs only where the kernel's pages are
/// that size (16 and 64 KiB arm64 kernels would protect the neighbours of a guard).
#[test]
fn guards_need_kernel_pages_of_kmem_s_size() {
    assert!(guard_pages_fit(4096));
    assert!(!guard_pages_fit(16 << 10));
    assert!(!guard_pages_fit(64 << 10));
}
