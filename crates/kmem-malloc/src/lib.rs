//! libkmem.so: kmem as a drop-in malloc for any program (`LD_PRELOAD=libkmem.so`, or
//! `kmem run -- CMD`).
//!
//! The C ABI over the process heap of the `kmem` crate: the malloc family, the
//! alignment functions, `malloc_usable_size`, and harmless answers for glibc's
//! extras (`malloc_trim` trims, `malloc_stats` prints kmem's report, `mallinfo2`
//! reports kmem's figures, `mallopt` accepts and ignores). C++'s global
//! `operator new` and `operator delete`, every form, are kmem's too (`cxx`): the same
//! fast paths as `malloc` and `free`, without the C++ runtime's wrappers.
//!
//! Rules this file keeps:
//! - Nothing here allocates through Rust's allocator (it would be this malloc again)
//!   or formats with `std`; reports go through kmem's stack-buffer writers.
//! - Failure is a null pointer with `errno = ENOMEM` (`EINVAL` for a bad alignment
//!   to `posix_memalign`/`aligned_alloc`); never a panic.
//! - `free`/`realloc` of a pointer kmem did not hand out (a stack address, garbage, an
//!   interior pointer, one allocated before the preload, an object already free at a
//!   freelist's head) prints a report in the kernel's style naming the address and the
//!   reason, then aborts: no silent corruption. Under `KMEM_DEBUG` every slub_debug
//!   report aborts too, unless `KMEM_ON_ERROR=continue` (the library marks the heap
//!   as serving a C program when it is loaded).
//! - Thread exit (a pthread key destructor) and fork (`pthread_atfork` handlers that
//!   take every allocator lock) are handled by the heap itself.
//!
//! glibc's internal names (`__libc_malloc`, `__libc_free`, `__libc_calloc`,
//! `__libc_realloc`, `__libc_memalign`, `__libc_valloc`, `__libc_pvalloc`: the ones
//! glibc exports) are exported too, as the same functions: programs and libraries
//! that call them directly (to reach "the real malloc" from their own wrappers) get
//! kmem's memory, which kmem's `free` accepts.
//!
//! Statistics: `kmem_stats_get(struct kmem_stats *)` fills the six figures of
//! `kmem::stats::counters` (allocated, active, resident, mapped, metadata, retained)
//! without allocating.
//!
//! `include/kmem.h` declares every `kmem_*` function here; `tests/header.rs` checks
//! that the two list the same names (and parameter counts) and compiles a program that
//! calls each. The library's SONAME is `libkmem.so.0` (`build.rs`).
//!
//! Memory cgroups: `kmem_memcg_create`, `_remove`, `_set_max`, `_set_high`,
//! `_enter`/`_leave`, `_usage`, `_stat` (declared in `include/kmem.h`) account and
//! limit what a thread allocates, as kmem's `MemCgroup` does for Rust programs.
//!
//! Alignment: `malloc(n)` is 16-byte aligned for every `n` above 8 (8-aligned up to
//! 8), as glibc's is on 64-bit targets and as jemalloc, tcmalloc and mimalloc are:
//! programs count on it beyond what C17 asks (DR 445: only what an object of `n`
//! bytes needs). Rust's `System` allocator calls `malloc(n)` for every layout aligned
//! to at most 16 and at most `n` — a hashbrown table of 52 bytes with 16-aligned
//! control bytes — and clang marks `operator new`'s result 16-aligned. Requests of
//! 17–56 bytes therefore skip the 8-aligned kmalloc-24, -40 and -56, which Rust's
//! layouts (carrying their own alignment) keep using
//! (`kmem_core::kmalloc::malloc_class_size`); every other class is a multiple of 16 with
//! 16-aligned objects. `posix_memalign`/`aligned_alloc` give any alignment asked for.

#![allow(clippy::missing_safety_doc)] // C ABI: the contracts are C's.

mod cxx;

use kmem::heap;
use libc::{c_int, c_void, size_t};
use std::alloc::Layout;
use std::ptr;

/// The alignment every `malloc` object has: the 8-byte class's.
const MALLOC_MIN_ALIGN: usize = 8;

