//! `shard-node check`: what a data directory holds, and whether a start would accept it, read
//! without changing a byte of it.
//!
//! The log is read with [`wal::scan_segment`], the decoding replay uses, which never cuts a
//! segment. The store's file is opened read-only. A store a crash left must be repaired before
//! redb reads it (its read-only open refuses it), so the store is opened over a layer in memory
//! that takes redb's writes: the repair happens there, never in the file.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use geocount_model::SlotState;
use geocount_sync::DescriptionTable;

use crate::engine::records::RecordsEnd;
use crate::engine::slot_table::SlotTable;
use crate::engine::store::{STORE_FILE, Store};
use crate::engine::wal::{self, SegmentScan};
use crate::error::StorageError;
use crate::startup::recovery::RESTORE_MARKER;
use crate::storage::{AppendFile, Disk, OsDisk, STORE_CACHE_BYTES};

/// How many counters the report lists by name; the rest are counted.
const LISTED_COUNTERS: usize = 100;

/// What a data directory holds.
#[derive(Debug)]
pub struct CheckReport {
    /// The data directory.
    pub data_dir: PathBuf,
    /// What the checkpoint store holds.
    pub store: StoreReport,
    /// Every log segment, oldest first.
    pub segments: Vec<SegmentScan>,
    /// Whether the directory holds `restore.pending`: a restore of the slot from its
    /// datacenter has not finished.
    pub restore_pending: bool,
    /// Every counter's slot state as a start would recover it: the store with the log replayed
    /// over it, up to the first bad record. In the order first seen.
    pub counters: Vec<(String, SlotState)>,
    /// Counter descriptions, the store's and the log's.
    pub descriptions: usize,
    /// Idempotency keys recorded in the log, up to the first bad record.
    pub log_idempotency_keys: usize,
    /// Whether a start would accept it all.
    pub verdict: Verdict,
}

/// What the checkpoint store holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreReport {
    /// No store: a directory no node has started in.
    Missing,
    /// Read.
    Read {
        /// Counters with a slot record.
        counters: usize,
        /// Counter descriptions.
        descriptions: usize,
        /// Idempotency keys not yet deleted.
        idempotency_keys: usize,
        /// Whether it was closed cleanly; if not (a crash), a start repairs it, which the check
        /// does in memory only.
        closed_cleanly: bool,
    },
    /// redb cannot read it.
    Unreadable {
        /// What redb said.
        reason: String,
    },
}

/// Whether a start would accept the data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Everything reads; a torn tail or reserved space a start cuts off is no damage.
    Whole,
    /// A start would refuse it.
    Corrupt {
        /// The damaged file.
        file: String,
        /// Where in a log segment its first bad record starts (none for the store).
        offset: Option<u64>,
        /// What is wrong.
        reason: String,
    },
}

impl Verdict {
    /// Whether a start would accept it.
    pub fn is_whole(&self) -> bool {
        matches!(self, Verdict::Whole)
    }
}

/// Why a data directory could not be checked at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The path is no directory.
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    /// A running node holds the store.
    #[error("{0} is open in a running node: stop the node first")]
    InUse(PathBuf),
    /// A file could not be read.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Reads the data directory `data_dir` without changing it and reports what it holds.
pub fn check(data_dir: &Path) -> Result<CheckReport, CheckError> {
    if !data_dir.is_dir() {
        return Err(CheckError::NotADirectory(data_dir.to_owned()));
    }
    let disk = ReadOnlyDisk;
    let mut table = SlotTable::default();
    let mut descriptions = DescriptionTable::default();
    let store_path = data_dir.join(STORE_FILE);
    let store = read_store(&disk, &store_path, &mut table, &mut descriptions)?;
    let mut verdict = match &store {
        StoreReport::Unreadable { reason } => Verdict::Corrupt {
            file: store_path.display().to_string(),
            offset: None,
            reason: reason.clone(),
        },
        _ => Verdict::Whole,
    };

    let numbers = wal::segments(&disk, data_dir)?;
    let mut segments = Vec::with_capacity(numbers.len());
    let mut log_idempotency_keys = 0;
    // A start reads nothing past the first bad record: neither does the state reported.
    let mut replaying = true;
    for (i, &number) in numbers.iter().enumerate() {
        let newest = i + 1 == numbers.len();
        let scan = wal::scan_segment(&disk, data_dir, number, newest, |record| {
            if !replaying {
                return;
            }
            for (id, slot) in record.slots {
                table.apply_logged(id, slot);
            }
            for description in record.descriptions {
                descriptions.merge(description);
            }
            log_idempotency_keys += record.idempotency.len();
        })?;
        if let Some(StorageError::Corrupt {
            file,
            offset,
            reason,
        }) = scan.corruption()
        {
            replaying = false;
            if verdict.is_whole() {
                verdict = Verdict::Corrupt {
                    file,
                    offset: Some(offset),
                    reason,
                };
            }
        }
        segments.push(scan);
    }

    Ok(CheckReport {
        data_dir: data_dir.to_owned(),
        store,
        segments,
        restore_pending: data_dir.join(RESTORE_MARKER).exists(),
        counters: table
            .iter()
            .map(|(id, record)| (id.to_owned(), record.state))
            .collect(),
        descriptions: descriptions.len(),
        log_idempotency_keys,
        verdict,
    })
}

