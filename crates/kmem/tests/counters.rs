//! `kmem::stats::{allocated, active, resident, mapped, metadata, retained}`: they
//! allocate nothing, keep their invariants, follow a workload, and agree with the
//! `kmem::stats()` snapshot.
//!
//! One test in this binary, so no other test thread uses the kmem heap meanwhile; the
//! binary's own allocator is the system's (counted), so the snapshot's vectors do not
//! disturb the heap it describes.

use kmem::stats::{self as ks, Counters};
use kmem::{heap, PAGE_SIZE};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: from alloc above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's block.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn check_invariants(c: &Counters, when: &str) {
    assert!(c.allocated <= c.active, "{when}: {c:?}");
    assert!(c.active <= c.resident, "{when}: {c:?}");
    assert!(c.metadata <= c.resident, "{when}: {c:?}");
    assert!(c.resident + c.retained <= c.mapped, "{when}: {c:?}");
}

/// The six figures computed from a `kmem::stats()` snapshot with the definitions of
/// `kmem::stats::counters` (CPU areas and cached huge mappings are not in the
/// snapshot: read directly).
fn from_snapshot(s: &kmem::Stats) -> Counters {
    let areas = heap().page_allocator().cpu_areas().nr_areas();
    let area_bytes = areas * kmem_core::percpu::CPU_AREA_SIZE;
    let cached = heap().huge_cached_bytes();
    let (mut slabs, mut in_use) = (0u64, 0u64);
    for c in &s.caches {
        slabs += c.num_slabs * c.pagesperslab * PAGE_SIZE as u64;
        in_use += c.active_objs * c.objsize;
    }
    let (mut managed, mut free, mut reported, mut pcp) = (0, 0, 0, 0);
    for z in &s.zones {
        managed += z.managed_pages as usize;
        free += z.free_pages as usize;
        reported += z.reported_pages as usize;
        pcp += z.pcp_pages as usize;
    }
    let event = |name: &str| {
        s.vmstat
            .iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| panic!("{name} in vmstat"))
            .value as usize
    };
    let sections = event("section_online") - event("section_offline");
    let huge = s.huge_bytes as usize;
    let used = managed - free - pcp;
    let active = used * PAGE_SIZE - area_bytes + huge;
    let metadata = sections * kmem_core::page::MEMMAP_PAGES * PAGE_SIZE + area_bytes;
    let resident = active + metadata + (free - reported + pcp) * PAGE_SIZE + cached;
    Counters {
        allocated: active - slabs as usize + in_use as usize,
        active,
        resident,
        mapped: sections * kmem_core::page::SECTION_SIZE + huge + cached,
        metadata,
        retained: reported * PAGE_SIZE,
    }
}

/// Readers and snapshot agree within a page per CPU area (see the test's comment).
fn agree(r: &Counters, s: &Counters, tol: usize) {
    let pairs = [
        ("allocated", r.allocated, s.allocated),
        ("active", r.active, s.active),
        ("resident", r.resident, s.resident),
        ("mapped", r.mapped, s.mapped),
        ("metadata", r.metadata, s.metadata),
        ("retained", r.retained, s.retained),
    ];
    for (name, a, b) in pairs {
        assert!(
            a.abs_diff(b) <= tol,
            "{name}: readers {a}, snapshot {b} (tolerance {tol})\n{r:?}\n{s:?}"
        );
    }
}

