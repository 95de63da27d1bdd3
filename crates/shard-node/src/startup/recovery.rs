//! Startup: rebuild the committed state from the checkpoint store plus the log written since.
//!
//! A data directory holding no slot (no store, no log) is a lost disk unless the operator
//! says it is a new slot ([`RestoreMode::Empty`]). Before anything else is written there, the
//! node records durably that its slot must be restored ([`RESTORE_MARKER`]); the marker goes
//! only once the restored state is durable ([`finish_restore`]), so a node that crashes in the
//! middle of its restore resumes it rather than come back empty. An operator may give an
//! unfinished restore up ([`RestoreMode::Empty`]): the slot then refuses the keys it does not
//! hold until they would have expired ([`KEYS_UNKNOWN_FILE`]), since it holds none of its own.
//!
//! Recovery reads records and hands them on as they are: the tables they go into are built by
//! [`crate::startup::resume`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::RestoreMode;
use crate::engine::store::{STORE_FILE, Store, StoredState};
use crate::engine::wal::{self, LogRecord, Wal};
use crate::error::StorageError;
use crate::storage::{Disk, create_dir_durably, write_durably};

/// What a data directory holds, read at startup: plain records, from which the node builds
/// its tables ([`crate::startup::resume`]).
#[derive(Debug)]
pub struct Recovered {
    /// The open checkpoint store: the checkpointer writes it.
    pub store: Store,
    /// What the store held.
    pub stored: StoredState,
    /// Whether the slot must be restored from the datacenter before the node takes writes.
    pub restore_pending: bool,
    /// This data directory's incarnation: drawn when it was first used, carried in every sync
    /// page, so that a restored node or a second node for the same slot tells itself apart.
    pub incarnation: u64,
    /// Until when (unix ms) idempotency keys recorded before may be missing: a slot still to
    /// restore holds none of its keys yet, and one restored without a whole copy of them may
    /// miss some.
    pub keys_unknown_until_ms: Option<u64>,
    /// The log written since the store's last checkpoint, still to replay.
    pub log: LogReplay,
}

/// The log segments of a data directory, replayed once the store's records are taken in.
#[derive(Debug)]
pub struct LogReplay {
    disk: Arc<dyn Disk>,
    data_dir: PathBuf,
}

impl LogReplay {
    /// Hands every record of the log to `each`, oldest first (a torn tail is cut off), then
    /// opens a fresh segment after the replayed ones for the commit loop to append to.
    pub fn replay(self, each: impl FnMut(LogRecord)) -> Result<Wal, StorageError> {
        let newest = wal::replay(&*self.disk, &self.data_dir, each)?;
        Wal::create(self.disk, &self.data_dir, newest + 1)
    }
}

/// The file whose presence says the slot's restore has not finished.
pub const RESTORE_MARKER: &str = "restore.pending";

/// The file holding until when (unix ms, in decimal) the slot may miss idempotency keys: it
/// was restored without a whole copy of them.
pub const KEYS_UNKNOWN_FILE: &str = "keys.unknown-until";

/// The file holding the data directory's incarnation.
pub const INCARNATION_FILE: &str = "incarnation";

/// Opens the store in `data_dir` on `disk` (creating the directory) and reads it; the log is
/// left to replay. An empty directory is marked for a restore first unless `mode` says to
/// start empty. An unfinished restore given up by `mode` holds none of the slot's keys: those
/// recorded within `key_retention_ms` before `now_ms` are unknown.
pub fn recover(
    disk: Arc<dyn Disk>,
    data_dir: &Path,
    now_ms: u64,
    key_retention_ms: u64,
    mode: RestoreMode,
) -> Result<Recovered, StorageError> {
    create_dir_durably(&*disk, data_dir)
        .map_err(|e| StorageError::io(format!("creating {}", data_dir.display()), e))?;
    let store_path = data_dir.join(STORE_FILE);
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
            tracing::warn!(dir = %data_dir.display(), "--restore empty: giving up the unfinished restore; the slot keeps only what was restored so far, and refuses idempotency keys it does not hold until they would have expired");
            let until = keys_unknown_until(&*disk, data_dir)?
                .unwrap_or(0)
                .max(now_ms.saturating_add(key_retention_ms));
            // Before the marker goes: a crash in between gives up the restore again.
            record_unknown_keys(&*disk, data_dir, until)?;
            finish_restore(&*disk, data_dir)?;
            restore_pending = false;
        }
        _ => {}
    }
    let incarnation = incarnation(&*disk, data_dir, now_ms)?;
    let store = Store::open(&*disk, &store_path)?;
    let stored = store.load()?;
    // A slot still to restore holds none of its keys yet.
    let keys_unknown_until_ms = if restore_pending {
        Some(u64::MAX)
    } else {
        keys_unknown_until(&*disk, data_dir)?
    };
    Ok(Recovered {
        store,
        stored,
        restore_pending,
        incarnation,
        keys_unknown_until_ms,
        log: LogReplay {
            disk,
            data_dir: data_dir.to_owned(),
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
