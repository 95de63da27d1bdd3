//! The top-K index with 1,000,000 counters: all-time top 10 with no prefix, all-time top 10
//! with a prefix 1 % of ids have, with a prefix of one id no leader has (a scan), one update (a
//! counter's total changing), and windowed top 10s when every one of the 1,000,000 counters has
//! hits in the window: over the live window (the trending window ending now, kept ranked), over
//! another window (a scan), and the cost of one counter's hits changing in the live window
//! (what a merge, or the window moving past one of its buckets, costs).
//!
//! What merging a pulled page and ranking it costs an aggregator is benched with the replica
//! (`crates/aggregator/benches/merge.rs`).
//!
//! `cargo bench -p geocount-ranking --bench topk`

use std::hint::black_box;

use criterion::Criterion;
use geocount_model::Window;
use geocount_model::WindowQuery;
use geocount_model::fixtures::resident_bytes;
use geocount_model::{SlotRecord, SlotState};
use geocount_ranking::{LiveRanking, RankedCounters, Scope, TopIndex};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const COUNTERS: usize = 1_000_000;

/// Counter `n`'s id: one in a hundred (`n` ending in 07) is a hashtag.
fn id(n: usize) -> String {
    if n % 100 == 7 {
        format!("#tag-{n}")
    } else {
        format!("counter-{n}")
    }
}

fn record(value: i64) -> [(u16, SlotRecord); 1] {
    [(0, SlotRecord::from(SlotState { value, version: 1 }))]
}

/// The counters ranked: ids and each one's single slot copy, by index.
struct Counters<'a> {
    ids: &'a [String],
    records: Vec<[(u16, SlotRecord); 1]>,
}

impl RankedCounters for Counters<'_> {
    fn len(&self) -> usize {
        self.records.len()
    }

    fn id(&self, index: usize) -> &str {
        &self.ids[index]
    }

    fn records(&self, index: usize) -> &[(u16, SlotRecord)] {
        &self.records[index]
    }
}

fn bench(c: &mut Criterion) {
    let ids: Vec<String> = (0..COUNTERS).map(id).collect();
    let mut rng = StdRng::seed_from_u64(0x9E37_79B9_7F4A_7C15);
    let mut index = TopIndex::new(vec![0], LiveRanking::new(300, 1_000));
    let mut counters = Counters {
        ids: &ids,
        records: (0..COUNTERS)
            .map(|_| record(rng.random_range(0..1_000_000)))
            .collect(),
    };
    let before = resident_bytes();
    for n in 0..COUNTERS {
        index.update(n, &counters.records[n]);
    }
    let after = resident_bytes();
    eprintln!(
        "index of {COUNTERS} counters: about {} bytes per counter resident (the leaders alone)",
        after.saturating_sub(before) / COUNTERS as u64
    );

    c.bench_function("all-time top 10, no prefix", |b| {
        b.iter(|| black_box(index.all_time(Scope::All, black_box(""), 10, &counters)))
    });
    c.bench_function("all-time top 10, prefix of 1% of ids", |b| {
        b.iter(|| black_box(index.all_time(Scope::All, black_box("#"), 10, &counters)))
    });
    c.bench_function(
        "all-time top 10, prefix of 1 id no leader has (a scan of every counter)",
        |b| {
            b.iter(|| black_box(index.all_time(Scope::All, black_box("#tag-12345"), 10, &counters)))
        },
    );
    c.bench_function("one update", |b| {
        b.iter(|| {
            let n = rng.random_range(0..COUNTERS);
            counters.records[n] = record(rng.random_range(0..1_000_000));
            index.update(n, &counters.records[n]);
        })
    });
}

/// One slot's record of `hits` at second 1,000.
fn windowed_record(hits: i64) -> [(u16, SlotRecord); 1] {
    let mut window = Window::default();
    window.record(1_000, hits, 300).expect("no overflow");
    let state = SlotState {
        value: hits,
        version: 1,
    };
    [(0, SlotRecord::sum(state, window))]
}

/// Every counter with hits in the last second of the live window, 300 s ending at 1,000.
fn windowed(c: &mut Criterion, ids: &[String]) {
    let mut rng = StdRng::seed_from_u64(0x2545_F491_4F6C_DD1D);
    let mut counters = Counters {
        ids,
        records: (0..ids.len())
            .map(|_| windowed_record(rng.random_range(1..=1_000)))
            .collect(),
    };
    let mut index = TopIndex::new(vec![0], LiveRanking::new(300, 1_000));
    for n in 0..ids.len() {
        index.update(n, &counters.records[n]);
    }
    let live = index.live_window();
    c.bench_function(
        "windowed top 10, live window, all 1,000,000 counters in it",
        |b| b.iter(|| black_box(index.windowed(&[Scope::All], "", 10, None, live, &counters))),
    );
    let other = WindowQuery {
        seconds: 299,
        at: 1_000,
    };
    c.bench_function(
        "windowed top 10, another window (scan), all 1,000,000 counters in it",
        |b| b.iter(|| black_box(index.windowed(&[Scope::All], "", 10, None, other, &counters))),
    );
    // `/trending` at a threshold about 10,000 of the counters reach: more than the leaders
    // kept, so without the bound the floor is over the threshold and every call scans.
    let threshold = 991;
    let mut held = TopIndex::new(
        vec![0],
        LiveRanking {
            hold_from: Some(threshold),
            ..LiveRanking::new(300, 1_000)
        },
    );
    for n in 0..ids.len() {
        held.update(n, &counters.records[n]);
    }
    let trending = [
        ("no bound held (a scan)", &mut index),
        ("leaders held from the threshold (a walk)", &mut held),
    ];
    for (how, index) in trending {
        let name = format!("trending: every counter with >= 991 hits (about 10,000), {how}");
        c.bench_function(&name, |b| {
            b.iter(|| {
                let min = Some(threshold);
                black_box(index.windowed(&[Scope::All], "", usize::MAX, min, live, &counters))
            })
        });
    }
    drop(held);
    c.bench_function("one update of a counter's hits in the live window", |b| {
        b.iter(|| {
            let n = rng.random_range(0..COUNTERS);
            counters.records[n] = windowed_record(rng.random_range(1..=1_000));
            index.update(n, &counters.records[n]);
        })
    });
}

// What `criterion_group!`/`criterion_main!` expand to, without their undocumented public fn.
fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    let ids: Vec<String> = (0..COUNTERS).map(id).collect();
    windowed(&mut criterion, &ids);
    criterion.final_summary();
}
