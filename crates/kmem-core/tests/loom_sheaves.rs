//! loom models of what the sheaves design relies on (`slab/sheaf.rs`, `slab/barn.rs`):
//!
//! 1. The sheaves under restartable sequences (`cpu-rseq`): sections on a CPU pop
//!    from the main sheaf (or the spare, when the main one is empty) and push onto the
//!    spare by reading that sheaf's top (`sheaf + 8 * count`; the push also the spare's
//!    limit), reading or writing a slot, and committing the top; the area's lock
//!    holder, which may run on another CPU, first *takes* the top (a section on that
//!    CPU that stores 0, which both sections then read as no objects and no room), then
//!    works on the sheaves with plain accesses, then *installs* the pointers, the
//!    limits and the tops (Release) — here both sheaves, since its slow paths may swap
//!    the two. A
//!    section is atomic against everything else on its CPU (the kernel
//!    restarts it when preempted), modelled as a lock that sections and the take hold;
//!    the lock holder's work and install run outside it. The slots are loom cells, so
//!    a slot read that is not ordered after the lock holder's writes is a reported
//!    race: the sections must read the top with Acquire (a plain load on x86). The
//!    push also reads the object-start checks the install writes before the spare's
//!    top (`KmemCacheCpu`'s `free_*` words, `rseq::sheaf_push_at`), a loom cell too.
//! 2. The barn: kmem-core's own `BarnLists` under a lock, with CPUs exchanging full
//!    and empty sheaves (put and get, and the front ends' one-step trades,
//!    `exchange_empty` / `exchange_full`) and a shrinker taking everything; a sheaf's
//!    objects, written before it is put in the barn, are read by whoever takes it out.
//!    And the barn's hint (its count of full sheaves, published as each hold of the
//!    lock ends and read without it): CPUs that skip a trade on a stale hint lose
//!    nothing.
//!
//! 3. The barns' spill (`slab/barn_spill.rs`): CPUs that read the budget without a
//!    lock, each before handing a sheaf to its own barn past the barn's bound, and a
//!    CPU taking a sheaf out of one; the budget is charged and given back by each hold
//!    of a barn's lock as it ends. Checked: every sheaf kept or flushed, once; the
//!    budget overrun by at most a sheaf for each CPU that read it at once; and, once
//!    every hold ended, the budget is what the barns keep past their bounds.
//!
//! Each model checks that every object ends up exactly once: held by a context, in a
//! sheaf's counted slots, or back in the slabs.

use kmem_core::slab::barn::{BarnLists, MAX_FULL_SHEAVES};
use kmem_core::slab::sheaf::SHEAF_HEADER;
use kmem_core::slab::SlabSheaf;
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::ptr::NonNull;

const CAP: usize = 2;
/// The fewest objects a swap hands over (`swap_floor`: an eighth of a sheaf rounded up,
/// at least one).
const FLOOR: usize = CAP.div_ceil(8);
/// The spare's cache's object-start checks, as one value.
const CHECKS: usize = 0x5eaf;
const OBJECTS: usize = 4;

/// Sheaf `i`'s slots.
struct Slots([UnsafeCell<usize>; CAP]);

impl Slots {
    fn new() -> Self {
        Slots([UnsafeCell::new(0), UnsafeCell::new(0)])
    }
    fn get(&self, i: usize) -> usize {
        // SAFETY: loom checks that this read is ordered after every write.
        self.0[i].with(|p| unsafe { *p })
    }
    fn set(&self, i: usize, v: usize) {
        // SAFETY: loom checks that no other access races with this write.
        self.0[i].with_mut(|p| unsafe { *p = v });
    }
}