#[test]
fn readers_allocate_nothing_keep_invariants_and_agree_with_the_snapshot() {
    let h = heap();
    let c0 = ks::counters();
    check_invariants(&c0, "start");

    // Reading allocates nothing (no Rust allocation; the kmem heap is not this
    // binary's allocator, and its figures do not move either).
    let before = ALLOCS.load(Ordering::Relaxed);
    let again = ks::counters();
    let singles = [
        ks::allocated(),
        ks::active(),
        ks::resident(),
        ks::mapped(),
        ks::metadata(),
        ks::retained(),
    ];
    assert_eq!(ALLOCS.load(Ordering::Relaxed), before, "a reader allocated");
    assert_eq!(again, c0, "nothing ran: the same figures");
    assert_eq!(
        singles,
        [
            c0.allocated,
            c0.active,
            c0.resident,
            c0.mapped,
            c0.metadata,
            c0.retained
        ],
        "each reader gives what counters() gives"
    );

    // A workload: small objects, page blocks, one huge mapping.
    let small = Layout::from_size_align(128, 8).unwrap();
    // Above the largest kmalloc cache (1 MiB): 512-page blocks.
    let block = Layout::from_size_align((1 << 20) + 1, 8).unwrap();
    let huge = Layout::from_size_align((8 << 20) + 1, 8).unwrap();
    let mut held: Vec<(*mut u8, Layout)> = Vec::new();
    for _ in 0..1000 {
        held.push((h.alloc(small), small));
    }
    for _ in 0..4 {
        held.push((h.alloc(block), block));
    }
    held.push((h.alloc(huge), huge));
    assert!(held.iter().all(|(p, _)| !p.is_null()));
    for &(p, l) in &held {
        // SAFETY: ours, `l.size()` bytes: touch them so they are resident.
        unsafe { p.write_bytes(0x5a, l.size()) };
    }
    let c1 = ks::counters();
    check_invariants(&c1, "loaded");
    assert!(c1.metadata > 0, "a section's memmap and a CPU area: {c1:?}");
    let asked = 1000 * 128 + 4 * ((1 << 20) + 1) + (8 << 20) + 1;
    // Served: 1000 kmalloc-128 objects, four 512-page blocks, 8 MiB + a page mapped.
    let served = 1000 * 128 + 4 * (2 << 20) + (8 << 20) + PAGE_SIZE;
    let grew = c1.allocated - c0.allocated;
    // Per-CPU slack: objects cached for reuse count as in use (as in /proc/slabinfo):
    // in the CPU-slab design at most a slab of kmalloc-128 and its CPU partial slabs;
    // with sheaves the CPU's two sheaves and the barn's full ones.
    let k128 = h
        .kmem()
        .kmalloc_cache(128, kmem::Gfp::KERNEL)
        .unwrap()
        .config();
    let slack = (64 << 10).max((2 + k128.barn_max_full) * k128.sheaf_capacity * k128.size);
    assert!(
        grew >= asked && grew <= served + slack,
        "allocated grew by {grew}, asked {asked}, served {served}"
    );
    assert!(c1.active - c0.active >= served, "{c0:?}\n{c1:?}");
    assert!(c1.resident - c0.resident >= served, "{c0:?}\n{c1:?}");
    assert!(c1.mapped - c0.mapped >= 8 << 20, "{c0:?}\n{c1:?}");

    // Agreement with the snapshot. The snapshot reads the same counters, so with
    // nothing running they are equal; the tolerance is one page per CPU area (what a
    // CPU area's per-CPU page list or freelist may move between two reads when
    // another thread of the program runs), the bound.
    let snap = kmem::stats();
    let tol = h.page_allocator().cpu_areas().nr_areas() * PAGE_SIZE;
    let c2 = ks::counters();
    agree(&c2, &from_snapshot(&snap), tol);
    agree(&c1, &c2, tol);

    // Everything back: the program's share falls, kmem keeps some for reuse.
    for &(p, _) in &held {
        // SAFETY: allocated above, freed once.
        assert!(unsafe { h.dealloc(p) });
    }
    let c3 = ks::counters();
    check_invariants(&c3, "freed");
    assert!(
        c3.allocated + served - slack <= c1.allocated,
        "{c1:?}\n{c3:?}"
    );
    assert!(c3.active + (8 << 20) <= c1.active, "{c1:?}\n{c3:?}");
    agree(&c3, &from_snapshot(&kmem::stats()), tol);
    drop(held);
}
