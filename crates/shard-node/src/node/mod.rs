//! The shard node's composition: every part of the node a request reaches ([`NodeState`]),
//! shared by the HTTP and Redis handlers, forwarding and the rights network.
//!
//! - this file: the parts, and what they answer together (a counter's world value, whether
//!   it lives unheard of here).
//! - [`submit`]: the one way a write or a change of a counter's life reaches the commit
//!   loop, whichever handler or forward it came by.
//! - [`seams`]: the node as forwarding ([`crate::route::forward::LocalNode`]) and the rights
//!   network ([`crate::rights::RightsNode`]) name it, so that neither depends on the handlers.

pub(crate) mod seams;
pub(crate) mod submit;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use geocount_http::Access;
use geocount_model::Clock;
use geocount_model::{CounterId, CounterType, ShardDefaults, SyncSettings};
use geocount_sync::{DescriptionTable, SlotCopies};
use tokio::sync::mpsc;

use crate::engine::idempotency::SharedKeys;
use crate::engine::slot_table::SharedSlotTable;
use crate::engine::write::Command;
use crate::error::ShardError;
use crate::health::NodeHealth;
use crate::metrics::ShardMetrics;
use crate::peer::held_log::HeldLogs;
use crate::peer::pulls::PeerSink;
use crate::read::world::{WorldValue, WorldView};
use crate::rights::RightsNetwork;
use crate::route::slots::WriteRouter;
use crate::startup::restore::RestoreProgress;
use crate::storage::Storage;

/// Every part of the node a request reaches.
pub struct NodeState {
    /// The owned slot's name, e.g. `DC_USA_0_VAL_1`.
    pub slot_name: String,
    /// Its datacenter's name, e.g. `USA_0`.
    pub datacenter: String,
    /// Committed state of the own slot, for reads and sync.
    pub table: SharedSlotTable,
    /// Known counter descriptions.
    pub descriptions: Arc<RwLock<DescriptionTable>>,
    /// Copies of the peers' slots.
    pub peer_copies: Arc<RwLock<SlotCopies>>,
    /// The peers and the aggregator this node pulls, for `/healthz`.
    pub sources: Vec<Arc<PeerSink>>,
    /// Picks slots and forwards writes.
    pub router: WriteRouter,
    /// The way to the commit loop.
    pub commands: mpsc::Sender<Command>,
    /// Shard settings from the topology.
    pub settings: ShardDefaults,
    /// Sync settings from the topology.
    pub sync: SyncSettings,
    /// The time seam.
    pub clock: Arc<dyn Clock>,
    /// Writes per second applied lately.
    pub load: Arc<AtomicU64>,
    /// The node's metrics.
    pub metrics: Arc<ShardMetrics>,
    /// Storage health, for `/healthz`.
    pub health: Arc<NodeHealth>,
    /// Who may call which route (`[auth]`).
    pub access: Access,
    /// The restore of a lost slot, while it runs: writes and reads of the slot wait for it.
    pub restore: Arc<RestoreProgress>,
    /// This data directory's incarnation, sent with every sync page.
    pub incarnation: u64,
    /// Drawn at random when this process started, sent beside the incarnation: a copy of the
    /// data directory started elsewhere draws another.
    pub nonce: u64,
    /// The own slot's idempotency keys, paged to the peers.
    pub keys: SharedKeys,
    /// The logs of the groups the peers replicate here (`replicated` durability).
    pub held_logs: Arc<HeldLogs>,
    /// Whether the own slot may be pulled: in `replicated` durability, only once a peer holds
    /// what this process started with, so no copy shows a group no peer holds.
    pub slot_shown: Arc<std::sync::atomic::AtomicBool>,
    /// Where those logs' file calls run.
    pub storage: Storage,
    /// Counters' world values: this datacenter's slots here, the others' from the global tier.
    pub world: Arc<WorldView>,
    /// Bounded counters' rights: the other slots this node asks.
    pub rights: Arc<RightsNetwork>,
}

impl NodeState {
    /// The world value of counter `id` as this node answers it (`None`: no live counter has
    /// it).
    pub(crate) async fn world_value(
        &self,
        id: &CounterId,
    ) -> Result<Option<WorldValue>, ShardError> {
        let mut values = self.world.values(std::slice::from_ref(id)).await;
        values.pop().unwrap_or(Ok(None))
    }

    /// The type of counter `id` when this node has heard of it neither by a description nor
    /// by a record of its slot, but the world knows it live: its peers' slots (this node's
    /// copies) or the other datacenters' parts (the global tier). `None` when this node has
    /// heard of it, or no one knows it live.
    pub async fn lives_unheard(&self, id: &CounterId) -> Result<Option<CounterType>, ShardError> {
        let heard = self
            .descriptions
            .read()
            .expect("descriptions lock")
            .get(id.as_str())
            .is_some()
            || self
                .table
                .read()
                .expect("slot table lock")
                .get_record(id.as_str())
                .is_some();
        if heard {
            return Ok(None);
        }
        Ok(self.world_value(id).await?.map(WorldValue::counter_type))
    }
}
