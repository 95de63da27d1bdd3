//! What the commit loop is built from: the parts it shares with the rest of the node, the
//! datacenter's place for bounded counters' shares, and what startup recovered of the log.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use geocount_model::{Clock, Hlc, Placement, ShardDefaults};
use geocount_sync::{DescriptionTable, SlotCopies};

use crate::engine::checkpoint::Checkpointer;
use crate::engine::idempotency::SharedKeys;
use crate::engine::slot_table::SharedSlotTable;
use crate::engine::store::Checkpoint;
use crate::engine::wal::Wal;
use crate::health::NodeHealth;
use crate::metrics::ShardMetrics;

/// What the commit loop shares with the rest of the node.
pub struct CommitContext {
    /// The committed slot states (the loop is their only writer).
    pub table: SharedSlotTable,
    /// The known descriptions (the loop is their only writer).
    pub descriptions: Arc<RwLock<DescriptionTable>>,
    /// The copies of the peers' slots held here: a tombstone goes only once no copy of its
    /// counter is held either, or the copy would count again without it.
    pub peer_copies: Arc<RwLock<SlotCopies>>,
    /// Writes the closed log segments into the store.
    pub checkpointer: Checkpointer,
    /// Shard settings.
    pub settings: ShardDefaults,
    /// The time seam.
    pub clock: Arc<dyn Clock>,
    /// Versions of descriptions.
    pub hlc: Arc<Hlc>,
    /// Where counters go in this datacenter.
    pub placement: Placement,
    /// This node's slot index.
    pub own_slot: u32,
    /// Writes per second applied lately, reported to peers.
    pub load: Arc<AtomicU64>,
    /// Metrics.
    pub metrics: Arc<ShardMetrics>,
    /// Health, for `/healthz`.
    pub health: Arc<NodeHealth>,
    /// How long a deleted counter's tombstone is kept (`sync.tombstone_retention_secs`).
    pub tombstone_retention_ms: u64,
    /// Where this node's datacenter is among the topology's, for bounded counters' shares.
    pub rights: RightsPlace,
}

/// This node's datacenter's place in the topology: its share of a bounded counter's room is
/// the `index`th of `datacenters`.
#[derive(Debug, Clone, Copy)]
pub struct RightsPlace {
    /// Its index in the topology's `datacenters`.
    pub index: usize,
    /// How many datacenters the topology has.
    pub datacenters: usize,
}

/// What the commit loop resumes from: what startup read of the log and the store.
#[derive(Debug)]
pub struct LogState {
    /// A fresh log segment after the replayed ones.
    pub wal: Wal,
    /// Idempotency keys still within retention.
    pub idempotency: SharedKeys,
    /// What the log holds beyond the store: the next checkpoint must write it.
    pub pending: Checkpoint,
    /// The highest version of the slot so far.
    pub last_version: u64,
}
