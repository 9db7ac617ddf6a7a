//! Suite `preload`: wall time of real programs run on each malloc through
//! `LD_PRELOAD` — kmem's libkmem.so, the system's libjemalloc / libmimalloc where they
//! are installed, and glibc's own malloc (no preload, `allocator` = `system`).
//!
//! Programs (op `run`, ns per run, param = the input's element count):
//! - `python_json`: python3 building 200,000-entry dicts and lists and round-tripping
//!   them through JSON;
//! - `sort`: sort(1) of a generated 200,000-line file;
//! - `shell_loop`: sh(1) running `/bin/true` 300 times (param 300): a fork and an
//!   exec each, with the malloc preloaded into the shell and every child;
//! - `gcc`: cc -O2 compiling a small C file (param 1);
//! - `cpp_map`: a C++ program filling a std::map<std::string, std::vector<int>> with
//!   200,000 insertions;
//! - `cpp_front_ends`: a C++ program cycling 64 live slots through the allocation
//!   calls besides plain malloc (new/delete, new[]/delete[], aligned new, calloc,
//!   posix_memalign), 5,000,000 of them.
//! - `thread_churn`: a C program whose 2 threads (param) each churn a 1,024-slot
//!   table of their own, 20,000,000 times: free a random slot, malloc 4 bytes to
//!   32 KiB (small sizes common, as glibc's malloc benchmark draws them), write the
//!   block. No block changes threads, so what it measures is what an allocator's
//!   threads share.
//!
//! The allocators take turns: after a warm-up run of each, every repetition runs the
//! program once on each, the first of each turn rotating, so that the medians compare
//! runs of the same stretch of the machine's time (as `Ctx::measure_interleaved` does
//! in process).
//!
//! A program or peer library that is missing is skipped with a note on stderr.

use super::{BenchResult, Ctx, Suite, Timing};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub const SUITE: Suite = Suite {
    name: "preload",
    steps: |_| PROGRAMS,
    run,
    report_lines,
};

/// The programs the suite runs (one progress step each).
const PROGRAMS: u64 = 7;

const WORK_PY: &str = include_str!("programs/work.py");
const MAP_CPP: &str = include_str!("programs/map.cpp");
const THREADS_C: &str = include_str!("programs/threads.c");
const FRONT_CPP: &str = include_str!("programs/front.cpp");
const CHURN_C: &str = include_str!("programs/churn.c");

/// The peers: a name and the places their library may be.
const PEERS: [(&str, &[&str]); 2] = [
    (
        "jemalloc",
        &[
            "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
            "/usr/lib64/libjemalloc.so.2",
            "/usr/lib/libjemalloc.so.2",
        ],
    ),
    (
        "mimalloc",
        &[
            "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2",
            "/usr/lib64/libmimalloc.so.2",
            "/usr/lib/libmimalloc.so.2",
        ],
    ),
];

struct Program {
    name: &'static str,
    param: u64,
    cmd: Vec<String>,
}

fn programs(dir: &Path) -> Vec<Program> {
    let mut out = Vec::new();
    let py = dir.join("work.py");
    if std::fs::write(&py, WORK_PY).is_ok() && which("python3") {
        out.push(Program {
            name: "python_json",
            param: 200_000,
            cmd: vec!["python3".into(), py.display().to_string()],
        });
    } else {
        eprintln!("kmem bench preload: python3 not found; python_json skipped");
    }
    let input = dir.join("sort-input.txt");
    let mut s = String::new();
    let mut x = 12345u64;
    for _ in 0..200_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{:x} line {}\n", x % 1_000_003, x % 97));
    }
    if std::fs::write(&input, s).is_ok() && which("sort") {
        out.push(Program {
            name: "sort",
            param: 200_000,
            cmd: vec!["sort".into(), input.display().to_string()],
        });
    }
    if which("sh") && Path::new("/bin/true").is_file() {
        out.push(Program {
            name: "shell_loop",
            param: 300,
            cmd: vec![
                "sh".into(),
                "-c".into(),
                "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i + 1)); done".into(),
            ],
        });
    }
    let c = dir.join("threads.c");
    if std::fs::write(&c, THREADS_C).is_ok() && which("cc") {
        out.push(Program {
            name: "gcc",
            param: 1,
            cmd: vec![
                "cc".into(),
                "-O2".into(),
                "-c".into(),
                "-o".into(),
                dir.join("threads.o").display().to_string(),
                c.display().to_string(),
            ],
        });
    } else {
        eprintln!("kmem bench preload: cc not found; gcc skipped");
    }
    match build(dir, "cc", "churn.c", CHURN_C) {
        Some(bin) => out.push(Program {
            name: "thread_churn",
            param: 2,
            cmd: vec![bin.display().to_string(), "2".into(), "20000000".into()],
        }),
        None => eprintln!("kmem bench preload: cc not found; thread_churn skipped"),
    }
    for (name, source, text, param, args) in [
        ("cpp_map", "map.cpp", MAP_CPP, 200_000, &[][..]),
        (
            "cpp_front_ends",
            "front.cpp",
            FRONT_CPP,
            5_000_000,
            &["5000000"][..],
        ),
    ] {
        match build(dir, "c++", source, text) {
            Some(bin) => out.push(Program {
                name,
                param,
                cmd: std::iter::once(bin.display().to_string())
                    .chain(args.iter().map(|a| a.to_string()))
                    .collect(),
            }),
            None => eprintln!("kmem bench preload: c++ not found; {name} skipped"),
        }
    }
    out
}

