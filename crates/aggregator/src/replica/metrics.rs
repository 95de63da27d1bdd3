//! The metrics every aggregator exports, in a registry of its own per process (no global
//! state): pulls per source, what they merged, each source's staleness, and what is held.

use std::sync::atomic::AtomicU64;

use geocount_net::Response;
use hyper::HeaderMap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use geocount_http::exposition::resident_bytes;
use geocount_http::routing::metrics_response;
use geocount_sync::PageMerge;

use super::Replica;

/// The `source` label: a shard's slot name, a datacenter's name, or `global`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// The source's name.
    pub source: String,
}

/// What the pullers count; clones share the same series.
#[derive(Debug, Clone)]
pub struct PullCounters {
    sources: Vec<SourceLabel>,
    /// Pulls answered and merged, per source.
    pub succeeded: Family<SourceLabel, Counter>,
    /// Pulls that failed (no answer in time, refused, undecodable), per source.
    pub failed: Family<SourceLabel, Counter>,
    /// Seconds from sending a pull to having merged its page, per source.
    pub pull_seconds: Family<SourceLabel, Histogram, fn() -> Histogram>,
    /// Seconds merging a page took, waiting for the lock included.
    pub merge_seconds: Histogram,
    /// Slot states that changed a copy.
    pub states_merged: Counter,
    /// Descriptions that changed a copy.
    pub descriptions_merged: Counter,
    /// Pulled descriptions refused, versioned more than `sync.max_clock_skew_ms` ahead of this
    /// process's clock.
    pub descriptions_refused: Counter,
    /// Pulled entries refused, by reason: `slot` (a slot the source does not serve),
    /// `version` (beyond what any clock allows) or `bytes` (past the aggregator's byte bound).
    pub entries_refused: Family<ReasonLabel, Counter>,
}

/// Why pulled entries are refused: the values of the `reason` label.
const REFUSAL_REASONS: [&str; 3] = ["slot", "version", "bytes"];

/// The `reason` label of refused entries.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Why they were refused.
    pub reason: &'static str,
}

impl PullCounters {
    /// Counts a pull of source `source` that merged `states` slot states and `descriptions`
    /// descriptions, `pull_seconds` after it was sent, the merge taking `merge_seconds`.
    pub fn succeeded(
        &self,
        source: usize,
        states: usize,
        descriptions: usize,
        pull_seconds: f64,
        merge_seconds: f64,
    ) {
        if let Some(label) = self.sources.get(source) {
            self.succeeded.get_or_create(label).inc();
            self.pull_seconds.get_or_create(label).observe(pull_seconds);
        }
        self.merge_seconds.observe(merge_seconds);
        self.states_merged.inc_by(states as u64);
        self.descriptions_merged.inc_by(descriptions as u64);
    }

    /// Counts the pulled entries a merge refused: for their slot, their version or the byte
    /// bound.
    pub fn refused(&self, merge: PageMerge) {
        let counts = [
            merge.refused_slot,
            merge.refused_version,
            merge.refused_bytes,
        ];
        for (reason, count) in REFUSAL_REASONS.into_iter().zip(counts) {
            if count > 0 {
                self.entries_refused
                    .get_or_create(&ReasonLabel { reason })
                    .inc_by(count as u64);
            }
        }
    }

    /// Counts a failed pull of source `source`.
    pub fn failed(&self, source: usize) {
        if let Some(label) = self.sources.get(source) {
            self.failed.get_or_create(label).inc();
        }
    }
}

/// Buckets from 1 ms to about 4 s, doubling.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 13))
}