/// The alignment `malloc` gives `size` bytes (see the crate docs): 16 above 8 bytes.
#[inline(always)]
fn malloc_align(size: usize) -> usize {
    if size > MALLOC_MIN_ALIGN {
        kmem::heap::MALLOC_ALIGN
    } else {
        MALLOC_MIN_ALIGN
    }
}

/// The library's load-time constructor (an `.init_array` entry, run by the dynamic
/// linker before the program's `main`): tells the heap it serves a C program, so that
/// under `KMEM_DEBUG` a report ends the program unless `KMEM_ON_ERROR=continue`.
#[used]
#[link_section = ".init_array"]
static MARK_C_FRONT_END: extern "C" fn() = {
    extern "C" fn mark() {
        kmem::heap::set_c_front_end();
    }
    mark
};

#[inline]
fn set_errno(e: c_int) {
    // SAFETY: errno is this thread's; writing it is what C callers expect.
    unsafe { *libc::__errno_location() = e };
}

/// Allocates `size` bytes aligned to `align` and at least as `malloc` aligns them;
/// null with ENOMEM on failure. (From 64 bytes up every class and block is 16-aligned
/// already: such a request keeps the layout of its own alignment, whose path is
/// shorter.)
#[inline(always)]
fn alloc(size: usize, align: usize, zero: bool) -> *mut c_void {
    let align = if size < 64 {
        align.max(malloc_align(size))
    } else {
        align
    };
    let Ok(layout) = Layout::from_size_align(size, align) else {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    };
    let p = kmem::heap::alloc_layout(layout, zero);
    if p.is_null() {
        set_errno(libc::ENOMEM);
    }
    p.cast()
}

/// Frees, or reports and aborts on a pointer kmem did not hand out. An object of a
/// slub_debug cache whose checks failed (red zone, double free…) was reported and
/// quarantined by the debug layer: the program goes on, as the kernel's does.
#[inline]
unsafe fn free_or_abort(p: *mut c_void) {
    // SAFETY: the caller's pointer; `free_fast` pushes only plain objects of ours and
    // leaves everything else untouched for `free_other`.
    if !unsafe { kmem::heap::free_fast(p.cast()) } {
        // SAFETY: as above.
        unsafe { free_other(p) }
    }
}

/// [`free_or_abort`] past the fast path (a tail call from `free`); `free(NULL)` ends
/// here (the fast path's range check refuses null, so it needs no test of its own).
#[inline(never)]
unsafe extern "C" fn free_other(p: *mut c_void) {
    // SAFETY: the caller's pointer, given up by `free`; the rseq push takes only plain
    // objects of ours and leaves anything else untouched (`None`).
    match unsafe { kmem::heap::dealloc_rseq_fast(p.cast()) } {
        Some(true) => return,
        // A double free on the CPU's sheaf top, reported.
        Some(false) => {
            if !in_debug_cache(p) {
                abort_bad_pointer();
            }
            return;
        }
        None => {}
    }
    if p.is_null() {
        return;
    }
    // SAFETY: the caller's pointer; dealloc reports instead of freeing anything that
    // is not one of ours.
    if !unsafe { kmem::heap::dealloc_other(p.cast()) } && !in_debug_cache(p) {
        abort_bad_pointer();
    }
}

#[cold]
fn in_debug_cache(p: *mut c_void) -> bool {
    // Anywhere in a debug cache's slab: interior pointers there are refused, not fatal.
    // SAFETY: one flag is read at once. C's `free` reaches only kmalloc's caches, which
    // live as long as the heap, and caches the program made, which it destroys only
    // once it frees nothing of theirs.
    unsafe { heap().kmem().slub().cache_of(p.cast()) }.is_some_and(|s| s.config().is_debug())
}

#[cold]
#[inline(never)]
fn abort_bad_pointer() -> ! {
    kmem::platform::linux::write_stderr(
        b"kmem: bad pointer passed to free or realloc (report above); aborting\n",
    );
    // SAFETY: abort has no preconditions.
    unsafe { libc::abort() }
}

