//! A slab's state and the head page view that keeps it: the one-word [`SlabState`]
//! (freelist offset, `inuse`, `frozen`) and its transitions, the free decision of
//! rule 2 (see [`super`]), which CPU area froze a slab and its local freelist.
//!
//! Locking: the state word changes only by compare-and-swap; the local freelist and
//! the frozen-by tag belong to the CPU area that froze the slab.

use super::*;
use crate::page::{Page, PAGE_SIZE};
use crate::percpu::CpuRef;
use crate::sync::Ordering::Relaxed;

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

// ---------------------------------------------------------------------------
// Slab page helpers.

#[inline]
pub(crate) fn slab_state(slab: &Page) -> SlabState {
    SlabState(slab.owner[0].load(Relaxed) as u64)
}

/// Freezes or unfreezes a slab, keeping its freelist and `inuse`; returns the new
/// state. The caller holds what rule 2 asks for.
pub(super) fn set_frozen(slab: &Page, frozen: bool) -> SlabState {
    loop {
        let old = slab_state(slab);
        let new = SlabState::new(old.offset(), old.inuse(), frozen);
        if cas_state(slab, old, new) {
            return new;
        }
    }
}

/// The tag of the CPU area `c` in `frozen_by`.
#[inline]
pub(super) fn cpu_tag(c: CpuRef<'_>) -> usize {
    c.area().id() + 1
}

/// Marks the slab as frozen by `tag` (its local freelist is empty then): `owner[3]`'s
/// high half is the tag of the CPU area that froze the slab (area id + 1; 0 = none);
/// bits 16..32 hold the offset of the local freelist's last object from the slab
/// base, bits 0..16 how many objects the local freelist holds. A slab spans at most
/// `PAGE_SIZE << SLUB_MAX_ORDER` (32 KiB) bytes and objects, so both fit.
#[inline]
pub(super) fn set_frozen_by(slab: &Page, tag: usize) {
    slab.owner[3].store(tag << 32, Relaxed);
}

const _: () = assert!(PAGE_SIZE << SLUB_MAX_ORDER <= 1 << 16);

/// Objects on a frozen slab's local freelist, from its `owner[3]` word.
#[inline]
pub(crate) fn local_count(o3: usize) -> usize {
    o3 & 0xffff
}

/// `owner[3]` after pushing the object at offset `off` on the local freelist: the
/// first object pushed on an empty list is its tail.
#[inline]
pub(super) fn local_push(o3: usize, off: usize) -> usize {
    if local_count(o3) == 0 {
        (o3 & !0xffff_ffff) | off << 16 | 1
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

/// Takes the local freelist of a slab frozen by the caller's CPU and clears the tag
/// (the caller is about to unfreeze the slab or make it its CPU slab).
pub(super) fn take_local(cfg: &CacheConfig, slab: &Page) -> Chain {
    let head = slab.owner[1].load(Relaxed);
    let o3 = slab.owner[3].load(Relaxed);
    slab.owner[1].store(0, Relaxed);
    slab.owner[3].store(0, Relaxed);
    if head == 0 {
        return Chain::EMPTY;
    }
    // Slabs are aligned to their size: the head tells the base.
    let base = head & !(cfg.slab_bytes() - 1);
    Chain {
        head,
        tail: base + (o3 >> 16 & 0xffff),
        count: local_count(o3) as u64,
    }
}

#[inline]
pub(crate) fn cas_state(slab: &Page, old: SlabState, new: SlabState) -> bool {
    // AcqRel: a successful free publishes the free pointer written into the object
    // before it; a successful take of the freelist sees those writes.
    slab.owner[0]
        .compare_exchange(
            old.0 as usize,
            new.0 as usize,
            crate::sync::Ordering::AcqRel,
            crate::sync::Ordering::Acquire,
        )
        .is_ok()
}
