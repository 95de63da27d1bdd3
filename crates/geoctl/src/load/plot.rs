//! The run as an SVG picture (plotters): acknowledged writes per second on top, and below it
//! each probe's visibility lag at the moment its write was acknowledged.

use std::fmt::Display;

use plotters::prelude::*;

use crate::error::GeoctlError;
use crate::load::report::{LoadReport, grouped};

/// The picture's size in pixels.
pub const SIZE: (u32, u32) = (1000, 720);

fn plot_error(error: impl Display) -> GeoctlError {
    GeoctlError::Plot(error.to_string())
}

/// The write rate as a step line: each complete second's count held across that second. The
/// tail after the last complete second (answers to requests sent before the end) is left out:
/// a fraction of a second says little about a rate. The JSON report keeps every bucket.
pub fn rate_steps(report: &LoadReport) -> Vec<(f64, f64)> {
    report
        .timeline
        .iter()
        .filter(|s| (s.second + 1) as f64 <= report.elapsed_secs)
        .flat_map(|s| {
            let (from, writes) = (s.second as f64, s.writes as f64);
            [(from, writes), (from + 1.0, writes)]
        })
        .collect()
}

/// `(when acknowledged, lag)` of every visible probe, seconds and milliseconds, in time order.
pub fn lag_points(report: &LoadReport) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = (report.lag_samples.iter())
        .filter_map(|s| s.lag_ms.map(|lag| (s.at_secs, lag)))
        .collect();
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    points
}

/// The picture as SVG text.
pub fn render_svg(report: &LoadReport) -> Result<String, GeoctlError> {
    let rate = rate_steps(report);
    let lags = lag_points(report);
    let lost: Vec<f64> = (report.lag_samples.iter())
        .filter(|s| s.lag_ms.is_none())
        .map(|s| s.at_secs)
        .collect();
    let x_end = (rate.iter().map(|p| p.0))
        .chain(lags.iter().map(|p| p.0))
        .chain(lost.iter().copied())
        .fold(report.settings.duration_secs as f64, f64::max)
        .max(1.0);
    let rate_top = rate.iter().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let lag_top = lags.iter().map(|p| p.1).fold(10.0, f64::max) * 1.15;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let s = &report.settings;
        let what = match s.batch_size {
            Some(n) => format!("{} path, {n} writes a request", s.path),
            None => format!("{} path", s.path),
        };
        let title = format!(
            "geoctl load: {} writes/s over {:.1} s, {what}, {} over {} counters",
            grouped(report.throughput.writes_per_sec.round() as u64),
            report.elapsed_secs,
            s.distribution,
            s.counters
        );
        let root = root
            .titled(&title, ("sans-serif", 20))
            .map_err(plot_error)?;
        let (top, bottom) = root.split_vertically(SIZE.1 / 2 - 20);

        let mut chart = ChartBuilder::on(&top)
            .caption(
                "acknowledged writes per second (complete seconds)",
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..x_end, 0.0..rate_top)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("seconds since start")
            .y_desc("writes/s")
            .y_label_formatter(&|v| grouped(v.max(0.0).round() as u64))
            .draw()
            .map_err(plot_error)?;
        chart
            .draw_series(LineSeries::new(rate, BLUE.stroke_width(2)))
            .map_err(plot_error)?;

        let mut chart = ChartBuilder::on(&bottom)
            .caption(
                format!(
                    "visibility lag (write acknowledged -> global aggregator shows it): p50 {} ms, p99 {} ms; red: not visible",
                    show(report.visibility_lag.p50_ms),
                    show(report.visibility_lag.p99_ms)
                ),
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..x_end, 0.0..lag_top)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("seconds since start (write acknowledged)")
            .y_desc("lag, ms")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(plot_error)?;
        chart
            .draw_series(
                lags.iter()
                    .map(|&point| Circle::new(point, 3, GREEN.filled())),
            )
            .map_err(plot_error)?;
        chart
            .draw_series(
                lost.iter()
                    .map(|&at| Cross::new((at, lag_top * 0.97), 5, RED.stroke_width(2))),
            )
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

fn show(ms: Option<f64>) -> String {
    ms.map_or_else(|| "n/a".to_owned(), |ms| format!("{ms:.1}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::exactness::ExactnessReport;
    use crate::load::probe::Probe;
    use crate::load::report::{LoadSettings, assemble};
    use crate::load::tally::{Tally, WriteOutcome};
    use crate::visibility::Outcome;
    use std::time::Duration;

    fn report() -> LoadReport {
        // Writes at 0.1, 0.2, 1.1 and 2.2 s; the run ends at 2.5 s.
        let mut tally = Tally::default();
        for ms in [100, 200, 1100, 2200] {
            let at = Duration::from_millis(ms);
            tally.answered(Duration::from_millis(3), at);
            tally.outcome(0, 1, WriteOutcome::Acknowledged, at);
        }
        let probes = vec![
            Probe {
                at: Duration::from_millis(150),
                outcome: Outcome::Visible(Duration::from_millis(190)),
            },
            Probe {
                at: Duration::from_millis(250),
                outcome: Outcome::TimedOut,
            },
            // Started later, acknowledged earlier.
            Probe {
                at: Duration::from_millis(120),
                outcome: Outcome::Visible(Duration::from_millis(150)),
            },
        ];
        let settings = LoadSettings {
            duration_secs: 2,
            rate: 0,
            counters: 1,
            distribution: "uniform".into(),
            zipf_exponent: None,
            path: "http".into(),
            batch_size: None,
            concurrency: 1,
            counter_prefix: "p".into(),
            shard_nodes: 1,
            route: "owner".into(),
            keyed: true,
        };
        let exactness = ExactnessReport {
            counters: 1,
            exact: 1,
            within_unknown: 0,
            mismatches: Vec::new(),
            waited_ms: 0,
            rounds: 1,
        };
        assemble(
            settings,
            Duration::from_millis(2500),
            &tally,
            &probes,
            exactness,
        )
    }

    #[test]
    fn series_come_from_the_report() {
        let report = report();
        assert_eq!(
            rate_steps(&report),
            // Second 2 is not complete: left out.
            [(0.0, 2.0), (1.0, 2.0), (1.0, 1.0), (2.0, 1.0)]
        );
        assert_eq!(lag_points(&report), [(0.12, 150.0), (0.15, 190.0)]);
    }

    #[test]
    fn the_svg_is_a_whole_document() {
        let svg = render_svg(&report()).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("acknowledged writes per second"));
        assert!(svg.contains("visibility lag"));
        assert!(svg.contains("<circle"));
    }
}
