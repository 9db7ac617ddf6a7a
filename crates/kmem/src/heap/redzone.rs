//! `KMEM_DEBUG=Z` beyond the slab caches: page blocks (kmalloc above kmalloc-1M) and
//! huge mappings get a red zone after the bytes asked for, checked when they are freed.
//!
//! A canary tail, not a guard page: a page block lives inside the buddy allocator's
//! span, where the page after it belongs to someone else and cannot be made
//! inaccessible, and a huge mapping ends at a page boundary, so a guard page would only
//! catch an overflow that crosses it (a one-byte overflow of `malloc(5 MiB + 1)` would
//! land in the slack of the last page, unseen). The tail starts exactly at the size
//! asked for, as the slab caches' kmalloc red zone does: every block is allocated
//! [`TRAILER`] bytes larger, the bytes from the request to the last two words hold
//! `RED_ACTIVE` (`0xcc`), then a magic word and the size asked for (so
//! `malloc_usable_size` answers it, and the check knows where the zone starts; a block
//! within 24 bytes of kmalloc's 4 MiB limit has no room and no magic: unzoned). A
//! block made with a trailer is marked so where no overflow reaches (its head page's
//! holder mark, `PageFlags::HOLDER_MARK`, or its huge descriptor): one whose trailer
//! an overflow ran over is damage, not an unzoned block. An overflow is found at
//! `free`, reported in slub_debug's format, and the block is quarantined (not freed)
//! as a slab object would be; then `KMEM_ON_ERROR` applies.
//!
//! Which blocks: those of the pseudo cache `kmalloc-large`, i.e. when `KMEM_DEBUG`
//! gives Z to every cache or names `kmalloc-large`. Reallocations of such blocks always
//! move (the in-place growth and shrink paths would move the tail). No lock of its own.

use super::Heap;
use kmem_core::kmalloc::{KMALLOC_MAX_CACHE_SIZE, KMALLOC_MAX_SIZE};
use kmem_core::slab::debug::RED_ACTIVE;
use kmem_core::slab::ObjectLookup;
use kmem_core::{Gfp, PAGE_SIZE};
use std::fmt::Write as _;
use std::ptr::NonNull;

/// Bytes added to each red-zoned block: at least 8 of red zone, a magic word and the
/// size word.
pub(super) const TRAILER: usize = 24;
/// Marks a block that has a trailer (xored with the size it records).
const TRAILER_MAGIC: usize = 0x6b6d_656d_5a5a_7a6e;
const WORD: usize = std::mem::size_of::<usize>();

