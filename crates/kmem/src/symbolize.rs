//! Code addresses to names, for allocation-site and leak reports: the executable
//! mappings of one process (itself or another of the same user, from
//! `/proc/<pid>/maps`), the symbol tables of the ELF files behind them (read once per
//! file, on first use), and the demanglers that make their names readable: Rust's
//! legacy scheme here, C++'s (the Itanium ABI) through the C++ runtime's own
//! `__cxa_demangle` when the process has one ([`load_cxx_runtime`] gives one to a
//! process without, such as `kmem top`).
//!
//! An address becomes `function+0xoff/0xsize` (the kernel's `%pS` form), with
//! ` [module]` appended outside the main executable; without a covering symbol it
//! becomes `module+0xfileoffset`, and outside every executable mapping `0x<addr>`.
//! This runs outside the allocation paths: it allocates and reads files freely.

mod demangle;

pub use demangle::{demangle, load_cxx_runtime};
use std::collections::HashMap;
use std::fmt;

/// One executable mapping of `/proc/<pid>/maps`: `[start, end)` maps the file `path`
/// from file offset `offset`.
#[derive(Debug, Clone)]
struct Mapping {
    start: usize,
    end: usize,
    offset: u64,
    path: String,
}

impl Mapping {
    /// Whether `path` names a file that can be read (not `[vdso]`, not deleted).
    fn is_file(&self) -> bool {
        self.path.starts_with('/') && !self.path.ends_with(" (deleted)")
    }

    /// The module name: the file's basename (`libc.so.6`), or the pseudo-path itself.
    fn module(&self) -> &str {
        let path = self.path.strip_suffix(" (deleted)").unwrap_or(&self.path);
        path.rsplit('/').next().unwrap_or(path)
    }
}

/// A `PT_LOAD` segment: file bytes `[offset, offset + filesz)` at `vaddr`, `memsz` long.
#[derive(Debug, Clone, Copy)]
struct Load {
    offset: u64,
    filesz: u64,
    vaddr: u64,
    memsz: u64,
}

/// A function symbol covering the virtual addresses `[start, end)`; its (mangled) name
/// is `names[name.0..name.1]`.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    start: u64,
    end: u64,
    name: (usize, usize),
}

/// What one ELF file offers: its load segments and its function symbols, sorted.
#[derive(Debug, Default)]
struct ElfSymbols {
    loads: Vec<Load>,
    symbols: Vec<Symbol>,
    names: String,
}

/// How far back a lookup walks past symbols that end before the address, to find an
/// enclosing (overlapping) one.
const OVERLAP_WALK: usize = 16;

impl ElfSymbols {
    /// The virtual address of file offset `off`, through the `PT_LOAD` containing it.
    fn vaddr(&self, off: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|l| off >= l.offset && off - l.offset < l.filesz)
            .and_then(|l| (off - l.offset).checked_add(l.vaddr))
    }

    /// The symbol covering `vaddr`: its mangled name, offset into it and size.
    fn lookup(&self, vaddr: u64) -> Option<(&str, u64, u64)> {
        let i = self.symbols.partition_point(|s| s.start <= vaddr);
        let sym = self.symbols[..i]
            .iter()
            .rev()
            .take(OVERLAP_WALK)
            .find(|s| vaddr < s.end)?;
        let name = self.names.get(sym.name.0..sym.name.1)?;
        Some((name, vaddr - sym.start, sym.end - sym.start))
    }
}

/// Little-endian reads from an ELF image, bounds-checked.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    /// The `n`-byte (at most 8) little-endian value at `off`.
    fn get(&self, off: u64, n: usize) -> Option<u64> {
        let off = usize::try_from(off).ok()?;
        let bytes = self.0.get(off..off.checked_add(n)?)?;
        Some(bytes.iter().rev().fold(0, |v, &b| (v << 8) | b as u64))
    }

    /// The `n`-byte field `field` bytes into the structure at `base`.
    fn field(&self, base: u64, field: u64, n: usize) -> Option<u64> {
        self.get(base.checked_add(field)?, n)
    }
}

