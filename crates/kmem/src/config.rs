//! Configuration from the environment, read once, at the heap's initialisation, and
//! without allocating (kmem may be the process's malloc, so `std::env` is off limits:
//! the variables come from glibc's `environ` in place, and warnings are assembled in
//! stack buffers and written with `write(2)`).
//!
//! [`VARS`] is the one table of the variables — name, default, meaning, the shape of a
//! value, and the parser — from which come the parsing ([`from_lookup`]), the warning
//! for a value that cannot be parsed (one line on stderr naming the variable, then the
//! default is used), and the configuration table of the README ([`markdown_table`]; a
//! test keeps the two equal). A `KMEM_*` variable that is none of them but close to one
//! (a misspelling) gets a warning naming the closest ([`warn_unknown_vars`]).
//!
//! Owns no state and takes no lock: the heap keeps the result.

mod slub_debug;
pub use slub_debug::{DebugConfig, DebugFlags, DEBUG_BLOCKS};

use crate::platform::linux::write_stderr;
use crate::platform::os;
pub use kmem_core::slab::SlubDesign;
use std::ffi::CStr;

/// One environment variable of [`VARS`].
pub struct Var {
    name: &'static CStr,
    default: &'static str,
    help: &'static str,
    expected: &'static str,
    /// Reads a value into the configuration; false if it cannot be parsed (the
    /// configuration keeps the default).
    parse: fn(&[u8], &mut EnvConfig) -> bool,
}

impl Var {
    /// The variable's name (`KMEM_MAX`).
    pub fn name(&self) -> &'static str {
        self.name.to_str().unwrap_or("")
    }

    /// What is used when it is unset or malformed (markdown, as in the README).
    pub fn default(&self) -> &'static str {
        self.default
    }

    /// What it means (markdown, one line, as in the README).
    pub fn help(&self) -> &'static str {
        self.help
    }

    /// What a valid value looks like (`thread, cpu, cpu-cas, cpu-rseq or cpu-lock`).
    pub fn expected(&self) -> &'static str {
        self.expected
    }

    /// Whether the heap would accept `value` (it would warn and use the default
    /// otherwise): `kmem run` checks its flags with this before starting the program.
    pub fn accepts(&self, value: &str) -> bool {
        let mut scratch = EnvConfig::DEFAULT;
        (self.parse)(value.as_bytes(), &mut scratch)
    }
}

/// The variable called `name` (`KMEM_DEBUG`), if it is one of [`VARS`].
pub fn var(name: &str) -> Option<&'static Var> {
    VARS.iter().find(|v| v.name() == name)
}

