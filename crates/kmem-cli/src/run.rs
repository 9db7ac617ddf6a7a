//! `kmem run [--stats] -- CMD ARGS…`: runs a program on kmem via `LD_PRELOAD`, with
//! the libkmem.so [`find_lib`] finds (see there for where it looks).

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

/// Runs `cmd` with kmem preloaded; returns its exit code (128 + signal when killed).
pub fn run(stats: bool, cmd: &[String]) -> ExitCode {
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
    c.args(&cmd[1..]).env("LD_PRELOAD", preload);
    if stats {
        c.env("KMEM_STATS", "stderr");
    }
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
