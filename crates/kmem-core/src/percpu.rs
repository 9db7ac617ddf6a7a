//! CPU areas: the per-CPU memory of the allocator, and the pool that recycles them.
//!
//! A [`CpuArea`] is one 64 KiB block from the allocator's own buddy lists. Its header
//! says who owns it; the rest holds per-CPU structures at offsets fixed when their
//! owner is created (the page layer's `ZonePcp` of each zone at a fixed slot, later
//! layers through [`PerCpuOffsets`]), as the kernel's percpu allocator places
//! `this_cpu_ptr(s->cpu_slab)`. This module is below the page layer: it knows nothing
//! of pages but their size, and the page layer makes and recycles the areas.
//!
//! ## Owned areas
//! An area in use has exactly one owner: one thread (std's per-thread mode) or one CPU
//! with its local lock held (a kernel). Only the owner touches the per-CPU lists and
//! counters in it, so they need no atomic read-modify-write. Others may *read* the
//! counters (for statistics) and may *ask* the owner to drain by setting a bit in
//! `drain_request`; the owner acts on it at its next page-allocator call. Nobody but
//! the owner ever changes an owned area's lists.
//!
//! ## Shared areas
//! Where several contexts share an area (one area per CPU for threads that may be
//! preempted and migrate), its `local_lock` makes the holder the owner for the time it
//! holds it; the slab layer's lockless fast paths are the one exception, described in
//! [`crate::slab`]. The local lock is the first of the core's locks (the lock order in
//! the crate docs); the pool's free-list lock is the last.
//!
//! ## The pool
//! Areas are created on demand, registered forever in a fixed table (statistics read
//! them all), and when their owner goes away (thread exit, CPU offline) they are
//! flushed and pushed on a free stack from which the next new owner takes one. So the
//! number of areas is bounded by the peak number of simultaneous owners, never by the
//! number of threads ever started.

use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, SpinLock};
use core::marker::PhantomData;
use core::ptr::{self, NonNull};

/// Buddy order of one CPU area (64 KiB: the `kmem_cache_cpu` of the 66 kmalloc
/// caches and of a hundred more caches fit).
pub const CPU_AREA_ORDER: usize = 4;
/// Size of one CPU area in bytes: 2^[`CPU_AREA_ORDER`] pages of 4 KiB (the page
/// layer checks this against its `PAGE_SIZE`).
pub const CPU_AREA_SIZE: usize = 4096 << CPU_AREA_ORDER;
/// Lines at the end of every CPU area that nothing writes either ([`PerCpuOffsets`] stops
/// before them), one per accounted kmalloc class
/// ([`CPU_AREA_CHARGED_LINES_COUNT`] of them): the sheaf tag of a slab with an objcg
/// vector of `kmalloc-cg-k` names line `k`, zero (no room) in every CPU area,
/// so a free of such an object from a CPU area's inline path falls to the regular
/// path, which uncharges it. A memory cgroup's charged area (`memcontrol`'s
/// `charged_area`), which has the layout of a CPU area, keeps its inboxes there.
/// The last line is followed by room for the rest of a whole `kmem_cache_cpu` read
/// there (its first line is what the fast paths read; the slab layer asserts it fits).
pub const CPU_AREA_CHARGED_LINES: usize =
    CPU_AREA_SIZE - 64 * CPU_AREA_CHARGED_LINES_COUNT - CPU_AREA_CHARGED_TAIL;
/// Bytes past the last charged line's 64 (see [`CPU_AREA_CHARGED_LINES`]).
pub const CPU_AREA_CHARGED_TAIL: usize = 256;
/// How many charged lines there are (`kmem_core::kmalloc::NR_KMALLOC`).
pub const CPU_AREA_CHARGED_LINES_COUNT: usize = 13;
/// The most CPU areas that can exist at once; owners past this run without one (their
/// allocations take the zone path, still correct).
pub const MAX_CPU_AREAS: usize = 4096;

/// `drain_request` bit: drain the per-CPU page lists.
pub const DRAIN_PAGES: u32 = 1 << 0;
/// `drain_request` bit: flush layer-specific per-CPU caches (the slab layer's).
pub const DRAIN_CACHES: u32 = 1 << 1;
/// `drain_request` bit: drain the memcg charge stock (see `memcontrol`).
pub const DRAIN_STOCK: u32 = 1 << 2;

