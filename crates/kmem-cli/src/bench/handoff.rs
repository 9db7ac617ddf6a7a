//! The queue the benches hand objects between threads through (`workloads` xmalloc,
//! `cache` and `percpu` cross_thread_free): bounded, first in first out, and waiting
//! by spinning, then yielding the CPU, never by sleeping in the kernel.
//!
//! Why not `std::sync::mpsc`: a thread that finds its channel empty (or, bounded,
//! full) sleeps on a futex and its peer wakes it with a system call. A batch of 64
//! objects passes in 2–4 µs on these machines, about the cost of one sleep and wake,
//! so the channel's wake-ups were most of what xmalloc measured, and how often a side
//! slept, not what an allocation cost, decided the figure (BENCHMARKS.md, "Handoffs
//! that do not sleep"). The original xmalloc-test blocks too, but once per batch of
//! 4,096 objects. Here a waiting thread polls an atomic count, spins a while, then
//! calls `sched_yield` between polls, and takes the items' lock only with `try_lock`,
//! so on a machine with a core for each side the handoff costs a few cache-line
//! transfers, and on a smaller one it still lets the other side run.
//!
//! The two sides of a handoff still ran at two speeds from run to run when the
//! scheduler let them share a CPU (every batch then waits for a `sched_yield` to
//! switch threads): [`spread`] pins each side to a CPU of its own where the process
//! may use as many CPUs as there are sides.
//!
//! A side takes a handle ([`Handoff::producer`], [`Handoff::consumer`]) whose drop,
//! on a panic too, tells the others: the queue ends when every producer's handle is
//! gone, and a consumer that panics closes it, so that nobody waits for good on a
//! side that is no longer there (the bench fails instead of spinning).
//!
//! Locking: the items sit in a `Mutex<VecDeque>`, taken (`try_lock`) only to move one
//! item, never to wait; `len` mirrors the deque's length (written under the lock) so
//! that a waiter polls it without taking the lock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

/// Spins of a waiter before it starts yielding between polls.
const SPINS: u32 = 256;

/// A bounded queue whose waiters poll instead of sleeping (see the module docs),
/// fed through [`Producer`] handles and drained through [`Consumer`] handles. It
/// ends when the handles of all of its `producers` are dropped: then a pop on an
/// empty queue answers `None`.
pub struct Handoff<T> {
    items: Mutex<VecDeque<T>>,
    /// The deque's length, written under the lock, read without it by waiters.
    len: AtomicUsize,
    cap: usize,
    /// Producers whose handle is not dropped yet (or not made yet).
    producers: AtomicUsize,
    /// A consumer panicked: pushes fail, pops answer `None`.
    closed: AtomicBool,
}

/// A producer's side of a [`Handoff`]; dropping it (at the end, or on a panic) is the
/// producer's last word.
pub struct Producer<'a, T>(&'a Handoff<T>);

/// A consumer's side of a [`Handoff`]; dropped on a panic, it closes the queue.
pub struct Consumer<'a, T>(&'a Handoff<T>);

impl<T> Handoff<T> {
    /// A queue of at most `cap` items (≥ 1) fed by `producers` producer handles.
    pub fn new(cap: usize, producers: usize) -> Self {
        assert!(cap > 0, "a handoff holds at least one item");
        Handoff {
            items: Mutex::new(VecDeque::with_capacity(cap)),
            len: AtomicUsize::new(0),
            cap,
            producers: AtomicUsize::new(producers),
            closed: AtomicBool::new(false),
        }
    }

    /// One of the `producers` the queue was made for.
    pub fn producer(&self) -> Producer<'_, T> {
        Producer(self)
    }

    /// A consumer.
    pub fn consumer(&self) -> Consumer<'_, T> {
        Consumer(self)
    }

    /// The items, if no other thread holds them now (a waiter polls again).
    fn try_items(&self) -> Option<MutexGuard<'_, VecDeque<T>>> {
        match self.items.try_lock() {
            Ok(q) => Some(q),
            Err(TryLockError::WouldBlock) => None,
            // Only a push or a pop holds the lock, and neither panics with it held
            // (the deque has room for `cap` items): the items are whole.
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        }
    }
}

