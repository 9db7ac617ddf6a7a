//! The slub_debug battery: each error committed on purpose, then the report text and
//! the outcome (the checker survives, nothing is handed out twice, the program goes
//! on) are checked.

mod common;

use common::{config, kmem_with, TestPlatform};
use kmem_core::slab::debug::Problem;
use kmem_core::{CpuRef, Gfp, Kmem, SlabFlags};
use std::collections::HashSet;

type K = Kmem<TestPlatform>;

fn all_debug(_name: &str) -> SlabFlags {
    SlabFlags::DEBUG - SlabFlags::TRACE
}

/// A heap whose kmalloc caches run with F, Z, P and U, and a CPU area for this thread.
fn setup() -> (&'static K, CpuRef<'static>) {
    let k = kmem_with(2, config(1, 0), Some(all_debug));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: this test thread owns the area for the rest of the test.
    (k, unsafe { CpuRef::new(area) })
}

fn log(k: &K) -> String {
    k.pages.platform().take_log()
}

/// Allocates `n` objects of `size` and checks none is one of `banned`.
fn never_handed_out(k: &K, cpu: CpuRef<'_>, size: usize, banned: &[*mut u8]) {
    let mut seen = HashSet::new();
    let mut held = Vec::new();
    for _ in 0..300 {
        let p = k.kmalloc(Some(cpu), size, Gfp::KERNEL).unwrap().as_ptr();
        assert!(
            !banned.contains(&p),
            "a quarantined object was handed out again"
        );
        assert!(seen.insert(p as usize), "an object was handed out twice");
        held.push(p);
    }
    for p in held {
        // SAFETY: ours.
        assert!(unsafe { k.kfree(Some(cpu), p) });
    }
}

#[test]
fn write_past_the_end_is_caught_at_free() {
    let (k, cpu) = setup();
    let p = k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the bug under test: one byte past the object.
    unsafe { p.add(64).write(b'X') };
    // SAFETY: our object (damaged).
    let freed = unsafe { k.kfree(Some(cpu), p) };
    assert!(!freed, "a damaged object is not freed");
    let l = log(k);
    assert!(
        l.contains("BUG kmalloc-64 (Not tainted): Redzone overwritten"),
        "{l}"
    );
    assert!(l.contains("First byte 0x58 instead of 0xcc"), "{l}");
    assert!(l.contains("INFO: Allocated in 0xc0de age="), "{l}");
    assert!(l.contains(" pid=42 tid=7"), "{l}");
    assert!(l.contains("INFO: Slab 0x"), "{l}");
    assert!(l.contains("INFO: Object 0x"), "{l}");
    assert!(l.contains("Redzone 0x"), "{l}");
    assert!(l.contains("Object 0x"), "{l}");
    assert!(l.contains("cc cc cc"), "{l}");
    assert!(
        l.contains("FIX kmalloc-64: Object not freed (quarantined)"),
        "{l}"
    );
    let fix = format!(
        "FIX kmalloc-64: Restoring Redzone 0x{:016x}-",
        p as usize + 64
    );
    assert!(l.contains(&fix), "{l}");
    // SAFETY: the red zone byte is ours to read back (inside the slab).
    let rz = unsafe { p.add(64).read() };
    assert_eq!(rz, 0xcc, "the red zone is restored");
    never_handed_out(k, cpu, 64, &[p]);
}

