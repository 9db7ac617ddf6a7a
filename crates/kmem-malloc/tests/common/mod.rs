//! Helpers shared by kmem-malloc's integration tests: the library under test, a
//! scratch directory, process output as text.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// libkmem.so, built for this test run: `cargo test` does not build a cdylib-only
/// library, so the tests build it once with the cargo that runs them (same profile and
/// target directory) and use target/debug/libkmem.so.
pub fn lib() -> PathBuf {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let exe = std::env::current_exe().unwrap();
        // target/PROFILE/deps/this-test: build the library in the same profile, so
        // that `cargo test --release` tests the library it just built, not a stale one.
        let profile_dir = exe.parent().unwrap().parent().unwrap();
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "-q", "-p", "kmem-malloc", "--manifest-path"]);
        cargo.arg(root.join("Cargo.toml"));
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cargo.arg("--release");
        }
        assert!(
            cargo.status().expect("cargo").success(),
            "building libkmem.so"
        );
        let lib = profile_dir.join("libkmem.so");
        assert!(lib.is_file(), "{} was not built", lib.display());
        lib
    })
    .clone()
}

/// A scratch directory for this test binary's files.
pub fn tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Process output as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