impl Heap {
    /// Whether page blocks and huge mappings carry a red zone (`kmalloc-large` has Z).
    #[inline]
    pub(super) fn zoned_blocks(&self) -> bool {
        self.zoned_blocks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A red-zoned page block of `size` bytes (above the kmalloc caches). A request
    /// within [`TRAILER`] bytes of kmalloc's limit gets a plain block (no room for the
    /// zone; its missing trailer magic tells it apart).
    #[cold]
    #[inline(never)]
    pub(super) fn kmalloc_zoned_block(&self, size: usize, gfp: Gfp) -> Option<NonNull<u8>> {
        let cpu = super::thread::thread_cpu();
        let inner = size.checked_add(TRAILER)?;
        if inner > KMALLOC_MAX_SIZE {
            return self.kmem.kmalloc(cpu, size, gfp);
        }
        let p = self.kmem.kmalloc(cpu, inner, gfp)?.as_ptr();
        let end = p as usize + self.block_len(p)?;
        write_trailer(p as usize, size, end);
        if let Some(head) = self.kmem.pages.virt_to_page(p) {
            // SAFETY: the descriptor of the block just allocated, in an online section.
            unsafe { head.as_ref() }.mark_held_block();
        }
        NonNull::new(p)
    }

    /// A red-zoned huge mapping of `size` bytes (see the module doc).
    pub(super) fn huge_alloc_zoned(&self, size: usize, align: usize, zero: bool) -> *mut u8 {
        let Some(inner) = size.checked_add(TRAILER) else {
            return std::ptr::null_mut();
        };
        let p = self.huge_alloc_raw(inner, align, zero);
        if let Some(len) = (!p.is_null()).then(|| self.huge.size_of(p)).flatten() {
            write_trailer(p as usize, size, p as usize + len);
            self.huge.set_zoned(p);
        }
        p
    }

    /// Whether the block at `p` was made red-zoned (marked when its trailer was
    /// written): its free checks the trailer, and finds damage where it is gone.
    fn made_zoned(&self, p: *const u8) -> bool {
        if self.kmem.pages.in_span(p) {
            // SAFETY: a descriptor of an online section.
            return self
                .kmem
                .pages
                .virt_to_page(p)
                .is_some_and(|h| unsafe { h.as_ref() }.held_block_marked());
        }
        self.huge.zoned(p).unwrap_or(false)
    }

    /// The whole length of the block at `p` (a page block or huge mapping).
    fn block_len(&self, p: *const u8) -> Option<usize> {
        if self.kmem.pages.in_span(p) {
            // SAFETY: `p` is the caller's block, a slab object of the caller's, or not
            // ours (the callers' contracts): a slab found holds a live object, so its
            // cache lives while the lookup reads it.
            match unsafe { self.kmem.slub().lookup(p) } {
                // SAFETY: the head of a live block of ours.
                ObjectLookup::Large(head) => Some(PAGE_SIZE << unsafe { head.as_ref() }.order()),
                _ => None,
            }
        } else {
            self.huge.size_of(p)
        }
    }

    /// Whether `p` is a red-zoned block: a page block or huge mapping while zoning is
    /// on (`None` for anything else).
    fn zoned_len(&self, p: *const u8) -> Option<usize> {
        if !self.zoned_blocks() {
            return None;
        }
        self.block_len(p).filter(|&len| len >= TRAILER)
    }

    /// The size asked for at `p`, if it is a red-zoned block (`malloc_usable_size`).
    ///
    /// # Safety
    /// `p` is null, an allocation the caller holds, or no address this heap handed
    /// out (the block's last words are read).
    pub(super) unsafe fn zoned_size(&self, p: *const u8) -> Option<usize> {
        let len = self.zoned_len(p)?;
        let end = p as usize + len;
        // SAFETY: the last two words of a live block of ours (caller).
        let (magic, n) = unsafe {
            (
                ((end - 2 * WORD) as *const usize).read_unaligned(),
                ((end - WORD) as *const usize).read_unaligned(),
            )
        };
        (magic == TRAILER_MAGIC ^ n && n <= len - TRAILER).then_some(n)
    }

    /// Before a red-zoned block at `p` is freed: true if its zone is intact (free it),
    /// false if it was overwritten (reported; the caller keeps it, quarantined).
    ///
    /// An intact block's trailer magic is cleared before it goes: page blocks are not
    /// poisoned, and a later owner of the same pages that has no trailer of its own
    /// (an alignment above a page, a block too large for one, a charged block) would
    /// otherwise be read as a red-zoned block of the old size.
    ///
    /// # Safety
    /// `p` is a block of this heap that the caller frees (its zone is read, its magic
    /// cleared).
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn zoned_free_check(&self, p: *const u8) -> bool {
        let Some(len) = self.zoned_len(p) else {
            return true;
        };
        // SAFETY: the block being freed (caller).
        let Some(size) = (unsafe { self.zoned_size(p) }) else {
            // No trailer: a block made without one (no room, an alignment, a charge),
            // or one whose trailer an overflow ran over, which is damage.
            if self.made_zoned(p) {
                self.report_lost_trailer(p, len);
                return false;
            }
            return true;
        };
        let start = p as usize + size;
        let end = p as usize + len - 2 * WORD;
        let Some(bad) = (start..end).find(|&a| {
            // SAFETY: inside the live block.
            unsafe { (a as *const u8).read() != RED_ACTIVE }
        }) else {
            // SAFETY: the magic word of the live block at `p` (`zoned_size` found it
            // there: `p` starts a page block or mapping of ours), which its caller
            // frees next.
            unsafe { (end as *mut usize).write_unaligned(0) };
            return true;
        };
        let last = (bad..end)
            .rev()
            .find(|&a| {
                // SAFETY: as above.
                unsafe { (a as *const u8).read() != RED_ACTIVE }
            })
            .unwrap_or(bad);
        // SAFETY: as above.
        let first = unsafe { (bad as *const u8).read() };
        let kind = if self.kmem.pages.in_span(p) {
            "of pages"
        } else {
            "mapped"
        };
        self.report_block(
            format_args!(
                "0x{bad:016x}-0x{last:016x} @offset={}. First byte 0x{first:02x} instead of 0x{RED_ACTIVE:02x}",
                bad - p as usize
            ),
            format_args!("0x{:016x} size={size} ({len} bytes {kind})", p as usize),
        );
        false
    }

    /// The report for a red-zoned block whose trailer (magic and size words) was
    /// overwritten: where its zone started is lost with it, so the trailer is named.
    /// The block is quarantined, as for any damaged zone.
    #[cold]
    fn report_lost_trailer(&self, p: *const u8, len: usize) {
        let at = p as usize + len - 2 * WORD;
        // SAFETY: the trailer's first byte, inside the live block being freed.
        let first = unsafe { (at as *const u8).read() };
        self.report_block(
            format_args!(
                "0x{at:016x}-0x{:016x} @offset={}. First byte 0x{first:02x}: the zone's trailer (its size) overwritten",
                at + 2 * WORD - 1,
                at - p as usize
            ),
            format_args!("0x{:016x} ({len} bytes)", p as usize),
        );
    }

    /// slub_debug's report of a damaged `kmalloc-large` block (the damaged bytes, the
    /// block), which is quarantined; counted as a bad object.
    fn report_block(&self, bytes: std::fmt::Arguments<'_>, block: std::fmt::Arguments<'_>) {
        let mut w = crate::platform::linux::FdWriter::new(2);
        let _ = writeln!(
            w,
            "=============================================================================\n\
             BUG kmalloc-large (Not tainted): Redzone overwritten\n\
             -----------------------------------------------------------------------------\n"
        );
        let _ = writeln!(w, "INFO: {bytes}");
        let _ = writeln!(w, "INFO: Block {block}");
        let _ = writeln!(w, "FIX kmalloc-large: Object not freed (quarantined)");
        w.flush();
        self.kmem.pages.count_bad_object();
    }
}

fn write_trailer(p: usize, size: usize, end: usize) {
    // SAFETY: `[p + size, end)` is the tail of the block just allocated for us.
    unsafe {
        std::ptr::write_bytes(
            (p + size) as *mut u8,
            RED_ACTIVE,
            end - 2 * WORD - (p + size),
        );
        ((end - 2 * WORD) as *mut usize).write_unaligned(TRAILER_MAGIC ^ size);
        ((end - WORD) as *mut usize).write_unaligned(size);
    }
}

const _: () = assert!(KMALLOC_MAX_CACHE_SIZE < KMALLOC_MAX_SIZE);