/// One CPU's sheaves: sheaf 0 starts as main (allocations pop from it) with objects 1
/// and 2; sheaf 1 is the spare (frees push onto it), empty; objects 3 and 4 are in
/// the "slabs". Each sheaf has its top (`sheaf + 8 * count`, as `KmemCacheCpu`'s
/// `main_top` / `spare_top`) and its limit (`sheaf + 8 * capacity`), with sheaf `i` at
/// the model address [`addr`]`(i)`.
struct Cpu {
    main_top: AtomicUsize,
    spare_top: AtomicUsize,
    main_limit: AtomicUsize,
    spare_limit: AtomicUsize,
    main: AtomicUsize,
    spare: AtomicUsize,
    sheaves: [Slots; 2],
    /// The object-start checks of the spare's cache (`free_mask`, … in one word):
    /// written by every install before the tops, read by the push.
    checks: UnsafeCell<usize>,
    /// What runs on this CPU runs alone (a section, or a take).
    on_cpu: Mutex<()>,
    /// The area's local lock: one lock holder at a time.
    local_lock: Mutex<()>,
    slabs: Mutex<Vec<usize>>,
}

/// The model address of sheaf `i` (never 0, as a real sheaf's).
fn addr(i: usize) -> usize {
    (i + 1) << 12
}

/// The sheaf at model address `a`.
fn index(a: usize) -> usize {
    (a >> 12) - 1
}

/// The top of sheaf `i` holding `n` objects.
fn top(i: usize, n: usize) -> usize {
    addr(i) + 8 * n
}

/// The objects a sheaf at `a` holds by its top `t` (none when taken: `t` is 0).
fn count(t: usize, a: usize) -> usize {
    t.saturating_sub(a) / 8
}

impl Cpu {
    fn new() -> Self {
        let c = Cpu {
            main_top: AtomicUsize::new(top(0, 2)),
            spare_top: AtomicUsize::new(top(1, 0)),
            main_limit: AtomicUsize::new(top(0, CAP)),
            spare_limit: AtomicUsize::new(top(1, CAP)),
            main: AtomicUsize::new(addr(0)),
            spare: AtomicUsize::new(addr(1)),
            sheaves: [Slots::new(), Slots::new()],
            checks: UnsafeCell::new(CHECKS),
            on_cpu: Mutex::new(()),
            local_lock: Mutex::new(()),
            slabs: Mutex::new(vec![3, 4]),
        };
        c.sheaves[0].set(0, 1);
        c.sheaves[0].set(1, 2);
        c
    }

    /// `rseq::sheaf_pop`: on the main sheaf, or on the spare when the main one is
    /// empty (the swap of the lock holder's slow path, done by the section). A sheaf
    /// holds objects while its top is above its address (a taken top is 0).
    fn pop(&self) -> Option<usize> {
        let _cpu = self.on_cpu.lock().unwrap();
        let (mut topw, mut sheaf) = (&self.main_top, &self.main);
        let mut t = topw.load(Ordering::Acquire);
        if t <= sheaf.load(Ordering::Relaxed) {
            (topw, sheaf) = (&self.spare_top, &self.spare);
            t = topw.load(Ordering::Acquire);
        }
        let a = sheaf.load(Ordering::Relaxed);
        if t <= a {
            return None;
        }
        let obj = self.sheaves[index(a)].get(count(t, a) - 1);
        topw.store(t - 8, Ordering::Relaxed);
        Some(obj)
    }

    /// `rseq::sheaf_push`, on the spare sheaf: a taken top (0) refuses on its own,
    /// else there is room while the top is below the limit.
    fn push(&self, obj: usize) -> bool {
        let _cpu = self.on_cpu.lock().unwrap();
        let t = self.spare_top.load(Ordering::Acquire);
        if t == 0 || t >= self.spare_limit.load(Ordering::Relaxed) {
            return false;
        }
        // SAFETY: loom checks that this read is ordered after the install's write.
        let checks = self.checks.with(|p| unsafe { *p });
        assert_eq!(checks, CHECKS, "a spare with room came without its checks");
        let a = self.spare.load(Ordering::Relaxed);
        let n = count(t, a);
        assert_ne!(
            n.checked_sub(1).map(|i| self.sheaves[index(a)].get(i)),
            Some(obj)
        );
        self.sheaves[index(a)].set(n, obj);
        self.spare_top.store(t + 8, Ordering::Relaxed);
        true
    }

