//! Allocation sites: the kernel's `/sys/kernel/slab/<cache>/alloc_calls` and
//! `free_calls` for the caches that keep slub_debug tracks (`KMEM_DEBUG=U`, for every
//! cache or named ones). The objects a cache has handed out are grouped by the return
//! address their allocation (or last free) was called from, with the count, the sizes
//! asked for, the ages, and the pids and CPU areas involved.
//!
//! [`LocationTable`] aggregates without allocating (its slots are given to it), so the
//! live view fills one while publishing from inside the allocator; the data API
//! (`Heap::alloc_calls` / `Heap::free_calls`) and the reports allocate their tables
//! first, then walk, then sort.
//!
//! Locking: none of its own. The walk (`Slub::for_each_tracked`) holds one cache
//! node's list locks at a time while the table is filled.

use kmem_core::slab::debug::{Track, TrackedObject, TRACK_FRAMES};
use std::fmt;

/// Which track groups the objects (`alloc_calls` or `free_calls`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Calls {
    /// Where the objects in use were allocated (`alloc_calls`).
    Alloc,
    /// Where the slots of the objects in use were last freed (`free_calls`: a
    /// previous life of the slot; `<not-available>` for a slot never freed).
    Free,
}

/// One call site: the objects in use whose track names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Location {
    /// The return address (the caller of the allocation or free); 0: not available.
    pub addr: usize,
    /// The whole recorded stack of the first object seen, innermost first.
    pub stack: [usize; TRACK_FRAMES],
    /// Objects.
    pub count: u64,
    /// Bytes asked for, in total (kmalloc's requested sizes; object sizes otherwise).
    pub size_sum: u64,
    /// Smallest request.
    pub size_min: u64,
    /// Largest request.
    pub size_max: u64,
    /// Youngest object's age (ms since its track was written).
    pub age_min_ms: u64,
    /// Sum of the ages (ms).
    pub age_sum_ms: u64,
    /// Oldest object's age (ms).
    pub age_max_ms: u64,
    /// Lowest pid.
    pub pid_min: u32,
    /// Highest pid.
    pub pid_max: u32,
    /// CPU areas (bit n: area n; areas past 63 are not shown).
    pub cpus: u64,
}

impl Location {
    /// No objects (a free slot of a [`LocationTable`]).
    pub const EMPTY: Location = Location {
        addr: 0,
        stack: [0; TRACK_FRAMES],
        count: 0,
        size_sum: 0,
        size_min: 0,
        size_max: 0,
        age_min_ms: 0,
        age_sum_ms: 0,
        age_max_ms: 0,
        pid_min: 0,
        pid_max: 0,
        cpus: 0,
    };

    fn first(t: &Track, size: u64, age_ms: u64) -> Self {
        Location {
            addr: t.frames[0],
            stack: t.frames,
            count: 1,
            size_sum: size,
            size_min: size,
            size_max: size,
            age_min_ms: age_ms,
            age_sum_ms: age_ms,
            age_max_ms: age_ms,
            pid_min: t.pid,
            pid_max: t.pid,
            cpus: cpu_bit(t.cpu),
        }
    }

    /// Adds `o`'s objects to this site's.
    pub fn merge(&mut self, o: &Location) {
        self.count += o.count;
        self.size_sum += o.size_sum;
        self.size_min = self.size_min.min(o.size_min);
        self.size_max = self.size_max.max(o.size_max);
        self.age_min_ms = self.age_min_ms.min(o.age_min_ms);
        self.age_sum_ms += o.age_sum_ms;
        self.age_max_ms = self.age_max_ms.max(o.age_max_ms);
        self.pid_min = self.pid_min.min(o.pid_min);
        self.pid_max = self.pid_max.max(o.pid_max);
        self.cpus |= o.cpus;
    }

