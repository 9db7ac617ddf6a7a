//! Huge allocations: larger than the largest buddy block (4 MiB), or aligned beyond
//! it, and buffers that `realloc` moved past the slab classes (1 MiB; while fewer
//! than 128 huge allocations are live: `heap/realloc.rs`). Each is a direct mapping
//! (`mmap`) with its own descriptor — a small object from kmalloc, so this metadata
//! too comes from kmem's own pages — on one of 256 lists by address, under a spin
//! lock; a growth takes the cached mapping right after it, else `mremap` resizes it.
//! They are few and large, so short lists are enough: a lookup walks one only for
//! pointers outside kmem's span.
//!
//! Freed mappings are not unmapped at once: like the buddy allocator's decay, up to
//! [`CACHE_SLOTS`] of them (the newest stay) stay mapped, resident, for reuse by the
//! next huge allocation — the smallest that holds it (its tail cached apart when it
//! holds more than twice the request), else the largest grown with `mremap` — and are unmapped once they have been unused for the decay interval
//! (checked at the next huge allocation, after each free page reporting pass and at
//! the allocator's periodic housekeeping) or by [`HugeList::trim`]. A program that
//! repeatedly grows a Vec past 4 MiB then reuses the same memory instead of faulting in
//! fresh pages each time (about 2 µs a page on these machines).
//!
//! The cache holds at most as many bytes as the program had in huge allocations at
//! their peak since the decay interval began ([`HugeList::cache_bound`]; at least
//! [`CACHE_MIN_BYTES`], at most [`CACHE_MAX_BYTES`]): freed mappings never make the
//! process hold more than its recent peak (beyond the floor), and a program that makes
//! and frees a round of large buffers again and again gets the whole round back.
//!
//! In a heap bounded by `KMEM_MAX`, a mapping takes its bytes of the bound from the
//! owner when it is made or grown ([`HugeOwner::reserve`]) and gives them back when it
//! is unmapped or shrunk, so cached mappings count toward the bound as live ones do
//! (the cache then keeps at most [`CACHE_MIN_BYTES`]; the owner trims it when the
//! bound is short: `Heap::trim` before a mapping fails, the page allocator's shrinker).
//!
//! Locking: one spin lock (`HugeList::head`) covers the list and the cache slots; it
//! is taken after a CPU area's local lock and before the slab and page allocator
//! locks, and never held across a call into them (descriptors are allocated and freed
//! by the owner, outside it). `count` and `bytes` are statistics, updated without it.
//! The fork handlers hold it across `fork` ([`HugeList::lock_for_fork`]).
//!
//! The list does not know the heap: its owner passes itself as a [`HugeOwner`] for
//! the descriptors, and the time and decay interval as numbers.

use crate::platform::os;
use kmem_core::sync::SpinLock;
use kmem_core::{Gfp, PAGE_SIZE};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// One huge allocation.
#[repr(C)]
struct HugeDesc {
    /// The address handed out.
    addr: usize,
    /// Bytes mapped at `addr` (a whole number of pages).
    len: usize,
    next: *mut HugeDesc,
    /// The objcg charged for `len` bytes (0: none).
    objcg: usize,
    /// Red-zoned (`KMEM_DEBUG`'s Z for `kmalloc-large`): its free checks the trailer,
    /// and one that is gone is damage, not an unzoned mapping (`heap/redzone.rs`).
    zoned: bool,
}

/// Freed mappings kept for reuse. 128, so that the byte bound
/// ([`HugeList::cache_bound`]) is what limits the cache: a program that holds several
/// large buffers at once and frees and makes them again in rounds (per request, per
/// frame, per thread: mimalloc-bench's mstress keeps ten to twenty 4–10 MiB blocks
/// live across its two threads) found four slots full, unmapped the rest and faulted
/// every page of their successors in again (mstress: 98,000 page faults against
/// mimalloc's 50,000); with 32, rounds of 60 buffers grown to 8 MiB took 133 ms a round
/// against 54 with 128 (mimalloc 81–112). The slots are scanned only as far as they
/// hold mappings ([`CacheSlots`]).
pub const CACHE_SLOTS: usize = 128;
/// Bytes the cache may always hold, whatever the recent peak.
pub const CACHE_MIN_BYTES: usize = 64 << 20;
/// Most bytes kept mapped for reuse, whatever the recent peak.
pub const CACHE_MAX_BYTES: usize = 1 << 30;

