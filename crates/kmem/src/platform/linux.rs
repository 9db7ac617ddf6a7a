//! The Linux platform: address space from `mmap`, memory given back with `madvise`,
//! nodes from sysfs, the current CPU and node from `getcpu`, reports to stderr with
//! `write(2)`.
//!
//! Nothing here allocates through the heap: kmem may be the process's malloc.
//!
//! Owns the platform's few settings (node counts, the reporting hook: atomics set
//! during the heap's initialisation), glibc's rseq offset (found once by
//! [`rseq_init`]) and the location of kmem's own code (found once, for stack traces).
//! Locking: none; racing first users of the once-found values compute the same ones.

use kmem_core::page::{MAX_NUMNODES, MAX_SECTIONS, MEMMAP_PAGES, PAGE_SIZE, SECTION_SIZE};
use kmem_core::Platform;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The Linux implementation of [`Platform`].
pub struct LinuxPlatform {
    /// Real NUMA nodes (from /sys/devices/system/node/online).
    real_nodes: AtomicUsize,
    /// Nodes the allocator sees (real, or more with fake NUMA).
    nr_nodes: AtomicUsize,
}

/// Why [`LinuxPlatform::reserve_span`] found no span: every size from `want` down to
/// `smallest` was refused. Its Display (one phrase, no allocation) reads like
/// "cannot reserve 1 TiB of address space, nor any span down to 128 MiB (mmap: Cannot
/// allocate memory)".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReserveError {
    /// The first size asked for (bytes).
    pub want: usize,
    /// The last, smallest size asked for (bytes).
    pub smallest: usize,
    /// `mmap`'s errno for that last attempt.
    pub errno: i32,
}

impl std::fmt::Display for ReserveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot reserve {} of address space", Bytes(self.want))?;
        if self.smallest < self.want {
            write!(f, ", nor any span down to {}", Bytes(self.smallest))?;
        }
        write!(f, " (mmap: {})", Errno(self.errno))
    }
}

/// A byte count in the largest binary unit that divides it ("128 MiB", "1 TiB").
struct Bytes(usize);

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
        let (mut n, mut unit) = (self.0, 0);
        while unit + 1 < UNITS.len() && n >= 1024 && n % 1024 == 0 {
            n /= 1024;
            unit += 1;
        }
        write!(f, "{n} {}", UNITS[unit])
    }
}

/// An errno value as the C library's message (`strerror_r`, into a stack buffer).
pub struct Errno(pub i32);

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut buf = [0u8; 128];
        // SAFETY: the XSI strerror_r writes a NUL-terminated message of at most
        // `buf.len()` bytes into `buf` and allocates nothing.
        let rc = unsafe { libc::strerror_r(self.0, buf.as_mut_ptr().cast(), buf.len()) };
        let text = std::ffi::CStr::from_bytes_until_nul(&buf)
            .ok()
            .and_then(|c| c.to_str().ok())
            .filter(|t| rc == 0 && !t.is_empty());
        match text {
            Some(t) => f.write_str(t),
            None => write!(f, "errno {}", self.0),
        }
    }
}

/// Words in [`RANDOM_POOL`]: 1 KiB, enough for every cache the heap makes as it
/// starts (about 70 keys and seeds), so a process's start makes one `getrandom` call
/// (with 256 bytes, the most it fills without a signal cutting it short, it made
/// three). A call a signal cuts short goes on where it stopped ([`fill_random`]).
const RANDOM_POOL_WORDS: usize = 128;

/// Random words fetched from `getrandom` a pool at a time: a process makes about 70
/// caches as it starts, each wanting its own freelist key, and one system call a key
/// cost a short-lived program more than the rest of kmem's start (`ls`: 70 calls,
/// about a tenth of its CPU time in this VM). Each word is handed out once and
/// cleared. The pool belongs to the fork generation that filled it
/// (`kmem_core::sync::fork_generation`, which moves on at every fork in the parent and
/// the child): after a fork each refills before its next word, so parent and child
/// never hand out the same words, and a child that only execs writes nothing here.
struct RandomPool {
    words: [u64; RANDOM_POOL_WORDS],
    /// The next word to hand out; `RANDOM_POOL_WORDS`: empty.
    next: usize,
    /// The fork generation that filled the pool.
    generation: u32,
}

