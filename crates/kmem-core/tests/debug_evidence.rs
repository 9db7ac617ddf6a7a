//! What slub_debug's reports keep and what they say: a quarantined object is nobody's
//! (the walks of tracked objects say so, whatever the clock), a refused free reports
//! and restores both red zones, a poison report names the bytes written and no more,
//! and an in-place krealloc reports an overwritten kmalloc red zone before painting
//! it again.

mod common;

use common::{config, kmem_with, TestPlatform};
use kmem_core::{CpuRef, Gfp, Kmem, SlabFlags};

type K = Kmem<TestPlatform>;

fn all_debug(_name: &str) -> SlabFlags {
    SlabFlags::DEBUG - SlabFlags::TRACE
}

/// A heap whose kmalloc caches run with F, Z, P and U (the test clock stands still
/// unless moved, as a coarse clock does between calls), and a CPU area.
fn setup() -> (&'static K, CpuRef<'static>) {
    let k = kmem_with(2, config(1, 0), Some(all_debug));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: this test thread owns the area for the rest of the test.
    (k, unsafe { CpuRef::new(area) })
}

fn log(k: &K) -> String {
    k.pages.platform().take_log()
}

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
