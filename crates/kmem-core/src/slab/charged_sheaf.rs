//! The sheaves of a memory cgroup's charged area (`memcontrol::charged_area`), as the
//! slab layer lays them out: a charged area has the layout of a CPU area, and the
//! inline fast paths pop and push on its lines as on any area's, so its sheaves use
//! this layer's line ([`KmemCacheCpu`]) and sheaf ([`SlabSheaf`]) formats. Two kinds:
//!
//! - a *kept* sheaf: the main sheaf of the line at a plain kmalloc class's
//!   `cpu_offset`, which kmalloc's inline pop reads through the size table; no spare
//!   (no room for a free);
//! - an *inbox*: the spare sheaf of a charged line
//!   ([`crate::page::CPU_AREA_CHARGED_LINES`]), with the object checks of its
//!   `kmalloc-cg-*` cache, which the inline free pushes onto; no main sheaf.
//!
//! This module owns the words' formats only: which objects may be in which sheaf,
//! and when they move, is `memcontrol`'s. Locking: none; only the charged area's owner
//! (the owner of the CPU area whose stock holds it) touches its sheaves, as for the
//! owner's words of a CPU area (`sheaf_top::owner_read`).

use super::sheaf::{slot, SlabSheaf, SHEAF_HEADER};
use super::sheaf_top::{len_of, top_of};
use super::{CacheConfig, KmemCacheCpu};
use crate::sync::{AtomicUsize, Ordering::Relaxed};

/// Bytes a charged-area sheaf of `cap` slots takes (header and slots).
pub const fn charged_sheaf_bytes(cap: usize) -> usize {
    SHEAF_HEADER + cap * core::mem::size_of::<usize>()
}

/// One sheaf of a charged area's line (its kept sheaf or its inbox), for the owner's
/// slow paths: its top word, the sheaf and its capacity.
///
/// Invariants: `sheaf` is a sheaf of `cap` slots installed in the line (by
/// [`KmemCacheCpu::install_kept`] or [`KmemCacheCpu::install_inbox`], or swapped in
/// from the class's other line by [`KmemCacheCpu::swap_kept_with_inbox`]) that lives
/// as long as the charged area; `top` is its top (between the sheaf's address and `cap` slots
/// above it).
pub struct ChargedSheaf<'a> {
    top: &'a AtomicUsize,
    sheaf: *mut SlabSheaf,
    cap: usize,
}

impl ChargedSheaf<'_> {
    /// Objects in the sheaf.
    #[inline]
    pub fn len(&self) -> usize {
        len_of(self.top.load(Relaxed), self.sheaf)
    }

    /// Whether the sheaf holds no object.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots of the sheaf.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The object in slot `k` (`k` < [`ChargedSheaf::len`]).
    #[inline]
    pub fn get(&self, k: usize) -> usize {
        assert!(k < self.cap);
        // SAFETY: slot `k` < `cap` of the sheaf (type invariant), which only the owner
        // touches.
        unsafe { *slot(self.sheaf, k) }
    }

    /// Writes `obj` into slot `k` (`k` < capacity); the count is set apart
    /// ([`ChargedSheaf::set_len`]).
    #[inline]
    pub fn set(&self, k: usize, obj: usize) {
        assert!(k < self.cap);
        // SAFETY: as in `get`.
        unsafe { *slot(self.sheaf, k) = obj };
    }

    /// Slot 0: the sheaf's [`ChargedSheaf::capacity`] slots follow it, for the
    /// owner's loops (which keep their indices below the capacity).
    #[inline]
    pub fn slots(&self) -> *mut usize {
        slot(self.sheaf, 0)
    }

    /// Sets the count to `n` (≤ capacity): slots `0..n` must hold objects.
    #[inline]
    pub fn set_len(&self, n: usize) {
        assert!(n <= self.cap);
        self.top.store(top_of(self.sheaf, n), Relaxed);
    }

    /// The top object, if any.
    #[inline]
    pub fn last(&self) -> Option<usize> {
        let n = self.len();
        (n > 0).then(|| self.get(n - 1))
    }

    /// Puts `obj` on top; false (nothing done) when the sheaf is full.
    #[inline]
    pub fn push(&self, obj: usize) -> bool {
        let n = self.len();
        if n >= self.cap {
            return false;
        }
        self.set(n, obj);
        self.set_len(n + 1);
        true
    }

    /// Takes the top object, if any.
    #[inline]
    pub fn pop(&self) -> Option<usize> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        let obj = self.get(n - 1);
        self.set_len(n - 1);
        Some(obj)
    }
}

/// Prepares `cap` slots at `mem` as an empty sheaf (the header's `capacity`, which is
/// never an object address, is what the free's double-free test reads below slot 0).
///
/// # Safety
/// `mem` is 8-aligned, zeroed and [`charged_sheaf_bytes`]`(cap)` bytes long, the
/// caller's for as long as a line holds the sheaf.
unsafe fn init_sheaf(mem: *mut u8, cap: usize) -> *mut SlabSheaf {
    let sheaf = mem.cast::<SlabSheaf>();
    // SAFETY: the caller's memory, large enough for the header.
    unsafe { (*sheaf).capacity.store(cap, Relaxed) };
    sheaf
}

