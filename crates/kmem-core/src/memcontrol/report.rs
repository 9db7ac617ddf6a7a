//! The group's files in cgroup v2's formats (`memory.current`, `memory.stat`, …).

use super::*;
use crate::page::PAGE_SHIFT;
use crate::platform::Platform;
use core::fmt;

impl<'a, P: Platform> Memcg<'a, P> {
    // -------------------------------------------------------------------------
    // Reports.

    /// The group's files in cgroup v2's formats (see [`write_memcg_files`]).
    pub fn memcg_report(&self, w: &mut dyn fmt::Write, cg: &MemCgroup) -> fmt::Result {
        let rows = CacheRows::of(cg);
        let mut list = [("", 0isize); CACHE_ROWS];
        let mut n = 0;
        for (row, slot) in rows.iter().zip(list.iter_mut()) {
            *slot = row;
            n += 1;
        }
        write_memcg_files(w, &MemcgFiles::of(cg), &list[..n])
    }
}

/// The rows of a group's per-cache table: its slots and "other".
const CACHE_ROWS: usize = MEMCG_CACHE_SLOTS + 1;

/// A group's per-cache object counts, copied under its table's lock (a leaf) without
/// allocating: reports format or allocate after it.
#[derive(Clone, Copy)]
pub struct CacheRows {
    names: [[u8; MEMCG_NAME_LEN]; CACHE_ROWS],
    lens: [usize; CACHE_ROWS],
    counts: [isize; CACHE_ROWS],
    n: usize,
}

impl CacheRows {
    /// The rows of `cg` now.
    pub fn of(cg: &MemCgroup) -> Self {
        let mut r = CacheRows {
            names: [[0; MEMCG_NAME_LEN]; CACHE_ROWS],
            lens: [0; CACHE_ROWS],
            counts: [0; CACHE_ROWS],
            n: 0,
        };
        cg.for_each_cache(|name, objects| {
            if r.n < CACHE_ROWS {
                let len = name.len().min(MEMCG_NAME_LEN);
                r.names[r.n][..len].copy_from_slice(&name.as_bytes()[..len]);
                (r.lens[r.n], r.counts[r.n]) = (len, objects);
                r.n += 1;
            }
        });
        r
    }

    /// Each row: the cache's name and its objects.
    pub fn iter(&self) -> impl Iterator<Item = (&str, isize)> + '_ {
        (0..self.n).map(|i| {
            let name = core::str::from_utf8(&self.names[i][..self.lens[i]]).unwrap_or("?");
            (name, self.counts[i])
        })
    }
}

/// A group's figures as its cgroup files show them (bytes; `None` limit = "max").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemcgFiles<'a> {
    /// The group's name.
    pub name: &'a str,
    /// `memory.current`.
    pub current: u64,
    /// `memory.max`.
    pub max: Option<u64>,
    /// `memory.high`.
    pub high: Option<u64>,
    /// `memory.peak`.
    pub peak: u64,
    /// `memory.events`: high, max, oom.
    pub events: [u64; NR_MEMCG_EVENTS],
    /// `memory.stat`: slab_reclaimable, slab_unreclaimable, kmem_pages.
    pub stat: [i64; NR_MEMCG_STAT],
}

impl<'a> MemcgFiles<'a> {
    /// The figures of `cg` now.
    pub fn of(cg: &'a MemCgroup) -> Self {
        let limit = |v: usize| (v != usize::MAX).then_some((v as u64) << PAGE_SHIFT);
        MemcgFiles {
            name: cg.name(),
            current: cg.usage() as u64,
            max: limit(cg.memory.max()),
            high: limit(cg.memory.high()),
            peak: (cg.memory.watermark() as u64) << PAGE_SHIFT,
            events: [
                cg.events(MemcgEvent::High),
                cg.events(MemcgEvent::Max),
                cg.events(MemcgEvent::Oom),
            ],
            stat: [
                cg.stat(MemcgStat::SlabReclaimable) as i64,
                cg.stat(MemcgStat::SlabUnreclaimable) as i64,
                cg.stat(MemcgStat::KmemPages) as i64,
            ],
        }
    }
}

