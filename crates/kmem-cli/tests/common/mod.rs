//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// libkmem.so, built with the cargo running these tests (cargo test does not build a
/// cdylib-only library); the target directory is the one the `kmem` binary is in.
pub fn built_lib() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "kmem-malloc", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .status()
        .unwrap();
    assert!(status.success());
    let lib = Path::new(env!("CARGO_BIN_EXE_kmem"))
        .parent()
        .unwrap()
        .join("libkmem.so");
    assert!(lib.is_file(), "{}", lib.display());
    lib
}
