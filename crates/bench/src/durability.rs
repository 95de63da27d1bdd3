//! What `replicated` durability costs beside `sync`, measured in the same run with the same
//! loads, key space and tools on both sides: a shard node with a peer (a datacenter of two
//! shard nodes in both modes, so that like meets like) under single writes through wrk and
//! under batches; and the whole cluster of `config/local.toml`'s shape written flat out. Each
//! round runs both modes in turns, each on fresh processes, so their samples meet the machine
//! in the same states.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use geocount_cluster::Cluster;
use geocount_model::{Durability, Topology};
use geoctl::cmd::load::DEFAULT_CONCURRENCY;
use geoctl::load::workload::{CounterPicker, KeyDistribution};
use serde::Serialize;

use crate::batch::{self, Answer};
use crate::figure::{Figure, Goal, Row, Unit};
use crate::replicas::{Sample, shard_load};
use crate::steps::{
    BATCH_CONNECTIONS, BATCH_SIZE, BatchFigures, COUNTERS, Plan, WrkFigures, ZIPF_EXPONENT,
    is_shard,
};
use crate::topo::{self, Tiers};
use crate::wrk;

/// The two modes compared, `sync` first.
const MODES: [Durability; 2] = [Durability::Sync, Durability::Replicated];

/// The ratio replicated / sync the batches and the cluster must reach.
const THROUGHPUT_RATIO: f64 = 0.8;
/// The single write's p99 target in `replicated`, milliseconds (on an idle machine).
const SINGLE_WRITE_P99_MS: f64 = 2.0;

/// One figure set per mode.
#[derive(Debug, Clone, Serialize)]
pub struct Modes<T> {
    /// Acknowledged once fsynced in the owner's log.
    pub sync: T,
    /// Acknowledged once fsynced in the owner's log and in a peer's.
    pub replicated: T,
}

/// A shard node with a peer, under the node step's loads.
#[derive(Debug, Clone, Serialize)]
pub struct PairLoads {
    /// Single writes, `PATCH /counter/{id}/write` through wrk, to the first node, over
    /// [`COUNTERS`] counters its slot owns.
    pub http_writes: WrkFigures,
    /// Batches of [`BATCH_SIZE`], Zipf over the same counters, `Prefer: return=minimal`, to the
    /// first node.
    pub batches: BatchFigures,
}

/// The whole cluster written flat out, no readers.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterLoad {
    /// Writes acknowledged per second.
    pub writes: Figure,
    /// The shard nodes' CPU time per acknowledged write, until geoctl exits.
    pub cpu_per_write: Figure,
    /// The shard nodes' cores busy over the load's window.
    pub cores: Figure,
    /// geoctl's request latency p50: with a fixed number of requests in flight, the writes
    /// per second follow it.
    pub request_p50: Figure,
    /// Writes refused (503) or of unknown outcome, over the runs.
    pub not_acknowledged: u64,
    /// Every `geoctl load` report.
    pub load_reports: Vec<serde_json::Value>,
}

/// Part of the node step: a fresh datacenter of two shard nodes per round and mode, loaded
/// with counters the first node's slot owns (none forwarded): the first node commits them,
/// the second is its peer.
pub async fn pair(plan: &Plan, dir: &Path, bin_dir: &Path) -> anyhow::Result<Modes<PairLoads>> {
    // The same ids in both modes: the datacenter's name and slot count set the ring.
    let shape = topo::bench_datacenter(dir, 2, Durability::Sync)?;
    let ids = owned_ids(&Topology::from_toml("pair", &shape)?, "pair", COUNTERS);
    let script = wrk::write_script_over(dir, "pair", &ids)?;
    let picker = CounterPicker::new(KeyDistribution::Zipf, COUNTERS, ZIPF_EXPONENT)?;
    let bodies = Arc::new(batch::bodies_over(&ids, &picker, BATCH_SIZE));
    let mut writes = [Vec::new(), Vec::new()];
    let mut batches = [Vec::new(), Vec::new()];
    for _ in 0..plan.repeats {
        for (n, mode) in MODES.into_iter().enumerate() {
            let pair_dir = dir.join(format!("pair-{mode}"));
            let text = topo::bench_datacenter(&pair_dir.join("data"), 2, mode)?;
            let mut running = topo::start(&pair_dir, &text, bin_dir, is_shard).await?;
            let address = running.shard_addresses()[0];
            let result = async {
                let write = wrk::run(address, &script, plan.secs()).await?;
                println!(
                    "  shard node with a peer, {mode}, PATCH: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
                    write.requests_per_sec,
                    write.p50_ms,
                    write.p99_ms,
                    write.non_2xx + write.socket_errors
                );
                let batch = batch::load(
                    std::slice::from_ref(&address),
                    BATCH_CONNECTIONS,
                    Arc::clone(&bodies),
                    Answer::Minimal,
                    plan.secs(),
                )
                .await?;
                println!(
                    "  shard node with a peer, {mode}, batches: {:.0} writes/s, p50 {:.2} ms, p99 {:.2} ms",
                    batch.writes_per_sec, batch.p50_ms, batch.p99_ms
                );
                anyhow::Ok((write, batch))
            }
            .await;
            running.stop(topo::GRACE).await;
            let (write, batch) = result?;
            writes[n].push(write);
            batches[n].push(batch);
        }
    }
    let [sync_writes, replicated_writes] = writes;
    let [sync_batches, replicated_batches] = batches;
    Ok(Modes {
        sync: PairLoads {
            http_writes: WrkFigures::new(sync_writes),
            batches: BatchFigures::new(sync_batches),
        },
        replicated: PairLoads {
            http_writes: WrkFigures::new(replicated_writes),
            batches: BatchFigures::new(replicated_batches),
        },
    })
}

