//! The floor under the growth curve of `scripts/bench.sh`: uniform increments into a map of the
//! slot table's shape (`IndexMap<CounterId, _>` with foldhash), and nothing else, as the number of
//! counters grows from 1,000 to 10,000,000. No log, no fsync, no checkpoint, no HTTP: what is
//! left is the table's hashing and the memory hierarchy (1,000 rows stay in the CPU's caches,
//! 10,000,000 do not). The ratio of its 10,000,000 point to its 1,000 point bounds how flat the
//! node's own curve can be on this machine. The same table keyed by boxed ids (`Box<str>`, the
//! key before ids were held inline) is timed beside it, to show what inline ids save.
//!
//! `cargo bench -p shard-node --bench growth_floor`

use std::borrow::Borrow;
use std::hash::Hash;

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use geocount_model::CounterId;
use indexmap::IndexMap;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Increments per measured batch, as one `POST /batch`.
const BATCH: usize = 1_000;

/// A row of the slot table's size: value, version, a one-bucket window, a sketch pointer and the
/// journal's sequence (the table's `Row`, 56 bytes).
#[derive(Default, Clone, Copy)]
struct Row {
    value: i64,
    version: u64,
    _window: [u64; 3],
    _sketch: u64,
    _seq: u64,
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("growth floor");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sample_size(20);
    for counters in [1_000usize, 100_000, 1_000_000, 10_000_000] {
        // The slot table's key: the id inline when it fits in 24 bytes.
        increments(&mut group, "1,000 uniform increments", counters, |id| {
            CounterId::new(id).expect("a valid id")
        });
        // The key before it: the id in a heap block of its own.
        increments(
            &mut group,
            "1,000 uniform increments, boxed ids",
            counters,
            String::into_boxed_str,
        );
    }
    group.finish();
}

/// Times 1,000 uniform increments into a table of `counters` rows keyed by `key(id)`.
fn increments<K: Hash + Eq + Clone + Borrow<str>>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    counters: usize,
    key: impl Fn(String) -> K,
) {
    let ids: Vec<K> = (0..counters).map(|n| key(format!("c-{n}"))).collect();
    let mut table: IndexMap<K, Row, foldhash::fast::RandomState> =
        IndexMap::with_capacity_and_hasher(counters, Default::default());
    for id in &ids {
        table.insert(id.clone(), Row::default());
    }
    let mut rng = StdRng::seed_from_u64(6);
    group.bench_function(BenchmarkId::new(name, counters), |b| {
        b.iter_batched(
            || {
                (0..BATCH)
                    .map(|_| rng.random_range(0..counters))
                    .collect::<Vec<_>>()
            },
            |picks| {
                for n in picks {
                    let row = table.get_mut(ids[n].borrow()).expect("every id is held");
                    row.value += 1;
                    row.version += 1;
                }
            },
            BatchSize::SmallInput,
        )
    });
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