/// The live huge allocations.
pub(crate) struct HugeList {
    head: SpinLock<HugeHead>,
    count: AtomicUsize,
    bytes: AtomicUsize,
    /// Bytes in the cache slots (a statistic: stored under the lock after each change
    /// of the slots, read without it).
    cached: AtomicUsize,
    /// The most bytes live in huge allocations since `peak_ns` (raised by every
    /// allocation; set to the live bytes when [`HugeList::age`] starts a new interval).
    peak: AtomicUsize,
    /// When the interval `peak` covers began (ns).
    peak_ns: AtomicU64,
    /// The cache's largest bound: [`CACHE_MAX_BYTES`], or [`CACHE_MIN_BYTES`] for a
    /// bounded heap ([`HugeList::set_bounded`]).
    limit: AtomicUsize,
    /// The granule mappings are sized in: the kernel's page size ([`os::page_size`]),
    /// read at the first use (0 until then). Mappings, and the parts the cache splits
    /// them into, are whole kernel pages: a split inside one would leave the two parts
    /// sharing it, and unmapping one would unmap the other's first bytes.
    page: AtomicUsize,
}

/// A freed mapping kept for reuse: address, length, when it was freed (ns).
#[derive(Clone, Copy)]
struct Cached {
    addr: usize,
    len: usize,
    freed_ns: u64,
}

impl Cached {
    /// An empty slot's value (never read as a mapping).
    const NONE: Cached = Cached {
        addr: 0,
        len: 0,
        freed_ns: 0,
    };

    /// What is left of this mapping past its first `keep` bytes (fewer than its
    /// length), freed when it was.
    fn tail(self, keep: usize) -> Cached {
        Cached {
            addr: self.addr + keep,
            len: self.len - keep,
            freed_ns: self.freed_ns,
        }
    }
}

/// log2 of [`BUCKETS`].
const BUCKET_BITS: u32 = 8;
/// Lists of live descriptors, by address ([`bucket`]): a lookup walks one.
const BUCKETS: usize = 1 << BUCKET_BITS;

/// The list of `addr`'s descriptor: a multiplicative hash of its page number
/// (mappings start on pages, and often a fixed stride apart).
fn bucket(addr: usize) -> usize {
    ((addr as u64 >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - BUCKET_BITS)) as usize
}

/// The live descriptors, in [`BUCKETS`] lists by address, and the cache.
struct HugeHead([*mut HugeDesc; BUCKETS], CacheSlots);

/// The cache's slots: the cached mappings in `slots[..len]`, with no gap (what lies
/// past `len` is stale), and their bytes, kept as they change: the scans cover the
/// mappings cached, not every slot, and no pass sums them.
struct CacheSlots {
    slots: [Cached; CACHE_SLOTS],
    len: usize,
    bytes: usize,
}

impl CacheSlots {
    const fn new() -> Self {
        Self {
            slots: [Cached::NONE; CACHE_SLOTS],
            len: 0,
            bytes: 0,
        }
    }

    /// The cached mappings.
    fn as_slice(&self) -> &[Cached] {
        &self.slots[..self.len]
    }

    fn is_full(&self) -> bool {
        self.len == CACHE_SLOTS
    }

    /// Caches `c`; false (nothing done) when every slot is taken.
    fn push(&mut self, c: Cached) -> bool {
        if self.is_full() {
            return false;
        }
        self.slots[self.len] = c;
        self.len += 1;
        self.bytes += c.len;
        true
    }

    /// Takes the `i`th cached mapping out (the last one takes its slot).
    fn remove(&mut self, i: usize) -> Cached {
        let c = self.slots[i];
        self.len -= 1;
        self.slots[i] = self.slots[self.len];
        self.bytes -= c.len;
        c
    }

