//! Copies of many slots of many counters, merged by version: what a datacenter aggregator holds
//! of its shards, the global aggregator of every datacenter, and a shard node of its peers.

use std::collections::HashMap;

use geocount_model::held_bytes::{id_bytes, record_bytes};
use geocount_model::wire::{SlotEntry, SlotPage};
use geocount_model::{CounterId, IdTable, Partitions, SlotRecord, counter_id};

use crate::byte_bound::ByteBound;
use crate::journal::{ChangeJournal, Journaled, page_where};

/// How many bytes of a record's sketch or rolling window count as one more entry against a sync
/// page's limit: a dense sketch (16 KiB) weighs 257 entries, so a page of `page_entries` 50,000
/// holds about 190 of them (3 MiB) rather than 50,000 (800 MiB).
pub const RECORD_BYTES_PER_ENTRY: usize = 64;

/// What one bucket of a rolling window counts for, in bytes: its size in memory (the second and
/// the hits); postcard's varints take about half of that for a recent second. A window of
/// 3,600 one-second buckets (`shard.max_window_seconds`) weighs 900 entries, so a page of
/// 50,000 holds about 55 such counters (3 MiB) rather than 50,000 (2.9 GB).
pub const WINDOW_BUCKET_BYTES: usize = 16;

/// How many entries' worth `record` counts for against a page's limit beyond its counter's 1:
/// none for a record of a few bytes, one more per [`RECORD_BYTES_PER_ENTRY`] of its sketch and
/// of its window's buckets.
pub fn record_weight(record: &SlotRecord) -> usize {
    let sketch = record.uniques().map_or(0, |sketch| sketch.encoded_bytes());
    let window = record.window().buckets().len() * WINDOW_BUCKET_BYTES;
    (sketch + window) / RECORD_BYTES_PER_ENTRY
}

/// The page named `slot_names` of the slot states in `table` changed since `cursor`, only
/// those of the counters of `partitions` (`None`: all), bounded as [`page_where`] bounds it.
pub fn slot_page<T: Journaled<Item = SlotEntry>>(
    table: &T,
    journal: &ChangeJournal,
    slot_names: Vec<String>,
    cursor: geocount_model::wire::Cursor,
    limit: usize,
    partitions: Option<&Partitions>,
) -> SlotPage {
    let keep = |entry: &SlotEntry| partitions.is_none_or(|p| p.holds(&entry.id));
    let (entries, next, caught_up) = page_where(table, journal, cursor, limit, keep);
    SlotPage {
        slot_names,
        entries,
        next,
        caught_up,
    }
}

/// Whether `other` is a newer copy of the slot `current` holds (it would win the merge).
fn is_newer(current: &SlotRecord, other: &SlotRecord) -> bool {
    let mut state = current.state;
    state.merge(other.state)
}

/// One counter's copies: `(slot index, state)` for each slot that ever held a value.
#[derive(Debug, Default)]
struct CounterCopies {
    slots: Copies,
    latest_seq: u64,
}

/// A counter's copies of its slots. Most counters have one slot per datacenter, so a
/// datacenter aggregator and a shard node's replicas of its peers hold one copy of most: that
/// one is kept in the table's entry, with no heap block of its own (24 bytes less a counter and
/// one cache miss fewer). Two or more sit in a block of exactly as many (a `Vec` would reserve
/// four on the first push); a slot is added once in a counter's life, so the copy that costs is
/// rare.
#[derive(Debug)]
enum Copies {
    /// One copy.
    One([(u16, SlotRecord); 1]),
    /// None, or two and more.
    Many(Box<[(u16, SlotRecord)]>),
}

impl Default for Copies {
    fn default() -> Self {
        Self::Many(Box::default())
    }
}

impl std::ops::Deref for Copies {
    type Target = [(u16, SlotRecord)];

    fn deref(&self) -> &Self::Target {
        match self {
            Self::One(one) => one,
            Self::Many(many) => many,
        }
    }
}

impl std::ops::DerefMut for Copies {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            Self::One(one) => one,
            Self::Many(many) => many,
        }
    }
}

