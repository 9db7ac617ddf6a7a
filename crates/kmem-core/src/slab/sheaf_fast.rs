//! The inline fast paths on a CPU's sheaves: the pop and the push that the front
//! ends (`kmalloc`, `kmem_cache_alloc`, `kfree`, the Rust `GlobalAlloc`, C's `malloc`
//! and `free`) compile into their own code, and the page lookup a free starts with.
//! Everything they refuse goes to the slow paths in `sheaf.rs` and `sheaf_slow.rs`.
//!
//! How they address a CPU's `kmem_cache_cpu`: through the register barrier of
//! [`CpuArea::ptr`](crate::percpu::CpuArea::ptr) where the path is inlined into the
//! caller's loop, so a sheaf's top is loaded and stored as `[register + field]` and
//! the core hands each pop or push the top the last one stored without waiting for the
//! store to forward (memory renaming); folded into each access
//! ([`CpuArea::ptr_indexed`](crate::percpu::CpuArea::ptr_indexed)) in C's `malloc`
//! and `free`, called functions, where the call hides that wait and the barrier's
//! addition would be one instruction more.
//!
//! Owns no state. Locking: none; the owner of the CPU area runs them (see `sheaf.rs`,
//! "Who touches what"), and the zero area makes every one of them refuse.

use super::*;
use crate::gfp::Gfp;
use crate::percpu::InlineArea;
use crate::platform::Platform;
use core::ptr::NonNull;

/// kmalloc's fast path after its size table (`KmallocCaches::small_fast`): the top
/// object of the main sheaf of the `kmem_cache_cpu` at `cpu_offset` in `c`'s area
/// (none in the zero area, [`InlineArea::zero`]: its sheaves are all empty).
///
/// # Safety
/// `cpu_offset` is the `cpu_offset` of a cache whose fast path is
/// [`FastPath::Sheaf`], or [`crate::page::CPU_AREA_ZERO_LINE`] (empty sheaves: the
/// pop reads the count, finds none and writes nothing). Not an accounted kmalloc
/// cache's (one with an objcg sheaf class): the pop marks no slab, and the charged
/// take-in relies on every uncharged handout of those caches' objects marking its
/// slab ([`Slub::note_uncharged`]; the memory controller pops them with
/// `Slub::alloc_fast_charged`).
#[inline(always)]
pub unsafe fn sheaf_pop_at(c: InlineArea<'_>, cpu_offset: usize) -> Option<NonNull<u8>> {
    // SAFETY: the caller's contract.
    unsafe { sheaf_pop_in(c.area().ptr::<KmemCacheCpu>(cpu_offset)) }
}

/// [`sheaf_pop_at`] for a fast path compiled into a called function (C's `malloc`):
/// the `kmem_cache_cpu` addressed as `[area + cpu_offset + field]`, without the
/// register barrier (see [`crate::percpu::CpuArea::ptr_indexed`]).
///
/// # Safety
/// As [`sheaf_pop_at`].
#[inline(always)]
pub unsafe fn sheaf_pop_at_indexed(c: InlineArea<'_>, cpu_offset: usize) -> Option<NonNull<u8>> {
    // SAFETY: the caller's contract, as in `sheaf_pop_at`.
    unsafe { sheaf_pop_in(c.area().ptr_indexed::<KmemCacheCpu>(cpu_offset)) }
}

/// [`sheaf_pop_at`] for a cache's sheaf tag (`CacheConfig::inline_tag`): the
/// `kmem_cache_cpu` at [`state::sheaf_offset`]`(tag)`.
///
/// # Safety
/// `tag` is the `inline_tag` of a cache (its `cpu_offset` less the zero line's when
/// its fast path is [`FastPath::Sheaf`] and it has no objcg sheaf class, else 0: the
/// zero line), or, from the memory controller's charged pop, what it would be
/// without the class (`state::sheaf_tag_of`).
#[inline(always)]
unsafe fn sheaf_pop_tagged(c: InlineArea<'_>, tag: usize) -> Option<NonNull<u8>> {
    // SAFETY: the caller's contract: `sheaf_offset(tag)` is the cache's `cpu_offset`
    // or the zero line, a `KmemCacheCpu` in every area either way.
    unsafe { sheaf_pop_in(c.area().ptr_at::<KmemCacheCpu>(tag, state::sheaf_offset(0))) }
}

/// The pop of [`Slub::alloc_fast`] and [`Slub::alloc_fast_charged`] on the sheaves of
/// tag `tag`: none for a `__GFP_ZERO` request (the regular path zeroes).
///
/// # Safety
/// As [`sheaf_pop_tagged`].
#[inline(always)]
unsafe fn alloc_fast_tagged(c: InlineArea<'_>, tag: usize, gfp: Gfp) -> Option<NonNull<u8>> {
    if gfp.contains(Gfp::ZERO) {
        return None;
    }
    // SAFETY: the caller's contract.
    unsafe { sheaf_pop_tagged(c, tag) }
}