    /// Puts `c` in the `i`th cached mapping's place.
    fn replace(&mut self, i: usize, c: Cached) {
        self.bytes = self.bytes - self.slots[i].len + c.len;
        self.slots[i] = c;
    }

    /// Takes out (and returns, for the caller to unmap) every cached mapping freed
    /// `decay_ns` or more before `now_ns`, one at a time through `out`.
    fn remove_decayed(&mut self, now_ns: u64, decay_ns: u64, mut out: impl FnMut(Cached)) {
        let mut i = 0;
        while i < self.len {
            if now_ns.saturating_sub(self.slots[i].freed_ns) >= decay_ns {
                out(self.remove(i));
            } else {
                i += 1;
            }
        }
    }
}

impl HugeHead {
    /// The link (a list head or a descriptor's `next`) that points to the descriptor
    /// of the live allocation at `addr`, if there is one.
    fn find(&mut self, addr: usize) -> Option<*mut *mut HugeDesc> {
        let mut link: *mut *mut HugeDesc = &mut self.0[bucket(addr)];
        // SAFETY: the links are a list head and `next` fields of live descriptors,
        // reached under the lock that guards `self`.
        unsafe {
            while !(*link).is_null() {
                if (**link).addr == addr {
                    return Some(link);
                }
                link = &mut (**link).next;
            }
        }
        None
    }

    /// Lists the descriptor `d` (its `addr` set) at the head of its address's list.
    ///
    /// # Safety
    /// `d` is a live descriptor on no list.
    unsafe fn push(&mut self, d: *mut HugeDesc) {
        // SAFETY: the caller's contract.
        let list = &mut self.0[bucket(unsafe { (*d).addr })];
        // SAFETY: as above.
        unsafe { (*d).next = *list };
        *list = d;
    }
}
// SAFETY: the list is only reached under its lock; descriptors are heap objects that
// live until removed.
unsafe impl Send for HugeHead {}

/// What the list needs from its owner: memory for descriptors (small objects of the
/// owner's kmalloc, so that this metadata comes from kmem's own pages).
pub(crate) trait HugeOwner {
    /// A descriptor's memory: [`DESC_SIZE`] bytes, aligned for a pointer.
    fn desc_alloc(&self) -> Option<NonNull<u8>>;

    /// Gives back a descriptor from [`HugeOwner::desc_alloc`].
    ///
    /// # Safety
    /// `d` came from `desc_alloc` and nobody uses it any more.
    unsafe fn desc_free(&self, d: NonNull<u8>);

    /// Takes `bytes` of the owner's bound (`KMEM_MAX`) for a mapping about to be made
    /// or grown: false if there is no room (the mapping is not made).
    fn reserve(&self, bytes: usize) -> bool;

    /// Gives back `bytes` taken by [`HugeOwner::reserve`] (a mapping unmapped or
    /// shrunk; a freed one that stays cached keeps them).
    fn release(&self, bytes: usize);
}

/// Unmaps a mapping out of use (freed, or out of the cache) and gives its bytes of the
/// owner's bound back.
///
/// # Safety
/// Nobody uses the mapping `c` describes, and nothing will.
unsafe fn unmap_cached(owner: &impl HugeOwner, c: Cached) {
    // SAFETY: the caller's contract.
    unsafe { os::unmap(c.addr, c.len) };
    owner.release(c.len);
}

/// A fresh anonymous mapping of `len` bytes aligned to `align` (the slop trimmed).
/// With `KMEM_THP` on, a mapping of 2 MiB or more starts on a 2 MiB boundary and is
/// advised huge pages ([`os::advise_huge`]), as the span's sections are: a huge
/// page then backs each whole 2 MiB of it, and a buffer of many megabytes costs a
/// page fault per 2 MiB instead of per 4 KiB.
fn map_aligned(len: usize, align: usize) -> Option<usize> {
    let huge = os::thp() && len >= os::HPAGE_SIZE;
    let align = if huge {
        align.max(os::HPAGE_SIZE)
    } else {
        align
    };
    let addr = map_trimmed(len, align)?;
    if huge {
        // SAFETY: the mapping just made, ours.
        unsafe { os::advise_huge(addr, len) };
    }
    Some(addr)
}

