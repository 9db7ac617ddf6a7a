//! include/kmem.h against the library: the header and the Rust exports name the same
//! `kmem_*` functions with the same number of parameters (both parsed as text), a C
//! program that calls every declared function compiles with warnings as errors and
//! links against libkmem.so and runs; the library has its SONAME; glibc's internal
//! malloc names reach kmem under the preload.

mod common;

use common::{lib, text};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn manifest(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Removes `/* */` and `//` comments (enough for kmem.h and lib.rs: no comment
/// markers inside string literals that matter here).
fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
        } else if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |i| &r[i..]);
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The parameter list starting just after `(`: the number of parameters (C's
/// `(void)` is none).
fn param_count(after_paren: &str) -> usize {
    let mut depth = 0;
    let mut end = 0;
    for (i, c) in after_paren.char_indices() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' if depth == 0 => {
                end = i;
                break;
            }
            ')' | '>' | ']' => depth -= 1,
            _ => {}
        }
    }
    let params = after_paren[..end].trim();
    if params.is_empty() || params == "void" {
        return 0;
    }
    let mut n = 1;
    let mut depth = 0;
    for c in params.chars() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | '>' | ']' => depth -= 1,
            ',' if depth == 0 => n += 1,
            _ => {}
        }
    }
    // A trailing comma (rustfmt's multi-line lists) is not a parameter.
    if params.trim_end().ends_with(',') {
        n -= 1;
    }
    n
}

/// `kmem_*` functions exported by src/lib.rs: `#[no_mangle]` then `pub [unsafe]
/// extern "C" fn kmem_…(`.
fn rust_exports() -> BTreeMap<String, usize> {
    let src = strip_comments(&std::fs::read_to_string(manifest("src/lib.rs")).unwrap());
    let mut found = BTreeMap::new();
    let mut rest = src.as_str();
    while let Some(i) = rest.find("#[no_mangle]") {
        rest = &rest[i + "#[no_mangle]".len()..];
        let item = rest.trim_start();
        let Some(sig) = ["pub unsafe extern \"C\" fn ", "pub extern \"C\" fn "]
            .iter()
            .find_map(|p| item.strip_prefix(p))
        else {
            continue;
        };
        let open = sig.find('(').unwrap();
        let name = sig[..open].trim();
        if name.starts_with("kmem_") {
            found.insert(name.to_string(), param_count(&sig[open + 1..]));
        }
    }
    found
}

/// `kmem_*` functions declared in include/kmem.h: in each `;`-terminated statement
/// (preprocessor lines dropped, only what follows the last brace), an identifier
/// followed by `(`.
fn header_decls() -> BTreeMap<String, usize> {
    let h = strip_comments(&std::fs::read_to_string(manifest("include/kmem.h")).unwrap());
    let code: String = h
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeMap::new();
    for stmt in code.split(';') {
        let tail = stmt.rsplit(['{', '}']).next().unwrap_or("");
        add_decl(tail, &mut found);
    }
    found
}

fn add_decl(stmt: &str, found: &mut BTreeMap<String, usize>) {
    let Some(open) = stmt.find('(') else { return };
    let head = &stmt[..open];
    let name = head
        .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()
        .unwrap_or("");
    if name.starts_with("kmem_") {
        found.insert(name.to_string(), param_count(&stmt[open + 1..]));
    }
}

#[test]
fn header_and_rust_exports_name_the_same_functions() {
    let rust = rust_exports();
    let header = header_decls();
    assert!(rust.contains_key("kmem_stats_get"), "{rust:?}");
    assert!(rust.contains_key("kmem_memcg_create"), "{rust:?}");
    for (name, n) in &rust {
        match header.get(name) {
            None => panic!("{name} is exported by libkmem.so but not declared in kmem.h"),
            Some(m) => assert_eq!(m, n, "{name}: {m} parameters in kmem.h, {n} in Rust"),
        }
    }
    for name in header.keys() {
        assert!(
            rust.contains_key(name),
            "{name} is declared in kmem.h but libkmem.so does not export it"
        );
    }
}

