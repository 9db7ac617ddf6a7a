//! Symbol names made readable: Rust's legacy scheme (`_ZN…17h<hash>E`) decoded here,
//! C++'s (the Itanium ABI, `_Z…`) by the C++ runtime's own `__cxa_demangle`, found
//! among the objects the process has loaded or brought in by [`load_cxx_runtime`].
//! Owns one word: the demangler found (kept once found). No lock; this runs outside
//! the allocation paths (the C++ demangler allocates with `malloc`).

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Demangles Rust legacy (`_ZN...17h<16 hex>E`, hash dropped, `$LT$`/`$GT$`/`$u20$`/`..`
/// etc. escapes decoded) symbols, and C++ ones (`_Z…`, `_ZN3foo3barEi` to
/// `foo::bar(int)`) where a C++ runtime's demangler is loaded ([`demangle_cxx`]); v0
/// (`_R...`) and C names, and C++ names without a runtime, are returned unchanged.
pub fn demangle(name: &str) -> String {
    demangle_legacy(name)
        .or_else(|| demangle_cxx(name))
        .unwrap_or_else(|| name.to_owned())
}

/// The signature of the Itanium C++ ABI's `abi::__cxa_demangle`: the mangled name, an
/// output buffer and its length (null: it allocates with `malloc`), the status (0 on
/// success).
type CxaDemangle =
    unsafe extern "C" fn(*const c_char, *mut c_char, *mut usize, *mut c_int) -> *mut c_char;

/// The `__cxa_demangle` found so far (0: none yet). Only a found one is kept: a
/// program may load its C++ runtime later, and [`load_cxx_runtime`] may bring one.
static CXA_DEMANGLE: AtomicUsize = AtomicUsize::new(0);

/// The C++ runtime's demangler: kept, else looked up among the objects the process
/// has loaded (libstdc++ or libc++abi in every C++ program).
fn cxa_demangle() -> Option<CxaDemangle> {
    let mut f = CXA_DEMANGLE.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: a lookup by a NUL-terminated name among the loaded objects.
        f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__cxa_demangle".as_ptr()) } as usize;
        if f == 0 {
            return None;
        }
        CXA_DEMANGLE.store(f, Ordering::Release);
    }
    // SAFETY: `f` is the address of `__cxa_demangle`, whose C signature `CxaDemangle`
    // spells out (the Itanium C++ ABI, section 3.4).
    Some(unsafe { std::mem::transmute::<usize, CxaDemangle>(f) })
}

/// Loads a C++ runtime's demangler into a process that has none (`libstdc++.so.6`,
/// else `libc++abi.so.1`), for tools that symbolize other processes' addresses
/// (`kmem top`); a C++ program has one already. The library stays loaded, privately
/// (`RTLD_LOCAL`). Tries the libraries once per process (a caller that refreshes
/// does not search the library path again). Returns whether a demangler is
/// available now.
pub fn load_cxx_runtime() -> bool {
    static TRIED: AtomicBool = AtomicBool::new(false);
    if cxa_demangle().is_some() {
        return true;
    }
    if TRIED.swap(true, Ordering::Relaxed) {
        return false;
    }
    for lib in [c"libstdc++.so.6", c"libc++abi.so.1"] {
        // SAFETY: NUL-terminated names; the handle is kept (never closed), so the
        // function found through it stays valid.
        let f = unsafe {
            let h = libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if h.is_null() {
                continue;
            }
            libc::dlsym(h, c"__cxa_demangle".as_ptr())
        };
        if !f.is_null() {
            CXA_DEMANGLE.store(f as usize, Ordering::Release);
            return true;
        }
    }
    false
}

/// The C++ demangling of `name` (an Itanium ABI name, `_Z…`) by the C++ runtime's
/// `__cxa_demangle`; `None` for other names, where no runtime is loaded, or where it
/// refuses the name. Only `_Z` names are given to it: it would read a plain C name
/// such as `i` as a type (`int`).
fn demangle_cxx(name: &str) -> Option<String> {
    if !name.starts_with("_Z") {
        return None;
    }
    let f = cxa_demangle()?;
    let c = CString::new(name).ok()?;
    let mut status: c_int = -1;
    // SAFETY: a NUL-terminated name, no buffer (the demangler allocates the result
    // with `malloc`), a valid status word.
    let out = unsafe {
        f(
            c.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut status,
        )
    };
    if out.is_null() {
        return None;
    }
    let text = (status == 0).then(|| {
        // SAFETY: on success a NUL-terminated string the demangler allocated.
        unsafe { CStr::from_ptr(out) }
            .to_string_lossy()
            .into_owned()
    });
    // SAFETY: allocated by the demangler with the process's `malloc`, freed once.
    unsafe { libc::free(out.cast()) };
    text
}

