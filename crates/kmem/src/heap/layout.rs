//! Allocation by [`Layout`] on the process heap — what [`crate::KmemAlloc`] forwards to
//! (`alloc`, `alloc_zeroed`, `dealloc`, `realloc`, `usable_size`).
//!
//! How a [`Layout`] is served:
//! | size / alignment                         | from                                   |
//! |------------------------------------------|----------------------------------------|
//! | ≤ 1 MiB, alignment ≤ 4 KiB               | a plain kmalloc cache (four classes per doubling; see `kmem_core::kmalloc`): size rounded up to the alignment, so the class's natural alignment covers it (kmalloc-N for a power of two N is N-aligned; 96 is 32-, 320 is 64-aligned, up to a page) |
//! | ≤ 4 MiB, alignment ≤ 4 MiB               | a compound page block of the buddy allocator, naturally aligned to its size |
//! | larger, or aligned beyond 4 MiB          | a direct mapping (the `huge` module; so are buffers `realloc` moved past 1 MiB) |
//!
//! `realloc` is the `realloc` module's. `alloc_zeroed` skips clearing page blocks whose memory is fresh from the OS (their
//! pages were never touched or were given back: they read as zero).
//!
//! No lock of its own: the kmalloc and page paths follow the CPU area's rules (see
//! `cpu`), huge mappings the huge list's lock, taken inside `crate::huge`.

use super::percpu::{rseq_area_of, tagged_rseq_area, Pushed, RseqArea};
use super::thread::{active_objcg, charged_cpu, fast_cpu, inline_area, inline_area_of, rseq_tag};
use super::{heap, Heap, HEAP};
use crate::platform::fast_tls;
use kmem_core::kmalloc::{KMALLOC_MAX_CACHE_SIZE, KMALLOC_MAX_SIZE};
use kmem_core::page::get_order;
use kmem_core::slab::ObjectLookup;
use kmem_core::{Gfp, Platform, MAX_ORDER, PAGE_SIZE};
use std::alloc::Layout;
use std::ptr::{self, NonNull};

/// kmalloc's fast path alone for `size` bytes aligned to 8 (any size): the top of
/// the thread's main sheaf of the class, or null for the front end's slow half and
/// [`alloc_layout`] to do the rest (the front end keeps the fast path free of the
/// call's register saves that way). A thread without an area of its own reads the
/// zero area, whose sheaves are empty.
#[inline(always)]
pub fn alloc_small_fast(size: usize) -> *mut u8 {
    match HEAP.kmem.kmalloc_fast(inline_area(), size, Gfp::KERNEL) {
        Some(p) => p.as_ptr(),
        None => core::ptr::null_mut(),
    }
}

/// C's `malloc(size)` fast path alone, `size <= SMALL_FAST_MAX`: as
/// [`alloc_small_fast`], from the class of `kmem_core::kmalloc::malloc_class_size`
/// (16-aligned above 8 bytes, as `malloc` must be).
#[inline(always)]
pub fn malloc_small_fast(size: usize) -> *mut u8 {
    malloc_small_fast_or_tag(size).0
}

/// [`malloc_small_fast`], and when it finds nothing, whether the fast word it read
/// is per-CPU rseq mode's tag (for [`malloc_rseq_small`]), from the same load.
#[inline(always)]
pub fn malloc_small_fast_or_tag(size: usize) -> (*mut u8, bool) {
    let w = fast_tls::get();
    // SAFETY: as in `thread::inline_area`: the fast word is an area this thread owns
    // or one of the zero area's two addresses.
    let area = unsafe { kmem_core::percpu::InlineArea::from_word(w) };
    match HEAP.kmem.malloc_fast(area, size) {
        Some(p) => (p.as_ptr(), false),
        None => (core::ptr::null_mut(), w == rseq_tag()),
    }
}

/// C's `malloc(size)` in per-CPU rseq mode, for a front end whose
/// [`malloc_small_fast`] missed: when the thread's fast word is `rseq_tag()` and `size
/// <= SMALL_FAST_MAX`, one restartable pop from the CPU's main sheaf of the class of
/// `kmem_core::kmalloc::malloc_class_size`; else null.
#[inline(always)]
pub fn malloc_rseq_small(size: usize) -> *mut u8 {
    let Some(rseq) = tagged_rseq_area() else {
        return ptr::null_mut();
    };
    if size > kmem_core::kmalloc::SMALL_FAST_MAX {
        return ptr::null_mut();
    }
    match HEAP.rseq_malloc_small(rseq, size) {
        Some(p) => p.as_ptr(),
        None => ptr::null_mut(),
    }
}

