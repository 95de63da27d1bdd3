//! Visibility lag under load: about every [`PROBE_INTERVAL`], a probe writes +1 to a fresh
//! counter `<prefix>-probe-<k>` through a random shard node, takes the instant the write is
//! acknowledged, and polls the global aggregator every [`PROBE_POLL`] until the counter reads 1.
//! Probes run beside the load, so their lag is the lag the load's writes see.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use tokio::time::MissedTickBehavior;

use crate::cluster::{Cluster, counter_path, status_error};
use crate::load::exactness::read_total;
use crate::load::workload::probe_id;

/// How often a probe starts.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// How often a probe polls the global aggregator.
pub const PROBE_POLL: Duration = Duration::from_millis(5);
/// How long a probe waits for its write to show before it counts as timed out.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How one probe ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The global aggregator showed the write this long after its acknowledgement.
    Visible(Duration),
    /// Not visible after [`PROBE_TIMEOUT`].
    TimedOut,
    /// The write was refused or got no answer, or the counter was not fresh.
    Failed(String),
}

/// One probe: when its write was acknowledged (since the run's start) and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// When the write was acknowledged (or failed), since the run's start.
    pub at: Duration,
    /// How it ended.
    pub outcome: ProbeOutcome,
}

/// Starts a probe every [`PROBE_INTERVAL`] from `start` until `end`, then waits for every probe
/// to end (each within [`PROBE_TIMEOUT`] of its write). Probes are returned in start order.
/// Probe `k` writes with idempotency key `<key_prefix>-probe-<k>`.
pub async fn run_probes(
    cluster: Arc<Cluster>,
    prefix: String,
    key_prefix: String,
    start: Instant,
    end: Instant,
) -> Vec<Probe> {
    let mut ticks = tokio::time::interval_at(start.into(), PROBE_INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut probes = Vec::new();
    for k in 0.. {
        ticks.tick().await;
        if Instant::now() >= end {
            break;
        }
        let (cluster, id, key) = (
            cluster.clone(),
            probe_id(&prefix, k),
            format!("{key_prefix}-probe-{k}"),
        );
        probes.push(tokio::spawn(async move {
            probe(&cluster, &id, &key, start).await
        }));
    }
    let mut done = Vec::with_capacity(probes.len());
    for handle in probes {
        done.push(handle.await.unwrap_or_else(|error| Probe {
            at: start.elapsed(),
            outcome: ProbeOutcome::Failed(format!("a probe task failed: {error}")),
        }));
    }
    done
}

/// One probe of counter `id`, written with idempotency key `key`.
async fn probe(cluster: &Cluster, id: &str, key: &str, start: Instant) -> Probe {
    let shard = cluster.random_shard();
    let url = shard.url(&format!("{}/write?op=INCREMENT", counter_path(id)));
    let written = cluster
        .client()
        .send(
            Method::PATCH,
            &url,
            &[
                ("content-type", "application/json"),
                ("idempotency-key", key),
            ],
            Bytes::from_static(br#"{"delta":1}"#),
        )
        .await;
    let acknowledged = Instant::now();
    let at = acknowledged.saturating_duration_since(start);
    let failed = |message: String| Probe {
        at,
        outcome: ProbeOutcome::Failed(message),
    };
    match written {
        Ok(answer) if answer.status.is_success() => {}
        Ok(answer) => return failed(status_error(&url, &answer).to_string()),
        Err(error) => return failed(error.to_string()),
    }
    let mut ticks = tokio::time::interval(PROBE_POLL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if acknowledged.elapsed() >= PROBE_TIMEOUT {
            return Probe {
                at,
                outcome: ProbeOutcome::TimedOut,
            };
        }
        match read_total(cluster, id).await {
            Ok(1) => {
                return Probe {
                    at,
                    outcome: ProbeOutcome::Visible(acknowledged.elapsed()),
                };
            }
            Ok(value) if value > 1 => {
                return failed(format!(
                    "probe counter {id:?} reads {value} after one +1: it was not fresh"
                ));
            }
            // Not there yet (0 or 404), or no answer: poll again.
            _ => {}
        }
    }
}
