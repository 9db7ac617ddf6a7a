//! C++'s global `operator new` and `operator delete`, every standard form (plain and
//! array, sized, `std::align_val_t`, `std::nothrow_t`), served by kmem directly.
//!
//! Without them a C++ program's `new` goes through the C++ runtime's own operator
//! (libstdc++'s `operator new`: a size test and the new-handler loop around a call
//! to `malloc` through the PLT) and its `delete` through one more jump to `free`:
//! two extra calls and about ten instructions on every allocate/free pair, which
//! mimalloc, jemalloc and tcmalloc avoid by exporting these symbols too. Here `new`
//! is `malloc`'s fast path inlined and `delete` a jump to a copy of `free`'s, so a
//! C++ pair costs what a C pair does, and one instruction more.
//!
//! Failure keeps C++'s semantics without C++ code here: when kmem has no memory (or
//! the request is invalid), the call is handed to the *next* definition of the same
//! operator in the program's lookup order (`dlsym(RTLD_NEXT, …)`: the C++ runtime's),
//! which retries through `malloc` (kmem's), runs the installed `std::new_handler`
//! between tries and throws `std::bad_alloc`, or returns null for the `nothrow`
//! forms, exactly as it does without the preload. A process where no later
//! definition exists cannot have called these through a C++ runtime; it gets a
//! report and `abort` (what an uncaught `bad_alloc` ends in).
//!
//! The `new` forms and their slow halves are `extern "C-unwind"`: the runtime's
//! `std::bad_alloc` (or whatever a new-handler throws) unwinds through them to the
//! program's `catch`, as it would through the runtime's own operator.
//!
//! Alignment: the `new` forms get `malloc`'s (16 bytes for every size above 8:
//! clang marks `operator new`'s result aligned to `__STDCPP_DEFAULT_NEW_ALIGNMENT__`,
//! 16, and may store to it with aligned vector moves), and the aligned forms any
//! alignment asked for.
//!
//! `delete` ignores the size and alignment it is given: `free` finds both from the
//! object's page, and checks the pointer as `free` does (a foreign pointer or a
//! double free at the sheaf's top is reported, then the program aborts).
//!
//! The mangled names are the Itanium C++ ABI's for a 64-bit `size_t`
//! (`unsigned long`, `m`): every target kmem runs on.
//!
//! Owns no state (the runtime's operators are looked up on each failure, a cold
//! path); no locking.

// The functions are named by their mangled C++ names.
#![allow(non_snake_case)]

use super::{alloc, free_or_abort, malloc_align, malloc_fast, malloc_other};
use libc::{c_char, c_void, size_t};

/// A NUL-terminated mangled name, passed in one register (made by `name!`).
#[derive(Clone, Copy)]
#[repr(transparent)]
struct Name(*const c_char);

/// The [`Name`] of the function `$f`.
macro_rules! name {
    ($f:ident) => {
        Name(concat!(stringify!($f), "\0").as_ptr().cast())
    };
}

/// The next definition of the operator named `name` after this library's, or a
/// report and `abort` when there is none.
#[cold]
#[inline(never)]
fn next_operator(name: Name) -> *mut c_void {
    // SAFETY: `name` is NUL-terminated (`name!`); RTLD_NEXT asks for the definition
    // after the calling object's.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.0) };
    if f.is_null() {
        kmem::platform::linux::write_stderr(
            b"kmem: operator new: out of memory, and no C++ runtime after libkmem.so \
              to run the new-handler or throw std::bad_alloc; aborting\n",
        );
        // SAFETY: abort has no preconditions.
        unsafe { libc::abort() }
    }
    f
}

/// `operator new(size)` / `new[]` past kmem: the C++ runtime's operator `name`,
/// which retries, runs the new-handler, throws or (nothrow forms) returns null.
#[cold]
#[inline(never)]
fn new_fallback(name: Name, size: size_t) -> *mut c_void {
    let f = next_operator(name);
    // SAFETY: `name` is one of the one-argument forms (`_Znwm`, `_Znam`), whose
    // signature is `void *(size_t)`.
    let f: unsafe extern "C-unwind" fn(size_t) -> *mut c_void = unsafe { std::mem::transmute(f) };
    // SAFETY: the runtime's own operator, called as the program would.
    unsafe { f(size) }
}