    /// The lock holder's take of one top: a section on the CPU that stores 0. Returns
    /// the objects it counted.
    fn take(&self, topw: &AtomicUsize, sheaf: &AtomicUsize) -> usize {
        let _cpu = self.on_cpu.lock().unwrap();
        let v = topw.load(Ordering::Relaxed);
        topw.store(0, Ordering::Relaxed);
        count(v, sheaf.load(Ordering::Relaxed))
    }

    /// The lock holder's install: the checks, pointers and limits, then the tops
    /// (Release).
    fn install(&self, (m, mn): (usize, usize), (f, fnn): (usize, usize)) {
        // SAFETY: loom checks that no section's read races with this write.
        self.checks.with_mut(|p| unsafe { *p = CHECKS });
        self.main.store(addr(m), Ordering::Relaxed);
        self.spare.store(addr(f), Ordering::Relaxed);
        self.main_limit.store(top(m, CAP), Ordering::Relaxed);
        self.spare_limit.store(top(f, CAP), Ordering::Relaxed);
        self.main_top.store(top(m, mn), Ordering::Release);
        self.spare_top.store(top(f, fnn), Ordering::Release);
    }

    /// Both sheaves, taken: (main, its objects), (spare, its objects).
    fn take_both(&self) -> ((usize, usize), (usize, usize)) {
        let mn = self.take(&self.main_top, &self.main);
        let fnn = self.take(&self.spare_top, &self.spare);
        let m = index(self.main.load(Ordering::Relaxed));
        let f = index(self.spare.load(Ordering::Relaxed));
        ((m, mn), (f, fnn))
    }

    /// The lock holder's allocation slow path (`sheaf_alloc`): take both tops; an
    /// empty main swaps with a spare that has `FLOOR` objects, else is refilled from
    /// the slabs (the spare keeps its few); pop one; install.
    fn alloc_slow(&self) -> Option<usize> {
        let _l = self.local_lock.lock().unwrap();
        let ((mut m, mut mn), (mut f, mut fnn)) = self.take_both();
        if mn == 0 {
            if fnn >= FLOOR {
                std::mem::swap(&mut m, &mut f);
                std::mem::swap(&mut mn, &mut fnn);
            } else {
                let mut slabs = self.slabs.lock().unwrap();
                while mn < CAP {
                    let Some(o) = slabs.pop() else { break };
                    self.sheaves[m].set(mn, o);
                    mn += 1;
                }
            }
        }
        let obj = (mn > 0).then(|| {
            mn -= 1;
            self.sheaves[m].get(mn)
        });
        self.install((m, mn), (f, fnn));
        obj
    }

    /// The lock holder's free slow path (`sheaf_free` when the spare is full): take
    /// both tops; a full spare becomes the main sheaf if that one has room for
    /// `FLOOR` objects (the main one then takes the frees), else is flushed to the
    /// slabs; push; install.
    fn free_slow(&self, obj: usize) {
        let _l = self.local_lock.lock().unwrap();
        let ((mut m, mut mn), (mut f, mut fnn)) = self.take_both();
        if fnn >= CAP {
            if mn + FLOOR <= CAP {
                std::mem::swap(&mut m, &mut f);
                std::mem::swap(&mut mn, &mut fnn);
            } else {
                let mut slabs = self.slabs.lock().unwrap();
                for i in 0..fnn {
                    slabs.push(self.sheaves[f].get(i));
                }
                fnn = 0;
            }
        }
        self.sheaves[f].set(fnn, obj);
        self.install((m, mn), (f, fnn + 1));
    }

