//! `geocount-bench [--quick] [--steps ...] [--out FILE]`: the benchmark, run by
//! `scripts/bench.sh`. It measures Redis (the peer), a bare hyper server (the ceiling for HTTP
//! on this machine), one geocount shard node, the growth curve, the whole cluster of
//! `config/local.toml`, memory per counter, a lost slot's restore and global reads while
//! rankings scan every counter, what idempotency keys cost, and the memory of deleted counters
//! handed back at every tier, all on this machine in one go,
//! prints one Markdown table (each geocount figure beside its peer, as a ratio from the same
//! run) and saves it with every sample as JSON. The node and cluster steps also put
//! `replicated` durability beside `sync`.

mod batch;
mod cluster;
mod durability;
mod figure;
mod keys;
mod memory;
mod procs;
mod reclaim;
mod redis;
mod replicas;
mod restore;
mod scan;
mod steps;
mod topo;
mod wrk;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use geocount_model::Topology;
use serde::Serialize;

use crate::cluster::ClusterFigures;
use crate::figure::{Figure, Goal, Row, Unit, render_table};
use crate::memory::{MemoryFigures, MemoryRun};
use crate::steps::{
    BATCH_CONNECTIONS, BATCH_SIZE, COUNTERS, CeilingFigures, CurvePoint, MEMORY_CURVE_FROM,
    NodeFigures, Plan, RedisFigures, ZIPF_EXPONENT,
};

/// Runs the geocount benchmark against Redis and a bare hyper server on this machine.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// One repeat of each figure, shorter runs, a smaller growth curve and memory count.
    #[arg(long)]
    quick: bool,
    /// The growth curve's counter counts, instead of the plan's (e.g. `--curve 1000000`).
    #[arg(long, value_delimiter = ',')]
    curve: Vec<usize>,
    /// Which steps to run [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    steps: Vec<Step>,
    /// Where the binaries are [default: the directory of this executable].
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where data, logs and scripts go (emptied step by step).
    #[arg(long, default_value = "target/bench-work")]
    work_dir: PathBuf,
    /// The topology whose shape the cluster steps run (on free ports).
    #[arg(long, default_value = "config/local.toml")]
    topology: PathBuf,
    /// Where the JSON goes [default: bench/results/<unix time>.json].
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Step {
    /// Redis, persistence off and appendfsync always.
    Redis,
    /// The bare hyper server.
    Ceiling,
    /// One shard node: single HTTP writes and batches; then with a peer, sync and replicated.
    Node,
    /// The per-write cost as counters grow.
    Curve,
    /// The whole cluster: reads, writes and visibility lag; replicas; sync and replicated.
    Cluster,
    /// Resident bytes per counter.
    Memory,
    /// How long a lost slot takes to restore from its datacenter.
    Restore,
    /// Global reads while rankings scan every counter.
    Scan,
    /// Keyed writes beside keyless ones: a lone node, a pair and the cluster.
    Keys,
    /// Counters created and deleted: resident memory back to the start at every tier.
    Reclaim,
}

/// Everything the run measured.
#[derive(Debug, Serialize)]
struct Results {
    command: String,
    unix_time: u64,
    machine: String,
    load_tools: String,
    plan: Plan,
    rows: Vec<Row>,
    table: String,
    redis: Option<RedisFigures>,
    ceiling: Option<CeilingFigures>,
    node: Option<NodeFigures>,
    /// The single writes and the batches on a node with a peer, in `sync` and `replicated`.
    node_with_peer: Option<durability::Modes<durability::PairLoads>>,
    curve: Option<Vec<CurvePoint>>,
    cluster: Option<ClusterFigures>,
    memory: Option<MemoryFigures>,
    restore: Option<restore::RestoreFigures>,
    scan: Option<scan::ScanFigures>,
    keys: Option<keys::KeysFigures>,
    reclaim: Option<reclaim::ReclaimFigures>,
    /// Steps that failed, with their errors (the others are still reported).
    failures: Vec<String>,
}

impl Step {
    /// Its name on the command line, which also names it in `failures`.
    fn name(self) -> String {
        self.to_possible_value()
            .map(|value| value.get_name().to_owned())
            .unwrap_or_default()
    }

