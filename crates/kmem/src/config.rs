//! Configuration from the environment, read once and without allocating (kmem may be
//! the process's malloc, so `std::env` is off limits).
//!
//! | variable          | meaning                                              | default   |
//! |-------------------|------------------------------------------------------|-----------|
//! | `KMEM_MAX`        | bound on the heap, a size like `512M`, `2G`, `65536`  | none      |
//! | `KMEM_NUMA_FAKE`  | split the machine into N fake nodes (`numa=fake=N`)   | real nodes|
//! | `KMEM_DECAY_MS`   | how long a free 2 MiB block stays resident before it is given back | 1000 |
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
}

impl Default for EnvConfig {
    fn default() -> Self {
        Self {
            max_bytes: 0,
            numa_fake: 0,
            decay_ms: 1000,
        }
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
    let shift = match v[digits..].to_ascii_uppercase().as_slice() {
        b"" | b"B" => 0,
        b"K" | b"KB" | b"KIB" => 10,
        b"M" | b"MB" | b"MIB" => 20,
        b"G" | b"GB" | b"GIB" => 30,
        b"T" | b"TB" | b"TIB" => 40,
        _ => return None,
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
}