/// Asks the section `$section` (a function's own, given with `#[link_section]`) for
/// 64-byte alignment, so the function in it starts on a line: a `global_asm!`
/// directive, since stable Rust cannot align one function. The directive and the
/// function land in one section of one object, which the linker keeps aligned when it
/// gathers `.text.*` into `.text` (`tests/shim.rs`,
/// `the_hot_entry_points_start_on_a_line`, checks the exported addresses).
///
/// Why: a preloaded program calls `malloc` and `free` from its own loops, and their
/// fast paths are 92 and 128 bytes long. Wherever the build happened to place
/// them, they spanned two or three 64-byte lines; on this project's machine (Intel
/// Xeon, model 207) `free` took 3.55 ns a call in a loop of 10,000 frees when it
/// started 16 bytes before a line's end, against 3.21 ns when it started on a line
/// (BENCHMARKS.md, "A sheaf's top addressed without an index"). Aligned, the figures
/// no longer move with unrelated changes elsewhere in the library.
macro_rules! hot_entry_section {
    ($section:literal) => {
        // The `@progbits` spelling is x86's; elsewhere the function keeps the
        // compiler's alignment.
        #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
        core::arch::global_asm!(
            concat!(".pushsection ", $section, ",\"ax\",@progbits"),
            ".p2align 6",
            ".popsection",
        );
    };
}
pub(crate) use hot_entry_section;

hot_entry_section!(".text.kmem_entry.malloc");

/// `malloc`.
#[no_mangle]
#[link_section = ".text.kmem_entry.malloc"]
pub unsafe extern "C" fn malloc(size: size_t) -> *mut c_void {
    if size <= kmem::heap::SMALL_FAST_MAX {
        let (p, rseq) = kmem::heap::malloc_small_fast_or_tag(size);
        if !p.is_null() {
            return p.cast();
        }
        if rseq {
            return malloc_rseq(size);
        }
    }
    malloc_other(size)
}

/// `malloc` in per-CPU rseq mode, past the thread-mode pop (which the mode's tag
/// refuses): the restartable pop straight away, then [`malloc_other`] (both tail
/// calls). Before, the pop came after `malloc_other`'s size tests, its register saves
/// and a second test of the fast word.
#[inline(never)]
extern "C" fn malloc_rseq(size: size_t) -> *mut c_void {
    let p = kmem::heap::malloc_rseq_small(size);
    if !p.is_null() {
        return p.cast();
    }
    malloc_other(size)
}

/// `malloc`'s fast path alone (a pop from the class's main sheaf), or null for
/// [`malloc_other`]; shared with C++'s `new` (`cxx`), which cannot call the exported
/// `malloc` without going through the GOT.
#[inline(always)]
fn malloc_fast(size: size_t) -> *mut c_void {
    if size <= kmem::heap::SMALL_FAST_MAX {
        kmem::heap::malloc_small_fast(size).cast()
    } else {
        ptr::null_mut()
    }
}

/// `malloc` past its fast path (a tail call): for sizes up to `MEDIUM_FAST_MAX`, the
/// medium sizes' pop, then the sheaf slow path of `malloc`'s class (or per-CPU rseq
/// mode's restartable pop) before the heap's layers; then everything else.
#[inline(never)]
extern "C" fn malloc_other(size: size_t) -> *mut c_void {
    if size <= kmem::heap::MEDIUM_FAST_MAX {
        if size > kmem::heap::SMALL_FAST_MAX {
            let p = kmem::heap::alloc_small_fast(size);
            if !p.is_null() {
                return p.cast();
            }
        }
        let p = kmem::heap::malloc_small_slow(size);
        if !p.is_null() {
            return p.cast();
        }
    }
    alloc(size, MALLOC_MIN_ALIGN, false)
}

hot_entry_section!(".text.kmem_entry.free");

/// `free`: null is a no-op (refused by the fast path's range check, then
/// [`free_other`] returns).
#[no_mangle]
#[link_section = ".text.kmem_entry.free"]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: the caller's pointer.
    unsafe { free_or_abort(p) };
}

/// `cfree`: an old name for `free`.
#[no_mangle]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    // SAFETY: as free.
    unsafe { free(p) }
}

