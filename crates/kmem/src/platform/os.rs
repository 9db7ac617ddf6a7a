//! Thin wrappers over the C library calls the layers above the platform need: the
//! environment, anonymous mappings, the thread-exit key, process hooks (`atexit`,
//! `pthread_atfork`), files for reports, the CPU count and yielding. Every `libc::`
//! call of the crate outside [`super::linux`] and [`super::rseq`] is here, each with the
//! reason it is sound.
//!
//! Owns no state and takes no lock. Nothing here allocates through the heap: these run
//! inside malloc, some of them while the heap initialises.

use std::ffi::{c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

extern "C" {
    /// The C library's environment (POSIX; glibc and musl both define it).
    #[link_name = "environ"]
    static C_ENVIRON: *const *const libc::c_char;
}

/// The C library's `environ`: each entry a NUL-terminated `NAME=value`, first to last.
/// Like `getenv`, the entries are valid while nobody calls `setenv` or `putenv`: kmem
/// reads them once, at initialisation.
fn environ() -> impl Iterator<Item = *const libc::c_char> {
    // SAFETY: `environ` is the C library's NULL-terminated array of NUL-terminated
    // strings (or null). Reading the pointer itself has no precondition.
    let mut p = unsafe { ptr::addr_of!(C_ENVIRON).read() };
    std::iter::from_fn(move || {
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` points into the environment array, before or at its NULL end.
        let s = unsafe { *p };
        if s.is_null() {
            return None;
        }
        // SAFETY: a non-null entry before the end; the next slot is still in the array.
        p = unsafe { p.add(1) };
        Some(s)
    })
}

/// The process environment as `NAME=value` entries, first to last, in place (nothing is
/// copied; see [`environ`] for how long they stay valid).
pub(crate) fn env_entries() -> impl Iterator<Item = &'static [u8]> {
    // SAFETY: every entry is a NUL-terminated string that outlives this read.
    environ().map(|s| unsafe { CStr::from_ptr(s) }.to_bytes())
}

/// The value of the environment variable `name` (the first entry for it, as `getenv`).
/// `name` holds no `=` or NUL.
pub(crate) fn getenv(name: &[u8]) -> Option<&'static [u8]> {
    environ().find_map(|s| {
        let s = s.cast::<u8>();
        // Compare in place, so that only the match is measured. SAFETY: the entry is
        // NUL-terminated and `name` has no NUL, so no read passes the terminator.
        let matches = name
            .iter()
            .enumerate()
            .all(|(i, &b)| unsafe { *s.add(i) } == b);
        // SAFETY: `s[..name.len()]` matched non-NUL bytes, so `s[name.len()]` is in the
        // string; the value after the `=` is NUL-terminated too.
        unsafe {
            (matches && *s.add(name.len()) == b'=')
                .then(|| CStr::from_ptr(s.add(name.len() + 1).cast()).to_bytes())
        }
    })
}

/// A fresh private anonymous mapping of `len` readable and writable bytes; its address,
/// or `None` when the kernel refuses.
pub(crate) fn map_anonymous(len: usize) -> Option<usize> {
    // SAFETY: an anonymous private mapping with no address hint affects no existing
    // memory.
    let raw = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    (raw != libc::MAP_FAILED).then_some(raw as usize)
}

/// Asks that the mapping at `addr` get no transparent huge pages (`MADV_NOHUGEPAGE`;
/// advice: nothing happens where the kernel has none).
pub(crate) fn no_huge_pages(addr: usize, len: usize) {
    // SAFETY: advice on a range of the caller's mapping; no memory changes.
    unsafe { libc::madvise(addr as *mut c_void, len, libc::MADV_NOHUGEPAGE) };
}

/// Unmaps `len` bytes at `addr`.
///
/// # Safety
/// The range is (part of) a mapping of the caller's that nothing uses any more.
pub(crate) unsafe fn unmap(addr: usize, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { libc::munmap(addr as *mut c_void, len) };
}

/// The kernel's page size (`sysconf(_SC_PAGESIZE)`, read once): 4 KiB on x86-64,
/// 4, 16 or 64 KiB on arm64. kmem's own pages stay 4 KiB ([`kmem_core::PAGE_SIZE`]);
/// what it asks of the kernel goes by this size: memory given back is given back in
/// whole kernel pages ([`whole_pages`]), mappings are sized in them (`huge.rs`),
/// `valloc` aligns to them, and KFENCE, whose guard pages are kmem's, stays off where
/// they differ. With 64 KiB pages, `madvise` of a 4 KiB block would discard the whole
/// kernel page around it, neighbours included.
pub(crate) fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let known = PAGE.load(Ordering::Relaxed);
    if known != 0 {
        return known;
    }
    // SAFETY: sysconf has no preconditions.
    let raw = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = if raw > 0 && (raw as usize).is_power_of_two() {
        (raw as usize).max(kmem_core::PAGE_SIZE)
    } else {
        kmem_core::PAGE_SIZE
    };
    PAGE.store(page, Ordering::Relaxed);
    page
}

/// The whole pages of `page` bytes (a power of two) inside `addr..addr + len`, as a
/// range `lo..hi` (empty, `lo >= hi`, when the range holds none).
pub(crate) fn whole_pages(addr: usize, len: usize, page: usize) -> (usize, usize) {
    let lo = addr.next_multiple_of(page);
    let hi = (addr + len) & !(page - 1);
    (lo, hi)
}

/// The size of a transparent huge page (x86-64's and arm64's PMD with 4 KiB pages).
pub(crate) const HPAGE_SIZE: usize = 2 << 20;

/// Whether kmem advises transparent huge pages (`KMEM_THP`; set once, at the heap's
/// initialisation, before any section or huge mapping is made).
static THP: AtomicBool = AtomicBool::new(false);

/// Sets whether [`advise_huge`] advises (the heap's initialisation).
pub(crate) fn set_thp(on: bool) {
    THP.store(on, Ordering::Relaxed);
}

/// Whether [`advise_huge`] advises.
pub(crate) fn thp() -> bool {
    THP.load(Ordering::Relaxed)
}

/// Asks the kernel to back `addr..addr + len` with transparent huge pages
/// (`MADV_HUGEPAGE`) when `KMEM_THP` is on. Advice only: a kernel without THP refuses
/// it (EINVAL), and the range is backed by 4 KiB pages as before. Only the whole 2 MiB
/// blocks inside the range can become huge pages.
///
/// # Safety
/// The range is (part of) a mapping of the caller's.
pub(crate) unsafe fn advise_huge(addr: usize, len: usize) {
    if thp() && len >= HPAGE_SIZE {
        // SAFETY: the caller's mapping; MADV_HUGEPAGE changes how it is backed, never
        // its contents.
        unsafe { libc::madvise(addr as *mut c_void, len, libc::MADV_HUGEPAGE) };
    }
}

/// Resizes the mapping of `old_len` bytes at `addr` to `new_len` bytes, moving it if
/// needed (`MREMAP_MAYMOVE`: contents kept, page aligned). The new address, or `None`
/// (the old mapping intact).
///
/// # Safety
/// The range is a whole mapping the caller owns; after a success only the returned
/// address is used.
pub(crate) unsafe fn remap(addr: usize, old_len: usize, new_len: usize) -> Option<usize> {
    // SAFETY: the caller's contract.
    let q = unsafe { libc::mremap(addr as *mut c_void, old_len, new_len, libc::MREMAP_MAYMOVE) };
    (q != libc::MAP_FAILED).then_some(q as usize)
}

/// A pthread key whose destructor runs `dtor` at the exit of every thread that set a
/// non-null value; `None` if no key can be had.
pub(crate) fn thread_key_create(dtor: unsafe extern "C" fn(*mut c_void)) -> Option<u32> {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: creating a key with a destructor of the right signature.
    (unsafe { libc::pthread_key_create(&mut key, Some(dtor)) } == 0).then_some(key)
}

/// Sets the calling thread's value of `key` (null: its destructor will not run);
/// false if it could not be set (no memory for the thread's table of keys, or a bad
/// key). glibc may allocate here for high keys: callers must cope with a nested
/// allocation.
pub(crate) fn thread_key_set(key: u32, value: *const c_void) -> bool {
    // SAFETY: a bad key only makes the call fail; the value is stored, never
    // dereferenced, by the C library.
    unsafe { libc::pthread_setspecific(key, value) == 0 }
}

/// Runs `f` at process exit (`atexit`).
pub(crate) fn at_exit(f: extern "C" fn()) {
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::atexit(f) };
}

/// Where glibc says whether the process has one thread (`__libc_single_threaded`, a
/// `char`, glibc 2.32 and later): [`NOT_LOOKED_UP`] until the first call of
/// [`single_threaded`], then its address, or null where the C library has none.
static SINGLE_THREADED: AtomicPtr<libc::c_char> = AtomicPtr::new(NOT_LOOKED_UP);
const NOT_LOOKED_UP: *mut libc::c_char = ptr::dangling_mut();

/// Whether the C library knows the process to have had one thread all along (so no
/// other thread can be inside the allocator). `false` where it cannot tell.
pub(crate) fn single_threaded() -> bool {
    let mut p = SINGLE_THREADED.load(Ordering::Relaxed);
    if p == NOT_LOOKED_UP {
        // SAFETY: dlsym with the default handle and a NUL-terminated name; on
        // success it does not allocate.
        p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__libc_single_threaded".as_ptr()) }.cast();
        SINGLE_THREADED.store(p, Ordering::Relaxed);
    }
    // SAFETY: null, or glibc's `char __libc_single_threaded`, which lives as long as the
    // process; glibc writes it only when this thread creates another (so not now).
    !p.is_null() && unsafe { p.read_volatile() } != 0
}

/// Runs the three handlers around every `fork` (`pthread_atfork`).
pub(crate) fn at_fork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: registering plain extern "C" functions.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

/// Opens (creating or truncating) the file at `path` for writing; its descriptor.
pub(crate) fn create_file(path: &CStr) -> Option<c_int> {
    // SAFETY: opening a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o644,
        )
    };
    (fd >= 0).then_some(fd)
}

/// Closes a descriptor from [`create_file`].
pub(crate) fn close_fd(fd: c_int) {
    // SAFETY: closing a descriptor the caller opened and no longer uses.
    unsafe { libc::close(fd) };
}

/// CPUs online now (at least 1).
pub(crate) fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize
}

/// Gives the CPU to another runnable thread (`sched_yield`).
pub(crate) fn yield_cpu() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_read_in_place() {
        // The test harness sets none of these; PATH is set wherever cargo runs.
        assert!(getenv(b"PATH").is_some_and(|v| !v.is_empty()));
        assert!(getenv(b"PAT").is_none(), "a prefix is not a name");
        assert!(env_entries().all(|e| e.contains(&b'=')));
    }

    #[test]
    fn mappings_map_grow_and_go() {
        let a = map_anonymous(2 * 4096).expect("a mapping");
        // SAFETY: ours, two pages; remapped once, then unmapped at the new address.
        unsafe {
            (a as *mut u8).write(7);
            let b = remap(a, 2 * 4096, 64 * 4096).expect("grown");
            assert_eq!((b as *const u8).read(), 7);
            unmap(b, 64 * 4096);
        }
        assert!(online_cpus() >= 1);
    }
}