/// The variables, in the order they are read (and warned about).
pub const VARS: [Var; 14] = [
    Var {
        name: c"KMEM_MAX",
        default: "no limit",
        help: "bound on the heap (`512M`, `2G`, bytes): the page allocator's memory and the direct mappings together; past it allocations return null (after the caches shrink and free pages are lent to the mappings)",
        expected: "a size such as 512M, 2G or 65536",
        parse: |v, cfg| parse_size(v).map(|n| cfg.max_bytes = n).is_some(),
    },
    Var {
        name: c"KMEM_NUMA_FAKE",
        default: "the real nodes",
        help: "split the machine into N fake nodes, like `numa=fake=N`",
        expected: "a node count from 1 to 16",
        parse: |v, cfg| match parse_u64(v) {
            Some(n) if (1..=kmem_core::page::MAX_NUMNODES as u64).contains(&n) => {
                cfg.numa_fake = n as usize;
                true
            }
            _ => false,
        },
    },
    Var {
        name: c"KMEM_DEBUG",
        default: "no debugging",
        help: "slub_debug options in the kernel's syntax (`FZPU`, `FZ,kmalloc-64;P`, `-`)",
        expected: "slub_debug options such as FZPU or FZ,kmalloc-64;P",
        parse: |v, cfg| DebugConfig::parse(v).map(|d| cfg.debug = d).is_ok(),
    },
    Var {
        name: c"KMEM_PERCPU",
        default: "`thread`",
        help: "`thread` (a CPU area per thread); `cpu` (a CPU area per CPU with the fastest \
               mechanism here: `cpu-rseq` where glibc registers rseq and either `membarrier`'s \
               rseq fence (Linux 5.10) or pinning a thread to a CPU is allowed (a seccomp \
               policy that refuses both rules it out), else `cpu-cas` where the \
               CPU has `cmpxchg16b`, else `cpu-lock`); `cpu-rseq` (alloc/free fast paths in \
               restartable sequences); `cpu-cas` (lockless fast paths with a double-word CAS, \
               in the `cpu-slab` design; with sheaves it runs as `cpu-lock`); `cpu-lock` \
               (every operation under the CPU area's lock)",
        expected: "thread, cpu, cpu-cas, cpu-rseq or cpu-lock",
        parse: |v, cfg| {
            let modes: [(&[u8], _); 5] = [
                (b"thread", PerCpuMode::Thread),
                (b"cpu", PerCpuMode::Cpu),
                (b"cpu-cas", PerCpuMode::CpuCas),
                (b"cpu-rseq", PerCpuMode::CpuRseq),
                (b"cpu-lock", PerCpuMode::CpuLock),
            ];
            keyword(v, &modes).map(|m| cfg.percpu = m).is_some()
        },
    },
    Var {
        name: c"KMEM_SLUB",
        default: "`sheaves`",
        help: "the slab layer's per-CPU design: `sheaves` (per-CPU arrays of objects and \
               per-node barns, Linux 7.0) or `cpu-slab` (the CPU slab with `tid` and the \
               lockless double-word CAS, Linux up to 6.17)",
        expected: "sheaves or cpu-slab",
        parse: |v, cfg| {
            let designs: [(&[u8], _); 2] = [
                (b"sheaves", SlubDesign::Sheaves),
                (b"cpu-slab", SlubDesign::CpuSlab),
            ];
            keyword(v, &designs).map(|d| cfg.slub = d).is_some()
        },
    },
    Var {
        name: c"KMEM_STATS",
        default: "no report",
        help: "`stderr` or a file: print slabinfo, buddyinfo, vmstat and each memory \
               cgroup's files at exit",
        expected: "stderr or a file path under 256 bytes",
        parse: |v, cfg| {
            cfg.stats = match v {
                b"" => StatsTarget::None,
                b"stderr" => StatsTarget::Stderr,
                path if path.len() < 256 && !path.contains(&0) => {
                    let mut buf = [0u8; 256];
                    buf[..path.len()].copy_from_slice(path);
                    StatsTarget::File(buf)
                }
                _ => return false,
            };
            true
        },
    },
    Var {
        name: c"KMEM_INIT",
        default: "off",
        help: "`alloc`, `free`, `alloc,free`: zero objects when handed out / when freed",
        expected: "alloc, free or alloc,free",
        parse: |v, cfg| {
            let (mut a, mut f) = (false, false);
            let ok = v.split(|&b| b == b',').all(|w| match w {
                b"alloc" => {
                    a = true;
                    true
                }
                b"free" => {
                    f = true;
                    true
                }
                _ => false,
            });
            if ok {
                (cfg.init_on_alloc, cfg.init_on_free) = (a, f);
            }
            ok
        },
    },
    Var {
        name: c"KMEM_HARDEN",
        default: "`on`",
        help: "`on` (obfuscated, checked free pointers), `random` (also randomised \
               freelists), `off`",
        expected: "on, random or off",
        parse: |v, cfg| {
            let modes: [(&[u8], _); 3] = [
                (b"on", Harden::On),
                (b"random", Harden::Random),
                (b"off", Harden::Off),
            ];
            keyword(v, &modes).map(|h| cfg.harden = h).is_some()
        },
    },
    Var {
        name: c"KMEM_ON_ERROR",
        default: "`abort` for C programs (libkmem.so) under `KMEM_DEBUG`, else `continue`",
        help: "what follows a report of heap misuse or corruption: `abort` (the report, \
               then SIGABRT, as ASan and glibc do) or `continue` (the kernel's way: \
               quarantine the object and go on); without `KMEM_DEBUG`, libkmem.so \
               aborts on a bad free either way",
        expected: "abort or continue",
        parse: |v, cfg| {
            let modes: [(&[u8], _); 2] =
                [(b"abort", OnError::Abort), (b"continue", OnError::Continue)];
            keyword(v, &modes).map(|m| cfg.on_error = m).is_some()
        },
    },
    Var {
        name: c"KMEM_DECAY_MS",
        default: "1000",
        help: "how long freed memory stays resident before it is given back to the OS",
        expected: "milliseconds",
        parse: |v, cfg| parse_u64(v).map(|n| cfg.decay_ms = n).is_some(),
    },
    Var {
        name: c"KMEM_LIVE",
        default: "250",
        help: "the live view `kmem top` reads (`/dev/shm/kmem.PID`, owner-only): made once \
               the process has run this many milliseconds, then published by allocation \
               slow paths at most that often; `off` (or `0`) publishes nothing",
        expected: "milliseconds or off",
        parse: |v, cfg| {
            if v == b"off" {
                cfg.live_ms = 0;
                return true;
            }
            parse_u64(v).map(|n| cfg.live_ms = n).is_some()
        },
    },
    Var {
        name: c"KMEM_KFENCE",
        default: "100",
        help: "KFENCE: one allocation of up to a page every this many milliseconds goes \
               on a guarded page of its own (out-of-bounds accesses and uses after free \
               fault and are reported); `all`: every such allocation while slots last; \
               `off` (or `0`): none",
        expected: "milliseconds, all or off",
        parse: |v, cfg| {
            match v {
                b"off" => cfg.kfence_ms = 0,
                b"all" => cfg.kfence_ms = crate::kfence::ALL,
                // A number is an interval, however long: never `all`.
                _ => {
                    let ms = parse_u64(v);
                    if let Some(n) = ms {
                        cfg.kfence_ms = n.min(crate::kfence::ALL - 1);
                    }
                    return ms.is_some();
                }
            }
            true
        },
    },
    Var {
        name: c"KMEM_LEAKS",
        default: "off",
        help: "with `KMEM_DEBUG` tracks (`U`): at exit, report the objects still allocated \
               that nothing points to (kmemleak's unreferenced objects), grouped by \
               allocation site, largest first; `1` or `on`",
        expected: "1, on, 0 or off",
        parse: |v, cfg| switch(v).map(|m| cfg.leaks = m).is_some(),
    },
    Var {
        name: c"KMEM_THP",
        default: "`off`",
        help: "transparent huge pages: `on` advises the kernel to back the heap's pages \
               (past each section's page descriptors) and its mappings of 2 MiB and more \
               with 2 MiB pages (`MADV_HUGEPAGE`, as mimalloc does: a fault per 2 MiB \
               instead of per 4 KiB, fewer TLB misses; resident memory grows in 2 MiB \
               steps, and a fault may wait for the kernel to compact memory); `off` gives \
               no advice, and the system's setting in `/sys/kernel/mm/transparent_hugepage` \
               decides",
        expected: "1, on, 0 or off",
        parse: |v, cfg| switch(v).map(|m| cfg.thp = m).is_some(),
    },
];

