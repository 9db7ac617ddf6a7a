//! The benchmark framework: timing (median of repetitions after a warm-up, in ns and
//! TSC cycles), the result records of the output contract, tables, one JSON document,
//! SVG charts, and a progress bar on stderr.

pub mod cache;
pub mod debug;
pub mod global;
pub mod memcg;
pub mod page;
pub mod peers;
pub mod percpu;
pub mod preload;
pub mod slab;
pub mod slabinfo;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// One figure (a row of the output contract).
#[derive(Serialize, Clone, Debug)]
pub struct BenchResult {
    /// Set only in a document that holds several suites.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suite: Option<&'static str>,
    pub bench: &'static str,
    pub allocator: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    pub param: u64,
    pub op: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycles: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
}

impl BenchResult {
    /// A time figure: `ns` and `cycles` per `op`, over `ops` operations per repetition.
    pub fn time(
        bench: &'static str,
        allocator: &'static str,
        param: u64,
        op: &'static str,
        t: Timing,
    ) -> Self {
        Self {
            suite: None,
            bench,
            allocator,
            mode: None,
            param,
            op,
            ns: Some(t.ns),
            cycles: t.cycles,
            ops: Some(t.ops),
            bytes: None,
            value: None,
        }
    }
    /// The same figure without `bytes` (for plain counts carried in `value`).
    pub fn without_bytes(mut self) -> Self {
        self.bytes = None;
        self
    }

    /// A memory figure.
    pub fn bytes(
        bench: &'static str,
        allocator: &'static str,
        param: u64,
        op: &'static str,
        bytes: u64,
    ) -> Self {
        Self {
            suite: None,
            bench,
            allocator,
            mode: None,
            param,
            op,
            ns: None,
            cycles: None,
            ops: None,
            bytes: Some(bytes),
            value: None,
        }
    }
}

/// What one measurement gives: medians per operation.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub ns: f64,
    pub cycles: Option<f64>,
    pub ops: u64,
}

/// The machine line of the JSON document.
#[derive(Serialize, Clone, Copy, Debug)]
pub struct Machine {
    pub cpus: usize,
    pub tsc_ghz: f64,
}

#[derive(Serialize)]
struct Document<'a> {
    suite: &'a str,
    machine: Machine,
    results: &'a [BenchResult],
}

/// Shared state of one run.
pub struct Ctx {
    pub quick: bool,
    pub reps: usize,
    progress: ProgressBar,
}

impl Ctx {
    /// A context without a progress bar (benchmark children, whose stdout is data).
    pub fn quiet(quick: bool) -> Self {
        Ctx {
            quick,
            reps: if quick { 5 } else { 11 },
            progress: ProgressBar::hidden(),
        }
    }

    /// Counts one finished measurement on the progress bar.
    pub fn tick(&self) {
        self.progress.inc(1);
    }

    /// Sets the progress bar's message (what runs now).
    pub fn status(&self, msg: String) {
        self.progress.set_message(msg);
    }

    /// Runs `f(ops)` (which must perform `ops` operations) once to warm up and then
    /// `reps` times; returns the medians per operation.
    pub fn measure(&self, ops: u64, mut f: impl FnMut(u64)) -> Timing {
        f(ops.div_ceil(4).max(1));
        let mut ns = Vec::with_capacity(self.reps);
        let mut cyc = Vec::with_capacity(self.reps);
        for _ in 0..self.reps {
            let c0 = rdtsc();
            let t0 = Instant::now();
            f(ops);
            let dt = t0.elapsed();
            let c1 = rdtsc();
            ns.push(dt.as_nanos() as f64 / ops as f64);
            if let (Some(a), Some(b)) = (c0, c1) {
                cyc.push(b.wrapping_sub(a) as f64 / ops as f64);
            }
        }
        self.tick();
        Timing {
            ns: median(&mut ns),
            cycles: (!cyc.is_empty()).then(|| median(&mut cyc)),
            ops,
        }
    }
}

