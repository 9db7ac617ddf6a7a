//! `KmemCache<T>`: typed objects, constructors, drop, bulk, threads.

use kmem::{KBox, KmemCache};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Debug, PartialEq)]
struct Point {
    x: u64,
    y: u64,
    name: String,
}

static DROPS: AtomicUsize = AtomicUsize::new(0);

struct Counted(#[allow(dead_code)] u64);
impl Drop for Counted {
    fn drop(&mut self) {
        DROPS.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn values_live_in_their_cache_and_drop_with_their_box() {
    let cache: KmemCache<Point> = KmemCache::new("point").unwrap();
    let mut a = cache
        .alloc(Point {
            x: 1,
            y: 2,
            name: "a".into(),
        })
        .unwrap();
    let b = cache
        .alloc(Point {
            x: 3,
            y: 4,
            name: "b".into(),
        })
        .unwrap();
    a.x += 10;
    assert_eq!(
        *a,
        Point {
            x: 11,
            y: 2,
            name: "a".into()
        }
    );
    assert_eq!(b.name, "b");
    assert_eq!(std::mem::align_of_val(&*a), 8);
    assert_eq!(
        &*a as *const Point as usize % std::mem::align_of::<Point>(),
        0
    );
    drop(a);
    drop(b);
    let dropped = KmemCache::<Counted>::new("counted").unwrap();
    let boxes: Vec<KBox<'_, Counted>> = (0..100)
        .map(|i| dropped.alloc(Counted(i)).unwrap())
        .collect();
    let before = DROPS.load(Ordering::Relaxed);
    drop(boxes);
    assert_eq!(
        DROPS.load(Ordering::Relaxed) - before,
        100,
        "every value dropped once"
    );
}

#[test]
fn constructed_objects_keep_their_state() {
    static BUILT: AtomicUsize = AtomicUsize::new(0);
    fn build() -> [u32; 16] {
        BUILT.fetch_add(1, Ordering::Relaxed);
        [7; 16]
    }
    let cache = KmemCache::with_constructor("ctor-array", build).unwrap();
    let per_slab = cache.raw().config().objects;
    let mut o = cache.alloc_constructed().unwrap();
    assert_eq!(*o, [7; 16], "as the constructor built it");
    // A sheaf may be refilled from more than one new slab.
    let built = BUILT.load(Ordering::Relaxed);
    assert!(
        built >= per_slab && built.is_multiple_of(per_slab),
        "once per object of each new slab: {built} built, {per_slab} per slab"
    );
    o[0] = 99;
    let addr = &*o as *const [u32; 16] as usize;
    drop(o);
    // The same object comes back with the state its last user left; the others as
    // their constructor built them. Frees wait in the spare sheaf until the main one
    // runs out and the spare holds an eighth of a sheaf (a swap moves no fewer), so a
    // sheaf's worth of objects is allocated and freed beside it first.
    let cap = cache.raw().config().sheaf_capacity;
    let batch: Vec<_> = (0..cap)
        .map(|_| cache.alloc_constructed().unwrap())
        .collect();
    for b in &batch {
        assert_ne!(&**b as *const [u32; 16] as usize, addr, "not yet");
        assert_eq!(**b, [7; 16]);
    }
    drop(batch);
    let mut others = Vec::new();
    let again = loop {
        let b = cache.alloc_constructed().unwrap();
        if &*b as *const [u32; 16] as usize == addr {
            break b;
        }
        assert_eq!(*b, [7; 16]);
        others.push(b);
        assert!(others.len() < 1000, "the object did not come back");
    };
    assert_eq!(again[0], 99);
    drop(others);
    drop(again);
    let plain = KmemCache::<u64>::new("plain-u64").unwrap();
    assert!(
        plain.alloc_constructed().is_none(),
        "only constructed caches"
    );
}

#[test]
fn bulk_paths() {
    let cache: KmemCache<[u8; 100]> = KmemCache::new("bulk-100").unwrap();
    let values: Vec<[u8; 100]> = (0..300).map(|i| [i as u8; 100]).collect();
    let boxes = cache.alloc_bulk(values).unwrap();
    assert_eq!(boxes.len(), 300);
    for (i, b) in boxes.iter().enumerate() {
        assert!(b.iter().all(|&x| x == i as u8));
    }
    let mut addrs: Vec<usize> = boxes.iter().map(|b| &**b as *const _ as usize).collect();
    addrs.sort();
    addrs.dedup();
    assert_eq!(addrs.len(), 300);
    cache.free_bulk(boxes);
    cache.shrink();
}

#[test]
fn shared_between_threads() {
    let cache: Arc<KmemCache<Vec<u64>>> = Arc::new(KmemCache::new("vecs").unwrap());
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let cache = &cache;
                s.spawn(move || {
                    let mut sum = 0;
                    let mut keep = Vec::new();
                    for i in 0..2000u64 {
                        let b = cache.alloc(vec![t, i]).unwrap();
                        sum += b[1];
                        if i % 2 == 0 {
                            keep.push(b);
                        }
                    }
                    sum
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(total, 4 * (0..2000u64).sum::<u64>());
    // Boxes made on one thread, dropped on another.
    let moved: Vec<KBox<'_, Vec<u64>>> = (0..100).map(|i| cache.alloc(vec![i]).unwrap()).collect();
    std::thread::scope(|s| {
        s.spawn(move || drop(moved));
    });
}

#[test]
fn too_large_types_are_refused() {
    // Up to a quarter of the largest buddy block (1 MiB) a slab holds several.
    assert!(KmemCache::<[u8; 20_000]>::new("medium-type").is_some());
    assert!(KmemCache::<[u8; (1 << 20) + 8]>::new("huge-type").is_none());
}
