//! Leak detection (the kernel's kmemleak, run once): the objects still allocated in
//! caches with slub_debug tracks (`KMEM_DEBUG=U`) that nothing points to.
//!
//! ## How objects are told apart
//! A conservative mark-and-sweep, as kmemleak and valgrind's memcheck do. Every
//! aligned word of the *roots* is compared with the tracked objects' address ranges
//! (a pointer anywhere inside an object counts); an object found is marked and its own
//! words scanned in turn. What stays unmarked is *unreferenced*: no pointer to it is
//! left anywhere the program could reach — a leak. Objects that are marked are still
//! allocated but referenced: memory the program or its C runtime keeps on purpose
//! (stdio buffers, locale data, a cache held in a global), valgrind's "still
//! reachable"; they are counted, not reported as leaks.
//!
//! The roots: every writable private mapping of the process (the data and bss of the
//! executable and libraries, thread stacks and their TLS, other allocators' arenas,
//! live huge mappings) except kmem's own span and per-CPU rseq mode's region of CPU
//! areas, whose memory is scanned where it may hold the program's pointers: allocated
//! page blocks (large kmalloc, CPU areas), the region's CPU areas, the
//! slabs of caches without tracks, and the memmaps (a slab's objcg vector is found
//! from its page). Free pages and the slabs of tracked caches are not roots (free
//! objects hold stale pointers; tracked objects count only once reached). Device
//! mappings (`/dev/…`, the live view) and the scanner's own buffers are skipped; the
//! current thread's stack is scanned from the frame of the scan's caller up (at exit,
//! from the exit handler: no frame of the program is live below it), not from the
//! scanner's own frames, whose unwritten slots hold what dead frames left there.
//!
//! Misses are on the side of silence: a stale pointer left in a dead stack frame or
//! a freed huge mapping kept for reuse hides a leak; no pointer to a live object
//! is overlooked, so no false report (barring pointers the program hides: XORed,
//! stored only on disk, only in registers of other threads, or only in the kernel,
//! such as an epoll event's `data.ptr`; such an object is reported, and so is what is
//! reached only from it).
//!
//! ## Cost and safety
//! It runs at exit (`KMEM_LEAKS`) or when called ([`scan`]). Its tables live in
//! private anonymous mappings (never the heap, so the scan does not change what it
//! scans), memory outside the span is read with `process_vm_readv` (a mapping
//! unmapped meanwhile by another thread reads as an error, not a fault), and the span
//! is always mapped. The tracked objects are collected under each cache's node
//! locks; the scan itself takes no lock, so threads still running may change what it
//! sees (the figures are then approximate, as any leak check of a live process).

use crate::sites::{Calls, Location, LocationTable};
use kmem_core::page::{PageFlags, MEMMAP_PAGES, PFN_SECTION_SHIFT, SECTION_SIZE};
use kmem_core::slab::debug::Track;
use kmem_core::{Platform, SlabFlags, PAGE_SIZE};
use std::fmt;

/// A growable array in a private anonymous mapping (not the heap).
struct MapVec<T: Copy> {
    ptr: *mut T,
    cap: usize,
    len: usize,
}

impl<T: Copy> MapVec<T> {
    fn new() -> Self {
        MapVec {
            ptr: std::ptr::null_mut(),
            cap: 0,
            len: 0,
        }
    }

    fn bytes(cap: usize) -> usize {
        (cap * std::mem::size_of::<T>()).next_multiple_of(PAGE_SIZE)
    }

    /// Appends `v`; false if no memory could be mapped.
    fn push(&mut self, v: T) -> bool {
        if self.len == self.cap {
            let cap = (self.cap * 2)
                .max(PAGE_SIZE / std::mem::size_of::<T>().max(1))
                .max(16);
            // SAFETY: a fresh private anonymous mapping, or our own one moved by
            // mremap (its contents move with it).
            let p = unsafe {
                if self.ptr.is_null() {
                    libc::mmap(
                        std::ptr::null_mut(),
                        Self::bytes(cap),
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                } else {
                    libc::mremap(
                        self.ptr.cast(),
                        Self::bytes(self.cap),
                        Self::bytes(cap),
                        libc::MREMAP_MAYMOVE,
                    )
                }
            };
            if p == libc::MAP_FAILED {
                return false;
            }
            self.ptr = p.cast();
            self.cap = cap;
        }
        // SAFETY: `len < cap`: inside our mapping.
        unsafe { self.ptr.add(self.len).write(v) };
        self.len += 1;
        true
    }

    fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: an element written by `push`.
        Some(unsafe { self.ptr.add(self.len).read() })
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        if self.ptr.is_null() {
            return &mut [];
        }
        // SAFETY: `len` elements written by `push`, in our mapping.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn as_slice(&self) -> &[T] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The mapping's address range (to skip it as a root).
    fn range(&self) -> (usize, usize) {
        (self.ptr as usize, self.ptr as usize + Self::bytes(self.cap))
    }
}

impl<T: Copy> Drop for MapVec<T> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: our own mapping.
            unsafe { libc::munmap(self.ptr.cast(), Self::bytes(self.cap)) };
        }
    }
}

