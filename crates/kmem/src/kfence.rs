//! KFENCE: sampled allocations on guarded pages, so out-of-bounds accesses and uses
//! after free of those objects are caught by the MMU at the faulting instruction, in
//! production, at no cost to the other allocations (the kernel's mm/kfence).
//!
//! ## The pool
//! One private mapping of `2 * NUM_OBJECTS + 2` pages: object pages at odd indices,
//! guard pages (never accessible) around each. A sampled allocation (up to a page)
//! takes a free object page (made readable and writable) and sits at its start or at
//! its end (alternately: underflows then hit the guard page before, overflows the one
//! after); the rest of the page is filled with a canary (`0xaa ^ (address & 7)`),
//! checked at free. A freed object page is made inaccessible again and its slot goes
//! to the back of a FIFO, so it stays protected for as long as possible: a use after
//! free faults.
//!
//! ## Faults
//! A `SIGSEGV` handler, installed at the first sampled allocation (so a runtime that
//! installs its own handler at start, as Rust's stack-overflow guard does, is found
//! and chained to), turns a fault inside the pool into a report in KFENCE's format —
//! out-of-bounds or use-after-free, read or write, the faulting address and
//! instruction, the object with its allocation (and free) stack — then stops the
//! program (SIGABRT: the access cannot be retried). A fault elsewhere goes to the
//! handler that was there before (or the default action). The handler is
//! async-signal-safe as far as a report allows: no allocation, no lock, writes with
//! `write(2)`; it names functions with `dladdr` and unwinds with `backtrace`, loaded
//! before the first sample.
//!
//! ## Sampling
//! `KMEM_KFENCE=MS` arms one sample every MS milliseconds (the kernel's
//! `kfence.sample_interval`, 100 by default): the heap's housekeeping tick arms it, and
//! the next allocation that reaches the heap's slow path (an empty sheaf, a debug
//! cache, per-CPU mode) takes it, so the fast paths carry nothing for KFENCE. A charged
//! allocation (an active memory cgroup) is sampled too, as in the kernel: the heap
//! charges the object as one of its `kmalloc-cg-N` cache before taking the slot, the
//! slot keeps the charge ([`Charge`]), and the free that releases the slot hands it
//! back to be uncharged.
//! `KMEM_KFENCE=all` samples every allocation of up to a page while slots last (the
//! heap then turns its fast paths off); `off` disables it.
//!
//! Locking: `FREE` (a spin lock, a leaf) guards the FIFO of free slots; a slot's
//! metadata belongs to whoever moved its state (free → allocated by the allocator,
//! allocated → freed by the one free that wins the compare-exchange).

use crate::platform::linux::{symbolize, FdWriter};
use crate::platform::os;
use kmem_core::sync::SpinLock;
use kmem_core::PAGE_SIZE;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Objects in the pool (the kernel's CONFIG_KFENCE_NUM_OBJECTS default).
pub const NUM_OBJECTS: usize = 255;
const POOL_PAGES: usize = 2 * NUM_OBJECTS + 2;
/// Frames kept per stack.
const FRAMES: usize = 8;

/// A slot's state word: the state in the low byte, and above it the slot's
/// generation, which each allocation moves on, so that a free that read the state of
/// an earlier object of the slot cannot change a later one's (a double free racing
/// with the slot's reuse: the stale free's compare-exchange fails and is reported).
const UNUSED: u32 = 0;
const ALLOCATED: u32 = 1;
const FREED: u32 = 2;
/// Allocated, its canary being read by the check at exit ([`check_live`]): a free
/// waits for the check, which must not find the page made inaccessible under it.
const CHECKING: u32 = 3;
/// One generation in the state word.
const GENERATION: u32 = 1 << 8;

/// The state of a state word (the low byte).
fn kind(word: u32) -> u32 {
    word & (GENERATION - 1)
}

/// Where and when an object was allocated or freed.
#[derive(Clone, Copy)]
struct Stack {
    frames: [usize; FRAMES],
    pid: u32,
    tid: u32,
    cpu: u32,
    when_ns: u64,
}

const EMPTY_STACK: Stack = Stack {
    frames: [0; FRAMES],
    pid: 0,
    tid: 0,
    cpu: 0,
    when_ns: 0,
};

/// One slot's metadata (`struct kfence_metadata`).
struct Meta {
    state: AtomicU32,
    addr: AtomicUsize,
    size: AtomicUsize,
    /// The kmalloc cache the object stands in for (`kmalloc-64`), NUL-padded.
    cache: std::cell::UnsafeCell<[u8; 24]>,
    alloc: std::cell::UnsafeCell<Stack>,
    free: std::cell::UnsafeCell<Stack>,
    /// What the object is charged to (the heap's; the pool only keeps it): written by
    /// the allocation before the state says ALLOCATED, taken by the one free that wins
    /// the state change.
    charge: std::cell::UnsafeCell<Charge>,
}

/// A sampled object's memory cgroup charge, as the heap made it: the objcg charged
/// and the kmalloc cache whose objects the charge is counted as (both 0: uncharged).
/// The pool keeps it for the object's lifetime and gives it back to the free that
/// releases the object, so exactly one free uncharges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Charge {
    pub(crate) objcg: usize,
    pub(crate) cache: usize,
}