/// C23's `free_sized`: `free`, the size (which must be what was asked for) unused:
/// the block knows its own. Exported so that under the preload a program's call
/// frees kmem's block (a libc's own would take it for one of its heap's).
#[no_mangle]
pub unsafe extern "C" fn free_sized(p: *mut c_void, _size: size_t) {
    // SAFETY: as free.
    unsafe { free(p) }
}

/// C23's `free_aligned_sized`: `free` of a block from `aligned_alloc`, alignment and
/// size unused (see [`free_sized`]).
#[no_mangle]
pub unsafe extern "C" fn free_aligned_sized(p: *mut c_void, _align: size_t, _size: size_t) {
    // SAFETY: as free.
    unsafe { free(p) }
}

/// `calloc`: zeroed; a product that overflows fails with ENOMEM.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: size_t, size: size_t) -> *mut c_void {
    match n.checked_mul(size) {
        Some(total) => alloc(total, MALLOC_MIN_ALIGN, true),
        None => {
            set_errno(libc::ENOMEM);
            ptr::null_mut()
        }
    }
}

/// `realloc`, as glibc: null `p` allocates; size 0 frees `p` and returns null.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: size_t) -> *mut c_void {
    if p.is_null() {
        return alloc(size, MALLOC_MIN_ALIGN, false);
    }
    if size == 0 {
        // SAFETY: the caller's pointer.
        unsafe { free_or_abort(p) };
        return ptr::null_mut();
    }
    let h = heap();
    let align = malloc_align(size);
    if size <= isize::MAX as usize - align {
        // SAFETY: the caller's pointer, given up if it moves; an object whose class holds `size` bytes has
        // `malloc`'s alignment for them (every class above 8 bytes that C allocates
        // from is 16-aligned), and a moved one gets it.
        let moved = unsafe { h.realloc_object_freed(p.cast(), align, usize::MAX, size) };
        if let Some((q, freed)) = moved {
            if !freed && !in_debug_cache(p) {
                // A double free of `p` (reported): as `free` of it would.
                abort_bad_pointer();
            }
            if q.is_null() {
                set_errno(libc::ENOMEM);
            }
            return q.cast();
        }
    }
    // (Not `usable_size() == 0`: under slub_debug with red zones or tracks,
    // `malloc(0)`'s block answers 0.)
    // SAFETY: `realloc`'s contract: `p` is the caller's allocation (or not ours at
    // all, which answers `None`).
    let Some(old) = (unsafe { h.usable_size_checked(p.cast()) }) else {
        // Not ours: free reports it, then we abort.
        // SAFETY: dealloc of a foreign pointer only reports.
        unsafe { free_or_abort(p) };
        abort_bad_pointer();
    };
    if size > isize::MAX as usize - align {
        set_errno(libc::ENOMEM);
        return ptr::null_mut();
    }
    // SAFETY: `p` is ours with `old` usable bytes; the layout's alignment is the one
    // `realloc_object` was given (a large block or a debug cache's object has it
    // whenever it stays), and realloc keeps the contents.
    let q = unsafe {
        h.realloc(
            p.cast(),
            Layout::from_size_align_unchecked(old, align),
            size,
        )
    };
    if q.is_null() {
        set_errno(libc::ENOMEM);
    }
    q.cast()
}

/// `reallocarray`: `realloc(p, n * size)` with an overflow check (ENOMEM).
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: size_t, size: size_t) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: as realloc.
        Some(total) => unsafe { realloc(p, total) },
        None => {
            set_errno(libc::ENOMEM);
            ptr::null_mut()
        }
    }
}

/// `posix_memalign`: EINVAL unless `align` is a power of two multiple of the pointer
/// size; ENOMEM when memory runs out (`*out` untouched then).
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let p = alloc(size.max(1), align, false);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a valid place for the result.
    unsafe { *out = p };
    0
}

/// `aligned_alloc`: EINVAL (and null) unless `align` is a power of two.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: size_t, size: size_t) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    alloc(size.max(1), align, false)
}

/// `memalign`: as glibc, an alignment that is not a power of two is rounded up to one.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: size_t, size: size_t) -> *mut c_void {
    let align = align.max(MALLOC_MIN_ALIGN);
    let Some(align) = align.checked_next_power_of_two() else {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    };
    alloc(size.max(1), align, false)
}