const PT_LOAD: u64 = 1;
const SHT_SYMTAB: u64 = 2;
const SHT_DYNSYM: u64 = 11;
const STT_NOTYPE: u64 = 0;
const STT_FUNC: u64 = 2;
const STT_GNU_IFUNC: u64 = 10;
const STB_LOCAL: u64 = 0;
const SHN_UNDEF: u64 = 0;
const SHT_GNU_VERSYM: u64 = 0x6fff_ffff;
const VERSYM_HIDDEN: u64 = 0x8000;
const SHN_LORESERVE: u64 = 0xff00;

/// One section header: (sh_type, sh_addr, sh_offset, sh_size, sh_link, sh_entsize).
type Section = (u64, u64, u64, u64, u64, u64);

/// A symbol found in the table, before sorting: where it starts, its size, how far a
/// size-0 symbol may reach at most, a preference among aliases, and its name.
struct Candidate<'a> {
    start: u64,
    size: u64,
    limit: u64,
    rank: (bool, bool, usize, bool, usize),
    name: &'a str,
}

/// The load segments and function symbols of the ELF64 little-endian image `elf`
/// (`.symtab` if it has one, else `.dynsym`); `None` if it is not such an image.
fn parse_elf(elf: &[u8]) -> Option<ElfSymbols> {
    if elf.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return None;
    }
    let r = Reader(elf);
    let mut out = ElfSymbols::default();

    let (phoff, phentsize, phnum) = (r.get(0x20, 8)?, r.get(0x36, 2)?, r.get(0x38, 2)?);
    for i in 0..phnum {
        let Some(at) = i.checked_mul(phentsize).and_then(|o| o.checked_add(phoff)) else {
            break;
        };
        if r.get(at, 4) != Some(PT_LOAD) {
            continue;
        }
        // p_offset, p_vaddr, p_filesz, p_memsz
        let (Some(offset), Some(vaddr), Some(filesz), Some(memsz)) = (
            r.field(at, 8, 8),
            r.field(at, 16, 8),
            r.field(at, 32, 8),
            r.field(at, 40, 8),
        ) else {
            break;
        };
        out.loads.push(Load {
            offset,
            filesz,
            vaddr,
            memsz,
        });
    }
    if out.loads.is_empty() {
        return None;
    }

    let (shoff, shentsize) = (r.get(0x28, 8)?, r.get(0x3a, 2)?);
    let section = |i: u64| -> Option<Section> {
        let at = i.checked_mul(shentsize)?.checked_add(shoff)?;
        Some((
            r.field(at, 4, 4)?,
            r.field(at, 16, 8)?,
            r.field(at, 24, 8)?,
            r.field(at, 32, 8)?,
            r.field(at, 40, 4)?,
            r.field(at, 56, 8)?,
        ))
    };
    let mut shnum = r.get(0x3c, 2)?;
    if shnum == 0 && shoff != 0 {
        // More sections than e_shnum holds: the count is section 0's sh_size.
        shnum = section(0).map_or(0, |s| s.3);
    }
    if shentsize < 64 {
        return Some(out);
    }
    shnum = shnum.min(elf.len() as u64 / shentsize);
    let table = [SHT_SYMTAB, SHT_DYNSYM]
        .iter()
        .find_map(|&ty| (0..shnum).find_map(|i| section(i).filter(|s| s.0 == ty).map(|s| (i, s))));
    let Some((index, (_, _, off, size, link, entsize))) = table else {
        return Some(out);
    };
    // `.dynsym`'s symbol versions: a non-default version (`cfree@GLIBC_2.2.5`) is hidden.
    let versym = (0..shnum)
        .filter_map(section)
        .find(|s| s.0 == SHT_GNU_VERSYM && s.4 == index)
        .map(|s| s.2);
    let strtab = section(link)
        .and_then(|s| {
            let start = usize::try_from(s.2).ok()?;
            elf.get(start..start.checked_add(usize::try_from(s.3).ok()?)?)
        })
        .unwrap_or(&[]);
    if entsize < 24 {
        return Some(out);
    }

    let mut candidates = Vec::new();
    for s in 0..size / entsize {
        let at = off.saturating_add(s * entsize);
        let (Some(name), Some(info), Some(shndx), Some(value), Some(len)) = (
            r.get(at, 4),
            r.field(at, 4, 1),
            r.field(at, 6, 2),
            r.field(at, 8, 8),
            r.field(at, 16, 8),
        ) else {
            break;
        };
        let ty = info & 0xf;
        let sized_code = ty == STT_FUNC || ty == STT_GNU_IFUNC;
        if !(sized_code || ty == STT_NOTYPE && len > 0) || shndx == SHN_UNDEF || value == 0 {
            continue;
        }
        let name = usize::try_from(name)
            .ok()
            .and_then(|n| strtab.get(n..))
            .and_then(|t| t.split(|&c| c == 0).next())
            .and_then(|t| std::str::from_utf8(t).ok())
            .unwrap_or("");
        if name.is_empty() {
            continue;
        }
        // A size-0 symbol reaches at most to the end of its section (or segment).
        let limit = if len > 0 {
            value.saturating_add(len)
        } else if shndx < SHN_LORESERVE && shndx < shnum {
            section(shndx).map_or(value, |s| s.1.saturating_add(s.3))
        } else {
            out.loads
                .iter()
                .find(|l| value >= l.vaddr && value - l.vaddr < l.memsz)
                .map_or(value, |l| l.vaddr.saturating_add(l.memsz))
        };
        // Among aliases at one address: sized ones, then default versions, then
        // public-looking names (fewer leading underscores), global or weak, shorter.
        let hidden = versym
            .and_then(|v| r.get(v.saturating_add(s * 2), 2))
            .is_some_and(|v| v & VERSYM_HIDDEN != 0);
        let rank = (
            len == 0,
            hidden,
            name.bytes().take_while(|&c| c == b'_').count(),
            info >> 4 == STB_LOCAL,
            name.len(),
        );
        candidates.push(Candidate {
            start: value,
            size: len,
            limit,
            rank,
            name,
        });
    }
    candidates.sort_unstable_by(|a, b| (a.start, a.rank, a.name).cmp(&(b.start, b.rank, b.name)));
    candidates.dedup_by_key(|c| c.start);

    out.symbols.reserve(candidates.len());
    for (i, c) in candidates.iter().enumerate() {
        let end = if c.size > 0 {
            c.start.saturating_add(c.size)
        } else {
            // Up to the next symbol, within its section.
            let next = candidates.get(i + 1).map_or(u64::MAX, |n| n.start);
            next.min(c.limit).max(c.start)
        };
        let at = out.names.len();
        out.names.push_str(c.name);
        out.symbols.push(Symbol {
            start: c.start,
            end,
            name: (at, out.names.len()),
        });
    }
    Some(out)
}

