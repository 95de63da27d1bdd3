//! The peer's side of `replicated` durability: the groups each peer slot's owner sends
//! (`POST /slots/{slot}/replicate`) are appended to a log of that slot's own,
//! `<data_dir>/replicas/<slot>/wal-<n>.log`, and fsynced before the owner is answered.
//!
//! The files are write-ahead log segments ([`crate::engine::wal`]): a checksum per record, a
//! torn tail cut off at the next open, corruption refused. Records are slot states, so they
//! fold by version in any order ([`super::held_fold`]): a group sent twice, or out of order
//! after a failed send, folds the same.
//!
//! When the open segment grows past what the last fold took (and past
//! `shard.checkpoint_log_bytes`), the append closes it and starts the next one, and the
//! closed segments are folded apart from the appends ([`HeldLogs::fold_closed`], one fold
//! per log at a time): an append never waits for a fold. The fold of segments up to `n` is
//! written to [`FOLD_TEMP_FILE`], synced, renamed over segment `n`, and the older segments
//! are deleted; keys past their retention are left out. Each step leaves a log that folds the
//! same: a crash before the rename leaves the temporary file, removed when the log opens; one
//! after it leaves older segments beside the fold, which fold into it. A reader lists and reads
//! the segments while no fold renames or deletes any.
//!
//! Each log keeps, in `<slot>/since`, the latest version from which its owner said it shows
//! only groups a peer held ([`geocount_model::wire::HeldBatch::since_version`]), and in
//! `<slot>/holds-after` the version after which it holds every group it took: 0, unless this
//! node's data directory replaced a lost one (`replicas/holds-since` says when), then the
//! owner's newest version when the log began
//! ([`geocount_model::wire::HeldBatch::made_through`]: the lost log held nothing newer).
//! A node restoring its lost slot reads each peer's fold with both (`GET /slots/{slot}/replica`):
//! every group the owner acknowledged, or showed to a copy, is in at least one of them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::engine::wal::{self, LogRecord, Wal};
use crate::error::StorageError;
use crate::peer::held_fold::{FoldSize, fold_segments};
use crate::storage::{Disk, create_dir_durably, write_durably};

/// The folder under a data directory that holds the peers' replicated logs.
pub const HELD_DIR: &str = "replicas";

/// The file in a slot's log folder holding the owner's latest `since_version`.
const SINCE_FILE: &str = "since";

/// The file in a slot's log folder holding the version after which it holds every group.
const HOLDS_AFTER_FILE: &str = "holds-after";

/// The file in a slot's log folder a fold is written to before it replaces a segment.
const FOLD_TEMP_FILE: &str = "fold.tmp";

/// The file in [`HELD_DIR`] saying when (unix ms) this node's data directory replaced a
/// lost one (0: never).
const HOLDS_SINCE_FILE: &str = "holds-since";

/// What a slot's log says of how much it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStarts {
    /// The owner's latest `since_version` (`None`: no log, or an unreadable file).
    pub owner_since: Option<u64>,
    /// The slot version after which the log holds every group it took.
    pub holds_after: u64,
}

/// The replicated logs of this node's peers' slots.
pub struct HeldLogs {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    /// The slots whose owners may replicate here: the datacenter's other slots.
    peers: Vec<String>,
    /// Each slot's log, by slot; held only to find one.
    slots: Mutex<HashMap<String, Arc<SlotLog>>>,
    /// The open segment is closed and folded once it is past this and the last fold.
    fold_bytes: u64,
    key_retention_ms: u64,
    holds_since_ms: u64,
}

/// One peer slot's log. Locks are taken in field order.
#[derive(Default)]
struct SlotLog {
    /// The open segment, opened at the first append; appends and readers take it in turn.
    open: Mutex<Option<OpenLog>>,
    /// Held around a change of the closed segments (a fold's rename and deletes) and around a
    /// reader's listing and reading of them.
    files: Mutex<()>,
    /// Whether a fold of the closed segments is due or under way.
    folding: AtomicBool,
    /// The bytes of the last fold, 0 before any.
    folded_bytes: AtomicU64,
    /// How much the last fold held: room for the next one.
    folded: Mutex<FoldSize>,
}

struct OpenLog {
    wal: Wal,
    starts: LogStarts,
}

/// A fold of a slot's closed segments, due after an append closed the open one: run it with
/// [`HeldLogs::fold_closed`]. Until it is dropped, no other fold of the slot is due.
#[must_use = "a log grows until its fold runs"]
pub struct FoldDue {
    slot: String,
    log: Arc<SlotLog>,
    /// The newest closed segment: it and every older one are folded.
    through: u64,
    now_ms: u64,
}

