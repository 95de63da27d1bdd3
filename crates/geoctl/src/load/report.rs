//! The load's figures, as printed and as written by `--json`: [`assemble`] builds a
//! [`LoadReport`] from the merged tally, the probes and the exactness check; [`render`] is the
//! text for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::load::exactness::ExactnessReport;
use crate::load::probe::{PROBE_POLL, Probe};
use crate::load::tally::Tally;
use crate::visibility::{Outcome, Outcomes, micros, ms_one_decimal, show_ms};

/// How many mismatching counters the text lists (the JSON lists all).
pub const MISMATCHES_SHOWN: usize = 20;

/// What the load was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadSettings {
    /// How long writes were sent, in seconds.
    pub duration_secs: u64,
    /// The target rate in writes per second; 0: as fast as possible.
    pub rate: u64,
    /// How many counters the writes were spread over.
    pub counters: usize,
    /// `uniform` or `zipf`.
    pub distribution: String,
    /// The Zipf exponent (`null` for uniform).
    pub zipf_exponent: Option<f64>,
    /// `http` (one write a request) or `batch` (postcard batches).
    pub path: String,
    /// Writes per batch (`null` for the HTTP path).
    pub batch_size: Option<usize>,
    /// How many requests were in flight at once at most.
    pub concurrency: usize,
    /// The counters were `<prefix>-0..`, the probes `<prefix>-probe-0..`.
    pub counter_prefix: String,
    /// How many shard nodes the requests took turns over.
    pub shard_nodes: usize,
    /// `owner` (each write to the node owning its slot) or `any` (each request whole to the
    /// node whose turn it is, which forwards what it does not own).
    pub route: String,
    /// Whether every write carried its own idempotency key.
    pub keyed: bool,
}

/// How the writes ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WriteCounts {
    /// Writes sent (each counted once, however many attempts).
    pub sent: u64,
    /// Acknowledged.
    pub acknowledged: u64,
    /// Refused (nothing applied).
    pub refused: u64,
    /// Outcome unknown (may or may not have been applied).
    pub unknown: u64,
    /// Sent a second time (same idempotency key).
    pub retried: u64,
}

/// The HTTP requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RequestCounts {
    /// Sent, retries included.
    pub sent: u64,
    /// Answered (any status).
    pub answered: u64,
}

/// Rates over the whole run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Throughput {
    /// Acknowledged writes per second.
    pub writes_per_sec: f64,
    /// Answered requests per second.
    pub requests_per_sec: f64,
}

/// Request latency in milliseconds with two decimals; `null` without answered requests.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Requests measured.
    pub requests: u64,
    /// Median.
    pub p50_ms: Option<f64>,
    /// 90th percentile.
    pub p90_ms: Option<f64>,
    /// 99th percentile.
    pub p99_ms: Option<f64>,
    /// Largest.
    pub max_ms: Option<f64>,
}

/// Visibility lag under load, from the probes, in milliseconds with one decimal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LagSummary {
    /// Probes started.
    pub probes: usize,
    /// Probes whose write showed at the global aggregator in time.
    pub visible: usize,
    /// Probes not visible in time.
    pub timed_out: usize,
    /// Probes whose write failed.
    pub failed: usize,
    /// The first failure's message.
    pub first_failure: Option<String>,
    /// Median.
    pub p50_ms: Option<f64>,
    /// 99th percentile.
    pub p99_ms: Option<f64>,
    /// Largest.
    pub max_ms: Option<f64>,
    /// How often probes polled the global aggregator (the figures' resolution).
    pub poll_interval_ms: u64,
}

/// One second of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimelineSecond {
    /// Seconds since the start (this bucket is `[second, second + 1)`).
    pub second: u64,
    /// Writes acknowledged in it.
    pub writes: u64,
    /// Requests answered in it.
    pub requests: u64,
}