impl Copies {
    /// Adds the copy of a slot not held yet.
    fn push(&mut self, copy: (u16, SlotRecord)) {
        *self = match std::mem::take(self) {
            Self::Many(many) if many.is_empty() => Self::One([copy]),
            Self::One([first]) => Self::Many(Box::new([first, copy])),
            Self::Many(many) => {
                let mut many = many.into_vec();
                many.reserve_exact(1);
                many.push(copy);
                Self::Many(many.into_boxed_slice())
            }
        };
    }
}

/// What a pulled page may carry: the slots its source may deliver (a shard node its own, a
/// datacenter aggregator its datacenter's), and the highest version any clock allows now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageFence {
    /// Indices of the slots the source may deliver.
    pub slots: Vec<u16>,
    /// Versions above this are refused: no owner's clock can have made them.
    pub max_version: u64,
}

impl PageFence {
    /// A fence that lets every one of `slots` slots through, at any version (tests and
    /// benchmarks).
    pub fn open(slots: usize) -> Self {
        Self {
            slots: (0..slots as u16).collect(),
            max_version: u64::MAX,
        }
    }
}

/// What merging one pulled page did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageMerge {
    /// Records that changed a copy.
    pub changed: usize,
    /// Entries of a slot the source may not deliver, refused.
    pub refused_slot: usize,
    /// Entries versioned beyond what any clock allows, refused.
    pub refused_version: usize,
    /// Entries that would take the copies past their byte bound
    /// ([`SlotCopies::set_max_bytes`]), refused.
    pub refused_bytes: usize,
}

/// What merging one record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Merged {
    Unchanged,
    /// Changed the counter at this table index.
    Changed(usize),
    /// Newer, but refused: taking it in would pass the byte bound.
    OverBound,
}

impl std::ops::AddAssign for PageMerge {
    fn add_assign(&mut self, other: Self) {
        self.changed += other.changed;
        self.refused_slot += other.refused_slot;
        self.refused_version += other.refused_version;
        self.refused_bytes += other.refused_bytes;
    }
}

/// Slot copies keyed by counter, with a change journal so they can be pulled in turn.
#[derive(Debug)]
pub struct SlotCopies {
    slot_names: Vec<String>,
    slot_index: HashMap<String, u16>,
    counters: IdTable<CounterCopies>,
    journal: ChangeJournal,
    /// Bytes held ([`geocount_model::held_bytes`]): each counter's id and each copy's record;
    /// a merge that would pass the bound is refused.
    bytes: ByteBound,
}

impl SlotCopies {
    /// Copies of the slots named `slot_names` (their order gives their indices).
    pub fn new(slot_names: Vec<String>) -> Self {
        let slot_index = slot_names
            .iter()
            .enumerate()
            .map(|(i, name)| (name.clone(), i as u16))
            .collect();
        Self {
            slot_names,
            slot_index,
            counters: IdTable::default(),
            journal: ChangeJournal::default(),
            bytes: ByteBound::default(),
        }
    }

    /// Bounds the bytes held: from now on, a merge that would take them past `max_bytes` is
    /// refused ([`PageMerge::refused_bytes`]). Unbounded until set.
    pub fn set_max_bytes(&mut self, max_bytes: u64) {
        self.bytes.set_max(max_bytes);
    }

    /// The bytes held and their bound.
    pub fn bytes(&self) -> ByteBound {
        self.bytes
    }

    /// The slots held, by index.
    pub fn slot_names(&self) -> &[String] {
        &self.slot_names
    }

    /// The index of slot `name`, if held.
    pub fn slot_index(&self, name: &str) -> Option<u16> {
        self.slot_index.get(name).copied()
    }

    /// Merges one slot record of counter `id`; returns whether anything changed. A change is
    /// journaled.
    pub fn merge(&mut self, slot: u16, id: &CounterId, record: &SlotRecord) -> bool {
        self.merge_at(slot, id, record).is_some()
    }

    /// [`merge`](Self::merge), returning the table index of the counter if it changed: what
    /// an index kept beside the copies updates.
    pub fn merge_at(&mut self, slot: u16, id: &CounterId, record: &SlotRecord) -> Option<usize> {
        match self.merge_keyed(slot, id.as_str(), || id.clone(), record) {
            Merged::Changed(index) => Some(index),
            Merged::Unchanged | Merged::OverBound => None,
        }
    }

