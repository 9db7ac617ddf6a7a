//! Reports in the kernel's text formats: `show_free_areas` (the OOM report's
//! `Mem-Info:` block), `/proc/buddyinfo`, `/proc/zoneinfo`, `/proc/vmstat`, and the
//! bad page report.
//!
//! Every function writes to a `core::fmt::Write`, so a caller chooses where the text
//! goes; reports the allocator prints itself go through [`LogWriter`], which formats
//! into a stack buffer and hands whole lines to [`Platform::log`] — no allocation, so
//! it is safe on the allocation path.

use crate::gfp::Gfp;
use crate::page::{Page, NR_ORDERS, PAGE_SIZE};
use crate::page_alloc::PageAllocator;
use crate::platform::Platform;
use crate::vmstat::{VmEvent, ZoneStat};
use core::fmt::{self, Write};
use core::ptr::NonNull;

/// A `fmt::Write` that buffers one line on the stack and gives it to the platform.
pub struct LogWriter<'a, P: Platform> {
    platform: &'a P,
    buf: [u8; 256],
    len: usize,
}

impl<'a, P: Platform> LogWriter<'a, P> {
    /// A writer to `platform`'s log.
    pub fn new(platform: &'a P) -> Self {
        Self {
            platform,
            buf: [0; 256],
            len: 0,
        }
    }
    fn flush(&mut self) {
        if self.len > 0 {
            // Split at a character boundary already guaranteed: we only copy whole
            // `&str` pieces, and cut long lines at a char boundary below.
            let text = core::str::from_utf8(&self.buf[..self.len]).unwrap_or("?\n");
            self.platform.log(text);
            self.len = 0;
        }
    }
}

impl<P: Platform> Write for LogWriter<'_, P> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for ch in s.chars() {
            let mut tmp = [0u8; 4];
            let enc = ch.encode_utf8(&mut tmp).as_bytes();
            if self.len + enc.len() > self.buf.len() {
                self.flush();
            }
            self.buf[self.len..self.len + enc.len()].copy_from_slice(enc);
            self.len += enc.len();
            if ch == '\n' {
                self.flush();
            }
        }
        Ok(())
    }
}

impl<P: Platform> Drop for LogWriter<'_, P> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The kernel's `%pGg`: GFP flags by name.
pub struct GfpNames(pub Gfp);

impl fmt::Display for GfpNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GFP_KERNEL")?;
        for (name, flag) in [
            ("__GFP_ZERO", Gfp::ZERO),
            ("__GFP_NOWARN", Gfp::NOWARN),
            ("__GFP_HIGH", Gfp::HIGH),
            ("__GFP_THISNODE", Gfp::THISNODE),
            ("__GFP_ACCOUNT", Gfp::ACCOUNT),
        ] {
            if self.0.contains(flag) {
                write!(f, "|{name}")?;
            }
        }
        Ok(())
    }
}

const KB: usize = PAGE_SIZE / 1024;

