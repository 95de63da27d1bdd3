use geocount_model::wire::{Cursor, DescriptionPage, SlotEntry, SyncPage};
use geocount_model::{Partitions, SlotRecord, SlotState, UniqueSketch, Window};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::record_weight;

/// A counter's copies of some slots, by slot index.
type Copies = Vec<(u16, SlotRecord)>;

/// Counters (id, copies, latest change), for comparing encoded pages with the ordinary ones.
struct Table {
    journal: ChangeJournal,
    rows: Vec<(String, Copies, u64)>,
}

impl Table {
    fn new(capacity: usize) -> Self {
        Self {
            journal: ChangeJournal::with_capacity(capacity),
            rows: Vec::new(),
        }
    }

    /// Sets counter `n`'s copies (a new counter if `n` is past the last).
    fn set(&mut self, n: usize, copies: Copies) {
        let index = n.min(self.rows.len());
        if index == self.rows.len() {
            self.rows.push((format!("counter-{index}"), Vec::new(), 0));
        }
        let seq = self.journal.record(index);
        self.rows[index].1 = copies;
        self.rows[index].2 = seq;
    }
}

impl Journaled for Table {
    type Item = SlotEntry;

    fn latest_seq(&self, index: usize) -> Option<u64> {
        self.rows.get(index).map(|row| row.2)
    }

    fn weight(&self, index: usize) -> usize {
        1 + self.rows[index]
            .1
            .iter()
            .map(|(_, r)| record_weight(r))
            .sum::<usize>()
    }

    fn items(&self, index: usize, out: &mut Vec<SlotEntry>) {
        let (id, copies, _) = &self.rows[index];
        out.extend(copies.iter().map(|(slot, record)| SlotEntry {
            slot: *slot,
            id: id.clone(),
            record: record.clone(),
        }));
    }
}

impl EncodeItems for Table {
    fn id(&self, index: usize) -> &str {
        &self.rows[index].0
    }

    fn encode_items(&self, index: usize, out: &mut Vec<u8>) -> usize {
        let (id, copies, _) = &self.rows[index];
        for (slot, record) in copies {
            let entry = SlotEntryRef {
                slot: *slot,
                id,
                record,
            };
            entry.encode_into(out);
        }
        copies.len()
    }
}

/// A record of a sum (with a window of a few buckets, some of many hits) or a unique counter.
fn record(rng: &mut StdRng) -> SlotRecord {
    let state = SlotState {
        value: rng.random_range(-1_000_000..1_000_000_000_000),
        version: rng.random(),
    };
    if rng.random_ratio(1, 5) {
        let mut sketch = UniqueSketch::new();
        for item in 0..rng.random_range(0..400) {
            sketch.add(&format!("item-{item}"));
        }
        return SlotRecord::unique(state, Box::new(sketch));
    }
    let mut window = Window::default();
    let start = 1_700_000_000 + rng.random_range(0..1_000);
    for second in start..start + rng.random_range(0..20) {
        let bits = rng.random_range(1..40);
        let delta = rng.random_range(-5..1_i64 << bits);
        window
            .record(second, delta, 3_600)
            .expect("a hit in the window");
    }
    SlotRecord::sum(state, window)
}

fn copies(rng: &mut StdRng) -> Copies {
    (0..rng.random_range(0..4))
        .map(|_| (rng.random_range(0..300), record(rng)))
        .collect()
}

/// The page the ordinary way (its entries cloned into it), and with them encoded from `cache`;
/// checks both encode to the same bytes, which decode back to the page.
fn check(
    table: &Table,
    cache: &EncodedRows,
    cursor: Cursor,
    limit: usize,
    partitions: Option<&Partitions>,
    rng: &mut StdRng,
) -> SlotPage {
    let names = vec!["dc-1/shard-2".to_owned(), "dc-1/shard-3".to_owned()];
    let expected = crate::slot_page(
        table,
        &table.journal,
        names.clone(),
        cursor,
        limit,
        partitions,
    );
    let (slots, entries) = encoded_slot_page(
        table,
        &table.journal,
        cache,
        names,
        cursor,
        limit,
        partitions,
    );
    assert_eq!(entries.count, expected.entries.len());
    assert_eq!(
        (slots.next, slots.caught_up),
        (expected.next, expected.caught_up)
    );
    let around = SyncPage {
        source: "dc-1/shard-2".into(),
        slots: Some(slots),
        descriptions: rng.random_bool(0.5).then(|| DescriptionPage {
            items: Vec::new(),
            next: Cursor::Seq {
                epoch: rng.random(),
                seq: rng.random(),
            },
            caught_up: rng.random(),
        }),
        freshness: Vec::new(),
        load: rng.random(),
        incarnation: rng.random(),
        nonce: rng.random(),
        conflict: rng.random_bool(0.2).then(|| "another process".into()),
        keys: None,
    };
    let whole = SyncPage {
        slots: Some(expected.clone()),
        ..around.clone()
    };
    let bytes = encode_sync_page(&around, Some(&entries)).expect("the page encodes");
    assert_eq!(bytes, postcard::to_allocvec(&whole).unwrap());
    let decoded: SyncPage = postcard::from_bytes(&bytes).expect("the page decodes");
    assert_eq!(decoded, whole);
    expected
}