/// A tracked object in use.
#[derive(Clone, Copy)]
struct Candidate {
    addr: usize,
    end: usize,
    marked: bool,
    alloc: Track,
}

/// Objects and bytes of one allocation site.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LeakSite {
    /// The site's figures (count, requested sizes, ages, pids, CPU areas; `stack`: the
    /// first object's allocation stack).
    pub location: Location,
}

impl LeakSite {
    /// Bytes the program asked for at this site (the objects' requested sizes).
    pub fn bytes(&self) -> u64 {
        self.location.size_sum
    }
}

/// What a scan found.
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LeakReport {
    /// Unreferenced objects by allocation site, most bytes first: the leaks.
    pub unreferenced: Vec<LeakSite>,
    /// Objects still referenced (kept on purpose), by site, most bytes first.
    pub referenced: Vec<LeakSite>,
    /// Tracked objects in use, in all.
    pub objects: u64,
    /// Objects at sites beyond the tables' room (counted in neither list).
    pub dropped: u64,
    /// Live huge mappings (not tracked, not checked).
    pub huge_live: u64,
    /// Whether any cache keeps tracks (without, nothing can be found).
    pub tracking: bool,
}

impl LeakReport {
    /// Unreferenced objects.
    pub fn leaked_objects(&self) -> u64 {
        self.unreferenced.iter().map(|s| s.location.count).sum()
    }

    /// Bytes of unreferenced objects (requested sizes).
    pub fn leaked_bytes(&self) -> u64 {
        self.unreferenced.iter().map(LeakSite::bytes).sum()
    }

    /// The report, kmemleak's words, grouped by site; addresses written by `symbol`.
    pub fn write(
        &self,
        w: &mut dyn fmt::Write,
        symbol: &mut dyn FnMut(usize) -> String,
    ) -> fmt::Result {
        if !self.tracking {
            return writeln!(
                w,
                "kmemleak: no cache keeps allocation tracks: set KMEM_DEBUG=U (or KMEM_LEAKS alone)"
            );
        }
        let kept: u64 = self.referenced.iter().map(|s| s.location.count).sum();
        let kept_bytes: u64 = self.referenced.iter().map(LeakSite::bytes).sum();
        writeln!(
            w,
            "kmemleak: {} unreferenced object(s), {} bytes, from {} allocation site(s)",
            self.leaked_objects(),
            self.leaked_bytes(),
            self.unreferenced.len()
        )?;
        for s in &self.unreferenced {
            let l = &s.location;
            let n = l.count.max(1);
            write!(
                w,
                "kmemleak: {} object(s), {} bytes (size ",
                l.count, l.size_sum
            )?;
            if l.size_min == l.size_max {
                write!(w, "{}", l.size_min)?;
            } else {
                write!(w, "{}/{}/{}", l.size_min, l.size_sum / n, l.size_max)?;
            }
            write!(w, ", age {}", l.age_min_ms)?;
            if l.age_min_ms != l.age_max_ms {
                write!(w, "/{}/{}", l.age_sum_ms / n, l.age_max_ms)?;
            }
            write!(w, " ms, pid {}", l.pid_min)?;
            if l.pid_min != l.pid_max {
                write!(w, "-{}", l.pid_max)?;
            }
            writeln!(w, ") allocated at:")?;
            if l.stack[0] == 0 {
                writeln!(w, "    <not-available>")?;
            }
            for &f in l.stack.iter().take_while(|&&f| f != 0) {
                writeln!(w, "    {}", symbol(f))?;
            }
        }
        writeln!(
            w,
            "kmemleak: still referenced (kept on purpose, not leaks): {kept} object(s), {kept_bytes} bytes, at {} site(s)",
            self.referenced.len()
        )?;
        if self.huge_live > 0 {
            writeln!(
                w,
                "kmemleak: {} huge mapping(s) still live are not tracked",
                self.huge_live
            )?;
        }
        if self.dropped > 0 {
            writeln!(
                w,
                "kmemleak: {} object(s) at sites beyond the report's room are not listed",
                self.dropped
            )?;
        }
        Ok(())
    }
}

