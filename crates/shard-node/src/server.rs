//! `run`: a whole shard node on a listener, until shutdown. The binary and the tests call it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use geocount_http::Access;
use geocount_model::wire::Puller;
use geocount_model::{Clock, Durability, Hlc, next_slot_version};
use geocount_net::{Connector, HttpClient, Listener, serve_with_limits};
use geocount_sync::{DescriptionTable, PullSink, SlotCopies, spawn_puller};
use tokio::sync::mpsc;

use crate::config::NodeConfig;
use crate::engine::checkpoint::Checkpointer;
use crate::engine::commit::{CommitContext, CommitLoop};
use crate::engine::held::HeldGroups;
use crate::engine::idempotency::SharedKeys;
use crate::engine::slot_table::SharedSlotTable;
use crate::engine::write::Command;
use crate::error::StorageError;
use crate::health::NodeHealth;
use crate::http::api;
use crate::metrics::ShardMetrics;
use crate::node::NodeState;
use crate::peer::held_log::{HeldLogs, holds_since};
use crate::peer::held_sender::{HeldSender, resend_log};
use crate::peer::key_file::KeyFile;
use crate::peer::keys::PeerKeys;
use crate::peer::pulls::PeerSink;
use crate::read::parts::{GlobalTier, OtherParts};
use crate::read::world::{LocalSlots, WorldView};
use crate::rights::{Datacenter, RightsNetwork};
use crate::route::slots::{RouterSetup, WriteRouter};
use crate::startup::restore::{CopySource, RestoreProgress, RestoreRequest};
use crate::startup::resume::{self, Resumed};
use crate::startup::take_over::restore_then_take_writes;
use crate::storage::{Storage, Worker};

/// Commands waiting for the commit loop; beyond this, handlers wait (backpressure).
const COMMAND_QUEUE: usize = 16_384;

/// Recovers the node's state from its data directory on `storage`, serves `listener` until
/// `shutdown` completes, then drains requests, flushes the log and checkpoints. A directory
/// marked for a restore (an empty one, unless `config.restore` says to start empty) is
/// restored from the datacenter's copies while the node serves, taking no writes until the
/// restored slot is durable. Time comes from `clock` and connections to other nodes from
/// `connector`.
pub async fn run<L: Listener>(
    config: NodeConfig,
    listener: L,
    clock: Arc<dyn Clock>,
    connector: Connector,
    storage: Storage,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StorageError> {
    let resp = (listener, None::<L>);
    run_with_resp(config, resp, clock, connector, storage, shutdown).await
}

/// [`run`], also serving the Redis protocol on `resp` when given (the listener bound at the
/// node's `resp` address) until the HTTP side has drained.
pub async fn run_with_resp<L: Listener, R: Listener>(
    config: NodeConfig,
    (listener, resp): (L, Option<R>),
    clock: Arc<dyn Clock>,
    connector: Connector,
    storage: Storage,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StorageError> {
    let resumed = recover(&config, &storage, clock.now_unix_ms()).await?;
    let restore_pending = resumed.restore_pending;
    let incarnation = resumed.incarnation;
    // This start's own: a copy of the data directory started beside it draws another.
    let nonce = rand::random::<u64>().max(1);
    let access = Access::new(&config.auth, &config.slot.to_string(), config.certificates);
    let client = access.cluster_client(HttpClient::with_connector(
        Duration::from_millis(config.sync.timeout_ms),
        connector,
    ));
    // In `replicated` durability every group this process shows from this version on, a peer
    // holds first. Before it, what it recovered may come from a process that did not
    // replicate; a new slot has nothing before it, and a restored one what copies showed
    // before (it moves the version on no further than the earlier processes did).
    let last_version = resumed.log.last_version;
    let since_version = match (restore_pending, last_version) {
        (true, _) | (false, 0) => 0,
        (false, last) => next_slot_version(last, clock.now_unix_ms()),
    };
    let held_sender = HeldSender::for_node(&config, incarnation, since_version, &client);
    // The own slot is shown to pullers once a peer holds what this process starts with.
    let shown = Arc::new(AtomicBool::new(held_sender.is_none()));
    if let Some(held_sender) = &held_sender {
        let resent = (shown.clone(), last_version);
        resend_log(held_sender.as_ref(), &storage, &config.data_dir, resent).await?;
    }
    let peer_keys = read_peer_keys(&config, &storage, clock.now_unix_ms()).await?;
    let (disk, dir, now_ms) = (
        storage.disk.clone(),
        config.data_dir.clone(),
        clock.now_unix_ms(),
    );
    let holds_since_ms = storage
        .blocking(move || holds_since(&*disk, &dir, restore_pending, now_ms))
        .await?;
    let engine = start_engine(
        &config,
        &storage,
        clock.clone(),
        resumed,
        (held_sender, shown),
        holds_since_ms,
    );
    let me = Puller {
        slot: config.slot.to_string(),
        incarnation,
        nonce,
    };
    let pulls = start_pulls(&config, &engine, me, &client, peer_keys, &storage);
    let copy_sources = crate::startup::restore::copy_sources(&config);
    let restore = Arc::new(RestoreProgress::new(restore_pending, &copy_sources));
    let state = Arc::new(node_state(
        &config,
        &engine,
        &pulls,
        client.clone(),
        access,
        restore.clone(),
        (incarnation, nonce),
    ));
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, slot = %state.slot_name, incarnation = format!("{incarnation:016x}"), "serving");
    }
    let restorer = restore
        .is_restoring()
        .then(|| start_restore(&config, &state, copy_sources, client));
    let resp = crate::resp::Server::start(resp, &state, &config.resp_settings);
    serve_with_limits(
        listener,
        geocount_http::routing::serve_limits(&config.http),
        move |request| api::handle(state.clone(), request),
        shutdown,
    )
    .await;
    resp.stop().await;

    if let Some(restorer) = restorer {
        restorer.abort();
    }
    for puller in pulls.pullers {
        puller.abort();
    }
    engine.stop().await;
    tracing::info!("stopped");
    Ok(())
}

