//! Log output without allocation (the kernel's printk, as far as the allocator needs
//! it): [`LogWriter`] formats into a stack buffer and hands whole lines to
//! [`Platform::log`], so reports can be written from the allocation path itself, and
//! [`GfpNames`] prints GFP flags as printk's `%pGg` does.
//!
//! No locks: a writer belongs to the caller's stack; the platform's `log` may be
//! called concurrently (its contract).

use crate::gfp::Gfp;
use crate::platform::Platform;
use core::fmt::{self, Write};

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
