//! The charts of `kmem bench --plot DIR` (plotters, SVG): one file per suite, a panel
//! per chart, the legend to the right of each panel, the machine and the form of the
//! run at the bottom.
//!
//! What a suite's figures become:
//! - the timed benches with a single row (one param, one op — `global`, `preload`,
//!   most of `cache`) share one panel of grouped bars: each column's time divided by
//!   the bench's baseline — mimalloc where it ran, else the fastest peer (system,
//!   mimalloc, jemalloc; kmem in another design is no peer), else the
//!   first column (the reference mode) — with the baseline's own time under the bench;
//! - a bench over three or more params gets a line chart per op (`kmalloc_then_kfree`:
//!   one for alloc, one for free), a line per allocator (and mode);
//! - any other bench gets grouped bars, a group per row.
//!
//! Values are shown in the unit that reads best (ns, µs, ms; B, KiB, MiB), on a log
//! axis where they span more than 12x.

use super::child::KMEM_CPU_SLAB;
use super::peers::Peer;
use super::record::{benches, by_kind, distinct, keys, BenchResult};
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

const WIDTH: u32 = 1000;
const PANEL_HEIGHT: u32 = 380;
const LEGEND_WIDTH: u32 = 170;
const FOOTER_HEIGHT: u32 = 22;
/// Above this ratio between the largest and the smallest positive value, the y axis is
/// logarithmic.
const LOG_SPREAD: f64 = 12.0;

/// One SVG per suite (`note`: the run's header line, printed at the bottom).
pub fn plot_suite(
    path: &Path,
    suite: &str,
    results: &[BenchResult],
    note: &str,
) -> Result<(), String> {
    let panels = panels(suite, results);
    if panels.is_empty() {
        return Err("no results to plot".into());
    }
    let columns = distinct(results.iter().map(|r| r.column()));
    let height = PANEL_HEIGHT * panels.len() as u32 + FOOTER_HEIGHT;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (body, footer) = root.split_vertically(height - FOOTER_HEIGHT);
    for (area, panel) in body.split_evenly((panels.len(), 1)).iter().zip(&panels) {
        draw_panel(area, panel, &columns)?;
    }
    footer
        .draw(&Text::new(
            note.to_string(),
            (WIDTH as i32 - 10, 4),
            ("sans-serif", 12)
                .into_font()
                .color(&RGBColor(110, 110, 110))
                .pos(Pos::new(HPos::Right, VPos::Top)),
        ))
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// What one panel shows: categories along x, a series per column.
#[derive(Debug)]
struct Panel {
    title: String,
    y_desc: String,
    x_desc: Option<String>,
    /// Lines over the categories instead of grouped bars.
    lines: bool,
    /// Each category's label and an optional second line under it.
    categories: Vec<(String, Option<String>)>,
    /// The series: a column's name and its value in each category (in `unit`).
    series: Vec<(String, Vec<Option<f64>>)>,
    /// The suffix of value labels (`ns`, `MiB`, `x`, or nothing).
    unit: &'static str,
    /// A horizontal reference line (1 on a ratio panel).
    reference: Option<f64>,
}

/// The panels of a suite's figures.
fn panels(suite: &str, results: &[BenchResult]) -> Vec<Panel> {
    let mut out = Vec::new();
    let mut single = Vec::new();
    for bench in benches(results) {
        let all: Vec<&BenchResult> = results.iter().filter(|r| r.bench == bench).collect();
        for (kind, rows) in by_kind(&all) {
            bench_panels(suite, bench, kind, rows, &mut out, &mut single);
        }
    }
    if !single.is_empty() {
        out.insert(0, ratios(suite, &single));
    }
    out
}

/// The panels of one bench's figures of one kind (`kind`: its name where the bench
/// has several), or its place among the suite's single-row timed benches.
fn bench_panels<'a>(
    suite: &str,
    bench: &'static str,
    kind: Option<&str>,
    rows: Vec<&'a BenchResult>,
    out: &mut Vec<Panel>,
    single: &mut Vec<(&'static str, Vec<&'a BenchResult>)>,
) {
    let name = match kind {
        Some(k) => format!("{bench}, {k}"),
        None => bench.to_string(),
    };
    {
        let keys = keys(&rows);
        let columns = distinct(rows.iter().map(|r| r.column()));
        if keys.len() == 1 && rows[0].ns.is_some() && columns.len() > 1 {
            single.push((bench, rows));
            return;
        }
        let params = distinct(rows.iter().map(|r| r.param));
        if params.len() >= 3 {
            for op in distinct(rows.iter().map(|r| r.op)) {
                let of_op: Vec<&BenchResult> =
                    rows.iter().copied().filter(|r| r.op == op).collect();
                let several_ops = rows.iter().any(|r| r.op != op);
                let title = if several_ops {
                    format!("{suite}: {name} — {op}")
                } else {
                    format!("{suite}: {name}")
                };
                out.push(absolute(title, bench, &of_op, true));
            }
        } else {
            out.push(absolute(format!("{suite}: {name}"), bench, &rows, false));
        }
    }
}

