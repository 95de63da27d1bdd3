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
//! A crash can leave a torn record at the end of the newest segment; replay stops there and cuts
//! it off (it was never acknowledged). A bad record anywhere else is corruption and stops startup.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use geocount_model::{CounterId, SlotRecord, VersionedDescription};
use serde::{Deserialize, Serialize};

use crate::error::StorageError;
use crate::idempotency::IdempotencyRecord;
use crate::storage::{AppendFile, Disk};

const HEADER_BYTES: usize = 8;

/// How far the open segment's file is grown ahead of its records, each time they reach the end
/// of what was reserved.
pub const RESERVE_BYTES: u64 = 8 << 20;

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
    fsync_failed: bool,
}

fn segment_path(dir: &Path, segment: u64) -> PathBuf {
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

/// Reads every segment in `dir`, oldest first, handing each record to `apply`. Cuts a torn
/// tail off the newest segment. Returns the newest segment number (0 when there is none).
pub fn replay(
    disk: &dyn Disk,
    dir: &Path,
    mut apply: impl FnMut(LogRecord),
) -> Result<u64, StorageError> {
    let all = segments(disk, dir)?;
    for (i, &segment) in all.iter().enumerate() {
        let path = segment_path(dir, segment);
        let bytes = disk
            .read(&path)
            .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))?;
        let mut offset = 0usize;
        while offset < bytes.len() {
            match decode_at(&bytes, offset) {
                Ok((record, next)) => {
                    apply(record);
                    offset = next;
                }
                Err(reason) if i + 1 == all.len() => {
                    if bytes[offset..].iter().all(|&b| b == 0) {
                        tracing::debug!(file = %path.display(), offset, "cutting off the log's reserved space");
                    } else {
                        tracing::warn!(
                            file = %path.display(), offset, reason,
                            "cutting off a torn record at the end of the log (it was never acknowledged)"
                        );
                    }
                    disk.open_append(&path)
                        .and_then(|mut file| {
                            file.set_len(offset as u64)?;
                            file.sync_data()
                        })
                        .map_err(|e| {
                            StorageError::io(format!("truncating {}", path.display()), e)
                        })?;
                    break;
                }
                Err(reason) => {
                    return Err(StorageError::Corrupt {
                        file: path.display().to_string(),
                        offset: offset as u64,
                        reason,
                    });
                }
            }
        }
    }
    Ok(all.last().copied().unwrap_or(0))
}

fn decode_at(bytes: &[u8], offset: usize) -> Result<(LogRecord, usize), String> {
    let header = bytes
        .get(offset..offset + HEADER_BYTES)
        .ok_or("incomplete record header")?;
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let start = offset + HEADER_BYTES;
    let payload = bytes
        .get(start..start + len)
        .ok_or("record runs past the end of the segment")?;
    if crc32fast::hash(payload) != crc {
        return Err("checksum mismatch".into());
    }
    let record = postcard::from_bytes(payload).map_err(|e| format!("undecodable record: {e}"))?;
    Ok((record, start + len))
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
            buffer: Vec::with_capacity(64 * 1024),
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
        self.buffer.clear();
        self.buffer.extend_from_slice(&[0; HEADER_BYTES]);
        postcard::to_io(record, &mut self.buffer)?;
        let payload_len = self.buffer.len() - HEADER_BYTES;
        let len = u32::try_from(payload_len).map_err(|_| {
            StorageError::io(
                "appending to the log",
                std::io::Error::other("record larger than 4 GiB"),
            )
        })?;
        let crc = crc32fast::hash(&self.buffer[HEADER_BYTES..]);
        self.buffer[0..4].copy_from_slice(&len.to_le_bytes());
        self.buffer[4..8].copy_from_slice(&crc.to_le_bytes());
        self.reserve_for(self.buffer.len() as u64);
        if let Err(e) = self.file.write_all(&self.buffer) {
            self.cut_back();
            return Err(StorageError::io(self.context("appending to"), e));
        }
        self.len += self.buffer.len() as u64;
        Ok(())
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
            self.cut_back();
            return Err(StorageError::io(self.context("syncing"), e));
        }
        self.synced_len = self.len;
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
mod tests {
    use std::fs;

    use super::*;
    use crate::storage::OsDisk;

    fn create(dir: &Path, segment: u64) -> Wal {
        Wal::create(Arc::new(OsDisk), dir, segment).unwrap()
    }

    fn record(id: &str, value: i64, version: u64) -> LogRecord {
        LogRecord {
            slots: vec![(
                CounterId::new(id).unwrap(),
                geocount_model::SlotState { value, version }.into(),
            )],
            ..LogRecord::default()
        }
    }

    /// Segment 1 holding records `a` then `b`, synced.
    fn a_then_b(dir: &Path) -> Wal {
        let mut wal = create(dir, 1);
        wal.append(&record("a", 1, 1)).unwrap();
        wal.append(&record("b", 2, 2)).unwrap();
        wal.sync().unwrap();
        wal
    }

    fn replay_all(dir: &Path) -> Result<Vec<LogRecord>, StorageError> {
        let mut records = Vec::new();
        replay(&OsDisk, dir, |r| records.push(r))?;
        Ok(records)
    }

