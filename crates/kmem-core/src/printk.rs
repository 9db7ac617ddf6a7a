//! Log output without allocation (the kernel's printk, as far as the allocator needs
//! it): [`LogWriter`] formats into a stack buffer and hands whole lines to
//! [`Platform::log`], so reports can be written from the allocation path itself, and
//! [`GfpNames`] prints GFP flags as printk's `%pGg` does.
//!
//! [`RateLimit`] is the kernel's `ratelimit_state`: a report that can repeat without
//! bound (an allocation failure, on every failing call) prints at most a burst of
//! times an interval, then says how many it held back.
//!
//! No locks: a writer belongs to the caller's stack; the platform's `log` may be
//! called concurrently (its contract); a rate limit's state is atomics.

use crate::gfp::Gfp;
use crate::platform::Platform;
use crate::sync::{AtomicU32, AtomicU64, Ordering::Relaxed};
use core::fmt::{self, Write};

/// `DEFAULT_RATELIMIT_INTERVAL`: 5 s.
pub const DEFAULT_RATELIMIT_INTERVAL_NS: u64 = 5_000_000_000;
/// `DEFAULT_RATELIMIT_BURST`.
pub const DEFAULT_RATELIMIT_BURST: u32 = 10;

/// `struct ratelimit_state`: at most `burst` reports in each `interval_ns` of the
/// platform clock. Lock-free: concurrent callers at an interval's turn may let a
/// report or two more through, never fewer.
#[derive(Debug)]
pub struct RateLimit {
    interval_ns: u64,
    burst: u32,
    /// Start of the current interval (0: none yet).
    begin: AtomicU64,
    /// Reports let through in the current interval.
    printed: AtomicU32,
    /// Reports held back since the last one printed the count.
    missed: AtomicU32,
}

/// What [`RateLimit::check`] allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateLimited {
    /// Print; first say that this many were held back (`N callbacks suppressed`).
    Print {
        /// Reports held back in the intervals before (0: none).
        suppressed: u32,
    },
    /// Held back.
    Suppress,
}

impl RateLimit {
    /// A limit of `burst` reports each `interval_ns`.
    pub const fn new(interval_ns: u64, burst: u32) -> Self {
        Self {
            interval_ns,
            burst,
            begin: AtomicU64::new(0),
            printed: AtomicU32::new(0),
            missed: AtomicU32::new(0),
        }
    }

    /// `__ratelimit`: whether a report at `now_ns` may print.
    pub fn check(&self, now_ns: u64) -> RateLimited {
        let now = now_ns.max(1);
        let begin = self.begin.load(Relaxed);
        let mut suppressed = 0;
        if (begin == 0 || now.saturating_sub(begin) >= self.interval_ns)
            && self
                .begin
                .compare_exchange(begin, now, Relaxed, Relaxed)
                .is_ok()
        {
            // A new interval (this caller turned it): the count so far goes out first.
            suppressed = self.missed.swap(0, Relaxed);
            self.printed.store(0, Relaxed);
        }
        if self.printed.fetch_add(1, Relaxed) < self.burst {
            RateLimited::Print { suppressed }
        } else {
            self.missed.fetch_add(1, Relaxed);
            RateLimited::Suppress
        }
    }
}

/// A `fmt::Write` that buffers one line on the stack and gives it to the platform.
pub struct LogWriter<'a, P: Platform> {
    platform: &'a P,
    buf: [u8; 256],
    len: usize,
}

impl<'a, P: Platform> LogWriter<'a, P> {
    /// A writer to `platform`'s log.
    pub fn new(platform: &'a P) -> Self {
        Self {
            platform,
            buf: [0; 256],
            len: 0,
        }
    }
    fn flush(&mut self) {
        if self.len > 0 {
            // Split at a character boundary already guaranteed: we only copy whole
            // `&str` pieces, and cut long lines at a char boundary below.
            let text = core::str::from_utf8(&self.buf[..self.len]).unwrap_or("?\n");
            self.platform.log(text);
            self.len = 0;
        }
    }
}