#[test]
fn write_before_the_start_is_caught_at_free() {
    let (k, cpu) = setup();
    let p = k.kmalloc(Some(cpu), 120, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the bug under test: one byte before the object.
    unsafe { p.sub(1).write(0) };
    // SAFETY: our object (damaged).
    assert!(!unsafe { k.kfree(Some(cpu), p) });
    let l = log(k);
    assert!(
        l.contains("BUG kmalloc-128 (Not tainted): Redzone overwritten"),
        "{l}"
    );
    assert!(l.contains("First byte 0x0 instead of 0xcc"), "{l}");
    never_handed_out(k, cpu, 100, &[p]);
}

#[test]
fn write_after_free_is_caught_when_the_object_comes_back() {
    let (k, cpu) = setup();
    let p = k.kmalloc(Some(cpu), 32, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: ours.
    assert!(unsafe { k.kfree(Some(cpu), p) });
    // SAFETY: the bug under test: a write into a freed object.
    unsafe { p.add(5).write(0x55) };
    // The next allocation would reuse it: the check catches the write, quarantines
    // the object and hands out another.
    let q = k.kmalloc(Some(cpu), 32, Gfp::KERNEL).unwrap().as_ptr();
    assert_ne!(q, p);
    let l = log(k);
    assert!(
        l.contains("BUG kmalloc-32 (Not tainted): Poison overwritten"),
        "{l}"
    );
    assert!(l.contains("First byte 0x55 instead of 0x6b"), "{l}");
    assert!(l.contains("INFO: Freed in 0xc0de"), "{l}");
    assert!(l.contains("6b 6b 6b 6b 6b 55 6b"), "{l}");
    assert!(
        l.contains("FIX kmalloc-32: Marking object used (quarantined)"),
        "{l}"
    );
    // SAFETY: ours.
    unsafe { k.kfree(Some(cpu), q) };
    never_handed_out(k, cpu, 32, &[p]);
    // The quarantined object now looks allocated (red zones included): a later walk
    // of the cache reports nothing more about it.
    let _ = log(k);
    let s = k.kmalloc_cache(32, Gfp::KERNEL).unwrap();
    let mut found = 0;
    k.slub().validate(s, &mut |_| found += 1);
    assert_eq!(found, 0, "{}", log(k));
}

#[test]
fn double_frees_at_and_away_from_the_head() {
    let (k, cpu) = setup();
    let a = k.kmalloc(Some(cpu), 56, Gfp::KERNEL).unwrap().as_ptr();
    let b = k.kmalloc(Some(cpu), 56, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the second free of each is the bug under test.
    unsafe {
        assert!(k.kfree(Some(cpu), a));
        assert!(!k.kfree(Some(cpu), a), "head double free");
        assert!(k.kfree(Some(cpu), b));
        assert!(!k.kfree(Some(cpu), a), "non-head double free");
    }
    let l = log(k);
    assert_eq!(
        l.matches("BUG kmalloc-56 (Not tainted): Object already free")
            .count(),
        2,
        "{l}"
    );
    // a and b each come back once, never twice.
    let mut got = HashSet::new();
    for _ in 0..200 {
        let p = k.kmalloc(Some(cpu), 56, Gfp::KERNEL).unwrap().as_ptr() as usize;
        assert!(got.insert(p), "handed out twice");
    }
}

#[test]
fn foreign_and_interior_pointers_are_refused() {
    let (k, cpu) = setup();
    let p = k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap().as_ptr();
    let mut local = [0u8; 8];
    // SAFETY: bugs under test; neither pointer may be freed.
    unsafe {
        assert!(!k.kfree(Some(cpu), p.add(16)));
        assert!(!k.kfree(Some(cpu), local.as_mut_ptr()));
    }
    let l = log(k);
    assert!(
        l.contains("BUG kmalloc-64 (Not tainted): Invalid object pointer"),
        "{l}"
    );
    assert!(
        l.contains("BUG kmalloc (Not tainted): not allocated by kmem"),
        "{l}"
    );
    // SAFETY: ours, intact.
    assert!(unsafe { k.kfree(Some(cpu), p) });
}

/// A pointer into a page block (a compound block whose tail descriptors are not
/// written: `PageFlags::COMPOUND`) finds the block's head from any of its pages, so it
/// is named an invalid pointer into a kmalloc block, not memory kmem never handed out;
/// nothing is freed.
#[test]
fn interior_pointers_into_page_blocks_are_named_and_refused() {
    let (k, cpu) = setup();
    let big = 2 << 20;
    let p = k.kmalloc(Some(cpu), big, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the test's own live allocation (or null, or not the heap's).
    assert_eq!(unsafe { k.ksize(p) }, big);
    for off in [4096 + 8, 300 * 4096, big - 1] {
        // SAFETY: bugs under test; the pointer may not be freed.
        assert!(!unsafe { k.kfree(Some(cpu), p.wrapping_add(off)) });
        // SAFETY: the test's own live allocation (or null, or not the heap's).
        assert_eq!(unsafe { k.ksize(p.wrapping_add(off)) }, 0);
        let l = log(k);
        assert!(
            l.contains("BUG kmalloc (Not tainted): Invalid object pointer"),
            "offset {off}: {l}"
        );
    }
    // SAFETY: ours, intact.
    assert!(unsafe { k.kfree(Some(cpu), p) });
    // The block is free now: a pointer into it is no longer a kmalloc block's.
    // SAFETY: as above.
    assert!(!unsafe { k.kfree(Some(cpu), p.wrapping_add(4096)) });
    assert!(log(k).contains("not allocated by kmem"));
    // Its start, freed again (it waits on the CPU's pageblock list), is named so and
    // refused; the block still serves the next request once.
    // SAFETY: as above.
    assert!(!unsafe { k.kfree(Some(cpu), p) });
    let l = log(k);
    assert!(
        l.contains("BUG kmalloc (Not tainted): freeing a free page"),
        "{l}"
    );
    let again = k.kmalloc(Some(cpu), big, Gfp::KERNEL).unwrap().as_ptr();
    let other = k.kmalloc(Some(cpu), big, Gfp::KERNEL).unwrap().as_ptr();
    assert!(again == p && other != p);
    // Freed to the zone (no CPU), and freed again: the same.
    // SAFETY: ours, each freed once, then `again` a second time (the bug).
    unsafe {
        assert!(k.kfree(None, again));
        assert!(k.kfree(Some(cpu), other));
        assert!(!k.kfree(None, again));
    }
    assert!(log(k).contains("freeing a free page"));
}

#[test]
fn overwritten_free_pointer_marks_the_slab_used() {
    let (k, cpu) = setup();
    let cfg = *k.kmalloc_cache(64, Gfp::KERNEL).unwrap().config(); // kmalloc-64
    let a = k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap().as_ptr();
    let b = k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: ours.
    unsafe { assert!(k.kfree(Some(cpu), a)) };
    // SAFETY: the bug under test: a wild write over a free object's free pointer.
    unsafe { (a.add(cfg.offset) as *mut usize).write(0xdead_beef) };
    let mut handed = HashSet::new();
    for _ in 0..100 {
        let p = k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap().as_ptr() as usize;
        assert!(
            p != 0xdead_beef && handed.insert(p),
            "a wild or repeated object"
        );
    }
    let l = log(k);
    assert!(
        l.contains("BUG kmalloc-64 (Not tainted): Freepointer corrupt"),
        "{l}"
    );
    assert!(
        l.contains("FIX kmalloc-64: Marking all objects used"),
        "{l}"
    );
    // SAFETY: ours.
    unsafe { k.kfree(Some(cpu), b) };
}

#[test]
fn validate_finds_each_kind_of_damage() {
    let (k, cpu) = setup();
    let s = k.kmalloc_cache(128, Gfp::KERNEL).unwrap();
    let cfg = *s.config();
    let objs: Vec<*mut u8> = (0..6)
        .map(|_| k.kmalloc(Some(cpu), 128, Gfp::KERNEL).unwrap().as_ptr())
        .collect();
    let mut problems: Vec<Problem> = Vec::new();
    assert_eq!(
        k.slub().validate(s, &mut |p| problems.push(p)),
        0,
        "a healthy cache"
    );
    // SAFETY: each write is damage under test.
    unsafe {
        objs[0].add(128).write(1); // right red zone of an allocated object
        assert!(k.kfree(Some(cpu), objs[1]));
        objs[1].add(10).write(2); // poison of a free object
        let pad = objs[2].add(cfg.track_off + 2 * kmem_core::slab::debug::TRACK_SIZE);
        let slot_end = objs[2].sub(cfg.red_left).add(cfg.size);
        if pad < slot_end {
            pad.write(3); // padding
        }
    }
    let n = k.slub().validate(s, &mut |p| problems.push(p));
    let kinds: Vec<&str> = problems.iter().map(|p| p.what).collect();
    assert!(kinds.contains(&"Redzone overwritten"), "{kinds:?}");
    assert!(kinds.contains(&"Poison overwritten"), "{kinds:?}");
    assert_eq!(n, problems.len());
    assert!(problems.iter().any(|p| p.addr == objs[0] as usize));
    assert!(problems.iter().any(|p| p.addr == objs[1] as usize));
    let l = log(k);
    assert!(
        l.contains("BUG kmalloc-128 (Not tainted): Redzone overwritten"),
        "{l}"
    );
    // A corrupt freelist is found too.
    // SAFETY: damage under test on a free object's free pointer.
    unsafe { (objs[1].add(cfg.offset) as *mut usize).write(0x1234) };
    let mut more = Vec::new();
    k.slub().validate(s, &mut |p| more.push(p.what));
    assert!(more.contains(&"Freepointer corrupt"), "{more:?}");
}

#[test]
fn trace_and_per_cache_selection() {
    fn only_traced(name: &str) -> SlabFlags {
        if name == "traced-40" {
            SlabFlags::TRACE | SlabFlags::CONSISTENCY_CHECKS
        } else {
            SlabFlags::empty()
        }
    }
    let k = kmem_with(2, config(1, 0), Some(only_traced));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this thread.
    let cpu = Some(unsafe { CpuRef::new(area) });
    assert!(
        !k.kmalloc_cache(64, Gfp::KERNEL)
            .unwrap()
            .config()
            .is_debug(),
        "the policy names one cache"
    );
    let s = k
        .kmem_cache_create(cpu, "traced-40", 40, 8, SlabFlags::empty(), None)
        .unwrap();
    assert!(s.config().is_debug());
    let p = k.slub().alloc(cpu, s, Gfp::KERNEL).unwrap();
    // SAFETY: ours.
    unsafe { k.slub().free(cpu, s, p) };
    let l = log(k);
    assert!(
        l.contains(&format!(
            "TRACE traced-40 alloc 0x{:016x}",
            p.as_ptr() as usize
        )),
        "{l}"
    );
    assert!(l.contains("TRACE traced-40 free"), "{l}");
    // Flags at create time work without a policy too.
    let k2 = kmem_with(2, config(1, 0), None);
    let z = k2
        .kmem_cache_create(
            None,
            "rz-24",
            24,
            8,
            SlabFlags::RED_ZONE | SlabFlags::POISON,
            None,
        )
        .unwrap();
    let o = k2.slub().alloc(None, z, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the bug under test: past the end.
    unsafe { o.add(24).write(9) };
    // SAFETY: our (damaged) object.
    assert!(!unsafe { k2.slub().free(None, z, std::ptr::NonNull::new(o).unwrap()) });
    assert!(k2
        .pages
        .platform()
        .take_log()
        .contains("BUG rz-24 (Not tainted): Redzone overwritten"));
}

#[test]
fn debug_objects_keep_their_alignment_and_size() {
    let (k, cpu) = setup();
    for size in [8usize, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096] {
        let p = k.kmalloc(Some(cpu), size, Gfp::KERNEL).unwrap().as_ptr();
        let align = (1usize << size.trailing_zeros()).min(4096);
        assert_eq!(p as usize % align, 0, "kmalloc({size}) under debug");
        // SAFETY: the test's own live allocation (or null, or not the heap's).
        assert_eq!(unsafe { k.ksize(p) }, size);
        // SAFETY: ours, `size` bytes: the whole object is usable.
        unsafe {
            std::ptr::write_bytes(p, 0x77, size);
            assert!(
                k.kfree(Some(cpu), p),
                "kmalloc({size}): a clean object frees"
            );
        }
    }
    assert_eq!(log(k), "");
}

/// kmalloc red zoning at the requested size (`orig_size`): the slack between the size
/// asked for and the class is red zone, so a write there is caught at free and by
/// `validate`; `ksize` answers with the request; an in-place krealloc moves the zone.
#[test]
fn write_into_the_slack_of_the_class_is_caught() {
    let (k, cpu) = setup();
    let p = k.kmalloc(Some(cpu), 18, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the test's own live allocation (or null, or not the heap's).
    assert_eq!(unsafe { k.ksize(p) }, 18, "ksize is the request under Z");
    // SAFETY: the bug under test: byte 21 of an 18-byte request (kmalloc-24's slack).
    unsafe { p.add(21).write(b'X') };
    // SAFETY: our object (damaged).
    let freed = unsafe { k.kfree(Some(cpu), p) };
    assert!(!freed, "a damaged object is not freed");
    let l = log(k);
    assert!(
        l.contains("BUG kmalloc-24 (Not tainted): kmalloc Redzone overwritten"),
        "{l}"
    );
    assert!(l.contains("First byte 0x58 instead of 0xcc"), "{l}");
    // The bytes asked for are the caller's: no report.
    let q = k.kmalloc(Some(cpu), 18, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: inside the 18 bytes asked for.
    unsafe { q.write_bytes(7, 18) };
    // In place to 23 bytes: the zone now starts at 23.
    // SAFETY: ours, and the request still fits kmalloc-24.
    let r = unsafe { k.krealloc(Some(cpu), q, 23, Gfp::KERNEL) }
        .unwrap()
        .as_ptr();
    // SAFETY: the test's own live allocation (or null, or not the heap's).
    assert_eq!((r, unsafe { k.ksize(r) }), (q, 23));
    // SAFETY: inside the 23 bytes now asked for.
    unsafe { r.add(22).write(1) };
    // SAFETY: ours, intact.
    assert!(unsafe { k.kfree(Some(cpu), r) });
    assert!(log(k).is_empty(), "valid use reports nothing");
    // validate sees the slack of a live object.
    let v = k.kmalloc(Some(cpu), 42, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the bug under test: byte 44 of a 42-byte request (kmalloc-48).
    unsafe { v.add(44).write(b'Y') };
    let mut found = Vec::new();
    k.validate_all(&mut |p| found.push(p.what));
    assert!(found.contains(&"kmalloc Redzone overwritten"), "{found:?}");
}

/// A heap whose kmalloc caches run with red zones and poison but without F (no
/// freelist walk on every free), and a CPU area for this thread.
fn setup_without_f() -> (&'static K, CpuRef<'static>) {
    fn zp(_name: &str) -> SlabFlags {
        SlabFlags::RED_ZONE | SlabFlags::POISON
    }
    let k = kmem_with(2, config(1, 0), Some(zp));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: this test thread owns the area for the rest of the test.
    (k, unsafe { CpuRef::new(area) })
}

#[test]
fn a_double_free_without_f_is_named_as_one_and_leaves_the_red_zones_alone() {
    let (k, cpu) = setup_without_f();
    let a = k.kmalloc(Some(cpu), 56, Gfp::KERNEL).unwrap().as_ptr();
    let b = k.kmalloc(Some(cpu), 56, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the third free is the bug under test (a is no longer the head).
    unsafe {
        assert!(k.kfree(Some(cpu), a));
        assert!(k.kfree(Some(cpu), b));
        assert!(!k.kfree(Some(cpu), a), "a double free away from the head");
    }
    let l = log(k);
    assert!(
        l.contains("BUG kmalloc-56 (Not tainted): Object already free"),
        "{l}"
    );
    assert!(
        !l.contains("Redzone overwritten"),
        "a free object's red zones are not damage: {l}"
    );
    // Its red zones still read free: both come back once, with no report.
    let mut got = HashSet::new();
    for _ in 0..200 {
        let p = k.kmalloc(Some(cpu), 56, Gfp::KERNEL).unwrap().as_ptr() as usize;
        assert!(got.insert(p), "handed out twice");
    }
    assert!(got.contains(&(a as usize)) && got.contains(&(b as usize)));
    let l = log(k);
    assert!(!l.contains("BUG"), "{l}");
}

#[test]
fn a_quarantined_object_stays_quarantined_when_freed_again() {
    for (label, (k, cpu)) in [("FZPU", setup()), ("ZP", setup_without_f())] {
        // Quarantined at its free: a write past its end.
        let p = k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap().as_ptr();
        // SAFETY: the bug under test: one byte past the object.
        unsafe { p.add(64).write(b'X') };
        // SAFETY: our object (damaged), then the same pointer again (the bug).
        unsafe {
            assert!(!k.kfree(Some(cpu), p), "{label}");
            assert!(
                !k.kfree(Some(cpu), p),
                "{label}: freed again after quarantine"
            );
        }
        let l = log(k);
        assert!(l.contains("Redzone overwritten"), "{label}: {l}");
        // An allocated or quarantined object links nothing: no free pointer shown
        // (decoding its mark would show the hardening key).
        let object = format!("INFO: Object 0x{:016x} @offset=", p as usize);
        let line = l.lines().find(|x| x.starts_with(&object)).unwrap();
        assert!(line.ends_with(" fp=0x0000000000000000"), "{line}");
        assert!(
            l.contains("BUG kmalloc-64 (Not tainted): Object already free"),
            "{label}: {l}"
        );
        // Quarantined when it came back: a write after its free.
        let q = k.kmalloc(Some(cpu), 32, Gfp::KERNEL).unwrap().as_ptr();
        // SAFETY: ours; then the bug under test, a write into the freed object.
        unsafe {
            assert!(k.kfree(Some(cpu), q));
            q.add(3).write(0x55);
        }
        let r = k.kmalloc(Some(cpu), 32, Gfp::KERNEL).unwrap().as_ptr();
        assert_ne!(r, q);
        // SAFETY: a stale pointer freed again (the bug), then ours.
        unsafe {
            assert!(
                !k.kfree(Some(cpu), q),
                "{label}: a quarantined object freed"
            );
            assert!(k.kfree(Some(cpu), r));
        }
        let l = log(k);
        assert!(l.contains("Poison overwritten"), "{label}: {l}");
        assert!(l.contains("Object already free"), "{label}: {l}");
        never_handed_out(k, cpu, 64, &[p]);
        never_handed_out(k, cpu, 32, &[q]);
    }
}

#[test]
fn validate_beside_allocations_reports_nothing() {
    // A walk of the cache runs while another thread allocates and frees: it must
    // see each object free or allocated, red zones and requested size included.
    let (k, _) = setup();
    let s = k.kmalloc_cache(64, Gfp::KERNEL).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut found = Vec::new();
    std::thread::scope(|t| {
        t.spawn(|| {
            let area = k.pages.cpu_area_get(1).unwrap();
            // SAFETY: this thread owns the area until it puts it back.
            let cpu = unsafe { CpuRef::new(area) };
            for i in 0..200_000 {
                let held: Vec<_> = (0..8)
                    .map(|j| {
                        let size = 33 + (i + j) % 32;
                        k.kmalloc(Some(cpu), size, Gfp::KERNEL).unwrap().as_ptr()
                    })
                    .collect();
                for p in held {
                    // SAFETY: ours.
                    assert!(unsafe { k.kfree(Some(cpu), p) });
                }
            }
            done.store(true, std::sync::atomic::Ordering::Release);
            // SAFETY: owned; not used afterwards.
            unsafe { k.pages.cpu_area_put(area) };
        });
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            k.slub().validate(s, &mut |p| found.push(p.what));
            // The list lock is a spin lock: let the other thread have it between walks.
            std::thread::yield_now();
        }
    });
    assert!(found.is_empty(), "{found:?}: {}", log(k));
}

#[test]
fn a_debug_allocation_falls_back_to_a_node_with_memory() {
    // Two fake nodes and a bound of one section, all of it brought online on node 0:
    // node 1 cannot grow, so a slab asked for there comes from node 0.
    let k = kmem_with(
        4,
        config(2, kmem_core::page::SECTION_MANAGED_PAGES),
        Some(all_debug),
    );
    while k.pages.add_memory(0) {}
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: this test thread owns the area for the rest of the test.
    let cpu = unsafe { CpuRef::new(area) };
    let free_before = k.pages.nr_free_pages();
    let p = k
        .kmalloc_node(Some(cpu), 64, Gfp::KERNEL, Some(1))
        .expect("node 0 has memory");
    let slab = k.pages.virt_to_head_page(p.as_ptr()).unwrap();
    assert_eq!(k.pages.page_to_nid(slab), 0);
    // One slab was made for it, not one slab after another until memory ran out.
    let used = free_before - k.pages.nr_free_pages();
    assert!(used <= 64, "{used} pages taken for one object");
    // More asked for on node 1, and a CPU of node 1 asking for any node: node 0's
    // partial slab, rather than a slab each.
    let q = k.kmalloc_node(Some(cpu), 64, Gfp::KERNEL, Some(1)).unwrap();
    assert_eq!(k.pages.virt_to_head_page(q.as_ptr()), Some(slab));
    area.set_node(1);
    let r = k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap();
    assert_eq!(k.pages.virt_to_head_page(r.as_ptr()), Some(slab));
    // Bound to node 1: none.
    let bound = Gfp::KERNEL | Gfp::THISNODE | Gfp::NOWARN;
    assert!(k.kmalloc_node(Some(cpu), 64, bound, Some(1)).is_none());
    // SAFETY: ours.
    unsafe {
        assert!(k.kfree(Some(cpu), p.as_ptr()));
        assert!(k.kfree(Some(cpu), q.as_ptr()));
        assert!(k.kfree(Some(cpu), r.as_ptr()));
    }
}

#[test]
fn an_init_on_free_cache_frees_whatever_its_objects_hold() {
    // A cache that leaves the fast paths for init_on_free alone keeps its free
    // pointer inside the object: the program's bytes there are not a mark.
    let k = kmem_with(2, config(1, 0), None);
    let s = k
        .kmem_cache_create(None, "init-16", 16, 8, SlabFlags::INIT_ON_FREE, None)
        .unwrap();
    assert!(s.config().offset < 16);
    let held: Vec<_> = (0..64)
        .map(|_| k.slub().alloc(None, s, Gfp::KERNEL).unwrap())
        .collect();
    for p in &held {
        for word in 0..2 {
            // SAFETY: ours, 16 bytes.
            unsafe {
                (p.as_ptr() as *mut u64)
                    .add(word)
                    .write(0x0bad_0bad_0bad_0bad)
            };
        }
    }
    for p in held {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.slub().free(None, s, p) });
    }
    let l = log(k);
    assert!(!l.contains("BUG"), "{l}");
}

// What the reports keep and say: a quarantined object is nobody's (the walks of
// tracked objects say so, whatever the clock; the test clock stands still unless moved,
// as a coarse clock does between calls), a refused free reports and restores both red
// zones, a poison report names the bytes written and no more, and an in-place krealloc
// reports an overwritten kmalloc red zone before painting it again.

/// The tracked objects of `size`'s cache: (address, quarantined).
fn tracked(k: &K, size: usize) -> Vec<(usize, bool)> {
    let s = k.kmalloc_cache(size, Gfp::KERNEL).unwrap();
    let mut out = Vec::new();
    assert!(k
        .slub()
        .for_each_tracked(s, &mut |o| out.push((o.addr, o.quarantined()))));
    out
}

#[test]
fn quarantined_objects_are_nobodys_within_one_clock_tick() {
    let (k, cpu) = setup();
    let live = k.kmalloc(Some(cpu), 32, Gfp::KERNEL).unwrap().as_ptr();
    // Quarantined at a free: the red zone after it was written.
    let overflowed = k.kmalloc(Some(cpu), 32, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the bug under test: a byte past the object.
    unsafe { overflowed.add(32).write(b'X') };
    // SAFETY: our object (damaged): refused.
    assert!(!unsafe { k.kfree(Some(cpu), overflowed) });
    // Quarantined at an allocation: written after its free.
    let reused = k.kmalloc(Some(cpu), 32, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: ours, freed once; then the bug under test, a write after the free.
    unsafe {
        assert!(k.kfree(Some(cpu), reused));
        reused.write(1);
    }
    let next = k.kmalloc(Some(cpu), 32, Gfp::KERNEL).unwrap().as_ptr();
    assert_ne!(next, reused);
    let l = log(k);
    assert!(
        l.contains("Redzone overwritten") && l.contains("Poison overwritten"),
        "{l}"
    );
    let objs = tracked(k, 32);
    let state = |p: *mut u8| objs.iter().find(|o| o.0 == p as usize).map(|o| o.1);
    // Before, a quarantined object counted as in use unless its free track was newer
    // than its allocation track, which one clock tick never makes it.
    assert_eq!(state(live), Some(false));
    assert_eq!(state(next), Some(false));
    assert_eq!(state(overflowed), Some(true));
    assert_eq!(state(reused), Some(true));
    // SAFETY: ours, freed once.
    unsafe {
        assert!(k.kfree(Some(cpu), live));
        assert!(k.kfree(Some(cpu), next));
    }
}

#[test]
fn a_refused_free_reports_and_restores_both_red_zones() {
    let (k, cpu) = setup();
    let p = k.kmalloc(Some(cpu), 20, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the bug under test: 16 bytes past the 20 asked for (kmalloc-24),
    // through the kmalloc red zone (20..24) into the slot's (24..).
    unsafe { p.add(20).write_bytes(b'A', 16) };
    // SAFETY: our object (damaged): refused.
    assert!(!unsafe { k.kfree(Some(cpu), p) });
    let l = log(k);
    assert!(
        l.contains("BUG kmalloc-24 (Not tainted): Redzone overwritten"),
        "{l}"
    );
    assert!(
        l.contains("BUG kmalloc-24 (Not tainted): kmalloc Redzone overwritten"),
        "{l}"
    );
    // Both restored: a later walk finds nothing (before, the kmalloc red zone was
    // reported again, at every validation, the exit's included).
    let s = k.kmalloc_cache(20, Gfp::KERNEL).unwrap();
    let mut found = 0;
    k.slub().validate(s, &mut |_| found += 1);
    assert_eq!(found, 0, "{}", log(k));
}

#[test]
fn a_poison_report_names_the_bytes_written() {
    let (k, cpu) = setup();
    let p = k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: ours, freed once; then the bug under test, one byte written after.
    unsafe {
        assert!(k.kfree(Some(cpu), p));
        p.write(1);
    }
    let q = k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap().as_ptr();
    let l = log(k);
    let at = p as usize;
    // One byte, not the rest of the object up to its end marker.
    assert!(
        l.contains(&format!(
            "INFO: 0x{at:016x}-0x{at:016x} @offset=0. First byte 0x1 instead of 0x6b"
        )),
        "{l}"
    );
    assert!(
        l.contains(&format!(
            "FIX kmalloc-64: Restoring Poison 0x{at:016x}-0x{at:016x}=0x6b"
        )),
        "{l}"
    );
    // The end marker alone: named with its own byte.
    let r = k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: ours, freed once; then the bug under test, its last byte written.
    unsafe {
        assert!(k.kfree(Some(cpu), r));
        r.add(63).write(0x6b);
    }
    let s = k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap().as_ptr();
    let l = log(k);
    assert!(l.contains("First byte 0x6b instead of 0xa5"), "{l}");
    // SAFETY: ours, freed once.
    unsafe {
        assert!(k.kfree(Some(cpu), q));
        assert!(k.kfree(Some(cpu), s));
    }
}

#[test]
fn an_in_place_krealloc_reports_an_overwritten_kmalloc_red_zone() {
    let (k, cpu) = setup();
    let p = k.kmalloc(Some(cpu), 20, Gfp::KERNEL).unwrap().as_ptr();
    // SAFETY: the bug under test: a byte past the 20 asked for, in the class's slack.
    unsafe { p.add(20).write(b'A') };
    // SAFETY: ours; the same class, so it stays in place.
    let q = unsafe { k.krealloc(Some(cpu), p, 24, Gfp::KERNEL) }.unwrap();
    assert_eq!(q.as_ptr(), p, "in place");
    // Before, the new request painted the red zone again and the overflow was lost.
    let l = log(k);
    assert!(
        l.contains("BUG kmalloc-24 (Not tainted): kmalloc Redzone overwritten"),
        "{l}"
    );
    assert!(l.contains("First byte 0x41 instead of 0xcc"), "{l}");
    // Restored: the free goes through.
    // SAFETY: ours, freed once.
    assert!(unsafe { k.kfree(Some(cpu), p) });
    assert_eq!(log(k), "");
}