/// `show_free_areas`: per-CPU list state, zone counters and the free block counts of
/// every zone, as in the kernel's `Mem-Info:` block.
pub fn show_free_areas<P: Platform>(pa: &PageAllocator<P>, w: &mut dyn Write) -> fmt::Result {
    writeln!(w, "Mem-Info:")?;
    for nid in 0..pa.nr_nodes() {
        let zone = pa.zone(nid);
        writeln!(w, "Node {nid} {} per-cpu:", zone.name())?;
        let high = zone.pcp_high.load(crate::sync::Ordering::Relaxed);
        let batch = zone.pcp_batch.load(crate::sync::Ordering::Relaxed);
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
            zone.watermark(crate::mmzone::Watermark::Min) * KB,
            zone.watermark(crate::mmzone::Watermark::Low) * KB,
            zone.watermark(crate::mmzone::Watermark::High) * KB,
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

/// `/proc/buddyinfo`.
pub fn buddyinfo<P: Platform>(pa: &PageAllocator<P>, w: &mut dyn Write) -> fmt::Result {
    for nid in 0..pa.nr_nodes() {
        write_buddyinfo_line(w, nid, pa.zone(nid).name(), &pa.free_area_counts(nid))?;
    }
    Ok(())
}

/// One `/proc/buddyinfo` line: free blocks per order of one zone.
pub fn write_buddyinfo_line(
    w: &mut dyn Write,
    nid: usize,
    zone: &str,
    counts: &[usize],
) -> fmt::Result {
    write!(w, "Node {nid}, zone {zone:>8} ")?;
    for n in counts.iter().take(NR_ORDERS) {
        write!(w, "{n:6} ")?;
    }
    writeln!(w)
}

/// `/proc/zoneinfo`: watermarks, sizes, counters and every owned area's pageset.
pub fn zoneinfo<P: Platform>(pa: &PageAllocator<P>, w: &mut dyn Write) -> fmt::Result {
    use crate::mmzone::Watermark;
    use crate::sync::Ordering::Relaxed;
    for nid in 0..pa.nr_nodes() {
        let zone = pa.zone(nid);
        writeln!(w, "Node {nid}, zone {:>8}", zone.name())?;
        let free = pa.zone_page_state_snapshot(nid, ZoneStat::NrFreePages);
        writeln!(w, "  pages free     {free}")?;
        writeln!(w, "        min      {}", zone.watermark(Watermark::Min))?;
        writeln!(w, "        low      {}", zone.watermark(Watermark::Low))?;
        writeln!(w, "        high     {}", zone.watermark(Watermark::High))?;
        writeln!(w, "        present  {}", zone.managed_pages())?;
        writeln!(w, "        managed  {}", zone.managed_pages())?;
        writeln!(w, "        sections {}", zone.nr_sections.load(Relaxed))?;
        for item in ZoneStat::ALL {
            writeln!(
                w,
                "      {} {}",
                item.name(),
                pa.zone_page_state_snapshot(nid, item)
            )?;
        }
        for ev in VmEvent::ALL {
            writeln!(w, "      {} {}", ev.name(), pa.zone_event(nid, ev))?;
        }
        writeln!(w, "  pagesets")?;
        let high = zone.pcp_high.load(Relaxed);
        let batch = zone.pcp_batch.load(Relaxed);
        for area in pa.cpu_areas().iter().filter(|a| a.is_owned()) {
            writeln!(w, "    cpu: {}", area.id())?;
            writeln!(
                w,
                "              count: {}",
                pa.zone_pcp_of(area, nid).count()
            )?;
            writeln!(w, "              high:  {high}")?;
            writeln!(w, "              batch: {batch}")?;
        }
    }
    Ok(())
}

/// `/proc/vmstat`: zone counters summed over zones, then events.
pub fn vmstat<P: Platform>(pa: &PageAllocator<P>, w: &mut dyn Write) -> fmt::Result {
    for item in ZoneStat::ALL {
        let v: isize = (0..pa.nr_nodes())
            .map(|n| pa.zone_page_state_snapshot(n, item))
            .sum();
        writeln!(w, "{} {v}", item.name())?;
    }
    for ev in VmEvent::ALL {
        writeln!(w, "{} {}", ev.name(), pa.event(ev))?;
    }
    Ok(())
}

/// The bad page report (`bad_page` in mm/page_alloc.c).
pub(crate) fn report_bad_page<P: Platform>(
    pa: &PageAllocator<P>,
    page: NonNull<Page>,
    reason: &str,
) {
    let mut w = LogWriter::new(pa.platform());
    let pfn = pa.page_to_pfn(page);
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

/// `warn_alloc` and the Mem-Info block, for a failed allocation.
pub(crate) fn warn_alloc<P: Platform>(pa: &PageAllocator<P>, gfp: Gfp, order: usize, nid: usize) {
    let mut w = LogWriter::new(pa.platform());
    let _ = writeln!(
        w,
        "kmem: page allocation failure: order:{order}, mode:{:#x}({}), nodemask=(null),preferred_node={nid}",
        gfp.bits(),
        GfpNames(gfp)
    );
    let _ = show_free_areas(pa, &mut w);
}

impl<P: Platform> PageAllocator<P> {
    #[cold]
    #[inline(never)]
    pub(crate) fn warn_alloc(&self, gfp: Gfp, order: usize, nid: usize) {
        warn_alloc(self, gfp, order, nid);
    }
}