/// Every metric of an aggregator, exported at `GET /metrics` as `<prefix>_<name>`:
///
/// - `pulls_succeeded_total{source}`, `pulls_failed_total{source}`: pulls per source;
/// - `pull_seconds{source}`: a histogram of the time from sending a pull to having merged its
///   page; `merge_seconds`: of the merges alone, waiting for the lock included;
/// - `states_merged_total`, `descriptions_merged_total`: what the pulls changed;
/// - `descriptions_refused_total`: pulled descriptions versioned too far ahead of this clock;
/// - `entries_refused_total{reason}`: pulled entries of a slot their source does not serve
///   (`slot`), versioned beyond what any clock allows (`version`), or past the aggregator's
///   byte bound (`bytes`: its sums are then incomplete, and `/healthz` says so);
/// - `state_bytes`, `max_state_bytes`: the bytes of copies held, and their bound;
/// - `staleness_seconds{source}`: how long ago the copy of each source was complete, -1 for
///   one never complete since this process started; at the global tier also
///   `max_staleness_seconds`, `global.max_staleness_ms` ([`ReplicaMetrics::bound_staleness`]);
/// - `counters`, `descriptions`: how many are held;
/// - `slot_conflicts`: slots served by two processes at once (see
///   [`geocount_sync::incarnations`]);
/// - `resident_bytes`: the process's resident memory;
/// - `fanout_calls_total`: the calls the status routes (`/status`, `/counter/{id}/rights`)
///   made to the processes below ([`crate::fanout`]).
///
/// The gauges are set when scraped ([`ReplicaMetrics::scrape`]).
#[derive(Debug)]
pub struct ReplicaMetrics {
    registry: Registry,
    /// What the pullers count.
    pub pulls: PullCounters,
    /// Each source's staleness in seconds (-1: never complete).
    pub staleness_seconds: Family<SourceLabel, Gauge<f64, AtomicU64>>,
    /// Counters held.
    pub counters_held: Gauge,
    /// Bytes of copies held.
    pub state_bytes: Gauge,
    /// The bound on them.
    pub max_state_bytes: Gauge,
    /// Descriptions held.
    pub descriptions_held: Gauge,
    /// Slots served by two processes at once.
    pub slot_conflicts: Gauge,
    /// The process's resident memory in bytes.
    pub resident_bytes: Gauge,
    /// Calls the status routes made to the processes below ([`crate::fanout`]).
    pub fanout_calls: Counter,
}

impl ReplicaMetrics {
    /// The metrics of an aggregator pulling `sources`, named `<prefix>_<name>`.
    pub fn new(prefix: &str, sources: &[String]) -> Self {
        let sources = sources
            .iter()
            .map(|name| SourceLabel {
                source: name.clone(),
            })
            .collect();
        let mut metrics = Self {
            registry: Registry::with_prefix(prefix),
            pulls: PullCounters {
                sources,
                succeeded: Family::default(),
                failed: Family::default(),
                pull_seconds: Family::new_with_constructor(duration_histogram),
                merge_seconds: duration_histogram(),
                states_merged: Counter::default(),
                descriptions_merged: Counter::default(),
                descriptions_refused: Counter::default(),
                entries_refused: Family::default(),
            },
            staleness_seconds: Family::default(),
            counters_held: Gauge::default(),
            state_bytes: Gauge::default(),
            max_state_bytes: Gauge::default(),
            descriptions_held: Gauge::default(),
            slot_conflicts: Gauge::default(),
            resident_bytes: Gauge::default(),
            fanout_calls: Counter::default(),
        };
        // Every series exists from the start at 0, so a rate of failures or refusals is 0 and
        // not absent.
        for label in &metrics.pulls.sources {
            drop(metrics.pulls.succeeded.get_or_create(label));
            drop(metrics.pulls.failed.get_or_create(label));
            drop(metrics.pulls.pull_seconds.get_or_create(label));
        }
        for reason in REFUSAL_REASONS {
            let label = ReasonLabel { reason };
            drop(metrics.pulls.entries_refused.get_or_create(&label));
        }
        let (r, pulls) = (&mut metrics.registry, &metrics.pulls);
        r.register("pulls_succeeded", "Pulls merged", pulls.succeeded.clone());
        r.register("pulls_failed", "Pulls failed", pulls.failed.clone());
        let pull_seconds = pulls.pull_seconds.clone();
        r.register("pull_seconds", "Pull sent to page merged", pull_seconds);
        let merge_seconds = pulls.merge_seconds.clone();
        r.register("merge_seconds", "Merging one page", merge_seconds);
        for (name, help, counter) in [
            ("states_merged", "States changed", &pulls.states_merged),
            (
                "descriptions_merged",
                "Descriptions changed",
                &pulls.descriptions_merged,
            ),
            (
                "descriptions_refused",
                "Pulled descriptions refused: versioned too far ahead of this clock",
                &pulls.descriptions_refused,
            ),
        ] {
            r.register(name, help, counter.clone());
        }
        let refused = pulls.entries_refused.clone();
        r.register(
            "entries_refused",
            "Pulled entries refused (reason: slot, version or bytes)",
            refused,
        );
        let staleness = metrics.staleness_seconds.clone();
        r.register(
            "staleness_seconds",
            "Staleness per source (-1: never)",
            staleness,
        );
        r.register("counters", "Counters held", metrics.counters_held.clone());
        let bytes = metrics.state_bytes.clone();
        r.register("state_bytes", "Bytes of copies held (estimated)", bytes);
        let bound = metrics.max_state_bytes.clone();
        r.register("max_state_bytes", "The bound on the bytes of copies", bound);
        let descriptions = metrics.descriptions_held.clone();
        r.register("descriptions", "Descriptions held", descriptions);
        let conflicts = metrics.slot_conflicts.clone();
        r.register(
            "slot_conflicts",
            "Slots served by two processes at once",
            conflicts,
        );
        let resident = metrics.resident_bytes.clone();
        r.register("resident_bytes", "Resident memory of the process", resident);
        let calls = metrics.fanout_calls.clone();
        r.register("fanout_calls", "Calls the status routes made below", calls);
        metrics
    }

