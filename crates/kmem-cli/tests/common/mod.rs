//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// libkmem.so, built with the cargo running these tests (cargo test does not build a
/// cdylib-only library); the target directory is the one the `kmem` binary is in.
pub fn built_lib() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // target/PROFILE/kmem: the library in the same profile (`cargo test --release`
    // tests the one it just built, not a stale one).
    let profile_dir = Path::new(env!("CARGO_BIN_EXE_kmem")).parent().unwrap();
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["build", "-q", "-p", "kmem-malloc", "--manifest-path"]);
    cargo.arg(root.join("Cargo.toml"));
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cargo.arg("--release");
    }
    assert!(cargo.status().unwrap().success());
    let lib = profile_dir.join("libkmem.so");
    assert!(lib.is_file(), "{}", lib.display());
    lib
}