/// Loads the store at `path` into `table` and `descriptions`, if there is one.
fn read_store(
    disk: &ReadOnlyDisk,
    path: &Path,
    table: &mut SlotTable,
    descriptions: &mut DescriptionTable,
) -> Result<StoreReport, CheckError> {
    if !disk
        .exists(path)
        .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))?
    {
        return Ok(StoreReport::Missing);
    }
    // redb's read-only open refuses a store held by a running node, and one that needs a
    // repair; it changes nothing either way.
    let closed_cleanly = match redb::Builder::new().open_read_only(path) {
        Ok(_) => true,
        Err(redb::DatabaseError::RepairAborted) => false,
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
            return Err(CheckError::InUse(path.to_owned()));
        }
        Err(error) => {
            return Ok(StoreReport::Unreadable {
                reason: error.to_string(),
            });
        }
    };
    let stored = Store::open(disk, path).and_then(|store| {
        let stored = store.load();
        store.close()?;
        stored
    });
    let stored = match stored {
        Ok(stored) => stored,
        Err(StorageError::Io { context, source }) => {
            return Err(StorageError::Io { context, source }.into());
        }
        Err(error) => {
            return Ok(StoreReport::Unreadable {
                reason: error.to_string(),
            });
        }
    };
    let report = StoreReport::Read {
        counters: stored.slots.len(),
        descriptions: stored.descriptions.len(),
        idempotency_keys: stored.idempotency.len(),
        closed_cleanly,
    };
    for (id, record) in stored.slots {
        table.merge_owned(id, record);
    }
    for description in stored.descriptions {
        descriptions.merge(description);
    }
    Ok(report)
}

/// `n` things, in the singular for one.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "data directory: {}", self.data_dir.display())?;
        match &self.store {
            StoreReport::Missing => writeln!(f, "store: none")?,
            StoreReport::Read {
                counters,
                descriptions,
                idempotency_keys,
                closed_cleanly,
            } => writeln!(
                f,
                "store: {STORE_FILE}: {}, {}, {}; {}",
                count(*counters, "counter", "counters"),
                count(*descriptions, "description", "descriptions"),
                count(*idempotency_keys, "idempotency key", "idempotency keys"),
                if *closed_cleanly {
                    "closed cleanly"
                } else {
                    "not closed cleanly (a start repairs it; the check did so in memory only)"
                }
            )?,
            StoreReport::Unreadable { reason } => {
                writeln!(f, "store: {STORE_FILE}: unreadable: {reason}")?;
            }
        }
        if self.segments.is_empty() {
            writeln!(f, "log: no segments")?;
        }
        for scan in &self.segments {
            let name = scan.path.file_name().unwrap_or_default().to_string_lossy();
            write!(
                f,
                "log segment {name}: {} in {} bytes",
                count(scan.records, "record", "records"),
                scan.record_bytes
            )?;
            let after = scan.file_bytes - scan.record_bytes;
            match &scan.end {
                RecordsEnd::Clean => writeln!(f)?,
                RecordsEnd::Reserved { .. } => {
                    writeln!(f, ", then {after} bytes of reserved space")?;
                }
                RecordsEnd::Torn { offset, reason } => writeln!(
                    f,
                    ", then a torn record at byte {offset} ({reason}; {after} bytes a start cuts off)"
                )?,
                RecordsEnd::Corrupt { offset, reason } => {
                    writeln!(f, ", then corrupt at byte {offset}: {reason}")?;
                }
            }
        }
        writeln!(
            f,
            "restore pending: {}",
            if self.restore_pending {
                "yes (restore.pending)"
            } else {
                "no"
            }
        )?;
        let replayed = if self.verdict.is_whole() {
            "the store with the log replayed over it"
        } else {
            "the store with the log replayed over it, up to the first bad record"
        };
        writeln!(
            f,
            "{} ({replayed}):",
            count(self.counters.len(), "counter", "counters")
        )?;
        for (id, state) in self.counters.iter().take(LISTED_COUNTERS) {
            writeln!(
                f,
                "  {id}: value {}, version {}",
                state.value, state.version
            )?;
        }
        if self.counters.len() > LISTED_COUNTERS {
            writeln!(f, "  and {} more", self.counters.len() - LISTED_COUNTERS)?;
        }
        writeln!(
            f,
            "{}, {} in the log",
            count(self.descriptions, "description", "descriptions"),
            count(
                self.log_idempotency_keys,
                "idempotency key",
                "idempotency keys"
            )
        )?;
        writeln!(f, "verdict: {}", self.verdict)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Whole => write!(f, "whole"),
            Verdict::Corrupt {
                file,
                offset: Some(offset),
                reason,
            } => write!(f, "corrupt: {file} at byte {offset}: {reason}"),
            Verdict::Corrupt {
                file,
                offset: None,
                reason,
            } => write!(f, "corrupt: {file}: {reason}"),
        }
    }
}

