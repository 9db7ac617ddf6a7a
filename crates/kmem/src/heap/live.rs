//! The live view's writer: the segment format and the heap publishing its state
//! into it (the reader, `kmem top`'s side, is [`crate::live`], whose module doc
//! describes the whole mechanism).
//!
//! Publishing runs from the heap's slow paths ([`tick`]) and never allocates; one
//! thread publishes at a time (`busy`, try-only); nothing else is locked here.
use super::counters;
use crate::sites::{Calls, Location, LocationTable};
use std::cell::UnsafeCell;
use std::fmt::{self, Write as _};
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};

pub(crate) const MAGIC: [u8; 8] = *b"KMEMLIVE";
pub(crate) const VERSION: u32 = 2;
/// Bytes before the body.
pub(crate) const HEADER_BYTES: usize = 4096;
/// Bytes of the segment (a sparse file: only pages written take memory).
pub const SEGMENT_BYTES: usize = 1 << 20;
/// Site slots of one cache's walk while publishing.
const SITE_SLOTS: usize = 1024;
/// Where the segments live.
pub const DIR: &str = "/dev/shm";

/// One text region of the segment, guarded by its own sequence count.
#[repr(C)]
pub(crate) struct Region {
    /// Odd while the text is being written.
    pub(crate) seq: AtomicU64,
    /// Text bytes.
    pub(crate) len: AtomicU64,
    /// When it was written (CLOCK_REALTIME, ns).
    pub(crate) published_unix_ns: AtomicU64,
    /// How many times.
    pub(crate) publishes: AtomicU64,
}

/// The segment's binary header.
#[repr(C)]
pub(crate) struct Header {
    pub(crate) magic: [u8; 8],
    pub(crate) version: u32,
    pub(crate) pid: u32,
    /// The process's start time (`/proc/PID/stat` field 22): tells a reused pid.
    pub(crate) start_ticks: u64,
    pub(crate) interval_ms: u64,
    /// Readers add 1 to ask for a publish at the next tick.
    pub(crate) request: AtomicU64,
    /// Readers add 1 to ask for the allocation sites too.
    pub(crate) sites_request: AtomicU64,
    /// The main text (caches, pages, counters), at [`HEADER_BYTES`].
    pub(crate) main: Region,
    /// The allocation sites, at [`SITES_OFFSET`]: rewritten only when walked (see
    /// [`publish_now`]), so they stay readable between walks.
    pub(crate) sites: Region,
}

/// Where the sites region starts (the main text ends there).
pub(crate) const SITES_OFFSET: usize = SEGMENT_BYTES / 2;
/// A sites walk costs at most this fraction of the time (1/N) between walks, unless
/// a reader asks.
const SITES_COST_SHARE: u64 = 100;

pub(crate) const NOT_STARTED: u8 = 0;
pub(crate) const ACTIVE: u8 = 1;
pub(crate) const OFF: u8 = 2;

pub(crate) struct Writer {
    seg: AtomicPtr<u8>,
    pub(crate) state: AtomicU8,
    busy: AtomicBool,
    /// When the process (or, in a fork child, the child) started: no segment before
    /// the publishing interval has passed since (platform clock, ns).
    started_ns: AtomicU64,
    last_ns: AtomicU64,
    served: AtomicU64,
    sites_served: AtomicU64,
    /// No sites walk before this (platform clock, ns) unless asked.
    sites_next_ns: AtomicU64,
    /// Used only by the thread holding `busy`.
    sites: UnsafeCell<[Location; SITE_SLOTS]>,
}

// SAFETY: `sites` is used only by the thread that set `busy`; the rest is atomics.
unsafe impl Sync for Writer {}

pub(crate) static WRITER: Writer = Writer {
    seg: AtomicPtr::new(std::ptr::null_mut()),
    state: AtomicU8::new(NOT_STARTED),
    busy: AtomicBool::new(false),
    started_ns: AtomicU64::new(0),
    last_ns: AtomicU64::new(0),
    served: AtomicU64::new(0),
    sites_served: AtomicU64::new(0),
    sites_next_ns: AtomicU64::new(0),
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
pub(crate) fn start_ticks_of(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = &stat[close + 1..];
    // Fields after ')' start at 3 (state); field 22 is the 20th of them.
    let f = rest
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty())
        .nth(19)?;
    std::str::from_utf8(f).ok()?.trim().parse().ok()
}

