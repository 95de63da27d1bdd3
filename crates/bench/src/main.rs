//! `geocount-bench [--quick] [--steps ...] [--out FILE]`: the benchmark, run by
//! `scripts/bench.sh`. It measures Redis (the peer), a bare hyper server (the ceiling for HTTP
//! on this machine), one geocount shard node, the same `redis-benchmark` command lines against
//! Redis and shard nodes' RESP ports, the growth curve, the whole cluster of
//! `config/local.toml`, memory per counter, a lost slot's restore and global reads while
//! rankings scan every counter, what idempotency keys cost, and the memory of deleted counters
//! handed back at every tier, and bounded counters under the emulated WAN, all on this machine in
//! one go,
//! prints one Markdown table (each geocount figure beside its peer, as a ratio from the same
//! run) and saves it with every sample as JSON. The node and cluster steps also put
//! `replicated` durability beside `sync`.

mod batch;
mod bounds;
mod cluster;
mod durability;
mod figure;
mod keys;
mod memory;
mod procs;
mod reclaim;
mod redis;
mod replicas;
mod resp;
mod restore;
mod scan;
mod steps;
mod table;
mod topo;
mod wrk;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use geocount_model::Topology;
use serde::Serialize;

use crate::cluster::ClusterFigures;
use crate::figure::{Row, render_table};
use crate::memory::MemoryFigures;
use crate::steps::{
    BATCH_CONNECTIONS, CeilingFigures, CurvePoint, NodeFigures, Plan, RedisFigures,
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
    /// The same redis-benchmark command lines against Redis and shard nodes' RESP ports.
    Resp,
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
    /// Bounded counters under the emulated WAN: writes beside unbounded ones, rights transfers.
    Bounds,
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
    /// The same redis-benchmark command lines against Redis and shard nodes' RESP ports.
    resp: Option<resp::RespFigures>,
    curve: Option<Vec<CurvePoint>>,
    cluster: Option<ClusterFigures>,
    memory: Option<MemoryFigures>,
    restore: Option<restore::RestoreFigures>,
    scan: Option<scan::ScanFigures>,
    keys: Option<keys::KeysFigures>,
    reclaim: Option<reclaim::ReclaimFigures>,
    bounds: Option<bounds::BoundsFigures>,
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
            Step::Resp => {
                "step 3b: the Redis protocol, the same redis-benchmark against Redis and shard nodes"
                    .to_owned()
            }
            Step::Curve => "step 3c: per-write cost as counters grow".to_owned(),
            Step::Cluster => format!("step 4: the cluster of {}", topology.display()),
            Step::Memory => "step 5: memory per counter".to_owned(),
            Step::Restore => "step 6: restoring a lost slot from its datacenter".to_owned(),
            Step::Scan => "step 7: global reads while rankings scan every counter".to_owned(),
            Step::Keys => "step 8: keyed writes beside keyless ones".to_owned(),
            Step::Reclaim => {
                "step 9: counters created and deleted, memory handed back at every tier".to_owned()
            }
            Step::Bounds => format!(
                "step 10: bounded counters, the cluster of {} under --wan",
                topology.display()
            ),
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
        Step::Resp => results.resp = Some(resp::resp(plan, dir, bin_dir, shape).await?),
        Step::Curve => results.curve = Some(steps::curve(plan, dir, bin_dir).await?),
        Step::Cluster => {
            results.cluster = Some(cluster::cluster(plan, dir, bin_dir, shape).await?);
        }
        Step::Memory => results.memory = Some(memory::memory(plan, dir, bin_dir, shape).await?),
        Step::Restore => results.restore = Some(restore::restore(plan, dir, bin_dir).await?),
        Step::Scan => results.scan = Some(scan::scan(plan, dir, bin_dir).await?),
        Step::Keys => results.keys = Some(keys::keys(plan, dir, bin_dir, shape).await?),
        Step::Reclaim => results.reclaim = Some(reclaim::reclaim(plan, dir, bin_dir).await?),
        Step::Bounds => results.bounds = Some(bounds::bounds(plan, dir, bin_dir, shape).await?),
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
        resp: None,
        curve: None,
        cluster: None,
        memory: None,
        restore: None,
        scan: None,
        keys: None,
        reclaim: None,
        bounds: None,
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
    results.rows = table::rows(&results);
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
