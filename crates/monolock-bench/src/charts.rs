//! SVG charts (plotters' SVG backend only: text is emitted as SVG `<text>`,
//! so no font files or system libraries are involved).

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use crate::{report::Summary, stats::Samples};

const MONO: RGBColor = RGBColor(31, 90, 180);
const MONO_LIGHT: RGBColor = RGBColor(110, 170, 235);
const REDIS: RGBColor = RGBColor(200, 40, 40);
const REDIS_LIGHT: RGBColor = RGBColor(240, 140, 60);

/// One line of a latency chart.
pub struct Series<'a> {
    /// Legend text.
    pub label: String,
    /// The samples.
    pub samples: &'a mut Samples,
    /// True for monolock (blue family), false for Redis (red family).
    pub monolock: bool,
    /// A lighter shade (second variant of the same system).
    pub light: bool,
}

fn colour(monolock: bool, light: bool) -> RGBColor {
    match (monolock, light) {
        (true, false) => MONO,
        (true, true) => MONO_LIGHT,
        (false, false) => REDIS,
        (false, true) => REDIS_LIGHT,
    }
}

/// `250 µs`, `1.5 ms`, `2 s`.
fn micros(us: f64) -> String {
    use crate::report::fmt_num;
    if us >= 1e6 {
        format!("{} s", fmt_num(us / 1e6))
    } else if us >= 1e3 {
        format!("{} ms", fmt_num(us / 1e3))
    } else {
        format!("{} µs", fmt_num(us))
    }
}

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("chart: {e}")
}

/// A log-log complementary CDF: for each latency x, the fraction of samples
/// at least that slow. p50 is at 0.5, p99 at 0.01, p99.9 at 0.001.
pub fn latency_ccdf(
    path: &Path,
    title: &str,
    x_desc: &str,
    series: Vec<Series<'_>>,
) -> Result<bool> {
    type Line = (String, Vec<(f64, f64)>, RGBColor);
    let lines: Vec<Line> = series
        .into_iter()
        .filter(|s| !s.samples.is_empty())
        .map(|s| {
            let pts: Vec<(f64, f64)> = s
                .samples
                .ccdf_points(300)
                .into_iter()
                .map(|(x, y)| (x.max(0.1), y))
                .collect();
            (s.label, pts, colour(s.monolock, s.light))
        })
        .collect();
    if lines.is_empty() {
        return Ok(false);
    }
    let all = lines.iter().flat_map(|(_, p, _)| p.iter());
    let (mut x_min, mut x_max, mut y_min) = (f64::MAX, 0f64, 1f64);
    for &(x, y) in all {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
        y_min = y_min.min(y);
    }
    let x_range = (x_min / 1.5)..(x_max * 1.5);
    let y_range = (y_min / 2.0)..1.2;

    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x_range.log_scale(), y_range.log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("fraction of samples at least this slow")
        .x_label_formatter(&|x| micros(*x))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(err)?;
    for (label, pts, c) in lines {
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        // Fast and rare is the empty corner of a complementary CDF.
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(true)
}

/// Cycles/s against clients, median with a min–max bar per point.
pub fn throughput(path: &Path, s: &Summary, clients: &[usize]) -> Result<bool> {
    let mut lines = Vec::new();
    for (system, c) in [("monolock", MONO), ("redis", REDIS)] {
        let pts: Vec<(f64, f64, f64, f64)> = clients
            .iter()
            .filter_map(|n| {
                s.get(&format!("throughput.c{n}.{system}.cycles_per_s"))
                    .map(|sp| (*n as f64, sp.median, sp.min, sp.max))
            })
            .collect();
        if !pts.is_empty() {
            lines.push((system, pts, c));
        }
    }
    if lines.is_empty() {
        return Ok(false);
    }
    let y_max = lines
        .iter()
        .flat_map(|(_, p, _)| p.iter().map(|q| q.3))
        .fold(0f64, f64::max)
        * 1.15;
    let x_max = clients.iter().copied().max().unwrap_or(1) as f64 * 1.6;

    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Uncontended lock cycles per second vs clients",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d((0.7f64..x_max).log_scale(), 0f64..y_max.max(1.0))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("clients, each on its own lock name")
        .y_desc("lock cycles / s (median, bar = min–max)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(err)?;
    for (system, pts, c) in lines {
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0, p.1)),
                c.stroke_width(2),
            ))
            .map_err(err)?
            .label(system)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], c.stroke_width(3)));
        chart
            .draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 4, c.filled())))
            .map_err(err)?;
        chart
            .draw_series(
                pts.iter()
                    .map(|p| PathElement::new(vec![(p.0, p.2), (p.0, p.3)], c.stroke_width(2))),
            )
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(true)
}