/// Writes the program `text` to `dir/source` and compiles it with `compiler -O2
/// -pthread` (`cc` or `c++`): the executable's path, or `None` when that failed.
fn build(dir: &Path, compiler: &str, source: &str, text: &str) -> Option<PathBuf> {
    let src = dir.join(source);
    let stem = source.rsplit_once('.').map_or(source, |(stem, _)| stem);
    let bin = dir.join(stem);
    let built = std::fs::write(&src, text).is_ok()
        && Command::new(compiler)
            .args(["-O2", "-pthread", "-o"])
            .arg(&bin)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
    built.then_some(bin)
}

fn which(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `lib` lies in a cargo `debug` profile directory.
fn is_debug_build(lib: &Path) -> bool {
    lib.parent()
        .and_then(Path::file_name)
        .is_some_and(|d| d == "debug")
}

/// The release build of a debug `lib` (`…/debug/x` → `…/release/x`), if there is one.
fn release_beside(lib: &Path) -> Option<PathBuf> {
    let dir = lib.parent()?;
    if !is_debug_build(lib) {
        return None;
    }
    let release = dir.parent()?.join("release").join(lib.file_name()?);
    release.is_file().then_some(release)
}

/// `lib`'s path and age, for the run's log (a library older than this `kmem` may be
/// a build of other code).
fn describe(lib: &Path) -> String {
    let age = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let exe = std::env::current_exe().ok();
    let older = match (age(lib), exe.as_deref().and_then(age)) {
        (Some(l), Some(e)) => e.duration_since(l).map(|d| d.as_secs()).unwrap_or(0),
        _ => 0,
    };
    if older > 60 {
        format!(
            "{} (built {older} s before this kmem: rebuild it with `cargo build --release -p kmem-malloc` if the code changed)",
            lib.display()
        )
    } else {
        lib.display().to_string()
    }
}

/// Whether a program run with `LD_PRELOAD=lib` has `lib` mapped (read from a
/// `cat /proc/self/maps` run that way).
fn preloads(lib: &Path) -> bool {
    let Ok(real) = std::fs::canonicalize(lib) else {
        return false;
    };
    let out = Command::new("cat")
        .arg("/proc/self/maps")
        .env("LD_PRELOAD", lib)
        .stderr(Stdio::null())
        .output();
    out.is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.ends_with(&*real.to_string_lossy()))
    })
}

