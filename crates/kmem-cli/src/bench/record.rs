//! The result records and the JSON document of the benchmark output contract.
//!
//! With `--json`, `kmem bench` prints exactly one JSON document on stdout:
//!
//! ```json
//! {"suite": "slab", "machine": {"cpus": 2, "tsc_ghz": 2.3, "tsc_source": "calibrated"},
//!  "results": [
//!   {"bench": "kmalloc_then_kfree", "allocator": "kmem", "param": 8, "op": "alloc",
//!    "ns": 12.3, "cycles": 31.0, "ops": 10000}
//!  ]}
//! ```
//!
//! `allocator` is `kmem`, `system`, `mimalloc` or `jemalloc`; `param` is the size, bulk
//! count or thread count the bench varies;
//! `op` names what `ns` and `cycles` are per. A memory figure carries `bytes`, a plain
//! count `value`; `mode` names a kmem configuration where a suite compares several
//! (`percpu`: `thread`, `cpu-rseq`, … in sheaves, `thread/cpu-slab`, … in the CPU-slab
//! design; `cpu-slab` in `workloads`, `cache` and `slab`, kmem in the slab layer's
//! CPU-slab design measured in a child process; `called` in `slab` and `cache`). Absent figures are left out, not
//! null. `tsc_source` says where `tsc_ghz` comes from (`timing::tsc_freq`: a CPUID
//! leaf, or `calibrated` against the clock). A document of several suites is `"suite": "all"` and names each result's
//! suite in the result.
//!
//! Also here: how results group for presentation (benches in order of appearance,
//! the distinct `(param, op)` rows of a bench, an allocator's column label), shared by
//! the tables and the charts.

use super::timing::{tsc_freq, Timing};
use serde::Serialize;

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
    /// A record with its key and no figure yet.
    fn key(bench: &'static str, allocator: &'static str, param: u64, op: &'static str) -> Self {
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
            bytes: None,
            value: None,
        }
    }

    /// A time figure: `ns` and `cycles` per `op`, over `ops` operations per repetition.
    pub fn time(
        bench: &'static str,
        allocator: &'static str,
        param: u64,
        op: &'static str,
        t: Timing,
    ) -> Self {
        Self {
            ns: Some(t.ns),
            cycles: t.cycles,
            ops: Some(t.ops),
            ..Self::key(bench, allocator, param, op)
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
            bytes: Some(bytes),
            ..Self::key(bench, allocator, param, op)
        }
    }

    /// The column this figure goes in: the allocator, and the mode if there is one.
    pub fn column(&self) -> String {
        match &self.mode {
            Some(m) => format!("{}[{m}]", self.allocator),
            None => self.allocator.to_string(),
        }
    }
}

/// The benches of `results`, in order of first appearance.
pub fn benches(results: &[BenchResult]) -> Vec<&'static str> {
    distinct(results.iter().map(|r| r.bench))
}

/// The distinct `(param, op)` pairs of `rows`, in order of first appearance.
pub fn keys(rows: &[&BenchResult]) -> Vec<(u64, &'static str)> {
    distinct(rows.iter().map(|r| (r.param, r.op)))
}

/// A bench's rows split into its timed figures and the others (memory, counts), each
/// group shown on its own (a table, a chart), time first. Where a bench has one group
/// it has no name; where it has both, the other is named `memory` (or `count`, where
/// any of its figures is a count): `random_sizes` times its operations and reports its
/// peak memory, whose rows a table or chart labelled as time showed as nanoseconds.
pub fn by_kind<'a>(rows: &[&'a BenchResult]) -> Vec<KindGroup<'a>> {
    let (timed, other): (Vec<&'a BenchResult>, Vec<&'a BenchResult>) =
        rows.iter().copied().partition(|r| r.ns.is_some());
    if timed.is_empty() || other.is_empty() {
        return vec![(None, rows.to_vec())];
    }
    let name = if other.iter().any(|r| r.value.is_some()) {
        "count"
    } else {
        "memory"
    };
    vec![(None, timed), (Some(name), other)]
}

/// A group of [`by_kind`]: its name (where the bench has both kinds) and rows.
pub type KindGroup<'a> = (Option<&'static str>, Vec<&'a BenchResult>);

/// Whether a bench's memory figures read best in MiB (one reaches 1 MiB).
pub fn in_mib(rows: &[&BenchResult]) -> bool {
    rows.iter().any(|r| r.bytes.is_some_and(|b| b >= 1 << 20))
}