    /// The line printed as it starts.
    fn banner(self, topology: &Path) -> String {
        match self {
            Step::Redis => "step 1: Redis (redis-benchmark -t incr -c 50 -r 100000)".to_owned(),
            Step::Ceiling => "step 2: the hyper ceiling (wrk)".to_owned(),
            Step::Node => {
                "step 3: one shard node, durable; then with a peer, sync and replicated".to_owned()
            }
            Step::Curve => "step 3b: per-write cost as counters grow".to_owned(),
            Step::Cluster => format!("step 4: the cluster of {}", topology.display()),
            Step::Memory => "step 5: memory per counter".to_owned(),
            Step::Restore => "step 6: restoring a lost slot from its datacenter".to_owned(),
            Step::Scan => "step 7: global reads while rankings scan every counter".to_owned(),
            Step::Keys => "step 8: keyed writes beside keyless ones".to_owned(),
            Step::Reclaim => {
                "step 9: counters created and deleted, memory handed back at every tier".to_owned()
            }
        }
    }
}

/// Runs `step` and keeps its figures in `results`; the caller records a failure and goes on.
async fn run_step(
    step: Step,
    results: &mut Results,
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
) -> anyhow::Result<()> {
    match step {
        Step::Redis => results.redis = Some(steps::redis(plan, dir).await?),
        Step::Ceiling => results.ceiling = Some(steps::ceiling(plan, dir, bin_dir).await?),
        Step::Node => {
            results.node = Some(steps::node(plan, dir, bin_dir).await?);
            results.node_with_peer = Some(durability::pair(plan, dir, bin_dir).await?);
        }
        Step::Curve => results.curve = Some(steps::curve(plan, dir, bin_dir).await?),
        Step::Cluster => {
            results.cluster = Some(cluster::cluster(plan, dir, bin_dir, shape).await?);
        }
        Step::Memory => results.memory = Some(memory::memory(plan, dir, bin_dir, shape).await?),
        Step::Restore => results.restore = Some(restore::restore(plan, dir, bin_dir).await?),
        Step::Scan => results.scan = Some(scan::scan(plan, dir, bin_dir).await?),
        Step::Keys => results.keys = Some(keys::keys(plan, dir, bin_dir, shape).await?),
        Step::Reclaim => results.reclaim = Some(reclaim::reclaim(plan, dir, bin_dir).await?),
    }
    Ok(())
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{cores} cores ({model}), shared by every server and load generator of the run")
}

