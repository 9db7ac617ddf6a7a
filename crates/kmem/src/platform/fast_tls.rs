//! The one thread-local word the allocation and free fast paths read: the calling
//! thread's CPU area when it may use it directly (thread mode, attached, no active
//! memory cgroup), else 0 (see `heap::thread`).
//!
//! On x86_64 Linux the word is an *initial-exec* TLS variable declared in assembly and
//! read with one `fs:`-relative load. Rust's `thread_local!` in a shared library
//! (`libkmem.so`) uses the general-dynamic model, which calls `__tls_get_addr` on every
//! access — more instructions than the rest of the fast path. Initial-exec is what
//! glibc's own malloc and mimalloc use: the variable lives in the static TLS block,
//! always present for a library loaded at start (`LD_PRELOAD`, a link-time
//! dependency); a library opened later with `dlopen` needs 8 bytes of glibc's static
//! TLS surplus. Elsewhere the word is a plain `thread_local!`.
//!
//! No locks; each thread reads and writes only its own word.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod imp {
    // The variable: 8 bytes of zero-initialised TLS, hidden (never resolved outside
    // the library or program that contains it).
    core::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".p2align 3",
        ".globl kmem_tls_fast_area",
        ".hidden kmem_tls_fast_area",
        ".type kmem_tls_fast_area, @object",
        ".size kmem_tls_fast_area, 8",
        "kmem_tls_fast_area:",
        ".zero 8",
        ".popsection",
    );

    /// The calling thread's word.
    #[inline(always)]
    pub fn get() -> usize {
        let v: usize;
        // SAFETY: an initial-exec access to the TLS variable above: the GOT entry
        // holds its offset from the thread pointer (fs), set by the dynamic linker
        // (or the offset itself once the linker relaxes it in an executable). Reads
        // only this thread's word.
        unsafe {
            core::arch::asm!(
                "mov {t}, qword ptr [rip + kmem_tls_fast_area@GOTTPOFF]",
                "mov {v}, qword ptr fs:[{t}]",
                t = out(reg) _,
                v = out(reg) v,
                options(nostack, readonly, preserves_flags),
            );
        }
        v
    }

    /// Sets the calling thread's word.
    #[inline]
    pub fn set(v: usize) {
        // SAFETY: as in `get`; writes only this thread's word.
        unsafe {
            core::arch::asm!(
                "mov {t}, qword ptr [rip + kmem_tls_fast_area@GOTTPOFF]",
                "mov qword ptr fs:[{t}], {v}",
                t = out(reg) _,
                v = in(reg) v,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
mod imp {
    use std::cell::Cell;

    thread_local! {
        static FAST_AREA: Cell<usize> = const { Cell::new(0) };
    }

    /// The calling thread's word.
    #[inline(always)]
    pub fn get() -> usize {
        FAST_AREA.with(Cell::get)
    }

    /// Sets the calling thread's word.
    #[inline]
    pub fn set(v: usize) {
        FAST_AREA.with(|c| c.set(v));
    }
}

pub use imp::{get, set};

#[cfg(test)]
mod tests {
    #[test]
    fn each_thread_has_its_own_word() {
        let before = super::get();
        super::set(0x1234_5678);
        assert_eq!(super::get(), 0x1234_5678);
        std::thread::spawn(|| {
            assert_eq!(super::get(), 0, "a new thread starts at 0");
            super::set(7);
            assert_eq!(super::get(), 7);
        })
        .join()
        .unwrap();
        assert_eq!(super::get(), 0x1234_5678, "untouched by the other thread");
        super::set(before);
    }
}