    #[test]
    fn records_round_trip_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = create(dir.path(), 1);
        wal.append(&record("a", 1, 1)).unwrap();
        wal.sync().unwrap();
        assert_eq!(wal.rotate().unwrap(), 1);
        wal.append(&record("b", 2, 2)).unwrap();
        wal.sync().unwrap();
        drop(wal);
        assert_eq!(
            replay_all(dir.path()).unwrap(),
            vec![record("a", 1, 1), record("b", 2, 2)]
        );
        delete_through(&OsDisk, dir.path(), 1).unwrap();
        assert_eq!(segments(&OsDisk, dir.path()).unwrap(), vec![2]);
    }

    #[test]
    fn torn_tail_is_cut_off_and_the_log_stays_usable() {
        let dir = tempfile::tempdir().unwrap();
        let wal = a_then_b(dir.path());
        let full = wal.len();
        drop(wal);
        let path = segment_path(dir.path(), 1);
        // Every possible tear inside the second record leaves exactly the first.
        let first_len = {
            let bytes = fs::read(&path).unwrap();
            decode_at(&bytes, 0).unwrap().1 as u64
        };
        for cut in first_len + 1..full {
            let bytes = fs::read(&path).unwrap();
            let torn = dir.path().join("torn");
            fs::create_dir_all(&torn).unwrap();
            fs::write(segment_path(&torn, 7), &bytes[..cut as usize]).unwrap();
            assert_eq!(
                replay_all(&torn).unwrap(),
                vec![record("a", 1, 1)],
                "cut at {cut}"
            );
            assert_eq!(
                fs::metadata(segment_path(&torn, 7)).unwrap().len(),
                first_len
            );
            fs::remove_dir_all(&torn).unwrap();
        }
    }

    #[test]
    fn flipped_bit_in_the_newest_segment_is_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let wal = a_then_b(dir.path());
        let written = wal.len() as usize;
        drop(wal);
        let path = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&path).unwrap();
        let last = written - 1;
        bytes[last] ^= 0x40;
        fs::write(&path, &bytes).unwrap();
        assert_eq!(replay_all(dir.path()).unwrap(), vec![record("a", 1, 1)]);
    }

    #[test]
    fn corruption_in_an_older_segment_stops_replay() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = create(dir.path(), 1);
        wal.append(&record("a", 1, 1)).unwrap();
        wal.rotate().unwrap();
        wal.append(&record("b", 2, 2)).unwrap();
        drop(wal);
        let path = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&path).unwrap();
        bytes[HEADER_BYTES] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        let err = replay_all(dir.path()).unwrap_err();
        assert!(
            matches!(err, StorageError::Corrupt { offset: 0, .. }),
            "{err}"
        );
    }

    fn file_len(dir: &Path, segment: u64) -> u64 {
        fs::metadata(segment_path(dir, segment)).unwrap().len()
    }

    /// A crash leaves the open segment with its reserved space: replay reads every record,
    /// then cuts the zeros off, and the next segment starts clean.
    #[test]
    fn reserved_space_is_cut_off_at_replay() {
        let dir = tempfile::tempdir().unwrap();
        let wal = a_then_b(dir.path());
        let written = wal.len();
        assert!(
            file_len(dir.path(), 1) >= RESERVE_BYTES,
            "space reserved ahead"
        );
        drop(wal);
        assert_eq!(
            replay_all(dir.path()).unwrap(),
            vec![record("a", 1, 1), record("b", 2, 2)]
        );
        assert_eq!(file_len(dir.path(), 1), written);
    }

    /// Records past the first reservation get more reserved space, and a closed segment is
    /// cut to its records, so zeros in it would read as corruption.
    #[test]
    fn segments_reserve_as_they_grow_and_close_at_their_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = create(dir.path(), 1);
        let big = LogRecord {
            slots: (0..200_000)
                .map(|n| {
                    let id = CounterId::new(format!("counter-{n}")).unwrap();
                    (
                        id,
                        geocount_model::SlotState {
                            value: n,
                            version: 1,
                        }
                        .into(),
                    )
                })
                .collect(),
            ..LogRecord::default()
        };
        let mut appended = 0;
        while wal.len() <= RESERVE_BYTES {
            wal.append(&big).unwrap();
            appended += 1;
        }
        wal.sync().unwrap();
        assert!(file_len(dir.path(), 1) > wal.len());
        let written = wal.len();
        assert_eq!(wal.rotate().unwrap(), 1);
        assert_eq!(file_len(dir.path(), 1), written);
        wal.append(&record("c", 3, 3)).unwrap();
        wal.sync().unwrap();
        drop(wal);
        let records = replay_all(dir.path()).unwrap();
        assert_eq!(records.last(), Some(&record("c", 3, 3)));
        assert_eq!(records.len(), appended + 1);
    }

    /// A record torn inside the reserved space (its first bytes written, the rest still zeros)
    /// is cut off with the space after it.
    #[test]
    fn a_record_torn_inside_the_reserved_space_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = create(dir.path(), 1);
        wal.append(&record("a", 1, 1)).unwrap();
        wal.sync().unwrap();
        let first = wal.len();
        wal.append(&record("b", 2, 2)).unwrap();
        wal.sync().unwrap();
        drop(wal);
        let path = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&path).unwrap();
        // Only the second record's header reached the disk.
        bytes[first as usize + HEADER_BYTES..].fill(0);
        fs::write(&path, &bytes).unwrap();
        assert_eq!(replay_all(dir.path()).unwrap(), vec![record("a", 1, 1)]);
        assert_eq!(file_len(dir.path(), 1), first);
    }

    #[test]
    fn empty_directory_replays_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            replay(&OsDisk, dir.path(), |_| panic!("no records")).unwrap(),
            0
        );
    }
}