    /// Exports `max_staleness_seconds`: the staleness past which a read counts a source as
    /// stale (`global.max_staleness_ms`).
    pub fn bound_staleness(&mut self, max_staleness_ms: u64) {
        let bound = Gauge::<f64, AtomicU64>::default();
        bound.set(max_staleness_ms as f64 / 1000.0);
        self.registry.register(
            "max_staleness_seconds",
            "The staleness past which a read counts a source as stale",
            bound,
        );
    }

    /// `GET /metrics` for a request with `headers`, with the gauges set from `replica` at
    /// `now_ms`.
    pub fn scrape(&self, replica: &Replica, now_ms: u64, headers: &HeaderMap) -> Response {
        for (label, source) in self.pulls.sources.iter().zip(&replica.sources) {
            let value = source
                .staleness_ms(now_ms)
                .map_or(-1.0, |ms| ms as f64 / 1000.0);
            self.staleness_seconds.get_or_create(label).set(value);
        }
        self.counters_held.set(replica.copies().len() as i64);
        let gauge = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
        let bytes = replica.copies().bytes();
        self.state_bytes.set(gauge(bytes.held()));
        self.max_state_bytes.set(gauge(bytes.max()));
        self.descriptions_held
            .set(replica.descriptions.len() as i64);
        self.slot_conflicts
            .set(replica.conflicts(now_ms).len() as i64);
        self.resident_bytes.set(resident_bytes().map_or(0, gauge));
        metrics_response(&self.registry, headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_and_merge_times_land_in_their_buckets() {
        let metrics = ReplicaMetrics::new("test", &["a".to_owned(), "b".to_owned()]);
        metrics.pulls.succeeded(0, 3, 0, 0.1, 0.003);
        metrics.pulls.succeeded(1, 1, 0, 0.0005, 0.0005);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).unwrap();
        for line in [
            r#"test_pull_seconds_bucket{le="0.064",source="a"} 0"#,
            r#"test_pull_seconds_bucket{le="0.128",source="a"} 1"#,
            r#"test_pull_seconds_bucket{le="0.001",source="b"} 1"#,
            r#"test_pull_seconds_count{source="a"} 1"#,
            r#"test_merge_seconds_bucket{le="0.002"} 1"#,
            r#"test_merge_seconds_bucket{le="0.004"} 2"#,
            "test_states_merged_total 4",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from:\n{text}"
            );
        }
    }
}