impl<P: Platform> Write for LogWriter<'_, P> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for ch in s.chars() {
            let mut tmp = [0u8; 4];
            let enc = ch.encode_utf8(&mut tmp).as_bytes();
            if self.len + enc.len() > self.buf.len() {
                self.flush();
            }
            self.buf[self.len..self.len + enc.len()].copy_from_slice(enc);
            self.len += enc.len();
            if ch == '\n' {
                self.flush();
            }
        }
        Ok(())
    }
}

impl<P: Platform> Drop for LogWriter<'_, P> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The kernel's `%pGg`: GFP flags by name.
pub struct GfpNames(pub Gfp);

impl fmt::Display for GfpNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GFP_KERNEL")?;
        for (name, flag) in [
            ("__GFP_ZERO", Gfp::ZERO),
            ("__GFP_NOWARN", Gfp::NOWARN),
            ("__GFP_HIGH", Gfp::HIGH),
            ("__GFP_THISNODE", Gfp::THISNODE),
            ("__GFP_ACCOUNT", Gfp::ACCOUNT),
        ] {
            if self.0.contains(flag) {
                write!(f, "|{name}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_rate_limit_lets_a_burst_through_each_interval_and_counts_the_rest() {
        use super::{RateLimit, RateLimited::*};
        let rs = RateLimit::new(100, 3);
        let at = |t| rs.check(t);
        assert_eq!([at(10), at(20), at(30)], [Print { suppressed: 0 }; 3]);
        assert_eq!([at(40), at(109)], [Suppress; 2]);
        // The next interval starts with the count of what was held back.
        assert_eq!(at(110), Print { suppressed: 2 });
        assert_eq!(
            [at(111), at(112), at(113)],
            [Print { suppressed: 0 }, Print { suppressed: 0 }, Suppress]
        );
        assert_eq!(at(500), Print { suppressed: 1 });
        assert_eq!(at(900), Print { suppressed: 0 });
    }

    extern crate std;
    use super::*;
    use std::string::String;
    use std::sync::Mutex;
    use std::vec::Vec;

    struct Lines(Mutex<Vec<String>>);

    impl Platform for Lines {
        unsafe fn section_online(&self, _: *mut u8, _: usize, _: usize) -> bool {
            false
        }
        unsafe fn report_free(&self, _: *mut u8, _: usize) {}
        fn now_ns(&self) -> u64 {
            0
        }
        fn log(&self, text: &str) {
            self.0.lock().unwrap().push(text.into());
        }
    }

    #[test]
    fn whole_lines_go_out_and_the_rest_at_drop() {
        let p = Lines(Mutex::new(Vec::new()));
        {
            let mut w = LogWriter::new(&p);
            write!(w, "a{}", 1).unwrap();
            writeln!(w, "b").unwrap();
            write!(w, "c\nd").unwrap();
            assert_eq!(*p.0.lock().unwrap(), ["a1b\n", "c\n"]);
        }
        assert_eq!(*p.0.lock().unwrap(), ["a1b\n", "c\n", "d"]);
    }

    #[test]
    fn a_long_line_is_cut_at_a_character_boundary() {
        let p = Lines(Mutex::new(Vec::new()));
        let text: String = core::iter::repeat_n('é', 200).collect(); // 400 bytes
        writeln!(LogWriter::new(&p), "{text}").unwrap();
        let lines = p.0.lock().unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), 256);
        assert_eq!(lines.concat(), std::format!("{text}\n"));
    }

    #[test]
    fn gfp_names_as_printk_prints_them() {
        let s = std::format!("{}", GfpNames(Gfp::ZERO | Gfp::NOWARN));
        assert_eq!(s, "GFP_KERNEL|__GFP_ZERO|__GFP_NOWARN");
        assert_eq!(std::format!("{}", GfpNames(Gfp::KERNEL)), "GFP_KERNEL");
    }
}
