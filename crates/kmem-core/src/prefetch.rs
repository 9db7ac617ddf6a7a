//! Software prefetches for the slab layer's bulk paths: a flush that links a sheaf's
//! objects into their slabs and a refill that walks a slab's freelist touch one
//! object after another, each a likely cache miss when the objects were freed in
//! random order (a table dropped and rebuilt); asked for ahead, the misses overlap
//! instead of coming one at a time. And for the sheaf pop, which asks for the object
//! the next pop hands out (`KmemCacheCpu::sheaf_pop`).
//!
//! A prefetch is a hint: it never faults, whatever the address (x86's `PREFETCHh`,
//! Arm's `PRFM`), and changes nothing a program can observe but timing, so these are
//! safe functions. On other targets they do nothing.
//!
//! Owns no state; no locking.

/// Asks for the cache line holding `addr`, to be read soon.
#[inline(always)]
pub fn prefetch_read(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 (SSE, part of x86_64's baseline) loads nothing into a register
    // and raises no exception for any address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: PRFM is a hint: it writes no register or memory and never aborts.
    unsafe {
        core::arch::asm!("prfm pldl1keep, [{0}]", in(reg) addr, options(nostack, readonly, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = addr;
}

/// Asks for the cache line holding `addr`, to be written soon (x86: the read hint,
/// which brings a line no other CPU holds in the exclusive state).
#[inline(always)]
pub fn prefetch_write(addr: usize) {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as in `prefetch_read`.
    unsafe {
        core::arch::asm!("prfm pstl1keep, [{0}]", in(reg) addr, options(nostack, readonly, preserves_flags))
    };
    #[cfg(not(target_arch = "aarch64"))]
    prefetch_read(addr);
}
