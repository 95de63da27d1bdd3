//! The write-ahead log: every committed group of writes is appended here and fsynced before it is
//! acknowledged.
//!
//! The log is a series of segment files `wal-<n>.log`. Each record is
//! `[payload length: u32 LE][crc32 of payload: u32 LE][payload: postcard LogRecord]`. A record
//! holds the slot states *after* the group (not the deltas), so replaying a record twice, or
//! replaying one the checkpoint store already holds, changes nothing: the merge is by version.
//!
//! The open segment keeps space reserved ahead of its records ([`RESERVE_BYTES`]): a file that
//! grows with every record makes each fsync also journal its new size, which cost a quarter more
//! per fsync here. The reserved space reads as zeros; a segment is cut to its records when it is
//! closed, and replay cuts the zeros off the newest one (a record's length is never zero).
//!
//! Only the newest segment can end in a torn record ([`crate::engine::records`] tells a torn
//! tail from corruption). Replay cuts a torn tail off (it was never acknowledged) and refuses
//! corruption, leaving the file as it is, so startup stops rather than serve less than was
//! acknowledged; [`scan_segment`] reads a segment without changing it for an offline check too.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use geocount_model::{CounterId, IdempotencyRecord, SlotRecord, VersionedDescription};
use serde::{Deserialize, Serialize};

use crate::engine::records::{self, HEADER_BYTES, RecordsEnd};
use crate::error::StorageError;
use crate::storage::{AppendFile, Disk};

/// How far the open segment's file is grown ahead of its records, each time they reach the end
/// of what was reserved.
pub const RESERVE_BYTES: u64 = 8 << 20;

/// The encoding buffer's first capacity.
const BUFFER_START_BYTES: usize = 64 << 10;

/// The most capacity the encoding buffer keeps whatever the records' sizes.
const BUFFER_KEPT_BYTES: usize = 1 << 20;

/// What one committed group changed.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogRecord {
    /// Every counter the group changed in this slot: its new state and sketch, and of its
    /// window only the buckets the group changed, with their new totals (a hot counter's whole
    /// window would be logged again by every group). Replayed with
    /// [`SlotRecord::apply_logged`]; a whole record replays the same way.
    pub slots: Vec<(CounterId, SlotRecord)>,
    /// Counters created by the group.
    pub descriptions: Vec<VersionedDescription>,
    /// Idempotency keys first used by the group.
    pub idempotency: Vec<(Box<str>, IdempotencyRecord)>,
}

impl LogRecord {
    /// Whether the record changes nothing.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.descriptions.is_empty() && self.idempotency.is_empty()
    }
}

/// The open, newest segment that records are appended to.
#[derive(Debug)]
pub struct Wal {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    segment: u64,
    file: Box<dyn AppendFile>,
    len: u64,
    synced_len: u64,
    /// The file's size: records up to `len`, reserved space after (`u64::MAX` once reserving
    /// failed in this segment).
    reserved: u64,
    buffer: Vec<u8>,
    /// Where the last appended record's idempotency keys start in `buffer`.
    keys_at: usize,
    /// Bytes of this segment's records that are idempotency keys, up to `len` and to
    /// `synced_len`.
    key_bytes: u64,
    synced_key_bytes: u64,
    fsync_failed: bool,
}

/// The file of segment number `segment` in `dir`.
pub fn segment_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(format!("wal-{segment:020}.log"))
}

/// The segment numbers present in `dir`, oldest first.
pub fn segments(disk: &dyn Disk, dir: &Path) -> Result<Vec<u64>, StorageError> {
    let names = disk
        .file_names(dir)
        .map_err(|e| StorageError::io(format!("listing {}", dir.display()), e))?;
    let mut found = Vec::new();
    for name in names {
        if let Some(n) = name
            .strip_prefix("wal-")
            .and_then(|rest| rest.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok())
        {
            found.push(n);
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// Makes the directory's entries (created or removed files) durable.
fn sync_dir(disk: &dyn Disk, dir: &Path) -> Result<(), StorageError> {
    disk.sync_dir(dir)
        .map_err(|e| StorageError::io(format!("syncing directory {}", dir.display()), e))
}

/// What one segment holds, read without changing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentScan {
    /// The segment file.
    pub path: PathBuf,
    /// Whole records read, up to [`SegmentScan::end`].
    pub records: usize,
    /// The bytes those records take, from the start of the file.
    pub record_bytes: u64,
    /// The file's size.
    pub file_bytes: u64,
    /// What follows the records.
    pub end: RecordsEnd,
}

impl SegmentScan {
    /// The segment's first bad record, as the error that stops startup, if it is corrupt.
    pub fn corruption(&self) -> Option<StorageError> {
        self.end.corruption(&self.path)
    }
}

/// Reads segment number `segment` of `dir` without changing it, handing each whole record to
/// `apply`, and says how its records end. Only the `newest` segment may end in reserved space
/// or a torn record; any bad record in an older one is corruption.
pub fn scan_segment(
    disk: &dyn Disk,
    dir: &Path,
    segment: u64,
    newest: bool,
    mut apply: impl FnMut(LogRecord),
) -> Result<SegmentScan, StorageError> {
    let path = segment_path(dir, segment);
    let bytes = disk
        .read(&path)
        .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))?;
    let scanned = records::scan(&bytes, newest, &mut apply);
    Ok(SegmentScan {
        path,
        records: scanned.records,
        record_bytes: scanned.record_bytes as u64,
        file_bytes: bytes.len() as u64,
        end: scanned.end,
    })
}