/// The panel of a suite's single-row timed benches: time over the baseline's.
fn ratios(suite: &str, benches: &[(&str, Vec<&BenchResult>)]) -> Panel {
    let columns = ordered(distinct(
        benches
            .iter()
            .flat_map(|(_, rows)| rows.iter().map(|r| r.column())),
    ));
    let mut categories = Vec::new();
    let mut baselines = Vec::new();
    let mut series: Vec<(String, Vec<Option<f64>>)> =
        columns.iter().map(|c| (c.clone(), Vec::new())).collect();
    let op = benches[0].1[0].op;
    let one_op = benches.iter().all(|(_, rows)| rows[0].op == op);
    for (bench, rows) in benches {
        let base = baseline(rows);
        let base_ns = base.ns.unwrap_or(f64::NAN);
        let (div, unit) = time_unit(base_ns);
        categories.push((
            bench.to_string(),
            Some(format!(
                "{} {} {unit}{}",
                base.column(),
                fmt_num(base_ns / div),
                if one_op {
                    String::new()
                } else {
                    format!("/{}", base.op)
                }
            )),
        ));
        baselines.push(base.column());
        for (name, values) in &mut series {
            let v = rows.iter().find(|r| r.column() == *name).and_then(|r| r.ns);
            values.push(v.map(|ns| ns / base_ns));
        }
    }
    let first = &baselines[0];
    let against = if baselines.iter().all(|b| b == first) {
        first.clone()
    } else {
        "the baseline under each bench".to_string()
    };
    let per = if one_op {
        format!("time per {op}")
    } else {
        "time".to_string()
    };
    Panel {
        title: format!("{suite}: {per} relative to {against} (lower is faster)"),
        y_desc: format!("time / {against}'s"),
        x_desc: None,
        lines: false,
        categories,
        series,
        unit: "x",
        reference: Some(1.0),
    }
}

/// A bench's baseline figure: mimalloc, else the fastest peer, else the first column.
fn baseline<'a>(rows: &[&'a BenchResult]) -> &'a BenchResult {
    let time = |r: &&BenchResult| r.ns.unwrap_or(f64::INFINITY);
    rows.iter()
        .find(|r| r.allocator == "mimalloc")
        .or_else(|| {
            rows.iter()
                .filter(|r| Peer::ALL.iter().any(|p| p.name() == r.allocator))
                .min_by(|a, b| time(a).total_cmp(&time(b)))
        })
        .unwrap_or(&rows[0])
}

/// A panel of a bench's figures as they are (`lines`: over its params).
fn absolute(title: String, bench: &str, rows: &[&BenchResult], lines: bool) -> Panel {
    let keys = keys(rows);
    let params = distinct(rows.iter().map(|r| r.param));
    let ops = distinct(rows.iter().map(|r| r.op));
    let size_param = param_name(bench).contains("size");
    let categories = keys
        .iter()
        .map(|&(p, op)| {
            let p = if size_param {
                fmt_size(p)
            } else {
                p.to_string()
            };
            let label = match (params.len(), ops.len()) {
                (1, n) if n > 1 => op.to_string(),
                (_, 1) => p,
                _ => format!("{p} {op}"),
            };
            (label, None)
        })
        .collect();
    let raw = |r: &BenchResult| r.ns.or(r.value).or(r.bytes.map(|b| b as f64));
    let max = rows.iter().filter_map(|r| raw(r)).fold(0.0f64, f64::max);
    let min_pos = rows
        .iter()
        .filter_map(|r| raw(r))
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let (div, unit, y_desc) = if rows[0].ns.is_some() {
        let (div, unit) = time_unit(max);
        let per = if ops.len() == 1 { ops[0] } else { "op" };
        (div, unit, format!("{unit} per {per}"))
    } else if rows[0].value.is_some() {
        (1.0, "", "count".to_string())
    } else {
        // Bytes in the unit of the smallest figure: 9 MiB and 1050 MiB, not 0.009 GiB.
        let (div, unit) = byte_unit(if min_pos.is_finite() { min_pos } else { max });
        let what = if ops.len() == 1 { ops[0] } else { "memory" };
        (div, unit, format!("{what} ({unit})"))
    };
    let columns = ordered(distinct(rows.iter().map(|r| r.column())));
    let series = columns
        .into_iter()
        .map(|c| {
            let values = keys
                .iter()
                .map(|&(p, op)| {
                    rows.iter()
                        .find(|r| r.param == p && r.op == op && r.column() == c)
                        .and_then(|r| raw(r))
                        .map(|v| v / div)
                })
                .collect();
            (c, values)
        })
        .collect();
    let x_desc = (params.len() > 1).then(|| param_name(bench).to_string());
    Panel {
        title,
        y_desc,
        x_desc,
        lines,
        categories,
        series,
        unit,
        reference: None,
    }
}

