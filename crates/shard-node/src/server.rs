//! `run`: a whole shard node on a listener, until shutdown. The binary and the tests call it.

use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use geocount_model::{Clock, Durability, Hlc, ShardDefaults, SyncSettings};
use geocount_net::{Connector, HttpClient, Listener, serve_with_limits};
use geocount_sync::{Access, DescriptionTable, PullSink, SlotCopies, spawn_puller};
use tokio::sync::mpsc;

use crate::api::{self, Route};
use crate::checkpoint::Checkpointer;
use crate::commit::{Command, CommitContext, CommitLoop, NodeHealth};
use crate::config::NodeConfig;
use crate::error::StorageError;
use crate::metrics::ShardMetrics;
use crate::recovery::{self, Recovered};
use crate::replication::PeerSink;
use crate::restore::restore_slot;
use crate::routing::{RouterSetup, WriteRouter};
use crate::slot_table::SharedSlotTable;
use crate::storage::Storage;
use crate::wal::LogRecord;

/// Commands waiting for the commit loop; beyond this, handlers wait (backpressure).
const COMMAND_QUEUE: usize = 16_384;

/// What the HTTP handlers share.
pub struct NodeState {
    /// The owned slot's name, e.g. `DC_USA_0_VAL_1`.
    pub slot_name: String,
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
}

/// Recovers the node's state from its data directory on `storage` (restoring its slot from its
/// peers and aggregator when the directory is empty), serves `listener` until `shutdown`
/// completes, then drains requests, flushes the log and checkpoints. Time comes from `clock`
/// and connections to other nodes from `connector`.
pub async fn run<L: Listener>(
    config: NodeConfig,
    listener: L,
    clock: Arc<dyn Clock>,
    connector: Connector,
    storage: Storage,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StorageError> {
    let slot_name = config.slot.to_string();
    let metrics = Arc::new(ShardMetrics::default());
    let health = Arc::new(NodeHealth::default());
    let settings = config.settings.clone();
    let access = Access::new(&config.auth);
    let client = access.cluster_client(HttpClient::with_connector(
        Duration::from_millis(config.sync.timeout_ms),
        connector,
    ));

    let now_ms = clock.now_unix_ms();
    let data_dir = config.data_dir.clone();
    let recover_settings = settings.clone();
    let disk = storage.disk.clone();
    let mut recovered = storage
        .blocking(move || recovery::recover(disk, &data_dir, &recover_settings, now_ms))
        .await?;
    if recovered.fresh {
        restore_from_datacenter(&config, &client, &mut recovered).await?;
    }
    let table: SharedSlotTable = Arc::new(RwLock::new(recovered.table));
    let descriptions = Arc::new(RwLock::new(recovered.descriptions));
    let counters = table.read().expect("slot table lock").len();
    metrics.counters_held.set(counters as i64);
    tracing::info!(slot = %slot_name, counters, data_dir = %config.data_dir.display(), durability = %settings.durability, "recovered");

    let own_slot = config.slot.index;
    let placement = config.datacenter.placement(settings.virtual_nodes);
    let hlc = Arc::new(Hlc::new(&slot_name, clock.clone()));
    let load = Arc::new(AtomicU64::new(0));
    let (commands, receiver) = mpsc::channel(COMMAND_QUEUE);
    let checkpointer = Checkpointer::spawn(
        &storage,
        recovered.store,
        table.clone(),
        config.data_dir.clone(),
        metrics.clone(),
    );
    let commit_loop = CommitLoop::new(
        recovered.log,
        CommitContext {
            table: table.clone(),
            descriptions: descriptions.clone(),
            checkpointer,
            settings: settings.clone(),
            clock: clock.clone(),
            hlc,
            placement: placement.clone(),
            own_slot,
            load: load.clone(),
            metrics: metrics.clone(),
            health: health.clone(),
        },
    );
    let commit_worker = storage.spawn("commit", commit_loop.run(receiver));

    // Pull each peer's slot and descriptions, and descriptions from the aggregator.
    let slot_names = config.slot_names();
    let replicas = Arc::new(RwLock::new(SlotCopies::new(slot_names.clone())));
    let mut sources = Vec::new();
    let mut peers = Vec::new();
    let mut pullers = Vec::new();
    for (index, address) in config.datacenter.shards.iter().enumerate() {
        if index as u32 == own_slot {
            continue;
        }
        let sink = Arc::new(PeerSink::new(
            &slot_names[index],
            Some(replicas.clone()),
            descriptions.clone(),
            commands.clone(),
            metrics.clone(),
            clock.clone(),
        ));
        let every = Duration::from_millis(config.sync.peer_ms);
        pullers.push(spawn_puller(
            address.to_string(),
            every,
            client.clone(),
            clock.clone(),
            sink.clone() as Arc<dyn PullSink>,
        ));
        peers.push((index as u32, sink.clone()));
        sources.push(sink);
    }
    let aggregator = Arc::new(PeerSink::new(
        &format!("aggregator {}", config.datacenter.name),
        None,
        descriptions.clone(),
        commands.clone(),
        metrics.clone(),
        clock.clone(),
    ));
    let every = Duration::from_millis(config.sync.downward_ms);
    pullers.push(spawn_puller(
        config.datacenter.aggregator.to_string(),
        every,
        client.clone(),
        clock.clone(),
        aggregator.clone() as Arc<dyn PullSink>,
    ));
    sources.push(aggregator);

    let tick_every = match settings.durability {
        Durability::Async => settings.async_flush_interval_ms.min(250),
        Durability::Sync => 250,
    };
    let ticker = tokio::spawn(tick(commands.clone(), Duration::from_millis(tick_every)));

    let router = WriteRouter::new(RouterSetup {
        placement,
        own_slot,
        addresses: config.datacenter.shards.clone(),
        slot_names,
        selection: settings.selection,
        default_shards: settings.default_number_of_shards,
        own_load: load.clone(),
        peers,
        client,
    });
    let state = Arc::new(NodeState {
        slot_name,
        table,
        descriptions,
        replicas,
        sources,
        router,
        commands: commands.clone(),
        settings,
        sync: config.sync.clone(),
        clock,
        load,
        metrics,
        health,
        routes: api::router(),
        access,
    });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, slot = %state.slot_name, "serving");
    }
    serve_with_limits(
        listener,
        geocount_sync::http::serve_limits(&config.http),
        move |request| api::handle(state.clone(), request),
        shutdown,
    )
    .await;

    for puller in pullers {
        puller.abort();
    }
    ticker.abort();
    let _ = commands.send(Command::Shutdown).await;
    commit_worker.finished().await;
    tracing::info!("stopped");
    Ok(())
}