// KMEM_NUMA_FAKE's `expected` names the limit.
const _: () = assert!(kmem_core::page::MAX_NUMNODES == 16);

/// The settings read from the environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvConfig {
    /// `KMEM_MAX` in bytes (0 = unbounded).
    pub max_bytes: usize,
    /// `KMEM_NUMA_FAKE` (0 = off).
    pub numa_fake: usize,
    /// `KMEM_DECAY_MS`.
    pub decay_ms: u64,
    /// `KMEM_DEBUG`, parsed.
    pub debug: DebugConfig,
    /// `KMEM_PERCPU`.
    pub percpu: PerCpuMode,
    /// `KMEM_SLUB`.
    pub slub: SlubDesign,
    /// `KMEM_STATS`.
    pub stats: StatsTarget,
    /// `KMEM_INIT`: zero objects on allocation.
    pub init_on_alloc: bool,
    /// `KMEM_INIT`: zero objects on free.
    pub init_on_free: bool,
    /// `KMEM_HARDEN`.
    pub harden: Harden,
    /// `KMEM_ON_ERROR`.
    pub on_error: OnError,
    /// `KMEM_LIVE`: the live view's publishing interval in ms (0 = off).
    pub live_ms: u64,
    /// `KMEM_LEAKS`: the leak report at exit.
    pub leaks: bool,
    /// `KMEM_KFENCE`: the sample interval in ms (0 = off, `kfence::ALL` = every
    /// allocation).
    pub kfence_ms: u64,
    /// `KMEM_THP`: advise transparent huge pages for the span and huge mappings.
    pub thp: bool,
}

