//! Resident memory per (counter, slot) entry held, by process, on fresh clusters.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use geocount_cluster::{Cluster, Role};
use geocount_model::Topology;
use serde::Serialize;

use crate::batch;
use crate::procs::resident_bytes;
use crate::steps::{MEMORY_SETTLE, Plan, sample_ids, wait_visible};

use crate::topo;

/// Resident memory per (counter, slot) entry held, by process, on `repeats` fresh clusters.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryFigures {
    /// Counters written once into every datacenter.
    pub counters: usize,
    /// The mean length of their ids, in bytes.
    pub mean_id_bytes: f64,
    /// One reading of every process per fresh cluster.
    pub runs: Vec<MemoryRun>,
}

/// One fresh cluster's memory per entry, by process.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryRun {
    /// Per shard node: (name, entries held: own slot and peers' replicas, bytes per entry).
    pub shards: Vec<(String, usize, f64)>,
    /// Per datacenter aggregator: (name, entries, bytes per entry).
    pub datacenter_aggregators: Vec<(String, usize, f64)>,
    /// The global aggregator: (entries = counters × datacenters, bytes per entry).
    pub global: (usize, f64),
}

/// Step 5: resident bytes per counter on every process of a fresh cluster of `shape`, once per
/// repeat (each on a cluster of its own, since the counters are written once).
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
    };
    let memory_dir = dir.join("memory");
    for _ in 0..plan.repeats {
        let text = topo::same_shape(shape, &memory_dir.join("data"))?;
        let mut running = topo::start(&memory_dir, &text, bin_dir, |_| true).await?;
        let result = memory_run(counters, &running).await;
        running.stop(topo::GRACE).await;
        figures.runs.push(result?);
    }
    Ok(figures)
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
    wait_visible(
        running.topology.global.listen,
        &sample_ids("m", counters),
        expected,
        Duration::from_secs(120),
    )
    .await?;
    tokio::time::sleep(MEMORY_SETTLE).await;
    let mut figures = MemoryRun {
        shards: Vec::new(),
        datacenter_aggregators: Vec::new(),
        global: (0, 0.0),
    };
    for (process, before) in running.processes.iter().zip(before) {
        let grown = resident_bytes(process.pid)?.saturating_sub(before) as f64;
        match &process.spec.role {
            // A shard node holds its own slot and a replica of each peer's: every counter of
            // its datacenter once.
            Some(Role::Shard { .. }) => {
                figures
                    .shards
                    .push((process.name().to_owned(), counters, grown / counters as f64))
            }
            Some(Role::DatacenterAggregator { .. }) => figures.datacenter_aggregators.push((
                process.name().to_owned(),
                counters,
                grown / counters as f64,
            )),
            Some(Role::GlobalAggregator) => {
                let entries = counters * datacenters.len();
                figures.global = (entries, grown / entries as f64);
            }
            // The benchmark's topologies emulate no WAN.
            Some(Role::WanEmulator) | None => {}
        }
    }
    for (name, _, bytes) in figures.shards.iter().chain(&figures.datacenter_aggregators) {
        println!("  {name}: {bytes:.0} resident bytes per (counter, slot)");
    }
    println!(
        "  global: {:.0} resident bytes per (counter, datacenter)",
        figures.global.1
    );
    Ok(figures)
}
