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
    // The return address lies inside the function that called into kmem, just after
    // its call (these functions are small, but the heap's fast paths are inlined into
    // them, so they may span a few hundred bytes before the out-of-line call).
    const SPAN: usize = 2048;
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
