//! `/proc/slabinfo`, slabtop, the SLUB statistics files and `validate` over every
//! cache: reports that only read the slab layer.

use super::{KmemCache, Slub};
use crate::page::PAGE_SIZE;
use crate::platform::Platform;
use core::fmt;
use core::ptr;

impl<P: Platform> Slub<'_, P> {
    /// `/proc/slabinfo` (version 2.1, as SLUB prints it).
    pub fn slabinfo(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        write_slabinfo_header(w)?;
        let mut result = Ok(());
        self.caches.for_each(|s| {
            if result.is_ok() {
                result = write_slabinfo_row(w, &self.slab_row(s));
            }
        });
        result
    }

    /// `validate` on every cache (see [`Slub::validate`]); returns the problems found.
    pub fn validate_all(&self, found: &mut dyn FnMut(super::debug::Problem)) -> usize {
        let mut n = 0;
        self.caches.for_each(|s| n += self.validate(s, found));
        n
    }

    /// A cache's SLUB statistics, one `name value` line each (the files of
    /// `/sys/kernel/slab/<cache>/`), summed over every CPU area.
    pub fn slub_stats(&self, s: &KmemCache, w: &mut dyn fmt::Write) -> fmt::Result {
        for item in super::SlubStat::ALL {
            writeln!(
                w,
                "{} {}",
                item.name(),
                s.stat_sum(self.pages.cpu_areas().iter(), item)
            )?;
        }
        Ok(())
    }

    /// A slabtop-style summary: totals, then caches sorted by memory, largest first.
    pub fn slabtop(&self, w: &mut dyn fmt::Write, limit: usize) -> fmt::Result {
        let mut rows: [(usize, *const KmemCache, SlabRow); 64] =
            [(0, ptr::null(), SlabRow::default()); 64];
        let mut n = 0;
        let (
            mut objs,
            mut active,
            mut slabs,
            mut caches,
            mut active_caches,
            mut bytes,
            mut active_bytes,
        ) = (0, 0, 0, 0, 0, 0, 0);
        let (mut min_obj, mut max_obj, mut sum_obj) = (usize::MAX, 0, 0);
        self.caches.for_each(|s| {
            let r = self.slab_row(s);
            let size = (r.num_slabs << s.config().order) * PAGE_SIZE;
            objs += r.num_objs;
            active += r.active_objs;
            slabs += r.num_slabs;
            caches += 1;
            if r.num_slabs > 0 {
                active_caches += 1;
            }
            bytes += size;
            active_bytes += r.active_objs * s.config().size;
            min_obj = min_obj.min(s.config().size);
            max_obj = max_obj.max(s.config().size);
            sum_obj += s.config().size;
            // Keep the largest 64 caches by memory.
            let entry = (size, s as *const KmemCache, r);
            if n < rows.len() {
                rows[n] = entry;
                n += 1;
            } else if let Some(min) = rows.iter_mut().min_by_key(|e| e.0) {
                if min.0 < size {
                    *min = entry;
                }
            }
        });
        let rows = &mut rows[..n];
        rows.sort_unstable_by_key(|e| core::cmp::Reverse(e.0));
        let pct = |a: usize, b: usize| {
            if b == 0 {
                0.0
            } else {
                a as f64 * 100.0 / b as f64
            }
        };
        writeln!(
            w,
            " Active / Total Objects (% used)    : {active} / {objs} ({:.1}%)",
            pct(active, objs)
        )?;
        writeln!(
            w,
            " Active / Total Slabs (% used)      : {slabs} / {slabs} (100.0%)"
        )?;
        writeln!(
            w,
            " Active / Total Caches (% used)     : {active_caches} / {caches} ({:.1}%)",
            pct(active_caches, caches)
        )?;
        writeln!(
            w,
            " Active / Total Size (% used)       : {:.2}K / {:.2}K ({:.1}%)",
            active_bytes as f64 / 1024.0,
            bytes as f64 / 1024.0,
            pct(active_bytes, bytes)
        )?;
        writeln!(
            w,
            " Minimum / Average / Maximum Object : {:.2}K / {:.2}K / {:.2}K",
            if caches == 0 {
                0.0
            } else {
                min_obj as f64 / 1024.0
            },
            if caches == 0 {
                0.0
            } else {
                sum_obj as f64 / caches as f64 / 1024.0
            },
            max_obj as f64 / 1024.0
        )?;
        writeln!(w)?;
        writeln!(
            w,
            "  OBJS ACTIVE  USE OBJ SIZE  SLABS OBJ/SLAB CACHE SIZE NAME"
        )?;
        for (size, s, r) in rows.iter().take(limit) {
            // SAFETY: the pointer came from the cache list a moment ago; caches made
            // by kmem_cache_create are only freed by a destroy that the caller of
            // this report does not run concurrently.
            let s = unsafe { &**s };
            writeln!(
                w,
                "{:6} {:6} {:3.0}% {:7.2}K {:6} {:8} {:9}K {}",
                r.num_objs,
                r.active_objs,
                pct(r.active_objs, r.num_objs),
                s.config().size as f64 / 1024.0,
                r.num_slabs,
                s.config().objects,
                size / 1024,
                s.name()
            )?;
        }
        Ok(())
    }

    /// The slabinfo figures of `s`.
    pub fn slab_row(&self, s: &KmemCache) -> SlabRow {
        let cfg = s.config();
        let mut r = SlabRow::new(s.name(), 0, 0, cfg.size, cfg.objects, 1 << cfg.order, 0);
        for nid in 0..self.pages.nr_nodes() {
            let slabs = s.nr_slabs(nid);
            r.num_slabs += slabs;
            r.num_objs += slabs * s.config().objects;
            r.active_objs += (slabs * s.config().objects).saturating_sub(s.count_partial_free(nid));
        }
        r
    }
}