/// A fresh anonymous mapping of `len` bytes (whole kernel pages) aligned to `align`
/// (the slop trimmed).
fn map_trimmed(len: usize, align: usize) -> Option<usize> {
    let extra = if align > os::page_size() { align } else { 0 };
    let map_len = len.checked_add(extra)?;
    let start = os::map_anonymous(map_len)?;
    let a = align.max(PAGE_SIZE);
    let addr = (start + a - 1) & !(a - 1);
    // SAFETY: both ranges are unaligned slop of the mapping made just above.
    unsafe {
        if addr > start {
            os::unmap(start, addr - start);
        }
        let end = start + map_len;
        if end > addr + len {
            os::unmap(addr + len, end - (addr + len));
        }
    }
    Some(addr)
}

/// A cached mapping `c` taken for a request of `len` bytes: when it holds more than
/// twice what the request needs, only its head is taken and its tail goes back to the
/// cache (into `slots`, where the slot `c` left is free), freed when `c` was. Taken
/// whole, a 256 MiB mapping cached would make an 8 MiB request hold 256 MiB resident,
/// report it as usable, and charge all of it to the request's memory cgroup (refused
/// at a limit the request fits). The head keeps whole huge pages under `KMEM_THP`.
fn split_cached(slots: &mut CacheSlots, c: Cached, len: usize) -> Cached {
    let keep = if os::thp() && len >= os::HPAGE_SIZE {
        len.next_multiple_of(os::HPAGE_SIZE)
    } else {
        len
    };
    if c.len <= keep.saturating_mul(2) {
        return c;
    }
    if slots.push(c.tail(keep)) {
        return Cached { len: keep, ..c };
    }
    c
}

/// Takes at least `len` bytes at `addr` out of the cache: the head of the cached
/// mapping that starts at `addr` and holds `len` bytes (the rest stays cached, freed
/// when it was); returns the bytes taken, `len` or, under `KMEM_THP`, up to the next
/// 2 MiB boundary, so that the rest starts on a whole huge page as [`split_cached`]
/// keeps it. `None` (nothing taken) when no cached mapping starts there or it is too
/// short. A growing buffer's mapping meets its own tail this way: a request served
/// from a larger cached mapping took its head ([`split_cached`]), and `mremap` could
/// not grow it in place over the tail; it moved it and faulted every page of the
/// growth in fresh (a `Vec` doubled to 64 MiB over a cached mapping: 14,000 faults).
fn take_adjacent(slots: &mut CacheSlots, addr: usize, len: usize) -> Option<usize> {
    let i = slots
        .as_slice()
        .iter()
        .position(|c| c.addr == addr && c.len >= len)?;
    let c = slots.as_slice()[i];
    let mut take = len;
    if os::thp() {
        let to_boundary = (addr + len).next_multiple_of(os::HPAGE_SIZE) - addr;
        take = to_boundary.min(c.len);
    }
    if c.len > take {
        slots.replace(i, c.tail(take));
    } else {
        slots.remove(i);
    }
    Some(take)
}

/// `n` rounded up to whole pages of `page` bytes (a power of two).
fn page_round(n: usize, page: usize) -> Option<usize> {
    n.checked_add(page - 1).map(|v| v & !(page - 1))
}

impl HugeList {
    pub(crate) const fn new() -> Self {
        Self {
            head: SpinLock::new(HugeHead([ptr::null_mut(); BUCKETS], CacheSlots::new())),
            count: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            cached: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            peak_ns: AtomicU64::new(0),
            limit: AtomicUsize::new(CACHE_MAX_BYTES),
            page: AtomicUsize::new(0),
        }
    }

    /// The granule mappings are sized in (see [`HugeList::page`]'s field).
    fn page(&self) -> usize {
        match self.page.load(Ordering::Relaxed) {
            0 => {
                let page = os::page_size();
                self.page.store(page, Ordering::Relaxed);
                page
            }
            page => page,
        }
    }