/// Site slots per list of a scan.
const SITE_SLOTS: usize = 8192;

/// Scans the process heap for unreferenced tracked objects (see the module doc).
#[inline(never)]
pub fn scan() -> LeakReport {
    let here = 0usize;
    scan_from(stack_here(&here))
}

/// The address of a local of the calling function: where the live part of the current
/// thread's stack starts for a scan from there ([`scan_from`]).
#[inline(always)]
fn stack_here(local: &usize) -> usize {
    std::hint::black_box(local) as *const usize as usize
}

/// [`scan`], with the current thread's stack scanned from `stack_from` up: the caller's
/// frames, not the scanner's. The scanner's own frames lie below and hold none of the
/// program's pointers, but their unwritten slots keep whatever dead frames were there
/// before (in a debug build, addresses a slow path computed while the program last
/// allocated), which would hide leaks.
fn scan_from(stack_from: usize) -> LeakReport {
    let h = super::heap();
    let kmem = h.kmem();
    let slub = kmem.slub();
    let pa = h.page_allocator();
    let now = pa.platform().now_ns();
    // Roots outside the span, read before anything else (no heap allocation).
    let mut maps: MapVec<(usize, usize)> = MapVec::new();
    // Kept to the end: its mapping is in the list, skipped as our own.
    let text = read_root_mappings(&mut maps);
    // The tracked objects in use.
    let mut cands: MapVec<Candidate> = MapVec::new();
    let mut tracking = false;
    let mut out_of_memory = false;
    // The tracked caches' addresses, which `scan_span` compares slabs' caches with.
    let mut tracked: MapVec<usize> = MapVec::new();
    kmem.caches().for_each(|s| {
        if !s.config().flags.contains(SlabFlags::STORE_USER) {
            return;
        }
        tracking = true;
        out_of_memory |= !tracked.push(std::ptr::from_ref(s) as usize);
        slub.for_each_tracked(s, &mut |o| {
            if o.quarantined() {
                return;
            }
            out_of_memory |= !cands.push(Candidate {
                addr: o.addr,
                end: o.addr + o.object_size,
                marked: false,
                alloc: o.alloc,
            });
        });
    });
    cands.as_mut_slice().sort_unstable_by_key(|c| c.addr);
    let mut work: MapVec<u32> = MapVec::new();
    let (base, span_len) = pa.span();
    // Skipped as roots: the scanner's tables, and the span, a writable private
    // mapping like the program's, whose roots `scan_span` picks out (read whole, its
    // tracked objects would count as roots, and an object reached only from a leaked
    // one would pass for kept).
    // And per-CPU rseq mode's region of CPU areas (64 MiB, mostly never written),
    // whose areas are scanned one by one below.
    let region = super::percpu::cpu_region_range();
    let own = [
        maps.range(),
        cands.range(),
        text.range(),
        (base, base + span_len),
        region,
    ];
    let mut sc = Scanner {
        cands: cands.as_mut_slice(),
        work: &mut work,
        base,
        end: base + span_len,
    };
    // Roots outside the span.
    let sp = stack_from;
    for &(start, end) in maps.as_slice() {
        // The current stack from the caller's frames up (frames below are dead or the
        // scanner's).
        let start = if (start..end).contains(&sp) {
            sp & !7
        } else {
            start
        };
        sc.scan_outside(start, end, &own);
    }
    // Roots inside the span: memmaps, allocated page blocks, untracked slabs.
    scan_span(h, &mut sc, tracked.as_slice());
    // The CPU areas made in the region (their sheaves are kmalloc objects that only
    // an area or a barn names).
    for area in pa.cpu_areas().iter() {
        let a = area as *const kmem_core::CpuArea as usize;
        if (region.0..region.1).contains(&a) {
            sc.scan_inside(a, a + kmem_core::percpu::CPU_AREA_SIZE);
        }
    }
    // Everything reachable from there.
    while let Some(i) = sc.work.pop() {
        let c = sc.cands[i as usize];
        sc.scan_inside(c.addr, c.end);
    }
    // Group by allocation site.
    let mut slots = vec![Location::EMPTY; SITE_SLOTS];
    let mut kept_slots = vec![Location::EMPTY; SITE_SLOTS];
    let mut leaked = LocationTable::new(&mut slots);
    let mut kept = LocationTable::new(&mut kept_slots);
    for c in sc.cands.iter() {
        let o = kmem_core::slab::debug::TrackedObject {
            addr: c.addr,
            object_size: c.end - c.addr,
            alloc: c.alloc,
            free: Track::default(),
            quarantined: false,
        };
        if c.marked {
            kept.add(&o, Calls::Alloc, now);
        } else {
            leaked.add(&o, Calls::Alloc, now);
        }
    }
    let sorted = |t: &LocationTable<'_>| {
        let mut v: Vec<LeakSite> = t.iter().map(|&location| LeakSite { location }).collect();
        v.sort_by_key(|s| (std::cmp::Reverse(s.location.size_sum), s.location.addr));
        v
    };
    LeakReport {
        unreferenced: sorted(&leaked),
        referenced: sorted(&kept),
        objects: sc.cands.len() as u64,
        dropped: leaked.dropped + kept.dropped + u64::from(out_of_memory),
        huge_live: h.huge_totals().0 as u64,
        tracking,
    }
}

