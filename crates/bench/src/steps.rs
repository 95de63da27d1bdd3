//! The benchmark's steps, each measured `repeats` times: Redis, the hyper ceiling, one shard
//! node (single HTTP writes and batches; then with a peer, `sync` beside `replicated`:
//! [`crate::durability`]), the per-write cost as counters grow, the whole cluster under load
//! ([`crate::cluster`]), and memory per counter.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use geocount_cluster::{Cluster, Member};
use geoctl::load::workload::{CounterPicker, KeyDistribution};
use serde::Serialize;

use crate::batch::{self, Answer, BatchRun, Connection};
use crate::figure::{Figure, Unit};
use crate::procs::{Server, free_address, resident_bytes};
use crate::redis::{KEYSPACE, Persistence, Redis};
use crate::topo;
use crate::wrk::{self, Script, WrkRun};

/// Counters the single writes, batches and reads spread over.
pub const COUNTERS: usize = 100_000;
/// The uniform key spaces, redis-benchmark's `-r`: of the batches beside the Zipf ones, and of
/// the Redis-protocol step ([`crate::resp`]).
pub const KEY_SPACES: [u32; 2] = [100_000, 1_000_000];
/// Writes per batch.
pub const BATCH_SIZE: usize = 1_000;
/// The Zipf exponent of the batched path.
pub const ZIPF_EXPONENT: f64 = 1.1;
/// Connections of the batched load per shard node: redis-benchmark's `-c 50`, so both servers
/// get as many clients.
pub const BATCH_CONNECTIONS: usize = 50;
/// Counters the global aggregator's readers read.
pub(crate) const READ_COUNTERS: usize = 10_000;
/// How long after the writes resident memory is read: the allocator (mimalloc) returns arena
/// memory a growth freed (a table's old, smaller copy) about ten seconds after it is freed, so
/// an earlier reading counts memory the node no longer holds (up to half again at 1,000,000
/// counters).
pub(crate) const MEMORY_SETTLE: Duration = Duration::from_secs(15);

/// How long and how often.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Times each figure is measured.
    pub repeats: usize,
    /// Seconds of each wrk, batch and cluster run.
    pub secs: u64,
    /// The counter counts of the growth curve.
    pub curve: Vec<usize>,
    /// Seconds of each growth-curve run.
    pub curve_secs: u64,
    /// Counters written into every datacenter for the memory figures.
    pub memory_counters: usize,
    /// Requests of each redis-benchmark run at pipeline 1, 16 and 128, persistence off.
    pub redis_requests: [u64; 3],
    /// The same with `appendfsync always`.
    pub redis_always_requests: [u64; 3],
    /// Counters in the slot the restore step restores.
    pub restore_counters: usize,
    /// Seconds of each keys-step load: past the shard nodes' default checkpoint interval
    /// (30 s), so that every run checkpoints while it writes.
    pub keys_secs: u64,
    /// Counters the reclaim step creates and deletes.
    pub reclaim_counters: usize,
    /// `-n` of the Redis-protocol step's redis-benchmark runs at pipeline 1, 16 and 128, the
    /// same on every side.
    pub resp_requests: [u64; 3],
}

impl Plan {
    /// The full run (about 15 minutes) or `--quick` (a few).
    pub fn new(quick: bool) -> Self {
        if quick {
            Self {
                repeats: 1,
                secs: 3,
                curve: vec![1_000, 100_000, 1_000_000],
                curve_secs: 3,
                memory_counters: 200_000,
                redis_requests: [100_000, 500_000, 1_000_000],
                redis_always_requests: [30_000, 200_000, 500_000],
                restore_counters: 1_000_000,
                keys_secs: 35,
                reclaim_counters: 200_000,
                resp_requests: [10_000, 100_000, 500_000],
            }
        } else {
            Self {
                repeats: 3,
                secs: 10,
                curve: vec![1_000, 10_000, 100_000, 1_000_000, 10_000_000],
                curve_secs: 5,
                memory_counters: 1_000_000,
                redis_requests: [300_000, 2_000_000, 5_000_000],
                redis_always_requests: [100_000, 1_000_000, 2_000_000],
                restore_counters: 10_000_000,
                keys_secs: 35,
                reclaim_counters: 1_000_000,
                resp_requests: [20_000, 200_000, 1_000_000],
            }
        }
    }

    pub(crate) fn secs(&self) -> Duration {
        Duration::from_secs(self.secs)
    }
}

/// The pipelines redis-benchmark runs at.
pub const PIPELINES: [u32; 3] = [1, 16, BEST_PIPELINE];
/// The pipeline of Redis's best INCR throughput, the batches' peer.
pub const BEST_PIPELINE: u32 = 128;