impl Ctx {
    /// Like [`Ctx::measure`] for a run of two phases (say, allocate everything, then
    /// free everything): `f(ops)` returns the time of each phase; the medians per
    /// operation of each phase come back.
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
        let mut out = [Timing {
            ns: 0.0,
            cycles: None,
            ops,
        }; 2];
        for i in 0..2 {
            out[i].ns = median(&mut ns[i]);
            out[i].cycles = (!cyc[i].is_empty()).then(|| median(&mut cyc[i]));
        }
        out
    }
}

impl Ctx {
    /// slab_test's test 1 shape: `rounds` times, fill `ptrs` with `alloc()`, then give
    /// them all to `free`; medians per allocation and per free, timed apart.
    pub fn alloc_then_free(
        &self,
        rounds: u64,
        ptrs: &mut [*mut u8],
        mut alloc: impl FnMut() -> *mut u8,
        mut free: impl FnMut(*mut u8),
    ) -> [Timing; 2] {
        self.measure_phases(ptrs.len() as u64 * rounds, |_| {
            let mut acc = [Phase {
                ns: 0.0,
                cycles: Some(0.0),
            }; 2];
            for _ in 0..rounds {
                let pa = phase(|| {
                    for p in ptrs.iter_mut() {
                        *p = alloc();
                    }
                });
                let pf = phase(|| {
                    for &p in ptrs.iter() {
                        free(std::hint::black_box(p));
                    }
                });
                for (a, p) in acc.iter_mut().zip([pa, pf]) {
                    a.ns += p.ns;
                    a.cycles = a.cycles.zip(p.cycles).map(|(x, y)| x + y);
                }
            }
            acc
        })
    }
}

/// The names slab_test prints for one allocator interface.
pub struct SlabTestNames {
    /// "Kmalloc" / "Kmem_cache".
    pub title: &'static str,
    /// "kmalloc" / "kmem_cache_alloc".
    pub alloc: &'static str,
    /// "kfree" / "kmem_cache_free".
    pub free: &'static str,
}