/// Reads every segment in `dir`, oldest first, handing each record to `apply`. Cuts a torn
/// tail or reserved space off the newest segment; refuses corruption anywhere, leaving the
/// file as it is. Returns the newest segment number (0 when there is none).
pub fn replay(
    disk: &dyn Disk,
    dir: &Path,
    mut apply: impl FnMut(LogRecord),
) -> Result<u64, StorageError> {
    let all = segments(disk, dir)?;
    for (i, &segment) in all.iter().enumerate() {
        let scan = scan_segment(disk, dir, segment, i + 1 == all.len(), &mut apply)?;
        let path = &scan.path;
        let cut = match &scan.end {
            RecordsEnd::Clean => continue,
            RecordsEnd::Reserved { offset } => {
                tracing::debug!(file = %path.display(), offset, "cutting off the log's reserved space");
                *offset
            }
            RecordsEnd::Torn { offset, reason } => {
                tracing::warn!(
                    file = %path.display(), offset, reason,
                    "cutting off a torn record at the end of the log (it was never acknowledged)"
                );
                *offset
            }
            RecordsEnd::Corrupt { .. } => {
                return Err(scan.corruption().expect("a corrupt segment"));
            }
        };
        disk.open_append(path)
            .and_then(|mut file| {
                file.set_len(cut)?;
                file.sync_data()
            })
            .map_err(|e| StorageError::io(format!("truncating {}", path.display()), e))?;
    }
    Ok(all.last().copied().unwrap_or(0))
}

/// `record` as the log writes it, header included: the whole content of a segment holding it
/// alone.
pub fn encode(record: &LogRecord) -> Result<Vec<u8>, StorageError> {
    let mut bytes = Vec::new();
    encode_into(&mut bytes, record)?;
    Ok(bytes)
}

/// Writes `record`, header included, over `buffer`; returns where its keys start.
fn encode_into(buffer: &mut Vec<u8>, record: &LogRecord) -> Result<usize, StorageError> {
    buffer.clear();
    buffer.extend_from_slice(&[0; HEADER_BYTES]);
    // A record's fields one after another, as postcard encodes the record: where its keys
    // start is then known.
    postcard::to_io(&(&record.slots, &record.descriptions), &mut *buffer)?;
    let keys_at = buffer.len();
    postcard::to_io(&record.idempotency, &mut *buffer)?;
    records::seal(buffer).map_err(|e| StorageError::io("appending to the log", e))?;
    Ok(keys_at)
}