/// The distinct items, in order of first appearance.
pub fn distinct<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// The machine line of the JSON document.
#[derive(Serialize, Clone, Copy, Debug)]
pub struct Machine {
    pub cpus: usize,
    pub tsc_ghz: f64,
    /// Where `tsc_ghz` comes from: `cpuid-0x15`, `cpuid-0x40000010`, `calibrated`, `none`.
    pub tsc_source: &'static str,
}

impl Machine {
    /// This machine: its CPU count and its TSC frequency (0 without a TSC).
    pub fn detect() -> Self {
        let tsc = tsc_freq();
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            tsc_ghz: tsc.ghz,
            tsc_source: tsc.source,
        }
    }
}

#[derive(Serialize)]
struct Document<'a> {
    suite: &'a str,
    machine: Machine,
    results: &'a [BenchResult],
}

/// The JSON document of a run of `suites` (name and results of each, in run order):
/// one suite's results as they are, or several under `"suite": "all"` with each
/// result naming its suite.
pub fn document(
    machine: Machine,
    suites: &[(&'static str, &[BenchResult])],
) -> serde_json::Result<String> {
    if let [(suite, results)] = suites {
        return serde_json::to_string_pretty(&Document {
            suite,
            machine,
            results,
        });
    }
    let merged: Vec<BenchResult> = suites
        .iter()
        .flat_map(|&(suite, results)| {
            results.iter().cloned().map(move |mut r| {
                r.suite = Some(suite);
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Figures of two benches: a timed one (a missing cell at param 1) and a memory one.
    pub fn sample() -> Vec<BenchResult> {
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

    const MACHINE: Machine = Machine {
        cpus: 2,
        tsc_ghz: 2.6,
        tsc_source: "calibrated",
    };

    #[test]
    fn json_follows_the_output_contract() {
        let results = sample();
        let doc = document(MACHINE, &[("page", &results)]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        assert_eq!(v["suite"], "page");
        assert_eq!(v["machine"]["cpus"], 2);
        assert_eq!(v["machine"]["tsc_ghz"], 2.6);
        assert_eq!(v["machine"]["tsc_source"], "calibrated");
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
    fn a_document_of_several_suites_names_each_results_suite() {
        let results = sample();
        let count = BenchResult {
            value: Some(42.0),
            ..BenchResult::bytes("slabinfo", "kmem", 96, "objs_per_slab", 0)
        }
        .without_bytes();
        let doc = document(MACHINE, &[("page", &results[..2]), ("slabinfo", &[count])]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        assert_eq!(v["suite"], "all");
        let rows = v["results"].as_array().unwrap();
        let suites: Vec<_> = rows.iter().map(|r| r["suite"].as_str().unwrap()).collect();
        assert_eq!(suites, ["page", "page", "slabinfo"]);
        assert_eq!(rows[2]["value"], 42.0);
        assert!(rows[2].get("bytes").is_none());
        // The fields keep the contract's order, pretty-printed.
        assert!(
            doc.starts_with("{\n  \"suite\": \"all\",\n  \"machine\": {\n    \"cpus\": 2,\n    \"tsc_ghz\": 2.6,\n    \"tsc_source\": \"calibrated\"\n  },\n  \"results\": [\n    {\n      \"suite\": \"page\",\n      \"bench\": \"page_pcp\",\n      \"allocator\": \"kmem\",\n      \"param\": 0,\n      \"op\": \"pair\",\n      \"ns\": 12.25,\n      \"cycles\": 31.0,\n      \"ops\": 10000\n    },"),
            "{doc}"
        );
    }

    #[test]
    fn grouping_keeps_the_order_of_first_appearance() {
        let results = sample();
        assert_eq!(benches(&results), ["page_pcp", "page_rss"]);
        let pcp: Vec<&BenchResult> = results.iter().filter(|r| r.bench == "page_pcp").collect();
        assert_eq!(keys(&pcp), [(0, "pair"), (1, "pair")]);
        assert!(!in_mib(&pcp));
        let rss: Vec<&BenchResult> = results.iter().filter(|r| r.bench == "page_rss").collect();
        assert_eq!(keys(&rss), [(1024, "before"), (1024, "after")]);
        assert!(in_mib(&rss));
        let mut r = results[0].clone();
        assert_eq!(r.column(), "kmem");
        r.mode = Some("stock".into());
        assert_eq!(r.column(), "kmem[stock]");
    }
}