/// `valloc`: page aligned.
#[no_mangle]
pub unsafe extern "C" fn valloc(size: size_t) -> *mut c_void {
    alloc(size.max(1), page_size(), false)
}

/// `pvalloc`: page aligned, the size rounded up to whole pages.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(size: size_t) -> *mut c_void {
    let page = page_size();
    match size.max(1).checked_next_multiple_of(page) {
        Some(s) => alloc(s, page, false),
        None => {
            set_errno(libc::ENOMEM);
            ptr::null_mut()
        }
    }
}

/// The kernel's page size (glibc's `valloc` aligns to it): 4 KiB on x86-64, up to
/// 64 KiB on arm64.
fn page_size() -> usize {
    kmem::os_page_size()
}

/// `malloc_usable_size`: how many bytes at `p` may be used (0 for null or a pointer
/// kmem did not hand out).
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> size_t {
    if p.is_null() {
        return 0;
    }
    // SAFETY: `malloc_usable_size`'s contract: a live allocation of the caller's.
    unsafe { heap().usable_size(p.cast()) }
}

/// `malloc_trim`: gives free memory back to the OS now; 1 if any was.
#[no_mangle]
pub unsafe extern "C" fn malloc_trim(_pad: size_t) -> c_int {
    (heap().trim() > 0) as c_int
}

/// `mallopt`: accepted and ignored (kmem's settings come from KMEM_*).
#[no_mangle]
pub unsafe extern "C" fn mallopt(_param: c_int, _value: c_int) -> c_int {
    1
}

/// `malloc_stats`: kmem's report (slabinfo, buddyinfo, vmstat) on stderr.
#[no_mangle]
pub unsafe extern "C" fn malloc_stats() {
    let mut w = kmem::platform::linux::FdWriter::new(2);
    let _ = heap().write_report(&mut w);
    w.flush();
}

/// glibc's `struct mallinfo2`.
#[repr(C)]
#[derive(Default)]
pub struct Mallinfo2 {
    /// Bytes of memory kmem manages (online sections).
    pub arena: size_t,
    /// Free blocks in the buddy lists.
    pub ordblks: size_t,
    pub smblks: size_t,
    /// Live direct (huge) mappings.
    pub hblks: size_t,
    /// Bytes in them.
    pub hblkhd: size_t,
    pub usmblks: size_t,
    pub fsmblks: size_t,
    /// Bytes allocated (managed minus free).
    pub uordblks: size_t,
    /// Bytes free.
    pub fordblks: size_t,
    pub keepcost: size_t,
}

fn mallinfo_figures() -> Mallinfo2 {
    let h = heap();
    let pa = h.page_allocator();
    let (hblks, hblkhd) = h.huge_totals();
    let blocks: usize = (0..pa.nr_nodes())
        .map(|n| pa.free_area_counts(n).iter().sum::<usize>())
        .sum();
    Mallinfo2 {
        arena: pa.nr_managed_pages() * kmem::PAGE_SIZE,
        ordblks: blocks,
        hblks,
        hblkhd,
        uordblks: pa.nr_allocated_pages() * kmem::PAGE_SIZE,
        fordblks: pa.nr_free_pages() * kmem::PAGE_SIZE,
        ..Mallinfo2::default()
    }
}

/// `mallinfo2`: kmem's figures in glibc's structure.
#[no_mangle]
pub unsafe extern "C" fn mallinfo2() -> Mallinfo2 {
    mallinfo_figures()
}

/// glibc's older `struct mallinfo` (int fields, clamped).
#[repr(C)]
#[derive(Default)]
pub struct Mallinfo {
    pub arena: c_int,
    pub ordblks: c_int,
    pub smblks: c_int,
    pub hblks: c_int,
    pub hblkhd: c_int,
    pub usmblks: c_int,
    pub fsmblks: c_int,
    pub uordblks: c_int,
    pub fordblks: c_int,
    pub keepcost: c_int,
}

