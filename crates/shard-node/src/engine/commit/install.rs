//! Install: a durable group's changes put in the idempotency keys, the slot table and the
//! descriptions that reads are served from, in that order, and marked for the next checkpoint.

use std::collections::HashSet;

use geocount_model::held_bytes::description_bytes;
use geocount_model::{CounterId, IdempotencyRecord, SlotRecord, VersionedDescription};

use super::CommitLoop;
use super::group::{GroupChanges, SlotChange};
use super::tombstones::gone;
use crate::engine::budget::row_bytes;
use crate::engine::idempotency::KeyHash;
use crate::engine::wal::LogRecord;

impl CommitLoop {
    /// Installs a durable group, with `changes` worked out when it was staged.
    pub(super) fn install(&mut self, changes: GroupChanges, record: LogRecord, now_ms: u64) {
        // The keys first: a peer's pull that reads the table and then the keys finds the keys
        // of every version it read.
        let GroupChanges {
            slots,
            key_hashes,
            encoded_keys,
        } = changes;
        self.install_keys(record.idempotency, key_hashes, &encoded_keys, now_ms);
        let rows = self.install_rows(slots, record.slots);
        self.install_descriptions(&record.descriptions);
        self.doom_wiped(&rows, now_ms);
        self.shared
            .metrics
            .state_bytes
            .set(self.budget.held() as i64);
        if !self.pending.purged.is_empty() {
            // A counter made again after its tombstone went is written, not deleted.
            let made: HashSet<&str> = (record.descriptions.iter())
                .map(|d| d.description.id.as_str())
                .collect();
            self.pending.purged.retain(|id| !made.contains(id.as_str()));
        }
        self.pending.descriptions.extend(record.descriptions);
    }

    /// Holds the group's keys (hashed `hashes`, `encoded` as the log wrote them).
    fn install_keys(
        &mut self,
        logged: Vec<(Box<str>, IdempotencyRecord)>,
        hashes: Vec<KeyHash>,
        encoded: &[u8],
        now_ms: u64,
    ) {
        let mut keys = self.idempotency.write().expect("idempotency lock");
        debug_assert_eq!(hashes.len(), logged.len());
        let count = logged.len();
        let newest = logged.iter().map(|(_, r)| r.created_at_ms).max();
        (self.pending.idempotency_added).push_encoded(encoded, count, newest.unwrap_or_default());
        for ((key, entry), hash) in logged.into_iter().zip(hashes) {
            keys.insert_hashed(hash, key, entry, now_ms);
        }
        keys.reached(self.last_version);
        (self.shared.metrics.idempotency_keys).set(keys.len() as i64);
    }

    /// Changes each logged counter's row in place; returns the rows changed.
    fn install_rows(
        &mut self,
        changes: Vec<SlotChange>,
        logged: Vec<(CounterId, SlotRecord)>,
    ) -> Vec<usize> {
        let mut rows = Vec::with_capacity(logged.len());
        let mut table = self.shared.table.write().expect("slot table lock");
        for (change, (id, logged)) in changes.into_iter().zip(logged) {
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
        rows
    }

    /// Merges the group's descriptions into the known ones.
    fn install_descriptions(&mut self, logged: &[VersionedDescription]) {
        if logged.is_empty() {
            return;
        }
        let mut descriptions = self.shared.descriptions.write().expect("descriptions lock");
        for description in logged {
            let known = descriptions.len();
            descriptions.merge(description.clone());
            if descriptions.len() > known {
                self.budget
                    .add(description_bytes(description.description.id.as_str()) as u64);
            }
        }
    }

    /// A row the group wiped for a delete holds nothing: it goes, when it may.
    fn doom_wiped(&mut self, rows: &[usize], now_ms: u64) {
        let table = self.shared.table.read().expect("slot table lock");
        let descriptions = self.shared.descriptions.read().expect("descriptions lock");
        for &row in rows {
            let (id, installed) = table.row(row);
            if gone(&descriptions, id, installed, now_ms) {
                self.doomed
                    .push(CounterId::new(id).expect("a held id is valid"));
            }
        }
    }
}