/// The operating system's files, read as they are: every change is refused, and the store
/// opens over a [`MemoryOverlay`].
#[derive(Debug, Clone, Copy, Default)]
struct ReadOnlyDisk;

fn refused(action: &str, path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("the check changes nothing: not {action} {}", path.display()),
    )
}

impl Disk for ReadOnlyDisk {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        Err(refused("creating", dir))
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        OsDisk.exists(path)
    }

    fn file_names(&self, dir: &Path) -> io::Result<Vec<String>> {
        OsDisk.file_names(dir)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        OsDisk.read(path)
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendFile>> {
        Err(refused("writing", path))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        Err(refused("removing", path))
    }

    fn rename(&self, from: &Path, _: &Path) -> io::Result<()> {
        Err(refused("renaming", from))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        Err(refused("syncing", dir))
    }

    fn open_database(&self, path: &Path) -> Result<redb::Database, redb::DatabaseError> {
        redb::Builder::new()
            .set_cache_size(STORE_CACHE_BYTES)
            .create_with_backend(MemoryOverlay::open(path)?)
    }
}

/// The unit the overlay copies a file in.
const PAGE: u64 = 4096;

/// A file read through a layer in memory: reads come from the file unless written since, and
/// writes go to memory only. It takes no locks: [`read_store`] first opens the store read-only,
/// which fails while a node holds it.
#[derive(Debug)]
struct MemoryOverlay {
    file: File,
    state: Mutex<Overlay>,
}

#[derive(Debug)]
struct Overlay {
    /// The storage's length.
    len: u64,
    /// The file's bytes from here on read as zeros: the storage was cut shorter since.
    file_end: u64,
    /// Pages written, by index.
    pages: HashMap<u64, Box<[u8]>>,
}

impl MemoryOverlay {
    fn open(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(Self {
            file,
            state: Mutex::new(Overlay {
                len,
                file_end: len,
                pages: HashMap::new(),
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, Overlay> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fills `out` with the file's bytes at `offset`, zeros from `file_end` on.
    fn read_file(&self, file_end: u64, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let from_file = file_end.saturating_sub(offset).min(out.len() as u64) as usize;
        self.file.read_exact_at(&mut out[..from_file], offset)?;
        out[from_file..].fill(0);
        Ok(())
    }
}

/// The pieces of the range of `len` bytes at `offset`, one per page touched: (page index,
/// offset within the page, offset within the range, length).
fn pieces(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let mut done = 0;
    std::iter::from_fn(move || {
        if done == len {
            return None;
        }
        let at = offset + done as u64;
        let within = (at % PAGE) as usize;
        let n = (PAGE as usize - within).min(len - done);
        let piece = (at / PAGE, within, done, n);
        done += n;
        Some(piece)
    })
}

impl redb::StorageBackend for MemoryOverlay {
    fn len(&self) -> io::Result<u64> {
        Ok(self.state().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let state = self.state();
        if offset + out.len() as u64 > state.len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        for (page, within, done, n) in pieces(offset, out.len()) {
            let chunk = &mut out[done..done + n];
            match state.pages.get(&page) {
                Some(bytes) => chunk.copy_from_slice(&bytes[within..within + n]),
                None => self.read_file(state.file_end, offset + done as u64, chunk)?,
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.state();
        if len < state.len {
            // What is cut off must read as zeros if the storage grows again.
            state.file_end = state.file_end.min(len);
            state.pages.retain(|&page, _| page * PAGE < len);
            if let Some(bytes) = state.pages.get_mut(&(len / PAGE)) {
                bytes[(len % PAGE) as usize..].fill(0);
            }
        }
        state.len = len;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut state = self.state();
        state.len = state.len.max(offset + data.len() as u64);
        let file_end = state.file_end;
        for (page, within, done, n) in pieces(offset, data.len()) {
            let bytes = match state.pages.entry(page) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => {
                    let mut copy = vec![0; PAGE as usize].into_boxed_slice();
                    self.read_file(file_end, page * PAGE, &mut copy)?;
                    entry.insert(copy)
                }
            };
            bytes[within..within + n].copy_from_slice(&data[done..done + n]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