impl Drop for FoldDue {
    fn drop(&mut self) {
        self.log.folding.store(false, Ordering::Release);
    }
}

impl HeldLogs {
    /// The logs under `<data_dir>/replicas` of `peers`' slots; `holds_since_ms` says when this
    /// node's data directory replaced a lost one (0: never; [`holds_since`]).
    pub fn new(
        disk: Arc<dyn Disk>,
        data_dir: &Path,
        peers: Vec<String>,
        (fold_bytes, key_retention_ms): (u64, u64),
        holds_since_ms: u64,
    ) -> Self {
        Self {
            disk,
            dir: data_dir.join(HELD_DIR),
            peers,
            slots: Mutex::new(HashMap::new()),
            fold_bytes,
            key_retention_ms,
            holds_since_ms,
        }
    }

    /// Whether `slot` may replicate here.
    pub fn holds(&self, slot: &str) -> bool {
        self.peers.iter().any(|peer| peer == slot)
    }

    /// Appends `groups` of `slot`, sent with the owner's `since_version` and `made_through`,
    /// in order and fsyncs them: once it returns, they survive this node's crash. When the
    /// open segment is long enough, closes it and returns the fold of the closed segments,
    /// due now. Blocks on the disk.
    pub fn append(
        &self,
        slot: &str,
        groups: &[LogRecord],
        (since_version, made_through): (u64, u64),
        now_ms: u64,
    ) -> Result<Option<FoldDue>, StorageError> {
        let log = self.slot_log(slot);
        let mut open = log.open.lock().expect("held log lock");
        let open = match &mut *open {
            Some(open) => open,
            empty => empty.insert(self.open_log(slot, made_through)?),
        };
        if (open.starts.owner_since).is_none_or(|held| held < since_version) {
            write_number(&*self.disk, &self.slot_dir(slot), SINCE_FILE, since_version)?;
            open.starts.owner_since = Some(since_version);
        }
        for group in groups {
            open.wal.append(group)?;
        }
        open.wal.sync()?;
        let threshold = (self.fold_bytes).max(log.folded_bytes.load(Ordering::Relaxed));
        if open.wal.len() <= threshold || log.folding.swap(true, Ordering::AcqRel) {
            return Ok(None);
        }
        let through =
            (open.wal.rotate()).inspect_err(|_| log.folding.store(false, Ordering::Release))?;
        Ok(Some(FoldDue {
            slot: slot.to_owned(),
            log: Arc::clone(&log),
            through,
            now_ms,
        }))
    }

