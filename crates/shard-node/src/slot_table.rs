//! The node's committed state of its own slot, in memory: every read is answered from here, and
//! only durable changes are installed. A change journal lets the datacenter aggregator and the
//! peers pull just what changed since their cursor.

use std::sync::{Arc, RwLock};

use geocount_model::wire::{Cursor, SlotEntry, SlotPage};
use geocount_model::{SlotRecord, SlotState};
use geocount_sync::{ChangeJournal, Journaled};
use indexmap::IndexMap;

/// The table, shared by the HTTP handlers (readers) and the commit thread (the only writer).
pub type SharedSlotTable = Arc<RwLock<SlotTable>>;

#[derive(Debug, Clone)]
struct Row {
    record: SlotRecord,
    latest_seq: u64,
}

/// This slot's state of every counter the node holds.
#[derive(Debug, Default)]
pub struct SlotTable {
    rows: IndexMap<Box<str>, Row>,
    journal: ChangeJournal,
}

impl SlotTable {
    /// This slot's state of counter `id`, if the node has seen it.
    pub fn get(&self, id: &str) -> Option<SlotState> {
        self.rows.get(id).map(|row| row.record.state)
    }

    /// This slot's whole record of counter `id`: total, version and window.
    pub fn get_record(&self, id: &str) -> Option<&SlotRecord> {
        self.rows.get(id).map(|row| &row.record)
    }

    /// Whether the node has seen counter `id` at all.
    pub fn contains(&self, id: &str) -> bool {
        self.rows.contains_key(id)
    }

    /// How many counters the node holds.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the node holds no counter.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Merges a record of counter `id` by version (last writer wins); returns whether it changed.
    pub fn merge(&mut self, id: &str, record: &SlotRecord) -> bool {
        let index = match self.rows.get_full_mut(id) {
            Some((index, _, row)) => {
                if !row.record.merge(record) {
                    return false;
                }
                index
            }
            None => {
                let row = Row {
                    record: record.clone(),
                    latest_seq: 0,
                };
                self.rows.insert_full(id.into(), row).0
            }
        };
        self.rows[index].latest_seq = self.journal.record(index);
        true
    }

    /// The highest version of any counter: the next change must be numbered above it.
    pub fn max_version(&self) -> u64 {
        self.rows
            .values()
            .map(|r| r.record.state.version)
            .max()
            .unwrap_or(0)
    }

    /// Every counter's record.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &SlotRecord)> {
        self.rows.iter().map(|(id, row)| (&**id, &row.record))
    }

    /// The states changed since `cursor`, as a page named after `slot_name`.
    pub fn page(&self, slot_name: &str, cursor: Cursor, limit: usize) -> SlotPage {
        let (entries, next, caught_up) = geocount_sync::page(self, cursor, limit);
        SlotPage {
            slot_names: vec![slot_name.to_owned()],
            entries,
            next,
            caught_up,
        }
    }
}

impl Journaled for SlotTable {
    type Item = SlotEntry;

    fn journal(&self) -> &ChangeJournal {
        &self.journal
    }

    fn entry_count(&self) -> usize {
        self.rows.len()
    }

    fn latest_seq(&self, index: usize) -> u64 {
        self.rows[index].latest_seq
    }

    fn weight(&self, index: usize) -> usize {
        1 + geocount_sync::record_weight(&self.rows[index].record)
    }

    fn items(&self, index: usize, out: &mut Vec<SlotEntry>) {
        let (id, row) = self.rows.get_index(index).expect("index in range");
        out.push(SlotEntry {
            slot: 0,
            id: id.to_string(),
            record: row.record.clone(),
        });
    }
}