/// [`new_fallback`] for the forms with a second argument: `align_val_t` (a
/// `size_t` by value) or `const nothrow_t &` (a pointer, never read: `nothrow_t` is
/// empty).
#[cold]
#[inline(never)]
fn new_fallback2(name: Name, size: size_t, arg: usize) -> *mut c_void {
    let f = next_operator(name);
    // SAFETY: `name` is a two-argument form; both second arguments travel in one
    // integer register (the Itanium ABI passes `align_val_t` as its underlying
    // `size_t` and a reference as a pointer).
    let f: unsafe extern "C-unwind" fn(size_t, usize) -> *mut c_void =
        unsafe { std::mem::transmute(f) };
    // SAFETY: the runtime's own operator, called as the program would.
    unsafe { f(size, arg) }
}

/// [`new_fallback`] for the aligned nothrow forms: `(size, align_val_t, const
/// nothrow_t &)`.
#[cold]
#[inline(never)]
fn new_fallback3(name: Name, size: size_t, align: usize, nt: usize) -> *mut c_void {
    let f = next_operator(name);
    // SAFETY: `name` is `_ZnwmSt11align_val_tRKSt9nothrow_t` or its array form,
    // whose arguments are three integer registers (see `new_fallback2`).
    let f: unsafe extern "C-unwind" fn(size_t, usize, usize) -> *mut c_void =
        unsafe { std::mem::transmute(f) };
    // SAFETY: the runtime's own operator, called as the program would.
    unsafe { f(size, align, nt) }
}

/// The plain `new` forms past `malloc`'s fast path (out of line, so that the fast path saves
/// no register; with nothing to drop on the way, the call is a tail call):
/// the rest of `malloc`, then the runtime's operator `name`.
#[inline(never)]
extern "C-unwind" fn new_slow(name: Name, size: size_t) -> *mut c_void {
    let p = malloc_other(size);
    if p.is_null() {
        return new_fallback(name, size);
    }
    p
}

/// [`new_slow`] for the `nothrow` forms.
#[inline(never)]
extern "C-unwind" fn new_slow_nothrow(name: Name, size: size_t, nt: *const c_void) -> *mut c_void {
    let p = malloc_other(size);
    if p.is_null() {
        return new_fallback2(name, size, nt as usize);
    }
    p
}

/// `new` of `size` bytes aligned to `align` (an `align_val_t`): null when kmem has
/// none or `align` is not a power of two (the caller hands over to the runtime).
#[inline]
fn new_aligned(size: size_t, align: usize) -> *mut c_void {
    // `malloc`'s alignment for `size` (8 up to 8 bytes, else 16) serves any alignment
    // up to it; more takes the layout path, whose class covers the alignment. (The
    // compiler passes `align_val_t` only above `__STDCPP_DEFAULT_NEW_ALIGNMENT__`,
    // 16; explicit calls may pass less.)
    if align <= malloc_align(size) {
        let p = malloc_fast(size);
        return if p.is_null() { malloc_other(size) } else { p };
    }
    alloc(size.max(1), align, false)
}

/// Defines a throwing one-size `new` form: `malloc`, then the runtime's.
macro_rules! new_plain {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(size: size_t) -> *mut c_void {
            let p = malloc_fast(size);
            if p.is_null() {
                return new_slow(name!($name), size);
            }
            p
        }
    };
}

new_plain!(
    /// `operator new(std::size_t)`, on a line of its own (`hot_entry_section`).
    #[link_section = ".text.kmem_entry.new"]
    _Znwm
);
crate::hot_entry_section!(".text.kmem_entry.new");
new_plain!(
    /// `operator new[](std::size_t)`.
    _Znam
);

/// Defines a `nothrow` one-size `new` form.
macro_rules! new_nothrow {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(size: size_t, nt: *const c_void) -> *mut c_void {
            let p = malloc_fast(size);
            if p.is_null() {
                return new_slow_nothrow(name!($name), size, nt);
            }
            p
        }
    };
}

