//! Folding a peer slot's replicated log ([`super::replica_log`]): its records, read from its
//! segments, merged by version into one record. Records are slot states, so the order they
//! are read in does not matter, nor a record read twice.

use std::collections::HashMap;
use std::path::Path;

use geocount_model::{CounterId, IdempotencyRecord, SlotRecord, VersionedDescription};

use crate::engine::wal::{self, LogRecord};
use crate::error::StorageError;
use crate::storage::Disk;

/// Folds `segments` of the log in `dir`; only the last of them may end in a torn record or
/// reserved space (the open segment), any other bad record is refused.
pub(super) fn fold_segments(
    disk: &dyn Disk,
    dir: &Path,
    segments: &[u64],
) -> Result<Fold, StorageError> {
    let mut fold = Fold::default();
    for (i, &segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        let scan = wal::scan_segment(disk, dir, segment, last, |record| fold.add(record))?;
        if let Some(corrupt) = scan.corruption() {
            return Err(corrupt);
        }
    }
    Ok(fold)
}

/// Records folded by version.
#[derive(Default)]
pub(super) struct Fold {
    slots: HashMap<CounterId, SlotRecord>,
    descriptions: HashMap<CounterId, VersionedDescription>,
    keys: HashMap<Box<str>, IdempotencyRecord>,
}

impl Fold {
    fn add(&mut self, record: LogRecord) {
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
        for (key, entry) in record.idempotency {
            match self.keys.get(&key) {
                Some(kept) if kept.created_at_ms >= entry.created_at_ms => {}
                _ => {
                    self.keys.insert(key, entry);
                }
            }
        }
    }

    /// The fold as one record, without the keys created before `keys_from_ms`.
    pub(super) fn into_record(self, keys_from_ms: u64) -> LogRecord {
        LogRecord {
            slots: self.slots.into_iter().collect(),
            descriptions: self.descriptions.into_values().collect(),
            idempotency: (self.keys.into_iter())
                .filter(|(_, entry)| entry.created_at_ms >= keys_from_ms)
                .collect(),
        }
    }
}