impl Charge {
    /// No charge.
    pub(crate) const NONE: Charge = Charge { objcg: 0, cache: 0 };
}

// SAFETY: the UnsafeCell fields are written only by the owner of the slot's state
// transition (module doc) and read by reports after it.
unsafe impl Sync for Meta {}

#[allow(clippy::declare_interior_mutable_const)]
const META: Meta = Meta {
    state: AtomicU32::new(UNUSED),
    addr: AtomicUsize::new(0),
    size: AtomicUsize::new(0),
    cache: std::cell::UnsafeCell::new([0; 24]),
    alloc: std::cell::UnsafeCell::new(EMPTY_STACK),
    free: std::cell::UnsafeCell::new(EMPTY_STACK),
    charge: std::cell::UnsafeCell::new(Charge::NONE),
};

static METAS: [Meta; NUM_OBJECTS] = [META; NUM_OBJECTS];

/// One past the highest slot ever handed out: the exit check reads only the metadata
/// of slots below it (the FIFO hands slots out in order until it wraps), so a process
/// that sampled a few objects does not fault in the rest of `METAS` (84 KiB) as it
/// exits.
static SLOTS_USED: AtomicUsize = AtomicUsize::new(0);

/// The FIFO of free slots (indices), oldest freed first.
struct Fifo {
    slots: [u16; NUM_OBJECTS],
    head: usize,
    len: usize,
}

static FREE: SpinLock<Fifo> = SpinLock::new(Fifo {
    slots: [0; NUM_OBJECTS],
    head: 0,
    len: 0,
});

/// The pool's base (0: not made).
static POOL: AtomicUsize = AtomicUsize::new(0);
/// 0: off; u64::MAX: every allocation; else the sample interval in ns.
static INTERVAL_NS: AtomicU64 = AtomicU64::new(0);
static NEXT_NS: AtomicU64 = AtomicU64::new(0);
static ARMED: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// The fault handler: 0 not installed, 1 being installed (by the first sample's
/// thread; other threads take no sample meanwhile: a fault on one would find no
/// handler), 2 installed.
static HANDLER: AtomicU32 = AtomicU32::new(0);
/// The `SIGSEGV` action before ours: written once by `install_handler` before ours is
/// installed, read by the handler after.
struct OldAction(std::cell::UnsafeCell<std::mem::MaybeUninit<libc::sigaction>>);
// SAFETY: written once before any reader can run (see above).
unsafe impl Sync for OldAction {}
static OLD_ACTION: OldAction =
    OldAction(std::cell::UnsafeCell::new(std::mem::MaybeUninit::zeroed()));
/// Process start (monotonic ns), for report times.
static START_NS: AtomicU64 = AtomicU64::new(0);