/// Wall time of one run of `p` with `preload` (None: the system malloc).
fn time_once(p: &Program, preload: Option<&Path>) -> Option<f64> {
    let mut c = Command::new(&p.cmd[0]);
    c.args(&p.cmd[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c.env_remove("LD_PRELOAD");
    if let Some(lib) = preload {
        c.env("LD_PRELOAD", lib);
    }
    let t0 = Instant::now();
    let ok = c.status().ok()?.success();
    ok.then(|| t0.elapsed().as_nanos() as f64)
}

fn run(ctx: &Ctx) -> Vec<BenchResult> {
    let mut out = Vec::new();
    let dir = std::env::temp_dir().join(format!("kmem-preload-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_err() {
        eprintln!(
            "kmem bench preload: cannot make {}; suite skipped",
            dir.display()
        );
        return out;
    }
    // A `kmem` run from target/debug finds the debug library first: the release one
    // beside it is the one to time, where it was built.
    let found = crate::run::find_lib().map(|l| match release_beside(&l) {
        Some(r) if std::env::var_os("KMEM_LIB").is_none() => r,
        _ => l,
    });
    let kmem = match found {
        // A debug build found where the release one is missing would time kmem
        // unoptimised: named by KMEM_LIB, it is what was asked for.
        Ok(l) if is_debug_build(&l) && std::env::var_os("KMEM_LIB").is_none() => {
            eprintln!(
                "kmem bench preload: {} is a debug build (no release libkmem.so found); \
                 kmem skipped: run `cargo build --release -p kmem-malloc` first, or name \
                 the library with KMEM_LIB",
                l.display()
            );
            None
        }
        Ok(l) => {
            eprintln!("kmem bench preload: kmem is {}", describe(&l));
            Some(l)
        }
        Err(e) => {
            eprintln!("kmem bench preload: {e}; kmem skipped");
            None
        }
    };
    let mut libs: Vec<(&'static str, Option<PathBuf>)> = vec![("system", None)];
    if let Some(k) = kmem {
        libs.push(("kmem", Some(k)));
    }
    for (name, paths) in PEERS {
        match paths.iter().map(PathBuf::from).find(|p| p.is_file()) {
            Some(p) => libs.push((name, Some(p))),
            None => eprintln!("kmem bench preload: lib{name} is not installed; {name} skipped"),
        }
    }
    // A library the dynamic loader will not preload (wrong architecture, a missing
    // dependency) leaves the program on the system malloc with a warning on a stderr
    // nobody reads: its column would be glibc's time under another name.
    libs.retain(|(name, lib)| match lib {
        Some(l) if !preloads(l) => {
            eprintln!(
                "kmem bench preload: {} is not loaded by LD_PRELOAD here; {name} skipped",
                l.display()
            );
            false
        }
        _ => true,
    });
    let reps = if ctx.quick { 1 } else { 5 };
    for p in programs(&dir) {
        ctx.status(format!("preload {}", p.name));
        // One warm-up run each (page cache, dynamic linking); a malloc under which
        // the program fails is left out.
        let ok: Vec<bool> = libs
            .iter()
            .map(|(name, lib)| {
                let ok = time_once(&p, lib.as_deref()).is_some();
                if !ok {
                    eprintln!(
                        "kmem bench preload: {} failed under {name}; skipped",
                        p.name
                    );
                }
                ok
            })
            .collect();
        // Then the allocators take turns, a run each, the first of each turn rotating.
        let mut ns: Vec<Vec<f64>> = vec![Vec::new(); libs.len()];
        for rep in 0..reps {
            for k in 0..libs.len() {
                let i = (rep + k) % libs.len();
                if ok[i] {
                    let t = time_once(&p, libs[i].1.as_deref());
                    if t.is_none() {
                        eprintln!(
                            "kmem bench preload: a run of {} failed under {}; left out of its median",
                            p.name, libs[i].0
                        );
                    }
                    ns[i].extend(t);
                }
            }
        }
        for ((name, _), mut ns) in libs.iter().zip(ns) {
            if !ns.is_empty() {
                let t = Timing {
                    ns: super::timing::median(&mut ns),
                    cycles: None,
                    ops: 1,
                };
                out.push(BenchResult::time(p.name, name, p.param, "run", t));
            }
        }
        ctx.tick();
    }
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// kmem's time relative to each other malloc, per program.
fn report_lines(results: &[BenchResult]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("\nkmem time / other malloc's time (below 1: kmem faster)\n");
    let mut benches: Vec<&str> = results.iter().map(|r| r.bench).collect();
    benches.dedup();
    for b in benches {
        let ns = |a: &str| {
            results
                .iter()
                .find(|r| r.bench == b && r.allocator == a)
                .and_then(|r| r.ns)
        };
        let Some(k) = ns("kmem") else { continue };
        let _ = write!(out, "{b:>14}:");
        for peer in ["system", "jemalloc", "mimalloc"] {
            if let Some(v) = ns(peer) {
                let _ = write!(out, "  vs {peer} {:.2}", k / v);
            }
        }
        let _ = writeln!(out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `thread_churn`'s program builds and runs to the end (a short run) on the
    /// system's malloc and, where libkmem.so has been built, on kmem's.
    #[test]
    fn thread_churn_builds_and_runs() {
        if !which("cc") {
            eprintln!("no cc: thread_churn not built");
            return;
        }
        let dir = std::env::temp_dir().join(format!("kmem-churn-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = build(&dir, "cc", "churn.c", CHURN_C).expect("churn.c compiles");
        let p = Program {
            name: "thread_churn",
            param: 2,
            cmd: vec![bin.display().to_string(), "2".into(), "200000".into()],
        };
        assert!(time_once(&p, None).is_some(), "runs on the system malloc");
        match crate::run::find_lib() {
            Ok(lib) => assert!(time_once(&p, Some(&lib)).is_some(), "runs on kmem"),
            Err(e) => eprintln!("{e}: thread_churn not run on kmem"),
        }
        // Bad arguments are refused, not run.
        let bad = Program {
            cmd: vec![bin.display().to_string(), "0".into(), "10".into()],
            ..p
        };
        assert!(time_once(&bad, None).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file the loader cannot preload is found out before its column is filled
    /// with the system malloc's times; a library it does preload passes; a debug
    /// build is told apart by its directory.
    #[test]
    fn libraries_are_checked_before_they_are_timed() {
        let not_a_lib = std::env::temp_dir().join(format!("kmem-not-a-lib-{}", std::process::id()));
        std::fs::write(&not_a_lib, b"not an ELF file").unwrap();
        assert!(!preloads(&not_a_lib));
        let _ = std::fs::remove_file(&not_a_lib);
        match crate::run::find_lib() {
            Ok(lib) => assert!(preloads(&lib), "{} preloads", lib.display()),
            Err(e) => eprintln!("{e}: the check of a real library not run"),
        }
        assert!(is_debug_build(Path::new("/x/target/debug/libkmem.so")));
        assert!(!is_debug_build(Path::new("/x/target/release/libkmem.so")));
    }
}
