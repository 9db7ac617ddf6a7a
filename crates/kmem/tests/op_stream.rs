//! An interpreter of arbitrary byte streams as allocator operations (the fuzz target
//! of the reliability battery, driven by proptest): alloc / free / realloc through
//! `GlobalAlloc` with sizes from 1 byte to 8 MiB and alignments up to 4 KiB, kmalloc /
//! kfree, and frees handed to another thread — with slub_debug's F, Z and P on every
//! cache. Every object carries a pattern checked before it goes; at the end nothing
//! was reported (`bad_page` stays 0) and `validate()` finds nothing.
//! (Own process: KMEM_DEBUG is read once.) `KMEM_STRESS_SECS` runs more cases.

mod common;

use common::{ends, fill, verify, verify_moved};
use kmem::{heap, Gfp, KmemAlloc};
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;

/// A live allocation: address, layout, and whether it came from kmalloc.
#[derive(Clone, Copy)]
struct Live {
    p: usize,
    layout: Layout,
    kmalloc: bool,
}

fn stamp(l: &Live) {
    let n = l.layout.size();
    // SAFETY: `l` is a live allocation of `n` bytes.
    unsafe { fill(l.p as *mut u8, n, ends(n)) };
}

fn check(l: &Live) {
    let n = l.layout.size();
    // SAFETY: as in `stamp`.
    unsafe { verify(l.p as *const u8, n, ends(n)) };
}

fn release(l: Live) {
    check(&l);
    if l.kmalloc {
        // SAFETY: from kmalloc, freed once.
        unsafe { heap().kfree(l.p as *mut u8) };
    } else {
        // SAFETY: from KmemAlloc with this layout, freed once.
        unsafe { KmemAlloc.dealloc(l.p as *mut u8, l.layout) };
    }
}

/// Reads the stream: one op byte, then its arguments.
fn interpret(bytes: &[u8]) {
    let (tx, rx) = mpsc::channel::<Live>();
    let remote = std::thread::spawn(move || {
        for l in rx {
            release(l);
        }
    });
    let mut live: Vec<Live> = Vec::new();
    let mut it = bytes.iter().copied();
    let mut next = || it.next();
    while let Some(op) = next() {
        let a = next().unwrap_or(0) as usize;
        let b = next().unwrap_or(0) as usize;
        let size = match op >> 5 {
            0 => 1 + a,
            1..=4 => 1 + (a << 4 | b),
            5 | 6 => 1 + (a << 8 | b),
            _ => 1 + (a << 15 | b << 7),
        };
        match op % 6 {
            0 | 1 => {
                let align = 1 << (b % 13);
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero size.
                let p = unsafe { KmemAlloc.alloc(layout) };
                assert!(!p.is_null(), "out of memory at {size} bytes");
                assert_eq!(p as usize % align, 0, "alignment {align}");
                let l = Live {
                    p: p as usize,
                    layout,
                    kmalloc: false,
                };
                stamp(&l);
                live.push(l);
            }
            2 => {
                // kmalloc serves up to 4 MiB (KMALLOC_MAX_SIZE); beyond, None.
                let size = size.min(4 << 20);
                let p = heap().kmalloc(size, Gfp::KERNEL).expect("memory");
                let l = Live {
                    p: p.as_ptr() as usize,
                    layout: Layout::from_size_align(size, 1).unwrap(),
                    kmalloc: true,
                };
                stamp(&l);
                live.push(l);
            }
            3 if !live.is_empty() => release(live.swap_remove(a % live.len())),
            4 if !live.is_empty() => {
                let i = a % live.len();
                if live[i].kmalloc {
                    continue;
                }
                let l = live.swap_remove(i);
                check(&l);
                let keep = l.layout.size().min(size);
                // SAFETY: from KmemAlloc with this layout; non-zero new size.
                let q = unsafe { KmemAlloc.realloc(l.p as *mut u8, l.layout, size) };
                assert!(!q.is_null(), "out of memory at {size} bytes");
                // The bytes that fit moved along: the old stamp where it was copied.
                let n = l.layout.size();
                // SAFETY: `q` holds at least `keep` bytes.
                unsafe { verify_moved(l.p, n, q, keep, ends(n)) };
                let n = Live {
                    p: q as usize,
                    layout: Layout::from_size_align(size, l.layout.align()).unwrap(),
                    kmalloc: false,
                };
                stamp(&n);
                live.push(n);
            }
            5 if !live.is_empty() => {
                let l = live.swap_remove(a % live.len());
                tx.send(l).expect("remote thread alive");
            }
            _ => {}
        }
    }
    for l in live {
        release(l);
    }
    drop(tx);
    remote.join().expect("remote frees");
}

fn cases() -> u32 {
    if common::stressing() {
        5_000
    } else {
        64
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn byte_streams_never_corrupt_the_heap(bytes in prop::collection::vec(any::<u8>(), 0..1500)) {
        std::env::set_var("KMEM_DEBUG", "FZP");
        interpret(&bytes);
        prop_assert_eq!(common::vmstat("bad_page"), 0);
        prop_assert!(heap().validate().is_empty());
    }
}

/// slub_debug really is on for the stream (so the checks above mean something).
#[test]
fn debug_checks_are_on() {
    std::env::set_var("KMEM_DEBUG", "FZP");
    let c = heap()
        .kmem()
        .kmalloc_cache(64, Gfp::KERNEL)
        .expect("kmalloc-64");
    assert!(c.config().is_debug());
}