/// `KMEM_KFENCE`'s every-allocation setting.
pub const ALL: u64 = u64::MAX;

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Makes the pool (one mapping, every page inaccessible) and sets the sampling:
/// `interval_ms` (0: off; [`ALL`]: every allocation). False if the pool cannot be
/// mapped (KFENCE stays off). The pool is made once: a second call (the process heap's
/// after a unit test's, in one test binary) only sets the sampling.
pub(crate) fn init(interval_ms: u64) -> bool {
    if interval_ms == 0 {
        return false;
    }
    if !guard_pages_fit(os::page_size()) {
        // Its guard pages are kmem's 4 KiB pages, which the kernel cannot protect
        // one by one here: off (said only to whoever asked for it).
        if os::getenv(b"KMEM_KFENCE").is_some() {
            crate::platform::linux::write_stderr(
                b"kmem: KFENCE needs 4 KiB kernel pages; it stays off\n",
            );
        }
        return false;
    }
    {
        // The FIFO's lock orders the calls: the pool is made and listed once.
        let mut f = FREE.lock();
        if POOL.load(Ordering::Acquire) == 0 {
            // SAFETY: a fresh private anonymous mapping with no access.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    POOL_PAGES * PAGE_SIZE,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return false;
            }
            for (i, s) in f.slots.iter_mut().enumerate() {
                *s = i as u16;
            }
            f.head = 0;
            f.len = NUM_OBJECTS;
            START_NS.store(now_ns(), Ordering::Relaxed);
            POOL.store(p as usize, Ordering::Release);
        }
    }
    let ns = interval_ns(interval_ms);
    INTERVAL_NS.store(ns, Ordering::Relaxed);
    NEXT_NS.store(now_ns().saturating_add(ns), Ordering::Relaxed);
    true
}

/// Whether KFENCE's layout (objects and guards on kmem's 4 KiB pages) can be
/// protected page by page with kernel pages of `os_page` bytes: only when they are
/// kmem's own size. With 64 KiB kernel pages, protecting a freed object's page would
/// protect its neighbours with it.
fn guard_pages_fit(os_page: usize) -> bool {
    os_page == PAGE_SIZE
}

/// The sample interval in ns for `interval_ms` ([`ALL`] stays [`ALL`]). A number of
/// milliseconds too large for the nanoseconds saturates one short of [`ALL`]: an
/// interval longer than any run, never every allocation.
fn interval_ns(interval_ms: u64) -> u64 {
    if interval_ms == ALL {
        ALL
    } else {
        interval_ms.saturating_mul(1_000_000).min(ALL - 1)
    }
}

/// Whether every allocation is sampled (the heap's fast paths are off).
pub(crate) fn every_allocation() -> bool {
    INTERVAL_NS.load(Ordering::Relaxed) == ALL
}

/// The housekeeping tick: arms one sample when the interval has passed.
#[inline]
pub(crate) fn tick(now_ns: u64) {
    let interval = INTERVAL_NS.load(Ordering::Relaxed);
    if interval == 0 || interval == ALL || ARMED.load(Ordering::Relaxed) {
        return;
    }
    if now_ns >= NEXT_NS.load(Ordering::Relaxed) {
        NEXT_NS.store(now_ns.saturating_add(interval), Ordering::Relaxed);
        ARMED.store(true, Ordering::Relaxed);
    }
}

/// Whether this allocation of `size` bytes is to be sampled (takes the armed sample).
///
/// Taking the sample restarts the interval, as the kernel's timer restarts once the
/// armed allocation has come: an armed sample may wait long for an allocation that
/// takes it (sizes above a page never do), and an interval counted from the arming
/// would be over already, so the next tick would arm again at once — inside the
/// allocations the sample itself makes (its stack trace's first use loads the
/// unwinder, which allocates).
#[inline]
pub(crate) fn should_sample(size: usize) -> bool {
    if size == 0 || size > PAGE_SIZE {
        return false;
    }
    let interval = INTERVAL_NS.load(Ordering::Relaxed);
    // Read before the swap: a swap is a locked write to a line every thread reads,
    // and between samples (all but one allocation per interval) nothing is armed.
    if interval == ALL {
        return true;
    }
    if interval == 0 || !ARMED.load(Ordering::Relaxed) {
        return false;
    }
    // The next interval first, while the sample is still armed: a tick on another
    // thread leaves an armed sample alone, so it cannot arm a second one in between.
    NEXT_NS.store(now_ns().saturating_add(interval), Ordering::Relaxed);
    ARMED.swap(false, Ordering::Relaxed)
}

