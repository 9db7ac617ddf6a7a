//! Where kmem's own code lies in a program that links it (rather than preloading
//! libkmem.so, whose code is one module of its own): the address ranges of the kmem
//! crates' functions, read from the executable's symbol table, so that slub_debug's
//! allocation and free tracks start at the program's frame however much the build
//! inlined (a debug build keeps every kmem frame, a release build only some).
//!
//! Built once by [`load`] (it reads `/proc/self/exe` and allocates, so the heap calls
//! it once it is ready, and only when slub_debug is on); read without a lock by
//! [`contains`]: the ranges are published with one release store and never change.
//! A stripped executable has no symbol table: then nothing is loaded and the stack
//! trace falls back to skipping a fixed number of frames.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// The sorted, merged `[start, end)` ranges of kmem's functions (leaked once).
static RANGES: AtomicPtr<(usize, usize)> = AtomicPtr::new(std::ptr::null_mut());
static LEN: AtomicUsize = AtomicUsize::new(0);

/// Whether a (mangled) symbol name is kmem's: a function of the `kmem` or
/// `kmem-core` crates (their paths, trait impls and closures included, in the legacy
/// and the v0 manglings), or the glue the compiler generates between
/// `#[global_allocator]` and the allocator (`__rust_alloc` and its siblings).
pub fn is_kmem_symbol(name: &str) -> bool {
    name.starts_with("_ZN4kmem")
        || name.contains("kmem_core")
        || name.contains("kmem..")
        || name.contains("_4kmem")
        || name.starts_with("__rust_alloc")
        || name.starts_with("__rust_dealloc")
        || name.starts_with("__rust_realloc")
        || name.starts_with("__rg_")
        || name.starts_with("__rdl_")
}

/// The function ranges named by `is_kmem` in the ELF64 little-endian image `elf`
/// (its `.symtab`), moved by `bias`, sorted and merged. Empty if the image has no
/// symbol table or is not such an image.
pub fn function_ranges(
    elf: &[u8],
    bias: usize,
    is_kmem: impl Fn(&str) -> bool,
) -> Vec<(usize, usize)> {
    let rd = |off: usize, n: usize| -> Option<u64> {
        let b = elf.get(off..off + n)?;
        let mut v = 0u64;
        for (i, &x) in b.iter().enumerate() {
            v |= (x as u64) << (8 * i);
        }
        Some(v)
    };
    let mut out = Vec::new();
    // ELF64, little-endian.
    if elf.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return out;
    }
    let (Some(shoff), Some(shentsize), Some(shnum)) = (rd(0x28, 8), rd(0x3a, 2), rd(0x3c, 2))
    else {
        return out;
    };
    let section = |i: usize| -> Option<(u64, u64, u64, u64, u64)> {
        let at = shoff as usize + i * shentsize as usize;
        // sh_type, sh_offset, sh_size, sh_link, sh_entsize
        Some((
            rd(at + 4, 4)?,
            rd(at + 24, 8)?,
            rd(at + 32, 8)?,
            rd(at + 40, 4)?,
            rd(at + 56, 8)?,
        ))
    };
    const SHT_SYMTAB: u64 = 2;
    const STT_FUNC: u64 = 2;
    for i in 0..shnum as usize {
        let Some((ty, off, size, link, entsize)) = section(i) else {
            return out;
        };
        if ty != SHT_SYMTAB || entsize < 24 {
            continue;
        }
        let Some((_, str_off, str_size, _, _)) = section(link as usize) else {
            return out;
        };
        let strtab = elf
            .get(str_off as usize..(str_off + str_size) as usize)
            .unwrap_or(&[]);
        for s in 0..(size / entsize) as usize {
            let at = off as usize + s * entsize as usize;
            let (Some(name), Some(info), Some(value), Some(len)) =
                (rd(at, 4), rd(at + 4, 1), rd(at + 8, 8), rd(at + 16, 8))
            else {
                break;
            };
            if info & 0xf != STT_FUNC || len == 0 || value == 0 {
                continue;
            }
            let name = strtab
                .get(name as usize..)
                .and_then(|t| t.split(|&c| c == 0).next())
                .and_then(|t| std::str::from_utf8(t).ok())
                .unwrap_or("");
            if is_kmem(name) {
                let start = bias + value as usize;
                out.push((start, start + len as usize));
            }
        }
    }
    out.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(out.len());
    for (s, e) in out {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

/// The load bias of the running executable (0 unless it is position-independent):
/// what to add to its symbol values to get run-time addresses.
pub fn main_program_bias() -> usize {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `info` is valid for this call; `data` is the usize passed below. The
        // first object dl_iterate_phdr reports is the executable itself.
        unsafe { *(data as *mut usize) = (*info).dlpi_addr as usize };
        1
    }
    let mut bias = 0usize;
    // SAFETY: the callback only reads `info` and writes the usize we pass.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut bias as *mut usize).cast()) };
    bias
}

