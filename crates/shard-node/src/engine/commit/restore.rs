//! Restoring a lost slot through the commit loop: each restored part, and then the slot's
//! idempotency keys, logged and fsynced as a record of its own, then merged into what is held.

use geocount_model::{CounterId, IdempotencyRecord, SlotRecord};

use super::CommitLoop;
use crate::engine::budget::row_bytes;
use crate::engine::idempotency::KeyHash;
use crate::engine::wal::LogRecord;
use crate::error::StorageError;

impl CommitLoop {
    /// Logs and fsyncs a restored part of the slot, then merges it into the table; later
    /// versions go above every restored one.
    pub(super) fn restore(
        &mut self,
        records: Vec<(CounterId, SlotRecord)>,
    ) -> Result<(), StorageError> {
        let record = LogRecord {
            slots: records,
            ..LogRecord::default()
        };
        self.wal.append(&record)?;
        self.wal.sync()?;
        let now_ms = self.shared.clock.now_unix_ms();
        let mut table = self.shared.table.write().expect("slot table lock");
        let descriptions = self.shared.descriptions.read().expect("descriptions lock");
        for (id, slot) in record.slots {
            self.last_version = self.last_version.max(slot.state.version);
            let before = table
                .get_record(id.as_str())
                .map_or(0, |record| row_bytes(id.as_str(), record));
            if let Some(row) = table.merge_owned(id, slot) {
                let (id, merged) = table.row(row);
                self.budget.changed(before, row_bytes(id, merged));
                self.pending.rows.mark(row);
                // A copy older than a delete: nothing of it counts, and the row goes.
                if super::tombstones::gone(&descriptions, id, merged, now_ms) {
                    self.doomed
                        .push(CounterId::new(id).expect("a held id is valid"));
                }
            }
        }
        self.shared.metrics.counters_held.set(table.len() as i64);
        self.shared
            .metrics
            .state_bytes
            .set(self.budget.held() as i64);
        Ok(())
    }

    /// Logs and fsyncs the slot's restored keys, oldest first (the order they expire in), and
    /// holds them.
    pub(super) fn restore_keys(
        &mut self,
        mut keys: Vec<(Box<str>, IdempotencyRecord)>,
        unknown_until_ms: Option<u64>,
    ) -> Result<(), StorageError> {
        keys.sort_by_key(|(_, record)| record.created_at_ms);
        let record = LogRecord {
            idempotency: keys,
            ..LogRecord::default()
        };
        self.wal.append(&record)?;
        self.wal.sync()?;
        let now_ms = self.shared.clock.now_unix_ms();
        let mut held = self.idempotency.write().expect("idempotency lock");
        self.pending.idempotency_added.push(&record.idempotency);
        for (key, entry) in record.idempotency {
            held.insert_hashed(KeyHash::of(&key), key, entry, now_ms);
        }
        held.set_unknown_until(unknown_until_ms);
        // Every key the restore could find is here: while some may be missing
        // (`unknown_until_ms`), the cache's pages say it is not whole, and promise nothing.
        held.reached(self.last_version);
        Ok(())
    }
}
