//! The node's committed state of its own slot, in memory: every read is answered from here, and
//! only durable changes are installed. A change journal lets the datacenter aggregator and the
//! peers pull just what changed since their cursor.

use std::sync::{Arc, RwLock};

use geocount_model::wire::{Cursor, SlotEntry, SlotPage};
use geocount_model::{
    CounterId, IdTable, Partitions, RollupChange, SlotRecord, SlotState, Window, WindowChange,
};
use geocount_sync::{
    ChangeJournal, EncodeItems, EncodedEntries, EncodedRows, Journaled, SlotEntryRef,
};

use crate::engine::store::RowSource;

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
    rows: IdTable<Row>,
    journal: ChangeJournal,
    /// The recently changed rows' encodings, made at the first pull for every puller.
    encoded: EncodedRows,
    /// How many rows were removed: a copy paged across a removal may miss the row that moved,
    /// so copy pages name it beside the process ([`SlotTable::copy_epoch`]).
    removals: u64,
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
        self.rows.get_index_of(id).is_some()
    }

    /// How many counters the node holds.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the node holds no counter.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Merges a record of counter `id` by version (last writer wins); returns the index of its
    /// row if it changed.
    pub fn merge(&mut self, id: &CounterId, record: &SlotRecord) -> Option<usize> {
        let index = match self.rows.get_full_mut(id.as_str()) {
            Some((index, row)) => {
                if !row.record.merge(record) {
                    return None;
                }
                index
            }
            None => self.insert_row(id.clone(), record.clone()),
        };
        Some(self.journal_change(index))
    }

    /// [`merge`](Self::merge), taking the id and record over (the store's records at
    /// startup are moved into the table, not copied).
    pub fn merge_owned(&mut self, id: CounterId, record: SlotRecord) -> Option<usize> {
        self.take(id, record, SlotRecord::merge_owned)
    }

    /// Replays a logged change of counter `id` ([`SlotRecord::apply_logged`]); returns the index
    /// of its row if it changed.
    pub fn apply_logged(&mut self, id: CounterId, logged: SlotRecord) -> Option<usize> {
        self.take(id, logged, SlotRecord::apply_logged)
    }

    /// Counter `id`'s row after `into(row's record, record)`, or a new row holding `record`;
    /// returns the index of its row if it changed.
    fn take(
        &mut self,
        id: CounterId,
        record: SlotRecord,
        into: impl FnOnce(&mut SlotRecord, SlotRecord) -> bool,
    ) -> Option<usize> {
        let index = match self.rows.get_full_mut(id.as_str()) {
            Some((index, row)) => {
                if !into(&mut row.record, record) {
                    return None;
                }
                index
            }
            None => self.insert_row(id, record),
        };
        Some(self.journal_change(index))
    }

    /// The index of counter `id`'s row, if the node holds it.
    pub fn row_index(&self, id: &str) -> Option<usize> {
        self.rows.get_index_of(id)
    }

    /// Installs a change the commit loop staged and logged, in place: `logged` carries the new
    /// state and sketch, `window` the hits to apply to the row's window of `window_seconds`,
    /// `history` those to each level of a sum's history (its levels become these). `row` is
    /// counter `id`'s row, `None` for a counter new to the node. Returns the row.
    pub fn apply_change(
        &mut self,
        row: Option<usize>,
        id: CounterId,
        logged: SlotRecord,
        window: &WindowChange,
        window_seconds: u32,
        history: &[RollupChange],
    ) -> usize {
        let index = match row {
            Some(index) => {
                let record = &mut self.rows[index].record;
                if record.generation() != logged.generation() {
                    // A reset or delete reached the slot: nothing of the older generation stays.
                    *record = record.renewed(logged.generation(), logged.state.version);
                }
                record.state = logged.state;
                if !logged.rights().is_empty() {
                    // A ledger only grows within a generation: the group logged all of it.
                    record.set_rights(logged.rights().clone());
                }
                if let Some(sketch) = logged.into_uniques() {
                    record.set_uniques(sketch);
                } else if let Some(held) = record.window_mut() {
                    held.apply(window, window_seconds);
                    record.apply_history(history);
                }
                index
            }
            None => {
                let mut record = logged;
                if let Some(held) = record.window_mut() {
                    // The log carries the changed buckets; a new row's window is just those.
                    *held = Window::default();
                    held.apply(window, window_seconds);
                    record.set_history(Vec::new());
                    record.apply_history(history);
                }
                self.insert_row(id, record)
            }
        };
        self.journal_change(index)
    }

    /// Drops counter `id`'s row (a deleted counter's, once its slot has applied the delete):
    /// the last row takes its index and is journaled again there, so pullers see it at its new
    /// index; pullers drop the removed one by the counter's tombstone, not by a message. Returns
    /// the row's index and, when another row moved into it, that index.
    pub fn remove(&mut self, id: &str) -> Option<(usize, Option<usize>)> {
        let index = self.rows.get_index_of(id)?;
        self.encoded.forget(self.rows[index].latest_seq);
        let (_, moved) = self.rows.swap_remove(index);
        if let Some(moved) = moved {
            self.journal_change(moved);
        }
        self.journal.fit(self.rows.len());
        self.removals += 1;
        Some((index, moved))
    }

    /// What a copy page of this table served by process `incarnation` names as its source: it
    /// changes whenever a row is removed, so a restore that paged across a removal pages again.
    pub fn copy_epoch(&self, incarnation: u64) -> u64 {
        incarnation.wrapping_add(self.removals)
    }

    fn insert_row(&mut self, id: CounterId, record: SlotRecord) -> usize {
        let row = Row {
            record,
            latest_seq: 0,
        };
        self.rows.insert(id, row)
    }

    fn journal_change(&mut self, index: usize) -> usize {
        // The row's previous change is pulled no more: its encoding would only hold memory.
        self.encoded.forget(self.rows[index].latest_seq);
        self.rows[index].latest_seq = self.journal.record(index);
        index
    }

    /// Row `index`: its counter id and record.
    ///
    /// # Panics
    /// If there is no such row (an index stays valid until a row is removed).
    pub fn row(&self, index: usize) -> (&str, &SlotRecord) {
        let (id, row) = self
            .rows
            .get_index(index)
            .expect("a row index from this table");
        (id.as_str(), &row.record)
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
        self.rows.iter().map(|(id, row)| (id.as_str(), &row.record))
    }

    /// One page of a copy of the slot: the rows from `from`, at most `limit` of them, and where
    /// the next page starts.
    pub fn copy_page(&self, from: u64, limit: usize) -> (Vec<(String, SlotRecord)>, Option<u64>) {
        let (range, next) = geocount_sync::copy_range(from, limit, self.rows.len());
        let entries = range
            .map(|index| {
                let (id, record) = self.row(index);
                (id.to_owned(), record.clone())
            })
            .collect();
        (entries, next)
    }

    /// The states changed since `cursor` of the counters of `partitions` (`None`: all), as a
    /// page named after `slot_name`.
    pub fn page(
        &self,
        slot_name: &str,
        cursor: Cursor,
        limit: usize,
        partitions: Option<&Partitions>,
    ) -> SlotPage {
        let names = vec![slot_name.to_owned()];
        geocount_sync::slot_page(self, &self.journal, names, cursor, limit, partitions)
    }

    /// [`page`](Self::page) with its entries encoded (each changed row once for every puller),
    /// for [`geocount_sync::encode_sync_page`]; the page's own entry list is empty.
    pub fn encoded_page(
        &self,
        slot_name: &str,
        cursor: Cursor,
        limit: usize,
        partitions: Option<&Partitions>,
    ) -> (SlotPage, EncodedEntries) {
        let names = vec![slot_name.to_owned()];
        geocount_sync::encoded_slot_page(
            self,
            &self.journal,
            &self.encoded,
            names,
            cursor,
            limit,
            partitions,
        )
    }
}