/// INCRs per second at each of [`PIPELINES`].
#[derive(Debug, Clone, Serialize)]
pub struct RedisFigures {
    /// Persistence off.
    pub off: Vec<Figure>,
    /// `appendfsync always`.
    pub always: Vec<Figure>,
}

/// Step 1: Redis as the peer.
pub async fn redis(plan: &Plan, dir: &Path) -> anyhow::Result<RedisFigures> {
    let mut figures = Vec::new();
    for (persistence, requests) in [
        (Persistence::Off, plan.redis_requests),
        (Persistence::Always, plan.redis_always_requests),
    ] {
        let redis = Redis::start(persistence, &dir.join("redis")).await?;
        let mut per_pipeline = Vec::new();
        for (pipeline, requests) in PIPELINES.into_iter().zip(requests) {
            let mut samples = Vec::new();
            for _ in 0..plan.repeats {
                samples.push(redis.incr(pipeline, KEYSPACE, requests).await?);
            }
            println!("  redis {persistence:?} -P {pipeline}: {samples:.0?} INCR/s");
            per_pipeline.push(Figure::new(Unit::PerSec, samples));
        }
        redis.stop().await;
        figures.push(per_pipeline);
    }
    let always = figures.pop().expect("two runs");
    let off = figures.pop().expect("two runs");
    Ok(RedisFigures { off, always })
}

/// Repeated wrk runs: rate, p50, p99, and the answers that were errors.
#[derive(Debug, Clone, Serialize)]
pub struct WrkFigures {
    /// Answers per second.
    pub rate: Figure,
    /// Median latency.
    pub p50: Figure,
    /// 99th percentile latency.
    pub p99: Figure,
    /// Non-2xx answers and socket errors over all runs.
    pub errors: u64,
    /// Every run.
    pub runs: Vec<WrkRun>,
}

impl WrkFigures {
    /// The figures of `runs` (at least one).
    pub fn new(runs: Vec<WrkRun>) -> Self {
        let of = |unit, f: fn(&WrkRun) -> f64| Figure::new(unit, runs.iter().map(f).collect());
        Self {
            rate: of(Unit::PerSec, |r| r.requests_per_sec),
            p50: of(Unit::Ms, |r| r.p50_ms),
            p99: of(Unit::Ms, |r| r.p99_ms),
            errors: runs.iter().map(|r| r.non_2xx + r.socket_errors).sum(),
            runs,
        }
    }
}

pub(crate) async fn wrk_repeated(
    plan: &Plan,
    label: &str,
    address: SocketAddr,
    script: &Path,
) -> anyhow::Result<WrkFigures> {
    let mut runs = Vec::new();
    for _ in 0..plan.repeats {
        let run = wrk::run(address, script, plan.secs()).await?;
        println!(
            "  {label}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
            run.requests_per_sec,
            run.p50_ms,
            run.p99_ms,
            run.non_2xx + run.socket_errors
        );
        runs.push(run);
    }
    Ok(WrkFigures::new(runs))
}

/// The hyper ceiling, driven by the write and the read scripts, and its durable variant.
#[derive(Debug, Clone, Serialize)]
pub struct CeilingFigures {
    /// With the single-write script (PATCH).
    pub write: WrkFigures,
    /// With the read script (GET).
    pub read: WrkFigures,
    /// `bench-ceiling --durable` with the single-write script: each request fsynced (in groups,
    /// one log thread) before its answer, and nothing else.
    pub durable_write: WrkFigures,
}

/// Starts `bench-ceiling` on a free port, with `args` after its address, logging to `log`.
pub(crate) async fn start_ceiling(
    bin_dir: &Path,
    args: &[String],
    log: &Path,
) -> anyhow::Result<(Server, SocketAddr)> {
    let address = free_address()?;
    let mut all = vec![address.to_string()];
    all.extend_from_slice(args);
    let server = Server::start(&bin_dir.join("bench-ceiling"), &all, address, log).await?;
    Ok((server, address))
}

