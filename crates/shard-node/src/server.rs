//! `run`: a whole shard node on a listener, until shutdown. The binary and the tests call it.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use geocount_model::{Clock, Durability, ShardDefaults};
use geocount_net::{Listener, serve};
use tokio::sync::{mpsc, oneshot};

use crate::api::{self, Route};
use crate::checkpoint::Checkpointer;
use crate::commit::{Command, CommitLoop, NodeHealth};
use crate::config::NodeConfig;
use crate::error::StorageError;
use crate::metrics::ShardMetrics;
use crate::recovery;
use crate::slot_table::SharedSlotTable;

/// Commands waiting for the commit loop; beyond this, handlers wait (backpressure).
const COMMAND_QUEUE: usize = 16_384;

/// What the HTTP handlers share.
pub struct NodeState {
    /// The owned slot's name, e.g. `DC_USA_0_VAL_1`.
    pub slot_name: String,
    /// Committed state, for reads.
    pub table: SharedSlotTable,
    /// The way to the commit loop.
    pub commands: mpsc::Sender<Command>,
    /// Shard settings from the topology.
    pub settings: ShardDefaults,
    /// The time seam.
    pub clock: Arc<dyn Clock>,
    /// The node's metrics.
    pub metrics: Arc<ShardMetrics>,
    /// Storage health, for `/healthz`.
    pub health: Arc<NodeHealth>,
    /// The endpoints.
    pub router: matchit::Router<Route>,
}

/// Recovers the node's state from its data directory, serves `listener` until `shutdown`
/// completes, then drains requests, flushes the log and checkpoints.
pub async fn run<L: Listener>(
    config: NodeConfig,
    listener: L,
    clock: Arc<dyn Clock>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StorageError> {
    let slot_name = config.slot.to_string();
    let metrics = Arc::new(ShardMetrics::default());
    let health = Arc::new(NodeHealth::default());
    let settings = config.settings.clone();

    let now_ms = clock.now_unix_ms();
    let data_dir = config.data_dir.clone();
    let recover_settings = settings.clone();
    let recovered = tokio::task::spawn_blocking(move || {
        recovery::recover(&data_dir, &recover_settings, now_ms)
    })
    .await
    .expect("recovery does not panic")?;
    let table: SharedSlotTable = Arc::new(RwLock::new(recovered.table));
    let counters = table.read().expect("slot table lock").len();
    metrics.counters_held.set(counters as i64);
    tracing::info!(slot = %slot_name, counters, data_dir = %config.data_dir.display(), durability = %settings.durability, "recovered");

    let checkpointer =
        Checkpointer::spawn(recovered.store, config.data_dir.clone(), metrics.clone());
    let commit_loop = CommitLoop::new(
        recovered.log,
        table.clone(),
        checkpointer,
        settings.clone(),
        clock.clone(),
        metrics.clone(),
        health.clone(),
    );
    let (commands, receiver) = mpsc::channel(COMMAND_QUEUE);
    let (stopped, commit_loop_done) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("commit".into())
        .spawn(move || {
            commit_loop.run(receiver);
            let _ = stopped.send(());
        })
        .expect("cannot start the commit thread");

    let tick_every = match settings.durability {
        Durability::Async => settings.async_flush_interval_ms.min(1000),
        Durability::Sync => 1000,
    };
    let ticker = tokio::spawn(tick(commands.clone(), Duration::from_millis(tick_every)));

    let state = Arc::new(NodeState {
        slot_name,
        table,
        commands: commands.clone(),
        settings,
        clock,
        metrics,
        health,
        router: api::router(),
    });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, slot = %state.slot_name, "serving");
    }
    serve(
        listener,
        move |request| api::handle(state.clone(), request),
        shutdown,
    )
    .await;

    ticker.abort();
    let _ = commands.send(Command::Shutdown).await;
    let _ = commit_loop_done.await;
    tracing::info!("stopped");
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
