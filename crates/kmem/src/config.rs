//! Configuration from the environment, read once and without allocating (kmem may be
//! the process's malloc, so `std::env` is off limits).
//!
//! | variable          | meaning                                              | default   |
//! |-------------------|------------------------------------------------------|-----------|
//! | `KMEM_MAX`        | bound on the heap, a size like `512M`, `2G`, `65536`  | none      |
//! | `KMEM_NUMA_FAKE`  | split the machine into N fake nodes (`numa=fake=N`)   | real nodes|
//! | `KMEM_DECAY_MS`   | how long freed memory stays resident before it is given back | 1000 |
//! | `KMEM_DEBUG`      | slub_debug options in the kernel's syntax: `FZPU`, `FZ,kmalloc-64,kmalloc-128`, `-`, blocks joined by `;` | off |
//! | `KMEM_INIT`       | `alloc`, `free` or `alloc,free`: zero objects when handed out / when freed (init_on_alloc, init_on_free) | off |
//! | `KMEM_HARDEN`     | `on` (obfuscated free pointers), `random` (also randomised freelists), `off` | `on` |
//! | `KMEM_PERCPU`     | `thread` (a CPU area per thread), or `cpu` / `cpu-cas` / `cpu-rseq` (per-CPU mode) | `thread` |
//! | `KMEM_STATS`      | `stderr` or a file path: print slabinfo, buddyinfo and vmstat at exit | off |
//!
//! A value that cannot be parsed gets one warning line on stderr naming the variable,
//! and the default.

use crate::platform::linux::write_stderr;

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
    /// `KMEM_STATS`.
    pub stats: StatsTarget,
    /// `KMEM_INIT`: zero objects on allocation.
    pub init_on_alloc: bool,
    /// `KMEM_INIT`: zero objects on free.
    pub init_on_free: bool,
    /// `KMEM_HARDEN`.
    pub harden: Harden,
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

impl Default for EnvConfig {
    fn default() -> Self {
        Self {
            max_bytes: 0,
            numa_fake: 0,
            decay_ms: 1000,
            debug: DebugConfig::default(),
            percpu: PerCpuMode::Thread,
            stats: StatsTarget::None,
            init_on_alloc: false,
            init_on_free: false,
            harden: Harden::On,
        }
    }
}

/// How CPU areas are assigned (`KMEM_PERCPU`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PerCpuMode {
    /// One CPU area per thread (owned mode; the default).
    Thread,
    /// One per CPU, shared by the threads running on it, with the fastest mechanism
    /// available here (`CpuRseq` where glibc registers rseq, else `CpuCas` where the
    /// CPU has `cmpxchg16b`, else `CpuLock`).
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

/// The slub_debug letters (`SLAB_CONSISTENCY_CHECKS` … `SLAB_TRACE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DebugFlags(pub u8);

impl DebugFlags {
    /// F: consistency checks.
    pub const F: u8 = 1 << 0;
    /// Z: red zones.
    pub const Z: u8 = 1 << 1;
    /// P: poisoning.
    pub const P: u8 = 1 << 2;
    /// U: allocation and free tracking.
    pub const U: u8 = 1 << 3;
    /// T: tracing.
    pub const T: u8 = 1 << 4;
    /// What the kernel turns on for a bare `slub_debug`: F, Z, P and U.
    pub const DEFAULT: u8 = Self::F | Self::Z | Self::P | Self::U;
    /// Whether `letter`'s flag is set.
    pub fn has(self, flag: u8) -> bool {
        self.0 & flag != 0
    }
}

/// Most `;`-separated blocks and cache names per block kept from `KMEM_DEBUG`.
pub const DEBUG_BLOCKS: usize = 8;
const DEBUG_NAMES: usize = 8;

/// `KMEM_DEBUG` parsed: blocks of flags, each for all caches or for named ones
/// (a trailing `*` matches a prefix, as the kernel allows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebugConfig {
    text: [u8; 256],
    blocks: [DebugBlock; DEBUG_BLOCKS],
    nblocks: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct DebugBlock {
    flags: DebugFlags,
    names: [(u8, u8); DEBUG_NAMES],
    nnames: usize,
}

impl Default for DebugConfig {
    fn default() -> Self {
        Self::EMPTY
    }
}

const EMPTY_BLOCK: DebugBlock = DebugBlock {
    flags: DebugFlags(0),
    names: [(0, 0); DEBUG_NAMES],
    nnames: 0,
};

impl DebugConfig {
    /// No debugging.
    pub const EMPTY: DebugConfig = DebugConfig {
        text: [0; 256],
        blocks: [EMPTY_BLOCK; DEBUG_BLOCKS],
        nblocks: 0,
    };