impl KmemCacheCpu {
    /// Makes this line (of a charged area) hold the empty kept sheaf of `cap` slots at
    /// `mem`, as its main sheaf: the inline pop takes from it. No spare: a free
    /// pushed here finds no room.
    ///
    /// # Safety
    /// As [`init_sheaf`]; the line is a charged area's, all zero, and only the
    /// caller touches it.
    pub(crate) unsafe fn install_kept(&self, mem: *mut u8, cap: usize) {
        // SAFETY: forwarded from the caller.
        let sheaf = unsafe { init_sheaf(mem, cap) };
        self.main.store(sheaf, Relaxed);
        self.main_limit.store(top_of(sheaf, cap), Relaxed);
        self.main_top.store(sheaf as usize, Relaxed);
    }

    /// Makes this line (a charged line of a charged area) hold the empty inbox of
    /// `cap` slots at `mem`, as its spare sheaf with the object checks of `cfg` (the
    /// class's `kmalloc-cg-*` cache): the inline free pushes that cache's objects
    /// onto it. No main sheaf: a pop here finds nothing.
    ///
    /// # Safety
    /// As [`KmemCacheCpu::install_kept`].
    pub(crate) unsafe fn install_inbox(&self, mem: *mut u8, cap: usize, cfg: &CacheConfig) {
        // SAFETY: forwarded from the caller.
        let sheaf = unsafe { init_sheaf(mem, cap) };
        self.set_free_checks(cfg);
        self.spare.store(sheaf, Relaxed);
        self.spare_limit.store(top_of(sheaf, cap), Relaxed);
        self.spare_top.store(sheaf as usize, Relaxed);
    }

    /// Takes the top object of this line's kept sheaf (the inline pop's own code),
    /// or `None` when it is empty or none was installed.
    #[inline(always)]
    pub(crate) fn kept_pop(&self) -> Option<usize> {
        self.sheaf_pop()
    }

    /// Puts `obj` on this line's kept sheaf, as the inline free pushes onto a spare:
    /// `Err(false)` when it is full (or none was installed), `Err(true)` when `obj`
    /// is its top already (a double free).
    #[inline(always)]
    pub(crate) fn kept_push(&self, obj: usize) -> Result<(), bool> {
        // The owner's, as a CPU area's (the caller owns the charged area).
        Self::owner_push(&self.main_top, &self.main_limit, obj)
    }

    /// Exchanges this line's kept sheaf, empty, with the inbox of `inbox_line`: the
    /// inbox's objects are the kept sheaf's from now on, in the same order, and the
    /// inline free pushes onto the emptied sheaf. What a take-in that moves every
    /// object of the inbox does, without the copy.
    ///
    /// The caller owns the charged area (as for every method here), and
    /// `inbox_line` is the charged line of this line's class: its inbox has the
    /// kept sheaf's capacity (a class's two sheaves are made alike), so each line
    /// keeps its limit's distance from its sheaf, and the free's double-free test
    /// still reads the header's capacity word below an empty sheaf's slot 0.
    pub(crate) fn swap_kept_with_inbox(&self, inbox_line: &KmemCacheCpu) {
        let kept = self.main.load(Relaxed);
        let inbox = inbox_line.spare.load(Relaxed);
        let (kept_limit, inbox_limit) = (
            self.main_limit.load(Relaxed),
            inbox_line.spare_limit.load(Relaxed),
        );
        assert!(!kept.is_null() && !inbox.is_null());
        assert_eq!(
            kept_limit - kept as usize,
            inbox_limit - inbox as usize,
            "a class's kept sheaf and inbox have one capacity"
        );
        debug_assert_eq!(self.main_top.load(Relaxed), kept as usize, "kept: empty");
        let inbox_top = inbox_line.spare_top.load(Relaxed);
        self.main.store(inbox, Relaxed);
        self.main_limit.store(inbox_limit, Relaxed);
        self.main_top.store(inbox_top, Relaxed);
        inbox_line.spare.store(kept, Relaxed);
        inbox_line.spare_limit.store(kept_limit, Relaxed);
        inbox_line.spare_top.store(kept as usize, Relaxed);
    }

    /// The kept sheaf of this line (see [`KmemCacheCpu::install_kept`]), or `None`
    /// when none was installed.
    pub(crate) fn kept(&self) -> Option<ChargedSheaf<'_>> {
        let sheaf = self.main.load(Relaxed);
        let limit = self.main_limit.load(Relaxed);
        (!sheaf.is_null()).then(|| ChargedSheaf {
            top: &self.main_top,
            sheaf,
            cap: (limit - sheaf as usize) / core::mem::size_of::<usize>(),
        })
    }

    /// The inbox of this line (see [`KmemCacheCpu::install_inbox`]), or `None` when
    /// none was installed.
    pub(crate) fn inbox(&self) -> Option<ChargedSheaf<'_>> {
        let sheaf = self.spare.load(Relaxed);
        let limit = self.spare_limit.load(Relaxed);
        (!sheaf.is_null()).then(|| ChargedSheaf {
            top: &self.spare_top,
            sheaf,
            cap: (limit - sheaf as usize) / core::mem::size_of::<usize>(),
        })
    }
}
