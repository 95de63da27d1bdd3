//! Step 6: how long a shard node takes to restore a lost slot from its datacenter.
//!
//! One datacenter of one shard node, its aggregator and the global aggregator. The node's slot
//! gets `plan.restore_counters` counters; once both aggregators hold them all, the node is
//! stopped, its data directory emptied, and it is started again: the time until it answers
//! `/healthz` with 200 is the restore (paged copies from both aggregators, merged, logged in
//! bounded parts and fsynced), and it must then hold every counter.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use geocount_cluster::{Cluster, Member};
use serde::Serialize;

use crate::batch::{self, Connection};
use crate::procs::free_address;
use crate::steps::Plan;
use crate::topo;

/// How long the aggregators may take to pull every counter, and the node to restore them.
const PATIENCE: Duration = Duration::from_secs(600);

/// What the step measured.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreFigures {
    /// Counters in the slot.
    pub counters: usize,
    /// Seconds writing them once.
    pub populate_secs: f64,
    /// Seconds from the node's restart on an empty directory until it answered 200.
    pub restore_secs: f64,
    /// Counters the node held after the restore.
    pub counters_restored: u64,
}

/// The topology: datacenter `BENCH` of one shard node, its aggregator and the global one.
fn topology(data_dir: &Path) -> anyhow::Result<String> {
    Ok(format!(
        "[global]\nlisten = \"{}\"\n\n[shard]\ndata_dir = \"{}\"\ndurability = \"sync\"\n\n\
         [[datacenters]]\nname = \"BENCH\"\naggregator = \"{}\"\nshards = [\"{}\"]\n",
        free_address()?,
        data_dir.display(),
        free_address()?,
        free_address()?,
    ))
}

/// `GET /healthz` of `address`, parsed.
async fn health(address: std::net::SocketAddr) -> Option<(u16, serde_json::Value)> {
    let mut connection = Connection::open(address).await.ok()?;
    let (status, body) = connection.get("/healthz").await.ok()?;
    Some((status, serde_json::from_slice(&body).ok()?))
}

/// Waits until `address` answers `/healthz` with `counters` of at least `want`.
pub async fn holds(address: std::net::SocketAddr, want: usize, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some((_, body)) = health(address).await
            && body["counters"].as_u64() >= Some(want as u64)
        {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{what} never held {want} counters"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs the step.
pub async fn restore(plan: &Plan, dir: &Path, bin_dir: &Path) -> anyhow::Result<RestoreFigures> {
    let dir = dir.join("restore");
    let text = topology(&dir.join("data"))?;
    let mut running = topo::start(&dir, &text, bin_dir, |_| true).await?;
    let result = measure(plan, &mut running).await;
    running.stop(topo::GRACE).await;
    result
}

async fn measure(plan: &Plan, running: &mut Cluster) -> anyhow::Result<RestoreFigures> {
    let counters = plan.restore_counters;
    let shard = running.shard_addresses()[0];
    let datacenter = &running.topology.datacenters[0];
    let (aggregator, global) = (datacenter.aggregator, running.topology.global.listen);
    let started = Instant::now();
    batch::populate(shard, "restore", counters, 10_000).await?;
    let populate_secs = started.elapsed().as_secs_f64();
    holds(aggregator, counters, "the datacenter aggregator").await?;
    holds(global, counters, "the global aggregator").await?;
    println!("  {counters} counters written in {populate_secs:.1} s and held by both aggregators");

    let name = running
        .find(|r| matches!(r, Member::Shard { .. }))
        .context("no shard node")?
        .name()
        .to_owned();
    running.stop_process(&name, Duration::from_secs(10)).await;
    let node_dir = running.data_dir.join(&name);
    std::fs::remove_dir_all(&node_dir)
        .with_context(|| format!("cannot empty {}", node_dir.display()))?;
    // The directory exists, empty: a lost disk, which the node restores.
    std::fs::create_dir_all(&node_dir)?;
    let restarted = Instant::now();
    running.restart(&name, PATIENCE).await?;
    let restore_secs = restarted.elapsed().as_secs_f64();
    let counters_restored = health(shard)
        .await
        .and_then(|(_, body)| body["counters"].as_u64())
        .context("the restored node's /healthz")?;
    println!("  restored {counters_restored} counters in {restore_secs:.1} s");
    anyhow::ensure!(
        counters_restored == counters as u64,
        "the node restored {counters_restored} counters of {counters}"
    );
    Ok(RestoreFigures {
        counters,
        populate_secs,
        restore_secs,
        counters_restored,
    })
}