#[test]
fn encoded_pages_are_the_ordinary_pages_bytes() {
    let mut rng = StdRng::seed_from_u64(37);
    for case in 0..150 {
        let mut table = Table::new(rng.random_range(1..60));
        let cache = EncodedRows::default();
        let partitions = rng.random_bool(0.3).then(|| Partitions {
            count: 4,
            held: (0..4).filter(|_| rng.random_bool(0.5)).collect(),
        });
        // Two pullers with their own cursors, the table changing between their pulls.
        let mut cursors = [Cursor::Start, Cursor::Start];
        for _ in 0..rng.random_range(1..12) {
            for _ in 0..rng.random_range(0..30) {
                let n = rng.random_range(0..=table.rows.len());
                let copies = copies(&mut rng);
                table.set(n, copies);
            }
            for cursor in &mut cursors {
                let limit = rng.random_range(1..if case % 2 == 0 { 8 } else { 200 });
                let page = check(
                    &table,
                    &cache,
                    *cursor,
                    limit,
                    partitions.as_ref(),
                    &mut rng,
                );
                *cursor = page.next;
            }
        }
        // A foreign cursor gets a full copy, partly from the cache.
        let foreign = Cursor::Seq {
            epoch: table.journal.epoch() ^ 1,
            seq: 1,
        };
        check(
            &table,
            &cache,
            foreign,
            1_000,
            partitions.as_ref(),
            &mut rng,
        );
    }
}

#[test]
fn a_row_changed_after_a_pull_is_encoded_again() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut table = Table::new(100);
    let cache = EncodedRows::default();
    for n in 0..10 {
        table.set(
            n,
            vec![(
                0,
                SlotState {
                    value: 1,
                    version: 1,
                }
                .into(),
            )],
        );
    }
    let first = check(&table, &cache, Cursor::Start, 100, None, &mut rng);
    assert_eq!(first.entries.len(), 10);
    assert!(
        cache.inner.lock().unwrap().held > 0,
        "the pull filled the cache"
    );
    table.set(
        3,
        vec![(
            0,
            SlotState {
                value: 2,
                version: 2,
            }
            .into(),
        )],
    );
    let second = check(&table, &cache, first.next, 100, None, &mut rng);
    assert_eq!(second.entries.len(), 1);
    assert_eq!(second.entries[0].record.state.value, 2);
    // A full copy again: nine rows from the cache, the changed one as it is now.
    let again = check(&table, &cache, Cursor::Start, 100, None, &mut rng);
    assert_eq!(again.entries[3].record.state.value, 2);
}

#[test]
fn a_page_with_entries_of_its_own_is_refused() {
    let page = SyncPage {
        slots: Some(SlotPage {
            entries: vec![SlotEntry {
                slot: 0,
                id: "a".into(),
                record: SlotRecord::default(),
            }],
            ..SlotPage::default()
        }),
        ..SyncPage::default()
    };
    assert!(encode_sync_page(&page, Some(&EncodedEntries::default())).is_err());
    assert_eq!(
        encode_sync_page(&page, None).unwrap(),
        postcard::to_allocvec(&page).unwrap()
    );
}

#[test]
fn varints_are_postcards() {
    for value in [
        0,
        1,
        127,
        128,
        300,
        16_383,
        16_384,
        u32::MAX as u64,
        u64::MAX,
    ] {
        let mut out = Vec::new();
        push_varint(&mut out, value);
        assert_eq!(out, postcard::to_allocvec(&value).unwrap(), "{value}");
    }
}