/// Called when the heap is ready: unless `KMEM_LIVE=off`, notes the time (the
/// segment is made at the first tick once the interval has passed: see the module
/// docs of `kmem::live`) and registers the removal at exit.
pub(crate) fn start(interval_ms: u64) {
    if interval_ms == 0 {
        WRITER.state.store(OFF, Ordering::Relaxed);
        return;
    }
    WRITER.started_ns.store(now_ns(), Ordering::Relaxed);
    crate::platform::os::at_exit(remove_at_exit);
}

/// The platform clock (ns), as the ticks have it.
fn now_ns() -> u64 {
    kmem_core::Platform::now_ns(super::heap().page_allocator().platform())
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
    // The child's own interval starts now: one that ends sooner makes no segment.
    w.started_ns.store(now_ns(), Ordering::Relaxed);
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
    let interval = super::heap().config().live_ms.saturating_mul(1_000_000);
    if state == ACTIVE {
        // SAFETY: ACTIVE: `seg` is our mapping (it is never unmapped while ACTIVE
        // but in a single-threaded fork child).
        let h = unsafe { &*(w.seg.load(Ordering::Acquire) as *const Header) };
        let asked = h.request.load(Ordering::Relaxed) != w.served.load(Ordering::Relaxed)
            || h.sites_request.load(Ordering::Relaxed) != w.sites_served.load(Ordering::Relaxed);
        if !asked && now_ns.saturating_sub(w.last_ns.load(Ordering::Relaxed)) < interval {
            return;
        }
    } else if now_ns.saturating_sub(w.started_ns.load(Ordering::Relaxed)) < interval {
        // Not yet made: a process that ends within its first interval (most commands
        // a shell runs) pays nothing for the view.
        return;
    }
    publish_now();
}

/// Publishes now (making the segment first if needed) unless another thread is.
pub(crate) fn publish_now() {
    let w = &WRITER;
    // Publishing walks the cache list under its lock: never from a context that may
    // hold it (this thread would wait for itself). The callers run where no allocator
    // lock is held; this is the guard for the one lock a free path may hold above
    // them (a CPU area's flush walks the caches and frees).
    if super::heap().kmem().caches().is_locked() {
        return;
    }
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
        let now = kmem_core::Platform::now_ns(super::heap().page_allocator().platform());
        w.last_ns.store(now, Ordering::Relaxed);
        // SAFETY: ACTIVE: our mapping; we hold `busy`, so we are its only writer.
        let h = unsafe { &*(seg as *const Header) };
        let req = h.request.load(Ordering::Relaxed);
        // SAFETY: as above; the main region lies between the header and the sites.
        unsafe { publish_region(seg, &h.main, HEADER_BYTES, SITES_OFFSET, write_body) };
        w.served.store(req, Ordering::Relaxed);
        // The sites: when a reader asks, else when the last walk's cost is paid off.
        let sreq = h.sites_request.load(Ordering::Relaxed);
        let tracking = super::heap().config().debug.any();
        if tracking
            && (sreq != w.sites_served.load(Ordering::Relaxed)
                || now >= w.sites_next_ns.load(Ordering::Relaxed))
        {
            let t0 = std::time::Instant::now();
            // SAFETY: as above; the sites region is the segment's second half.
            unsafe {
                publish_region(seg, &h.sites, SITES_OFFSET, SEGMENT_BYTES, |c| {
                    write_sites(c, now)
                })
            };
            let cost = t0.elapsed().as_nanos() as u64;
            let interval = super::heap().config().live_ms.saturating_mul(1_000_000);
            w.sites_next_ns
                .store(next_sites_walk(now, interval, cost), Ordering::Relaxed);
            w.sites_served.store(sreq, Ordering::Relaxed);
        }
    }
    w.busy.store(false, Ordering::Release);
}

