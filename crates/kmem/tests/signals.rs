//! Signals that interrupt allocations in progress: a handler that does not allocate
//! fires thousands of times while threads allocate, grow and free through the global
//! allocator; every object keeps its pattern and the heap's own checks stay quiet.
//! (Own process: an interval timer is process-wide.) `KMEM_STRESS_SECS` lengthens it.

mod common;

use common::{every, XorShift};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: kmem::KmemAlloc = kmem::KmemAlloc;

static SIGNALS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_alarm(_sig: libc::c_int) {
    // Async-signal-safe: no allocation, one atomic.
    SIGNALS.fetch_add(1, Ordering::Relaxed);
}

/// Random sizes 1 B … 256 KiB (and a few of 1 MiB), filled, checked, grown, freed.
fn churn(seed: u64, until: Instant) -> u64 {
    let mut rng = XorShift::new(seed | 1);
    let mut live: Vec<(Vec<u8>, usize)> = Vec::new();
    let mut ops = 0u64;
    let fill = |v: &mut Vec<u8>| {
        // SAFETY: the vector's own bytes, every one of them.
        unsafe { common::fill(v.as_mut_ptr(), v.len(), every(v.len())) }
    };
    let check = |v: &Vec<u8>| {
        let p = v.as_ptr();
        // SAFETY: as above.
        unsafe { common::damaged(p, p as usize, v.len(), every(v.len())) }.is_none()
    };
    while Instant::now() < until {
        let r = rng.next_u64();
        let size = match r % 100 {
            0 => 1 << 20,
            1..=9 => 4096 + (r >> 8) as usize % (256 << 10),
            _ => 1 + (r >> 8) as usize % 512,
        };
        match r % 3 {
            0 | 1 if live.len() < 256 => {
                let mut v = vec![0u8; size];
                fill(&mut v);
                live.push((v, size));
            }
            _ if !live.is_empty() => {
                let i = (r >> 16) as usize % live.len();
                let (mut v, _) = live.swap_remove(i);
                assert!(check(&v), "an object lost its pattern");
                if r.is_multiple_of(5) {
                    // Grow through realloc, then check the old bytes came along.
                    let old = v.len();
                    let before: Vec<u8> = v.clone();
                    v.resize(old * 2 + 1, 0);
                    assert_eq!(&v[..old], &before[..], "realloc lost bytes");
                    fill(&mut v);
                    let n = v.len();
                    live.push((v, n));
                }
            }
            _ => {}
        }
        ops += 1;
    }
    for (v, _) in &live {
        assert!(check(v), "an object lost its pattern");
    }
    ops
}

#[test]
fn allocations_survive_signals() {
    let secs = common::stress_secs().unwrap_or(1);
    // SAFETY: installing a handler that only touches an atomic; the sigaction
    // structure is zeroed and then filled.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut()), 0);
        let every = libc::timeval {
            tv_sec: 0,
            tv_usec: 200,
        };
        let it = libc::itimerval {
            it_interval: every,
            it_value: every,
        };
        assert_eq!(
            libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut()),
            0
        );
    }
    let until = Instant::now() + Duration::from_secs(secs);
    let ops: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|t| s.spawn(move || churn(0x9e37_79b9 * (t + 1), until)))
            .collect();
        hs.into_iter().map(|h| h.join().expect("no panic")).sum()
    });
    // SAFETY: stopping the timer (a zeroed itimerval disarms it).
    unsafe {
        let off: libc::itimerval = std::mem::zeroed();
        libc::setitimer(libc::ITIMER_REAL, &off, std::ptr::null_mut());
    }
    let signals = SIGNALS.load(Ordering::Relaxed);
    eprintln!("{ops} operations, {signals} signals delivered");
    assert!(signals >= 100, "the timer fired only {signals} times");
    assert!(ops > 100, "only {ops} operations");
    // The heap's own consistency: no bad-object reports, validate finds nothing.
    assert!(kmem::heap().validate().is_empty());
}