static RANDOM_POOL: kmem_core::sync::SpinLock<RandomPool> =
    kmem_core::sync::SpinLock::new(RandomPool {
        words: [0; RANDOM_POOL_WORDS],
        next: RANDOM_POOL_WORDS,
        generation: 0,
    });

/// The next word of the pool, refilled when empty (or filled before a fork); `None` when the pool is busy (another thread, or one
/// that held it across a fork: never wait) or `getrandom` cannot fill it (the caller
/// asks for a word alone, with its fallback).
fn pooled_random() -> Option<u64> {
    let mut p = RANDOM_POOL.try_lock()?;
    let generation = kmem_core::sync::fork_generation();
    if p.next == RANDOM_POOL_WORDS || p.generation != generation {
        if !fill_random(&mut p.words) {
            p.next = RANDOM_POOL_WORDS;
            return None;
        }
        p.next = 0;
        p.generation = generation;
    }
    let i = p.next;
    p.next += 1;
    Some(core::mem::take(&mut p.words[i]))
}

/// Fills `words` from `getrandom` (without blocking), going on after a call that a
/// signal cut short; false if it cannot (no entropy yet, or no such call).
fn fill_random(words: &mut [u64]) -> bool {
    let bytes = core::mem::size_of_val(words);
    let base = words.as_mut_ptr().cast::<u8>();
    let mut done = 0;
    while done < bytes {
        // SAFETY: getrandom writes at most `bytes - done` bytes at `base + done`, inside
        // `words`; it does not allocate.
        let n =
            unsafe { libc::getrandom(base.add(done).cast(), bytes - done, libc::GRND_NONBLOCK) };
        if n > 0 {
            done += n as usize;
        } else if n == 0 || last_errno() != libc::EINTR {
            return false;
        }
    }
    true
}

/// The calling thread's `errno` (read without allocating).
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl Default for LinuxPlatform {
    fn default() -> Self {
        Self::new()
    }
}

impl LinuxPlatform {
    /// A platform; [`LinuxPlatform::setup`] fills in the node counts.
    pub const fn new() -> Self {
        Self {
            real_nodes: AtomicUsize::new(1),
            nr_nodes: AtomicUsize::new(1),
        }
    }

    /// Reads the real node count and sets the node count the allocator uses
    /// (`fake_nodes` > 0 splits the machine into that many fake nodes).
    pub fn setup(&self, fake_nodes: usize) -> usize {
        let real = online_nodes().clamp(1, MAX_NUMNODES);
        self.real_nodes.store(real, Ordering::Relaxed);
        let n = if fake_nodes > 0 {
            fake_nodes.min(MAX_NUMNODES)
        } else {
            real
        };
        self.nr_nodes.store(n, Ordering::Relaxed);
        n
    }

    /// Reserves a span of address space for the heap: at most `want` bytes (rounded to
    /// whole sections, at most the section table's reach), aligned to the section size,
    /// inaccessible (`PROT_NONE`: it costs no commit charge, whatever the overcommit
    /// policy) until [`Platform::section_online`] opens a section; pages are then
    /// committed when touched. Falls back to smaller spans if the address space is
    /// limited; fails when not even one section can be had.
    pub fn reserve_span(&self, want: usize) -> Result<(*mut u8, usize), ReserveError> {
        let mut len = want
            .div_ceil(SECTION_SIZE)
            .clamp(1, MAX_SECTIONS)
            .saturating_mul(SECTION_SIZE);
        let first = len;
        loop {
            // SAFETY: an anonymous private mapping with no address hint affects no
            // existing memory.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len + SECTION_SIZE,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if raw != libc::MAP_FAILED {
                // The unaligned slop on either side (one section in all) stays mapped,
                // inaccessible and never used: unmapping it took two more system calls
                // in every process that starts, for address space only.
                let base = (raw as usize + SECTION_SIZE - 1) & !(SECTION_SIZE - 1);
                return Ok((base as *mut u8, len));
            }
            if len <= SECTION_SIZE {
                return Err(ReserveError {
                    want: first,
                    smallest: len,
                    errno: last_errno(),
                });
            }
            len /= 2;
        }
    }
}