new_nothrow!(
    /// `operator new(std::size_t, const std::nothrow_t &)`.
    _ZnwmRKSt9nothrow_t
);
new_nothrow!(
    /// `operator new[](std::size_t, const std::nothrow_t &)`.
    _ZnamRKSt9nothrow_t
);

/// Defines an `align_val_t` `new` form.
macro_rules! new_align {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(size: size_t, align: usize) -> *mut c_void {
            let p = new_aligned(size, align);
            if p.is_null() {
                return new_fallback2(name!($name), size, align);
            }
            p
        }
    };
}

new_align!(
    /// `operator new(std::size_t, std::align_val_t)`.
    _ZnwmSt11align_val_t
);
new_align!(
    /// `operator new[](std::size_t, std::align_val_t)`.
    _ZnamSt11align_val_t
);

/// Defines an `align_val_t`, `nothrow` `new` form.
macro_rules! new_align_nothrow {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(
            size: size_t,
            align: usize,
            nt: *const c_void,
        ) -> *mut c_void {
            let p = new_aligned(size, align);
            if p.is_null() {
                return new_fallback3(name!($name), size, align, nt as usize);
            }
            p
        }
    };
}

new_align_nothrow!(
    /// `operator new(std::size_t, std::align_val_t, const std::nothrow_t &)`.
    _ZnwmSt11align_val_tRKSt9nothrow_t
);
new_align_nothrow!(
    /// `operator new[](std::size_t, std::align_val_t, const std::nothrow_t &)`.
    _ZnamSt11align_val_tRKSt9nothrow_t
);

/// Defines `delete` forms: `free`, whatever else they are given (size, alignment,
/// `nothrow_t`): kmem reads the object's size and alignment from its page.
macro_rules! delete {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        $(#[$doc])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: *mut c_void $(, $arg: $ty)*) {
            $(let _ = $arg;)*
            // SAFETY: the caller's pointer, from `new` (kmem's, or the runtime's,
            // which is kmem's malloc): free checks it as for C.
            unsafe { delete_body(p) };
        }
    )*};
}

/// What every `delete` form runs: `free`'s body, out of line, so that each form is
/// a jump to it. Inlined, the forms would be copies of `free` that the compiler
/// merges into it, and profilers and debuggers would name a C program's `free`
/// after one of them (`operator delete[]`).
#[inline(never)]
#[link_section = ".text.kmem_entry.delete"]
unsafe extern "C" fn delete_body(p: *mut c_void) {
    // SAFETY: forwarded from the `delete` forms' callers.
    unsafe { free_or_abort(p) }
}
crate::hot_entry_section!(".text.kmem_entry.delete");

delete! {
    /// `operator delete(void *)`.
    _ZdlPv();
    /// `operator delete[](void *)`.
    _ZdaPv();
    /// `operator delete(void *, std::size_t)` (C++14 sized deallocation).
    _ZdlPvm(_size: size_t);
    /// `operator delete[](void *, std::size_t)`.
    _ZdaPvm(_size: size_t);
    /// `operator delete(void *, const std::nothrow_t &)`.
    _ZdlPvRKSt9nothrow_t(_nt: *const c_void);
    /// `operator delete[](void *, const std::nothrow_t &)`.
    _ZdaPvRKSt9nothrow_t(_nt: *const c_void);
    /// `operator delete(void *, std::align_val_t)`.
    _ZdlPvSt11align_val_t(_align: usize);
    /// `operator delete[](void *, std::align_val_t)`.
    _ZdaPvSt11align_val_t(_align: usize);
    /// `operator delete(void *, std::size_t, std::align_val_t)`.
    _ZdlPvmSt11align_val_t(_size: size_t, _align: usize);
    /// `operator delete[](void *, std::size_t, std::align_val_t)`.
    _ZdaPvmSt11align_val_t(_size: size_t, _align: usize);
    /// `operator delete(void *, std::align_val_t, const std::nothrow_t &)`.
    _ZdlPvSt11align_val_tRKSt9nothrow_t(_align: usize, _nt: *const c_void);
    /// `operator delete[](void *, std::align_val_t, const std::nothrow_t &)`.
    _ZdaPvSt11align_val_tRKSt9nothrow_t(_align: usize, _nt: *const c_void);
}
