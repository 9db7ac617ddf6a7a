//! `struct page_counter`: pages charged to a group and its descendants, with limits.
//!
//! All fields are atomics; charging checks every level from the group to the root.

use crate::sync::{AtomicUsize, Ordering::Relaxed};

/// `struct page_counter`: pages charged, with limits. Charging checks every level
/// from the group up to the root.
pub struct PageCounter {
    pub(super) usage: AtomicUsize,
    pub(super) max: AtomicUsize,
    pub(super) high: AtomicUsize,
    pub(super) watermark: AtomicUsize,
    pub(super) failcnt: AtomicUsize,
}

impl PageCounter {
    pub(super) const fn new() -> Self {
        Self {
            usage: AtomicUsize::new(0),
            max: AtomicUsize::new(usize::MAX),
            high: AtomicUsize::new(usize::MAX),
            watermark: AtomicUsize::new(0),
            failcnt: AtomicUsize::new(0),
        }
    }
    /// Pages charged now.
    pub fn usage(&self) -> usize {
        self.usage.load(Relaxed)
    }
    /// The hard limit in pages (`usize::MAX`: none).
    pub fn max(&self) -> usize {
        self.max.load(Relaxed)
    }
    /// The soft limit in pages.
    pub fn high(&self) -> usize {
        self.high.load(Relaxed)
    }
    /// The highest usage seen (`memory.peak`).
    pub fn watermark(&self) -> usize {
        self.watermark.load(Relaxed)
    }
    /// How many charges failed at this level.
    pub fn failcnt(&self) -> usize {
        self.failcnt.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_counter_is_empty_and_unlimited() {
        let c = PageCounter::new();
        assert_eq!((c.usage(), c.watermark(), c.failcnt()), (0, 0, 0));
        assert_eq!((c.max(), c.high()), (usize::MAX, usize::MAX));
    }
}