/// Columns in the same order in every chart: kmem (and its modes, in run order), kmem
/// in the CPU-slab design, then system, mimalloc, jemalloc, then anything else.
fn ordered(mut columns: Vec<String>) -> Vec<String> {
    let rank = |c: &String| {
        if c == KMEM_CPU_SLAB {
            return 1;
        }
        ["kmem", KMEM_CPU_SLAB, "system", "mimalloc", "jemalloc"]
            .iter()
            .position(|a| c == a || c.starts_with(&format!("{a}[")))
            .unwrap_or(5)
    };
    columns.sort_by_key(rank);
    columns
}

/// What a bench's param is, for the x axis.
fn param_name(bench: &str) -> &'static str {
    match bench {
        "page_pcp" | "page_zone" => "order (2^order pages)",
        "bulk" => "pages per bulk call",
        "page_threads" | "held_after_threads" => "threads",
        "kmalloc_then_kfree" | "kmalloc_kfree" | "cache_then_free" | "cache_alloc_free"
        | "kmalloc_batch4" | "slabinfo" | "global_pair" => "object size (bytes)",
        _ => "param",
    }
}

/// The divisor and the unit that show `max_ns` best.
fn time_unit(max_ns: f64) -> (f64, &'static str) {
    match max_ns {
        x if x >= 1e9 => (1e9, "s"),
        x if x >= 1e6 => (1e6, "ms"),
        x if x >= 1e4 => (1e3, "µs"),
        _ => (1.0, "ns"),
    }
}

/// The divisor and the unit that show `max` bytes best.
fn byte_unit(max: f64) -> (f64, &'static str) {
    match max {
        x if x >= (1u64 << 30) as f64 => ((1u64 << 30) as f64, "GiB"),
        x if x >= (1u64 << 20) as f64 => ((1u64 << 20) as f64, "MiB"),
        x if x >= 10240.0 => (1024.0, "KiB"),
        _ => (1.0, "B"),
    }
}

