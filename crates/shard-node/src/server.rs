//! `run`: a whole shard node on a listener, until shutdown. The binary and the tests call it.

use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use geocount_model::wire::Puller;
use geocount_model::{Clock, Durability, Hlc};
use geocount_net::{Connector, HttpClient, Listener, serve_with_limits};
use geocount_sync::{Access, PullSink, SlotCopies, spawn_puller};
use tokio::sync::mpsc;

use crate::api;
use crate::checkpoint::Checkpointer;
use crate::commit::{CommitContext, CommitLoop};
use crate::config::NodeConfig;
use crate::error::StorageError;
use crate::health::NodeHealth;
use crate::key_restore::restore_keys;
use crate::metrics::ShardMetrics;
use crate::recovery;
use crate::replication::PeerSink;
use crate::restore::{CopySource, RestoreProgress, RestoreRequest, restore_slot};
use crate::resume;
use crate::routes;
use crate::routing::{RouterSetup, WriteRouter};
use crate::slot_table::SharedSlotTable;
use crate::state::NodeState;
use crate::storage::Storage;
use crate::write::Command;

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
    let slot_name = config.slot.to_string();
    let metrics = Arc::new(ShardMetrics::default());
    let health = Arc::new(NodeHealth::default());
    let settings = config.settings.clone();
    let access = Access::new(&config.auth, &slot_name, config.certificates);
    let client = access.cluster_client(HttpClient::with_connector(
        Duration::from_millis(config.sync.timeout_ms),
        connector,
    ));
    let restore_client = client.clone();

    let now_ms = clock.now_unix_ms();
    let data_dir = config.data_dir.clone();
    let recover_settings = settings.clone();
    let disk = storage.disk.clone();
    let mode = config.restore;
    let recovered = storage
        .blocking(move || resume::recover(disk, &data_dir, &recover_settings, now_ms, mode))
        .await?;
    let copy_sources = copy_sources(&config);
    let restore = Arc::new(RestoreProgress::new(
        recovered.restore_pending,
        &copy_sources,
    ));
    let incarnation = recovered.incarnation;
    let table: SharedSlotTable = Arc::new(RwLock::new(recovered.table));
    let descriptions = Arc::new(RwLock::new(recovered.descriptions));
    let counters = table.read().expect("slot table lock").len();
    metrics.counters_held.set(counters as i64);
    tracing::info!(slot = %slot_name, counters, data_dir = %config.data_dir.display(), durability = %settings.durability, "recovered");

    let own_slot = config.slot.index;
    let placement = config.datacenter.placement(settings.virtual_nodes);
    let hlc = Arc::new(Hlc::new(&slot_name, clock.clone()));
    // Past every recovered version: a change made after a restart with the clock behind must
    // still win over the ones made before it.
    descriptions
        .read()
        .expect("descriptions lock")
        .seed_clock(&hlc);
    let load = Arc::new(AtomicU64::new(0));
    let (commands, receiver) = mpsc::channel(COMMAND_QUEUE);
    let checkpointer = Checkpointer::spawn(
        &storage,
        recovered.store,
        table.clone(),
        config.data_dir.clone(),
        metrics.clone(),
    );
    let keys = recovered.log.idempotency.clone();
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
        let sink = Arc::new(
            PeerSink::new(
                &slot_names[index],
                Some((replicas.clone(), index as u16)),
                descriptions.clone(),
                commands.clone(),
                metrics.clone(),
                clock.clone(),
            )
            .with_max_clock_skew_ms(config.sync.max_clock_skew_ms)
            .holding_keys(settings.idempotency_retention_secs * 1000),
        );
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
    // The aggregator learns which incarnation pulls for this slot, and tells this node if
    // another process serves the slot at the same time.
    let me = Puller {
        slot: slot_name.clone(),
        incarnation,
    };
    let aggregator = Arc::new(
        PeerSink::new(
            &format!("aggregator {}", config.datacenter.name),
            None,
            descriptions.clone(),
            commands.clone(),
            metrics.clone(),
            clock.clone(),
        )
        .with_max_clock_skew_ms(config.sync.max_clock_skew_ms)
        .announcing(me, health.clone()),
    );
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
        datacenter: config.slot.datacenter.clone(),
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
        routes: routes::router(),
        access,
        restore: restore.clone(),
        incarnation,
        keys,
    });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, slot = %state.slot_name, incarnation = format!("{incarnation:016x}"), "serving");
    }
    let restorer = restore.is_restoring().then(|| {
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
            client: restore_client,
            settle: Duration::from_millis(config.settings.restore_timeout_ms),
            max_clock_skew_ms: config.sync.max_clock_skew_ms,
            clock: state.clock.clone(),
        };
        tokio::spawn(restore_then_take_writes(
            Arc::new(request),
            restore,
            commands.clone(),
            storage.clone(),
            config.data_dir.clone(),
            config.settings.idempotency_retention_secs * 1000,
        ))
    });
    serve_with_limits(
        listener,
        geocount_sync::http::serve_limits(&config.http),
        move |request| api::handle(state.clone(), request),
        shutdown,
    )
    .await;

    if let Some(restorer) = restorer {
        restorer.abort();
    }
    for puller in pullers {
        puller.abort();
    }
    ticker.abort();
    let _ = commands.send(Command::Shutdown).await;
    commit_worker.finished().await;
    tracing::info!("stopped");
    Ok(())
}

