//! The `kmem` command line.

mod common;

use std::process::Command;

/// The `kmem` binary under test, with `args`.
fn kmem(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kmem"));
    c.args(args);
    c
}

#[test]
fn unknown_suite_is_a_clear_error() {
    let out = kmem(&["bench", "nosuch"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "unknown suite 'nosuch' (suites: page, slab, cache, debug, memcg, percpu, percpu_memory, slabinfo, global, workloads, preload)"
        ),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn help_lists_bench() {
    let out = kmem(&["--help"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("bench"));
}

#[test]
fn kmem_stats_writes_the_exit_report() {
    let path = std::env::temp_dir().join(format!("kmem-stats-{}.txt", std::process::id()));
    let out = kmem(&["bench", "slabinfo", "--json"])
        .env("KMEM_STATS", &path)
        .env("KMEM_MAX", "lots")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("kmem: ignoring KMEM_MAX=lots (expected a size such as 512M, 2G or 65536); using no limit"),
        "{err}"
    );
    let report = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(report.starts_with("slabinfo - version: 2.1\n"), "{report}");
    assert!(report.contains("\nkmalloc-32 "));
    assert!(report.contains("Node 0, zone   Normal "));
    assert!(report.contains("\nnr_free_pages "));
    assert!(report.contains("\npgalloc_normal "));
    // The JSON document on stdout is untouched by the report.
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["suite"], "slabinfo");
}

#[test]
fn kmem_run_preloads_passes_the_exit_code_and_prints_stats() {
    common::built_lib();
    let out = kmem(&[
        "run",
        "--stats",
        "--",
        "python3",
        "-c",
        "import os, sys; print(os.environ['LD_PRELOAD']); sys.exit(3)",
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.trim_end().ends_with("libkmem.so"), "{stdout}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("slabinfo - version: 2.1"), "{err}");
    assert!(err.contains("Node 0, zone   Normal"));
    // A missing library is a clear error.
    let out = kmem(&["run", "--", "true"])
        .env("KMEM_LIB", "/nonexistent/libkmem.so")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("kmem run: KMEM_LIB=/nonexistent/libkmem.so is not a file"));
}

#[test]
fn kmem_run_flags_set_the_environment_and_are_checked() {
    common::built_lib();
    let out = kmem(&[
        "run",
        "--debug",
        "--max=64M",
        "--percpu=cpu-rseq",
        "--slub=cpu-slab",
        "--decay-ms=50",
        "--stats=/dev/null",
        "--on-error=continue",
        "--",
        "sh",
        "-c",
        "echo \"$KMEM_DEBUG|$KMEM_MAX|$KMEM_PERCPU|$KMEM_SLUB|$KMEM_DECAY_MS|$KMEM_STATS|$KMEM_ON_ERROR\"",
    ])
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        "FZPU|64M|cpu-rseq|cpu-slab|50|/dev/null|continue"
    );
    // A value the heap would ignore stops `kmem run` before the program starts.
    for (flag, var) in [
        ("--percpu=sometimes", "KMEM_PERCPU"),
        ("--max=lots", "KMEM_MAX"),
        ("--debug=Q", "KMEM_DEBUG"),
        ("--slub=slob", "KMEM_SLUB"),
        ("--on-error=retry", "KMEM_ON_ERROR"),
    ] {
        let out = kmem(&["run", flag, "--", "sh", "-c", "echo ran"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}");
        assert!(out.stdout.is_empty(), "{flag}: the program ran");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("kmem run: {flag}: not a valid {var} (expected ")),
            "{err}"
        );
    }
    // One line of help each.
    let help = kmem(&["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in [
        "--debug",
        "--max",
        "--percpu",
        "--slub",
        "--stats",
        "--decay-ms",
    ] {
        assert!(help.contains(flag), "{flag} missing from\n{help}");
    }
}
