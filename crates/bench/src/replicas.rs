//! What a second replica of each aggregator tier costs the shard nodes: the same `geoctl load`
//! on a fresh cluster with one aggregator process per tier and on one with two (a second
//! global replica and a second aggregator replica per datacenter), in the same run. Every
//! replica pulls every shard node of its datacenter on its own, so the nodes answer twice the
//! pulls.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use geocount_cluster::{Cluster, Member};
use geocount_model::{Durability, Topology};
use serde::Serialize;

use crate::figure::{Figure, Row, Unit};
use crate::procs::{cpu_seconds, output};
use crate::steps::{COUNTERS, Plan, ZIPF_EXPONENT, load_command};
use crate::topo::{self, Tiers};

/// The tiers with a second replica each, and no partitions.
pub const TWO: Tiers = Tiers {
    partitions: 1,
    global_replicas: 2,
    aggregator_replicas: 2,
};

/// The shard nodes under the same loads with one and with two replicas per tier.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaFigures {
    /// The paced loads' writes per second: half the flat-out rate with one replica per tier.
    pub paced_rate: u64,
    /// One aggregator process per tier.
    pub one: TierLoads,
    /// Two per tier.
    pub two: TierLoads,
}

/// One cluster's shard nodes under the loads.
#[derive(Debug, Clone, Serialize)]
pub struct TierLoads {
    /// Writes acknowledged per second, flat out (no readers).
    pub flat_writes: Figure,
    /// The shard nodes' CPU time per acknowledged write, flat out, until geoctl exits (so
    /// with the pulls that carry the last writes up).
    pub flat_cpu_per_write: Figure,
    /// The shard nodes' CPU at the paced rate, over the load's window.
    pub paced_cpu: Figure,
    /// The paced loads' visibility lag p99.
    pub paced_lag_p99: Figure,
    /// Every `geoctl load` report, flat out first.
    pub load_reports: Vec<serde_json::Value>,
}

/// One load's figures.
pub(crate) struct Sample {
    /// Writes acknowledged per second.
    pub(crate) writes_per_sec: f64,
    /// The shard nodes' CPU over the load's window, in cores.
    pub(crate) cores: f64,
    /// The shard nodes' CPU time per acknowledged write, until geoctl exits.
    pub(crate) micros_per_write: f64,
    /// geoctl's report.
    pub(crate) report: serde_json::Value,
}

/// Runs the loads on a fresh cluster of `shape` with one aggregator process per tier, then on
/// one with [`TWO`].
pub async fn compare(
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
) -> anyhow::Result<ReplicaFigures> {
    let (one, flat) = on_fresh(plan, dir, bin_dir, shape, Tiers::ONE, None).await?;
    // Paced well below what one replica per tier sustains, so both clusters take every write.
    let paced_rate = half_rate(flat);
    let (two, _) = on_fresh(plan, dir, bin_dir, shape, TWO, Some(paced_rate)).await?;
    Ok(ReplicaFigures {
        paced_rate,
        one,
        two,
    })
}

/// Half of `writes_per_sec`, in thousands: the paced rate.
fn half_rate(writes_per_sec: f64) -> u64 {
    ((writes_per_sec / 2000.0).round() as u64).max(1) * 1000
}

/// The flat-out loads then the paced ones (at `rate`, or half the flat-out median) on a fresh
/// cluster with `tiers`; and that median.
async fn on_fresh(
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
    tiers: Tiers,
    rate: Option<u64>,
) -> anyhow::Result<(TierLoads, f64)> {
    let label = format!("{} replica(s) per tier", tiers.global_replicas);
    let replicas_dir = dir.join(format!("replicas-{}", tiers.global_replicas));
    let text = topo::same_shape_with(shape, &replicas_dir.join("data"), tiers, Durability::Sync)?;
    let mut running = topo::start(&replicas_dir, &text, bin_dir, |_| true).await?;
    let result = async {
        // Let the first pulls settle, as any idle cluster's.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut flat = Vec::new();
        for run in 0..plan.repeats {
            let json = replicas_dir.join(format!("flat-{run}.json"));
            flat.push(shard_load(plan, bin_dir, &running, (0, &[]), &json, &label).await?);
        }
        let flat_writes = Figure::new(
            Unit::PerSec,
            flat.iter().map(|s| s.writes_per_sec).collect(),
        );
        let rate = rate.unwrap_or_else(|| half_rate(flat_writes.median));
        let mut paced = Vec::new();
        for run in 0..plan.repeats {
            let json = replicas_dir.join(format!("paced-{run}.json"));
            paced.push(shard_load(plan, bin_dir, &running, (rate, &[]), &json, &label).await?);
        }
        let lag = paced
            .iter()
            .map(|s| {
                s.report
                    .pointer("/visibility_lag/p99_ms")
                    .and_then(serde_json::Value::as_f64)
            })
            .collect::<Option<Vec<f64>>>()
            .context("a paced geoctl load report without /visibility_lag/p99_ms")?;
        let loads = TierLoads {
            flat_cpu_per_write: Figure::new(
                Unit::Micros,
                flat.iter().map(|s| s.micros_per_write).collect(),
            ),
            flat_writes: flat_writes.clone(),
            paced_cpu: Figure::new(Unit::Cores, paced.iter().map(|s| s.cores).collect()),
            paced_lag_p99: Figure::new(Unit::Ms, lag),
            load_reports: flat.into_iter().chain(paced).map(|s| s.report).collect(),
        };
        anyhow::Ok((loads, flat_writes.median))
    }
    .await;
    running.stop(topo::GRACE).await;
    result
}

