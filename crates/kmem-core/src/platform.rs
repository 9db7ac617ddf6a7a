//! The platform interface: what the core needs from the world below it.
//!
//! The core never names an operating system. A platform supplies address space for
//! memory sections, gives memory back when free page reporting asks, tells the time
//! for decay, and writes report text somewhere a person can read it. The Linux
//! implementation lives in the `kmem` crate; a kernel implements it over its firmware
//! memory map and console.

use crate::slab_flags::SlabFlags;
use crate::sync::{AtomicUsize, Ordering};

/// What a platform provides to a [`crate::PageAllocator`].
///
/// All methods may be called concurrently from any context that uses the allocator,
/// and none of them may allocate through the allocator that calls them.
///
/// ## The span
/// Besides this trait, a platform hands the allocator one span of address space
/// ([`crate::PageAllocator::init`], [`crate::Kmem::init`]):
/// - its base aligned to [`crate::page::SECTION_SIZE`] (128 MiB), always;
/// - its length anything above 2 MiB (one section's memmap, [`crate::page::MEMMAP_PAGES`]
///   pages) plus a page, whole pages; it need not be a multiple of the section size (the
///   last section may be partial) and need not be backed by memory until
///   [`Platform::section_online`] is called for a section of it;
/// - no contents required: each section must read as zero once it is online.
///
/// A kernel without virtual memory to spare gives the physical memory it has, e.g.
/// 48 MiB at a 128 MiB boundary: that is 46 MiB of pages after the 2 MiB memmap.
/// Memory that starts off the boundary cannot be used as is: the allocator finds a
/// page's section by masking its descriptor's address. `crates/kmem-core/examples/nostd`
/// is a complete `no_std` platform over a `static` byte array.
pub trait Platform: Sync {
    /// Brings the memory of one section online: `len` bytes at `addr` (inside the span
    /// given to [`crate::PageAllocator::init`], `addr` aligned to the section size;
    /// `len` is the section size, or less for the span's last section when the span
    /// ends inside it) must become readable and writable, preferably backed by memory
    /// of node `nid`. Memory that the platform brings online reads as zero (a platform
    /// over memory that was never written, such as `.bss`, has nothing to do). Returns
    /// false if it cannot.
    ///
    /// # Safety
    /// `addr..addr + len` is a section of the span the allocator was given, and no one
    /// uses it yet.
    unsafe fn section_online(&self, addr: *mut u8, len: usize, nid: usize) -> bool;

    /// Address space for the allocator's page-tag table (four bytes for every page
    /// of the span: `len` bytes, a multiple of the page size), reserved once by
    /// [`crate::PageAllocator::init`] and never given back. Its parts are opened with
    /// [`Platform::tag_table_online`] as the sections they describe come online; until
    /// then nothing reads or writes them. Null: the platform has none to give, and
    /// every free takes the regular path's lookups instead of the inline fast path's
    /// (which reads the table). The default gives none.
    ///
    /// # Safety
    /// Called once, before the allocator is used.
    unsafe fn reserve_tag_table(&self, len: usize) -> *mut u8 {
        let _ = len;
        core::ptr::null_mut()
    }

    /// Makes `len` bytes at `addr` of the tag table [`Platform::reserve_tag_table`]
    /// gave readable and writable, reading as zero (`addr` and `len` are multiples of
    /// the page size). Returns false if it cannot (the section then stays offline).
    /// The default has nothing to do (a table that is accessible from the start).
    ///
    /// # Safety
    /// `addr..addr + len` lies in the table, and no one uses it yet.
    unsafe fn tag_table_online(&self, addr: *mut u8, len: usize) -> bool {
        let _ = (addr, len);
        true
    }

    /// Free page reporting: the `len` bytes at `addr` are free and the allocator will
    /// not touch them until it hands them out again. The platform gives the memory
    /// behind them back (Linux: `madvise(MADV_DONTNEED)`); afterwards they must read as
    /// zero (a platform that cannot give memory back zeroes them instead).
    ///
    /// # Safety
    /// `addr..addr + len` lies in the allocator's span, is mapped, and nobody uses it
    /// while the call runs or afterwards until the allocator hands it out again.
    unsafe fn report_free(&self, addr: *mut u8, len: usize);

    /// A monotonic clock in nanoseconds; coarse is fine (it drives decay intervals).
    fn now_ns(&self) -> u64;

    /// Writes report text (OOM reports, bad-page reports). Must not allocate.
    fn log(&self, text: &str);

    /// Called after each free page reporting pass (no locks held), so the platform
    /// can age memory of its own the same way (Linux: cached huge mappings).
    fn reporting_pass(&self, _now_ns: u64) {}

    /// Called after each report of a bad object (`BUG <cache> (Not tainted): …`:
    /// corruption found by slub_debug or the hardened paths, a bad or double free), once
    /// it is printed and before the allocator quarantines the object and goes on. A
    /// platform may stop there (the kernel's `panic_on_warn`; the Linux heap's
    /// `KMEM_ON_ERROR=abort`). Locks of the allocator may be held.
    fn after_bug_report(&self) {}

