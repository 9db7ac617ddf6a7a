//! A slab's state and the head page view that keeps it: the one-word [`SlabState`]
//! (freelist offset, `inuse`, `frozen`) and its transitions, the free decision of
//! rule 2 (see [`super`]), which CPU area froze a slab and its local freelist.
//!
//! Locking: the state word changes only by compare-and-swap; the local freelist and
//! the frozen-by tag belong to the CPU area that froze the slab.

use super::*;
use crate::page::{Page, CPU_AREA_ZERO_LINE, MAX_ORDER, PAGE_SIZE};
use crate::percpu::CpuRef;
use crate::sync::Ordering::{Relaxed, Release};

/// The slab's one-word state in `owner[0]` of its head page:
/// bits 0..32 freelist offset from the slab base (1 = the end token), bits 32..48
/// `inuse`, bit 63 `frozen`.
///
/// Every change is a compare-and-swap of the whole word (AcqRel), computed by the
/// transition functions below from the value it replaces: [`SlabState::after_free`]
/// (`__slab_free`, any thread), [`SlabState::taken`] (`get_freelist`, the CPU that
/// froze the slab) and [`SlabState::after_unfreeze`] (the freezing CPU gives the slab
/// back). [`free_decision`] says what a free must hold before its CAS. The loom
/// model (`tests/loom_slab.rs`) runs these same functions against concurrent frees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabState(pub(super) u64);

/// The freelist offset that stands for the end token (an empty freelist).
pub const END_OFFSET: u64 = 1;

const FROZEN: u64 = 1 << 63;

impl SlabState {
    /// A state from its fields.
    #[inline]
    pub const fn new(off: u64, inuse: u64, frozen: bool) -> Self {
        Self(off | (inuse << 32) | if frozen { FROZEN } else { 0 })
    }
    /// The raw word.
    #[inline]
    pub const fn bits(self) -> u64 {
        self.0
    }
    /// A state from its raw word.
    #[inline]
    pub const fn from_bits(bits: u64) -> Self {
        Self(bits)
    }
    /// `__slab_free`: `cnt` objects, the first at offset `head`, pushed on the
    /// freelist (the last one's free pointer already holds the old head); the slab
    /// becomes frozen if it was or if the freer `freeze`s it (see [`free_decision`]).
    #[inline]
    pub const fn after_free(self, head: u64, cnt: u64, freeze: bool) -> Self {
        Self::new(head, self.inuse() - cnt, self.frozen() || freeze)
    }
    /// `get_freelist`: the freezing CPU takes the whole freelist; every object now
    /// counts as in use and the slab stays frozen.
    #[inline]
    pub const fn taken(objects: u64) -> Self {
        Self::new(END_OFFSET, objects, true)
    }
    /// Unfreezing: the CPU gives back `cnt` objects it held, the first at offset
    /// `head` (`None` when `cnt` is 0; the last one's free pointer already holds the
    /// old head), and the slab is no longer frozen.
    #[inline]
    pub const fn after_unfreeze(self, head: Option<u64>, cnt: u64) -> Self {
        let off = match head {
            Some(h) => h,
            None => self.offset(),
        };
        Self::new(off, self.inuse() - cnt, false)
    }
    /// Freelist offset (1 = empty).
    #[inline]
    pub const fn offset(self) -> u64 {
        self.0 & 0xffff_ffff
    }
    /// Whether the slab's own freelist is empty.
    #[inline]
    pub const fn list_empty(self) -> bool {
        self.offset() == END_OFFSET
    }
    /// Objects handed out (or held by a CPU freelist).
    #[inline]
    pub const fn inuse(self) -> u64 {
        (self.0 >> 32) & 0xffff
    }
    /// Whether a CPU owns the slab.
    #[inline]
    pub const fn frozen(self) -> bool {
        self.0 & FROZEN != 0
    }
}