    /// Sizes mappings in pages of `page` bytes, as on a kernel with pages that large.
    #[cfg(test)]
    fn set_page_size(&self, page: usize) {
        self.page.store(page, Ordering::Relaxed);
    }

    /// Takes the list lock for the fork handlers, until they release every such lock
    /// at once (`kmem_core::sync::release_fork_locks`).
    pub(crate) fn lock_for_fork(&self) {
        self.head.lock_forever();
    }

    /// Live huge allocations and their mapped bytes.
    pub(crate) fn totals(&self) -> (usize, usize) {
        (
            self.count.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    /// Bytes of freed mappings kept mapped for reuse (the cache slots); no lock.
    pub(crate) fn cached_bytes(&self) -> usize {
        self.cached.load(Ordering::Relaxed)
    }

    /// Publishes the cache slots' total (called with the lock held, after a change).
    fn note_cached(&self, head: &HugeHead) {
        self.cached.store(head.1.bytes, Ordering::Relaxed);
    }

    /// Maps `size` bytes aligned to `align`: a cached mapping that fits, else a fresh
    /// one. `zero` asks for zeroed memory (fresh mappings are; a reused one is cleared).
    /// `owner` provides the descriptor. Null when memory cannot be had.
    pub(crate) fn alloc(
        &self,
        owner: &impl HugeOwner,
        size: usize,
        align: usize,
        zero: bool,
        now_ns: u64,
        decay_ns: u64,
    ) -> *mut u8 {
        let Some(len) = page_round(size.max(1), self.page()) else {
            return ptr::null_mut();
        };
        let Some(d) = owner.desc_alloc() else {
            return ptr::null_mut();
        };
        // A cached mapping holds its bytes of the bound already; a fresh one takes
        // them first (none is made without room).
        let (addr, len) = match self.take_cached(owner, len, align, now_ns, decay_ns) {
            Some((addr, cached_len)) => {
                if zero {
                    // SAFETY: a mapping we own, `cached_len` bytes.
                    unsafe { ptr::write_bytes(addr as *mut u8, 0, len) };
                }
                (addr, cached_len)
            }
            None => {
                if !owner.reserve(len) {
                    // SAFETY: `d` is a fresh descriptor nobody saw.
                    unsafe { owner.desc_free(d) };
                    return ptr::null_mut();
                }
                match map_aligned(len, align) {
                    Some(addr) => (addr, len),
                    None => return self.alloc_failed(owner, d, len),
                }
            }
        };
        let d = d.as_ptr() as *mut HugeDesc;
        // SAFETY: `d` is a fresh heap object big and aligned enough for a HugeDesc.
        unsafe {
            d.write(HugeDesc {
                addr,
                len,
                next: ptr::null_mut(),
                objcg: 0,
                zoned: false,
            })
        };
        // SAFETY: written just above, on no list.
        unsafe { self.head.lock().push(d) };
        self.count.fetch_add(1, Ordering::Relaxed);
        let live = self.bytes.fetch_add(len, Ordering::Relaxed) + len;
        self.peak.fetch_max(live, Ordering::Relaxed);
        addr as *mut u8
    }

    /// [`HugeList::alloc`] without a mapping: the descriptor and the `len` bytes of
    /// the bound it took go back.
    #[cold]
    fn alloc_failed(&self, owner: &impl HugeOwner, d: NonNull<u8>, len: usize) -> *mut u8 {
        owner.release(len);
        // SAFETY: `d` is a fresh descriptor nobody saw.
        unsafe { owner.desc_free(d) };
        ptr::null_mut()
    }

    /// Most bytes the cache may hold now: the peak of live huge bytes since the decay
    /// interval began, at least [`CACHE_MIN_BYTES`], at most [`CACHE_MAX_BYTES`]
    /// (at most [`CACHE_MIN_BYTES`] in a bounded heap, where cached mappings hold
    /// their bytes of the bound until they are unmapped).
    pub(crate) fn cache_bound(&self) -> usize {
        self.peak
            .load(Ordering::Relaxed)
            .clamp(CACHE_MIN_BYTES, self.limit.load(Ordering::Relaxed))
    }

    /// Whether the heap has a bound (`KMEM_MAX`): the cache then keeps at most
    /// [`CACHE_MIN_BYTES`].
    pub(crate) fn set_bounded(&self, bounded: bool) {
        let limit = if bounded {
            CACHE_MIN_BYTES
        } else {
            CACHE_MAX_BYTES
        };
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// A cached mapping for `len` bytes aligned to `align`, after unmapping those
    /// older than the decay: the smallest that holds `len` (taken whole, its pages
    /// resident, unless it holds more than twice `len`: then its tail stays cached,
    /// [`split_cached`]), else the largest one grown to `len` with
    /// `mremap` (its resident pages move along; only the new tail faults). Returns
    /// (address, length).
    fn take_cached(
        &self,
        owner: &impl HugeOwner,
        len: usize,
        align: usize,
        now_ns: u64,
        decay_ns: u64,
    ) -> Option<(usize, usize)> {
        let mut head = self.head.lock();
        head.1.remove_decayed(now_ns, decay_ns, |c| {
            // SAFETY: a cached mapping nobody uses, out of the cache.
            unsafe { unmap_cached(owner, c) }
        });
        let mut fit: Option<(usize, usize)> = None;
        let mut grow: Option<(usize, usize)> = None;
        for (i, &c) in head.1.as_slice().iter().enumerate() {
            if c.addr % align.max(PAGE_SIZE) != 0 {
                continue;
            }
            if c.len >= len {
                if fit.is_none_or(|(_, l)| l > c.len) {
                    fit = Some((i, c.len));
                }
            } else if grow.is_none_or(|(_, l)| l < c.len) {
                grow = Some((i, c.len));
            }
        }
        // Growing may move the mapping: only for page alignment.
        let grow = grow.filter(|_| align <= PAGE_SIZE);
        let taken = fit.or(grow).map(|(i, _)| {
            let c = head.1.remove(i);
            split_cached(&mut head.1, c, len)
        });
        self.note_cached(&head);
        drop(head);
        let c = taken?;
        if c.len >= len {
            return Some((c.addr, c.len));
        }
        // Grown: the growth takes its bytes of the bound first.
        if owner.reserve(len - c.len) {
            // SAFETY: a cached mapping nobody uses, now ours.
            if let Some(addr) = unsafe { os::remap(c.addr, c.len, len) } {
                return Some((addr, len));
            }
            owner.release(len - c.len);
        }
        // SAFETY: taken off the cache above, so nobody uses it; a failed mremap left
        // it where it was, whole.
        unsafe { unmap_cached(owner, c) };
        None
    }

    /// Unmaps the cached mappings unused for `decay_ns` (run after each reporting
    /// pass of the page allocator, so both kinds of free memory age alike). Skipped
    /// when the list's lock is busy (the next pass ages them): a pass may run under
    /// kmem-core's locks (a free under the slab layer's cache list lock), and the fork
    /// handlers take this lock before those, so waiting here could deadlock against a
    /// fork. A decay interval after the last one began, the peak starts again from
    /// the bytes live now.
    pub(crate) fn age(&self, owner: &impl HugeOwner, now_ns: u64, decay_ns: u64) {
        let Some(mut head) = self.head.try_lock() else {
            return;
        };
        if now_ns.saturating_sub(self.peak_ns.load(Ordering::Relaxed)) >= decay_ns {
            self.peak_ns.store(now_ns, Ordering::Relaxed);
            self.peak
                .store(self.bytes.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        head.1.remove_decayed(now_ns, decay_ns, |c| {
            // SAFETY: a cached mapping nobody uses, out of the cache.
            unsafe { unmap_cached(owner, c) }
        });
        self.note_cached(&head);
    }

    /// Unmaps every cached mapping (`malloc_trim`); returns the bytes given back.
    pub(crate) fn trim(&self, owner: &impl HugeOwner) -> usize {
        let mut head = self.head.lock();
        let bytes = head.1.bytes;
        while head.1.len > 0 {
            let c = head.1.remove(0);
            // SAFETY: a cached mapping nobody uses, out of the cache.
            unsafe { unmap_cached(owner, c) };
        }
        self.note_cached(&head);
        bytes
    }

    /// Records that the huge allocation at `p` is charged to `objcg` (its mapped size);
    /// returns that size, or `None` if `p` is not one.
    pub(crate) fn set_objcg(&self, p: *const u8, objcg: usize) -> Option<usize> {
        self.with_desc(p, |d| {
            d.objcg = objcg;
            d.len
        })
    }

    /// The mapped size of the huge allocation at `p`, if it is one.
    pub(crate) fn size_of(&self, p: *const u8) -> Option<usize> {
        self.with_desc(p, |d| d.len)
    }

    /// Records that the huge allocation at `p` is red-zoned (see `HugeDesc::zoned`).
    pub(crate) fn set_zoned(&self, p: *const u8) {
        self.with_desc(p, |d| d.zoned = true);
    }

    /// Whether the huge allocation at `p` is red-zoned; `None` if it is not one.
    pub(crate) fn zoned(&self, p: *const u8) -> Option<bool> {
        self.with_desc(p, |d| d.zoned)
    }

    /// `f` of the descriptor of the live huge allocation at `p`, under the list lock.
    fn with_desc<R>(&self, p: *const u8, f: impl FnOnce(&mut HugeDesc) -> R) -> Option<R> {
        let mut head = self.head.lock();
        let link = head.find(p as usize)?;
        // SAFETY: `find` returned the link to a live descriptor, held under the lock.
        Some(f(unsafe { &mut **link }))
    }

    /// Frees the huge allocation at `p`: its mapping is kept for reuse (see the
    /// module doc) or unmapped. Returns its descriptor's memory (for the caller to
    /// free), or `None` if `p` is not one.
    ///
    /// # Safety
    /// If `p` is a huge allocation, the caller gives it up.
    pub(crate) unsafe fn free(
        &self,
        owner: &impl HugeOwner,
        p: *mut u8,
        now_ns: u64,
    ) -> Option<NonNull<u8>> {
        let d = self.unlink(p)?;
        // SAFETY: unlinked, so ours alone.
        let desc = unsafe { &*d };
        self.count.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(desc.len, Ordering::Relaxed);
        // A cached mapping keeps its bytes of the bound; each one unmapped gives them
        // back (`unmap_cached`).
        let mut evict = Some(Cached {
            addr: desc.addr,
            len: desc.len,
            freed_ns: now_ns,
        });
        let mut older = [Cached::NONE; CACHE_SLOTS];
        let mut n = 0;
        let bound = self.cache_bound();
        if desc.len <= bound {
            let mut head = self.head.lock();
            // The newest mapping stays; the oldest go until it fits the slots and
            // the byte bound.
            while head.1.is_full() || head.1.bytes + desc.len > bound {
                let (oldest, _) = head
                    .1
                    .as_slice()
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, c)| c.freed_ns)
                    .expect("a slot is taken");
                older[n] = head.1.remove(oldest);
                n += 1;
            }
            let pushed = head.1.push(evict.take().expect("not yet cached"));
            debug_assert!(pushed, "a slot was made free above");
            self.note_cached(&head);
        }
        for &c in &older[..n] {
            // SAFETY: a cached mapping nobody uses, out of the cache.
            unsafe { unmap_cached(owner, c) };
        }
        if let Some(c) = evict {
            // SAFETY: the mapping belongs to the allocation the caller gives up (or
            // is an older cached one nobody uses).
            unsafe { unmap_cached(owner, c) };
        }
        NonNull::new(d as *mut u8)
    }

    fn unlink(&self, p: *mut u8) -> Option<*mut HugeDesc> {
        let mut head = self.head.lock();
        let link = head.find(p as usize)?;
        // SAFETY: `find` returned the link to a live descriptor, under the lock; it
        // now points past it.
        unsafe {
            let d = *link;
            *link = (*d).next;
            Some(d)
        }
    }

    /// Resizes the huge allocation at `p` to `new_size` bytes. A growth first takes
    /// the cached mapping that starts where `p`'s ends, when it holds the growth
    /// ([`take_adjacent`]: no system call, its pages resident); else `mremap`, which
    /// may move it (keeping page alignment; alignments above a page are not kept by a
    /// move, so those callers must not come here). Returns the new address; null when
    /// the owner's bound has no room for the growth (the old allocation is intact);
    /// `None` if `p` is not a huge allocation, is charged to a memory cgroup, or
    /// `mremap` refused (the caller moves those: allocates, copies, frees).
    ///
    /// # Safety
    /// If `p` is a huge allocation, the caller owns it.
    pub(crate) unsafe fn remap(
        &self,
        owner: &impl HugeOwner,
        p: *mut u8,
        new_size: usize,
    ) -> Option<*mut u8> {
        let new_len = page_round(new_size.max(1), self.page())?;
        let mut head = self.head.lock();
        let link = head.find(p as usize)?;
        // SAFETY: `find` returned the link to a live descriptor, under the lock. (The
        // link itself is not kept: the uses of `head` below reborrow the lists.)
        let d = unsafe { *link };
        // SAFETY: as above; the lock is held until this function returns.
        let desc = unsafe { &mut *d };
        if desc.objcg != 0 {
            // Charged: the caller moves it (charging the new size first).
            return None;
        }
        // Growth takes the bound's room first; a shrink gives it back after.
        let grow = new_len.saturating_sub(desc.len);
        let taken = (grow > 0)
            .then(|| take_adjacent(&mut head.1, desc.addr + desc.len, grow))
            .flatten();
        if let Some(taken) = taken {
            // The cached bytes held their room in the bound already.
            self.note_cached(&head);
            desc.len += taken;
            let live = self.bytes.fetch_add(taken, Ordering::Relaxed) + taken;
            self.peak.fetch_max(live, Ordering::Relaxed);
            return Some(p);
        }
        if grow > 0 && !owner.reserve(grow) {
            return Some(ptr::null_mut());
        }
        // SAFETY: the caller owns the mapping; only the new address is used after a
        // success. (A range that grew by `take_adjacent` across two of the kernel's
        // mappings, two `mmap`s the kernel did not merge, shrinks; a growth of it is
        // refused, and the caller moves it.)
        let Some(q) = (unsafe { os::remap(desc.addr, desc.len, new_len) }) else {
            owner.release(grow);
            return None;
        };
        owner.release(desc.len.saturating_sub(new_len));
        let live = self.bytes.fetch_add(new_len, Ordering::Relaxed) + new_len;
        self.peak.fetch_max(live, Ordering::Relaxed);
        self.bytes.fetch_sub(desc.len, Ordering::Relaxed);
        desc.len = new_len;
        if q != desc.addr {
            // Moved: listed again under its new address.
            let link = head.find(desc.addr).expect("listed above, under the lock");
            // SAFETY: `find` returned the link to `d` (nothing changed the lists
            // since); `d` leaves its list, then joins the new address's, under the
            // lock.
            unsafe {
                *link = desc.next;
                desc.addr = q;
                head.push(d);
            }
        }
        Some(q as *mut u8)
    }
}

/// The charge of a descriptor returned by [`HugeList::free`]: (objcg address or 0,
/// bytes).
///
/// # Safety
/// `d` is a descriptor returned by `free`, not yet freed.
pub(crate) unsafe fn desc_charge(d: NonNull<u8>) -> (usize, usize) {
    // SAFETY: caller: a descriptor, unlinked and intact.
    let desc = unsafe { &*(d.as_ptr() as *const HugeDesc) };
    (desc.objcg, desc.len)
}

/// GFP flags for a descriptor.
pub(crate) const DESC_GFP: Gfp = Gfp::NOWARN;
/// Bytes a descriptor takes.
pub(crate) const DESC_SIZE: usize = std::mem::size_of::<HugeDesc>();

#[cfg(test)]
mod tests;
