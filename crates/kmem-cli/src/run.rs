//! `kmem run [--stats] -- CMD ARGS…`: runs a program on kmem via `LD_PRELOAD`.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// Where libkmem.so is: `KMEM_LIB`, else next to this binary, else in a cargo target
/// directory above it (release, then debug).
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
    let dir = exe.parent().unwrap_or(std::path::Path::new("."));
    let mut candidates = vec![dir.join("libkmem.so")];
    // target/<profile>/deps/… (tests) or target/<profile>/kmem.
    for up in [dir.parent(), dir.parent().and_then(|d| d.parent())]
        .into_iter()
        .flatten()
    {
        candidates.push(up.join("release").join("libkmem.so"));
        candidates.push(up.join("debug").join("libkmem.so"));
        candidates.push(up.join("libkmem.so"));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        format!(
            "libkmem.so not found next to {} or in the cargo target directory; build it with `cargo build --release -p kmem-malloc`",
            exe.display()
        )
    })
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
