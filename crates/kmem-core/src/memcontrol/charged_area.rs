//! Charged areas: where a CPU area's objcg sheaves live, laid out so that the inline
//! fast paths reach them.
//!
//! A charged area is a block with the layout of a CPU area (`CPU_AREA_SIZE` bytes,
//! a [`CpuArea`] header, lines at the caches' `cpu_offset`s), made once for a CPU
//! area whose owner runs charged, kept with it for good, and never registered as a
//! CPU area: nothing walks it, nothing but its owner reads it. All of it is zero but
//! for two lines per accounted kmalloc class `k` and the header's copy of the
//! tag-window length:
//!
//! - the *kept sheaf* of class `k`: the main sheaf of the line at the `cpu_offset` of
//!   the plain kmalloc class of the same size (`kmalloc-32` for `kmalloc-cg-32`).
//!   A thread whose fast word is its charged area pops it with kmalloc's inline fast
//!   path (the size table gives the plain class's offset); it holds objects charged
//!   to the stock's objcg sheaves' objcg and recorded in their vectors.
//! - the *inbox* of class `k` (the classes up to 128 bytes, [`has_inbox`]): the spare
//!   sheaf of charged line `k`
//!   ([`CPU_AREA_CHARGED_LINES`]), with `kmalloc-cg-k`'s object checks. A slab of
//!   `kmalloc-cg-k` with an objcg vector carries that line's sheaf tag
//!   (`slab::charged_sheaf_tag`), so the same thread's inline free pushes such
//!   objects there, charged to whichever objcg they are (the free reads no vector).
//!   In a CPU area the line is zero: no room, and the free takes the regular path.
//!
//! The owner's slow paths move objects from an inbox to its kept sheaf once their
//! vector slots name the kept sheaves' objcg (`objcg_sheaf::intake`), and free the
//! others as any free would. Every other line of a charged area is zero: the inline
//! pops there find nothing and the inline frees no room, so they fall to the slow
//! paths, which never take a charged area for a CPU area.
//!
//! The sheaves' slots are in one zeroed page beside the block. Both come from the
//! page allocator, 68 KiB per CPU area that ever ran charged.
//!
//! Locking: none. Only the owner of the CPU area whose stock holds the charged area
//! touches it (as the stock, see `stock`), through its fast word or its slow paths.

use super::objcg_sheaf::{CAPACITY, OBJCG_SHEAF_CLASSES};
use super::*;
use crate::gfp::Gfp;
use crate::kmalloc::KMALLOC_SIZES;
use crate::page::{CPU_AREA_CHARGED_LINES, CPU_AREA_CHARGED_LINES_COUNT, PAGE_SIZE};
use crate::percpu::CPU_AREA_ORDER;
use crate::slab::{charged_sheaf_bytes, ChargedSheaf, KmemCacheCpu};
use crate::sync::{AtomicPtr, AtomicU32};

const _: () = assert!(CPU_AREA_CHARGED_LINES_COUNT == OBJCG_SHEAF_CLASSES);

/// Bytes of the sheaves of one charged area (a kept sheaf and an inbox per class).
const STORAGE_BYTES: usize = {
    let mut sum = 0;
    let mut i = 0;
    while i < OBJCG_SHEAF_CLASSES {
        sum += charged_sheaf_bytes(CAPACITY[i]);
        if has_inbox(i) {
            sum += charged_sheaf_bytes(CAPACITY[i]);
        }
        i += 1;
    }
    sum
};
/// Page order of a charged area's sheaf storage.
const STORAGE_ORDER: usize = if STORAGE_BYTES <= PAGE_SIZE { 0 } else { 1 };
const _: () = assert!(STORAGE_BYTES <= PAGE_SIZE << STORAGE_ORDER);

/// Offset of class `k`'s charged line (its inbox) in a charged area.
const fn inbox_line(k: usize) -> usize {
    CPU_AREA_CHARGED_LINES + 64 * k
}

/// Whether class `k` gets an inbox: the classes whose kept sheaf holds at least
/// [`INBOX_MIN_SLOTS`] objects (up to 128 bytes). An inbox is taken in whole, and the
/// take-in's fixed cost (about 140 instructions) is paid once a sheaf; a class of a
/// few objects a sheaf (4 KiB: four) paid it every few frees, more than the charged
/// free's slow half costs per object (`bench memcg` kmalloc_batch4 at 4 KiB: 11.7 ns
/// a pair with inboxes, 7.6–10.9 without). Its charged line stays zero in the charged
/// area too: the inline free refuses, and the slow half keeps the object.
pub(super) const fn has_inbox(k: usize) -> bool {
    CAPACITY[k] >= INBOX_MIN_SLOTS
}

