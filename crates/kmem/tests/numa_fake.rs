//! KMEM_NUMA_FAKE splits the machine into fake nodes, each with its own memory.

use kmem::{heap, Gfp};
use kmem_core::vmstat::VmEvent;

#[test]
fn fake_nodes_have_their_own_memory() {
    std::env::set_var("KMEM_NUMA_FAKE", "3");
    let h = heap();
    let pa = h.page_allocator();
    assert_eq!(pa.nr_nodes(), 3);
    for nid in 0..3 {
        let p = h
            .alloc_pages_node(Gfp::THISNODE, 0, nid)
            .expect("page on node");
        assert_eq!(pa.page_to_nid(p), nid);
        // SAFETY: allocated above.
        unsafe { h.free_pages(p, 0) };
    }
    assert!(pa.event(VmEvent::NumaHit) >= 3);
    assert_eq!(h.buddyinfo().lines().count(), 3);
    // Slabs on every node: kmalloc's caches keep their node states in a node-major
    // table apart from the caches (`NodeTable`); each node's slabs are on its own lists.
    let mut held = Vec::new();
    for nid in 0..3 {
        for _ in 0..200 {
            let p = h
                .kmalloc_node(96, Gfp::KERNEL, nid)
                .expect("object on node");
            let page = pa.virt_to_head_page(p.as_ptr()).expect("a slab page");
            assert_eq!(pa.page_to_nid(page), nid);
            held.push(p);
        }
    }
    for p in held {
        // SAFETY: allocated above, freed once.
        assert!(unsafe { h.kfree(p.as_ptr()) });
    }
    assert!(h.validate().is_empty());
    let info = h.slabinfo();
    assert!(info.lines().any(|l| l.starts_with("kmalloc-96 ")), "{info}");
}
