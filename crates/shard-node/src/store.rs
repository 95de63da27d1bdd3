//! The checkpoint store (redb): the log's records are folded in here periodically so that the log
//! can be deleted and restart does not replay history.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::path::Path;

use geocount_model::{SlotRecord, VersionedDescription};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::error::StorageError;
use crate::idempotency::IdempotencyRecord;
use crate::storage::Disk;

const SLOTS: TableDefinition<&str, &[u8]> = TableDefinition::new("slot_records");
const DESCRIPTIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("descriptions");
const IDEMPOTENCY: TableDefinition<&str, &[u8]> = TableDefinition::new("idempotency");

/// Everything a checkpoint writes: the changes of log segments up to `through_segment`.
#[derive(Debug, Default)]
pub struct Checkpoint {
    /// The newest record of each counter changed since the previous checkpoint.
    pub slots: HashMap<Box<str>, SlotRecord>,
    /// Counters created since the previous checkpoint.
    pub descriptions: Vec<VersionedDescription>,
    /// Idempotency keys recorded since the previous checkpoint.
    pub idempotency_added: Vec<(Box<str>, IdempotencyRecord)>,
    /// Idempotency keys expired since the previous checkpoint.
    pub idempotency_expired: Vec<Box<str>>,
    /// The newest log segment whose records this checkpoint holds.
    pub through_segment: u64,
}

impl Checkpoint {
    /// Whether the checkpoint would write nothing.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
            && self.descriptions.is_empty()
            && self.idempotency_added.is_empty()
            && self.idempotency_expired.is_empty()
    }

    /// Adds a slot record, keeping the newer version.
    pub fn record_slot(&mut self, id: &str, record: &SlotRecord) {
        match self.slots.get_mut(id) {
            Some(current) => {
                current.merge(record);
            }
            None => {
                self.slots.insert(id.into(), record.clone());
            }
        }
    }

    /// Folds a later checkpoint into this one (used to retry a checkpoint that failed).
    pub fn absorb(&mut self, later: Checkpoint) {
        for (id, record) in later.slots {
            self.record_slot(&id, &record);
        }
        self.descriptions.extend(later.descriptions);
        self.idempotency_added.extend(later.idempotency_added);
        self.idempotency_expired.extend(later.idempotency_expired);
        self.through_segment = self.through_segment.max(later.through_segment);
    }
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
    pub slots: Vec<(Box<str>, SlotRecord)>,
    /// Every counter description.
    pub descriptions: Vec<VersionedDescription>,
    /// Every idempotency record not yet deleted.
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
        for row in txn
            .open_table(SLOTS)
            .map_err(store_error)?
            .iter()
            .map_err(store_error)?
        {
            let (id, bytes) = row.map_err(store_error)?;
            let record: SlotRecord = postcard::from_bytes(bytes.value())?;
            state.slots.push((id.value().into(), record));
        }
        for row in txn
            .open_table(DESCRIPTIONS)
            .map_err(store_error)?
            .iter()
            .map_err(store_error)?
        {
            let (_, bytes) = row.map_err(store_error)?;
            state
                .descriptions
                .push(postcard::from_bytes(bytes.value())?);
        }
        for row in txn
            .open_table(IDEMPOTENCY)
            .map_err(store_error)?
            .iter()
            .map_err(store_error)?
        {
            let (key, bytes) = row.map_err(store_error)?;
            state
                .idempotency
                .push((key.value().into(), postcard::from_bytes(bytes.value())?));
        }
        Ok(state)
    }

    /// Writes a checkpoint in one durable transaction.
    pub fn write(&self, checkpoint: &Checkpoint) -> Result<(), StorageError> {
        let txn = self.db.begin_write().map_err(store_error)?;
        {
            let mut slots = txn.open_table(SLOTS).map_err(store_error)?;
            for (id, record) in &checkpoint.slots {
                let bytes = postcard::to_allocvec(record)?;
                slots.insert(&**id, bytes.as_slice()).map_err(store_error)?;
            }
            let mut descriptions = txn.open_table(DESCRIPTIONS).map_err(store_error)?;
            for description in &checkpoint.descriptions {
                let bytes = postcard::to_allocvec(description)?;
                descriptions
                    .insert(description.description.id.as_str(), bytes.as_slice())
                    .map_err(store_error)?;
            }
            let mut idempotency = txn.open_table(IDEMPOTENCY).map_err(store_error)?;
            for key in &checkpoint.idempotency_expired {
                idempotency.remove(&**key).map_err(store_error)?;
            }
            for (key, record) in &checkpoint.idempotency_added {
                let bytes = postcard::to_allocvec(record)?;
                idempotency
                    .insert(&**key, bytes.as_slice())
                    .map_err(store_error)?;
            }
        }
        txn.commit().map_err(store_error)?;
        Ok(())
    }
}