/// Reads the ranges of kmem's functions in the running executable (load bias `bias`,
/// see [`main_program_bias`]), once; later calls do nothing.
pub fn load(bias: usize) {
    if !RANGES.load(Ordering::Acquire).is_null() {
        return;
    }
    let Ok(elf) = std::fs::read("/proc/self/exe") else {
        return;
    };
    let ranges = function_ranges(&elf, bias, is_kmem_symbol);
    if ranges.is_empty() {
        return;
    }
    let ranges: &'static mut [(usize, usize)] = ranges.leak();
    LEN.store(ranges.len(), Ordering::Relaxed);
    if RANGES
        .compare_exchange(
            std::ptr::null_mut(),
            ranges.as_mut_ptr(),
            Ordering::Release,
            Ordering::Relaxed,
        )
        .is_err()
    {
        // Another thread published the same ranges first; ours stay leaked (once).
    }
}

/// Whether the ranges are loaded.
pub fn loaded() -> bool {
    !RANGES.load(Ordering::Acquire).is_null()
}

/// Whether the return address `ip` lies in one of kmem's functions (false when the
/// ranges are not loaded).
pub fn contains(ip: usize) -> bool {
    let p = RANGES.load(Ordering::Acquire);
    if p.is_null() {
        return false;
    }
    // SAFETY: `p` and `LEN` describe the leaked slice `load` published (with a release
    // store after `LEN`); it is never freed or changed.
    let ranges = unsafe { std::slice::from_raw_parts(p, LEN.load(Ordering::Relaxed)) };
    // A return address is just after its call instruction: look up the byte before it.
    let at = ip.wrapping_sub(1);
    let i = ranges.partition_point(|&(s, _)| s <= at);
    i > 0 && at < ranges[i - 1].1
}

/// Non-kmem frames in a row that end kmem's part of a stack: generic library code that
/// kmem instantiates (`Option::unwrap_or_else`, `LocalKey::with`, compiled into the
/// program under core's or std's names) sits between kmem's frames in a build that does
/// not inline, one or two at a time.
const FOREIGN_RUN: usize = 4;

/// How many of the innermost `frames` (return addresses) are kmem's: through the last
/// frame in kmem's functions before [`FOREIGN_RUN`] other frames in a row.
pub fn skip_own_frames(frames: &[*mut libc::c_void]) -> usize {
    skip_frames(frames.iter().map(|&f| f as usize), contains)
}

fn skip_frames(frames: impl Iterator<Item = usize>, own: impl Fn(usize) -> bool) -> usize {
    let (mut skip, mut run) = (0, 0);
    for (i, f) in frames.enumerate() {
        if own(f) {
            skip = i + 1;
            run = 0;
        } else {
            run += 1;
            if run >= FOREIGN_RUN {
                break;
            }
        }
    }
    skip
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmem_symbols_are_recognised() {
        assert!(is_kmem_symbol(
            "_ZN9kmem_core4slab5alloc47_$LT$impl$u20$kmem_core..slab..Slub$LT$P$GT$$GT$10alloc_node17h0E"
        ));
        assert!(is_kmem_symbol("_ZN4kmem4heap7kmalloc17h1E"));
        assert!(is_kmem_symbol(
            "_ZN79_$LT$kmem..heap..platform..HeapPlatform$u20$as$u20$kmem_core..platform..Platform$GT$11stack_trace17h2E"
        ));
        assert!(is_kmem_symbol("__rust_alloc"));
        assert!(!is_kmem_symbol("_ZN9kmem_user4main17h3E"));
        assert!(!is_kmem_symbol("_ZN6tracks13allocate_here17h4E"));
        assert!(!is_kmem_symbol("main"));
    }

    #[test]
    fn skipping_stops_at_the_program() {
        let own = |f: usize| f >= 100;
        // kmem, generic glue, kmem, then the program.
        assert_eq!(
            skip_frames([100, 1, 101, 2, 3, 4, 5, 102].into_iter(), own),
            3
        );
        assert_eq!(skip_frames([1, 2, 3, 4, 100].into_iter(), own), 0);
        assert_eq!(skip_frames([100, 101].into_iter(), own), 2);
    }

    #[test]
    fn the_running_binary_s_kmem_functions_are_found() {
        // This test binary links kmem: its symbol table names kmem's functions.
        let elf = std::fs::read("/proc/self/exe").unwrap();
        let ranges = function_ranges(&elf, 0, is_kmem_symbol);
        assert!(!ranges.is_empty());
        assert!(ranges.windows(2).all(|w| w[0].1 < w[1].0), "sorted, merged");
        assert!(function_ranges(b"not an elf", 0, is_kmem_symbol).is_empty());
        load(main_program_bias());
        assert!(loaded());
        // A kmem function's first byte is inside (as a return address one past it);
        // a C library function is not (another module).
        assert!(contains(main_program_bias as *const () as usize + 1));
        assert!(!contains(libc::getpid as *const () as usize + 1));
    }
}
