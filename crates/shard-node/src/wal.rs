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
//! A crash can leave a torn record at the end of the newest segment: a prefix of one record,
//! followed only by zeros or the end of the file. Replay cuts it off (it was never acknowledged).
//! Any other bad record is corruption: replay refuses it and leaves the file as it is, so
//! startup stops rather than serve less than was acknowledged ([`scan_segment`] tells them
//! apart, and reads a segment without changing it for an offline check too).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use geocount_model::{CounterId, IdempotencyRecord, SlotRecord, VersionedDescription};
use serde::{Deserialize, Serialize};

use crate::error::StorageError;
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

/// How a segment's records end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentEnd {
    /// The last record ends the file.
    Clean,
    /// Only zeros follow the last record: space reserved ahead of records never written.
    Reserved {
        /// Where the zeros start.
        offset: u64,
    },
    /// An incomplete last record, maybe followed by zeros: a crash mid-append, so it was never
    /// acknowledged. Only the newest segment can end so.
    Torn {
        /// Where the torn record starts.
        offset: u64,
        /// Why it does not read.
        reason: String,
    },
    /// A bad record that is no torn tail: records were acknowledged that cannot be read.
    Corrupt {
        /// Where the first bad record starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
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
    pub end: SegmentEnd,
}

impl SegmentScan {
    /// The segment's first bad record, as the error that stops startup, if it is corrupt.
    pub fn corruption(&self) -> Option<StorageError> {
        match &self.end {
            SegmentEnd::Corrupt { offset, reason } => Some(StorageError::Corrupt {
                file: self.path.display().to_string(),
                offset: *offset,
                reason: reason.clone(),
            }),
            _ => None,
        }
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
    let mut records = 0;
    let mut offset = 0usize;
    let end = loop {
        if offset == bytes.len() {
            break SegmentEnd::Clean;
        }
        match decode_at(&bytes, offset) {
            Ok((record, next)) => {
                apply(record);
                records += 1;
                offset = next;
            }
            Err(bad) if newest => break classify_failure(&bytes, offset, bad),
            Err(bad) => {
                break SegmentEnd::Corrupt {
                    offset: offset as u64,
                    reason: bad.to_string(),
                };
            }
        }
    };
    Ok(SegmentScan {
        path,
        records,
        record_bytes: offset as u64,
        file_bytes: bytes.len() as u64,
        end,
    })
}

/// Tells a torn tail from corruption where the newest segment's record at `offset` does not
/// read.
///
/// A torn tail is a prefix of one record followed only by zeros (reserved space) or the end of
/// the file. So it is corruption when the record's checksum holds but it does not decode; when
/// non-zero bytes run past the end its header claims; or when a whole record starts anywhere
/// among the non-zero bytes after it, since records are appended one after another: a later
/// one means this one was written whole, then damaged. That last test also catches a damaged
/// length claiming a record that runs over the records after it, inside the file or past its
/// end.
fn classify_failure(bytes: &[u8], offset: usize, bad: BadRecord) -> SegmentEnd {
    let Some(last_nonzero) = bytes[offset..].iter().rposition(|&b| b != 0) else {
        return SegmentEnd::Reserved {
            offset: offset as u64,
        };
    };
    let nonzero_end = offset + last_nonzero + 1;
    let claimed_end = match bytes.get(offset..offset + HEADER_BYTES) {
        Some(header) => offset + HEADER_BYTES + payload_len(header),
        None => bytes.len(),
    };
    let torn = !matches!(bad, BadRecord::Undecodable(_))
        && nonzero_end <= claimed_end
        && !(offset + 1..nonzero_end).any(|at| whole_record_at(bytes, at));
    let (offset, reason) = (offset as u64, bad.to_string());
    if torn {
        SegmentEnd::Torn { offset, reason }
    } else {
        SegmentEnd::Corrupt { offset, reason }
    }
}

/// Whether a whole record starts at `at`: a payload of one or more bytes inside the file that
/// decodes to exactly one record, with its checksum. Decoded before the checksum is computed:
/// at most offsets it fails within a few bytes, where the checksum would read the whole
/// claimed length (megabytes, inside a large torn record).
fn whole_record_at(bytes: &[u8], at: usize) -> bool {
    let Some(header) = bytes.get(at..at + HEADER_BYTES) else {
        return false;
    };
    let start = at + HEADER_BYTES;
    let Some(payload) = bytes.get(start..start + payload_len(header)) else {
        return false;
    };
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    !payload.is_empty()
        && postcard::take_from_bytes::<LogRecord>(payload).is_ok_and(|(_, rest)| rest.is_empty())
        && crc32fast::hash(payload) == crc
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
            SegmentEnd::Clean => continue,
            SegmentEnd::Reserved { offset } => {
                tracing::debug!(file = %path.display(), offset, "cutting off the log's reserved space");
                *offset
            }
            SegmentEnd::Torn { offset, reason } => {
                tracing::warn!(
                    file = %path.display(), offset, reason,
                    "cutting off a torn record at the end of the log (it was never acknowledged)"
                );
                *offset
            }
            SegmentEnd::Corrupt { .. } => {
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

/// Why the bytes at an offset are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BadRecord {
    #[error("incomplete record header")]
    IncompleteHeader,
    #[error("record runs past the end of the segment")]
    PastTheEnd,
    #[error("checksum mismatch")]
    Checksum,
    #[error("undecodable record: {0}")]
    Undecodable(String),
}

fn payload_len(header: &[u8]) -> usize {
    u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize
}

/// The record at `offset` and where the next one starts.
fn decode_at(bytes: &[u8], offset: usize) -> Result<(LogRecord, usize), BadRecord> {
    let header = bytes
        .get(offset..offset + HEADER_BYTES)
        .ok_or(BadRecord::IncompleteHeader)?;
    let len = payload_len(header);
    let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    let start = offset + HEADER_BYTES;
    let payload = bytes.get(start..start + len).ok_or(BadRecord::PastTheEnd)?;
    if crc32fast::hash(payload) != crc {
        return Err(BadRecord::Checksum);
    }
    let record =
        postcard::from_bytes(payload).map_err(|e| BadRecord::Undecodable(e.to_string()))?;
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

    /// One record of 200,000 counters: a few megabytes.
    fn big_record() -> LogRecord {
        LogRecord {
            slots: (0..200_000)
                .map(|n| {
                    let id = CounterId::new(format!("counter-{n}")).unwrap();
                    let state = geocount_model::SlotState {
                        value: n,
                        version: 1,
                    };
                    (id, state.into())
                })
                .collect(),
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
        let big = big_record();
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

    /// Segment 1 holding five records, synced, and where each starts. With `reserved`, it
    /// keeps the space reserved ahead of its records (a crash); without, it ends at its last
    /// record (a disk that cannot reserve).
    fn five_records(dir: &Path, reserved: bool) -> Vec<usize> {
        let mut wal = create(dir, 1);
        let mut starts = Vec::new();
        for n in 0..5 {
            starts.push(wal.len() as usize);
            wal.append(&record(&format!("c{n}"), n, n as u64 + 1))
                .unwrap();
        }
        wal.sync().unwrap();
        if !reserved {
            fs::OpenOptions::new()
                .write(true)
                .open(segment_path(dir, 1))
                .unwrap()
                .set_len(wal.len())
                .unwrap();
        }
        starts
    }

    /// Changes segment 1 with `damage`, then checks that replay refuses it as corrupt at
    /// `offset` and leaves the file as it was.
    fn assert_refused(dir: &Path, offset: usize, damage: impl FnOnce(&mut Vec<u8>)) {
        let path = segment_path(dir, 1);
        let mut bytes = fs::read(&path).unwrap();
        damage(&mut bytes);
        fs::write(&path, &bytes).unwrap();
        let err = replay_all(dir).unwrap_err();
        assert!(
            matches!(&err, StorageError::Corrupt { offset: at, .. } if *at == offset as u64),
            "{err}"
        );
        assert!(
            fs::read(&path).unwrap() == bytes,
            "the file is left as it was"
        );
    }

    #[test]
    fn a_flipped_byte_in_a_middle_record_is_corruption() {
        for reserved in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let starts = five_records(dir.path(), reserved);
            assert_refused(dir.path(), starts[2], |bytes| {
                bytes[starts[2] + HEADER_BYTES + 3] ^= 0x01;
            });
        }
    }

    /// A damaged length claims a record running over the records after it: inside the file
    /// (its reserved space), or past its end.
    #[test]
    fn a_flipped_bit_in_a_middle_length_is_corruption() {
        for (reserved, bit) in [(true, 8), (false, 8), (true, 31), (false, 31)] {
            let dir = tempfile::tempdir().unwrap();
            let starts = five_records(dir.path(), reserved);
            let len = fs::metadata(segment_path(dir.path(), 1)).unwrap().len();
            assert_refused(dir.path(), starts[1], |bytes| {
                let field = starts[1]..starts[1] + 4;
                let claimed =
                    u32::from_le_bytes(bytes[field.clone()].try_into().unwrap()) ^ (1 << bit);
                let claimed_end = (starts[1] + HEADER_BYTES) as u64 + u64::from(claimed);
                assert_eq!(
                    claimed_end <= len,
                    reserved && bit == 8,
                    "inside the file only within the reserved space"
                );
                assert!(claimed_end > starts[4] as u64, "over the records after it");
                bytes[field].copy_from_slice(&claimed.to_le_bytes());
            });
        }
    }

    /// A length damaged shorter leaves the rest of its record, then the records after it.
    #[test]
    fn a_shortened_middle_length_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let starts = five_records(dir.path(), true);
        assert_refused(dir.path(), starts[3], |bytes| bytes[starts[3]] -= 1);
    }

    /// The last record written whole then damaged cannot be told from one torn, but a damaged
    /// record with a valid checksum was written whole.
    #[test]
    fn an_undecodable_last_record_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let starts = five_records(dir.path(), true);
        let end = fs::read(segment_path(dir.path(), 1)).unwrap()[starts[4]..]
            .iter()
            .rposition(|&b| b != 0)
            .unwrap()
            + starts[4]
            + 1;
        assert_refused(dir.path(), starts[4], |bytes| {
            // A payload of one byte that is no record, with its checksum.
            bytes[starts[4] + HEADER_BYTES..end].fill(0);
            bytes[starts[4] + HEADER_BYTES] = 0xff;
            bytes[starts[4]..starts[4] + 4].copy_from_slice(&1u32.to_le_bytes());
            let crc = crc32fast::hash(&[0xff]);
            bytes[starts[4] + 4..starts[4] + 8].copy_from_slice(&crc.to_le_bytes());
        });
    }

    #[test]
    fn a_scan_reads_without_cutting() {
        let dir = tempfile::tempdir().unwrap();
        let starts = five_records(dir.path(), false);
        let path = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&path).unwrap();
        bytes.truncate(bytes.len() - 2);
        fs::write(&path, &bytes).unwrap();
        let mut records = 0;
        let scan = scan_segment(&OsDisk, dir.path(), 1, true, |_| records += 1).unwrap();
        assert_eq!(
            (scan.records, scan.record_bytes, scan.file_bytes),
            (4, starts[4] as u64, bytes.len() as u64)
        );
        assert!(
            matches!(scan.end, SegmentEnd::Torn { offset, .. } if offset == starts[4] as u64),
            "{scan:?}"
        );
        assert_eq!(records, 4);
        assert!(scan.corruption().is_none());
        assert!(fs::read(&path).unwrap() == bytes);
        // The same bytes in an older segment are corruption.
        let older = scan_segment(&OsDisk, dir.path(), 1, false, |_| {}).unwrap();
        assert!(older.corruption().is_some(), "{older:?}");
    }

    /// Telling a torn record from corruption looks for a whole record at every offset of the
    /// torn one: a few megabytes must take a moment, not minutes.
    #[test]
    fn a_large_torn_record_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let mut wal = create(dir.path(), 1);
        let big = big_record();
        wal.append(&record("a", 1, 1)).unwrap();
        let first = wal.len();
        wal.append(&big).unwrap();
        wal.sync().unwrap();
        let torn_at = first + (wal.len() - first) / 2;
        drop(wal);
        let path = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&path).unwrap();
        bytes[torn_at as usize..].fill(0);
        fs::write(&path, &bytes).unwrap();
        let started = std::time::Instant::now();
        assert_eq!(replay_all(dir.path()).unwrap(), vec![record("a", 1, 1)]);
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
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
