//! The checkpoint store (redb): the log's records are folded in here periodically so that the log
//! can be deleted and restart does not replay history.

use std::mem::ManuallyDrop;
use std::path::Path;

use geocount_model::{CounterId, IdempotencyRecord, SlotRecord, VersionedDescription};
use redb::{Database, Key, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition};

use crate::engine::key_blocks::{KeyBlocks, decode_block};
use crate::error::StorageError;
use crate::storage::Disk;

const SLOTS: TableDefinition<&str, &[u8]> = TableDefinition::new("slot_records");
const DESCRIPTIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("descriptions");
/// Idempotency keys in blocks: each row holds about
/// [`KEYS_PER_BLOCK`](crate::engine::key_blocks::KEYS_PER_BLOCK) keys of one checkpoint,
/// as the log encoded them (postcard `(key, record)` lists one after another:
/// [`crate::engine::key_blocks`]), keyed `(newest created_at_ms in the block, sequence)`.
/// Keys are never looked up here, only read back whole at startup, so a checkpoint inserts
/// one row per block rather than one per key. A block is deleted once its
/// newest key has expired: its older keys linger until then, and startup drops them by time.
const KEY_BLOCKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("idempotency_blocks");
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
    /// Rows dropped since the previous checkpoint (deleted counters): deleted from the store
    /// before the changed rows are written, so a counter made again after is kept.
    pub removed: Vec<CounterId>,
    /// Tombstones dropped past `sync.tombstone_retention_secs` since the previous checkpoint:
    /// deleted from the store before the descriptions are written.
    pub purged: Vec<CounterId>,
    /// Idempotency keys recorded since the previous checkpoint.
    pub idempotency_added: KeyBlocks,
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
            && self.removed.is_empty()
            && self.purged.is_empty()
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
        self.removed.extend(later.removed);
        self.purged.extend(later.purged);
        self.idempotency_added.absorb(later.idempotency_added);
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
    /// Every idempotency record not yet deleted, oldest first (ties by key), each
    /// `(key, created_at_ms)` once. Some may be past retention: a block goes only with its
    /// newest key.
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
        txn.open_table(KEY_BLOCKS).map_err(store_error)?;
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
        let keys = &mut state.idempotency;
        each_row(&txn, KEY_BLOCKS, |_, bytes| Ok(decode_block(bytes, keys)?))?;
        // By age, then by key. A key written by a checkpoint whose log segments outlived it
        // (their deletion failed) comes back in a later block; it is listed once, its latest
        // copy.
        keys.sort_by(|(a, a_record), (b, b_record)| {
            (a_record.created_at_ms, a).cmp(&(b_record.created_at_ms, b))
        });
        keys.dedup_by(|later, kept| {
            let same = later.0 == kept.0 && later.1.created_at_ms == kept.1.created_at_ms;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        Ok(state)
    }

    /// Writes a checkpoint in one durable transaction, reading its rows' records from `rows`.
    pub fn write(&self, checkpoint: &Checkpoint, rows: &dyn RowSource) -> Result<(), StorageError> {
        let txn = self.db.begin_write().map_err(store_error)?;
        {
            let mut slots = txn.open_table(SLOTS).map_err(store_error)?;
            for id in &checkpoint.removed {
                slots.remove(id.as_str()).map_err(store_error)?;
            }
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
            for id in &checkpoint.purged {
                descriptions.remove(id.as_str()).map_err(store_error)?;
            }
            for description in &checkpoint.descriptions {
                let bytes = postcard::to_allocvec(description)?;
                descriptions
                    .insert(description.description.id.as_str(), bytes.as_slice())
                    .map_err(store_error)?;
            }
            let mut blocks = txn.open_table(KEY_BLOCKS).map_err(store_error)?;
            if let Some(before) = checkpoint.idempotency_expired_before_ms {
                blocks
                    .retain_in(..(before, 0), |_, _| false)
                    .map_err(store_error)?;
            }
            for block in checkpoint.idempotency_added.blocks() {
                let newest = block.newest_ms;
                // Blocks of the same newest time are told apart by one more than the highest
                // sequence among them.
                let sequence = match blocks
                    .range((newest, 0)..=(newest, u64::MAX))
                    .map_err(store_error)?
                    .next_back()
                {
                    Some(row) => row.map_err(store_error)?.0.value().1 + 1,
                    None => 0,
                };
                let bytes = &block.bytes;
                blocks
                    .insert((newest, sequence), bytes.as_slice())
                    .map_err(store_error)?;
            }
        }
        txn.commit().map_err(store_error)?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::key_blocks::KEYS_PER_BLOCK;
    use crate::storage::OsDisk;
    use geocount_model::SlotState;
    use redb::ReadableTableMetadata;

    /// A key's record made at `created_at_ms` (also the startup tests').
    pub(crate) fn record(created_at_ms: u64) -> IdempotencyRecord {
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

    fn added(keys: &[(&str, u64)]) -> Checkpoint {
        let keys: Vec<_> = keys
            .iter()
            .map(|&(key, at)| (key.into(), record(at)))
            .collect();
        adding(&keys)
    }

    fn adding(keys: &[(Box<str>, IdempotencyRecord)]) -> Checkpoint {
        let mut checkpoint = Checkpoint::default();
        checkpoint.idempotency_added.push(keys);
        checkpoint
    }

    fn expiring(before: u64) -> Checkpoint {
        Checkpoint {
            idempotency_expired_before_ms: Some(before),
            ..Checkpoint::default()
        }
    }

    fn listed(keys: &[(&str, u64)]) -> Vec<(Box<str>, u64)> {
        keys.iter().map(|&(key, at)| (key.into(), at)).collect()
    }

    fn block_rows(store: &Store) -> u64 {
        let txn = store.db.begin_read().unwrap();
        txn.open_table(KEY_BLOCKS).unwrap().len().unwrap()
    }

    #[test]
    fn keys_of_every_block_are_listed_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STORE_FILE);
        let store = Store::open(&OsDisk, &path).unwrap();
        store
            .write(
                &added(&[("late", 200), ("early", 100), ("b", 150)]),
                &NoRows,
            )
            .unwrap();
        store
            .write(&added(&[("new", 300), ("a", 150), ("mid", 120)]), &NoRows)
            .unwrap();
        let all = listed(&[
            ("early", 100),
            ("mid", 120),
            ("a", 150),
            ("b", 150),
            ("late", 200),
            ("new", 300),
        ]);
        assert_eq!(keys(&store), all);
        assert_eq!(block_rows(&store), 2, "one row per checkpoint");
        store.close().unwrap();
        let store = Store::open(&OsDisk, &path).unwrap();
        assert_eq!(keys(&store), all);
        store.close().unwrap();
    }

    #[test]
    fn a_block_expires_with_its_newest_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&OsDisk, &dir.path().join(STORE_FILE)).unwrap();
        store
            .write(&added(&[("late", 200), ("early", 100)]), &NoRows)
            .unwrap();
        store.write(&added(&[("new", 300)]), &NoRows).unwrap();
        // "early" has expired, but its block's newest key has not: it lingers.
        store.write(&expiring(150), &NoRows).unwrap();
        assert_eq!(
            keys(&store),
            listed(&[("early", 100), ("late", 200), ("new", 300)])
        );
        store.write(&expiring(200), &NoRows).unwrap();
        assert_eq!(block_rows(&store), 2, "200 is not before 200");
        store.write(&expiring(201), &NoRows).unwrap();
        assert_eq!(keys(&store), listed(&[("new", 300)]));
        store.write(&expiring(301), &NoRows).unwrap();
        assert_eq!(keys(&store), listed(&[]));
        store.close().unwrap();
    }

    #[test]
    fn blocks_of_the_same_newest_time_are_all_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&OsDisk, &dir.path().join(STORE_FILE)).unwrap();
        // The same segment number too: segments start again at 1 after a restart.
        for key in ["x", "y", "z"] {
            let mut checkpoint = added(&[(key, 100)]);
            checkpoint.through_segment = 1;
            store.write(&checkpoint, &NoRows).unwrap();
        }
        assert_eq!(block_rows(&store), 3);
        assert_eq!(keys(&store), listed(&[("x", 100), ("y", 100), ("z", 100)]));
        store.close().unwrap();
    }

    #[test]
    fn a_key_written_twice_is_listed_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&OsDisk, &dir.path().join(STORE_FILE)).unwrap();
        store.write(&added(&[("k", 100)]), &NoRows).unwrap();
        let mut again = vec![("k".into(), record(100)), ("j".into(), record(100))];
        again[0].1.delta = 7;
        store.write(&adding(&again), &NoRows).unwrap();
        let stored = store.load().unwrap().idempotency;
        let deltas: Vec<_> = stored
            .iter()
            .map(|(key, record)| (&**key, record.delta))
            .collect();
        assert_eq!(deltas, vec![("j", 1), ("k", 7)], "the latest copy is kept");
        store.close().unwrap();
    }

    #[test]
    fn a_large_checkpoint_is_split_into_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&OsDisk, &dir.path().join(STORE_FILE)).unwrap();
        let count = KEYS_PER_BLOCK + 10;
        let names: Vec<String> = (0..count).map(|i| format!("{i:08}")).collect();
        let added: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, name)| (name.as_str().into(), record(i as u64)))
            .collect();
        let checkpoint = adding(&added);
        store.write(&checkpoint, &NoRows).unwrap();
        assert_eq!(block_rows(&store), 2);
        assert_eq!(keys(&store).len(), count);
        // The first block's newest key is KEYS_PER_BLOCK - 1 ms old.
        store
            .write(&expiring(KEYS_PER_BLOCK as u64), &NoRows)
            .unwrap();
        assert_eq!(keys(&store).len(), 10);
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
