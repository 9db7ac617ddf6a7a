//! The live view: a running process's heap, readable from another process without
//! the program's cooperation and without ptrace (`kmem top`).
//!
//! ## The segment
//! Each process on kmem keeps a file in shared memory, `/dev/shm/kmem.PID`, mode 0600
//! (only its user, or root, can read it), mapped shared by the process. It holds a
//! binary header (4 KiB), then two text regions, one record per line, `key fields…`
//! (the format is [`Snapshot::parse`]'s): the main text (caches, pages, counters) up to
//! the middle of the file, the allocation sites in the second half. The file is
//! sparse: only the pages written take memory.
//!
//! ## Publishing
//! The heap publishes from its slow paths (the writer is `heap/live.rs`): the slab
//! layer's housekeeping tick (every 16th slow path of a CPU area, debug caches
//! included: where an allocation holds no allocator lock) and huge allocations; not
//! from free paths, which may run under the cache list's lock. The main text is
//! rewritten when `KMEM_LIVE` milliseconds have passed since the last time or a reader
//! asked (`request` in the header); it walks the caches (slabinfo's figures, under each
//! cache's node locks, one at a time) and reads the page allocator's counters and
//! `/proc/self/statm`: about 40 µs with the 67 kmalloc caches. The sites (caches with
//! slub_debug tracks only) walk every tracked object, so they are rewritten when a
//! reader asks (`sites_request`) or when the time since the last walk is at least 100
//! times what it cost (at most 1% of one CPU). Nothing there allocates; one thread
//! publishes at a time (`busy`, try-only); others skip. So the fast paths do nothing
//! for the view, and a process that stops allocating shows its last state, with its
//! age.
//!
//! Each region is guarded by its own sequence count (`seq`: odd while being written),
//! as the kernel's seqlocks: a reader copies the text and retries if `seq` moved.
//! A region keeps room for its last records: a record that does not fit is left out
//! whole, the sites' objects left out are counted (`dropped alloc|free - N`), and a
//! main text out of room ends with `truncated`; every region ends with `end`.
//!
//! ## Lifetime
//! Made at the first tick once the process has run for the publishing interval
//! (`KMEM_LIVE`, 250 ms by default; a child after `fork` drops the parent's mapping
//! and counts from the fork, or from the parent's start if the parent had made none:
//! its interval then needs no write in the child), removed by an `atexit` handler. A process that ends
//! sooner, as most commands a shell or a build runs do, makes none and pays nothing
//! for the view (making, publishing and removing it cost `ls` about a fifth of its
//! CPU time); `kmem top` sees a process from its first tick after that interval, so
//! one that stops allocating before then shows no view until it allocates again.
//! A process that dies without running the `atexit` handler leaves a stale file;
//! [`processes`] recognises it (no such pid, or a pid whose start time differs from
//! the header's) and removes it.
//!
//! Locking: none here (the reader maps the file and copies under the sequence counts).

use crate::heap::live::{
    publish_now, start_ticks_of, unix_ns, Header, Region, HEADER_BYTES, MAGIC, OFF, SITES_OFFSET,
    VERSION, WRITER,
};
pub use crate::heap::live::{DIR, SEGMENT_BYTES};
use crate::sites::{Calls, Location};
use crate::stats::CacheStats;
use std::sync::atomic::{fence, Ordering};

// ---------------------------------------------------------------------------
// Reading (another process, or this one): allocates freely.

/// A zone in a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LiveZone {
    /// Its node.
    pub node: usize,
    /// Its name.
    pub name: String,
    /// Free pages (buddy lists).
    pub free_pages: u64,
    /// Pages managed.
    pub managed_pages: u64,
    /// Pages on per-CPU lists.
    pub pcp_pages: u64,
    /// Free pages given back to the OS.
    pub reported_pages: u64,
    /// Free blocks per order (buddyinfo).
    pub buddyinfo: Vec<u64>,
}

