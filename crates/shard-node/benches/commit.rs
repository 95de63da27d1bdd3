//! Applying a batch through the real commit path: the commit loop of a shard node on a
//! temporary directory stages 1,000 writes (overflow check, version, window hit), appends one
//! log record, fsyncs it, installs the states in the slot table and answers. Measured with
//! 1,000, 100,000 and 1,000,000 counters already held, writes spread uniformly over them, so the
//! per-write cost can be compared as the table grows (the 10,000,000 point is in
//! `scripts/bench.sh`, end to end).
//!
//! `cargo bench -p shard-node --bench commit`; `COMMIT_BENCH_COUNTERS=1000` measures only that
//! table size (for profiling under callgrind, where populating 1,000,000 counters takes long).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use geocount_model::{Clock, CounterId, Hlc, Placement, ShardDefaults, SystemClock};
use geocount_sync::SlotCopies;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shard_node::Storage;
use shard_node::engine::checkpoint::Checkpointer;
use shard_node::engine::commit::{CommitContext, CommitLoop};
use shard_node::engine::write::{Change, Command, WriteRequest};
use shard_node::health::NodeHealth;
use shard_node::metrics::ShardMetrics;
use shard_node::startup::resume;
use tokio::sync::{mpsc, oneshot};

/// Writes per batch.
const BATCH: usize = 1_000;

/// A commit loop on its own thread over a fresh data directory.
struct Node {
    commands: mpsc::Sender<Command>,
    thread: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Node {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let settings = ShardDefaults::default();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let storage = Storage::os();
        let recovered = resume::recover(
            storage.disk.clone(),
            dir.path(),
            &settings,
            clock.now_unix_ms(),
            shard_node::RestoreMode::Empty,
        )
        .expect("recovery of an empty directory");
        let metrics = Arc::new(ShardMetrics::default());
        let table = Arc::new(RwLock::new(recovered.table));
        let context = CommitContext {
            table: table.clone(),
            descriptions: Arc::new(RwLock::new(recovered.descriptions)),
            peer_copies: Arc::new(RwLock::new(SlotCopies::new(vec!["DC_BENCH_VAL_0".into()]))),
            checkpointer: Checkpointer::spawn(
                &storage,
                recovered.store,
                table,
                dir.path().to_path_buf(),
                metrics.clone(),
            ),
            settings: settings.clone(),
            clock: clock.clone(),
            hlc: Arc::new(Hlc::new("DC_BENCH_VAL_0", clock)),
            placement: Placement::new("BENCH", 1, settings.virtual_nodes),
            own_slot: 0,
            load: Arc::new(AtomicU64::new(0)),
            metrics,
            health: Arc::new(NodeHealth::default()),
            tombstone_retention_ms: 604_800_000,
            rights: shard_node::engine::commit::RightsPlace {
                index: 0,
                datacenters: 1,
            },
        };
        let commit_loop = CommitLoop::new(recovered.log, context);
        let (commands, receiver) = mpsc::channel(1024);
        // As the node runs it: on a thread of its own, with a current-thread runtime.
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime");
            runtime.block_on(commit_loop.run(receiver));
        });
        Self {
            commands,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// Applies `writes` and waits until they are durable; panics on any refusal.
    fn apply(&self, writes: Vec<WriteRequest>) {
        let (reply, answer) = oneshot::channel();
        self.commands
            .blocking_send(Command::Write { writes, reply })
            .expect("the commit loop runs");
        let results = answer.blocking_recv().expect("an answer");
        assert!(results.iter().all(Result::is_ok), "a write was refused");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.commands.blocking_send(Command::Shutdown);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn write(ids: &[CounterId], n: usize) -> WriteRequest {
    WriteRequest {
        id: ids[n].clone(),
        change: Change::Delta(1),
        idempotency_key: None,
        timestamp_secs: SystemClock.now_unix_secs(),
        ttl_secs: None,
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("commit");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.sample_size(30);
    let sizes: Vec<usize> = match std::env::var("COMMIT_BENCH_COUNTERS") {
        Ok(list) => list
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("COMMIT_BENCH_COUNTERS: comma-separated counts")
            })
            .collect(),
        Err(_) => vec![1_000, 100_000, 1_000_000],
    };
    for counters in sizes {
        let ids: Vec<CounterId> = (0..counters)
            .map(|n| CounterId::new(format!("bench-{n}")).expect("a valid id"))
            .collect();
        let node = Node::start();
        for chunk in (0..counters).collect::<Vec<_>>().chunks(10_000) {
            node.apply(chunk.iter().map(|&n| write(&ids, n)).collect());
        }
        let mut rng = StdRng::seed_from_u64(6);
        group.bench_function(
            BenchmarkId::new("apply 1,000 writes (fsync)", counters),
            |b| {
                b.iter_batched(
                    || {
                        (0..BATCH)
                            .map(|_| write(&ids, rng.random_range(0..counters)))
                            .collect::<Vec<_>>()
                    },
                    |writes| node.apply(writes),
                    BatchSize::SmallInput,
                )
            },
        );
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