impl<T> Producer<'_, T> {
    /// Appends `x`, waiting while the queue is full. Panics if a consumer panicked.
    pub fn push(&self, x: T) {
        let h = self.0;
        let mut x = Some(x);
        wait_until(|| {
            if h.closed.load(Ordering::Acquire) {
                return true;
            }
            if h.len.load(Ordering::Acquire) >= h.cap {
                return false;
            }
            let Some(mut q) = h.try_items() else {
                return false;
            };
            if q.len() >= h.cap {
                return false;
            }
            q.push_back(x.take().expect("pushed once"));
            h.len.store(q.len(), Ordering::Release);
            true
        });
        assert!(x.is_none(), "a consumer of the handoff panicked");
    }
}

impl<T> Drop for Producer<'_, T> {
    fn drop(&mut self) {
        let was = self.0.producers.fetch_sub(1, Ordering::Release);
        assert!(was > 0, "more producers than the handoff was made for");
    }
}

impl<T> Consumer<'_, T> {
    /// The oldest item, waiting while the queue is empty; `None` once it is empty and
    /// every producer's handle is dropped, or once a consumer panicked.
    pub fn pop(&self) -> Option<T> {
        let h = self.0;
        let mut out = None;
        wait_until(|| {
            // Read before the length: a producer's items are in before its handle
            // is dropped, so an empty queue seen after no producer is left stays
            // empty.
            let ended = h.producers.load(Ordering::Acquire) == 0;
            if h.closed.load(Ordering::Acquire) {
                return true;
            }
            if h.len.load(Ordering::Acquire) == 0 {
                return ended;
            }
            let Some(mut q) = h.try_items() else {
                return false;
            };
            out = q.pop_front();
            h.len.store(q.len(), Ordering::Release);
            out.is_some() || ended
        });
        out
    }
}

impl<T> Drop for Consumer<'_, T> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.closed.store(true, Ordering::Release);
        }
    }
}