/// One probe, for plotting lag over time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LagSample {
    /// When its write was acknowledged, seconds since the start.
    pub at_secs: f64,
    /// Its lag; `null` unless visible.
    pub lag_ms: Option<f64>,
    /// `visible`, `timed_out` or `failed`.
    pub outcome: &'static str,
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadReport {
    /// What was asked.
    pub settings: LoadSettings,
    /// From the first request to the last answer, seconds.
    pub elapsed_secs: f64,
    /// The writes.
    pub writes: WriteCounts,
    /// The requests.
    pub requests: RequestCounts,
    /// Rates over `elapsed_secs`.
    pub throughput: Throughput,
    /// Per-request latency.
    pub latency: LatencySummary,
    /// Visibility lag under load.
    pub visibility_lag: LagSummary,
    /// Whether the global totals equal the acknowledged deltas.
    pub exactness: ExactnessReport,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// The first error's message.
    pub first_error: Option<String>,
    /// Per second: acknowledged writes and answered requests.
    pub timeline: Vec<TimelineSecond>,
    /// Every probe, in start order.
    pub lag_samples: Vec<LagSample>,
}

/// Microseconds as milliseconds rounded half up to two decimals: `1234` → `1.23`.
pub fn ms_two_decimals(micros: u64) -> f64 {
    (micros.saturating_add(5) / 10) as f64 / 100.0
}

/// `count / seconds`, 0 when no time passed.
pub fn per_second(count: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

fn latency_summary(histogram: &Histogram<u64>) -> LatencySummary {
    let some = !histogram.is_empty();
    let at = |q: f64| some.then(|| ms_two_decimals(histogram.value_at_quantile(q)));
    LatencySummary {
        requests: histogram.len(),
        p50_ms: at(0.50),
        p90_ms: at(0.90),
        p99_ms: at(0.99),
        max_ms: some.then(|| ms_two_decimals(histogram.max())),
    }
}

fn lag_summary(probes: &[Probe]) -> LagSummary {
    let counted = Outcomes::count(probes.iter().map(|probe| &probe.outcome));
    LagSummary {
        probes: probes.len(),
        visible: counted.visible(),
        timed_out: counted.timed_out,
        failed: counted.failed,
        first_failure: counted.first_failure.clone(),
        p50_ms: counted.ms_at(0.50),
        p99_ms: counted.ms_at(0.99),
        max_ms: counted.max_ms(),
        poll_interval_ms: PROBE_POLL.as_millis() as u64,
    }
}

fn lag_sample(probe: &Probe) -> LagSample {
    let (lag_ms, outcome) = match &probe.outcome {
        Outcome::Visible(lag) => (Some(ms_one_decimal(micros(*lag))), "visible"),
        Outcome::TimedOut => (None, "timed_out"),
        Outcome::Failed(_) => (None, "failed"),
    };
    LagSample {
        at_secs: (probe.at.as_millis() as f64) / 1000.0,
        lag_ms,
        outcome,
    }
}

/// Builds the report of a run that took `elapsed`.
pub fn assemble(
    settings: LoadSettings,
    elapsed: Duration,
    tally: &Tally,
    probes: &[Probe],
    exactness: ExactnessReport,
) -> LoadReport {
    LoadReport {
        settings,
        elapsed_secs: (elapsed.as_millis() as f64) / 1000.0,
        writes: WriteCounts {
            sent: tally.acknowledged + tally.refused + tally.unknown,
            acknowledged: tally.acknowledged,
            refused: tally.refused,
            unknown: tally.unknown,
            retried: tally.retried,
        },
        requests: RequestCounts {
            sent: tally.requests_sent,
            answered: tally.requests_answered,
        },
        throughput: Throughput {
            writes_per_sec: per_second(tally.acknowledged, elapsed),
            requests_per_sec: per_second(tally.requests_answered, elapsed),
        },
        latency: latency_summary(&tally.latency),
        visibility_lag: lag_summary(probes),
        exactness,
        errors: tally.errors.clone(),
        first_error: tally.first_error.clone(),
        timeline: (tally.seconds.iter().enumerate())
            .map(|(second, s)| TimelineSecond {
                second: second as u64,
                writes: s.writes,
                requests: s.requests,
            })
            .collect(),
        lag_samples: probes.iter().map(lag_sample).collect(),
    }
}

/// A whole number with thin groups of three digits: `1234567` → `1,234,567`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut text = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            text.push(',');
        }
        text.push(c);
    }
    text
}

