//! The live view: a running process's heap, readable from another process without
//! the program's cooperation and without ptrace (`kmem top`).
//!
//! ## The segment
//! Each process on kmem keeps a file in shared memory, `/dev/shm/kmem.PID`, mode 0600
//! (only its user, or root, can read it), mapped shared by the process. It holds a
//! binary [`Header`] (4 KiB), then a text body: one record per line, `key fields…`
//! (the format is [`Snapshot::parse`]'s). The file is sparse: only the pages written
//! take memory.
//!
//! ## Publishing
//! The heap publishes from its slow paths: the slab layer's housekeeping tick (every
//! 16th slow path of a CPU area, debug caches included) calls [`tick`], which publishes
//! when `KMEM_LIVE` milliseconds have passed since the last time or a reader asked
//! (`request` in the header). So the fast paths do nothing for the view, and a
//! process that stops allocating shows its last state, with its time. Publishing
//! walks the caches (slabinfo's figures, under each cache's node locks, one at a
//! time), reads the page allocator's counters, `/proc/self/statm`, and, for caches
//! with slub_debug tracks, aggregates allocation sites into a fixed table: it never
//! allocates. One thread publishes at a time (`busy`); others skip.
//!
//! The body is guarded by a sequence count (`seq`: odd while being written), as the
//! kernel's seqlocks: a reader copies the body and retries if `seq` moved.
//!
//! ## Lifetime
//! Made when the heap is ready (or, in a child after `fork`, at its first tick: the
//! child drops the parent's mapping), removed by an `atexit` handler. A process that
//! dies without running it leaves a stale file; [`processes`] recognises it (no such
//! pid, or a pid whose start time differs from the header's) and removes it.
//!
//! Locking: `busy` (try-only) serialises writers; nothing else of its own.

use crate::sites::{Calls, Location, LocationTable};
use std::cell::UnsafeCell;
use std::fmt::{self, Write as _};
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};

const MAGIC: [u8; 8] = *b"KMEMLIVE";
const VERSION: u32 = 1;
/// Bytes before the body.
const HEADER_BYTES: usize = 4096;
/// Bytes of the segment (a sparse file: only pages written take memory).
pub const SEGMENT_BYTES: usize = 1 << 20;
/// Site slots of one cache's walk while publishing.
const SITE_SLOTS: usize = 1024;
/// Where the segments live.
pub const DIR: &str = "/dev/shm";

/// The segment's binary header.
#[repr(C)]
struct Header {
    magic: [u8; 8],
    version: u32,
    pid: u32,
    /// The process's start time (`/proc/PID/stat` field 22): tells a reused pid.
    start_ticks: u64,
    interval_ms: u64,
    /// Odd while the body is being written.
    seq: AtomicU64,
    /// Body bytes.
    len: AtomicU64,
    /// When the body was written (CLOCK_REALTIME, ns).
    published_unix_ns: AtomicU64,
    /// How many times.
    publishes: AtomicU64,
    /// Readers add 1 to ask for a publish at the next tick.
    request: AtomicU64,
}

const NOT_STARTED: u8 = 0;
const ACTIVE: u8 = 1;
const OFF: u8 = 2;

struct Writer {
    seg: AtomicPtr<u8>,
    state: AtomicU8,
    busy: AtomicBool,
    last_ns: AtomicU64,
    served: AtomicU64,
    /// Used only by the thread holding `busy`.
    sites: UnsafeCell<[Location; SITE_SLOTS]>,
}

// SAFETY: `sites` is used only by the thread that set `busy`; the rest is atomics.
unsafe impl Sync for Writer {}

static WRITER: Writer = Writer {
    seg: AtomicPtr::new(std::ptr::null_mut()),
    state: AtomicU8::new(NOT_STARTED),
    busy: AtomicBool::new(false),
    last_ns: AtomicU64::new(0),
    served: AtomicU64::new(0),
    sites: UnsafeCell::new([Location::EMPTY; SITE_SLOTS]),
};