    /// [`merge`](Self::merge) of counter `id`, whose key `key` makes only if the table does not
    /// hold it yet (a pulled page's ids are strings: most are held already).
    fn merge_keyed(
        &mut self,
        slot: u16,
        id: &str,
        key: impl FnOnce() -> CounterId,
        record: &SlotRecord,
    ) -> Merged {
        let after = record_bytes(record) as u64;
        let (index, copies, before) = match self.counters.get_full_mut(id) {
            Some((index, copies)) => {
                let held = copies.slots.iter().find(|(s, _)| *s == slot);
                if held.is_some_and(|(_, current)| !is_newer(current, record)) {
                    return Merged::Unchanged;
                }
                let before = held.map_or(0, |(_, current)| record_bytes(current) as u64);
                if !self.bytes.admits(before, after) {
                    return Merged::OverBound;
                }
                (index, copies, before)
            }
            None => {
                let after = after + id_bytes(id) as u64;
                if !self.bytes.admits(0, after) {
                    return Merged::OverBound;
                }
                self.bytes.changed(0, id_bytes(id) as u64);
                let index = self.counters.insert(key(), CounterCopies::default());
                (index, &mut self.counters[index], 0)
            }
        };
        let changed = match copies.slots.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, current)) => current.merge(record),
            None => {
                copies.slots.push((slot, record.clone()));
                true
            }
        };
        if changed {
            self.bytes.changed(before, after);
            copies.latest_seq = self.journal.record(index);
            return Merged::Changed(index);
        }
        Merged::Unchanged
    }

    /// Merges a pulled page, mapping its slot names onto this table's. Entries whose id no
    /// client could have written (only a faulty or hostile peer sends one) are skipped; entries
    /// of a slot the source may not deliver (`fence`), or versioned beyond what any clock
    /// allows, are refused and counted.
    pub fn apply_page(&mut self, page: &SlotPage, fence: &PageFence) -> PageMerge {
        self.apply_entries(&page.slot_names, &page.entries, fence, |_| {})
    }

    /// [`apply_page`](Self::apply_page) of some of a page's entries, `entries`, whose slots
    /// the page names `slot_names`: a page merged a run of entries at a time. Each counter an
    /// entry changed is told to `changed` by its table index.
    pub fn apply_entries(
        &mut self,
        slot_names: &[String],
        entries: &[SlotEntry],
        fence: &PageFence,
        mut changed: impl FnMut(usize),
    ) -> PageMerge {
        let mapping: Vec<Option<u16>> = slot_names
            .iter()
            .map(|n| self.slot_index(n).filter(|s| fence.slots.contains(s)))
            .collect();
        let mut merge = PageMerge::default();
        let mut invalid = 0;
        for entry in entries {
            if counter_id::validate(&entry.id).is_err() {
                invalid += 1;
                continue;
            }
            let Some(Some(slot)) = mapping.get(entry.slot as usize) else {
                merge.refused_slot += 1;
                continue;
            };
            if entry.record.state.version > fence.max_version {
                merge.refused_version += 1;
                continue;
            }
            let key = || CounterId::new(entry.id.as_str()).expect("validated above");
            match self.merge_keyed(*slot, &entry.id, key, &entry.record) {
                Merged::Changed(index) => {
                    merge.changed += 1;
                    changed(index);
                }
                Merged::OverBound => merge.refused_bytes += 1,
                Merged::Unchanged => {}
            }
        }
        if invalid > 0 {
            tracing::warn!(invalid, "skipped pulled entries with invalid counter ids");
        }
        merge
    }

    /// The journal's epoch: drawn when this process started.
    pub fn epoch(&self) -> u64 {
        self.journal.epoch()
    }

    /// One page of every counter's record in slot `slot`: the counters from table index
    /// `from`, at most `limit` of them looked at, and where the next page starts. Counters are
    /// only ever added, so pages taken one after another miss none that was held at the first.
    pub fn copy_page(
        &self,
        slot: u16,
        from: u64,
        limit: usize,
    ) -> (Vec<(String, SlotRecord)>, Option<u64>) {
        let (range, next) = crate::journal::copy_range(from, limit, self.counters.len());
        let entries = range
            .filter_map(|index| {
                let (id, c) = self.counters.get_index(index)?;
                c.slots
                    .iter()
                    .find(|(s, _)| *s == slot)
                    .map(|(_, record)| (id.to_string(), record.clone()))
            })
            .collect();
        (entries, next)
    }

    /// Counter `id`'s copies, `(slot index, state)`.
    pub fn get(&self, id: &str) -> Option<&[(u16, SlotRecord)]> {
        self.counters.get(id).map(|c| &*c.slots)
    }

    /// Counter `id`'s table index, if held.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.counters.get_index_of(id)
    }

    /// The counter at table index `index`, with its copies. Counters are only ever added, so
    /// an index keeps naming the same counter.
    pub fn get_index(&self, index: usize) -> Option<(&str, &[(u16, SlotRecord)])> {
        (self.counters.get_index(index)).map(|(id, copies)| (id.as_str(), &*copies.slots))
    }

    /// Every counter with its copies.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[(u16, SlotRecord)])> {
        self.counters.iter().map(|(id, c)| (id.as_str(), &*c.slots))
    }

    /// How many counters are held.
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// Whether no counter is held.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    /// A page of the states changed since `cursor`, at most `limit` counters.
    pub fn page(&self, cursor: geocount_model::wire::Cursor, limit: usize) -> SlotPage {
        self.page_of(cursor, limit, None)
    }

    /// Like [`SlotCopies::page`], with only the counters of `partitions` (`None`: all).
    pub fn page_of(
        &self,
        cursor: geocount_model::wire::Cursor,
        limit: usize,
        partitions: Option<&Partitions>,
    ) -> SlotPage {
        let names = self.slot_names.clone();
        slot_page(self, &self.journal, names, cursor, limit, partitions)
    }
}

