//! Startup: rebuild the committed state from the checkpoint store plus the log written since.
//!
//! A data directory holding no slot (no store, no log) is a lost disk unless the operator
//! says it is a new slot ([`RestoreMode::Empty`]). Before anything else is written there, the
//! node records durably that its slot must be restored ([`RESTORE_MARKER`]); the marker goes
//! only once the restored state is durable ([`finish_restore`]), so a node that crashes in the
//! middle of its restore resumes it rather than come back empty.

use std::path::Path;
use std::sync::{Arc, RwLock};

use geocount_model::ShardDefaults;

use crate::config::RestoreMode;
use crate::error::StorageError;
use crate::idempotency::{IdempotencyCache, SharedKeys};
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
    /// Whether the slot must be restored from the datacenter before the node takes writes.
    pub restore_pending: bool,
    /// This data directory's incarnation: drawn when it was first used, carried in every sync
    /// page, so that a restored node or a second node for the same slot tells itself apart.
    pub incarnation: u64,
    /// The commit loop's own state.
    pub log: LogState,
}

/// What the commit loop resumes from.
#[derive(Debug)]
pub struct LogState {
    /// A fresh log segment after the replayed ones.
    pub wal: Wal,
    /// Idempotency keys still within retention.
    pub idempotency: SharedKeys,
    /// What the log holds beyond the store: the next checkpoint must write it.
    pub pending: Checkpoint,
    /// The highest version of the slot so far.
    pub last_version: u64,
}

/// The file whose presence says the slot's restore has not finished.
pub const RESTORE_MARKER: &str = "restore.pending";

/// The file holding until when (unix ms, in decimal) the slot may miss idempotency keys: it
/// was restored without a whole copy of them.
pub const KEYS_UNKNOWN_FILE: &str = "keys.unknown-until";

/// The file holding the data directory's incarnation.
pub const INCARNATION_FILE: &str = "incarnation";

/// Opens the store in `data_dir` on `disk` (creating the directory), loads it, and replays the
/// log. An empty directory is marked for a restore first unless `mode` says to start empty.
pub fn recover(
    disk: Arc<dyn Disk>,
    data_dir: &Path,
    settings: &ShardDefaults,
    now_ms: u64,
    mode: RestoreMode,
) -> Result<Recovered, StorageError> {
    create_dir_durably(&*disk, data_dir)
        .map_err(|e| StorageError::io(format!("creating {}", data_dir.display()), e))?;
    let store_path = data_dir.join(crate::store::STORE_FILE);
    let holds_slot = exists(&*disk, &store_path)? || !wal::segments(&*disk, data_dir)?.is_empty();
    let marker = data_dir.join(RESTORE_MARKER);
    let mut restore_pending = exists(&*disk, &marker)?;
    match mode {
        RestoreMode::Required if !holds_slot && !restore_pending => {
            write_durably(
                &*disk,
                data_dir,
                &marker,
                b"the slot must be restored from its datacenter\n",
            )?;
            restore_pending = true;
        }
        RestoreMode::Empty if restore_pending => {
            tracing::warn!(dir = %data_dir.display(), "--restore empty: giving up the unfinished restore; the slot keeps only what was restored so far");
            finish_restore(&*disk, data_dir)?;
            restore_pending = false;
        }
        _ => {}
    }
    let incarnation = incarnation(&*disk, data_dir, now_ms)?;
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

    // A slot still to restore holds none of its keys yet.
    let unknown_until = if restore_pending {
        Some(u64::MAX)
    } else {
        keys_unknown_until(&*disk, data_dir)?
    };
    idempotency.set_unknown_until(unknown_until);

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
    Ok(Recovered {
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

/// Records durably that keys recorded before `until_ms` may be missing, for a slot restored
/// without a whole copy of them.
pub fn record_unknown_keys(
    disk: &dyn Disk,
    data_dir: &Path,
    until_ms: u64,
) -> Result<(), StorageError> {
    let path = data_dir.join(KEYS_UNKNOWN_FILE);
    write_durably(disk, data_dir, &path, format!("{until_ms}\n").as_bytes())
}

/// Until when the slot may miss keys, if a restore recorded it.
fn keys_unknown_until(disk: &dyn Disk, data_dir: &Path) -> Result<Option<u64>, StorageError> {
    let path = data_dir.join(KEYS_UNKNOWN_FILE);
    if !exists(disk, &path)? {
        return Ok(None);
    }
    let text = disk
        .read(&path)
        .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))?;
    let until = std::str::from_utf8(&text)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .ok_or_else(|| {
            StorageError::io(
                format!("reading {}", path.display()),
                std::io::Error::other("not a time in unix milliseconds"),
            )
        })?;
    Ok(Some(until))
}

/// Removes the restore marker durably: the restored state is durable, and a restart must not
/// restore again.
pub fn finish_restore(disk: &dyn Disk, data_dir: &Path) -> Result<(), StorageError> {
    let marker = data_dir.join(RESTORE_MARKER);
    disk.remove_file(&marker)
        .and_then(|()| disk.sync_dir(data_dir))
        .map_err(|e| StorageError::io(format!("removing {}", marker.display()), e))
}

fn exists(disk: &dyn Disk, path: &Path) -> Result<bool, StorageError> {
    disk.exists(path)
        .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))
}

/// Writes `bytes` to a new file `path` in `dir`, and syncs it and its directory entry.
fn write_durably(
    disk: &dyn Disk,
    dir: &Path,
    path: &Path,
    bytes: &[u8],
) -> Result<(), StorageError> {
    disk.open_append(path)
        .and_then(|mut file| {
            file.set_len(0)?;
            file.write_all(bytes)?;
            file.sync_data()
        })
        .and_then(|()| disk.sync_dir(dir))
        .map_err(|e| StorageError::io(format!("writing {}", path.display()), e))
}

/// The data directory's incarnation, drawn at `now_ms` and stored durably the first time
/// ([`geocount_sync::new_incarnation`]: a later one compares higher).
fn incarnation(disk: &dyn Disk, dir: &Path, now_ms: u64) -> Result<u64, StorageError> {
    let path = dir.join(INCARNATION_FILE);
    if exists(disk, &path)? {
        let text = disk
            .read(&path)
            .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))?;
        let parsed = std::str::from_utf8(&text)
            .ok()
            .and_then(|t| u64::from_str_radix(t.trim(), 16).ok())
            .filter(|&n| n != 0);
        if let Some(incarnation) = parsed {
            return Ok(incarnation);
        }
        tracing::warn!(file = %path.display(), "unreadable incarnation; drawing a new one");
    }
    let incarnation = geocount_sync::new_incarnation(now_ms, rand::random()).max(1);
    write_durably(disk, dir, &path, format!("{incarnation:016x}\n").as_bytes())?;
    Ok(incarnation)
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
