//! A real Rust workload under KmemAlloc, checked against the same computation with
//! every container on the system allocator (through allocator_api2 and hashbrown's
//! allocator parameter, in this same process).

mod common;

use allocator_api2::vec::Vec as AVec;
use common::XorShift;
use kmem::KmemAlloc;
use std::alloc::System;
use std::collections::{BTreeMap, HashMap};

#[global_allocator]
static A: KmemAlloc = KmemAlloc;

const N: usize = 1_000_000;

/// Looks up N pseudo-random keys (the same ones every call); returns the hits and the
/// sum of the values found.
fn probe(get: impl Fn(&u64) -> Option<u64>) -> (u64, u64) {
    let mut queries = XorShift::new(99);
    let (mut hits, mut sum) = (0u64, 0u64);
    for _ in 0..N {
        if let Some(v) = get(&(queries.next_u64() % (4 * N as u64))) {
            hits += 1;
            sum = sum.wrapping_add(v);
        }
    }
    (hits, sum)
}

#[test]
fn hashmap_and_btreemap_agree_with_the_system_allocator() {
    // Under kmem (std collections use the global allocator).
    let mut rng = XorShift::new(7);
    let mut h: HashMap<u64, u64> = HashMap::new();
    let mut b: BTreeMap<u64, u64> = BTreeMap::new();
    for i in 0..N as u64 {
        let k = rng.next_u64() % (4 * N as u64);
        *h.entry(k).or_insert(0) += i;
        *b.entry(k).or_insert(0) += i;
    }
    let (hits, sum) = probe(|k| h.get(k).copied());
    let range: u64 = b
        .range(1000..200_000)
        .map(|(k, v)| k ^ v)
        .fold(0, u64::wrapping_add);

    // On the system allocator.
    let mut rng = XorShift::new(7);
    let mut hs: hashbrown::HashMap<u64, u64, hashbrown::DefaultHashBuilder, System> =
        hashbrown::HashMap::with_hasher_in(Default::default(), System);
    for i in 0..N as u64 {
        let k = rng.next_u64() % (4 * N as u64);
        *hs.entry(k).or_insert(0) += i;
    }
    let mut sorted: AVec<(u64, u64), System> = AVec::with_capacity_in(hs.len(), System);
    sorted.extend(hs.iter().map(|(&k, &v)| (k, v)));
    sorted.sort_unstable();
    let (hits_s, sum_s) = probe(|k| hs.get(k).copied());
    let range_s: u64 = sorted
        .iter()
        .filter(|(k, _)| (1000..200_000).contains(k))
        .map(|(k, v)| k ^ v)
        .fold(0, u64::wrapping_add);

    assert_eq!(h.len(), hs.len());
    assert_eq!(b.len(), sorted.len());
    assert_eq!((hits, sum), (hits_s, sum_s));
    assert_eq!(range, range_s);
    assert!(b
        .iter()
        .zip(sorted.iter())
        .all(|((k, v), (ks, vs))| k == ks && v == vs));
}

#[test]
fn sorting_and_deduplicating_strings_agrees() {
    let mut rng = XorShift::new(3);
    let mut words: Vec<String> = (0..N)
        .map(|_| format!("w{}", rng.next_u64() % 300_000))
        .collect();
    words.sort();
    words.dedup();

    let mut rng = XorShift::new(3);
    let mut sys: AVec<AVec<u8, System>, System> = AVec::new_in(System);
    for _ in 0..N {
        let s = format!("w{}", rng.next_u64() % 300_000);
        let mut v = AVec::with_capacity_in(s.len(), System);
        v.extend_from_slice(s.as_bytes());
        sys.push(v);
    }
    sys.sort();
    sys.dedup();
    assert_eq!(words.len(), sys.len());
    assert!(words
        .iter()
        .zip(sys.iter())
        .all(|(a, b)| a.as_bytes() == &b[..]));
}

#[test]
fn threads_passing_boxes_agree() {
    let (tx, rx) = std::sync::mpsc::channel::<Box<(u64, Vec<u64>)>>();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let tx = tx.clone();
            s.spawn(move || {
                for i in 0..50_000u64 {
                    tx.send(Box::new((t, vec![i; (i % 7) as usize]))).unwrap();
                }
            });
        }
        drop(tx);
        let consumer = s.spawn(move || {
            let mut per: [u64; 4] = [0; 4];
            for b in rx {
                per[b.0 as usize] += b.1.iter().sum::<u64>();
            }
            per
        });
        let per = consumer.join().unwrap();
        let expect: u64 = (0..50_000u64).map(|i| i * (i % 7)).sum();
        assert_eq!(per, [expect; 4]);
    });
}