/// The slow half of C's `malloc(size)` (`size <= MEDIUM_FAST_MAX`) past its pops,
/// before the heap's layers, in the class of `kmem_core::kmalloc::malloc_class_size`:
/// per-CPU rseq mode's restartable pop (sizes up to `SMALL_FAST_MAX`), or, on a thread
/// with its own area, the class's sheaf slow path straight away (a swap of its two
/// sheaves, a barn exchange or a refill: `Kmem::malloc_sheaf_slow`), or, on a thread
/// with an active memory cgroup, the pop from its objcg sheaves (the accounted
/// classes are the kernel's, all 16-aligned above 8 bytes). Null: take
/// [`alloc_layout`], which does everything else (and tries these again; they refuse
/// fast).
///
/// Measured with `icount.sh`: a sheaf swap through the layers (`alloc_layout`'s
/// second fast attempt, the rseq test, the layout checks) took about 180
/// instructions; `sizes` swaps once every 18 allocations.
#[inline(always)]
pub fn malloc_small_slow(size: usize) -> *mut u8 {
    let w = fast_tls::get();
    if w == rseq_tag() {
        return malloc_rseq_small(size);
    }
    let Some(c) = fast_cpu() else {
        // Maybe an attached thread with an active memory cgroup (its fast word names
        // the zero area or its charged area): an object kept charged in its kept
        // sheaves (the class of `size`, where the inline pop read the plain class's
        // line: kmalloc-cg-32 for malloc(24)).
        // Not while a KFENCE sample is armed: the layers take it, charged.
        if let (Some((c, cg)), false) = (charged_cpu(), crate::kfence::wants_next()) {
            let m = HEAP.kmem.memcg();
            if let Some(p) = m.kmalloc_objcg_fast(c, size, Gfp::KERNEL, cg) {
                return p.as_ptr();
            }
        }
        return ptr::null_mut();
    };
    if crate::kfence::armed() {
        return ptr::null_mut();
    }
    match HEAP.kmem.malloc_sheaf_slow(c, size) {
        Some(p) => p.as_ptr(),
        None => ptr::null_mut(),
    }
}

/// Per-CPU rseq mode's free fast path, for a front end whose [`dealloc_fast`]
/// refused: when the thread's fast word is `rseq_tag()`, one restartable push of a
/// plain slab object onto the CPU's spare sheaf. `Some(true)`: done; `Some(false)`: a
/// double free on the sheaf's top, reported and not done (a front end treats it as
/// any refused free); `None` leaves `p` untouched, for [`dealloc_other`].
///
/// # Safety
/// As [`Heap::dealloc`] when it returns `Some(true)`.
#[inline(always)]
pub unsafe fn dealloc_rseq_fast(p: *mut u8) -> Option<bool> {
    let rseq = tagged_rseq_area()?;
    // SAFETY: the caller's contract (as `Heap::dealloc`): `p` is given up, and the
    // push takes it only when it starts an object of ours.
    match unsafe { HEAP.rseq_free_fast(rseq, p) } {
        Pushed::Done => Some(true),
        Pushed::AtHead => Some(HEAP.rseq_double_free_at_top(p)),
        Pushed::No => None,
    }
}