/// `/dev/shm/kmem.PID`, NUL-terminated, in `buf`.
fn segment_path(pid: u32, buf: &mut [u8; 48]) -> &std::ffi::CStr {
    let mut c = Cursor::new(&mut buf[..]);
    let _ = write!(c, "{DIR}/kmem.{pid}\0");
    let n = c.len;
    std::ffi::CStr::from_bytes_with_nul(&buf[..n]).unwrap_or(c"/dev/shm/kmem.invalid")
}

fn pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// Field 22 of `/proc/self/stat` (the start time in clock ticks), without allocating.
fn own_start_ticks() -> u64 {
    let mut buf = [0u8; 1024];
    crate::platform::linux::read_small_file(c"/proc/self/stat", &mut buf)
        .and_then(start_ticks_of)
        .unwrap_or(0)
}

/// Field 22 of a `/proc/PID/stat` text (after the parenthesised command name, which
/// may hold spaces).
fn start_ticks_of(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = &stat[close + 1..];
    // Fields after ')' start at 3 (state); field 22 is the 20th of them.
    let f = rest
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(19)?;
    std::str::from_utf8(f).ok()?.trim().parse().ok()
}

/// Called when the heap is ready: makes the segment and publishes once, unless
/// `KMEM_LIVE=off`; registers the removal at exit.
pub(crate) fn start(interval_ms: u64) {
    if interval_ms == 0 {
        WRITER.state.store(OFF, Ordering::Relaxed);
        return;
    }
    crate::platform::os::at_exit(remove_at_exit);
    publish_now();
}

/// After `fork`, in the child: forget the parent's segment (its next tick makes its
/// own).
pub(crate) fn after_fork_child() {
    let w = &WRITER;
    if w.state.load(Ordering::Relaxed) != ACTIVE {
        return;
    }
    let seg = w.seg.swap(std::ptr::null_mut(), Ordering::Relaxed);
    if !seg.is_null() {
        // SAFETY: our mapping of SEGMENT_BYTES; the child has one thread, which is
        // not publishing (fork is not called from inside the allocator).
        unsafe { libc::munmap(seg.cast(), SEGMENT_BYTES) };
    }
    w.busy.store(false, Ordering::Relaxed);
    w.state.store(NOT_STARTED, Ordering::Relaxed);
}

extern "C" fn remove_at_exit() {
    let w = &WRITER;
    if w.state.swap(OFF, Ordering::AcqRel) == ACTIVE {
        let mut buf = [0u8; 48];
        // SAFETY: unlinking our own segment's path (a NUL-terminated string).
        unsafe { libc::unlink(segment_path(pid(), &mut buf).as_ptr()) };
    }
}

/// The housekeeping tick's part: publish when due or asked (see the module doc).
#[inline]
pub(crate) fn tick(now_ns: u64) {
    let w = &WRITER;
    let state = w.state.load(Ordering::Relaxed);
    if state == OFF {
        return;
    }
    let interval = crate::heap().config().live_ms.saturating_mul(1_000_000);
    if state == ACTIVE {
        // SAFETY: ACTIVE: `seg` is our mapping (it is never unmapped while ACTIVE
        // but in a single-threaded fork child).
        let h = unsafe { &*(w.seg.load(Ordering::Acquire) as *const Header) };
        let asked = h.request.load(Ordering::Relaxed) != w.served.load(Ordering::Relaxed);
        if !asked && now_ns.saturating_sub(w.last_ns.load(Ordering::Relaxed)) < interval {
            return;
        }
    }
    publish_now();
}