/// The legacy demangling of `name`, or `None` if it is not a legacy Rust symbol.
fn demangle_legacy(name: &str) -> Option<String> {
    let inner = name
        .strip_prefix("_ZN")
        .or_else(|| name.strip_prefix("__ZN"))
        .or_else(|| name.strip_prefix("ZN"))?;
    // The path: <len><ident>... up to 'E'.
    let mut parts = Vec::new();
    let mut rest = inner;
    loop {
        if let Some(after) = rest.strip_prefix('E') {
            rest = after;
            break;
        }
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let len: usize = rest[..digits].parse().ok()?;
        let ident = rest.get(digits..digits.checked_add(len)?)?;
        if ident.is_empty() || !ident.is_ascii() {
            return None;
        }
        parts.push(ident);
        rest = &rest[digits + len..];
    }
    // Only Rust's: the last element is the hash, h + 16 hex digits.
    let hash = parts.pop()?;
    if parts.is_empty()
        || hash.len() != 17
        || !hash.starts_with('h')
        || !hash[1..].bytes().all(|c| c.is_ascii_hexdigit())
    {
        return None;
    }
    // What follows 'E': nothing, or a suffix (`.llvm.<hash>` is dropped).
    if !rest.is_empty() && !rest.starts_with('.') {
        return None;
    }
    let mut out = String::with_capacity(inner.len());
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push_str("::");
        }
        decode_ident(part, &mut out)?;
    }
    if !rest.starts_with(".llvm.") {
        out.push_str(rest);
    }
    Some(out)
}

/// Appends the legacy identifier `ident` to `out`, its `$..$` escapes and `..` decoded.
fn decode_ident(ident: &str, out: &mut String) -> Option<()> {
    let mut rest = ident;
    // An identifier that starts with an escape is written with a leading '_'.
    if rest.starts_with("_$") {
        rest = &rest[1..];
    }
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('$') {
            let end = after.find('$')?;
            let c = match &after[..end] {
                "SP" => '@',
                "BP" => '*',
                "RF" => '&',
                "LT" => '<',
                "GT" => '>',
                "LP" => '(',
                "RP" => ')',
                "C" => ',',
                esc => {
                    let hex = esc.strip_prefix('u')?;
                    char::from_u32(u32::from_str_radix(hex, 16).ok()?)?
                }
            };
            out.push(c);
            rest = &after[end + 1..];
        } else if let Some(after) = rest.strip_prefix("..") {
            out.push_str("::");
            rest = after;
        } else {
            let end = rest[1..].find(['$', '.']).map_or(rest.len(), |e| e + 1);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_rust_symbols_are_demangled() {
        assert_eq!(
            demangle("_ZN4kmem9symbolize5tests8site_one17h0123456789abcdefE"),
            "kmem::symbolize::tests::site_one"
        );
        assert_eq!(
            demangle(
                "_ZN84_$LT$kmem..heap..platform..HeapPlatform$u20$as$u20$\
                 kmem_core..platform..Platform$GT$11stack_trace17h2d414ebb860362b9E"
            ),
            "<kmem::heap::platform::HeapPlatform as kmem_core::platform::Platform>::stack_trace"
        );
        assert_eq!(
            demangle(
                "_ZN4core3ptr85drop_in_place$LT$std..rt..lang_start$LT$$LP$$RP$$GT$..\
                 $u7b$$u7b$closure$u7d$$u7d$$GT$17h0123456789abcdefE"
            ),
            "core::ptr::drop_in_place<std::rt::lang_start<()>::{{closure}}>"
        );
        assert_eq!(
            demangle("_ZN42_$LT$$RF$T$u20$as$u20$core..fmt..Debug$GT$3fmt17hffffffffffffffffE"),
            "<&T as core::fmt::Debug>::fmt"
        );
        assert_eq!(
            demangle("_ZN3std2rt10lang_start17h0123456789abcdefE.llvm.123456"),
            "std::rt::lang_start"
        );
        // Not legacy Rust: not the Rust demangler's (C++ names may be the C++ one's).
        for name in [
            "malloc",
            "__libc_malloc",
            "_RNvNtCs1234_4kmem9symbolize8demangle",
            "_ZN3foo3barEv",
            "_ZN4kmem4heap7kmallocE",
            "_ZN4kmem17h0123456789abcdef",
            "_ZN99kmem17h0123456789abcdefE",
            "",
        ] {
            assert_eq!(demangle_legacy(name), None, "{name}");
        }
        for name in ["malloc", "__libc_malloc", "i", ""] {
            assert_eq!(demangle(name), name);
        }
    }

    /// C++ names through the C++ runtime's demangler, which the test loads (the CI
    /// machine has g++, and with it libstdc++); plain C names, even ones that read as
    /// a C++ type, and names it refuses stay as they are.
    #[test]
    fn cxx_symbols_are_demangled_by_the_cxx_runtime() {
        assert!(
            load_cxx_runtime(),
            "no libstdc++.so.6 or libc++abi.so.1 to load"
        );
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("_ZL10leak_nodesv"), "leak_nodes()");
        let v = demangle("_ZNSt6vectorIiSaIiEE9push_backERKi");
        assert!(v.starts_with("std::vector<int, std::allocator<int>"), "{v}");
        assert!(v.ends_with(">::push_back(int const&)"), "{v}");
        // Rust's legacy names keep their own demangling (no hash, no `::h…`).
        assert_eq!(
            demangle("_ZN4kmem9symbolize5tests8site_one17h0123456789abcdefE"),
            "kmem::symbolize::tests::site_one"
        );
        for name in ["i", "v", "malloc", "_Zgarbage", "_Z"] {
            assert_eq!(demangle(name), name);
        }
    }
}