    /// Every object once: held, in a sheaf's counted slots, or in the slabs.
    fn check(&self, held: &[usize]) {
        let (m, f) = (
            self.main.load(Ordering::Relaxed),
            self.spare.load(Ordering::Relaxed),
        );
        let (mn, fnn) = (
            count(self.main_top.load(Ordering::Acquire), m),
            count(self.spare_top.load(Ordering::Acquire), f),
        );
        assert_ne!(m, f, "main and spare are two sheaves");
        let mut all: Vec<usize> = held.to_vec();
        all.extend((0..mn).map(|i| self.sheaves[index(m)].get(i)));
        all.extend((0..fnn).map(|i| self.sheaves[index(f)].get(i)));
        all.extend(self.slabs.lock().unwrap().iter().copied());
        all.sort();
        assert_eq!(all, (1..=OBJECTS).collect::<Vec<_>>(), "lost or doubled");
    }
}

fn alloc(c: &Cpu) -> Option<usize> {
    c.pop().or_else(|| c.alloc_slow())
}

fn free(c: &Cpu, o: usize) {
    if !c.push(o) {
        c.free_slow(o);
    }
}

#[test]
fn rseq_sections_and_the_lock_holder_keep_every_object_once() {
    // Bounded, as the other models with two threads and a lock holder (`loom_slab`,
    // `loom_percpu`, bound 3): with the tops, the limits and the pointers as separate
    // words the unbounded search ran past 15 minutes; bound 4 takes seconds, and fails
    // at once if the push does not refuse a taken (0) top.
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(4);
    b.check(|| {
        let cpu = Arc::new(Cpu::new());
        // A thread that allocates three objects (emptying the main sheaf, so the slow
        // path refills) and frees one, against one that frees into a full sheaf.
        let c1 = cpu.clone();
        let t1 = thread::spawn(move || {
            let mut held = Vec::new();
            for _ in 0..3 {
                held.extend(alloc(&c1));
            }
            let back = held.pop();
            if let Some(o) = back {
                free(&c1, o);
            }
            held
        });
        let c2 = cpu.clone();
        let t2 = thread::spawn(move || {
            let mut held: Vec<usize> = alloc(&c2).into_iter().collect();
            if let Some(o) = held.pop() {
                free(&c2, o);
            }
            held
        });
        let mut held = t1.join().unwrap();
        held.extend(t2.join().unwrap());
        cpu.check(&held);
    });
}

/// A sheaf for the barn model: a zeroed header (a valid empty sheaf: all its fields
/// are atomics and null pointers) whose objects live in a loom cell beside it.
struct ModelSheaf {
    header: NonNull<SlabSheaf>,
    objects: UnsafeCell<Vec<usize>>,
}

// SAFETY: the header is only reached through the barn's lists under the model's lock
// (or after the threads joined); the objects through the loom cell.
unsafe impl Send for ModelSheaf {}
// SAFETY: as above.
unsafe impl Sync for ModelSheaf {}

impl ModelSheaf {
    fn new(objects: Vec<usize>) -> Self {
        let raw = Box::into_raw(Box::new([0u64; SHEAF_HEADER / 8]));
        ModelSheaf {
            // SAFETY: from Box::into_raw, never null.
            header: unsafe { NonNull::new_unchecked(raw) }.cast(),
            objects: UnsafeCell::new(objects),
        }
    }
    fn ptr(&self) -> NonNull<SlabSheaf> {
        self.header
    }
}

impl Drop for ModelSheaf {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw in `new`, freed once.
        drop(unsafe { Box::from_raw(self.header.as_ptr().cast::<[u64; SHEAF_HEADER / 8]>()) });
    }
}

/// The model's sheaves, sheaf `i` holding `objects[i]`, and a sheaf's index by its
/// header.
#[allow(clippy::type_complexity)]
fn model_sheaves<const N: usize>(
    objects: [Vec<usize>; N],
) -> (
    Arc<[ModelSheaf; N]>,
    impl Fn(NonNull<SlabSheaf>) -> usize + Clone + Send + 'static,
) {
    let sheaves = Arc::new(objects.map(ModelSheaf::new));
    let s = sheaves.clone();
    let which = move |p: NonNull<SlabSheaf>| (0..N).find(|&i| s[i].ptr() == p).unwrap();
    (sheaves, which)
}

