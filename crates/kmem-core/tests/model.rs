//! Model-based property test: random operation sequences against the page allocator,
//! checked against a reference model (the set of live blocks).
//!
//! Checked after every step: a new block is aligned to its order, lies on the node the
//! allocator says, overlaps no live block, and reads back the pattern written into it
//! until it is freed. At the end everything is freed and drained, and the counters must
//! show every page back.

mod common;

use common::{allocator, config, pattern};
use kmem_core::{CpuRef, Gfp, Page, PAGE_SIZE};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::ptr::NonNull;

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        order: usize,
        node: Option<usize>,
        cpu: Option<usize>,
    },
    Free {
        idx: usize,
        cpu: Option<usize>,
    },
    BulkAlloc {
        n: usize,
        cpu: Option<usize>,
    },
    BulkFree {
        n: usize,
        cpu: Option<usize>,
    },
    Drain {
        cpu: usize,
    },
    Report,
}

fn op() -> impl Strategy<Value = Op> {
    let cpu = prop::option::of(0usize..3);
    prop_oneof![
        5 => (0usize..=6, prop::option::of(0usize..2), cpu.clone())
            .prop_map(|(order, node, cpu)| Op::Alloc { order, node, cpu }),
        4 => (any::<usize>(), cpu.clone()).prop_map(|(idx, cpu)| Op::Free { idx, cpu }),
        1 => (1usize..100, cpu.clone()).prop_map(|(n, cpu)| Op::BulkAlloc { n, cpu }),
        1 => (1usize..100, cpu).prop_map(|(n, cpu)| Op::BulkFree { n, cpu }),
        1 => (0usize..3).prop_map(|cpu| Op::Drain { cpu }),
        1 => Just(Op::Report),
    ]
}

fn run(ops: Vec<Op>, max_pages: usize) {
    let pa = allocator(4, config(2, max_pages));
    let areas: Vec<_> = (0..3).map(|i| pa.cpu_area_get(i % 2).unwrap()).collect();
    // SAFETY: this thread owns all three areas and uses them one at a time.
    let cpus: Vec<CpuRef<'_>> = areas.iter().map(|a| unsafe { CpuRef::new(a) }).collect();
    let cpu_of = |c: Option<usize>| c.map(|i| cpus[i]);
    // Live blocks: address -> (order, page).
    let mut live: BTreeMap<usize, (usize, NonNull<Page>)> = BTreeMap::new();
    let add =
        |live: &mut BTreeMap<usize, (usize, NonNull<Page>)>, page: NonNull<Page>, order: usize| {
            let addr = pa.page_address(page).as_ptr() as usize;
            let len = PAGE_SIZE << order;
            assert_eq!(
                pa.page_to_pfn(page) % (1 << order),
                0,
                "misaligned order-{order} block"
            );
            if let Some((&prev, &(po, _))) = live.range(..=addr).next_back() {
                assert!(
                    prev + (PAGE_SIZE << po) <= addr,
                    "overlaps the block at {prev:#x}"
                );
            }
            if let Some((&next, _)) = live.range(addr..).next() {
                assert!(addr + len <= next, "overlaps the block at {next:#x}");
            }
            // SAFETY: the block is ours.
            unsafe {
                *(addr as *mut u64) = pattern(addr);
                *((addr + len - 8) as *mut u64) = pattern(addr + 1);
            }
            live.insert(addr, (order, page));
        };
    let check = |addr: usize, order: usize| {
        // SAFETY: a live block of ours.
        unsafe {
            assert_eq!(*(addr as *const u64), pattern(addr));
            assert_eq!(
                *((addr + (PAGE_SIZE << order) - 8) as *const u64),
                pattern(addr + 1)
            );
        }
    };
    for op in ops {
        match op {
            Op::Alloc { order, node, cpu } => {
                let gfp = Gfp::NOWARN;
                if let Some(page) = pa.alloc_pages_node(cpu_of(cpu), gfp, order, node) {
                    add(&mut live, page, order);
                }
            }
            Op::Free { idx, cpu } => {
                if live.is_empty() {
                    continue;
                }
                let addr = *live.keys().nth(idx % live.len()).unwrap();
                let (order, page) = live.remove(&addr).unwrap();
                check(addr, order);
                // SAFETY: allocated with this order, removed from the model.
                unsafe { pa.free_pages(cpu_of(cpu), page, order) };
            }
            Op::BulkAlloc { n, cpu } => {
                let mut arr = vec![None; n];
                let got = pa.alloc_pages_bulk(cpu_of(cpu), Gfp::NOWARN, None, &mut arr);
                assert_eq!(got, arr.iter().filter(|p| p.is_some()).count());
                for p in arr.into_iter().flatten() {
                    add(&mut live, p, 0);
                }
            }
            Op::BulkFree { n, cpu } => {
                let addrs: Vec<usize> = live
                    .iter()
                    .filter(|(_, &(o, _))| o == 0)
                    .map(|(&a, _)| a)
                    .take(n)
                    .collect();
                let mut arr: Vec<Option<NonNull<Page>>> = Vec::new();
                for a in addrs {
                    check(a, 0);
                    arr.push(Some(live.remove(&a).unwrap().1));
                }
                // SAFETY: order-0 blocks removed from the model.
                unsafe { pa.free_pages_bulk(cpu_of(cpu), &mut arr) };
            }
            Op::Drain { cpu } => pa.drain_local_pages(cpus[cpu]),
            Op::Report => {
                pa.platform().advance(5_000_000_000);
                pa.report_free_pages();
            }
        }
        if max_pages != 0 {
            assert!(pa.nr_managed_pages() <= max_pages);
        }
    }
    for (addr, (order, page)) in std::mem::take(&mut live) {
        check(addr, order);
        // SAFETY: live block, freed once.
        unsafe { pa.free_pages(None, page, order) };
    }
    for area in &areas {
        // SAFETY: owned by this thread; not used afterwards.
        unsafe { pa.cpu_area_put(area) };
    }
    let area_pages = pa.cpu_areas().nr_areas() << kmem_core::percpu::CPU_AREA_ORDER;
    assert_eq!(pa.nr_allocated_pages(), area_pages, "pages lost");
    assert_eq!(pa.nr_free_pages() + area_pages, pa.nr_managed_pages());
    let blocks: usize = (0..2)
        .map(|nid| {
            pa.free_area_counts(nid)
                .iter()
                .enumerate()
                .map(|(o, n)| n << o)
                .sum::<usize>()
        })
        .sum();
    assert_eq!(
        blocks,
        pa.nr_free_pages(),
        "free lists and NR_FREE_PAGES disagree"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn page_allocator_matches_the_model(ops in prop::collection::vec(op(), 1..300)) {
        run(ops, 0);
    }

    #[test]
    fn bounded_page_allocator_matches_the_model(ops in prop::collection::vec(op(), 1..300)) {
        run(ops, 3000);
    }
}
