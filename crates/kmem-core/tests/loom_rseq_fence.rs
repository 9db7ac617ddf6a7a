//! loom model of per-CPU rseq mode's take from another CPU (the `kmem` crate's
//! `heap::percpu::rseq_take` with `platform::rseq::fence`): the word a lock holder
//! takes, a sheaf's top or a CPU freelist, is one that restartable sequences on its
//! CPU read, then commit with one plain store. The taker, on another CPU:
//! 1. exchanges the word for the *fence* value, which every section refuses and none
//!    commits ([`TOP_FENCE`], [`FREELIST_FENCE`]);
//! 2. restarts whatever section that CPU runs (`membarrier`'s rseq command: an
//!    interrupt there);
//! 3. exchanges the word for the fence again: the fence means nothing was committed
//!    since step 1, and step 1's value is the take; any other value is what a section
//!    that read the word before step 1 committed before step 2, a whole step from
//!    that value, and is the take so far — but a section that began after that
//!    commit may have read it, so steps 2 and 3 run again until step 3 finds the
//!    fence; then the word becomes 0.
//!
//! The CPU is modelled as a lock that each instruction of a section holds while it
//! runs, and that the interrupt holds too: the interrupt falls between two
//! instructions, and a section that it interrupted starts over (its arm reads the
//! CPU's count of interrupts; each instruction first checks it has not changed, as
//! the kernel checks the instruction pointer against the section on its way back to
//! user space). The lock also carries the barriers `membarrier` makes on both CPUs.
//! Objects' slots and free pointers are loom cells, so a section's read or write that
//! is not ordered before the taker's use of the sheaf or list is a reported race.
//!
//! Checked: every object exactly once, held by the section's thread or taken. Three
//! variants that must fail show the model can tell: a take without the fence (a
//! plain exchange from another CPU), a take that restarts the CPU once whatever
//! step 3 finds, and a freelist fenced with 0, which a pop of the last object also
//! commits.

use kmem_core::slab::{FREELIST_FENCE, TOP_FENCE};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

/// One CPU as its sections and an interrupt see it.
struct Cpu {
    /// Held by each instruction of a section and by the interrupt.
    running: Mutex<()>,
    /// Interrupts so far: a section armed at another count starts over.
    interrupts: AtomicUsize,
}

impl Cpu {
    fn new() -> Self {
        Cpu {
            running: Mutex::new(()),
            interrupts: AtomicUsize::new(0),
        }
    }

    /// A section's start: the count its instructions check.
    fn arm(&self) -> usize {
        let _on = self.running.lock().unwrap();
        self.interrupts.load(Ordering::Relaxed)
    }

    /// One instruction of a section armed at `armed`: `f`, unless an interrupt came
    /// since (`None`: start over).
    fn step<R>(&self, armed: usize, f: impl FnOnce() -> R) -> Option<R> {
        let _on = self.running.lock().unwrap();
        (self.interrupts.load(Ordering::Relaxed) == armed).then(f)
    }

    /// `membarrier`'s rseq restart on this CPU.
    fn interrupt(&self) {
        let _on = self.running.lock().unwrap();
        self.interrupts.fetch_add(1, Ordering::Relaxed);
    }
}

/// A section's commit, a plain store of the word (and the taker's last store of 0).
/// Modelled as an exchange whose result is dropped: loom 0.7 lets a plain store
/// squeeze between the read and the write of another thread's exchange
/// (tokio-rs/loom#254), which no machine does and which would fail this model's
/// takes for no fault of theirs. An exchange here is a store placed in the
/// modification order where it runs; the interleavings loom tries place it
/// anywhere a store buffer could.
fn commit(word: &AtomicUsize, v: usize) {
    word.swap(v, Ordering::Relaxed);
}

/// How the taker takes.
#[derive(Clone, Copy)]
enum Take {
    /// Steps 1–3 with this fence value.
    Fenced(usize),
    /// A plain exchange from another CPU (wrong: what the fence replaces).
    Plain,
    /// Steps 1–3 once, whatever step 3 finds (wrong: a section that began after a
    /// commit over the fence may commit after step 3).
    Once(usize),
}

/// The taker's take of `word` from another CPU.
fn take(cpu: &Cpu, word: &AtomicUsize, how: Take) -> usize {
    match how {
        Take::Fenced(fence) => {
            let mut taken = word.swap(fence, Ordering::AcqRel);
            if taken == fence || taken == 0 {
                commit(word, 0);
                return 0;
            }
            loop {
                cpu.interrupt();
                match word.swap(fence, Ordering::AcqRel) {
                    v if v == fence => break,
                    v => taken = v,
                }
            }
            commit(word, 0);
            taken
        }
        Take::Plain => word.swap(0, Ordering::AcqRel),
        Take::Once(fence) => {
            let before = word.swap(fence, Ordering::AcqRel);
            cpu.interrupt();
            match word.swap(0, Ordering::AcqRel) {
                v if v == fence => before,
                v => v,
            }
        }
    }
}