/// slab_test's report (seed 000) for one allocator: test 1 (`then_free(size)` gives
/// the cycles per allocation and per free) and test 2 (`pair(size)`, per pair).
pub fn slab_test_lines(
    out: &mut String,
    who: &str,
    names: &SlabTestNames,
    sizes: &[u64],
    then_free: impl Fn(u64) -> (f64, f64),
    pair: impl Fn(u64) -> f64,
) {
    let SlabTestNames { title, alloc, free } = names;
    let _ = writeln!(out, "\n{who}: Single thread testing");
    let _ = writeln!(out, "1. {title}: Repeatedly allocate then free test");
    for &size in sizes {
        let (a, f) = then_free(size);
        let _ = writeln!(
            out,
            "10000 times {alloc}({size}) -> {a:.0} cycles {free} -> {f:.0} cycles"
        );
    }
    let _ = writeln!(out, "2. {title}: alloc/free test");
    for &size in sizes {
        let _ = writeln!(
            out,
            "10000 times {alloc}({size})/{free} -> {:.0} cycles",
            pair(size)
        );
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

fn median(v: &mut [f64]) -> f64 {
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

fn tsc_ghz() -> f64 {
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

/// A suite: its name, how many measurements it makes (for the progress bar), the
/// function that runs it, and how each bench's table reads.
pub struct Suite {
    pub name: &'static str,
    pub steps: fn(bool) -> u64,
    pub run: fn(&Ctx) -> Vec<BenchResult>,
    /// Extra lines in the seed's own format, printed after the tables.
    pub seed_lines: fn(&[BenchResult]) -> String,
}

pub const SUITES: &[Suite] = &[
    page::SUITE,
    slab::SUITE,
    cache::SUITE,
    debug::SUITE,
    memcg::SUITE,
    percpu::SUITE,
    percpu::MEMORY,
    slabinfo::SUITE,
    global::SUITE,
    preload::SUITE,
];

/// Runs the named suites (all when none is named).
pub fn run(names: &[String], quick: bool, json: bool, plot: Option<&Path>) -> Result<(), String> {
    let suites: Vec<&Suite> = if names.is_empty() {
        SUITES.iter().collect()
    } else {
        names
            .iter()
            .map(|n| {
                SUITES.iter().find(|s| s.name == n).ok_or_else(|| {
                    let known: Vec<_> = SUITES.iter().map(|s| s.name).collect();
                    format!("unknown suite '{n}' (suites: {})", known.join(", "))
                })
            })
            .collect::<Result<_, _>>()?
    };
    let machine = Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        tsc_ghz: tsc_ghz(),
    };
    let total: u64 = suites.iter().map(|s| (s.steps)(quick)).sum();
    let progress = ProgressBar::new(total);
    progress.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // indicatif draws only on a terminal; hold it back for the first second.
    progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    let started = Instant::now();
    let ctx = Ctx {
        quick,
        reps: if quick { 5 } else { 11 },
        progress: progress.clone(),
    };
    let ticker = {
        let progress = progress.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(1));
            if !progress.is_finished() && started.elapsed() >= Duration::from_secs(1) {
                progress.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            }
        })
    };
    let mut all: Vec<(&Suite, Vec<BenchResult>)> = Vec::new();
    for suite in &suites {
        ctx.status(suite.name.to_string());
        let results = (suite.run)(&ctx);
        all.push((suite, results));
    }
    progress.finish_and_clear();
    drop(ticker);

    if let Some(dir) = plot {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (suite, results) in &all {
            let path = dir.join(format!("{}.svg", suite.name));
            plot_suite(&path, suite.name, results)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            eprintln!("kmem bench: wrote {}", path.display());
        }
    }

    if json {
        let doc = if all.len() == 1 {
            serde_json::to_string_pretty(&Document {
                suite: all[0].0.name,
                machine,
                results: &all[0].1,
            })
        } else {
            let merged: Vec<BenchResult> = all
                .iter()
                .flat_map(|(s, rs)| {
                    rs.iter().cloned().map(move |mut r| {
                        r.suite = Some(s.name);
                        r
                    })
                })
                .collect();
            serde_json::to_string_pretty(&Document {
                suite: "all",
                machine,
                results: &merged,
            })
        }
        .map_err(|e| e.to_string())?;
        println!("{doc}");
    } else {
        println!(
            "kmem bench: {} CPUs, TSC {:.3} GHz, median of {} repetitions{}",
            machine.cpus,
            machine.tsc_ghz,
            ctx.reps,
            if quick { " (quick)" } else { "" }
        );
        for (suite, results) in &all {
            print!("{}", table(suite.name, results));
            print!("{}", (suite.seed_lines)(results));
        }
    }
    Ok(())
}

