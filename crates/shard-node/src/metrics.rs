//! The node's Prometheus metrics, in a registry of its own (no process-global state, so several
//! nodes can share a process in tests and simulations).

use std::sync::atomic::AtomicU64;

use geocount_http::exposition::resident_bytes;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Every metric a shard node exports at `GET /metrics`.
#[derive(Debug)]
pub struct ShardMetrics {
    registry: Registry,
    /// Writes applied (acknowledged).
    pub writes_applied: Counter,
    /// Writes refused (bad input, overflow, storage failure).
    pub writes_refused: Counter,
    /// Retries answered from an idempotency record without applying again.
    pub idempotent_replays: Counter,
    /// Entries per batched write request.
    pub batch_entries: Histogram,
    /// Writes per group commit (one log append and one fsync).
    pub group_commit_writes: Histogram,
    /// Time to append and fsync one group, in seconds.
    pub commit_seconds: Histogram,
    /// Counters this node holds.
    pub counters_held: Gauge,
    /// Counters of which this node holds a copy of a peer's slot; set when scraped.
    pub peer_counters: Gauge,
    /// Counter descriptions this node holds, tombstones included; set when scraped.
    pub descriptions_held: Gauge,
    /// Idempotency keys this node holds of its own slot (against `shard.max_idempotency_keys`).
    pub idempotency_keys: Gauge,
    /// Bytes of state this node holds, as `shard.max_state_bytes` counts them.
    pub state_bytes: Gauge,
    /// Bytes in the open log segment.
    pub log_bytes: Gauge,
    /// Checkpoints written into the store.
    pub checkpoints: Counter,
    /// Checkpoints that failed (retried with the next one).
    pub checkpoint_failures: Counter,
    /// Slot-count changes this node proposed for hot or cooled counters.
    pub shard_count_changes: Counter,
    /// Writes forwarded to the node owning one of the counter's slots.
    pub writes_forwarded: Counter,
    /// Hits older than their counter's window: counted in the total, not in any window bucket.
    pub window_too_old: Counter,
    /// Calls to the global tier for the other datacenters' parts of counters (world reads).
    pub world_fetches: Counter,
    /// Counters' world reads refused: another datacenter stale, or the global tier unreachable.
    pub world_refused: Counter,
    /// Sync pulls from peers and the aggregator that succeeded, by source.
    pub pulls_ok: Family<SourceLabel, Counter>,
    /// Sync pulls that failed, by source.
    pub pulls_failed: Family<SourceLabel, Counter>,
    /// Slot states merged into the peer copies.
    pub replica_merges: Counter,
    /// 1 while the datacenter aggregator reports that another process serves this node's slot
    /// and this one, the newer, takes no writes.
    pub slot_conflict: Gauge,
    /// Pulled peer entries refused: of a slot the peer does not own, or versioned beyond what
    /// any clock allows.
    pub entries_refused: Counter,
    /// Descriptions refused, pulled or pushed (`POST /rights`), versioned more than
    /// `sync.max_clock_skew_ms` ahead of this node's clock.
    pub descriptions_refused: Counter,
    /// How long ago this node last had each pulled source's complete state, in seconds (-1:
    /// never); set when scraped.
    pub source_staleness_seconds: Family<SourceLabel, Gauge<f64, AtomicU64>>,
    /// 1 while this node restores its slot and takes no writes; set when scraped.
    pub restoring: Gauge,
    /// 1 while the latest group commit failed for a full disk (its writes got 507).
    pub storage_full: Gauge,
    /// 1 once an fsync of the log failed: the node takes no writes until it is restarted.
    pub fsync_failed: Gauge,
    /// The process's resident memory in bytes; set when scraped.
    pub resident_bytes: Gauge,
}

/// The `source` label of per-source metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    /// The source's name.
    pub source: String,
}