/// Reads the data directory and rebuilds the node's state from it, off the async threads.
async fn recover(
    config: &NodeConfig,
    storage: &Storage,
    now_ms: u64,
) -> Result<Resumed, StorageError> {
    let data_dir = config.data_dir.clone();
    let settings = config.settings.clone();
    let disk = storage.disk.clone();
    let mode = config.restore;
    let resumed = storage
        .blocking(move || resume::recover(disk, &data_dir, &settings, now_ms, mode))
        .await?;
    let counters = resumed.table.len();
    tracing::info!(slot = %config.slot, counters, data_dir = %config.data_dir.display(), durability = %config.settings.durability, "recovered");
    Ok(resumed)
}

/// Each peer's copy of its idempotency keys, read back from its key file, by slot index.
async fn read_peer_keys(
    config: &NodeConfig,
    storage: &Storage,
    now_ms: u64,
) -> Result<Vec<(u32, KeyFile, PeerKeys)>, StorageError> {
    let retention_ms = config.settings.idempotency_retention_secs * 1000;
    let peers: Vec<(u32, String)> = (0u32..)
        .zip(config.slot_names())
        .filter(|(index, _)| *index != config.slot.index)
        .collect();
    let (disk, dir) = (storage.disk.clone(), config.data_dir.clone());
    storage
        .blocking(move || {
            let mut copies = Vec::new();
            for (index, slot) in peers {
                let (file, back) = KeyFile::read(disk.clone(), &dir, &slot)?;
                if !back.keys.is_empty() {
                    tracing::info!(%slot, keys = back.keys.len(), reach = back.reach, "read back the copy of a peer's idempotency keys");
                }
                let keys = PeerKeys::recovered(retention_ms, back.keys, back.reach, now_ms);
                copies.push((index, file, keys));
            }
            Ok(copies)
        })
        .await
}