fn rows(results: &Results) -> Vec<Row> {
    let mut rows = Vec::new();
    let redis = results.redis.as_ref();
    let redis_best = redis.map(|r| r.off[2].clone());
    let redis_always_p1 = redis.map(|r| r.always[0].clone());
    if let Some(redis) = redis {
        for (figures, persistence) in [
            (&redis.off, "persistence off"),
            (&redis.always, "appendfsync always"),
        ] {
            for (figure, pipeline) in figures.iter().zip(steps::PIPELINES) {
                rows.push(Row::alone(
                    format!("Redis INCR -c 50 -P {pipeline}, {persistence}"),
                    figure.clone(),
                    None,
                ));
            }
        }
    }
    let ceiling = results.ceiling.as_ref();
    if let Some(ceiling) = ceiling {
        rows.push(Row::alone(
            "hyper ceiling, wrk write script (PATCH)",
            ceiling.write.rate.clone(),
            None,
        ));
        rows.push(Row::alone(
            "hyper ceiling, wrk read script (GET)",
            ceiling.read.rate.clone(),
            None,
        ));
        rows.push(Row::alone(
            "durable hyper ceiling (each request fsynced in groups before its answer), wrk write script",
            ceiling.durable_write.rate.clone(),
            None,
        ));
    }
    if let Some(node) = &results.node {
        let batches = format!(
            "shard node, durable: POST /batch of {BATCH_SIZE}, Zipf {ZIPF_EXPONENT} over {COUNTERS} counters, {BATCH_CONNECTIONS} connections, Prefer: return=minimal"
        );
        rows.push(Row::against(
            &batches,
            node.batches.rate.clone(),
            "Redis -P 128, persistence off, a sample just before each",
            node.redis_alongside.clone(),
            Some(Goal::RatioAtLeast(3.0)),
        ));
        if let Some(best) = &redis_best {
            rows.push(Row::against(
                "the same",
                node.batches.rate.clone(),
                "Redis -P 128, persistence off (step 1)",
                best.clone(),
                None,
            ));
        }
        rows.push(Row::alone(
            "the same, aim",
            node.batches.rate.clone(),
            Some(Goal::AtLeast(5e6)),
        ));
        rows.push(Row::alone(
            "the same, p99 latency of a batch",
            node.batches.p99.clone(),
            None,
        ));
        rows.push(Row::against(
            "the same with every outcome answered (no Prefer)",
            node.batches_full_answers.rate.clone(),
            "Redis -P 128, persistence off, beside the batches above",
            node.redis_alongside.clone(),
            None,
        ));
        let single = "shard node, durable: PATCH /counter/{id}/write, wrk -t2 -c64";
        if let Some(ceiling) = ceiling {
            rows.push(Row::against(
                single,
                node.http_writes.rate.clone(),
                "hyper ceiling, same script",
                ceiling.write.rate.clone(),
                Some(Goal::RatioAtLeast(0.8)),
            ));
            // Whether any durable HTTP server could meet that target here: the bare server
            // that only fsyncs each request before answering, against the plain one.
            rows.push(Row::against(
                "the bound on that: the durable hyper ceiling, wrk write script",
                ceiling.durable_write.rate.clone(),
                "hyper ceiling, same script",
                ceiling.write.rate.clone(),
                Some(Goal::RatioAtLeast(0.8)),
            ));
            rows.push(Row::against(
                single,
                node.http_writes.rate.clone(),
                "durable hyper ceiling, same script",
                ceiling.durable_write.rate.clone(),
                None,
            ));
        }
        if let Some(always) = &redis_always_p1 {
            rows.push(Row::against(
                single,
                node.http_writes.rate.clone(),
                "Redis -P 1, appendfsync always",
                always.clone(),
                Some(Goal::RatioAtLeast(3.0)),
            ));
            // Whether any HTTP server could meet that target here: the bare hyper server
            // (no storage at all) against the same Redis figure.
            if let Some(ceiling) = ceiling {
                rows.push(Row::against(
                    "the bound on that: the hyper ceiling itself, wrk write script",
                    ceiling.write.rate.clone(),
                    "Redis -P 1, appendfsync always",
                    always.clone(),
                    Some(Goal::RatioAtLeast(3.0)),
                ));
            }
        }
        if ceiling.is_none() && redis_always_p1.is_none() {
            rows.push(Row::alone(single, node.http_writes.rate.clone(), None));
        }
        rows.push(Row::alone(
            "the same, p99 latency",
            node.http_writes.p99.clone(),
            None,
        ));
        if let Some(pair) = &results.node_with_peer {
            durability::pair_rows(&mut rows, pair);
        }
    }
    if let Some(curve) = &results.curve
        && let Some(first) = curve.first()
    {
        for point in curve {
            rows.push(Row::against(
                format!(
                    "growth: batches, uniform over {} counters held",
                    point.counters
                ),
                point.batches.rate.clone(),
                format!("the same over {} counters", first.counters),
                first.batches.rate.clone(),
                Some(Goal::RatioAtLeast(0.8)),
            ));
        }
        for point in curve.iter().filter(|p| p.counters >= MEMORY_CURVE_FROM) {
            rows.push(Row::alone(
                format!(
                    "memory: shard node alone, resident bytes per counter, {} counters",
                    point.counters
                ),
                point.resident_bytes_per_counter.clone(),
                Some(Goal::Below(100.0 + 8.0)),
            ));
        }
    }
    if let Some(cluster) = &results.cluster {
        let reads =
            "global aggregator (1 replica per tier): GET /counter/{id}, wrk -t2 -c64, no writes";
        match ceiling {
            Some(ceiling) => {
                rows.push(Row::against(
                    reads,
                    cluster.reads_idle.rate.clone(),
                    "hyper ceiling, same script",
                    ceiling.read.rate.clone(),
                    Some(Goal::RatioAtLeast(0.8)),
                ));
                rows.push(Row::against(
                    "the same, p99 latency",
                    cluster.reads_idle.p99.clone(),
                    "hyper ceiling p99",
                    ceiling.read.p99.clone(),
                    Some(Goal::Below(5.0)),
                ));
            }
            None => rows.push(Row::alone(reads, cluster.reads_idle.rate.clone(), None)),
        }
        let loaded = "cluster (1 replica per tier): geoctl load --path batch --route owner flat out over every shard node while wrk reads the global aggregator (writes/s)";
        match &redis_best {
            Some(best) => rows.push(Row::against(
                loaded,
                cluster.writes.clone(),
                "Redis -P 128, persistence off",
                best.clone(),
                None,
            )),
            None => rows.push(Row::alone(loaded, cluster.writes.clone(), None)),
        }
        rows.push(Row::against(
            "the same, global reads meanwhile (wrk -t2 -c64)",
            cluster.reads_loaded.rate.clone(),
            "hyper ceiling reads under the same writes",
            cluster.ceiling_reads_loaded.rate.clone(),
            None,
        ));
        rows.push(Row::against(
            "the same, global read p99 meanwhile",
            cluster.reads_loaded.p99.clone(),
            "hyper ceiling read p99 under the same writes",
            cluster.ceiling_reads_loaded.p99.clone(),
            Some(Goal::Below(5.0)),
        ));
        rows.push(Row::against(
            "the same, global read p99 against the hyper ceiling's under the same writes",
            cluster.reads_loaded.p99.clone(),
            "hyper ceiling read p99 under the same writes",
            cluster.ceiling_reads_loaded.p99.clone(),
            Some(Goal::RatioAtMost(1.5)),
        ));
        // Whether any server's reads could meet 5 ms while these writes run on the same cores:
        // the bare hyper server, read by the same wrk under the same load, in turns.
        rows.push(Row::alone(
            "the bound on that: the hyper ceiling read p99 under the same writes (wrk -t2 -c64, in turns with the global reads)",
            cluster.ceiling_reads_loaded.p99.clone(),
            Some(Goal::Below(5.0)),
        ));
        rows.push(Row::alone(
            "the same, visibility lag p50 (ack → global value)",
            cluster.lag_p50.clone(),
            None,
        ));
        rows.push(Row::alone(
            "the same, visibility lag p99",
            cluster.lag_p99.clone(),
            Some(Goal::Below(400.0)),
        ));
        if let Some(replicas) = &cluster.replicas {
            replicas::rows(&mut rows, replicas);
        }
        if let Some(modes) = &cluster.durability {
            durability::cluster_rows(&mut rows, modes);
        }
    }
    if let Some(scan) = &results.scan {
        rows.push(Row::against(
            format!(
                "scan: global read p99 (wrk -t2 -c64) while {} loops ask {} over {} counters",
                scan::SCAN_LOOPS,
                scan::WORST_SCAN,
                scan.counters
            ),
            scan.reads_scanning.p99.clone(),
            "the same reads, idle",
            scan.reads_idle.p99.clone(),
            Some(Goal::RatioAtMost(10.0)),
        ));
        rows.push(Row::alone(
            "the same, reads refused (non-2xx: 503 stale) over the runs",
            Figure::new(Unit::Count, vec![scan.reads_scanning.errors as f64]),
            Some(Goal::Below(1.0)),
        ));
        rows.push(Row::alone(
            "the same, rankings answered (the rest refused with 429 past http.max_concurrent_scans)",
            Figure::new(Unit::Count, vec![scan.scans_answered as f64]),
            None,
        ));
    }
    if let Some(restore) = &results.restore {
        rows.push(Row::alone(
            format!(
                "restore of a lost slot of {} counters from its datacenter (its aggregator and the global one), until /healthz 200",
                restore.counters
            ),
            Figure::new(Unit::Ms, vec![restore.restore_secs * 1000.0]),
            None,
        ));
        rows.push(Row::alone(
            "the same, counters restored per second",
            Figure::new(
                Unit::PerSec,
                vec![restore.counters_restored as f64 / restore.restore_secs],
            ),
            None,
        ));
    }
    if let Some(memory) = &results.memory {
        let limit = 100.0 + memory.mean_id_bytes;
        // Every process of its kind in every run: the range shows both nodes and runs.
        let of = |entries: fn(&MemoryRun) -> &[(String, usize, f64)]| {
            let samples = memory.runs.iter().flat_map(entries).map(|e| e.2);
            Figure::new(Unit::Bytes, samples.collect())
        };
        rows.push(Row::alone(
            format!(
                "memory: cluster shard nodes (own slot + peers' replicas), bytes per (counter, slot), {} counters, over the nodes and runs",
                memory.counters
            ),
            of(|run| &run.shards),
            Some(Goal::Below(limit)),
        ));
        rows.push(Row::alone(
            "memory: datacenter aggregators, bytes per (counter, slot), over the aggregators and runs",
            of(|run| &run.datacenter_aggregators),
            Some(Goal::Below(limit)),
        ));
        let single = Figure::new(
            Unit::Bytes,
            (memory.runs.iter().flat_map(|run| &run.global))
                .map(|g| g.bytes_per_entry)
                .collect(),
        );
        rows.push(Row::alone(
            "memory: global aggregator per (counter, datacenter) held, P=1 (one process, holds 100%), over the runs",
            single.clone(),
            Some(Goal::Below(limit)),
        ));
        for split in &memory.partitioned {
            rows.push(memory::partitioned_row(split, &single, limit));
        }
    }
    if let Some(figures) = &results.keys {
        keys::rows(&mut rows, figures);
    }
    if let Some(figures) = &results.reclaim {
        reclaim::rows(&mut rows, figures);
    }
    rows
}

