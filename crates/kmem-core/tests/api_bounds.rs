//! kmem-core's safe entry points given arguments out of range: a size past the fast
//! paths' size tables, a node past `MAX_NUMNODES`, a percpu alignment that is no
//! power of two, a per-CPU mode or SLUB design changed after the allocator is up. Each
//! has a defined answer (the zero line, `None`, 0, no change) where the code before
//! read or wrote outside its tables.

mod common;

use kmem_core::kmalloc::{MEDIUM_FAST_MAX, SMALL_FAST_MAX};
use kmem_core::page::{CPU_AREA_ZERO_LINE, MAX_NUMNODES};
use kmem_core::percpu::InlineArea;
use kmem_core::slab::{PerCpuAccess, SlubDesign};
use kmem_core::{Gfp, SlabFlags};

#[test]
fn sizes_past_the_fast_tables_read_the_zero_line() {
    let k = common::kmem(4, common::config(1, 0));
    let (_area, cpu) = common::own_area(k);
    let cpu = cpu.unwrap();
    // Fill the class's sheaves so that a pop at a wrong offset would find objects.
    let held: Vec<_> = (0..64)
        .map(|_| k.kmalloc(Some(cpu), 64, Gfp::KERNEL).unwrap())
        .collect();
    for p in held {
        // SAFETY: allocated just above, freed once.
        unsafe { k.kfree(Some(cpu), p.as_ptr()) };
    }
    let caches = k.kmalloc_ops().caches();
    for size in [SMALL_FAST_MAX + 1, 1 << 20, 1 << 30, usize::MAX] {
        assert_eq!(
            caches.small_fast(size),
            CPU_AREA_ZERO_LINE,
            "small_fast({size})"
        );
        assert_eq!(
            caches.malloc_fast(size),
            CPU_AREA_ZERO_LINE,
            "malloc_fast({size})"
        );
        assert_eq!(
            caches.small_rseq(size),
            CPU_AREA_ZERO_LINE,
            "small_rseq({size})"
        );
        assert_eq!(
            caches.malloc_rseq(size),
            CPU_AREA_ZERO_LINE,
            "malloc_rseq({size})"
        );
        assert!(
            k.malloc_fast(InlineArea::from(cpu), size).is_none(),
            "malloc_fast {size}"
        );
    }
    assert_eq!(
        caches.medium_fast(MEDIUM_FAST_MAX + (1 << 20)),
        CPU_AREA_ZERO_LINE
    );
    // Within the tables the answers are what they were.
    assert_ne!(caches.small_fast(64), CPU_AREA_ZERO_LINE);
    assert!(k.malloc_fast(InlineArea::from(cpu), 64).is_some());
}

#[test]
fn a_node_past_the_possible_ones_is_refused() {
    let k = common::kmem(4, common::config(1, 0));
    let s = k
        .kmem_cache_create(None, "bounds", 96, 8, SlabFlags::empty(), None)
        .unwrap();
    let debug = k
        .kmem_cache_create(None, "bounds-debug", 96, 8, SlabFlags::DEBUG, None)
        .unwrap();
    for nid in [MAX_NUMNODES, MAX_NUMNODES + 1, 1 << 20, usize::MAX] {
        assert!(k
            .slub()
            .alloc_node(None, s, Gfp::KERNEL, Some(nid))
            .is_none());
        assert!(k
            .slub()
            .alloc_node(None, debug, Gfp::KERNEL, Some(nid))
            .is_none());
        assert!(k.kmalloc_node(None, 64, Gfp::KERNEL, Some(nid)).is_none());
        assert_eq!(s.nr_slabs(nid), 0);
        assert_eq!(s.nr_partial(nid), 0);
        assert_eq!(s.count_partial_free(nid), 0);
        assert_eq!(k.slub().kept_empty_pages(nid), 0);
        assert!(!k.pages.add_memory(nid));
    }
    // Node 0 still serves.
    let p = k.slub().alloc_node(None, s, Gfp::KERNEL, Some(0)).unwrap();
    assert_eq!(s.nr_slabs(0), 1);
    // SAFETY: allocated just above from `s`, freed once.
    assert!(unsafe { k.kmem_cache_free(None, s, p) });
}

#[test]
fn percpu_offsets_need_a_power_of_two_and_never_go_back() {
    let k = common::kmem(4, common::config(1, 0));
    let percpu = k.pages.percpu();
    let a = percpu.alloc(24, 8).unwrap();
    for align in [0, 3, 24, 1000] {
        assert_eq!(percpu.alloc(8, align), None, "align {align}");
    }
    assert_eq!(percpu.alloc(8, usize::MAX), None);
    let b = percpu.alloc(8, 64).unwrap();
    assert!(b >= a + 24 && b.is_multiple_of(64), "{a} then {b}");
}

#[test]
fn the_per_cpu_mode_and_design_stay_once_the_allocator_is_up() {
    let k = common::kmem(4, common::config(1, 0));
    assert!(k.is_up());
    let (access, design) = (k.percpu_access(), k.slub_design());
    assert_eq!(k.set_percpu_access(PerCpuAccess::Cas), access);
    assert_eq!(k.percpu_access(), access);
    k.set_slub_design(SlubDesign::CpuSlab);
    assert_eq!(k.slub_design(), design);
}
