//! slub_debug's U flag in a program that links kmem: the allocation track of an object
//! starts at the function that allocated it, not at kmem's own frames (however much
//! the build inlined), and the free track at the function that freed it.
//!
//! The test runs itself again as a child with `KMEM_DEBUG=U` (read once, when the
//! heap starts); the child allocates and frees from known functions, frees the object
//! a second time (reported with the object's tracks and refused), and the parent reads
//! the report's "Allocated in" and "Freed in" frames from the child's stderr.

use kmem::{heap, Gfp};
use std::process::Command;

const CHILD: &str = "KMEM_TEST_TRACKS_CHILD";

/// How far past a test function's start a return address into it may lie: inside the
/// function that called into kmem, just after its call. These functions are small, but
/// the heap's fast paths are inlined into them: in a debug build `kmalloc`'s (the
/// thread-mode pop, the rseq and charged dispatch) spans about 2.2 KiB before its
/// out-of-line call, and `kfree`'s, with per-CPU rseq mode's push inline too, made
/// `free_here` 4.3 KiB long, its call into kmem's layers 4.2 KiB in.
const SPAN: usize = 8192;

/// The allocation site the allocation track must name.
#[inline(never)]
fn allocate_here() -> *mut u8 {
    let p = heap().kmalloc(64, Gfp::KERNEL).expect("an object").as_ptr();
    std::hint::black_box(p)
}

/// The site the free track must name.
#[inline(never)]
fn free_here(p: *mut u8) -> bool {
    // SAFETY: our object from `allocate_here`, freed once here.
    let ok = unsafe { heap().kfree(std::hint::black_box(p)) };
    std::hint::black_box(ok)
}

fn child() {
    let p = allocate_here();
    assert!(free_here(p));
    // SAFETY: the double free under test: slub_debug reports and refuses it.
    assert!(!unsafe { heap().kfree(p) }, "a double free is refused");
    println!(
        "sites {:#x} {:#x}",
        allocate_here as *const () as usize, free_here as *const () as usize
    );
}

/// The address a report line `INFO: <label> in 0x… (…)` starts with.
fn frame_of(stderr: &str, label: &str) -> usize {
    let frame = stderr
        .lines()
        .find_map(|l| l.strip_prefix(&format!("INFO: {label} in ")))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {label} track in {stderr}"));
    let hex = frame
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("{label}: not an address: {frame}"));
    usize::from_str_radix(hex, 16).unwrap()
}

#[test]
fn tracks_start_at_the_program_s_frame() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tracks_start_at_the_program_s_frame",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("KMEM_DEBUG", "U")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let sites: Vec<usize> = stdout
        .split("sites ")
        .nth(1)
        .unwrap_or_else(|| panic!("no sites in {stdout}"))
        .split_whitespace()
        .take(2)
        .map(|h| usize::from_str_radix(h.trim_start_matches("0x"), 16).unwrap())
        .collect();
    let alloc = frame_of(&stderr, "Allocated");
    assert!(
        (sites[0]..sites[0] + SPAN).contains(&alloc),
        "allocation track 0x{alloc:x} is not in allocate_here at 0x{:x}:\n{stderr}",
        sites[0]
    );
    let free = frame_of(&stderr, "Freed");
    assert!(
        (sites[1]..sites[1] + SPAN).contains(&free),
        "free track 0x{free:x} is not in free_here at 0x{:x}:\n{stderr}",
        sites[1]
    );
}

const SITES_CHILD: &str = "KMEM_TEST_SITES_CHILD";

/// Objects kept through a global: referenced, not leaks.
static KEPT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
/// Objects whose only record is hidden (XORed): nothing points to them.
static HIDDEN: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
const MASK: usize = 0x5a5a_5a5a_5a5a_5a5a;

#[inline(never)]
fn keep_here() {
    let p = heap().kmalloc(72, Gfp::KERNEL).expect("an object").as_ptr();
    KEPT.lock().unwrap().push(p as usize);
}

#[inline(never)]
fn hide_here() {
    let p = heap()
        .kmalloc(200, Gfp::KERNEL)
        .expect("an object")
        .as_ptr();
    HIDDEN
        .lock()
        .unwrap()
        .push(std::hint::black_box(p as usize) ^ MASK);
}

/// Overwrites the dead stack below the caller, where hidden pointers may linger.
#[inline(never)]
fn scrub() {
    let mut junk = [0u8; 32 * 1024];
    std::hint::black_box(&mut junk);
}

