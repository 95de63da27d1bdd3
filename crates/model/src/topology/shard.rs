//! The `[shard]` section: every shard node's settings, with defaults for a production
//! deployment.

use serde::{Deserialize, Serialize};

use std::path::PathBuf;

use super::Durability;

/// One level of `shard.default_history`: the TOML form of a [`crate::HistoryLevel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryLevelConfig {
    /// The length of one bucket, in seconds.
    pub step_seconds: u32,
    /// How far back from the newest bucket buckets are kept, in seconds (a multiple of
    /// `step_seconds`).
    pub keep_seconds: u32,
}

impl From<HistoryLevelConfig> for crate::HistoryLevel {
    fn from(level: HistoryLevelConfig) -> Self {
        crate::HistoryLevel {
            step_seconds: level.step_seconds,
            keep_seconds: level.keep_seconds,
        }
    }
}

impl ShardDefaults {
    /// The history levels of a sum counter created without `history`.
    pub fn default_history_levels(&self) -> Vec<crate::HistoryLevel> {
        self.default_history
            .iter()
            .copied()
            .map(Into::into)
            .collect()
    }
}

/// Settings of every shard node, with defaults for a production deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShardDefaults {
    /// Where shard nodes keep their data; each node uses `<data_dir>/DC_<dc>_VAL_<n>` unless
    /// `--data-dir` says otherwise.
    pub data_dir: PathBuf,
    /// When writes are acknowledged.
    pub durability: Durability,
    /// In `async` durability, the longest time between two fsyncs of the log, in milliseconds.
    pub async_flush_interval_ms: u64,
    /// In `replicated` durability, how long a group of writes waits for a peer to hold it
    /// durably before its writes are refused (503), in milliseconds.
    pub replication_timeout_ms: u64,
    /// The `numberOfShards` of a counter created by a write rather than by `POST /counter`, and
    /// how many of every counter's slots its keyed writes spread over (whatever its
    /// `numberOfShards`), so that a retry meets its first attempt.
    pub default_number_of_shards: u32,
    /// The rolling window of a counter created without `windowSeconds`, in seconds.
    pub default_window_seconds: u32,
    /// The longest `windowSeconds` a counter may be created with.
    pub max_window_seconds: u32,
    /// The history levels of a sum counter created without `history` (by `POST /counter` or
    /// by a write), e.g. `[{ step_seconds = 60, keep_seconds = 172800 }]`; default none.
    pub default_history: Vec<HistoryLevelConfig>,
    /// The most history levels a counter may keep (at most 8).
    pub max_history_levels: usize,
    /// The most buckets one history level may keep (`keepSeconds / stepSeconds`, at most
    /// 100,000); each bucket a slot holds costs 16 bytes at every tier.
    pub max_history_buckets: u32,
    /// A write timestamped more than this many seconds ahead of the node's clock is refused
    /// (422), so one client with a bad clock cannot push every window into the future.
    pub max_future_skew_secs: u64,
    /// The largest request body accepted, in bytes; larger ones get 413.
    pub max_body_bytes: usize,
    /// The most entries in one batched write; more get 413.
    pub max_batch_entries: usize,
    /// How long an `Idempotency-Key` is remembered, in seconds.
    pub idempotency_retention_secs: u64,
    /// The log is checkpointed into the store once the counters' changes in it grow past this
    /// many bytes (idempotency keys not counted: a restart loads them as fast from the log),
    /// or the whole log past four times as many.
    pub checkpoint_log_bytes: u64,
    /// The log is checkpointed at least this often while writes arrive, in milliseconds.
    pub checkpoint_interval_ms: u64,
    /// How a write picks one of its counter's slots.
    pub selection: Selection,
    /// Points each slot owns on the placement ring (1 to [`MAX_VIRTUAL_NODES`]).
    pub virtual_nodes: u32,
    /// A counter writing more than this per second per slot grows its `numberOfShards`; one
    /// under a quarter of it shrinks back (never below its created count).
    pub hot_writes_per_slot: u64,
    /// A node restoring its lost slot, once one source (a peer, its datacenter aggregator or
    /// the global aggregator) has handed over a complete copy, keeps waiting for the other
    /// sources while they hand over a page at least this often (milliseconds), then keeps the
    /// highest version of every counter. It never starts empty on its own, however long no
    /// source is complete.
    pub restore_timeout_ms: u64,
    /// The most counters a node keeps in its own slot, and the most descriptions it creates
    /// itself: a write or create that would go past it is refused (507). Copies and
    /// descriptions learned from other nodes are never refused (they count towards it).
    pub max_counters: usize,
    /// The most `Idempotency-Key`s a node holds at once (each for `idempotency_retention_secs`,
    /// about 190 bytes of memory): a write with a new key beyond it is refused (507) until
    /// older keys expire; retries of held keys and writes without a key are never refused.
    pub max_idempotency_keys: usize,
    /// The most bytes one counter's state may hold on a node (its record with its window
    /// buckets or sketch, its id and its description, as [`crate::held_bytes`] estimates
    /// them): a write that would grow a counter past it is refused (507). The default holds
    /// the longest window (3,600 buckets, about 57 KiB) and a dense sketch (about 16 KiB).
    pub max_counter_bytes: u64,
    /// The most bytes of state a node holds: its own slot's records and ids, and every
    /// description it knows. A write or create that would grow it past it is refused (507);
    /// descriptions learned from other nodes are never refused (they count towards it).
    pub max_state_bytes: u64,
    /// How old (milliseconds) a node's cached copy of the other datacenters' parts of a counter
    /// may be before a world read (Redis `GET`, `GET /counter/{id}/world`) asks the global
    /// aggregator again; its own datacenter's part is always computed at the read.
    pub world_refresh_ms: u64,
}

impl Default for ShardDefaults {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("data"),
            durability: Durability::Sync,
            async_flush_interval_ms: 100,
            replication_timeout_ms: 1_000,
            default_number_of_shards: 1,
            default_window_seconds: 300,
            max_window_seconds: 3_600,
            default_history: Vec::new(),
            max_history_levels: 4,
            max_history_buckets: 4_096,
            max_future_skew_secs: 60,
            max_body_bytes: 8 * 1024 * 1024,
            max_batch_entries: 100_000,
            idempotency_retention_secs: 600,
            checkpoint_log_bytes: 64 * 1024 * 1024,
            checkpoint_interval_ms: 30_000,
            selection: Selection::RoundRobin,
            virtual_nodes: 64,
            hot_writes_per_slot: 2_000,
            restore_timeout_ms: 3_000,
            max_counters: 10_000_000,
            max_idempotency_keys: 10_000_000,
            max_counter_bytes: 64 * 1024,
            max_state_bytes: 4 << 30,
            world_refresh_ms: 1_000,
        }
    }
}

/// How a shard node picks one of a counter's slots for a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selection {
    /// Each of the counter's slots in turn.
    #[default]
    RoundRobin,
    /// A random one of the counter's slots.
    Random,
    /// The slot whose node reported the lowest write rate.
    LeastLoaded,
}
