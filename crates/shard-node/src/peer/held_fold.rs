//! A replicated log's records folded into one ([`crate::peer::held_log`]): each counter's
//! latest record, the latest description of each counter created, and each key's newest
//! record.
//!
//! A fold reads every key the log holds within the retention, so keys go in a list in the
//! order met, found by a table of their places that never moves a record as it grows.

use std::collections::HashMap;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use geocount_model::{CounterId, IdempotencyRecord, SlotRecord, VersionedDescription};
use hashbrown::HashTable;

use std::path::Path;

use crate::engine::wal::{self, LogRecord};
use crate::error::StorageError;
use crate::storage::Disk;

/// Folds `segments` of the log in `dir` into a fold with room for `size`; only the last of
/// them may end in a torn record or reserved space (the open segment), any other bad record
/// is refused. Records fold by version, so the order they are read in does not matter, nor
/// a record read twice.
pub(super) fn fold_segments(
    disk: &dyn Disk,
    dir: &Path,
    segments: &[u64],
    size: FoldSize,
) -> Result<Fold, StorageError> {
    let mut fold = Fold::with_room(size);
    for (i, &segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let scan = wal::scan_segment(disk, dir, segment, last, |record| fold.add(record))?;
        if let Some(corrupt) = scan.corruption() {
            return Err(corrupt);
        }
    }
    Ok(fold)
}

/// How many of each a fold holds: a hint for the next fold of the same log.
#[derive(Debug, Clone, Copy, Default)]
pub struct FoldSize {
    slots: usize,
    descriptions: usize,
    keys: usize,
}

/// Records folded by version.
pub struct Fold {
    // Seeded per process: the clients pick the counters and keys.
    slots: HashMap<CounterId, SlotRecord, RandomState>,
    descriptions: HashMap<CounterId, VersionedDescription, RandomState>,
    /// Each key once, with its newest record, in the order first met.
    keys: Vec<(Box<str>, IdempotencyRecord)>,
    /// Each key's place in `keys`, with its hash.
    index: HashTable<(u64, usize)>,
    hasher: RandomState,
}

impl Fold {
    /// An empty fold with room for as much as `size`.
    pub fn with_room(size: FoldSize) -> Self {
        let hasher = RandomState::default();
        Self {
            slots: HashMap::with_capacity_and_hasher(size.slots, hasher.clone()),
            descriptions: HashMap::with_capacity_and_hasher(size.descriptions, hasher.clone()),
            keys: Vec::with_capacity(size.keys),
            index: HashTable::with_capacity(size.keys),
            hasher,
        }
    }

    /// Folds `record` in.
    pub fn add(&mut self, record: LogRecord) {
        for (id, logged) in record.slots {
            self.slots.entry(id).or_default().apply_logged(logged);
        }
        for description in record.descriptions {
            let id = description.description.id.clone();
            match self.descriptions.get(&id) {
                Some(kept) if !kept.is_older_than(&description) => {}
                _ => {
                    self.descriptions.insert(id, description);
                }
            }
        }
        self.keys.reserve(record.idempotency.len());
        for (key, entry) in record.idempotency {
            self.add_key(key, entry);
        }
    }

    /// Keeps `entry` for `key` unless the record kept is as new.
    fn add_key(&mut self, key: Box<str>, entry: IdempotencyRecord) {
        let hash = self.hasher.hash_one(&*key);
        let keys = &mut self.keys;
        match self
            .index
            .entry(hash, |&(h, at)| h == hash && keys[at].0 == key, |&(h, _)| h)
        {
            hashbrown::hash_table::Entry::Occupied(kept) => {
                let kept = &mut keys[kept.get().1].1;
                if kept.created_at_ms < entry.created_at_ms {
                    *kept = entry;
                }
            }
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert((hash, keys.len()));
                keys.push((key, entry));
            }
        }
    }

    /// How many of each the fold holds.
    pub fn size(&self) -> FoldSize {
        FoldSize {
            slots: self.slots.len(),
            descriptions: self.descriptions.len(),
            keys: self.keys.len(),
        }
    }

    /// The fold as one record, without the keys created before `keys_from_ms`.
    pub fn into_record(self, keys_from_ms: u64) -> LogRecord {
        let mut keys = self.keys;
        keys.retain(|(_, entry)| entry.created_at_ms >= keys_from_ms);
        LogRecord {
            slots: self.slots.into_iter().collect(),
            descriptions: self.descriptions.into_values().collect(),
            idempotency: keys,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::SlotState;

    fn key(name: &str, version: u64, at: u64) -> (Box<str>, IdempotencyRecord) {
        let outcome = SlotState { value: 1, version };
        let entry = IdempotencyRecord {
            counter: CounterId::new("c").unwrap(),
            delta: 1,
            item: None,
            outcome,
            created_at_ms: at,
        };
        (name.into(), entry)
    }

    fn keys_of(keys: &[(Box<str>, IdempotencyRecord)]) -> Vec<(&str, u64)> {
        let mut found: Vec<_> = (keys.iter())
            .map(|(key, entry)| (&**key, entry.outcome.version))
            .collect();
        found.sort_unstable();
        found
    }

    /// Each key is kept once, with its newest record (the first met of two as new); a key
    /// past the retention is left out.
    #[test]
    fn each_key_keeps_its_newest_record() {
        let mut fold = Fold::with_room(FoldSize::default());
        let record = |idempotency| LogRecord {
            slots: Vec::new(),
            descriptions: Vec::new(),
            idempotency,
        };
        fold.add(record(vec![
            key("a", 1, 10),
            key("b", 2, 5),
            key("a", 3, 20),
        ]));
        fold.add(record(vec![
            key("a", 4, 15),
            key("b", 5, 5),
            key("c", 6, 30),
        ]));
        let many: Vec<_> = (0..10_000).map(|n| key(&format!("k{n}"), n, 40)).collect();
        fold.add(record(many));
        assert_eq!(fold.size().keys, 10_003);
        let folded = fold.into_record(10).idempotency;
        assert_eq!(folded.len(), 10_002, "b is past the retention");
        assert_eq!(keys_of(&folded[..2]), [("a", 3), ("c", 6)]);
        assert!(
            (folded[2..].iter())
                .all(|(key, entry)| **key == *format!("k{}", entry.outcome.version))
        );
    }
}
