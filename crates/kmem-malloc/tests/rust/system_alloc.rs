// A Rust program on its default global allocator (`std::alloc::System`), for
// `shim.rs`: run under the preload, every allocation is kmem's `malloc`. Rust's
// `System` calls `malloc(n)` for any layout aligned to at most 16 bytes and at most
// `n`, counting on glibc's 16-byte alignment: hashbrown's small tables (control bytes
// 16-aligned after the buckets, 52 bytes for four `usize`s) and `u128` vectors load
// them with aligned vector moves. Prints a checksum that must match a run without
// the preload.
use std::alloc::{alloc, dealloc, realloc, Layout};
use std::collections::{HashMap, HashSet};

fn main() {
    let mut sum: u128 = 0;
    for n in 0..3000u32 {
        let mut m: HashMap<u32, u8> = HashMap::new();
        for i in 0..n % 40 {
            m.insert(i, i as u8);
        }
        let s: HashSet<usize> = (0..(n % 9) as usize).collect();
        let mut v: Vec<u128> = (0..(n % 7) as u128).collect();
        v.push(u128::from(n));
        sum += m.values().map(|&x| u128::from(x)).sum::<u128>()
            + s.len() as u128
            + v.iter().sum::<u128>();
        let c = m.clone();
        sum += c.len() as u128;
    }
    // Every size from 16 to 1100 bytes aligned to 16, allocated, grown and freed.
    for size in 16..=1100usize {
        let l = Layout::from_size_align(size, 16).unwrap();
        // SAFETY: a non-zero size; the pointers are checked and freed with their layouts.
        unsafe {
            let p = alloc(l);
            assert!(
                !p.is_null() && p as usize % 16 == 0,
                "alloc({size}, 16): {p:?}"
            );
            let q = realloc(p, l, size + 24);
            assert!(
                !q.is_null() && q as usize % 16 == 0,
                "realloc(.., {}): {q:?}",
                size + 24
            );
            dealloc(q, Layout::from_size_align(size + 24, 16).unwrap());
        }
    }
    println!("{sum}");
}
