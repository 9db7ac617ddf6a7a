//! Model-based property test for kmalloc: random kmalloc / kfree / krealloc /
//! kmem_cache sequences, small and large sizes, with and without CPU areas, checked
//! against a model of the live allocations: no two overlap, contents survive until
//! freed (and through krealloc), and at the end, after frees and shrinking, every
//! page is back.

mod common;

use common::{config, kmem_with, pattern};
use kmem_core::{CpuRef, Gfp, SlabFlags};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
enum Op {
    Kmalloc {
        size: usize,
        cpu: Option<usize>,
    },
    Cache {
        cpu: Option<usize>,
    },
    Kfree {
        idx: usize,
        cpu: Option<usize>,
    },
    Krealloc {
        idx: usize,
        size: usize,
        cpu: Option<usize>,
    },
    Flush {
        cpu: usize,
    },
    Shrink,
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0usize..=256,
        3 => 257usize..=8192,
        1 => 8193usize..=300_000,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let cpu = prop::option::of(0usize..2);
    prop_oneof![
        6 => (size(), cpu.clone()).prop_map(|(size, cpu)| Op::Kmalloc { size, cpu }),
        2 => cpu.clone().prop_map(|cpu| Op::Cache { cpu }),
        5 => (any::<usize>(), cpu.clone()).prop_map(|(idx, cpu)| Op::Kfree { idx, cpu }),
        2 => (any::<usize>(), size(), cpu).prop_map(|(idx, size, cpu)| Op::Krealloc { idx, size, cpu }),
        1 => (0usize..2).prop_map(|cpu| Op::Flush { cpu }),
        1 => Just(Op::Shrink),
    ]
}

/// Writes a pattern over the first and last word (and a middle one) of `[p, p+len)`.
fn stamp(p: usize, len: usize) {
    if len >= 16 {
        // SAFETY: ours, at least 16 bytes: the two words do not overlap.
        unsafe {
            (p as *mut u64).write_unaligned(pattern(p));
            ((p + len - 8) as *mut u64).write_unaligned(pattern(p + len));
        }
    } else if len >= 8 {
        // SAFETY: ours, at least 8 bytes.
        unsafe { (p as *mut u64).write_unaligned(pattern(p)) };
    } else if len > 0 {
        // SAFETY: ours, `len` bytes.
        unsafe { (p as *mut u8).write(pattern(p) as u8) };
    }
}

fn check(p: usize, len: usize) {
    check_moved(p, len, p);
}

/// Checks the stamp made at `orig` on the `len` bytes now at `p` (moved by krealloc).
fn check_moved(p: usize, len: usize, orig: usize) {
    if len >= 16 {
        // SAFETY: ours, stamped.
        unsafe {
            assert_eq!(
                (p as *const u64).read_unaligned(),
                pattern(orig),
                "start of {p:#x} corrupted"
            );
            assert_eq!(
                ((p + len - 8) as *const u64).read_unaligned(),
                pattern(orig + len),
                "end of {p:#x} corrupted"
            );
        }
    } else if len >= 8 {
        // SAFETY: ours, stamped.
        let v = unsafe { (p as *const u64).read_unaligned() };
        assert_eq!(v, pattern(orig), "start of {p:#x} corrupted");
    } else if len > 0 {
        // SAFETY: ours.
        assert_eq!(unsafe { (p as *const u8).read() }, pattern(orig) as u8);
    }
}

/// Every hardening option and slub_debug check but T (its trace lines would be
/// reports) on every cache: the model must hold the same, with no report.
fn everything_on(_name: &str) -> SlabFlags {
    SlabFlags::RANDOM_FREELIST
        | SlabFlags::INIT_ON_ALLOC
        | SlabFlags::INIT_ON_FREE
        | SlabFlags::CONSISTENCY_CHECKS
        | SlabFlags::RED_ZONE
        | SlabFlags::POISON
        | SlabFlags::STORE_USER
}