fn show_ms2(ms: Option<f64>) -> String {
    ms.map_or_else(|| "n/a".to_owned(), |ms| format!("{ms:.2}"))
}

/// `p50 1.00 ms  p99 2.00 ms`: each labelled figure shown by `show`.
fn percentiles(figures: &[(&str, Option<f64>)], show: fn(Option<f64>) -> String) -> String {
    let shown: Vec<String> = (figures.iter())
        .map(|&(label, ms)| format!("{label} {} ms", show(ms)))
        .collect();
    shown.join("  ")
}

/// The one-line verdict of the exactness check.
pub fn exactness_line(exactness: &ExactnessReport) -> String {
    let waited = exactness.waited_ms as f64 / 1000.0;
    if exactness.is_exact() {
        let mut line = format!(
            "exact: {} counters, global totals equal the acknowledged deltas",
            exactness.exact
        );
        if exactness.within_unknown > 0 {
            let _ = write!(
                line,
                "; {} more with writes of unknown outcome are within their possible totals",
                exactness.within_unknown
            );
        }
        let _ = write!(line, " (settled {waited:.2} s after the load)");
        line
    } else {
        format!(
            "NOT exact: {} of {} counters differ from the acknowledged deltas after waiting {waited:.2} s",
            exactness.mismatches.len(),
            exactness.counters
        )
    }
}