/// See [`has_inbox`].
const INBOX_MIN_SLOTS: usize = 16;

/// A CPU area's objcg sheaves, in its [`MemcgStock`]: the objcg they keep objects
/// for, and the charged area that holds them. All-zero is the valid empty state (no
/// charged area yet, untagged).
///
/// Invariants: `area` is null or a charged area (module docs) whose kept sheaf of
/// class `k` is on the line at `kept_off[k]` and whose inbox of class `k` on charged
/// line `k`, for every class whose `kmalloc-cg-*` cache has objcg sheaves (the
/// others' lines are zero); only the stock's owner touches it. Every object of a
/// kept sheaf of class `k` is an object of `kmalloc-cg-k` charged to `objcg` and
/// recorded for it in its slab's vector, owned by nobody else; `objcg` is null only
/// while the kept sheaves are empty, and non-null it holds a reference on the objcg.
/// Every object of an inbox of class `k` passed the inline free's checks for
/// `kmalloc-cg-k` (a slab of it with a vector, an object's start); whose charge it
/// carries is read when it leaves.
#[repr(C)]
pub struct ObjcgSheaves {
    pub(super) objcg: AtomicPtr<ObjCgroup>,
    area: AtomicPtr<CpuArea>,
    /// Where each class's kept sheaf is: the plain class's `cpu_offset`.
    kept_off: [AtomicU32; OBJCG_SHEAF_CLASSES],
}

impl ObjcgSheaves {
    /// Charged objects waiting here (kept and in the inboxes), and the objcg of the
    /// kept ones (statistics and tests).
    pub fn held(&self) -> (*const ObjCgroup, usize) {
        (self.objcg.load(Relaxed), self.objects())
    }

    /// Objects in all the kept sheaves and inboxes.
    fn objects(&self) -> usize {
        (0..OBJCG_SHEAF_CLASSES)
            .map(|k| self.kept(k).map_or(0, |s| s.len()) + self.inbox(k).map_or(0, |s| s.len()))
            .sum()
    }

    /// Objects in the kept sheaves alone.
    pub(super) fn kept_objects(&self) -> usize {
        (0..OBJCG_SHEAF_CLASSES)
            .map(|k| self.kept(k).map_or(0, |s| s.len()))
            .sum()
    }

    /// The charged area, if it was made.
    #[inline]
    pub(super) fn area(&self) -> Option<&CpuArea> {
        // SAFETY: a non-null area is a charged area made for good (type invariant).
        unsafe { self.area.load(Relaxed).as_ref() }
    }

    /// The line at `off` of the charged area.
    #[inline]
    fn line(&self, off: usize) -> Option<&KmemCacheCpu> {
        let a = self.area()?;
        // SAFETY: a charged area has a CPU area's layout: `off` (a kept sheaf's plain
        // `cpu_offset` or a charged line) is a 64-byte aligned line inside it, all
        // zero or one of its sheaves' lines.
        Some(unsafe { &*a.ptr::<KmemCacheCpu>(off) })
    }

    /// The line of class `k`'s kept sheaf (its pops and pushes: `kept_pop`,
    /// `kept_push`), if the charged area was made.
    #[inline]
    pub(super) fn kept_line(&self, k: usize) -> Option<&KmemCacheCpu> {
        let off = self.kept_off.get(k)?.load(Relaxed) as usize;
        self.line(off)
    }

    /// The line of class `k`'s inbox, if the charged area was made.
    #[inline]
    pub(super) fn inbox_line(&self, k: usize) -> Option<&KmemCacheCpu> {
        if k >= OBJCG_SHEAF_CLASSES {
            return None;
        }
        self.line(inbox_line(k))
    }

    /// Class `k`'s kept sheaf, if the charged area was made and the class has one.
    #[inline]
    pub(super) fn kept(&self, k: usize) -> Option<ChargedSheaf<'_>> {
        self.kept_line(k)?.kept()
    }

    /// Class `k`'s inbox, if the charged area was made and the class has one.
    #[inline]
    pub(super) fn inbox(&self, k: usize) -> Option<ChargedSheaf<'_>> {
        self.inbox_line(k)?.inbox()
    }
}

