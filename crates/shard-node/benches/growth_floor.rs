//! The floor under the growth curve of `scripts/bench.sh`: uniform increments into a table of
//! the slot table's shape (an `IdTable` of 56-byte rows), and nothing else, as the number of
//! counters grows from 1,000 to 10,000,000. No log, no fsync, no checkpoint, no HTTP: what is
//! left is the table's hashing and the memory hierarchy (1,000 rows stay in the CPU's caches,
//! 10,000,000 do not). The ratio of its 10,000,000 point to its 1,000 point bounds how flat the
//! node's own curve can be on this machine. The table before it (`IndexMap<CounterId, _>` with
//! foldhash, which keeps each entry's hash and `usize` indices) is timed beside it.
//!
//! `cargo bench -p shard-node --bench growth_floor`

use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use geocount_model::{CounterId, IdTable};
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

/// A table of rows keyed by counter id.
trait Table {
    /// A table holding a default row for each of `ids`.
    fn holding(ids: &[CounterId]) -> Self;
    /// Counter `id`'s row.
    fn row(&mut self, id: &str) -> &mut Row;
}

impl Table for IdTable<Row> {
    fn holding(ids: &[CounterId]) -> Self {
        let mut table = IdTable::default();
        for id in ids {
            table.insert(id.clone(), Row::default());
        }
        table
    }

    fn row(&mut self, id: &str) -> &mut Row {
        self.get_full_mut(id).expect("every id is held").1
    }
}

impl Table for IndexMap<CounterId, Row, foldhash::fast::RandomState> {
    fn holding(ids: &[CounterId]) -> Self {
        ids.iter().map(|id| (id.clone(), Row::default())).collect()
    }

    fn row(&mut self, id: &str) -> &mut Row {
        self.get_mut(id).expect("every id is held")
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("growth floor");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sample_size(20);
    for counters in [1_000usize, 100_000, 1_000_000, 10_000_000] {
        let ids: Vec<CounterId> = (0..counters)
            .map(|n| CounterId::new(format!("c-{n}")).expect("a valid id"))
            .collect();
        // The slot table's shape.
        increments::<IdTable<Row>>(&mut group, "1,000 uniform increments", &ids);
        // The shape before it.
        increments::<IndexMap<CounterId, Row, foldhash::fast::RandomState>>(
            &mut group,
            "1,000 uniform increments, IndexMap",
            &ids,
        );
    }
    group.finish();
}

/// Times 1,000 uniform increments into a table `T` holding a row for each of `ids`.
fn increments<T: Table>(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, ids: &[CounterId]) {
    let mut table = T::holding(ids);
    let mut rng = StdRng::seed_from_u64(6);
    group.bench_function(BenchmarkId::new(name, ids.len()), |b| {
        b.iter_batched(
            || {
                (0..BATCH)
                    .map(|_| rng.random_range(0..ids.len()))
                    .collect::<Vec<_>>()
            },
            |picks| {
                for n in picks {
                    let row = table.row(ids[n].as_str());
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
