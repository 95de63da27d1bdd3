//! Step 9: the memory of deleted counters handed back, at every tier.
//!
//! One datacenter `BENCH` of two shard nodes, its aggregator and the global aggregator (every
//! tier, and a peer's copy on each shard node), `sync` durability, with
//! `sync.tombstone_retention_secs` = [`RETENTION_SECS`]. A warm-up creates and deletes
//! [`WARM_UP`] counters and waits until they are gone everywhere, so the allocator's arenas
//! exist before the start reading as after the end one. Then `plan.reclaim_counters` counters
//! are written once (postcard batches, each to its owner) and held by every process (the peak),
//! every one is deleted (`DELETE /counter/{id}` at its owner over [`DELETE_CONNECTIONS`]
//! connections per node), and once every process's counters and descriptions are back to what
//! it held at the start, resident memory is read until it is within [`GOAL`] × the start.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use geocount_cluster::{Cluster, Member};
use geocount_model::Durability;
use serde::Serialize;

use crate::batch::{self, Connection};
use crate::figure::{Figure, Goal, Row, Unit};
use crate::procs::{resident_bytes, resident_parts};
use crate::steps::{MEMORY_SETTLE, Plan};
use crate::topo;

/// The tombstone retention of the step's cluster, in seconds: the tiers look for tombstones and
/// copies to drop this often too (at most every 60 s).
pub const RETENTION_SECS: u64 = 20;
/// Counters the warm-up creates and deletes.
pub const WARM_UP: usize = 5_000;
/// Connections deleting at each shard node.
pub const DELETE_CONNECTIONS: usize = 32;
/// The goal: resident memory at the end at most this times the start's, per process.
pub const GOAL: f64 = 1.10;
/// How long the tiers may take to hold every counter, or to drop them all.
const PATIENCE: Duration = Duration::from_secs(600);
/// How long resident memory is watched, once the counters are gone, to come back within
/// [`GOAL`].
const MEMORY_PATIENCE: Duration = Duration::from_secs(120);

/// What the step measured.
#[derive(Debug, Clone, Serialize)]
pub struct ReclaimFigures {
    /// Counters created and deleted.
    pub counters: usize,
    /// `sync.tombstone_retention_secs` of the cluster.
    pub retention_secs: u64,
    /// Seconds writing them once.
    pub write_secs: f64,
    /// Seconds deleting them.
    pub delete_secs: f64,
    /// Seconds from the last delete answered until every process's counters and descriptions
    /// were back to the start's.
    pub gone_secs: f64,
    /// Seconds from the last delete answered until every process's resident memory was within
    /// [`GOAL`] × the start's (`None`: not within [`MEMORY_PATIENCE`] after the counters went).
    pub memory_back_secs: Option<f64>,
    /// Every process.
    pub processes: Vec<ProcessMemory>,
}

/// One process's resident memory and holdings through the step.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessMemory {
    /// `DC_BENCH_VAL_0`, `aggregator_BENCH`, `global`.
    pub name: String,
    /// Resident bytes at the start (after the warm-up).
    pub start: u64,
    /// Once every counter was held everywhere, settled.
    pub held: u64,
    /// The most read at any time from the start to the end.
    pub peak: u64,
    /// The last reading.
    pub end: u64,
    /// Its resident anonymous and file-backed bytes at the start (`RssAnon`, `RssFile`).
    pub start_parts: (u64, u64),
    /// The same at the end.
    pub end_parts: (u64, u64),
    /// What it held at the start, with every counter, and at the end.
    pub holdings: [Holding; 3],
}

impl ProcessMemory {
    /// End ÷ start.
    pub fn ratio(&self) -> f64 {
        self.end as f64 / self.start.max(1) as f64
    }
}

/// What a process says it holds in `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Holding {
    /// Counters with a copy or a row: a shard node's own slot and its peers' copies.
    pub counters: u64,
    /// Descriptions, tombstones included.
    pub descriptions: u64,
}

