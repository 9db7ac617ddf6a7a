//! Benchmark children: a suite's kmem part measured in another process, whose heap
//! starts in another configuration.
//!
//! kmem reads its configuration (`KMEM_SLUB`, `KMEM_PERCPU`, …) once, when its heap
//! starts, so a second configuration in one run needs a second process. The parent
//! runs `kmem bench-child <what> [--quick]` with the configuration in the child's
//! environment ([`run`]); the child measures kmem alone with a quiet [`Ctx`] and
//! prints its rows as one JSON array on stdout ([`child_main`]); the parent reads them
//! back and labels them with a mode (`percpu`: `kmem[cpu-rseq/cpu-slab]`; [`cpu_slab`]:
//! `kmem[cpu-slab]`, kmem in the slab layer's CPU-slab design, beside the in-process
//! `kmem`, which runs sheaves, the default).

use super::{BenchResult, Ctx, CHILDREN};
use std::sync::Mutex;

/// A suite's part that runs in a benchmark child.
#[derive(Clone, Copy)]
pub struct Child {
    /// What `kmem bench-child` is told to run.
    pub what: &'static str,
    /// The measurements, made in the child: kmem only, allocator `kmem`.
    pub measure: fn(&Ctx) -> Vec<BenchResult>,
    /// How many steps of the parent's progress bar the child stands for.
    pub steps: fn(bool) -> u64,
}

/// The mode of kmem's rows in the CPU-slab design (`KMEM_SLUB=cpu-slab`), measured in
/// a child: allocator `kmem`, as the output contract wants.
pub const CPU_SLAB_MODE: &str = "cpu-slab";

/// The column of those rows (`BenchResult::column`).
pub const KMEM_CPU_SLAB: &str = "kmem[cpu-slab]";

/// `r` as a row of kmem in the CPU-slab design.
pub fn in_cpu_slab(r: BenchResult) -> BenchResult {
    BenchResult {
        allocator: "kmem",
        mode: Some(CPU_SLAB_MODE.to_string()),
        ..r
    }
}

/// Whether `r` is a row of kmem in the CPU-slab design.
pub fn is_cpu_slab(r: &BenchResult) -> bool {
    r.allocator == "kmem" && r.mode.as_deref() == Some(CPU_SLAB_MODE)
}

/// The slab designs, as `KMEM_SLUB` spells them: the default first.
pub const DESIGNS: [&str; 2] = ["sheaves", "cpu-slab"];

/// The child's side: runs `what` in this process's configuration and prints the JSON
/// rows on stdout.
pub fn child_main(what: &str, quick: bool) -> Result<(), String> {
    let child = CHILDREN.iter().find(|c| c.what == what).ok_or_else(|| {
        let known: Vec<_> = CHILDREN.iter().map(|c| c.what).collect();
        format!(
            "unknown child bench '{what}' (children: {})",
            known.join(", ")
        )
    })?;
    let rows = (child.measure)(&Ctx::quiet(quick));
    println!(
        "{}",
        serde_json::to_string(&rows).map_err(|e| e.to_string())?
    );
    Ok(())
}

/// Runs `child` in a process with `env` set (`label` names it in messages) and reads
/// its rows back (allocator `kmem`, no mode). Ticks the child's steps, also when it
/// fails; a failed child is reported on stderr and gives no rows.
pub fn run(ctx: &Ctx, child: &Child, env: &[(&str, &str)], label: &str) -> Vec<BenchResult> {
    ctx.status(format!("{} in {label} (child)", child.what));
    let exe = std::env::current_exe().expect("the kmem executable");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["bench-child", child.what])
        .envs(env.iter().copied());
    if ctx.quick {
        cmd.arg("--quick");
    }
    let out = cmd.output();
    for _ in 0..(child.steps)(ctx.quick) {
        ctx.tick();
    }
    let out = match out {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            eprintln!(
                "kmem bench: the {} child in {label} failed ({}): {}",
                child.what,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim_end()
            );
            return Vec::new();
        }
        Err(e) => {
            eprintln!(
                "kmem bench: the {} child in {label} did not run: {e}",
                child.what
            );
            return Vec::new();
        }
    };
    match serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout) {
        Ok(rows) => rows.iter().filter_map(parse).collect(),
        Err(e) => {
            eprintln!(
                "kmem bench: the {} child in {label} printed no rows: {e}",
                child.what
            );
            Vec::new()
        }
    }
}

/// `child`'s rows in the CPU-slab design, in column [`KMEM_CPU_SLAB`]. The
/// in-process `kmem` they stand beside runs the design of this process (sheaves
/// unless `KMEM_SLUB` says otherwise: then a note says so).
pub fn cpu_slab(ctx: &Ctx, child: &Child) -> Vec<BenchResult> {
    if kmem::heap().config().slub != kmem::config::SlubDesign::Sheaves {
        eprintln!(
            "kmem bench: KMEM_SLUB=cpu-slab in this process: its kmem column runs the \
             CPU-slab design as well"
        );
    }
    run(ctx, child, &[("KMEM_SLUB", "cpu-slab")], "design cpu-slab")
        .into_iter()
        .map(in_cpu_slab)
        .collect()
}

