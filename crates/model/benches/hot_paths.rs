//! The model's hot paths: decoding a postcard batch of 1,000 writes (what `POST /batch` does
//! first) and encoding its answer (and, for comparison, the log's records), merging slot
//! records (what every tier does with every copy it pulls), recording a hit in a rolling
//! window, and a window read over a full 300-second window.
//!
//! `cargo bench -p geocount-model --bench hot_paths`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput};
use geocount_model::wire::{BatchRequest, BatchResponse, EntryOutcome};
use geocount_model::{CounterId, SlotRecord, SlotState, Window};

/// Writes per batch, as `geoctl load` and `scripts/bench.sh` send them.
const BATCH: usize = 1_000;
/// The window length every counter gets by default.
const WINDOW_SECONDS: u32 = 300;

/// The postcard body of a batch of `BATCH` writes to counters `bench-<n>` (n < 100,000),
/// without idempotency keys or timestamps.
fn batch_body() -> Vec<u8> {
    // Spread over the 100,000 ids by a fixed stride (no generator needed for a decode).
    let ids: Vec<String> = (0..BATCH)
        .map(|n| format!("bench-{}", n * 7_919 % 100_000))
        .collect();
    postcard::to_allocvec(&BatchRequest::increments(&ids)).expect("a batch encodes")
}

/// A record with `buckets` seconds of hits ending at second `newest`.
fn record(version: u64, buckets: u64, newest: u64) -> SlotRecord {
    let mut window = Window::default();
    for second in newest + 1 - buckets..=newest {
        window
            .record(second, 1, WINDOW_SECONDS)
            .expect("no overflow");
    }
    SlotRecord::sum(
        SlotState {
            value: buckets as i64,
            version,
        },
        window,
    )
}

fn bench(c: &mut Criterion) {
    let body = batch_body();
    let mut group = c.benchmark_group("batch");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("decode 1,000 writes (postcard)", |b| {
        b.iter(|| {
            let batch: BatchRequest<'_> = postcard::from_bytes(black_box(&body)).expect("decodes");
            black_box(batch.entries.len())
        })
    });
    // The answer a node gives such a batch: one outcome per write.
    let answer = BatchResponse {
        slot: "DC_USA_0_VAL_1".into(),
        outcomes: (0..BATCH as i64)
            .map(|n| EntryOutcome::Applied {
                value: n * 1_000 + 7,
                version: 1_795_000_000_000_000 + n as u64,
            })
            .collect(),
    };
    group.bench_function(
        "encode the answer to 1,000 writes (postcard::to_allocvec)",
        |b| b.iter(|| postcard::to_allocvec(black_box(&answer)).expect("encodes")),
    );
    group.bench_function("encode the answer to 1,000 writes (encode::to_vec)", |b| {
        b.iter(|| geocount_model::encode::to_vec(black_box(&answer)).expect("encodes"))
    });
    let records: Vec<(CounterId, SlotRecord)> = (0..BATCH as u64)
        .map(|n| {
            (
                CounterId::new(format!("bench-{n}")).expect("a valid id"),
                record(1_795_000_000_000_000 + n, 1, 1_000),
            )
        })
        .collect();
    // The log's records (ids and slot records): here postcard's own flavor is the faster.
    group.bench_function(
        "encode 1,000 slot records with ids (postcard::to_allocvec)",
        |b| b.iter(|| postcard::to_allocvec(black_box(&records)).expect("encodes")),
    );
    group.bench_function("encode 1,000 slot records with ids (encode::to_vec)", |b| {
        b.iter(|| geocount_model::encode::to_vec(black_box(&records)).expect("encodes"))
    });
    group.finish();

    let mut group = c.benchmark_group("merge");
    group.throughput(Throughput::Elements(BATCH as u64));
    // A newer copy replaces each held record (a record of a few buckets, as a busy counter has).
    let held: Vec<SlotRecord> = (0..BATCH as u64).map(|n| record(n + 1, 4, 1_000)).collect();
    let newer: Vec<SlotRecord> = (0..BATCH as u64)
        .map(|n| record(n + 10_000, 5, 1_001))
        .collect();
    group.bench_function("1,000 slot records, newer copies", |b| {
        b.iter_batched_ref(
            || held.clone(),
            |held| {
                let mut changed = 0;
                for (mine, theirs) in held.iter_mut().zip(&newer) {
                    changed += usize::from(mine.merge(black_box(theirs)));
                }
                changed
            },
            BatchSize::SmallInput,
        )
    });
    // A repeated copy (the same version) changes nothing: what most of a re-pulled page is.
    group.bench_function("1,000 slot records, same copies", |b| {
        let mut held = newer.clone();
        b.iter(|| {
            let mut changed = 0;
            for (mine, theirs) in held.iter_mut().zip(&newer) {
                changed += usize::from(mine.merge(black_box(theirs)));
            }
            changed
        })
    });
    group.finish();

    let mut group = c.benchmark_group("window");
    let full = record(1, u64::from(WINDOW_SECONDS), 10_000)
        .window()
        .clone();
    group.bench_function("read 60 s of a full 300 s window", |b| {
        b.iter(|| black_box(&full).sum(black_box(60), black_box(10_000)))
    });
    group.bench_function("read all of a full 300 s window", |b| {
        b.iter(|| black_box(&full).sum(black_box(WINDOW_SECONDS), black_box(10_000)))
    });
    group.bench_function("record a hit in the newest second", |b| {
        let mut window = full.clone();
        b.iter(|| window.record(black_box(10_000), 1, WINDOW_SECONDS))
    });
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
