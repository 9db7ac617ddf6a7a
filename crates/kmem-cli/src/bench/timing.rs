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

/// Of several passes' figures of one contestant (an odd number), the pass whose median
/// time is the median of theirs (the lower middle of an even count).
pub fn median_pass(passes: &mut [Timing]) -> Timing {
    passes.sort_by(|a, b| a.ns.total_cmp(&b.ns));
    passes[(passes.len() - 1) / 2]
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

    /// Like [`Ctx::measure`] for `n` contestants timed against each other (peers on
    /// the same workload): `f(i, ops)` runs contestant `i`. The repetitions are
    /// interleaved, one of each contestant in turn, the first of each turn rotating,
    /// so that every contestant's median is taken over the same stretch of time: on
    /// a shared VM whose speed moves for seconds at a time, contestants measured one
    /// block after another saw different speeds, and their ratio moved by 2x between
    /// runs. Each repetition is preceded by a quarter-size warm-up of the same
    /// contestant, untimed, so it starts from its own state rather than from the
    /// caches the one before it left. Returns the medians per operation, by index.
    pub fn measure_interleaved(
        &self,
        ops: u64,
        n: usize,
        mut f: impl FnMut(usize, u64),
    ) -> Vec<Timing> {
        let warm = ops.div_ceil(4).max(1);
        let mut ns = vec![Vec::with_capacity(self.reps); n];
        let mut cyc = vec![Vec::with_capacity(self.reps); n];
        for rep in 0..self.reps {
            for k in 0..n {
                let i = (rep + k) % n;
                f(i, warm);
                let p = phase(|| f(i, ops));
                ns[i].push(p.ns / ops as f64);
                if let Some(c) = p.cycles {
                    cyc[i].push(c / ops as f64);
                }
            }
        }
        (0..n)
            .map(|i| {
                self.tick();
                medians(ops, &mut ns[i], &mut cyc[i])
            })
            .collect()
    }

    /// [`Ctx::measure_phases`] for `n` contestants taking turns, as
    /// [`Ctx::measure_interleaved`] has them, except that each is warmed up once, with
    /// a whole run, before the first turn: a run of these is a whole workload (built,
    /// churned, torn down), and a warm-up before every turn would double the suite's
    /// time. Its first operations meet the caches the contestant before it left, the
    /// same for every contestant as the turns rotate. Returns each contestant's two
    /// phase medians, by index.
    pub fn measure_phases_interleaved(
        &self,
        ops: u64,
        n: usize,
        mut f: impl FnMut(usize, u64) -> [Phase; 2],
    ) -> Vec<[Timing; 2]> {
        for i in 0..n {
            f(i, ops);
        }
        let mut ns = vec![[Vec::new(), Vec::new()]; n];
        let mut cyc = vec![[Vec::new(), Vec::new()]; n];
        for rep in 0..self.reps {
            for k in 0..n {
                let i = (rep + k) % n;
                let phases = f(i, ops);
                for p in 0..2 {
                    ns[i][p].push(phases[p].ns / ops as f64);
                    if let Some(c) = phases[p].cycles {
                        cyc[i][p].push(c / ops as f64);
                    }
                }
            }
        }
        ns.iter_mut()
            .zip(cyc.iter_mut())
            .map(|([ns0, ns1], [cyc0, cyc1])| {
                self.tick();
                [medians(ops, ns0, cyc0), medians(ops, ns1, cyc1)]
            })
            .collect()
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

/// The TSC's frequency and where the figure comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TscFreq {
    /// GHz, three decimals; 0 without a TSC.
    pub ghz: f64,
    /// `cpuid-0x15` (the CPU's TSC/crystal ratio and crystal frequency),
    /// `cpuid-0x40000010` (the hypervisor's TSC frequency), `calibrated` (counted
    /// against the monotonic clock over [`CALIBRATION`]) or `none`.
    pub source: &'static str,
}

/// How long the TSC is counted against the clock when the CPU does not state its rate.
pub const CALIBRATION: Duration = Duration::from_millis(250);

/// The TSC's frequency: what the CPU states where it states it exactly, else counted.
///
/// The CPU states it in CPUID leaf 0x15 (Intel since Skylake: TSC = crystal × EBX/EAX,
/// used when the crystal frequency ECX is given) or, under a hypervisor that offers it,
/// leaf 0x40000010 (EAX: TSC kHz). Anywhere else (AMD, most VMs, ARM has no TSC here) it
/// is counted: the TSC against `Instant` over 250 ms, each end read as the tightest of
/// five TSC–clock–TSC brackets, so one preemption or a slow clock read moves the figure
/// by parts per million. The nominal frequency of the brand string ("@ 2.60GHz") or of
/// leaf 0x16 is not used: it is rounded, absent on AMD and in many VMs, and under a
/// hypervisor it names the host's part, not the rate the guest's TSC runs at (Linux
/// calibrates the same way and prints its figure as "tsc: Detected … MHz").
pub fn tsc_freq() -> TscFreq {
    if rdtsc().is_none() {
        return TscFreq {
            ghz: 0.0,
            source: "none",
        };
    }
    if let Some((hz, source)) = cpuid_tsc_hz() {
        return TscFreq {
            ghz: round3(hz / 1e9),
            source,
        };
    }
    TscFreq {
        ghz: round3(calibrate(CALIBRATION)),
        source: "calibrated",
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The TSC rate the CPU (or its hypervisor) states, in Hz, and the leaf it came from.
fn cpuid_tsc_hz() -> Option<(f64, &'static str)> {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__cpuid;
        // SAFETY: CPUID exists on every x86_64 CPU; a leaf above the maximum returns
        // data of the highest basic leaf, never faults (the maximum is checked anyway).
        #[allow(unused_unsafe)]
        let leaf = |l: u32| unsafe { __cpuid(l) };
        if leaf(0).eax >= 0x15 {
            let r = leaf(0x15);
            if r.eax != 0 && r.ebx != 0 && r.ecx != 0 {
                let hz = r.ecx as f64 * r.ebx as f64 / r.eax as f64;
                return Some((hz, "cpuid-0x15"));
            }
        }
        // A hypervisor sets CPUID.1:ECX bit 31 and answers leaves 0x40000000 on.
        if leaf(1).ecx & (1 << 31) != 0 && leaf(0x4000_0000).eax >= 0x4000_0010 {
            let khz = leaf(0x4000_0010).eax;
            if khz != 0 {
                return Some((khz as f64 * 1e3, "cpuid-0x40000010"));
            }
        }
        None
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// The TSC counted against the monotonic clock over `window`, in GHz.
fn calibrate(window: Duration) -> f64 {
    let (c0, t0) = tsc_at_now();
    // The TSC is invariant (it keeps its rate through sleep states), so the window
    // can sleep instead of spinning on a shared machine.
    std::thread::sleep(window);
    let (c1, t1) = tsc_at_now();
    c1.wrapping_sub(c0) as f64 / (t1 - t0).as_nanos() as f64
}

/// A clock reading and the TSC at the same moment: of five TSC–clock–TSC brackets,
/// the tightest, with the TSC at its middle.
fn tsc_at_now() -> (u64, Instant) {
    let mut best: Option<(u64, u64, Instant)> = None;
    for _ in 0..5 {
        let a = rdtsc().unwrap_or(0);
        let t = Instant::now();
        let b = rdtsc().unwrap_or(0);
        let width = b.wrapping_sub(a);
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, a.wrapping_add(width / 2), t));
        }
    }
    let (_, c, t) = best.expect("five samples");
    (c, t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_pass_is_neither_the_best_nor_the_worst() {
        let t = |ns| Timing {
            ns,
            cycles: None,
            ops: 1,
        };
        let mut passes = [t(5.0), t(1.0), t(9.0)];
        assert_eq!(median_pass(&mut passes).ns, 5.0);
        let mut two = [t(4.0), t(2.0)];
        assert_eq!(median_pass(&mut two).ns, 2.0);
    }

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
    fn measure_interleaved_takes_turns_and_warms_each_turn() {
        let ctx = Ctx::quiet(true);
        let mut calls = Vec::new();
        let t = ctx.measure_interleaved(8, 3, |i, n| calls.push((i, n)));
        // Each repetition: every contestant once, a warm-up (2) before its timed run
        // (8), the first of the turn rotating 0, 1, 2, 0, 1.
        let firsts: Vec<usize> = calls.chunks(6).map(|turn| turn[0].0).collect();
        assert_eq!(firsts, [0, 1, 2, 0, 1]);
        for turn in calls.chunks(6) {
            let mut who: Vec<usize> = turn.iter().step_by(2).map(|c| c.0).collect();
            who.sort();
            assert_eq!(who, [0, 1, 2]);
            for pair in turn.chunks(2) {
                assert_eq!((pair[0].1, pair[1].1), (2, 8));
                assert_eq!(pair[0].0, pair[1].0);
            }
        }
        assert_eq!(calls.len(), 5 * 3 * 2);
        assert_eq!(t.len(), 3);
        assert!(t.iter().all(|t| t.ops == 8 && t.ns.is_finite()));
    }

    #[test]
    fn measure_interleaved_keeps_each_contestant_s_own_median() {
        let ctx = Ctx::quiet(true);
        // Contestant i's every run spins i * 200 µs: the medians keep their order
        // whatever the interleaving.
        let t = ctx.measure_interleaved(1, 3, |i, _| {
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_micros(200 * i as u64) {}
        });
        assert!(t[0].ns < t[1].ns && t[1].ns < t[2].ns, "{t:?}");
        assert!(t[2].ns >= 400_000.0, "{t:?}");
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

    #[test]
    fn measure_phases_interleaved_warms_each_once_then_takes_turns() {
        let ctx = Ctx::quiet(true);
        let mut calls = Vec::new();
        let t = ctx.measure_phases_interleaved(4, 2, |i, n| {
            calls.push(i);
            assert_eq!(n, 4);
            // Contestant i's phase 0 takes 4 × (i + 1) ns, phase 1 always 8 ns.
            [
                Phase {
                    ns: 4.0 * (i + 1) as f64,
                    cycles: Some(40.0),
                },
                Phase {
                    ns: 8.0,
                    cycles: None,
                },
            ]
        });
        // One warm-up each, then five turns whose first alternates.
        assert_eq!(calls, [0, 1, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1]);
        assert_eq!(t.len(), 2);
        assert_eq!((t[0][0].ns, t[0][0].cycles), (1.0, Some(10.0)));
        assert_eq!((t[1][0].ns, t[1][1].ns, t[1][1].cycles), (2.0, 2.0, None));
    }

    #[test]
    fn the_tsc_frequency_names_its_source() {
        let f = tsc_freq();
        if rdtsc().is_none() {
            assert_eq!(
                f,
                TscFreq {
                    ghz: 0.0,
                    source: "none"
                }
            );
            return;
        }
        assert!(
            ["cpuid-0x15", "cpuid-0x40000010", "calibrated"].contains(&f.source),
            "{f:?}"
        );
        assert!((0.1..20.0).contains(&f.ghz), "{f:?}");
        // Counting over a short window lands within a few percent of the figure.
        let counted = calibrate(Duration::from_millis(20));
        assert!((counted / f.ghz - 1.0).abs() < 0.05, "{counted} vs {f:?}");
    }
}