/// The first `count` ids `<prefix>-<n>` whose writes the first slot of `topology`'s first
/// datacenter owns, so that a load sent to its node is not forwarded.
fn owned_ids(topology: &Topology, prefix: &str, count: usize) -> Vec<String> {
    let placement = topology.datacenters[0].placement(topology.shard.virtual_nodes);
    let shards = topology.shard.default_number_of_shards;
    (0..)
        .map(|n| format!("{prefix}-{n}"))
        .filter(|id| placement.slots_for(id, shards)[0] == 0)
        .take(count)
        .collect()
}

/// Part of the cluster step: a fresh cluster of `shape` (one aggregator process per tier) per
/// round and mode, written flat out over every shard node, no readers.
pub async fn cluster(
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
) -> anyhow::Result<Modes<ClusterLoad>> {
    let mut samples = [Vec::new(), Vec::new()];
    for round in 0..plan.repeats {
        for (n, mode) in MODES.into_iter().enumerate() {
            let cluster_dir = dir.join(format!("durability-{mode}"));
            let text = topo::same_shape_with(shape, &cluster_dir.join("data"), Tiers::ONE, mode)?;
            let mut running = topo::start(&cluster_dir, &text, bin_dir, |_| true).await?;
            let result = flat_out(plan, bin_dir, &running, &cluster_dir, round, mode).await;
            running.stop(topo::GRACE).await;
            samples[n].push(result?);
        }
    }
    let [sync, replicated] = samples.map(|samples| {
        let of = |unit, f: fn(&Sample) -> f64| Figure::new(unit, samples.iter().map(f).collect());
        let count = |pointer: &str| {
            (samples.iter())
                .filter_map(|s| {
                    s.report
                        .pointer(pointer)
                        .and_then(serde_json::Value::as_u64)
                })
                .sum::<u64>()
        };
        ClusterLoad {
            writes: of(Unit::PerSec, |s| s.writes_per_sec),
            cpu_per_write: of(Unit::Micros, |s| s.micros_per_write),
            cores: of(Unit::Cores, |s| s.cores),
            request_p50: of(Unit::Ms, |s| {
                (s.report.pointer("/latency/p50_ms"))
                    .and_then(serde_json::Value::as_f64)
                    .unwrap_or(f64::NAN)
            }),
            not_acknowledged: count("/writes/refused") + count("/writes/unknown"),
            load_reports: samples.iter().map(|s| s.report.clone()).collect(),
        }
    });
    Ok(Modes { sync, replicated })
}

/// One flat-out `geoctl load` on `running`, after its first pulls settle.
async fn flat_out(
    plan: &Plan,
    bin_dir: &Path,
    running: &Cluster,
    cluster_dir: &Path,
    round: usize,
    mode: Durability,
) -> anyhow::Result<Sample> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let json = cluster_dir.join(format!("flat-{round}.json"));
    let label = format!("cluster, {mode}");
    shard_load(plan, bin_dir, running, (0, &[]), &json, &label).await
}

