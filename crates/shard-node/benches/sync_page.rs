//! Serving one `/sync` page of the own slot to several pullers (the datacenter aggregator and
//! the peers): 10,000 of 100,000 counters changed since their cursor, each with a rolling window
//! of a few seconds. `cloned` builds each puller's page the ordinary way (every row's id and
//! record cloned into a `SyncPage`, then encoded); `encoded` encodes each changed row once, at
//! the first pull, and splices the encodings into every puller's page.
//!
//! `cargo bench -p shard-node --bench sync_page`

use std::cell::RefCell;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use geocount_model::wire::{Cursor, SyncPage};
use geocount_model::{CounterId, SlotRecord, SlotState, Window};
use geocount_sync::encode_sync_page;
use shard_node::engine::slot_table::SlotTable;

const COUNTERS: usize = 100_000;
const CHANGED: usize = 10_000;
const SLOT: &str = "dc-1/shard-0";

/// A sum counter's record at `version`, with hits in its last three seconds.
fn record(version: u64) -> SlotRecord {
    let mut window = Window::default();
    for second in 0..3 {
        window
            .record(1_700_000_000 + version + second, 3 + second as i64, 3_600)
            .expect("a hit in the window");
    }
    SlotRecord::sum(
        SlotState {
            value: 1_000 + version as i64,
            version,
        },
        window,
    )
}

/// The table, its counters' ids, and where the pullers' cursors stand.
struct Source {
    table: SlotTable,
    ids: Vec<CounterId>,
    epoch: u64,
    seq: u64,
    version: u64,
}

impl Source {
    fn new() -> Self {
        let mut table = SlotTable::default();
        let ids: Vec<CounterId> = (0..COUNTERS)
            .map(|n| CounterId::new(format!("user:{n}:page-views")).unwrap())
            .collect();
        for id in &ids {
            table.merge(id, &record(1));
        }
        let Cursor::Seq { epoch, seq } = table.page(SLOT, Cursor::Start, usize::MAX, None).next
        else {
            unreachable!("a full copy ends at a sequence cursor")
        };
        Self {
            table,
            ids,
            epoch,
            seq,
            version: 1,
        }
    }

    /// Changes `CHANGED` counters, spread over the table; the cursor the pullers stand at.
    fn change(&mut self) -> Cursor {
        let cursor = Cursor::Seq {
            epoch: self.epoch,
            seq: self.seq,
        };
        self.version += 1;
        let record = record(self.version);
        for id in self.ids.iter().step_by(COUNTERS / CHANGED) {
            self.table.merge(id, &record);
        }
        self.seq += CHANGED as u64;
        cursor
    }
}

fn page(slots: geocount_model::wire::SlotPage) -> SyncPage {
    SyncPage {
        source: SLOT.into(),
        slots: Some(slots),
        load: 12_345,
        incarnation: 0x1234_5678_9abc_def0,
        nonce: 42,
        ..SyncPage::default()
    }
}

fn bench(c: &mut Criterion) {
    let source = RefCell::new(Source::new());
    let mut group = c.benchmark_group("sync_page");
    group.throughput(Throughput::Elements(CHANGED as u64));
    for pullers in [1, 2, 3] {
        group.bench_with_input(BenchmarkId::new("cloned", pullers), &pullers, |b, &n| {
            b.iter_batched(
                || source.borrow_mut().change(),
                |cursor| {
                    let source = source.borrow();
                    (0..n)
                        .map(|_| {
                            let slots = source.table.page(SLOT, cursor, usize::MAX, None);
                            assert_eq!(slots.entries.len(), CHANGED);
                            postcard::to_allocvec(&page(slots)).unwrap().len()
                        })
                        .sum::<usize>()
                },
                BatchSize::PerIteration,
            )
        });
        group.bench_with_input(BenchmarkId::new("encoded", pullers), &pullers, |b, &n| {
            b.iter_batched(
                || source.borrow_mut().change(),
                |cursor| {
                    let source = source.borrow();
                    (0..n)
                        .map(|_| {
                            let (slots, entries) =
                                source.table.encoded_page(SLOT, cursor, usize::MAX, None);
                            assert_eq!(entries.count, CHANGED);
                            encode_sync_page(&page(slots), Some(&entries))
                                .unwrap()
                                .len()
                        })
                        .sum::<usize>()
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
