//! loom models of the lockless per-CPU fast paths (`slab/lockless.rs` and `slab/cpu.rs`: `pop_lockless`,
//! `push_lockless`, `take_freelist`, `install_freelist`; the lockless fast path of
//! "slub: Fastpath optimization (especially for RT)").
//!
//! A CPU's `(freelist, tid)` pair is read word by word (tid first, Acquire) and
//! changed only by a double-word compare-and-swap; here the CAS is a critical section
//! of a loom lock that compares and stores both words, which is what `cmpxchg16b`
//! guarantees. Object free pointers are loom atomics read and written as the real
//! code does (a pop may read the link of an object another context has just taken:
//! a stale value that the CAS must then reject). The contexts model what per-CPU
//! mode runs at once on one CPU's pair: lockless pops and pushes of threads that read
//! the CPU id before being preempted or migrated (so they may act on a CPU they no
//! longer run on), and the area's lock holder taking the freelist and installing a
//! new one. Each model checks that every object ends up exactly once: held by a
//! context, on the CPU freelist, or back in its slab.

use kmem_core::slab::TID_STEP;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

/// The end token (odd; objects are even "addresses").
const END: usize = 1;
const OBJECTS: usize = 4;

fn obj(i: usize) -> usize {
    2 * (i + 1)
}

fn index(o: usize) -> usize {
    o / 2 - 1
}

struct Cpu {
    freelist: AtomicUsize,
    tid: AtomicUsize,
    /// Makes the compare-and-swap of both words one atomic step.
    dcas: Mutex<()>,
    /// Free pointer of each object.
    next: Vec<AtomicUsize>,
    /// Objects given back to their slab by the lock holder.
    slab: Mutex<Vec<usize>>,
}

impl Cpu {
    /// A CPU freelist of objects `0..n` (in order), the rest held elsewhere.
    fn new(n: usize) -> Self {
        let next: Vec<AtomicUsize> = (0..OBJECTS)
            .map(|i| AtomicUsize::new(if i + 1 < n { obj(i + 1) } else { END }))
            .collect();
        Cpu {
            freelist: AtomicUsize::new(if n > 0 { obj(0) } else { END }),
            tid: AtomicUsize::new(0),
            dcas: Mutex::new(()),
            next,
            slab: Mutex::new(Vec::new()),
        }
    }

    fn cas_pair(&self, old: (usize, usize), new: (usize, usize)) -> bool {
        let _g = self.dcas.lock().unwrap();
        if self.freelist.load(Ordering::Relaxed) == old.0
            && self.tid.load(Ordering::Relaxed) == old.1
        {
            self.freelist.store(new.0, Ordering::Release);
            self.tid.store(new.1, Ordering::Release);
            true
        } else {
            false
        }
    }

    /// `pop_lockless`, with a bounded number of tries (loom explores the retries).
    fn pop(&self) -> Option<usize> {
        for _ in 0..3 {
            let tid = self.tid.load(Ordering::Acquire);
            let o = self.freelist.load(Ordering::Acquire);
            if o & 1 != 0 || o == 0 {
                return None;
            }
            let next = self.next[index(o)].load(Ordering::Relaxed);
            if self.cas_pair((o, tid), (next, tid.wrapping_add(TID_STEP))) {
                return Some(o);
            }
        }
        None
    }

    /// `push_lockless` of an object the caller owns; false if the CPU freelist is
    /// gone (taken: the object then goes back to its slab, as `__slab_free` would).
    fn push(&self, o: usize) -> bool {
        loop {
            let tid = self.tid.load(Ordering::Acquire);
            let cur = self.freelist.load(Ordering::Acquire);
            if cur == 0 {
                return false;
            }
            assert_ne!(cur, o, "a double free at the head");
            self.next[index(o)].store(cur, Ordering::Relaxed);
            if self.cas_pair((cur, tid), (o, tid.wrapping_add(TID_STEP))) {
                return true;
            }
        }
    }

    /// `take_freelist`.
    fn take(&self) -> usize {
        loop {
            let tid = self.tid.load(Ordering::Acquire);
            let v = self.freelist.load(Ordering::Acquire);
            if v == 0 {
                return 0;
            }
            if self.cas_pair((v, tid), (0, tid.wrapping_add(TID_STEP))) {
                return v;
            }
        }
    }