/// The two header lines of `/proc/slabinfo` 2.1.
pub fn write_slabinfo_header(w: &mut dyn fmt::Write) -> fmt::Result {
    writeln!(w, "slabinfo - version: 2.1")?;
    writeln!(w, "# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>")
}

/// One `/proc/slabinfo` row (SLUB has no tunables: they print as 0).
pub fn write_slabinfo_row(w: &mut dyn fmt::Write, r: &SlabRow) -> fmt::Result {
    writeln!(
        w,
        "{:<17} {:6} {:6} {:6} {:4} {:4} : tunables {:4} {:4} {:4} : slabdata {:6} {:6} {:6}",
        r.name(),
        r.active_objs,
        r.num_objs,
        r.objsize,
        r.objperslab,
        r.pagesperslab,
        0,
        0,
        0,
        r.num_slabs,
        r.num_slabs,
        0
    )
}

/// One cache's slabinfo figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct SlabRow {
    name: [u8; crate::slab::CACHE_NAME_LEN],
    name_len: usize,
    /// Objects allocated or held by CPUs (all objects minus free ones on node lists).
    pub active_objs: usize,
    /// Objects in all slabs.
    pub num_objs: usize,
    /// Bytes per object, metadata and alignment included.
    pub objsize: usize,
    /// Objects per slab.
    pub objperslab: usize,
    /// Pages per slab.
    pub pagesperslab: usize,
    /// Slabs.
    pub num_slabs: usize,
}

impl SlabRow {
    /// A row from its figures (for reports built from a snapshot).
    pub fn new(
        name: &str,
        active_objs: usize,
        num_objs: usize,
        objsize: usize,
        objperslab: usize,
        pagesperslab: usize,
        num_slabs: usize,
    ) -> Self {
        let mut r = SlabRow {
            active_objs,
            num_objs,
            objsize,
            objperslab,
            pagesperslab,
            num_slabs,
            ..SlabRow::default()
        };
        let mut n = name.len().min(r.name.len());
        while !name.is_char_boundary(n) {
            n -= 1;
        }
        r.name[..n].copy_from_slice(&name.as_bytes()[..n]);
        r.name_len = n;
        r
    }

    /// The cache's name.
    pub fn name(&self) -> &str {
        core::str::from_utf8(&self.name[..self.name_len]).unwrap_or("?")
    }
}