/// Area state: on the free stack, empty.
const AREA_FREE: u32 = 0;
/// Area state: owned.
const AREA_OWNED: u32 = 1;

/// The header of a CPU area; per-CPU data follows it in the same block.
///
/// Invariants: `id` is the area's index in the pool's table; while `state` is
/// `AREA_FREE` the area's per-CPU lists are empty.
#[repr(C, align(64))]
pub struct CpuArea {
    id: u32,
    state: AtomicU32,
    /// Node the owner runs on (for NUMA-local allocation and `numa_local`).
    node: AtomicU32,
    /// Work other contexts ask the owner to do (`DRAIN_*` bits).
    pub(crate) drain_request: AtomicU32,
    /// Slab slow paths the owner ran (owner only; see `PageAllocator::housekeeping`).
    pub(crate) slow_paths: AtomicU32,
    /// Link on the pool's free stack (pool lock).
    next_free: AtomicPtr<CpuArea>,
    /// The area's `local_lock`, for platforms where several contexts share an area
    /// (std's per-CPU mode, a preemptible kernel): whoever holds it is the owner.
    local_lock: SpinLock<()>,
    /// See [`CpuArea::taken_generation`]: written when the area is taken.
    taken_gen: AtomicU32,
    /// The owner's copy of the page layer's tag-window length (`TagWindow::tagged_len`,
    /// see `PageAllocator::sheaf_tag_inline`): the inline free path's range check
    /// compares with it, a plain load from the owner's own area that the compiler
    /// folds into the compare, where an atomic load of the shared word takes an
    /// instruction of its own. Written by the owner only (when it takes the area, and
    /// when its free slow path or its housekeeping finds it behind), read by the owner with
    /// plain loads; 0 (no address passes) in a new area and in the zero area. It never
    /// exceeds the shared length, which only grows.
    pub(crate) tag_limit: AtomicUsize,
}

// The header fills one line (per-CPU data starts on the next).
const _: () = assert!(core::mem::size_of::<CpuArea>() == 64);

/// Offset of per-CPU data from the start of an area.
pub const CPU_AREA_DATA: usize = core::mem::size_of::<CpuArea>();

impl CpuArea {
    /// The area's id (the "CPU number" in reports).
    #[inline]
    pub fn id(&self) -> usize {
        self.id as usize
    }
    /// The node the owner runs on.
    #[inline]
    pub fn node(&self) -> usize {
        self.node.load(Ordering::Relaxed) as usize
    }
    /// Tells the area which node its owner runs on now.
    pub fn set_node(&self, nid: usize) {
        self.node.store(nid as u32, Ordering::Relaxed);
    }
    /// The work its owner was asked to do at its next call (`DRAIN_*` bits; 0:
    /// none).
    pub fn drain_requested(&self) -> u32 {
        self.drain_request.load(Ordering::Relaxed)
    }
    /// Whether the area is owned now.
    pub fn is_owned(&self) -> bool {
        self.state.load(Ordering::Relaxed) == AREA_OWNED
    }
    /// The fork generation ([`crate::sync::fork_generation`]) when the area's
    /// owner took it: in a fork's child, an area owned since before the fork belongs
    /// to a thread the child does not have (see [`Platform::area_orphaned`]).
    ///
    /// [`Platform::area_orphaned`]: crate::Platform::area_orphaned
    pub fn taken_generation(&self) -> u32 {
        self.taken_gen.load(Ordering::Relaxed)
    }
    /// Takes the area's local lock (`local_lock`): while the guard lives the holder
    /// may act as the area's owner (make a [`CpuRef`]). Spins, yielding through the
    /// relax hook, while another context holds it.
    pub fn local_lock(&self) -> crate::sync::SpinLockGuard<'_, ()> {
        self.local_lock.lock()
    }

    /// Takes the local lock until [`CpuArea::unlock_after_fork`] (fork handlers).
    pub fn lock_for_fork(&self) {
        self.local_lock.lock_forever();
    }

    /// Releases what [`CpuArea::lock_for_fork`] took.
    ///
    /// # Safety
    /// Called once after `lock_for_fork`, on the same thread (or its child).
    pub unsafe fn unlock_after_fork(&self) {
        // SAFETY: taken by lock_for_fork with its guard forgotten (caller).
        unsafe { self.local_lock.force_unlock() };
    }

    /// A pointer to the per-CPU object at `offset` (from [`PerCpuOffsets`] or a fixed
    /// slot), computed into a register of its own ([`addressed_alone`]): every access
    /// through it then addresses `[pointer + field offset]`.
    #[inline(always)]
    pub fn ptr<T>(&self, offset: usize) -> *mut T {
        self.ptr_at(offset, 0)
    }

    /// [`CpuArea::ptr`] without the register barrier: the compiler folds `offset`
    /// into each access (`[area + offset + field]`). For the fast paths compiled into
    /// a function that is called, C's `malloc` and `free`: there the call and the
    /// return hide the store forwarding that the barrier spares the inline paths, and
    /// the barrier's addition is one instruction more per call. Preloaded, a C loop of
    /// 10,000 `malloc(8)` took 2.91 ns a call with the barrier and 2.79 without, and
    /// `icount.sh` counted 57.1 instructions a pair for `then` against 55.1
    /// (BENCHMARKS.md, "A sheaf's top addressed without an index").
    #[inline(always)]
    pub fn ptr_indexed<T>(&self, offset: usize) -> *mut T {
        debug_assert!(offset + core::mem::size_of::<T>() <= CPU_AREA_SIZE);
        (self as *const CpuArea as *mut u8).wrapping_add(offset) as *mut T
    }

    /// [`CpuArea::ptr`] for the offset `offset + fixed`, where `fixed` is a constant:
    /// only `offset` is added in a register of its own, `fixed` joins the fields'
    /// displacements (one addition on the fast paths instead of two).
    #[inline(always)]
    pub fn ptr_at<T>(&self, offset: usize, fixed: usize) -> *mut T {
        debug_assert!(offset + fixed + core::mem::size_of::<T>() <= CPU_AREA_SIZE);
        let base = addressed_alone((self as *const CpuArea as *mut u8).wrapping_add(offset));
        base.wrapping_add(fixed) as *mut T
    }
}

