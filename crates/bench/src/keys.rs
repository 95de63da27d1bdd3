//! What exactly-once costs: the same `geoctl load` with every write keyed and without keys
//! (`--without-keys`), in turns on fresh processes, on a lone shard node (`sync`), a
//! datacenter of two shard nodes (`replicated`: each node owns one slot and holds the other's)
//! and the whole cluster of `config/local.toml`'s shape in `sync` and in `replicated`. Each run
//! lasts long enough for the shard nodes to checkpoint while it writes (counted from their
//! metrics); the lone node and the pair also give the resident memory each held key costs.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use geocount_cluster::{Cluster, Member};
use geocount_model::{Durability, Topology};
use serde::Serialize;

use crate::batch::Connection;
use crate::figure::{Figure, Goal, Row, Unit};
use crate::procs::resident_bytes;
use crate::replicas::{Sample, shard_load};
use crate::steps::{BATCH_SIZE, COUNTERS, MEMORY_SETTLE, Plan, ZIPF_EXPONENT};
use crate::topo::{self, Tiers};

/// The most a keyed write may cost the shard nodes, in CPU, against a keyless one; and the
/// most the cluster's shard nodes may spend per keyed write against the lone node's.
const KEYED_RATIO: f64 = 2.0;

/// The figures of one setup's loads.
#[derive(Debug, Clone, Serialize)]
pub struct KeyLoad {
    /// Writes acknowledged per second.
    pub writes: Figure,
    /// The shard nodes' CPU time per acknowledged write, until geoctl exits.
    pub cpu_per_write: Figure,
    /// Checkpoints the shard nodes wrote while geoctl ran.
    pub checkpoints: Figure,
    /// The shard nodes' resident memory once the load is over and the allocator settled
    /// (lone node and pair only).
    pub resident: Option<Figure>,
    /// Writes acknowledged.
    pub acknowledged: Figure,
}

/// One setup, keyed and keyless.
#[derive(Debug, Clone, Serialize)]
pub struct Keyed {
    /// Every write with its own `Idempotency-Key`.
    pub keyed: KeyLoad,
    /// The same load without keys.
    pub keyless: KeyLoad,
}

/// The step's figures.
#[derive(Debug, Clone, Serialize)]
pub struct KeysFigures {
    /// How long each `geoctl load` wrote, in seconds.
    pub secs: u64,
    /// One datacenter of one shard node, `sync`.
    pub lone: Keyed,
    /// One datacenter of two shard nodes, `replicated`.
    pub pair: Keyed,
    /// The cluster of the topology's shape, `sync`.
    pub cluster_sync: Keyed,
    /// The same in `replicated`.
    pub cluster_replicated: Keyed,
}

/// Where a setup's loads run.
#[derive(Debug, Clone, Copy)]
enum Setup {
    Lone,
    Pair,
    Cluster(Durability),
}

impl Setup {
    fn name(self) -> String {
        match self {
            Setup::Lone => "lone shard node, sync".to_owned(),
            Setup::Pair => "2 shard nodes, replicated".to_owned(),
            Setup::Cluster(mode) => format!("cluster, {mode}"),
        }
    }

    fn topology(self, data: &Path, shape: &Topology) -> anyhow::Result<String> {
        match self {
            Setup::Lone => topo::bench_datacenter(data, 1, Durability::Sync),
            Setup::Pair => topo::bench_datacenter(data, 2, Durability::Replicated),
            Setup::Cluster(mode) => topo::same_shape_with(shape, data, Tiers::ONE, mode),
        }
    }

    /// Whether resident memory per key is read: only where every node holds one slot's keys
    /// as owner and (in the pair) the other's as peer, so the difference is the keys'.
    fn reads_memory(self) -> bool {
        matches!(self, Setup::Lone | Setup::Pair)
    }
}