/// Whether the sampling slow path wants the next allocation: a sample is armed, or
/// every allocation is sampled (`KMEM_KFENCE=all`). For paths that bypass it (a
/// charged thread's kept sheaves), tested first.
#[inline]
pub(crate) fn wants_next() -> bool {
    armed() || every_allocation()
}

/// Whether a sample is armed (read only: the allocation that takes it calls
/// [`should_sample`]). Paths that bypass the sampling slow path test this first.
#[inline(always)]
pub(crate) fn armed() -> bool {
    ARMED.load(Ordering::Relaxed)
}

/// Whether `p` lies in the pool.
#[inline]
pub(crate) fn owns(p: *const u8) -> bool {
    let base = POOL.load(Ordering::Relaxed);
    base != 0 && (p as usize).wrapping_sub(base) < POOL_PAGES * PAGE_SIZE
}

fn page_of(slot: usize) -> usize {
    POOL.load(Ordering::Relaxed) + (2 * slot + 1) * PAGE_SIZE
}

fn canary(addr: usize) -> u8 {
    0xaa ^ (addr & 7) as u8
}

/// A sampled allocation of `size` bytes (≤ a page), aligned to `align` (a power of
/// two ≤ a page), standing in for kmalloc cache `cache`; `frames` its allocation
/// stack; `charge` what the caller charged for it, kept until the free that releases
/// it returns it. `None` when no slot is free (the caller allocates as usual, and
/// undoes its charge).
pub(crate) fn alloc(
    size: usize,
    align: usize,
    zero: bool,
    cache: &str,
    frames: &[usize],
    ids: (u32, u32, u32),
    charge: Charge,
) -> Option<*mut u8> {
    if HANDLER.load(Ordering::Acquire) != 2 {
        if HANDLER
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return None; // another thread installs it
        }
        install_handler();
        HANDLER.store(2, Ordering::Release);
    }
    let slot = {
        let mut f = FREE.lock();
        if f.len == 0 {
            return None;
        }
        let s = f.slots[f.head] as usize;
        f.head = (f.head + 1) % NUM_OBJECTS;
        f.len -= 1;
        SLOTS_USED.fetch_max(s + 1, Ordering::Relaxed);
        s
    };
    let page = page_of(slot);
    // SAFETY: the slot's page is ours (just taken off the FIFO); it lies in the pool.
    if unsafe {
        libc::mprotect(
            page as *mut libc::c_void,
            PAGE_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    } != 0
    {
        push_free(slot);
        return None;
    }
    let n = ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    let addr = if n.is_multiple_of(2) {
        page
    } else {
        (page + PAGE_SIZE - size) & !(align - 1)
    };
    // SAFETY: the page is readable and writable now and ours.
    unsafe {
        for a in page..addr {
            (a as *mut u8).write(canary(a));
        }
        for a in addr + size..page + PAGE_SIZE {
            (a as *mut u8).write(canary(a));
        }
        if zero {
            std::ptr::write_bytes(addr as *mut u8, 0, size);
        }
    }
    let m = &METAS[slot];
    m.addr.store(addr, Ordering::Relaxed);
    m.size.store(size, Ordering::Relaxed);
    let mut st = EMPTY_STACK;
    for (d, s) in st.frames.iter_mut().zip(frames) {
        *d = *s;
    }
    (st.pid, st.tid, st.cpu) = ids;
    st.when_ns = now_ns();
    // SAFETY: the slot is ours until its state says ALLOCATED (module doc).
    unsafe {
        *m.alloc.get() = st;
        *m.free.get() = EMPTY_STACK;
        *m.charge.get() = charge;
        let c = &mut *m.cache.get();
        *c = [0; 24];
        let b = cache.as_bytes();
        c[..b.len().min(24)].copy_from_slice(&b[..b.len().min(24)]);
    }
    let generation = (m.state.load(Ordering::Relaxed) & !(GENERATION - 1)).wrapping_add(GENERATION);
    m.state.store(generation | ALLOCATED, Ordering::Release);
    Some(addr as *mut u8)
}

fn push_free(slot: usize) {
    let mut f = FREE.lock();
    let tail = (f.head + f.len) % NUM_OBJECTS;
    f.slots[tail] = slot as u16;
    f.len += 1;
}