/// When the sites are walked next unless a reader asks: after the publishing
/// interval, and after [`SITES_COST_SHARE`] times what this walk cost; `u64::MAX`
/// (never) where that lies past the clock's range (`KMEM_LIVE` near `u64::MAX`).
fn next_sites_walk(now_ns: u64, interval_ns: u64, cost_ns: u64) -> u64 {
    now_ns.saturating_add(interval_ns.max(cost_ns.saturating_mul(SITES_COST_SHARE)))
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
        // with a reused pid, is ours to reuse only if this user owns it: one another
        // user made (for a pid it guessed) would let that user read the view, or
        // shrink the file under our mapping (SIGBUS at the next publish). Then the
        // view stays off.
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0
            || st.st_uid != libc::geteuid()
            || st.st_mode & libc::S_IFMT != libc::S_IFREG
            // Another name for one of this user's files (a hard link another user
            // made, where `protected_hardlinks` is off) would be resized and written.
            || st.st_nlink != 1
            || libc::fchmod(fd, 0o600) != 0
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
        // Mark the texts as being written before the identity changes.
        (*h).main.seq.fetch_or(1, Ordering::Relaxed);
        (*h).sites.seq.fetch_or(1, Ordering::Relaxed);
        (*h).magic = MAGIC;
        (*h).version = VERSION;
        (*h).pid = pid();
        (*h).start_ticks = own_start_ticks();
        (*h).interval_ms = super::heap().config().live_ms;
        (*h).main.len.store(0, Ordering::Relaxed);
        (*h).sites.len.store(0, Ordering::Relaxed);
        (*h).main.seq.fetch_add(1, Ordering::Release);
        (*h).sites.seq.fetch_add(1, Ordering::Release);
        Some(p.cast())
    }
}

