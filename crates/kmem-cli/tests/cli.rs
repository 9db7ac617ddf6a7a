//! The `kmem` command line.

use std::process::Command;

#[test]
fn unknown_suite_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_kmem"))
        .args(["bench", "nosuch"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown suite 'nosuch' (suites: page, slab, cache, slabinfo)"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn help_lists_bench() {
    let out = Command::new(env!("CARGO_BIN_EXE_kmem"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("bench"));
}
