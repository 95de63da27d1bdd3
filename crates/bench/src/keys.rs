//! What exactly-once costs: the same `geoctl load` with every write keyed and without keys
//! (`--without-keys`), in turns on fresh processes, on a lone shard node (`sync`), a
//! datacenter of two shard nodes (`replicated`: each node owns one slot and holds the other's)
//! and the whole cluster of `config/local.toml`'s shape in `sync` and in `replicated`. Each run
//! lasts long enough for the shard nodes to checkpoint while it writes (counted from their
//! metrics), with keys kept [`STEADY_RETENTION_SECS`] so that they expire as fast as they
//! arrive for most of the run, as on a node past its first retention period (flat out with
//! the default 600 s, a node would reach `max_idempotency_keys` within the run). Then the
//! lone node and the pair under a paced load with the default retention give the resident
//! memory each held key costs.

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

/// How long the CPU runs keep keys (`shard.idempotency_retention_secs`).
pub const STEADY_RETENTION_SECS: u64 = 10;
/// The memory runs' rate: under `max_idempotency_keys` over the run.
const MEMORY_RATE: u64 = 100_000;

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
    /// Writes refused or of unknown outcome, over the runs.
    pub not_acknowledged: Figure,
}

/// What held keys cost in memory: keyed against keyless runs of one setup.
#[derive(Debug, Clone, Serialize)]
pub struct HeldKeys {
    /// Resident bytes (every shard node, once the allocator settled), keyed minus keyless,
    /// per key held.
    pub bytes_per_key: Figure,
    /// Keys held at the end of each keyed run (writes acknowledged, all within retention).
    pub keys: Figure,
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
    /// How long the CPU runs kept keys, in seconds.
    pub retention_secs: u64,
    /// One datacenter of one shard node, `sync`.
    pub lone: Keyed,
    /// One datacenter of two shard nodes, `replicated`.
    pub pair: Keyed,
    /// The cluster of the topology's shape, `sync`.
    pub cluster_sync: Keyed,
    /// The same in `replicated`.
    pub cluster_replicated: Keyed,
    /// The memory runs' rate, writes per second.
    pub memory_rate: u64,
    /// The lone node's keys, held as owner.
    pub lone_memory: HeldKeys,
    /// The pair's keys, each held as owner and as peer.
    pub pair_memory: HeldKeys,
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