/// Writes `[from, to)` of the segment with `write`, under `r`'s sequence count.
///
/// # Safety
/// `seg` is our mapping of [`SEGMENT_BYTES`]; the caller is its only writer
/// (`busy`); `from..to` is the region `r` describes.
pub(crate) unsafe fn publish_region(
    seg: *mut u8,
    r: &Region,
    from: usize,
    to: usize,
    write: impl FnOnce(&mut Cursor<'_>) -> fmt::Result,
) {
    let s = r.seq.load(Ordering::Relaxed);
    r.seq.store(s | 1, Ordering::Relaxed);
    fence(Ordering::Release);
    // SAFETY: the caller's contract: `from..to` is inside our mapping, written only
    // by us.
    let body = unsafe { std::slice::from_raw_parts_mut(seg.add(from), to - from) };
    let mut c = Cursor::region(body);
    if write(&mut c).is_err() {
        // Out of room: the body ends at its last whole record, and says so.
        c.len = c.buf[..c.len]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        c.limit = c.buf.len();
        let _ = writeln!(c, "truncated");
        let _ = writeln!(c, "end");
    }
    r.len.store(c.len as u64, Ordering::Relaxed);
    r.published_unix_ns.store(unix_ns(), Ordering::Relaxed);
    r.publishes.fetch_add(1, Ordering::Relaxed);
    r.seq.store((s | 1) + 1, Ordering::Release);
}

pub(crate) fn unix_ns() -> u64 {
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

/// The body (see `crate::live::Snapshot::parse` for the records). Never allocates.
fn write_body(w: &mut Cursor<'_>) -> fmt::Result {
    use kmem_core::vmstat::{VmEvent, ZoneStat};
    let heap = super::heap();
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
    let c = counters::counters();
    writeln!(
        w,
        "counters {} {} {} {} {} {}",
        c.allocated, c.active, c.resident, c.mapped, c.metadata, c.retained
    )?;
    writeln!(w, "rss {}", crate::platform::linux::rss_bytes())?;
    let (live, bytes) = heap.huge_totals();
    writeln!(w, "huge {live} {bytes} {}", heap.huge_cached_bytes())?;
    let spill = heap.kmem.barn_spill();
    writeln!(w, "spill {} {}", spill.used(), spill.limit())?;
    let max = pa.max_pages();
    if max != 0 {
        let (counted, outside, lent) = pa.bound_usage();
        writeln!(w, "bound {max} {counted} {outside} {lent}")?;
    }
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
    let mut tracking = 0;
    kmem.caches().for_each(|s| {
        tracking += usize::from(s.config().flags.contains(kmem_core::SlabFlags::STORE_USER));
    });
    writeln!(w, "tracking {tracking}")?;
    writeln!(w, "end")
}

/// The sites region: every tracking cache's `alloc_calls` and `free_calls`, then `end`.
/// Never allocates.
fn write_sites(w: &mut Cursor<'_>, now_ns: u64) -> fmt::Result {
    let kmem = super::heap().kmem();
    let slub = kmem.slub();
    // SAFETY: the slots are used only by the `busy` holder: our caller.
    let slots = unsafe { &mut *WRITER.sites.get() };
    let mut out_of_room = [0u64; 2];
    kmem.caches().for_each(|s| {
        if !s.config().flags.contains(kmem_core::SlabFlags::STORE_USER) {
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
                put_site(w, kind, s.name(), l, &mut out_of_room);
            }
            if t.dropped > 0
                && !w.record(|w| writeln!(w, "dropped {kind} {} {}", Field(s.name()), t.dropped))
            {
                out_of_room[usize::from(matches!(which, Calls::Free))] += t.dropped;
            }
        }
    });
    finish_sites(w, out_of_room)
}

/// One site's record, whole or not at all: what finds no room is counted in
/// `out_of_room` (objects, by kind: alloc, free), for [`finish_sites`].
pub(crate) fn put_site(
    w: &mut Cursor<'_>,
    kind: &str,
    cache: &str,
    l: &Location,
    out_of_room: &mut [u64; 2],
) {
    if !w.record(|w| write_site(w, kind, cache, l)) {
        out_of_room[usize::from(kind == "free")] += l.count;
    }
}

/// The end of the sites region, in the room kept for it: the objects of the sites
/// left out (`dropped alloc|free - N`, no cache named), then `end`.
pub(crate) fn finish_sites(w: &mut Cursor<'_>, out_of_room: [u64; 2]) -> fmt::Result {
    w.limit = w.buf.len();
    for (kind, n) in ["alloc", "free"].into_iter().zip(out_of_room) {
        if n > 0 {
            writeln!(w, "dropped {kind} - {n}")?;
        }
    }
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
pub(crate) struct Cursor<'a> {
    buf: &'a mut [u8],
    /// Bytes written.
    pub(crate) len: usize,
    /// Where writes stop: the end, or for a region the end less [`TRAILER_BYTES`]
    /// until its last records.
    limit: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a mut [u8]) -> Self {
        let limit = buf.len();
        Cursor { buf, len: 0, limit }
    }

    /// A cursor over a region of the segment: writes stop [`TRAILER_BYTES`] short of
    /// its end, kept for the records that end it.
    pub(crate) fn region(buf: &'a mut [u8]) -> Self {
        let limit = buf.len().saturating_sub(TRAILER_BYTES);
        Cursor { buf, len: 0, limit }
    }

    /// Writes one record with `f`, whole or not at all; false if it found no room.
    fn record(&mut self, f: impl FnOnce(&mut Self) -> fmt::Result) -> bool {
        let at = self.len;
        let ok = f(self).is_ok();
        if !ok {
            self.len = at;
        }
        ok
    }
}

/// Room a region keeps past what its records may fill, for the records that end it
/// (`truncated`, the sites' `dropped` totals, `end`).
const TRAILER_BYTES: usize = 256;

impl fmt::Write for Cursor<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let b = s.as_bytes();
        if self.len + b.len() > self.limit {
            return Err(fmt::Error);
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_sites_walk_saturates_for_the_longest_intervals() {
        assert_eq!(next_sites_walk(1_000, 250_000_000, 10), 250_001_000);
        assert_eq!(
            next_sites_walk(1_000, 5, 10),
            1_000 + 10 * SITES_COST_SHARE,
            "a walk's cost paid off first"
        );
        let longest = u64::MAX / 1_000_000 * 1_000_000;
        assert_eq!(next_sites_walk(5_000_000_000, longest, 10), u64::MAX);
        assert_eq!(next_sites_walk(5, u64::MAX, u64::MAX), u64::MAX);
    }
}
