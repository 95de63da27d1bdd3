//! What an aggregator's pull costs: merging a page of 1,000 changed counters (3 slots of one
//! datacenter each, with windows) into a global replica of 100,000 counters over 3
//! datacenters, ranked per datacenter and worldwide; and a page of 1,000 counters of one slot
//! each into a datacenter replica. The top-K index alone is benched in
//! `crates/ranking/benches/topk.rs`.
//!
//! `cargo bench -p geocount-aggregator --bench merge`

use std::hint::black_box;

use criterion::Criterion;
use geocount_aggregator::replica::Replica;
use geocount_model::fixtures::resident_bytes;
use geocount_model::wire::{Cursor, SlotEntry, SlotPage};
use geocount_model::{SlotId, SlotRecord, SlotState, Window};
use geocount_ranking::LiveRanking;
use geocount_sync::PageFence;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Counter `n`'s id: one in a hundred (`n` ending in 07) is a hashtag.
fn id(n: usize) -> String {
    if n % 100 == 7 {
        format!("#tag-{n}")
    } else {
        format!("counter-{n}")
    }
}

/// The time rankings are made at: the end of the live window the replicas rank (unix ms).
const NOW_MS: u64 = 1_000_000;

/// Merges `page` into `replica` whole and ranks every counter it changed.
fn merge_all(replica: &mut Replica, page: &SlotPage) {
    let fence = PageFence::open(replica.copies().slot_names().len());
    replica.merge_entries(&page.slot_names, &page.entries, &fence);
    replica.rank_pending(usize::MAX, NOW_MS);
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
    replica: &mut Replica,
    ids: &[String],
    slots_of: &dyn Fn(usize) -> std::ops::Range<u16>,
) {
    let names = replica.copies().slot_names().to_vec();
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
                let changed =
                    (replica.merge_entries(&page.slot_names, &page.entries, &fence)).changed;
                replica.rank_pending(usize::MAX, NOW_MS);
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
    let mut replica = Replica::new(names.clone(), &[]);
    replica.index_top(vec![0, 0, 0, 1, 1, 2], LiveRanking::new(300, 1_000));
    merge_all(&mut replica, &full);
    eprintln!(
        "global copies of {GLOBAL_COUNTERS} counters in 6 slots of 3 datacenters, ranked: about {} bytes per (counter, datacenter) resident",
        resident_bytes().saturating_sub(before) / (3 * GLOBAL_COUNTERS as u64)
    );
    drop(full);
    merge_pages(
        c,
        "global tier: merge and rank a page of 1,000 counters x 3 slots, 100,000 counters held",
        &mut replica,
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
    let mut replica = Replica::new(names, &[]);
    replica.index_top(vec![0, 0, 0], LiveRanking::new(300, 1_000));
    merge_all(&mut replica, &full);
    drop(full);
    merge_pages(
        c,
        "datacenter tier: merge and rank a page of 1,000 counters x 1 slot, 100,000 counters held",
        &mut replica,
        &ids,
        &slot_of,
    );
}

// What `criterion_group!`/`criterion_main!` expand to, without their undocumented public fn.
fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    global_page(&mut criterion);
    datacenter_page(&mut criterion);
    criterion.final_summary();
}