    /// Folds the segments `due` names into one, which replaces the newest of them, and
    /// deletes the older ones. Appends go on meanwhile. Blocks on the disk.
    pub fn fold_closed(&self, due: FoldDue) -> Result<(), StorageError> {
        let dir = self.slot_dir(&due.slot);
        let disk = &*self.disk;
        // Closed segments: no one writes them, and only this fold deletes any.
        let segments = (wal::segments(disk, &dir)?.into_iter())
            .filter(|&segment| segment <= due.through)
            .collect::<Vec<_>>();
        let room = *due.log.folded.lock().expect("held log fold size lock");
        let fold = fold_segments(disk, &dir, &segments, room)?;
        *due.log.folded.lock().expect("held log fold size lock") = fold.size();
        let record = fold.into_record(self.keys_from(due.now_ms));
        let bytes = wal::encode(&record)?;
        let temp = dir.join(FOLD_TEMP_FILE);
        write_durably(disk, &dir, &temp, &bytes)?;
        let _files = due.log.files.lock().expect("held log files lock");
        let segment = wal::segment_path(&dir, due.through);
        disk.rename(&temp, &segment)
            .and_then(|()| disk.sync_dir(&dir))
            .map_err(|e| StorageError::io(format!("replacing {}", segment.display()), e))?;
        wal::delete_through(disk, &dir, due.through - 1)?;
        (due.log.folded_bytes).store(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Everything the log of `slot` holds, folded: each counter's latest record, the latest
    /// description of each counter created, and the keys within retention at `now_ms`.
    /// Blocks on the disk.
    pub fn fold(&self, slot: &str, now_ms: u64) -> Result<LogRecord, StorageError> {
        let log = self.slot_log(slot);
        // An append must not cut back the open segment as it is read, nor a fold delete any.
        let _open = log.open.lock().expect("held log lock");
        let _files = log.files.lock().expect("held log files lock");
        let dir = self.slot_dir(slot);
        let segments = if exists(&*self.disk, &dir)? {
            wal::segments(&*self.disk, &dir)?
        } else {
            Vec::new()
        };
        let room = *log.folded.lock().expect("held log fold size lock");
        let fold = fold_segments(&*self.disk, &dir, &segments, room)?;
        Ok(fold.into_record(self.keys_from(now_ms)))
    }

    /// What the log of `slot` says of how much it holds. Blocks on the disk.
    pub fn starts(&self, slot: &str) -> LogStarts {
        let log = self.slot_log(slot);
        let open = log.open.lock().expect("held log lock");
        match &*open {
            Some(open) => open.starts,
            None => self.read_starts(&self.slot_dir(slot)),
        }
    }

    fn slot_log(&self, slot: &str) -> Arc<SlotLog> {
        let mut slots = self.slots.lock().expect("held logs lock");
        Arc::clone(slots.entry(slot.to_owned()).or_default())
    }

    /// The oldest a key kept at `now_ms` may be.
    fn keys_from(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.key_retention_ms)
    }

    /// The starts the files in `dir` hold; a log unknown here, or of unknown start, holds
    /// nothing for sure once this node lost its data.
    fn read_starts(&self, dir: &Path) -> LogStarts {
        let replaced = self.holds_since_ms != 0;
        let holds_after = read_number(&*self.disk, &dir.join(HOLDS_AFTER_FILE));
        LogStarts {
            owner_since: read_number(&*self.disk, &dir.join(SINCE_FILE)),
            holds_after: holds_after.unwrap_or(if replaced { u64::MAX } else { 0 }),
        }
    }

    fn slot_dir(&self, slot: &str) -> PathBuf {
        self.dir.join(slot)
    }

    /// Opens the log of `slot`: a fold cut short removed, its torn tail cut off, a fresh
    /// segment after the others. A new log, begun by a batch sent with `made_through`, says
    /// after which version it holds every group.
    fn open_log(&self, slot: &str, made_through: u64) -> Result<OpenLog, StorageError> {
        let dir = self.slot_dir(slot);
        if !exists(&*self.disk, &dir)? {
            create_dir_durably(&*self.disk, &dir)
                .map_err(|e| StorageError::io(format!("creating {}", dir.display()), e))?;
            let holds_after = if self.holds_since_ms == 0 {
                0
            } else {
                made_through
            };
            write_number(&*self.disk, &dir, HOLDS_AFTER_FILE, holds_after)?;
        }
        let temp = dir.join(FOLD_TEMP_FILE);
        if exists(&*self.disk, &temp)? {
            (self.disk.remove_file(&temp))
                .map_err(|e| StorageError::io(format!("removing {}", temp.display()), e))?;
        }
        let newest = wal::replay(&*self.disk, &dir, |_| {})?;
        Ok(OpenLog {
            wal: Wal::create(self.disk.clone(), &dir, newest + 1)?,
            starts: self.read_starts(&dir),
        })
    }
}

fn exists(disk: &dyn Disk, path: &Path) -> Result<bool, StorageError> {
    (disk.exists(path)).map_err(|e| StorageError::io(format!("reading {}", path.display()), e))
}

/// From when (unix ms) the node of `data_dir` holds every group it takes: read back, or, the
/// first time, 0 for a new data directory and `now_ms` for one that `replaced_lost` data.
/// Blocks on the disk.
pub fn holds_since(
    disk: &dyn Disk,
    data_dir: &Path,
    replaced_lost: bool,
    now_ms: u64,
) -> Result<u64, StorageError> {
    let dir = data_dir.join(HELD_DIR);
    if let Some(since) = read_number(disk, &dir.join(HOLDS_SINCE_FILE)) {
        return Ok(since);
    }
    // Unknown otherwise (a torn file): from now on, as after a loss.
    let first = !replaced_lost && !exists(disk, &dir)?;
    let since = if first { 0 } else { now_ms };
    create_dir_durably(disk, &dir)
        .map_err(|e| StorageError::io(format!("creating {}", dir.display()), e))?;
    write_number(disk, &dir, HOLDS_SINCE_FILE, since)?;
    Ok(since)
}

/// The number the file at `path` holds; `None` when it is missing or unreadable.
fn read_number(disk: &dyn Disk, path: &Path) -> Option<u64> {
    let text = disk.read(path).ok()?;
    String::from_utf8(text).ok()?.trim().parse().ok()
}

fn write_number(disk: &dyn Disk, dir: &Path, name: &str, number: u64) -> Result<(), StorageError> {
    write_durably(disk, dir, &dir.join(name), format!("{number}\n").as_bytes())
}

#[cfg(test)]
mod tests;