fn sites_child() {
    // An untracked cache on the sheaves: its sheaves are objects of a tracked kmalloc
    // cache that only this CPU's area (or its barn) names, so the scan must read the
    // areas, in per-CPU rseq mode too, where they lie in a region it does not read
    // whole. They do not count as leaks.
    let h = heap();
    let plain = h
        .kmem_cache_create("tracks_plain", 48, 8, kmem::SlabFlags::empty(), None)
        .expect("a cache");
    let objs: Vec<_> = (0..300)
        .map(|_| h.kmem_cache_alloc(plain, Gfp::KERNEL).expect("an object"))
        .collect();
    for p in objs {
        // SAFETY: allocated just above from `plain`, freed once.
        assert!(unsafe { h.kmem_cache_free(plain, p) });
    }
    for _ in 0..30 {
        keep_here();
    }
    for _ in 0..12 {
        hide_here();
    }
    scrub();
    // alloc_calls as data: kmalloc-80 holds the 30 kept objects, from keep_here.
    let calls = h.alloc_calls(Some("kmalloc-80"));
    assert_eq!(calls.len(), 1, "{calls:?}");
    let top = &calls[0].locations[0];
    println!(
        "alloc_calls {} {:#x} {} {} {} {}",
        top.count,
        top.addr,
        top.size_min,
        top.size_max,
        top.pid_min,
        std::process::id()
    );
    let leaks = h.leaks();
    assert!(leaks.tracking);
    let leaked: Vec<(u64, u64, usize)> = leaks
        .unreferenced
        .iter()
        .map(|s| (s.location.count, s.location.size_sum, s.location.addr))
        .collect();
    println!(
        "leaks {:?} sites {:#x} {:#x}",
        leaked, keep_here as *const () as usize, hide_here as *const () as usize
    );
}

/// `Heap::alloc_calls` and `Heap::leaks` under `KMEM_DEBUG=U` (kmalloc's caches): the
/// sites of objects in use with their counts and requested sizes, and a leak scan that
/// reports the objects whose only record is hidden while the ones a global keeps, and
/// the sheaves of a cache on the fast path, are not. In thread mode
/// and in per-CPU rseq mode, whose CPU areas lie in one region the scan reads area by
/// area (where glibc registers no rseq area that child runs another mode).
#[test]
fn allocation_sites_and_leaks_as_data() {
    if std::env::var_os(SITES_CHILD).is_some() {
        return sites_child();
    }
    for percpu in ["thread", "cpu-rseq"] {
        sites_and_leaks_in(percpu);
    }
}

fn sites_and_leaks_in(percpu: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "allocation_sites_and_leaks_as_data",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SITES_CHILD, "1")
        .env("KMEM_DEBUG", "U,kmalloc-*")
        .env("KMEM_PERCPU", percpu)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{percpu}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let calls: Vec<usize> = stdout
        .split("alloc_calls ")
        .nth(1)
        .unwrap_or_else(|| panic!("{stdout}"))
        .split_whitespace()
        .take(6)
        .map(|v| {
            v.strip_prefix("0x").map_or_else(
                || v.parse().unwrap(),
                |h| usize::from_str_radix(h, 16).unwrap(),
            )
        })
        .collect();
    let line = stdout.split("leaks ").nth(1).unwrap();
    let hex = |w: &str| usize::from_str_radix(w.trim_start_matches("0x"), 16).unwrap();
    let words: Vec<&str> = line
        .split(" sites ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .collect();
    let (keep_at, hide_at) = (hex(words[0]), hex(words[1]));
    assert_eq!(calls[0], 30, "{stdout}");
    assert!((keep_at..keep_at + SPAN).contains(&calls[1]), "{stdout}");
    assert_eq!((calls[2], calls[3]), (72, 72), "requested sizes: {stdout}");
    assert_eq!(calls[4], calls[5], "the allocating pid: {stdout}");
    // The hidden objects are the leak: one site, hide_here, 12 × 200 bytes; no other
    // (the sheaves of `tracks_plain` are not leaks).
    assert!(line.starts_with("[(12, 2400, "), "{percpu}: {stdout}");
    let sites = line.split(" sites ").next().unwrap();
    assert_eq!(sites.matches('(').count(), 1, "{percpu}: {stdout}");
    let leak_at: usize = line
        .trim_start_matches("[(12, 2400, ")
        .split(')')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((hide_at..hide_at + SPAN).contains(&leak_at), "{stdout}");
    assert!(
        !line.contains("30, 2160"),
        "kept objects reported: {stdout}"
    );
}