/// Step 2: the ceiling for HTTP on this machine.
pub async fn ceiling(plan: &Plan, dir: &Path, bin_dir: &Path) -> anyhow::Result<CeilingFigures> {
    let (server, address) = start_ceiling(bin_dir, &[], &dir.join("bench-ceiling.log")).await?;
    let write_script = wrk::write_script(dir, Script::Write, "bench", COUNTERS)?;
    let read_script = wrk::write_script(dir, Script::Read, "r", READ_COUNTERS)?;
    let write = wrk_repeated(plan, "ceiling, write script", address, &write_script).await?;
    let read = wrk_repeated(plan, "ceiling, read script", address, &read_script).await?;
    server.stop().await;
    let log_dir = dir.join("ceiling-log");
    let (server, address) = start_ceiling(
        bin_dir,
        &["--durable".to_owned(), log_dir.display().to_string()],
        &dir.join("bench-ceiling-durable.log"),
    )
    .await?;
    let durable_write = wrk_repeated(
        plan,
        "durable ceiling, write script",
        address,
        &write_script,
    )
    .await;
    server.stop().await;
    std::fs::remove_dir_all(&log_dir).with_context(|| format!("cannot remove {log_dir:?}"))?;
    Ok(CeilingFigures {
        write,
        read,
        durable_write: durable_write?,
    })
}

/// Repeated batched loads.
#[derive(Debug, Clone, Serialize)]
pub struct BatchFigures {
    /// Writes acknowledged per second.
    pub rate: Figure,
    /// Median request latency.
    pub p50: Figure,
    /// 99th percentile request latency.
    pub p99: Figure,
    /// Every run.
    pub runs: Vec<BatchRun>,
}

impl BatchFigures {
    /// The figures of `runs` (at least one).
    pub(crate) fn new(runs: Vec<BatchRun>) -> Self {
        let of = |unit, f: fn(&BatchRun) -> f64| Figure::new(unit, runs.iter().map(f).collect());
        Self {
            rate: of(Unit::PerSec, |r| r.writes_per_sec),
            p50: of(Unit::Ms, |r| r.p50_ms),
            p99: of(Unit::Ms, |r| r.p99_ms),
            runs,
        }
    }
}

/// One batched load, run again and again.
struct BatchLoad<'a> {
    label: String,
    addresses: &'a [SocketAddr],
    connections: usize,
    bodies: Arc<Vec<batch::Body>>,
    answer: Answer,
    secs: Duration,
}

