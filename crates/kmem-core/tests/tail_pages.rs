//! Frees of objects in the tail pages of multi-page slabs: the fast path finds the
//! CPU's sheaf from the object's own page (tails mirror the head's word), refuses
//! objects of slabs that left the inline path (an objcg vector: charged objects must be
//! uncharged), and the mirror goes with the slab.

mod common;

use common::{config, kmem};
use kmem_core::page::{CPU_AREA_CHARGED_LINES, CPU_AREA_ZERO_LINE};
use kmem_core::{CpuRef, Gfp, PageFlags, PAGE_SIZE};

type K = kmem_core::Kmem<common::TestPlatform>;

/// The flags of the page holding `p` if it carries a slab's word (a slab's head or a
/// marked tail), else empty.
fn flags_of(k: &K, p: *const u8) -> PageFlags {
    k.pages
        .virt_to_slab_page(p)
        .map_or(PageFlags::empty(), |page| page.flags())
}

/// The first object of `objs` that lies past its slab's first page.
fn in_a_tail(objs: &[usize], slab_bytes: usize) -> usize {
    *objs
        .iter()
        .find(|&&p| p & (slab_bytes - 1) >= PAGE_SIZE)
        .expect("an object in a tail page")
}

#[test]
fn a_free_in_a_tail_page_takes_the_fast_path() {
    let k = kmem(2, config(1, 0));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this test until put back.
    let cpu = unsafe { CpuRef::new(area) };
    let s = k.kmalloc_cache(1024, Gfp::KERNEL).unwrap();
    let cfg = s.config();
    assert!(cfg.order > 0, "kmalloc-1k has multi-page slabs");
    let objs: Vec<usize> = (0..cfg.objects)
        .map(|_| k.kmalloc(Some(cpu), 1024, Gfp::KERNEL).unwrap().as_ptr() as usize)
        .collect();
    let p = in_a_tail(&objs, cfg.slab_bytes());
    assert_eq!(
        flags_of(k, p as *const u8),
        PageFlags::TAIL | PageFlags::SLAB_TAIL
    );
    // The tail carries the head's sheaf tag.
    let tag = |q: usize| {
        k.pages
            .virt_to_slab_page(q as *const u8)
            .unwrap()
            .sheaf_tag()
    };
    assert_ne!(tag(p), 0);
    assert_eq!(tag(p), tag(p & !(cfg.slab_bytes() - 1)));
    // A first free sets up the spare sheaf that frees go to.
    // SAFETY: ours.
    assert!(unsafe { k.kfree(Some(cpu), objs[0] as *mut u8) });
    let before = k.slub().census(s, &[cpu], |_| {}).in_cpu_sheaves;
    // SAFETY: ours.
    let pushed = unsafe { k.kfree_fast(cpu, p as *mut u8) };
    assert!(pushed, "pushed onto the sheaf");
    assert_eq!(
        k.slub().census(s, &[cpu], |_| {}).in_cpu_sheaves,
        before + 1
    );
    // An interior pointer in a tail page is refused (the regular path reports it).
    // SAFETY: refused without being touched.
    assert!(!unsafe { k.kfree_fast(cpu, (objs[1] + 8) as *mut u8) });
    for &q in objs[1..].iter().filter(|&&q| q != p) {
        // SAFETY: ours.
        unsafe { k.kfree(Some(cpu), q as *mut u8) };
    }
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(area) };
    k.shrink_all(None);
    assert_eq!(s.nr_slabs(0), 0);
    // The slab's pages went back: no page keeps the mark or the sheaf tag.
    assert!(!flags_of(k, p as *const u8).contains(PageFlags::SLAB_TAIL));
    let page = k.pages.virt_to_page(p as *const u8).unwrap();
    // SAFETY: a descriptor of an online section, which lives as long as `k`.
    let tag = unsafe { page.as_ref() }.sheaf_tag();
    assert_eq!(tag, 0, "the tail kept its tag");
}

#[test]
fn charged_objects_in_tail_pages_leave_the_fast_path() {
    let k = kmem(2, config(1, 0));
    let g = k
        .memcg()
        .mem_cgroup_create(None, k.memcg().root_mem_cgroup(), "g")
        .unwrap();
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: owned by this test until put back.
    let cpu = unsafe { CpuRef::new(area) };
    let objs: Vec<usize> = (0..64)
        .map(|_| {
            k.memcg()
                .kmalloc_objcg(Some(cpu), 1024, Gfp::KERNEL, g.objcg())
                .unwrap()
                .as_ptr() as usize
        })
        .collect();
    // SAFETY: the test holds the objects: their cache lives.
    let slab_bytes = unsafe { k.slub().cache_of(objs[0] as *const u8) }
        .unwrap()
        .config()
        .slab_bytes();
    let p = in_a_tail(&objs, slab_bytes);
    // The slab has an objcg vector: neither its head nor its tails name the CPU's
    // sheaves any more (a free must take the path that uncharges), but the class's
    // charged line, zero in every CPU area (a charged area's inbox).
    let head = k
        .pages
        .virt_to_slab_page((p & !(slab_bytes - 1)) as *const u8)
        .unwrap();
    let tail = k.pages.virt_to_slab_page(p as *const u8).unwrap();
    assert!(tail.flags().contains(PageFlags::SLAB_TAIL));
    let class = kmem_core::kmalloc::kmalloc_index(1024).unwrap();
    let charged = CPU_AREA_CHARGED_LINES + 64 * class - CPU_AREA_ZERO_LINE;
    for page in [head, tail] {
        assert_eq!(page.sheaf_tag(), charged, "the class's charged line");
    }
    // SAFETY: refused: the object stays ours.
    let pushed = unsafe { k.kfree_fast(cpu, p as *mut u8) };
    assert!(!pushed, "must be uncharged");
    for &q in &objs {
        // SAFETY: ours.
        unsafe { k.kfree(Some(cpu), q as *mut u8) };
    }
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(area) };
    k.shrink_all(None);
    assert_eq!(g.usage(), 0, "every charge went back");
}
