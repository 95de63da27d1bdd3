//! This node's copy of a peer slot's idempotency keys on its disk ([`crate::peer::keys`]), so
//! that the copy outlives this node's restart: a peer that loses its disk while this node
//! restarts still gets its keys back.
//!
//! `peer-keys-<slot>-<n>.keys` in the data directory holds records `[payload length: u32
//! LE][crc32 of payload: u32 LE][payload: postcard]`, each the keys taken in since the record
//! before and the reach after them, appended and fsynced. Every prefix of a file is thus a copy
//! complete up to its last record's reach, and reading stops at a torn or damaged record. A new
//! file (`n + 1`) gets the whole copy at startup and once a file holds more than twice as many
//! keys and records as the copy holds keys (expired keys, keys sent again, and records of a
//! new reach alone), and the older files go once it is durable.
//! Reading takes every file: each is complete up to its own reach, so together they are
//! complete up to the highest.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use geocount_model::IdempotencyRecord;
use serde::{Deserialize, Serialize};

use crate::error::StorageError;
use crate::peer::keys::Unpersisted;
use crate::storage::{AppendFile, Disk};

/// A record's header: the payload's length and its crc32.
const HEADER_BYTES: usize = 8;

/// Records a file may hold beyond twice the keys held before it is written anew.
const SLACK_RECORDS: u64 = 1024;

/// One record of a key file.
#[derive(Debug, Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct KeyFileRecord {
    keys: Vec<(String, IdempotencyRecord)>,
    reach: u64,
}

/// A [`KeyFileRecord`] to write, borrowing its keys from where they are held.
#[derive(Serialize)]
struct KeyFileRecordOf<K> {
    keys: K,
    reach: u64,
}

/// Held keys, encoded as the sequence a `Vec<(String, IdempotencyRecord)>` decodes.
struct HeldKeys<I>(I);

impl<'a, I> Serialize for HeldKeys<I>
where
    I: ExactSizeIterator<Item = &'a (Box<str>, IdempotencyRecord)> + Clone,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.clone())
    }
}

/// The key files of one peer slot.
#[derive(Debug)]
pub struct KeyFile {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    slot: String,
    /// The newest file's number.
    number: u64,
    /// The file appended to (`None` until the copy is first written whole).
    file: Option<Box<dyn AppendFile>>,
    /// Keys and records written to it.
    written: u64,
}

/// A copy read back: its keys, oldest first, and how far they reach.
#[derive(Debug, Default)]
pub struct ReadBack {
    /// The keys, oldest first (each file's, merged: a key may come more than once).
    pub keys: Vec<(String, IdempotencyRecord)>,
    /// The highest reach of the files.
    pub reach: u64,
}

impl KeyFile {
    /// Reads the key files of `slot` in `dir`; the copy read back is written whole to a new
    /// file before anything is appended.
    pub fn read(
        disk: Arc<dyn Disk>,
        dir: &Path,
        slot: &str,
    ) -> Result<(Self, ReadBack), StorageError> {
        let numbers = numbers(&*disk, dir, slot)?;
        let mut back = ReadBack::default();
        for &number in &numbers {
            let path = path(dir, slot, number);
            let bytes = disk
                .read(&path)
                .map_err(|e| StorageError::io(format!("reading {}", path.display()), e))?;
            let (keys, reach, complete) = decode(&bytes);
            if !complete {
                tracing::warn!(file = %path.display(), reach, "a peer's key file ends in a torn or damaged record: read up to it");
            }
            back.keys.extend(keys);
            back.reach = back.reach.max(reach);
        }
        back.keys.sort_by_key(|(_, record)| record.created_at_ms);
        let file = Self {
            disk,
            dir: dir.to_owned(),
            slot: slot.to_owned(),
            number: numbers.last().copied().unwrap_or(0),
            file: None,
            written: 0,
        };
        Ok((file, back))
    }

    /// Whether the next write should be the whole copy of `held` keys, in a new file.
    pub fn wants_rewrite(&self, held: usize) -> bool {
        self.file.is_none() || self.written > 2 * held as u64 + SLACK_RECORDS
    }

