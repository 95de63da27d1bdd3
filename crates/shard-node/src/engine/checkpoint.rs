//! The checkpointer: a worker that folds closed log segments into the store, then deletes them.
//!
//! It runs beside the commit loop (its own thread in production, see
//! [`Storage::spawn`](crate::storage::Storage::spawn)) so that a large checkpoint never stalls
//! writes. A checkpoint that fails is kept and written with the next one; its segments are
//! deleted only once the store holds their records. After a failed write the store is closed
//! and opened again before the next checkpoint: redb refuses every write after an I/O error
//! (a full disk) until it is reopened, and checkpoints must resume by themselves once space
//! returns.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;

use crate::engine::store::{Checkpoint, RowSource, STORE_FILE, Store};
use crate::engine::wal;
use crate::metrics::ShardMetrics;
use crate::storage::{Storage, Worker};

/// The handle the commit loop holds.
#[derive(Debug)]
pub struct Checkpointer {
    sender: mpsc::UnboundedSender<Checkpoint>,
    busy: Arc<AtomicBool>,
    worker: Worker,
}

impl Checkpointer {
    /// Starts the checkpointer for the store and log in `data_dir`.
    /// Checkpoints read their rows' records from `table` (the slot table).
    pub fn spawn(
        storage: &Storage,
        store: Store,
        table: Arc<dyn RowSource>,
        data_dir: PathBuf,
        metrics: Arc<ShardMetrics>,
    ) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel::<Checkpoint>();
        let busy = Arc::new(AtomicBool::new(false));
        let work = run(
            storage.clone(),
            store,
            table,
            data_dir,
            metrics,
            receiver,
            busy.clone(),
        );
        Self {
            sender,
            busy,
            worker: storage.spawn("checkpoint", work),
        }
    }

    /// Whether a checkpoint is being written.
    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

    /// Hands a checkpoint to the worker.
    pub fn submit(&self, checkpoint: Checkpoint) {
        self.busy.store(true, Ordering::Release);
        if self.sender.send(checkpoint).is_err() {
            tracing::error!("the checkpointer has stopped; the log is kept");
        }
    }

    /// Waits for every submitted checkpoint to be written, then stops the worker.
    pub async fn finish(self) {
        drop(self.sender);
        self.worker.finished().await;
    }
}

async fn run(
    storage: Storage,
    store: Store,
    table: Arc<dyn RowSource>,
    data_dir: PathBuf,
    metrics: Arc<ShardMetrics>,
    mut receiver: mpsc::UnboundedReceiver<Checkpoint>,
    busy: Arc<AtomicBool>,
) {
    let mut carried: Option<Checkpoint> = None;
    let mut store = Some(store);
    while let Some(next) = receiver.recv().await {
        let checkpoint = match carried.take() {
            Some(mut earlier) => {
                earlier.absorb(next);
                earlier
            }
            None => next,
        };
        let written = match store.take() {
            Some(open) => Ok(open),
            None => Store::open(&*storage.disk, &data_dir.join(STORE_FILE)),
        }
        .and_then(|open| {
            let written = open.write(&checkpoint, &*table);
            match written {
                Ok(()) => store = Some(open),
                // Closed here, opened again before the next checkpoint.
                Err(_) => {
                    if let Err(error) = open.close() {
                        tracing::warn!(%error, "closing the store after a failed checkpoint");
                    }
                }
            }
            written
        });
        match written {
            Ok(()) => {
                metrics.checkpoints.inc();
                let through = checkpoint.through_segment;
                if let Err(error) = wal::delete_through(&*storage.disk, &data_dir, through) {
                    // Harmless: the segments replay idempotently and go with the next checkpoint.
                    tracing::warn!(%error, "cannot delete checkpointed log segments");
                }
            }
            Err(error) => {
                metrics.checkpoint_failures.inc();
                tracing::error!(%error, "checkpoint failed; the log is kept and it will be retried");
                carried = Some(checkpoint);
            }
        }
        busy.store(false, Ordering::Release);
    }
    if let Some(Err(error)) = store.map(Store::close) {
        tracing::error!(%error, "cannot close the store cleanly");
    }
}
