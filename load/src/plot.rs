//! SVG plots (plotters, SVG backend only: no font files, no C libraries).
//!
//! - [`soak`]: RSS, open file descriptors, req/s and p99 of a `weir-load run` report over time,
//!   one panel each, so a reader sees at a glance whether memory and fds stay flat.
//! - [`bench`]: the side-by-side benchmark (load/bench.sh results): per workers x connections
//!   cell, one bar per proxy for the median req/s, and one bar per proxy for the median p50
//!   latency with a whisker up to the median p99.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use crate::run::Sample;
use crate::summary::{Row, median};

type PlotResult = Result<(), Box<dyn std::error::Error>>;

const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];

/// One panel of the soak plot: a name, a unit and the (minutes, value) points.
struct Series {
    title: &'static str,
    points: Vec<(f64, f64)>,
}

fn series(samples: &[Sample]) -> Vec<Series> {
    let m = |s: &Sample| s.t / 60.0;
    let pick = |title, f: &dyn Fn(&Sample) -> Option<f64>| Series {
        title,
        points: samples
            .iter()
            .filter_map(|s| f(s).map(|v| (m(s), v)))
            .collect(),
    };
    vec![
        pick("RSS (MiB)", &|s| s.rss_kib.map(|k| k as f64 / 1024.0)),
        pick("open file descriptors", &|s| s.fds.map(|f| f as f64)),
        pick("requests per second", &|s| Some(s.rps)),
        pick("p99 latency (ms)", &|s| Some(s.p99_us as f64 / 1000.0)),
    ]
}