/// Publishes now (making the segment first if needed) unless another thread is.
fn publish_now() {
    let w = &WRITER;
    if w.busy.swap(true, Ordering::Acquire) {
        return;
    }
    if w.state.load(Ordering::Relaxed) == NOT_STARTED {
        match create() {
            Some(seg) => {
                w.seg.store(seg, Ordering::Release);
                w.state.store(ACTIVE, Ordering::Release);
            }
            None => w.state.store(OFF, Ordering::Relaxed),
        }
    }
    if w.state.load(Ordering::Relaxed) == ACTIVE {
        let seg = w.seg.load(Ordering::Acquire);
        let now = kmem_core::Platform::now_ns(crate::heap().page_allocator().platform());
        w.last_ns.store(now, Ordering::Relaxed);
        // SAFETY: ACTIVE: our mapping; we hold `busy`, so we are its only writer.
        unsafe { publish_body(seg, now) };
    }
    w.busy.store(false, Ordering::Release);
}

/// Opens (or makes) `/dev/shm/kmem.PID`, sizes and maps it, writes the header.
fn create() -> Option<*mut u8> {
    let mut buf = [0u8; 48];
    let path = segment_path(pid(), &mut buf);
    // SAFETY: plain system calls on a NUL-terminated path and our own descriptor;
    // the mapping is checked before use.
    unsafe {
        let fd = libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o600,
        );
        if fd < 0 {
            return None;
        }
        // A file left by this pid before an exec, or a stale one of a dead process
        // with a reused pid: ours now (only the owner could open it).
        libc::fchmod(fd, 0o600);
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0
            || ((st.st_size as usize) < SEGMENT_BYTES
                && libc::ftruncate(fd, SEGMENT_BYTES as libc::off_t) != 0)
        {
            libc::close(fd);
            return None;
        }
        let p = libc::mmap(
            std::ptr::null_mut(),
            SEGMENT_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        libc::close(fd);
        if p == libc::MAP_FAILED {
            return None;
        }
        let h = p as *mut Header;
        // Mark the body as being written before the identity changes.
        (*h).seq.fetch_or(1, Ordering::Relaxed);
        (*h).magic = MAGIC;
        (*h).version = VERSION;
        (*h).pid = pid();
        (*h).start_ticks = own_start_ticks();
        (*h).interval_ms = crate::heap().config().live_ms;
        (*h).len.store(0, Ordering::Relaxed);
        (*h).seq.fetch_add(1, Ordering::Release);
        Some(p.cast())
    }
}

/// Writes the body under the sequence count.
///
/// # Safety
/// `seg` is our mapping of [`SEGMENT_BYTES`]; the caller is its only writer.
unsafe fn publish_body(seg: *mut u8, now_ns: u64) {
    // SAFETY: the caller's contract: the header lies at the start of our mapping.
    let h = unsafe { &*(seg as *const Header) };
    let req = h.request.load(Ordering::Relaxed);
    let s = h.seq.load(Ordering::Relaxed);
    h.seq.store(s | 1, Ordering::Relaxed);
    fence(Ordering::Release);
    // SAFETY: the body is the rest of the mapping, written only by us (`busy`).
    let body = unsafe {
        std::slice::from_raw_parts_mut(seg.add(HEADER_BYTES), SEGMENT_BYTES - HEADER_BYTES)
    };
    let mut c = Cursor::new(body);
    let _ = write_body(&mut c, now_ns);
    h.len.store(c.len as u64, Ordering::Relaxed);
    h.published_unix_ns.store(unix_ns(), Ordering::Relaxed);
    h.publishes.fetch_add(1, Ordering::Relaxed);
    h.seq.store((s | 1) + 1, Ordering::Release);
    WRITER.served.store(req, Ordering::Relaxed);
}

fn unix_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A name as one field: whitespace becomes `_`.
struct Field<'a>(&'a str);

impl fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_char('-');
        }
        for ch in self.0.chars() {
            f.write_char(if ch.is_whitespace() { '_' } else { ch })?;
        }
        Ok(())
    }
}

