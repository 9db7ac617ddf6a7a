//! loom model of per-CPU rseq mode's take from another CPU (the `kmem` crate's
//! `heap::rseq_take::rseq_take` with `platform::rseq::fence`): the word a lock holder
//! takes, a sheaf's top or a CPU freelist, is one that restartable sequences on its
//! CPU read, then commit with one plain store. Every section refuses a 0 word and
//! none commits 0 (a freelist's last pop leaves the slab's end token, odd; a top is
//! its sheaf's address plus 8 an object). The taker, on another CPU:
//! 0. finds 0: that is the take (only the taker makes a 0 word anything else);
//! 1. else exchanges the word for 0, which sections starting from now on refuse;
//! 2. restarts whatever section that CPU runs (`membarrier`'s rseq command: an
//!    interrupt there);
//! 3. exchanges the word for 0 again: 0 means nothing was committed since step 1,
//!    and step 1's value is the take; any other value is what a section that read the
//!    word before step 1 committed before step 2, a whole step from that value, and
//!    is the take so far — but a section that began after that commit may have read
//!    it, so steps 2 and 3 run again until step 3 finds 0.
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
//! Checked: every object exactly once, held by the section's thread or taken. Two
//! variants that must fail show the model can tell: a take without the fence (a
//! plain exchange from another CPU), and a take that restarts the CPU once whatever
//! step 3 finds.

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

/// A section's commit, a plain store of the word.
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
    /// Steps 0–3.
    Fenced,
    /// A plain exchange from another CPU (wrong: what the fence replaces).
    Plain,
    /// Steps 1–3 once, whatever step 3 finds (wrong: a section that began after a
    /// commit over step 1's 0 may commit after step 3).
    Once,
}

/// The taker's take of `word` from another CPU.
fn take(cpu: &Cpu, word: &AtomicUsize, how: Take) -> usize {
    match how {
        Take::Fenced => {
            if word.load(Ordering::Acquire) == 0 {
                return 0;
            }
            let mut taken = word.swap(0, Ordering::AcqRel);
            if taken == 0 {
                return 0;
            }
            loop {
                cpu.interrupt();
                match word.swap(0, Ordering::AcqRel) {
                    0 => return taken,
                    v => taken = v,
                }
            }
        }
        Take::Plain => word.swap(0, Ordering::AcqRel),
        Take::Once => {
            let before = word.swap(0, Ordering::AcqRel);
            cpu.interrupt();
            match word.swap(0, Ordering::AcqRel) {
                0 => before,
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

/// A thread on the sheaf's CPU pops `pops` objects and pushes object 3 (its own),
/// while the taker takes the top from another CPU and then uses the sheaf: reads the
/// objects it took and refills the slot above them. With `retake`, the taker first
/// takes the top once more before: it installs back a sheaf that held objects, and
/// leaves 0 for an empty one (a flush that frees it), which the second take then
/// finds (step 0).
fn sheaf_model(how: Take, pops: usize, retake: bool) {
    let mut b = loom::model::Builder::new();
    // Two takes with their restarts against three sections ran past ten minutes
    // unbounded; bounded as `loom_sheaves`' rseq model.
    b.preemption_bound = retake.then_some(4);
    b.check(move || {
        let s = Arc::new(Sheaf::new());
        let on_cpu = {
            let s = s.clone();
            thread::spawn(move || {
                let mut held = vec![3];
                for _ in 0..pops {
                    held.extend(s.pop());
                }
                if s.push(3) {
                    held.retain(|&o| o != 3);
                }
                held
            })
        };
        if retake {
            let t = take(&s.cpu, &s.top, how);
            let back = if t > SHEAF { t } else { 0 };
            s.top.store(back, Ordering::Release);
        }
        let t = take(&s.cpu, &s.top, how);
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
    sheaf_model(Take::Fenced, 1, false);
}

/// The second take finds 0 where the first took an emptied sheaf.
#[test]
fn a_sheaf_top_taken_twice_loses_and_doubles_nothing() {
    sheaf_model(Take::Fenced, 2, true);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn a_sheaf_top_taken_by_a_plain_exchange_is_caught() {
    sheaf_model(Take::Plain, 1, false);
}

/// A pop commits over step 1's 0 before the restart; a push that begins after that
/// commit reads it, writes its slot, and commits after step 3: its slot write races
/// the taker's refill, and its object is on a sheaf the taker counted without it.
#[test]
#[should_panic(expected = "Causality violation")]
fn a_sheaf_top_taken_with_one_restart_is_caught() {
    sheaf_model(Take::Once, 1, false);
}

/// Objects on a freelist are even ids; a free pointer is a loom cell per object.
const OBJECTS: usize = 2;
/// The slab's end token: odd, so the pop refuses it, and in the slab, so the push
/// takes it (`KmemCacheCpu::freelist`).
const END: usize = 1;

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
    /// Object 2 alone on the list (its pop commits the end token); object 4 held.
    fn new() -> Self {
        Freelist {
            cpu: Cpu::new(),
            head: AtomicUsize::new(2),
            next: [UnsafeCell::new(END), UnsafeCell::new(END)],
        }
    }

    fn next_of(&self, obj: usize) -> usize {
        // SAFETY: loom checks this read is ordered after every write.
        self.next[slot(obj)].with(|p| unsafe { *p })
    }

    /// `rseq::pop`: read the head; 0 or odd (the end token) refuses; read its free
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

    /// `rseq::push`: read the head; 0 (no CPU slab) refuses, an object or the end
    /// token of this slab does not; write the object's free pointer; commit the head
    /// to it.
    fn push(&self, obj: usize) -> bool {
        loop {
            let g = self.cpu.arm();
            let Some(h) = self.cpu.step(g, || self.head.load(Ordering::Relaxed)) else {
                continue;
            };
            if h == 0 {
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

/// A thread on the freelist's CPU pops (the list's last object), or pushes object 4,
/// or both, while the taker takes the list from another CPU and walks it; with
/// `retake`, it first takes the list once more before: it installs back a list that
/// held objects, and leaves 0 for the end token alone (no CPU slab), which the second
/// take then finds (step 0).
fn freelist_model(how: Take, pop: bool, push: bool, retake: bool) {
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
                }
                if push && f.push(4) {
                    held.retain(|&o| o != 4);
                }
                held
            })
        };
        if retake {
            let t = take(&f.cpu, &f.head, how);
            let back = if t == END { 0 } else { t };
            f.head.store(back, Ordering::Release);
        }
        let mut o = take(&f.cpu, &f.head, how);
        let mut all = Vec::new();
        while o != 0 && o != END {
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
    freelist_model(Take::Fenced, true, false, false);
    freelist_model(Take::Fenced, false, true, false);
    freelist_model(Take::Fenced, true, true, false);
}

/// The second take finds 0 where the first took the end token alone.
#[test]
fn a_cpu_freelist_taken_twice_loses_and_doubles_nothing() {
    freelist_model(Take::Fenced, true, true, true);
}

#[test]
#[should_panic(expected = "each object once")]
fn a_cpu_freelist_taken_by_a_plain_exchange_is_caught() {
    freelist_model(Take::Plain, true, false, false);
}