/// What an address resolves to.
enum Resolved<'a> {
    /// No executable mapping covers it.
    Unmapped,
    /// A mapping covers it (`module`, at file offset `offset`), but no symbol does.
    Module { module: &'a str, offset: u64 },
    /// The symbol `name` (mangled) covers it, `offset` bytes in, `size` bytes long.
    Symbol {
        name: &'a str,
        offset: u64,
        size: u64,
        module: &'a str,
        main: bool,
    },
}

/// Resolves code addresses of one process (itself or another, same user) to
/// `function+0xoff/0xsize`.
pub struct Symbolizer {
    /// The process, or `None` for the calling one.
    pid: Option<u32>,
    /// Its executable mappings with a path, sorted by address.
    maps: Vec<Mapping>,
    /// The path of its main executable, as the maps name it.
    main: Option<String>,
    /// The ELF files read so far, by path (`None`: unreadable or not ELF64 LE).
    files: HashMap<String, Option<ElfSymbols>>,
}

impl fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Symbolizer")
            .field("pid", &self.pid)
            .field("mappings", &self.maps.len())
            .field("main", &self.main)
            .field("files_read", &self.files.len())
            .finish()
    }
}

/// The fields of one `/proc/<pid>/maps` line: start, end, perms, offset, path (empty
/// for an anonymous mapping).
fn parse_maps_line(line: &str) -> Option<(usize, usize, &str, u64, &str)> {
    let mut rest = line;
    let mut field = || {
        let s = rest.trim_start();
        let end = s.find(char::is_whitespace).unwrap_or(s.len());
        rest = &s[end..];
        Some(&s[..end]).filter(|f| !f.is_empty())
    };
    let (range, perms, offset) = (field()?, field()?, field()?);
    let (_dev, _inode) = (field()?, field()?);
    let (start, end) = range.split_once('-')?;
    Some((
        usize::from_str_radix(start, 16).ok()?,
        usize::from_str_radix(end, 16).ok()?,
        perms,
        u64::from_str_radix(offset, 16).ok()?,
        rest.trim(),
    ))
}