    /// Appends `batch` and fsyncs it.
    pub fn append(&mut self, batch: &Unpersisted) -> Result<(), StorageError> {
        let path = path(&self.dir, &self.slot, self.number);
        let file = self.file.as_mut().ok_or_else(|| {
            StorageError::io(
                format!("appending to {}", path.display()),
                std::io::Error::other("the copy was not written whole first"),
            )
        })?;
        file.write_all(&batch.record)
            .and_then(|()| file.sync_data())
            .map_err(|e| StorageError::io(format!("appending to {}", path.display()), e))?;
        // A record of a reach alone counts too: it grows the file as well.
        self.written += batch.keys + 1;
        Ok(())
    }

    /// Writes the whole copy `all` to a new file, fsynced with its directory entry, then
    /// removes the older files.
    pub fn rewrite(&mut self, all: &Unpersisted) -> Result<(), StorageError> {
        let number = self.number + 1;
        let path = path(&self.dir, &self.slot, number);
        let io = |e| StorageError::io(format!("writing {}", path.display()), e);
        let mut file = self.disk.open_append(&path).map_err(io)?;
        file.set_len(0)
            .and_then(|()| file.write_all(&all.record))
            .and_then(|()| file.sync_data())
            .and_then(|()| self.disk.sync_dir(&self.dir))
            .map_err(io)?;
        self.number = number;
        self.file = Some(file);
        self.written = all.keys + 1;
        for older in numbers(&*self.disk, &self.dir, &self.slot)? {
            if older < number {
                let old = self::path(&self.dir, &self.slot, older);
                self.disk
                    .remove_file(&old)
                    .map_err(|e| StorageError::io(format!("removing {}", old.display()), e))?;
            }
        }
        self.disk
            .sync_dir(&self.dir)
            .map_err(|e| StorageError::io(format!("syncing {}", self.dir.display()), e))
    }
}

/// The path of `slot`'s key file number `number` in `dir`.
fn path(dir: &Path, slot: &str, number: u64) -> PathBuf {
    dir.join(format!("peer-keys-{slot}-{number:020}.keys"))
}

/// The numbers of `slot`'s key files in `dir`, oldest first.
fn numbers(disk: &dyn Disk, dir: &Path, slot: &str) -> Result<Vec<u64>, StorageError> {
    let names = disk
        .file_names(dir)
        .map_err(|e| StorageError::io(format!("listing {}", dir.display()), e))?;
    let prefix = format!("peer-keys-{slot}-");
    let mut found: Vec<u64> = names
        .iter()
        .filter_map(|name| {
            name.strip_prefix(&prefix)?
                .strip_suffix(".keys")?
                .parse()
                .ok()
        })
        .collect();
    found.sort_unstable();
    Ok(found)
}

/// A record of `keys`, oldest first, and `reach`, encoded straight from where they are held.
pub fn encode<'a>(
    keys: impl ExactSizeIterator<Item = &'a (Box<str>, IdempotencyRecord)> + Clone,
    reach: u64,
) -> Vec<u8> {
    let record = KeyFileRecordOf {
        keys: HeldKeys(keys),
        reach,
    };
    let bytes = postcard::to_extend(&record, vec![0; HEADER_BYTES]).expect("a key record encodes");
    framed(bytes)
}