/// What follows a report of heap misuse or corruption (`KMEM_ON_ERROR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Not set: abort for the C front end under `KMEM_DEBUG`, else continue.
    Default,
    /// The report, then SIGABRT.
    Abort,
    /// Quarantine and go on (the kernel's slub_debug).
    Continue,
}

/// Always-on hardening (`KMEM_HARDEN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Harden {
    /// Obfuscated, checked free pointers (the default).
    On,
    /// As `On`, and every new slab's freelist in a random order.
    Random,
    /// Plain free pointers.
    Off,
}

impl EnvConfig {
    /// Every variable unset (the `default` column of [`VARS`]).
    pub const DEFAULT: EnvConfig = EnvConfig {
        max_bytes: 0,
        numa_fake: 0,
        decay_ms: 1000,
        debug: DebugConfig::EMPTY,
        percpu: PerCpuMode::Thread,
        slub: SlubDesign::Sheaves,
        stats: StatsTarget::None,
        init_on_alloc: false,
        init_on_free: false,
        harden: Harden::On,
        on_error: OnError::Default,
        live_ms: 250,
        leaks: false,
        kfence_ms: 100,
        thp: false,
    };
}

impl Default for EnvConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// How CPU areas are assigned (`KMEM_PERCPU`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerCpuMode {
    /// One CPU area per thread (owned mode; the default).
    Thread,
    /// One per CPU, shared by the threads running on it, with the fastest mechanism
    /// available here (`CpuRseq` where glibc registers rseq and `membarrier`'s rseq
    /// fence or pinning a thread is allowed, else `CpuCas` where the CPU has
    /// `cmpxchg16b`, else `CpuLock`).
    Cpu,
    /// Per-CPU with SLUB's lockless fast paths: a double-word CAS of `(freelist,
    /// tid)`; everything else under the CPU area's local lock.
    CpuCas,
    /// Per-CPU with the allocation and free fast paths in restartable sequences
    /// (committed by a plain store on the CPU they run on); everything else under the
    /// CPU area's local lock.
    CpuRseq,
    /// Per-CPU with every operation under the CPU area's local lock (the portable
    /// fallback).
    CpuLock,
}

/// Where `KMEM_STATS` sends the exit report.
// The path is kept inline: the configuration is read before any allocation is allowed.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsTarget {
    /// No report.
    None,
    /// Standard error.
    Stderr,
    /// A file (the path, NUL-terminated, in a fixed buffer).
    File([u8; 256]),
}

impl StatsTarget {
    /// The file path, for `File`.
    pub fn path(&self) -> Option<&std::ffi::CStr> {
        match self {
            StatsTarget::File(buf) => std::ffi::CStr::from_bytes_until_nul(buf).ok(),
            _ => None,
        }
    }
}

/// Reads the variables from the process environment (warning about malformed values).
pub fn from_env() -> EnvConfig {
    from_lookup(|name| os::getenv(name.to_bytes()))
}

/// Parses the variables through `get` (a test hook; [`from_env`] reads `environ`).
pub fn from_lookup<'a>(get: impl Fn(&CStr) -> Option<&'a [u8]>) -> EnvConfig {
    let mut cfg = EnvConfig::DEFAULT;
    for var in &VARS {
        if let Some(v) = get(var.name) {
            if !(var.parse)(v, &mut cfg) {
                warn_line(&value_warning(var, v));
            }
        }
    }
    if cfg.leaks && !cfg.debug.any() {
        // The leak report needs allocation tracks: KMEM_LEAKS alone tracks every cache.
        if let Ok(d) = DebugConfig::parse(b"U") {
            cfg.debug = d;
        }
    }
    cfg
}