/// A size in bytes as `512`, `8K`, `16K`, `4M`.
fn fmt_size(b: u64) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// A number with three significant digits at most, no trailing zeros.
fn fmt_num(v: f64) -> String {
    let a = v.abs();
    let s = match a {
        a if a >= 100.0 || a == 0.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The colour of a column: fixed for the four allocators and kmem in the CPU-slab
/// design (kmem's, lighter), else by its place among the suite's columns.
fn color(name: &str, columns: &[String]) -> RGBColor {
    const FIXED: [(&str, RGBColor); 5] = [
        ("kmem", RGBColor(31, 119, 180)),
        (KMEM_CPU_SLAB, RGBColor(120, 180, 225)),
        ("system", RGBColor(140, 140, 140)),
        ("mimalloc", RGBColor(44, 160, 44)),
        ("jemalloc", RGBColor(255, 127, 14)),
    ];
    const OTHERS: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    if let Some((_, c)) = FIXED.iter().find(|(n, _)| *n == name) {
        return *c;
    }
    let modes: Vec<&String> = columns.iter().filter(|c| c.contains('[')).collect();
    let i = modes.iter().position(|c| *c == name).unwrap_or(name.len());
    // Not a colour a fixed column of this chart has (`kmem[called]` beside `kmem`).
    let fixed = |c: &RGBColor| {
        FIXED
            .iter()
            .any(|(n, f)| f == c && columns.iter().any(|col| col == n))
    };
    let free: Vec<RGBColor> = OTHERS.iter().copied().filter(|c| !fixed(c)).collect();
    free[i % free.len()]
}

/// One panel: the chart on the left, the legend on the right.
fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
    columns: &[String],
) -> Result<(), String> {
    let (w, _) = area.dim_in_pixel();
    let (chart_area, legend_area) = area.split_horizontally(w - LEGEND_WIDTH);
    let values: Vec<f64> = p
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().copied())
        .filter(|v| v.is_finite())
        .collect();
    let max = values.iter().copied().fold(0.0f64, f64::max).max(1e-9);
    let min_pos = values
        .iter()
        .copied()
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let log = min_pos.is_finite() && max / min_pos > LOG_SPREAD;
    let sublabels = p.categories.iter().any(|(_, s)| s.is_some());
    let mut builder = ChartBuilder::on(&chart_area);
    builder
        .caption(&p.title, ("sans-serif", 17))
        .margin(10)
        .margin_right(16)
        .x_label_area_size(if sublabels { 58 } else { 48 })
        .y_label_area_size(66);
    let n = p.categories.len() as f64;
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    if log {
        let (lo, hi) = (min_pos / 1.6, max * 2.0);
        let chart = builder
            .build_cartesian_2d(0f64..n, (lo..hi).log_scale())
            .map_err(e)?;
        draw_chart(&chart_area, chart, p, lo, columns)?;
    } else {
        let (lo, hi) = (0.0, max * 1.18);
        let chart = builder.build_cartesian_2d(0f64..n, lo..hi).map_err(e)?;
        draw_chart(&chart_area, chart, p, lo, columns)?;
    }
    draw_legend(&legend_area, p, columns)
}