impl Platform for LinuxPlatform {
    unsafe fn reserve_tag_table(&self, len: usize) -> *mut u8 {
        // Address space only, as the span's: no commit charge until a part is opened.
        // SAFETY: an anonymous private mapping with no address hint affects no
        // existing memory.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            // Not fatal: without the table every free takes the regular path.
            write_stderr(
                b"kmem: no address space for the page-tag table; frees take the slower path\n",
            );
            std::ptr::null_mut()
        } else {
            raw.cast()
        }
    }

    unsafe fn tag_table_online(&self, addr: *mut u8, len: usize) -> bool {
        // SAFETY: a part of the table mapped above, which nobody uses yet (caller).
        unsafe { libc::mprotect(addr.cast(), len, libc::PROT_READ | libc::PROT_WRITE) == 0 }
    }

    unsafe fn section_online(&self, addr: *mut u8, len: usize, nid: usize) -> bool {
        // SAFETY: the section is part of the span we reserved and nobody uses it yet.
        if unsafe { libc::mprotect(addr.cast(), len, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
            return false;
        }
        // Huge pages for the pages the buddy allocator hands out, not for the memmap
        // at the section's start: only the descriptors of pages in use are touched,
        // and a huge page would make all 2 MiB of them resident.
        let memmap = MEMMAP_PAGES * PAGE_SIZE;
        if len > memmap {
            // SAFETY: part of the section just opened, ours.
            unsafe { super::os::advise_huge(addr as usize + memmap, len - memmap) };
        }
        let real = self.real_nodes.load(Ordering::Relaxed);
        if real > 1 {
            // Prefer memory of the real node behind this (possibly fake) node.
            let mask: libc::c_ulong = 1 << (nid % real);
            const MPOL_PREFERRED: libc::c_int = 1;
            // SAFETY: mbind on a range of our own mapping only sets its policy; a
            // failure leaves the default policy, which is still correct.
            unsafe {
                libc::syscall(
                    libc::SYS_mbind,
                    addr,
                    len,
                    MPOL_PREFERRED,
                    &mask as *const libc::c_ulong,
                    (8 * std::mem::size_of::<libc::c_ulong>()) as libc::c_ulong,
                    0,
                );
            }
        }
        true
    }

    unsafe fn report_free(&self, addr: *mut u8, len: usize) {
        // SAFETY: the caller's contract: whole free pages of our own span.
        unsafe { discard_free(addr as usize, len, super::os::page_size()) };
    }

    fn now_ns(&self) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec we pass.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    fn random_u64(&self) -> u64 {
        if let Some(x) = pooled_random() {
            return x;
        }
        let mut x = 0u64;
        // SAFETY: getrandom writes at most 8 bytes into `x`; it does not allocate.
        let n = unsafe {
            libc::getrandom(
                (&mut x as *mut u64).cast(),
                core::mem::size_of::<u64>(),
                libc::GRND_NONBLOCK,
            )
        };
        if n == core::mem::size_of::<u64>() as isize {
            return x;
        }
        // No entropy yet (early boot) or no getrandom: the clock and an address that
        // ASLR moves, mixed with a counter.
        kmem_core::platform::weak_random(self.now_ns() ^ (&x as *const u64 as u64).rotate_left(32))
    }

    fn log(&self, text: &str) {
        write_stderr(text.as_bytes());
    }

    #[inline(never)]
    fn stack_trace(&self, frames: &mut [usize]) {
        // glibc's backtrace loads libgcc_s on its first use, which allocates: a
        // nested allocation must not trace again.
        if IN_TRACE.with(|t| t.replace(true)) {
            return;
        }
        // Skip kmem's own frames: all of them when kmem is a shared library of its own
        // (libkmem.so: its module's range) or linked into a program whose symbol table
        // names its functions (`own_code`, loaded when slub_debug is on); otherwise
        // the first three (this function, the capture, the debug processing).
        // Unwinding costs per frame, so ask for no more than needed.
        let own = own_module();
        let linked = !own.shared && super::own_code::loaded();
        let mut buf = [std::ptr::null_mut::<libc::c_void>(); 24];
        let depth = if own.shared || linked {
            buf.len()
        } else {
            (frames.len() + 3).min(buf.len())
        };
        let n = backtrace(&mut buf[..depth]);
        let skip = if own.shared {
            buf[..n]
                .iter()
                .position(|&f| !own.contains(f as usize))
                .unwrap_or(n)
        } else if linked {
            super::own_code::skip_own_frames(&buf[..n])
        } else {
            3
        };
        for (slot, f) in frames.iter_mut().zip(buf[..n].iter().skip(skip)) {
            *slot = *f as usize;
        }
        IN_TRACE.with(|t| t.set(false));
    }

    fn symbolize(&self, addr: usize, w: &mut dyn std::fmt::Write) -> std::fmt::Result {
        symbolize(addr, w)
    }

    fn thread_and_pid(&self) -> (u32, u32) {
        // SAFETY: gettid and getpid have no preconditions.
        unsafe {
            (
                libc::syscall(libc::SYS_gettid) as u32,
                libc::getpid() as u32,
            )
        }
    }

    fn numa_node_id(&self) -> usize {
        current_node(
            self.nr_nodes.load(Ordering::Relaxed),
            self.real_nodes.load(Ordering::Relaxed),
        )
    }
}

