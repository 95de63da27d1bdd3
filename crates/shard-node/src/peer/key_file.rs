//! This node's copy of a peer slot's idempotency keys on its disk ([`crate::peer::keys`]), so
//! that the copy outlives this node's restart: a peer that loses its disk while this node
//! restarts still gets its keys back.
//!
//! `peer-keys-<slot>-<n>.keys` in the data directory holds records in the framing of
//! [`crate::engine::records`], each the keys taken in since the record before and the reach
//! after them, appended and fsynced. Every prefix of a file is thus a copy complete up to its
//! last record's reach. A new file (`n + 1`) gets the whole copy at startup, after a failed
//! append, and once a file holds more than twice as many keys and records as the copy holds
//! keys (expired keys, keys sent again, and records of a new reach alone), and the older files
//! go once it is durable. So only a file's last record can be torn: reading cuts a torn tail
//! off and refuses corruption as the log does ([`StorageError::Corrupt`]).
//! Reading takes every file: each is complete up to its own reach, so together they are
//! complete up to the highest.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use geocount_model::IdempotencyRecord;
use serde::{Deserialize, Serialize};

use crate::engine::records::{self, HEADER_BYTES, RecordsEnd};
use crate::error::StorageError;
use crate::storage::{AppendFile, Disk};

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

/// What the key file lacks of a copy: the records it has not got, and the current reach.
#[derive(Debug)]
pub struct Unpersisted {
    /// The records not yet in the file, oldest first, and the reach after them, as a record
    /// of the file ([`encode`]).
    pub record: Vec<u8>,
    /// How many keys `record` holds.
    pub keys: u64,
    /// The reach written after them.
    pub reach: u64,
    /// The record number after the last of `keys`.
    pub through: u64,
}

