//! The checkpointer: a thread that folds closed log segments into the store, then deletes them.
//!
//! It runs beside the commit loop so that a large checkpoint never stalls writes. A checkpoint
//! that fails is kept and written with the next one; its segments are deleted only once the store
//! holds their records.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use crate::metrics::ShardMetrics;
use crate::store::{Checkpoint, Store};
use crate::wal;

/// The handle the commit loop holds.
#[derive(Debug)]
pub struct Checkpointer {
    sender: mpsc::Sender<Checkpoint>,
    busy: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Checkpointer {
    /// Starts the checkpointer thread for the store and log in `data_dir`.
    pub fn spawn(store: Store, data_dir: PathBuf, metrics: Arc<ShardMetrics>) -> Self {
        let (sender, receiver) = mpsc::channel::<Checkpoint>();
        let busy = Arc::new(AtomicBool::new(false));
        let thread_busy = busy.clone();
        let thread = std::thread::Builder::new()
            .name("checkpoint".into())
            .spawn(move || {
                let mut carried: Option<Checkpoint> = None;
                for next in receiver {
                    let checkpoint = match carried.take() {
                        Some(mut earlier) => {
                            earlier.absorb(next);
                            earlier
                        }
                        None => next,
                    };
                    match store.write(&checkpoint) {
                        Ok(()) => {
                            metrics.checkpoints.inc();
                            if let Err(error) = wal::delete_through(&data_dir, checkpoint.through_segment) {
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
                    thread_busy.store(false, Ordering::Release);
                }
            })
            .expect("cannot start the checkpoint thread");
        Self {
            sender,
            busy,
            thread,
        }
    }

    /// Whether a checkpoint is being written.
    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

    /// Hands a checkpoint to the thread.
    pub fn submit(&self, checkpoint: Checkpoint) {
        self.busy.store(true, Ordering::Release);
        if self.sender.send(checkpoint).is_err() {
            tracing::error!("the checkpoint thread has stopped; the log is kept");
        }
    }

    /// Waits for every submitted checkpoint to be written, then stops the thread.
    pub fn finish(self) {
        drop(self.sender);
        if self.thread.join().is_err() {
            tracing::error!("the checkpoint thread panicked");
        }
    }
}