    /// The kernel's `alloc_calls` line, with the address written by `symbol`:
    /// `count symbol size=min/avg/max age=min/avg/max pid=a-b cpus=list`.
    pub fn write(
        &self,
        w: &mut dyn fmt::Write,
        symbol: &mut dyn FnMut(usize, &mut dyn fmt::Write) -> fmt::Result,
    ) -> fmt::Result {
        write!(w, "{:7} ", self.count)?;
        if self.addr == 0 {
            w.write_str("<not-available>")?;
        } else {
            symbol(self.addr, w)?;
        }
        let n = self.count.max(1);
        if self.size_min == self.size_max {
            write!(w, " size={}", self.size_min)?;
        } else {
            write!(
                w,
                " size={}/{}/{}",
                self.size_min,
                self.size_sum / n,
                self.size_max
            )?;
        }
        if self.age_min_ms == self.age_max_ms {
            write!(w, " age={}", self.age_min_ms)?;
        } else {
            write!(
                w,
                " age={}/{}/{}",
                self.age_min_ms,
                self.age_sum_ms / n,
                self.age_max_ms
            )?;
        }
        if self.pid_min == self.pid_max {
            write!(w, " pid={}", self.pid_min)?;
        } else {
            write!(w, " pid={}-{}", self.pid_min, self.pid_max)?;
        }
        if self.cpus != 0 {
            w.write_str(" cpus=")?;
            write_cpu_list(w, self.cpus)?;
        }
        Ok(())
    }
}

fn cpu_bit(cpu: u32) -> u64 {
    if cpu < 64 {
        1 << cpu
    } else {
        0
    }
}

/// A CPU mask as the kernel's `%*pbl` prints it: `0-3,5`.
pub fn write_cpu_list(w: &mut dyn fmt::Write, mask: u64) -> fmt::Result {
    let mut first = true;
    let mut i = 0;
    while i < 64 {
        if mask & (1 << i) == 0 {
            i += 1;
            continue;
        }
        let start = i;
        while i + 1 < 64 && mask & (1 << (i + 1)) != 0 {
            i += 1;
        }
        if !first {
            w.write_char(',')?;
        }
        first = false;
        if start == i {
            write!(w, "{start}")?;
        } else {
            write!(w, "{start}-{i}")?;
        }
        i += 1;
    }
    Ok(())
}

/// An open-addressing table of sites keyed by address, over slots its owner gives it
/// (so filling it never allocates). When it is full, further sites are only counted
/// in `dropped`.
pub struct LocationTable<'a> {
    slots: &'a mut [Location],
    used: usize,
    /// Objects of sites that found no free slot.
    pub dropped: u64,
}

impl<'a> LocationTable<'a> {
    /// An empty table over `slots` (cleared here).
    pub fn new(slots: &'a mut [Location]) -> Self {
        slots.fill(Location::default());
        LocationTable {
            slots,
            used: 0,
            dropped: 0,
        }
    }

    /// Adds one object: its track for `which`, its age taken at `now_ns` (the
    /// platform's clock, as the tracks).
    pub fn add(&mut self, o: &TrackedObject, which: Calls, now_ns: u64) {
        let (t, size) = match which {
            // A quarantined object is nobody's: not live at the site that last had it.
            Calls::Alloc if o.quarantined() => return,
            Calls::Alloc => (&o.alloc, o.alloc.size as u64),
            Calls::Free => (&o.free, o.alloc.size as u64),
        };
        let age_ms = if t.when_ns == 0 {
            0
        } else {
            now_ns.saturating_sub(t.when_ns) / 1_000_000
        };
        self.add_location(&Location::first(t, size, age_ms));
    }

    /// Adds a site's objects (merging with the slot of the same address).
    pub fn add_location(&mut self, l: &Location) {
        let n = self.slots.len();
        // Slots with count 0 are free; a table at 7/8 is full (probes stay short).
        if n == 0 {
            self.dropped += l.count;
            return;
        }
        let mut i = (l.addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 16) % n;
        loop {
            let s = &mut self.slots[i];
            if s.count == 0 {
                if (self.used + 1) * 8 > n * 7 {
                    self.dropped += l.count;
                    return;
                }
                *s = *l;
                self.used += 1;
                return;
            }
            if s.addr == l.addr {
                s.merge(l);
                return;
            }
            i = (i + 1) % n;
        }
    }

    /// The sites, in slot order (unsorted).
    pub fn iter(&self) -> impl Iterator<Item = &Location> {
        self.slots.iter().filter(|l| l.count != 0)
    }

    /// How many sites.
    pub fn len(&self) -> usize {
        self.used
    }

    /// Whether no site was added.
    pub fn is_empty(&self) -> bool {
        self.used == 0
    }
}

/// The sites of one cache.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CacheLocations {
    /// The cache's name.
    pub cache: String,
    /// Its sites, most objects first.
    pub locations: Vec<Location>,
    /// Objects of sites beyond the table's room (not listed).
    pub dropped: u64,
}