async fn run(args: Args) -> anyhow::Result<()> {
    let all = args.steps.is_empty();
    let wants = |step| all || args.steps.contains(&step);
    let mut plan = Plan::new(args.quick);
    if !args.curve.is_empty() {
        plan.curve = args.curve.clone();
    }
    let bin_dir = match args.bin_dir {
        Some(dir) => dir,
        None => std::env::current_exe()?
            .parent()
            .context("the executable has no directory")?
            .to_path_buf(),
    };
    let dir = steps::work_dir(&args.work_dir)?;
    let shape = Topology::load(&args.topology)?;
    let unix_time = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let mut results = Results {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        unix_time,
        machine: machine(),
        load_tools: format!(
            "redis-benchmark, wrk -t{} -c{} and geocount-bench's own batch sender (hyper, {BATCH_CONNECTIONS} connections) and geoctl load run on the same cores as the servers",
            wrk::THREADS,
            wrk::CONNECTIONS
        ),
        plan: plan.clone(),
        rows: Vec::new(),
        table: String::new(),
        redis: None,
        ceiling: None,
        node: None,
        node_with_peer: None,
        curve: None,
        cluster: None,
        memory: None,
        restore: None,
        scan: None,
        keys: None,
        reclaim: None,
        failures: Vec::new(),
    };
    let steps = Step::value_variants().iter().filter(|&&step| wants(step));
    for &step in steps {
        println!("{}", step.banner(&args.topology));
        let ran = run_step(step, &mut results, &plan, &dir, &bin_dir, &shape).await;
        if let Err(error) = ran {
            let failure = format!("step {} failed: {error:#}", step.name());
            eprintln!("{failure}");
            results.failures.push(failure);
        }
    }
    results.rows = rows(&results);
    results.table = render_table(&results.rows);
    println!(
        "\n{}\nmachine: {}\nload: {}\n",
        results.table, results.machine, results.load_tools
    );
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from(format!("bench/results/{unix_time}.json")));
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut text = serde_json::to_string_pretty(&results)?;
    text.push('\n');
    std::fs::write(&out, text).with_context(|| format!("cannot write {}", out.display()))?;
    println!("saved {}", out.display());
    if !results.failures.is_empty() {
        anyhow::bail!("{}", results.failures.join("; "));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("geocount-bench: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
