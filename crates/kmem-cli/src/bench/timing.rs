//! How a figure is measured: a warm-up, then the median of `reps` repetitions, per
//! operation, in nanoseconds and (where there is a time-stamp counter) TSC cycles.
//!
//! [`Ctx`] is the state one run shares with its suites: quick or full form, the
//! repetition count, and the progress bar each measurement ticks.

use super::progress::Progress;
use std::time::{Duration, Instant};

/// What one measurement gives: medians per operation.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub ns: f64,
    pub cycles: Option<f64>,
    pub ops: u64,
}

/// Shared state of one run.
pub struct Ctx {
    pub quick: bool,
    pub reps: usize,
    progress: Progress,
}

impl Ctx {
    /// A context that reports to `progress`: 5 repetitions in quick form, else 11.
    pub fn new(quick: bool, progress: Progress) -> Self {
        Ctx {
            quick,
            reps: if quick { 5 } else { 11 },
            progress,
        }
    }

    /// A context without a progress bar (benchmark children, whose stdout is data).
    pub fn quiet(quick: bool) -> Self {
        Self::new(quick, Progress::hidden())
    }

    /// Counts one finished measurement on the progress bar.
    pub fn tick(&self) {
        self.progress.tick();
    }

    /// Sets the progress bar's message (what runs now).
    pub fn status(&self, msg: String) {
        self.progress.status(msg);
    }

    /// Runs `f(ops)` (which must perform `ops` operations) once to warm up and then
    /// `reps` times; returns the medians per operation.
    pub fn measure(&self, ops: u64, mut f: impl FnMut(u64)) -> Timing {
        f(ops.div_ceil(4).max(1));
        let mut ns = Vec::with_capacity(self.reps);
        let mut cyc = Vec::with_capacity(self.reps);
        for _ in 0..self.reps {
            let p = phase(|| f(ops));
            ns.push(p.ns / ops as f64);
            if let Some(c) = p.cycles {
                cyc.push(c / ops as f64);
            }
        }
        self.tick();
        medians(ops, &mut ns, &mut cyc)
    }

    /// Like [`Ctx::measure`] for a run of two phases (say, allocate everything, then
    /// free everything): `f(ops)` returns the time of each phase; the medians per
    /// operation of each phase come back. The warm-up is one whole run.
    pub fn measure_phases(&self, ops: u64, mut f: impl FnMut(u64) -> [Phase; 2]) -> [Timing; 2] {
        f(ops);
        let mut ns = [Vec::new(), Vec::new()];
        let mut cyc = [Vec::new(), Vec::new()];
        for _ in 0..self.reps {
            let phases = f(ops);
            for i in 0..2 {
                ns[i].push(phases[i].ns / ops as f64);
                if let Some(c) = phases[i].cycles {
                    cyc[i].push(c / ops as f64);
                }
            }
        }
        self.tick();
        let [ns0, ns1] = &mut ns;
        let [cyc0, cyc1] = &mut cyc;
        [medians(ops, ns0, cyc0), medians(ops, ns1, cyc1)]
    }
}

/// The medians of per-operation samples (cycles only where every sample had them).
fn medians(ops: u64, ns: &mut [f64], cycles: &mut [f64]) -> Timing {
    Timing {
        ns: median(ns),
        cycles: (!cycles.is_empty()).then(|| median(cycles)),
        ops,
    }
}

/// The time one phase of a run took.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    pub ns: f64,
    pub cycles: Option<f64>,
}

/// Times `f` as one [`Phase`].
#[inline]
pub fn phase(f: impl FnOnce()) -> Phase {
    let c0 = rdtsc();
    let t0 = Instant::now();
    f();
    let ns = t0.elapsed().as_nanos() as f64;
    let c1 = rdtsc();
    Phase {
        ns,
        cycles: c0.zip(c1).map(|(a, b)| b.wrapping_sub(a) as f64),
    }
}

/// The median of `v` (sorted in place); NaN when `v` is empty.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The time-stamp counter, where there is one.
#[inline]
pub fn rdtsc() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC is available on every x86_64 CPU.
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// The TSC's frequency in GHz (three decimals), counted over 50 ms; 0 without a TSC.
pub fn tsc_ghz() -> f64 {
    let (Some(c0), t0) = (rdtsc(), Instant::now()) else {
        return 0.0;
    };
    while t0.elapsed() < Duration::from_millis(50) {
        std::hint::spin_loop();
    }
    let (c1, dt) = (rdtsc().unwrap_or(c0), t0.elapsed());
    let ghz = (c1 - c0) as f64 / dt.as_nanos() as f64;
    (ghz * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [7.0]), 7.0);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn measure_warms_up_then_repeats_and_counts_a_step() {
        let ctx = Ctx::quiet(true);
        assert_eq!(ctx.reps, 5);
        assert_eq!(Ctx::quiet(false).reps, 11);
        let mut calls = Vec::new();
        let t = ctx.measure(10, |n| calls.push(n));
        // A quarter-size warm-up, then `reps` full runs.
        assert_eq!(calls, [3, 10, 10, 10, 10, 10]);
        assert_eq!(t.ops, 10);
        assert!(t.ns >= 0.0 && t.ns.is_finite());
        assert_eq!(t.cycles.is_some(), rdtsc().is_some());
    }

    #[test]
    fn measure_phases_gives_the_median_per_operation_of_each_phase() {
        let ctx = Ctx::quiet(true);
        let mut run = 0.0;
        let [a, b] = ctx.measure_phases(4, |_| {
            run += 1.0;
            // Runs 2..=6 are measured: phase 0 takes 4 × run ns, phase 1 always 8 ns.
            [
                Phase {
                    ns: 4.0 * run,
                    cycles: Some(40.0),
                },
                Phase {
                    ns: 8.0,
                    cycles: None,
                },
            ]
        });
        assert_eq!(run, 6.0);
        assert_eq!((a.ns, a.cycles, a.ops), (4.0, Some(10.0), 4));
        assert_eq!((b.ns, b.cycles, b.ops), (2.0, None, 4));
    }
}