impl<'a, P: Platform> Memcg<'a, P> {
    /// The fast word for the owner of `c` running charged to `objcg`: the address of
    /// its charged area when there is one and its kept sheaves hold `objcg`'s objects
    /// or none (then kmalloc's inline pop hands out only objects charged to `objcg`,
    /// and the inline free fills the inboxes); else 0, and the thread's inline fast
    /// paths must use the zero area.
    pub fn charged_fast_word(&self, c: CpuRef<'_>, objcg: &ObjCgroup) -> usize {
        let Some(st) = self.stock(Some(c)) else {
            return 0;
        };
        let sh = &st.sheaves;
        let tag = sh.objcg.load(Relaxed);
        match sh.area() {
            Some(a) if tag.is_null() || ptr::eq(tag, objcg) => a as *const CpuArea as usize,
            _ => 0,
        }
    }

    /// [`Memcg::charged_fast_word`] for a thread entering `objcg` (or back from a
    /// slow path): empty, untagged kept sheaves take `objcg` first, so that what the
    /// thread's inline frees leave in the inboxes counts as `objcg`'s while it waits.
    pub fn charged_fast_word_for(&self, c: CpuRef<'_>, objcg: &ObjCgroup) -> usize {
        let Some(st) = self.stock(Some(c)) else {
            return 0;
        };
        if st.sheaves.area().is_some() && Self::may_keep(&st.sheaves, objcg) {
            Self::objcg_sheaves_take(&st.sheaves, objcg);
        }
        self.charged_fast_word(c, objcg)
    }

    /// The charged area of `c`'s objcg sheaves (in stock `st`), made if there is none
    /// yet (`None` when memory for it runs out: then nothing is kept).
    #[inline]
    pub(super) fn charged_area<'s>(
        &self,
        c: CpuRef<'_>,
        st: &'s MemcgStock,
    ) -> Option<&'s CpuArea> {
        match st.sheaves.area() {
            Some(a) => Some(a),
            None => self.make_charged_area(c, st),
        }
    }

    /// Makes the charged area of `c`'s stock `st` (see the module docs).
    #[cold]
    #[inline(never)]
    fn make_charged_area<'s>(&self, c: CpuRef<'_>, st: &'s MemcgStock) -> Option<&'s CpuArea> {
        let pages = self.km.pages();
        let gfp = Gfp::ZERO | Gfp::NOWARN;
        let block = pages.alloc_pages(Some(c), gfp, CPU_AREA_ORDER)?;
        let Some(store) = pages.alloc_pages(Some(c), gfp, STORAGE_ORDER) else {
            // SAFETY: allocated just above, seen by nobody.
            unsafe { pages.free_pages(Some(c), block, CPU_AREA_ORDER) };
            return None;
        };
        let area = pages.page_address(block).as_ptr();
        let storage = pages.page_address(store).as_ptr();
        let mut mem = storage;
        let sh = &st.sheaves;
        let caches = self.km.caches();
        for (k, &size) in KMALLOC_SIZES.iter().enumerate() {
            let cg = &caches.set(1)[k];
            if cg.config().objcg_class() != Some(k) {
                continue;
            }
            let Some(plain) = caches.plain(size) else {
                continue;
            };
            let off = plain.config().cpu_offset;
            let cap = CAPACITY[k];
            // SAFETY: the block is ours, zeroed and CPU_AREA_SIZE long (a CPU area's
            // layout: `off` and the charged lines are distinct 64-byte lines in it,
            // the header's line apart); the storage pages hold every class's two
            // sheaves (STORAGE_BYTES), zeroed, 8-aligned, and both live as long as the
            // stock.
            unsafe {
                let kept = &*(area.add(off) as *const KmemCacheCpu);
                kept.install_kept(mem, cap);
                mem = mem.add(charged_sheaf_bytes(cap));
                if has_inbox(k) {
                    let inbox = &*(area.add(inbox_line(k)) as *const KmemCacheCpu);
                    inbox.install_inbox(mem, cap, cg.config());
                    mem = mem.add(charged_sheaf_bytes(cap));
                }
            }
            sh.kept_off[k].store(off as u32, Relaxed);
        }
        // The sheaves laid out stay within what the page was sized for.
        debug_assert!(mem as usize - storage as usize <= STORAGE_BYTES);
        // SAFETY: the block starts with a (zeroed) CpuArea header.
        let a = unsafe { &*(area as *const CpuArea) };
        pages.refresh_area_tag_limit(a);
        sh.area.store(area as *mut CpuArea, Relaxed);
        Some(a)
    }

    /// Brings the charged area's copy of the tag-window length up to the shared one
    /// (the inline free refuses objects past it; the charged free's slow half calls
    /// this, as the CPU areas' free slow path does for theirs).
    pub(super) fn refresh_charged_tag_limit(&self, st: &MemcgStock) {
        if let Some(a) = st.sheaves.area() {
            self.km.pages().refresh_area_tag_limit(a);
        }
    }
}