/// The mesh, the series and the category labels of a panel on `chart` (`floor`: the
/// bottom of the y axis, where bars start).
fn draw_chart<DB, Y>(
    area: &DrawingArea<DB, Shift>,
    mut chart: ChartContext<'_, DB, Cartesian2d<RangedCoordf64, Y>>,
    p: &Panel,
    floor: f64,
    columns: &[String],
) -> Result<(), String>
where
    DB: DrawingBackend,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let unit = p.unit;
    let y_fmt = move |v: &f64| {
        if unit == "x" {
            format!("{}x", fmt_num(*v))
        } else {
            fmt_num(*v)
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh()
        .x_labels(0)
        .y_labels(8)
        .y_label_formatter(&y_fmt)
        .y_desc(p.y_desc.as_str())
        .axis_desc_style(("sans-serif", 14))
        .label_style(("sans-serif", 12))
        .light_line_style(RGBColor(235, 235, 235));
    if let Some(x) = &p.x_desc {
        mesh.x_desc(x.as_str());
    }
    mesh.draw().map_err(e)?;

    let n_series = p.series.len().max(1) as f64;
    let (x0_px, _) = chart.backend_coord(&(0.0, floor));
    let (x1_px, _) = chart.backend_coord(&(1.0, floor));
    let category_px = (x1_px - x0_px) as f64;
    if let Some(r) = p.reference {
        chart
            .draw_series(LineSeries::new(
                [(0.0, r), (p.categories.len() as f64, r)],
                BLACK.stroke_width(1),
            ))
            .map_err(e)?;
    }
    let label_font = ("sans-serif", 10).into_font().color(&BLACK);
    for (j, (name, values)) in p.series.iter().enumerate() {
        let c = color(name, columns);
        let shown = |v: &f64| v.is_finite() && *v > floor.max(0.0) || (*v == 0.0 && floor == 0.0);
        if p.lines {
            let pts: Vec<(f64, f64)> = values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| v.filter(&shown).map(|v| (i as f64 + 0.5, v)))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(e)?;
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                .map_err(e)?;
            continue;
        }
        let bw = 0.8 / n_series;
        let bar_px = category_px * bw;
        for (i, v) in values.iter().enumerate() {
            let Some(v) = v.filter(&shown) else { continue };
            let x0 = i as f64 + 0.1 + j as f64 * bw;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, floor), (x0 + bw * 0.92, v)],
                    c.filled(),
                )))
                .map_err(e)?;
            // A value label where it fits above its bar (not on a ratio's baseline).
            let text = match unit {
                "x" if v == 1.0 => continue,
                "x" if v >= 10.0 => format!("{v:.0}x"),
                "x" => format!("{v:.2}x"),
                _ => fmt_num(v),
            };
            if bar_px >= 5.8 * text.len() as f64 {
                chart
                    .draw_series(std::iter::once(Text::new(
                        text,
                        (x0 + bw * 0.46, v),
                        label_font.pos(Pos::new(HPos::Center, VPos::Bottom)),
                    )))
                    .map_err(e)?;
            }
        }
    }

    // Category labels: centred under their group, every other one a line lower where
    // neighbours would touch; the second line (a ratio's baseline) under its label.
    let widest = p
        .categories
        .iter()
        .flat_map(|(l, s)| [l.len(), s.as_ref().map_or(0, |s| s.len())])
        .max()
        .unwrap_or(0);
    let stagger = 7.0 * widest as f64 > category_px - 6.0;
    let base = area.get_base_pixel();
    let font = ("sans-serif", 12).into_font().color(&BLACK);
    let sub_font = ("sans-serif", 11).into_font().color(&RGBColor(90, 90, 90));
    for (i, (label, sub)) in p.categories.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.5, floor));
        let y = y + 5 + if stagger && i % 2 == 1 { 14 } else { 0 };
        let at = (x - base.0, y - base.1);
        area.draw(&Text::new(
            label.clone(),
            at,
            font.pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(e)?;
        if let Some(sub) = sub {
            area.draw(&Text::new(
                sub.clone(),
                (at.0, at.1 + 14),
                sub_font.pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(e)?;
        }
    }
    Ok(())
}

/// The legend: a swatch and the name of each series, top to bottom.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
    columns: &[String],
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    for (j, (name, _)) in p.series.iter().enumerate() {
        let y = 44 + 20 * j as i32;
        let c = color(name, columns);
        area.draw(&Rectangle::new([(4, y), (18, y + 12)], c.filled()))
            .map_err(e)?;
        area.draw(&Text::new(
            name.clone(),
            (24, y + 6),
            ("sans-serif", 13)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(e)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::sample;
    use super::super::timing::Timing;
    use super::*;

    fn t(ns: f64) -> Timing {
        Timing {
            ns,
            cycles: None,
            ops: 1,
        }
    }

    #[test]
    fn plot_writes_an_svg_panel_per_bench() {
        let dir = std::env::temp_dir().join(format!("kmem-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("page.svg");
        plot_suite(&path, "page", &sample(), "kmem bench: 2 CPUs").unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("page: page_pcp") && svg.contains("page: page_rss"));
        assert!(svg.contains("kmem bench: 2 CPUs"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nothing_to_plot_is_an_error() {
        let path = std::env::temp_dir().join("kmem-plot-never-written.svg");
        assert_eq!(
            plot_suite(&path, "page", &[], ""),
            Err("no results to plot".to_string())
        );
        assert!(!path.exists());
    }

    #[test]
    fn single_row_benches_share_a_panel_of_ratios_to_mimalloc() {
        let results = vec![
            BenchResult::time("vec_push", "kmem", 1000, "run", t(2e6)),
            BenchResult::time("vec_push", "system", 1000, "run", t(3e6)),
            BenchResult::time("vec_push", "mimalloc", 1000, "run", t(1e6)),
            BenchResult::time("box_tree", "kmem", 65535, "run", t(4e5)),
            BenchResult::time("box_tree", "system", 65535, "run", t(2e5)),
        ];
        let ps = panels("global", &results);
        assert_eq!(ps.len(), 1);
        let p = &ps[0];
        assert!(!p.lines && p.unit == "x" && p.reference == Some(1.0));
        // box_tree has no mimalloc: its baseline is the fastest peer.
        assert_eq!(
            p.categories,
            [
                ("vec_push".to_string(), Some("mimalloc 1 ms".to_string())),
                ("box_tree".to_string(), Some("system 200 µs".to_string())),
            ]
        );
        assert_eq!(
            p.series[0],
            ("kmem".to_string(), vec![Some(2.0), Some(2.0)])
        );
        assert_eq!(p.series[2], ("mimalloc".to_string(), vec![Some(1.0), None]));
        assert!(p.title.starts_with("global: time per run relative"));
        assert!(p
            .title
            .contains("relative to the baseline under each bench"));
    }

    /// A bench that times its operations and reports memory (`random_sizes`) gets a
    /// memory panel of its own, in bytes; before, the memory rows shared the time
    /// panel and read as nanoseconds.
    #[test]
    fn memory_rows_of_a_timed_bench_get_a_panel_in_bytes() {
        let results = vec![
            BenchResult::time("random_sizes", "kmem", 65536, "op", t(8.0)),
            BenchResult::time("random_sizes", "mimalloc", 65536, "op", t(9.0)),
            BenchResult::bytes("random_sizes", "kmem", 65536, "peak_rss", 3 << 20),
            BenchResult::bytes("random_sizes", "mimalloc", 65536, "peak_rss", 8 << 20),
        ];
        let panels = panels("workloads", &results);
        assert_eq!(panels.len(), 2, "{panels:?}");
        // The time rows: one figure each, on the suite's ratio panel.
        assert_eq!(panels[0].unit, "x", "{:?}", panels[0]);
        let memory = &panels[1];
        assert_eq!(memory.title, "workloads: random_sizes, memory");
        assert_eq!(memory.unit, "MiB");
        assert_eq!(memory.y_desc, "peak_rss (MiB)");
        assert_eq!(memory.series[0], ("kmem".to_string(), vec![Some(3.0)]));
    }

    #[test]
    fn kmem_in_the_cpu_slab_design_is_no_baseline_and_stands_beside_kmem() {
        let results = vec![
            BenchResult::time("larson", "kmem", 2, "op", t(40.0)),
            BenchResult::time("larson", "system", 2, "op", t(80.0)),
            BenchResult::time("larson", "jemalloc", 2, "op", t(50.0)),
            crate::bench::child::in_cpu_slab(BenchResult::time("larson", "kmem", 2, "op", t(20.0))),
        ];
        let p = &panels("workloads", &results)[0];
        assert_eq!(
            p.categories,
            [("larson".to_string(), Some("jemalloc 50 ns".to_string()))]
        );
        let columns: Vec<&str> = p.series.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(columns, ["kmem", KMEM_CPU_SLAB, "system", "jemalloc"]);
        assert_eq!(p.series[1].1, [Some(0.4)]);
        let all = distinct(results.iter().map(|r| r.column()));
        assert_ne!(color(KMEM_CPU_SLAB, &all), color("jemalloc", &all));
        // A mode column beside the plain ones takes none of their colours.
        let cols: Vec<String> = ["kmem", "kmem[called]", "mimalloc", "jemalloc"]
            .map(String::from)
            .to_vec();
        let called = color("kmem[called]", &cols);
        for fixed in ["kmem", "mimalloc", "jemalloc"] {
            assert_ne!(called, color(fixed, &cols), "{fixed}");
        }
    }

    #[test]
    fn a_sweep_gets_a_line_chart_per_op_in_a_readable_unit() {
        let mut results = Vec::new();
        for (i, size) in [8u64, 64, 16384].into_iter().enumerate() {
            for alloc in ["kmem", "system"] {
                let ns = 10.0 * 40f64.powi(i as i32);
                results.push(BenchResult::time(
                    "kmalloc_then_kfree",
                    alloc,
                    size,
                    "alloc",
                    t(ns),
                ));
                results.push(BenchResult::time(
                    "kmalloc_then_kfree",
                    alloc,
                    size,
                    "free",
                    t(ns),
                ));
            }
        }
        let ps = panels("slab", &results);
        let titles: Vec<&str> = ps.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "slab: kmalloc_then_kfree — alloc",
                "slab: kmalloc_then_kfree — free"
            ]
        );
        assert!(ps[0].lines);
        let labels: Vec<&str> = ps[0].categories.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["8", "64", "16K"]);
        assert_eq!(ps[0].unit, "µs");
        assert_eq!(ps[0].y_desc, "µs per alloc");
        assert_eq!(ps[0].series[0].1, [Some(0.01), Some(0.4), Some(16.0)]);
    }

    #[test]
    fn numbers_and_sizes_read_short() {
        assert_eq!(fmt_num(1234.6), "1235");
        assert_eq!(fmt_num(12.34), "12.3");
        assert_eq!(fmt_num(1.5), "1.5");
        assert_eq!(fmt_num(2.0), "2");
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_size(16384), "16K");
        assert_eq!(fmt_size(96), "96");
        assert_eq!(fmt_size(4 << 20), "4M");
        assert_eq!(byte_unit(150.0 * (1 << 20) as f64).1, "MiB");
        assert_eq!(time_unit(5e6).1, "ms");
    }
}
