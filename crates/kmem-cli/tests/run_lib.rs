//! `kmem run` after `cargo install`: the executable alone in a bin directory, away
//! from any cargo target directory, finds libkmem.so next to itself or in `../lib`
//! (as `libkmem.so` or its SONAME `libkmem.so.0`), and says how to get it otherwise.

mod common;

use common::built_lib;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `<prefix>/bin/kmem run -- sh -c 'echo $LD_PRELOAD'` without KMEM_LIB or
/// CARGO_TARGET_DIR.
fn run_installed(kmem: &Path) -> Output {
    Command::new(kmem)
        .args(["run", "--", "sh", "-c", "echo $LD_PRELOAD"])
        .env_remove("KMEM_LIB")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn an_installed_kmem_finds_the_library_beside_it_or_says_how_to_get_it() {
    let lib = built_lib();
    let prefix = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("installed");
    let _ = std::fs::remove_dir_all(&prefix);
    let bin = prefix.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(prefix.join("lib")).unwrap();
    let kmem = bin.join("kmem");
    std::fs::copy(env!("CARGO_BIN_EXE_kmem"), &kmem).unwrap();

    // Nothing installed: a clear error naming the fix (unless the system has one).
    let system = ["/usr/local/lib", "/usr/lib64", "/usr/lib"]
        .iter()
        .any(|d| Path::new(d).join("libkmem.so").exists());
    if !system {
        let out = run_installed(&kmem);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.starts_with("kmem run: libkmem.so not found"), "{err}");
        assert!(
            err.contains("cargo build --release -p kmem-malloc") && err.contains("KMEM_LIB"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    // In ../lib under its SONAME.
    let in_lib = prefix.join("lib/libkmem.so.0");
    std::fs::copy(&lib, &in_lib).unwrap();
    let out = run_installed(&kmem);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), in_lib.to_str().unwrap());

    // Next to the executable: preferred.
    let beside = bin.join("libkmem.so");
    std::fs::copy(&lib, &beside).unwrap();
    let out = run_installed(&kmem);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), beside.to_str().unwrap());

    // The program really runs on kmem from there.
    let out = Command::new(&kmem)
        .args(["run", "--stats", "--", "python3", "-c", "pass"])
        .env_remove("KMEM_LIB")
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(text(&out.stderr).contains("slabinfo - version: 2.1"));
}
