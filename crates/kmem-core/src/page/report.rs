//! What the page layer prints about itself: the allocation failure report
//! (`warn_alloc` with the `Mem-Info:` block of `show_free_areas`) and the bad page
//! report (`bad_page`), in the kernel's formats, through [`LogWriter`] (no
//! allocation). The other reports, which only read the page layer, are in
//! `show_mem`.
//!
//! Locking: called with no page-layer lock held; reading the free lists for the
//! `Mem-Info:` block takes each zone lock in turn (the lock order in lib.rs).

use super::descriptor::{Page, PAGE_SIZE};
use super::mmzone::Watermark;
use super::PageAllocator;
use crate::gfp::Gfp;
use crate::platform::Platform;
use crate::printk::{GfpNames, LogWriter, RateLimited};
use crate::sync::Ordering;
use crate::vmstat::{VmEvent, ZoneStat};
use core::fmt::{self, Write};
use core::ptr::NonNull;

const KB: usize = PAGE_SIZE / 1024;

/// `show_free_areas`: per-CPU list state, zone counters and the free block counts of
/// every zone, as in the kernel's `Mem-Info:` block.
#[cold]
pub fn show_free_areas<P: Platform>(pa: &PageAllocator<P>, w: &mut dyn Write) -> fmt::Result {
    writeln!(w, "Mem-Info:")?;
    for nid in 0..pa.nr_nodes() {
        let zone = pa.zone(nid);
        writeln!(w, "Node {nid} {} per-cpu:", zone.name())?;
        let (high, batch) = (zone.pcp_high(), zone.pcp_batch());
        for area in pa.cpu_areas().iter().filter(|a| a.is_owned()) {
            let usd = pa.zone_pcp_of(area, nid).count();
            writeln!(
                w,
                "CPU {:4}: hi: {high:5}, btch: {batch:3} usd: {usd:3}",
                area.id()
            )?;
        }
    }
    let free: usize = pa.nr_free_pages();
    let pcp: usize = (0..pa.nr_nodes()).map(|n| pa.nr_pcp_pages(n)).sum();
    let reported: isize = (0..pa.nr_nodes())
        .map(|n| pa.zone_page_state_snapshot(n, ZoneStat::NrFreeReported))
        .sum();
    writeln!(
        w,
        " free:{free} free_pcp:{pcp} reported:{reported} managed:{}",
        pa.nr_managed_pages()
    )?;
    for nid in 0..pa.nr_nodes() {
        let zone = pa.zone(nid);
        let zfree = pa
            .zone_page_state_snapshot(nid, ZoneStat::NrFreePages)
            .max(0) as usize;
        let zrep = pa
            .zone_page_state_snapshot(nid, ZoneStat::NrFreeReported)
            .max(0) as usize;
        writeln!(
            w,
            "Node {nid} {} free:{}kB min:{}kB low:{}kB high:{}kB reported:{}kB present:{}kB managed:{}kB free_pcp:{}kB",
            zone.name(),
            zfree * KB,
            zone.watermark(Watermark::Min) * KB,
            zone.watermark(Watermark::Low) * KB,
            zone.watermark(Watermark::High) * KB,
            zrep * KB,
            zone.managed_pages() * KB,
            zone.managed_pages() * KB,
            pa.nr_pcp_pages(nid) * KB,
        )?;
        writeln!(w, "lowmem_reserve[]: 0")?;
    }
    for nid in 0..pa.nr_nodes() {
        let counts = pa.free_area_counts(nid);
        write!(w, "Node {nid} {}: ", pa.zone(nid).name())?;
        let mut total = 0;
        for (order, n) in counts.iter().enumerate() {
            let kb = KB << order;
            total += n * kb;
            write!(w, "{n}*{kb}kB ")?;
        }
        writeln!(w, "= {total}kB")?;
    }
    writeln!(w, "{} pages RAM", pa.nr_managed_pages())?;
    Ok(())
}

impl<P: Platform> PageAllocator<P> {
    /// `warn_alloc`: the allocation failure report, with the `Mem-Info:` block.
    #[cold]
    #[inline(never)]
    pub(super) fn warn_alloc(&self, gfp: Gfp, order: usize, nid: usize) {
        // `nopage_rs`: a program that keeps asking for what cannot be had (probing
        // for the largest block that fits, retrying in a loop) gets a few reports an
        // interval, not one a call.
        let suppressed = match self.warn_alloc_rs.check(self.platform().now_ns()) {
            RateLimited::Print { suppressed } => suppressed,
            RateLimited::Suppress => return,
        };
        let mut w = LogWriter::new(self.platform());
        if suppressed > 0 {
            let _ = writeln!(w, "warn_alloc: {suppressed} callbacks suppressed");
        }
        let _ = writeln!(
            w,
            "kmem: page allocation failure: order:{order}, mode:{:#x}({}), nodemask=(null),preferred_node={nid}",
            gfp.bits(),
            GfpNames(gfp)
        );
        let _ = show_free_areas(self, &mut w);
    }

    /// Reports a page in a state it should not be in (`bad_page`): the page is left
    /// alone (leaked rather than corrupted).
    #[cold]
    #[inline(never)]
    pub(crate) fn bad_page(&self, page: NonNull<Page>, reason: &str) {
        let nid = self.page_to_nid(page);
        self.zones[nid].events[VmEvent::BadPage as usize].fetch_add(1, Ordering::Relaxed);
        let mut w = LogWriter::new(self.platform());
        let pfn = self.page_to_pfn(page);
        // SAFETY: callers pass descriptors of online sections.
        let p = unsafe { page.as_ref() };
        let _ = writeln!(w, "BUG: Bad page state in process kmem  pfn:{pfn:05x}");
        let _ = writeln!(
            w,
            "page:{:p} refcount:0 mapcount:0 mapping:0000000000000000 index:0x0 pfn:{pfn:#x} order:{}",
            page.as_ptr(),
            p.order()
        );
        let _ = writeln!(w, "flags: {:#x}({:?})", p.flags().bits(), p.flags());
        let _ = writeln!(w, "page dumped because: {reason}");
    }
}
