//! Step 7: reads while rankings scan every counter. One datacenter of one shard node, its
//! aggregator and the global aggregator, holding [`SCAN_COUNTERS`] counters. wrk reads
//! `GET /counter` at the global aggregator idle, then while [`SCAN_LOOPS`] loops ask it for the
//! worst-case ranking ([`WORST_SCAN`]: a window ending long ago, so every counter is visited
//! and none listed): the read p99 beside its idle figure, and the reads refused (503 stale).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use geocount_cluster::Cluster;
use serde::Serialize;

use crate::batch::{self, Connection};
use crate::procs::free_address;
use crate::restore::holds;
use crate::steps::{Plan, WrkFigures};
use crate::topo;
use crate::wrk::{self, Script};

/// Counters held by every tier.
pub const SCAN_COUNTERS: usize = 1_000_000;
/// Loops of the worst-case ranking at once.
pub const SCAN_LOOPS: usize = 4;
/// The worst-case ranking: the top 1,000 of a window no counter has hits in.
pub const WORST_SCAN: &str = "/topk?k=1000&window=60&at=1";
/// How long a refused loop waits before asking again (its answer says 1 s; a busy client
/// asks sooner).
const REFUSED_PAUSE: Duration = Duration::from_millis(50);

/// What the step measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScanFigures {
    /// Counters held.
    pub counters: usize,
    /// `GET /counter` at the global aggregator, nothing else running.
    pub reads_idle: WrkFigures,
    /// The same while the scan loops run.
    pub reads_scanning: WrkFigures,
    /// Rankings answered 200 meanwhile, over all runs.
    pub scans_answered: u64,
    /// Rankings refused 429 (too many scans at once), over all runs.
    pub scans_refused: u64,
    /// Rankings answered with any other status, or failed, over all runs.
    pub scans_failed: u64,
}

/// The topology: datacenter `BENCH` of one shard node, its aggregator and the global one.
fn topology(data_dir: &Path) -> anyhow::Result<String> {
    Ok(format!(
        "[global]\nlisten = \"{}\"\n\n[shard]\ndata_dir = \"{}\"\n\n\
         [[datacenters]]\nname = \"BENCH\"\naggregator = \"{}\"\nshards = [\"{}\"]\n",
        free_address()?,
        data_dir.display(),
        free_address()?,
        free_address()?,
    ))
}

/// Runs the step.
pub async fn scan(plan: &Plan, dir: &Path, bin_dir: &Path) -> anyhow::Result<ScanFigures> {
    let dir = dir.join("scan");
    let text = topology(&dir.join("data"))?;
    let mut running = topo::start(&dir, &text, bin_dir, |_| true).await?;
    let result = measure(plan, &dir, &running).await;
    running.stop(topo::GRACE).await;
    result
}

/// Tallies of the scan loops.
#[derive(Debug, Default)]
struct Tally {
    answered: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

/// Asks `global` for [`WORST_SCAN`] until `stop`, one request at a time.
async fn scan_loop(global: std::net::SocketAddr, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let mut connection = None;
    while !stop.load(Ordering::Relaxed) {
        if connection.is_none() {
            connection = Connection::open(global).await.ok();
        }
        let Some(open) = connection.as_mut() else {
            tally.failed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(REFUSED_PAUSE).await;
            continue;
        };
        match open.get(WORST_SCAN).await {
            Ok((200, _)) => tally.answered.fetch_add(1, Ordering::Relaxed),
            Ok((429, _)) => {
                tokio::time::sleep(REFUSED_PAUSE).await;
                tally.refused.fetch_add(1, Ordering::Relaxed)
            }
            Ok(_) => tally.failed.fetch_add(1, Ordering::Relaxed),
            Err(_) => {
                connection = None;
                tally.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

async fn measure(plan: &Plan, dir: &Path, running: &Cluster) -> anyhow::Result<ScanFigures> {
    let shard = running.shard_addresses()[0];
    let global = running.topology.global.listen;
    batch::populate(shard, "s", SCAN_COUNTERS, 10_000).await?;
    holds(global, SCAN_COUNTERS, "the global aggregator").await?;
    println!("  {SCAN_COUNTERS} counters held by the global aggregator");
    let script = wrk::write_script(dir, Script::Read, "s", SCAN_COUNTERS)?;
    let (mut idle, mut scanning) = (Vec::new(), Vec::new());
    let tally = Arc::new(Tally::default());
    for _ in 0..plan.repeats {
        let run = wrk::run(global, &script, Duration::from_secs(plan.secs)).await?;
        println!(
            "  global reads, idle: p50 {:.2} ms, p99 {:.2} ms, {} errors",
            run.p50_ms,
            run.p99_ms,
            run.non_2xx + run.socket_errors
        );
        idle.push(run);
        let stop = Arc::new(AtomicBool::new(false));
        let loops: Vec<_> = (0..SCAN_LOOPS)
            .map(|_| tokio::spawn(scan_loop(global, stop.clone(), tally.clone())))
            .collect();
        // The loops fill the scans allowed before the readers start.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let run = wrk::run(global, &script, Duration::from_secs(plan.secs)).await;
        stop.store(true, Ordering::Relaxed);
        for done in loops {
            done.await?;
        }
        let run = run?;
        println!(
            "  global reads, {SCAN_LOOPS} scan loops: p50 {:.2} ms, p99 {:.2} ms, {} non-2xx; scans so far: {} answered, {} refused, {} failed",
            run.p50_ms,
            run.p99_ms,
            run.non_2xx + run.socket_errors,
            tally.answered.load(Ordering::Relaxed),
            tally.refused.load(Ordering::Relaxed),
            tally.failed.load(Ordering::Relaxed),
        );
        scanning.push(run);
    }
    Ok(ScanFigures {
        counters: SCAN_COUNTERS,
        reads_idle: WrkFigures::new(idle),
        reads_scanning: WrkFigures::new(scanning),
        scans_answered: tally.answered.load(Ordering::Relaxed),
        scans_refused: tally.refused.load(Ordering::Relaxed),
        scans_failed: tally.failed.load(Ordering::Relaxed),
    })
}
