//! Installing a durable group: its log record appended (and fsynced, unless in async durability), then
//! its changes put in the idempotency keys, the slot table and the descriptions that reads are
//! served from; and the log's flushes and checkpoints that follow.

use std::time::Instant;

use geocount_model::held_bytes::description_bytes;
use geocount_model::{CounterId, Durability, RollupChange, WindowChange};

use super::CommitLoop;
use crate::engine::budget::row_bytes;
use crate::engine::idempotency::KeyHash;
use crate::engine::wal::LogRecord;
use crate::error::StorageError;

/// How many times `checkpoint_log_bytes` the whole log, idempotency keys included, may reach
/// before a checkpoint. Keys do not count toward `checkpoint_log_bytes` itself: a restart
/// loads them as fast from the log as from the store, so they do not lengthen its replay the
/// way counters' changes do, and checkpointing every counter row again as often as keys fill
/// the log would cost a keyed write several times what its key does.
const LOG_BYTES_WITH_KEYS: u64 = 4;

/// How often the commit loop looks for tombstones past their retention (a scan of every
/// description), at most: as often as the retention itself when that is shorter.
const TOMBSTONE_PURGE_INTERVAL_MS: u64 = 60_000;

/// What installing a durable group does besides taking in its log record.
pub(super) struct GroupChanges {
    /// How the row of each of the record's counters changes, in the same order.
    pub(super) slots: Vec<SlotChange>,
    /// The hash of each of the record's idempotency keys, in the same order (worked out when
    /// staged).
    pub(super) key_hashes: Vec<KeyHash>,
    /// The record's keys as the log encoded them (set once the record is durable), for the
    /// checkpoint.
    pub(super) encoded_keys: Vec<u8>,
}

/// What installing a durable group does to one counter's row.
pub(super) struct SlotChange {
    pub(super) row: Option<usize>,
    pub(super) committed_bytes: u64,
    pub(super) window: WindowChange,
    pub(super) window_seconds: u32,
    pub(super) history: Vec<RollupChange>,
}

impl CommitLoop {
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

    /// Installs a durable group, with `changes` worked out when it was staged.
    pub(super) fn install(&mut self, changes: GroupChanges, record: LogRecord, now_ms: u64) {
        {
            // The keys first: a peer's pull that reads the table and then the keys finds the
            // keys of every version it read.
            let mut keys = self.idempotency.write().expect("idempotency lock");
            debug_assert_eq!(changes.key_hashes.len(), record.idempotency.len());
            let count = record.idempotency.len();
            let newest = record
                .idempotency
                .iter()
                .map(|(_, r)| r.created_at_ms)
                .max();
            (self.pending.idempotency_added).push_encoded(
                &changes.encoded_keys,
                count,
                newest.unwrap_or_default(),
            );
            for ((key, entry), hash) in record.idempotency.into_iter().zip(changes.key_hashes) {
                keys.insert_hashed(hash, key, entry, now_ms);
            }
            keys.reached(self.last_version);
            (self.shared.metrics.idempotency_keys).set(keys.len() as i64);
        }
        let mut rows = Vec::with_capacity(record.slots.len());
        {
            let mut table = self.shared.table.write().expect("slot table lock");
            for (change, (id, logged)) in changes.slots.into_iter().zip(record.slots) {
                let row = table.apply_change(
                    change.row,
                    id,
                    logged,
                    &change.window,
                    change.window_seconds,
                    &change.history,
                );
                let (id, installed) = table.row(row);
                self.budget
                    .changed(change.committed_bytes, row_bytes(id, installed));
                self.pending.rows.mark(row);
                rows.push(row);
            }
            self.shared.metrics.counters_held.set(table.len() as i64);
        }
        if !record.descriptions.is_empty() {
            let mut descriptions = self.shared.descriptions.write().expect("descriptions lock");
            for description in &record.descriptions {
                let known = descriptions.len();
                descriptions.merge(description.clone());
                if descriptions.len() > known {
                    self.budget
                        .add(description_bytes(description.description.id.as_str()) as u64);
                }
            }
        }
        {
            // A row the group wiped for a delete holds nothing: it goes, when it may.
            let table = self.shared.table.read().expect("slot table lock");
            let descriptions = self.shared.descriptions.read().expect("descriptions lock");
            for row in rows {
                let (id, installed) = table.row(row);
                if super::gone(&descriptions, id, installed, now_ms) {
                    self.doomed
                        .push(CounterId::new(id).expect("a held id is valid"));
                }
            }
        }
        self.shared
            .metrics
            .state_bytes
            .set(self.budget.held() as i64);
        if !self.pending.purged.is_empty() {
            // A counter made again after its tombstone went is written, not deleted.
            let made: std::collections::HashSet<&str> = (record.descriptions.iter())
                .map(|d| d.description.id.as_str())
                .collect();
            self.pending.purged.retain(|id| !made.contains(id.as_str()));
        }
        self.pending.descriptions.extend(record.descriptions);
    }

