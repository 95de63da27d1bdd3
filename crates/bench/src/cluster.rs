//! The whole cluster under load: global reads idle and while `geoctl load` writes flat out
//! over every shard node, beside the bare hyper server's reads under the same writes, and the
//! visibility lag meanwhile, all with one aggregator process per tier; then what a second
//! replica per tier costs the shard nodes ([`crate::replicas`]), and `replicated` durability
//! beside `sync` flat out ([`crate::durability`]).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use geocount_cluster::Cluster;
use geocount_model::Topology;
use serde::Serialize;

use crate::batch::{self};
use crate::durability::{self, ClusterLoad, Modes};
use crate::figure::{Figure, Unit};
use crate::procs::output;
use crate::replicas::{self, ReplicaFigures};
use crate::steps::{
    Plan, READ_COUNTERS, WrkFigures, load_command, sample_ids, start_ceiling, wait_visible,
    wrk_repeated,
};
use crate::topo;
use crate::wrk::{self, Script, WrkRun};

/// The whole cluster.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterFigures {
    /// `GET /counter/{id}` at the global aggregator, with no write load.
    pub reads_idle: WrkFigures,
    /// The same while `geoctl load` writes flat out.
    pub reads_loaded: WrkFigures,
    /// The hyper ceiling read by the same wrk script while the same load writes flat out, in
    /// turns with `reads_loaded`: what the machine leaves any server's reads under that load.
    pub ceiling_reads_loaded: WrkFigures,
    /// `geoctl load --path batch` writes acknowledged per second (every shard node).
    pub writes: Figure,
    /// Visibility lag (acknowledged write → global value) under that load, p50.
    pub lag_p50: Figure,
    /// Its 99th percentile.
    pub lag_p99: Figure,
    /// Every `geoctl load` report.
    pub load_reports: Vec<serde_json::Value>,
    /// The shard nodes under the same loads with one and two replicas per tier.
    /// (`None` only until measured, after the figures above.)
    pub replicas: Option<ReplicaFigures>,
    /// Fresh clusters of the same shape written flat out in `sync` and in `replicated`.
    /// (`None` only until measured, after the replicas.)
    pub durability: Option<Modes<ClusterLoad>>,
}

/// Step 4: the cluster of `shape` (config/local.toml: one aggregator process per tier) on free
/// ports; then the shard nodes' cost of a second replica per tier ([`replicas`]) and
/// `replicated` beside `sync` ([`durability`]).
pub async fn cluster(
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
) -> anyhow::Result<ClusterFigures> {
    let cluster_dir = dir.join("cluster");
    let text = topo::same_shape(shape, &cluster_dir.join("data"))?;
    let mut running = topo::start(&cluster_dir, &text, bin_dir, |_| true).await?;
    let result = cluster_runs(plan, dir, bin_dir, &running).await;
    running.stop(topo::GRACE).await;
    let mut figures = result?;
    figures.replicas = Some(replicas::compare(plan, dir, bin_dir, shape).await?);
    figures.durability = Some(durability::cluster(plan, dir, bin_dir, shape).await?);
    Ok(figures)
}

async fn cluster_runs(
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    running: &Cluster,
) -> anyhow::Result<ClusterFigures> {
    let global = running.topology.global.listen;
    let shards = running.shard_addresses();
    batch::populate(shards[0], "r", READ_COUNTERS, 1_000).await?;
    wait_visible(
        global,
        &sample_ids("r", READ_COUNTERS),
        1,
        Duration::from_secs(30),
    )
    .await?;
    let script = wrk::write_script(dir, Script::Read, "r", READ_COUNTERS)?;
    let reads_idle = wrk_repeated(plan, "global reads, idle", global, &script).await?;

    // The bound on reads under load: the bare hyper server read by the same wrk while the
    // same writes run, in turns with the global aggregator's samples.
    let (ceiling, ceiling_address) =
        start_ceiling(bin_dir, &[], &dir.join("bench-ceiling-cluster.log")).await?;
    let samples = async {
        let (mut reads, mut ceiling_reads, mut reports) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..plan.repeats {
            let (read, report) = loaded_reads(
                plan,
                dir,
                bin_dir,
                running,
                ("global", global),
                &script,
                run,
            )
            .await?;
            reads.push(read);
            reports.push(report);
            let (read, _) = loaded_reads(
                plan,
                dir,
                bin_dir,
                running,
                ("ceiling", ceiling_address),
                &script,
                run,
            )
            .await?;
            ceiling_reads.push(read);
        }
        anyhow::Ok((reads, ceiling_reads, reports))
    }
    .await;
    ceiling.stop().await;
    let (reads, ceiling_reads, reports) = samples?;
    let of = |pointer: &str, unit| -> anyhow::Result<Figure> {
        let samples = reports
            .iter()
            .map(|r| r.pointer(pointer).and_then(serde_json::Value::as_f64))
            .collect::<Option<Vec<f64>>>()
            .with_context(|| format!("a geoctl load report without {pointer}"))?;
        Ok(Figure::new(unit, samples))
    };
    Ok(ClusterFigures {
        reads_idle,
        reads_loaded: WrkFigures::new(reads),
        ceiling_reads_loaded: WrkFigures::new(ceiling_reads),
        writes: of("/throughput/writes_per_sec", Unit::PerSec)?,
        lag_p50: of("/visibility_lag/p50_ms", Unit::Ms)?,
        lag_p99: of("/visibility_lag/p99_ms", Unit::Ms)?,
        load_reports: reports,
        replicas: None,
        durability: None,
    })
}

/// One sample of `geoctl load` writing flat out over every shard node while wrk reads `reader`
/// (named `reader_name` in the log) with `script`: the wrk run and the load's report.
async fn loaded_reads(
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    running: &Cluster,
    (reader_name, reader): (&str, SocketAddr),
    script: &Path,
    run: usize,
) -> anyhow::Result<(WrkRun, serde_json::Value)> {
    let json = dir.join(format!("geoctl-load-{run}-{}.json", reader.port()));
    let (geoctl, args) = load_command(plan, bin_dir, running, 0, &json);
    let load = output(&geoctl, &args, Duration::from_secs(plan.secs + 120));
    // The readers start with the writers and stop a second before them.
    let read = wrk::run(
        reader,
        script,
        plan.secs().saturating_sub(Duration::from_secs(1)),
    );
    let (load, read) = tokio::join!(load, read);
    load.context("geoctl load")?;
    let read = read?;
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&json)
            .with_context(|| format!("cannot read {}", json.display()))?,
    )?;
    let number = |pointer: &str| report.pointer(pointer).and_then(serde_json::Value::as_f64);
    println!(
        "  cluster: {:.0} writes/s, lag p50 {:?} ms p99 {:?} ms; {reader_name} reads {:.0}/s p99 {:.2} ms, {} errors",
        number("/throughput/writes_per_sec").unwrap_or(f64::NAN),
        number("/visibility_lag/p50_ms"),
        number("/visibility_lag/p99_ms"),
        read.requests_per_sec,
        read.p99_ms,
        read.non_2xx + read.socket_errors
    );
    Ok((read, report))
}