/// The slot of the object page holding `p`, if `p` is on one (not a guard page).
fn slot_of(p: usize) -> Option<usize> {
    let off = p.checked_sub(POOL.load(Ordering::Relaxed))?;
    let page = off / PAGE_SIZE;
    (page % 2 == 1 && page < 2 * NUM_OBJECTS + 1).then_some(page / 2)
}

/// The bytes the program asked for at `p` (a pool object's start), if it is one.
pub(crate) fn size_of(p: *const u8) -> Option<usize> {
    let m = &METAS[slot_of(p as usize)?];
    let allocated = matches!(kind(m.state.load(Ordering::Acquire)), ALLOCATED | CHECKING);
    (allocated && m.addr.load(Ordering::Relaxed) == p as usize)
        .then(|| m.size.load(Ordering::Relaxed))
}

/// The first byte of `slot`'s canary that is wrong, if any (the slot's page must be
/// accessible: an allocated object's).
fn damaged_canary(slot: usize) -> Option<usize> {
    let m = &METAS[slot];
    let (p, size) = (
        m.addr.load(Ordering::Relaxed),
        m.size.load(Ordering::Relaxed),
    );
    let page = page_of(slot);
    (page..p).chain(p + size..page + PAGE_SIZE).find(|&a| {
        // SAFETY: the page is accessible while the object is allocated.
        unsafe { (a as *const u8).read() != canary(a) }
    })
}

/// At exit: the canaries of the objects still allocated (an overflow of an object
/// never freed is otherwise never seen). Reports each damaged one; returns how many.
pub(crate) fn check_live() -> usize {
    if POOL.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    let mut n = 0;
    let used = SLOTS_USED.load(Ordering::Relaxed);
    for (slot, m) in METAS[..used].iter().enumerate() {
        // Claimed for the check, so that a free on another thread (one still running
        // while this one exits) waits, and the page stays accessible and the slot
        // the same object's while its canary is read.
        let w = m.state.load(Ordering::Acquire);
        if kind(w) != ALLOCATED
            || m.state
                .compare_exchange(
                    w,
                    w - ALLOCATED + CHECKING,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            continue;
        }
        // The report reads the page too (its dump): still claimed until it is done,
        // or a free on another thread could take the slot and protect the page first.
        if let Some(bad) = damaged_canary(slot) {
            report_corruption(bad, slot, &[]);
            n += 1;
        }
        m.state.store(w, Ordering::Release);
    }
    n
}

/// What [`free`] found. A freed object's charge (as [`alloc`] was given it) comes
/// back to the caller, who undoes it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FreeOutcome {
    /// Freed.
    Freed(Charge),
    /// Freed, but the canary around it was damaged (reported).
    Corrupted(Charge),
    /// Not freed: not an object's start, or already free (reported).
    Invalid,
}

/// Frees a pool object (`p` in the pool: see [`owns`]); `frames` is the free's stack.
pub(crate) fn free(p: *mut u8, frames: &[usize], ids: (u32, u32, u32)) -> FreeOutcome {
    let p = p as usize;
    let Some(slot) = slot_of(p) else {
        report_invalid_free(p, None, frames);
        return FreeOutcome::Invalid;
    };
    let m = &METAS[slot];
    // The state before the address (an allocation writes them the other way round):
    // the address read belongs to the object of that state's generation or a later
    // one, and the exchange below fails for a later one.
    let mut w = m.state.load(Ordering::Acquire);
    loop {
        if kind(w) == CHECKING {
            // The check at exit reads its canary: wait for it.
            std::hint::spin_loop();
            w = m.state.load(Ordering::Acquire);
            continue;
        }
        if kind(w) != ALLOCATED || m.addr.load(Ordering::Relaxed) != p {
            report_invalid_free(p, Some(slot), frames);
            return FreeOutcome::Invalid;
        }
        match m.state.compare_exchange(
            w,
            w - ALLOCATED + FREED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => break,
            // Claimed by the check at exit meanwhile: the same object still.
            Err(now) if now == w - ALLOCATED + CHECKING => w = now,
            Err(_) => {
                report_invalid_free(p, Some(slot), frames);
                return FreeOutcome::Invalid;
            }
        }
    }
    let page = page_of(slot);
    let bad = damaged_canary(slot);
    let mut st = EMPTY_STACK;
    for (d, s) in st.frames.iter_mut().zip(frames) {
        *d = *s;
    }
    (st.pid, st.tid, st.cpu) = ids;
    st.when_ns = now_ns();
    // SAFETY: we won the state change: the slot's free record and charge are ours
    // (the allocation wrote the charge before its release of the state, which our
    // acquiring exchange read).
    let charge = unsafe {
        *m.free.get() = st;
        std::mem::replace(&mut *m.charge.get(), Charge::NONE)
    };
    if let Some(bad) = bad {
        report_corruption(bad, slot, frames);
    }
    // SAFETY: the slot's page, ours until it goes back on the FIFO.
    unsafe { libc::mprotect(page as *mut libc::c_void, PAGE_SIZE, libc::PROT_NONE) };
    push_free(slot);
    if bad.is_some() {
        FreeOutcome::Corrupted(charge)
    } else {
        FreeOutcome::Freed(charge)
    }
}