thread_local! {
    /// Whether this thread is inside [`LinuxPlatform`]'s `stack_trace`.
    static IN_TRACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is taking a stack trace: an allocation made from in
/// there (the unwinder's first use loads libgcc_s with dlopen, which allocates) must
/// not unwind again, nor sample (KFENCE's fault handler unwinds as it is installed).
pub(crate) fn in_stack_trace() -> bool {
    IN_TRACE.with(|t| t.get())
}

/// Prepares slub_debug's stack traces (call once the heap is ready: it allocates): in
/// a program that links kmem, finds kmem's functions in the executable's symbol table
/// so traces skip exactly kmem's frames. Nothing to do for libkmem.so.
pub(crate) fn prepare_stack_traces() {
    if !own_module().shared {
        super::own_code::load(super::own_code::main_program_bias());
    }
}

/// Fills `buf` with the return addresses of the calling stack, innermost first (glibc's
/// `backtrace`); the number filled.
#[cfg(target_env = "gnu")]
#[inline(always)]
fn backtrace(buf: &mut [*mut libc::c_void]) -> usize {
    // SAFETY: backtrace fills at most `buf.len()` entries of `buf`.
    unsafe { libc::backtrace(buf.as_mut_ptr(), buf.len() as libc::c_int) }.max(0) as usize
}

/// Other C libraries (musl) have no `backtrace`: no frames are recorded (a trace reads
/// as empty).
#[cfg(not(target_env = "gnu"))]
#[inline(always)]
fn backtrace(_buf: &mut [*mut libc::c_void]) -> usize {
    0
}

/// The loaded object kmem's code lies in: its address range, and whether it is a
/// shared library rather than the program itself.
#[derive(Clone, Copy)]
struct OwnModule {
    start: usize,
    end: usize,
    shared: bool,
}

impl OwnModule {
    fn contains(&self, addr: usize) -> bool {
        (self.start..self.end).contains(&addr)
    }
}

/// Finds [`OwnModule`] once (`dl_iterate_phdr`; no allocation) and keeps it.
/// Plain atomics rather than a `OnceLock`: this runs inside malloc, where a fork or a
/// signal in the middle of a one-time initialisation must not leave anyone waiting;
/// threads that race here compute the same value.
fn own_module() -> OwnModule {
    static START: AtomicUsize = AtomicUsize::new(0);
    static END: AtomicUsize = AtomicUsize::new(0);
    static SHARED: AtomicUsize = AtomicUsize::new(0);
    if END.load(Ordering::Acquire) == 0 {
        unsafe extern "C" fn visit(
            info: *mut libc::dl_phdr_info,
            _size: libc::size_t,
            data: *mut libc::c_void,
        ) -> libc::c_int {
            // SAFETY: `data` is the `OwnModule` passed below; `info` is valid for this
            // call, its `dlpi_phdr` array `dlpi_phnum` long.
            unsafe {
                let out = &mut *(data as *mut OwnModule);
                let info = &*info;
                let (mut lo, mut hi) = (usize::MAX, 0usize);
                for i in 0..info.dlpi_phnum as usize {
                    let ph = &*info.dlpi_phdr.add(i);
                    if ph.p_type == libc::PT_LOAD {
                        let a = info.dlpi_addr as usize + ph.p_vaddr as usize;
                        lo = lo.min(a);
                        hi = hi.max(a + ph.p_memsz as usize);
                    }
                }
                if (lo..hi).contains(&out.start) {
                    // The program itself comes first, with an empty name.
                    let name = info.dlpi_name;
                    out.shared = !name.is_null() && *name != 0;
                    out.start = lo;
                    out.end = hi;
                    return 1;
                }
                0
            }
        }
        let mut m = OwnModule {
            start: own_module as *const () as usize,
            end: 0,
            shared: false,
        };
        // SAFETY: `visit` matches the callback type and only touches `m`.
        unsafe { libc::dl_iterate_phdr(Some(visit), (&mut m as *mut OwnModule).cast()) };
        if m.end == 0 {
            // Not found: treat as linked in (skip the fixed three frames).
            m.end = m.start + 1;
        }
        START.store(m.start, Ordering::Relaxed);
        SHARED.store(m.shared as usize, Ordering::Relaxed);
        END.store(m.end, Ordering::Release);
    }
    OwnModule {
        start: START.load(Ordering::Relaxed),
        end: END.load(Ordering::Acquire),
        shared: SHARED.load(Ordering::Relaxed) != 0,
    }
}

/// Writes to fd 2 with `write(2)`, retrying short writes; never allocates.
pub fn write_stderr(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writing our own buffer to fd 2.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// A `fmt::Write` to a file descriptor through a stack buffer (no allocation): reports
/// written while kmem may be the process's malloc.
pub struct FdWriter {
    fd: libc::c_int,
    buf: [u8; 512],
    len: usize,
}

impl FdWriter {
    /// A writer to `fd` (not closed on drop).
    pub fn new(fd: libc::c_int) -> Self {
        Self {
            fd,
            buf: [0; 512],
            len: 0,
        }
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) {
        let mut bytes = &self.buf[..self.len];
        while !bytes.is_empty() {
            // SAFETY: writing our own buffer to the descriptor.
            let n = unsafe { libc::write(self.fd, bytes.as_ptr().cast(), bytes.len()) };
            if n <= 0 {
                break;
            }
            bytes = &bytes[n as usize..];
        }
        self.len = 0;
    }
}

impl std::fmt::Write for FdWriter {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        for chunk in s.as_bytes().chunks(self.buf.len()) {
            if self.len + chunk.len() > self.buf.len() {
                self.flush();
            }
            self.buf[self.len..self.len + chunk.len()].copy_from_slice(chunk);
            self.len += chunk.len();
        }
        Ok(())
    }
}

impl Drop for FdWriter {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The CPU and node the caller runs on, from the `getcpu` system call.
pub fn getcpu() -> (usize, usize) {
    let mut cpu: libc::c_uint = 0;
    let mut node: libc::c_uint = 0;
    // SAFETY: getcpu writes the two integers we pass; the third argument is unused.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut libc::c_uint,
            &mut node as *mut libc::c_uint,
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if rc != 0 {
        return (0, 0);
    }
    (cpu as usize, node as usize)
}

/// The node for the current CPU: the real node, or with fake NUMA the CPU's share.
/// On a one-node machine without fake NUMA it is 0 without asking the kernel.
pub fn current_node(nr_nodes: usize, real_nodes: usize) -> usize {
    if nr_nodes <= 1 {
        return 0;
    }
    if nr_nodes > real_nodes {
        // SAFETY: sched_getcpu has no preconditions (glibc answers from rseq or the
        // vDSO, without a system call).
        let cpu = unsafe { libc::sched_getcpu() };
        return cpu.max(0) as usize % nr_nodes;
    }
    let (_cpu, node) = getcpu();
    node.min(nr_nodes - 1)
}

/// Number of online nodes: the highest node in /sys/devices/system/node/online plus
/// one (the file is a range list like `0-3` or `0,2`). 1 if it cannot be read, and 1
/// without reading it when there is no node 1 (as mimalloc tests): a machine whose
/// nodes are numbered with a gap at 1 reads as one node, its memory all node 0's.
pub fn online_nodes() -> usize {
    // One node (most machines): no node1 directory, and one system call says so
    // where reading `online` takes three.
    // SAFETY: access(2) on a NUL-terminated path.
    if unsafe { libc::access(c"/sys/devices/system/node/node1".as_ptr(), libc::F_OK) } != 0 {
        return 1;
    }
    let mut buf = [0u8; 256];
    let Some(text) = read_small_file(c"/sys/devices/system/node/online", &mut buf) else {
        return 1;
    };
    let mut max = 0usize;
    let mut cur = 0usize;
    for &b in text {
        if b.is_ascii_digit() {
            cur = cur * 10 + (b - b'0') as usize;
        } else {
            max = max.max(cur);
            cur = 0;
        }
    }
    max.max(cur) + 1
}

/// Reads a small file into `buf` with open/read/close (no allocation); `None` if it
/// cannot be read or is empty.
pub(crate) fn read_small_file<'a>(path: &std::ffi::CStr, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    // SAFETY: open/read/close on a NUL-terminated path, into a buffer we own.
    let n = unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    (n > 0).then(|| &buf[..n as usize])
}

/// Resident memory of this process in bytes (from /proc/self/statm), read without
/// allocating.
pub fn rss_bytes() -> usize {
    let mut buf = [0u8; 128];
    let Some(text) = read_small_file(c"/proc/self/statm", &mut buf) else {
        return 0;
    };
    // Second field: resident pages.
    let mut fields = text.split(|&b| b == b' ');
    fields.next();
    let resident = fields
        .next()
        .map(|f| {
            f.iter()
                .take_while(|b| b.is_ascii_digit())
                .fold(0usize, |a, &b| a * 10 + (b - b'0') as usize)
        })
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    resident * page
}

/// Gives the free memory `addr..addr + len` back to the kernel, after which it reads as
/// zero (`Platform::report_free`'s promise). Only the whole kernel pages of `page`
/// bytes inside it are discarded (`MADV_DONTNEED`): with pages larger than kmem's (16
/// or 64 KiB on arm64), `madvise` of a 4 KiB block would discard the whole kernel page
/// around it, its neighbours' data with it. The ends that share a kernel page with
/// other memory are zeroed instead, and so is everything where `madvise` refuses.
///
/// # Safety
/// The range is free memory of ours that nobody reads or writes meanwhile.
unsafe fn discard_free(start: usize, len: usize, page: usize) {
    let end = start + len;
    let (lo, hi) = super::os::whole_pages(start, len, page);
    let discarded = lo < hi && {
        // SAFETY: `lo..hi` is whole kernel pages inside the caller's free range.
        unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED) == 0 }
    };
    let zero = |from: usize, to: usize| {
        if from < to {
            // SAFETY: part of the caller's free range.
            unsafe { std::ptr::write_bytes(from as *mut u8, 0, to - from) };
        }
    };
    if discarded {
        zero(start, lo);
        zero(hi, end);
    } else {
        zero(start, end);
    }
}