/// Writes a group's files: `memory.current`, `memory.max`, `memory.high`,
/// `memory.peak`, `memory.events` (cgroup v2 formats, one line each), `memory.stat`
/// (`kernel`, `kmem_pages`, `slab`, `slab_reclaimable`, `slab_unreclaimable`), then
/// objects per cache (cgroup v1's `memory.kmem.slabinfo`, short form).
pub fn write_memcg_files(
    w: &mut dyn fmt::Write,
    f: &MemcgFiles<'_>,
    caches: &[(&str, isize)],
) -> fmt::Result {
    let limit = |v: Option<u64>| -> LimitFmt { LimitFmt(v) };
    writeln!(w, "memcg {}", f.name)?;
    writeln!(w, "memory.current {}", f.current)?;
    writeln!(w, "memory.max {}", limit(f.max))?;
    writeln!(w, "memory.high {}", limit(f.high))?;
    writeln!(w, "memory.peak {}", f.peak)?;
    writeln!(
        w,
        "memory.events high {} max {} oom {}",
        f.events[0], f.events[1], f.events[2]
    )?;
    let [sr, su, kp] = f.stat;
    writeln!(w, "memory.stat")?;
    writeln!(w, "kernel {}", sr + su + kp)?;
    writeln!(w, "kmem_pages {kp}")?;
    writeln!(w, "slab {}", sr + su)?;
    writeln!(w, "slab_reclaimable {sr}")?;
    writeln!(w, "slab_unreclaimable {su}")?;
    writeln!(w, "memory.kmem.slabinfo")?;
    for (name, n) in caches {
        writeln!(w, "{name:<20} {n}")?;
    }
    Ok(())
}

/// A limit as cgroup files print it: bytes, or `max`.
struct LimitFmt(Option<u64>);

impl fmt::Display for LimitFmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("max"),
            Some(v) => write!(f, "{v}"),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::super::test_env::memcg_env;
    use super::*;
    use crate::page::PAGE_SIZE;
    use crate::slab::SlabFlags;
    use std::string::String;

    #[test]
    fn write_memcg_files_prints_the_lines_exactly() {
        let f = MemcgFiles {
            name: "web",
            current: 8192,
            max: None,
            high: Some(40960),
            peak: 12288,
            events: [1, 2, 3],
            stat: [100, 200, 4096],
        };
        let mut out = String::new();
        write_memcg_files(&mut out, &f, &[("kmalloc-cg-64", 3), ("other", -1)]).unwrap();
        assert_eq!(
            out,
            "memcg web\n\
             memory.current 8192\n\
             memory.max max\n\
             memory.high 40960\n\
             memory.peak 12288\n\
             memory.events high 1 max 2 oom 3\n\
             memory.stat\n\
             kernel 4396\n\
             kmem_pages 4096\n\
             slab 300\n\
             slab_reclaimable 100\n\
             slab_unreclaimable 200\n\
             memory.kmem.slabinfo\n\
             kmalloc-cg-64        3\n\
             other                -1\n"
        );
    }

    #[test]
    fn memcg_files_of_a_group_read_its_counters_in_bytes() {
        let g = MemCgroup::new_root();
        let none = MemcgFiles::of(&g);
        assert_eq!((none.name, none.current, none.peak), ("/", 0, 0));
        assert_eq!((none.max, none.high), (None, None));
        g.set_max(10 * PAGE_SIZE + 1);
        g.set_high(8 * PAGE_SIZE);
        assert!(g.try_charge_counters(3).is_ok());
        g.uncharge_counters(1);
        g.count_event(MemcgEvent::Oom);
        g.add_stat(MemcgStat::KmemPages, 2 * PAGE_SIZE as isize);
        let f = MemcgFiles::of(&g);
        let page = PAGE_SIZE as u64;
        assert_eq!((f.current, f.peak), (2 * page, 3 * page));
        assert_eq!((f.max, f.high), (Some(10 * page), Some(8 * page)));
        assert_eq!(f.events, [0, 0, 1]);
        assert_eq!(f.stat, [0, 0, 2 * PAGE_SIZE as i64]);
    }

    #[test]
    fn memcg_report_lists_a_group_and_its_caches() {
        let env = memcg_env();
        let (m, cpu) = (env.memcg(), env.cpu());
        let s = env.slab.cache("obj-64", 64, 8, SlabFlags::ACCOUNT);
        let g = m
            .mem_cgroup_create(Some(cpu), m.root_mem_cgroup(), "g")
            .unwrap();
        assert!(m.obj_cgroup_charge(Some(cpu), &g.objcg, s, 64));
        m.memcg_drain_stock(cpu);
        let mut out = String::new();
        m.memcg_report(&mut out, g).unwrap();
        let batch = MEMCG_CHARGE_BATCH * PAGE_SIZE;
        let expect = std::format!(
            "memcg g\nmemory.current {PAGE_SIZE}\nmemory.max max\nmemory.high max\n\
             memory.peak {batch}\nmemory.events high 0 max 0 oom 0\nmemory.stat\n\
             kernel 64\nkmem_pages 0\nslab 64\nslab_reclaimable 0\nslab_unreclaimable 64\n\
             memory.kmem.slabinfo\nobj-64               1\n"
        );
        assert_eq!(out, expect);
    }
}