/// The key files of one peer slot.
#[derive(Debug)]
pub struct KeyFile {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    slot: String,
    /// The newest file's number.
    number: u64,
    /// The file appended to (`None` until the copy is first written whole, and after a failed
    /// append: a record may be torn there, so nothing may follow it).
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
    /// file before anything is appended. A torn last record is cut off; a bad record that is
    /// no torn tail is corruption, refused as the log's is.
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
            let (keys, reach, end) = decode(&bytes, true);
            if let Some(corrupt) = end.corruption(&path) {
                return Err(corrupt);
            }
            if let RecordsEnd::Torn { offset, reason } = &end {
                tracing::warn!(file = %path.display(), offset, reason, reach, "cutting off a torn record at the end of a peer's key file");
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

    /// Appends `batch` and fsyncs it. On failure the file is appended to no more: the next
    /// write is the whole copy, in a new file.
    pub fn append(&mut self, batch: &Unpersisted) -> Result<(), StorageError> {
        let path = path(&self.dir, &self.slot, self.number);
        let file = self.file.as_mut().ok_or_else(|| {
            StorageError::io(
                format!("appending to {}", path.display()),
                std::io::Error::other("the copy was not written whole first"),
            )
        })?;
        if let Err(e) = file
            .write_all(&batch.record)
            .and_then(|()| file.sync_data())
        {
            self.file = None;
            return Err(StorageError::io(
                format!("appending to {}", path.display()),
                e,
            ));
        }
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
    records::seal(&mut bytes).expect("a key record under 4 GiB");
    bytes
}

/// The keys of the records `bytes` holds, for tests.
#[cfg(test)]
pub fn keys_in(bytes: &[u8]) -> Vec<(String, IdempotencyRecord)> {
    let (keys, _, end) = decode(bytes, false);
    assert_eq!(end, RecordsEnd::Clean, "whole records");
    keys
}

/// The keys of every whole record of `bytes`, the last one's reach, and how the records end
/// (a torn tail only if `tail_may_tear`).
fn decode(
    bytes: &[u8],
    tail_may_tear: bool,
) -> (Vec<(String, IdempotencyRecord)>, u64, RecordsEnd) {
    let (mut keys, mut reach) = (Vec::new(), 0);
    let scanned = records::scan(bytes, tail_may_tear, |record: KeyFileRecord| {
        keys.extend(record.keys);
        reach = record.reach;
    });
    (keys, reach, scanned.end)
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
        assert_eq!(
            decode(&empty.record, false),
            (Vec::new(), 9, RecordsEnd::Clean)
        );
    }

    fn names(back: &ReadBack) -> Vec<&str> {
        back.keys.iter().map(|(key, _)| key.as_str()).collect()
    }

    /// Appended records come back with the last reach; a torn tail is cut off with its
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
        bytes.truncate(bytes.len() - 1);
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

    /// Writes key file 1 of `DC_A_VAL_1` in `dir` holding `a`, `b` and `c` (reaches 3, 5, 8)
    /// as `change` leaves its bytes, given where each record starts; those starts.
    fn three_records(dir: &Path, change: impl FnOnce(&mut Vec<u8>, [usize; 3])) -> [usize; 3] {
        let (mut file, _) = KeyFile::read(Arc::new(OsDisk), dir, "DC_A_VAL_1").unwrap();
        let (a, b, c) = (batch(&["a"], 3), batch(&["b"], 5), batch(&["c"], 8));
        file.rewrite(&a).unwrap();
        file.append(&b).unwrap();
        file.append(&c).unwrap();
        let starts = [0, a.record.len(), a.record.len() + b.record.len()];
        let path = path(dir, "DC_A_VAL_1", 1);
        let mut bytes = std::fs::read(&path).unwrap();
        change(&mut bytes, starts);
        std::fs::write(&path, bytes).unwrap();
        starts
    }

    /// A damaged record that is no torn tail, in the middle or whole at the end, is
    /// corruption: reading refuses it as the log does, and names where it starts, rather
    /// than drop the keys after it.
    #[test]
    fn a_damaged_record_is_corruption() {
        for (damaged, flip_at) in [(1, 0), (1, 1), (2, 0), (2, 1)] {
            let dir = tempfile::tempdir().unwrap();
            let starts = three_records(dir.path(), |bytes, starts| {
                let end = starts.get(damaged + 1).copied().unwrap_or(bytes.len());
                // The payload's first byte, or its last.
                let at = if flip_at == 0 {
                    starts[damaged] + HEADER_BYTES
                } else {
                    end - 1
                };
                bytes[at] ^= 0x01;
            });
            let error = KeyFile::read(Arc::new(OsDisk), dir.path(), "DC_A_VAL_1").unwrap_err();
            let StorageError::Corrupt { offset, file, .. } = error else {
                panic!("record {damaged}: {error}");
            };
            assert!(file.ends_with(".keys"), "{file}");
            assert_eq!(offset, starts[damaged] as u64, "record {damaged}");
        }
    }

    /// A last record cut short by the end of the file is a torn tail: the copy comes back up
    /// to the record before it. Zeros after the last record are no record and end it too.
    #[test]
    fn a_torn_last_record_is_cut_off() {
        for zeros in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            three_records(dir.path(), |bytes, starts| {
                if zeros {
                    bytes.resize(4096, 0);
                } else {
                    bytes.truncate(starts[2] + HEADER_BYTES + 1);
                }
            });
            let (_, back) = KeyFile::read(Arc::new(OsDisk), dir.path(), "DC_A_VAL_1").unwrap();
            let whole = if zeros {
                (vec!["a", "b", "c"], 8)
            } else {
                (vec!["a", "b"], 5)
            };
            assert_eq!((names(&back), back.reach), whole, "zeros: {zeros}");
        }
    }

    /// A file whose writes fail.
    #[derive(Debug)]
    struct Failing;

    impl AppendFile for Failing {
        fn size(&self) -> std::io::Result<u64> {
            Ok(0)
        }
        fn write_all(&mut self, _: &[u8]) -> std::io::Result<()> {
            Err(std::io::Error::other("disk full"))
        }
        fn sync_data(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn set_len(&mut self, _: u64) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// After a failed append nothing more is appended to that file: the next write is the
    /// whole copy in a new one, so a record torn by the failure stays the file's last.
    #[test]
    fn a_failed_append_sends_the_next_write_to_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let (mut file, _) = KeyFile::read(Arc::new(OsDisk), dir.path(), "DC_A_VAL_1").unwrap();
        file.rewrite(&batch(&["a"], 3)).unwrap();
        file.file = Some(Box::new(Failing));
        assert!(!file.wants_rewrite(1));
        assert!(file.append(&batch(&["b"], 5)).is_err());
        assert!(file.wants_rewrite(2), "a new file next");
    }
}