/// Warns (one line each) about the `KMEM_*` variables of the environment that are not
/// in [`VARS`] but close to one of them: see [`misspelling_of`]. The heap runs it once,
/// at initialisation.
pub fn warn_unknown_vars() {
    for entry in os::env_entries() {
        let name = entry.split(|&b| b == b'=').next().unwrap_or(entry);
        if let Some(var) = misspelling_of(name) {
            warn_line(&[
                b"kmem: ignoring unknown ",
                &name[..name.len().min(64)],
                b"; did you mean ",
                var.name.to_bytes(),
                b"?\n",
            ]);
        }
    }
}

/// The variable `name` is probably a misspelling of: for a name that starts with
/// `KMEM_` (in any case) and is not one of [`VARS`], the closest of them if it is at
/// most [`MAX_TYPOS`] edits away (letters inserted, deleted, replaced or swapped, case
/// ignored). Names further from every variable belong to someone else
/// (`KMEM_STRESS_SECS`, a test's own) and get nothing.
pub fn misspelling_of(name: &[u8]) -> Option<&'static Var> {
    if name.len() < 5 || !name[..5].eq_ignore_ascii_case(b"KMEM_") {
        return None;
    }
    if VARS.iter().any(|v| v.name.to_bytes() == name) || OTHER_VARS.contains(&name) {
        return None;
    }
    VARS.iter()
        .filter_map(|v| Some((edit_distance(name, v.name.to_bytes())?, v)))
        .filter(|&(d, _)| d <= MAX_TYPOS)
        .min_by_key(|&(d, _)| d)
        .map(|(_, v)| v)
}

/// `KMEM_*` variables that are not the library's settings but are read by kmem's own
/// tools (`kmem run`'s library path): never taken for misspellings.
const OTHER_VARS: [&[u8]; 1] = [b"KMEM_LIB"];

/// Most edits between a misspelt name and the variable it is taken for.
pub const MAX_TYPOS: usize = 2;

/// The optimal-string-alignment distance between `a` and `b` (insertions, deletions,
/// substitutions and swaps of neighbours, ASCII case ignored), on the stack; `None`
/// for names longer than 31 bytes or differing in length by more than [`MAX_TYPOS`].
fn edit_distance(a: &[u8], b: &[u8]) -> Option<usize> {
    const N: usize = 32;
    if a.len() >= N || b.len() >= N || a.len().abs_diff(b.len()) > MAX_TYPOS {
        return None;
    }
    let eq = |i: usize, j: usize| a[i].eq_ignore_ascii_case(&b[j]);
    // Rows i-2, i-1 and i of the table, by column j.
    let mut rows = [[0usize; N]; 3];
    for (j, slot) in rows[0].iter_mut().enumerate().take(b.len() + 1) {
        *slot = j;
    }
    for i in 1..=a.len() {
        let (cur, prev, prev2) = (i % 3, (i + 2) % 3, (i + 1) % 3);
        rows[cur][0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(!eq(i - 1, j - 1));
            let mut d = (rows[prev][j] + 1)
                .min(rows[cur][j - 1] + 1)
                .min(rows[prev][j - 1] + cost);
            if i > 1 && j > 1 && eq(i - 1, j - 2) && eq(i - 2, j - 1) {
                d = d.min(rows[prev2][j - 2] + 1);
            }
            rows[cur][j] = d;
        }
    }
    Some(rows[a.len() % 3][b.len()])
}

/// The README's configuration table (markdown), rendered from [`VARS`].
pub fn markdown_table() -> String {
    let mut s = String::from("| variable | meaning | default |\n|---|---|---|\n");
    for v in &VARS {
        s += &format!("| `{}` | {} | {} |\n", v.name(), v.help, v.default);
    }
    s
}

/// `123`, `64K`, `512M`, `2G`, `1T` (also `KB`, `KiB`, lower case); `None` if not a size.
pub fn parse_size(v: &[u8]) -> Option<usize> {
    let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
    let n = parse_u64(&v[..digits])?;
    let unit = &v[digits..];
    // Case-insensitive without allocating (this runs before the heap exists).
    let is = |names: &[&[u8]]| names.iter().any(|n| unit.eq_ignore_ascii_case(n));
    let shift = if is(&[b"", b"B"]) {
        0
    } else if is(&[b"K", b"KB", b"KIB"]) {
        10
    } else if is(&[b"M", b"MB", b"MIB"]) {
        20
    } else if is(&[b"G", b"GB", b"GIB"]) {
        30
    } else if is(&[b"T", b"TB", b"TIB"]) {
        40
    } else {
        return None;
    };
    n.checked_mul(1u64 << shift).map(|b| b as usize)
}