/// An allocation site in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LiveSite {
    /// `alloc_calls` or `free_calls`.
    pub calls: Calls,
    /// The cache.
    pub cache: String,
    /// The figures.
    pub location: Location,
}

/// One published state of a process's heap.
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Snapshot {
    /// The process.
    pub pid: u32,
    /// Its command name.
    pub comm: String,
    /// `KMEM_PERCPU`'s mode in use.
    pub mode: String,
    /// The SLUB design in use.
    pub slub: String,
    /// The publishing interval (ms).
    pub interval_ms: u64,
    /// When it was published (Unix time, ns).
    pub published_unix_ns: u64,
    /// How many times the process has published.
    pub publishes: u64,
    /// `kmem::stats::counters()`.
    pub counters: crate::stats::Counters,
    /// Resident memory of the process (bytes).
    pub rss_bytes: u64,
    /// Live huge mappings.
    pub huge_live: u64,
    /// Bytes they map.
    pub huge_bytes: u64,
    /// Freed huge mappings kept for reuse (bytes).
    pub huge_cached_bytes: u64,
    /// Bytes of objects the barns keep in full sheaves past their caches' own bounds
    /// (the spill: kmem-core's `slab::barn_spill`), and the budget for them.
    pub spill_bytes: u64,
    /// The spill's budget (bytes).
    pub spill_limit: u64,
    /// The heap bound (`KMEM_MAX`, `Heap::set_max_bytes`), in pages; 0 for none.
    pub bound_pages: u64,
    /// Pages the bound counts as taken: online in the page allocator and not lent,
    /// plus those the huge mappings hold.
    pub bound_counted_pages: u64,
    /// Of them, the huge mappings' pages.
    pub bound_outside_pages: u64,
    /// Free pages of the page allocator lent to the huge mappings (taken off the
    /// zones, given back to the OS: vmstat's `balloon_inflate` less `balloon_deflate`).
    pub bound_lent_pages: u64,
    /// Zones.
    pub zones: Vec<LiveZone>,
    /// /proc/vmstat.
    pub vmstat: Vec<(String, i64)>,
    /// Every cache.
    /// Every cache: slabinfo's figures (`stats`, the SLUB statistics, is not
    /// published: empty).
    pub caches: Vec<CacheStats>,
    /// Caches with slub_debug tracks (`KMEM_DEBUG=U`).
    pub tracking: u64,
    /// Allocation sites of caches with tracks (walked less often than the rest: see
    /// `sites_published_unix_ns`).
    pub sites: Vec<LiveSite>,
    /// When the sites were walked (Unix time, ns; 0: never).
    pub sites_published_unix_ns: u64,
    /// Site objects left out for lack of room (a cache's table of sites, or the
    /// region's).
    pub sites_dropped: u64,
    /// Whether a region ran out of room and ends early (`truncated`): the records
    /// after its last whole one are missing.
    pub truncated: bool,
}