// ---------------------------------------------------------------------------
// Reports.

const RULE: &str = "==================================================================";

fn write_frames(w: &mut FdWriter, frames: &[usize]) {
    for &f in frames.iter().take_while(|&&f| f != 0) {
        let _ = w.write_str(" ");
        let _ = symbolize(f, w);
        let _ = w.write_str("\n");
    }
}

fn first_function(w: &mut FdWriter, frames: &[usize]) {
    match frames.first() {
        Some(&f) if f != 0 => {
            let _ = symbolize(f, w);
        }
        // No stack: found by the check at exit.
        _ => {
            let _ = w.write_str("exit");
        }
    }
}

fn write_object(w: &mut FdWriter, slot: usize) {
    let m = &METAS[slot];
    let addr = m.addr.load(Ordering::Relaxed);
    let size = m.size.load(Ordering::Relaxed);
    // SAFETY: written before the state change that published the slot; reports
    // only read it.
    let (cache, alloc, free) = unsafe { (*m.cache.get(), *m.alloc.get(), *m.free.get()) };
    let name_len = cache.iter().position(|&b| b == 0).unwrap_or(cache.len());
    let _ = writeln!(
        w,
        "kfence-#{slot}: 0x{addr:016x}-0x{:016x}, size={size}, cache={}\n",
        addr + size.max(1) - 1,
        std::str::from_utf8(&cache[..name_len]).unwrap_or("?")
    );
    let start = START_NS.load(Ordering::Relaxed);
    let secs = |t: u64| {
        let d = t.saturating_sub(start);
        (d / 1_000_000_000, d % 1_000_000_000 / 1000)
    };
    let (s, us) = secs(alloc.when_ns);
    let _ = writeln!(
        w,
        "allocated by task {} on cpu {} at {s}.{us:06}s:",
        alloc.tid, alloc.cpu
    );
    write_frames(w, &alloc.frames);
    if kind(m.state.load(Ordering::Acquire)) == FREED && free.when_ns != 0 {
        let (s, us) = secs(free.when_ns);
        let _ = writeln!(
            w,
            "\nfreed by task {} on cpu {} at {s}.{us:06}s:",
            free.tid, free.cpu
        );
        write_frames(w, &free.frames);
    }
}

fn write_tail(w: &mut FdWriter) {
    let mut comm = [0u8; 32];
    let comm = crate::platform::linux::read_small_file(c"/proc/self/comm", &mut comm)
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or("?")
        .trim();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let _ = writeln!(
        w,
        "\nCPU: {} PID: {pid} Comm: {comm}\n{RULE}",
        crate::platform::linux::current_cpu()
    );
    w.flush();
}

fn report_invalid_free(p: usize, slot: Option<usize>, frames: &[usize]) {
    let mut w = FdWriter::new(2);
    let _ = write!(w, "{RULE}\nBUG: KFENCE: invalid free in ");
    first_function(&mut w, frames);
    let _ = writeln!(w, "\n");
    match slot {
        Some(s) => {
            let _ = writeln!(w, "Invalid free of 0x{p:016x} (in kfence-#{s}):");
        }
        None => {
            let _ = writeln!(w, "Invalid free of 0x{p:016x}:");
        }
    }
    write_frames(&mut w, frames);
    if let Some(s) = slot {
        let _ = writeln!(w);
        write_object(&mut w, s);
    }
    write_tail(&mut w);
}