/// Offset of glibc's per-thread `struct rseq` from the thread pointer
/// (`__rseq_offset`), or 0 when this glibc registers none (before 2.35, or
/// `glibc.pthread.rseq=0`). Set by [`rseq_init`]. No registration is at offset 0: the
/// thread pointer addresses the TCB, whose first word is its own address (fs:0), so
/// 0 is free to mean "none" (one test on the rseq fast paths, where `isize::MIN`
/// took a 64-bit constant and a compare).
static RSEQ_OFFSET: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

/// Looks up glibc's rseq registration (`__rseq_offset`, `__rseq_size`) so that
/// [`current_cpu`] can read the CPU id the kernel keeps in it. Without one,
/// `current_cpu` asks `sched_getcpu`.
pub fn rseq_init() {
    // SAFETY: dlsym with the default handle and NUL-terminated names; the symbols, if
    // present, are glibc's `const ptrdiff_t __rseq_offset` and `const unsigned int
    // __rseq_size`.
    unsafe {
        let off = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
        let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
        if off.is_null() || size.is_null() || *(size as *const u32) < 20 {
            return;
        }
        RSEQ_OFFSET.store(*(off as *const isize), std::sync::atomic::Ordering::Relaxed);
    }
}

/// The offset of glibc's `struct rseq` from the thread pointer, if it registers one
/// (after [`rseq_init`]).
#[inline]
pub fn rseq_offset() -> Option<isize> {
    let off = RSEQ_OFFSET.load(std::sync::atomic::Ordering::Relaxed);
    (off != 0).then_some(off)
}

