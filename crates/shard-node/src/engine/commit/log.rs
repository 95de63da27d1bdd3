//! Log: a group's one record appended to the log and, in sync and replicated durability,
//! fsynced before anything of it is installed; in async durability fsynced on a timer. A
//! failed fsync fences the node.

use std::sync::Arc;
use std::time::Instant;

use geocount_model::Durability;

use super::CommitLoop;
use super::group::{GroupChanges, Staged};
use super::replies::{Reply, refuse_all};
use crate::engine::wal::LogRecord;
use crate::error::StorageError;
use geocount_model::VersionedDescription;

impl CommitLoop {
    /// Logs the staged group as one record: what the log holds, and what installing it does.
    pub(super) fn log(
        &mut self,
        staged: Staged,
    ) -> Result<(LogRecord, GroupChanges), StorageError> {
        let (record, mut changes) = staged.into_record();
        self.make_durable(&record)?;
        if !record.idempotency.is_empty() {
            changes.encoded_keys = self.wal.last_keys().to_vec();
        }
        Ok((record, changes))
    }

    /// Appends the group's record and, in sync and replicated durability, fsyncs it.
    pub(super) fn make_durable(&mut self, record: &LogRecord) -> Result<(), StorageError> {
        if record.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        self.wal.append(record)?;
        if self.shared.settings.durability != Durability::Async {
            self.wal.sync()?;
            self.last_sync_ms = self.shared.clock.now_unix_ms();
        }
        let metrics = &self.shared.metrics;
        metrics
            .commit_seconds
            .observe(started.elapsed().as_secs_f64());
        metrics.log_bytes.set(self.wal.len() as i64);
        metrics.storage_full.set(0);
        self.shared.health.set(None);
        Ok(())
    }

    /// Refuses a group whose record could not be made durable; what it learned is staged
    /// again with the next group, and a failed fsync fences the node.
    pub(super) fn refuse_unlogged(
        &mut self,
        error: StorageError,
        replies: Vec<Reply>,
        learned: Vec<VersionedDescription>,
    ) {
        tracing::error!(%error, "group commit failed; its writes are refused");
        self.shared.health.set(Some(error.to_string()));
        let full = i64::from(error.is_disk_full());
        self.shared.metrics.storage_full.set(full);
        let error = Arc::new(error);
        refuse_all(replies, &error, &self.shared.metrics);
        self.learned_unlogged = learned;
        self.fence_if_fsync_failed(&error);
    }

    /// After a failed fsync the log's state on disk is unknown (the kernel may have dropped
    /// the pages it could not write and will not report it again), so the node stops taking
    /// writes: every later write is 503 and `/healthz` says why, until a restart replays the
    /// log from what the disk really holds. A full disk on append is not this: the record is
    /// cut off and the next group may succeed.
    pub(super) fn fence_if_fsync_failed(&mut self, error: &StorageError) {
        if self.fenced.is_some() || !self.wal.fsync_failed() {
            return;
        }
        let reason = format!(
            "the log could not be fsynced ({error}); this node takes no more writes until it is restarted"
        );
        tracing::error!("{reason}");
        self.shared.health.set(Some(reason.clone()));
        self.shared.metrics.fsync_failed.set(1);
        self.fenced = Some(reason);
    }

    /// In async durability, fsyncs once the flush interval has passed since the last fsync.
    pub(super) fn flush_if_due(&mut self, now_ms: u64) {
        if !self.wal.has_unsynced()
            || now_ms.saturating_sub(self.last_sync_ms)
                < self.shared.settings.async_flush_interval_ms
        {
            return;
        }
        match self.wal.flush() {
            Ok(()) => self.last_sync_ms = now_ms,
            Err(error) => {
                tracing::error!(%error, "background flush failed");
                self.shared.health.set(Some(error.to_string()));
                self.fence_if_fsync_failed(&error);
            }
        }
    }
}
