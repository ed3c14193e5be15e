//! SVG charts with `plotters` (SVG backend only: no bitmap, no system fonts;
//! the viewer renders the text). Output depends only on the figures, so a
//! chart is as deterministic as its table.

use plotters::prelude::*;

use crate::matrix::ScenarioResults;
use sched::Time;

const WIDTH: u32 = 640;
const HEIGHT: u32 = 400;
const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0x94, 0x67, 0xbd),
];

/// A chart that could not be drawn.
#[derive(Debug)]
pub struct ChartError(pub String);

impl core::fmt::Display for ChartError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "chart: {}", self.0)
    }
}

fn err<E: core::fmt::Debug>(e: E) -> ChartError {
    ChartError(format!("{e:?}"))
}

/// One bar chart per workload of `results`: the mean of each configuration
/// (HT/noHT/csc/csc-fixed, and BM when run). Returns (bench name, SVG text).
pub fn bar_charts(results: &ScenarioResults) -> Result<Vec<(String, String)>, ChartError> {
    let mut charts = Vec::new();
    for (bench, cells) in &results.rows {
        let means: Vec<f64> = cells
            .iter()
            .map(|c| if c.mean().is_finite() { c.mean() } else { 0.0 })
            .collect();
        let top = means.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.15;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
            root.fill(&WHITE).map_err(err)?;
            let caption = format!(
                "{} {} ({}, {})",
                results.scenario.name(),
                bench.name(),
                bench.unit(),
                if bench.higher_is_better() {
                    "higher is better"
                } else {
                    "lower is better"
                }
            );
            let n = cells.len();
            let names: Vec<&str> = results.columns.iter().map(|c| c.name()).collect();
            let mut chart = ChartBuilder::on(&root)
                .caption(caption, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(30)
                .y_label_area_size(70)
                .build_cartesian_2d(0.0..n as f64, 0.0..top)
                .map_err(err)?;
            chart
                .configure_mesh()
                .max_light_lines(0)
                .disable_x_mesh()
                .x_labels(n * 2 + 1)
                .x_label_formatter(&|x| {
                    let i = x.floor() as usize;
                    if (x - i as f64 - 0.5).abs() < 1e-6 && i < names.len() {
                        names[i].to_string()
                    } else {
                        String::new()
                    }
                })
                .y_desc(bench.unit())
                .draw()
                .map_err(err)?;
            chart
                .draw_series(means.iter().enumerate().map(|(i, &m)| {
                    Rectangle::new(
                        [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, m)],
                        COLORS[i % COLORS.len()].filled(),
                    )
                }))
                .map_err(err)?;
            root.present().map_err(err)?;
        }
        charts.push((bench.name(), svg));
    }
    Ok(charts)
}

/// The latency CDFs of the BOOST pair for one scheduler: `series` are
/// (label, sorted latencies in ns). The x axis is logarithmic, in us.
pub fn latency_cdf(title: &str, series: &[(String, &[Time])]) -> Result<String, ChartError> {
    let lo = series
        .iter()
        .filter_map(|(_, v)| v.first())
        .min()
        .copied()
        .unwrap_or(1)
        .max(100) as f64
        / 1e3;
    let hi = series
        .iter()
        .filter_map(|(_, v)| v.last())
        .max()
        .copied()
        .unwrap_or(1) as f64
        / 1e3;
    let (lo, hi) = (lo * 0.8, (hi * 1.25).max(lo * 2.0));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
            .map_err(err)?;
        chart
            .configure_mesh()
            .max_light_lines(0)
            .x_desc("wake-up latency (us, log)")
            .y_desc("fraction of wake-ups")
            .draw()
            .map_err(err)?;
        for (i, (label, values)) in series.iter().enumerate() {
            let n = values.len().max(1) as f64;
            // A step function through every distinct value (at most 400
            // points, so the file stays small).
            let stride = values.len().div_ceil(400).max(1);
            let mut points: Vec<(f64, f64)> = values
                .iter()
                .enumerate()
                .filter(|(k, _)| k % stride == 0 || *k + 1 == values.len())
                .map(|(k, &v)| ((v as f64 / 1e3).max(lo), (k + 1) as f64 / n))
                .collect();
            if let Some(&(x, _)) = points.first() {
                points.insert(0, (x, 0.0));
            }
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(err)?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}