impl Default for ShardMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("geocount_shard");
        let metrics = Self {
            writes_applied: Counter::default(),
            writes_refused: Counter::default(),
            idempotent_replays: Counter::default(),
            batch_entries: Histogram::new(exponential_buckets(1.0, 4.0, 10)),
            group_commit_writes: Histogram::new(exponential_buckets(1.0, 4.0, 10)),
            commit_seconds: Histogram::new(exponential_buckets(0.000_02, 2.0, 16)),
            counters_held: Gauge::default(),
            peer_counters: Gauge::default(),
            descriptions_held: Gauge::default(),
            idempotency_keys: Gauge::default(),
            state_bytes: Gauge::default(),
            log_bytes: Gauge::default(),
            checkpoints: Counter::default(),
            checkpoint_failures: Counter::default(),
            shard_count_changes: Counter::default(),
            writes_forwarded: Counter::default(),
            window_too_old: Counter::default(),
            world_fetches: Counter::default(),
            world_refused: Counter::default(),
            pulls_ok: Family::default(),
            pulls_failed: Family::default(),
            replica_merges: Counter::default(),
            slot_conflict: Gauge::default(),
            entries_refused: Counter::default(),
            descriptions_refused: Counter::default(),
            source_staleness_seconds: Family::default(),
            restoring: Gauge::default(),
            storage_full: Gauge::default(),
            fsync_failed: Gauge::default(),
            resident_bytes: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "writes_applied",
            "Writes applied and acknowledged",
            metrics.writes_applied.clone(),
        );
        registry.register(
            "writes_refused",
            "Writes refused; nothing of them was applied",
            metrics.writes_refused.clone(),
        );
        registry.register(
            "idempotent_replays",
            "Retries answered from an Idempotency-Key record",
            metrics.idempotent_replays.clone(),
        );
        registry.register(
            "batch_entries",
            "Entries per batched write request",
            metrics.batch_entries.clone(),
        );
        registry.register(
            "group_commit_writes",
            "Writes per group commit (one fsync)",
            metrics.group_commit_writes.clone(),
        );
        registry.register(
            "commit_seconds",
            "Time to append and fsync one group commit",
            metrics.commit_seconds.clone(),
        );
        registry.register(
            "counters",
            "Counters held by this node",
            metrics.counters_held.clone(),
        );
        registry.register(
            "peer_counters",
            "Counters with a copy of a peer's slot held here",
            metrics.peer_counters.clone(),
        );
        registry.register(
            "descriptions",
            "Counter descriptions held, tombstones included",
            metrics.descriptions_held.clone(),
        );
        registry.register(
            "idempotency_keys",
            "Idempotency keys held for the own slot (bounded by shard.max_idempotency_keys)",
            metrics.idempotency_keys.clone(),
        );
        registry.register(
            "state_bytes",
            "Bytes of state held (estimated; bounded by shard.max_state_bytes)",
            metrics.state_bytes.clone(),
        );
        registry.register(
            "log_bytes",
            "Bytes in the open log segment",
            metrics.log_bytes.clone(),
        );
        registry.register(
            "checkpoints",
            "Checkpoints written into the store",
            metrics.checkpoints.clone(),
        );
        registry.register(
            "checkpoint_failures",
            "Checkpoints that failed and were retried",
            metrics.checkpoint_failures.clone(),
        );
        registry.register(
            "shard_count_changes",
            "Slot-count changes proposed for hot or cooled counters",
            metrics.shard_count_changes.clone(),
        );
        registry.register(
            "writes_forwarded",
            "Writes forwarded to a node owning one of the counter's slots",
            metrics.writes_forwarded.clone(),
        );
        registry.register(
            "window_too_old",
            "Hits older than their counter's window: in the total, in no window bucket",
            metrics.window_too_old.clone(),
        );
        registry.register(
            "world_fetches",
            "Calls to the global tier for the other datacenters' parts of counters (world reads)",
            metrics.world_fetches.clone(),
        );
        registry.register(
            "world_refused",
            "Counters' world reads refused: another datacenter stale, or no global replica answered",
            metrics.world_refused.clone(),
        );
        registry.register(
            "sync_pulls_ok",
            "Sync pulls that succeeded, by source",
            metrics.pulls_ok.clone(),
        );
        registry.register(
            "sync_pulls_failed",
            "Sync pulls that failed, by source",
            metrics.pulls_failed.clone(),
        );
        registry.register(
            "replica_merges",
            "Peer slot states merged into the replicas",
            metrics.replica_merges.clone(),
        );
        registry.register(
            "slot_conflict",
            "1 while another process serves this slot and this one takes no writes",
            metrics.slot_conflict.clone(),
        );
        registry.register(
            "entries_refused",
            "Pulled peer entries refused: of a slot the peer does not own, or versioned beyond the clock",
            metrics.entries_refused.clone(),
        );
        registry.register(
            "descriptions_refused",
            "Descriptions refused, pulled or pushed: versioned too far ahead of this node's clock",
            metrics.descriptions_refused.clone(),
        );
        registry.register(
            "source_staleness_seconds",
            "How long ago each pulled source was last complete here (-1: never)",
            metrics.source_staleness_seconds.clone(),
        );
        registry.register(
            "restoring",
            "1 while this node restores its slot and takes no writes",
            metrics.restoring.clone(),
        );
        registry.register(
            "storage_full",
            "1 while the latest group commit failed for a full disk",
            metrics.storage_full.clone(),
        );
        registry.register(
            "fsync_failed",
            "1 once an fsync of the log failed: no writes until restarted",
            metrics.fsync_failed.clone(),
        );
        registry.register(
            "resident_bytes",
            "Resident memory of the process",
            metrics.resident_bytes.clone(),
        );
        Self {
            registry,
            ..metrics
        }
    }
}

impl ShardMetrics {
    /// The registry holding every metric, for `GET /metrics`, with the per-source staleness
    /// `staleness` gives in milliseconds (`None`: never complete), whether the slot is
    /// `restoring`, and the resident memory brought up to date.
    pub fn scrape<'a>(
        &self,
        staleness: impl IntoIterator<Item = (&'a str, Option<u64>)>,
        restoring: bool,
    ) -> &Registry {
        for (source, ms) in staleness {
            let label = SourceLabel {
                source: source.to_owned(),
            };
            let seconds = ms.map_or(-1.0, |ms| ms as f64 / 1000.0);
            self.source_staleness_seconds
                .get_or_create(&label)
                .set(seconds);
        }
        self.restoring.set(i64::from(restoring));
        let resident = resident_bytes().map_or(0, |b| i64::try_from(b).unwrap_or(i64::MAX));
        self.resident_bytes.set(resident);
        &self.registry
    }
}
