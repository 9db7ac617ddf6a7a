//! `kmem_cache_destroy` flushes every CPU area's state of the cache, other owners'
//! too, who go on with their other caches meanwhile: what that flush frees must not go
//! through their page lists (or their sheaves of the sheaf caches), which only their
//! owners may touch. It goes to the zone and the barns.

mod common;

use common::{config, kmem_cpu_slab};
use kmem_core::slab::DestroyError;
use kmem_core::{CpuRef, Gfp, SlabFlags};

#[test]
fn destroying_a_cache_frees_nothing_through_another_owner_s_page_lists() {
    let k = kmem_cpu_slab(2, config(1, 0));
    let area = k.pages.cpu_area_get(0).unwrap();
    // SAFETY: another owner's area, as far as the destroy below knows.
    let b = Some(unsafe { CpuRef::new(area) });
    let s = k
        .kmem_cache_create(None, "destroy-foreign", 1024, 8, SlabFlags::empty(), None)
        .unwrap();
    let (per, min) = (s.config().objects, s.config().min_partial);
    // B's CPU slab, a new one: an object allocated on B (freed below).
    let x = k.slub().alloc(b, s, Gfp::KERNEL).unwrap();
    // At least `min_partial` partial slabs on the node, from no CPU.
    let objs: Vec<_> = (0..(min + 2) * per)
        .map(|_| k.slub().alloc(None, s, Gfp::KERNEL).unwrap())
        .collect();
    let mut keep = Vec::new();
    for (i, p) in objs.into_iter().enumerate() {
        if i % per == 0 {
            // SAFETY: ours, freed once.
            assert!(unsafe { k.slub().free(None, s, p) });
        } else {
            keep.push(p);
        }
    }
    // SAFETY: ours, freed once: B's CPU slab has no object in use now.
    assert!(unsafe { k.slub().free(b, s, x) });
    let slabs = s.nr_slabs(0);
    let on_lists = k.pages.nr_pcp_pages(0);
    // Destroyed from no CPU: refused (objects remain), after every area's flush. B's
    // empty CPU slab is discarded, to the zone, not onto B's page lists.
    // SAFETY: nobody uses `s` meanwhile.
    let r = unsafe { k.kmem_cache_destroy(None, s) };
    assert!(matches!(r, Err(DestroyError::ObjectsRemaining(_))), "{r:?}");
    assert_eq!(s.nr_slabs(0), slabs - 1, "B's empty CPU slab discarded");
    assert_eq!(k.pages.nr_pcp_pages(0), on_lists, "B's page lists touched");
    for p in keep {
        // SAFETY: ours, freed once.
        assert!(unsafe { k.slub().free(None, s, p) });
    }
    // SAFETY: nobody uses `s` again.
    assert_eq!(unsafe { k.kmem_cache_destroy(None, s) }, Ok(()));
    // SAFETY: owned; not used afterwards.
    unsafe { k.pages.cpu_area_put(area) };
}