impl Journaled for SlotTable {
    type Item = SlotEntry;

    fn latest_seq(&self, index: usize) -> Option<u64> {
        self.rows.get_index(index).map(|(_, row)| row.latest_seq)
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

impl EncodeItems for SlotTable {
    fn id(&self, index: usize) -> &str {
        self.row(index).0
    }

    fn encode_items(&self, index: usize, out: &mut Vec<u8>) -> usize {
        let (id, record) = self.row(index);
        // The page names the own slot alone, at index 0.
        SlotEntryRef {
            slot: 0,
            id,
            record,
        }
        .encode_into(out);
        1
    }
}

impl RowSource for RwLock<SlotTable> {
    fn visit_rows(&self, rows: &[u32], each: &mut dyn FnMut(&str, &SlotRecord)) {
        let table = self.read().expect("slot table lock");
        // A row listed before rows were removed may be past the end: the row that held its
        // index then was listed again at its new one.
        for &row in rows {
            if let Some((id, row)) = table.rows.get_index(row as usize) {
                each(id.as_str(), &row.record);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use geocount_model::wire::SyncPage;
    use geocount_model::{SlotState, UniqueSketch};

    use super::*;

    /// The encoded page of the own slot is the ordinary page's bytes, filtered alike, whether
    /// its rows are encoded for this pull or taken from an earlier one.
    #[test]
    fn encoded_pages_match_the_cloned_ones() {
        let mut table = SlotTable::default();
        for n in 0..40_u64 {
            let state = SlotState {
                value: n as i64 * 7,
                version: n + 1,
            };
            let record = if n % 5 == 0 {
                let mut sketch = UniqueSketch::new();
                sketch.add(&format!("item-{n}"));
                SlotRecord::unique(state, Box::new(sketch))
            } else {
                let mut window = Window::default();
                window.record(1_700_000_000 + n, 3, 60).unwrap();
                SlotRecord::sum(state, window)
            };
            table.merge(&CounterId::new(format!("c{n}")).unwrap(), &record);
        }
        let half = Partitions {
            count: 2,
            held: vec![1],
        };
        for partitions in [None, Some(&half)] {
            let mut cursor = Cursor::Start;
            for _pull in 0..2 {
                for limit in [3, 1_000] {
                    let cloned = table.page("dc/s0", cursor, limit, partitions);
                    let (page, entries) = table.encoded_page("dc/s0", cursor, limit, partitions);
                    let around = SyncPage {
                        source: "dc/s0".into(),
                        slots: Some(page),
                        load: 9,
                        ..SyncPage::default()
                    };
                    let whole = SyncPage {
                        slots: Some(cloned.clone()),
                        ..around.clone()
                    };
                    assert_eq!(
                        geocount_sync::encode_sync_page(&around, Some(&entries)).unwrap(),
                        postcard::to_allocvec(&whole).unwrap()
                    );
                    cursor = cloned.next;
                }
                let id = CounterId::new("c3").unwrap();
                let newer: SlotRecord = SlotState {
                    value: 1,
                    version: 1_000,
                }
                .into();
                table.merge(&id, &newer);
            }
        }
    }

    /// Encodings pulled once are dropped with their rows: a table emptied by removals holds
    /// none, and a row changed again drops its older one.
    #[test]
    fn removed_and_changed_rows_hand_their_encodings_back() {
        let mut table = SlotTable::default();
        let ids: Vec<CounterId> = (0..50)
            .map(|n| CounterId::new(format!("c{n}")).unwrap())
            .collect();
        for (n, id) in ids.iter().enumerate() {
            let state = SlotState {
                value: n as i64,
                version: 1,
            };
            table.merge(id, &state.into());
        }
        table.encoded_page("dc/s0", Cursor::Start, 1_000, None);
        let full = table.encoded.held_bytes();
        assert!(full > 0);
        let changed: SlotRecord = SlotState {
            value: 9,
            version: 2,
        }
        .into();
        table.merge(&ids[0], &changed);
        assert!(table.encoded.held_bytes() < full);
        for id in &ids {
            table.remove(id.as_str());
        }
        assert_eq!(table.encoded.held_bytes(), 0);
    }
}
