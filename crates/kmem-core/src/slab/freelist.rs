//! Freelist encoding: free pointers inside free objects, obfuscated with the cache's
//! key (`CONFIG_SLAB_FREELIST_HARDENED`), and the check that a decoded link stays in its
//! slab. One encoder and decoder for every path of the slab layer.

use super::*;
use core::ptr::{self};

/// [`get_freepointer`] for the lockless pop, whose object may have been taken and be
/// written by its new owner meanwhile: a volatile read of whatever is there (the CAS
/// that follows discards it then).
///
/// # Safety
/// `obj` is (or was a moment ago) a free object of a slab of `s`: its memory is
/// mapped.
#[inline]
pub(super) unsafe fn get_freepointer_racy(s: &CacheConfig, obj: usize) -> usize {
    let at = obj + s.offset;
    // SAFETY: caller: mapped slab memory, aligned for a word.
    let raw = unsafe { ptr::read_volatile(at as *const usize) };
    raw ^ freepointer_key(s, at)
}

/// Reads the free pointer of the free object at `obj`.
///
/// # Safety
/// `obj` is a free object of a slab of `s` (its free pointer word is initialised).
#[inline]
pub(crate) unsafe fn get_freepointer(s: &CacheConfig, obj: usize) -> usize {
    let at = obj + s.offset;
    // SAFETY: caller: a free object, whose word at `offset` holds its successor.
    let raw = unsafe { ptr::read(at as *const usize) };
    raw ^ freepointer_key(s, at)
}

/// The hardening key of the free pointer stored at `at`: `random ^ swab(at)` (0
/// when hardening is off).
///
/// The key does not depend on the stored word, so it is computed beside the load
/// and decoding costs one XOR on the pointer-chasing chain. Compilers reassociate
/// `raw ^ random ^ swab(at)` into two dependent XORs after the load; an empty
/// `asm!` makes the key opaque and keeps it whole.
#[inline(always)]
pub(super) fn freepointer_key(s: &CacheConfig, at: usize) -> usize {
    #[allow(unused_mut)]
    let mut key = s.random ^ (at.swap_bytes() & s.harden_mask);
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    // SAFETY: an empty asm block that only claims to modify `key` in its register;
    // no memory, stack or flags are touched.
    unsafe {
        core::arch::asm!("/* {0} */", inout(reg) key, options(pure, nomem, nostack, preserves_flags));
    }
    key
}

/// # Safety
/// `obj` is an object of a slab of `s` that the caller owns (being freed).
#[inline]
pub(crate) unsafe fn set_freepointer(s: &CacheConfig, obj: usize, next: usize) {
    let at = obj + s.offset;
    // SAFETY: caller: the object is ours to write.
    unsafe { ptr::write(at as *mut usize, next ^ freepointer_key(s, at)) };
}

/// What writing a free pointer needs of a cache, copied out of its [`CacheConfig`]:
/// a loop that links many objects keeps these in registers (through the config, every
/// store into an object would make the compiler load them again).
#[derive(Clone, Copy)]
pub(crate) struct FreePointerKey {
    offset: usize,
    random: usize,
    harden_mask: usize,
}

impl FreePointerKey {
    #[inline(always)]
    pub(crate) fn of(s: &CacheConfig) -> Self {
        Self {
            offset: s.offset,
            random: s.random,
            harden_mask: s.harden_mask,
        }
    }

    /// [`set_freepointer`] with the copied key.
    ///
    /// # Safety
    /// As [`set_freepointer`].
    #[inline(always)]
    pub(crate) unsafe fn set(self, obj: usize, next: usize) {
        let at = obj + self.offset;
        #[allow(unused_mut)]
        let mut key = self.random ^ (at.swap_bytes() & self.harden_mask);
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        // SAFETY: as in `freepointer_key`: an empty asm block on one register.
        unsafe {
            core::arch::asm!("/* {0} */", inout(reg) key, options(pure, nomem, nostack, preserves_flags));
        }
        // SAFETY: caller: the object is ours to write.
        unsafe { ptr::write(at as *mut usize, next ^ key) };
    }
}

/// Whether a decoded freelist value `next` found in `obj` lies in `obj`'s slab
/// (an object or the end token): slabs are aligned to their size, so both share
/// every bit above it. A value that does not is corruption (or a forged pointer).
#[inline]
pub(crate) fn same_slab(cfg: &CacheConfig, obj: usize, next: usize) -> bool {
    (obj ^ next) < cfg.slab_bytes()
}