/// Takes every sheaf off the barn's lists (the threads joined): each sheaf, and
/// whether it was on the full list.
fn drain_barn(barn: &Mutex<BarnLists>) -> Vec<(NonNull<SlabSheaf>, bool)> {
    let (full, empty) = barn.lock().unwrap().take_all();
    let mut out = Vec::new();
    for (mut head, is_full) in [(full, true), (empty, false)] {
        while let Some(p) = NonNull::new(head) {
            out.push((p, is_full));
            // SAFETY: the model's sheaves are live; the lists are ours now.
            head = unsafe { p.as_ref() }.next_in_list();
        }
    }
    out
}

#[test]
fn the_barn_exchanges_sheaves_without_losing_one() {
    assert_eq!(SHEAF_HEADER % 8, 0);
    loom::model(|| {
        // Three sheaves: 0 (CPU A's main; A fills it with objects 1 and 2 below), 1
        // full (object 3, in the barn), 2 empty (CPU B's main).
        let (sheaves, which) = model_sheaves([vec![], vec![3], vec![]]);
        let barn = Arc::new(Mutex::new(BarnLists::new()));
        // SAFETY: a test sheaf, live, in no list, handed in once.
        unsafe {
            barn.lock()
                .unwrap()
                .put_full(sheaves[1].ptr(), MAX_FULL_SHEAVES, 1)
        }
        .unwrap();
        // CPU A: its main sheaf (0) is full: hand it in for an empty one.
        let (b, s, wh) = (barn.clone(), sheaves.clone(), which.clone());
        let a = thread::spawn(move || {
            // Written before the put, read by whoever takes the sheaf out.
            // SAFETY: loom checks the cell's accesses for races.
            s[0].objects.with_mut(|v| unsafe { (*v).extend([1, 2]) });
            let mut l = b.lock().unwrap();
            // SAFETY: a test sheaf, live, in no list, handed in once.
            unsafe { l.put_full(s[0].ptr(), MAX_FULL_SHEAVES, 0) }.unwrap();
            l.get_empty().map(&wh)
        });
        // CPU B: its main sheaf (2) is empty: exchange it for a full one.
        let (b, s, wh) = (barn.clone(), sheaves.clone(), which.clone());
        let bt = thread::spawn(move || {
            let mut l = b.lock().unwrap();
            let full = l.get_full(1);
            if full.is_some() {
                // SAFETY: a test sheaf, live, in no list, handed in once.
                unsafe { l.put_empty(s[2].ptr()) }.unwrap();
            }
            drop(l);
            full.map(|f| {
                let i = wh(f);
                // Reading what the putter wrote.
                // SAFETY: loom checks the cell's accesses for races.
                let n = s[i].objects.with(|v| unsafe { (*v).len() });
                (i, n)
            })
        });
        let got_a = a.join().unwrap();
        let got_b = bt.join().unwrap();
        // Where each sheaf is now: A's hands, B's hands, or the barn.
        let mut places = vec![0usize; 3];
        if let Some(i) = got_a {
            places[i] += 1;
        }
        match got_b {
            Some((i, n)) => {
                places[i] += 1;
                assert_eq!(n, [2, 1, 0][i], "the sheaf's objects came with it");
            }
            None => places[2] += 1, // B kept its empty sheaf
        }
        let in_barn = drain_barn(&barn);
        for &(p, _) in &in_barn {
            places[which(p)] += 1;
        }
        assert!(!in_barn.is_empty());
        assert_eq!(places, [1, 1, 1], "every sheaf in exactly one place");
    });
}

