//! loom models of the slab-state protocol: the one-word (freelist, inuse, frozen)
//! state of a slab, changed only by compare-and-swap, under concurrent remote frees,
//! the freezing CPU taking the freelist (`get_freelist`) and giving the slab back
//! (unfreeze), and the node list lock.
//!
//! The transitions are kmem-core's own (`SlabState::after_free`, `taken`,
//! `after_unfreeze`, `free_decision`), with the orderings `slab/state.rs` uses (state loaded
//! Relaxed, CAS AcqRel/Acquire); loom supplies the atomic word, the lock and the free
//! pointer words (as `UnsafeCell`s, so an unordered access to an object's link is a
//! reported race). Each model checks that no object is lost or found twice, that
//! `inuse` matches, and that a slab is discarded at most once, only when empty.

use kmem_core::slab::{free_decision, FreeDecision, SlabState, END_OFFSET};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

/// Objects per slab in the models.
const OBJECTS: usize = 3;

/// The offset of object `i` from the slab base (never the end token).
fn off(i: usize) -> u64 {
    16 * (i as u64 + 1)
}

fn index(off: u64) -> usize {
    (off / 16 - 1) as usize
}

/// What the node's list lock protects for this slab.
#[derive(Default)]
struct NodeList {
    on_partial: bool,
    discarded: bool,
}

struct Slab {
    state: AtomicU64,
    /// Each object's free pointer word: the offset of the next free object.
    link: [UnsafeCell<u64>; OBJECTS],
    list: Mutex<NodeList>,
    /// `min_partial`: empty slabs are discarded when the node holds this many.
    min_partial: usize,
}

impl Slab {
    fn new(state: SlabState, on_partial: bool) -> Self {
        Self {
            state: AtomicU64::new(state.bits()),
            link: [(); OBJECTS].map(|_| UnsafeCell::new(END_OFFSET)),
            list: Mutex::new(NodeList {
                on_partial,
                discarded: false,
            }),
            min_partial: 0,
        }
    }

    fn load(&self) -> SlabState {
        SlabState::from_bits(self.state.load(Ordering::Relaxed))
    }