/// Draws the soak plot of `samples` into `out` (SVG).
pub fn soak(samples: &[Sample], title: &str, out: &Path) -> PlotResult {
    let panels: Vec<Series> = series(samples)
        .into_iter()
        .filter(|s| !s.points.is_empty())
        .collect();
    let height = 40 + 220 * panels.len().max(1) as u32;
    let root = SVGBackend::new(out, (900, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(40);
    let t_max = samples
        .iter()
        .map(|s| s.t / 60.0)
        .fold(0.0, f64::max)
        .max(0.1);
    // The title says what was asked; the wall time the samples span is said beside it, since a
    // loaded machine stretches the windows (the axis runs to the wall time).
    let title = format!("{title} ({} of wall time)", minutes(t_max));
    head.draw(&Text::new(title, (10, 12), ("sans-serif", 18)))?;
    for (i, (panel, area)) in panels
        .iter()
        .zip(body.split_evenly((panels.len(), 1)))
        .enumerate()
    {
        let y_max = panel.points.iter().map(|p| p.1).fold(0.0, f64::max);
        let y_max = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
        let mut chart = ChartBuilder::on(&area)
            .caption(panel.title, ("sans-serif", 14))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..t_max, 0.0..y_max)?;
        chart
            .configure_mesh()
            .x_desc("minutes")
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        let color = COLORS[i % COLORS.len()];
        chart.draw_series(LineSeries::new(
            panel.points.iter().copied(),
            color.stroke_width(2),
        ))?;
    }
    root.present()?;
    Ok(())
}

/// An axis label: whole numbers without a decimal point (`12`, not `12.0`), others with what
/// they need up to two decimals (`0.25`, `1.5`).
fn tick(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// `t` minutes as `44 min` (or `1.5 min` under ten).
fn minutes(t: f64) -> String {
    if t >= 10.0 {
        format!("{t:.0} min")
    } else {
        format!("{} min", tick((t * 10.0).round() / 10.0))
    }
}

/// Medians per (workers, connections) cell and proxy: (req/s, p50 us, p99 us).
pub type Cells = BTreeMap<(u32, u32), Vec<(String, f64, f64, f64)>>;

/// Reduces the benchmark rows to medians, proxies in their first-seen order.
pub fn cells(rows: &[Row]) -> Cells {
    let mut order: Vec<&str> = Vec::new();
    for r in rows {
        if !order.contains(&r.proxy.as_str()) {
            order.push(&r.proxy);
        }
    }
    let mut out = Cells::new();
    let mut keys: Vec<(u32, u32)> = rows.iter().map(|r| (r.workers, r.connections)).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let mut bars = Vec::new();
        for proxy in &order {
            let of: Vec<&Row> = rows
                .iter()
                .filter(|r| (r.workers, r.connections) == key && r.proxy == *proxy)
                .collect();
            let med =
                |f: &dyn Fn(&Row) -> f64| median(&of.iter().map(|r| f(r)).collect::<Vec<_>>());
            if let (Some(rps), Some(p50), Some(p99)) = (
                med(&|r| r.sample.requests_per_second),
                med(&|r| r.sample.p50_us),
                med(&|r| r.sample.p99_us),
            ) {
                bars.push(((*proxy).to_owned(), rps, p50, p99));
            }
        }
        out.insert(key, bars);
    }
    out
}

/// The largest of `f` over every bar of `cells` (0 when there is none).
fn max_bar(cells: &Cells, f: impl Fn(&(String, f64, f64, f64)) -> f64) -> f64 {
    cells.values().flatten().map(f).fold(0.0, f64::max)
}

/// The proxies of `cells`, each once, in the order they first appear.
fn proxy_names(cells: &Cells) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (name, ..) in cells.values().flatten() {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    names
}

/// Draws the side-by-side bars of `rows` into `out` (SVG).
pub fn bench(rows: &[Row], title: &str, out: &Path) -> PlotResult {
    let cells = cells(rows);
    let root = SVGBackend::new(out, (1000, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let (head, body) = root.split_vertically(40);
    head.draw(&Text::new(title.to_owned(), (10, 12), ("sans-serif", 18)))?;
    let (top, bottom) = body.split_vertically(360);
    let n = cells.len().max(1) as f64;
    let max_rps = max_bar(&cells, |b| b.1).max(1.0) * 1.15;
    let max_ms = max_bar(&cells, |b| b.3 / 1000.0).max(0.01) * 1.15;
    let proxies = proxy_names(&cells);
    let group_labels: Vec<String> = cells
        .keys()
        .map(|(w, c)| format!("{w} worker(s), {c} conns"))
        .collect();
    for (area, rps_panel) in [(&top, true), (&bottom, false)] {
        let caption = if rps_panel {
            "requests per second (median of rounds)"
        } else {
            "latency (ms): bar = median p50, whisker = median p99"
        };
        let y_max = if rps_panel { max_rps } else { max_ms };
        let labels = group_labels.clone();
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 14))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..n, 0.0..y_max)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(cells.len() * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - x.floor() - 0.5).abs() < 0.01 {
                    labels.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .draw()?;
        let width = 0.8 / proxies.len().max(1) as f64;
        for (g, bars) in cells.values().enumerate() {
            for (name, rps, p50, p99) in bars {
                let k = proxies.iter().position(|p| p == name).unwrap_or(0);
                let x0 = g as f64 + 0.1 + k as f64 * width;
                let color = COLORS[k % COLORS.len()];
                let v = if rps_panel { *rps } else { p50 / 1000.0 };
                let bar = Rectangle::new([(x0, 0.0), (x0 + width * 0.9, v)], color.filled());
                chart.draw_series(std::iter::once(bar))?;
                if !rps_panel {
                    let xm = x0 + width * 0.45;
                    let top = p99 / 1000.0;
                    let whisker = [(xm, v), (xm, top)];
                    let cap = [(xm - width * 0.2, top), (xm + width * 0.2, top)];
                    for line in [whisker, cap] {
                        chart.draw_series(std::iter::once(PathElement::new(
                            line.to_vec(),
                            BLACK.stroke_width(2),
                        )))?;
                    }
                }
            }
        }
        if rps_panel {
            for (k, p) in proxies.iter().enumerate() {
                let c = COLORS[k % COLORS.len()];
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(0.0, 0.0), (0.0, 0.0)],
                        c.filled(),
                    )))?
                    .label(p.clone())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled())
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()?;
        }
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests;