/// The body (see [`Snapshot::parse`] for the records). Never allocates.
fn write_body(w: &mut Cursor<'_>, now_ns: u64) -> fmt::Result {
    use kmem_core::vmstat::{VmEvent, ZoneStat};
    let heap = crate::heap();
    let kmem = heap.kmem();
    let pa = heap.page_allocator();
    writeln!(w, "kmem-live {VERSION}")?;
    writeln!(w, "pid {}", pid())?;
    let mut comm = [0u8; 64];
    let comm = crate::platform::linux::read_small_file(c"/proc/self/comm", &mut comm)
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or("?")
        .trim();
    writeln!(w, "comm {}", Field(comm))?;
    use crate::config::PerCpuMode;
    let mode = match heap.percpu_mode() {
        PerCpuMode::Thread => "thread",
        PerCpuMode::Cpu => "cpu",
        PerCpuMode::CpuCas => "cpu-cas",
        PerCpuMode::CpuRseq => "cpu-rseq",
        PerCpuMode::CpuLock => "cpu-lock",
    };
    writeln!(w, "mode {mode}")?;
    writeln!(
        w,
        "slub {}",
        match kmem.slub_design() {
            kmem_core::slab::SlubDesign::Sheaves => "sheaves",
            kmem_core::slab::SlubDesign::CpuSlab => "cpu-slab",
        }
    )?;
    writeln!(w, "interval_ms {}", heap.config().live_ms)?;
    let c = crate::counters::counters();
    writeln!(
        w,
        "counters {} {} {} {} {} {}",
        c.allocated, c.active, c.resident, c.mapped, c.metadata, c.retained
    )?;
    writeln!(w, "rss {}", crate::platform::linux::rss_bytes())?;
    let (live, bytes) = heap.huge_totals();
    writeln!(w, "huge {live} {bytes} {}", heap.huge_cached_bytes())?;
    for nid in 0..pa.nr_nodes() {
        let z = pa.zone(nid);
        writeln!(
            w,
            "zone {nid} {} {} {} {} {}",
            Field(z.name()),
            pa.zone_page_state_snapshot(nid, ZoneStat::NrFreePages)
                .max(0),
            z.managed_pages(),
            pa.nr_pcp_pages(nid),
            pa.zone_page_state_snapshot(nid, ZoneStat::NrFreeReported)
                .max(0)
        )?;
        write!(w, "buddy {nid}")?;
        for n in pa.free_area_counts(nid) {
            write!(w, " {n}")?;
        }
        writeln!(w)?;
    }
    for i in ZoneStat::ALL {
        let v: isize = (0..pa.nr_nodes())
            .map(|n| pa.zone_page_state_snapshot(n, i))
            .sum();
        writeln!(w, "vm {} {v}", i.name())?;
    }
    for e in VmEvent::ALL {
        writeln!(w, "vm {} {}", e.name(), pa.event(e))?;
    }
    let slub = kmem.slub();
    let mut result = Ok(());
    kmem.caches().for_each(|s| {
        if result.is_err() {
            return;
        }
        let r = slub.slab_row(s);
        result = writeln!(
            w,
            "cache {} {} {} {} {} {} {}",
            Field(s.name()),
            r.active_objs,
            r.num_objs,
            r.objsize,
            r.objperslab,
            r.pagesperslab,
            r.num_slabs
        );
    });
    result?;
    // Sites, for caches with tracks. SAFETY of the slots: only the `busy` holder
    // (our caller) uses them.
    // SAFETY: see the line above.
    let slots = unsafe { &mut *WRITER.sites.get() };
    kmem.caches().for_each(|s| {
        if result.is_err() || !s.config().flags.contains(kmem_core::SlabFlags::STORE_USER) {
            return;
        }
        for which in [Calls::Alloc, Calls::Free] {
            let mut t = LocationTable::new(&mut slots[..]);
            slub.for_each_tracked(s, &mut |o| t.add(o, which, now_ns));
            let kind = match which {
                Calls::Alloc => "alloc",
                Calls::Free => "free",
            };
            for l in t.iter() {
                if result.is_ok() {
                    result = write_site(w, kind, s.name(), l);
                }
            }
            if t.dropped > 0 && result.is_ok() {
                result = writeln!(w, "dropped {kind} {} {}", Field(s.name()), t.dropped);
            }
        }
    });
    result?;
    writeln!(w, "end")
}