/// The value of the keyword `v` in `table`.
fn keyword<T: Copy>(v: &[u8], table: &[(&[u8], T)]) -> Option<T> {
    table.iter().find(|(k, _)| *k == v).map(|&(_, t)| t)
}

/// An on/off switch: `1` or `on`, `0` or `off`.
fn switch(v: &[u8]) -> Option<bool> {
    keyword(
        v,
        &[(b"1", true), (b"on", true), (b"0", false), (b"off", false)],
    )
}

fn parse_u64(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.iter().fold(0u64, |a, &b| a * 10 + (b - b'0') as u64))
}

/// The warning for a value of `var` that cannot be parsed, in parts.
fn value_warning<'a>(var: &'a Var, value: &'a [u8]) -> [&'a [u8]; 9] {
    [
        b"kmem: ignoring ",
        var.name.to_bytes(),
        b"=",
        &value[..value.len().min(64)],
        b" (expected ",
        var.expected.as_bytes(),
        b"); using ",
        var.default.as_bytes(),
        b"\n",
    ]
}

/// Joins `parts` into `buf`, leaving markdown's backticks out and keeping the final
/// newline if the line is cut; returns the length.
fn assemble(parts: &[&[u8]], buf: &mut [u8; 256]) -> usize {
    let mut len = 0;
    for &b in parts.iter().flat_map(|p| p.iter()) {
        if b != b'`' && len < buf.len() {
            buf[len] = b;
            len += 1;
        }
    }
    buf[len - 1] = b'\n';
    len
}