/// [`Heap::alloc`] (or, `zeroed`, [`Heap::alloc_zeroed`]) for the allocator front
/// ends ([`crate::KmemAlloc`], `malloc`): a small layout is one pop from the kmalloc
/// cache's main sheaf in the area the thread's fast word names, without the heap's
/// READY test or a test of the word (a thread has an area only once the heap is
/// ready; without one it reads the zero area, whose sheaves are empty). When that pop
/// misses, per-CPU rseq mode's restartable pop comes next, inline, on the fast word
/// the first one loaded (the word is the rseq tag there: the zero area's, so the
/// thread-mode pop missed at its first compare); everything else is out of line
/// (`alloc_layout_slow`: the sheaf slow path, then [`heap`]).
///
/// The rseq test after the thread-mode pop, not before it as in `Heap::kmalloc`: there
/// it costs thread mode's hit path nothing (a `Box` of 32 bytes made and dropped in a
/// loop: 1.7 instructions more a pair, from the registers the miss path keeps), and
/// per-CPU rseq mode's pair went from 5.9–6.1 to 3.8–3.9 ns (`bench percpu`
/// global_pair: 1.55x thread mode's time instead of 2.4x) once it stopped calling two
/// functions deep, and reading the word again, to reach the sequence. With the test
/// first the rseq pair ran 3.4 ns (1.35x), but thread mode's 4 instructions more a
/// pair made that `Box` loop 3–4% slower, against 1% (BENCHMARKS.md, "GlobalAlloc's
/// rseq pop inline").
///
/// A zeroed layout (`calloc`, `GlobalAlloc::alloc_zeroed`) takes the same pops and
/// clears the `size` bytes asked for (`zeroed` is a constant at every call site, so
/// the test costs the plain path nothing). Through the layers it cost about 190
/// instructions more than a plain allocation (`calloc(1, 32)` + `free`: 243 against
/// `malloc`'s 54), where the pop and a `memset` are what it needs; the layers zero the
/// whole object (`post_alloc_init`), which neither contract asks for.
///
/// A layout aligned beyond 8 bytes (up to a page: `posix_memalign`, `aligned_alloc`,
/// C++'s aligned `new`, Rust's `u128`, SIMD and cache-padded types) pops from the class
/// of its size rounded up to the alignment, the class the layers would choose
/// (`Heap::alloc_aligned`): kmalloc's classes are aligned to the largest power of two
/// dividing their size, up to a page. Through the layers, `aligned_alloc(64, 64)` +
/// `free` took 155 instructions, a plain pair 54.
#[inline(always)]
pub fn alloc_layout(layout: Layout, zeroed: bool) -> *mut u8 {
    let w = fast_tls::get();
    if let Some(size) = class_size(layout) {
        // SAFETY: read just now, on this thread.
        let area = unsafe { inline_area_of(w) };
        if let Some(p) = HEAP.kmem.kmalloc_fast(area, size, Gfp::KERNEL) {
            return zero_if(p, layout.size(), zeroed);
        }
        if let Some(rseq) = rseq_area_of(w) {
            if let Some(p) = HEAP.rseq_alloc_small(rseq, size) {
                return zero_if(p, layout.size(), zeroed);
            }
            // Past the inline pop: the rest of per-CPU rseq mode's path, without
            // `alloc_layout_slow`'s second read of the word.
            return alloc_rseq(rseq, layout, size, zeroed);
        }
    }
    alloc_layout_slow(layout, zeroed)
}

/// The size whose kmalloc class serves `layout` on the fast paths: its size up to an
/// alignment of 8 (every class has that), else its size rounded up to a multiple of
/// the alignment, as the layers round it, for alignments up to a page; `None` above.
#[inline(always)]
fn class_size(layout: Layout) -> Option<usize> {
    let (size, align) = (layout.size(), layout.align());
    if align <= 8 {
        return Some(size);
    }
    if align > PAGE_SIZE {
        return None;
    }
    aligned_class_size(size, align)
}

/// The size whose kmalloc class serves `size` bytes aligned to `align` (a power of
/// two up to a page): the size rounded up to a multiple of the alignment, at least
/// the alignment, since a class is aligned to the largest power of two dividing its
/// size (up to a page). `None` on overflow. One rule for the fast paths
/// ([`class_size`]) and the layers (`Heap::alloc_aligned`), so both pick one class.
#[inline(always)]
fn aligned_class_size(size: usize, align: usize) -> Option<usize> {
    debug_assert!(align.is_power_of_two());
    Some(size.max(align).checked_add(align - 1)? & !(align - 1))
}

/// `p` (a new object of at least `size` bytes, the caller's), its first `size` bytes
/// cleared when `zeroed`.
#[inline(always)]
fn zero_if(p: NonNull<u8>, size: usize, zeroed: bool) -> *mut u8 {
    if zeroed {
        // SAFETY: the caller's new object, at least `size` bytes long.
        unsafe { ptr::write_bytes(p.as_ptr(), 0, size) };
    }
    p.as_ptr()
}

