//! The checkpoint store (redb): the log's records are folded in here periodically so that the log
//! can be deleted and restart does not replay history.

use std::mem::ManuallyDrop;
use std::path::Path;

use geocount_model::{CounterId, IdempotencyRecord, SlotRecord, VersionedDescription};
use redb::{Database, Key, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition};

use crate::error::StorageError;
use crate::storage::Disk;

const SLOTS: TableDefinition<&str, &[u8]> = TableDefinition::new("slot_records");
const DESCRIPTIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("descriptions");
/// Idempotency records by `(created_at_ms, key)`, so that expired ones go in one range.
const IDEMPOTENCY: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("idempotency_by_age");
/// Calls `each` with the key and the bytes of every row of `table`, in key order.
fn each_row<K: Key + 'static>(
    txn: &ReadTransaction,
    table: TableDefinition<K, &'static [u8]>,
    mut each: impl FnMut(K::SelfType<'_>, &[u8]) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    let rows = txn.open_table(table).map_err(store_error)?;
    for row in rows.iter().map_err(store_error)? {
        let (key, bytes) = row.map_err(store_error)?;
        each(key.value(), bytes.value())?;
    }
    Ok(())
}

/// Everything a checkpoint writes: the changes of log segments up to `through_segment`.
#[derive(Debug, Default)]
pub struct Checkpoint {
    /// The slot table's rows changed since the previous checkpoint. Only their indices are
    /// kept: their records are read from the table when the checkpoint is written, so a change
    /// is not copied a second time (a row may by then hold a newer record, which replaying the
    /// later log segments merges over harmlessly).
    pub rows: ChangedRows,
    /// Counters created since the previous checkpoint.
    pub descriptions: Vec<VersionedDescription>,
    /// Idempotency keys recorded since the previous checkpoint.
    pub idempotency_added: Vec<(Box<str>, IdempotencyRecord)>,
    /// Every idempotency record created before this time (unix ms) has expired.
    pub idempotency_expired_before_ms: Option<u64>,
    /// The newest log segment whose records this checkpoint holds.
    pub through_segment: u64,
}

/// A set of slot table rows, each listed once, in the order first marked.
#[derive(Debug, Default)]
pub struct ChangedRows {
    /// One bit per row of the table: set once listed.
    marked: Vec<u64>,
    rows: Vec<u32>,
}

impl ChangedRows {
    /// Adds row `index` (once).
    pub fn mark(&mut self, index: usize) {
        let (word, bit) = (index / 64, 1u64 << (index % 64));
        if word >= self.marked.len() {
            self.marked.resize(word + 1, 0);
        }
        if self.marked[word] & bit == 0 {
            self.marked[word] |= bit;
            self.rows.push(index as u32);
        }
    }

    /// The rows, in the order first marked.
    pub fn rows(&self) -> &[u32] {
        &self.rows
    }

    /// How many rows are listed.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl Checkpoint {
    /// Whether the checkpoint would write nothing.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
            && self.descriptions.is_empty()
            && self.idempotency_added.is_empty()
            && self.idempotency_expired_before_ms.is_none()
    }

    /// Folds a later checkpoint into this one (used to retry a checkpoint that failed).
    pub fn absorb(&mut self, later: Checkpoint) {
        for &row in later.rows.rows() {
            self.rows.mark(row as usize);
        }
        self.descriptions.extend(later.descriptions);
        self.idempotency_added.extend(later.idempotency_added);
        self.idempotency_expired_before_ms = self
            .idempotency_expired_before_ms
            .max(later.idempotency_expired_before_ms);
        self.through_segment = self.through_segment.max(later.through_segment);
    }
}

/// How many rows a checkpoint encodes per hold of the slot table's read lock, so that the
/// commit loop's installs wait at most that long.
const ROWS_PER_LOCK: usize = 4_096;

/// Where a checkpoint reads the records of its changed rows (the slot table, shared with the
/// commit loop): the store names rows by index and never holds the table itself.
pub trait RowSource: Send + Sync {
    /// Calls `each` with the id and record of every row of `rows`, in order, under one hold of
    /// the source's lock.
    fn visit_rows(&self, rows: &[u32], each: &mut dyn FnMut(&str, &SlotRecord));
}

/// The store's file name in a node's data directory.
pub const STORE_FILE: &str = "store.redb";

/// The open redb database.
///
/// Dropping a `Store` is a crash: the database is left as a kill -9 would leave it, and only
/// [`Store::close`] closes it cleanly. redb's own drop would flush on the way out, which under
/// a simulated crash would save what a real crash loses.
#[derive(Debug)]
pub struct Store {
    db: ManuallyDrop<Database>,
}

/// What the store held at startup.
#[derive(Debug, Default)]
pub struct StoredState {
    /// Every slot record.
    pub slots: Vec<(CounterId, SlotRecord)>,
    /// Every counter description.
    pub descriptions: Vec<VersionedDescription>,
    /// Every idempotency record not yet deleted, oldest first.
    pub idempotency: Vec<(Box<str>, IdempotencyRecord)>,
}

fn store_error(e: impl Into<redb::Error>) -> StorageError {
    StorageError::Store(e.into())
}

impl Store {
    /// Opens (or creates) the store at `path` on `disk`. redb locks the file, so two nodes
    /// cannot share a data directory.
    pub fn open(disk: &dyn Disk, path: &Path) -> Result<Self, StorageError> {
        let db = disk.open_database(path).map_err(store_error)?;
        let txn = db.begin_write().map_err(store_error)?;
        txn.open_table(SLOTS).map_err(store_error)?;
        txn.open_table(DESCRIPTIONS).map_err(store_error)?;
        txn.open_table(IDEMPOTENCY).map_err(store_error)?;
        txn.commit().map_err(store_error)?;
        Ok(Self {
            db: ManuallyDrop::new(db),
        })
    }

