//! The top-K index with 1,000,000 counters: all-time top 10 with no prefix, all-time top 10
//! with a prefix 1 % of ids have, with a prefix of one id no leader has (a scan), one update (a
//! counter's total changing), and windowed top 10s when every one of the 1,000,000 counters has
//! hits in the window: over the live window (the trending window ending now, kept ranked), over
//! another window (a scan), and the cost of one counter's hits changing in the live window
//! (what a merge, or the window moving past one of its buckets, costs).
//!
//! Also what a global aggregator's pull costs: merging a page of 1,000 changed counters (3 slots
//! of one datacenter each, with windows) into copies of 100,000 counters over 3 datacenters,
//! ranked per datacenter and worldwide.
//!
//! `cargo bench -p geocount-sync --bench topk`

use std::hint::black_box;

use criterion::Criterion;
use geocount_http::routing::WindowQuery;
use geocount_model::Window;
use geocount_model::wire::{Cursor, SlotEntry, SlotPage};
use geocount_model::{SlotId, SlotRecord, SlotState};
use geocount_sync::{LiveRanking, PageFence, RankedCounters, Scope, SlotCopies, TopIndex};
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

/// Counters held by the global aggregator in [`global_page`].
const GLOBAL_COUNTERS: usize = 100_000;

/// A sum counter's record of `hits` at `version`, its window holding them.
fn record_at(hits: i64, version: u64) -> SlotRecord {
    let mut window = Window::default();
    window.record(1_000, hits, 300).expect("no overflow");
    SlotRecord::sum(
        SlotState {
            value: hits,
            version,
        },
        window,
    )
}

/// A pulled page of `counters` (indices into `ids`), each with a newer state in the slots
/// `slots_of` gives it.
fn page_of(
    names: &[String],
    ids: &[String],
    counters: &mut dyn Iterator<Item = usize>,
    slots_of: &dyn Fn(usize) -> std::ops::Range<u16>,
    version: u64,
) -> SlotPage {
    let mut entries = Vec::new();
    for n in counters {
        for slot in slots_of(n) {
            let hits = (n % 1_000) as i64 + i64::from(slot) + version as i64;
            entries.push(SlotEntry {
                slot,
                id: ids[n].clone(),
                record: record_at(hits, version),
            });
        }
    }
    SlotPage {
        slot_names: names.to_vec(),
        entries,
        next: Cursor::Start,
        caught_up: true,
    }
}

/// Merges and ranks pages of 1,000 random counters of `GLOBAL_COUNTERS`, each in the slots
/// `slots_of` gives it, into `copies`.
fn merge_pages(
    c: &mut Criterion,
    name: &str,
    copies: &mut SlotCopies,
    ids: &[String],
    slots_of: &dyn Fn(usize) -> std::ops::Range<u16>,
) {
    let names = copies.slot_names().to_vec();
    let fence = PageFence::open(names.len());
    let mut rng = StdRng::seed_from_u64(0x1234_5678_9ABC_DEF1);
    let mut version = 1;
    c.bench_function(name, |b| {
        b.iter_batched(
            || {
                version += 1;
                let mut counters = (0..1_000).map(|_| rng.random_range(0..GLOBAL_COUNTERS));
                page_of(&names, ids, &mut counters, slots_of, version)
            },
            |page| {
                let changed = copies.apply_page(&page, &fence).changed;
                copies.rank_pending(usize::MAX);
                black_box(changed)
            },
            criterion::BatchSize::LargeInput,
        )
    });
}

/// A global aggregator's copies of `GLOBAL_COUNTERS` counters in the 6 slots of 3 datacenters
/// (3, 2 and 1 slots), ranked; then the cost of merging one datacenter's page of 1,000 changed
/// counters, each with newer states in its 3 slots.
fn global_page(c: &mut Criterion) {
    let names: Vec<String> = [
        "DC_USA_0_VAL_0",
        "DC_USA_0_VAL_1",
        "DC_USA_0_VAL_2",
        "DC_ASIA_0_VAL_0",
        "DC_ASIA_0_VAL_1",
        "DC_EUROPE_0_VAL_0",
    ]
    .map(str::to_owned)
    .to_vec();
    let ids: Vec<String> = (0..GLOBAL_COUNTERS).map(id).collect();
    let full = page_of(&names, &ids, &mut (0..GLOBAL_COUNTERS), &|_| 0..6, 1);
    let before = resident_bytes();
    let mut copies = SlotCopies::new(names.clone());
    copies.index_top(vec![0, 0, 0, 1, 1, 2], LiveRanking::new(300, 1_000));
    copies.apply_page(&full, &PageFence::open(copies.slot_names().len()));
    copies.rank_pending(usize::MAX);
    eprintln!(
        "global copies of {GLOBAL_COUNTERS} counters in 6 slots of 3 datacenters, ranked: about {} bytes per (counter, datacenter) resident",
        resident_bytes().saturating_sub(before) / (3 * GLOBAL_COUNTERS as u64)
    );
    drop(full);
    merge_pages(
        c,
        "global tier: merge and rank a page of 1,000 counters x 3 slots, 100,000 counters held",
        &mut copies,
        &ids,
        &|_| 0..3,
    );
}

/// A datacenter aggregator's copies of `GLOBAL_COUNTERS` counters of one slot each (of 3),
/// ranked; then the cost of merging pages of 1,000 changed counters.
fn datacenter_page(c: &mut Criterion) {
    let names: Vec<String> = (0..3)
        .map(|n| SlotId::new("USA_0", n).to_string())
        .collect();
    let ids: Vec<String> = (0..GLOBAL_COUNTERS).map(id).collect();
    let slot_of = |n: usize| {
        let slot = (n % 3) as u16;
        slot..slot + 1
    };
    let full = page_of(&names, &ids, &mut (0..GLOBAL_COUNTERS), &slot_of, 1);
    let mut copies = SlotCopies::new(names);
    copies.index_top(vec![0, 0, 0], LiveRanking::new(300, 1_000));
    copies.apply_page(&full, &PageFence::open(copies.slot_names().len()));
    copies.rank_pending(usize::MAX);
    drop(full);
    merge_pages(
        c,
        "datacenter tier: merge and rank a page of 1,000 counters x 1 slot, 100,000 counters held",
        &mut copies,
        &ids,
        &slot_of,
    );
}

// What `criterion_group!`/`criterion_main!` expand to, without their undocumented public fn.
fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    global_page(&mut criterion);
    datacenter_page(&mut criterion);
    bench(&mut criterion);
    let ids: Vec<String> = (0..COUNTERS).map(id).collect();
    windowed(&mut criterion, &ids);
    criterion.final_summary();
}