impl Symbolizer {
    /// Reads `/proc/<pid>/maps` (the executable mappings with a file path) now; ELF files
    /// are read lazily on first use and cached.
    pub fn for_pid(pid: u32) -> std::io::Result<Symbolizer> {
        Self::load(Some(pid))
    }

    /// Same for the calling process (`/proc/self/maps`).
    pub fn for_self() -> std::io::Result<Symbolizer> {
        Self::load(None)
    }

    fn proc_dir(pid: Option<u32>) -> String {
        match pid {
            Some(pid) => format!("/proc/{pid}"),
            None => "/proc/self".to_owned(),
        }
    }

    fn load(pid: Option<u32>) -> std::io::Result<Symbolizer> {
        let dir = Self::proc_dir(pid);
        let text = std::fs::read_to_string(format!("{dir}/maps"))?;
        let mut maps = Vec::new();
        let mut first_file = None;
        for (start, end, perms, offset, path) in text.lines().filter_map(parse_maps_line) {
            if path.is_empty() {
                continue;
            }
            if first_file.is_none() && path.starts_with('/') {
                first_file = Some(path.to_owned());
            }
            if perms.as_bytes().get(2) == Some(&b'x') && start < end {
                maps.push(Mapping {
                    start,
                    end,
                    offset,
                    path: path.to_owned(),
                });
            }
        }
        maps.sort_unstable_by_key(|m| m.start);
        // The main executable: what /proc/<pid>/exe names, else the first file mapped.
        let main = std::fs::read_link(format!("{dir}/exe"))
            .ok()
            .and_then(|p| p.to_str().map(str::to_owned))
            .or(first_file);
        Ok(Symbolizer {
            pid,
            maps,
            main,
            files: HashMap::new(),
        })
    }

    /// Reads and parses the ELF file at `path` (through the process's root directory
    /// first when it is another process, which may live in another mount namespace).
    fn read_elf(pid: Option<u32>, path: &str) -> Option<ElfSymbols> {
        let data = pid
            .and_then(|pid| std::fs::read(format!("/proc/{pid}/root{path}")).ok())
            .or_else(|| std::fs::read(path).ok())?;
        parse_elf(&data)
    }

