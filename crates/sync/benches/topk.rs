//! The top-K index with 1,000,000 counters: all-time top 10 with no prefix, all-time top 10
//! with a prefix 1 % of ids have, one update (a counter's total changing), and windowed top 10s
//! when every one of the 1,000,000 counters has hits in the window: over the live window (the
//! trending window ending now, kept ranked), over another window (a scan), and the cost of one
//! counter's hits changing in the live window (what a merge, or the window moving past one of
//! its buckets, costs).
//!
//! `cargo bench -p geocount-sync --bench topk`

use std::hint::black_box;

use criterion::Criterion;
use geocount_model::Window;
use geocount_model::{SlotRecord, SlotState};
use geocount_sync::http::WindowQuery;
use geocount_sync::{Scope, TopIndex};

const COUNTERS: usize = 1_000_000;

/// A small deterministic generator.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

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

/// Resident memory, in bytes (Linux).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn bench(c: &mut Criterion) {
    let ids: Vec<String> = (0..COUNTERS).map(id).collect();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let before = resident_bytes();
    let mut index = TopIndex::new(vec![0], 300, 1_000);
    for (n, id) in ids.iter().enumerate() {
        index.update(n, id, &record((rng.next() % 1_000_000) as i64));
    }
    let after = resident_bytes();
    eprintln!(
        "index of {COUNTERS} counters: about {} bytes per counter resident (ids of 9-14 bytes)",
        after.saturating_sub(before) / COUNTERS as u64
    );

    c.bench_function("all-time top 10, no prefix", |b| {
        b.iter(|| black_box(index.all_time(Scope::All, black_box(""), 10)))
    });
    c.bench_function("all-time top 10, prefix of 1% of ids", |b| {
        b.iter(|| black_box(index.all_time(Scope::All, black_box("#"), 10)))
    });
    c.bench_function("one update", |b| {
        b.iter(|| {
            let n = (rng.next() % COUNTERS as u64) as usize;
            let value = (rng.next() % 1_000_000) as i64;
            index.update(n, &ids[n], &record(value));
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
    [(
        0,
        SlotRecord {
            state,
            window,
            ..SlotRecord::default()
        },
    )]
}

/// Every counter with hits in the last second of the live window, 300 s ending at 1,000.
fn windowed(c: &mut Criterion, ids: &[String]) {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    let mut records: Vec<[(u16, SlotRecord); 1]> = (0..ids.len())
        .map(|_| windowed_record((rng.next() % 1_000) as i64 + 1))
        .collect();
    let mut index = TopIndex::new(vec![0], 300, 1_000);
    for (n, id) in ids.iter().enumerate() {
        index.update(n, id, &records[n]);
    }
    let live = index.live_window();
    c.bench_function(
        "windowed top 10, live window, all 1,000,000 counters in it",
        |b| {
            b.iter(|| {
                black_box(index.windowed(&[Scope::All], "", 10, None, live, |n| &records[n][..]))
            })
        },
    );
    let other = WindowQuery {
        seconds: 299,
        at: 1_000,
    };
    c.bench_function(
        "windowed top 10, another window (scan), all 1,000,000 counters in it",
        |b| {
            b.iter(|| {
                black_box(index.windowed(&[Scope::All], "", 10, None, other, |n| &records[n][..]))
            })
        },
    );
    c.bench_function("one update of a counter's hits in the live window", |b| {
        b.iter(|| {
            let n = (rng.next() % COUNTERS as u64) as usize;
            records[n] = windowed_record((rng.next() % 1_000) as i64 + 1);
            index.update(n, &ids[n], &records[n]);
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
