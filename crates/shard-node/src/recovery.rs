//! Startup: rebuild the committed state from the checkpoint store plus the log written since.

use std::path::Path;
use std::sync::Arc;

use geocount_model::ShardDefaults;

use crate::error::StorageError;
use crate::idempotency::IdempotencyCache;
use crate::slot_table::SlotTable;
use crate::storage::Disk;
use crate::store::{Checkpoint, Store};
use crate::wal::{self, Wal};
use geocount_sync::DescriptionTable;

/// The state a node starts serving from.
#[derive(Debug)]
pub struct Recovered {
    /// Every acknowledged slot state and description: the HTTP handlers read it.
    pub table: SlotTable,
    /// The known counter descriptions.
    pub descriptions: DescriptionTable,
    /// The open checkpoint store: the checkpointer writes it.
    pub store: Store,
    /// Whether the data directory held no store: a new node, or one whose disk was lost.
    pub fresh: bool,
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
    /// The highest version of the slot so far.
    pub last_version: u64,
}

/// Opens the store in `data_dir` on `disk` (creating the directory), loads it, and replays the
/// log.
pub fn recover(
    disk: Arc<dyn Disk>,
    data_dir: &Path,
    settings: &ShardDefaults,
    now_ms: u64,
) -> Result<Recovered, StorageError> {
    create_dir_durably(&*disk, data_dir)
        .map_err(|e| StorageError::io(format!("creating {}", data_dir.display()), e))?;
    let store_path = data_dir.join(crate::store::STORE_FILE);
    let fresh = !disk
        .exists(&store_path)
        .map_err(|e| StorageError::io(format!("reading {}", store_path.display()), e))?;
    let store = Store::open(&*disk, &store_path)?;
    let stored = store.load()?;

    let mut table = SlotTable::default();
    let mut descriptions = DescriptionTable::default();
    let mut idempotency = IdempotencyCache::new(settings.idempotency_retention_secs * 1000);
    let mut pending = Checkpoint::default();
    for (id, record) in stored.slots {
        table.merge_owned(id, record);
    }
    for description in stored.descriptions {
        descriptions.merge(description);
    }
    // The store lists keys oldest first, the order the cache expires them in; those already
    // expired are left out, and deleted by the next checkpoint.
    for (key, record) in stored.idempotency {
        if record.created_at_ms + settings.idempotency_retention_secs * 1000 <= now_ms {
            pending.idempotency_expired_before_ms = idempotency.expired_before(now_ms);
        } else {
            idempotency.insert(&key, record, now_ms);
        }
    }

    let newest = wal::replay(&*disk, data_dir, |record| {
        for (id, slot) in record.slots {
            if let Some(row) = table.apply_logged(id, slot) {
                pending.rows.mark(row);
            }
        }
        for description in record.descriptions {
            descriptions.merge(description.clone());
            pending.descriptions.push(description);
        }
        for (key, entry) in record.idempotency {
            idempotency.insert(&key, entry.clone(), now_ms);
            pending.idempotency_added.push((key, entry));
        }
    })?;
    let wal = Wal::create(disk, data_dir, newest + 1)?;
    let last_version = table.max_version();
    let fresh = fresh && table.is_empty();
    Ok(Recovered {
        table,
        descriptions,
        store,
        fresh,
        log: LogState {
            wal,
            idempotency,
            pending,
            last_version,
        },
    })
}

/// Creates `dir` and its missing parents, and syncs the entry of each new one in its parent:
/// otherwise a machine crash can take the whole data directory with it, however well its
/// files were synced.
fn create_dir_durably(disk: &dyn Disk, dir: &Path) -> std::io::Result<()> {
    let mut created = Vec::new();
    for ancestor in dir.ancestors() {
        if ancestor.as_os_str().is_empty() || disk.exists(ancestor)? {
            break;
        }
        created.push(ancestor);
    }
    disk.create_dir_all(dir)?;
    for new_dir in created {
        match new_dir.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => disk.sync_dir(parent)?,
            _ => disk.sync_dir(Path::new("."))?,
        }
    }
    Ok(())
}