/// `p`, through an empty `asm!` that the compiler cannot see into: it computes `p`
/// into a register and cannot fold the sum that made it into the addresses of the
/// loads and stores through it.
///
/// Why: the fast paths' words (a sheaf's top, above all) are stored by one call and
/// loaded by the next. Recent x86 cores hand such a load its value from the store
/// without waiting for the store to forward (memory renaming) only when both address
/// the word as a base register plus a displacement; with an index register as well
/// (`[area + cpu_offset + 0x1440]`, which is what the compiler makes of `area +
/// offset` and a field) the load waits the forwarding's four to five cycles, and each
/// push or pop waits for the last. On this project's machine (Intel Xeon, model 207)
/// a loop of pushes took 2.0 ns a push with the index, 1.09 without (BENCHMARKS.md,
/// "A sheaf's top addressed without an index").
#[inline(always)]
pub fn addressed_alone(p: *mut u8) -> *mut u8 {
    // Where `asm!` is not available (or under Miri) the pointer passes unchanged.
    #[allow(unused_mut)]
    let mut p = p;
    // The pointer is only passed through a register: the empty template neither
    // reads nor writes through it, which is what `nomem` says.
    #[cfg(all(
        not(miri),
        any(
            target_arch = "x86_64",
            target_arch = "x86",
            target_arch = "aarch64",
            target_arch = "arm",
            target_arch = "riscv64",
            target_arch = "riscv32",
            target_arch = "loongarch64",
        )
    ))]
    #[allow(clippy::pointers_in_nomem_asm_block)]
    // SAFETY: an empty template: it reads and writes no memory, changes no flags,
    // touches no stack, and leaves the register holding `p` as it found it.
    unsafe {
        core::arch::asm!(
            "/* {0} */",
            inout(reg) p,
            options(pure, nomem, nostack, preserves_flags)
        )
    };
    p
}

/// The owner's handle on a CPU area: proof that the holder is the one context allowed
/// to change the area's per-CPU lists. It is neither `Send` nor `Sync`.
#[derive(Clone, Copy)]
pub struct CpuRef<'a> {
    area: &'a CpuArea,
    _not_send: PhantomData<*mut ()>,
}