/// [`alloc_layout`] in per-CPU rseq mode: a pop from the CPU's sheaf in a restartable
/// sequence, else the regular path.
#[inline(never)]
fn alloc_rseq(rseq: RseqArea, layout: Layout, size: usize, zeroed: bool) -> *mut u8 {
    match HEAP.rseq_alloc_plain(rseq, size) {
        Some(p) => zero_if(p, layout.size(), zeroed),
        None => alloc_layout_rest(layout, zeroed),
    }
}

#[inline(never)]
fn alloc_layout_slow(layout: Layout, zeroed: bool) -> *mut u8 {
    if let Some(size) = class_size(layout) {
        if let Some(rseq) = tagged_rseq_area() {
            return alloc_rseq(rseq, layout, size, zeroed);
        }
    }
    alloc_layout_rest(layout, zeroed)
}

/// [`alloc_layout_slow`] past per-CPU rseq mode's pop.
fn alloc_layout_rest(layout: Layout, zeroed: bool) -> *mut u8 {
    if let Some(size) = class_size(layout) {
        if let Some(p) = alloc_sheaf_slow(size) {
            return zero_if(p, layout.size(), zeroed);
        }
    }
    let gfp = if zeroed { Gfp::ZERO } else { Gfp::KERNEL };
    if let Some((c, cg)) = charged_cpu() {
        // An attached thread with an active memory cgroup: an object kept charged to
        // its objcg in its area's objcg sheaves; not while a KFENCE sample is armed
        // (the heap's layers take it, charged).
        if layout.align() <= 8 && !crate::kfence::wants_next() {
            if let Some(p) = HEAP
                .kmem
                .memcg()
                .kmalloc_objcg_fast(c, layout.size(), gfp, cg)
            {
                return p.as_ptr();
            }
        }
    }
    heap().alloc_gfp(layout, gfp)
}

/// Past the fast path, before the heap's layers: on a thread with its fast word, the
/// sheaf slow path of the size's class straight away (`kmem_core::Kmem::
/// kmalloc_sheaf_slow`: a swap of the two sheaves, a barn exchange or a refill). Not
/// while a KFENCE sample is armed: the regular path takes it.
#[inline(always)]
pub(super) fn alloc_sheaf_slow(size: usize) -> Option<ptr::NonNull<u8>> {
    let c = fast_cpu()?;
    if crate::kfence::armed() {
        return None;
    }
    HEAP.kmem.kmalloc_sheaf_slow(c, size, Gfp::KERNEL)
}

/// [`Heap::dealloc`] for the allocator front ends: on a thread with its fast word, one
/// push onto the spare sheaf when `p` is a plain slab object (see
/// `kmem_core::slab::Slub::free_fast`); in per-CPU rseq mode, after that push misses
/// on the zero area, the restartable push, inline on the same word (as in
/// [`alloc_layout`]); everything else, reports included, out of line.
///
/// # Safety
/// As [`Heap::dealloc`].
#[inline(always)]
pub unsafe fn dealloc_ptr(p: *mut u8) -> bool {
    let w = fast_tls::get();
    // SAFETY: forwarded from the caller; `w` was read just now, on this thread.
    if unsafe { HEAP.kmem.kfree_fast(inline_area_of(w), p) } {
        return true;
    }
    if let Some(rseq) = rseq_area_of(w) {
        // SAFETY: the caller's contract (as `Heap::dealloc`), for the push and for
        // what follows it.
        return unsafe { dealloc_rseq_pushed(HEAP.rseq_free_fast(rseq, p), p) };
    }
    // SAFETY: forwarded from the caller.
    unsafe { dealloc_other(p) }
}

/// The fast path of [`dealloc_ptr`] alone: true when `p` went onto the thread's spare
/// sheaf; false leaves `p` untouched, for [`dealloc_other`]. A front end that calls
/// the two itself keeps the fast path free of the call's register saves (the other
/// becomes a tail call).
///
/// # Safety
/// As [`Heap::dealloc`] when it returns true.
#[inline(always)]
pub unsafe fn dealloc_fast(p: *mut u8) -> bool {
    // SAFETY: forwarded from the caller.
    unsafe { HEAP.kmem.kfree_fast(inline_area(), p) }
}

/// [`dealloc_fast`] for C's `free`, a called function: the `kmem_cache_cpu` addressed
/// without the register barrier (see `kmem_core::percpu::CpuArea::ptr_indexed`).
///
/// # Safety
/// As [`Heap::dealloc`] when it returns true.
#[inline(always)]
pub unsafe fn free_fast(p: *mut u8) -> bool {
    // SAFETY: forwarded from the caller.
    unsafe { HEAP.kmem.kfree_fast_indexed(inline_area(), p) }
}

