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