/// `mallinfo`: as `mallinfo2`, clamped to int.
#[no_mangle]
pub unsafe extern "C" fn mallinfo() -> Mallinfo {
    let m = mallinfo_figures();
    let c = |v: usize| v.min(c_int::MAX as usize) as c_int;
    Mallinfo {
        arena: c(m.arena),
        ordblks: c(m.ordblks),
        hblks: c(m.hblks),
        hblkhd: c(m.hblkhd),
        uordblks: c(m.uordblks),
        fordblks: c(m.fordblks),
        ..Mallinfo::default()
    }
}

// ---------------------------------------------------------------------------
// glibc's internal names for the malloc family: the same functions.

/// `__libc_malloc`: `malloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_malloc(size: size_t) -> *mut c_void {
    // SAFETY: as malloc.
    unsafe { malloc(size) }
}

/// `__libc_free`: `free`.
#[no_mangle]
pub unsafe extern "C" fn __libc_free(p: *mut c_void) {
    // SAFETY: as free.
    unsafe { free(p) }
}

/// `__libc_calloc`: `calloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_calloc(n: size_t, size: size_t) -> *mut c_void {
    // SAFETY: as calloc.
    unsafe { calloc(n, size) }
}

/// `__libc_realloc`: `realloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_realloc(p: *mut c_void, size: size_t) -> *mut c_void {
    // SAFETY: as realloc.
    unsafe { realloc(p, size) }
}

/// `__libc_memalign`: `memalign`.
#[no_mangle]
pub unsafe extern "C" fn __libc_memalign(align: size_t, size: size_t) -> *mut c_void {
    // SAFETY: as memalign.
    unsafe { memalign(align, size) }
}

/// `__libc_valloc`: `valloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_valloc(size: size_t) -> *mut c_void {
    // SAFETY: as valloc.
    unsafe { valloc(size) }
}

/// `__libc_pvalloc`: `pvalloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_pvalloc(size: size_t) -> *mut c_void {
    // SAFETY: as pvalloc.
    unsafe { pvalloc(size) }
}

// ---------------------------------------------------------------------------
// Statistics (include/kmem.h).

/// `struct kmem_stats` of kmem.h: `kmem::stats::Counters` in C's terms.
#[repr(C)]
pub struct KmemStats {
    pub allocated: size_t,
    pub active: size_t,
    pub resident: size_t,
    pub mapped: size_t,
    pub metadata: size_t,
    pub retained: size_t,
}

/// `kmem_stats_get(out)`: fills `*out` with the heap's figures, read together (see
/// kmem.h); 0, or -EINVAL for a null `out`. Allocates nothing.
#[no_mangle]
pub unsafe extern "C" fn kmem_stats_get(out: *mut KmemStats) -> c_int {
    if out.is_null() {
        return -libc::EINVAL;
    }
    let c = kmem::stats::counters();
    // SAFETY: the caller's structure.
    unsafe {
        out.write(KmemStats {
            allocated: c.allocated,
            active: c.active,
            resident: c.resident,
            mapped: c.mapped,
            metadata: c.metadata,
            retained: c.retained,
        })
    };
    0
}

// ---------------------------------------------------------------------------
// Memory cgroups (include/kmem.h).

/// A group handle for C: the core's group.
type Memcg = kmem_core::memcontrol::MemCgroup;

/// `kmem_memcg_create(parent, name)`: a new group under `parent` (NULL: the root);
/// NULL with ENOMEM when there is no memory, EINVAL for a removed parent or a name
/// that is not UTF-8.
#[no_mangle]
pub unsafe extern "C" fn kmem_memcg_create(
    parent: *const Memcg,
    name: *const libc::c_char,
) -> *const Memcg {
    let name = if name.is_null() {
        ""
    } else {
        // SAFETY: the caller passes a NUL-terminated string.
        match unsafe { std::ffi::CStr::from_ptr(name) }.to_str() {
            Ok(n) => n,
            Err(_) => {
                set_errno(libc::EINVAL);
                return ptr::null();
            }
        }
    };
    // SAFETY: a group handle from kmem_memcg_create (caller), or NULL.
    let parent = unsafe { parent.as_ref() };
    if parent.is_some_and(|p| !p.is_online()) {
        set_errno(libc::EINVAL);
        return ptr::null();
    }
    match kmem::memcg::raw::create(parent, name) {
        Some(g) => g,
        None => {
            set_errno(libc::ENOMEM);
            ptr::null()
        }
    }
}