/// `bytes`, a payload after [`HEADER_BYTES`] of room, with its header filled in.
fn framed(mut bytes: Vec<u8>) -> Vec<u8> {
    let payload = &bytes[HEADER_BYTES..];
    let (len, crc) = (payload.len() as u32, crc32fast::hash(payload));
    bytes[..4].copy_from_slice(&len.to_le_bytes());
    bytes[4..HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// The keys of the records `bytes` holds, for tests.
#[cfg(test)]
pub fn keys_in(bytes: &[u8]) -> Vec<(String, IdempotencyRecord)> {
    let (keys, _, complete) = decode(bytes);
    assert!(complete, "whole records");
    keys
}

/// The keys of every whole record of `bytes`, the last one's reach, and whether every byte
/// was a whole record.
fn decode(bytes: &[u8]) -> (Vec<(String, IdempotencyRecord)>, u64, bool) {
    let (mut keys, mut reach, mut offset) = (Vec::new(), 0, 0);
    while offset < bytes.len() {
        let Some(header) = bytes.get(offset..offset + HEADER_BYTES) else {
            return (keys, reach, false);
        };
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let start = offset + HEADER_BYTES;
        let record = bytes
            .get(start..start.saturating_add(len))
            .filter(|payload| crc32fast::hash(payload) == crc)
            .and_then(|payload| postcard::from_bytes::<KeyFileRecord>(payload).ok());
        let Some(record) = record else {
            return (keys, reach, false);
        };
        keys.extend(record.keys);
        reach = record.reach;
        offset = start + len;
    }
    (keys, reach, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::OsDisk;
    use geocount_model::{CounterId, SlotState};

    fn record() -> IdempotencyRecord {
        IdempotencyRecord {
            counter: CounterId::new("c").unwrap(),
            delta: 1,
            item: None,
            outcome: SlotState {
                value: 1,
                version: 1,
            },
            created_at_ms: 10,
        }
    }

    fn batch(keys: &[&str], reach: u64) -> Unpersisted {
        let keys: Vec<(Box<str>, _)> = (keys.iter()).map(|&key| (key.into(), record())).collect();
        Unpersisted {
            record: encode(keys.iter(), reach),
            keys: keys.len() as u64,
            reach,
            through: 0,
        }
    }

    /// A record encoded from held keys is the one their owned copy encodes to.
    #[test]
    fn held_keys_encode_as_owned_ones() {
        let held = batch(&["a", "bb", "ccc"], 7);
        let owned = KeyFileRecord {
            keys: (["a", "bb", "ccc"].iter())
                .map(|&key| (key.to_owned(), record()))
                .collect(),
            reach: 7,
        };
        let mut bytes = vec![0; HEADER_BYTES];
        bytes.extend(postcard::to_allocvec(&owned).unwrap());
        assert_eq!(held.record, framed(bytes));
        let empty = batch(&[], 9);
        assert_eq!(decode(&empty.record), (Vec::new(), 9, true));
    }

    fn names(back: &ReadBack) -> Vec<&str> {
        back.keys.iter().map(|(key, _)| key.as_str()).collect()
    }

    /// Appended records come back with the last reach; a damaged tail is cut off with its
    /// reach, and a new file replaces the old ones.
    #[test]
    fn a_copy_comes_back_up_to_its_last_whole_record() {
        let dir = tempfile::tempdir().unwrap();
        let disk: Arc<dyn Disk> = Arc::new(OsDisk);
        let (mut file, back) = KeyFile::read(disk.clone(), dir.path(), "DC_A_VAL_1").unwrap();
        assert!(back.keys.is_empty() && back.reach == 0);
        assert!(file.wants_rewrite(0));
        file.rewrite(&batch(&["a"], 3)).unwrap();
        file.append(&batch(&["b"], 5)).unwrap();
        assert!(!file.wants_rewrite(2));
        let (_, back) = KeyFile::read(disk.clone(), dir.path(), "DC_A_VAL_1").unwrap();
        assert_eq!((names(&back), back.reach), (vec!["a", "b"], 5));
        assert!(
            KeyFile::read(disk.clone(), dir.path(), "DC_A_VAL_2")
                .unwrap()
                .1
                .keys
                .is_empty()
        );

        file.append(&batch(&["c"], 8)).unwrap();
        let path = path(dir.path(), "DC_A_VAL_1", 1);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let (mut file, back) = KeyFile::read(disk.clone(), dir.path(), "DC_A_VAL_1").unwrap();
        assert_eq!((names(&back), back.reach), (vec!["a", "b"], 5));
        file.rewrite(&batch(&["a", "b"], 5)).unwrap();
        assert!(!path.exists(), "the older file is gone");
        let (_, back) = KeyFile::read(disk, dir.path(), "DC_A_VAL_1").unwrap();
        assert_eq!((names(&back), back.reach), (vec!["a", "b"], 5));
    }

    /// Records of a new reach alone grow the file too, until it is written anew.
    #[test]
    fn a_file_of_reaches_alone_is_written_anew() {
        let dir = tempfile::tempdir().unwrap();
        let (mut file, _) = KeyFile::read(Arc::new(OsDisk), dir.path(), "DC_A_VAL_1").unwrap();
        file.rewrite(&batch(&["a"], 3)).unwrap();
        file.written = 2 + SLACK_RECORDS;
        assert!(!file.wants_rewrite(1));
        file.append(&batch(&[], 4)).unwrap();
        assert!(file.wants_rewrite(1));
    }
}
