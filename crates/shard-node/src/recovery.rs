//! Startup: rebuild the committed state from the checkpoint store plus the log written since.

use std::path::Path;

use geocount_model::ShardDefaults;

use crate::error::StorageError;
use crate::idempotency::IdempotencyCache;
use crate::slot_table::SlotTable;
use crate::store::{Checkpoint, Store};
use crate::wal::{self, Wal};

/// The state a node starts serving from.
#[derive(Debug)]
pub struct Recovered {
    /// Every acknowledged slot state and description: the HTTP handlers read it.
    pub table: SlotTable,
    /// The open checkpoint store: the checkpointer writes it.
    pub store: Store,
    /// The commit loop's own state.
    pub log: LogState,
}

/// What the commit loop resumes from.
#[derive(Debug)]
pub struct LogState {
    /// A fresh log segment after the replayed ones.
    pub wal: Wal,
    /// Idempotency keys still within retention.
    pub idempotency: IdempotencyCache,
    /// What the log holds beyond the store: the next checkpoint must write it.
    pub pending: Checkpoint,
    /// The version the next change gets.
    pub next_version: u64,
}

/// Opens the store in `data_dir` (creating the directory), loads it, and replays the log.
pub fn recover(
    data_dir: &Path,
    settings: &ShardDefaults,
    now_ms: u64,
) -> Result<Recovered, StorageError> {
    std::fs::create_dir_all(data_dir)
        .map_err(|e| StorageError::io(format!("creating {}", data_dir.display()), e))?;
    let store = Store::open(&data_dir.join("store.redb"))?;
    let stored = store.load()?;

    let mut table = SlotTable::default();
    let mut idempotency = IdempotencyCache::new(settings.idempotency_retention_secs * 1000);
    let mut pending = Checkpoint::default();
    for (id, state) in stored.slots {
        table.merge(&id, state);
    }
    for description in stored.descriptions {
        table.describe(description);
    }
    // The cache expires keys oldest first, so it must be filled in age order.
    let mut stored_keys = stored.idempotency;
    stored_keys.sort_by_key(|(_, record)| record.created_at_ms);
    for (key, record) in stored_keys {
        if record.created_at_ms + settings.idempotency_retention_secs * 1000 <= now_ms {
            pending.idempotency_expired.push(key);
        } else {
            idempotency.insert(key, record, now_ms);
        }
    }

    let newest = wal::replay(data_dir, |record| {
        for (id, state) in record.slots {
            table.merge(&id, state);
            pending.record_slot(&id, state);
        }
        for description in record.descriptions {
            table.describe(description.clone());
            pending.descriptions.push(description);
        }
        for (key, entry) in record.idempotency {
            idempotency.insert(key.clone(), entry.clone(), now_ms);
            pending.idempotency_added.push((key, entry));
        }
    })?;
    let wal = Wal::create(data_dir, newest + 1)?;
    let next_version = table.max_version() + 1;
    Ok(Recovered {
        table,
        store,
        log: LogState {
            wal,
            idempotency,
            pending,
            next_version,
        },
    })
}
