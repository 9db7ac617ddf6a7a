//! The thread-local words the allocation and free paths read without `thread_local!`:
//! word [`FAST`], the calling thread's CPU area when it may use it directly (thread
//! mode, attached, no active memory cgroup), else one of the two addresses of
//! kmem-core's zero area ([`kmem_core::percpu::ZERO_CPU_AREA`], see `heap::thread`),
//! which it holds from the thread's start; and
//! words [`CHARGED_AREA`] and [`CHARGED_OBJCG`], the area and the active memory
//! cgroup's objcg of an attached thread-mode thread that has one (else 0), for the
//! charged paths; and word [`CACHE`], the fast word for the `kmem_cache_*` paths.
//!
//! On x86_64 Linux the words are an *initial-exec* TLS variable declared in assembly
//! and each is read with one `fs:`-relative load, from the variable's offset off the
//! thread pointer, which is its own instruction (`tp_offset`: a GOT load in a shared
//! library, a constant in an executable) so that a function reading several words,
//! or a loop reading one, loads the offset once. Rust's `thread_local!` in a shared
//! library (`libkmem.so`) uses the general-dynamic model, which calls `__tls_get_addr`
//! on every access — more instructions than the rest of the fast path. Initial-exec is
//! what glibc's own malloc and mimalloc use: the variable lives in the static TLS
//! block, always present for a library loaded at start (`LD_PRELOAD`, a link-time
//! dependency); a library opened later with `dlopen` needs 32 bytes of glibc's static
//! TLS surplus. Elsewhere the words are a plain `thread_local!`.
//!
//! No locks; each thread reads and writes only its own words.