/// What a free must do before its CAS on a slab in state `old` (rule 2 of the
/// module comment): a frozen slab belongs to its CPU (no lock); an unfrozen slab
/// that the free empties or makes partial changes node lists, so the free takes the
/// node's list lock — unless it was full and the freer can take it onto its own CPU
/// partial list (`can_freeze`), which freezes it instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeDecision {
    /// CAS alone.
    Plain,
    /// CAS with `freeze`: the slab joins the freer's CPU partial list.
    Freeze,
    /// Take the list lock, then decide again.
    Lock,
}

/// See [`FreeDecision`]; `locked` says the list lock is already held.
#[inline]
pub const fn free_decision(
    old: SlabState,
    cnt: u64,
    can_freeze: bool,
    locked: bool,
) -> FreeDecision {
    let inuse = old.inuse() - cnt;
    if old.frozen() || !(inuse == 0 || old.list_empty()) {
        FreeDecision::Plain
    } else if old.list_empty() && can_freeze {
        FreeDecision::Freeze
    } else if locked {
        FreeDecision::Plain
    } else {
        FreeDecision::Lock
    }
}

/// The tag of the CPU area `c` in a slab's frozen-by word.
#[inline]
pub(super) fn cpu_tag(c: CpuRef<'_>) -> usize {
    c.area().id() + 1
}

/// Bit of the frozen-by word where the freezing CPU's tag starts; below it, the
/// local freelist's tail offset (bits 16..40) and count (bits 0..16).
const TAG_SHIFT: u32 = 40;
const TAIL_MASK: usize = (1 << (TAG_SHIFT - 16)) - 1;
// A slab's offsets fit the tail field, its object count the count field.
const _: () = assert!(PAGE_SIZE << MAX_ORDER <= 1 << (TAG_SHIFT - 16));
const _: () = assert!(crate::percpu::MAX_CPU_AREAS < 1 << (64 - TAG_SHIFT));

/// Objects on a frozen slab's local freelist, from its frozen-by word.
#[inline]
fn local_count(o3: usize) -> usize {
    o3 & 0xffff
}

/// The frozen-by word after pushing the object at offset `off` on the local freelist:
/// the first object pushed on an empty list is its tail.
#[inline]
fn local_push(o3: usize, off: usize) -> usize {
    if local_count(o3) == 0 {
        (o3 >> TAG_SHIFT << TAG_SHIFT) | off << 16 | 1
    } else {
        o3 + 1
    }
}

/// A chain of free objects of one slab: first, last, how many (first = 0: none).
#[derive(Clone, Copy)]
pub(super) struct Chain {
    pub(super) head: usize,
    pub(super) tail: usize,
    pub(super) count: u64,
}

impl Chain {
    pub(super) const EMPTY: Chain = Chain {
        head: 0,
        tail: 0,
        count: 0,
    };
}

/// The free fast path's reading of a page's sheaf tag (`tag`, from the page-tag table:
/// `PageAllocator::sheaf_tag`), with no test: the offset of
/// the `kmem_cache_cpu` whose spare sheaf a plain free of an object in the page may
/// push onto, or (tag 0: every page but those of live slabs of caches on the inline
/// sheaf path, see below) [`CPU_AREA_ZERO_LINE`], which reads as no room.
///
/// Invariant: a page's sheaf tag is non-zero only while the page is the head of a
/// live slab of a cache on [`FastPath::Sheaf`] or [`FastPath::SheafRseq`] with no
/// objcg vector, or one of that slab's `SLAB_TAIL` pages, and then it is the cache's
/// `cpu_offset` less [`CPU_AREA_ZERO_LINE`] (or, for an accounted cache's slab with a
/// vector, a charged line: [`charged_sheaf_tag`]): an offset no other cache has (the
/// per-CPU allocator gives each cache its own and never takes one back, a destroyed
/// cache's too), so `kmem_cache_free`'s fast path knows a slab of the cache it is
/// given by the tag alone. Thread mode's inline free and per-CPU rseq mode's
/// restartable push both find their target there (a process runs one mode: the
/// inline free of a per-CPU-mode thread works on the zero area, whose range check
/// refuses every address). Only the slab layer sets it ([`Slab::init`],
/// [`Slab::mark_tails`]) and clears it ([`Slab::stop_inline_frees`],
/// [`Slab::clear`] for the head; the page allocator clears a slab's marked tails
/// when it takes the block back and a block's head when it hands the block out). So
/// the free fast paths read it for any page the object's address falls in without
/// testing the page's flags or the tag.
#[inline(always)]
pub(crate) fn sheaf_offset(tag: usize) -> usize {
    tag + CPU_AREA_ZERO_LINE
}