/// `results` with kmem's rows first, then [`KMEM_CPU_SLAB`]'s, then the others, each
/// group in its own order: tables and reports show the CPU-slab design beside kmem.
pub fn beside_kmem(mut results: Vec<BenchResult>) -> Vec<BenchResult> {
    results.sort_by_key(|r| match r.allocator {
        _ if is_cpu_slab(r) => 1,
        "kmem" => 0,
        _ => 2,
    });
    results
}

/// A row the child printed (its names become `'static` through [`intern`]).
fn parse(r: &serde_json::Value) -> Option<BenchResult> {
    let name = |k: &str| r[k].as_str().map(intern);
    let mut row = BenchResult::bytes(
        name("bench")?,
        name("allocator")?,
        r["param"].as_u64()?,
        name("op")?,
        0,
    );
    row.mode = r["mode"].as_str().map(str::to_string);
    row.ns = r["ns"].as_f64();
    row.cycles = r["cycles"].as_f64();
    row.ops = r["ops"].as_u64();
    row.bytes = r["bytes"].as_u64();
    row.value = r["value"].as_f64();
    Some(row)
}

/// `s` as a `'static` string: each distinct name is leaked once (a run reads a few
/// dozen).
fn intern(s: &str) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&n) = names.iter().find(|&&n| n == s) {
        return n;
    }
    let n: &'static str = Box::leak(s.to_owned().into_boxed_str());
    names.push(n);
    n
}

#[cfg(test)]
mod tests {
    use super::super::timing::Timing;
    use super::*;

    #[test]
    fn rows_come_back_as_the_child_printed_them() {
        let t = Timing {
            ns: 12.25,
            cycles: Some(31.0),
            ops: 1000,
        };
        let rows = vec![
            BenchResult::time("larson", "kmem", 2, "op", t),
            BenchResult::bytes("held_after_threads", "kmem", 64, "held", 4096),
        ];
        let json: Vec<serde_json::Value> =
            serde_json::from_str(&serde_json::to_string(&rows).unwrap()).unwrap();
        let back: Vec<BenchResult> = json.iter().filter_map(parse).collect();
        assert_eq!(back.len(), 2);
        let (a, b) = (&back[0], &back[1]);
        assert_eq!(
            (a.bench, a.allocator, a.param, a.op),
            ("larson", "kmem", 2, "op")
        );
        assert_eq!(
            (a.ns, a.cycles, a.ops, a.bytes),
            (Some(12.25), Some(31.0), Some(1000), None)
        );
        assert_eq!(
            (b.bench, b.op, b.bytes, b.ns),
            ("held_after_threads", "held", Some(4096), None)
        );
        assert!(a.mode.is_none() && a.value.is_none());
        // The same name is the same static string.
        assert!(std::ptr::eq(intern("larson"), a.bench));
    }

    #[test]
    fn kmem_cpu_slab_goes_beside_kmem() {
        let t = Timing {
            ns: 1.0,
            cycles: None,
            ops: 1,
        };
        let rows = vec![
            BenchResult::time("a", "kmem", 1, "op", t),
            BenchResult::time("a", "system", 1, "op", t),
            BenchResult::time("b", "kmem", 1, "op", t),
            BenchResult::time("b", "system", 1, "op", t),
            in_cpu_slab(BenchResult::time("a", "kmem", 1, "op", t)),
            in_cpu_slab(BenchResult::time("b", "kmem", 1, "op", t)),
        ];
        let order: Vec<_> = beside_kmem(rows)
            .iter()
            .map(|r| (r.bench, r.column()))
            .collect::<Vec<_>>();
        let order: Vec<(&str, &str)> = order.iter().map(|(b, c)| (*b, c.as_str())).collect();
        assert_eq!(
            order,
            [
                ("a", "kmem"),
                ("b", "kmem"),
                ("a", KMEM_CPU_SLAB),
                ("b", KMEM_CPU_SLAB),
                ("a", "system"),
                ("b", "system"),
            ]
        );
    }

    #[test]
    fn every_child_has_its_own_name() {
        let names: Vec<_> = CHILDREN.iter().map(|c| c.what).collect();
        assert_eq!(
            names,
            [
                "times",
                "held",
                "workloads",
                "rss-kmem",
                "rss-system",
                "rss-mimalloc",
                "rss-jemalloc",
                "phase-kmem",
                "phase-system",
                "phase-mimalloc",
                "phase-jemalloc",
                "phase-blocks-kmem",
                "phase-blocks-system",
                "phase-blocks-mimalloc",
                "phase-blocks-jemalloc",
                "phase-threads-kmem",
                "phase-threads-system",
                "phase-threads-mimalloc",
                "phase-threads-jemalloc",
                "cache",
                "slab",
                "page-rss-kmem",
                "page-rss-system",
                "page-rss-mimalloc",
                "page-rss-jemalloc",
            ]
        );
        assert!(child_main("nosuch", true)
            .unwrap_err()
            .starts_with("unknown child bench 'nosuch' (children: times, held,"));
    }
}
