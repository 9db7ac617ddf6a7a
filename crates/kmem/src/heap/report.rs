//! The heap's reports: the kernel's text formats (`/proc/slabinfo`, `buddyinfo`,
//! `zoneinfo`, `vmstat`, the OOM report's `Mem-Info:`, slabtop, SLUB statistics),
//! `validate`, the `KMEM_STATS` report at exit and, under `KMEM_DEBUG`, validation at
//! exit.
//!
//! The `String` reports allocate (they are for programs and tools); the exit report
//! ([`Heap::write_report`]) does not: it writes straight to its destination; only the
//! allocation sites appended at exit under `KMEM_DEBUG=U` allocate (the atexit handler
//! runs outside the allocator). Also the data behind `alloc_calls`, `free_calls` and the
//! leak scan. No lock of its own: the core takes the slab and page allocator locks it
//! needs while walking.

use super::{Heap, HEAP};
use crate::config::StatsTarget;
use crate::platform::linux::{write_stderr, FdWriter};
use crate::platform::os;
use kmem_core::show_mem;
use kmem_core::KmemCache;
use std::fmt;

/// A report written into a fresh `String` (writing to a `String` cannot fail).
fn text(write: impl FnOnce(&mut String) -> fmt::Result) -> String {
    let mut s = String::new();
    let _ = write(&mut s);
    s
}

/// Most problems [`Heap::validate`] returns (all are reported).
pub const VALIDATE_PROBLEMS: usize = 256;
impl Heap {
    /// `/sys/kernel/slab/<cache>/alloc_calls` as data: the objects in use of every cache
    /// with slub_debug tracks (`KMEM_DEBUG=U`), or of the cache named, grouped by the
    /// site that allocated them (see [`crate::sites`]).
    pub fn alloc_calls(&self, cache: Option<&str>) -> Vec<crate::sites::CacheLocations> {
        locations(crate::sites::Calls::Alloc, cache)
    }

    /// `free_calls`: the same objects grouped by where their slots were last freed.
    pub fn free_calls(&self, cache: Option<&str>) -> Vec<crate::sites::CacheLocations> {
        locations(crate::sites::Calls::Free, cache)
    }

    /// A leak scan now (kmemleak; see [`crate::leaks`]): the tracked objects in use
    /// that nothing points to, by allocation site.
    pub fn leaks(&self) -> super::leaks::LeakReport {
        super::leaks::scan()
    }

    /// Writes the exit report (slabinfo, buddyinfo, vmstat, memory cgroups) to `w`, without
    /// allocating.
    pub fn write_report(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        if self.config().debug.any() {
            // slub_debug is on: walk every slab first (problems are reported as found).
            let n = self.kmem.validate_all(&mut |_| {});
            writeln!(w, "kmem: validate found {n} problem(s)")?;
        }
        self.kmem.slabinfo(w)?;
        writeln!(w)?;
        show_mem::buddyinfo(&self.kmem.pages, w)?;
        writeln!(w)?;
        show_mem::vmstat(&self.kmem.pages, w)?;
        // Memory cgroups (not the root): each group's files after a blank line. Written
        // straight to `w`: nothing here allocates.
        self.drain_memcg_stocks();
        let mut res = Ok(());
        self.kmem.memcg().for_each_mem_cgroup(|cg| {
            if res.is_ok() && cg.parent().is_some() {
                res = writeln!(w).and_then(|_| self.kmem.memcg().memcg_report(w, cg));
            }
        });
        res
    }

    /// `/proc/slabinfo` for the heap.
    pub fn slabinfo(&self) -> String {
        text(|s| self.kmem.slabinfo(s))
    }

    /// `validate` on every cache: walks every slab on the node lists (and a debug
    /// cache's full slabs) checking freelists, counts, red zones, poison; problems are
    /// reported on stderr in the kernel's format and returned, the first
    /// [`VALIDATE_PROBLEMS`] of them: the list is made before the walk, which holds
    /// the caches' locks, and takes no memory under them (an allocation of the slab
    /// being checked would wait for its own node's lock).
    pub fn validate(&self) -> Vec<kmem_core::slab::debug::Problem> {
        let mut v = Vec::with_capacity(VALIDATE_PROBLEMS);
        self.kmem.validate_all(&mut |p| {
            if v.len() < v.capacity() {
                v.push(p);
            }
        });
        v
    }

    /// A cache's SLUB statistics (`alloc_fastpath 123` lines).
    pub fn slub_stats(&self, s: &KmemCache) -> String {
        text(|out| self.kmem.slub_stats(s, out))
    }

    /// A slabtop-style summary, the `limit` largest caches.
    pub fn slabtop(&self, limit: usize) -> String {
        text(|s| self.kmem.slabtop(s, limit))
    }

    /// `/proc/buddyinfo` for the heap.
    pub fn buddyinfo(&self) -> String {
        text(|s| show_mem::buddyinfo(&self.kmem.pages, s))
    }

    /// `/proc/zoneinfo` for the heap.
    pub fn zoneinfo(&self) -> String {
        text(|s| show_mem::zoneinfo(&self.kmem.pages, s))
    }

    /// `/proc/vmstat` for the heap.
    pub fn vmstat(&self) -> String {
        text(|s| show_mem::vmstat(&self.kmem.pages, s))
    }