impl<'a> CpuRef<'a> {
    /// # Safety
    /// The caller owns `area` (it got it from the page allocator's `cpu_area_get` and
    /// has not put it back), and no other `CpuRef` to it is used while this one lives.
    #[inline]
    pub unsafe fn new(area: &'a CpuArea) -> Self {
        Self {
            area,
            _not_send: PhantomData,
        }
    }
    /// The area.
    #[inline]
    pub fn area(&self) -> &'a CpuArea {
        self.area
    }
}

/// The inline fast paths' handle on a CPU area: the caller's own (from a [`CpuRef`]),
/// or the [`ZERO_CPU_AREA`], which a thread without an area of its own uses instead,
/// so that those paths need no test of the handle.
///
/// Invariant: the inline paths (the slab layer's sheaf pop and push) write through an
/// `InlineArea` only after reading a non-zero sheaf count or a sheaf with room, and
/// every word of the zero area is zero: so they never write the zero area, and the
/// handle needs no ownership when it names it. It is neither `Send` nor `Sync`.
#[derive(Clone, Copy)]
pub struct InlineArea<'a> {
    area: &'a CpuArea,
    _not_send: PhantomData<*mut ()>,
}

impl<'a> InlineArea<'a> {
    /// The handle of an area the caller owns.
    #[inline(always)]
    pub fn owned(c: CpuRef<'a>) -> Self {
        Self {
            area: c.area,
            _not_send: PhantomData,
        }
    }

    /// The zero area's handle: every inline fast path given it falls to its slow path.
    #[inline(always)]
    pub fn zero() -> InlineArea<'static> {
        // SAFETY: the zero area's first CPU_AREA_SIZE bytes read as a CpuArea (all
        // zero: a valid header) followed by zeroed per-CPU data.
        unsafe { InlineArea::from_word(ZERO_CPU_AREA.base()) }
    }

    /// The handle for an address the caller read from its thread's fast word.
    ///
    /// # Safety
    /// `word` is the address of an area the caller owns (as for [`CpuRef::new`]), of
    /// the charged area of one (`Memcg::charged_fast_word`: a block with an area's
    /// layout, which only that area's owner touches), or [`ZeroCpuArea::base`] or
    /// [`ZeroCpuArea::alternate`] of [`ZERO_CPU_AREA`].
    #[inline(always)]
    pub unsafe fn from_word(word: usize) -> InlineArea<'static> {
        InlineArea {
            // SAFETY: the caller's contract: an area, or the zero area's bytes
            // (aligned to 64, at least CPU_AREA_SIZE of them from either address).
            area: unsafe { &*(word as *const CpuArea) },
            _not_send: PhantomData,
        }
    }

    /// The area.
    #[inline(always)]
    pub fn area(&self) -> &'a CpuArea {
        self.area
    }
}

impl<'a> From<CpuRef<'a>> for InlineArea<'a> {
    #[inline(always)]
    fn from(c: CpuRef<'a>) -> Self {
        Self::owned(c)
    }
}

/// Bytes of the zero area: a CPU area's worth from either of its two addresses.
const ZERO_AREA_BYTES: usize = CPU_AREA_SIZE + 64;

/// [`CPU_AREA_SIZE`] + 64 bytes that are never written: what the inline fast paths
/// read for a thread without a CPU area of its own ([`InlineArea::zero`]). It has two
/// addresses, 64 bytes apart, each followed by a whole area of zeros, so a front end
/// can tell two kinds of thread apart by their fast word and still give both the fast
/// paths' loads with no test (kmem's thread words: "no area" and "per-CPU rseq mode").
#[repr(C, align(64))]
pub struct ZeroCpuArea([AtomicU64; ZERO_AREA_BYTES / 8]);

impl ZeroCpuArea {
    /// The first address.
    #[inline(always)]
    pub fn base(&self) -> usize {
        self as *const ZeroCpuArea as usize
    }
    /// The second address (64 bytes on).
    #[inline(always)]
    pub fn alternate(&self) -> usize {
        self.base() + 64
    }
    /// Whether every byte is still zero (tests: the inline paths never write it).
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|w| w.load(Ordering::Relaxed) == 0)
    }
}

/// The zero area (see [`ZeroCpuArea`]). In writable memory like any static with
/// atomics, but written by nothing ([`InlineArea`]'s invariant).
pub static ZERO_CPU_AREA: ZeroCpuArea =
    ZeroCpuArea([const { AtomicU64::new(0) }; ZERO_AREA_BYTES / 8]);

