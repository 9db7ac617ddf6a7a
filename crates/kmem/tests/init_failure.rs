//! When the heap cannot reserve its span (the address space is limited, as under
//! `ulimit -v`), it says why in one line on stderr, once, and every allocation fails
//! (null, `None`) instead of crashing.
//!
//! The test runs itself again as a child process that lowers `RLIMIT_AS` before the
//! heap's first use (this binary keeps the system allocator, so nothing else touches
//! the heap), then checks the child's stderr.

use kmem::{heap, Gfp, KmemAlloc};
use std::alloc::{GlobalAlloc, Layout};
use std::process::Command;

const CHILD: &str = "KMEM_TEST_INIT_FAILURE_CHILD";

/// The process's address-space size now (VmSize, bytes).
fn vm_size() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kb * 1024
}

/// The child: 64 MiB of address space beyond what it uses now (less than the
/// smallest span the heap tries, one 128 MiB section plus alignment), then the heap.
fn child() {
    let limit = vm_size() + (64 << 20);
    let rl = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: setrlimit reads the struct; lowering our own limit is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);
    let h = heap();
    assert!(h.kmalloc(32, Gfp::KERNEL).is_none());
    assert!(h.alloc_pages(Gfp::KERNEL, 0).is_none());
    assert!(heap().kmalloc(4096, Gfp::KERNEL).is_none(), "still failing");
    // SAFETY: a valid layout; the result is only compared with null.
    let p = unsafe { KmemAlloc.alloc(Layout::from_size_align(100, 8).unwrap()) };
    assert!(p.is_null());
    // SAFETY: as above (a huge allocation: a direct mapping, refused too).
    let p = unsafe { KmemAlloc.alloc(Layout::from_size_align(1 << 30, 8).unwrap()) };
    assert!(p.is_null());
    println!("child done");
}

#[test]
fn a_heap_without_address_space_says_why_once_and_fails_allocations() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_heap_without_address_space_says_why_once_and_fails_allocations",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("child done"), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("kmem:")).collect();
    assert_eq!(lines.len(), 1, "one line, once: {stderr}");
    let line = lines[0];
    assert!(
        line.starts_with("kmem: cannot reserve ")
            && line.contains(" of address space")
            && line.contains("(mmap: ")
            && line.ends_with("; allocations will fail"),
        "{line}"
    );
}