/// The commit loop and the checkpointer, running, and what they share with the handlers.
struct Engine {
    commands: mpsc::Sender<Command>,
    commit_worker: Worker,
    ticker: tokio::task::JoinHandle<()>,
    table: SharedSlotTable,
    descriptions: Arc<RwLock<DescriptionTable>>,
    /// The copies of the peers' slots, filled by the pulls.
    peer_copies: Arc<RwLock<SlotCopies>>,
    keys: SharedKeys,
    load: Arc<AtomicU64>,
    metrics: Arc<ShardMetrics>,
    health: Arc<NodeHealth>,
    clock: Arc<dyn Clock>,
    /// The logs of the groups the peers replicate here, and where their file calls run.
    held_logs: Arc<HeldLogs>,
    /// Whether the own slot may be pulled: in `replicated` durability, once a peer holds the
    /// log this process started with.
    shown: Arc<AtomicBool>,
    storage: Storage,
}

impl Engine {
    /// Asks the commit loop to flush and checkpoint, and waits until it has stopped.
    async fn stop(self) {
        self.ticker.abort();
        let _ = self.commands.send(Command::Shutdown).await;
        self.commit_worker.finished().await;
    }
}

/// Starts the commit loop (with its checkpointer) on the recovered state, and the ticker that
/// drives its flushes, key expiry and checkpoints; with a `held_sender`, each group is shown
/// and its writes answered once a peer holds it too, and the slot is pulled once `shown`.
/// The peers' logs held here hold every group since `holds_since_ms`.
fn start_engine(
    config: &NodeConfig,
    storage: &Storage,
    clock: Arc<dyn Clock>,
    resumed: Resumed,
    (held_sender, shown): (Option<Box<dyn HeldGroups>>, Arc<AtomicBool>),
    holds_since_ms: u64,
) -> Engine {
    let settings = &config.settings;
    let metrics = Arc::new(ShardMetrics::default());
    let health = Arc::new(NodeHealth::default());
    let table: SharedSlotTable = Arc::new(RwLock::new(resumed.table));
    let descriptions = Arc::new(RwLock::new(resumed.descriptions));
    let peer_copies = Arc::new(RwLock::new(SlotCopies::new(config.slot_names())));
    metrics
        .counters_held
        .set(table.read().expect("slot table lock").len() as i64);
    let hlc = Arc::new(Hlc::new(&config.slot.to_string(), clock.clone()));
    // Past every recovered version: a change made after a restart with the clock behind must
    // still win over the ones made before it.
    descriptions
        .read()
        .expect("descriptions lock")
        .seed_clock(&hlc);
    let load = Arc::new(AtomicU64::new(0));
    let (commands, receiver) = mpsc::channel(COMMAND_QUEUE);
    let checkpointer = Checkpointer::spawn(
        storage,
        resumed.store,
        table.clone(),
        config.data_dir.clone(),
        metrics.clone(),
    );
    let keys = resumed.log.idempotency.clone();
    let commit_loop = CommitLoop::new(
        resumed.log,
        CommitContext {
            table: table.clone(),
            descriptions: descriptions.clone(),
            peer_copies: peer_copies.clone(),
            checkpointer,
            settings: settings.clone(),
            clock: clock.clone(),
            hlc,
            placement: config.datacenter.placement(settings.virtual_nodes),
            own_slot: config.slot.index,
            load: load.clone(),
            metrics: metrics.clone(),
            health: health.clone(),
            tombstone_retention_ms: config.sync.tombstone_retention_secs.saturating_mul(1_000),
            rights: config.rights_place(),
        },
    );
    let commit_loop = match held_sender {
        Some(held_sender) => commit_loop.holding_through(held_sender),
        None => commit_loop,
    };
    let commit_worker = storage.spawn("commit", commit_loop.run(receiver));
    let tick_every = match settings.durability {
        Durability::Async => settings.async_flush_interval_ms.min(250),
        Durability::Sync | Durability::Replicated => 250,
    };
    let own = config.slot.to_string();
    let held_logs = Arc::new(HeldLogs::new(
        storage.disk.clone(),
        &config.data_dir,
        config
            .slot_names()
            .into_iter()
            .filter(|s| *s != own)
            .collect(),
        (
            settings.checkpoint_log_bytes,
            settings.idempotency_retention_secs * 1000,
        ),
        holds_since_ms,
    ));
    let ticker = tokio::spawn(tick(commands.clone(), Duration::from_millis(tick_every)));
    Engine {
        commands,
        commit_worker,
        ticker,
        table,
        descriptions,
        peer_copies,
        keys,
        load,
        metrics,
        health,
        clock,
        held_logs,
        shown,
        storage: storage.clone(),
    }
}

