//! Resident memory per (counter, slot) entry held, by process, on fresh clusters; and the global
//! tier split in partitions, one global process per partition.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use geocount_cluster::{Cluster, Member};
use geocount_model::{Durability, Topology};
use serde::Serialize;

use crate::figure::{Figure, Goal, Row, Unit};

use crate::batch::{self, Connection};
use crate::procs::resident_bytes;
use crate::steps::{MEMORY_SETTLE, Plan, sample_ids, wait_visible};

use crate::topo::{self, Tiers};

/// The partition counts whose global tier is measured besides the single global aggregator of
/// [`MemoryFigures::runs`] (P = 1): P global replicas, replica `r` holding partition `r`.
pub const PARTITION_COUNTS: [u32; 2] = [2, 4];

/// Resident memory per (counter, slot) entry held, by process, on `repeats` fresh clusters.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryFigures {
    /// Counters written once into every datacenter.
    pub counters: usize,
    /// The mean length of their ids, in bytes.
    pub mean_id_bytes: f64,
    /// One reading of every process per fresh cluster.
    pub runs: Vec<MemoryRun>,
    /// The global tier split in partitions, per partition count of [`PARTITION_COUNTS`].
    pub partitioned: Vec<PartitionedRuns>,
}

/// One fresh cluster's memory per entry, by process.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryRun {
    /// Per shard node: (name, entries held: own slot and peers' replicas, bytes per entry).
    pub shards: Vec<(String, usize, f64)>,
    /// Per datacenter aggregator: (name, entries, bytes per entry).
    pub datacenter_aggregators: Vec<(String, usize, f64)>,
    /// Every global aggregator process.
    pub global: Vec<GlobalHeld>,
}

/// What one global aggregator process holds and its memory per entry.
#[derive(Debug, Clone, Serialize)]
pub struct GlobalHeld {
    /// `global`, `global@1`, ...
    pub name: String,
    /// Counters it holds (its `/healthz` "counters").
    pub counters: usize,
    /// Its share of all the counters written.
    pub share: f64,
    /// Entries: counters held × datacenters.
    pub entries: usize,
    /// Resident bytes grown per entry.
    pub bytes_per_entry: f64,
}

/// The global tier with `partitions` partitions, on fresh clusters of their own.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionedRuns {
    /// P: as many global replicas, each holding one partition.
    pub partitions: u32,
    /// Per cluster, every global process.
    pub runs: Vec<Vec<GlobalHeld>>,
}

/// Step 5: resident bytes per counter on every process of a fresh cluster of `shape`, once per
/// repeat (each on a cluster of its own, since the counters are written once); then the global
/// tier with each of [`PARTITION_COUNTS`] partitions, on clusters of their own.
pub async fn memory(
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
) -> anyhow::Result<MemoryFigures> {
    let counters = plan.memory_counters;
    let mut figures = MemoryFigures {
        counters,
        mean_id_bytes: (0..counters).map(|n| format!("m-{n}").len()).sum::<usize>() as f64
            / counters as f64,
        runs: Vec::new(),
        partitioned: PARTITION_COUNTS
            .iter()
            .map(|&partitions| PartitionedRuns {
                partitions,
                runs: Vec::new(),
            })
            .collect(),
    };
    let memory_dir = dir.join("memory");
    for _ in 0..plan.repeats {
        figures
            .runs
            .push(fresh_run(counters, &memory_dir, bin_dir, shape, Tiers::ONE).await?);
        for split in &mut figures.partitioned {
            let tiers = Tiers {
                partitions: split.partitions,
                global_replicas: split.partitions as usize,
                aggregator_replicas: 1,
            };
            println!("  {} partitions:", split.partitions);
            let run = fresh_run(counters, &memory_dir, bin_dir, shape, tiers).await?;
            split.runs.push(run.global);
        }
    }
    Ok(figures)
}

/// One reading of a fresh cluster of `shape` with `tiers`.
async fn fresh_run(
    counters: usize,
    memory_dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
    tiers: Tiers,
) -> anyhow::Result<MemoryRun> {
    let text = topo::same_shape_with(shape, &memory_dir.join("data"), tiers, Durability::Sync)?;
    let mut running = topo::start(memory_dir, &text, bin_dir, |_| true).await?;
    let result = memory_run(counters, &running).await;
    running.stop(topo::GRACE).await;
    result
}

