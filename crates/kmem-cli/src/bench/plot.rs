//! The charts of `kmem bench --plot DIR` (plotters, SVG): one file per suite, a panel
//! per bench, a line per allocator (and mode) over the bench's `(param, op)` rows.

use super::record::{benches, in_mib, keys, BenchResult};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// One SVG per suite: a panel per bench, a line per allocator.
pub fn plot_suite(path: &Path, suite: &str, results: &[BenchResult]) -> Result<(), String> {
    let benches = benches(results);
    if benches.is_empty() {
        return Err("no results to plot".into());
    }
    let root = SVGBackend::new(path, (900, 320 * benches.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((benches.len(), 1));
    for (panel, bench) in panels.iter().zip(&benches) {
        let rows: Vec<&BenchResult> = results.iter().filter(|r| r.bench == *bench).collect();
        panel_chart(panel, &format!("{suite}: {bench}"), &rows)?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// Where a figure stands on the y axis (memory in MiB from 1 MiB up).
fn y_of(r: &BenchResult) -> f64 {
    match (r.ns, r.value, r.bytes) {
        (Some(ns), _, _) => ns,
        (_, Some(v), _) => v,
        (_, _, Some(b)) if b >= 1 << 20 => b as f64 / (1 << 20) as f64,
        (_, _, Some(b)) => b as f64,
        _ => 0.0,
    }
}

/// The same colour for an allocator in every panel.
fn color(name: &str) -> RGBAColor {
    let slot = ["kmem", "system", "mimalloc", "jemalloc"]
        .iter()
        .position(|a| name.starts_with(a))
        .unwrap_or(4 + name.len() % 8);
    Palette99::pick(slot).to_rgba()
}

/// One bench's panel (`rows`: its figures, at least one).
fn panel_chart<DB: DrawingBackend>(
    panel: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    rows: &[&BenchResult],
) -> Result<(), String> {
    // X positions: the distinct (param, op) pairs in order.
    let keys = keys(rows);
    let is_bytes = rows[0].ns.is_none();
    let ymax = rows
        .iter()
        .map(|r| y_of(r))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        let x = keys.iter().position(|k| *k == (r.param, r.op)).unwrap_or(0) as f64;
        series.entry(r.column()).or_default().push((x, y_of(r)));
    }
    let ylabel = if !is_bytes {
        format!("ns per {}", rows[0].op)
    } else if in_mib(rows) {
        "MiB".to_string()
    } else {
        "count / bytes".to_string()
    };
    let mut chart = ChartBuilder::on(panel)
        .caption(caption, ("sans-serif", 18))
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
        let color = color(&name);
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::sample;
    use super::*;

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
    fn nothing_to_plot_is_an_error() {
        let path = std::env::temp_dir().join("kmem-plot-never-written.svg");
        assert_eq!(
            plot_suite(&path, "page", &[]),
            Err("no results to plot".to_string())
        );
        assert!(!path.exists());
    }
}