/// Every process that holds a copy of the node's slot: its datacenter aggregator, the global
/// aggregator, and its peers.
fn copy_sources(config: &NodeConfig) -> Vec<CopySource> {
    let mut sources = vec![
        CopySource {
            name: format!("aggregator {}", config.datacenter.name),
            address: config.datacenter.aggregator,
        },
        CopySource {
            name: "global".to_owned(),
            address: config.global,
        },
    ];
    let names = config.slot_names();
    sources.extend(
        config
            .datacenter
            .shards
            .iter()
            .zip(names)
            .enumerate()
            .filter(|(n, _)| *n as u32 != config.slot.index)
            .map(|(_, (address, name))| CopySource {
                name,
                address: *address,
            }),
    );
    sources
}

/// How many entries' worth ([`geocount_sync::record_weight`]) of restored records one log
/// record holds: a few MiB, however large the slot.
const RESTORE_RECORD_WEIGHT: usize = 50_000;

/// Restores the slot, makes it durable part by part through the commit loop, then clears the
/// restore marker and lets writes in. A part the log refuses (a full disk) is tried again.
async fn restore_then_take_writes(
    request: Arc<RestoreRequest>,
    progress: Arc<RestoreProgress>,
    commands: mpsc::Sender<Command>,
    storage: Storage,
    data_dir: std::path::PathBuf,
    key_retention_ms: u64,
) {
    let started = tokio::time::Instant::now();
    let slot = request.slot.clone();
    let restored = restore_slot(request.clone(), progress.clone()).await;
    progress.phase("writing");
    let counters = restored.len();
    let mut part = Vec::new();
    let mut weight = 0;
    let mut restored = restored.into_iter().peekable();
    while let Some((id, record)) = restored.next() {
        weight += 1 + geocount_sync::record_weight(&record);
        part.push((id, record));
        if weight >= RESTORE_RECORD_WEIGHT || restored.peek().is_none() {
            let written = part.len() as u64;
            while let Err(error) = write_part(&commands, part.clone()).await {
                tracing::error!(%slot, %error, "cannot log a restored part of the slot; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            progress.written(written);
            part.clear();
            weight = 0;
        }
    }
    progress.phase("gathering idempotency keys");
    let keys = restore_keys(request.clone()).await;
    let held = keys.keys.len();
    let unknown_until_ms = (!keys.whole).then(|| request.clock.now_unix_ms() + key_retention_ms);
    if let Some(until) = unknown_until_ms {
        tracing::warn!(%slot, keys = held, "no peer holds a whole copy of the slot's idempotency keys: writes with keys it does not hold are refused for shard.idempotency_retention_secs");
        loop {
            let (disk, dir) = (storage.disk.clone(), data_dir.clone());
            match storage
                .blocking(move || recovery::record_unknown_keys(&*disk, &dir, until))
                .await
            {
                Ok(()) => break,
                Err(error) => {
                    tracing::error!(%slot, %error, "cannot record that keys may be missing; trying again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
    while let Err(error) = write_keys(&commands, keys.keys.clone(), unknown_until_ms).await {
        tracing::error!(%slot, %error, "cannot log the restored idempotency keys; trying again");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    loop {
        let (disk, dir) = (storage.disk.clone(), data_dir.clone());
        match storage
            .blocking(move || recovery::finish_restore(&*disk, &dir))
            .await
        {
            Ok(()) => break,
            Err(error) => {
                tracing::error!(%slot, %error, "cannot clear the restore marker; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    progress.finish();
    tracing::info!(%slot, counters, keys = held, seconds = started.elapsed().as_secs_f64(), "restored the slot from the datacenter; taking writes");
}

async fn write_part(
    commands: &mpsc::Sender<Command>,
    records: Vec<(geocount_model::CounterId, geocount_model::SlotRecord)>,
) -> Result<(), StorageError> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let stopped = || {
        StorageError::io(
            "restoring the slot",
            std::io::Error::other("the node is stopping"),
        )
    };
    commands
        .send(Command::Restore { records, reply })
        .await
        .map_err(|_| stopped())?;
    answer.await.map_err(|_| stopped())?
}

async fn write_keys(
    commands: &mpsc::Sender<Command>,
    keys: Vec<(Box<str>, geocount_model::IdempotencyRecord)>,
    unknown_until_ms: Option<u64>,
) -> Result<(), StorageError> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let stopped = || {
        StorageError::io(
            "restoring the idempotency keys",
            std::io::Error::other("the node is stopping"),
        )
    };
    commands
        .send(Command::RestoreKeys {
            keys,
            unknown_until_ms,
            reply,
        })
        .await
        .map_err(|_| stopped())?;
    answer.await.map_err(|_| stopped())?
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
