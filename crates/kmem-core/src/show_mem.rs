//! Reports in the kernel's text formats that read the page allocator: `/proc/buddyinfo`,
//! `/proc/zoneinfo`, `/proc/vmstat`, and (from the page layer, which prints it on an
//! allocation failure) `show_free_areas`, the `Mem-Info:` block.
//!
//! Every function writes to a `core::fmt::Write`, so a caller chooses where the text
//! goes; to the platform's log, without allocating, through [`LogWriter`](crate::printk::LogWriter).
//!
//! This module only reads: nothing below it (the page layer) depends on it. Locking:
//! no lock held on entry; reading free-list counts takes each zone lock in turn (the
//! lock order in lib.rs).

pub use crate::page::show_free_areas;
use crate::page::{PageAllocator, Watermark, NR_ORDERS};
use crate::platform::Platform;
use crate::vmstat::{VmEvent, ZoneStat};
use core::fmt::{self, Write};

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
        writeln!(w, "        sections {}", zone.nr_sections())?;
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
        let (high, batch) = (zone.pcp_high(), zone.pcp_batch());
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