#[test]
fn one_step_trades_keep_every_sheaf_in_one_place() {
    // The front ends' trades (`alloc_from_barn`, `free_to_barn`): each CPU gives one
    // sheaf and takes one under a single hold of the barn's lock.
    loom::model(|| {
        // 0: CPU A's empty main; 1: full (object 3) and 3: empty, in the barn; 2: CPU
        // B's spare, which B fills with objects 4 and 5 before trading it.
        let (sheaves, which) = model_sheaves([vec![], vec![3], vec![], vec![]]);
        let barn = Arc::new(Mutex::new(BarnLists::new()));
        {
            let mut l = barn.lock().unwrap();
            // SAFETY: a test sheaf, live, in no list, handed in once.
            unsafe { l.put_full(sheaves[1].ptr(), MAX_FULL_SHEAVES, 1) }.unwrap();
            // SAFETY: a test sheaf, live, in no list, handed in once.
            unsafe { l.put_empty(sheaves[3].ptr()) }.unwrap();
        }
        // CPU A: both its sheaves are empty; its main goes in for a full one.
        let (b, s, wh) = (barn.clone(), sheaves.clone(), which.clone());
        let a = thread::spawn(move || {
            // SAFETY: a test sheaf, live, in no list, handed in once.
            let full = unsafe { b.lock().unwrap().exchange_empty(s[0].ptr(), 0) }?;
            let i = wh(full);
            // Reading what the putter wrote before its trade.
            // SAFETY: loom checks the cell's accesses for races.
            let objects = s[i].objects.with(|v| unsafe { (*v).clone() });
            Some((i, objects))
        });
        // CPU B: its spare is full; it goes in for an empty one.
        let (b, s, wh) = (barn.clone(), sheaves.clone(), which.clone());
        let bt = thread::spawn(move || {
            // SAFETY: loom checks the cell's accesses for races.
            s[2].objects.with_mut(|v| unsafe { (*v).extend([4, 5]) });
            // SAFETY: a test sheaf, live, in no list, handed in once.
            unsafe {
                b.lock()
                    .unwrap()
                    .exchange_full(s[2].ptr(), MAX_FULL_SHEAVES, 1)
            }
            .map(&wh)
        });
        let got_a = a.join().unwrap();
        let got_b = bt.join().unwrap();
        let mut places = vec![0usize; 4];
        match got_a {
            Some((i, objects)) => {
                places[i] += 1;
                let want: &[usize] = if i == 1 { &[3] } else { &[4, 5] };
                assert_eq!(objects, want, "the sheaf's objects came with it");
            }
            None => unreachable!("the barn always held a full sheaf"),
        }
        match got_b {
            Some(i) => {
                places[i] += 1;
                assert!(i == 0 || i == 3, "an empty sheaf for the full one");
            }
            None => unreachable!("the barn always held an empty sheaf"),
        }
        for (p, is_full) in drain_barn(&barn) {
            let i = which(p);
            places[i] += 1;
            // SAFETY: loom checks the cell's accesses for races.
            let n = sheaves[i].objects.with(|v| unsafe { (*v).len() });
            assert_eq!(
                n > 0,
                is_full,
                "a sheaf on the list that says what it holds"
            );
        }
        assert_eq!(places, [1, 1, 1, 1], "every sheaf in exactly one place");
    });
}

