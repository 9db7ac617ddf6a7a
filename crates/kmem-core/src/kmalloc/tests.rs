//! kmalloc's unit tests: the size classes, the kernel's indices, C's `malloc` classes.

use super::*;

#[test]
fn malloc_class_sizes_are_16_aligned_classes_above_8_bytes() {
    for size in 0..=8192usize {
        let c = malloc_class_size(size);
        assert!(c >= size);
        let class = KMALLOC_PLAIN_SIZES[kmalloc_plain_index(c).unwrap()];
        // The slow path's table picks the same class.
        if size <= 1024 {
            let i = MALLOC_SIZE_INDEX[size.saturating_sub(1) >> 3] as usize;
            assert_eq!(KMALLOC_PLAIN_SIZES[i], class, "size {size}");
        }
        if size > 8 {
            // Objects sit at multiples of the class size from a page boundary.
            assert_eq!(class % MALLOC_ALIGN, 0, "size {size}: kmalloc-{class}");
        }
        // Only the 8-byte steps below 64 move.
        let plain = KMALLOC_PLAIN_SIZES[kmalloc_plain_index(size).unwrap()];
        if plain.is_multiple_of(MALLOC_ALIGN) || size <= 8 {
            assert_eq!(class, plain, "size {size}");
        }
    }
}

#[test]
fn kmalloc_index_matches_the_kernel() {
    let cases = [
        (0, 8),
        (1, 8),
        (8, 8),
        (9, 16),
        (16, 16),
        (17, 32),
        (32, 32),
        (33, 64),
        (64, 64),
        (65, 96),
        (96, 96),
        (97, 128),
        (128, 128),
        (129, 192),
        (192, 192),
        (193, 256),
        (256, 256),
        (257, 512),
        (1000, 1024),
        (1025, 2048),
        (4096, 4096),
        (4097, 8192),
        (8192, 8192),
    ];
    for (size, class) in cases {
        let i = kmalloc_index(size).unwrap();
        assert_eq!(KMALLOC_SIZES[i], class, "size {size}");
    }
    assert_eq!(kmalloc_index(8193), None);
}

#[test]
fn plain_index_is_the_smallest_class_that_fits() {
    // Every size up to 64 KiB, then around every class up to 1 MiB: the class
    // holds the size and the class below does not.
    let check = |size: usize| {
        let i = kmalloc_plain_index(size).unwrap();
        assert!(KMALLOC_PLAIN_SIZES[i] >= size.max(1), "size {size}");
        if i > 0 {
            assert!(KMALLOC_PLAIN_SIZES[i - 1] < size, "size {size}");
        }
    };
    (0..=65536).for_each(check);
    for &c in &KMALLOC_PLAIN_SIZES {
        check(c - 1);
        check(c);
        if c < KMALLOC_MAX_CACHE_SIZE {
            check(c + 1);
        }
    }
    assert_eq!(kmalloc_plain_index(KMALLOC_MAX_CACHE_SIZE + 1), None);
    // 8-byte steps up to 64; four classes per doubling from 128 bytes to 8 KiB,
    // then one: each a multiple of 16 from 64 on, never more than 25% above the
    // size it serves up to 8 KiB.
    assert_eq!(KMALLOC_PLAIN_SIZES[..8], [8, 16, 24, 32, 40, 48, 56, 64]);
    for w in KMALLOC_PLAIN_SIZES[7..].windows(2) {
        assert!(w[1] > w[0] && w[1] % 16 == 0);
        if (128..8192).contains(&w[0]) {
            assert!((w[1] - w[0]) * 4 <= w[0], "{w:?}");
        } else if w[0] >= 8192 {
            assert_eq!(w[1], 2 * w[0]);
        }
    }
    // The kernel's classes are all plain classes.
    for c in KMALLOC_SIZES {
        assert!(KMALLOC_PLAIN_SIZES.contains(&c));
    }
}

#[test]
fn class_names_follow_the_kernel() {
    for (size, want) in [
        (8, "8"),
        (96, "96"),
        (1280, "1280"),
        (8192, "8k"),
        (10240, "10k"),
        (1 << 20, "1M"),
        (3 << 20, "3M"),
        (1 << 21 | 1024, "2049k"),
        (usize::MAX, "18446744073709551615"),
    ] {
        let mut n = NameBuf::new();
        write_size(&mut n, size);
        assert_eq!(n.as_str(), want);
    }
}