async fn memory_run(counters: usize, running: &Cluster) -> anyhow::Result<MemoryRun> {
    // Let the first pulls settle before the baseline.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = running
        .processes
        .iter()
        .map(|p| resident_bytes(p.pid))
        .collect::<anyhow::Result<Vec<u64>>>()?;
    let datacenters = &running.topology.datacenters;
    let virtual_nodes = running.topology.shard.virtual_nodes;
    for dc in datacenters {
        // Each counter straight to the node owning its slot (a counter of one slot), so no
        // write is forwarded: a forward under this load can time out and leave it unknown.
        let placement = dc.placement(virtual_nodes);
        let mut owned: Vec<Vec<String>> = vec![Vec::new(); dc.shards.len()];
        for n in 0..counters {
            let id = format!("m-{n}");
            owned[placement.slots_for(&id, 1)[0] as usize].push(id);
        }
        let mut writers = tokio::task::JoinSet::new();
        for (ids, &address) in owned.into_iter().zip(&dc.shards) {
            writers.spawn(async move { batch::write_once(address, &ids, 5_000).await });
        }
        while let Some(done) = writers.join_next().await {
            done.context("a writer panicked")??;
        }
    }
    let expected = datacenters.len() as i64;
    let globals = running
        .topology
        .global
        .replicas_of(running.topology.partitions);
    // Each sample at the first global replica holding it (another answers 307).
    for (address, held) in &globals {
        let ids: Vec<String> = sample_ids("m", counters)
            .into_iter()
            .filter(|id| held.holds(id))
            .collect();
        wait_visible(*address, &ids, expected, Duration::from_secs(120)).await?;
    }
    tokio::time::sleep(MEMORY_SETTLE).await;
    let mut figures = MemoryRun {
        shards: Vec::new(),
        datacenter_aggregators: Vec::new(),
        global: Vec::new(),
    };
    for (process, before) in running.processes.iter().zip(before) {
        let grown = resident_bytes(process.pid)?.saturating_sub(before) as f64;
        let name = process.name().to_owned();
        match &process.spec.member {
            // A shard node holds its own slot and a replica of each peer's: every counter of
            // its datacenter once.
            Some(Member::Shard { .. }) => {
                figures
                    .shards
                    .push((name, counters, grown / counters as f64))
            }
            Some(Member::DatacenterAggregator { .. }) => {
                (figures.datacenter_aggregators).push((name, counters, grown / counters as f64))
            }
            Some(Member::GlobalAggregator { replica }) => {
                let held = held_counters(globals[*replica].0).await?;
                let entries = held * datacenters.len();
                figures.global.push(GlobalHeld {
                    name,
                    counters: held,
                    share: held as f64 / counters as f64,
                    entries,
                    bytes_per_entry: grown / entries.max(1) as f64,
                });
            }
            // The benchmark's topologies emulate no WAN.
            Some(Member::WanEmulator) | None => {}
        }
    }
    for (name, _, bytes) in figures.shards.iter().chain(&figures.datacenter_aggregators) {
        println!("  {name}: {bytes:.0} resident bytes per (counter, slot)");
    }
    for global in &figures.global {
        println!(
            "  {}: {:.0} resident bytes per (counter, datacenter), holding {} counters ({:.1}%)",
            global.name,
            global.bytes_per_entry,
            global.counters,
            global.share * 100.0
        );
    }
    Ok(figures)
}

/// The counters the global aggregator at `address` holds, from its `/healthz`.
async fn held_counters(address: SocketAddr) -> anyhow::Result<usize> {
    let (status, body) = Connection::open(address).await?.get("/healthz").await?;
    let health: serde_json::Value = serde_json::from_slice(&body)
        .with_context(|| format!("/healthz of {address} answered {status}, not JSON"))?;
    let counters = health["counters"].as_u64();
    counters
        .map(|n| n as usize)
        .with_context(|| format!("/healthz of {address} has no counters: {health}"))
}

/// The global tier with P partitions: every process's bytes per entry it holds, against the
/// single global aggregator's, and the share each holds (of the first run; ≈ 1/P).
pub fn partitioned_row(split: &PartitionedRuns, single: &Figure, limit: f64) -> Row {
    let samples = split.runs.iter().flatten().map(|g| g.bytes_per_entry);
    let shares = split.runs.first().map_or(Vec::new(), |run| {
        run.iter()
            .map(|g| format!("{:.1}%", g.share * 100.0))
            .collect()
    });
    Row::against(
        format!(
            "memory: global aggregator per (counter, datacenter) held, P={} (one process per partition, holding {}), over the processes and runs",
            split.partitions,
            shares.join("/")
        ),
        Figure::new(Unit::Bytes, samples.collect()),
        "P=1",
        single.clone(),
        Some(Goal::Below(limit)),
    )
}