/// Polls `ready` until it answers true: `SPINS` polls with a spin hint between them,
/// then a `sched_yield` between polls.
fn wait_until(mut ready: impl FnMut() -> bool) {
    let mut spins = 0u32;
    while !ready() {
        if spins < SPINS {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Side `k` of a handoff between `sides` threads: pins the calling thread to the
/// `k`-th CPU of those it may run on, when there are at least `sides` (≥ 2) of them,
/// so that the sides run on different CPUs; with fewer, the scheduler keeps
/// balancing them (several spinning sides pinned to one CPU would take turns only
/// at their yields). Does nothing where the CPUs cannot be read or set.
pub fn spread(k: usize, sides: usize) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a zeroed `cpu_set_t` is an empty set; both calls only read and
        // write the set passed, of the size passed, for the calling thread (0).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            if libc::sched_getaffinity(0, size, &mut set) != 0 {
                return;
            }
            let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect();
            if sides < 2 || cpus.len() < sides || k >= sides {
                return;
            }
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpus[k], &mut one);
            // A refusal (a policy that forbids it) leaves the thread where it was.
            let _ = libc::sched_setaffinity(0, size, &one);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (k, sides);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_out_in_order_and_the_end_is_seen_once_drained() {
        let q = Handoff::new(3, 1);
        let (tx, rx) = (q.producer(), q.consumer());
        tx.push(1);
        tx.push(2);
        drop(tx);
        assert_eq!(rx.pop(), Some(1));
        assert_eq!(rx.pop(), Some(2));
        assert_eq!(rx.pop(), None);
    }

    #[test]
    fn a_full_queue_holds_its_producer_until_a_consumer_takes() {
        let q = Handoff::new(2, 1);
        let taken = AtomicUsize::new(0);
        let pushed = AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let tx = q.producer();
                for i in 0..1000 {
                    tx.push(i);
                    pushed.store(i + 1, Ordering::Release);
                }
            });
            let rx = q.consumer();
            let mut next = 0;
            while let Some(i) = rx.pop() {
                assert_eq!(i, next, "first in, first out");
                next += 1;
                // The producer is never more than `cap` items and the one it is
                // pushing ahead of what was taken.
                assert!(pushed.load(Ordering::Acquire) <= next + 2);
                taken.store(next, Ordering::Release);
            }
            assert_eq!(next, 1000);
        });
    }

    #[test]
    fn a_panicking_producer_ends_the_queue_and_a_panicking_consumer_closes_it() {
        // A producer that panics half-way: the consumer still ends.
        let q = Handoff::new(4, 1);
        let got = std::thread::scope(|s| {
            let p = s.spawn(|| {
                let tx = q.producer();
                tx.push(1);
                panic!("producer fails");
            });
            let rx = q.consumer();
            let mut got = Vec::new();
            while let Some(x) = rx.pop() {
                got.push(x);
            }
            assert!(p.join().is_err());
            got
        });
        assert_eq!(got, [1]);
        // A consumer that panics: the producer waiting for room fails instead of
        // waiting for good.
        let q = Handoff::new(1, 1);
        std::thread::scope(|s| {
            let c = s.spawn(|| {
                let rx = q.consumer();
                let _ = rx.pop();
                panic!("consumer fails");
            });
            let tx = q.producer();
            let pushes = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                for i in 0..10 {
                    tx.push(i);
                }
            }));
            assert!(pushes.is_err(), "pushes after the consumer died must fail");
            assert!(c.join().is_err());
        });
    }

    /// The CPUs the calling thread may run on.
    fn allowed_cpus() -> Vec<usize> {
        // SAFETY: reads the calling thread's own affinity into a local set.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            assert_eq!(libc::sched_getaffinity(0, size, &mut set), 0);
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }

    /// Whether this thread may set its own affinity (a sandbox may refuse it).
    fn may_pin() -> bool {
        // SAFETY: reads the calling thread's affinity and sets it to what it was.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            libc::sched_getaffinity(0, size, &mut set) == 0
                && libc::sched_setaffinity(0, size, &set) == 0
        }
    }

    #[test]
    fn spread_pins_the_sides_to_different_cpus_where_there_are_enough() {
        let cpus_of = |k: usize, sides: usize| {
            std::thread::spawn(move || {
                spread(k, sides);
                allowed_cpus()
            })
            .join()
            .unwrap()
        };
        let before = allowed_cpus();
        let (a, b) = (cpus_of(0, 2), cpus_of(1, 2));
        if before.len() >= 2 && may_pin() {
            assert_eq!((a.len(), b.len()), (1, 1), "each side on one CPU");
            assert_ne!(a, b, "the two sides on different CPUs");
            assert!(before.contains(&a[0]) && before.contains(&b[0]));
        } else {
            assert_eq!((&a, &b), (&before, &before), "nothing to spread");
        }
        // More sides than CPUs: nobody is pinned.
        let many = before.len() + 1;
        assert_eq!(cpus_of(0, many), before);
        assert_eq!(
            allowed_cpus(),
            before,
            "the caller's own affinity is left alone"
        );
    }

    #[test]
    fn many_producers_and_consumers_pass_every_item_once() {
        let q = Handoff::new(4, 3);
        let seen: Mutex<Vec<u32>> = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for p in 0..3u32 {
                let q = &q;
                s.spawn(move || {
                    let tx = q.producer();
                    for i in 0..500 {
                        tx.push(p * 1000 + i);
                    }
                });
            }
            for _ in 0..2 {
                s.spawn(|| {
                    let rx = q.consumer();
                    while let Some(x) = rx.pop() {
                        seen.lock().unwrap().push(x);
                    }
                });
            }
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        let want: Vec<u32> = (0..3)
            .flat_map(|p| (0..500).map(move |i| p * 1000 + i))
            .collect();
        assert_eq!(seen, want);
    }
}