/// A readable table per bench: one row per param, one column per allocator (and mode).
pub fn table(suite: &str, results: &[BenchResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\n== suite {suite} ==");
    let mut benches: Vec<&'static str> = Vec::new();
    for r in results {
        if !benches.contains(&r.bench) {
            benches.push(r.bench);
        }
    }
    for bench in benches {
        let rows: Vec<&BenchResult> = results.iter().filter(|r| r.bench == bench).collect();
        let mut cols: Vec<String> = Vec::new();
        for r in &rows {
            let c = column(r);
            if !cols.contains(&c) {
                cols.push(c);
            }
        }
        let is_mib = rows.iter().any(|r| r.bytes.is_some_and(|b| b >= 1 << 20));
        let timed = rows[0].ns.is_some();
        let unit = if timed && rows.iter().any(|r| r.op != rows[0].op) {
            "ns per op".to_string()
        } else if timed {
            format!("ns per {}", rows[0].op)
        } else if is_mib {
            "MiB".to_string()
        } else {
            "count / bytes".to_string()
        };
        let _ = writeln!(out, "\n{bench} ({unit})");
        let _ = write!(out, "{:>12}", "param/op");
        for c in &cols {
            let _ = write!(out, " {c:>20}");
        }
        let _ = writeln!(out);
        let mut keys: Vec<(u64, &'static str)> = Vec::new();
        for r in &rows {
            if !keys.contains(&(r.param, r.op)) {
                keys.push((r.param, r.op));
            }
        }
        for (param, op) in keys {
            let several_ops = rows.iter().any(|r| r.op != rows[0].op);
            let label = if timed && !several_ops {
                param.to_string()
            } else {
                format!("{param} {op}")
            };
            let _ = write!(out, "{label:>12}");
            for c in &cols {
                let cell = rows
                    .iter()
                    .find(|r| r.param == param && r.op == op && &column(r) == c)
                    .map(|r| match (r.ns, r.cycles, r.bytes, r.value) {
                        (Some(ns), _, _, _) if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
                        (Some(ns), Some(cy), _, _) => format!("{ns:.1} ns {cy:.0} cyc"),
                        (Some(ns), None, _, _) => format!("{ns:.1} ns"),
                        (_, _, _, Some(v)) => format!("{v}"),
                        (_, _, Some(b), _) if is_mib => {
                            format!("{:.1}", b as f64 / (1 << 20) as f64)
                        }
                        (_, _, Some(b), _) => format!("{b} B"),
                        _ => "-".into(),
                    })
                    .unwrap_or_else(|| "-".into());
                let _ = write!(out, " {cell:>20}");
            }
            let _ = writeln!(out);
        }
    }
    out
}

fn column(r: &BenchResult) -> String {
    match &r.mode {
        Some(m) => format!("{}[{m}]", r.allocator),
        None => r.allocator.to_string(),
    }
}

/// One SVG per suite: a panel per bench, a line per allocator.
pub fn plot_suite(path: &Path, suite: &str, results: &[BenchResult]) -> Result<(), String> {
    use plotters::prelude::*;
    let mut benches: Vec<&'static str> = Vec::new();
    for r in results {
        if !benches.contains(&r.bench) {
            benches.push(r.bench);
        }
    }
    if benches.is_empty() {
        return Err("no results to plot".into());
    }
    let root = SVGBackend::new(path, (900, 320 * benches.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((benches.len(), 1));
    for (panel, bench) in panels.iter().zip(&benches) {
        let rows: Vec<&BenchResult> = results.iter().filter(|r| r.bench == *bench).collect();
        // X positions: the distinct (param, op) pairs in order.
        let mut keys: Vec<(u64, &'static str)> = Vec::new();
        for r in &rows {
            if !keys.contains(&(r.param, r.op)) {
                keys.push((r.param, r.op));
            }
        }
        let is_bytes = rows[0].ns.is_none();
        let y_of = |r: &BenchResult| -> f64 {
            match (r.ns, r.value, r.bytes) {
                (Some(ns), _, _) => ns,
                (_, Some(v), _) => v,
                (_, _, Some(b)) if b >= 1 << 20 => b as f64 / (1 << 20) as f64,
                (_, _, Some(b)) => b as f64,
                _ => 0.0,
            }
        };
        let ymax = rows
            .iter()
            .map(|r| y_of(r))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.15;
        let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for r in &rows {
            let x = keys.iter().position(|k| *k == (r.param, r.op)).unwrap_or(0) as f64;
            series.entry(column(r)).or_default().push((x, y_of(r)));
        }
        let ylabel = if !is_bytes {
            format!("ns per {}", rows[0].op)
        } else if rows.iter().any(|r| r.bytes.is_some_and(|b| b >= 1 << 20)) {
            "MiB".to_string()
        } else {
            "count / bytes".to_string()
        };
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{suite}: {bench}"), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(-0.3f64..(keys.len() as f64 - 0.7), 0f64..ymax)
            .map_err(|e| e.to_string())?;
        let key_labels = keys.clone();
        chart
            .configure_mesh()
            .x_labels(keys.len().max(2))
            .x_label_formatter(&move |x| {
                let i = x.round();
                if (x - i).abs() > 0.01 || i < 0.0 {
                    return String::new();
                }
                key_labels
                    .get(i as usize)
                    .map(|(p, op)| {
                        if is_bytes {
                            op.to_string()
                        } else {
                            p.to_string()
                        }
                    })
                    .unwrap_or_default()
            })
            .y_desc(ylabel)
            .draw()
            .map_err(|e| e.to_string())?;
        for (name, pts) in series.into_iter() {
            // The same colour for an allocator in every panel.
            let slot = ["kmem", "system", "mimalloc", "jemalloc"]
                .iter()
                .position(|a| name.starts_with(a))
                .unwrap_or(4 + name.len() % 8);
            let color = Palette99::pick(slot).to_rgba();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<BenchResult> {
        let t = Timing {
            ns: 12.25,
            cycles: Some(31.0),
            ops: 10_000,
        };
        vec![
            BenchResult::time("page_pcp", "kmem", 0, "pair", t),
            BenchResult::time("page_pcp", "system", 0, "pair", Timing { ns: 40.0, ..t }),
            BenchResult::time("page_pcp", "kmem", 1, "pair", t),
            BenchResult::bytes("page_rss", "kmem", 1024, "before", 8 << 20),
            BenchResult::bytes("page_rss", "kmem", 1024, "after", 9 << 20),
        ]
    }

    #[test]
    fn json_follows_the_output_contract() {
        let results = sample();
        let doc = Document {
            suite: "page",
            machine: Machine {
                cpus: 2,
                tsc_ghz: 2.6,
            },
            results: &results,
        };
        let v: serde_json::Value = serde_json::to_value(&doc).unwrap();
        assert_eq!(v["suite"], "page");
        assert_eq!(v["machine"]["cpus"], 2);
        let r0 = &v["results"][0];
        assert_eq!(r0["bench"], "page_pcp");
        assert_eq!(r0["allocator"], "kmem");
        assert_eq!(r0["param"], 0);
        assert_eq!(r0["op"], "pair");
        assert_eq!(r0["ns"], 12.25);
        assert_eq!(r0["cycles"], 31.0);
        assert_eq!(r0["ops"], 10_000);
        // Absent figures are left out, not null.
        assert!(r0.get("bytes").is_none() && r0.get("mode").is_none() && r0.get("suite").is_none());
        let rss = &v["results"][3];
        assert_eq!(rss["bytes"], 8 << 20);
        assert!(rss.get("ns").is_none());
    }

    #[test]
    fn table_has_a_row_per_param_and_a_column_per_allocator() {
        let t = table("page", &sample());
        assert!(t.contains("page_pcp (ns per pair)"), "{t}");
        let header = t.lines().find(|l| l.contains("param/op")).unwrap();
        assert!(header.contains("kmem") && header.contains("system"));
        let row0 = t
            .lines()
            .find(|l| l.trim_start().starts_with("0 "))
            .unwrap();
        assert!(
            row0.contains("12.2 ns 31 cyc") && row0.contains("40.0 ns"),
            "{row0}"
        );
        // A param without a system figure shows a dash.
        let row1 = t
            .lines()
            .find(|l| l.trim_start().starts_with("1 "))
            .unwrap();
        assert!(row1.contains('-'), "{row1}");
        assert!(t.contains("page_rss (MiB)"));
        assert!(t.contains("1024 before") && t.contains("8.0"));
    }

    #[test]
    fn plot_writes_an_svg_panel_per_bench() {
        let dir = std::env::temp_dir().join(format!("kmem-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("page.svg");
        plot_suite(&path, "page", &sample()).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("page: page_pcp") && svg.contains("page: page_rss"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