#[test]
fn a_program_calling_every_declared_function_compiles_links_and_runs() {
    // Every declared function is called by the program.
    let prog = std::fs::read_to_string(manifest("tests/c/header.c")).unwrap();
    for name in header_decls().keys() {
        assert!(
            prog.contains(&format!("{name}(")),
            "tests/c/header.c does not call {name}"
        );
    }
    let lib = lib();
    let out = common::tmp().join("header_c");
    let cc = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Wstrict-prototypes",
            "-Werror",
            "-Wl,--no-undefined",
            "-o",
        ])
        .arg(&out)
        .arg(manifest("tests/c/header.c"))
        .arg(&lib)
        .output()
        .expect("a C compiler");
    assert!(cc.status.success(), "{}", text(&cc.stderr));
    // The header is valid C++ too (its extern "C" block).
    let cxx = Command::new("c++")
        .args(["-fsyntax-only", "-Wall", "-Werror", "-x", "c++"])
        .arg(manifest("include/kmem.h"))
        .output()
        .expect("a C++ compiler");
    assert!(cxx.status.success(), "{}", text(&cxx.stderr));
    // Linked against the SONAME libkmem.so.0: the preload provides it.
    assert_runs_preloaded(&out, &lib, "header ok\n");
}

/// DT_SONAME of an ELF64 little-endian shared object, parsed from its section
/// headers (SHT_DYNAMIC and the string table it links to).
fn soname(path: &Path) -> Option<String> {
    let f = std::fs::read(path).ok()?;
    let u16_at = |o: usize| u16::from_le_bytes(f[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(f[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(f[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&f[..4], b"\x7fELF", "an ELF file");
    assert_eq!(f[4], 2, "ELF64");
    assert_eq!(f[5], 1, "little-endian");
    let (shoff, shentsize, shnum) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c));
    let section = |i: usize| shoff + i * shentsize;
    const SHT_DYNAMIC: usize = 6;
    const DT_NULL: usize = 0;
    const DT_SONAME: usize = 14;
    let dynamic = (0..shnum).find(|&i| u32_at(section(i) + 4) == SHT_DYNAMIC)?;
    let (off, size, link) = (
        u64_at(section(dynamic) + 0x18),
        u64_at(section(dynamic) + 0x20),
        u32_at(section(dynamic) + 0x28),
    );
    let strtab = u64_at(section(link) + 0x18);
    for e in (off..off + size).step_by(16) {
        match u64_at(e) {
            DT_NULL => break,
            DT_SONAME => {
                let start = strtab + u64_at(e + 8);
                let len = f[start..].iter().position(|&b| b == 0)?;
                return Some(String::from_utf8_lossy(&f[start..start + len]).into_owned());
            }
            _ => {}
        }
    }
    None
}

#[test]
fn the_library_has_its_soname() {
    assert_eq!(soname(&lib()).as_deref(), Some("libkmem.so.0"));
    // readelf agrees, where binutils is installed.
    if let Ok(out) = Command::new("readelf").arg("-d").arg(lib()).output() {
        if out.status.success() {
            assert!(
                text(&out.stdout).contains("Library soname: [libkmem.so.0]"),
                "{}",
                text(&out.stdout)
            );
        }
    }
}

#[test]
fn glibc_internal_malloc_names_are_kmem_under_the_preload() {
    let lib = lib();
    let out = common::tmp().join("libc_names_c");
    let cc = Command::new("cc")
        .args(["-O1", "-w", "-o"])
        .arg(&out)
        .arg(manifest("tests/c/libc_names.c"))
        .arg("-ldl")
        .output()
        .expect("a C compiler");
    assert!(cc.status.success(), "{}", text(&cc.stderr));
    assert_runs_preloaded(&out, &lib, "libc names ok\n");
    // Without kmem the program says so (no kmem_stats_get): the check is real.
    let run = Command::new(&out).output().unwrap();
    assert!(!run.status.success());
}

/// Runs `prog` with `lib` preloaded; it must succeed and print exactly `expected`.
fn assert_runs_preloaded(prog: &Path, lib: &Path, expected: &str) {
    let run = Command::new(prog).env("LD_PRELOAD", lib).output().unwrap();
    assert!(
        run.status.success(),
        "{}\n{}",
        text(&run.stdout),
        text(&run.stderr)
    );
    assert_eq!(text(&run.stdout), expected);
}
