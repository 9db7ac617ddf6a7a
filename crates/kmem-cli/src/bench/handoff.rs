//! The queue the benches hand objects between threads through (`workloads` xmalloc,
//! `cache` and `percpu` cross_thread_free): bounded, first in first out, and waiting
//! by spinning, then yielding the CPU, never by sleeping in the kernel.
//!
//! Why not `std::sync::mpsc`: a thread that finds its channel empty (or, bounded,
//! full) sleeps on a futex and its peer wakes it with a system call. A batch of 64
//! objects passes in 2–4 µs on these machines, about the cost of one sleep and wake,
//! so the channel's wake-ups were most of what xmalloc measured, and the faster an
//! allocator made its half, the more often its side went to sleep: the same build
//! read 0.2x or 0.8x mimalloc's time from one run to the next (BENCHMARKS.md,
//! "Handoffs that do not sleep"). Here a waiting thread polls an atomic count, spins a
//! while, then calls `sched_yield` between polls, so on a machine with a core for
//! each side the handoff costs a few cache-line transfers, and on a smaller one it
//! still lets the other side run.
//!
//! The two sides of a handoff still ran at two speeds from run to run when the
//! scheduler let them share a CPU (every batch then waits for a `sched_yield` to
//! switch threads): [`spread`] pins each side to a CPU of its own where the process
//! may use two.
//!
//! Locking: the items sit in a `Mutex<VecDeque>`, taken only to move one item, never
//! to wait; `len` mirrors the deque's length (written under the lock) so that a
//! waiter polls it without taking the lock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Spins of a waiter before it starts yielding between polls.
const SPINS: u32 = 256;

/// A bounded queue whose waiters poll instead of sleeping (see the module docs).
/// It ends when every one of its `producers` has called [`Handoff::done`]: then
/// [`Handoff::pop`] on an empty queue answers `None`.
pub struct Handoff<T> {
    items: Mutex<VecDeque<T>>,
    /// The deque's length, written under the lock, read without it by waiters.
    len: AtomicUsize,
    cap: usize,
    /// Producers that have not called `done` yet.
    producers: AtomicUsize,
}

impl<T> Handoff<T> {
    /// A queue of at most `cap` items (≥ 1) fed by `producers` threads.
    pub fn new(cap: usize, producers: usize) -> Self {
        assert!(cap > 0, "a handoff holds at least one item");
        Handoff {
            items: Mutex::new(VecDeque::with_capacity(cap)),
            len: AtomicUsize::new(0),
            cap,
            producers: AtomicUsize::new(producers),
        }
    }

    /// Appends `x`, waiting while the queue is full.
    pub fn push(&self, x: T) {
        let mut x = Some(x);
        wait_until(|| {
            if self.len.load(Ordering::Acquire) >= self.cap {
                return false;
            }
            let mut q = self.items.lock().expect("handoff lock");
            if q.len() >= self.cap {
                return false;
            }
            q.push_back(x.take().expect("pushed once"));
            self.len.store(q.len(), Ordering::Release);
            true
        });
    }

    /// The oldest item, waiting while the queue is empty; `None` once it is empty and
    /// every producer is done.
    pub fn pop(&self) -> Option<T> {
        let mut out = None;
        wait_until(|| {
            // Read before the length: a producer's items are in before its `done`,
            // so an empty queue seen after no producer is left stays empty.
            let ended = self.producers.load(Ordering::Acquire) == 0;
            if self.len.load(Ordering::Acquire) == 0 {
                return ended;
            }
            let mut q = self.items.lock().expect("handoff lock");
            out = q.pop_front();
            self.len.store(q.len(), Ordering::Release);
            out.is_some() || ended
        });
        out
    }

    /// A producer's last call: it pushes nothing more.
    pub fn done(&self) {
        let was = self.producers.fetch_sub(1, Ordering::Release);
        assert!(was > 0, "more producers done than the queue was made for");
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

/// Pins the calling thread to the `k`-th CPU (counted round) of those it may run on,
/// when there are at least two: the sides of a handoff, given different `k`, then run
/// on different CPUs. Does nothing where the CPUs cannot be read or set.
pub fn spread(k: usize) {
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
            if cpus.len() < 2 {
                return;
            }
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpus[k % cpus.len()], &mut one);
            // A refusal (a policy that forbids it) leaves the thread where it was.
            let _ = libc::sched_setaffinity(0, size, &one);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = k;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_out_in_order_and_the_end_is_seen_once_drained() {
        let q = Handoff::new(3, 1);
        q.push(1);
        q.push(2);
        q.done();
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn a_full_queue_holds_its_producer_until_a_consumer_takes() {
        let q = Handoff::new(2, 1);
        let taken = AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..1000 {
                    q.push(i);
                    // Never more than `cap` ahead of the consumer.
                    assert!(i + 1 - taken.load(Ordering::Acquire) <= 2 + 1);
                }
                q.done();
            });
            let mut next = 0;
            while let Some(i) = q.pop() {
                assert_eq!(i, next, "first in, first out");
                next += 1;
                taken.store(next, Ordering::Release);
            }
            assert_eq!(next, 1000);
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

    #[test]
    fn spread_pins_two_sides_to_different_cpus_where_there_are_two() {
        let cpus_of = |k: usize| {
            std::thread::spawn(move || {
                spread(k);
                allowed_cpus()
            })
            .join()
            .unwrap()
        };
        let before = allowed_cpus();
        let (a, b) = (cpus_of(0), cpus_of(1));
        if before.len() >= 2 {
            assert_eq!((a.len(), b.len()), (1, 1), "each side on one CPU");
            assert_ne!(a, b, "the two sides on different CPUs");
            assert!(before.contains(&a[0]) && before.contains(&b[0]));
        } else {
            assert_eq!(
                (a, b),
                (before.clone(), before.clone()),
                "one CPU: nothing to spread"
            );
        }
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
                    for i in 0..500 {
                        q.push(p * 1000 + i);
                    }
                    q.done();
                });
            }
            for _ in 0..2 {
                s.spawn(|| {
                    while let Some(x) = q.pop() {
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