impl Snapshot {
    /// Parses a body. Records: `kmem-live V`, `pid N`, `comm NAME`, `mode M`, `slub D`,
    /// `interval_ms N`, `counters allocated active resident mapped metadata
    /// retained`, `rss B`, `huge live bytes cached`, `spill bytes limit`, `bound max
    /// counted outside lent`
    /// (pages; with a bound only), `zone NODE NAME free managed pcp
    /// reported`, `buddy NODE n0 n1 …`, `vm NAME V`, `cache NAME active num objsize
    /// objperslab pagesperslab slabs`, `site alloc|free CACHE ADDR count size_sum
    /// size_min size_max age_min age_sum age_max pid_min pid_max CPUS STACK` (hex
    /// ADDR, CPUS and comma-separated STACK), `dropped alloc|free CACHE N` (CACHE `-`:
    /// sites the region had no room for), `truncated` (a region out of room), `end`.
    /// Unknown records are skipped; a body without `end` is an error (truncated).
    pub fn parse(body: &str) -> Result<Snapshot, String> {
        let mut s = Snapshot::default();
        let mut ended = false;
        for line in body.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let num = |i: usize| -> Result<u64, String> {
                f.get(i)
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| format!("bad field {i} in `{line}`"))
            };
            let hex = |i: usize| -> Result<u64, String> {
                f.get(i)
                    .and_then(|v| u64::from_str_radix(v, 16).ok())
                    .ok_or_else(|| format!("bad field {i} in `{line}`"))
            };
            let text = |i: usize| f.get(i).map(|v| v.to_string()).unwrap_or_default();
            match f[0] {
                "kmem-live" if num(1)? != VERSION as u64 => {
                    return Err(format!("unknown version in `{line}`"))
                }
                "pid" => s.pid = num(1)? as u32,
                "comm" => s.comm = f[1..].join(" "),
                "mode" => s.mode = text(1),
                "slub" => s.slub = text(1),
                "interval_ms" => s.interval_ms = num(1)?,
                "counters" => {
                    s.counters = crate::stats::Counters {
                        allocated: num(1)? as usize,
                        active: num(2)? as usize,
                        resident: num(3)? as usize,
                        mapped: num(4)? as usize,
                        metadata: num(5)? as usize,
                        retained: num(6)? as usize,
                    }
                }
                "rss" => s.rss_bytes = num(1)?,
                "huge" => {
                    s.huge_live = num(1)?;
                    s.huge_bytes = num(2)?;
                    s.huge_cached_bytes = num(3)?;
                }
                "spill" => {
                    s.spill_bytes = num(1)?;
                    s.spill_limit = num(2)?;
                }
                "bound" => {
                    s.bound_pages = num(1)?;
                    s.bound_counted_pages = num(2)?;
                    s.bound_outside_pages = num(3)?;
                    s.bound_lent_pages = num(4)?;
                }
                "zone" => s.zones.push(LiveZone {
                    node: num(1)? as usize,
                    name: text(2),
                    free_pages: num(3)?,
                    managed_pages: num(4)?,
                    pcp_pages: num(5)?,
                    reported_pages: num(6)?,
                    buddyinfo: Vec::new(),
                }),
                "buddy" => {
                    let node = num(1)? as usize;
                    let counts = (2..f.len()).map(num).collect::<Result<Vec<_>, _>>()?;
                    if let Some(z) = s.zones.iter_mut().find(|z| z.node == node) {
                        z.buddyinfo = counts;
                    }
                }
                "vm" => {
                    let v = f
                        .get(2)
                        .and_then(|v| v.parse::<i64>().ok())
                        .ok_or_else(|| format!("bad value in `{line}`"))?;
                    s.vmstat.push((text(1), v));
                }
                "cache" => s.caches.push(CacheStats {
                    name: text(1),
                    active_objs: num(2)?,
                    num_objs: num(3)?,
                    objsize: num(4)?,
                    objperslab: num(5)?,
                    pagesperslab: num(6)?,
                    num_slabs: num(7)?,
                    stats: Default::default(),
                }),
                "site" => {
                    let calls = if f.get(1) == Some(&"free") {
                        Calls::Free
                    } else {
                        Calls::Alloc
                    };
                    let mut stack = [0usize; kmem_core::slab::debug::TRACK_FRAMES];
                    for (slot, v) in stack.iter_mut().zip(text(14).split(',')) {
                        *slot = usize::from_str_radix(v, 16).unwrap_or(0);
                    }
                    s.sites.push(LiveSite {
                        calls,
                        cache: text(2),
                        location: Location {
                            addr: hex(3)? as usize,
                            stack,
                            count: num(4)?,
                            size_sum: num(5)?,
                            size_min: num(6)?,
                            size_max: num(7)?,
                            age_min_ms: num(8)?,
                            age_sum_ms: num(9)?,
                            age_max_ms: num(10)?,
                            pid_min: num(11)? as u32,
                            pid_max: num(12)? as u32,
                            cpus: hex(13)?,
                        },
                    });
                }
                "dropped" => s.sites_dropped += num(3)?,
                "tracking" => s.tracking = num(1)?,
                "truncated" => s.truncated = true,
                "end" => ended = true,
                _ => {}
            }
        }
        if !ended {
            return Err("truncated body (no `end` record)".into());
        }
        Ok(s)
    }

    /// Milliseconds since the sites were walked (`None`: never).
    pub fn sites_age_ms(&self) -> Option<u64> {
        (self.sites_published_unix_ns != 0)
            .then(|| unix_ns().saturating_sub(self.sites_published_unix_ns) / 1_000_000)
    }

    /// Milliseconds since it was published.
    pub fn age_ms(&self) -> u64 {
        unix_ns().saturating_sub(self.published_unix_ns) / 1_000_000
    }

    /// The cache called `name`.
    pub fn cache(&self, name: &str) -> Option<&CacheStats> {
        self.caches.iter().find(|c| c.name == name)
    }
}

