//! `KMEM_DEBUG`'s syntax, the kernel's `slub_debug=` boot parameter: blocks of
//! slub_debug letters, each for every cache or for a list of cache names (a name with
//! a `*` matches by the prefix before it), separated by `;` —
//! `FZ,kmalloc-64,kmalloc-1*;P` — parsed in place into fixed arrays (no allocation:
//! kmem may be the process's malloc). As the kernel's `kmem_cache_flags`: a cache
//! takes the flags of the first block whose list names it, else those of the last
//! block without a list; `-` clears the letters before it in its block (`F-Z` is
//! `Z`), and empty names (`FZ,kmalloc-64,`) are skipped.
//!
//! Owns no state and takes no lock.

/// The slub_debug letters (`SLAB_CONSISTENCY_CHECKS` … `SLAB_TRACE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DebugFlags(pub u8);

impl DebugFlags {
    /// F: consistency checks.
    pub const F: u8 = 1 << 0;
    /// Z: red zones.
    pub const Z: u8 = 1 << 1;
    /// P: poisoning.
    pub const P: u8 = 1 << 2;
    /// U: allocation and free tracking.
    pub const U: u8 = 1 << 3;
    /// T: tracing.
    pub const T: u8 = 1 << 4;
    /// What the kernel turns on for a bare `slub_debug`: F, Z, P and U.
    pub const DEFAULT: u8 = Self::F | Self::Z | Self::P | Self::U;
    /// Whether `letter`'s flag is set.
    pub fn has(self, flag: u8) -> bool {
        self.0 & flag != 0
    }
}

/// Most `;`-separated blocks and cache names per block kept from `KMEM_DEBUG`.
pub const DEBUG_BLOCKS: usize = 8;
const DEBUG_NAMES: usize = 8;

/// `KMEM_DEBUG` parsed: blocks of flags, each for all caches or for named ones
/// (a trailing `*` matches a prefix, as the kernel allows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebugConfig {
    text: [u8; 256],
    blocks: [DebugBlock; DEBUG_BLOCKS],
    nblocks: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct DebugBlock {
    flags: DebugFlags,
    names: [(u8, u8); DEBUG_NAMES],
    nnames: usize,
}

impl Default for DebugConfig {
    fn default() -> Self {
        Self::EMPTY
    }
}

const EMPTY_BLOCK: DebugBlock = DebugBlock {
    flags: DebugFlags(0),
    names: [(0, 0); DEBUG_NAMES],
    nnames: 0,
};

impl DebugConfig {
    /// No debugging.
    pub const EMPTY: DebugConfig = DebugConfig {
        text: [0; 256],
        blocks: [EMPTY_BLOCK; DEBUG_BLOCKS],
        nblocks: 0,
    };

    /// Parses slub_debug syntax; the error says what was not understood.
    pub fn parse(v: &[u8]) -> Result<Self, &'static str> {
        let mut cfg = DebugConfig::default();
        if v.len() > cfg.text.len() {
            return Err("longer than 256 bytes");
        }
        cfg.text[..v.len()].copy_from_slice(v);
        let mut pos = 0usize;
        for block in v.split(|&b| b == b';') {
            let start = pos;
            pos += block.len() + 1;
            if block.is_empty() {
                continue;
            }
            if cfg.nblocks == DEBUG_BLOCKS {
                return Err("more than 8 blocks");
            }
            let mut parts = block.split(|&b| b == b',');
            let opts = parts.next().unwrap_or(b"");
            let mut flags = 0u8;
            if opts.is_empty() {
                flags = DebugFlags::DEFAULT;
            }
            for &c in opts {
                flags = match c.to_ascii_uppercase() {
                    b'F' => flags | DebugFlags::F,
                    b'Z' => flags | DebugFlags::Z,
                    b'P' => flags | DebugFlags::P,
                    b'U' => flags | DebugFlags::U,
                    b'T' => flags | DebugFlags::T,
                    // The kernel's `-`: everything before it in the block is off.
                    b'-' => 0,
                    b'A' | b'O' => flags,
                    _ => return Err("an unknown option letter"),
                };
            }
            let mut b = DebugBlock {
                flags: DebugFlags(flags),
                ..DebugBlock::default()
            };
            let mut off = start + opts.len() + 1;
            let mut listed = false;
            for name in parts {
                listed = true;
                if !name.is_empty() {
                    if b.nnames == DEBUG_NAMES {
                        return Err("more than 8 cache names in a block");
                    }
                    b.names[b.nnames] = (off as u8, name.len() as u8);
                    b.nnames += 1;
                }
                off += name.len() + 1;
            }
            if listed && b.nnames == 0 {
                // `F,` names no cache: a list that matches none, not every cache.
                continue;
            }
            cfg.blocks[cfg.nblocks] = b;
            cfg.nblocks += 1;
        }
        Ok(cfg)
    }

    /// The debug flags for the cache called `name`: the first block whose list names
    /// it, else the last block for all caches (as the kernel's `kmem_cache_flags`).
    pub fn flags_for(&self, name: &str) -> DebugFlags {
        let mut all = DebugFlags(0);
        for b in &self.blocks[..self.nblocks] {
            if b.nnames == 0 {
                all = b.flags;
            }
            for &(off, len) in &b.names[..b.nnames] {
                let pat = &self.text[off as usize..off as usize + len as usize];
                let hit = match pat.iter().position(|&c| c == b'*') {
                    Some(star) => name.as_bytes().starts_with(&pat[..star]),
                    None => name.as_bytes() == pat,
                };
                if hit {
                    return b.flags;
                }
            }
        }
        all
    }

    /// Whether any block turns anything on.
    pub fn any(&self) -> bool {
        self.blocks[..self.nblocks].iter().any(|b| b.flags.0 != 0)
    }
}