/// `kmem_memcg_remove(cg)`: 0, or -EBUSY (it has children) / -EINVAL. Objects still
/// charged to it are reparented to its parent. No thread may have it active.
#[no_mangle]
pub unsafe extern "C" fn kmem_memcg_remove(cg: *const Memcg) -> c_int {
    // SAFETY: a handle from kmem_memcg_create, removed once (caller).
    let Some(g) = (unsafe { cg.as_ref() }) else {
        return -libc::EINVAL;
    };
    // SAFETY: as above; the caller stops using it.
    match unsafe { kmem::memcg::raw::remove(g) } {
        Ok(()) => 0,
        Err(kmem_core::memcontrol::MemcgError::Busy) => -libc::EBUSY,
        Err(_) => -libc::EINVAL,
    }
}

/// `kmem_memcg_set_max(cg, bytes)`: `memory.max` (SIZE_MAX: no limit).
#[no_mangle]
pub unsafe extern "C" fn kmem_memcg_set_max(cg: *const Memcg, bytes: size_t) {
    // SAFETY: a live handle (caller).
    if let Some(g) = unsafe { cg.as_ref() } {
        g.set_max(bytes);
    }
}

/// `kmem_memcg_set_high(cg, bytes)`: `memory.high` (SIZE_MAX: no limit).
#[no_mangle]
pub unsafe extern "C" fn kmem_memcg_set_high(cg: *const Memcg, bytes: size_t) {
    // SAFETY: a live handle (caller).
    if let Some(g) = unsafe { cg.as_ref() } {
        g.set_high(bytes);
    }
}

/// `kmem_memcg_enter(cg)`: the calling thread's allocations are charged to `cg`
/// (NULL: to nobody) until `kmem_memcg_leave(token)` with the returned token.
#[no_mangle]
pub unsafe extern "C" fn kmem_memcg_enter(cg: *const Memcg) -> *mut c_void {
    // SAFETY: a live handle or NULL; the caller keeps it alive while active.
    unsafe { kmem::memcg::raw::enter(cg.as_ref()) as *mut c_void }
}

/// `kmem_memcg_leave(token)`: restores the active group `kmem_memcg_enter` replaced.
#[no_mangle]
pub unsafe extern "C" fn kmem_memcg_leave(token: *mut c_void) {
    // SAFETY: the caller's contract (a token from `kmem_memcg_enter` on this thread,
    // its group alive).
    unsafe { kmem::memcg::raw::leave(token as usize) };
}

/// `kmem_memcg_usage(cg)`: `memory.current` in bytes.
#[no_mangle]
pub unsafe extern "C" fn kmem_memcg_usage(cg: *const Memcg) -> size_t {
    // SAFETY: a live handle (caller).
    unsafe { cg.as_ref() }.map_or(0, |g| g.usage())
}

/// `kmem_memcg_stat(cg, buf, len)`: the group's files (`memory.current` …
/// `memory.stat`, objects per cache) as text into `buf` (NUL-terminated, cut to
/// `len`); returns the length of the whole text.
#[no_mangle]
pub unsafe extern "C" fn kmem_memcg_stat(
    cg: *const Memcg,
    buf: *mut libc::c_char,
    len: size_t,
) -> size_t {
    // SAFETY: a live handle (caller).
    let Some(g) = (unsafe { cg.as_ref() }) else {
        return 0;
    };
    let out: &mut [u8] = if buf.is_null() || len == 0 {
        &mut []
    } else {
        // SAFETY: the caller's buffer of `len` bytes.
        unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) }
    };
    let mut w = BufWriter { buf: out, len: 0 };
    let _ = kmem::memcg::raw::report(g, &mut w);
    let total = w.len;
    if let Some(last) = w.buf.len().checked_sub(1) {
        w.buf[total.min(last)] = 0;
    }
    total
}

/// Writes into a fixed buffer, counting what did not fit.
struct BufWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl std::fmt::Write for BufWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = self.buf.len().saturating_sub(1).saturating_sub(self.len);
        let n = s.len().min(room);
        if n > 0 {
            self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        }
        self.len += s.len();
        Ok(())
    }
}
