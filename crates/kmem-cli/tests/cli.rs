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

/// `kmem top --delay` out of range is a usage error (exit 2), not a panic.
#[test]
fn top_refuses_a_delay_it_cannot_wait() {
    for bad in ["inf", "nan", "1e300", "-1"] {
        let arg = format!("--delay={bad}");
        let out = kmem(&["top", "--once", "1", &arg]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--delay {bad}: {err}");
        assert!(err.contains("--delay"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
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
        "--leaks",
        "--live=off",
        "--kfence=all",
        "--",
        "sh",
        "-c",
        "echo \"$KMEM_DEBUG|$KMEM_MAX|$KMEM_PERCPU|$KMEM_SLUB|$KMEM_DECAY_MS|$KMEM_STATS|$KMEM_ON_ERROR|$KMEM_LEAKS|$KMEM_LIVE|$KMEM_KFENCE\"",
    ])
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        "FZPU|64M|cpu-rseq|cpu-slab|50|/dev/null|continue|1|off|all"
    );
    // A value the heap would ignore stops `kmem run` before the program starts.
    for (flag, var) in [
        ("--percpu=sometimes", "KMEM_PERCPU"),
        ("--max=lots", "KMEM_MAX"),
        ("--debug=Q", "KMEM_DEBUG"),
        ("--slub=slob", "KMEM_SLUB"),
        ("--on-error=retry", "KMEM_ON_ERROR"),
        ("--live=often", "KMEM_LIVE"),
        ("--kfence=sometimes", "KMEM_KFENCE"),
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

/// `kmem top` on a C program started with `kmem run --debug=U`: the listing names it,
/// `--once` shows its caches, `--json` parses, and `--sites` names both call sites with
/// their counts and sizes (symbolised from the program's symbol table).
#[test]
fn kmem_top_shows_a_running_program_and_its_allocation_sites() {
    use std::io::BufRead;
    common::built_lib();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/sites.c");
    let prog = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("top_sites");
    let ok = Command::new("cc")
        .args(["-O1", "-g", "-o"])
        .arg(&prog)
        .arg(&src)
        .status()
        .expect("a C compiler");
    assert!(ok.success());
    let mut child = kmem(&["run", "--debug=U", "--live=20", "--max=1G", "--"])
        .arg(&prog)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid: u32 = line
        .strip_prefix("ready ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"));
    let run = |args: &[&str]| {
        let out = kmem(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    // The program makes its view at its first slow path after its first interval.
    let segment = kmem::live::segment_file(pid);
    let t0 = std::time::Instant::now();
    while !segment.exists() {
        assert!(t0.elapsed().as_secs() < 10, "no live view for {pid}");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let p = pid.to_string();
    let list = run(&["top"]);
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().next() == Some(p.as_str()) && l.contains("top_sites")),
        "{list}"
    );
    let once = run(&["top", "--once", &p]);
    assert!(
        once.starts_with(&format!("kmem top - pid {pid} (top_sites)")),
        "{once}"
    );
    assert!(
        once.contains("OBJS ACTIVE  USE OBJ SIZE") && once.contains(" kmalloc-"),
        "{once}"
    );
    // The heap's bound (`--max`), and what it counts.
    assert!(once.contains(" Bound (KMEM_MAX): 1.0G, "), "{once}");
    let json: serde_json::Value = serde_json::from_str(&run(&["top", "--json", &p])).unwrap();
    assert_eq!(json["pid"], pid);
    assert!(json["caches"].as_array().unwrap().len() > 10);
    let sites = run(&["top", &p, "--sites"]);
    let line_of = |name: &str| {
        sites
            .lines()
            .find(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|s| s.starts_with(&format!("{name}+0x")))
            })
            .unwrap_or_else(|| panic!("no {name} in {sites}"))
            .to_string()
    };
    let a = line_of("site_a");
    let b = line_of("site_b");
    // malloc(40) takes kmalloc-48 (16-byte aligned, as glibc's malloc is); the site
    // shows the 40 bytes asked for, as malloc(300)'s shows 300.
    assert!(
        a.trim_start().starts_with("50 ") && a.contains(" size=40 "),
        "{a}"
    );
    assert!(
        b.trim_start().starts_with("20 ") && b.contains(" size=300 "),
        "{b}"
    );
    assert!(a.contains(&format!(" pid={pid}")), "{a}");
    // One cache: site_b's objects are kmalloc-320's only.
    let one = run(&["top", &p, "--sites=kmalloc-320"]);
    assert!(
        one.contains("site_b+0x") && !one.contains("site_a+0x"),
        "{one}"
    );
    // `kmem run` waits for the program: stop the program, then it returns.
    let _ = Command::new("kill").args(["-9", &p]).status();
    child.wait().unwrap();
}

/// The `phase` row a `kmem bench-child` run prints (`args`: the child and options):
/// its param and its peak in MiB.
fn phase_child_peak(args: &[&str]) -> (u64, f64) {
    let out = kmem(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &rows[0];
    assert_eq!(
        (row["bench"].as_str(), row["op"].as_str()),
        (Some("phase"), Some("peak_rss"))
    );
    let mib = row["bytes"].as_u64().unwrap() as f64 / (1 << 20) as f64;
    (row["param"].as_u64().unwrap(), mib)
}

/// `bench workloads`'s `phase` row, measured in its own child: 250,000 64-byte objects
/// freed in a shuffled order, then 250,000 of 128 bytes (`--quick`). The peak counts
/// the second phase's 30.5 MiB of live objects, and kmem's second phase takes the
/// first one's memory: the build before the barns' growth decay read 51 MiB (both
/// phases side by side), this one 34 (mimalloc 36).
#[test]
fn the_phase_bench_counts_the_live_objects_and_kmem_reuses_the_first_phase() {
    let (param, mib) = phase_child_peak(&["bench-child", "phase-kmem", "--quick"]);
    assert_eq!(param, 128);
    let live = 250_000.0 * 128.0 / (1 << 20) as f64;
    assert!(
        mib >= live && mib < live + 8.0,
        "peak {mib:.1} MiB for {live:.1} MiB live"
    );
}

/// `bench workloads`'s `phase` row for two threads, measured in its own child:
/// 250,000 128-byte objects (30.5 MiB, half each) freed in a shuffled order, then
/// 250,000 of 64 bytes (15.3 MiB, `--quick`), the resident memory read at each phase's
/// end with both threads there. kmem's second phase takes the first one's memory while
/// one thread's barns' decay flushes the first phase's objects and the other goes on:
/// the build before the flush was shared read 44.4–44.5 MiB (the second phase beside
/// the first), this one 36.7–36.8 (`slab/barn_drain.rs`).
#[test]
fn the_phase_bench_in_two_threads_reuses_the_first_phase() {
    let (param, mib) = phase_child_peak(&["bench-child", "phase-threads-kmem", "--quick"]);
    assert_eq!(param, 64);
    let live = 250_000.0 * 128.0 / (1 << 20) as f64;
    assert!(
        mib >= live && mib < live + 10.0,
        "peak {mib:.1} MiB for {live:.1} MiB live at the first phase's end"
    );
}

/// `bench workloads`'s `phase` row for large blocks, measured in its own child, full
/// form: one million 64-byte objects (61 MiB) freed in a shuffled order, then as many
/// bytes of 2 MiB blocks (30 of them). The peak counts the blocks' 60 MiB, and kmem's
/// blocks take the objects' memory: the build before the page blocks' growth ran the
/// barns' decay read 134.4 MiB (both phases side by side), this one 82.3 (mimalloc
/// 85.6).
#[test]
fn the_phase_bench_to_large_blocks_reuses_the_small_objects_memory() {
    let (param, mib) = phase_child_peak(&["bench-child", "phase-blocks-kmem"]);
    assert_eq!(param, 2 << 20);
    assert!(
        (60.0..100.0).contains(&mib),
        "peak {mib:.1} MiB for 60 MiB of blocks"
    );
}