struct Scanner<'a> {
    cands: &'a mut [Candidate],
    work: &'a mut MapVec<u32>,
    base: usize,
    end: usize,
}

impl Scanner<'_> {
    #[inline]
    fn check(&mut self, v: usize) {
        if v < self.base || v >= self.end {
            return;
        }
        let i = self.cands.partition_point(|c| c.addr <= v);
        if i == 0 {
            return;
        }
        let c = &mut self.cands[i - 1];
        if v < c.end && !c.marked {
            c.marked = true;
            self.work.push((i - 1) as u32);
        }
    }

    fn scan_words(&mut self, words: &[usize]) {
        for &v in words {
            self.check(v);
        }
    }

    /// `[start, end)` inside the span or a CPU area of the region (always mapped):
    /// read directly.
    fn scan_inside(&mut self, start: usize, end: usize) {
        let start = start.next_multiple_of(8);
        if end <= start {
            return;
        }
        let n = (end - start) / 8;
        // SAFETY: span and region memory stays mapped for the allocator's lifetime; it is read
        // as plain integers (any bits are valid), possibly while another thread
        // writes it (a torn or stale value only makes the scan more conservative).
        let words = unsafe { std::slice::from_raw_parts(start as *const usize, n) };
        for i in 0..n {
            // SAFETY: in bounds; volatile so the racy read is not assumed stable.
            let v = unsafe { std::ptr::read_volatile(words.as_ptr().add(i)) };
            self.check(v);
        }
    }

    /// `[start, end)` outside the span: copied with `process_vm_readv`, which fails
    /// instead of faulting on memory unmapped meanwhile. `own` ranges are skipped.
    fn scan_outside(&mut self, start: usize, end: usize, own: &[(usize, usize)]) {
        const CHUNK: usize = 16 * 1024;
        let mut buf = [0usize; CHUNK / 8];
        let mut at = start;
        while at < end {
            if let Some(&(_, e)) = own.iter().find(|&&(s, e)| at >= s && at < e) {
                at = e;
                continue;
            }
            let len = CHUNK.min(end - at);
            let local = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: len,
            };
            let remote = libc::iovec {
                iov_base: at as *mut libc::c_void,
                iov_len: len,
            };
            // SAFETY: reading our own process's memory into our buffer; the kernel
            // checks the remote range and returns how much it copied.
            let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
            if n > 0 {
                let words = n as usize / 8;
                let copy = buf;
                self.scan_words(&copy[..words]);
            }
            at += len;
        }
    }
}