/// The sheaf tag of a slab of `cfg` (see [`sheaf_offset`]).
pub(super) fn sheaf_tag_of(cfg: &CacheConfig) -> u32 {
    // Every cache's `cpu_offset` lies past the zero line and inside an area (the
    // percpu allocator's offsets start after it), so the tag is non-zero and fits; an
    // offset that did not would get no tag (the zero line: the regular path).
    match cfg.cpu_offset.checked_sub(CPU_AREA_ZERO_LINE) {
        Some(t) if cfg.fast == FastPath::Sheaf && t > 0 => t as u32,
        _ => 0,
    }
}

/// The sheaf tag the pages of a slab of `cfg` carry: [`sheaf_tag_of`]'s, and the same
/// for a cache on the restartable sequences (whose `inline_tag` is 0: no inline pop
/// may take from its sheaves), whose push reads it from the page-tag table as thread
/// mode's free does (`Slub::rseq_free_target`).
pub(super) fn page_sheaf_tag(cfg: &CacheConfig) -> u32 {
    match cfg.cpu_offset.checked_sub(CPU_AREA_ZERO_LINE) {
        Some(t) if matches!(cfg.fast, FastPath::Sheaf | FastPath::SheafRseq) && t > 0 => t as u32,
        _ => 0,
    }
}

/// The sheaf tag of a slab of `cfg` once it has an objcg vector: for an accounted
/// kmalloc cache with objcg sheaves (class `k`), charged line `k`
/// ([`crate::page::CPU_AREA_CHARGED_LINES`]), zero in every CPU area (no room: the
/// regular path, which uncharges) and the inbox of class `k` in a charged area
/// (`memcontrol::charged_area`); 0 (the zero line) for every other cache.
pub(crate) fn charged_sheaf_tag(cfg: &CacheConfig) -> u32 {
    match cfg.objcg_class() {
        Some(k) if cfg.fast == FastPath::Sheaf => {
            (crate::page::CPU_AREA_CHARGED_LINES + 64 * k - CPU_AREA_ZERO_LINE) as u32
        }
        _ => 0,
    }
}
const _: () = assert!(crate::page::CPU_AREA_CHARGED_LINES > CPU_AREA_ZERO_LINE);
// A `kmem_cache_cpu` at the last charged line lies inside the area.
const _: () = assert!(
    crate::page::CPU_AREA_CHARGED_LINES
        + 64 * (crate::page::CPU_AREA_CHARGED_LINES_COUNT - 1)
        + core::mem::size_of::<KmemCacheCpu>()
        <= crate::percpu::CPU_AREA_SIZE
);

/// A slab, seen through its head page's descriptor: the one place that knows which
/// word of `Page::owner` holds what.
///
/// | word       | holds                                                             |
/// |------------|-------------------------------------------------------------------|
/// | `owner[0]` | the [`SlabState`] (freelist offset, `inuse`, `frozen`)            |
/// | `owner[1]` | CPU-slab design: the head of the local freelist of the CPU that froze it (0: none). Sheaves design: 0 (the CPU's sheaves a free goes to are named by the page's sheaf tag, in the page-tag table: [`sheaf_offset`]) |
/// | `owner[2]` | the cache (`&KmemCache`), which outlives its slabs                |
/// | `owner[3]` | frozen-by: bits 40.. the tag of the CPU area that froze the slab (area id + 1; 0 = none), bits 16..40 the offset of the local freelist's last object from the slab base, bits 0..16 how many objects the local freelist holds |
///
/// A slab spans at most `PAGE_SIZE << MAX_ORDER` (4 MiB) bytes and 65535 objects, so
/// offset and count fit their 24 and 16 bits. The state changes by compare-and-swap only;
/// the local freelist and the frozen-by word belong to the CPU area that froze the
/// slab (or to whoever holds the slab alone: a new slab, one being discarded).
#[derive(Clone, Copy)]
pub struct Slab<'a>(&'a Page);

