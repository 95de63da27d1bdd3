//! `geoctl lag`: measures visibility lag, the time from a write's acknowledgement by a shard
//! node until the global aggregator shows it.
//!
//! Each sample writes +1 to a fresh counter `<prefix>-<k>` through a random shard node of a
//! random datacenter, takes the instant the write is acknowledged, then polls the global
//! aggregator (`GET /counter/{id}?allow_partial=true`) every [`POLL_INTERVAL`] until the value
//! is 1. A sample not visible after [`SAMPLE_TIMEOUT`] counts as timed out. Samples run
//! [`DEFAULT_CONCURRENCY`] at a time; lags go into an HDR histogram in microseconds.
//!
//! The design bounds the lag by one shard → datacenter pull interval, plus one datacenter →
//! global interval, plus two polls ([`design_bound_ms`]).
//!
//! With `start_jitter_ms` 0, each task writes its next sample as soon as the previous one shows,
//! which is just after a global pull: every write then waits almost a whole datacenter → global
//! interval, and the figures sit near that interval rather than spreading over the bound. A
//! random start delay of at least the bound lets writes fall anywhere in the pull cycles.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use geocount_model::{CounterId, SyncSettings};
use hdrhistogram::Histogram;
use hyper::Method;
use serde::{Deserialize, Serialize};
use tokio::time::MissedTickBehavior;

use crate::cluster::{Cluster, counter_path, status_error};
use crate::error::GeoctlError;

/// How often a sample polls the global aggregator.
pub const POLL_INTERVAL: Duration = Duration::from_millis(2);
/// How long a sample waits for its write to show before it counts as timed out.
pub const SAMPLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How many samples run at once unless asked otherwise.
pub const DEFAULT_CONCURRENCY: usize = 8;
/// How many samples are taken unless asked otherwise.
pub const DEFAULT_SAMPLES: usize = 200;

/// The largest lag the histogram holds, in microseconds (well above [`SAMPLE_TIMEOUT`]).
const HISTOGRAM_MAX_MICROS: u64 = 60_000_000;
/// The histogram's precision: 4 significant figures (0.01%), finer than the printed 0.1 ms.
const HISTOGRAM_SIGNIFICANT_FIGURES: u8 = 4;

/// What `geoctl lag` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LagOptions {
    /// How many samples to take.
    pub samples: usize,
    /// How many samples run at once.
    pub concurrency: usize,
    /// Sample `k` writes counter `<prefix>-<k>`; `None`: `lag-probe-<random hex>`.
    pub counter_prefix: Option<String>,
    /// Each sample first waits a random time below this many milliseconds (0: none), so that
    /// writes do not fall into step with the aggregators' pulls (see the module doc); `None`:
    /// the shard → datacenter plus datacenter → global intervals.
    pub start_jitter_ms: Option<u64>,
    /// Also write the figures as JSON to this file.
    pub json: Option<PathBuf>,
}

/// The figures of one run, as printed and as written by `--json`. Lags are milliseconds with
/// one decimal; `None` (JSON `null`) when no sample became visible.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LagReport {
    /// Samples taken.
    pub samples: usize,
    /// Samples whose write became visible in time.
    pub visible: usize,
    /// Samples not visible after [`SAMPLE_TIMEOUT`].
    pub timed_out: usize,
    /// Samples whose write was refused or got no answer.
    pub failed: usize,
    /// The first failure's message, if any.
    pub first_failure: Option<String>,
    /// Median lag.
    pub p50_ms: Option<f64>,
    /// 90th percentile lag.
    pub p90_ms: Option<f64>,
    /// 99th percentile lag.
    pub p99_ms: Option<f64>,
    /// Largest lag.
    pub max_ms: Option<f64>,
    /// The topology's `sync.shard_to_datacenter_ms`.
    pub shard_to_datacenter_ms: u64,
    /// The topology's `sync.datacenter_to_global_ms`.
    pub datacenter_to_global_ms: u64,
    /// How often samples polled the global aggregator.
    pub poll_interval_ms: u64,
    /// The design's bound: both sync intervals plus two polls.
    pub bound_ms: u64,
    /// Visible samples whose lag exceeded the bound.
    pub over_bound: usize,
    /// How many samples ran at once.
    pub concurrency: usize,
    /// Each sample waited a random time below this before its write (0: none).
    pub start_jitter_ms: u64,
    /// The counters' prefix.
    pub counter_prefix: String,
}