    /// Closes the database cleanly (a graceful stop).
    pub fn close(self) -> Result<(), StorageError> {
        ManuallyDrop::into_inner(self.db)
            .close()
            .map_err(store_error)
    }

    /// Reads everything the store holds.
    pub fn load(&self) -> Result<StoredState, StorageError> {
        let txn = self.db.begin_read().map_err(store_error)?;
        let mut state = StoredState::default();
        each_row(&txn, SLOTS, |id, bytes| {
            let record: SlotRecord = postcard::from_bytes(bytes)?;
            state.slots.push((CounterId::new(id)?, record));
            Ok(())
        })?;
        each_row(&txn, DESCRIPTIONS, |_, bytes| {
            state.descriptions.push(postcard::from_bytes(bytes)?);
            Ok(())
        })?;
        each_row(&txn, IDEMPOTENCY, |(_, key), bytes| {
            let record = postcard::from_bytes(bytes)?;
            state.idempotency.push((key.into(), record));
            Ok(())
        })?;
        Ok(state)
    }

    /// Writes a checkpoint in one durable transaction, reading its rows' records from `rows`.
    pub fn write(&self, checkpoint: &Checkpoint, rows: &dyn RowSource) -> Result<(), StorageError> {
        let txn = self.db.begin_write().map_err(store_error)?;
        {
            let mut slots = txn.open_table(SLOTS).map_err(store_error)?;
            // Each chunk is encoded under the read lock into one buffer: (id end, record end)
            // offsets, then inserted without it.
            let mut buffer = Vec::new();
            let mut ends = Vec::with_capacity(ROWS_PER_LOCK);
            for chunk in checkpoint.rows.rows().chunks(ROWS_PER_LOCK) {
                buffer.clear();
                ends.clear();
                let mut encoded = Ok(());
                rows.visit_rows(chunk, &mut |id, record| {
                    if encoded.is_err() {
                        return;
                    }
                    buffer.extend_from_slice(id.as_bytes());
                    let id_end = buffer.len();
                    match postcard::to_extend(record, std::mem::take(&mut buffer)) {
                        Ok(extended) => buffer = extended,
                        Err(error) => encoded = Err(error),
                    }
                    ends.push((id_end, buffer.len()));
                });
                encoded?;
                let mut start = 0;
                for &(id_end, end) in &ends {
                    let id = std::str::from_utf8(&buffer[start..id_end])
                        .expect("ids are copied from strings");
                    slots
                        .insert(id, &buffer[id_end..end])
                        .map_err(store_error)?;
                    start = end;
                }
            }
            let mut descriptions = txn.open_table(DESCRIPTIONS).map_err(store_error)?;
            for description in &checkpoint.descriptions {
                let bytes = postcard::to_allocvec(description)?;
                descriptions
                    .insert(description.description.id.as_str(), bytes.as_slice())
                    .map_err(store_error)?;
            }
            let mut idempotency = txn.open_table(IDEMPOTENCY).map_err(store_error)?;
            if let Some(before) = checkpoint.idempotency_expired_before_ms {
                idempotency
                    .retain_in(..(before, ""), |_, _| false)
                    .map_err(store_error)?;
            }
            for (key, record) in &checkpoint.idempotency_added {
                let bytes = postcard::to_allocvec(record)?;
                idempotency
                    .insert((record.created_at_ms, &**key), bytes.as_slice())
                    .map_err(store_error)?;
            }
        }
        txn.commit().map_err(store_error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::OsDisk;
    use geocount_model::SlotState;

    fn record(created_at_ms: u64) -> IdempotencyRecord {
        IdempotencyRecord {
            counter: CounterId::new("c").unwrap(),
            delta: 1,
            item: None,
            outcome: SlotState::default(),
            created_at_ms,
        }
    }

    fn keys(store: &Store) -> Vec<(Box<str>, u64)> {
        let stored = store.load().unwrap().idempotency;
        stored
            .into_iter()
            .map(|(key, record)| (key, record.created_at_ms))
            .collect()
    }

    #[test]
    fn keys_are_listed_oldest_first_and_expire_by_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STORE_FILE);
        let store = Store::open(&OsDisk, &path).unwrap();
        let checkpoint = Checkpoint {
            idempotency_added: vec![("late".into(), record(200)), ("early".into(), record(100))],
            ..Checkpoint::default()
        };
        store.write(&checkpoint, &NoRows).unwrap();
        assert_eq!(
            keys(&store),
            vec![("early".into(), 100), ("late".into(), 200)]
        );

        let checkpoint = Checkpoint {
            idempotency_added: vec![("new".into(), record(300))],
            idempotency_expired_before_ms: Some(101),
            ..Checkpoint::default()
        };
        store.write(&checkpoint, &NoRows).unwrap();
        assert_eq!(
            keys(&store),
            vec![("late".into(), 200), ("new".into(), 300)]
        );
        store.close().unwrap();
        let store = Store::open(&OsDisk, &path).unwrap();
        assert_eq!(
            keys(&store),
            vec![("late".into(), 200), ("new".into(), 300)]
        );
        store.close().unwrap();
    }

    /// A checkpoint of keys only reads no row.
    struct NoRows;

    impl RowSource for NoRows {
        fn visit_rows(&self, rows: &[u32], _: &mut dyn FnMut(&str, &SlotRecord)) {
            assert!(rows.is_empty());
        }
    }
}