    /// The OOM report's `Mem-Info:` block for the heap (`show_free_areas`).
    pub fn show_free_areas(&self) -> String {
        text(|s| show_mem::show_free_areas(&self.kmem.pages, s))
    }
}

/// `KMEM_DEBUG` without `KMEM_STATS`: the whole heap validated at process exit
/// (registered with `atexit` once the heap is ready), so that corruption no later
/// allocation noticed — a write after free into an object nobody took again, a red zone
/// of an object never freed — is still reported (and, under `KMEM_ON_ERROR=abort`,
/// ends the program with SIGABRT). This thread's per-CPU caches are flushed first, so
/// its CPU slabs are on the lists validate walks; threads still running keep theirs.
pub(super) extern "C" fn validate_at_exit() {
    let h = &HEAP;
    h.flush_cpu_caches();
    let n = h.kmem.validate_all(&mut |_| {});
    if n > 0 {
        use std::fmt::Write as _;
        let mut w = FdWriter::new(2);
        let _ = writeln!(w, "kmem: validate at exit found {n} problem(s)");
        w.flush();
    }
}

/// The exit report's allocation sites: every tracking cache's `alloc_calls`
/// (symbolised), after a blank line; nothing when no cache keeps tracks. Allocates.
fn write_alloc_calls(w: &mut dyn fmt::Write) -> fmt::Result {
    let caches = locations(crate::sites::Calls::Alloc, None);
    if caches.iter().all(|c| c.locations.is_empty()) {
        return Ok(());
    }
    let mut sym = crate::symbolize::Symbolizer::for_self().ok();
    writeln!(w)?;
    writeln!(w, "alloc_calls: objects in use by allocation site")?;
    for c in caches.iter().filter(|c| !c.locations.is_empty()) {
        writeln!(w, "{}:", c.cache)?;
        for l in &c.locations {
            l.write(w, &mut |a, w| match sym.as_mut() {
                Some(s) => w.write_str(&s.symbolize(a)),
                None => write!(w, "0x{a:x}"),
            })?;
            writeln!(w)?;
        }
    }
    Ok(())
}

/// `KMEM_STATS`: the report at process exit (registered with `atexit` once the heap is
/// ready); under `KMEM_DEBUG` it validates first, after flushing this thread's per-CPU
/// caches (see [`validate_at_exit`]).
pub(super) extern "C" fn stats_at_exit() {
    let h = &HEAP;
    if h.config().debug.any() {
        h.flush_cpu_caches();
    }
    let fd = match h.config().stats {
        StatsTarget::Stderr => Some(2),
        t => match t.path() {
            Some(p) => os::create_file(p),
            None => return,
        },
    };
    let Some(fd) = fd else {
        write_stderr(b"kmem: KMEM_STATS: cannot open the file\n");
        return;
    };
    let mut w = FdWriter::new(fd);
    let _ = h.write_report(&mut w);
    let _ = write_alloc_calls(&mut w);
    w.flush();
    if fd != 2 {
        os::close_fd(fd);
    }
}

/// Slots per cache walk of [`locations`].
const DATA_SLOTS: usize = 4096;
/// Most caches and sites [`locations`] returns (its buffers are allocated before the
/// walk, which runs under the cache list lock and must not allocate).
const DATA_CACHES: usize = 1024;
const DATA_SITES: usize = 16384;

/// `alloc_calls` / `free_calls` of every tracking cache of the process heap (or only
/// of the cache named `cache`), most objects first. Caches without tracks are left
/// out (the kernel has no such file for them).
pub(crate) fn locations(
    which: crate::sites::Calls,
    cache: Option<&str>,
) -> Vec<crate::sites::CacheLocations> {
    let h = &HEAP;
    let kmem = h.kmem();
    let slub = kmem.slub();
    let now = kmem_core::Platform::now_ns(h.page_allocator().platform());
    let mut slots = vec![crate::sites::Location::default(); DATA_SLOTS];
    let mut names: Vec<(kmem_core::slab::SlabRow, u64)> = Vec::with_capacity(DATA_CACHES);
    let mut sites: Vec<(usize, crate::sites::Location)> = Vec::with_capacity(DATA_SITES);
    kmem.caches().for_each(|s| {
        if !s.config().flags.contains(kmem_core::SlabFlags::STORE_USER)
            || cache.is_some_and(|c| c != s.name())
            || names.len() == names.capacity()
        {
            return;
        }
        let mut t = crate::sites::LocationTable::new(&mut slots);
        slub.for_each_tracked(s, &mut |o| t.add(o, which, now));
        let mut dropped = t.dropped;
        for l in t.iter() {
            if sites.len() < sites.capacity() {
                sites.push((names.len(), *l));
            } else {
                dropped += l.count;
            }
        }
        let row = kmem_core::slab::SlabRow::new(s.name(), 0, 0, 0, 0, 0, 0);
        names.push((row, dropped));
    });
    let mut out: Vec<crate::sites::CacheLocations> = names
        .iter()
        .map(|(row, dropped)| crate::sites::CacheLocations {
            cache: row.name().to_string(),
            locations: Vec::new(),
            dropped: *dropped,
        })
        .collect();
    for (i, l) in sites {
        out[i].locations.push(l);
    }
    for c in &mut out {
        c.locations
            .sort_by_key(|l| (std::cmp::Reverse(l.count), l.addr));
    }
    out
}
