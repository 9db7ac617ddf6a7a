//! libkmem.so's SONAME: `libkmem.so.0` (major version 0 of the C ABI in
//! include/kmem.h), so programs linked against it record that name, and a later
//! incompatible ABI can be `libkmem.so.1` beside it.
//!
//! And the unwinder linked in (`libgcc_eh.a`, as `gcc -static-libgcc` links it into
//! shared libraries) where the C compiler has it, instead of a dependency on
//! `libgcc_s.so.1`: Rust's standard library needs `_Unwind_*` (panics, backtraces),
//! but loading libgcc_s into every preloaded process cost each one its mapping,
//! relocations and constructor (`__cpu_indicator_init`, whose `cpuid`s trap to the
//! hypervisor in a VM): `ls /` ran about 12% longer with it. The copy is private to
//! libkmem.so (a cdylib exports only its C symbols), so a C++ program's own
//! libgcc_s keeps its exceptions.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libkmem.so.0");
    println!("cargo:rerun-if-changed=build.rs");
    if let Some(dir) = static_unwinder_dir() {
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-lib=static=gcc_eh");
    }
}

/// The directory of the C compiler's `libgcc_eh.a`, if it has one (`cc
/// -print-file-name` answers the bare name when it has not). Native GNU builds only:
/// a cross build's `cc` would name the host's archive.
fn static_unwinder_dir() -> Option<std::path::PathBuf> {
    let (target, host) = (std::env::var("TARGET").ok()?, std::env::var("HOST").ok()?);
    if target != host || !target.contains("linux-gnu") {
        return None;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    let path = std::path::PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (path.is_absolute() && path.is_file()).then(|| path.parent().map(Into::into))?
}