/// The barn's hint (`Barn::nr_full_hint`): its count of full sheaves, copied to a word
/// as each hold of its lock ends (`BarnGuard`'s drop) and read without the lock, so
/// that a CPU skips a trade the barn cannot make — an allocation a barn without full
/// sheaves (it refills from the slabs instead), a free a barn at its bound (it flushes
/// its sheaf to the slabs instead). A stale read only sends a CPU that longer way:
/// every sheaf stays in exactly one place, every object too (held, in a barn sheaf, or
/// flushed to the slabs), and once nobody holds the lock the word is the count.
#[test]
fn trades_skipped_on_the_barn_s_hint_lose_nothing() {
    /// The barn's bound on full sheaves in this model.
    const MAX: usize = 1;
    loom::model(|| {
        // 0: CPU A's empty main; 1: full (object 3), in the barn; 2: CPU B's spare,
        // which B fills with objects 4 and 5.
        let (sheaves, which) = model_sheaves([vec![], vec![3], vec![]]);
        let barn = Arc::new(Mutex::new(BarnLists::new()));
        let hint = Arc::new(AtomicUsize::new(0));
        {
            let mut l = barn.lock().unwrap();
            // SAFETY: a test sheaf, live, in no list, handed in once.
            unsafe { l.put_full(sheaves[1].ptr(), MAX, 1) }.unwrap();
            hint.store(l.nr_full(), Ordering::Relaxed);
        }
        // CPU A: its main sheaf is empty: a full one from the barn, unless the hint
        // says it has none (then it refills from the slabs, keeping its sheaf).
        let (b, h, s, wh) = (barn.clone(), hint.clone(), sheaves.clone(), which.clone());
        let a = thread::spawn(move || {
            if h.load(Ordering::Relaxed) == 0 {
                return None;
            }
            let mut l = b.lock().unwrap();
            // SAFETY: a test sheaf, live, in no list, handed in once.
            let full = unsafe { l.exchange_empty(s[0].ptr(), 0) };
            h.store(l.nr_full(), Ordering::Relaxed);
            drop(l);
            full.map(|f| {
                let i = wh(f);
                // Reading what the putter wrote before its trade.
                // SAFETY: loom checks the cell's accesses for races.
                (i, s[i].objects.with(|v| unsafe { (*v).clone() }))
            })
        });
        // CPU B: its spare is full: into the barn, for an empty one if there is one,
        // unless the hint says the barn holds its most (then the sheaf's objects go
        // to the slabs and B keeps the sheaf, empty). Returns what went to the slabs
        // and the sheaf B holds after (`None`: none, it made a new one).
        let (b, h, s, wh) = (barn.clone(), hint.clone(), sheaves.clone(), which.clone());
        let bt = thread::spawn(move || {
            // SAFETY: loom checks the cell's accesses for races.
            s[2].objects.with_mut(|v| unsafe { (*v).extend([4, 5]) });
            let flush = || {
                s[2].objects.with_mut(|v| {
                    // SAFETY: loom checks the cell's accesses for races.
                    unsafe { std::mem::take(&mut *v) }
                })
            };
            if h.load(Ordering::Relaxed) >= MAX {
                return (flush(), Some(2));
            }
            let mut l = b.lock().unwrap();
            // SAFETY: a test sheaf, live, in no list, handed in once.
            let put = unsafe { l.put_full(s[2].ptr(), MAX, 1) };
            let empty = put.is_ok().then(|| l.get_empty()).flatten();
            h.store(l.nr_full(), Ordering::Relaxed);
            drop(l);
            match put {
                Ok(()) => (vec![], empty.map(&wh)),
                Err(_) => (flush(), Some(2)),
            }
        });
        let got_a = a.join().unwrap();
        let (flushed, held_b) = bt.join().unwrap();
        let mut places = vec![0usize; 3];
        let mut objects: Vec<usize> = flushed;
        match got_a {
            Some((i, objs)) => {
                places[i] += 1;
                assert!(i == 1 || i == 2, "a full sheaf for the empty one");
                objects.extend(objs);
            }
            None => places[0] += 1, // A kept its empty sheaf and refilled
        }
        if let Some(i) = held_b {
            places[i] += 1;
        }
        let l = barn.lock().unwrap();
        assert_eq!(
            hint.load(Ordering::Relaxed),
            l.nr_full(),
            "the word is the count"
        );
        drop(l);
        for (p, is_full) in drain_barn(&barn) {
            let i = which(p);
            places[i] += 1;
            // SAFETY: loom checks the cell's accesses for races.
            let objs = sheaves[i].objects.with(|v| unsafe { (*v).clone() });
            assert_eq!(!objs.is_empty(), is_full, "a sheaf on the right list");
            if is_full {
                objects.extend(objs);
            }
        }
        assert_eq!(places, [1, 1, 1], "every sheaf in exactly one place");
        objects.sort();
        assert_eq!(objects, [3, 4, 5], "every object in exactly one place");
    });
}