fn write_site(w: &mut Cursor<'_>, kind: &str, cache: &str, l: &Location) -> fmt::Result {
    write!(
        w,
        "site {kind} {} {:x} {} {} {} {} {} {} {} {} {} {:x} ",
        Field(cache),
        l.addr,
        l.count,
        l.size_sum,
        l.size_min,
        l.size_max,
        l.age_min_ms,
        l.age_sum_ms,
        l.age_max_ms,
        l.pid_min,
        l.pid_max,
        l.cpus
    )?;
    for (i, f) in l.stack.iter().enumerate() {
        write!(w, "{}{f:x}", if i == 0 { "" } else { "," })?;
    }
    writeln!(w)
}

/// A `fmt::Write` over a byte buffer that stops at the end (no allocation).
struct Cursor<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a mut [u8]) -> Self {
        Cursor { buf, len: 0 }
    }
}

impl fmt::Write for Cursor<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let b = s.as_bytes();
        if self.len + b.len() > self.buf.len() {
            return Err(fmt::Error);
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Reading (another process, or this one): allocates freely.

/// A cache's row in a snapshot (slabinfo's figures).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LiveCache {
    /// The cache's name (whitespace shown as `_`).
    pub name: String,
    /// Objects allocated or cached by CPUs.
    pub active_objs: u64,
    /// Objects in all slabs.
    pub num_objs: u64,
    /// Bytes per object slot.
    pub objsize: u64,
    /// Objects per slab.
    pub objperslab: u64,
    /// Pages per slab.
    pub pagesperslab: u64,
    /// Slabs.
    pub num_slabs: u64,
}

impl LiveCache {
    /// Bytes of its slabs.
    pub fn bytes(&self) -> u64 {
        self.num_slabs * self.pagesperslab * kmem_core::PAGE_SIZE as u64
    }
}

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
    pub counters: crate::counters::Counters,
    /// Resident memory of the process (bytes).
    pub rss_bytes: u64,
    /// Live huge mappings.
    pub huge_live: u64,
    /// Bytes they map.
    pub huge_bytes: u64,
    /// Freed huge mappings kept for reuse (bytes).
    pub huge_cached_bytes: u64,
    /// Zones.
    pub zones: Vec<LiveZone>,
    /// /proc/vmstat.
    pub vmstat: Vec<(String, i64)>,
    /// Every cache.
    pub caches: Vec<LiveCache>,
    /// Allocation sites of caches with tracks.
    pub sites: Vec<LiveSite>,
    /// Site objects left out for lack of room, per cache and kind.
    pub sites_dropped: u64,
}

impl Snapshot {
    /// Parses a body. Records: `kmem-live V`, `pid N`, `comm NAME`, `mode M`, `slub D`,
    /// `interval_ms N`, `counters allocated active resident mapped metadata
    /// retained`, `rss B`, `huge live bytes cached`, `zone NODE NAME free managed pcp
    /// reported`, `buddy NODE n0 n1 …`, `vm NAME V`, `cache NAME active num objsize
    /// objperslab pagesperslab slabs`, `site alloc|free CACHE ADDR count size_sum
    /// size_min size_max age_min age_sum age_max pid_min pid_max CPUS STACK` (hex
    /// ADDR, CPUS and comma-separated STACK), `dropped alloc|free CACHE N`, `end`.
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
                    s.counters = crate::counters::Counters {
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
                "cache" => s.caches.push(LiveCache {
                    name: text(1),
                    active_objs: num(2)?,
                    num_objs: num(3)?,
                    objsize: num(4)?,
                    objperslab: num(5)?,
                    pagesperslab: num(6)?,
                    num_slabs: num(7)?,
                }),
                "site" => {
                    let calls = if f.get(1) == Some(&"free") {
                        Calls::Free
                    } else {
                        Calls::Alloc
                    };
                    let mut stack = [0usize; kmem_core::slab::debug::TRACK_FRAMES];
                    for (slot, v) in stack.iter_mut().zip(text(15).split(',')) {
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
                "end" => ended = true,
                _ => {}
            }
        }
        if !ended {
            return Err("truncated body (no `end` record)".into());
        }
        Ok(s)
    }

