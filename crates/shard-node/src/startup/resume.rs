//! Startup, second half: the node's in-memory state built from what [`recovery`] read, the
//! store's records first, then the log replayed over them.

use std::path::Path;
use std::sync::{Arc, RwLock};

use geocount_model::ShardDefaults;
use geocount_sync::DescriptionTable;

use crate::config::RestoreMode;
use crate::engine::commit::LogState;
use crate::engine::idempotency::{IdempotencyCache, KeyHash};
use crate::engine::slot_table::SlotTable;
use crate::engine::store::{Checkpoint, Store};
use crate::error::StorageError;
use crate::startup::recovery::{self, Recovered};
use crate::storage::Disk;

/// The state a node starts serving from.
#[derive(Debug)]
pub struct Resumed {
    /// Every acknowledged slot state: the HTTP handlers read it.
    pub table: SlotTable,
    /// The known counter descriptions.
    pub descriptions: DescriptionTable,
    /// The open checkpoint store: the checkpointer writes it.
    pub store: Store,
    /// Whether the slot must be restored from the datacenter before the node takes writes.
    pub restore_pending: bool,
    /// This data directory's incarnation ([`Recovered::incarnation`]).
    pub incarnation: u64,
    /// The commit loop's own state.
    pub log: LogState,
}

/// Recovers the data directory (see [`recovery::recover`]) and builds the node's state from it.
pub fn recover(
    disk: Arc<dyn Disk>,
    data_dir: &Path,
    settings: &ShardDefaults,
    now_ms: u64,
    mode: RestoreMode,
) -> Result<Resumed, StorageError> {
    let retention_ms = settings.idempotency_retention_secs * 1000;
    let recovered = recovery::recover(disk, data_dir, now_ms, retention_ms, mode)?;
    resume(recovered, settings, now_ms)
}

/// Builds the tables from the store's records, then replays the log over them; what the log
/// holds beyond the store is what the next checkpoint must write.
pub fn resume(
    recovered: Recovered,
    settings: &ShardDefaults,
    now_ms: u64,
) -> Result<Resumed, StorageError> {
    let Recovered {
        store,
        stored,
        restore_pending,
        incarnation,
        keys_unknown_until_ms,
        log,
    } = recovered;
    let retention_ms = settings.idempotency_retention_secs * 1000;
    let mut table = SlotTable::default();
    let mut descriptions = DescriptionTable::default();
    let mut idempotency = IdempotencyCache::new(retention_ms);
    let mut pending = Checkpoint::default();
    for (id, record) in stored.slots {
        table.merge_owned(id, record);
    }
    for description in stored.descriptions {
        descriptions.merge(description);
    }
    // The store lists keys oldest first, the order the cache expires them in; those already
    // expired (a block's older keys linger until its newest expires) are left out, and deleted
    // by a later checkpoint.
    for (key, record) in stored.idempotency {
        if record.created_at_ms + retention_ms <= now_ms {
            pending.idempotency_expired_before_ms = idempotency.expired_before(now_ms);
        } else {
            idempotency.insert(&key, record, now_ms);
        }
    }
    idempotency.set_unknown_until(keys_unknown_until_ms);

    let wal = log.replay(|record| {
        for (id, slot) in record.slots {
            if let Some(row) = table.apply_logged(id, slot) {
                pending.rows.mark(row);
            }
        }
        for description in record.descriptions {
            descriptions.merge(description.clone());
            pending.descriptions.push(description);
        }
        pending.idempotency_added.push(&record.idempotency);
        for (key, entry) in record.idempotency {
            idempotency.insert_hashed(KeyHash::of(&key), key, entry, now_ms);
        }
    })?;
    let last_version = table.max_version();
    // Every key of the slot's writes is in the store or the log (unless the keys are unknown,
    // when the cache's pages promise nothing).
    idempotency.reached(last_version);
    Ok(Resumed {
        table,
        descriptions,
        store,
        restore_pending,
        incarnation,
        log: LogState {
            wal,
            idempotency: Arc::new(RwLock::new(idempotency)),
            pending,
            last_version,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::store::tests::record;
    use crate::engine::store::{RowSource, STORE_FILE};
    use crate::storage::OsDisk;
    use geocount_model::SlotRecord;

    struct NoRows;

    impl RowSource for NoRows {
        fn visit_rows(&self, _: &[u32], _: &mut dyn FnMut(&str, &SlotRecord)) {}
    }

    #[test]
    fn keys_stored_past_retention_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let settings = ShardDefaults::default();
        let retention_ms = settings.idempotency_retention_secs * 1000;
        let now_ms = 10 * retention_ms;
        let disk: Arc<dyn Disk> = Arc::new(OsDisk);
        let first = recover(
            disk.clone(),
            dir.path(),
            &settings,
            now_ms,
            RestoreMode::Empty,
        );
        first.unwrap().store.close().unwrap();

        // One block: its older key is past retention, its newest is not.
        let store = Store::open(&OsDisk, &dir.path().join(STORE_FILE)).unwrap();
        let mut checkpoint = Checkpoint::default();
        checkpoint.idempotency_added.push(&[
            ("expired".into(), record(now_ms - retention_ms)),
            ("kept".into(), record(now_ms - retention_ms + 1)),
        ]);
        store.write(&checkpoint, &NoRows).unwrap();
        store.close().unwrap();

        let resumed = recover(disk, dir.path(), &settings, now_ms, RestoreMode::Required).unwrap();
        {
            let keys = resumed.log.idempotency.read().unwrap();
            assert_eq!(keys.len(), 1);
            assert!(keys.get("expired").is_none());
            assert!(keys.get("kept").is_some());
        }
        assert_eq!(
            resumed.log.pending.idempotency_expired_before_ms,
            Some(now_ms - retention_ms + 1),
            "the next checkpoint deletes what has expired"
        );
        resumed.store.close().unwrap();
    }
}