/// Everything [`dealloc_fast`] leaves: per-CPU rseq mode, the slow paths, reports.
///
/// # Safety
/// As [`Heap::dealloc`].
#[inline(never)]
pub unsafe fn dealloc_other(p: *mut u8) -> bool {
    if let Some(rseq) = tagged_rseq_area() {
        // SAFETY: forwarded from the caller.
        return unsafe { dealloc_rseq(rseq, p) };
    }
    if let Some(c) = fast_cpu() {
        // The sheaf slow path straight away (a swap, a barn exchange or a flush)
        // for a plain slab object; everything else below.
        // SAFETY: forwarded from the caller.
        if let Some(done) = unsafe { HEAP.kmem.kfree_sheaf_slow(c, p) } {
            return done;
        }
        if HEAP.kmem.pages.in_span(p) {
            // A page block (or a bad pointer): past the sheaves it has just missed.
            // SAFETY: forwarded from the caller.
            return unsafe { HEAP.kfree_past_sheaves(c, p) };
        }
    } else if let Some((c, cg)) = charged_cpu() {
        // A thread with an active memory cgroup: an object charged to it may stay
        // charged in its area's kept sheaves (a full inbox of its class taken in
        // first); else the heap's layers, which try the slow half.
        // SAFETY: forwarded from the caller.
        return match unsafe { HEAP.kmem.memcg().kfree_objcg_fast(c, p, cg) } {
            Some(done) => done,
            // SAFETY: forwarded from the caller.
            None if HEAP.kmem.pages.in_span(p) => unsafe { HEAP.kfree_layers(p) },
            // SAFETY: forwarded from the caller.
            None => unsafe { dealloc_slow(p) },
        };
    }
    // SAFETY: forwarded from the caller.
    unsafe { dealloc_slow(p) }
}

/// [`dealloc_ptr`] in per-CPU rseq mode: a push onto the CPU's sheaf in a restartable
/// sequence, else the regular path.
///
/// # Safety
/// As [`Heap::dealloc`].
///
/// The push alone, then a tail call for the rest: with the rest inline (the CPU-slab
/// design's push, the slab lookup), the function saved three registers on every call.
#[inline(never)]
unsafe fn dealloc_rseq(rseq: RseqArea, p: *mut u8) -> bool {
    // SAFETY: the caller's contract (as `Heap::dealloc`), for the push and for what
    // follows it.
    unsafe { dealloc_rseq_pushed(HEAP.rseq_free_fast(rseq, p), p) }
}

/// What follows the rseq push of `p`: done; a double free on the sheaf's top,
/// reported where it was found (see [`Heap::rseq_double_free_at_top`]); or the rest.
///
/// # Safety
/// As [`Heap::dealloc`].
#[inline(always)]
unsafe fn dealloc_rseq_pushed(pushed: Pushed, p: *mut u8) -> bool {
    match pushed {
        Pushed::Done => true,
        Pushed::AtHead => HEAP.rseq_double_free_at_top(p),
        // SAFETY: forwarded from the caller.
        Pushed::No => unsafe { dealloc_rseq_rest(p) },
    }
}

/// [`dealloc_rseq`] past the sheaf push: the rest of `Heap::rseq_free_ptr`, else the
/// regular path.
///
/// # Safety
/// As [`Heap::dealloc`].
#[inline(never)]
unsafe fn dealloc_rseq_rest(p: *mut u8) -> bool {
    // SAFETY: forwarded from the caller.
    match unsafe { HEAP.rseq_free_ptr_slow(p) } {
        Some(done) => done,
        // SAFETY: forwarded from the caller.
        None => unsafe { dealloc_slow(p) },
    }
}

/// # Safety
/// As [`Heap::dealloc`].
#[inline(never)]
unsafe fn dealloc_slow(p: *mut u8) -> bool {
    // SAFETY: forwarded from the caller.
    unsafe { heap().dealloc(p) }
}

impl Heap {
    /// Allocates for `layout` (see the module table); null when memory runs out.
    #[inline]
    pub fn alloc(&self, layout: Layout) -> *mut u8 {
        self.alloc_gfp(layout, Gfp::KERNEL)
    }

