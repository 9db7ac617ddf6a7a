//! The slab layer's reports on the whole allocator: `/proc/slabinfo`, slabtop, the
//! SLUB statistics files and `validate`.

use super::Kmem;
use crate::platform::Platform;
use crate::slab::{debug::Problem, KmemCache};
use core::fmt;

impl<P: Platform> Kmem<P> {
    /// `/proc/slabinfo` (version 2.1, as SLUB prints it).
    pub fn slabinfo(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        self.slub().slabinfo(w)
    }

    /// `validate` on every cache (see [`crate::slab::Slub::validate`]); returns the
    /// problems found.
    pub fn validate_all(&self, found: &mut dyn FnMut(Problem)) -> usize {
        self.slub().validate_all(found)
    }

    /// A cache's SLUB statistics, one `name value` line each (the files of
    /// `/sys/kernel/slab/<cache>/`), summed over every CPU area.
    pub fn slub_stats(&self, s: &KmemCache, w: &mut dyn fmt::Write) -> fmt::Result {
        self.slub().slub_stats(s, w)
    }

    /// A slabtop-style summary: totals, then caches sorted by memory, largest first.
    pub fn slabtop(&self, w: &mut dyn fmt::Write, limit: usize) -> fmt::Result {
        self.slub().slabtop(w, limit)
    }
}