    /// Drops tombstones older than `sync.tombstone_retention_secs`, at most once a minute, and
    /// only of counters whose row here is gone and of which no peer's copy is held: either
    /// would count again without its tombstone. The next checkpoint deletes them from the
    /// store.
    pub(super) fn purge_tombstones_if_due(&mut self, now_ms: u64) {
        let retention_ms = self.shared.tombstone_retention_ms;
        let interval_ms = TOMBSTONE_PURGE_INTERVAL_MS.min(retention_ms);
        if now_ms.saturating_sub(self.last_purge_ms) < interval_ms {
            return;
        }
        self.last_purge_ms = now_ms;
        let purged = {
            let table = self.shared.table.read().expect("slot table lock");
            let peers = self.shared.peer_copies.read().expect("replicas lock");
            let mut descriptions = self.shared.descriptions.write().expect("descriptions lock");
            let purged = descriptions.purge_tombstones_where(now_ms, retention_ms, |id| {
                !table.contains(id) && peers.index_of(id).is_none()
            });
            for id in &purged {
                self.budget
                    .changed(description_bytes(id.as_str()) as u64, 0);
            }
            purged
        };
        if purged.is_empty() {
            return;
        }
        tracing::info!(
            count = purged.len(),
            "dropped tombstones past their retention"
        );
        let ids: std::collections::HashSet<&str> = purged.iter().map(|id| id.as_str()).collect();
        self.pending
            .descriptions
            .retain(|d| !ids.contains(d.description.id.as_str()));
        self.pending.purged.extend(purged);
    }

    /// Drops the rows of deleted counters, unless a checkpoint is running (it names the rows
    /// it writes by index, and a removal moves a row). A counter written again since keeps its
    /// row. Each row dropped is deleted from the store by the next checkpoint.
    pub(super) fn drop_gone_rows(&mut self, now_ms: u64) {
        if self.doomed.is_empty() || self.shared.checkpointer.is_busy() {
            return;
        }
        let mut table = self.shared.table.write().expect("slot table lock");
        let descriptions = self.shared.descriptions.read().expect("descriptions lock");
        for id in std::mem::take(&mut self.doomed) {
            let Some(record) = table.get_record(id.as_str()) else {
                continue;
            };
            if !super::gone(&descriptions, id.as_str(), record, now_ms) {
                continue;
            }
            let bytes = row_bytes(id.as_str(), record);
            if let Some((_, moved)) = table.remove(id.as_str()) {
                self.budget.changed(bytes, 0);
                if let Some(moved) = moved {
                    self.pending.rows.mark(moved);
                }
                self.pending.removed.push(id);
            }
        }
        self.shared.metrics.counters_held.set(table.len() as i64);
        self.shared
            .metrics
            .state_bytes
            .set(self.budget.held() as i64);
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

    pub(super) fn checkpoint_if_due(&mut self, now_ms: u64) {
        if self.shared.checkpointer.is_busy() || self.pending.is_empty() {
            return;
        }
        let settings = &self.shared.settings;
        let big = log_is_big(
            self.wal.len(),
            self.wal.key_bytes(),
            settings.checkpoint_log_bytes,
        );
        let old = now_ms.saturating_sub(self.last_checkpoint_ms) >= settings.checkpoint_interval_ms;
        if big || old {
            self.start_checkpoint(now_ms);
        }
    }

    pub(super) fn start_checkpoint(&mut self, now_ms: u64) {
        match self.wal.rotate() {
            Ok(closed) => {
                let mut checkpoint = std::mem::take(&mut self.pending);
                checkpoint.through_segment = closed;
                self.shared.checkpointer.submit(checkpoint);
                self.last_checkpoint_ms = now_ms;
                self.last_sync_ms = now_ms;
            }
            Err(error) => {
                tracing::error!(%error, "cannot rotate the log for a checkpoint");
                self.fence_if_fsync_failed(&error);
            }
        }
    }
}

/// Whether a log of `len` bytes, `key_bytes` of them idempotency keys, is due a checkpoint
/// under `checkpoint_log_bytes`.
fn log_is_big(len: u64, key_bytes: u64, checkpoint_log_bytes: u64) -> bool {
    len - key_bytes >= checkpoint_log_bytes || len >= LOG_BYTES_WITH_KEYS * checkpoint_log_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_count_toward_the_log_size_only_past_four_times_it() {
        assert!(!log_is_big(1_000, 0, 2_000));
        assert!(log_is_big(2_000, 0, 2_000), "changes alone");
        assert!(!log_is_big(7_999, 7_000, 2_000), "mostly keys, under 4x");
        assert!(log_is_big(3_000, 900, 2_000), "the changes pass it");
        assert!(log_is_big(8_000, 7_999, 2_000), "keys: 4x");
    }
}
