//! Charts in the style of the papers' figures: throughput against threads, one line per
//! series, and latency CDFs, as PNG and SVG (plotters).
//!
//! Text layout needs a TrueType font: the first of [`FONT_PATHS`] that exists is loaded at
//! run time (Debian's `fonts-dejavu-core`); without one no chart is drawn (the tables, JSON
//! and CSV are still written).

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::bench::SweepReport;

/// Fonts tried for PNG text, in order.
pub const FONT_PATHS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Errors drawing a chart.
#[derive(Debug, thiserror::Error)]
#[error("chart {file}: {msg}")]
pub struct ChartError {
    file: String,
    msg: String,
}

fn font_loaded() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(|| {
        for p in FONT_PATHS {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn throughput<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, r: &SweepReport, w: &str) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let n = r.threads.len();
    let ymax =
        r.points.iter().filter(|p| p.workload == w).map(|p| p.ops_per_sec).fold(0.0, f64::max).max(1.0) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{w}: throughput"), ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.3f64..(n as f64 - 0.7).max(0.3), 0f64..ymax)?;
    let threads = r.threads.clone();
    chart
        .configure_mesh()
        .x_desc("threads")
        .y_desc("ops/s")
        .x_labels(n.max(2))
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < threads.len() {
                threads[i as usize].to_string()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| if *y >= 1000.0 { format!("{:.0}k", y / 1000.0) } else { format!("{y:.0}") })
        .draw()?;
    for (k, s) in r.series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        let pts: Vec<(f64, f64)> = r
            .threads
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                r.point(w, *t, &s.name).filter(|p| p.error.is_none()).map(|p| (i as f64, p.ops_per_sec))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// The CDF to draw for a workload at `threads`: fsync latency when every series has one.
fn cdf_kind(r: &SweepReport, w: &str, threads: usize) -> bool {
    r.series.iter().all(|s| {
        r.point(w, threads, &s.name)
            .and_then(|p| p.median_run.as_ref())
            .is_none_or(|m| !m.fsync_cdf.is_empty())
    })
}

fn latency<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    r: &SweepReport,
    w: &str,
    threads: usize,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let fsync = cdf_kind(r, w, threads);
    let curves: Vec<(String, Vec<[f64; 2]>)> = r
        .series
        .iter()
        .filter_map(|s| {
            let m = r.point(w, threads, &s.name)?.median_run.as_ref()?;
            let c = if fsync { &m.fsync_cdf } else { &m.op_cdf };
            (!c.is_empty()).then(|| (s.name.clone(), c.clone()))
        })
        .collect();
    let xmax = curves.iter().flat_map(|(_, c)| c.iter().map(|p| p[0])).fold(10.0, f64::max) * 1.5;
    let what = if fsync { "fsync latency" } else { "operation latency" };
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{w}, {threads} threads: {what} CDF"), ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1f64..xmax).log_scale(), 0f64..1.0)?;
    chart.configure_mesh().x_desc("latency (µs, log)").y_desc("fraction").draw()?;
    for (k, (name, c)) in curves.iter().enumerate() {
        let col = COLORS[k % COLORS.len()];
        let pts: Vec<(f64, f64)> = c.iter().map(|p| (p[0].max(1.0), p[1])).collect();
        chart
            .draw_series(LineSeries::new(pts, col.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn both(
    dir: &Path,
    stem: &str,
    draw_png: impl FnOnce(DrawingArea<BitMapBackend<'_>, Shift>) -> DrawResult,
    draw_svg: impl FnOnce(DrawingArea<SVGBackend<'_>, Shift>) -> DrawResult,
    out: &mut Vec<String>,
) -> Result<(), ChartError> {
    let err = |f: &str, e: Box<dyn std::error::Error>| ChartError { file: f.to_string(), msg: e.to_string() };
    let svg = format!("{stem}.svg");
    let png = format!("{stem}.png");
    draw_svg(SVGBackend::new(&dir.join(&svg), (900, 560)).into_drawing_area()).map_err(|e| err(&svg, e))?;
    draw_png(BitMapBackend::new(&dir.join(&png), (900, 560)).into_drawing_area())
        .map_err(|e| err(&png, e))?;
    out.push(png);
    Ok(())
}

/// Make `dir` for charts, refusing (naming the font paths) where no font can label them.
fn chart_dir(dir: &Path) -> Result<(), ChartError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| ChartError { file: dir.display().to_string(), msg: e.to_string() })?;
    if !font_loaded() {
        return Err(ChartError {
            file: dir.display().to_string(),
            msg: format!(
                "no TrueType font at {} (apt-get install fonts-dejavu-core)",
                FONT_PATHS.join(" or ")
            ),
        });
    }
    Ok(())
}

/// Draw every chart of a sweep into `dir` as PNG and SVG; returns the PNG files, in order.
pub fn draw_all(r: &SweepReport, dir: &Path) -> Result<Vec<String>, ChartError> {
    chart_dir(dir)?;
    let mut out = Vec::new();
    for w in &r.workloads {
        let stem = format!("throughput-{w}");
        both(dir, &stem, |a| throughput(a, r, w), |a| throughput(a, r, w), &mut out)?;
        if let Some(&t) = r.threads.iter().max() {
            let stem = format!("latency-{w}-{t}t");
            both(dir, &stem, |a| latency(a, r, w, t), |a| latency(a, r, w, t), &mut out)?;
        }
    }
    Ok(out)
}

fn ratios<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    labels: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let n = labels.len().max(1);
    let ymax = series.iter().flat_map(|(_, v)| v.iter().flatten().copied()).fold(1.2, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(110)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..ymax)?;
    let l = labels.to_vec();
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < l.len() {
                l[i as usize].clone()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 12).into_font().transform(FontTransform::Rotate90))
        .y_desc("response time / nojournal")
        .draw()?;
    chart.draw_series(LineSeries::new(vec![(-0.5, 1.0), (n as f64 - 0.5, 1.0)], BLACK.stroke_width(1)))?;
    for (k, (name, v)) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        let pts: Vec<(f64, f64)> =
            v.iter().enumerate().filter_map(|(i, y)| y.map(|y| (i as f64, y))).collect();
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 5, c.filled())))?
            .label(name.clone())
            .legend(move |(x, y)| Circle::new((x + 8, y), 5, c.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// A chart of ratios per labelled cell (one point per series and cell, a line at 1.0), as
/// `stem.png` and `stem.svg` in `dir`.
pub fn draw_ratios(
    dir: &Path,
    stem: &str,
    title: &str,
    labels: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> Result<(), ChartError> {
    chart_dir(dir)?;
    let mut out = Vec::new();
    both(dir, stem, |a| ratios(a, title, labels, series), |a| ratios(a, title, labels, series), &mut out)
}
