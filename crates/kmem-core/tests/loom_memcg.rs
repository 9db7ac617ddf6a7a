//! loom model of freeing a removed memory cgroup (`memcontrol/group.rs`: the zombie sweep's
//! `objcg_try_kill` against a CPU stock that uncharges the group's last object).
//!
//! A removed group's objcg is referenced by the stocks that cache it; it is freed
//! once unreferenced with nothing charged through it: `nr_pages` pages charged and
//! `nr_charged_bytes` of them spare. The sweeper claims it by a CAS of `refcnt` from
//! 0 to DEAD (Acquire), checks the counts and that nobody took a reference meanwhile,
//! (counts read Acquire) and frees it — or gives the claim back. A stock freeing the
//! last object takes a reference (`get`), takes the spare bytes back, adds the
//! object's, uncharges the whole page (count updates AcqRel) and drops its reference
//! (`put`, Release). Without the final reference check, or with Relaxed counts, the
//! model finds the objcg freed under the stock. The model checks the objcg is
//! never freed while the stock may still touch it, and is freed if the sweep comes
//! after the stock is done.

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

const PAGE: usize = 4096;
const DEAD: usize = 1 << 30;
const OBJECT: usize = 100;

struct Objcg {
    refcnt: AtomicUsize,
    nr_pages: AtomicUsize,
    nr_charged_bytes: AtomicUsize,
    freed: AtomicBool,
}

impl Objcg {
    fn touch(&self) {
        assert!(!self.freed.load(Ordering::SeqCst), "used after being freed");
    }

    /// `objcg_try_kill`, as in memcontrol/group.rs.
    fn try_kill(&self) -> bool {
        if self
            .refcnt
            .compare_exchange(0, DEAD, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        let pages = self.nr_pages.load(Ordering::Acquire);
        let spare = self.nr_charged_bytes.load(Ordering::Acquire);
        if pages * PAGE == spare && self.refcnt.load(Ordering::Acquire) == DEAD {
            self.freed.store(true, Ordering::SeqCst);
            return true;
        }
        self.refcnt.fetch_sub(DEAD, Ordering::Relaxed);
        false
    }

    /// A stock uncharging the last object: switch to the objcg (get, take the spare
    /// bytes), refill, drain (uncharge the page), put.
    fn free_last_object(&self) {
        self.touch();
        self.refcnt.fetch_add(1, Ordering::Relaxed);
        self.touch();
        let mut bytes = self.nr_charged_bytes.swap(0, Ordering::AcqRel);
        bytes += OBJECT;
        self.touch();
        let pages = bytes / PAGE;
        self.nr_pages.fetch_sub(pages, Ordering::AcqRel);
        let rem = bytes % PAGE;
        if rem != 0 {
            self.nr_charged_bytes.fetch_add(rem, Ordering::AcqRel);
        }
        self.touch();
        self.refcnt.fetch_sub(1, Ordering::Release);
    }
}

#[test]
fn a_zombie_is_freed_only_when_nobody_can_touch_it() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        // One live object: one page charged, the rest of it spare in the objcg.
        let objcg = Arc::new(Objcg {
            refcnt: AtomicUsize::new(0),
            nr_pages: AtomicUsize::new(1),
            nr_charged_bytes: AtomicUsize::new(PAGE - OBJECT),
            freed: AtomicBool::new(false),
        });
        let stock = {
            let objcg = objcg.clone();
            thread::spawn(move || objcg.free_last_object())
        };
        let early = objcg.try_kill();
        stock.join().unwrap();
        // Swept again once the stock is done: it must go now.
        let late = early || objcg.try_kill();
        assert!(late, "an empty, unreferenced zombie is freed");
    });
}

// ---------------------------------------------------------------------------
// The trusted slab of a charged take-in (`memcontrol/intake.rs`,
// `memcontrol/slab_hooks.rs`: `note_sole_objcg`; `slab/alloc.rs`: `note_uncharged`).
//
// A slab's sole-objcg word (on its head page, `Page::memcg_sole`) moves from none to
// the first objcg's id charged to MIXED; an uncharged handout sets the slab's
// SLAB_UNCHARGED flag. (Both start over only while no object of the slab is in use:
// `Slab::start_charges_over`, outside this model.) Each object reaches the take-in's
// thread through the program's own synchronisation (here a Release/Acquire flag),
// after its allocation. The take-in, finding the word equal to its tag and the flag
// clear, reads no slot: the model checks that the slot of every object it received
// then names the tag. Without the MIXED store (a second group's charge leaving the
// word alone), or with the flag left out, the model finds a slot that does not.

const NONE: usize = 0;
const MIXED: usize = 1;

/// `note_sole_objcg`, as in memcontrol/slab_hooks.rs.
fn note_sole(sole: &AtomicUsize, objcg: usize) {
    let cur = sole.load(Ordering::Relaxed);
    if cur == objcg || cur == MIXED {
        return;
    }
    if cur == NONE {
        match sole.compare_exchange(NONE, objcg, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) if now == objcg || now == MIXED => return,
            Err(_) => {}
        }
    }
    sole.store(MIXED, Ordering::Relaxed);
}

struct SoleSlab {
    sole: AtomicUsize,
    uncharged: AtomicBool,
    slots: [AtomicUsize; 3],
    handed: [AtomicBool; 3],
}

impl SoleSlab {
    fn new() -> Self {
        Self {
            sole: AtomicUsize::new(NONE),
            uncharged: AtomicBool::new(false),
            slots: std::array::from_fn(|_| AtomicUsize::new(NONE)),
            handed: std::array::from_fn(|_| AtomicBool::new(false)),
        }
    }

    fn note_sole(&self, objcg: usize) {
        note_sole(&self.sole, objcg);
    }