/// A process of the cluster: where to ask and what its metrics are called.
struct Watched {
    name: String,
    pid: u32,
    address: SocketAddr,
    /// The gauges summed into [`Holding::counters`].
    counters: &'static [&'static str],
    /// The gauge of [`Holding::descriptions`].
    descriptions: &'static str,
}

impl Watched {
    fn of(running: &Cluster) -> Vec<Self> {
        (running.processes.iter())
            .filter_map(|p| {
                let (counters, descriptions): (&'static [&'static str], _) =
                    match p.spec.member.as_ref()? {
                        Member::Shard { .. } => (
                            &["geocount_shard_counters", "geocount_shard_peer_counters"],
                            "geocount_shard_descriptions",
                        ),
                        Member::DatacenterAggregator { .. } => (
                            &["geocount_datacenter_counters"],
                            "geocount_datacenter_descriptions",
                        ),
                        Member::GlobalAggregator { .. } => (
                            &["geocount_global_counters"],
                            "geocount_global_descriptions",
                        ),
                        Member::WanEmulator => return None,
                    };
                Some(Self {
                    name: p.name().to_owned(),
                    pid: p.pid,
                    address: p.address(),
                    counters,
                    descriptions,
                })
            })
            .collect()
    }

    async fn holding(&self) -> anyhow::Result<Holding> {
        let (status, body) = Connection::open(self.address)
            .await?
            .get("/metrics")
            .await?;
        let text = String::from_utf8_lossy(&body);
        anyhow::ensure!(status == 200, "/metrics of {} answered {status}", self.name);
        holding(&text, self.counters, self.descriptions)
            .with_context(|| format!("/metrics of {} lacks a gauge", self.name))
    }
}

/// The value of the unlabelled gauge `name` in a Prometheus text page.
fn gauge(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        (fields.next()? == name).then(|| fields.next()?.parse().ok())?
    })
}

/// The holding a metrics page reports: the sum of the `counters` gauges, and `descriptions`.
fn holding(text: &str, counters: &[&str], descriptions: &str) -> Option<Holding> {
    let mut sum = 0.0;
    for name in counters {
        sum += gauge(text, name)?;
    }
    Some(Holding {
        counters: sum as u64,
        descriptions: gauge(text, descriptions)? as u64,
    })
}

/// Every process's resident memory and holding, read together.
struct Readings {
    watched: Vec<Watched>,
    peaks: Vec<u64>,
}

impl Readings {
    fn resident(&mut self) -> anyhow::Result<Vec<u64>> {
        let now = (self.watched.iter())
            .map(|w| resident_bytes(w.pid))
            .collect::<anyhow::Result<Vec<u64>>>()?;
        for (peak, now) in self.peaks.iter_mut().zip(&now) {
            *peak = (*peak).max(*now);
        }
        Ok(now)
    }

    fn parts(&self) -> anyhow::Result<Vec<(u64, u64)>> {
        (self.watched.iter())
            .map(|w| resident_parts(w.pid))
            .collect()
    }

    async fn holdings(&self) -> anyhow::Result<Vec<Holding>> {
        let mut all = Vec::new();
        for watched in &self.watched {
            all.push(watched.holding().await?);
        }
        Ok(all)
    }