/// Restores the own slot of a node whose data directory was empty from the copies its
/// aggregator and peers hold, and makes the result durable before any write is taken.
async fn restore_from_datacenter(
    config: &NodeConfig,
    client: &HttpClient,
    recovered: &mut Recovered,
) -> Result<(), StorageError> {
    let mut sources = vec![config.datacenter.aggregator];
    sources.extend(
        config
            .datacenter
            .shards
            .iter()
            .enumerate()
            .filter(|(n, _)| *n as u32 != config.slot.index)
            .map(|(_, address)| *address),
    );
    let slot = config.slot.to_string();
    let timeout = Duration::from_millis(config.settings.restore_timeout_ms);
    // A whole slot's copy grows with its counters (hundreds of MB at 10,000,000): no limit
    // but the client's timeout, unlike every other answer between tiers.
    let client = client.clone().with_max_response_bytes(usize::MAX);
    let restored = restore_slot(&slot, &sources, &client, timeout).await;
    if restored.answered == 0 {
        tracing::warn!(%slot, "empty data directory and no peer or aggregator answered: starting empty");
        return Ok(());
    }
    let mut record = LogRecord::default();
    for (id, slot) in restored.entries {
        if let Some(row) = recovered.table.merge(&id, &slot) {
            recovered.log.pending.rows.mark(row);
            recovered.log.last_version = recovered.log.last_version.max(slot.state.version);
            record.slots.push((id, slot));
        }
    }
    tracing::info!(%slot, counters = record.slots.len(), sources = restored.answered, "restored the slot from the datacenter");
    if !record.is_empty() {
        recovered.log.wal.append(&record)?;
        recovered.log.wal.sync()?;
    }
    Ok(())
}

async fn tick(commands: mpsc::Sender<Command>, every: Duration) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        interval.tick().await;
        // A full queue means the loop is busy and will flush and checkpoint anyway.
        if let Err(mpsc::error::TrySendError::Closed(_)) = commands.try_send(Command::Tick) {
            return;
        }
    }
}
