//! `kmem bench`: the suite registry and the run of the named suites.
//!
//! The framework, a module per concern:
//! - [`timing`]: the measurement (warm-up, median of repetitions, ns and TSC cycles)
//!   and [`Ctx`], the state a run shares with its suites;
//! - [`record`]: [`BenchResult`], the row of the output contract, and the one JSON
//!   document of `--json`;
//! - [`table`]: the readable tables printed without `--json`;
//! - [`plot`]: the SVG charts of `--plot DIR`;
//! - [`progress`]: the progress bar on stderr;
//! - [`slab_test`]: Christoph Lameter's slab_test, shared by the `slab` and `debug`
//!   suites;
//! - [`peers`]: the allocators kmem is compared with;
//! - [`handoff`]: the queue the benches hand objects between threads through, which
//!   waits by spinning and yielding instead of sleeping;
//! - [`child`]: a suite's kmem part run in a child process, in another configuration
//!   (`percpu`'s modes and designs; `kmem[cpu-slab]`, the CPU-slab design, in
//!   `workloads`, `cache` and `slab`).
//!
//! The suites, a module each: `page`, `slab`, `cache`, `debug`, `memcg`, `percpu` (with
//! `percpu_memory`), `slabinfo`, `global`, `workloads`, `preload`. A suite is a
//! [`Suite`] value listed in [`SUITES`]; it measures through [`Ctx`] and returns
//! [`BenchResult`]s. A suite's part that runs in a child process is a [`Child`] value
//! listed in [`CHILDREN`].

pub mod cache;
pub mod child;
pub mod debug;
pub mod global;
pub mod handoff;
pub mod memcg;
pub mod page;
pub mod peers;
pub mod percpu;
pub mod plot;
pub mod preload;
pub mod progress;
pub mod record;
pub mod sizes;
pub mod slab;
pub mod slab_test;
pub mod slabinfo;
pub mod table;
pub mod timing;
pub mod workloads;

pub use child::Child;
pub use record::BenchResult;
pub use slab_test::{slab_test_lines, SlabTestNames};
pub use timing::{Ctx, Timing};

use progress::Progress;
use record::Machine;
use std::path::Path;

/// A suite: its name, how many measurements it makes (for the progress bar), the
/// function that runs it, and what it prints after its tables.
pub struct Suite {
    pub name: &'static str,
    pub steps: fn(bool) -> u64,
    pub run: fn(&Ctx) -> Vec<BenchResult>,
    /// The suite's own report, printed after the tables: the original benchmark's
    /// line format where the suite reproduces one, and ratios between allocators or
    /// modes.
    pub report_lines: fn(&[BenchResult]) -> String,
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
    workloads::SUITE,
    preload::SUITE,
];

/// The suites' parts that run in a benchmark child, by the name `kmem bench-child`
/// takes.
pub const CHILDREN: &[Child] = &[
    percpu::TIMES,
    percpu::HELD,
    workloads::CHILD,
    sizes::RSS[0],
    sizes::RSS[1],
    sizes::RSS[2],
    sizes::RSS[3],
    sizes::PHASE[0],
    sizes::PHASE[1],
    sizes::PHASE[2],
    sizes::PHASE[3],
    sizes::PHASE[4],
    sizes::PHASE[5],
    sizes::PHASE[6],
    sizes::PHASE[7],
    sizes::PHASE[8],
    sizes::PHASE[9],
    sizes::PHASE[10],
    sizes::PHASE[11],
    cache::CHILD,
    slab::CHILD,
    page::RSS[0],
    page::RSS[1],
    page::RSS[2],
    page::RSS[3],
];

/// The suites named (all when none is named), in the order named.
fn select(names: &[String]) -> Result<Vec<&'static Suite>, String> {
    if names.is_empty() {
        return Ok(SUITES.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            SUITES
                .iter()
                .find(|s| s.name == n)
                .ok_or_else(|| unknown_suite(n))
        })
        .collect()
}

#[cold]
fn unknown_suite(name: &str) -> String {
    let known: Vec<_> = SUITES.iter().map(|s| s.name).collect();
    format!("unknown suite '{name}' (suites: {})", known.join(", "))
}

/// Runs the named suites (all when none is named).
pub fn run(names: &[String], quick: bool, json: bool, plot: Option<&Path>) -> Result<(), String> {
    let suites = select(names)?;
    let machine = Machine::detect();
    let total: u64 = suites.iter().map(|s| (s.steps)(quick)).sum();
    let progress = Progress::start(total);
    let ctx = Ctx::new(quick, progress.clone());
    let mut all: Vec<(&Suite, Vec<BenchResult>)> = Vec::new();
    for suite in suites {
        ctx.status(suite.name.to_string());
        let results = (suite.run)(&ctx);
        all.push((suite, results));
    }
    progress.finish();

    if let Some(dir) = plot {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let note = table::header(machine, ctx.reps, quick);
        for (suite, results) in &all {
            let path = dir.join(format!("{}.svg", suite.name));
            plot::plot_suite(&path, suite.name, results, &note)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            eprintln!("kmem bench: wrote {}", path.display());
        }
    }

    if json {
        let runs: Vec<(&'static str, &[BenchResult])> =
            all.iter().map(|(s, rs)| (s.name, rs.as_slice())).collect();
        let doc = record::document(machine, &runs).map_err(|e| e.to_string())?;
        println!("{doc}");
    } else {
        println!("{}", table::header(machine, ctx.reps, quick));
        for (suite, results) in &all {
            print!("{}", table::table(suite.name, results));
            print!("{}", (suite.report_lines)(results));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_name_selects_every_suite_in_registry_order() {
        let all: Vec<_> = select(&[]).unwrap().iter().map(|s| s.name).collect();
        assert_eq!(
            all,
            [
                "page",
                "slab",
                "cache",
                "debug",
                "memcg",
                "percpu",
                "percpu_memory",
                "slabinfo",
                "global",
                "workloads",
                "preload"
            ]
        );
    }

    #[test]
    fn named_suites_run_in_the_order_named() {
        let names = ["slabinfo".to_string(), "page".to_string()];
        let picked: Vec<_> = select(&names).unwrap().iter().map(|s| s.name).collect();
        assert_eq!(picked, ["slabinfo", "page"]);
        let err = select(&["page".into(), "nosuch".into()]).err().unwrap();
        assert!(
            err.starts_with("unknown suite 'nosuch' (suites: page, slab,"),
            "{err}"
        );
    }
}
