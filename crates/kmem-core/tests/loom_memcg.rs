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

    /// `note_sole_objcg`, as in memcontrol/slab_hooks.rs.
    fn note_sole(&self, objcg: usize) {
        let cur = self.sole.load(Ordering::Relaxed);
        if cur == objcg || cur == MIXED {
            return;
        }
        if cur == NONE {
            match self
                .sole
                .compare_exchange(NONE, objcg, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) if now == objcg || now == MIXED => return,
                Err(_) => {}
            }
        }
        self.sole.store(MIXED, Ordering::Relaxed);
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