    fn cas(&self, old: SlabState, new: SlabState) -> bool {
        self.state
            .compare_exchange(old.bits(), new.bits(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn set_link(&self, obj: usize, next: u64) {
        self.link[obj].with_mut(|p| {
            // SAFETY: loom's pointer to the cell; the object is the caller's, as in
            // `slab_free` (loom reports any access it does not order).
            unsafe { *p = next }
        });
    }

    fn get_link(&self, obj: usize) -> u64 {
        self.link[obj].with(|p| {
            // SAFETY: loom's pointer to the cell; the caller took the list holding
            // `obj` (loom reports any access it does not order).
            unsafe { *p }
        })
    }

    /// `__slab_free` of one object, as `Slub::slab_free` does it. Returns whether
    /// the freer froze the slab (it joins the freer's CPU partial list).
    fn free(&self, obj: usize, can_freeze: bool) -> bool {
        let mut lock = None;
        let (old, new, froze) = loop {
            let old = self.load();
            assert_ne!(old.offset(), off(obj), "double free in the model");
            self.set_link(obj, old.offset());
            let freeze = match free_decision(old, 1, can_freeze, lock.is_some()) {
                FreeDecision::Plain => false,
                FreeDecision::Freeze => true,
                FreeDecision::Lock => {
                    lock = Some(self.list.lock().unwrap());
                    continue;
                }
            };
            let new = old.after_free(off(obj), 1, freeze);
            if self.cas(old, new) {
                break (old, new, freeze);
            }
        };
        if old.frozen() || froze {
            return froze;
        }
        if let Some(mut list) = lock {
            assert!(!list.discarded, "a free into a discarded slab");
            if new.inuse() == 0 && self.min_partial == 0 {
                list.on_partial = false;
                list.discarded = true;
            } else if old.list_empty() {
                list.on_partial = true;
            }
        }
        false
    }

    /// `get_freelist`: the freezing CPU takes every free object.
    fn take(&self) -> Vec<usize> {
        let old = loop {
            let old = self.load();
            assert!(old.frozen(), "only the freezing CPU takes the freelist");
            if self.cas(old, SlabState::taken(OBJECTS as u64)) {
                break old;
            }
        };
        self.walk(old.offset())
    }

    /// Follows a freelist from `head` to the end token.
    fn walk(&self, mut head: u64) -> Vec<usize> {
        let mut out = Vec::new();
        while head != END_OFFSET {
            let i = index(head);
            assert!(!out.contains(&i), "object {i} twice on a freelist");
            out.push(i);
            head = self.get_link(i);
        }
        out
    }

    /// The freezing CPU gives the slab back with the objects it held free
    /// (`unfreeze_merge` + `deactivate_slab`'s list decision, under the lock).
    fn unfreeze(&self, held: &[usize]) {
        let mut list = self.list.lock().unwrap();
        for w in held.windows(2) {
            self.set_link(w[0], off(w[1]));
        }
        let new = loop {
            let old = self.load();
            assert!(old.frozen());
            let head = held.first().map(|&i| {
                self.set_link(*held.last().unwrap(), old.offset());
                off(i)
            });
            let new = old.after_unfreeze(head, held.len() as u64);
            if self.cas(old, new) {
                break new;
            }
        };
        if new.inuse() == 0 && self.min_partial == 0 {
            list.discarded = true;
        } else if !new.list_empty() {
            list.on_partial = true;
        }
    }

    /// After every thread: the free objects reachable from the state, and the list.
    fn check_end(&self, expect_inuse: u64) {
        let st = self.load();
        let list = self.list.lock().unwrap();
        assert!(!st.frozen(), "nobody holds the slab");
        assert_eq!(
            st.inuse(),
            expect_inuse,
            "inuse agrees with the objects out"
        );
        let free = self.walk(st.offset());
        assert_eq!(
            free.len() as u64 + st.inuse(),
            OBJECTS as u64,
            "no object lost"
        );
        if list.discarded {
            assert_eq!(st.inuse(), 0, "only an empty slab is discarded");
            assert!(!list.on_partial);
        } else if st.inuse() > 0 && !st.list_empty() {
            assert!(list.on_partial, "a partial slab is on the node list");
        }
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A CPU slab: its CPU took the freelist, handed objects 0 and 1 to two threads and
/// holds object 2. The two free remotely while the CPU takes the freelist again and
/// then deactivates the slab (unfreezes it with every object it holds).
#[test]
fn remote_frees_race_the_owner_taking_and_unfreezing() {
    model(|| {
        let slab = Arc::new(Slab::new(SlabState::taken(OBJECTS as u64), false));
        let remote: Vec<_> = (0..2)
            .map(|obj| {
                let slab = slab.clone();
                thread::spawn(move || {
                    let froze = slab.free(obj, false);
                    assert!(!froze, "a frozen slab is never frozen again");
                })
            })
            .collect();
        // The owner: refill from the slab's freelist (remote frees so far), then
        // give everything it holds back.
        let mut held = vec![2];
        held.extend(slab.take());
        slab.unfreeze(&held);
        for t in remote {
            t.join().unwrap();
        }
        slab.check_end(0);
    });
}

/// An unfrozen, full slab on no list: two threads free into it at once, one of
/// them able to freeze it onto its CPU partial list. Exactly the first free finds
/// it full; whoever froze it owns it and gives it back.
#[test]
fn frees_into_a_full_slab_freeze_it_once() {
    model(|| {
        let slab = Arc::new(Slab::new(SlabState::new(END_OFFSET, 3, false), false));
        let a = {
            let slab = slab.clone();
            thread::spawn(move || slab.free(0, true))
        };
        let b = {
            let slab = slab.clone();
            thread::spawn(move || slab.free(1, true))
        };
        let (fa, fb) = (a.join().unwrap(), b.join().unwrap());
        assert!(!(fa && fb), "only one freer freezes the slab");
        if fa || fb {
            // The freezer's CPU partial list gives it back later.
            slab.unfreeze(&[]);
        }
        slab.check_end(1);
    });
}

/// A partial slab on the node list with one object out and one free: two frees
/// race, the last one empties it and (min_partial 0) discards it under the lock;
/// the other must never see a discarded slab.
#[test]
fn the_last_free_discards_once() {
    model(|| {
        let slab = Arc::new(Slab::new(SlabState::new(off(2), 2, false), true));
        slab.set_link(2, END_OFFSET);
        let ts: Vec<_> = (0..2)
            .map(|obj| {
                let slab = slab.clone();
                thread::spawn(move || {
                    assert!(!slab.free(obj, false));
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        let list = slab.list.lock().unwrap();
        assert!(list.discarded, "the empty slab was discarded");
        assert!(!list.on_partial);
        assert_eq!(slab.load().inuse(), 0);
    });
}