    /// As [`Heap::alloc`], zeroed.
    #[inline]
    pub fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.alloc_gfp(layout, Gfp::ZERO)
    }

    #[inline]
    pub(crate) fn alloc_gfp(&self, layout: Layout, gfp: Gfp) -> *mut u8 {
        let size = layout.size();
        if layout.align() <= 8 && size <= KMALLOC_MAX_CACHE_SIZE {
            return match self.kmalloc(size, gfp) {
                Some(p) => p.as_ptr(),
                None => ptr::null_mut(),
            };
        }
        self.alloc_aligned(size, layout.align(), gfp)
    }

    #[cold]
    #[inline(never)]
    fn alloc_aligned(&self, size: usize, align: usize, gfp: Gfp) -> *mut u8 {
        let p = if align <= PAGE_SIZE {
            // Round up to the alignment: the class then has it naturally. Above the
            // classes, blocks are page-aligned: the size stays exact (a red-zoned block's
            // zone starts right after it).
            let sz = if size > KMALLOC_MAX_CACHE_SIZE {
                size
            } else {
                let Some(sz) = aligned_class_size(size, align) else {
                    return ptr::null_mut();
                };
                sz
            };
            if sz <= KMALLOC_MAX_SIZE {
                let p = self.kmalloc(sz, gfp).map(|p| p.as_ptr());
                if let (Some(p), true) = (p, sz != size && self.config().debug.any()) {
                    // slub_debug records the request, not the class it was rounded
                    // to for its alignment: the kmalloc red zone then starts where
                    // the caller's bytes end (`malloc(20)` is a 32-byte object of
                    // which 12 are red zone), and the usable size is the request.
                    // SAFETY: `p` was just allocated, and kmalloc's caches live as
                    // long as the heap.
                    if let Some(s) = unsafe { self.kmem.slub().cache_of(p) } {
                        // SAFETY: the object just allocated, ours; `cache_of` named
                        // its slab's cache.
                        unsafe { self.kmem.slub().set_orig_size(s, p as usize, size) };
                    }
                }
                p
            } else {
                None
            }
        } else {
            let order = get_order(size).max(get_order(align));
            if order <= MAX_ORDER {
                self.alloc_pages(gfp | Gfp::COMP, order)
                    .map(|page| self.page_address(page).as_ptr())
            } else {
                None
            }
        };
        match p {
            Some(p) => p,
            None if size > KMALLOC_MAX_SIZE || align > PAGE_SIZE << MAX_ORDER => {
                self.huge_alloc(size, align, gfp.contains(Gfp::ZERO))
            }
            None => ptr::null_mut(),
        }
    }

    fn huge_alloc(&self, size: usize, align: usize, zero: bool) -> *mut u8 {
        if self.zoned_blocks() {
            return self.huge_alloc_zoned(size, align, zero);
        }
        self.huge_alloc_raw(size, align, zero)
    }

    /// A huge mapping of `size` bytes, charged to the active memory cgroup if any.
    pub(super) fn huge_alloc_raw(&self, size: usize, align: usize, zero: bool) -> *mut u8 {
        super::live::tick(kmem_core::Platform::now_ns(self.kmem.pages.platform()));
        let now = self.kmem.pages.platform().now_ns();
        let decay = self.config().decay_ms.saturating_mul(1_000_000);
        // KMEM_MAX bounds the whole heap: the page allocator's memory and these
        // mappings share it (`HugeOwner::reserve`). At the bound, what the caches keep
        // goes back first — `malloc_trim`'s work: cached mappings unmapped, sheaves,
        // barns and empty slabs to the page allocator, wholly free sections offline —
        // as a bounded kernel shrinks its slabs before it fails an allocation; then
        // one more try, which may also borrow the free pages left.
        let mut p = self.huge.alloc(self, size, align, zero, now, decay);
        if p.is_null() && self.kmem.pages.max_pages() != 0 {
            self.trim_at_bound();
            p = self.huge.alloc(self, size, align, zero, now, decay);
        }
        if let (false, Some(cg)) = (p.is_null(), active_objcg()) {
            // Charge the mapping to the active group, or give it back.
            let addr = cg as *const _ as usize;
            let len = self.huge.set_objcg(p, addr).unwrap_or(0);
            if !self
                .kmem
                .memcg()
                .memcg_charge_external(self.cpu().get(), cg, len)
            {
                self.huge.set_objcg(p, 0);
                // SAFETY: the mapping made just above, nobody saw it.
                unsafe { self.dealloc_outside(p) };
                return ptr::null_mut();
            }
        }
        p
    }

    /// Frees what [`Heap::alloc`] (or kmalloc) handed out. A pointer that is none of
    /// this heap's allocations is reported on stderr and left alone.
    ///
    /// # Safety
    /// If `p` is one of this heap's allocations, the caller owns it and stops using it.
    /// Returns false when it refused (reported) the pointer.
    #[inline]
    pub unsafe fn dealloc(&self, p: *mut u8) -> bool {
        if self.kmem.pages.in_span(p) || p.is_null() {
            // SAFETY: forwarded from the caller.
            unsafe { self.kfree(p) }
        } else {
            // SAFETY: forwarded from the caller.
            unsafe { self.dealloc_outside(p) }
        }
    }

    /// Frees `p` when it lies outside the page allocator's span (a huge mapping).
    ///
    /// # Safety
    /// As [`Heap::dealloc`].
    #[cold]
    #[inline(never)]
    unsafe fn dealloc_outside(&self, p: *mut u8) -> bool {
        if crate::kfence::owns(p) {
            return self.kfence_free(p);
        }
        // SAFETY: the block the caller frees (this function's contract).
        if self.zoned_blocks() && !unsafe { self.zoned_free_check(p) } {
            // An overwritten red zone: reported, the mapping kept (quarantined).
            return true;
        }
        let now = self.kmem.pages.platform().now_ns();
        // SAFETY: forwarded from the caller.
        match unsafe { self.huge.free(self, p, now) } {
            Some(desc) => {
                // SAFETY: a descriptor `free` just returned.
                let (objcg, len) = unsafe { crate::huge::desc_charge(desc) };
                if objcg != 0 {
                    // SAFETY: a charged mapping's objcg lives while it is charged.
                    let cg = unsafe { &*(objcg as *const kmem_core::memcontrol::ObjCgroup) };
                    // SAFETY: `len` bytes were charged to it when the mapping was
                    // made (`huge_alloc`), and this free, which took the mapping's
                    // descriptor, is the one uncharge.
                    unsafe {
                        self.kmem
                            .memcg()
                            .memcg_uncharge_external(self.cpu().get(), cg, len)
                    };
                }
                // SAFETY: the descriptor came from `desc_alloc` (`huge_alloc`).
                unsafe { self.kfree(desc.as_ptr()) }
            }
            // Not ours at all: kfree reports it and frees nothing.
            // SAFETY: kfree of a foreign pointer only reports.
            None => unsafe { self.kfree(p) },
        }
    }

    /// How many bytes the allocation at `p` really has (`malloc_usable_size`): its
    /// class size, its pages, or its mapping; 0 if it is not one of ours.
    ///
    /// # Safety
    /// As [`Heap::ksize`]: `p` is null, an allocation the caller holds, or no address
    /// this heap handed out.
    pub unsafe fn usable_size(&self, p: *const u8) -> usize {
        // SAFETY: forwarded from the caller.
        unsafe { self.usable_size_checked(p) }.unwrap_or(0)
    }

    /// [`Heap::usable_size`], `None` when `p` is not the start of one of this heap's
    /// allocations. Under slub_debug with red zones or tracks a block answers with the
    /// size asked for, which is 0 for `malloc(0)`: only this tells such a block from
    /// a foreign pointer.
    ///
    /// # Safety
    /// As [`Heap::ksize`].
    pub unsafe fn usable_size_checked(&self, p: *const u8) -> Option<usize> {
        if crate::kfence::owns(p) {
            return crate::kfence::size_of(p);
        }
        // SAFETY: forwarded from the caller.
        if let Some(n) = unsafe { self.zoned_size(p) } {
            return Some(n);
        }
        if self.kmem.pages.in_span(p) {
            // SAFETY: `p` is null, the caller's live allocation, or not ours (this
            // function's contract): a slab found holds it, so its cache lives.
            return match unsafe { self.kmem.slub().lookup(p) } {
                ObjectLookup::Bad(_) => None,
                // SAFETY: forwarded from the caller.
                _ => Some(unsafe { self.kmem.ksize(p) }),
            };
        }
        self.huge.size_of(p)
    }
}