/// The span's roots: each online section's memmap and its allocated blocks that are
/// not slabs of tracked caches (`tracked`: their addresses).
fn scan_span(h: &super::Heap, sc: &mut Scanner<'_>, tracked: &[usize]) {
    let pa = h.page_allocator();
    let slub = h.kmem().slub();
    let (base, len) = pa.span();
    let per_section = 1usize << PFN_SECTION_SHIFT;
    // Free pages not yet listed have blank descriptors: skipped whole.
    let mut deferred = [(usize::MAX, 0); kmem_core::page::MAX_NUMNODES];
    for (nid, d) in deferred.iter_mut().enumerate().take(pa.nr_nodes()) {
        *d = pa.deferred_pages(nid);
    }
    for sec in 0..len.div_ceil(SECTION_SIZE) {
        let first = sec * per_section;
        if pa.pfn_to_page(first + MEMMAP_PAGES).is_none() {
            continue;
        }
        let sbase = base + sec * SECTION_SIZE;
        sc.scan_inside(sbase, sbase + MEMMAP_PAGES * PAGE_SIZE);
        let mut pfn = first + MEMMAP_PAGES;
        while pfn < first + per_section {
            if let Some(&(_, end)) = deferred.iter().find(|&&(s, e)| s == pfn && s < e) {
                pfn = end;
                continue;
            }
            let Some(page) = pa.pfn_to_page(pfn) else {
                break;
            };
            // SAFETY: a descriptor of an online section.
            let p = unsafe { page.as_ref() };
            let f = p.flags();
            let pages = 1usize << p.order().min(kmem_core::MAX_ORDER);
            if f.intersects(PageFlags::BUDDY | PageFlags::PCP) {
                pfn += pages;
                continue;
            }
            if !f.contains(PageFlags::HEAD) {
                pfn += 1;
                continue;
            }
            let addr = pa.page_address(page).as_ptr() as usize;
            let of_tracked = f.contains(PageFlags::SLAB)
                && slub
                    .cache_addr_of(addr as *const u8)
                    .is_some_and(|c| tracked.contains(&c));
            if !of_tracked {
                sc.scan_inside(addr, addr + pages * PAGE_SIZE);
            }
            pfn += pages;
        }
    }
}

/// The writable private (or shared anonymous) mappings of the process, from
/// `/proc/self/maps`, read without the heap. Device files are left out.
fn read_root_mappings(out: &mut MapVec<(usize, usize)>) -> MapVec<u8> {
    let mut text: MapVec<u8> = MapVec::new();
    // SAFETY: plain reads of a proc file into our buffer.
    unsafe {
        let fd = libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return text;
        }
        let mut buf = [0u8; 4096];
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            for &b in &buf[..n as usize] {
                text.push(b);
            }
        }
        libc::close(fd);
    }
    for line in text.as_slice().split(|&b| b == b'\n') {
        if let Some(r) = root_mapping(line) {
            out.push(r);
        }
    }
    text
}

/// A `/proc/PID/maps` line's range if it is a root: readable and writable, not a
/// device file (`/dev/zero` and System V segments excepted).
fn root_mapping(line: &[u8]) -> Option<(usize, usize)> {
    let mut f = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = f.next()?;
    let perms = f.next()?;
    let path = f.nth(3).unwrap_or(b"");
    if perms.len() < 2 || perms[0] != b'r' || perms[1] != b'w' {
        return None;
    }
    if path.starts_with(b"/dev/") && !path.starts_with(b"/dev/zero") {
        return None;
    }
    let dash = range.iter().position(|&b| b == b'-')?;
    let hex = |s: &[u8]| usize::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok();
    Some((hex(&range[..dash])?, hex(&range[dash + 1..])?))
}

/// `KMEM_LEAKS`: the report at exit, on stderr.
pub(crate) extern "C" fn leaks_at_exit() {
    // At exit no frame of the program is live below this handler: the stack is
    // scanned from here up (glibc's exit path and what lies above it).
    let here = 0usize;
    let r = scan_from(stack_here(&here));
    let mut sym = crate::symbolize::Symbolizer::for_self().ok();
    let mut name = |a: usize| match sym.as_mut() {
        Some(s) => s.symbolize(a),
        None => format!("0x{a:x}"),
    };
    let mut text = String::new();
    let _ = r.write(&mut text, &mut name);
    crate::platform::linux::write_stderr(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_writable_and_not_devices() {
        assert_eq!(
            root_mapping(b"7f00-7f10 rw-p 00000000 00:00 0 "),
            Some((0x7f00, 0x7f10))
        );
        assert_eq!(
            root_mapping(b"7f00-7f10 rw-p 00000000 00:00 0                          [stack]"),
            Some((0x7f00, 0x7f10))
        );
        assert_eq!(
            root_mapping(b"7f00-7f10 r-xp 00000000 08:01 12 /usr/lib/libc.so.6"),
            None
        );
        assert_eq!(
            root_mapping(b"7f00-7f10 rw-s 00000000 00:05 9 /dev/shm/kmem.12"),
            None
        );
        assert_eq!(root_mapping(b""), None);
    }

    #[test]
    fn mapvec_grows_and_pops() {
        let mut v: MapVec<u64> = MapVec::new();
        for i in 0..100_000 {
            assert!(v.push(i));
        }
        assert_eq!(v.as_slice().len(), 100_000);
        assert_eq!(v.as_slice()[99_999], 99_999);
        assert_eq!(v.pop(), Some(99_999));
        let (s, e) = v.range();
        assert!(e - s >= 100_000 * 8);
    }
}