    /// Its topology, keeping keys `retention_secs` (`None`: the default).
    fn topology(
        self,
        data: &Path,
        shape: &Topology,
        retention_secs: Option<u64>,
    ) -> anyhow::Result<String> {
        let text = match self {
            Setup::Lone => topo::bench_datacenter(data, 1, Durability::Sync),
            Setup::Pair => topo::bench_datacenter(data, 2, Durability::Replicated),
            Setup::Cluster(mode) => topo::same_shape_with(shape, data, Tiers::ONE, mode),
        }?;
        Ok(match retention_secs {
            Some(secs) => text.replacen(
                "[shard]\n",
                &format!("[shard]\nidempotency_retention_secs = {secs}\n"),
                1,
            ),
            None => text,
        })
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
    let runs = |setup: Setup, rate: u64| {
        let load_plan = &load_plan;
        async move {
            let mut samples = [Vec::new(), Vec::new()];
            for round in 0..plan.repeats {
                for (n, keyed) in [false, true].into_iter().enumerate() {
                    let name = format!("keys-{}-{rate}-{round}-{n}", setup.name());
                    let run_dir = dir.join(name.replace([' ', ','], "-"));
                    let how = Load { setup, keyed, rate };
                    samples[n].push(run(load_plan, &run_dir, bin_dir, shape, how).await?);
                }
            }
            anyhow::Ok(samples)
        }
    };
    let mut setups = Vec::new();
    for setup in [
        Setup::Lone,
        Setup::Pair,
        Setup::Cluster(Durability::Sync),
        Setup::Cluster(Durability::Replicated),
    ] {
        let [keyless, keyed] = runs(setup, 0).await?.map(|runs| figures(&runs));
        setups.push(Keyed { keyed, keyless });
    }
    let [lone, pair, cluster_sync, cluster_replicated] =
        <[Keyed; 4]>::try_from(setups).expect("four setups");
    let lone_memory = held_keys(&runs(Setup::Lone, MEMORY_RATE).await?);
    let pair_memory = held_keys(&runs(Setup::Pair, MEMORY_RATE).await?);
    Ok(KeysFigures {
        secs: plan.keys_secs,
        retention_secs: STEADY_RETENTION_SECS,
        lone,
        pair,
        cluster_sync,
        cluster_replicated,
        memory_rate: MEMORY_RATE,
        lone_memory,
        pair_memory,
    })
}

/// One load: where, keyed or not, at what rate (0: flat out, keys kept
/// [`STEADY_RETENTION_SECS`]; otherwise paced, keys kept the default retention, and resident
/// memory read after).
#[derive(Debug, Clone, Copy)]
struct Load {
    setup: Setup,
    keyed: bool,
    rate: u64,
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
    Load { setup, keyed, rate }: Load,
) -> anyhow::Result<Run> {
    let retention = (rate == 0).then_some(STEADY_RETENTION_SECS);
    let text = setup.topology(&run_dir.join("data"), shape, retention)?;
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
        let sample = shard_load(plan, bin_dir, &running, (rate, extra), &json, &label).await?;
        let checkpoints = checkpoints(&running).await? - before;
        let mut resident = 0.0;
        if rate > 0 {
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

fn figures(runs: &[Run]) -> KeyLoad {
    let of = |unit, f: &dyn Fn(&Run) -> f64| Figure::new(unit, runs.iter().map(f).collect());
    KeyLoad {
        writes: of(Unit::PerSec, &|r| r.sample.writes_per_sec),
        cpu_per_write: of(Unit::Micros, &|r| r.sample.micros_per_write),
        checkpoints: of(Unit::Count, &|r| r.checkpoints),
        not_acknowledged: Figure::new(
            Unit::Count,
            vec![
                runs.iter()
                    .map(|r| count(r, "/writes/refused") + count(r, "/writes/unknown"))
                    .sum(),
            ],
        ),
    }
}

/// A count from a run's `geoctl load` report (0 when missing).
fn count(run: &Run, pointer: &str) -> f64 {
    (run.sample.report.pointer(pointer))
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_default()
}

/// Bytes per held key from the paced runs, keyless then keyed.
fn held_keys([keyless, keyed]: &[Vec<Run>; 2]) -> HeldKeys {
    let acknowledged = |run: &Run| count(run, "/writes/acknowledged");
    let bytes_per_key = keyed
        .iter()
        .zip(keyless)
        .map(|(keyed, keyless)| (keyed.resident - keyless.resident) / acknowledged(keyed).max(1.0))
        .collect();
    HeldKeys {
        bytes_per_key: Figure::new(Unit::Bytes, bytes_per_key),
        keys: Figure::new(Unit::Count, keyed.iter().map(acknowledged).collect()),
    }
}

/// The step's rows: per setup, keyed against keyless; the cluster's keyed CPU per write
/// against the lone node's; resident bytes per held key.
pub fn rows(rows: &mut Vec<Row>, figures: &KeysFigures) {
    let load = format!(
        "geoctl load --path batch --batch-size {BATCH_SIZE} --route owner flat out, Zipf {ZIPF_EXPONENT} over {COUNTERS} counters, {} s, keys kept {} s",
        figures.secs, figures.retention_secs
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
        rows.push(Row::alone(
            format!("keys: {name}, keyed writes refused or of unknown outcome over the runs"),
            runs.keyed.not_acknowledged.clone(),
            Some(Goal::Below(1.0)),
        ));
    }
    rows.push(Row::against(
        "keys: cluster, sync, shard nodes' CPU per keyed write",
        figures.cluster_sync.keyed.cpu_per_write.clone(),
        "lone shard node, keyed",
        figures.lone.keyed.cpu_per_write.clone(),
        Some(Goal::RatioAtMost(KEYED_RATIO)),
    ));
    for (setup, held, how) in [
        (Setup::Lone, &figures.lone_memory, "as owner"),
        (Setup::Pair, &figures.pair_memory, "as owner and as peer"),
    ] {
        rows.push(Row::alone(
            format!(
                "keys: {}, --rate {} for {} s, default retention: resident bytes per key held {how} (keyed minus keyless)",
                setup.name(),
                figures.memory_rate,
                figures.secs
            ),
            held.bytes_per_key.clone(),
            None,
        ));
    }
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
