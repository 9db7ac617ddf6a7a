//! KMEM_INIT and KMEM_HARDEN reach every cache the heap makes, kmalloc's included.
//! (Own process: the settings are process-wide and read once.)

use kmem::{heap, Gfp, SlabFlags};

#[test]
fn kmem_init_and_harden_apply_to_every_cache() {
    std::env::set_var("KMEM_INIT", "alloc,free");
    std::env::set_var("KMEM_HARDEN", "random");
    let h = heap();
    let c = h
        .kmem_cache_create("init-harden-200", 200, 8, SlabFlags::empty(), None)
        .expect("cache");
    // Hardened, with a key of its own (from getrandom): two caches, two keys.
    let d = h
        .kmem_cache_create("init-harden-300", 300, 8, SlabFlags::empty(), None)
        .expect("cache");
    assert!(c.config().random != 0 && d.config().random != 0);
    assert_ne!(c.config().random, d.config().random);
    let flags = c.config().flags;
    assert!(flags
        .contains(SlabFlags::INIT_ON_ALLOC | SlabFlags::INIT_ON_FREE | SlabFlags::RANDOM_FREELIST));
    // init_on_alloc: a reused object comes back zeroed although it was dirtied.
    for _ in 0..3 {
        let p = h.kmem_cache_alloc(c, Gfp::KERNEL).expect("memory");
        // SAFETY: ours, 200 bytes.
        unsafe {
            assert!(std::slice::from_raw_parts(p.as_ptr(), 200)
                .iter()
                .all(|&b| b == 0));
            std::ptr::write_bytes(p.as_ptr(), 0x5c, 200);
            h.kmem_cache_free(c, p);
        }
    }
    // A constructed cache is left alone (as the kernel): zeroing would undo the
    // constructor, and its objects keep their state while free.
    fn ctor(p: *mut u8) {
        // SAFETY: the slab layer passes an object of 64 bytes.
        unsafe { std::ptr::write_bytes(p, 0xab, 64) };
    }
    let k = h
        .kmem_cache_create("init-harden-ctor", 64, 8, SlabFlags::empty(), Some(ctor))
        .expect("cache");
    assert!(!k
        .config()
        .flags
        .intersects(SlabFlags::INIT_ON_ALLOC | SlabFlags::INIT_ON_FREE));
    let p = h.kmem_cache_alloc(k, Gfp::KERNEL).expect("memory");
    // SAFETY: ours, 64 bytes, constructed.
    unsafe {
        assert!(std::slice::from_raw_parts(p.as_ptr(), 64)
            .iter()
            .all(|&b| b == 0xab));
        h.kmem_cache_free(k, p);
    }
    // The kmalloc caches got the same flags.
    let p = h.kmalloc(100, Gfp::KERNEL).expect("memory");
    // SAFETY: ours, at least 100 bytes.
    unsafe {
        assert!(std::slice::from_raw_parts(p.as_ptr(), 100)
            .iter()
            .all(|&b| b == 0));
        std::ptr::write_bytes(p.as_ptr(), 0x5c, 100);
        h.kfree(p.as_ptr());
    }
    let flags = h
        .kmem()
        .kmalloc_cache(100, Gfp::KERNEL)
        .map(|s| s.config().flags);
    assert!(flags.is_some_and(|f| f.contains(SlabFlags::INIT_ON_FREE | SlabFlags::RANDOM_FREELIST)));
}
