//! libkmem.so under real programs: C test programs compiled here with `cc`, misuse
//! that must abort with a report, threads, fork, and real programs (python3, sort,
//! gcc, a C++ program) whose output must match a run without the preload.

mod common;

use common::{lib, text, tmp};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where the C program `name` lives: this crate's `tests/c`, or, for the programs the
/// `preload` benchmark runs too (`threads.c`, `map.cpp`, `work.py`), the CLI's
/// `src/bench/programs`, their one home.
fn source(name: &str) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let own = here.join("tests/c").join(name);
    if own.exists() {
        own
    } else {
        here.join("../kmem-cli/src/bench/programs").join(name)
    }
}

/// Compiles a test program (see [`source`]) with cc (or c++ for .cpp); returns its path.
fn compile(name: &str) -> PathBuf {
    compile_with(name, &[])
}

/// As [`compile`], with extra inputs (libkmem.so itself, for programs that call
/// kmem's own functions). Each call writes its own executable: tests run in parallel,
/// and one test's compiler rewriting a program another test is about to run makes
/// that run fail (EACCES or ETXTBSY).
fn compile_with(name: &str, extra: &[&Path]) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static BUILT: AtomicUsize = AtomicUsize::new(0);
    let src = source(name);
    let n = BUILT.fetch_add(1, Ordering::Relaxed);
    let out = tmp().join(format!(
        "{}_{}_{n}",
        name.replace('.', "_"),
        std::process::id()
    ));
    let cpp = name.ends_with(".cpp");
    let status = Command::new(if cpp { "c++" } else { "cc" })
        .args(["-O1", "-g", "-rdynamic", "-pthread", "-w", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .status()
        .expect("a C compiler");
    assert!(status.success(), "compiling {name}");
    out
}

fn run_with(prog: &Path, args: &[&str], preload: bool, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(prog);
    c.args(args);
    if preload {
        c.env("LD_PRELOAD", lib());
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn every_function_and_edge_case() {
    let prog = compile("api.c");
    let out = run_with(&prog, &[], true, &[]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{}\n{err}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "api ok\n");
    // malloc_stats printed kmem's report: the program really ran on kmem.
    assert!(err.contains("slabinfo - version: 2.1"), "{err}");
    assert!(err.contains("Node 0, zone   Normal"));
    // Per-CPU rseq mode's own malloc path and restartable pop: the same checks.
    let out = run_with(&prog, &[], true, &[("KMEM_PERCPU", "cpu-rseq")]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{}\n{err}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "api ok\n");
}

/// libkmem.so's `malloc`, `free` and `operator new` start on a 64-byte line
/// (`hot_entry_section`): a preloaded program's loops then run their fast paths from
/// as few lines as their length allows, whatever else the build moved.
#[test]
fn the_hot_entry_points_start_on_a_line() {
    let prog = compile_with("entry_align.c", &[]);
    let out = run_with(&prog, &[], true, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got = text(&out.stdout);
    assert_eq!(got, "malloc 0 kmem\nfree 0 kmem\n_Znwm 0 kmem\n", "{got}");
}

#[test]
fn misuse_is_reported_and_aborts() {
    misuse_cases(&[], false);
}

#[test]
fn misuse_is_reported_and_aborts_in_per_cpu_rseq_mode() {
    // Per-CPU rseq mode's front-end fast paths (a free goes from the object's page
    // straight to the CPU's spare sheaf, in a restartable push that checks the
    // object's start) refuse the same pointers. Pinned to one CPU, so that the two
    // frees of "double" meet on one sheaf, as two frees on one thread do.
    misuse_cases(&[("KMEM_PERCPU", "cpu-rseq")], true);
}

/// `bad.c`'s cases under the shim with `env`, the program pinned to one CPU if
/// `pin`: each reported in the kernel's format, then SIGABRT.
fn misuse_cases(env: &[(&str, &str)], pin: bool) {
    let prog = compile("bad.c");
    let cases = [
        ("stack", "not allocated by kmem"),
        ("interior", "Invalid object pointer"),
        ("double", "Object already free"),
        ("garbage", "not allocated by kmem"),
        ("realloc", "not allocated by kmem"),
        ("realloc-freed", "Object already free"),
        ("realloc-freed-big", "Object already free"),
    ];
    for (what, reason) in cases {
        let out = if pin {
            pinned(&prog, &[what], env)
        } else {
            run_with(&prog, &[what], true, env)
        };
        let err = text(&out.stderr);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{what}: {err}");
        assert!(err.contains("=============================================================================\nBUG kmalloc"), "{what}: {err}");
        assert!(err.contains(reason), "{what}: {err}");
        assert!(err.contains(" 0x"), "the report names the address: {err}");
        assert!(
            err.contains("kmem: bad pointer passed to free or realloc"),
            "{err}"
        );
    }
    // The same program without misuse exits cleanly.
    assert!(run_with(&prog, &["none"], true, env).status.success());
}

/// [`run_with`] (preloaded) with the program pinned to the first CPU this process
/// may run on.
fn pinned(prog: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    use std::os::unix::process::CommandExt;
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for this thread.
    let cpu = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .expect("a CPU")
    };
    let mut c = Command::new(prog);
    c.args(args).env("LD_PRELOAD", lib());
    for (k, v) in env {
        c.env(k, v);
    }
    // SAFETY: between fork and exec the closure only calls sched_setaffinity, which
    // is async-signal-safe, on a set built on its own stack.
    unsafe {
        c.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c.output().unwrap()
}

#[test]
fn threads_free_each_others_memory() {
    let prog = compile("threads.c");
    let out = run_with(&prog, &[], true, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "threads ok\n");
}

#[test]
fn fork_from_a_multithreaded_parent() {
    let prog = compile("fork.c");
    // 1,000 forks under the program's alarm watchdog (about 1.5 s); 10,000 long.
    let rounds = if std::env::var_os("KMEM_STRESS_SECS").is_some() {
        "10000"
    } else {
        "1000"
    };
    let out = run_with(&prog, &[rounds], true, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "fork ok\n");
}

/// Faults per fork of the parent and of a child that exits at once, from
/// `fork_faults.c`'s line (`threaded`: with a second thread alive during the forks).
fn fork_faults(preload: bool, threaded: bool) -> (u64, u64) {
    let prog = compile("fork_faults.c");
    let args: &[&str] = if threaded {
        &["50", "threaded"]
    } else {
        &["50"]
    };
    let out = run_with(&prog, args, preload, &[("KMEM_THP", "off")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let line = text(&out.stdout);
    let mut n = line
        .split_whitespace()
        .filter_map(|w| w.parse::<u64>().ok());
    (n.next().unwrap(), n.next().unwrap())
}

/// A child of a kmem process that exits (or execs) at once writes to none of the
/// allocator's locks: the fork handlers free them all by moving on the locks' fork
/// generation. Unlocked one by one, each cache's node locks (a page each) cost the
/// child about 55 copy-on-write faults more than glibc's child: that is what this
/// would catch (page faults are counted by the kernel: no timing). The parent's
/// faults are bounded too: in a threaded process they are the prepare handler's
/// writes to the locks, which the last fork left write-protected.
#[test]
fn a_forked_child_copies_no_page_for_the_allocators_locks() {
    let (glibc_parent, glibc_child) = fork_faults(false, true);
    let (parent, child) = fork_faults(true, true);
    assert!(
        child <= glibc_child + 15,
        "a child faults {child} times (glibc's: {glibc_child}); parent {parent}"
    );
    // kmalloc's caches keep their node states (and locks) in a node-major table,
    // four pages for node 0, not a page a cache (55; 18 with node 0's state inside
    // each cache; 10 now).
    assert!(
        parent <= glibc_parent + 20,
        "the parent faults {parent} times a fork (glibc's: {glibc_parent})"
    );
}

/// A single-threaded process's fork takes none of the allocator's locks (no other
/// thread can be inside it), as glibc's own malloc does: its parent writes no page of
/// the heap, so a shell forking once a command pays no copy-on-write fault for kmem.
/// Taking the locks costs about ten faults a fork here (the test above).
#[test]
fn a_single_threaded_fork_takes_no_allocator_lock() {
    let (glibc_parent, glibc_child) = fork_faults(false, false);
    let (parent, child) = fork_faults(true, false);
    assert!(
        parent <= glibc_parent + 2,
        "the parent faults {parent} times a fork (glibc's: {glibc_parent})"
    );
    assert!(
        child <= glibc_child + 15,
        "a child faults {child} times (glibc's: {glibc_child})"
    );
}

/// libkmem.so links the unwinder in (`build.rs`) where the C compiler has
/// `libgcc_eh.a`: a preloaded C program maps no libgcc_s, and a C++ program's
/// exceptions (its own libgcc_s) still work (`cxx_operators_are_kmems_...`).
#[test]
fn a_preloaded_program_loads_no_libgcc_s() {
    let out = Command::new("cc")
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .expect("a C compiler");
    let eh = PathBuf::from(text(&out.stdout).trim());
    if !(eh.is_absolute() && eh.is_file()) {
        // No static unwinder here: libkmem.so needs libgcc_s, as Rust's cdylibs do.
        return;
    }
    let prog = compile("maps.c");
    let with = run_with(&prog, &[], true, &[]);
    assert!(with.status.success());
    let maps = text(&with.stdout);
    assert!(maps.contains("libkmem"), "{maps}");
    assert!(!maps.contains("libgcc_s"), "{maps}");
}

#[test]
fn kmem_settings_work_under_the_shim() {
    let prog = compile("api.c");
    let stats = tmp().join("shim-stats.txt");
    let out = run_with(
        &prog,
        &[],
        true,
        &[
            ("KMEM_STATS", stats.to_str().unwrap()),
            ("KMEM_MAX", "bogus"),
        ],
    );
    assert!(out.status.success());
    assert!(text(&out.stderr).contains("kmem: ignoring KMEM_MAX=bogus"));
    let report = std::fs::read_to_string(&stats).unwrap();
    assert!(report.starts_with("slabinfo - version: 2.1\n"));
    assert!(report.contains("\npgalloc_normal "));
    // A bounded heap: a 64 MiB request fails cleanly under KMEM_MAX=32M.
    let out = run_with(
        Path::new("python3"),
        &["-c", "import ctypes; l=ctypes.CDLL(None); l.malloc.restype=ctypes.c_void_p; print(l.malloc(40<<20) is None, l.malloc(1<<20) is not None)"],
        true,
        &[("KMEM_MAX", "32M")],
    );
    assert_eq!(text(&out.stdout), "True True\n", "{}", text(&out.stderr));
}

/// Runs a real program with and without the preload; their outputs must match.
fn same_output(prog: &Path, args: &[&str], stdin_file: Option<&Path>) -> String {
    let go = |preload: bool| {
        let mut c = Command::new(prog);
        c.args(args);
        if preload {
            c.env("LD_PRELOAD", lib());
        }
        if let Some(f) = stdin_file {
            c.stdin(std::fs::File::open(f).unwrap());
        }
        c.output().unwrap()
    };
    let a = go(false);
    let b = go(true);
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert!(b.status.success(), "under kmem: {}", text(&b.stderr));
    assert_eq!(text(&a.stdout), text(&b.stdout));
    text(&b.stdout)
}

/// A Rust program on `std::alloc::System` (`tests/rust/system_alloc.rs`), built here
/// with rustc: every allocation is `malloc`, which must be 16-byte aligned above 8
/// bytes as glibc's is (Rust's `System` counts on it; kmem's 8-aligned 24-, 40- and
/// 56-byte classes once made its hashbrown tables fault — cargo crashed at start).
#[test]
fn a_rust_program_on_the_system_allocator_runs_preloaded() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rust/system_alloc.rs");
    let out = tmp().join(format!("system_alloc_{}", std::process::id()));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let status = Command::new(rustc)
        .args(["-O", "--edition", "2021", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("rustc");
    assert!(status.success(), "compiling system_alloc.rs");
    let sum = same_output(&out, &[], None);
    assert!(sum.trim().parse::<u128>().is_ok(), "{sum}");
}

#[test]
fn python_builds_dicts_and_round_trips_json() {
    let script = source("work.py");
    let out = same_output(Path::new("python3"), &[script.to_str().unwrap()], None);
    assert!(out.starts_with(char::is_numeric));
}

#[test]
fn sort_of_a_large_file() {
    let input = tmp().join("sort-input.txt");
    let mut s = String::new();
    let mut x = 12345u64;
    for _ in 0..200_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{:x} line {}\n", x % 1_000_003, x % 97));
    }
    std::fs::write(&input, s).unwrap();
    let out = same_output(Path::new("sort"), &[input.to_str().unwrap()], None);
    assert_eq!(out.lines().count(), 200_000);
}

#[test]
fn gcc_compiles_a_program() {
    let src = source("threads.c");
    let obj = tmp().join("gcc-under-kmem.o");
    let status = Command::new("cc")
        .args(["-O2", "-c", "-o"])
        .arg(&obj)
        .arg(&src)
        .env("LD_PRELOAD", lib())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(std::fs::metadata(&obj).unwrap().len() > 0);
}

#[test]
fn cpp_map_and_strings() {
    let prog = compile("map.cpp");
    let out = same_output(&prog, &[], None);
    assert!(out.starts_with("50000 "), "{out}");
}

/// `bench preload`'s `cpp_front_ends` (new, new[], aligned new, calloc,
/// posix_memalign and their frees on 64 live slots) gives the same checksum on kmem.
#[test]
fn cpp_front_ends_same_output() {
    let prog = compile("front.cpp");
    let out = same_output(&prog, &["200000"], None);
    assert!(out.starts_with("200000 "), "{out}");
}

/// C++'s global operators are kmem's own (`cxx.rs`): every form resolves to
/// libkmem.so, round trips with its alignment, and keeps C++'s failure semantics
/// (`std::bad_alloc`, null from the nothrow forms, the new-handler's call) by
/// handing failures to the C++ runtime; the output matches a run without kmem.
#[test]
fn cxx_operators_are_kmems_and_fail_as_cxx_does() {
    let prog = compile("cxx_new.cpp");
    let name = lib().file_name().unwrap().to_str().unwrap().to_owned();
    let out = run_with(&prog, &["where"], true, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines = text(&out.stdout);
    assert_eq!(lines.lines().count(), 8, "{lines}");
    for l in lines.lines() {
        assert!(l.ends_with(&format!(" {name}")), "{l}: not kmem's\n{lines}");
    }
    // Without the preload the C++ runtime defines them: the check can tell.
    let plain = text(&run_with(&prog, &["where"], false, &[]).stdout);
    assert!(!plain.contains(&name), "{plain}");
    for env in [
        &[][..],
        &[("KMEM_PERCPU", "cpu-rseq")][..],
        &[("KMEM_DEBUG", "FZPU")][..],
    ] {
        for what in ["forms", "fail"] {
            let out = run_with(&prog, &[what], true, env);
            assert!(
                out.status.success(),
                "{what} {env:?}: {}",
                text(&out.stderr)
            );
            let expect = text(&run_with(&prog, &[what], false, &[]).stdout);
            assert_eq!(text(&out.stdout), expect, "{what} {env:?}");
        }
    }
    let fail = text(&run_with(&prog, &["fail"], true, &[]).stdout);
    assert_eq!(
        fail, "bad_alloc 3\nnothrow null\nhandler 1 then bad_alloc\n",
        "huge requests throw, return null, call the handler once"
    );
}

/// With kmem's own `new`, allocation sites start at the program's frame: kmemleak
/// names the function that leaked, not libstdc++'s `operator new`.
#[test]
fn cxx_leaks_are_reported_at_the_programs_own_site() {
    let prog = compile("cxx_new.cpp");
    let out = run_with(&prog, &["leak"], true, &[("KMEM_LEAKS", "1")]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Three-word nodes, counted as asked for: 24 bytes (of 32-byte objects) each.
    assert!(err.contains("100 object(s), 2400 bytes"), "{err}");
    let site = err
        .lines()
        .skip_while(|l| !l.contains("100 object(s)"))
        .nth(1)
        .unwrap_or_default();
    assert!(site.contains("leak_nodes"), "first frame: {site}\n{err}");
    // The C++ runtime the program loaded demangles it (`_ZL10leak_nodesv`).
    assert!(site.contains("leak_nodes()+0x"), "demangled: {site}\n{err}");
}

/// `delete` checks the pointer as `free` does: a double delete is reported in the
/// kernel's format, then the program aborts.
#[test]
fn cxx_double_delete_is_reported_and_aborts() {
    use std::os::unix::process::ExitStatusExt;
    let prog = compile("cxx_new.cpp");
    let out = run_with(&prog, &["double"], true, &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{err}");
    assert!(err.contains("BUG kmalloc-8"), "{err}");
    assert!(err.contains("Object already free"), "{err}");
}

#[test]
fn slub_debug_through_the_shim() {
    let prog = compile("debug.c");
    // (past-request: 20 bytes of a 32-byte object, whose red zone starts at the 20.)
    let cases = [
        ("past-end", "Redzone overwritten", "kmalloc-64"),
        ("past-request", "kmalloc Redzone overwritten", "kmalloc-32"),
        ("before-start", "Redzone overwritten", "kmalloc-64"),
        ("after-free", "Poison overwritten", "kmalloc-64"),
        ("double-head", "Object already free", "kmalloc-64"),
        ("double-nonhead", "Object already free", "kmalloc-64"),
        ("freepointer", "Freepointer corrupt", "kmalloc-64"),
        ("interior", "Invalid object pointer", "kmalloc-64"),
    ];
    use std::os::unix::process::ExitStatusExt;
    for (what, reason, cache) in cases {
        // The default for C programs under slub_debug: the report, then SIGABRT.
        let out = run_with(&prog, &[what], true, &[("KMEM_DEBUG", "FZPU")]);
        let err = text(&out.stderr);
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{what}: {err}");
        assert!(err.contains(reason), "{what}: {err}");
        assert!(
            err.contains("kmem: aborting after the report above (KMEM_ON_ERROR=abort)")
                || err.contains("kmem: bad pointer passed to free"),
            "{what}: {err}"
        );
        assert_ne!(
            text(&out.stdout),
            "done\n",
            "{what}: stopped before the end"
        );
        // KMEM_ON_ERROR=continue: the kernel's way, quarantine and go on.
        let out = run_with(
            &prog,
            &[what],
            true,
            &[("KMEM_DEBUG", "FZPU"), ("KMEM_ON_ERROR", "continue")],
        );
        let err = text(&out.stderr);
        assert!(out.status.success(), "{what}: the program goes on\n{err}");
        assert_eq!(text(&out.stdout), "done\n", "{what}: {err}");
        let bug = format!("BUG {cache} (Not tainted): {reason}");
        assert!(err.contains(&bug), "{what}: {err}");
        assert!(err.contains(reason), "{what}: {err}");
        assert!(err.contains("Slab 0x"), "{what}: {err}");
    }
    // A write after free that no later allocation notices: validation at exit finds
    // it (and, by default for a C program, aborts there, after `main` returned).
    let out = run_with(
        &prog,
        &["after-free-unseen"],
        true,
        &[("KMEM_DEBUG", "FZPU")],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{err}");
    assert!(err.contains("Poison overwritten"), "{err}");
    let out = run_with(
        &prog,
        &["after-free-unseen"],
        true,
        &[("KMEM_DEBUG", "FZPU"), ("KMEM_ON_ERROR", "continue")],
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(text(&out.stdout), "done\n", "{err}");
    assert_eq!(err.matches("Poison overwritten").count(), 1, "{err}");
    assert!(
        err.contains("BUG kmalloc-3k (Not tainted): Poison overwritten"),
        "{err}"
    );
    assert!(
        err.contains("kmem: validate at exit found 1 problem(s)"),
        "{err}"
    );
    // The same errors without debugging: the immediate double free still aborts.
    let out = run_with(&prog, &["double-head"], true, &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT));
    // A pointer that belongs to no cache is reported and aborts, debugging or not.
    let out = run_with(&prog, &["foreign"], true, &[("KMEM_DEBUG", "FZPU")]);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT));
    let err = text(&out.stderr);
    assert!(err.contains("not allocated by kmem"), "{err}");
    // `malloc(0)`'s block (usable size 0 under Z and U) is no foreign pointer to realloc.
    for debug in ["FZPU", "U", "Z"] {
        let out = run_with(&prog, &["realloc-zero"], true, &[("KMEM_DEBUG", debug)]);
        let err = text(&out.stderr);
        assert!(out.status.success(), "{debug}: {err}");
        assert_eq!(text(&out.stdout), "done\n", "{debug}: {err}");
    }
    // The tracks name the caller in the program.
    let out = run_with(
        &prog,
        &["past-end"],
        true,
        &[
            ("KMEM_DEBUG", "FZPU,kmalloc-64"),
            ("KMEM_ON_ERROR", "continue"),
        ],
    );
    let err = text(&out.stderr);
    assert!(err.contains("INFO: Allocated in main+0x"), "{err}");
}

#[test]
fn memory_cgroups_through_the_c_api() {
    let lib = lib();
    let prog = compile_with("memcg.c", &[&lib]);
    let out = run_with(&prog, &[], true, &[]);
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{o}\n{e}");
    assert_eq!(o, "memcg ok\n");
}

#[test]
fn threads_and_fork_in_per_cpu_mode() {
    // One CPU area per CPU, shared by the threads on it: restartable sequences (the
    // default `cpu` here), the double-word CAS, or the area's lock for everything.
    let threads = compile("threads.c");
    let fork = compile("fork.c");
    let lib = lib();
    let memcg = compile_with("memcg.c", &[&lib]);
    for mode in ["cpu", "cpu-rseq", "cpu-cas", "cpu-lock"] {
        let env = [("KMEM_PERCPU", mode)];
        let out = run_with(&threads, &[], true, &env);
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "threads ok\n");
        let out = run_with(&fork, &["300"], true, &env);
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "fork ok\n");
        let out = run_with(&memcg, &[], true, &env);
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "memcg ok\n");
    }
    // Without glibc's rseq registration, cpu-rseq falls back (and says so).
    let env = [
        ("KMEM_PERCPU", "cpu-rseq"),
        ("GLIBC_TUNABLES", "glibc.pthread.rseq=0"),
    ];
    let out = run_with(&threads, &[], true, &env);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "threads ok\n");
    assert!(
        text(&out.stderr).contains("no rseq registration here"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_preload_without_address_space_says_why_once() {
    // Under a 200 MB address-space limit the heap cannot reserve its span: one line
    // names the cause, and the program's allocations fail (ls gives up).
    let out = Command::new("sh")
        .args(["-c", "ulimit -v 200000 && LD_PRELOAD=\"$0\" ls /"])
        .arg(lib())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("kmem:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("kmem: cannot reserve ")
            && lines[0].ends_with("; allocations will fail"),
        "{err}"
    );
    assert!(!out.status.success(), "ls cannot allocate: {err}");
}

/// `KMEM_LEAKS=1`: at exit, the objects nothing reachable points to, by allocation site with
/// counts and requested bytes, most bytes first; memory kept through globals is
/// counted as still referenced, not reported. Without it: no report.
#[test]
fn leaks_are_reported_by_allocation_site_at_exit() {
    let prog = compile("leaks.c");
    let out = run_with(&prog, &[], true, &[("KMEM_LEAKS", "1")]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(text(&out.stdout), "done\n");
    assert!(
        err.contains(
            "kmemleak: 15 unreferenced object(s), 9488 bytes, from 3 allocation site(s)\n"
        ),
        "{err}"
    );
    // Each site: its header line, then its stack starting at the leaking function.
    let site = |header: &str, function: &str| -> usize {
        let at = err
            .find(header)
            .unwrap_or_else(|| panic!("no `{header}` in {err}"));
        let next = err[at..].lines().nth(1).unwrap_or("");
        assert!(
            next.starts_with(&format!("    {function}+0x")),
            "{header} names {next:?}\n{err}"
        );
        at
    };
    let large = site(
        "kmemleak: 3 object(s), 9000 bytes (size 3000,",
        "leak_large",
    );
    // malloc(24) takes kmalloc-32: 16-byte aligned, as glibc's.
    let small = site("kmemleak: 7 object(s), 168 bytes (size 24,", "leak_small");
    // A dropped list: every node is a leak, reached only from leaked nodes.
    let chain = site("kmemleak: 5 object(s), 320 bytes (size 64,", "leak_chain");
    assert!(large < chain && chain < small, "most bytes first: {err}");
    // The 10 list nodes and the buffer are reachable from globals: not leaks.
    let kept: u64 = err
        .split("kmemleak: still referenced (kept on purpose, not leaks): ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no kept count in {err}"));
    assert!(kept >= 11, "{err}");
    assert!(
        !err.contains("keep+0x"),
        "kept memory reported as a leak: {err}"
    );
    // Off by default.
    let out = run_with(&prog, &[], true, &[]);
    assert!(out.status.success());
    assert!(!text(&out.stderr).contains("kmemleak"));
}

/// KFENCE with every allocation sampled (`KMEM_KFENCE=all`): an overflow and an
/// underflow fault on the guard pages, a use after free faults on the freed page, a
/// double free and a damaged canary are reported at the free — each in KFENCE's
/// format, then the program stops with SIGABRT.
#[test]
fn kfence_catches_out_of_bounds_and_use_after_free() {
    use std::os::unix::process::ExitStatusExt;
    let prog = compile("kfence.c");
    let cases = [
        (
            "over",
            "BUG: KFENCE: out-of-bounds write in main+",
            "1B right of kfence-#",
        ),
        (
            "under",
            "BUG: KFENCE: out-of-bounds write in main+",
            "1B left of kfence-#",
        ),
        (
            "uaf",
            "BUG: KFENCE: use-after-free write in main+",
            "freed by task ",
        ),
        (
            "double",
            "BUG: KFENCE: invalid free in main+",
            "Invalid free of 0x",
        ),
        (
            "canary",
            "BUG: KFENCE: memory corruption in main+",
            "Corrupted memory at 0x",
        ),
    ];
    for (what, bug, detail) in cases {
        let out = run_with(&prog, &[what], true, &[("KMEM_KFENCE", "all")]);
        let err = text(&out.stderr);
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{what}: {err}");
        assert!(err.contains(bug) && err.contains(detail), "{what}: {err}");
        assert!(
            err.contains(", size=32, cache=kmalloc-32\n"),
            "{what}: {err}"
        );
        assert!(err.contains("allocated by task "), "{what}: {err}");
        assert!(!text(&out.stdout).contains("survived"), "{what}");
    }
    // An object damaged and never freed: the check at exit finds it, after the
    // program's own end (only the sampled slots ever used are read).
    let out = run_with(&prog, &["exit"], true, &[("KMEM_KFENCE", "all")]);
    let err = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "exit: {err}");
    assert!(text(&out.stdout).contains("survived"), "exit: {err}");
    assert!(
        err.contains("BUG: KFENCE: memory corruption") && err.contains("Corrupted memory at 0x"),
        "exit: {err}"
    );
    // Without KFENCE the same overflow goes unnoticed (what the pool is for).
    let out = run_with(&prog, &["over"], true, &[("KMEM_KFENCE", "off")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A program with its own SIGSEGV handler keeps it working: with samples taken (and
/// kmem's handler installed, chaining to the program's) and without.
#[test]
fn programs_with_their_own_sigsegv_handler_still_work() {
    let prog = compile("kfence.c");
    let out = run_with(&prog, &["handler"], true, &[("KMEM_KFENCE", "20")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "recovered 1 1 chained 1\n");
    let out = run_with(&prog, &["handler"], true, &[("KMEM_KFENCE", "off")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "recovered 1 1 chained 0\n");
    // Without a handler of its own, a SIGSEGV sent to the program still ends it once
    // kmem's handler is installed (the default action is restored and the signal
    // raised again).
    use std::os::unix::process::ExitStatusExt;
    let out = run_with(&prog, &["sent"], true, &[("KMEM_KFENCE", "1")]);
    assert_eq!(text(&out.stdout), "kmem handler 1\n");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "{}",
        text(&out.stderr)
    );
}

/// KFENCE's first sample in a C program without libgcc_s (`first_sample.c`): the
/// sample, armed long before a small allocation takes it, loads glibc's unwinder from
/// inside malloc, and the program runs on — with a library `dlopen`ed after it too.
/// (A second sample armed inside the first one's dlopen stopped 2–3 runs in 8 with
/// ld.so's "Inconsistency detected" assertion or the half-loaded unwinder's abort.)
#[test]
fn the_first_sample_loads_the_unwinder_safely() {
    let prog = compile("first_sample.c");
    for run in 0..6 {
        let args: &[&str] = if run % 2 == 0 { &["libm.so.6"] } else { &[] };
        let out = run_with(&prog, args, true, &[("KMEM_KFENCE", "30")]);
        let err = text(&out.stderr);
        assert!(out.status.success(), "run {run}: {:?}\n{err}", out.status);
        assert_eq!(text(&out.stdout), "ok sampled 1\n", "run {run}: {err}");
    }
}

/// The heap-misuse battery (`battery.c`): every case at 8 B, 4 KiB and 256 KiB under
/// kmem's defaults, under KFENCE sampling every allocation, and under slub_debug
/// `FZPU`, against glibc in the same run. kmem's outcomes are pinned (`far`, a write
/// 1 MiB past the end, lands wherever the layout puts it, so it is shown, not pinned);
/// glibc's are shown. The markdown table (README, "What kmem catches") is printed.
#[test]
fn misuse_battery_against_glibc() {
    let prog = compile("battery.c");
    let cases = [
        "over1",
        "over32",
        "under1",
        "under32",
        "far",
        "uaf",
        "double",
        "double_delayed",
        "double_interleaved",
        "invalid",
        "unaligned",
    ];
    let sizes = ["8", "4096", "262144"];
    // Expected for kmem, per case: defaults, KFENCE=all, FZPU; one letter per size:
    // c caught (report, then stopped), r reported (went on), x crashed (no report),
    // m missed.
    let expected: [(&str, [&str; 3]); 11] = [
        ("over1", ["mmm", "ccm", "ccc"]),
        ("over32", ["mmm", "ccm", "ccc"]),
        ("under1", ["mmm", "ccm", "ccc"]),
        ("under32", ["mmm", "ccm", "ccc"]),
        ("far", ["???", "???", "???"]),
        ("uaf", ["mmm", "ccm", "ccc"]),
        ("double", ["ccc", "ccc", "ccc"]),
        ("double_delayed", ["ccc", "ccc", "ccc"]),
        ("double_interleaved", ["mmm", "ccm", "ccc"]),
        ("invalid", ["ccc", "ccc", "ccc"]),
        ("unaligned", ["ccc", "ccc", "ccc"]),
    ];
    let outcome = |preload: bool, env: &[(&str, &str)], case: &str, size: &str| -> char {
        let mut env = env.to_vec();
        env.push(("KMEM_LIVE", "off"));
        let out = run_with(&prog, &[case, size], preload, &env);
        let reported = !out.stderr.is_empty();
        match (out.status.code().is_none(), reported) {
            (true, true) => 'c',
            (true, false) => 'x',
            (false, true) => 'r',
            (false, false) => 'm',
        }
    };
    type Mode<'a> = (&'a str, bool, &'a [(&'a str, &'a str)]);
    let modes: [Mode<'_>; 4] = [
        ("glibc", false, &[]),
        ("kmem", true, &[]),
        ("kmem KMEM_KFENCE=all", true, &[("KMEM_KFENCE", "all")]),
        ("kmem KMEM_DEBUG=FZPU", true, &[("KMEM_DEBUG", "FZPU")]),
    ];
    let word = |c: char| match c {
        'c' => "caught",
        'r' => "reported",
        'x' => "crashed",
        _ => "missed",
    };
    let mut table = String::from("| case (8 B / 4 KiB / 256 KiB) |");
    for (name, _, _) in &modes {
        table += &format!(" {name} |");
    }
    table += "\n|---|---|---|---|---|\n";
    let mut wrong = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        table += &format!("| {case} |");
        for (m, (_, preload, env)) in modes.iter().enumerate() {
            let got: String = sizes
                .iter()
                .map(|size| outcome(*preload, env, case, size))
                .collect();
            if m > 0 {
                let want = expected[i].1[m - 1];
                if want != "???" && got != want {
                    wrong.push(format!(
                        "{case} under {}: {got}, expected {want}",
                        modes[m].0
                    ));
                }
            }
            let cells: Vec<&str> = got.chars().map(word).collect();
            table += &format!(" {} |", cells.join(" / "));
        }
        table += "\n";
    }
    println!("{table}");
    assert!(wrong.is_empty(), "{wrong:#?}\n{table}");
}