/// The keys step: each setup keyed and keyless, `plan.repeats` turns each.
pub async fn keys(
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
) -> anyhow::Result<KeysFigures> {
    let load_plan = Plan {
        secs: plan.keys_secs,
        ..plan.clone()
    };
    let mut setups = Vec::new();
    for setup in [
        Setup::Lone,
        Setup::Pair,
        Setup::Cluster(Durability::Sync),
        Setup::Cluster(Durability::Replicated),
    ] {
        let mut samples = [Vec::new(), Vec::new()];
        for round in 0..plan.repeats {
            for (n, keyed) in [false, true].into_iter().enumerate() {
                let run_dir = dir.join(format!("keys-{}-{round}-{n}", setup.name()));
                let sample = run(&load_plan, &run_dir, bin_dir, shape, setup, keyed).await?;
                samples[n].push(sample);
            }
        }
        let [keyless, keyed] = samples.map(|runs| figures(&runs, setup.reads_memory()));
        setups.push(Keyed { keyed, keyless });
    }
    let [lone, pair, cluster_sync, cluster_replicated] =
        <[Keyed; 4]>::try_from(setups).expect("four setups");
    Ok(KeysFigures {
        secs: plan.keys_secs,
        lone,
        pair,
        cluster_sync,
        cluster_replicated,
    })
}

/// One run's sample, checkpoints and resident bytes.
struct Run {
    sample: Sample,
    checkpoints: f64,
    resident: f64,
}

async fn run(
    plan: &Plan,
    run_dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
    setup: Setup,
    keyed: bool,
) -> anyhow::Result<Run> {
    let text = setup.topology(&run_dir.join("data"), shape)?;
    let mut running = topo::start(run_dir, &text, bin_dir, |_| true).await?;
    let result = async {
        // The first pulls settle before the load starts.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = checkpoints(&running).await?;
        let label = format!(
            "keys: {}, {}",
            setup.name(),
            if keyed { "keyed" } else { "keyless" }
        );
        let extra: &[&str] = if keyed { &[] } else { &["--without-keys"] };
        let json = run_dir.join("load.json");
        let sample = shard_load(plan, bin_dir, &running, (0, extra), &json, &label).await?;
        let checkpoints = checkpoints(&running).await? - before;
        let mut resident = 0.0;
        if setup.reads_memory() {
            tokio::time::sleep(MEMORY_SETTLE).await;
            for pid in shard_pids(&running) {
                resident += resident_bytes(pid)? as f64;
            }
        }
        println!("    {checkpoints} checkpoints while it ran");
        anyhow::Ok(Run {
            sample,
            checkpoints,
            resident,
        })
    }
    .await;
    running.stop(topo::GRACE).await;
    let _ = std::fs::remove_dir_all(run_dir.join("data"));
    result
}

fn shard_pids(running: &Cluster) -> Vec<u32> {
    (running.processes.iter())
        .filter(|p| matches!(p.spec.member, Some(Member::Shard { .. })))
        .map(|p| p.pid)
        .collect()
}

/// Checkpoints written so far by every shard node of `running`, from their metrics.
async fn checkpoints(running: &Cluster) -> anyhow::Result<f64> {
    let mut total = 0.0;
    for address in running.shard_addresses() {
        let mut connection = Connection::open(address).await?;
        let (status, body) = connection.get("/metrics").await?;
        anyhow::ensure!(status == 200, "GET /metrics at {address}: {status}");
        let text = String::from_utf8_lossy(&body);
        total += checkpoint_count(&text)
            .with_context(|| format!("no geocount_shard_checkpoints_total at {address}"))?;
    }
    Ok(total)
}

/// The value of `geocount_shard_checkpoints_total` in a Prometheus text page.
fn checkpoint_count(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix("geocount_shard_checkpoints_total "))
        .and_then(|value| value.trim().parse().ok())
}

