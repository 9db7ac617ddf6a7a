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
        const N: usize = MEMCG_CACHE_SLOTS + 1;
        let mut names = [[0u8; MEMCG_NAME_LEN]; N];
        let mut lens = [0usize; N];
        let mut counts = [0isize; N];
        let mut n = 0;
        cg.for_each_cache(|name, objects| {
            if n < N {
                lens[n] = name.len().min(MEMCG_NAME_LEN);
                names[n][..lens[n]].copy_from_slice(&name.as_bytes()[..lens[n]]);
                counts[n] = objects;
                n += 1;
            }
        });
        let mut list = [("", 0isize); N];
        for i in 0..n {
            list[i] = (
                core::str::from_utf8(&names[i][..lens[i]]).unwrap_or("?"),
                counts[i],
            );
        }
        write_memcg_files(w, &MemcgFiles::of(cg), &list[..n])
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