/// One warning line from `parts`, assembled on the stack and written to stderr.
fn warn_line(parts: &[&[u8]]) {
    let mut buf = [0u8; 256];
    let len = assemble(parts, &mut buf);
    write_stderr(&buf[..len]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration with exactly the variables `vars` set.
    fn with(vars: &[(&str, &'static str)]) -> EnvConfig {
        from_lookup(|n| {
            vars.iter()
                .find(|(k, _)| k.as_bytes() == n.to_bytes())
                .map(|(_, v)| v.as_bytes())
        })
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size(b"512M"), Some(512 << 20));
        assert_eq!(parse_size(b"2g"), Some(2 << 30));
        assert_eq!(parse_size(b"64KiB"), Some(64 << 10));
        assert_eq!(parse_size(b"4096"), Some(4096));
        assert_eq!(parse_size(b"12Q"), None);
        assert_eq!(parse_size(b"M"), None);
        assert_eq!(parse_size(b""), None);
    }

    #[test]
    fn a_kfence_interval_is_never_all_however_long() {
        assert_eq!(
            with(&[("KMEM_KFENCE", "all")]).kfence_ms,
            crate::kfence::ALL
        );
        for v in ["18446744073709551615", "18446744073709551614"] {
            let ms = with(&[("KMEM_KFENCE", v)]).kfence_ms;
            assert!(ms != crate::kfence::ALL && ms != 0, "{v}: {ms}");
        }
    }

    #[test]
    fn lookup_fills_and_defaults() {
        let cfg = with(&[("KMEM_MAX", "1G"), ("KMEM_NUMA_FAKE", "4")]);
        assert_eq!(cfg.max_bytes, 1 << 30);
        assert_eq!(cfg.numa_fake, 4);
        assert_eq!(cfg.decay_ms, 1000);
        // Malformed values fall back to the defaults.
        let bad = with(&[
            ("KMEM_MAX", "lots"),
            ("KMEM_NUMA_FAKE", "99"),
            ("KMEM_DECAY_MS", "-1"),
        ]);
        assert_eq!(bad, EnvConfig::default());
    }

    #[test]
    fn slub_debug_syntax() {
        let d = DebugConfig::parse(b"FZ,kmalloc-64,kmalloc-1*;P").unwrap();
        assert_eq!(d.flags_for("kmalloc-64").0, DebugFlags::F | DebugFlags::Z);
        assert_eq!(
            d.flags_for("kmalloc-128").0,
            DebugFlags::F | DebugFlags::Z,
            "prefix match"
        );
        assert_eq!(
            d.flags_for("kmalloc-32").0,
            DebugFlags::P,
            "the block for all caches"
        );
        let all = DebugConfig::parse(b"FZPU").unwrap();
        assert!(all.flags_for("any").has(DebugFlags::U));
        let bare = DebugConfig::parse(b",dentry").unwrap();
        assert_eq!(bare.flags_for("dentry").0, DebugFlags::DEFAULT);
        assert!(!DebugConfig::parse(b"-").unwrap().any());
        assert!(DebugConfig::parse(b"FQ").is_err());
        // As the kernel's `kmem_cache_flags`: the first block that names a cache wins
        // (before, the last did: kmalloc-64 got P alone, no red zones).
        let first = DebugConfig::parse(b"FZ,kmalloc-64;P,kmalloc-*").unwrap();
        assert_eq!(
            first.flags_for("kmalloc-64").0,
            DebugFlags::F | DebugFlags::Z
        );
        assert_eq!(first.flags_for("kmalloc-32").0, DebugFlags::P);
        assert_eq!(first.flags_for("dentry").0, 0);
        // `*` anywhere: the prefix before it.
        let glob = DebugConfig::parse(b"U,kmalloc-*-cg").unwrap();
        assert!(glob.flags_for("kmalloc-64").has(DebugFlags::U));
        assert!(!glob.flags_for("dentry").has(DebugFlags::U));
        // Empty names are skipped, a trailing comma included; a list of none names
        // no cache.
        let trailing = DebugConfig::parse(b"FZ,kmalloc-64,;P").unwrap();
        assert_eq!(
            trailing.flags_for("kmalloc-64").0,
            DebugFlags::F | DebugFlags::Z
        );
        assert_eq!(trailing.flags_for("x").0, DebugFlags::P);
        let skipped = DebugConfig::parse(b"F,,x").unwrap();
        assert_eq!(skipped.flags_for("x").0, DebugFlags::F);
        assert!(!DebugConfig::parse(b"F,").unwrap().any());
        // `-` clears what came before it in its block.
        assert_eq!(
            DebugConfig::parse(b"F-Z").unwrap().flags_for("a").0,
            DebugFlags::Z
        );
        assert_eq!(DebugConfig::parse(b"FZP-").unwrap().flags_for("a").0, 0);
    }

    #[test]
    fn on_error_values() {
        assert_eq!(with(&[]).on_error, OnError::Default);
        assert_eq!(with(&[("KMEM_ON_ERROR", "abort")]).on_error, OnError::Abort);
        assert_eq!(
            with(&[("KMEM_ON_ERROR", "continue")]).on_error,
            OnError::Continue
        );
        assert_eq!(
            with(&[("KMEM_ON_ERROR", "panic")]).on_error,
            OnError::Default
        );
        let v = var("KMEM_ON_ERROR").unwrap();
        assert!(v.accepts("abort") && v.accepts("continue") && !v.accepts("Abort"));
        assert_eq!(v.expected(), "abort or continue");
    }

    #[test]
    fn percpu_and_stats_values() {
        let cfg = with(&[
            ("KMEM_PERCPU", "cpu-rseq"),
            ("KMEM_STATS", "/tmp/kmem.stats"),
        ]);
        assert_eq!(cfg.percpu, PerCpuMode::CpuRseq);
        assert_eq!(cfg.stats.path().unwrap().to_bytes(), b"/tmp/kmem.stats");
        let cfg = with(&[("KMEM_PERCPU", "sometimes"), ("KMEM_STATS", "stderr")]);
        assert_eq!(cfg.percpu, PerCpuMode::Thread);
        assert_eq!(cfg.stats, StatsTarget::Stderr);
    }

    #[test]
    fn init_and_harden_values() {
        let cfg = with(&[("KMEM_INIT", "alloc,free"), ("KMEM_HARDEN", "random")]);
        assert!(cfg.init_on_alloc && cfg.init_on_free);
        assert_eq!(cfg.harden, Harden::Random);
        let cfg = with(&[("KMEM_INIT", "free"), ("KMEM_HARDEN", "off")]);
        assert!(!cfg.init_on_alloc && cfg.init_on_free);
        assert_eq!(cfg.harden, Harden::Off);
        // Malformed: the defaults.
        let cfg = with(&[("KMEM_INIT", "alloc,sometimes"), ("KMEM_HARDEN", "very")]);
        assert_eq!(cfg, EnvConfig::default());
    }

    #[test]
    fn thp_values() {
        assert!(!with(&[]).thp, "off by default");
        assert!(with(&[("KMEM_THP", "on")]).thp);
        assert!(with(&[("KMEM_THP", "1")]).thp);
        assert!(!with(&[("KMEM_THP", "off")]).thp);
        assert!(
            !with(&[("KMEM_THP", "always")]).thp,
            "malformed: the default"
        );
        assert_eq!(var("KMEM_THP").unwrap().expected(), "1, on, 0 or off");
    }

    #[test]
    fn warnings_keep_their_wording() {
        let line = |var: &str, value: &[u8]| {
            let var = VARS.iter().find(|v| v.name() == var).unwrap();
            let mut buf = [0u8; 256];
            let n = assemble(&value_warning(var, value), &mut buf);
            String::from_utf8(buf[..n].to_vec()).unwrap()
        };
        assert_eq!(
            line("KMEM_MAX", b"lots"),
            "kmem: ignoring KMEM_MAX=lots (expected a size such as 512M, 2G or 65536); using no limit\n"
        );
        assert_eq!(
            line("KMEM_PERCPU", b"sometimes"),
            "kmem: ignoring KMEM_PERCPU=sometimes (expected thread, cpu, cpu-cas, cpu-rseq or cpu-lock); using thread\n"
        );
        // Long values are cut, the line stays whole.
        assert!(line("KMEM_DEBUG", &[b'Q'; 300]).ends_with("using no debugging\n"));
        assert_eq!(EnvConfig::default(), EnvConfig::DEFAULT);
    }

    #[test]
    fn misspellings_name_the_closest_variable() {
        let hit = |n: &str| misspelling_of(n.as_bytes()).map(Var::name);
        assert_eq!(hit("KMEM_PERCUP"), Some("KMEM_PERCPU"), "a swap");
        assert_eq!(hit("KMEM_PERCPUS"), Some("KMEM_PERCPU"), "an insertion");
        assert_eq!(hit("KMEM_DEBG"), Some("KMEM_DEBUG"), "a deletion");
        assert_eq!(hit("KMEM_MAZ"), Some("KMEM_MAX"), "a substitution");
        assert_eq!(hit("kmem_decay_ms"), Some("KMEM_DECAY_MS"), "case");
        assert_eq!(hit("KMEM_NUMA_FAK"), Some("KMEM_NUMA_FAKE"));
        assert_eq!(hit("KMEM_SLAB"), Some("KMEM_SLUB"));
        for name in [
            "KMEM_PERCPU",
            "KMEM_STRESS_SECS",
            "KMEM_LIB",
            "KMEM_TEST_ECHO",
            "KMEM_",
            "PATH",
            "KMEM_MAX_WITH_A_VERY_LONG_NAME_INDEED",
        ] {
            assert_eq!(hit(name), None, "{name}");
        }
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance(b"KMEM_MAX", b"KMEM_MAX"), Some(0));
        assert_eq!(edit_distance(b"ab", b"ba"), Some(1));
        assert_eq!(edit_distance(b"abc", b"ca"), Some(3)); // OSA: no edit of a swapped pair
        assert_eq!(edit_distance(b"kitten", b"sitting"), Some(3));
        assert_eq!(
            edit_distance(b"a", b"abcd"),
            None,
            "too far apart in length"
        );
    }

    #[test]
    fn the_table_renders_every_variable_once() {
        let t = markdown_table();
        assert_eq!(t.lines().count(), 2 + VARS.len());
        for v in &VARS {
            assert_eq!(t.matches(&format!("| `{}` |", v.name())).count(), 1);
            assert!(
                !v.help.contains('|') && !v.help.contains('\n'),
                "{}",
                v.name()
            );
        }
    }
}