fn report_corruption(bad: usize, slot: usize, frames: &[usize]) {
    let mut w = FdWriter::new(2);
    let _ = write!(w, "{RULE}\nBUG: KFENCE: memory corruption in ");
    first_function(&mut w, frames);
    // The damaged bytes around the first one, as the kernel shows them: `!` wrong,
    // `.` intact.
    let _ = write!(w, "\n\nCorrupted memory at 0x{bad:016x} [");
    let page = page_of(slot);
    let m = &METAS[slot];
    let (addr, size) = (
        m.addr.load(Ordering::Relaxed),
        m.size.load(Ordering::Relaxed),
    );
    for a in bad..(bad + 16).min(page + PAGE_SIZE) {
        if (addr..addr + size).contains(&a) {
            break;
        }
        // SAFETY: the page is still accessible (the caller protects it after).
        let ok = unsafe { (a as *const u8).read() } == canary(a);
        let _ = w.write_str(if ok { " ." } else { " !" });
    }
    let _ = writeln!(w, " ] (in kfence-#{slot}):");
    write_frames(&mut w, frames);
    let _ = writeln!(w);
    write_object(&mut w, slot);
    write_tail(&mut w);
}

/// The fault report (from the signal handler): `addr` faulted, `write` or read,
/// at instruction `ip`.
fn report_fault(addr: usize, write: bool, ip: usize) {
    let base = POOL.load(Ordering::Relaxed);
    let page = (addr - base) / PAGE_SIZE;
    let rw = if write { "write" } else { "read" };
    let mut w = FdWriter::new(2);
    // On an object page: a use after free (the page is protected only when free).
    // On a guard page: out of bounds of the nearest object.
    let (kind, slot) = if page % 2 == 1 && page / 2 < NUM_OBJECTS {
        ("use-after-free", page / 2)
    } else {
        let before = page
            .checked_sub(1)
            .map(|p| p / 2)
            .filter(|&s| s < NUM_OBJECTS);
        let after = (page / 2 < NUM_OBJECTS).then_some(page / 2);
        let dist = |s: usize| {
            let m = &METAS[s];
            let (a, n) = (
                m.addr.load(Ordering::Relaxed),
                m.size.load(Ordering::Relaxed),
            );
            if addr < a {
                a - addr
            } else {
                addr.saturating_sub(a + n)
            }
        };
        let live = |s: &usize| kind(METAS[*s].state.load(Ordering::Acquire)) != UNUSED;
        let s = match (before.filter(live), after.filter(live)) {
            (Some(b), Some(a)) => {
                if dist(b) <= dist(a) {
                    b
                } else {
                    a
                }
            }
            (Some(b), None) => b,
            (None, Some(a)) => a,
            (None, None) => before.or(after).unwrap_or(0),
        };
        ("out-of-bounds", s)
    };
    let _ = write!(w, "{RULE}\nBUG: KFENCE: {kind} {rw} in ");
    let _ = symbolize(ip, &mut w);
    let _ = writeln!(w, "\n");
    let m = &METAS[slot];
    let (a, n) = (
        m.addr.load(Ordering::Relaxed),
        m.size.load(Ordering::Relaxed),
    );
    if kind == "out-of-bounds" {
        let (d, side) = if addr < a {
            (a - addr, "left")
        } else {
            (addr - (a + n) + 1, "right")
        };
        let _ = writeln!(
            w,
            "Out-of-bounds {rw} at 0x{addr:016x} ({d}B {side} of kfence-#{slot}):"
        );
    } else {
        let _ = writeln!(
            w,
            "Use-after-free {rw} at 0x{addr:016x} (in kfence-#{slot}):"
        );
    }
    let _ = write!(w, " ");
    let _ = symbolize(ip, &mut w);
    let _ = writeln!(w);
    let mut frames = [0usize; 16];
    raw_backtrace(&mut frames);
    // Skip this handler's frames, up to the signal trampoline's caller.
    let from = frames
        .iter()
        .position(|&f| f == ip)
        .map_or(frames.len(), |i| i + 1);
    write_frames(&mut w, &frames[from..]);
    let _ = writeln!(w);
    write_object(&mut w, slot);
    write_tail(&mut w);
}