    /// Parses slub_debug syntax; the error says what was not understood.
    pub fn parse(v: &[u8]) -> Result<Self, &'static str> {
        let mut cfg = DebugConfig::default();
        if v.len() > cfg.text.len() {
            return Err("longer than 256 bytes");
        }
        cfg.text[..v.len()].copy_from_slice(v);
        let mut pos = 0usize;
        for block in v.split(|&b| b == b';') {
            let start = pos;
            pos += block.len() + 1;
            if block.is_empty() {
                continue;
            }
            if cfg.nblocks == DEBUG_BLOCKS {
                return Err("more than 8 blocks");
            }
            let mut parts = block.split(|&b| b == b',');
            let opts = parts.next().unwrap_or(b"");
            let mut flags = 0u8;
            if opts.is_empty() {
                flags = DebugFlags::DEFAULT;
            }
            for &c in opts {
                flags |= match c.to_ascii_uppercase() {
                    b'F' => DebugFlags::F,
                    b'Z' => DebugFlags::Z,
                    b'P' => DebugFlags::P,
                    b'U' => DebugFlags::U,
                    b'T' => DebugFlags::T,
                    b'-' => 0,
                    b'A' | b'O' => 0,
                    _ => return Err("an unknown option letter"),
                };
            }
            let mut b = DebugBlock {
                flags: DebugFlags(flags),
                ..DebugBlock::default()
            };
            let mut off = start + opts.len() + 1;
            for name in parts {
                if b.nnames == DEBUG_NAMES {
                    return Err("more than 8 cache names in a block");
                }
                if name.is_empty() {
                    return Err("an empty cache name");
                }
                b.names[b.nnames] = (off as u8, name.len() as u8);
                b.nnames += 1;
                off += name.len() + 1;
            }
            cfg.blocks[cfg.nblocks] = b;
            cfg.nblocks += 1;
        }
        Ok(cfg)
    }

    /// The debug flags for the cache called `name` (the last block that names it, or
    /// the last block for all caches).
    pub fn flags_for(&self, name: &str) -> DebugFlags {
        let mut all = DebugFlags(0);
        let mut named = None;
        for b in &self.blocks[..self.nblocks] {
            if b.nnames == 0 {
                all = b.flags;
            }
            for &(off, len) in &b.names[..b.nnames] {
                let pat = &self.text[off as usize..off as usize + len as usize];
                let hit = match pat.split_last() {
                    Some((b'*', prefix)) => name.as_bytes().starts_with(prefix),
                    _ => name.as_bytes() == pat,
                };
                if hit {
                    named = Some(b.flags);
                }
            }
        }
        named.unwrap_or(all)
    }

    /// Whether any block turns anything on.
    pub fn any(&self) -> bool {
        self.blocks[..self.nblocks].iter().any(|b| b.flags.0 != 0)
    }
}

/// Reads the variables from the process environment.
pub fn from_env() -> EnvConfig {
    from_lookup(|name| {
        // SAFETY: `name` is a NUL-terminated literal; getenv returns null or a pointer
        // into the environment, valid while nobody calls setenv (kmem reads it once,
        // at initialisation).
        let p = unsafe { libc::getenv(name.as_ptr()) };
        if p.is_null() {
            None
        } else {
            // SAFETY: getenv returned a NUL-terminated string.
            Some(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes())
        }
    })
}

/// Parses the variables through `get` (a test hook; [`from_env`] uses getenv).
pub fn from_lookup<'a>(get: impl Fn(&std::ffi::CStr) -> Option<&'a [u8]>) -> EnvConfig {
    let mut cfg = EnvConfig::default();
    if let Some(v) = get(c"KMEM_MAX") {
        match parse_size(v) {
            Some(n) => cfg.max_bytes = n,
            None => warn(
                b"KMEM_MAX",
                v,
                b"a size such as 512M, 2G or 65536",
                b"no limit",
            ),
        }
    }
    if let Some(v) = get(c"KMEM_NUMA_FAKE") {
        match parse_u64(v) {
            Some(n) if (1..=kmem_core::mmzone::MAX_NUMNODES as u64).contains(&n) => {
                cfg.numa_fake = n as usize
            }
            _ => warn(
                b"KMEM_NUMA_FAKE",
                v,
                b"a node count from 1 to 16",
                b"the real nodes",
            ),
        }
    }
    if let Some(v) = get(c"KMEM_DEBUG") {
        match DebugConfig::parse(v) {
            Ok(d) => cfg.debug = d,
            Err(_) => warn(
                b"KMEM_DEBUG",
                v,
                b"slub_debug options such as FZPU or FZ,kmalloc-64;P",
                b"no debugging",
            ),
        }
    }
    if let Some(v) = get(c"KMEM_PERCPU") {
        cfg.percpu = match v {
            b"thread" => PerCpuMode::Thread,
            b"cpu" => PerCpuMode::Cpu,
            b"cpu-cas" => PerCpuMode::CpuCas,
            b"cpu-rseq" => PerCpuMode::CpuRseq,
            b"cpu-lock" => PerCpuMode::CpuLock,
            _ => {
                warn(
                    b"KMEM_PERCPU",
                    v,
                    b"thread, cpu, cpu-cas, cpu-rseq or cpu-lock",
                    b"thread",
                );
                PerCpuMode::Thread
            }
        };
    }
    if let Some(v) = get(c"KMEM_STATS") {
        cfg.stats = match v {
            b"" => StatsTarget::None,
            b"stderr" => StatsTarget::Stderr,
            path if path.len() < 256 && !path.contains(&0) => {
                let mut buf = [0u8; 256];
                buf[..path.len()].copy_from_slice(path);
                StatsTarget::File(buf)
            }
            _ => {
                warn(
                    b"KMEM_STATS",
                    v,
                    b"stderr or a file path under 256 bytes",
                    b"no report",
                );
                StatsTarget::None
            }
        };
    }
    if let Some(v) = get(c"KMEM_INIT") {
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
        } else {
            warn(b"KMEM_INIT", v, b"alloc, free or alloc,free", b"off");
        }
    }
    if let Some(v) = get(c"KMEM_HARDEN") {
        cfg.harden = match v {
            b"on" => Harden::On,
            b"random" => Harden::Random,
            b"off" => Harden::Off,
            _ => {
                warn(b"KMEM_HARDEN", v, b"on, random or off", b"on");
                Harden::On
            }
        };
    }
    if let Some(v) = get(c"KMEM_DECAY_MS") {
        match parse_u64(v) {
            Some(n) => cfg.decay_ms = n,
            None => warn(b"KMEM_DECAY_MS", v, b"milliseconds", b"1000"),
        }
    }
    cfg
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