/// The percpu offset allocator: hands out offsets within every CPU area.
pub struct PerCpuOffsets {
    next: AtomicUsize,
}

impl PerCpuOffsets {
    pub(crate) const fn new(start: usize) -> Self {
        Self {
            next: AtomicUsize::new(start),
        }
    }
    /// Reserves `size` bytes aligned to `align` in every CPU area (`alloc_percpu`).
    /// The memory is zero in a new area and must be left in a valid state by the owner
    /// when the area is flushed. Returns `None` when the areas are full (up to the
    /// charged lines at their end, [`CPU_AREA_CHARGED_LINES`], which nothing
    /// gets). Offsets are never given back (the kernel's percpu chunks are also rarely
    /// freed). `None` too for an `align` that is not a power of two: every offset
    /// handed out lies past the ones before it, so no two reservations overlap.
    pub fn alloc(&self, size: usize, align: usize) -> Option<usize> {
        if !align.is_power_of_two() {
            return None;
        }
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            let start = cur.checked_add(align - 1)? & !(align - 1);
            let end = start.checked_add(size)?;
            if end > CPU_AREA_CHARGED_LINES {
                return None;
            }
            match self
                .next
                .compare_exchange(cur, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(start),
                Err(v) => cur = v,
            }
        }
    }
}

/// The table of all CPU areas and the stack of free ones.
pub struct CpuAreaPool {
    table: [AtomicPtr<CpuArea>; MAX_CPU_AREAS],
    /// Areas ever created (table entries in use).
    nr_areas: AtomicUsize,
    /// Areas owned now.
    nr_owned: AtomicUsize,
    free: SpinLock<FreeStack>,
}

struct FreeStack {
    head: *mut CpuArea,
}
// SAFETY: the stack holds pointers to areas that live as long as the allocator; it is
// only touched under the pool lock.
unsafe impl Send for FreeStack {}

impl CpuAreaPool {
    pub(crate) const fn new() -> Self {
        Self {
            table: [const { AtomicPtr::new(ptr::null_mut()) }; MAX_CPU_AREAS],
            nr_areas: AtomicUsize::new(0),
            nr_owned: AtomicUsize::new(0),
            free: SpinLock::new(FreeStack {
                head: ptr::null_mut(),
            }),
        }
    }

    /// Number of areas owned now.
    pub fn nr_owned(&self) -> usize {
        self.nr_owned.load(Ordering::Relaxed)
    }

    /// Number of areas ever created.
    pub fn nr_areas(&self) -> usize {
        self.nr_areas.load(Ordering::Acquire)
    }

