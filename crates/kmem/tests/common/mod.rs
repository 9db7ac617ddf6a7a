//! Helpers shared by the stress-style tests (`mod common;` in each): a xorshift
//! generator, an address-derived fill pattern with its checks, and lookups of kmem's
//! counters and the machine. Each test binary uses some of them.
#![allow(dead_code)]

/// Marsaglia's xorshift64 (shifts 13, 7, 17): deterministic and cheap; for tests only.
/// The seed is used as given (it must not be 0).
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        assert_ne!(seed, 0, "xorshift never leaves 0");
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The byte at offset `i` of a `len`-byte object at `addr`: it changes with the address,
/// the size and the offset, so a stale, shifted or foreign copy is caught.
pub fn pattern(addr: usize, len: usize, i: usize) -> u8 {
    ((addr >> 4) ^ len ^ i.wrapping_mul(0x9d)) as u8
}

/// Every offset of a `len`-byte object.
pub fn every(len: usize) -> std::ops::Range<usize> {
    0..len
}

/// Every byte of objects up to 4 KiB; 64 spread bytes and the last of larger ones.
pub fn sampled(len: usize) -> impl Iterator<Item = usize> {
    let step = if len <= 4096 { 1 } else { len / 64 };
    (0..len).step_by(step).chain(std::iter::once(len - 1))
}

/// The first, middle and last byte.
pub fn ends(len: usize) -> [usize; 3] {
    [0, len / 2, len - 1]
}

/// Writes the pattern of the `len`-byte object at `p` at the offsets `at`.
///
/// # Safety
/// `p` is `len` writable bytes of the caller's; every offset is below `len`.
pub unsafe fn fill(p: *mut u8, len: usize, at: impl IntoIterator<Item = usize>) {
    for i in at {
        // SAFETY: the caller's contract.
        unsafe { p.add(i).write(pattern(p as usize, len, i)) };
    }
}

/// The first offset in `at` where the bytes at `p` do not hold the pattern of the
/// `len`-byte object that was at `addr` (`addr` = `p` unless it moved).
///
/// # Safety
/// `p` is readable at every offset of `at`.
pub unsafe fn damaged(
    p: *const u8,
    addr: usize,
    len: usize,
    at: impl IntoIterator<Item = usize>,
) -> Option<usize> {
    // SAFETY: the caller's contract.
    at.into_iter()
        .find(|&i| unsafe { p.add(i).read() } != pattern(addr, len, i))
}

/// Panics unless the `len`-byte object at `p` holds its pattern at the offsets `at`.
///
/// # Safety
/// As [`damaged`].
pub unsafe fn verify(p: *const u8, len: usize, at: impl IntoIterator<Item = usize>) {
    // SAFETY: the caller's contract.
    if let Some(i) = unsafe { damaged(p, p as usize, len, at) } {
        panic!("{p:p}+{i} of {len} bytes lost its pattern");
    }
}

/// Panics unless the first `keep` bytes at `q` (a resized copy, or the same memory)
/// hold the pattern the `len`-byte object at `old` had, at the offsets `at`.
///
/// # Safety
/// `q` is readable for `keep` bytes.
pub unsafe fn verify_moved(
    old: usize,
    len: usize,
    q: *const u8,
    keep: usize,
    at: impl IntoIterator<Item = usize>,
) {
    let at = at.into_iter().filter(|&i| i < keep);
    // SAFETY: the caller's contract; only offsets below `keep` are read.
    if let Some(i) = unsafe { damaged(q, old, len, at) } {
        panic!("resizing {old:#x} ({len} bytes) to {q:p} lost byte {i}");
    }
}

/// A `/proc/vmstat` counter of the heap (0 if there is none by that name).
pub fn vmstat(name: &str) -> i64 {
    kmem::stats()
        .vmstat
        .iter()
        .find(|v| v.name == name)
        .map_or(0, |v| v.value)
}

/// Whether `KMEM_STRESS_SECS` asks for the long form of the stress tests.
pub fn stressing() -> bool {
    std::env::var_os("KMEM_STRESS_SECS").is_some()
}

/// `KMEM_STRESS_SECS`: how long the stress tests run, when set to a number.
pub fn stress_secs() -> Option<u64> {
    std::env::var("KMEM_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
}

/// CPUs configured on this machine (at least 1).
pub fn configured_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as usize
}

/// Per-CPU rseq mode's takes from another CPU, under load: one thread allocates and
/// frees `size`-byte kmalloc blocks (a window of 64 held, each marked with its
/// address while held and the mark cleared before its free: a block handed out while
/// held, or changed, fails the test), while a second thread flushes every CPU's
/// caches, taking the first one's freelists or sheaves from its own CPU. The two are
/// pinned to two CPUs where they may be (else left to the scheduler). Returns the
/// fences the takes ran, or `None` where the machine has fewer than two CPUs.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub fn takes_under_load(size: usize, pairs: usize) -> Option<usize> {
    use kmem::platform::rseq;
    use std::sync::atomic::{AtomicBool, Ordering};
    if configured_cpus() < 2 {
        return None;
    }
    const MARK: u64 = 0x5ca1_ab1e_0ddb_a110;
    let h = kmem::heap();
    let done = AtomicBool::new(false);
    let before = rseq::fences();
    let on = |cpu: usize, f: &(dyn Fn() + Sync)| {
        if rseq::on_cpu(cpu, f).ran().is_none() {
            f();
        }
    };
    /// Sets `done` when dropped: on the worker's way out, a failed check's too, so
    /// the flusher stops and the failure reaches the test.
    struct Done<'a>(&'a AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    std::thread::scope(|t| {
        t.spawn(|| {
            let _done = Done(&done);
            on(0, &|| {
                let mut held = [0usize; 64];
                for i in 0..pairs {
                    let slot = &mut held[i % 64];
                    if *slot != 0 {
                        let p = *slot as *mut u64;
                        // SAFETY: a block of ours, at least 8 bytes; freed once.
                        unsafe {
                            assert_eq!(p.read(), MARK ^ *slot as u64, "a held block changed");
                            p.write(0);
                            assert!(h.kfree(p.cast()));
                        }
                    }
                    let p = h.kmalloc(size, kmem::Gfp::KERNEL).unwrap().as_ptr() as usize;
                    // SAFETY: a fresh block of `size` (at least 8) bytes.
                    unsafe {
                        let w = p as *mut u64;
                        assert_ne!(w.read(), MARK ^ p as u64, "a held block handed out again");
                        w.write(MARK ^ p as u64);
                    }
                    *slot = p;
                }
                for p in held.into_iter().filter(|&p| p != 0) {
                    // SAFETY: ours, freed once.
                    unsafe {
                        (p as *mut u64).write(0);
                        assert!(h.kfree(p as *mut u8));
                    }
                }
            });
        });
        t.spawn(|| {
            on(1, &|| {
                // At least once after the worker is done (its sheaves hold what it
                // freed last), so a flusher the scheduler started late takes too.
                loop {
                    let last = done.load(Ordering::Acquire);
                    h.flush_cpu_caches();
                    if last {
                        break;
                    }
                }
            })
        });
    });
    Some(rseq::fences() - before)
}