/// The lag the design promises at most: a write waits at most one shard → datacenter pull and
/// one datacenter → global pull, and is seen at most two polls later.
pub fn design_bound_ms(sync: &SyncSettings, poll_interval_ms: u64) -> u64 {
    sync.shard_to_datacenter_ms + sync.datacenter_to_global_ms + 2 * poll_interval_ms
}

/// Microseconds as milliseconds rounded half up to one decimal: `262149` → `262.1`.
pub fn ms_one_decimal(micros: u64) -> f64 {
    (micros.saturating_add(50) / 100) as f64 / 10.0
}

/// A lag for the text report: one decimal, or `n/a` when no sample became visible.
pub fn show_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "n/a".to_owned(), |ms| format!("{ms:.1}"))
}

/// How one sample ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sample {
    /// Visible after this long.
    Visible(Duration),
    /// Not visible after [`SAMPLE_TIMEOUT`].
    TimedOut,
    /// The write failed, or the counter held something before it.
    Failed(String),
}

/// The one field a poll needs from the global aggregator's answer.
#[derive(Debug, Deserialize)]
struct ValueOnly {
    value: i128,
}

/// The random default prefix: `lag-probe-<16 hex digits>`.
pub fn random_prefix() -> String {
    format!("lag-probe-{:016x}", rand::random::<u64>())
}

/// Takes the samples, prints the figures to `out` (and writes `--json`), and returns them.
pub async fn run(
    cluster: &Cluster,
    options: &LagOptions,
    out: &mut dyn Write,
) -> Result<LagReport, GeoctlError> {
    if options.samples == 0 || options.concurrency == 0 {
        return Err(GeoctlError::InvalidArgument(
            "--samples and --concurrency must be at least 1".to_owned(),
        ));
    }
    let prefix = options.counter_prefix.clone().unwrap_or_else(random_prefix);
    let longest = format!("{prefix}-{}", options.samples - 1);
    CounterId::new(longest.as_str()).map_err(|e| {
        GeoctlError::InvalidArgument(format!(
            "--counter-prefix gives invalid counter ids ({longest:?}): {e}"
        ))
    })?;
    let sync = &cluster.topology().sync;
    let jitter_ms = options
        .start_jitter_ms
        .unwrap_or(sync.shard_to_datacenter_ms + sync.datacenter_to_global_ms);
    let options = &LagOptions {
        start_jitter_ms: Some(jitter_ms),
        ..options.clone()
    };
    let jitter = match jitter_ms {
        0 => String::new(),
        ms => format!(", each starting after a random 0..{ms} ms"),
    };
    writeln!(
        out,
        "measuring {} samples, {} at a time{jitter}, counters {prefix}-0..{} ...",
        options.samples,
        options.concurrency,
        options.samples - 1
    )?;
    out.flush()?;

    let samples = take_samples(cluster, &prefix, options).await;
    let report = summarize(&samples, &cluster.topology().sync, options, &prefix);
    out.write_all(render_report(&report).as_bytes())?;
    if let Some(path) = &options.json {
        let mut text = serde_json::to_string_pretty(&report).expect("a report serializes");
        text.push('\n');
        std::fs::write(path, text).map_err(|source| GeoctlError::Write {
            path: path.clone(),
            source,
        })?;
    }
    Ok(report)
}

/// Runs the samples, `concurrency` at a time, on tokio tasks.
async fn take_samples(cluster: &Cluster, prefix: &str, options: &LagOptions) -> Vec<Sample> {
    let (count, jitter_ms) = (options.samples, options.start_jitter_ms.unwrap_or(0));
    let cluster = Arc::new(cluster.clone());
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..options.concurrency.min(count) {
        let (cluster, next, prefix) = (cluster.clone(), next.clone(), prefix.to_owned());
        workers.spawn(async move {
            let mut taken = Vec::new();
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= count {
                    return taken;
                }
                if jitter_ms > 0 {
                    let delay = rand::random_range(0..jitter_ms);
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                taken.push(sample(&cluster, &format!("{prefix}-{k}")).await);
            }
        });
    }
    let mut samples = Vec::with_capacity(count);
    while let Some(result) = workers.join_next().await {
        match result {
            Ok(taken) => samples.extend(taken),
            Err(error) => samples.push(Sample::Failed(format!("a sampling task failed: {error}"))),
        }
    }
    samples
}

