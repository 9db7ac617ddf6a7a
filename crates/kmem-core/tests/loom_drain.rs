//! loom model of the per-CPU page list drain request (`page/pcp.rs`, `percpu.rs`).
//!
//! Only a CPU area's owner touches its per-CPU lists; anybody may ask it to drain
//! them by setting `DRAIN_PAGES` in the area's `drain_request` word (`request_all`,
//! `fetch_or`, Relaxed). The owner looks at the word on its calls: a free that finds
//! the bit set, and the slow path, drain (`drain_local_pages`: clear the bit first,
//! then give every page back to the zone under its lock). The model runs the owner
//! (freeing pages to its list and checking the word as those paths do) against a
//! thread that asks for a drain, with loom's atomics, lock and cells; the per-CPU
//! list is a `UnsafeCell` so any access from another thread would be a reported race.
//! It checks that no page is lost or doubled and that a request made before the
//! owner's next check is never lost.

use kmem_core::percpu::DRAIN_PAGES;
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

struct Area {
    drain_request: AtomicU32,
    /// The owner's per-CPU list (pages by number).
    pcp: UnsafeCell<Vec<u32>>,
}

struct Model {
    area: Area,
    /// The zone's free lists.
    zone: Mutex<Vec<u32>>,
    /// Set (SeqCst) by the requester once its request is made: lets the owner tell
    /// that the request came before its next check.
    asked: AtomicBool,
}

impl Model {
    /// `drain_local_pages`: clear the request, then give the list back.
    fn drain_local(&self) {
        self.area
            .drain_request
            .fetch_and(!DRAIN_PAGES, Ordering::Relaxed);
        let pages = self.area.pcp.with_mut(|p| {
            // SAFETY: loom's pointer; only the owner calls this.
            std::mem::take(unsafe { &mut *p })
        });
        self.zone.lock().unwrap().extend(pages);
    }

    /// The owner frees a page: onto its list, then drain if asked (as
    /// `free_unref_page` → `free_pcp_slow` → `check_drain_request`).
    fn free_page(&self, page: u32) {
        self.area.pcp.with_mut(|p| {
            // SAFETY: loom's pointer; only the owner calls this.
            unsafe { (*p).push(page) }
        });
        if self.area.drain_request.load(Ordering::Relaxed) & DRAIN_PAGES != 0 {
            self.drain_local();
        }
    }

    /// `check_drain_request`, as the slow path does it.
    fn check(&self) {
        if self.area.drain_request.load(Ordering::Relaxed) & DRAIN_PAGES != 0 {
            self.drain_local();
        }
    }
}

#[test]
fn a_drain_request_is_never_lost() {
    loom::model(|| {
        let m = Arc::new(Model {
            area: Area {
                drain_request: AtomicU32::new(0),
                pcp: UnsafeCell::new(Vec::new()),
            },
            zone: Mutex::new(Vec::new()),
            asked: AtomicBool::new(false),
        });
        let requester = {
            let m = m.clone();
            thread::spawn(move || {
                // `request_all` for this (owned) area.
                m.area
                    .drain_request
                    .fetch_or(DRAIN_PAGES, Ordering::Relaxed);
                m.asked.store(true, Ordering::SeqCst);
            })
        };
        // The owner: frees two pages, then makes another call.
        m.free_page(1);
        m.free_page(2);
        let asked_before_check = m.asked.load(Ordering::SeqCst);
        m.check();
        if asked_before_check {
            // Drains happen only on request: a page in the zone means one served it
            // (at this check, or at a free after the request landed).
            assert!(
                !m.zone.lock().unwrap().is_empty(),
                "a request made before the check was lost"
            );
        }
        requester.join().unwrap();
        // Whatever the interleaving: both pages are in exactly one place.
        m.check();
        let mut all: Vec<u32> = m.zone.lock().unwrap().clone();
        all.extend(m.area.pcp.with(|p| {
            // SAFETY: loom's pointer; the requester has exited.
            unsafe { (*p).clone() }
        }));
        all.sort_unstable();
        assert_eq!(all, vec![1, 2], "no page lost or doubled");
        // The request was served: some drain came after it, so the zone got pages.
        assert!(
            !m.zone.lock().unwrap().is_empty(),
            "the request was never served"
        );
    });
}