/// A process with a live view.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LiveProcess {
    /// Its pid.
    pub pid: u32,
    /// Its command name (from its last publish).
    pub comm: String,
    /// Resident memory at its last publish (bytes).
    pub rss_bytes: u64,
    /// Bytes kmem handed out at its last publish.
    pub allocated_bytes: u64,
    /// Milliseconds since its last publish.
    pub age_ms: u64,
}

/// The path of `pid`'s segment.
pub fn segment_file(pid: u32) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("{DIR}/kmem.{pid}"))
}

/// A read-only (or, for the owner, read-write) mapping of a segment.
struct Mapped {
    ptr: *mut u8,
    len: usize,
    writable: bool,
}

impl Mapped {
    fn open(pid: u32) -> std::io::Result<Mapped> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let path = segment_file(pid);
        let (file, writable) = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => (f, true),
            Err(_) => (
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&path)?,
                false,
            ),
        };
        let meta = file.metadata()?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if me != 0 && meta.uid() != me {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{} belongs to another user", path.display()),
            ));
        }
        let len = (meta.len() as usize).min(SEGMENT_BYTES);
        if len < HEADER_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "segment too small",
            ));
        }
        use std::os::fd::AsRawFd;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: mapping `len` bytes (at most the file's size) of an open file.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let m = Mapped {
            ptr: p.cast(),
            len,
            writable,
        };
        if m.header().magic != MAGIC {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not a kmem live view",
            ));
        }
        Ok(m)
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is at least HEADER_BYTES long and page-aligned; the
        // header's fields are plain integers and atomics (any bytes are valid).
        unsafe { &*(self.ptr as *const Header) }
    }

    /// The text of region `r` (at `from`, at most `cap` bytes), copied under its
    /// sequence count, with its time and count.
    fn read(&self, r: &Region, from: usize, cap: usize) -> std::io::Result<(String, u64, u64)> {
        if from >= self.len {
            return Ok((String::new(), 0, 0));
        }
        for _ in 0..1000 {
            let s1 = r.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::thread::sleep(std::time::Duration::from_micros(100));
                continue;
            }
            let len = (r.len.load(Ordering::Relaxed) as usize)
                .min(cap)
                .min(self.len - from);
            let mut body = vec![0u8; len];
            // SAFETY: `len` bytes at `from` lie inside the mapping; the writer may
            // change them meanwhile, which the sequence check catches (any bytes are
            // valid u8).
            unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(from), body.as_mut_ptr(), len) };
            let published = r.published_unix_ns.load(Ordering::Relaxed);
            let publishes = r.publishes.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if r.seq.load(Ordering::Relaxed) == s1 {
                let text = String::from_utf8_lossy(&body).into_owned();
                return Ok((text, published, publishes));
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the live view kept changing",
        ))
    }

    /// Whether the process that wrote it is gone (or its pid now names another).
    fn stale(&self, pid: u32) -> bool {
        // SAFETY: kill with signal 0 only checks that the pid exists.
        let gone = unsafe { libc::kill(pid as libc::pid_t, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            return true;
        }
        let start = std::fs::read(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| start_ticks_of(&s));
        start.is_some_and(|t| t != self.header().start_ticks)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no references into it remain.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The current snapshot of process `pid` (as last published).
pub fn read(pid: u32) -> std::io::Result<Snapshot> {
    let m = Mapped::open(pid)?;
    snapshot_of(&m)
}

fn snapshot_of(m: &Mapped) -> std::io::Result<Snapshot> {
    let h = m.header();
    let (text, published, publishes) =
        m.read(&h.main, HEADER_BYTES, SITES_OFFSET - HEADER_BYTES)?;
    let bad = |e| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let mut s = Snapshot::parse(&text).map_err(bad)?;
    s.published_unix_ns = published;
    s.publishes = publishes;
    let (sites, published, publishes) = m.read(&h.sites, SITES_OFFSET, m.len - SITES_OFFSET)?;
    if publishes > 0 && !sites.is_empty() {
        let t = Snapshot::parse(&sites).map_err(bad)?;
        s.sites = t.sites;
        s.sites_dropped = t.sites_dropped;
        s.truncated |= t.truncated;
        s.sites_published_unix_ns = published;
    }
    Ok(s)
}

/// Asks process `pid` to publish at its next allocation slow path (with its
/// allocation sites too if `sites`) and waits up to `wait` for it; then returns its
/// snapshot (the fresh one, or the last one if the process did not allocate
/// meanwhile: see [`Snapshot::age_ms`]).
pub fn refresh(pid: u32, wait: std::time::Duration, sites: bool) -> std::io::Result<Snapshot> {
    let m = Mapped::open(pid)?;
    let h = m.header();
    let region = if sites { &h.sites } else { &h.main };
    let before = region.publishes.load(Ordering::Acquire);
    if m.writable {
        if sites {
            h.sites_request.fetch_add(1, Ordering::Relaxed);
        }
        h.request.fetch_add(1, Ordering::Relaxed);
        let until = std::time::Instant::now() + wait;
        while region.publishes.load(Ordering::Acquire) == before
            && std::time::Instant::now() < until
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    snapshot_of(&m)
}

/// The processes whose live view this user can read, by pid. Stale segments (their
/// process is gone) are removed on the way.
pub fn processes() -> Vec<LiveProcess> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(DIR) else {
        return out;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("kmem."))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(m) = Mapped::open(pid) else {
            continue;
        };
        if m.stale(pid) {
            let _ = std::fs::remove_file(e.path());
            continue;
        }
        if let Ok(s) = snapshot_of(&m) {
            out.push(LiveProcess {
                pid,
                comm: s.comm.clone(),
                rss_bytes: s.rss_bytes,
                allocated_bytes: s.counters.allocated as u64,
                age_ms: s.age_ms(),
            });
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

/// Removes the live view of a process that is gone; false if `pid` is alive (or has no
/// segment).
pub fn remove_stale(pid: u32) -> bool {
    match Mapped::open(pid) {
        Ok(m) if m.stale(pid) => std::fs::remove_file(segment_file(pid)).is_ok(),
        _ => false,
    }
}

/// Publishes this process's view now (tests and tools; the heap does it on its own
/// from its slow paths). No effect under `KMEM_LIVE=off`.
pub fn publish() {
    crate::heap();
    if WRITER.state.load(Ordering::Relaxed) != OFF {
        publish_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::live::{finish_sites, publish_region, put_site, Cursor, Region};
    use std::fmt::Write as _;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn start_ticks_skip_the_command_name() {
        let stat = b"42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 200";
        assert_eq!(start_ticks_of(stat), Some(98765));
        assert_eq!(start_ticks_of(b"42 (x) S 1"), None);
    }

    #[test]
    fn a_body_without_end_is_truncated() {
        assert!(Snapshot::parse("kmem-live 2\npid 3\n").is_err());
        let s = Snapshot::parse("kmem-live 2\npid 3\ncache a 1 2 3 4 5 6\nend\n").unwrap();
        assert_eq!(s.pid, 3);
        assert_eq!(s.cache("a").unwrap().num_slabs, 6);
        assert!(Snapshot::parse("kmem-live 1\nend\n").is_err());
    }

    #[test]
    fn this_process_reads_its_own_view() {
        let h = crate::heap();
        let v: Vec<_> = (0..1000)
            .map(|_| h.kmalloc(100, crate::Gfp::KERNEL).unwrap())
            .collect();
        publish();
        let s = read(std::process::id()).expect("own live view");
        assert_eq!(s.pid, std::process::id());
        let c = s.cache("kmalloc-112").expect("kmalloc-112 row");
        assert!(c.active_objs >= 1000, "{c:?}");
        assert!(s.counters.allocated > 0 && s.rss_bytes > 0);
        assert!(!s.zones.is_empty() && !s.zones[0].buddyinfo.is_empty());
        let mine = processes();
        assert!(mine.iter().any(|p| p.pid == std::process::id()), "{mine:?}");
        for p in v {
            // SAFETY: allocated above, freed once.
            unsafe { h.kfree(p.as_ptr()) };
        }
    }

    fn site(i: usize) -> Location {
        Location {
            addr: 0x1000 + i,
            stack: [0x1000 + i, 0x2000, 0x3000, 0],
            count: 3,
            size_sum: 96,
            size_min: 32,
            size_max: 32,
            pid_min: 7,
            pid_max: 7,
            ..Location::EMPTY
        }
    }

    #[test]
    fn sites_past_the_region_s_room_are_counted_and_the_region_still_ends() {
        let mut buf = vec![0u8; 4096];
        let mut c = Cursor::region(&mut buf);
        let mut out_of_room = [0u64; 2];
        for i in 0..100 {
            let kind = if i % 2 == 0 { "alloc" } else { "free" };
            put_site(&mut c, kind, "kmalloc-32", &site(i), &mut out_of_room);
        }
        finish_sites(&mut c, out_of_room).unwrap();
        let len = c.len;
        let text = std::str::from_utf8(&buf[..len]).unwrap().to_string();
        let s = Snapshot::parse(&text).expect("a region out of room still parses");
        assert!(
            !s.sites.is_empty() && s.sites.len() < 100,
            "{}",
            s.sites.len()
        );
        assert_eq!(s.sites_dropped, 3 * (100 - s.sites.len() as u64), "{text}");
        assert!(out_of_room[0] > 0 && out_of_room[1] > 0);
        assert!(
            text.contains("\ndropped alloc - ") && text.ends_with("\nend\n"),
            "{text}"
        );
        assert!(s.sites.iter().all(|l| l.location.stack[1] == 0x2000));
    }

    #[test]
    fn a_body_past_its_region_ends_at_its_last_whole_record() {
        let mut seg = vec![0u8; 8192];
        let r = Region {
            seq: AtomicU64::new(0),
            len: AtomicU64::new(0),
            published_unix_ns: AtomicU64::new(0),
            publishes: AtomicU64::new(0),
        };
        // SAFETY: `seg` is ours, 8 KiB; `from..to` lies inside it; one writer.
        unsafe {
            publish_region(seg.as_mut_ptr(), &r, 4096, 8192, |w| {
                writeln!(w, "kmem-live {VERSION}")?;
                for i in 0..1000 {
                    writeln!(w, "cache many-{i} 1 2 3 4 5 6")?;
                }
                writeln!(w, "end")
            })
        };
        let len = r.len.load(Ordering::Relaxed) as usize;
        assert_eq!(r.seq.load(Ordering::Relaxed), 2);
        let text = std::str::from_utf8(&seg[4096..4096 + len]).unwrap();
        assert!(text.ends_with("\ntruncated\nend\n"), "{text}");
        let s = Snapshot::parse(text).expect("a truncated body still parses");
        assert!(s.truncated);
        let n = s.caches.len();
        assert!(n > 10 && n < 1000, "{n}");
        assert_eq!(s.caches[n - 1].name, format!("many-{}", n - 1));
    }
}