/// [`rseq_offset`]'s word as it is: 0 when none was found.
#[inline(always)]
pub fn rseq_offset_raw() -> isize {
    RSEQ_OFFSET.load(std::sync::atomic::Ordering::Relaxed)
}

/// The CPU the caller runs on: the `cpu_id` field of the thread's rseq area (one load,
/// kept current by the kernel), else `sched_getcpu`; 0 if unknown.
#[inline]
pub fn current_cpu() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let off = RSEQ_OFFSET.load(std::sync::atomic::Ordering::Relaxed);
        if off != 0 {
            let tp: usize;
            // SAFETY: on x86_64 glibc keeps the thread pointer at fs:0 (the TCB's
            // self-pointer); reading it has no side effects.
            unsafe {
                std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags))
            };
            // SAFETY: glibc registered a `struct rseq` (at least 20 bytes) at this
            // offset from the thread pointer for every thread; `cpu_id` is the u32 at
            // byte 4, which the kernel updates (hence the volatile read).
            let cpu = unsafe { std::ptr::read_volatile((tp as isize + off + 4) as *const i32) };
            if cpu >= 0 {
                return cpu as usize;
            }
        }
    }
    // SAFETY: sched_getcpu has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    c.max(0) as usize
}

/// An address as `symbol+0xoff` (or `0xaddr (module+0xoff)`, or `0xaddr`), from the
/// dynamic symbol tables (`dladdr`); never allocates.
pub fn symbolize(addr: usize, w: &mut dyn std::fmt::Write) -> std::fmt::Result {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr fills `info` for an address; it does not allocate.
    let found = unsafe { libc::dladdr(addr as *const libc::c_void, &mut info) } != 0;
    if found && !info.dli_sname.is_null() {
        // SAFETY: dladdr returned a NUL-terminated symbol name.
        let name = unsafe { std::ffi::CStr::from_ptr(info.dli_sname) };
        write!(
            w,
            "{}+0x{:x}",
            name.to_str().unwrap_or("?"),
            addr - info.dli_saddr as usize
        )
    } else if found && !info.dli_fname.is_null() {
        // SAFETY: dladdr returned a NUL-terminated file name.
        let file = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
        let file = file.to_str().unwrap_or("?");
        let short = file.rsplit('/').next().unwrap_or(file);
        write!(
            w,
            "0x{addr:x} ({short}+0x{:x})",
            addr - info.dli_fbase as usize
        )
    } else {
        write!(w, "0x{addr:x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_and_cpus_are_sane() {
        assert!(online_nodes() >= 1);
        let (cpu, _node) = getcpu();
        // SAFETY: sysconf has no preconditions.
        let ncpu = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) } as usize;
        assert!(cpu < ncpu.max(1));
        assert!(rss_bytes() > 0);
    }

    /// Free memory goes back in whole kernel pages: with 64 KiB pages (pretended here),
    /// a range inside one page is zeroed and its neighbours keep their bytes; a range
    /// across pages has the whole ones discarded (resident no more) and its ends
    /// zeroed; outside it nothing changes.
    #[test]
    fn free_memory_goes_back_in_whole_kernel_pages() {
        const K: usize = 1024;
        let page = 64 * K;
        let raw = crate::platform::os::map_anonymous(8 * page).expect("a mapping");
        let base = raw.next_multiple_of(page);
        let bytes = |from: usize, to: usize| {
            // SAFETY: inside the mapping made above, ours.
            unsafe { std::slice::from_raw_parts(from as *const u8, to - from) }
        };
        // SAFETY: the mapping's six whole pages from `base`, ours.
        unsafe { std::ptr::write_bytes(base as *mut u8, 0xaa, 6 * page) };
        // Inside one kernel page: zeroed, nothing discarded around it.
        // SAFETY: part of our mapping, free for the test.
        unsafe { discard_free(base + 4 * K, 8 * K, page) };
        assert!(bytes(base + 4 * K, base + 12 * K).iter().all(|&b| b == 0));
        assert!(bytes(base, base + 4 * K).iter().all(|&b| b == 0xaa));
        assert!(bytes(base + 12 * K, base + page).iter().all(|&b| b == 0xaa));
        // Across pages: 60 KiB into page 1 to 4 KiB into page 5.
        let (start, end) = (base + page + 60 * K, base + 5 * page + 4 * K);
        // SAFETY: as above.
        unsafe { discard_free(start, end - start, page) };
        // (Residency first: reading a discarded page maps the zero page.)
        // (One byte per page of this kernel's, 4 to 64 KiB: 1 to 16 per pretended page.)
        let per = page / crate::platform::os::page_size();
        let mut resident = vec![0u8; 6 * per];
        // SAFETY: mincore fills one byte per kernel page of the range, ours.
        let rc =
            unsafe { libc::mincore(base as *mut libc::c_void, 6 * page, resident.as_mut_ptr()) };
        assert_eq!(rc, 0);
        let pages = |p: usize| &resident[p * per..(p + 1) * per];
        assert!(
            (2..5).all(|p| pages(p).iter().all(|&r| r & 1 == 0)),
            "discarded"
        );
        assert!(pages(1).iter().all(|&r| r & 1 == 1), "kept: {resident:?}");
        assert!(pages(5).iter().all(|&r| r & 1 == 1), "kept: {resident:?}");
        assert!(bytes(start, end).iter().all(|&b| b == 0));
        assert!(bytes(base + page, start).iter().all(|&b| b == 0xaa));
        assert!(bytes(end, base + 6 * page).iter().all(|&b| b == 0xaa));
        // SAFETY: the whole mapping, ours, used no more.
        unsafe { crate::platform::os::unmap(raw, 8 * page) };
    }

    /// The random pool fills whole in one go, with words that differ from one fill to
    /// the next (and a pool's worth of distinct words: no zero left unfilled).
    #[test]
    fn the_random_pool_fills_whole() {
        let mut a = [0u64; RANDOM_POOL_WORDS];
        let mut b = [0u64; RANDOM_POOL_WORDS];
        assert!(fill_random(&mut a) && fill_random(&mut b));
        assert_ne!(a, b);
        let mut all: Vec<u64> = a.iter().chain(&b).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 2 * RANDOM_POOL_WORDS);
        assert!(!all.contains(&0));
    }

    #[test]
    fn span_is_aligned_and_usable() {
        let p = LinuxPlatform::new();
        let (base, len) = p.reserve_span(3 * SECTION_SIZE).unwrap();
        assert_eq!(base as usize % SECTION_SIZE, 0);
        assert_eq!(len, 3 * SECTION_SIZE);
        // SAFETY: the span is ours: open a section, touch a page, then report it and see
        // it read zero.
        unsafe {
            assert!(p.section_online(base, SECTION_SIZE, 0));
            *base = 7;
            p.report_free(base, 4096);
            assert_eq!(*base, 0);
            libc::munmap(base.cast(), len);
        }
    }
}