    /// Waits until `done` holds of every process's holding against `base`, reading resident
    /// memory meanwhile; returns the holdings then.
    async fn wait(
        &mut self,
        base: &[Holding],
        what: &str,
        done: impl Fn(&Holding, &Holding) -> bool,
    ) -> anyhow::Result<Vec<Holding>> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            self.resident()?;
            let now = self.holdings().await?;
            if now.iter().zip(base).all(|(now, base)| done(now, base)) {
                return Ok(now);
            }
            if Instant::now() >= deadline {
                let names = self.watched.iter().map(|w| &w.name);
                bail!(
                    "not {what} after {} s: {:?}",
                    PATIENCE.as_secs(),
                    names.zip(now).collect::<Vec<_>>()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Runs the step.
pub async fn reclaim(plan: &Plan, dir: &Path, bin_dir: &Path) -> anyhow::Result<ReclaimFigures> {
    let dir = dir.join("reclaim");
    let mut text = topo::bench_datacenter(&dir.join("data"), 2, Durability::Sync)?;
    text += &format!("\n[sync]\ntombstone_retention_secs = {RETENTION_SECS}\n");
    let mut running = topo::start(&dir, &text, bin_dir, |_| true).await?;
    let result = measure(plan.reclaim_counters, &running).await;
    running.stop(topo::GRACE).await;
    result
}

/// `<prefix>-0..counters`, by the shard node owning each (a counter of one slot), with the
/// node's address.
fn by_owner(running: &Cluster, prefix: &str, counters: usize) -> Vec<(SocketAddr, Vec<String>)> {
    let dc = &running.topology.datacenters[0];
    let placement = dc.placement(running.topology.shard.virtual_nodes);
    let mut owned: Vec<Vec<String>> = vec![Vec::new(); dc.shards.len()];
    for n in 0..counters {
        let id = format!("{prefix}-{n}");
        owned[placement.slots_for(&id, 1)[0] as usize].push(id);
    }
    dc.shards.iter().copied().zip(owned).collect()
}

/// Writes +1 once to every counter, each at its owner, the nodes at once.
async fn write_all(owners: &[(SocketAddr, Vec<String>)]) -> anyhow::Result<()> {
    let mut writers = tokio::task::JoinSet::new();
    for (address, ids) in owners.iter().cloned() {
        writers.spawn(async move { batch::write_once(address, &ids, 5_000).await });
    }
    while let Some(done) = writers.join_next().await {
        done.context("a writer panicked")??;
    }
    Ok(())
}

/// Deletes every counter at its owner, over [`DELETE_CONNECTIONS`] connections per node; each
/// must answer 200.
async fn delete_all(owners: &[(SocketAddr, Vec<String>)]) -> anyhow::Result<()> {
    let mut deleters = tokio::task::JoinSet::new();
    for (address, ids) in owners {
        for lane in 0..DELETE_CONNECTIONS {
            let (address, ids) = (*address, ids.clone());
            deleters.spawn(async move {
                let mut connection = Connection::open(address).await?;
                for id in ids.iter().skip(lane).step_by(DELETE_CONNECTIONS) {
                    let (status, body) = connection.delete(&format!("/counter/{id}")).await?;
                    if status != 200 {
                        bail!(
                            "DELETE /counter/{id} at {address} answered {status}: {}",
                            String::from_utf8_lossy(&body)
                        );
                    }
                }
                anyhow::Ok(())
            });
        }
    }
    while let Some(done) = deleters.join_next().await {
        done.context("a deleter panicked")??;
    }
    Ok(())
}

/// Whether `now` holds `extra` more counters than `base`.
fn holds_more(now: &Holding, base: &Holding, extra: usize) -> bool {
    now.counters >= base.counters + extra as u64
}

/// Whether `now` holds no more than `base`: counters and descriptions.
fn back_to(now: &Holding, base: &Holding) -> bool {
    now.counters <= base.counters && now.descriptions <= base.descriptions
}

/// Whether every resident reading is within [`GOAL`] × its start.
fn within_goal(now: &[u64], start: &[u64]) -> bool {
    (now.iter().zip(start)).all(|(&now, &start)| now as f64 <= GOAL * start as f64)
}

async fn measure(counters: usize, running: &Cluster) -> anyhow::Result<ReclaimFigures> {
    // Let the first pulls settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let watched = Watched::of(running);
    let mut readings = Readings {
        peaks: vec![0; watched.len()],
        watched,
    };
    let fresh = readings.holdings().await?;
    let warm_up = by_owner(running, "w", WARM_UP);
    write_all(&warm_up).await?;
    readings
        .wait(&fresh, "holding the warm-up", |n, b| {
            holds_more(n, b, WARM_UP)
        })
        .await?;
    delete_all(&warm_up).await?;
    readings.wait(&fresh, "rid of the warm-up", back_to).await?;
    tokio::time::sleep(MEMORY_SETTLE).await;
    let start_holdings = readings.holdings().await?;
    readings.peaks.fill(0);
    let start = readings.resident()?;
    let start_parts = readings.parts()?;
    println!("  warm-up of {WARM_UP} counters created, deleted and gone; start read");

    let owners = by_owner(running, "d", counters);
    let began = Instant::now();
    write_all(&owners).await?;
    let write_secs = began.elapsed().as_secs_f64();
    let full = (readings.wait(&start_holdings, "holding every counter", |n, b| {
        holds_more(n, b, counters)
    }))
    .await?;
    tokio::time::sleep(MEMORY_SETTLE).await;
    let held = readings.resident()?;
    println!("  {counters} counters written once in {write_secs:.1} s and held everywhere");

    let began = Instant::now();
    delete_all(&owners).await?;
    let last_delete = Instant::now();
    let delete_secs = (last_delete - began).as_secs_f64();
    println!(
        "  deleted in {delete_secs:.1} s ({:.0}/s)",
        counters as f64 / delete_secs
    );
    let end_holdings = (readings.wait(&start_holdings, "rid of every counter", back_to)).await?;
    let gone_secs = last_delete.elapsed().as_secs_f64();
    println!(
        "  every process back to its start's counters and descriptions {gone_secs:.1} s after the last delete"
    );
    let watching = Instant::now();
    let (end, memory_back_secs) = loop {
        let now = readings.resident()?;
        if within_goal(&now, &start) {
            break (now, Some(last_delete.elapsed().as_secs_f64()));
        }
        if watching.elapsed() >= MEMORY_PATIENCE {
            break (now, None);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let end_parts = readings.parts()?;
    let processes: Vec<ProcessMemory> = (readings.watched.iter().enumerate())
        .map(|(i, w)| ProcessMemory {
            name: w.name.clone(),
            start: start[i],
            held: held[i],
            peak: readings.peaks[i],
            end: end[i],
            start_parts: start_parts[i],
            end_parts: end_parts[i],
            holdings: [start_holdings[i], full[i], end_holdings[i]],
        })
        .collect();
    for p in &processes {
        println!(
            "  {}: start {}, held {}, peak {}, end {} ({:.2}× the start)",
            p.name,
            mib(p.start),
            mib(p.held),
            mib(p.peak),
            mib(p.end),
            p.ratio()
        );
        println!(
            "    of it, heap and stacks (RssAnon) {} → {}, mapped files (RssFile) {} → {}",
            mib(p.start_parts.0),
            mib(p.end_parts.0),
            mib(p.start_parts.1),
            mib(p.end_parts.1),
        );
    }
    match memory_back_secs {
        Some(secs) => println!("  memory back within {GOAL}× {secs:.1} s after the last delete"),
        None => println!(
            "  memory not back within {GOAL}× {} s after the counters went",
            MEMORY_PATIENCE.as_secs()
        ),
    }
    Ok(ReclaimFigures {
        counters,
        retention_secs: RETENTION_SECS,
        write_secs,
        delete_secs,
        gone_secs,
        memory_back_secs,
        processes,
    })
}

/// `bytes` in MiB, one decimal.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// The step's rows: per process, resident memory at the end against the start; the delete
/// rate; the time from the last delete until the counters went, and until memory was back.
pub fn rows(rows: &mut Vec<Row>, figures: &ReclaimFigures) {
    let bytes = |b: u64| Figure::new(Unit::Bytes, vec![b as f64]);
    for p in &figures.processes {
        rows.push(Row::against(
            format!(
                "reclaim: {} resident memory once {} counters created and deleted are gone everywhere (held {}, peak {}; tombstones kept {} s)",
                p.name,
                figures.counters,
                mib(p.held),
                mib(p.peak),
                figures.retention_secs
            ),
            bytes(p.end),
            "at the start",
            bytes(p.start),
            Some(Goal::RatioAtMost(GOAL)),
        ));
    }
    rows.push(Row::alone(
        format!(
            "the same, DELETE /counter/{{id}} at the owner, {DELETE_CONNECTIONS} connections per shard node, 2 nodes"
        ),
        Figure::new(
            Unit::PerSec,
            vec![figures.counters as f64 / figures.delete_secs],
        ),
        None,
    ));
    rows.push(Row::alone(
        "the same, last delete → every process's counters and descriptions back to the start",
        Figure::new(Unit::Ms, vec![figures.gone_secs * 1e3]),
        None,
    ));
    let back =
        format!("the same, last delete → every process's resident memory within {GOAL}× the start");
    match figures.memory_back_secs {
        Some(secs) => rows.push(Row::alone(
            back,
            Figure::new(Unit::Ms, vec![secs * 1e3]),
            None,
        )),
        None => rows.push(Row::alone(
            format!("{back}: not within {} s", MEMORY_PATIENCE.as_secs()),
            Figure::new(
                Unit::Ms,
                vec![(figures.gone_secs + MEMORY_PATIENCE.as_secs_f64()) * 1e3],
            ),
            None,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holdings_are_read_from_the_metrics_page() {
        let page = "# HELP geocount_shard_counters Counters held by this node\n\
                    # TYPE geocount_shard_counters gauge\n\
                    geocount_shard_counters 7\n\
                    geocount_shard_counters_total 99\n\
                    geocount_shard_peer_counters 5\n\
                    geocount_shard_descriptions 3\n\
                    geocount_shard_sync_pulls_ok_total{source=\"x\"} 4\n";
        assert_eq!(gauge(page, "geocount_shard_counters"), Some(7.0));
        assert_eq!(gauge(page, "geocount_shard_sync_pulls_ok_total"), None);
        let shard = ["geocount_shard_counters", "geocount_shard_peer_counters"];
        assert_eq!(
            holding(page, &shard, "geocount_shard_descriptions"),
            Some(Holding {
                counters: 12,
                descriptions: 3
            })
        );
        assert_eq!(holding(page, &shard, "geocount_global_descriptions"), None);
    }

    #[test]
    fn the_goal_and_the_waits_compare_with_the_start() {
        assert!(within_goal(&[110, 50], &[100, 60]));
        assert!(!within_goal(&[111, 50], &[100, 60]));
        let base = Holding {
            counters: 2,
            descriptions: 1,
        };
        let more = Holding {
            counters: 12,
            descriptions: 9,
        };
        assert!(holds_more(&more, &base, 10));
        assert!(!holds_more(&more, &base, 11));
        assert!(back_to(&base, &base));
        assert!(!back_to(&more, &base));
        let p = ProcessMemory {
            name: "global".to_owned(),
            start: 100,
            held: 300,
            peak: 400,
            end: 105,
            start_parts: (80, 20),
            end_parts: (82, 23),
            holdings: [base; 3],
        };
        assert!((p.ratio() - 1.05).abs() < 1e-9);
        let figures = ReclaimFigures {
            counters: 10,
            retention_secs: RETENTION_SECS,
            write_secs: 1.0,
            delete_secs: 2.0,
            gone_secs: 30.0,
            memory_back_secs: None,
            processes: vec![p],
        };
        let mut all = Vec::new();
        rows(&mut all, &figures);
        assert_eq!(all[0].holds, Some(true));
        assert_eq!(all[1].geocount.median, 5.0);
        assert!(all[3].what.ends_with("not within 120 s"), "{}", all[3].what);
    }
}