/// The fast paths' word.
pub const FAST: usize = 0;
/// The charged paths' area word.
pub const CHARGED_AREA: usize = 1;
/// The charged paths' objcg word.
pub const CHARGED_OBJCG: usize = 2;
/// The `kmem_cache_*` fast paths' word: the fast word, but the zero area's address on
/// a thread running charged, whose fast word is its charged area (that area's lines
/// of the plain kmalloc classes hold charged objects, for kmalloc's pops alone).
pub const CACHE: usize = 3;
const WORDS: usize = 4;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod imp {
    use super::WORDS;

    // The variable: 32 bytes of TLS, hidden (never resolved outside the library or
    // program that contains it). The fast word and the cache word start as the zero
    // area's address (a relocated pointer in the TLS image: the dynamic linker
    // relocates the image before it copies it for any thread), the charged words as 0.
    core::arch::global_asm!(
        ".pushsection .tdata,\"awT\",@progbits",
        ".p2align 3",
        ".globl kmem_tls_fast_area",
        ".hidden kmem_tls_fast_area",
        ".type kmem_tls_fast_area, @object",
        ".size kmem_tls_fast_area, 32",
        "kmem_tls_fast_area:",
        ".quad {zero}",
        ".zero 16",
        ".quad {zero}",
        ".popsection",
        zero = sym kmem_core::percpu::ZERO_CPU_AREA,
    );

    /// The variable's offset from the thread pointer (`fs`): the same for every
    /// thread, fixed once the dynamic linker has relocated the library. Its own
    /// instruction, so that the compiler keeps it in a register for every word a
    /// function reads (a charged free reads three) and hoists it out of loops; each
    /// word is then one `fs:`-relative load.
    #[inline(always)]
    fn tp_offset() -> usize {
        let t: usize;
        // SAFETY: loads the initial-exec GOT entry of the TLS variable above, which
        // the dynamic linker fills before any code of the library runs and which
        // never changes afterwards (RELRO: read-only after relocation; in an
        // executable the linker turns the load into the constant itself). Hence
        // `pure` and `nomem`: no program memory read or written, the same value on
        // every call.
        unsafe {
            core::arch::asm!(
                "mov {t}, qword ptr [rip + kmem_tls_fast_area@GOTTPOFF]",
                t = out(reg) t,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        t
    }

    /// The calling thread's word `W`.
    #[inline(always)]
    pub fn get_word<const W: usize>() -> usize {
        const { assert!(W < WORDS) };
        let v: usize;
        // SAFETY: an initial-exec access to the TLS variable above, at the offset from
        // the thread pointer (fs) that `tp_offset` gives; word `W` < WORDS lies inside
        // it. Reads only this thread's word. `pure`: two reads with no write to
        // memory between them give the same value (the thread does not change under a
        // running function; `set_word` writes memory), so the compiler may merge
        // them.
        unsafe {
            core::arch::asm!(
                "mov {v}, qword ptr fs:[{t} + {off}]",
                t = in(reg) tp_offset(),
                v = out(reg) v,
                off = const W * 8,
                options(pure, nostack, readonly, preserves_flags),
            );
        }
        v
    }

    /// Sets the calling thread's word `W`.
    #[inline]
    pub fn set_word<const W: usize>(v: usize) {
        const { assert!(W < WORDS) };
        // SAFETY: as in `get_word`; writes only this thread's word.
        unsafe {
            core::arch::asm!(
                "mov qword ptr fs:[{t} + {off}], {v}",
                t = in(reg) tp_offset(),
                v = in(reg) v,
                off = const W * 8,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
mod imp {
    use super::WORDS;
    use std::cell::Cell;

    thread_local! {
        static WORDS_TLS: [Cell<usize>; WORDS] = const { [const { Cell::new(0) }; WORDS] };
    }

    /// The calling thread's word `W` (the fast and cache words read as the zero area's
    /// address until they are first set).
    #[inline(always)]
    pub fn get_word<const W: usize>() -> usize {
        let v = WORDS_TLS.with(|w| w[W].get());
        if (W == super::FAST || W == super::CACHE) && v == 0 {
            kmem_core::percpu::ZERO_CPU_AREA.base()
        } else {
            v
        }
    }

    /// Sets the calling thread's word `W`.
    #[inline]
    pub fn set_word<const W: usize>(v: usize) {
        WORDS_TLS.with(|w| w[W].set(v));
    }
}

pub use imp::{get_word, set_word};

/// The calling thread's fast word ([`FAST`]).
#[inline(always)]
pub fn get() -> usize {
    get_word::<FAST>()
}

/// Sets the calling thread's fast word ([`FAST`]).
#[inline]
pub fn set(v: usize) {
    set_word::<FAST>(v)
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_thread_has_its_own_word() {
        let before = super::get();
        super::set(0x1234_5678);
        assert_eq!(super::get(), 0x1234_5678);
        std::thread::spawn(|| {
            assert_eq!(
                super::get(),
                kmem_core::percpu::ZERO_CPU_AREA.base(),
                "a new thread starts at the zero area"
            );
            assert_eq!(super::get_word::<{ super::CHARGED_AREA }>(), 0);
            assert_eq!(super::get_word::<{ super::CHARGED_OBJCG }>(), 0);
            super::set(7);
            assert_eq!(super::get(), 7);
        })
        .join()
        .unwrap();
        assert_eq!(super::get(), 0x1234_5678, "untouched by the other thread");
        super::set(before);
    }

    #[test]
    fn the_charged_words_are_distinct_from_the_fast_word() {
        use super::{get_word, set_word, CHARGED_AREA, CHARGED_OBJCG, FAST};
        let saved = (
            get_word::<FAST>(),
            get_word::<CHARGED_AREA>(),
            get_word::<CHARGED_OBJCG>(),
        );
        set_word::<FAST>(1);
        set_word::<CHARGED_AREA>(2);
        set_word::<CHARGED_OBJCG>(3);
        assert_eq!(
            (
                get_word::<FAST>(),
                get_word::<CHARGED_AREA>(),
                get_word::<CHARGED_OBJCG>()
            ),
            (1, 2, 3)
        );
        std::thread::spawn(|| assert_eq!(get_word::<CHARGED_OBJCG>(), 0))
            .join()
            .unwrap();
        set_word::<FAST>(saved.0);
        set_word::<CHARGED_AREA>(saved.1);
        set_word::<CHARGED_OBJCG>(saved.2);
    }
}