const CAP: usize = 3;
/// The model sheaf's address (a top is `SHEAF + 8 * count`).
const SHEAF: usize = 1 << 12;

/// A sheaf: its top and its slots.
struct Sheaf {
    cpu: Cpu,
    top: AtomicUsize,
    slots: [UnsafeCell<usize>; CAP],
}

impl Sheaf {
    /// Holding objects 1 and 2.
    fn new() -> Self {
        Sheaf {
            cpu: Cpu::new(),
            top: AtomicUsize::new(SHEAF + 16),
            slots: [UnsafeCell::new(1), UnsafeCell::new(2), UnsafeCell::new(0)],
        }
    }

    fn get(&self, i: usize) -> usize {
        // SAFETY: loom checks this read is ordered after every write.
        self.slots[i].with(|p| unsafe { *p })
    }

    fn set(&self, i: usize, v: usize) {
        // SAFETY: loom checks no other access races with this write.
        self.slots[i].with_mut(|p| unsafe { *p = v });
    }

    /// `rseq::sheaf_pop_at`: read the top; a top at or below the sheaf's address
    /// (empty, or taken: 0) refuses; read the slot below it; commit the top less 8.
    fn pop(&self) -> Option<usize> {
        loop {
            let g = self.cpu.arm();
            let Some(t) = self.cpu.step(g, || self.top.load(Ordering::Relaxed)) else {
                continue;
            };
            if t <= SHEAF {
                return None;
            }
            let Some(obj) = self.cpu.step(g, || self.get((t - SHEAF) / 8 - 1)) else {
                continue;
            };
            if self.cpu.step(g, || commit(&self.top, t - 8)).is_some() {
                return Some(obj);
            }
        }
    }

    /// `rseq::sheaf_push_at`: read the top; 0 (taken) or a full sheaf refuses; write
    /// the slot at the top; commit the top plus 8.
    fn push(&self, obj: usize) -> bool {
        loop {
            let g = self.cpu.arm();
            let Some(t) = self.cpu.step(g, || self.top.load(Ordering::Relaxed)) else {
                continue;
            };
            if t == 0 || t >= SHEAF + 8 * CAP {
                return false;
            }
            if self
                .cpu
                .step(g, || self.set((t - SHEAF) / 8, obj))
                .is_none()
            {
                continue;
            }
            if self.cpu.step(g, || commit(&self.top, t + 8)).is_some() {
                return true;
            }
        }
    }
}

/// A thread on the sheaf's CPU pops one object and pushes object 3 (its own), while
/// the taker takes the top from another CPU and then uses the sheaf: reads the
/// objects it took and refills the slot above them. With `retake`, the taker then
/// installs the top it took and takes it again (a second flush, and a top that may be
/// 0 by then).
fn sheaf_model(how: Take) {
    sheaf_model_with(how, false);
}

fn sheaf_model_with(how: Take, retake: bool) {
    let mut b = loom::model::Builder::new();
    // The two takes and their restarts with the two sections ran past ten minutes
    // unbounded; bounded as `loom_sheaves`' rseq model.
    b.preemption_bound = retake.then_some(4);
    b.check(move || {
        let s = Arc::new(Sheaf::new());
        let on_cpu = {
            let s = s.clone();
            thread::spawn(move || {
                let mut held = vec![3];
                held.extend(s.pop());
                if s.push(3) {
                    held.retain(|&o| o != 3);
                }
                held
            })
        };
        let mut t = take(&s.cpu, &s.top, how);
        if retake {
            s.top.store(t, Ordering::Release);
            t = take(&s.cpu, &s.top, how);
        }
        let n = t.saturating_sub(SHEAF) / 8;
        let mut all: Vec<usize> = (0..n).map(|i| s.get(i)).collect();
        if n < CAP {
            s.set(n, 99);
        }
        all.extend(on_cpu.join().unwrap());
        all.sort_unstable();
        assert_eq!(all, [1, 2, 3], "each object once: taken or held");
    });
}

#[test]
fn a_sheaf_top_taken_through_the_fence_loses_and_doubles_nothing() {
    sheaf_model(Take::Fenced(TOP_FENCE));
}