fn run(ops: Vec<Op>) {
    run_with(ops, None);
}

fn run_with(ops: Vec<Op>, policy: Option<fn(&str) -> SlabFlags>) {
    let k = kmem_with(4, config(1, 0), policy);
    let areas: Vec<_> = (0..2).map(|_| k.pages.cpu_area_get(0).unwrap()).collect();
    // SAFETY: this thread owns both areas and uses one at a time.
    let cpus: Vec<CpuRef<'_>> = areas.iter().map(|a| unsafe { CpuRef::new(a) }).collect();
    let cpu_of = |c: Option<usize>| c.map(|i| cpus[i]);
    let cache = k
        .kmem_cache_create(None, "model-40", 40, 8, SlabFlags::empty(), None)
        .unwrap();
    for &c in &cpus {
        k.pages.drain_local_pages(c);
    }
    let free_at_start = k.pages.nr_free_pages();
    // Live allocations: address -> requested length.
    let mut live: BTreeMap<usize, usize> = BTreeMap::new();
    let add = |live: &mut BTreeMap<usize, usize>, p: usize, len: usize| {
        let span = len.max(1);
        if let Some((&a, &l)) = live.range(..=p).next_back() {
            assert!(a + l.max(1) <= p, "{p:#x} overlaps {a:#x}+{l}");
        }
        if let Some((&a, _)) = live.range(p..).next() {
            assert!(p + span <= a, "{p:#x}+{len} overlaps {a:#x}");
        }
        assert!(
            // SAFETY: the test's own live allocation (or null, or not the heap's).
            unsafe { k.ksize(p as *const u8) } >= len,
            "ksize below the request"
        );
        stamp(p, len);
        live.insert(p, len);
    };
    let trace = std::env::var_os("KMEM_MODEL_TRACE").is_some();
    for (step, op) in ops.into_iter().enumerate() {
        if trace {
            eprintln!("step {step}: {op:?} live={live:x?}");
        }
        match op {
            Op::Kmalloc { size, cpu } => {
                let p = k.kmalloc(cpu_of(cpu), size, Gfp::KERNEL).expect("memory");
                assert_eq!(p.as_ptr() as usize % 8, 0);
                add(&mut live, p.as_ptr() as usize, size);
            }
            Op::Cache { cpu } => {
                let p = k
                    .slub()
                    .alloc(cpu_of(cpu), cache, Gfp::KERNEL)
                    .expect("memory");
                add(&mut live, p.as_ptr() as usize, 40);
            }
            Op::Kfree { idx, cpu } => {
                if live.is_empty() {
                    continue;
                }
                let p = *live.keys().nth(idx % live.len()).unwrap();
                let len = live.remove(&p).unwrap();
                check(p, len);
                // SAFETY: ours; kfree frees kmem_cache objects too.
                unsafe { k.kfree(cpu_of(cpu), p as *mut u8) };
            }
            Op::Krealloc { idx, size, cpu } => {
                if live.is_empty() {
                    continue;
                }
                let p = *live.keys().nth(idx % live.len()).unwrap();
                let len = live[&p];
                // SAFETY: the test's own live allocation (or null, or not the heap's).
                if unsafe { k.ksize(p as *const u8) } == 40 && len == 40 {
                    continue; // a kmem_cache object: not for krealloc
                }
                check(p, len);
                live.remove(&p);
                // SAFETY: ours.
                let q = unsafe { k.krealloc(cpu_of(cpu), p as *mut u8, size, Gfp::KERNEL) }
                    .expect("memory");
                let q = q.as_ptr() as usize;
                // Growing keeps every byte: the old stamp is intact at the new place.
                if size >= len {
                    check_moved(q, len, p);
                }
                add(&mut live, q, size);
            }
            Op::Flush { cpu } => {
                k.caches()
                    .for_each(|s| k.slub().flush_cpu_cache(cpus[cpu], s));
            }
            Op::Shrink => {
                k.shrink_all(None);
            }
        }
        if std::env::var_os("KMEM_MODEL_PARANOID").is_some() {
            for (&p, &len) in &live {
                check(p, len);
            }
        }
    }
    for (p, len) in std::mem::take(&mut live) {
        check(p, len);
        // SAFETY: ours.
        unsafe { k.kfree(None, p as *mut u8) };
    }
    for &c in &cpus {
        k.caches().for_each(|s| k.slub().flush_cpu_cache(c, s));
    }
    k.shrink_all(None);
    for &c in &cpus {
        k.pages.drain_local_pages(c);
    }
    assert_eq!(k.pages.nr_free_pages(), free_at_start, "pages lost");
    assert!(
        k.pages.platform().take_log().is_empty(),
        "no reports for valid use"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn kmalloc_matches_the_model(ops in prop::collection::vec(op(), 1..400)) {
        run(ops);
    }

    #[test]
    fn kmalloc_matches_the_model_with_debug_and_random_freelists(
        ops in prop::collection::vec(op(), 1..300)
    ) {
        run_with(ops, Some(everything_on));
    }
}

/// A long mixed sequence (found by proptest while its checker had a bug), replayed
/// deterministically.
#[test]
fn replay_mixed_sequence() {
    use Op::*;
    run(vec![
        Kmalloc { size: 9, cpu: None },
        Kfree {
            idx: 9590775717777421503,
            cpu: None,
        },
        Shrink,
        Kmalloc {
            size: 32,
            cpu: Some(0),
        },
        Flush { cpu: 0 },
        Flush { cpu: 1 },
        Cache { cpu: None },
        Kfree {
            idx: 18391006461361594878,
            cpu: Some(0),
        },
        Kfree {
            idx: 16506729770659359565,
            cpu: None,
        },
        Kmalloc {
            size: 225,
            cpu: Some(0),
        },
        Kmalloc {
            size: 6567,
            cpu: None,
        },
        Krealloc {
            idx: 10062946621777588985,
            size: 213,
            cpu: Some(0),
        },
        Krealloc {
            idx: 7444282991059430685,
            size: 3973,
            cpu: None,
        },
        Kfree {
            idx: 11058473260088587070,
            cpu: Some(0),
        },
        Krealloc {
            idx: 17510997189370291703,
            size: 231,
            cpu: None,
        },
        Kfree {
            idx: 6521816341967810906,
            cpu: Some(0),
        },
        Kmalloc {
            size: 79297,
            cpu: None,
        },
        Kfree {
            idx: 9717902027086148392,
            cpu: None,
        },
        Cache { cpu: None },
        Kfree {
            idx: 16884199014569271505,
            cpu: Some(0),
        },
        Krealloc {
            idx: 9262274389146486417,
            size: 4597,
            cpu: None,
        },
        Kfree {
            idx: 2425910274010995466,
            cpu: None,
        },
        Flush { cpu: 1 },
        Kmalloc {
            size: 52992,
            cpu: None,
        },
        Cache { cpu: None },
        Cache { cpu: None },
        Shrink,
        Krealloc {
            idx: 13268706543945444875,
            size: 703,
            cpu: None,
        },
        Kfree {
            idx: 1105721187162188263,
            cpu: Some(0),
        },
        Kfree {
            idx: 14004637853221138478,
            cpu: Some(0),
        },
        Kmalloc {
            size: 4884,
            cpu: None,
        },
        Kmalloc {
            size: 208,
            cpu: Some(0),
        },
        Flush { cpu: 1 },
        Kmalloc {
            size: 5765,
            cpu: Some(0),
        },
        Kfree {
            idx: 13203112870003665106,
            cpu: Some(0),
        },
        Flush { cpu: 0 },
        Kmalloc {
            size: 90,
            cpu: Some(0),
        },
        Kmalloc {
            size: 2,
            cpu: Some(0),
        },
        Kfree {
            idx: 11015042014148170091,
            cpu: None,
        },
    ]);
}
