//! `kmem run [OPTIONS] -- CMD ARGS…`: runs a program on kmem via `LD_PRELOAD`, with
//! the libkmem.so [`find_lib`] finds (see there for where it looks). The options are
//! the `KMEM_*` environment variables as flags ([`RunOptions`]), each value checked
//! with the heap's own parser before the program starts.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The library's file names: cargo's output, then the SONAME an installed copy has.
const LIB_NAMES: [&str; 2] = ["libkmem.so", "libkmem.so.0"];

/// What to do when the library is not found (one line).
pub const NOT_FOUND_HELP: &str = "build it with `cargo build --release -p kmem-malloc` in kmem's source tree, then copy target/release/libkmem.so next to the kmem executable (or into a lib directory beside its bin directory, or /usr/local/lib), or set KMEM_LIB to its path";

/// Where libkmem.so is. `kmem` does not embed the library (a binary crate cannot
/// depend on a cdylib's artifact on stable cargo, and `cargo install` builds only the
/// binary), so it looks, in order, for `libkmem.so` or `libkmem.so.0`:
/// 1. `$KMEM_LIB` (a file; an error if it is not one);
/// 2. next to the `kmem` executable (`cp target/release/libkmem.so ~/.cargo/bin/`
///    after `cargo install`);
/// 3. in `../lib` from the executable's directory (`~/.cargo/lib`, `/usr/local/lib`
///    for `/usr/local/bin/kmem`, a `--root` prefix's lib);
/// 4. in a cargo target directory: the one the executable sits in (release, then
///    debug: `cargo run`, tests), then `$CARGO_TARGET_DIR/{release,debug}`;
/// 5. in the standard library directories (`/usr/local/lib`, `/usr/lib/<multiarch>`,
///    `/usr/lib64`, `/usr/lib`).
///
/// Otherwise an error whose text says where to get it ([`NOT_FOUND_HELP`]).
pub fn find_lib() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("KMEM_LIB") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("KMEM_LIB={} is not a file", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    candidate_dirs(&exe)
        .iter()
        .flat_map(|d| LIB_NAMES.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "libkmem.so not found (not in KMEM_LIB, next to {}, in ../lib, a cargo target directory or the system library directories); {NOT_FOUND_HELP}",
                exe.display()
            )
        })
}