/// See the module doc, 3. Two barns at their bound of one full sheaf; a budget of one
/// sheaf. CPUs A and B each hand a sheaf to their barn (A's barn 0, B's barn 1), reading
/// the budget first; CPU C takes a full sheaf out of barn 0.
#[test]
fn the_spill_budget_is_what_the_barns_keep_past_their_bounds() {
    use kmem_core::slab::barn_spill::{sheaf_bytes, BarnSpill, SpillAccount};
    use kmem_core::slab::{CacheConfig, SlabFlags};
    let mut cfg = CacheConfig::calculate("spill", 64, 8, SlabFlags::empty(), None, 2).unwrap();
    cfg.barn_max_full = 1;
    cfg.sheaf_capacity = CAP;
    let bytes = sheaf_bytes(&cfg);
    assert!(bytes > 0);
    let cfg: &'static CacheConfig = Box::leak(Box::new(cfg));
    loom::model(move || {
        // 0 and 1: in barns 0 and 1 (at their bound); 2: A's; 3: B's.
        let (sheaves, which) = model_sheaves([vec![1], vec![2], vec![3], vec![4]]);
        let spill: &'static BarnSpill = Box::leak(Box::new(BarnSpill::new()));
        spill.set_limit(bytes);
        let acct = SpillAccount::new(spill, cfg);
        let barns = Arc::new([Mutex::new(BarnLists::new()), Mutex::new(BarnLists::new())]);
        for i in 0..2 {
            let mut l = barns[i].lock().unwrap();
            // SAFETY: a test sheaf, live, in no list, handed in once.
            unsafe { l.put_full(sheaves[i].ptr(), acct.cap(), 1) }.unwrap();
            acct.settle(&mut l);
        }
        assert_eq!(spill.used(), 0, "within the bounds");
        let hand_in = |i: usize| {
            let (b, s) = (barns.clone(), sheaves.clone());
            thread::spawn(move || {
                let cap = acct.cap();
                let mut l = b[i].lock().unwrap();
                // SAFETY: a test sheaf, live, in no list, handed in once.
                let kept = unsafe { l.put_full(s[2 + i].ptr(), cap, i as u32) }.is_ok();
                acct.settle(&mut l);
                kept
            })
        };
        let (a, bt) = (hand_in(0), hand_in(1));
        let b = barns.clone();
        let ct = thread::spawn(move || {
            let mut l = b[0].lock().unwrap();
            let got = l.get_full(2);
            acct.settle(&mut l);
            got
        });
        let kept = [a.join().unwrap(), bt.join().unwrap()];
        let taken = ct.join().unwrap();
        // A sheaf for each CPU that read the budget at once, at most, past it.
        assert!(spill.used() <= 2 * bytes, "{} bytes charged", spill.used());
        let over: usize = barns
            .iter()
            .map(|b| b.lock().unwrap().nr_full().saturating_sub(1))
            .sum();
        assert_eq!(spill.used(), over * bytes, "the budget is the barns' spill");
        if spill.used() > 0 {
            assert_eq!(
                acct.cap(),
                1,
                "a spent budget: the bound for the next sheaf"
            );
        }
        // Every sheaf in one place: a barn, C's hands, or flushed (not kept).
        let mut places = vec![0usize; 4];
        if let Some(p) = taken {
            places[which(p)] += 1;
        }
        for (i, k) in kept.iter().enumerate() {
            if !k {
                places[2 + i] += 1;
            }
        }
        for b in barns.iter() {
            for (p, _) in drain_barn(b) {
                places[which(p)] += 1;
            }
        }
        assert_eq!(places, [1, 1, 1, 1], "every sheaf in exactly one place");
        // The lists are empty now: a counted hold gives everything back.
        for b in barns.iter() {
            acct.settle(&mut b.lock().unwrap());
        }
        assert_eq!(spill.used(), 0);
    });
}