    /// `install_freelist` (the caller took it: it is 0).
    fn install(&self, v: usize) {
        loop {
            let tid = self.tid.load(Ordering::Acquire);
            assert_eq!(self.freelist.load(Ordering::Relaxed), 0);
            if self.cas_pair((0, tid), (v, tid.wrapping_add(TID_STEP))) {
                return;
            }
        }
    }

    /// The objects on a list that the caller owns.
    fn walk(&self, mut v: usize) -> Vec<usize> {
        let mut out = Vec::new();
        while v != 0 && v & 1 == 0 {
            out.push(v);
            v = self.next[index(v)].load(Ordering::Relaxed);
            assert!(out.len() <= OBJECTS, "a cycle in a freelist");
        }
        out
    }

    /// Every object exactly once between `held`, the CPU freelist and the slab.
    fn check(&self, held: &[usize]) {
        let mut all: Vec<usize> = held.to_vec();
        all.extend(self.walk(self.freelist.load(Ordering::Acquire)));
        all.extend(self.slab.lock().unwrap().iter().copied());
        all.sort_unstable();
        let want: Vec<usize> = (0..OBJECTS).map(obj).collect();
        assert_eq!(all, want, "objects lost or found twice");
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Two lockless contexts allocate and free on the same CPU freelist at once (one of
/// them may have migrated away after reading the CPU id: same thing for the pair).
#[test]
fn two_lockless_contexts_pop_and_push() {
    model(|| {
        let cpu = Arc::new(Cpu::new(3));
        // Object 3 is held by the second context, which frees it.
        let c2 = {
            let cpu = cpu.clone();
            thread::spawn(move || {
                let mut held = vec![obj(3)];
                let got = cpu.pop();
                held.extend(got);
                let o = held.remove(0);
                assert!(cpu.push(o));
                held
            })
        };
        let mut held: Vec<usize> = cpu.pop().into_iter().collect();
        if let Some(o) = held.pop() {
            assert!(cpu.push(o));
        }
        held.extend(c2.join().unwrap());
        cpu.check(&held);
    });
}

/// A lockless pop and a lockless (remote-CPU) free race the lock holder, which takes
/// the freelist (deactivating the CPU slab: its objects back to the slab) and then
/// installs a new list made of what the slab had.
#[test]
fn lockless_paths_race_the_lock_holders_take_and_install() {
    model(|| {
        let cpu = Arc::new(Cpu::new(2));
        let popper = {
            let cpu = cpu.clone();
            thread::spawn(move || cpu.pop().into_iter().collect::<Vec<_>>())
        };
        let freer = {
            let cpu = cpu.clone();
            thread::spawn(move || {
                // Objects 2 and 3 are this context's; it frees object 2.
                let o = obj(2);
                if !cpu.push(o) {
                    cpu.slab.lock().unwrap().push(o);
                }
                vec![obj(3)]
            })
        };
        // The lock holder: take (deactivate: back to the slab), then refill.
        let took = cpu.take();
        let list = cpu.walk(took);
        cpu.slab.lock().unwrap().extend(list);
        let mut slab = cpu.slab.lock().unwrap();
        let refill: Vec<usize> = slab.drain(..).collect();
        drop(slab);
        let mut head = END;
        for &o in refill.iter().rev() {
            cpu.next[index(o)].store(head, Ordering::Relaxed);
            head = o;
        }
        cpu.install(head);
        let mut held = popper.join().unwrap();
        held.extend(freer.join().unwrap());
        cpu.check(&held);
    });
}

/// The tid retry: a pop reads `(obj, tid)`, another context pops `obj` and pushes it
/// back (the freelist holds `obj` again, with another successor): the first pop's
/// CAS must fail on the moved tid, not hand out `obj` with a stale successor.
#[test]
fn an_aba_on_the_freelist_is_caught_by_the_tid() {
    model(|| {
        let cpu = Arc::new(Cpu::new(2));
        let other = {
            let cpu = cpu.clone();
            thread::spawn(move || {
                // Pop twice, push the first back: head is obj 0 again, successor END.
                let a = cpu.pop();
                let b = cpu.pop();
                let mut held: Vec<usize> = b.into_iter().collect();
                if let Some(a) = a {
                    assert!(cpu.push(a));
                }
                held.extend(cpu.pop());
                held
            })
        };
        let mut held: Vec<usize> = cpu.pop().into_iter().collect();
        held.extend(other.join().unwrap());
        // Objects 2 and 3 were never on this CPU's list.
        held.extend([obj(2), obj(3)]);
        cpu.check(&held);
    });
}