/// The directories [`find_lib`] searches after `KMEM_LIB`, in order.
fn candidate_dirs(exe: &Path) -> Vec<PathBuf> {
    let dir = exe.parent().unwrap_or(Path::new("."));
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(prefix) = dir.parent() {
        dirs.push(prefix.join("lib"));
    }
    // target/<profile>/kmem, or target/<profile>/deps/… (tests).
    for up in [dir.parent(), dir.parent().and_then(|d| d.parent())]
        .into_iter()
        .flatten()
    {
        dirs.push(up.join("release"));
        dirs.push(up.join("debug"));
        dirs.push(up.to_path_buf());
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        let t = PathBuf::from(t);
        dirs.push(t.join("release"));
        dirs.push(t.join("debug"));
    }
    let multiarch = format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH);
    for d in [
        "/usr/local/lib",
        multiarch.as_str(),
        "/usr/lib64",
        "/usr/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// `kmem run`'s options: each sets one `KMEM_*` variable for the program (the README's
/// configuration table says what each means).
#[derive(clap::Args, Debug, Default)]
pub struct RunOptions {
    /// slub_debug (KMEM_DEBUG): FZPU when given alone, or the kernel's syntax
    /// (`--debug=FZ,kmalloc-64;P`)
    #[arg(long, value_name = "FLAGS", num_args = 0..=1, default_missing_value = "FZPU", require_equals = true)]
    pub debug: Option<String>,
    /// Bound on the heap (KMEM_MAX): bytes with K/M/G, e.g. `--max=512M`
    #[arg(long, value_name = "SIZE")]
    pub max: Option<String>,
    /// Per-CPU mode (KMEM_PERCPU): `cpu` when given alone, or thread, cpu-rseq, cpu-cas,
    /// cpu-lock
    #[arg(long, value_name = "MODE", num_args = 0..=1, default_missing_value = "cpu", require_equals = true)]
    pub percpu: Option<String>,
    /// The slab layer's per-CPU design (KMEM_SLUB): sheaves or cpu-slab
    #[arg(long, value_name = "DESIGN")]
    pub slub: Option<String>,
    /// Print slabinfo, buddyinfo and vmstat at exit (KMEM_STATS): to stderr, or
    /// `--stats=FILE`
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "stderr", require_equals = true)]
    pub stats: Option<String>,
    /// How long free memory waits before going back to the OS (KMEM_DECAY_MS), in ms
    #[arg(long, value_name = "MS")]
    pub decay_ms: Option<String>,
    /// What follows a report (KMEM_ON_ERROR): abort (SIGABRT) or continue
    #[arg(long, value_name = "POLICY")]
    pub on_error: Option<String>,
    /// Report leaks at exit, by allocation site (KMEM_LEAKS=1; tracks every cache
    /// unless --debug is given, which then needs U)
    #[arg(long)]
    pub leaks: bool,
    /// The live view for `kmem top` (KMEM_LIVE): made once the program has run MS ms,
    /// then published at most every MS ms; or off
    #[arg(long, value_name = "MS")]
    pub live: Option<String>,
    /// KFENCE sampling (KMEM_KFENCE): one allocation every MS ms on a guarded page,
    /// `all`, or `off`
    #[arg(long, value_name = "MS")]
    pub kfence: Option<String>,
}

impl RunOptions {
    /// The variables to set, each checked: `Err` names the first one the heap would
    /// refuse, and what it expects.
    pub fn env(&self) -> Result<Vec<(&'static str, String)>, String> {
        let flags = [
            ("--debug", "KMEM_DEBUG", &self.debug),
            ("--max", "KMEM_MAX", &self.max),
            ("--percpu", "KMEM_PERCPU", &self.percpu),
            ("--slub", "KMEM_SLUB", &self.slub),
            ("--stats", "KMEM_STATS", &self.stats),
            ("--decay-ms", "KMEM_DECAY_MS", &self.decay_ms),
            ("--on-error", "KMEM_ON_ERROR", &self.on_error),
            ("--live", "KMEM_LIVE", &self.live),
            ("--kfence", "KMEM_KFENCE", &self.kfence),
        ];
        let mut out = Vec::new();
        for (flag, name, value) in flags {
            let Some(v) = value else { continue };
            let var = kmem::config::var(name).expect("every flag is a known variable");
            if !var.accepts(v) {
                return Err(format!(
                    "{flag}={v}: not a valid {name} (expected {})",
                    var.expected()
                ));
            }
            out.push((name, v.clone()));
        }
        if self.leaks {
            out.push(("KMEM_LEAKS", "1".to_string()));
        }
        Ok(out)
    }
}

/// Runs `cmd` with kmem preloaded and `opts` in its environment; returns its exit
/// code (128 + signal when killed), 2 when an option or the library is wrong.
pub fn run(opts: &RunOptions, cmd: &[String]) -> ExitCode {
    let env = match opts.env() {
        Ok(env) => env,
        Err(e) => {
            eprintln!("kmem run: {e}");
            return ExitCode::from(2);
        }
    };
    let lib = match find_lib() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("kmem run: {e}");
            return ExitCode::from(2);
        }
    };
    let mut preload = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]).env("LD_PRELOAD", preload).envs(env);
    match c.status() {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            let code = status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
            ExitCode::from(code as u8)
        }
        Err(e) => {
            eprintln!("kmem run: cannot run {}: {e}", cmd[0]);
            ExitCode::from(127)
        }
    }
}
