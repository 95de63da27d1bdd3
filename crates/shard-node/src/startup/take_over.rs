//! Taking over a restored slot: the restored records logged part by part through the commit
//! loop, the idempotency keys after them (or the time until which unknown keys are refused), the
//! restore marker cleared, and only then writes let in.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::engine::write::Command;
use crate::error::StorageError;
use crate::startup::held_restore::{HeldRestored, restore_from_held};
use crate::startup::key_restore::restore_keys;
use crate::startup::recovery;
use crate::startup::restore::{RestoreProgress, RestoreRequest, restore_slot};
use crate::storage::Storage;

/// How many entries' worth ([`geocount_sync::record_weight`]) of restored records one log
/// record holds: a few MiB, however large the slot.
const RESTORE_RECORD_WEIGHT: usize = 50_000;

/// Restores the slot, makes it durable part by part through the commit loop, then clears the
/// restore marker and lets writes in. A part the log refuses (a full disk) is tried again.
/// With `replicated`, every peer's log of the slot's replicated writes is read too.
pub(crate) async fn restore_then_take_writes(
    request: Arc<RestoreRequest>,
    progress: Arc<RestoreProgress>,
    commands: mpsc::Sender<Command>,
    storage: Storage,
    data_dir: PathBuf,
    key_retention_ms: u64,
    replicated: bool,
) {
    let started = tokio::time::Instant::now();
    let slot = request.slot.clone();
    let mut restored = restore_slot(request.clone(), progress.clone()).await;
    let mut held = HeldRestored::default();
    if replicated {
        progress.phase("reading the peers' replicated logs");
        held = restore_from_held(request.clone()).await;
        for (id, record) in held.records.drain() {
            restored.entry(id).or_default().merge(&record);
        }
        let descriptions = std::mem::take(&mut held.descriptions);
        if !descriptions.is_empty()
            && commands
                .send(Command::Describe(descriptions))
                .await
                .is_err()
        {
            return;
        }
    }
    progress.phase("writing");
    let counters = restored.len();
    let newest = restored
        .values()
        .map(|r| r.state.version)
        .max()
        .unwrap_or(0);
    let mut part = Vec::new();
    let mut weight = 0;
    let mut restored = restored.into_iter().peekable();
    while let Some((id, record)) = restored.next() {
        weight += 1 + geocount_sync::record_weight(&record);
        part.push((id, record));
        if weight >= RESTORE_RECORD_WEIGHT || restored.peek().is_none() {
            let written = part.len() as u64;
            until_done(&slot, "log a restored part of the slot", || {
                let records = part.clone();
                ask_commit_loop(&commands, |reply| Command::Restore { records, reply })
            })
            .await;
            progress.written(written);
            part.clear();
            weight = 0;
        }
    }
    progress.phase("gathering idempotency keys");
    let now_ms = request.clock.now_unix_ms();
    let needed =
        held.keys_needed_through(newest, now_ms, request.max_clock_skew_ms, key_retention_ms);
    // The peers' key copies are taken even when the logs hold every key the restore needs:
    // until one copy reaches a version, or every peer handed its copy over.
    let mut keys = restore_keys(request.clone(), needed.max(1)).await;
    held.add_keys_to(&mut keys);
    let held = keys.keys.len();
    let unknown_until_ms =
        (!keys.reach_past(needed)).then(|| request.clock.now_unix_ms() + key_retention_ms);
    if let Some(until) = unknown_until_ms {
        tracing::warn!(%slot, keys = held, keys_reach = keys.reach, needed, newest_restored = newest, "the peers' copies of the slot's idempotency keys do not reach as far as the restore needs: writes with keys it does not hold are refused for shard.idempotency_retention_secs");
        until_done(&slot, "record that keys may be missing", || {
            let (disk, dir) = (storage.disk.clone(), data_dir.clone());
            storage.blocking(move || recovery::record_unknown_keys(&*disk, &dir, until))
        })
        .await;
    }
    until_done(&slot, "log the restored idempotency keys", || {
        let keys = keys.keys.clone();
        ask_commit_loop(&commands, |reply| Command::RestoreKeys {
            keys,
            unknown_until_ms,
            reply,
        })
    })
    .await;
    until_done(&slot, "clear the restore marker", || {
        let (disk, dir) = (storage.disk.clone(), data_dir.clone());
        storage.blocking(move || recovery::finish_restore(&*disk, &dir))
    })
    .await;
    progress.finish();
    tracing::info!(%slot, counters, keys = held, seconds = started.elapsed().as_secs_f64(), "restored the slot from the datacenter; taking writes");
}

/// Runs `attempt` until it succeeds, a second apart: a restore step the disk refuses (a full
/// disk) is tried again rather than let the node take writes on a partial slot.
async fn until_done<F, Fut>(slot: &str, what: &str, mut attempt: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), StorageError>>,
{
    while let Err(error) = attempt().await {
        tracing::error!(%slot, %error, "cannot {what}; trying again");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Sends the commit loop the command `make` builds around its reply, and waits for the reply.
async fn ask_commit_loop(
    commands: &mpsc::Sender<Command>,
    make: impl FnOnce(tokio::sync::oneshot::Sender<Result<(), StorageError>>) -> Command,
) -> Result<(), StorageError> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    let stopped = || {
        StorageError::io(
            "restoring the slot",
            std::io::Error::other("the node is stopping"),
        )
    };
    commands.send(make(reply)).await.map_err(|_| stopped())?;
    answer.await.map_err(|_| stopped())?
}