    /// Milliseconds since it was published.
    pub fn age_ms(&self) -> u64 {
        unix_ns().saturating_sub(self.published_unix_ns) / 1_000_000
    }

    /// The cache called `name`.
    pub fn cache(&self, name: &str) -> Option<&LiveCache> {
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

    /// The body, copied under the sequence count, with the header's figures.
    fn read(&self) -> std::io::Result<(String, u64, u64)> {
        let h = self.header();
        for _ in 0..1000 {
            let s1 = h.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::thread::sleep(std::time::Duration::from_micros(100));
                continue;
            }
            let len = (h.len.load(Ordering::Relaxed) as usize).min(self.len - HEADER_BYTES);
            let mut body = vec![0u8; len];
            // SAFETY: `len` bytes after the header lie inside the mapping; the
            // writer may change them meanwhile, which the sequence check catches
            // (volatile-free byte copy: any bytes are valid u8).
            unsafe {
                std::ptr::copy_nonoverlapping(self.ptr.add(HEADER_BYTES), body.as_mut_ptr(), len)
            };
            let published = h.published_unix_ns.load(Ordering::Relaxed);
            let publishes = h.publishes.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if h.seq.load(Ordering::Relaxed) == s1 {
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
    let (text, published, publishes) = m.read()?;
    let mut s = Snapshot::parse(&text)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    s.published_unix_ns = published;
    s.publishes = publishes;
    Ok(s)
}

/// Asks process `pid` to publish at its next allocation slow path and waits up to
/// `wait` for it; then returns its snapshot (the fresh one, or the last one if the
/// process did not allocate meanwhile: see [`Snapshot::age_ms`]).
pub fn refresh(pid: u32, wait: std::time::Duration) -> std::io::Result<Snapshot> {
    let m = Mapped::open(pid)?;
    let before = m.header().publishes.load(Ordering::Acquire);
    if m.writable {
        m.header().request.fetch_add(1, Ordering::Relaxed);
        let until = std::time::Instant::now() + wait;
        while m.header().publishes.load(Ordering::Acquire) == before
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

    #[test]
    fn start_ticks_skip_the_command_name() {
        let stat = b"42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 200";
        assert_eq!(start_ticks_of(stat), Some(98765));
        assert_eq!(start_ticks_of(b"42 (x) S 1"), None);
    }

    #[test]
    fn a_body_without_end_is_truncated() {
        assert!(Snapshot::parse("kmem-live 1\npid 3\n").is_err());
        let s = Snapshot::parse("kmem-live 1\npid 3\ncache a 1 2 3 4 5 6\nend\n").unwrap();
        assert_eq!(s.pid, 3);
        assert_eq!(s.cache("a").unwrap().num_slabs, 6);
        assert!(Snapshot::parse("kmem-live 2\nend\n").is_err());
    }

    #[test]
    fn this_process_reads_its_own_view() {
        let h = crate::heap();
        let v: Vec<_> = (0..1000)
            .map(|_| h.kmalloc(100, crate::Gfp::KERNEL).unwrap())
            .collect();
        publish();
        let s = read(pid()).expect("own live view");
        assert_eq!(s.pid, pid());
        let c = s.cache("kmalloc-112").expect("kmalloc-112 row");
        assert!(c.active_objs >= 1000, "{c:?}");
        assert!(s.counters.allocated > 0 && s.rss_bytes > 0);
        assert!(!s.zones.is_empty() && !s.zones[0].buddyinfo.is_empty());
        let mine = processes();
        assert!(mine.iter().any(|p| p.pid == pid()), "{mine:?}");
        for p in v {
            // SAFETY: allocated above, freed once.
            unsafe { h.kfree(p.as_ptr()) };
        }
    }
}