    /// Called before the allocator calls code of its user (a slab constructor) while
    /// it may hold a CPU area's state half-way through an operation (a sheaf being
    /// refilled, a CPU slab being replaced). The platform makes the calling context's
    /// nested operations, should that code allocate or free, run without a CPU area
    /// (the zone path, `cpu` `None`), as the allocator's own nested allocations do;
    /// returns what [`Platform::callout_leave`] needs to undo it. The default does
    /// nothing: on such a platform a constructor must not allocate or free memory of
    /// this allocator (the kernel's rule for constructors).
    fn callout_enter(&self) -> usize {
        0
    }

    /// Undoes [`Platform::callout_enter`] (given what it returned), once the user's
    /// code has returned.
    fn callout_leave(&self, _token: usize) {}

    /// Whether `area`'s owner is a thread this process does not have: a fork's child
    /// keeps only the forking thread, and where each thread owns an area, another
    /// thread of the parent may have been half-way through an update of its area (a
    /// sheaf half flushed, or handed to a barn while the area still names it), so
    /// nothing may flush that area again: `kmem_cache_destroy` passes it by, and what
    /// it holds is lost to the child, as its owner is. The default: none (areas are
    /// per CPU, or there is no fork).
    fn area_orphaned(&self, _area: &crate::percpu::CpuArea) -> bool {
        false
    }

    /// Called from the allocator's periodic housekeeping (every
    /// [`HOUSEKEEPING_INTERVAL`](crate::page::HOUSEKEEPING_INTERVAL)th slab slow path of
    /// a CPU area; no locks of the core held but the area's local lock), so memory the
    /// platform caches ages even while the program only allocates from per-CPU
    /// caches (Linux: cached huge mappings past the decay interval are unmapped).
    fn housekeeping(&self) {}

    /// 64 random bits for the freelist hardening key and randomised freelists. The
    /// default mixes the clock with a counter; a platform with a real source
    /// (Linux: getrandom) should use it.
    fn random_u64(&self) -> u64 {
        weak_random(self.now_ns())
    }

    /// slub_debug's U flag: fills `frames` with return addresses of the current call
    /// stack, innermost first, skipping the allocator's own frames where it can tell;
    /// leaves zeros where it cannot. Must not allocate (or must guard re-entry).
    fn stack_trace(&self, _frames: &mut [usize]) {}

    /// Writes `addr` for a report as a symbol where the platform can name it
    /// (`func+0x1c/0x40`), else as a hex address.
    fn symbolize(&self, addr: usize, w: &mut dyn core::fmt::Write) -> core::fmt::Result {
        write!(w, "0x{addr:x}")
    }

    /// The calling thread's id and the process id, for reports.
    fn thread_and_pid(&self) -> (u32, u32) {
        (0, 0)
    }

    /// The node of the CPU the caller runs on, for NUMA statistics of contexts that
    /// have no CPU area.
    fn numa_node_id(&self) -> usize {
        0
    }

    /// What a spinning waiter does to give up its CPU after spinning for a while
    /// (`sched_yield` where there is a scheduler, so that on an oversubscribed
    /// machine the lock holder gets the CPU back). The default spins. Installed for
    /// every spin lock of the core when the allocator is initialised (the locks have
    /// no handle on the platform).
    fn relax()
    where
        Self: Sized,
    {
        core::hint::spin_loop();
    }

    /// slub_debug's per-cache selection: flags to add to the cache named `cache` when
    /// it is created (debug flags, `INIT_ON_ALLOC`/`INIT_ON_FREE`,
    /// `RANDOM_FREELIST`, `NO_HARDEN`; others are ignored). Must not allocate.
    fn slab_flags(&self, _cache: &str) -> SlabFlags {
        SlabFlags::empty()
    }

    /// Per-CPU mode with restartable sequences ([`crate::slab::PerCpuAccess::Rseq`]):
    /// takes a CPU freelist or a sheaf's top for the slab layer. `freelist` is that
    /// word of a `kmem_cache_cpu` in the CPU area with id `area_id`; the platform
    /// must, atomically with respect to the restartable sequences of that area's CPU,
    /// replace it with 0 and return what it held. Every sequence refuses a 0 word (no
    /// CPU slab; no sheaf) and none commits 0 (a freelist's last pop leaves the slab's
    /// end token; a top is its sheaf's address plus 8 an object), which allows two
    /// ways: a sequence run on that CPU; or, from another CPU, a *fence*: exchange the
    /// word for 0, restart whatever sequence that CPU runs, and exchange again; a value
    /// the second exchange finds was committed by a sequence that read the word before
    /// the first, and is the take so far, but a sequence begun since may have read it,
    /// so the restart and the exchange repeat until an exchange finds 0. The default is
    /// a plain exchange, right where no sequence can run.
    fn take_cpu_freelist(&self, _area_id: usize, freelist: &AtomicUsize) -> usize {
        freelist.swap(0, Ordering::AcqRel)
    }
}

/// 64 bits from `seed` and a process-wide counter, mixed (murmur3's finaliser): not
/// secret, but different on every call. For platforms without a real source, and as
/// a fallback when it fails.
pub fn weak_random(seed: u64) -> u64 {
    static COUNTER: crate::sync::AtomicU64 = crate::sync::AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let c = COUNTER.fetch_add(0x9e37_79b9_7f4a_7c15, crate::sync::Ordering::Relaxed);
    let mut x = seed ^ c;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 33)
}
