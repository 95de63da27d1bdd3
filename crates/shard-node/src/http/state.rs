//! What every handler shares ([`NodeState`]), and the way to the commit loop from it; it is
//! the node forwarding applies writes on ([`LocalNode`]).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use geocount_http::Access;
use geocount_model::{
    Clock, CounterDescription, CounterId, CounterType, ShardDefaults, SlotState, SyncSettings,
};
use geocount_sync::{ClockFence, DescriptionTable, SlotCopies};
use tokio::sync::mpsc;

use crate::engine::idempotency::SharedKeys;
use crate::engine::slot_table::SharedSlotTable;
use crate::engine::write::{Command, LifecycleChange, WriteRequest, WriteResults};
use crate::error::ShardError;
use crate::health::NodeHealth;
use crate::http::routes::Route;
use crate::metrics::ShardMetrics;
use crate::peer::replica_log::ReplicaLogs;
use crate::peer::replication::PeerSink;
use crate::read::world::{WorldValue, WorldView};
use crate::rights::{RightsNetwork, RightsNode};
use crate::route::forward::LocalNode;
use crate::route::slots::WriteRouter;
use crate::startup::restore::RestoreProgress;
use crate::storage::Storage;

/// What the HTTP handlers share.
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
    pub replicas: Arc<RwLock<SlotCopies>>,
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
    /// The endpoints.
    pub routes: matchit::Router<Route>,
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
    pub replica_logs: Arc<ReplicaLogs>,
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
    /// Hands `command` to the commit loop, waiting while its queue is full.
    pub async fn send(&self, command: Command) -> Result<(), ShardError> {
        self.commands
            .send(command)
            .await
            .map_err(|_| self.stopped())
    }

    /// Applies `writes` to this node's slot: answered once they are durable (or refused). A
    /// bounded counter's write its slot lacks the rights for is tried again after asking for
    /// them ([`crate::rights::ask`]).
    pub async fn submit(&self, writes: Vec<WriteRequest>) -> Result<WriteResults, ShardError> {
        let mut results = self.submit_once(writes).await?;
        if results
            .iter()
            .any(|result| matches!(result, Err(ShardError::ShortOfRights(_))))
        {
            crate::rights::ask::retry_short(self, &mut results).await;
        }
        Ok(results)
    }

    /// Hands `writes` to the commit loop once, as they are.
    pub(crate) async fn submit_once(
        &self,
        writes: Vec<WriteRequest>,
    ) -> Result<WriteResults, ShardError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.send(Command::Write { writes, reply }).await?;
        answer.await.map_err(|_| self.stopped())
    }

    /// Resets, deletes or changes the expiry of counter `id`: its new description, once
    /// durable. A reset or expiry of a counter this node has not heard of is made for the
    /// counter the world knows ([`NodeState::lives_unheard`]).
    pub async fn change_life(
        &self,
        id: CounterId,
        change: LifecycleChange,
        key: Option<(Box<str>, (i64, u64))>,
    ) -> Result<CounterDescription, ShardError> {
        let elsewhere = match change {
            LifecycleChange::Reset | LifecycleChange::Expire(_) => self.lives_unheard(&id).await?,
            LifecycleChange::Delete | LifecycleChange::ExpireIfMade { .. } => None,
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        let command = Command::Lifecycle {
            id,
            change,
            elsewhere,
            key,
            reply,
        };
        self.send(command).await?;
        answer.await.map_err(|_| self.stopped())?
    }

    /// The refusal of a request the stopping node can no longer take.
    pub fn stopped(&self) -> ShardError {
        ShardError::Unavailable("the node is shutting down".into())
    }

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

impl RightsNode for NodeState {
    fn rights(&self) -> &RightsNetwork {
        &self.rights
    }

    fn submit_once(
        &self,
        writes: Vec<WriteRequest>,
    ) -> impl Future<Output = Result<WriteResults, ShardError>> + Send {
        NodeState::submit_once(self, writes)
    }

    fn send(&self, command: Command) -> impl Future<Output = Result<(), ShardError>> + Send {
        NodeState::send(self, command)
    }

    fn descriptions(&self) -> &RwLock<DescriptionTable> {
        &self.descriptions
    }

    fn table(&self) -> &SharedSlotTable {
        &self.table
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_unix_ms()
    }

    fn description_fence(&self) -> ClockFence {
        ClockFence::new(self.clock.now_unix_ms(), self.sync.max_clock_skew_ms)
    }

    fn refused_description(&self) {
        self.metrics.descriptions_refused.inc();
    }

    fn stopped(&self) -> ShardError {
        NodeState::stopped(self)
    }
}

impl LocalNode for NodeState {
    fn router(&self) -> &WriteRouter {
        &self.router
    }

    fn descriptions(&self) -> &RwLock<DescriptionTable> {
        &self.descriptions
    }

    fn metrics(&self) -> &ShardMetrics {
        &self.metrics
    }

    fn slot_name(&self) -> &str {
        &self.slot_name
    }

    fn submit(
        &self,
        writes: Vec<WriteRequest>,
    ) -> impl Future<Output = Result<WriteResults, ShardError>> + Send {
        NodeState::submit(self, writes)
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_unix_ms()
    }

    fn change_life(
        &self,
        id: CounterId,
        change: LifecycleChange,
    ) -> impl Future<Output = Result<CounterDescription, ShardError>> + Send {
        NodeState::change_life(self, id, change, None)
    }

    fn lives_unheard(
        &self,
        id: &CounterId,
    ) -> impl Future<Output = Result<Option<CounterType>, ShardError>> + Send {
        NodeState::lives_unheard(self, id)
    }

    fn stopped(&self) -> ShardError {
        NodeState::stopped(self)
    }

    fn acknowledged(&self, id: &CounterId, slot: u32, state: SlotState) {
        if let Ok(slot) = u16::try_from(slot) {
            self.world.acknowledged(id, slot, state);
        }
    }
}
