//! Slab orders through the public API of `Kmem`: the small kmalloc classes on 32 KiB
//! slabs in the sheaves design (`CacheConfig::widen_small_slabs`), the rest on the
//! kernel's orders.

mod common;

use common::{config, kmem, kmem_cpu_slab};
use kmem_core::kmalloc::KMALLOC_PLAIN_SIZES;
use kmem_core::slab::{CacheConfig, SMALL_OBJECT_SLAB_ORDER, SMALL_SLAB_OBJECT_MAX};
use kmem_core::{Gfp, SlabFlags, PAGE_SIZE};

#[test]
fn small_classes_have_32_kib_slabs_in_the_sheaves_design() {
    let k = kmem(2, config(1, 0));
    // Small objects on 32 KiB slabs in the sheaves design, except the accounted ones,
    // which keep the kernel's one-page slabs, as every cache of the CPU-slab design
    // (seed 004's figure there: 128 kmalloc-32 objects in one 4 KiB page).
    let k32 = k.kmalloc_cache(32, Gfp::KERNEL).unwrap();
    assert_eq!((k32.config().objects, k32.config().order), (1024, 3));
    let cg32 = k.kmalloc_cache(32, Gfp::KERNEL | Gfp::ACCOUNT).unwrap();
    assert_eq!((cg32.config().objects, cg32.config().order), (128, 0));
    let k512 = k.kmalloc_cache(512, Gfp::KERNEL).unwrap();
    assert_eq!(
        k512.config().order,
        1,
        "larger objects keep the kernel's order"
    );
    let old = kmem_cpu_slab(2, config(1, 0));
    let k32 = old.kmalloc_cache(32, Gfp::KERNEL).unwrap();
    assert_eq!((k32.config().objects, k32.config().order), (128, 0));
    // Every plain class: up to 256 B on 32 KiB slabs, above it the kernel's order.
    for class in KMALLOC_PLAIN_SIZES {
        let cfg = k.kmalloc_cache(class, Gfp::KERNEL).unwrap().config();
        let kernel =
            CacheConfig::calculate("k", cfg.size, cfg.align, SlabFlags::empty(), None, 2).unwrap();
        if cfg.size <= SMALL_SLAB_OBJECT_MAX {
            assert_eq!(cfg.order, SMALL_OBJECT_SLAB_ORDER, "kmalloc-{class}");
            assert_eq!(
                cfg.objects,
                (PAGE_SIZE << cfg.order) / cfg.size,
                "kmalloc-{class}"
            );
        } else {
            assert_eq!(cfg.order, kernel.order, "kmalloc-{class}");
        }
    }
}