/// The pullers of the peers' slots and descriptions and of the aggregator's descriptions.
struct Pulls {
    peer_copies: Arc<RwLock<SlotCopies>>,
    /// Every source pulled, for `/healthz` and the staleness metrics.
    sources: Vec<Arc<PeerSink>>,
    /// Each peer's slot index and sink, for the write router's load reports.
    peers: Vec<(u32, Arc<PeerSink>)>,
    pullers: Vec<tokio::task::JoinHandle<()>>,
}

/// Pulls each peer's slot, keys (into `peer_keys`, written back to their key files on
/// `storage`) and descriptions, and descriptions from the aggregator. The aggregator learns
/// which process (`me`: incarnation and start nonce) pulls for this slot, and tells this node
/// if another process serves the slot at the same time.
fn start_pulls(
    config: &NodeConfig,
    engine: &Engine,
    me: Puller,
    client: &HttpClient,
    peer_keys: Vec<(u32, KeyFile, PeerKeys)>,
    storage: &Storage,
) -> Pulls {
    let slot_names = config.slot_names();
    let peer_copies = engine.peer_copies.clone();
    let clock = &engine.clock;
    let mut sources = Vec::new();
    let mut peers = Vec::new();
    let mut pullers = Vec::new();
    for (index, file, keys) in peer_keys {
        let address = config.datacenter.shards[index as usize];
        let index = index as usize;
        let sink = Arc::new(
            PeerSink::new(
                &slot_names[index],
                Some((peer_copies.clone(), index as u16)),
                engine.descriptions.clone(),
                engine.commands.clone(),
                engine.metrics.clone(),
                clock.clone(),
            )
            .with_max_clock_skew_ms(config.sync.max_clock_skew_ms)
            .holding_keys(keys),
        );
        pullers.push(tokio::spawn(
            sink.clone().persist_keys(file, storage.clone()),
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
    // Every aggregator replica of the datacenter learns which process pulls for this slot.
    for (n, address) in config.datacenter.aggregators().iter().enumerate() {
        let aggregator = Arc::new(
            PeerSink::new(
                &crate::config::aggregator_source(&config.datacenter.name, n),
                None,
                engine.descriptions.clone(),
                engine.commands.clone(),
                engine.metrics.clone(),
                clock.clone(),
            )
            .with_max_clock_skew_ms(config.sync.max_clock_skew_ms)
            .announcing(me.clone(), engine.health.clone()),
        );
        let every = Duration::from_millis(config.sync.downward_ms);
        pullers.push(spawn_puller(
            address.to_string(),
            every,
            client.clone(),
            clock.clone(),
            aggregator.clone() as Arc<dyn PullSink>,
        ));
        sources.push(aggregator);
    }
    let retention = Duration::from_secs(config.sync.tombstone_retention_secs);
    pullers.push(tokio::spawn(crate::peer::reclaim::keep_reclaiming(
        peer_copies.clone(),
        engine.descriptions.clone(),
        clock.clone(),
        retention,
    )));
    Pulls {
        peer_copies,
        sources,
        peers,
        pullers,
    }
}

/// What the handlers share: the engine's tables and queue, the pulled copies, the write
/// router.
fn node_state(
    config: &NodeConfig,
    engine: &Engine,
    pulls: &Pulls,
    client: HttpClient,
    access: Access,
    restore: Arc<RestoreProgress>,
    (incarnation, nonce): (u64, u64),
) -> NodeState {
    let settings = &config.settings;
    let world = world_view(config, engine, pulls, client.clone(), restore.clone());
    let client_for_rights = client.clone();
    let router = WriteRouter::new(RouterSetup {
        placement: config.datacenter.placement(settings.virtual_nodes),
        own_slot: config.slot.index,
        addresses: config.datacenter.shards.clone(),
        slot_names: config.slot_names(),
        selection: settings.selection,
        default_shards: settings.default_number_of_shards,
        own_load: engine.load.clone(),
        peers: pulls.peers.clone(),
        client,
    });
    NodeState {
        datacenter: config.slot.datacenter.clone(),
        slot_name: config.slot.to_string(),
        table: engine.table.clone(),
        descriptions: engine.descriptions.clone(),
        peer_copies: pulls.peer_copies.clone(),
        sources: pulls.sources.clone(),
        router,
        commands: engine.commands.clone(),
        settings: settings.clone(),
        sync: config.sync.clone(),
        clock: engine.clock.clone(),
        load: engine.load.clone(),
        metrics: engine.metrics.clone(),
        health: engine.health.clone(),
        access,
        restore,
        incarnation,
        nonce,
        keys: engine.keys.clone(),
        held_logs: engine.held_logs.clone(),
        slot_shown: engine.shown.clone(),
        storage: engine.storage.clone(),
        world: Arc::new(world),
        rights: Arc::new(rights_network(config, client_for_rights)),
    }
}

/// Every datacenter's shard nodes, which a bounded counter's slot asks for rights.
fn rights_network(config: &NodeConfig, client: HttpClient) -> RightsNetwork {
    let datacenters = (config.datacenters.iter())
        .map(|(name, shards)| Datacenter {
            name: name.clone(),
            shards: shards.clone(),
        })
        .collect();
    let home = config.datacenter.placement(config.settings.virtual_nodes);
    RightsNetwork::new(config.slot.clone(), datacenters, home, client)
}

/// The world reads of the node: its datacenter's slots as it holds them and, with other
/// datacenters, their parts as the global tier reports them (asked with `client`).
fn world_view(
    config: &NodeConfig,
    engine: &Engine,
    pulls: &Pulls,
    client: HttpClient,
    restore: Arc<RestoreProgress>,
) -> WorldView {
    let local = LocalSlots {
        table: engine.table.clone(),
        own_slot: config.slot.index as u16,
        copies: pulls.peer_copies.clone(),
        descriptions: engine.descriptions.clone(),
        restore,
    };
    let others = (config.datacenter_count > 1).then(|| {
        let tier = GlobalTier {
            datacenter: config.datacenter.name.clone(),
            replicas: config.global_tier.clone(),
            client,
            metrics: engine.metrics.clone(),
        };
        let refresh_ms = config.settings.world_refresh_ms;
        OtherParts::start(tier, refresh_ms, engine.clock.clone())
    });
    WorldView::new(local, others, engine.clock.clone())
}

/// Starts restoring the slot from `copy_sources` (its keys from those of them that are peers)
/// while the node serves.
fn start_restore(
    config: &NodeConfig,
    state: &NodeState,
    copy_sources: Vec<CopySource>,
    client: HttpClient,
) -> tokio::task::JoinHandle<()> {
    let key_sources = copy_sources
        .iter()
        .filter(|source| state.sources.iter().any(|peer| peer.name() == source.name))
        .cloned()
        .collect();
    let request = RestoreRequest {
        slot: state.slot_name.clone(),
        sources: copy_sources,
        key_sources,
        // A page of a copy is at most `sync.page_entries` counters, like a sync page.
        client,
        settle: Duration::from_millis(config.settings.restore_timeout_ms),
        max_clock_skew_ms: config.sync.max_clock_skew_ms,
        clock: state.clock.clone(),
    };
    tokio::spawn(restore_then_take_writes(
        Arc::new(request),
        state.restore.clone(),
        state.commands.clone(),
        state.storage.clone(),
        config.data_dir.clone(),
        config.settings.idempotency_retention_secs * 1000,
        config.settings.durability == Durability::Replicated,
    ))
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
