//! What deleted counters leave behind: their rows, dropped once no checkpoint runs, and
//! their tombstones, dropped past their retention once nothing here could count again
//! without them.

use geocount_model::SlotRecord;
use geocount_model::held_bytes::description_bytes;
use geocount_sync::DescriptionTable;

use super::CommitLoop;
use crate::engine::budget::row_bytes;

/// How often the commit loop looks for tombstones past their retention (a scan of every
/// description), at most: as often as the retention itself when that is shorter.
const TOMBSTONE_PURGE_INTERVAL_MS: u64 = 60_000;

impl CommitLoop {
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
            let peers = self.shared.peer_copies.read().expect("peer copies lock");
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
            if !gone(&descriptions, id.as_str(), record, now_ms) {
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
}

/// Whether counter `id`'s row here belongs to a deleted or expired counter, and to a generation
/// the delete wiped: it holds nothing any read counts, and goes.
pub(super) fn gone(
    descriptions: &DescriptionTable,
    id: &str,
    record: &SlotRecord,
    now_ms: u64,
) -> bool {
    descriptions.get(id).is_some_and(|described| {
        !described.is_live(now_ms) && record.wiped_by(described.generation_at(now_ms))
    })
}