fn figures(runs: &[Run], memory: bool) -> KeyLoad {
    let of = |unit, f: &dyn Fn(&Run) -> f64| Figure::new(unit, runs.iter().map(f).collect());
    let acknowledged = |run: &Run| {
        (run.sample.report.pointer("/writes/acknowledged"))
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    KeyLoad {
        writes: of(Unit::PerSec, &|r| r.sample.writes_per_sec),
        cpu_per_write: of(Unit::Micros, &|r| r.sample.micros_per_write),
        checkpoints: of(Unit::Count, &|r| r.checkpoints),
        resident: memory.then(|| of(Unit::Bytes, &|r| r.resident)),
        acknowledged: of(Unit::Count, &acknowledged),
    }
}

/// The step's rows: per setup, keyed against keyless; the cluster's keyed CPU per write
/// against the lone node's; resident bytes per held key.
pub fn rows(rows: &mut Vec<Row>, figures: &KeysFigures) {
    let load = format!(
        "geoctl load --path batch --batch-size {BATCH_SIZE} --route owner flat out, Zipf {ZIPF_EXPONENT} over {COUNTERS} counters, {} s",
        figures.secs
    );
    let setups = [
        (Setup::Lone, &figures.lone),
        (Setup::Pair, &figures.pair),
        (Setup::Cluster(Durability::Sync), &figures.cluster_sync),
        (
            Setup::Cluster(Durability::Replicated),
            &figures.cluster_replicated,
        ),
    ];
    for (setup, runs) in setups {
        let name = setup.name();
        rows.push(Row::alone(
            format!("keys: {name}, {load}, --without-keys (writes/s)"),
            runs.keyless.writes.clone(),
            None,
        ));
        rows.push(Row::against(
            format!("keys: {name}, the same load, every write keyed (writes/s)"),
            runs.keyed.writes.clone(),
            "keyless",
            runs.keyless.writes.clone(),
            None,
        ));
        rows.push(Row::alone(
            format!("keys: {name}, shard nodes' CPU per acknowledged write, keyless"),
            runs.keyless.cpu_per_write.clone(),
            None,
        ));
        rows.push(Row::against(
            format!("keys: {name}, the same, keyed"),
            runs.keyed.cpu_per_write.clone(),
            "keyless",
            runs.keyless.cpu_per_write.clone(),
            Some(Goal::RatioAtMost(KEYED_RATIO)),
        ));
        rows.push(Row::alone(
            format!("keys: {name}, checkpoints while the keyed load ran (every shard node)"),
            runs.keyed.checkpoints.clone(),
            Some(Goal::AtLeast(1.0)),
        ));
        if let (Some(keyed), Some(keyless)) = (&runs.keyed.resident, &runs.keyless.resident) {
            let per_key = Figure::new(
                Unit::Bytes,
                (keyed.samples.iter().zip(&keyless.samples))
                    .zip(&runs.keyed.acknowledged.samples)
                    .map(|((keyed, keyless), keys)| (keyed - keyless) / keys.max(1.0))
                    .collect(),
            );
            let held = if matches!(setup, Setup::Pair) {
                "as owner and as peer"
            } else {
                "as owner"
            };
            rows.push(Row::alone(
                format!("keys: {name}, resident bytes per held key {held} (keyed minus keyless, over keys held)"),
                per_key,
                None,
            ));
        }
    }
    rows.push(Row::against(
        "keys: cluster, sync, shard nodes' CPU per keyed write",
        figures.cluster_sync.keyed.cpu_per_write.clone(),
        "lone shard node, keyed",
        figures.lone.keyed.cpu_per_write.clone(),
        Some(Goal::RatioAtMost(KEYED_RATIO)),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_are_read_from_the_metrics_page() {
        let page = "# HELP geocount_shard_checkpoints Checkpoints\n\
                    # TYPE geocount_shard_checkpoints counter\n\
                    geocount_shard_checkpoints_total 7\n\
                    geocount_shard_checkpoint_failures_total 1\n";
        assert_eq!(checkpoint_count(page), Some(7.0));
        assert_eq!(checkpoint_count("geocount_shard_log_bytes 5\n"), None);
    }
}