    fn resolve(&mut self, addr: usize) -> Resolved<'_> {
        let i = self.maps.partition_point(|m| m.start <= addr);
        let Some(map) = i.checked_sub(1).map(|i| &self.maps[i]) else {
            return Resolved::Unmapped;
        };
        if addr >= map.end {
            return Resolved::Unmapped;
        }
        let offset = ((addr - map.start) as u64).saturating_add(map.offset);
        let module = map.module();
        if !map.is_file() {
            return Resolved::Module { module, offset };
        }
        let pid = self.pid;
        let elf = self
            .files
            .entry(map.path.clone())
            .or_insert_with(|| Self::read_elf(pid, &map.path));
        let found =
            elf.as_ref()
                .and_then(|e| e.lookup(e.vaddr(offset)?))
                .map(|(name, offset, size)| Resolved::Symbol {
                    name,
                    offset,
                    size,
                    module,
                    main: self.main.as_deref() == Some(map.path.as_str()),
                });
        found.unwrap_or(Resolved::Module { module, offset })
    }

    /// `name+0xoff/0xsize` (the kernel's %pS form), with ` [module]` appended when the
    /// module is not the main executable (module = file basename, e.g. `[libc.so.6]`);
    /// when no symbol covers the address: `module+0xfileoffset`; when no mapping covers
    /// it: `0x<hex addr>`. Never panics.
    pub fn symbolize(&mut self, addr: usize) -> String {
        match self.resolve(addr) {
            Resolved::Unmapped => format!("{addr:#x}"),
            Resolved::Module { module, offset } => format!("{module}+{offset:#x}"),
            Resolved::Symbol {
                name,
                offset,
                size,
                module,
                main,
            } => {
                let name = demangle(name);
                if main {
                    format!("{name}+{offset:#x}/{size:#x}")
                } else {
                    format!("{name}+{offset:#x}/{size:#x} [{module}]")
                }
            }
        }
    }

    /// Just the function name (demangled) if a symbol covers addr.
    pub fn function(&mut self, addr: usize) -> Option<String> {
        match self.resolve(addr) {
            Resolved::Symbol { name, .. } => Some(demangle(name)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn site_one() -> usize {
        std::hint::black_box(41) + 1
    }

    #[test]
    fn own_function_resolves() {
        assert_eq!(site_one(), 42);
        let f = site_one as *const () as usize;
        let mut s = Symbolizer::for_self().unwrap();
        let name = s.function(f + 1).expect("a symbol covers site_one");
        assert!(name.ends_with("symbolize::tests::site_one"), "{name}");
        let text = s.symbolize(f + 1);
        assert!(
            text.starts_with(&format!("{name}+0x1/0x")),
            "no %pS form: {text}"
        );
        // The main executable: no module appended.
        assert!(!text.contains(" ["), "{text}");
        let size = text.rsplit("/0x").next().unwrap();
        assert!(usize::from_str_radix(size, 16).unwrap() > 1, "{text}");
    }

    /// The first executable mapping of the C library in `s`.
    fn libc_mapping(s: &Symbolizer) -> Option<&Mapping> {
        s.maps.iter().find(|m| {
            m.is_file() && (m.module().starts_with("libc.so") || m.module().starts_with("libc-"))
        })
    }

    #[test]
    fn libc_function_resolves_with_its_module() {
        let mut s = Symbolizer::for_self().unwrap();
        let module = libc_mapping(&s)
            .expect("libc is mapped")
            .module()
            .to_owned();
        let malloc = libc::malloc as *const () as usize;
        let name = s.function(malloc).expect("a symbol covers malloc");
        assert!(name.contains("malloc"), "{name}");
        // Aliases: the public, default-version name (not `cfree@GLIBC_2.2.5`).
        let free = s.function(libc::free as *const () as usize + 1);
        assert_eq!(free.as_deref(), Some("free"));
        let text = s.symbolize(malloc + 2);
        assert!(text.contains("malloc+0x2/0x"), "{text}");
        assert!(text.ends_with(&format!(" [{module}]")), "{text}");
    }

    #[test]
    fn unmapped_address_is_hex() {
        let mut s = Symbolizer::for_self().unwrap();
        assert_eq!(s.symbolize(0x1000), "0x1000");
        assert_eq!(s.symbolize(usize::MAX), "0xffffffffffffffff");
        // Mapped, but not code: the stack.
        let local = 0u8;
        let at = std::hint::black_box(&local) as *const u8 as usize;
        assert_eq!(s.symbolize(at), format!("{at:#x}"));
        assert_eq!(s.function(at), None);
    }

    #[test]
    fn bad_files_fall_back_to_module_offsets() {
        assert!(parse_elf(b"not an elf at all").is_none());
        assert!(parse_elf(&[0x7f, b'E', b'L', b'F', 2, 1, 0, 0]).is_none());
        let mut s = Symbolizer::for_self().unwrap();
        s.maps = vec![
            Mapping {
                start: 0x1000,
                end: 0x2000,
                offset: 0x3000,
                path: "/nonexistent/libgone.so (deleted)".to_owned(),
            },
            Mapping {
                start: 0x2000,
                end: 0x3000,
                offset: 0,
                path: "[vdso]".to_owned(),
            },
            Mapping {
                start: 0x4000,
                end: 0x5000,
                offset: 0x1000,
                path: "/nonexistent/libnone.so".to_owned(),
            },
        ];
        assert_eq!(s.symbolize(0x1010), "libgone.so+0x3010");
        assert_eq!(s.symbolize(0x2020), "[vdso]+0x20");
        assert_eq!(s.symbolize(0x4040), "libnone.so+0x1040");
        assert_eq!(s.symbolize(0x3800), "0x3800");
    }

    /// Writes `v` as an `n`-byte little-endian value at `off`.
    fn put(buf: &mut [u8], off: usize, v: u64, n: usize) {
        buf[off..off + n].copy_from_slice(&v.to_le_bytes()[..n]);
    }

    /// A minimal non-PIE ELF64 executable: one `PT_LOAD` of file `[0x1000, 0x2000)` at
    /// 0x401000 (`.text`, section 1) and a `.symtab` with `foo` (0x10 bytes at 0x401000),
    /// `bar` and `baz` (size 0, at 0x401100 and 0x401200), an undefined `ext` and an
    /// object `obj`.
    fn tiny_elf() -> Vec<u8> {
        let mut elf = vec![0u8; 0x2000];
        elf[..7].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1]);
        for (off, v, n) in [
            (0x10, 2, 2),     // e_type: ET_EXEC
            (0x12, 0x3e, 2),  // e_machine
            (0x20, 64, 8),    // e_phoff
            (0x28, 0x500, 8), // e_shoff
            (0x36, 56, 2),    // e_phentsize
            (0x38, 1, 2),     // e_phnum
            (0x3a, 64, 2),    // e_shentsize
            (0x3c, 4, 2),     // e_shnum
            (64, 1, 4),       // p_type: PT_LOAD
            (64 + 8, 0x1000, 8),
            (64 + 16, 0x401000, 8),
            (64 + 32, 0x1000, 8),
            (64 + 40, 0x1000, 8),
        ] {
            put(&mut elf, off, v, n);
        }
        let strtab = b"\0foo\0bar\0baz\0ext\0obj\0";
        elf[0x400..0x400 + strtab.len()].copy_from_slice(strtab);
        // (name, info, shndx, value, size), after the null symbol.
        let syms = [
            (1, 0x12, 1, 0x401000, 0x10),
            (5, 0x12, 1, 0x401100, 0),
            (9, 0x02, 1, 0x401200, 0),
            (13, 0x12, 0, 0, 0),
            (17, 0x11, 1, 0x401020, 8),
        ];
        for (i, (name, info, shndx, value, size)) in syms.into_iter().enumerate() {
            let at = 0x200 + 24 * (i + 1);
            put(&mut elf, at, name, 4);
            put(&mut elf, at + 4, info, 1);
            put(&mut elf, at + 6, shndx, 2);
            put(&mut elf, at + 8, value, 8);
            put(&mut elf, at + 16, size, 8);
        }
        // (sh_type, sh_addr, sh_offset, sh_size, sh_link, sh_entsize) of sections 1..4.
        let sections = [
            (1, 0x401000, 0x1000, 0x1000, 0, 0),
            (2, 0, 0x200, 24 * 6, 3, 24),
            (3, 0, 0x400, strtab.len() as u64, 0, 0),
        ];
        for (i, (ty, addr, off, size, link, entsize)) in sections.into_iter().enumerate() {
            let at = 0x500 + 64 * (i + 1);
            put(&mut elf, at + 4, ty, 4);
            put(&mut elf, at + 16, addr, 8);
            put(&mut elf, at + 24, off, 8);
            put(&mut elf, at + 32, size, 8);
            put(&mut elf, at + 40, link, 4);
            put(&mut elf, at + 56, entsize, 8);
        }
        elf
    }

    #[test]
    fn non_pie_symbols_and_size_zero_ones() {
        let elf = tiny_elf();
        let syms = parse_elf(&elf).expect("a valid ELF64 LE image");
        assert_eq!(
            syms.symbols.len(),
            3,
            "ext (undefined) and obj (data) skipped"
        );
        assert!(parse_elf(&elf[..0x40]).is_none(), "no program headers");
        // Corrupt headers and tables never panic.
        for at in (0..0x600).filter(|&at| at >= 7) {
            for v in [0xff, 0x80, 0x7f, 0x01] {
                let mut bad = elf.clone();
                bad[at] = v;
                let _ = parse_elf(&bad).map(|e| e.lookup(0x401050).is_some());
                let _ = parse_elf(&bad[..at]);
            }
        }

        let path = std::env::temp_dir().join(format!("kmem-symbolize-{}.elf", std::process::id()));
        std::fs::write(&path, &elf).unwrap();
        let mut s = Symbolizer::for_self().unwrap();
        s.maps = vec![Mapping {
            start: 0x401000,
            end: 0x402000,
            offset: 0x1000,
            path: path.to_str().unwrap().to_owned(),
        }];
        let module = s.maps[0].module().to_owned();
        let results = [0x401005, 0x401020, 0x401150, 0x401fff, 0x402000].map(|a| s.symbolize(a));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            results,
            [
                format!("foo+0x5/0x10 [{module}]"),
                format!("{module}+0x1020"),
                format!("bar+0x50/0x100 [{module}]"),
                format!("baz+0xdff/0xe00 [{module}]"),
                "0x402000".to_owned(),
            ]
        );
        assert_eq!(s.function(0x401100).as_deref(), Some("bar"));
        assert_eq!(s.files.len(), 1, "the file is read once");
    }

    /// Kills and reaps the child when the test ends, passed or not.
    struct Reap(std::process::Child);

    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn another_process_resolves() {
        let mut own = Symbolizer::for_self().unwrap();
        let ours = libc_mapping(&own).expect("libc is mapped").clone();
        let malloc = libc::malloc as *const () as usize;
        assert!(
            malloc >= ours.start && malloc < ours.end,
            "malloc is libc's"
        );
        let file_offset = (malloc - ours.start) as u64 + ours.offset;
        let want = own.function(malloc).expect("malloc has a symbol");

        let child = Reap(
            std::process::Command::new("sleep")
                .arg("5")
                .spawn()
                .expect("sleep runs"),
        );
        let pid = child.0.id();
        // The dynamic loader maps libc just after exec: wait for it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
        let (mut s, theirs) = loop {
            let s = Symbolizer::for_pid(pid).unwrap();
            if let Some(m) = libc_mapping(&s).cloned() {
                break (s, m);
            }
            assert!(std::time::Instant::now() < deadline, "libc never mapped");
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(theirs.path, ours.path, "the same C library");
        let addr = theirs.start + (file_offset - theirs.offset) as usize;
        assert!(addr < theirs.end);
        let text = s.symbolize(addr);
        assert!(text.starts_with(&format!("{want}+0x0/0x")), "{text}");
        assert!(text.contains("malloc"), "{text}");
        assert!(text.ends_with(&format!(" [{}]", theirs.module())), "{text}");
        // Not the calling process: its own executable is `sleep`.
        assert!(s.main.as_deref().is_some_and(|m| m.ends_with("sleep")));
        drop(child);
    }
}