impl<'a> Slab<'a> {
    /// The slab whose head page is `head`.
    #[inline(always)]
    pub fn of(head: &'a Page) -> Self {
        Self(head)
    }

    /// The head page.
    #[inline(always)]
    pub fn page(self) -> &'a Page {
        self.0
    }

    /// The state word.
    #[inline(always)]
    pub fn state(self) -> SlabState {
        SlabState(self.0.owner[0].load(Relaxed) as u64)
    }

    /// Replaces the state `old` with `new` if it still holds `old`.
    #[inline]
    pub(crate) fn cas_state(self, old: SlabState, new: SlabState) -> bool {
        // AcqRel: a successful free publishes the free pointer written into the object
        // before it; a successful take of the freelist sees those writes.
        self.0.owner[0]
            .compare_exchange(
                old.0 as usize,
                new.0 as usize,
                crate::sync::Ordering::AcqRel,
                crate::sync::Ordering::Acquire,
            )
            .is_ok()
    }

    /// Sets the state of a slab nobody else can change now (a new slab before it is
    /// published, or one just frozen with its whole freelist taken).
    #[inline]
    pub(super) fn set_state(self, st: SlabState) {
        self.0.owner[0].store(st.0 as usize, Relaxed);
    }

    /// Freezes or unfreezes the slab, keeping its freelist and `inuse`; returns the new
    /// state. The caller holds what rule 2 (see [`super`]) asks for.
    pub(super) fn set_frozen(self, frozen: bool) -> SlabState {
        loop {
            let old = self.state();
            let new = SlabState::new(old.offset(), old.inuse(), frozen);
            if self.cas_state(old, new) {
                return new;
            }
        }
    }

    /// The cache the slab belongs to. Crate-private: `self` must head a live slab,
    /// which safe code outside the crate could not promise (any `&Page`, a slab's tail
    /// among them, can be wrapped with [`Slab::of`]).
    #[inline(always)]
    pub(crate) fn cache(self) -> &'a KmemCache {
        // SAFETY: a slab's head page names its cache (set by `init` before the slab is
        // published), and a cache outlives its slabs.
        unsafe { &*(self.0.owner[2].load(Relaxed) as *const KmemCache) }
    }

    /// The cache of a page that reads as a slab head to a lookup of any address
    /// ([`Slub::lookup`](super::Slub::lookup), `cache_of`, `slab_object`): `None`
    /// while the word is 0, which it is on a slab being made before its flags say
    /// `SLAB` is over (`allocate_slab` writes the cache first, and its constructors
    /// run after), and on one being discarded once its words are cleared.
    #[inline(always)]
    pub(crate) fn cache_if_set(self) -> Option<&'a KmemCache> {
        // SAFETY: 0, or the cache the slab belongs to (as in `cache`).
        unsafe { (self.0.owner[2].load(Relaxed) as *const KmemCache).as_ref() }
    }

    /// [`Slab::cache_if_set`]'s address, read without making a reference.
    #[inline]
    pub(crate) fn cache_addr(self) -> Option<usize> {
        Some(self.0.owner[2].load(Relaxed)).filter(|&a| a != 0)
    }

    /// Names `s` as the cache of a slab being made, before its head's flags say
    /// `SLAB` (see [`Slab::cache_if_set`]); [`Slab::init`] writes it again.
    pub(super) fn set_cache(self, s: &KmemCache) {
        self.0.owner[2].store(s as *const KmemCache as usize, Relaxed);
    }

    /// Sets up the descriptor of a new slab of `s` with state `st`, not frozen by
    /// anybody, with an empty local freelist, and no objcg charged yet (the memory
    /// controller's sole-objcg word, `Page::memcg_sole`, which must start over with
    /// each slab: after this only the controller's charges and
    /// [`Slab::start_charges_over`] write it).
    pub(super) fn init(self, s: &KmemCache, st: SlabState) {
        self.set_state(st);
        let cfg = s.config();
        self.0.memcg_sole().store(0, Relaxed);
        self.0.owner[1].store(0, Relaxed);
        self.0.set_sheaf_tag(page_sheaf_tag(cfg), Relaxed);
        self.0.owner[3].store(0, Relaxed);
        self.0.owner[2].store(s as *const KmemCache as usize, Relaxed);
    }

    /// Makes an empty slab of another cache of the same order, taken off that cache's
    /// kept list, a kept empty slab of `s` (`empty.rs`, adoption): the words
    /// [`Slab::init`] writes, with no object in use, a freelist that is never read
    /// (a kept slab's), and no sheaf named on the head page (the tails name none
    /// already: the other cache's [`Slab::stop_fast_frees`]).
    pub(super) fn init_kept(self, s: &KmemCache) {
        self.set_state(SlabState::new(END_OFFSET, 0, false));
        self.0.set_sheaf_tag(0, Relaxed);
        self.0.owner[1].store(0, Relaxed);
        self.0.owner[3].store(0, Relaxed);
        self.0.owner[2].store(s as *const KmemCache as usize, Relaxed);
    }

    /// Clears every slab word (the slab is being discarded).
    pub(super) fn clear(self) {
        self.0.set_sheaf_tag(0, Relaxed);
        for w in &self.0.owner {
            w.store(0, Relaxed);
        }
    }

    /// Sets the head's flags of a slab being made to `HEAD | SLAB`, after its cache
    /// word ([`Slab::set_cache`]): a Release store, so a lookup that reads the flags
    /// with Acquire and finds `SLAB` reads the cache too.
    pub(super) fn publish(self) {
        self.0
            .publish_flags(crate::page::PageFlags::HEAD | crate::page::PageFlags::SLAB);
    }

    /// The slab got an objcg vector (`memcontrol`): from now on its frees take the
    /// regular path, which uncharges, so a slab of a cache on the inline sheaf path
    /// stops naming the CPU's sheaves (its sheaf tag becomes the class's charged line,
    /// [`charged_sheaf_tag`], which no CPU area's inline free or restartable push
    /// pushes onto and a charged area's does). A free that read the old value frees
    /// an object allocated before the vector, never charged: a charged object is
    /// handed out only after this store, and its free happens after its allocation.
    pub(crate) fn stop_inline_frees(self) {
        let cfg = self.cache().config();
        if cfg.tags_slabs() {
            let tag = charged_sheaf_tag(cfg);
            self.0.set_sheaf_tag(tag, Release);
            for t in self.tails(cfg.order) {
                t.set_sheaf_tag(tag, Release);
            }
        }
    }

    /// An empty slab taken again (a kept one, or one the partial list held with no
    /// object in use), before any of its objects is handed out: what the memory
    /// controller knows of its charges starts over, as on a new slab
    /// ([`Slab::init`]): no objcg charged yet (`Page::memcg_sole`), no object handed
    /// out uncharged (`PageFlags::SLAB_UNCHARGED`). Both only ever describe objects
    /// in use, and none is, so no reader relies on them: a charged take-in reads them
    /// only for a slab it holds an object of. Writes only what is set.
    pub(super) fn start_charges_over(self) {
        let sole = self.0.memcg_sole();
        if sole.load(Relaxed) != 0 {
            sole.store(0, Relaxed);
        }
        if self.0.flags().contains(PageFlags::SLAB_UNCHARGED) {
            self.0.remove_flags(PageFlags::SLAB_UNCHARGED);
        }
    }

    /// A slab kept empty (`empty.rs`): its pages stop naming any sheaf (sheaf tag 0 on
    /// the head and every tail), so that no inline or restartable free
    /// pushes an object of it onto a sheaf; the regular free, which sees no object in
    /// use, reports it. [`Slab::resume_fast_frees`] undoes it.
    pub(super) fn stop_fast_frees(self, cfg: &CacheConfig) {
        self.0.set_block_sheaf_tags(1 << cfg.order, 0, Relaxed);
    }

    /// A kept slab taken again: its pages name the CPU's sheaves as a new slab's do
    /// ([`Slab::init`]), or, with an objcg vector (`has_vector`), as
    /// [`Slab::stop_inline_frees`] left them. Before any of its objects is handed out.
    pub(super) fn resume_fast_frees(self, cfg: &CacheConfig, has_vector: bool) {
        let tag = if has_vector && cfg.tags_slabs() {
            charged_sheaf_tag(cfg)
        } else {
            page_sheaf_tag(cfg)
        };
        self.0.set_block_sheaf_tags(1 << cfg.order, tag, Relaxed);
    }

    /// Marks the tail pages of a new slab of order `order` > 0 `TAIL`, each naming
    /// the head (`compound_head` in one load: the page allocator writes no tails,
    /// see [`PageFlags::COMPOUND`]); with `mirror`, `SLAB_TAIL` too, each with a copy
    /// of the head's sheaf tag (see [`PageFlags::SLAB_TAIL`]). Only before the slab is
    /// published. The page allocator clears them when the slab's block goes back.
    pub(super) fn mark_tails(self, order: usize, mirror: bool) {
        let flags = if mirror {
            PageFlags::TAIL | PageFlags::SLAB_TAIL
        } else {
            PageFlags::TAIL
        };
        let head = self.0 as *const Page as usize;
        for t in self.tails(order) {
            t.set_flags(flags);
            t.owner[0].store(head, Relaxed);
        }
        if mirror {
            // One lookup of the tag table for the block (the head's entry is set
            // already).
            let tag = self.0.sheaf_tag() as u32;
            self.0.set_block_sheaf_tags(1 << order, tag, Relaxed);
        }
    }

    /// The descriptors of the slab's tail pages.
    fn tails(self, order: usize) -> impl Iterator<Item = &'a Page> {
        let head = self.0 as *const Page;
        // SAFETY: a slab is one block of 2^order pages, whose descriptors are
        // consecutive in one memmap (a block never crosses a section) and live as
        // long as the allocator.
        (1..1usize << order).map(move |i| unsafe { &*head.add(i) })
    }

    /// The tag of the CPU area that froze the slab (0: none recorded).
    #[inline(always)]
    pub(super) fn frozen_by(self) -> usize {
        self.0.owner[3].load(Relaxed) >> TAG_SHIFT
    }

    /// Marks the slab as frozen by `tag`; its local freelist is empty then.
    #[inline]
    pub(super) fn set_frozen_by(self, tag: usize) {
        self.0.owner[3].store(tag << TAG_SHIFT, Relaxed);
    }

    /// Objects on the local freelist.
    #[inline]
    pub(crate) fn local_count(self) -> usize {
        local_count(self.0.owner[3].load(Relaxed))
    }

    /// The first object of the local freelist (0: empty).
    #[inline(always)]
    pub(super) fn local_head(self) -> usize {
        self.0.owner[1].load(Relaxed)
    }

    /// Pushes `obj` (whose free pointer already holds the old head, or the end token)
    /// on the local freelist of the slab at `base`.
    #[inline]
    pub(super) fn push_local(self, obj: usize, base: usize) {
        let o3 = self.0.owner[3].load(Relaxed);
        self.0.owner[1].store(obj, Relaxed);
        self.0.owner[3].store(local_push(o3, obj - base), Relaxed);
    }

    /// Takes the local freelist of a slab frozen by the caller's CPU and clears the
    /// tag (the caller is about to unfreeze the slab or make it its CPU slab).
    pub(super) fn take_local(self, cfg: &CacheConfig) -> Chain {
        let head = self.0.owner[1].load(Relaxed);
        let o3 = self.0.owner[3].load(Relaxed);
        self.0.owner[1].store(0, Relaxed);
        self.0.owner[3].store(0, Relaxed);
        if head == 0 {
            return Chain::EMPTY;
        }
        // Slabs are aligned to their size: the head tells the base.
        let base = head & !(cfg.slab_bytes() - 1);
        Chain {
            head,
            tail: base + (o3 >> 16 & TAIL_MASK),
            count: local_count(o3) as u64,
        }
    }
}