fn raw_backtrace(frames: &mut [usize]) {
    #[cfg(target_env = "gnu")]
    {
        let mut buf = [std::ptr::null_mut::<libc::c_void>(); 16];
        let n = frames.len().min(buf.len());
        // SAFETY: backtrace fills at most `n` entries of `buf` (loaded before the
        // first sample, so it does not allocate here).
        let got = unsafe { libc::backtrace(buf.as_mut_ptr(), n as libc::c_int) }.max(0) as usize;
        for (d, s) in frames.iter_mut().zip(&buf[..got]) {
            *d = *s as usize;
        }
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = frames;
}

// ---------------------------------------------------------------------------
// The SIGSEGV handler.

fn install_handler() {
    // Load the unwinder now: its first use allocates, which a signal handler must not.
    let mut frames = [0usize; 2];
    raw_backtrace(&mut frames);
    // SAFETY: installing a handler; the old action is saved once, before any fault
    // can run ours (HANDLER was 0 until the caller moved it on).
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_segv as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGSEGV, &act, (*OLD_ACTION.0.get()).as_mut_ptr());
    }
}

extern "C" fn on_segv(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let code = unsafe { (*info).si_code };
    // A fault (si_code > 0) carries its address; a signal sent by a process does not.
    let fault = code > 0;
    // SAFETY: as above.
    let addr = unsafe { (*info).si_addr() } as usize;
    if fault && owns(addr as *const u8) {
        let (write, ip) = fault_context(uctx);
        report_fault(addr, write, ip);
        crate::platform::linux::write_stderr(b"kmem: KFENCE fault: aborting\n");
        // SAFETY: restoring SIGABRT's default so abort ends the process.
        unsafe {
            libc::signal(libc::SIGABRT, libc::SIG_DFL);
            libc::abort();
        }
    }
    // Not ours: the handler that was there before.
    // SAFETY: OLD_ACTION was written by install_handler before ours was installed.
    let old = unsafe { (*OLD_ACTION.0.get()).assume_init_ref() };
    let h = old.sa_sigaction;
    if h == libc::SIG_IGN && !fault {
        // A sent SIGSEGV the program ignores: ignored.
    } else if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // Back to the default action, as without us: a fault happens again when the
        // access is retried (the kernel kills for an ignored fault too); a sent
        // signal is raised again.
        // SAFETY: resetting a signal's action, then raising it (SA_NODEFER: delivered
        // now, to the default action).
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            if !fault {
                libc::raise(sig);
            }
        }
    } else if old.sa_flags & libc::SA_SIGINFO != 0 {
        type Action = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
        // SAFETY: the previous handler, an `sa_sigaction` (SA_SIGINFO), called as it
        // was registered.
        let f: Action = unsafe { std::mem::transmute(h) };
        f(sig, info, uctx);
    } else {
        // SAFETY: as above, a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// Whether the faulting access wrote, and the faulting instruction.
fn fault_context(uctx: *mut libc::c_void) -> (bool, usize) {
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    {
        // SAFETY: the kernel passes a ucontext_t to SA_SIGINFO handlers.
        let uc = unsafe { &*(uctx as *const libc::ucontext_t) };
        let err = uc.uc_mcontext.gregs[libc::REG_ERR as usize] as usize;
        let ip = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize;
        (err & 2 != 0, ip)
    }
    #[cfg(not(all(target_arch = "x86_64", target_env = "gnu")))]
    {
        let _ = uctx;
        (false, 0)
    }
}

/// `pthread_atfork` prepare: takes the FIFO's lock (a leaf: after every other
/// allocator lock), so a child never inherits it held; the fork handlers release it
/// with every other such lock (`kmem_core::sync::release_fork_locks`).
pub(crate) fn lock_for_fork() {
    FREE.lock_forever();
}

#[cfg(test)]
mod tests;