    /// Every area ever created, owned or free.
    pub fn iter(&self) -> impl Iterator<Item = &CpuArea> + '_ {
        (0..self.nr_areas()).filter_map(move |i| {
            let p = self.table[i].load(Ordering::Acquire);
            // SAFETY: table entries are null or point to initialised areas that are
            // never freed while the allocator lives.
            unsafe { p.as_ref() }
        })
    }

    /// Takes a free area off the stack and marks it owned.
    pub(crate) fn pop_free(&self) -> Option<&CpuArea> {
        let mut stack = self.free.lock();
        let head = stack.head;
        // SAFETY: stack entries are live areas (see `FreeStack`).
        let area = unsafe { head.as_ref() }?;
        stack.head = area.next_free.load(Ordering::Relaxed);
        drop(stack);
        area.state.store(AREA_OWNED, Ordering::Relaxed);
        area.taken_gen
            .store(crate::sync::fork_generation(), Ordering::Relaxed);
        self.nr_owned.fetch_add(1, Ordering::Relaxed);
        Some(area)
    }

    /// Registers a newly made area (its memory is `CPU_AREA_SIZE` zeroed bytes at
    /// `mem`), owned by the caller. Returns `None` if the table is full.
    ///
    /// # Safety
    /// `mem` is valid for `CPU_AREA_SIZE` bytes, zeroed, aligned to 64, and lives as long
    /// as the allocator.
    pub(crate) unsafe fn register(&self, mem: NonNull<u8>, nid: usize) -> Option<&CpuArea> {
        let id = self.nr_areas.load(Ordering::Relaxed);
        let _guard = self.free.lock();
        let id = id.max(self.nr_areas.load(Ordering::Relaxed));
        if id >= MAX_CPU_AREAS {
            return None;
        }
        let area = mem.as_ptr() as *mut CpuArea;
        // SAFETY: the caller hands us exclusive, suitably sized and aligned memory.
        unsafe {
            area.write(CpuArea {
                id: id as u32,
                state: AtomicU32::new(AREA_OWNED),
                node: AtomicU32::new(nid as u32),
                drain_request: AtomicU32::new(0),
                slow_paths: AtomicU32::new(0),
                next_free: AtomicPtr::new(ptr::null_mut()),
                local_lock: SpinLock::new(()),
                taken_gen: AtomicU32::new(crate::sync::fork_generation()),
                tag_limit: AtomicUsize::new(0),
            });
        }
        self.table[id].store(area, Ordering::Release);
        self.nr_areas.store(id + 1, Ordering::Release);
        self.nr_owned.fetch_add(1, Ordering::Relaxed);
        // SAFETY: initialised just above; lives as long as the allocator.
        Some(unsafe { &*area })
    }

    /// In a fork's child: `n` owned areas belong to threads the child does not have
    /// (see [`Platform::area_orphaned`](crate::Platform::area_orphaned)). They stay
    /// owned, never flushed or reused, but stop counting among the owners the per-CPU
    /// page lists' budget is shared by (a pre-fork server's child would otherwise
    /// split it with every thread of its parent: `high` can reach 0, the lists off),
    /// from the next area taken or given back on.
    ///
    /// # Safety
    /// Called once per fork, in the child, by its one thread; the `n` areas' owners
    /// do not exist in this process.
    pub unsafe fn forget_owners(&self, n: usize) {
        let _ = self
            .nr_owned
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| {
                Some(o.saturating_sub(n))
            });
    }

    /// Returns a flushed area to the free stack.
    pub(crate) fn push_free(&self, area: &CpuArea) {
        area.state.store(AREA_FREE, Ordering::Relaxed);
        area.drain_request.store(0, Ordering::Relaxed);
        let mut stack = self.free.lock();
        area.next_free.store(stack.head, Ordering::Relaxed);
        stack.head = area as *const CpuArea as *mut CpuArea;
        drop(stack);
        self.nr_owned.fetch_sub(1, Ordering::Relaxed);
    }

    /// The free-stack lock (for the fork handlers).
    pub(crate) fn free_lock(&self) -> &SpinLock<impl Sized> {
        &self.free
    }

    /// Asks the owner of every owned area to do `work` at its next call, but those of
    /// the areas `orphaned` names (a fork's child: their owners are gone, and a write
    /// to each would copy its page from the parent's).
    pub(crate) fn request_all(&self, work: u32, orphaned: impl Fn(&CpuArea) -> bool) {
        for area in self.iter() {
            if area.is_owned() && !orphaned(area) {
                area.drain_request.fetch_or(work, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percpu_offsets_are_aligned_and_bounded() {
        let o = PerCpuOffsets::new(100);
        let a = o.alloc(10, 64).unwrap();
        assert_eq!(a, 128);
        let b = o.alloc(8, 8).unwrap();
        assert_eq!(b, 144);
        assert!(o.alloc(CPU_AREA_SIZE, 8).is_none());
        let c = o.alloc(1, 1).unwrap();
        assert_eq!(c, 152);
    }

    /// The register barrier of the fast paths changes no address: a pointer comes
    /// back as it went in, and an area's pointers split into a register part and a
    /// constant part land where the plain sum does.
    #[test]
    fn pointers_through_the_register_barrier_keep_their_address() {
        let mut words = [0u64; 4];
        let p = words.as_mut_ptr().cast::<u8>();
        for off in [0, 1, 8, 31] {
            assert_eq!(addressed_alone(p.wrapping_add(off)), p.wrapping_add(off));
        }
        let area = InlineArea::zero().area();
        let base = area as *const CpuArea as usize;
        for (off, fixed) in [(0, 0), (64, 0), (0, 128), (4096, 64), (100, 3)] {
            assert_eq!(area.ptr_at::<u8>(off, fixed) as usize, base + off + fixed);
            assert_eq!(area.ptr::<u8>(off + fixed) as usize, base + off + fixed);
        }
        // Through the barrier, the object is the same one: a write through one
        // pointer is read through the other.
        // SAFETY: `p` points to `words`, which this test owns.
        unsafe { addressed_alone(p).cast::<u64>().write(7) };
        assert_eq!(words[0], 7);
    }
}
