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
use std::time::Duration;

use geocount_model::{CounterId, SyncSettings};
use serde::Serialize;

use crate::cluster::ClusterClient;
use crate::error::GeoctlError;
use crate::visibility::{Outcome, Outcomes, Watch, micros, show_ms, write_and_watch};

/// How often a sample polls the global aggregator.
pub const POLL_INTERVAL: Duration = Duration::from_millis(2);
/// How long a sample waits for its write to show before it counts as timed out.
pub const SAMPLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How many samples run at once unless asked otherwise.
pub const DEFAULT_CONCURRENCY: usize = 8;
/// How many samples are taken unless asked otherwise.
pub const DEFAULT_SAMPLES: usize = 200;

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

/// The random default prefix: `lag-probe-<16 hex digits>`.
pub fn random_prefix() -> String {
    format!("lag-probe-{:016x}", rand::random::<u64>())
}

/// Takes the samples, prints the figures to `out` (and writes `--json`), and returns them.
pub async fn run(
    cluster: &ClusterClient,
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
async fn take_samples(cluster: &ClusterClient, prefix: &str, options: &LagOptions) -> Vec<Outcome> {
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
                let id = format!("{prefix}-{k}");
                taken.push(write_and_watch(&cluster, &id, &WATCH).await.1);
            }
        });
    }
    let mut samples = Vec::with_capacity(count);
    while let Some(result) = workers.join_next().await {
        match result {
            Ok(taken) => samples.extend(taken),
            Err(error) => samples.push(Outcome::Failed(format!("a sampling task failed: {error}"))),
        }
    }
    samples
}

/// How a sample writes and polls.
const WATCH: Watch<'static> = Watch {
    headers: &[],
    poll: POLL_INTERVAL,
    timeout: SAMPLE_TIMEOUT,
    counter: "counter",
    stale_hint: " (use a new --counter-prefix)",
};

/// The figures of a set of samples.
fn summarize(
    samples: &[Outcome],
    sync: &SyncSettings,
    options: &LagOptions,
    prefix: &str,
) -> LagReport {
    let bound_ms = design_bound_ms(sync, POLL_INTERVAL.as_millis() as u64);
    let counted = Outcomes::count(samples);
    let over_bound = (samples.iter())
        .filter(|s| matches!(s, Outcome::Visible(lag) if micros(*lag) > bound_ms * 1000))
        .count();
    LagReport {
        samples: samples.len(),
        visible: counted.visible(),
        timed_out: counted.timed_out,
        failed: counted.failed,
        first_failure: counted.first_failure.clone(),
        p50_ms: counted.ms_at(0.50),
        p90_ms: counted.ms_at(0.90),
        p99_ms: counted.ms_at(0.99),
        max_ms: counted.max_ms(),
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
        let mut samples: Vec<Outcome> = (1..=100)
            .map(|ms| Outcome::Visible(Duration::from_millis(ms * 4)))
            .collect();
        samples.push(Outcome::TimedOut);
        samples.push(Outcome::Failed("refused".into()));
        samples.push(Outcome::Failed("later".into()));
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
            &[Outcome::TimedOut],
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