impl Wal {
    /// Creates segment number `segment` in `dir` and opens it for appending.
    pub fn create(disk: Arc<dyn Disk>, dir: &Path, segment: u64) -> Result<Self, StorageError> {
        let path = segment_path(dir, segment);
        let file = disk
            .open_append(&path)
            .map_err(|e| StorageError::io(format!("creating {}", path.display()), e))?;
        let len = file
            .size()
            .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))?;
        sync_dir(&*disk, dir)?;
        let mut wal = Self {
            disk,
            dir: dir.to_owned(),
            segment,
            file,
            len,
            synced_len: len,
            reserved: len,
            buffer: Vec::with_capacity(BUFFER_START_BYTES),
            keys_at: HEADER_BYTES,
            key_bytes: 0,
            synced_key_bytes: 0,
            fsync_failed: false,
        };
        wal.reserve_for(0);
        Ok(wal)
    }

    /// Reserves [`RESERVE_BYTES`] more when the next `bytes` would run past the reserved
    /// space. Only a speed-up: if it fails, records are appended all the same.
    fn reserve_for(&mut self, bytes: u64) {
        if self.len + bytes < self.reserved {
            return;
        }
        let target = self.len + bytes + RESERVE_BYTES;
        match self.file.reserve(target) {
            Ok(()) => self.reserved = target,
            Err(error) => {
                tracing::warn!(%error, file = %self.path().display(), "cannot reserve log space; appending without it");
                // Not tried again in this segment: one warning, not one per record.
                self.reserved = u64::MAX;
            }
        }
    }

    /// Appends a record (not yet durable: see [`Wal::sync`]). On failure the segment is cut back
    /// to where it was, so a refused record can never be replayed.
    pub fn append(&mut self, record: &LogRecord) -> Result<(), StorageError> {
        self.keys_at = encode_into(&mut self.buffer, record)?;
        if self.buffer.capacity() > (4 * self.buffer.len()).max(BUFFER_KEPT_BYTES) {
            // One large group (a burst of batches) must not hold its buffer through quiet
            // hours: a buffer four times larger than its record hands the rest back.
            self.buffer
                .shrink_to((2 * self.buffer.len()).max(BUFFER_START_BYTES));
        }
        self.reserve_for(self.buffer.len() as u64);
        if let Err(e) = self.file.write_all(&self.buffer) {
            self.cut_back();
            return Err(StorageError::io(self.context("appending to"), e));
        }
        self.len += self.buffer.len() as u64;
        self.key_bytes += (self.buffer.len() - self.keys_at) as u64;
        Ok(())
    }

    /// The encoded record the last successful [`Wal::append`] wrote, without its header.
    pub fn last_payload(&self) -> &[u8] {
        &self.buffer[HEADER_BYTES..]
    }

    /// The encoded idempotency keys of the record the last successful [`Wal::append`] wrote:
    /// a postcard `Vec<(Box<str>, IdempotencyRecord)>`.
    pub fn last_keys(&self) -> &[u8] {
        &self.buffer[self.keys_at..]
    }

    /// Makes every appended record durable. On failure, cuts back the records appended since the
    /// last successful sync (they were not acknowledged).
    pub fn sync(&mut self) -> Result<(), StorageError> {
        if self.synced_len == self.len {
            return Ok(());
        }
        if let Err(e) = self.file.sync_data() {
            self.fsync_failed = true;
            self.len = self.synced_len;
            self.key_bytes = self.synced_key_bytes;
            self.cut_back();
            return Err(StorageError::io(self.context("syncing"), e));
        }
        self.synced_len = self.len;
        self.synced_key_bytes = self.key_bytes;
        Ok(())
    }

    /// Makes every appended record durable, cutting nothing back on failure: in async
    /// durability those records were acknowledged already.
    pub fn flush(&mut self) -> Result<(), StorageError> {
        if let Err(e) = self.file.sync_data() {
            self.fsync_failed = true;
            return Err(StorageError::io(self.context("syncing"), e));
        }
        self.synced_len = self.len;
        self.synced_key_bytes = self.key_bytes;
        Ok(())
    }

    /// Whether an fsync of this log ever failed: what the disk holds is then unknown (the
    /// kernel may have dropped the pages it could not write), so no later fsync can vouch for it.
    pub fn fsync_failed(&self) -> bool {
        self.fsync_failed
    }

    /// Whether records were appended since the last sync.
    pub fn has_unsynced(&self) -> bool {
        self.synced_len != self.len
    }

    fn cut_back(&mut self) {
        // The reserved space goes too: the next append reserves again.
        self.reserved = self.len;
        if let Err(e) = self
            .file
            .set_len(self.len)
            .and_then(|()| self.file.sync_data())
        {
            tracing::error!(error = %e, file = %self.path().display(), "cannot cut the log back after a failed write");
        }
    }

    /// Bytes in the open segment.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Bytes in the open segment that are idempotency keys (appended since it was opened).
    pub fn key_bytes(&self) -> u64 {
        self.key_bytes
    }

    /// Whether the open segment is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Syncs the open segment, cut to its records, and starts the next one. Returns the number
    /// of the segment just closed: it and every older one may be deleted once a checkpoint
    /// holds their records.
    pub fn rotate(&mut self) -> Result<u64, StorageError> {
        // Closed segments end at their last record, so replay reads any zeros in one as
        // corruption, not as reserved space.
        self.file
            .set_len(self.len)
            .map_err(|e| StorageError::io(self.context("closing"), e))?;
        self.reserved = self.len;
        self.flush()?;
        let next = Wal::create(self.disk.clone(), &self.dir, self.segment + 1)?;
        let closed = self.segment;
        *self = next;
        Ok(closed)
    }

    fn path(&self) -> PathBuf {
        segment_path(&self.dir, self.segment)
    }

    fn context(&self, action: &str) -> String {
        format!("{action} {}", self.path().display())
    }
}

/// Deletes every segment numbered `through` or lower: a checkpoint now holds their records.
pub fn delete_through(disk: &dyn Disk, dir: &Path, through: u64) -> Result<(), StorageError> {
    for segment in segments(disk, dir)?.into_iter().filter(|&s| s <= through) {
        let path = segment_path(dir, segment);
        disk.remove_file(&path)
            .map_err(|e| StorageError::io(format!("removing {}", path.display()), e))?;
    }
    sync_dir(disk, dir)
}

#[cfg(test)]
mod tests;
