//! A sheaf's *top*: how a CPU area records the fill level of the sheaves it holds
//! (`KmemCacheCpu`'s `main_top` and `spare_top`), and the slot arithmetic on it. A top
//! is the sheaf's address plus 8 bytes per object it holds, so slot `count` is at
//! `top + SHEAF_HEADER`: a fast path reaches the slots from the top alone, with no
//! load of the sheaf's pointer. See `sheaf.rs` for who may read and write the tops.
//!
//! Owns no state; no locking.

use super::sheaf::{SlabSheaf, SHEAF_HEADER};
use crate::sync::AtomicUsize;

/// The slot a sheaf's top points at: slot `count` of the sheaf (see the module docs).
#[inline(always)]
pub(super) fn top_slot(top: usize) -> *mut usize {
    top.wrapping_add(SHEAF_HEADER) as *mut usize
}

/// The top of `sheaf` holding `len` objects: `sheaf + 8 * len` (0 for no sheaf).
#[inline(always)]
pub(super) fn top_of(sheaf: *mut SlabSheaf, len: usize) -> usize {
    (sheaf as usize).wrapping_add(len * core::mem::size_of::<usize>())
}

/// The objects `sheaf` holds by its top `top`: none for no sheaf, and none when the
/// top is below the sheaf (0: taken by a restartable sequences' lock holder, or a
/// racy reader's stale pair).
#[inline(always)]
pub(super) fn len_of(top: usize, sheaf: *mut SlabSheaf) -> usize {
    if sheaf.is_null() {
        return 0;
    }
    top.saturating_sub(sheaf as usize) / core::mem::size_of::<usize>()
}

/// A plain read of one of the owner's words of a `kmem_cache_cpu` (a sheaf's top or
/// pointer, the spare's limit), for the inline fast paths: the compiler folds a
/// plain load into the compare that uses it, which it does not do for an atomic one.
///
/// # Safety
/// Only for a `FastPath::Sheaf` or `FastPath::SheafCounted` cache's owner: there
/// every access to the words is the CPU area's owner's (the fast paths, the slow
/// paths, the census of owned areas), so plain accesses race with nothing; the
/// restartable sequences, which change a `FastPath::SheafRseq` cache's tops from
/// other threads on the CPU, have paths of their own.
#[inline(always)]
pub(super) unsafe fn owner_read(word: &AtomicUsize) -> usize {
    // SAFETY: the caller's contract.
    unsafe { *word.as_ptr() }
}

/// Takes the object in slot `top` of `sheaf` and asks for the line of the one below
/// it, which the next pop hands out (see `KmemCacheCpu::sheaf_pop`). Every pop of a
/// main sheaf goes through here or [`take_below`], fast and slow.
///
/// # Safety
/// `sheaf` is a sheaf the caller holds with an object in slot `top`; the word below
/// slot 0 is its header's `capacity` (`SlabSheaf`), so slot `top - 1` is readable
/// whatever `top` is, and a prefetch of its value, address or not, is harmless.
#[inline(always)]
pub(super) unsafe fn take_and_prefetch_next(sheaf: *mut SlabSheaf, top: usize) -> usize {
    // SAFETY: forwarded: the sheaf's top with `top + 1` objects.
    unsafe { take_below(top_of(sheaf, top + 1)) }
}

/// [`take_and_prefetch_next`] by the sheaf's top: the object just below `top` (slot
/// `count - 1`), and the line of the one below it asked for.
///
/// # Safety
/// `top` is the top of a sheaf the caller holds with at least one object (as
/// [`take_and_prefetch_next`]).
#[inline(always)]
pub(super) unsafe fn take_below(top: usize) -> usize {
    // SAFETY: slots `count - 1` and `count - 2` (or the header word) lie in the
    // caller's sheaf. The next slot is read first: read after, the compiler computed
    // its address in two instructions (`KmemAlloc`'s inlined pop) instead of folding
    // it into the load.
    let (next, obj) = unsafe {
        (
            *top_slot(top.wrapping_sub(16)),
            *top_slot(top.wrapping_sub(8)),
        )
    };
    crate::prefetch::prefetch_write(next);
    obj
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_top_counts_the_objects_below_it_and_a_taken_or_missing_one_counts_none() {
        let sheaf = 0x10_000 as *mut SlabSheaf;
        for n in [0, 1, 7, 124] {
            let t = top_of(sheaf, n);
            assert_eq!(len_of(t, sheaf), n);
            // Slot `n` is where the next push writes: `n` words past the header.
            assert_eq!(top_slot(t) as usize, 0x10_000 + SHEAF_HEADER + 8 * n);
        }
        // A taken top (0) and a missing sheaf hold nothing.
        assert_eq!(len_of(0, sheaf), 0);
        assert_eq!(len_of(top_of(sheaf, 5), core::ptr::null_mut()), 0);
        assert_eq!(top_of(core::ptr::null_mut(), 0), 0);
    }

    #[test]
    fn take_below_hands_out_the_top_object_of_a_real_sheaf() {
        // A sheaf's header and three slots, as words: the capacity word just before
        // slot 0, then objects 0xa0, 0xb0, 0xc0.
        let mut words = [0usize; SHEAF_HEADER / 8 + 3];
        let h = SHEAF_HEADER / 8;
        words[h - 1] = 3;
        words[h..].copy_from_slice(&[0xa0, 0xb0, 0xc0]);
        let sheaf = words.as_mut_ptr() as *mut SlabSheaf;
        // SAFETY: the top of a sheaf of three objects in `words`; the prefetch of a
        // non-address is harmless.
        let (top3, one) = unsafe { (take_below(top_of(sheaf, 3)), take_below(top_of(sheaf, 1))) };
        assert_eq!((top3, one), (0xc0, 0xa0));
        // SAFETY: as above, by index.
        assert_eq!(unsafe { take_and_prefetch_next(sheaf, 1) }, 0xb0);
    }
}
