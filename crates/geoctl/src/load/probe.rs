//! Visibility lag under load: about every [`PROBE_INTERVAL`], a probe writes +1 to a fresh
//! counter `<prefix>-probe-<k>` through a random shard node, takes the instant the write is
//! acknowledged, and polls the global aggregator every [`PROBE_POLL`] until the counter reads 1.
//! Probes run beside the load, so their lag is the lag the load's writes see.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;

use crate::cluster::ClusterClient;
use crate::load::workload::probe_id;
use crate::visibility::{Outcome, Watch, write_and_watch};

/// How often a probe starts.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// How often a probe polls the global aggregator.
pub const PROBE_POLL: Duration = Duration::from_millis(5);
/// How long a probe waits for its write to show before it counts as timed out.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// One probe: when its write was acknowledged (since the run's start) and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// When the write was acknowledged (or failed), since the run's start.
    pub at: Duration,
    /// How it ended.
    pub outcome: Outcome,
}

/// Starts a probe every [`PROBE_INTERVAL`] from `start` until `end`, then waits for every probe
/// to end (each within [`PROBE_TIMEOUT`] of its write). Probes are returned in start order.
/// Probe `k` writes with idempotency key `<key_prefix>-probe-<k>`.
pub async fn run_probes(
    cluster: Arc<ClusterClient>,
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
            outcome: Outcome::Failed(format!("a probe task failed: {error}")),
        }));
    }
    done
}

/// One probe of counter `id`, written with idempotency key `key`.
async fn probe(cluster: &ClusterClient, id: &str, key: &str, start: Instant) -> Probe {
    let watch = Watch {
        headers: &[("idempotency-key", key)],
        poll: PROBE_POLL,
        timeout: PROBE_TIMEOUT,
        counter: "probe counter",
        stale_hint: "",
    };
    let (acknowledged, outcome) = write_and_watch(cluster, id, &watch).await;
    Probe {
        at: acknowledged.saturating_duration_since(start),
        outcome,
    }
}