impl Journaled for SlotCopies {
    type Item = SlotEntry;

    fn latest_seq(&self, index: usize) -> Option<u64> {
        self.counters
            .get_index(index)
            .map(|(_, copies)| copies.latest_seq)
    }

    fn weight(&self, index: usize) -> usize {
        let copies = &self.counters[index].slots;
        1 + copies.iter().map(|(_, r)| record_weight(r)).sum::<usize>()
    }

    fn items(&self, index: usize, out: &mut Vec<SlotEntry>) {
        let (id, copies) = self.counters.get_index(index).expect("index in range");
        for (slot, record) in copies.slots.iter() {
            out.push(SlotEntry {
                slot: *slot,
                id: id.to_string(),
                record: record.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::wire::Cursor;

    fn state(value: i64, version: u64) -> SlotRecord {
        geocount_model::SlotState { value, version }.into()
    }

    #[test]
    fn one_copy_is_held_in_the_entry_and_more_in_a_block() {
        // The table's entry: a 24-byte id, the copies, the journal sequence.
        assert_eq!(std::mem::size_of::<CounterCopies>(), 48);
        let mut copies = Copies::default();
        assert!(copies.is_empty());
        copies.push((3, state(30, 1)));
        assert!(matches!(copies, Copies::One(_)));
        copies.push((1, state(10, 2)));
        copies.push((2, state(20, 3)));
        assert!(matches!(copies, Copies::Many(_)));
        let held: Vec<(u16, i64)> = copies.iter().map(|(s, r)| (*s, r.state.value)).collect();
        assert_eq!(held, [(3, 30), (1, 10), (2, 20)]);
        copies[1].1 = state(11, 4);
        assert_eq!(copies[1].1.state.value, 11);
    }

    #[test]
    fn pulled_entries_with_invalid_ids_are_skipped() {
        // A faulty peer's page: ids no client could have written, beside a good one.
        let mut peer = SlotCopies::new(vec!["DC_A_VAL_0".to_owned()]);
        peer.merge(0, &CounterId::new("good").unwrap(), &state(5, 1));
        let mut page = peer.page(Cursor::Start, 100);
        for id in ["", "bell\u{7}", &"x".repeat(257)] {
            page.entries.push(SlotEntry {
                slot: 0,
                id: id.to_owned(),
                record: state(5, 1),
            });
        }
        assert_eq!(page.entries.len(), 4);
        let mut table = SlotCopies::new(vec!["DC_A_VAL_0".to_owned()]);
        assert_eq!(table.apply_page(&page, &PageFence::open(2)).changed, 1);
        assert_eq!(table.len(), 1);
        assert!(table.get("good").is_some());
    }

    /// The entry count of each page of `limit` from the start until caught up, and the cursor
    /// after the last.
    fn page_sizes(table: &SlotCopies, limit: usize) -> (Vec<usize>, Cursor) {
        let mut pages = Vec::new();
        let mut cursor = Cursor::Start;
        loop {
            let page = table.page(cursor, limit);
            pages.push(page.entries.len());
            cursor = page.next;
            if page.caught_up {
                return (pages, cursor);
            }
        }
    }

    #[test]
    fn pages_hold_fewer_counters_with_big_sketches() {
        let mut table = SlotCopies::new(vec!["DC_A_VAL_0".to_owned()]);
        let mut unique = state(0, 1);
        for n in 0..5_000 {
            unique.add_item(geocount_model::unique::hash_item(&format!("u{n}")), 2);
        }
        assert!(unique.uniques().unwrap().is_dense());
        for id in ["u1", "u2", "u3"] {
            table.merge(0, &CounterId::new(id).unwrap(), &unique);
        }
        for id in ["p1", "p2", "p3"] {
            table.merge(0, &CounterId::new(id).unwrap(), &state(1, 1));
        }
        let (pages, cursor) = page_sizes(&table, 300);
        // A dense sketch counts 257 entries' worth: a page fills at 300 after two of them.
        assert_eq!(pages, vec![2, 4]);
        // The same holds for the changes after a cursor.
        for id in ["u1", "u2", "u3", "p1"] {
            let mut newer = table.get(id).unwrap()[0].1.clone();
            newer.state.version += 10;
            table.merge(0, &CounterId::new(id).unwrap(), &newer);
        }
        let page = table.page(cursor, 300);
        assert_eq!((page.entries.len(), page.caught_up), (2, false));
        let page = table.page(page.next, 300);
        assert_eq!((page.entries.len(), page.caught_up), (2, true));
    }

    #[test]
    fn pages_hold_fewer_counters_with_long_windows() {
        let mut table = SlotCopies::new(vec!["DC_A_VAL_0".to_owned()]);
        // An hour of one-second buckets: 3,600 × 16 bytes, 900 entries' worth.
        let mut busy = state(0, 1);
        for second in 0..3_600u64 {
            busy.window_mut()
                .unwrap()
                .record(1_000_000 + second, 1, 3_600)
                .unwrap();
        }
        assert_eq!(record_weight(&busy), 900);
        let mut quiet = state(1, 1);
        quiet
            .window_mut()
            .unwrap()
            .record(1_000_000, 1, 300)
            .unwrap();
        assert_eq!(
            record_weight(&quiet),
            0,
            "a few buckets weigh nothing extra"
        );
        for id in ["b1", "b2", "b3"] {
            table.merge(0, &CounterId::new(id).unwrap(), &busy);
        }
        for id in ["q1", "q2"] {
            table.merge(0, &CounterId::new(id).unwrap(), &quiet);
        }
        let (pages, _) = page_sizes(&table, 1_000);
        // A page of 1,000 fills after two long windows (not 1,000 counters); the quiet counters
        // share the last.
        assert_eq!(pages, vec![2, 3]);
    }

    #[test]
    fn pages_replay_into_another_table_in_any_order() {
        let names = vec!["DC_A_VAL_0".to_owned(), "DC_A_VAL_1".to_owned()];
        let mut source = SlotCopies::new(names.clone());
        source.merge(0, &CounterId::new("c").unwrap(), &state(5, 10));
        source.merge(1, &CounterId::new("c").unwrap(), &state(3, 7));
        source.merge(0, &CounterId::new("d").unwrap(), &state(1, 2));
        // The puller holds the slots in another order.
        let mut copy = SlotCopies::new(vec![
            names[1].clone(),
            names[0].clone(),
            "DC_B_VAL_0".into(),
        ]);
        let page = source.page(Cursor::Start, 100);
        assert!(page.caught_up);
        assert_eq!(copy.apply_page(&page, &PageFence::open(2)).changed, 3);
        assert_eq!(
            copy.apply_page(&page, &PageFence::open(2)).changed,
            0,
            "a repeated page changes nothing"
        );
        let mut c: Vec<_> = copy.get("c").unwrap().to_vec();
        c.sort_unstable_by_key(|(s, _)| *s);
        assert_eq!(c, vec![(0, state(3, 7)), (1, state(5, 10))]);
        // An old state arriving late does not win.
        source.merge(0, &CounterId::new("c").unwrap(), &state(9, 11));
        let newer = source.page(page.next, 100);
        assert_eq!(newer.entries.len(), 2, "both slots of the changed counter");
        copy.apply_page(&newer, &PageFence::open(2));
        copy.apply_page(&page, &PageFence::open(2));
        assert_eq!(
            copy.get("c")
                .unwrap()
                .iter()
                .find(|(s, _)| *s == 1)
                .unwrap()
                .1,
            state(9, 11)
        );
        assert_eq!(
            copy.copy_page(1, 0, 100),
            (
                vec![
                    ("c".to_owned(), state(9, 11)),
                    ("d".to_owned(), state(1, 2))
                ],
                None
            )
        );
        // Paged one counter at a time, the pages add up to the whole copy.
        let (first, next) = copy.copy_page(1, 0, 1);
        assert_eq!((first.len(), next), (1, Some(1)));
        let (second, next) = copy.copy_page(1, 1, 1);
        assert_eq!((second.len(), next), (1, None));
    }

    #[test]
    fn a_fenced_page_keeps_only_its_sources_slots_and_sane_versions() {
        let names = vec!["DC_A_VAL_0".to_owned(), "DC_A_VAL_1".to_owned()];
        let mut source = SlotCopies::new(names.clone());
        let id = |s: &str| CounterId::new(s).unwrap();
        source.merge(0, &id("mine"), &state(1, 5));
        source.merge(1, &id("theirs"), &state(2, 5));
        source.merge(0, &id("pinned"), &state(3, u64::MAX));
        let page = source.page(Cursor::Start, 100);
        let mut copy = SlotCopies::new(names);
        let fence = PageFence {
            slots: vec![0],
            max_version: 1_000,
        };
        let merge = copy.apply_page(&page, &fence);
        assert_eq!(
            merge,
            PageMerge {
                changed: 1,
                refused_slot: 1,
                refused_version: 1,
                refused_bytes: 0,
            }
        );
        assert!(copy.get("theirs").is_none() && copy.get("pinned").is_none());
    }

    #[test]
    fn entries_past_the_byte_bound_are_refused_and_the_count_follows_merges() {
        let names = vec!["DC_A_VAL_0".to_owned()];
        let mut source = SlotCopies::new(names.clone());
        let id = |s: &str| CounterId::new(s).unwrap();
        for n in 0..10 {
            source.merge(0, &id(&format!("c{n}")), &state(n, 5));
        }
        let one = (id_bytes("c0") + record_bytes(&state(0, 5))) as u64;
        assert_eq!(source.bytes().held(), 10 * one);
        let mut copy = SlotCopies::new(names);
        copy.set_max_bytes(4 * one);
        let merge = copy.apply_page(&source.page(Cursor::Start, 100), &PageFence::open(1));
        assert_eq!((merge.changed, merge.refused_bytes), (4, 6));
        assert_eq!((copy.len(), copy.bytes().held()), (4, 4 * one));
        // A newer copy of a held counter, no bigger, still merges; one no newer is no refusal.
        assert!(copy.merge(0, &id("c0"), &state(7, 6)));
        assert!(!copy.merge(0, &id("c0"), &state(7, 6)));
        assert_eq!(copy.bytes().held(), 4 * one);
    }
}