    /// A charged allocation of object `i` to `objcg` (`memcg_slab_post_alloc_hook`),
    /// then the object handed to the program.
    fn charge(&self, i: usize, objcg: usize) {
        self.note_sole(objcg);
        self.slots[i].store(objcg, Ordering::Relaxed);
        self.handed[i].store(true, Ordering::Release);
    }

    /// An uncharged allocation of object `i` (`Slub::note_uncharged`), then handed out.
    fn hand_out_uncharged(&self, i: usize) {
        if !self.uncharged.load(Ordering::Relaxed) {
            self.uncharged.store(true, Ordering::Relaxed);
        }
        self.handed[i].store(true, Ordering::Release);
    }

    /// The take-in of a thread charged to `tag`, for every object handed to it so far.
    fn take_in(&self, tag: usize) {
        for i in 0..3 {
            if !self.handed[i].load(Ordering::Acquire) {
                continue;
            }
            // The slab lookup (`Memcg::inbox_vector`), then the object.
            let trusted =
                self.sole.load(Ordering::Relaxed) == tag && !self.uncharged.load(Ordering::Relaxed);
            if trusted {
                assert_eq!(
                    self.slots[i].load(Ordering::Relaxed),
                    tag,
                    "a trusted slab's object is charged to the tag"
                );
            }
        }
    }
}

#[test]
fn a_trusted_slab_holds_only_objects_charged_to_its_tag() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let slab = Arc::new(SoleSlab::new());
        // Group 2 and group 3 charge an object each; object 2 goes out uncharged.
        let threads: Vec<_> = [(0, Some(2)), (1, Some(3)), (2, None)]
            .into_iter()
            .map(|(i, objcg)| {
                let slab = slab.clone();
                thread::spawn(move || match objcg {
                    Some(g) => slab.charge(i, g),
                    None => slab.hand_out_uncharged(i),
                })
            })
            .collect();
        // Group 2's thread takes in whatever reached it, before and after.
        slab.take_in(2);
        for t in threads {
            t.join().unwrap();
        }
        slab.take_in(2);
        assert_eq!(slab.sole.load(Ordering::Relaxed), MIXED);
    });
}

// ---------------------------------------------------------------------------
// The start-over of a slab's sole-objcg word (`slab/refill.rs`: `take_from_node`,
// `slab/state.rs`: `Slab::start_charges_over`).
//
// A refill takes a partial slab's free objects with a CAS on its state (here its
// count of objects in use) and resets the word only when that CAS saw none in use;
// an object in a take-in's inbox counts as in use. Object 0 was charged to group 3
// in the slab's current life; object 1 is free. One thread gives object 0 up: the
// regular free (the slot cleared, then the count down, a release), or an inline free
// onto group 2's inbox (still in use). A refill for group 2 takes object 1, charges
// it and passes it to the program, which frees it onto the same inbox. The take-in
// (group 2's thread) trusts the slab only if the word names group 2: the model checks
// that every inbox object of a trusted slab is charged to group 2. With the word
// reset at every refill, the model finds object 0 trusted.

struct LifeSlab {
    in_use: AtomicUsize,
    sole: AtomicUsize,
    slots: [AtomicUsize; 2],
    inbox: [AtomicBool; 2],
}

impl LifeSlab {
    fn new() -> Self {
        // Object 0 charged to group 3 (before the threads start: its allocation).
        Self {
            in_use: AtomicUsize::new(1),
            sole: AtomicUsize::new(3),
            slots: [AtomicUsize::new(3), AtomicUsize::new(NONE)],
            inbox: std::array::from_fn(|_| AtomicBool::new(false)),
        }
    }

    /// The refill for group 2 (`take_from_node`): object 1 taken with a CAS on the
    /// count, the word reset if the CAS saw nothing in use; then the charge
    /// (`memcg_slab_post_alloc_hook`), and the program's inline free of it.
    fn refill_and_charge(&self) {
        let mut old = self.in_use.load(Ordering::Acquire);
        loop {
            match self
                .in_use
                .compare_exchange(old, old + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => old = now,
            }
        }
        if old == 0 {
            self.sole.store(NONE, Ordering::Relaxed);
        }
        note_sole(&self.sole, 2);
        self.slots[1].store(2, Ordering::Relaxed);
        self.inbox[1].store(true, Ordering::Release);
    }

    /// Object 0 given up: the regular free, or the inline free onto the inbox.
    fn give_up_object_0(&self, regular: bool) {
        if regular {
            self.slots[0].store(NONE, Ordering::Relaxed);
            self.in_use.fetch_sub(1, Ordering::AcqRel);
        } else {
            self.inbox[0].store(true, Ordering::Release);
        }
    }

    /// Group 2's take-in of what reached its inbox.
    fn take_in(&self) {
        for i in 0..2 {
            if !self.inbox[i].load(Ordering::Acquire) {
                continue;
            }
            if self.sole.load(Ordering::Relaxed) == 2 {
                assert_eq!(
                    self.slots[i].load(Ordering::Relaxed),
                    2,
                    "a trusted slab's inbox object is charged to the tag"
                );
            }
        }
    }
}

#[test]
fn a_sole_objcg_word_starts_over_only_with_nothing_in_use() {
    for regular in [false, true] {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let slab = Arc::new(LifeSlab::new());
            let giver = {
                let slab = slab.clone();
                thread::spawn(move || slab.give_up_object_0(regular))
            };
            let refill = {
                let slab = slab.clone();
                thread::spawn(move || slab.refill_and_charge())
            };
            slab.take_in();
            giver.join().unwrap();
            refill.join().unwrap();
            slab.take_in();
        });
    }
}