fn parse_u64(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(v.iter().fold(0u64, |a, &b| a * 10 + (b - b'0') as u64))
}

/// One warning line, assembled on the stack.
fn warn(name: &[u8], value: &[u8], expected: &[u8], default: &[u8]) {
    let mut buf = [0u8; 256];
    let mut len = 0;
    let value = &value[..value.len().min(64)];
    for part in [
        b"kmem: ignoring ".as_slice(),
        name,
        b"=",
        value,
        b" (expected ",
        expected,
        b"); using ",
        default,
        b"\n",
    ] {
        let n = part.len().min(buf.len() - len);
        buf[len..len + n].copy_from_slice(&part[..n]);
        len += n;
    }
    write_stderr(&buf[..len]);
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn lookup_fills_and_defaults() {
        let cfg = from_lookup(|n| match n.to_bytes() {
            b"KMEM_MAX" => Some(b"1G".as_slice()),
            b"KMEM_NUMA_FAKE" => Some(b"4".as_slice()),
            _ => None,
        });
        assert_eq!(cfg.max_bytes, 1 << 30);
        assert_eq!(cfg.numa_fake, 4);
        assert_eq!(cfg.decay_ms, 1000);
        // Malformed values fall back to the defaults.
        let bad = from_lookup(|n| match n.to_bytes() {
            b"KMEM_MAX" => Some(b"lots".as_slice()),
            b"KMEM_NUMA_FAKE" => Some(b"99".as_slice()),
            b"KMEM_DECAY_MS" => Some(b"-1".as_slice()),
            _ => None,
        });
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
        assert!(DebugConfig::parse(b"F,,x").is_err());
    }

    #[test]
    fn percpu_and_stats_values() {
        let cfg = from_lookup(|n| match n.to_bytes() {
            b"KMEM_PERCPU" => Some(b"cpu-rseq".as_slice()),
            b"KMEM_STATS" => Some(b"/tmp/kmem.stats".as_slice()),
            _ => None,
        });
        assert_eq!(cfg.percpu, PerCpuMode::CpuRseq);
        assert_eq!(cfg.stats.path().unwrap().to_bytes(), b"/tmp/kmem.stats");
        let cfg = from_lookup(|n| match n.to_bytes() {
            b"KMEM_PERCPU" => Some(b"sometimes".as_slice()),
            b"KMEM_STATS" => Some(b"stderr".as_slice()),
            _ => None,
        });
        assert_eq!(cfg.percpu, PerCpuMode::Thread);
        assert_eq!(cfg.stats, StatsTarget::Stderr);
    }

    #[test]
    fn init_and_harden_values() {
        let cfg = from_lookup(|n| match n.to_bytes() {
            b"KMEM_INIT" => Some(b"alloc,free".as_slice()),
            b"KMEM_HARDEN" => Some(b"random".as_slice()),
            _ => None,
        });
        assert!(cfg.init_on_alloc && cfg.init_on_free);
        assert_eq!(cfg.harden, Harden::Random);
        let cfg = from_lookup(|n| match n.to_bytes() {
            b"KMEM_INIT" => Some(b"free".as_slice()),
            b"KMEM_HARDEN" => Some(b"off".as_slice()),
            _ => None,
        });
        assert!(!cfg.init_on_alloc && cfg.init_on_free);
        assert_eq!(cfg.harden, Harden::Off);
        // Malformed: the defaults.
        let cfg = from_lookup(|n| match n.to_bytes() {
            b"KMEM_INIT" => Some(b"alloc,sometimes".as_slice()),
            b"KMEM_HARDEN" => Some(b"very".as_slice()),
            _ => None,
        });
        assert_eq!(cfg, EnvConfig::default());
    }
}