/// The second take finds 0 where the first took an empty sheaf's top or nothing.
#[test]
fn a_sheaf_top_taken_twice_loses_and_doubles_nothing() {
    sheaf_model_with(Take::Fenced(TOP_FENCE), true);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_sheaf_top_taken_by_a_plain_exchange_is_caught() {
    sheaf_model(Take::Plain);
}

/// A pop commits over the fence before the restart; a push that begins after that
/// commit reads it, writes its slot, and commits after step 3: its slot write races
/// the taker's refill, and its object is on a sheaf the taker counted without it.
#[test]
#[should_panic(expected = "Causality violation")]
fn a_sheaf_top_taken_with_one_restart_is_caught() {
    sheaf_model(Take::Once(TOP_FENCE));
}

/// Objects on a freelist are even ids; a free pointer is a loom cell per object.
const OBJECTS: usize = 2;

/// A CPU freelist (the CPU-slab design): its word and the objects' free pointers.
struct Freelist {
    cpu: Cpu,
    head: AtomicUsize,
    next: [UnsafeCell<usize>; OBJECTS],
}

fn slot(obj: usize) -> usize {
    obj / 2 - 1
}

impl Freelist {
    /// Object 2 alone on the list (its pop commits 0); object 4 held.
    fn new() -> Self {
        Freelist {
            cpu: Cpu::new(),
            head: AtomicUsize::new(2),
            next: [UnsafeCell::new(0), UnsafeCell::new(0)],
        }
    }

    fn next_of(&self, obj: usize) -> usize {
        // SAFETY: loom checks this read is ordered after every write.
        self.next[slot(obj)].with(|p| unsafe { *p })
    }

    /// `rseq::pop`: read the head; 0 or odd (the fence) refuses; read its free
    /// pointer; commit the head to it.
    fn pop(&self) -> Option<usize> {
        loop {
            let g = self.cpu.arm();
            let Some(h) = self.cpu.step(g, || self.head.load(Ordering::Relaxed)) else {
                continue;
            };
            if h == 0 || h & 1 != 0 {
                return None;
            }
            let Some(n) = self.cpu.step(g, || self.next_of(h)) else {
                continue;
            };
            if self.cpu.step(g, || commit(&self.head, n)).is_some() {
                return Some(h);
            }
        }
    }

    /// `rseq::push`: read the head; 0 or one outside the slab (the fence, 1, is in
    /// none) refuses; write the object's free pointer; commit the head to it.
    fn push(&self, obj: usize) -> bool {
        loop {
            let g = self.cpu.arm();
            let Some(h) = self.cpu.step(g, || self.head.load(Ordering::Relaxed)) else {
                continue;
            };
            if h == 0 || h & 1 != 0 {
                return false;
            }
            let write = || {
                // SAFETY: loom checks no other access races with this write.
                self.next[slot(obj)].with_mut(|p| unsafe { *p = h })
            };
            if self.cpu.step(g, write).is_none() {
                continue;
            }
            if self.cpu.step(g, || commit(&self.head, obj)).is_some() {
                return true;
            }
        }
    }
}

/// A thread on the freelist's CPU pops (the list's last object) or pushes object 4,
/// while the taker takes the list from another CPU and walks it; with `retake`, it
/// first takes and puts back what it took, as a flush that found the list and a
/// second one (the first pop of the last object leaves 0, which the second take
/// finds with no fence).
fn freelist_model(how: Take, pop: bool) {
    freelist_model_with(how, pop, false);
}

fn freelist_model_with(how: Take, pop: bool, retake: bool) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = retake.then_some(4);
    b.check(move || {
        let f = Arc::new(Freelist::new());
        let on_cpu = {
            let f = f.clone();
            thread::spawn(move || {
                let mut held = vec![4];
                if pop {
                    held.extend(f.pop());
                } else if f.push(4) {
                    held.clear();
                }
                held
            })
        };
        if retake {
            let t = take(&f.cpu, &f.head, how);
            f.head.store(t, Ordering::Release);
        }
        let mut o = take(&f.cpu, &f.head, how);
        let mut all = Vec::new();
        while o != 0 {
            assert!(all.len() < OBJECTS, "a cycle");
            all.push(o);
            o = f.next_of(o);
        }
        all.extend(on_cpu.join().unwrap());
        all.sort_unstable();
        assert_eq!(all, [2, 4], "each object once: taken or held");
    });
}

#[test]
fn a_cpu_freelist_taken_through_the_fence_loses_and_doubles_nothing() {
    freelist_model(Take::Fenced(FREELIST_FENCE), true);
    freelist_model(Take::Fenced(FREELIST_FENCE), false);
}

#[test]
fn a_cpu_freelist_taken_twice_loses_and_doubles_nothing() {
    freelist_model_with(Take::Fenced(FREELIST_FENCE), true, true);
    freelist_model_with(Take::Fenced(FREELIST_FENCE), false, true);
}

/// 0 as a freelist's fence: a pop of the last object commits 0 too, so the taker
/// cannot tell it from no commit, and takes the object the pop handed out.
#[test]
#[should_panic(expected = "each object once")]
fn a_cpu_freelist_fenced_with_0_is_caught() {
    freelist_model(Take::Fenced(0), true);
}