/// The node step's rows: each figure in `sync`, then in `replicated` against it.
pub fn pair_rows(rows: &mut Vec<Row>, pair: &Modes<PairLoads>) {
    let node = "shard node with a peer (a datacenter of 2 shard nodes; writes to counters the first one owns)";
    let single = format!("{node}: PATCH /counter/{{id}}/write, wrk -t2 -c64");
    let batches = format!(
        "{node}: POST /batch of {BATCH_SIZE}, Zipf {ZIPF_EXPONENT} over {COUNTERS} counters, {BATCH_CONNECTIONS} connections, Prefer: return=minimal"
    );
    let (sync, replicated) = (&pair.sync, &pair.replicated);
    let errors = |w: &WrkFigures| Figure::new(Unit::Count, vec![w.errors as f64]);
    let figures = [
        (
            single,
            &sync.http_writes.rate,
            &replicated.http_writes.rate,
            None,
        ),
        (
            "the same, p50 latency".to_owned(),
            &sync.http_writes.p50,
            &replicated.http_writes.p50,
            None,
        ),
        (
            "the same, p99 latency".to_owned(),
            &sync.http_writes.p99,
            &replicated.http_writes.p99,
            Some(Goal::AtMost(SINGLE_WRITE_P99_MS)),
        ),
        (
            "the same, answers not 2xx over the runs".to_owned(),
            &errors(&sync.http_writes),
            &errors(&replicated.http_writes),
            Some(Goal::Below(1.0)),
        ),
        (
            batches,
            &sync.batches.rate,
            &replicated.batches.rate,
            Some(Goal::RatioAtLeast(THROUGHPUT_RATIO)),
        ),
        (
            "the same, p99 latency of a batch".to_owned(),
            &sync.batches.p99,
            &replicated.batches.p99,
            None,
        ),
    ];
    for (label, sync, replicated, goal) in figures {
        push_modes(rows, &label, sync, replicated, goal);
    }
}

/// The cluster step's rows: each figure in `sync`, then in `replicated` against it.
pub fn cluster_rows(rows: &mut Vec<Row>, cluster: &Modes<ClusterLoad>) {
    let (sync, replicated) = (&cluster.sync, &cluster.replicated);
    let not_acknowledged =
        |c: &ClusterLoad| Figure::new(Unit::Count, vec![c.not_acknowledged as f64]);
    let figures = [
        (
            format!(
                "cluster (1 replica per tier; EUROPE_0's lone shard node sync in both, as config/local.toml): geoctl load --path batch --route owner flat out, Zipf {ZIPF_EXPONENT} over {COUNTERS} counters, no readers (writes/s)"
            ),
            &sync.writes,
            &replicated.writes,
            Some(Goal::RatioAtLeast(THROUGHPUT_RATIO)),
        ),
        (
            "the same, shard nodes' CPU per acknowledged write (until geoctl exits)".to_owned(),
            &sync.cpu_per_write,
            &replicated.cpu_per_write,
            None,
        ),
        (
            "the same, shard nodes' cores busy over the load's window".to_owned(),
            &sync.cores,
            &replicated.cores,
            None,
        ),
        (
            format!(
                "the same, geoctl request latency p50 ({DEFAULT_CONCURRENCY} requests in flight)"
            ),
            &sync.request_p50,
            &replicated.request_p50,
            None,
        ),
        (
            "the same, writes refused or of unknown outcome over the runs".to_owned(),
            &not_acknowledged(sync),
            &not_acknowledged(replicated),
            Some(Goal::Below(1.0)),
        ),
    ];
    for (label, sync, replicated, goal) in figures {
        push_modes(rows, &label, sync, replicated, goal);
    }
}

/// The `sync` row of `what`, then the `replicated` one against it with `goal`: a ratio goal
/// judges replicated / sync, an absolute one judges each row's own figure.
fn push_modes(
    rows: &mut Vec<Row>,
    what: &str,
    sync: &Figure,
    replicated: &Figure,
    goal: Option<Goal>,
) {
    let absolute = goal
        .clone()
        .filter(|g| !matches!(g, Goal::RatioAtLeast(_) | Goal::RatioAtMost(_)));
    rows.push(Row::alone(format!("{what}, sync"), sync.clone(), absolute));
    let short = if what.starts_with("the same") {
        what
    } else {
        "the same"
    };
    rows.push(Row::against(
        format!("{short}, replicated"),
        replicated.clone(),
        "sync, same load (the row above)",
        sync.clone(),
        goal,
    ));
}
