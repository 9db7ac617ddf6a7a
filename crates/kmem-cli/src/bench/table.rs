//! The readable output of `kmem bench` (without `--json`): a header line with the
//! machine, then per suite a table per bench — a row per `(param, op)`, a column per
//! allocator (and mode) — followed by the suite's own report lines.

use super::record::{benches, by_kind, distinct, in_mib, keys, BenchResult, Machine};
use std::fmt::Write as _;

/// The first line: the machine and how figures were taken.
pub fn header(machine: Machine, reps: usize, quick: bool) -> String {
    format!(
        "kmem bench: {} CPUs, TSC {:.3} GHz ({}), median of {} repetitions{}",
        machine.cpus,
        machine.tsc_ghz,
        machine.tsc_source,
        reps,
        if quick { " (quick)" } else { "" }
    )
}

/// A readable table per bench: one row per param, one column per allocator (and mode).
pub fn table(suite: &str, results: &[BenchResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\n== suite {suite} ==");
    for bench in benches(results) {
        let rows: Vec<&BenchResult> = results.iter().filter(|r| r.bench == bench).collect();
        for (kind, group) in by_kind(&rows) {
            let title = match kind {
                Some(k) => format!("{bench}, {k}"),
                None => bench.to_string(),
            };
            bench_table(&mut out, &title, &group);
        }
    }
    out
}

/// The table of one bench's figures of one kind (`rows`: at least one), under `title`.
fn bench_table(out: &mut String, title: &str, rows: &[&BenchResult]) {
    let cols = distinct(rows.iter().map(|r| r.column()));
    // 20 characters a column, more where a label is longer (`kmem[cpu-rseq/cpu-slab]`).
    let w = cols.iter().map(String::len).fold(20, usize::max);
    let is_mib = in_mib(rows);
    let timed = rows[0].ns.is_some();
    let several_ops = rows.iter().any(|r| r.op != rows[0].op);
    let unit = if timed && several_ops {
        "ns per op".to_string()
    } else if timed {
        format!("ns per {}", rows[0].op)
    } else if is_mib {
        "MiB".to_string()
    } else {
        "count / bytes".to_string()
    };
    let _ = writeln!(out, "\n{title} ({unit})");
    let labels: Vec<String> = keys(rows)
        .into_iter()
        .map(|(param, op)| {
            if timed && !several_ops {
                param.to_string()
            } else {
                format!("{param} {op}")
            }
        })
        .collect();
    let lw = labels.iter().map(String::len).fold(12, usize::max);
    let _ = write!(out, "{:>lw$}", "param/op");
    for c in &cols {
        let _ = write!(out, " {c:>w$}");
    }
    let _ = writeln!(out);
    for ((param, op), label) in keys(rows).into_iter().zip(labels) {
        let _ = write!(out, "{label:>lw$}");
        for c in &cols {
            let cell = rows
                .iter()
                .find(|r| r.param == param && r.op == op && &r.column() == c)
                .map_or_else(|| "-".into(), |r| cell(r, is_mib));
            let _ = write!(out, " {cell:>w$}");
        }
        let _ = writeln!(out);
    }
}

/// One figure as a table cell.
fn cell(r: &BenchResult, is_mib: bool) -> String {
    match (r.ns, r.cycles, r.bytes, r.value) {
        (Some(ns), _, _, _) if ns >= 1e6 => format!("{:.2} ms", ns / 1e6),
        (Some(ns), Some(cy), _, _) => format!("{ns:.1} ns {cy:.0} cyc"),
        (Some(ns), None, _, _) => format!("{ns:.1} ns"),
        (_, _, _, Some(v)) => format!("{v}"),
        (_, _, Some(b), _) if is_mib => format!("{:.1}", b as f64 / (1 << 20) as f64),
        (_, _, Some(b), _) => format!("{b} B"),
        _ => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::sample;
    use super::super::timing::Timing;
    use super::*;

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

    /// Every kind of cell and unit, to the byte.
    #[test]
    fn table_layout_to_the_byte() {
        let t = Timing {
            ns: 12.25,
            cycles: Some(31.0),
            ops: 10_000,
        };
        let with_mode = |mode: &str, r: BenchResult| BenchResult {
            mode: Some(mode.into()),
            ..r
        };
        let results = vec![
            BenchResult::time("kmalloc_then_kfree", "kmem", 8, "alloc", t),
            BenchResult::time(
                "kmalloc_then_kfree",
                "kmem",
                8,
                "free",
                Timing {
                    ns: 20.5,
                    cycles: Some(50.0),
                    ..t
                },
            ),
            BenchResult::time(
                "kmalloc_then_kfree",
                "system",
                8,
                "alloc",
                Timing { cycles: None, ..t },
            ),
            with_mode(
                "stock",
                BenchResult::time("kmalloc_batch4", "kmem", 32, "pair", t),
            ),
            with_mode(
                "off",
                BenchResult::time(
                    "kmalloc_batch4",
                    "kmem",
                    32,
                    "pair",
                    Timing { ns: 9.0, ..t },
                ),
            ),
            BenchResult::time(
                "python_json",
                "kmem",
                200_000,
                "run",
                Timing {
                    ns: 123_456_789.0,
                    cycles: None,
                    ops: 1,
                },
            ),
            BenchResult {
                value: Some(42.0),
                ..BenchResult::bytes("slabinfo", "kmem", 96, "objs_per_slab", 0)
            }
            .without_bytes(),
            BenchResult::bytes("slabinfo", "kmem", 96, "waste", 64),
            BenchResult::bytes("page_rss", "kmem", 1024, "before", 8 << 20),
            BenchResult::bytes("page_rss", "system", 1024, "peak", (1 << 30) + 12345),
            // Time and memory in one bench: a table each, the memory one in MiB.
            BenchResult::time("random_sizes", "kmem", 65536, "op", t),
            BenchResult::bytes("random_sizes", "kmem", 65536, "peak_rss", 3 << 19),
        ];
        let expected = "
== suite mix ==

kmalloc_then_kfree (ns per op)
    param/op                 kmem               system
     8 alloc       12.2 ns 31 cyc              12.2 ns
      8 free       20.5 ns 50 cyc                    -

kmalloc_batch4 (ns per pair)
    param/op          kmem[stock]            kmem[off]
          32       12.2 ns 31 cyc        9.0 ns 31 cyc

python_json (ns per run)
    param/op                 kmem
      200000            123.46 ms

slabinfo (count / bytes)
        param/op                 kmem
96 objs_per_slab                   42
        96 waste                 64 B

page_rss (MiB)
    param/op                 kmem               system
 1024 before                  8.0                    -
   1024 peak                    -               1024.0

random_sizes (ns per op)
    param/op                 kmem
       65536       12.2 ns 31 cyc

random_sizes, memory (MiB)
      param/op                 kmem
65536 peak_rss                  1.5
";
        assert_eq!(table("mix", &results), expected);
    }

    #[test]
    fn a_long_column_label_widens_its_table() {
        let t = Timing {
            ns: 12.25,
            cycles: Some(31.0),
            ops: 10_000,
        };
        let row = |mode: &str| BenchResult {
            mode: Some(mode.into()),
            ..BenchResult::time("fastpath_reuse", "kmem", 256, "pair", t)
        };
        let out = table("percpu", &[row("thread"), row("cpu-rseq/cpu-slab")]);
        let expected = "
== suite percpu ==

fastpath_reuse (ns per pair)
    param/op            kmem[thread] kmem[cpu-rseq/cpu-slab]
         256          12.2 ns 31 cyc          12.2 ns 31 cyc
";
        assert_eq!(out, expected);
    }

    #[test]
    fn header_names_the_machine_and_the_form() {
        let m = Machine {
            cpus: 2,
            tsc_ghz: 2.6,
            tsc_source: "cpuid-0x15",
        };
        assert_eq!(
            header(m, 5, true),
            "kmem bench: 2 CPUs, TSC 2.600 GHz (cpuid-0x15), median of 5 repetitions (quick)"
        );
        assert_eq!(
            header(m, 11, false),
            "kmem bench: 2 CPUs, TSC 2.600 GHz (cpuid-0x15), median of 11 repetitions"
        );
    }
}