/// Runs each of `loads` `plan.repeats` times, in turns (one run of each per round), so that
/// their samples meet the machine in the same states. With `redis`, each round starts with a
/// `redis-benchmark -P 128` run of `plan.redis_requests[2]` INCRs over each of its key spaces,
/// whose rates come back beside the figures (one list per key space).
async fn batch_repeated(
    plan: &Plan,
    loads: &[BatchLoad<'_>],
    redis: Option<(&Redis, &[u32])>,
) -> anyhow::Result<(Vec<BatchFigures>, Vec<Vec<f64>>)> {
    let mut runs: Vec<Vec<BatchRun>> = loads.iter().map(|_| Vec::new()).collect();
    let mut redis_samples = vec![Vec::new(); redis.map_or(0, |(_, spaces)| spaces.len())];
    for _ in 0..plan.repeats {
        if let Some((redis, spaces)) = redis {
            for (&keyspace, samples) in spaces.iter().zip(&mut redis_samples) {
                let requests = plan.redis_requests[2];
                let rate = redis.incr(BEST_PIPELINE, keyspace, requests).await?;
                println!(
                    "  redis Off -P {BEST_PIPELINE} -r {keyspace}, just before: {rate:.0} INCR/s"
                );
                samples.push(rate);
            }
        }
        for (load, runs) in loads.iter().zip(&mut runs) {
            let run = batch::load(
                load.addresses,
                load.connections,
                load.bodies.clone(),
                load.answer,
                load.secs,
            )
            .await?;
            println!(
                "  {}: {:.0} writes/s, p50 {:.2} ms, p99 {:.2} ms",
                load.label, run.writes_per_sec, run.p50_ms, run.p99_ms
            );
            runs.push(run);
        }
    }
    Ok((
        runs.into_iter().map(BatchFigures::new).collect(),
        redis_samples,
    ))
}

/// One shard node alone, durable.
#[derive(Debug, Clone, Serialize)]
pub struct NodeFigures {
    /// The same batches uniform over each of [`KEY_SPACES`], each run right after the ones
    /// above, with Redis `-P 128 -r <the same>` beside them.
    pub uniform: Vec<UniformBatches>,
    /// Single writes, `PATCH /counter/{id}/write` through wrk.
    pub http_writes: WrkFigures,
    /// Batches of 1,000, Zipf over 100,000 counters, over [`BATCH_CONNECTIONS`], answered with
    /// `Prefer: return=minimal`.
    pub batches: BatchFigures,
    /// Redis `-P 128`, persistence off, each sample taken just before one of [`Self::batches`]'s.
    pub redis_alongside: Figure,
    /// The same batches with every outcome answered, each run right after one of
    /// [`Self::batches`]'s.
    pub batches_full_answers: BatchFigures,
}

/// Batches uniform over a key space, beside Redis over one of the same size.
#[derive(Debug, Clone, Serialize)]
pub struct UniformBatches {
    /// Counters the writes spread over.
    pub counters: u32,
    /// Batched writes acknowledged per second.
    pub batches: BatchFigures,
    /// Redis `-P 128 -r <counters>`, persistence off, each sample taken in the same round.
    pub redis_alongside: Figure,
}

pub(crate) fn is_shard(member: &Member) -> bool {
    matches!(member, Member::Shard { .. })
}

/// Step 3: one shard node, durable mode, with Redis (persistence off) beside it for samples
/// alternating with the batches' (a node with a peer in each durability follows:
/// [`crate::durability::pair`]).
pub async fn node(plan: &Plan, dir: &Path, bin_dir: &Path) -> anyhow::Result<NodeFigures> {
    let node_dir = dir.join("node");
    let text = topo::single_node(&node_dir.join("data"))?;
    let mut running = topo::start(&node_dir, &text, bin_dir, is_shard).await?;
    let address = running.shard_addresses()[0];
    let redis = match Redis::start(Persistence::Off, &node_dir.join("redis")).await {
        Ok(redis) => redis,
        Err(error) => {
            running.stop(topo::GRACE).await;
            return Err(error);
        }
    };
    let result = async {
        let script = wrk::write_script(dir, Script::Write, "bench", COUNTERS)?;
        let http_writes = wrk_repeated(plan, "shard node, PATCH", address, &script).await?;
        let picker = CounterPicker::new(KeyDistribution::Zipf, COUNTERS, ZIPF_EXPONENT)?;
        let bodies = Arc::new(batch::bodies("bench", &picker, BATCH_SIZE));
        let load = |label: String, bodies: &Arc<Vec<batch::Body>>, answer: Answer| BatchLoad {
            label,
            addresses: std::slice::from_ref(&address),
            connections: BATCH_CONNECTIONS,
            bodies: Arc::clone(bodies),
            answer,
            secs: plan.secs(),
        };
        let zipf = |answer: Answer| {
            let label = format!(
                "shard node, batches over {BATCH_CONNECTIONS} connections, {answer:?} answers"
            );
            load(label, &bodies, answer)
        };
        let mut loads = vec![zipf(Answer::Minimal), zipf(Answer::Full)];
        for counters in KEY_SPACES {
            let picker = CounterPicker::new(KeyDistribution::Uniform, counters as usize, 0.0)?;
            let bodies = Arc::new(batch::bodies("bench", &picker, BATCH_SIZE));
            let label = format!("shard node, batches uniform over {counters} counters");
            loads.push(load(label, &bodies, Answer::Minimal));
        }
        let (figures, redis_alongside) =
            batch_repeated(plan, &loads, Some((&redis, &KEY_SPACES))).await?;
        let mut figures = figures.into_iter();
        let mut next = || figures.next().context("a figure per load");
        let (batches, batches_full_answers) = (next()?, next()?);
        let mut uniform = Vec::new();
        for (counters, redis) in KEY_SPACES.into_iter().zip(&redis_alongside) {
            uniform.push(UniformBatches {
                counters,
                batches: next()?,
                redis_alongside: Figure::new(Unit::PerSec, redis.clone()),
            });
        }
        anyhow::Ok(NodeFigures {
            http_writes,
            batches,
            redis_alongside: Figure::new(Unit::PerSec, redis_alongside[0].clone()),
            batches_full_answers,
            uniform,
        })
    }
    .await;
    redis.stop().await;
    running.stop(topo::GRACE).await;
    result
}

/// One point of the growth curve.
#[derive(Debug, Clone, Serialize)]
pub struct CurvePoint {
    /// Counters the node held (each written once before the runs), writes uniform over them.
    pub counters: usize,
    /// Batched writes acknowledged per second.
    pub batches: BatchFigures,
    /// Resident bytes the node grew by per counter, the counters written once and the
    /// allocator settled: one sample per fresh node (`repeats` of them from
    /// [`MEMORY_CURVE_FROM`] counters on, where the table reports it).
    pub resident_bytes_per_counter: Figure,
    /// Seconds the first writes of every counter took, per fresh node.
    pub populate_secs: Vec<f64>,
}

/// The counter count from which the growth curve reads memory on `repeats` fresh nodes (below
/// it, fixed costs such as the store's cache dominate and the table shows no memory figure).
pub const MEMORY_CURVE_FROM: usize = 1_000_000;

/// Step 3c: the per-write cost as the node's counters grow, each count on a fresh node.
pub async fn curve(plan: &Plan, dir: &Path, bin_dir: &Path) -> anyhow::Result<Vec<CurvePoint>> {
    let mut points = Vec::new();
    for &counters in &plan.curve {
        let fresh_nodes = if counters >= MEMORY_CURVE_FROM {
            plan.repeats
        } else {
            1
        };
        let mut resident = Vec::new();
        let mut populate_secs = Vec::new();
        for node in 1..=fresh_nodes {
            let node_dir = dir.join("curve");
            let text = topo::single_node(&node_dir.join("data"))?;
            let mut running = topo::start(&node_dir, &text, bin_dir, is_shard).await?;
            let address = running.shard_addresses()[0];
            let pid = running.processes[0].pid;
            let result = async {
                let before = resident_bytes(pid)?;
                let started = std::time::Instant::now();
                batch::populate(address, "c", counters, 10_000).await?;
                populate_secs.push(started.elapsed().as_secs_f64());
                tokio::time::sleep(MEMORY_SETTLE).await;
                let bytes = resident_bytes(pid)?.saturating_sub(before) as f64 / counters as f64;
                resident.push(bytes);
                println!(
                    "  {counters} counters written once in {:.1} s; {bytes:.0} resident bytes per counter",
                    populate_secs[populate_secs.len() - 1]
                );
                // The batches run on the last fresh node only.
                if node < fresh_nodes {
                    return anyhow::Ok(None);
                }
                let picker = CounterPicker::new(KeyDistribution::Uniform, counters, 0.0)?;
                let load = BatchLoad {
                    label: format!("uniform over {counters} counters"),
                    addresses: std::slice::from_ref(&address),
                    connections: BATCH_CONNECTIONS,
                    bodies: Arc::new(batch::bodies("c", &picker, BATCH_SIZE)),
                    answer: Answer::Minimal,
                    secs: Duration::from_secs(plan.curve_secs),
                };
                let (mut figures, _) = batch_repeated(plan, &[load], None).await?;
                Ok(figures.pop())
            }
            .await;
            running.stop(topo::GRACE).await;
            if let Some(batches) = result? {
                points.push(CurvePoint {
                    counters,
                    batches,
                    resident_bytes_per_counter: Figure::new(
                        Unit::Bytes,
                        std::mem::take(&mut resident),
                    ),
                    populate_secs: std::mem::take(&mut populate_secs),
                });
            }
        }
    }
    Ok(points)
}

/// Waits until the global aggregator at `global` answers `expected` for each of `ids`.
pub(crate) async fn wait_visible(
    global: SocketAddr,
    ids: &[String],
    expected: i64,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut connection = Connection::open(global).await?;
    for id in ids {
        loop {
            let (status, body) = connection.get(&format!("/counter/{id}")).await?;
            let value = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["value"].as_i64());
            if status == 200 && value == Some(expected) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "{id} at the global aggregator is {status} {value:?}, not {expected}, after {} s",
                    timeout.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// The ids `<prefix>-0`, the middle and the last of `0..counters`, and every 997th.
pub(crate) fn sample_ids(prefix: &str, counters: usize) -> Vec<String> {
    let mut picks: Vec<usize> = (0..counters).step_by(997).collect();
    picks.extend([counters / 2, counters - 1]);
    picks.into_iter().map(|n| format!("{prefix}-{n}")).collect()
}

/// Where the benchmark keeps its files: `dir`, made absolute.
pub fn work_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(std::path::absolute(dir)?)
}

/// `geoctl load` over every shard node of `running` for the plan's seconds, batched, each write
/// to its owner, Zipf over [`COUNTERS`] fresh counters, at `rate` writes per second (0: flat
/// out), its report as JSON to `json`: the program and its arguments.
pub(crate) fn load_command(
    plan: &Plan,
    bin_dir: &Path,
    running: &Cluster,
    rate: u64,
    json: &Path,
) -> (String, Vec<String>) {
    let geoctl = bin_dir.join("geoctl").display().to_string();
    let args = [
        "--config",
        &running.file.display().to_string(),
        "load",
        "--duration-secs",
        &plan.secs.to_string(),
        "--rate",
        &rate.to_string(),
        "--path",
        "batch",
        "--batch-size",
        &BATCH_SIZE.to_string(),
        "--route",
        "owner",
        "--distribution",
        "zipf",
        "--zipf-exponent",
        &ZIPF_EXPONENT.to_string(),
        "--counters",
        &COUNTERS.to_string(),
        "--json",
        &json.display().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    (geoctl, args)
}