/// One `geoctl load` at `rate` (0: flat out) over `running`'s shard nodes, with `extra`
/// arguments, and their CPU time meanwhile.
pub(crate) async fn shard_load(
    plan: &Plan,
    bin_dir: &Path,
    running: &Cluster,
    (rate, extra): (u64, &[&str]),
    json: &Path,
    label: &str,
) -> anyhow::Result<Sample> {
    let pids: Vec<u32> = (running.processes.iter())
        .filter(|p| matches!(p.spec.member, Some(Member::Shard { .. })))
        .map(|p| p.pid)
        .collect();
    let cpu = || -> anyhow::Result<f64> { pids.iter().map(|&pid| cpu_seconds(pid)).sum() };
    let (geoctl, mut args) = load_command(plan, bin_dir, running, rate, json);
    args.extend(extra.iter().map(|&a| a.to_owned()));
    let start = cpu()?;
    let load = output(&geoctl, &args, Duration::from_secs(plan.secs + 120));
    // The window skips geoctl's start and the last half second of its writes.
    let window = plan
        .secs()
        .saturating_sub(Duration::from_secs(1))
        .max(Duration::from_secs(1));
    let during = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let from = cpu()?;
        tokio::time::sleep(window).await;
        anyhow::Ok(cpu()? - from)
    };
    let (load, during) = tokio::join!(load, during);
    load.context("geoctl load")?;
    let total = cpu()? - start;
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(json)
            .with_context(|| format!("cannot read {}", json.display()))?,
    )?;
    let number = |pointer: &str| report.pointer(pointer).and_then(serde_json::Value::as_f64);
    let writes_per_sec = number("/throughput/writes_per_sec").context("no writes_per_sec")?;
    let acknowledged = number("/writes/acknowledged").context("no acknowledged writes")?;
    let lag_p99 = number("/visibility_lag/p99_ms");
    let sample = Sample {
        writes_per_sec,
        cores: during? / window.as_secs_f64(),
        micros_per_write: total * 1e6 / acknowledged.max(1.0),
        report,
    };
    println!(
        "  {label}, rate {}: {:.0} writes/s, shard nodes {:.2} cores, {:.1} µs CPU per write, lag p99 {:?} ms",
        if rate == 0 {
            "flat out".to_owned()
        } else {
            rate.to_string()
        },
        sample.writes_per_sec,
        sample.cores,
        sample.micros_per_write,
        lag_p99,
    );
    Ok(sample)
}

/// One figure of a cluster's loads.
type OfRun = fn(&TierLoads) -> &Figure;

/// The shard nodes' cost of a second replica per tier: fresh clusters, the same loads, no
/// readers; each figure with 2 replicas per tier against 1.
pub fn rows(rows: &mut Vec<Row>, replicas: &ReplicaFigures) {
    let load = format!(
        "geoctl load --path batch --route owner --rate {} (Zipf {ZIPF_EXPONENT} over {COUNTERS} counters)",
        replicas.paced_rate
    );
    let figures: [(String, OfRun); 4] = [
        (
            format!("replicas: shard nodes' CPU under {load}, 2 replicas per tier (global and each datacenter's aggregator)"),
            |run| &run.paced_cpu,
        ),
        ("the same load, visibility lag p99, 2 replicas per tier".into(), |run| &run.paced_lag_p99),
        (
            "replicas: the same load flat out (no --rate, no readers), writes/s, 2 replicas per tier".into(),
            |run| &run.flat_writes,
        ),
        (
            "the same, shard nodes' CPU per acknowledged write (until geoctl exits), 2 replicas per tier".into(),
            |run| &run.flat_cpu_per_write,
        ),
    ];
    for (label, figure) in figures {
        let (two, one) = (figure(&replicas.two).clone(), figure(&replicas.one).clone());
        rows.push(Row::against(label, two, "1 replica per tier", one, None));
    }
}