/// One sample: write +1 to counter `id`, then wait for the global aggregator to show it.
async fn sample(cluster: &Cluster, id: &str) -> Sample {
    let shard = cluster.random_shard();
    let url = shard.url(&format!("{}/write?op=INCREMENT", counter_path(id)));
    let written = cluster
        .client()
        .send(
            Method::PATCH,
            &url,
            &[("content-type", "application/json")],
            Bytes::from_static(br#"{"delta":1}"#),
        )
        .await;
    let acknowledged = Instant::now();
    match written {
        Ok(answer) if answer.status.is_success() => {}
        Ok(answer) => return Sample::Failed(status_error(&url, &answer).to_string()),
        Err(error) => return Sample::Failed(error.to_string()),
    }
    let read_url = cluster.global_url(&format!("{}?allow_partial=true", counter_path(id)));
    let mut ticks = tokio::time::interval(POLL_INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(remaining) = SAMPLE_TIMEOUT.checked_sub(acknowledged.elapsed()) else {
            return Sample::TimedOut;
        };
        // Not yet seen (404), a partial 0, or no answer: poll again until the deadline.
        let Ok(Ok(answer)) = tokio::time::timeout(remaining, cluster.client().get(&read_url)).await
        else {
            continue;
        };
        if answer.status != hyper::StatusCode::OK {
            continue;
        }
        match serde_json::from_slice::<ValueOnly>(&answer.body) {
            Ok(ValueOnly { value: 1 }) => return Sample::Visible(acknowledged.elapsed()),
            Ok(ValueOnly { value }) if value > 1 => {
                return Sample::Failed(format!(
                    "counter {id:?} reads {value} after one +1: it was not fresh (use a new --counter-prefix)"
                ));
            }
            _ => {}
        }
    }
}

/// The figures of a set of samples.
fn summarize(
    samples: &[Sample],
    sync: &SyncSettings,
    options: &LagOptions,
    prefix: &str,
) -> LagReport {
    let bound_ms = design_bound_ms(sync, POLL_INTERVAL.as_millis() as u64);
    let mut histogram =
        Histogram::<u64>::new_with_bounds(1, HISTOGRAM_MAX_MICROS, HISTOGRAM_SIGNIFICANT_FIGURES)
            .expect("valid histogram bounds");
    let (mut timed_out, mut failed, mut over_bound) = (0, 0, 0);
    let mut first_failure = None;
    for sample in samples {
        match sample {
            Sample::Visible(lag) => {
                let micros = u64::try_from(lag.as_micros()).unwrap_or(u64::MAX);
                histogram.saturating_record(micros);
                if micros > bound_ms * 1000 {
                    over_bound += 1;
                }
            }
            Sample::TimedOut => timed_out += 1,
            Sample::Failed(message) => {
                failed += 1;
                first_failure.get_or_insert_with(|| message.clone());
            }
        }
    }
    let visible = histogram.len() as usize;
    let at = |quantile: f64| {
        (visible > 0).then(|| ms_one_decimal(histogram.value_at_quantile(quantile)))
    };
    LagReport {
        samples: samples.len(),
        visible,
        timed_out,
        failed,
        first_failure,
        p50_ms: at(0.50),
        p90_ms: at(0.90),
        p99_ms: at(0.99),
        max_ms: (visible > 0).then(|| ms_one_decimal(histogram.max())),
        shard_to_datacenter_ms: sync.shard_to_datacenter_ms,
        datacenter_to_global_ms: sync.datacenter_to_global_ms,
        poll_interval_ms: POLL_INTERVAL.as_millis() as u64,
        bound_ms,
        over_bound,
        concurrency: options.concurrency,
        start_jitter_ms: options.start_jitter_ms.unwrap_or(0),
        counter_prefix: prefix.to_owned(),
    }
}

/// The report for people.
pub fn render_report(report: &LagReport) -> String {
    let mut text = format!(
        "samples    {}\ntimed out  {} (not visible after {} s)\n",
        report.samples,
        report.timed_out,
        SAMPLE_TIMEOUT.as_secs()
    );
    if report.failed > 0 {
        text.push_str(&format!(
            "failed     {} (first: {})\n",
            report.failed,
            report.first_failure.as_deref().unwrap_or("?")
        ));
    }
    text.push_str(&format!(
        "lag, write acknowledged -> global aggregator shows it ({} visible):\n  p50  {} ms\n  p90  {} ms\n  p99  {} ms\n  max  {} ms\n",
        report.visible,
        show_ms(report.p50_ms),
        show_ms(report.p90_ms),
        show_ms(report.p99_ms),
        show_ms(report.max_ms),
    ));
    text.push_str(&format!(
        "sync intervals: shard -> datacenter {} ms, datacenter -> global {} ms\nbound (design): {} + {} + 2 x {} ms poll = {} ms; {} sample(s) above it\n",
        report.shard_to_datacenter_ms,
        report.datacenter_to_global_ms,
        report.shard_to_datacenter_ms,
        report.datacenter_to_global_ms,
        report.poll_interval_ms,
        report.bound_ms,
        report.over_bound,
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> LagOptions {
        LagOptions {
            samples: 100,
            concurrency: DEFAULT_CONCURRENCY,
            counter_prefix: None,
            start_jitter_ms: Some(0),
            json: None,
        }
    }

    #[test]
    fn milliseconds_have_one_decimal_rounded_half_up() {
        let shown = |micros| show_ms(Some(ms_one_decimal(micros)));
        assert_eq!(shown(0), "0.0");
        assert_eq!(shown(49), "0.0");
        assert_eq!(shown(50), "0.1");
        assert_eq!(shown(262_149), "262.1");
        assert_eq!(shown(262_150), "262.2");
        assert_eq!(shown(999_950), "1000.0");
        assert_eq!(shown(5_000_000), "5000.0");
        assert_eq!(ms_one_decimal(262_149), 262.1);
        assert_eq!(show_ms(None), "n/a");
    }

    #[test]
    fn the_bound_is_both_intervals_and_two_polls() {
        let sync = SyncSettings::default();
        assert_eq!(design_bound_ms(&sync, 2), 50 + 100 + 4);
        let sync = SyncSettings {
            shard_to_datacenter_ms: 10,
            datacenter_to_global_ms: 100,
            ..SyncSettings::default()
        };
        assert_eq!(design_bound_ms(&sync, 5), 120);
    }

    #[test]
    fn prefixes_are_fresh_and_valid() {
        let (a, b) = (random_prefix(), random_prefix());
        assert_ne!(a, b);
        assert_eq!(a.len(), "lag-probe-".len() + 16);
        assert!(CounterId::new(format!("{a}-199")).is_ok());
    }

    #[test]
    fn summary_counts_outcomes_and_takes_percentiles() {
        let mut samples: Vec<Sample> = (1..=100)
            .map(|ms| Sample::Visible(Duration::from_millis(ms * 4)))
            .collect();
        samples.push(Sample::TimedOut);
        samples.push(Sample::Failed("refused".into()));
        samples.push(Sample::Failed("later".into()));
        let sync = SyncSettings {
            datacenter_to_global_ms: 250,
            ..SyncSettings::default()
        };
        let report = summarize(&samples, &sync, &options(), "p");
        assert_eq!(report.samples, 103);
        assert_eq!(report.visible, 100);
        assert_eq!(report.timed_out, 1);
        assert_eq!(report.failed, 2);
        assert_eq!(report.first_failure.as_deref(), Some("refused"));
        assert_eq!(report.p50_ms, Some(200.0));
        assert_eq!(report.p90_ms, Some(360.0));
        assert_eq!(report.p99_ms, Some(396.0));
        assert_eq!(report.max_ms, Some(400.0));
        assert_eq!(report.bound_ms, 304);
        // 308, 312, ..., 400 ms: 24 samples above 304 ms.
        assert_eq!(report.over_bound, 24);

        let text = render_report(&report);
        assert!(text.contains("timed out  1 "), "{text}");
        assert!(text.contains("failed     2 (first: refused)"), "{text}");
        assert!(
            text.contains("  p50  200.0 ms\n  p90  360.0 ms\n  p99  396.0 ms\n  max  400.0 ms\n"),
            "{text}"
        );
        assert!(
            text.contains("50 + 250 + 2 x 2 ms poll = 304 ms; 24 sample(s) above it"),
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["p99_ms"], 396.0);
        assert_eq!(json["bound_ms"], 304);
    }

    #[test]
    fn no_visible_sample_gives_no_percentiles() {
        let report = summarize(
            &[Sample::TimedOut],
            &SyncSettings::default(),
            &options(),
            "p",
        );
        assert_eq!(report.p50_ms, None);
        assert_eq!(report.max_ms, None);
        assert!(render_report(&report).contains("  p50  n/a ms\n"));
        assert_eq!(
            serde_json::to_value(&report).unwrap()["max_ms"],
            serde_json::Value::Null
        );
    }
}