/// The report for people.
pub fn render(report: &LoadReport) -> String {
    let s = &report.settings;
    let mut text = String::new();
    let pace = match s.rate {
        0 => "flat out".to_owned(),
        rate => format!("target {} writes/s", grouped(rate)),
    };
    let _ = writeln!(
        text,
        "elapsed      {:.2} s ({} s of writes, {pace})",
        report.elapsed_secs, s.duration_secs
    );
    let w = &report.writes;
    let _ = writeln!(
        text,
        "writes       {} acknowledged, {} refused, {} unknown outcome ({} retried)",
        grouped(w.acknowledged),
        grouped(w.refused),
        grouped(w.unknown),
        grouped(w.retried)
    );
    let _ = writeln!(
        text,
        "throughput   {} writes/s, {} requests/s",
        grouped(report.throughput.writes_per_sec.round() as u64),
        grouped(report.throughput.requests_per_sec.round() as u64)
    );
    let l = &report.latency;
    let figures = [
        ("p50", l.p50_ms),
        ("p90", l.p90_ms),
        ("p99", l.p99_ms),
        ("max", l.max_ms),
    ];
    let latency = percentiles(&figures, show_ms2);
    let _ = writeln!(
        text,
        "latency      {latency}  ({} requests)",
        grouped(l.requests)
    );
    let v = &report.visibility_lag;
    let lag = percentiles(
        &[("p50", v.p50_ms), ("p99", v.p99_ms), ("max", v.max_ms)],
        show_ms,
    );
    let _ = writeln!(
        text,
        "lag          {lag}  ({} probes: {} visible, {} timed out, {} failed)",
        v.probes, v.visible, v.timed_out, v.failed
    );
    if let Some(failure) = &v.first_failure {
        let _ = writeln!(text, "             first probe failure: {failure}");
    }
    if !report.errors.is_empty() {
        let kinds: Vec<String> = (report.errors.iter())
            .map(|(kind, n)| format!("{kind}: {}", grouped(*n)))
            .collect();
        let _ = writeln!(text, "errors       {}", kinds.join(", "));
        if let Some(first) = &report.first_error {
            let _ = writeln!(text, "             first: {first}");
        }
    }
    let _ = writeln!(text, "{}", exactness_line(&report.exactness));
    let mismatches = &report.exactness.mismatches;
    for m in mismatches.iter().take(MISMATCHES_SHOWN) {
        let global = match (&m.observed, &m.read_error) {
            (Some(value), _) => value.to_string(),
            (None, Some(error)) => format!("unread ({error})"),
            (None, None) => "unread".to_owned(),
        };
        let unknown = match m.unknown_writes {
            0 => String::new(),
            n => format!(", {n} writes of unknown outcome"),
        };
        let _ = writeln!(
            text,
            "  {}: acknowledged {}, global {global}{unknown}",
            m.id, m.expected
        );
    }
    if mismatches.len() > MISMATCHES_SHOWN {
        let _ = writeln!(
            text,
            "  ... and {} more (all in --json)",
            mismatches.len() - MISMATCHES_SHOWN
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::exactness::Mismatch;
    use crate::load::tally::WriteOutcome;

    fn settings() -> LoadSettings {
        LoadSettings {
            duration_secs: 2,
            rate: 0,
            counters: 10,
            distribution: "zipf".into(),
            zipf_exponent: Some(1.1),
            path: "batch".into(),
            batch_size: Some(2),
            concurrency: 4,
            counter_prefix: "p".into(),
            shard_nodes: 6,
            route: "owner".into(),
            keyed: true,
        }
    }

    fn exact(counters: usize) -> ExactnessReport {
        ExactnessReport {
            counters,
            exact: counters,
            within_unknown: 0,
            mismatches: Vec::new(),
            waited_ms: 310,
            rounds: 2,
        }
    }

    fn tally() -> Tally {
        let mut tally = Tally::default();
        for i in 0..4u64 {
            tally.sent();
            let at = Duration::from_millis(400 * i);
            tally.answered(Duration::from_millis(i + 1), at);
            tally.outcome(0, 3, WriteOutcome::Acknowledged, at);
            tally.outcome(1, -1, WriteOutcome::Acknowledged, at);
        }
        tally.outcome(2, 5, WriteOutcome::Unknown, Duration::from_millis(1900));
        tally.error("transport error", || "reset".to_owned());
        tally
    }

    fn probes() -> Vec<Probe> {
        vec![
            Probe {
                at: Duration::from_millis(100),
                outcome: Outcome::Visible(Duration::from_micros(180_040)),
            },
            Probe {
                at: Duration::from_millis(200),
                outcome: Outcome::Visible(Duration::from_micros(250_000)),
            },
            Probe {
                at: Duration::from_millis(300),
                outcome: Outcome::TimedOut,
            },
        ]
    }

    #[test]
    fn numbers_are_shown_for_people() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(ms_two_decimals(1234), 1.23);
        assert_eq!(ms_two_decimals(1235), 1.24);
        assert_eq!(per_second(10, Duration::ZERO), 0.0);
        assert_eq!(per_second(10, Duration::from_millis(500)), 20.0);
    }

    #[test]
    fn the_report_adds_up_the_run() {
        let report = assemble(
            settings(),
            Duration::from_secs(2),
            &tally(),
            &probes(),
            exact(3),
        );
        assert_eq!(report.elapsed_secs, 2.0);
        assert_eq!(report.writes.acknowledged, 8);
        assert_eq!(report.writes.unknown, 1);
        assert_eq!(report.writes.sent, 9);
        assert_eq!(report.requests.sent, 4);
        assert_eq!(report.throughput.writes_per_sec, 4.0);
        assert_eq!(report.throughput.requests_per_sec, 2.0);
        assert_eq!(report.latency.requests, 4);
        assert_eq!(report.latency.p50_ms, Some(2.0));
        assert_eq!(report.latency.max_ms, Some(4.0));
        assert_eq!(report.visibility_lag.visible, 2);
        assert_eq!(report.visibility_lag.timed_out, 1);
        assert_eq!(report.visibility_lag.p50_ms, Some(180.0));
        assert_eq!(report.visibility_lag.max_ms, Some(250.0));
        // 0, 400, 800 ms in second 0; 1200 ms and the unknown write (not counted) in second 1.
        assert_eq!(report.timeline.len(), 2);
        assert_eq!(report.timeline[0].writes, 6);
        assert_eq!(report.timeline[1].writes, 2);
        assert_eq!(report.timeline[1].requests, 1);
        assert_eq!(report.lag_samples[0].at_secs, 0.1);
        assert_eq!(report.lag_samples[0].lag_ms, Some(180.0));
        assert_eq!(report.lag_samples[2].outcome, "timed_out");

        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["throughput"]["writes_per_sec"], 4.0);
        assert_eq!(json["exactness"]["counters"], 3);
        assert_eq!(json["lag_samples"][2]["lag_ms"], serde_json::Value::Null);
        assert_eq!(json["settings"]["distribution"], "zipf");

        let text = render(&report);
        assert!(
            text.contains(
                "writes       8 acknowledged, 0 refused, 1 unknown outcome (0 retried)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("throughput   4 writes/s, 2 requests/s\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "latency      p50 2.00 ms  p90 4.00 ms  p99 4.00 ms  max 4.00 ms  (4 requests)\n"
            ),
            "{text}"
        );
        assert!(text.contains("lag          p50 180.0 ms  p99 250.0 ms  max 250.0 ms  (3 probes: 2 visible, 1 timed out, 0 failed)\n"), "{text}");
        assert!(
            text.contains("errors       transport error: 1\n             first: reset\n"),
            "{text}"
        );
        assert!(text.contains("exact: 3 counters, global totals equal the acknowledged deltas (settled 0.31 s after the load)\n"), "{text}");
    }

    #[test]
    fn mismatches_are_listed() {
        let mismatches: Vec<Mismatch> = (0..25)
            .map(|i| Mismatch {
                id: format!("p-{i:02}"),
                expected: 10,
                observed: (i > 0).then_some(9),
                unknown_writes: u64::from(i == 1),
                read_error: (i == 0).then(|| "timed out".to_owned()),
            })
            .collect();
        let exactness = ExactnessReport {
            counters: 100,
            exact: 75,
            within_unknown: 0,
            mismatches,
            waited_ms: 10_020,
            rounds: 90,
        };
        let report = assemble(
            settings(),
            Duration::from_secs(2),
            &Tally::default(),
            &[],
            exactness,
        );
        let text = render(&report);
        assert!(text.contains("NOT exact: 25 of 100 counters differ from the acknowledged deltas after waiting 10.02 s\n"), "{text}");
        assert!(
            text.contains("  p-00: acknowledged 10, global unread (timed out)\n"),
            "{text}"
        );
        assert!(
            text.contains("  p-01: acknowledged 10, global 9, 1 writes of unknown outcome\n"),
            "{text}"
        );
        assert!(
            text.contains("  p-19: acknowledged 10, global 9\n"),
            "{text}"
        );
        assert!(!text.contains("p-20"), "{text}");
        assert!(
            text.contains("  ... and 5 more (all in --json)\n"),
            "{text}"
        );
        assert!(text.contains("latency      p50 n/a ms"), "{text}");
        assert!(text.contains("lag          p50 n/a ms"), "{text}");
    }

    #[test]
    fn unknown_outcomes_within_range_are_said() {
        let mut exactness = exact(10);
        exactness.exact = 9;
        exactness.within_unknown = 1;
        assert_eq!(
            exactness_line(&exactness),
            "exact: 9 counters, global totals equal the acknowledged deltas; 1 more with writes of unknown outcome are within their possible totals (settled 0.31 s after the load)"
        );
    }
}