/// The pop of [`sheaf_pop_at`] on the `kmem_cache_cpu` at `cc`.
///
/// # Safety
/// `cc` points to a `kmem_cache_cpu` of an area the caller owns, or to the zero line
/// or a zero area's `kmem_cache_cpu` (empty sheaves).
#[inline(always)]
unsafe fn sheaf_pop_in(cc: *const KmemCacheCpu) -> Option<NonNull<u8>> {
    // SAFETY: the caller's contract.
    let cc = unsafe { &*cc };
    let obj = cc.sheaf_pop()?;
    // SAFETY: a sheaf slot below its count holds an object's address, never 0.
    Some(unsafe { NonNull::new_unchecked(obj as *mut u8) })
}

impl<'a, P: Platform> Slub<'a, P> {
    /// The whole fast path of an allocation from `s` for a front end that will take
    /// the regular path ([`Slub::alloc`]) when this says `None`: the pop from the main
    /// sheaf, nothing else (no zeroing — `__GFP_ZERO` goes the regular way — and no
    /// refill).
    /// Given the zero area ([`InlineArea::zero`]) it finds no object.
    #[inline(always)]
    pub fn alloc_fast<'c>(
        &self,
        c: impl Into<InlineArea<'c>>,
        s: &KmemCache,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        // SAFETY: `s`'s `inline_tag` gives its `cpu_offset` when its fast path is the
        // inline sheaf one (and it has no objcg sheaf class), else the zero line
        // (`CacheConfig::with_inline_tag`): either is `alloc_fast_tagged`'s offset.
        unsafe { alloc_fast_tagged(c.into(), s.config().inline_tag, gfp) }
    }

    /// [`Slub::alloc_fast`] for the memory controller's charged allocations: the pop
    /// from the main sheaf of any cache on the inline sheaf path, the accounted
    /// kmalloc caches included, whose `inline_tag` is the zero line's so that
    /// [`Slub::alloc_fast`] leaves their uncharged allocations to the regular path
    /// ([`Slub::note_uncharged`]).
    #[inline(always)]
    pub(crate) fn alloc_fast_charged(
        &self,
        c: crate::percpu::CpuRef<'_>,
        s: &KmemCache,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        // SAFETY: `sheaf_tag_of` is what `inline_tag` is for a cache without objcg
        // sheaves: the cache's `cpu_offset` less the zero line's when it runs the
        // inline sheaf path, else 0 (`sheaf_pop_tagged`'s contract).
        unsafe { alloc_fast_tagged(c.into(), state::sheaf_tag_of(s.config()) as usize, gfp) }
    }

    /// [`Slub::alloc_fast`] for a request that may ask for `__GFP_ZERO`: the same pop
    /// (then the spare's top when the main sheaf is empty), then the object initialised
    /// as the regular path initialises it ([`post_alloc_init`]: zeroed whole). For the front ends' out-of-line halves, so
    /// that `kzalloc`, `kcalloc` and zeroed `kmem_cache_alloc` pop from the sheaf
    /// instead of taking the layers, while the inline fast path keeps its one test.
    /// Given the zero area it finds no object.
    #[inline(always)]
    pub fn alloc_fast_init<'c>(
        &self,
        c: impl Into<InlineArea<'c>>,
        s: &KmemCache,
        gfp: Gfp,
    ) -> Option<NonNull<u8>> {
        let off = state::sheaf_offset(s.config().inline_tag);
        // SAFETY: as in `alloc_fast`. Main, then spare (`sheaf_pop_either_at`): the
        // object is cleared whole after the pop, which dwarfs the second test, and a
        // zeroed medium block (`kzalloc(16384)` in a loop) then settles on the spare as
        // `kmalloc`'s does instead of swapping every block or two.
        let p = unsafe { super::sheaf_pop_either_at(c.into(), off) }?;
        // SAFETY: a new object of `s`, the caller's now.
        unsafe { post_alloc_init(s, p, gfp) };
        Some(p)
    }

    /// The whole fast path of a free for a front end that takes the regular path
    /// (`kfree`) when this returns false: `p` must be the start of an object of a
    /// sheaf cache, not charged to a memory cgroup, with room on the spare sheaf and
    /// not already its top. Checks everything `kfree` checks before it pushes;
    /// whatever it refuses (bad pointers included) the regular path handles and
    /// reports. Given the zero area ([`InlineArea::zero`]) it refuses everything.
    ///
    /// # Safety
    /// If `p` is one of ours, the caller owns it and gives it up when this returns
    /// true.
    #[inline(always)]
    pub unsafe fn free_fast<'c>(&self, c: impl Into<InlineArea<'c>>, p: *mut u8) -> bool {
        self.with_free_target(c.into(), p, None, |cc| cc.sheaf_push(p as usize).is_ok())
    }

    /// [`Slub::free_fast`] for a fast path compiled into a called function (C's
    /// `free`): the `kmem_cache_cpu` addressed as `[area + offset + field]`, without
    /// the register barrier (see [`crate::percpu::CpuArea::ptr_indexed`]).
    ///
    /// # Safety
    /// As [`Slub::free_fast`].
    #[inline(always)]
    pub unsafe fn free_fast_indexed<'c>(&self, c: impl Into<InlineArea<'c>>, p: *mut u8) -> bool {
        self.with_free_target_as::<true>(c.into(), p, None, |cc| cc.sheaf_push(p as usize).is_ok())
    }

    /// [`Slub::free_fast`] for `kmem_cache_free(s, p)`: also refuses (for the regular
    /// path to report) an object of another cache, and every object of an accounted
    /// kmalloc cache, whose `inline_tag` is the zero line's.
    ///
    /// # Safety
    /// As [`Slub::free_fast`].
    #[inline(always)]
    pub unsafe fn free_fast_to<'c>(
        &self,
        c: impl Into<InlineArea<'c>>,
        s: &KmemCache,
        p: *mut u8,
    ) -> bool {
        self.with_free_target(c.into(), p, Some(s), |cc| cc.sheaf_push(p as usize).is_ok())
    }

    /// `push(cc)` on the `kmem_cache_cpu` whose spare sheaf a plain free of `p` may
    /// push onto: when `p` starts an object of a cache on the inline sheaf path (of
    /// `want`, if given) whose slab has no objcg vector; else false, for the regular
    /// path to handle and report. (A closure, not an `Option<&KmemCacheCpu>`: the
    /// option's test would stay on the fast path.)
    ///
    /// `push` is called only where `cc` has room for it to write (a spare sheaf with
    /// the object checks of its cache, never the zero line's nor the zero area's); it
    /// writes nothing where it finds no room.
    #[inline(always)]
    pub(super) fn with_free_target(
        &self,
        c: InlineArea<'_>,
        p: *mut u8,
        want: Option<&KmemCache>,
        push: impl FnOnce(&KmemCacheCpu) -> bool,
    ) -> bool {
        self.with_free_target_as::<false>(c, p, want, push)
    }

    /// [`Slub::with_free_target`], with the `kmem_cache_cpu` addressed through the
    /// register barrier (`INDEXED` false: [`crate::percpu::CpuArea::ptr_at`]) or
    /// folded into each access (`INDEXED` true: `CpuArea::ptr_indexed`).
    #[inline(always)]
    fn with_free_target_as<const INDEXED: bool>(
        &self,
        c: InlineArea<'_>,
        p: *mut u8,
        want: Option<&KmemCache>,
        push: impl FnOnce(&KmemCacheCpu) -> bool,
    ) -> bool {
        // From the page itself (no load through the cache): the CPU's sheaves of the
        // slab's cache, or the area's zero line, which reads as no room (see
        // `slab::state::sheaf_offset`).
        // The object's own page carries the tag (a tail page of a multi-page slab
        // mirrors its head's), read from the page-tag table, untested. The range check
        // is against the area's copy of the table's length, which may be behind: a
        // slab in a section brought online since is refused here, and the free slow
        // path (`free_sheaf_slow`) catches the copy up.
        let Some(tag) = self.pages.sheaf_tag_inline(c.area(), p) else {
            return false;
        };
        // kmem_cache_free: the tag names the slab's cache by its `cpu_offset`, which
        // no other cache shares (`sheaf_offset`'s invariant), so a tag equal to
        // `want`'s inline tag is a slab of `want` and no descriptor is read. Tag 0
        // (a slab off the inline path, or no slab) is also the inline tag of every
        // cache off that path: it passes, and the zero line it leads to refuses.
        if want.is_some_and(|w| tag != w.config().inline_tag) {
            return false;
        }
        // SAFETY: the offset (`state::sheaf_offset(tag)`, the tag plus the zero line's
        // offset, which joins the fields' displacements) is the slab's cache's
        // `cpu_offset`, where every CPU area keeps its `kmem_cache_cpu`, or the zero
        // line (64 zero bytes of every area and of the zero area): either reads as a
        // `KmemCacheCpu`.
        let cc = unsafe {
            &*if INDEXED {
                c.area()
                    .ptr_indexed::<KmemCacheCpu>(state::sheaf_offset(tag))
            } else {
                c.area().ptr_at::<KmemCacheCpu>(tag, state::sheaf_offset(0))
            }
        };
        // The object checks come from the same line as the spare sheaf, copied from
        // the cache with it: the cache itself is not read. A zero line's refuse every
        // pointer (a zero bound).
        cc.is_object_start(p as usize) && push(cc)
    }

    /// Per-CPU rseq mode's free fast path, before its restartable push: the
    /// `cpu_offset` of the sheaves a free of `p` goes to, when `p` lies in a slab page
    /// of a cache on [`FastPath::SheafRseq`] whose slab has no objcg vector; the
    /// areas' zero line (no room) for any other page of the span; `None` outside it.
    /// Read from the object's own page in the page-tag table, as the inline path's
    /// (a shift and one load, no descriptor), against the table's shared length: the
    /// threads of this mode own no area that would keep a copy. Whether `p` starts an
    /// object is the push's test, made inside its sequence with the checks on the
    /// CPU's line (`KmemCacheCpu`'s `free_*` words).
    #[inline(always)]
    pub fn rseq_free_target(&self, p: *const u8) -> Option<usize> {
        self.pages.sheaf_tag(p).map(state::sheaf_offset)
    }
}
