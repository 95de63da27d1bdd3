//! The Redis protocol, one tool on both sides: the same `redis-benchmark -t incr -c 50 -n N -r R
//! -P P -q` command lines against Redis (persistence off, and `appendfsync always`) and against
//! a shard node's RESP port (`sync`, alone; `replicated`, the first node of a datacenter of two),
//! in turns within each round, over the uniform key spaces of [`KEY_SPACES`], each key space on
//! fresh servers. Then one `redis-benchmark` per shard node of a cluster of the topology's shape
//! (`sync`), all at once, summed.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use geocount_cluster::{Cluster, Member};
use geocount_model::{Durability, Topology};
use serde::Serialize;

use crate::figure::{Figure, Goal, Row, Unit, show_value};
use crate::procs::output;
use crate::redis::{self, CLIENTS, Persistence, Redis};
use crate::steps::{BEST_PIPELINE, KEY_SPACES, PIPELINES, Plan, is_shard};
use crate::topo::{self, Tiers};

/// Durable geocount (`sync`) against Redis `appendfsync always`, at every pipeline.
const SYNC_OVER_ALWAYS: f64 = 2.0;
/// Durable geocount (`sync`) against Redis with persistence off, at `-P 128`.
const SYNC_OVER_OFF: f64 = 1.0;
/// `replicated` against Redis `appendfsync always`.
const REPLICATED_OVER_ALWAYS: f64 = 1.0;

/// A server the same command lines drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// redis-server, no RDB, no AOF.
    RedisOff,
    /// redis-server, AOF with `appendfsync always`.
    RedisAlways,
    /// A shard node alone, `sync`: each INCR fsynced in its log before the reply.
    Sync,
    /// The first shard node of a datacenter of two, `replicated`: each INCR fsynced in its
    /// owner's log and in a peer's before the reply (the keys the peer owns are forwarded).
    Replicated,
}

/// The sides, in the order each round drives them.
const SIDES: [Side; 4] = [
    Side::RedisOff,
    Side::RedisAlways,
    Side::Sync,
    Side::Replicated,
];

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::RedisOff => "Redis, persistence off",
            Side::RedisAlways => "Redis, appendfsync always",
            Side::Sync => "shard node alone, sync",
            Side::Replicated => "shard node with a peer, replicated",
        }
    }
}

/// INCRs per second of one side at each of [`PIPELINES`].
#[derive(Debug, Clone, Serialize)]
pub struct SideFigures {
    /// Which server.
    pub side: Side,
    /// Its rate at each pipeline, one sample per round.
    pub incr: Vec<Figure>,
}

/// Every shard node of a cluster driven at once, one `redis-benchmark` each.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterFigures {
    /// The shard nodes (and redis-benchmark processes).
    pub shard_nodes: usize,
    /// `-n` of each process: the single sides' `-n` split among them.
    pub requests_per_process: Vec<u64>,
    /// At each pipeline, the processes' rates summed.
    pub summed: Vec<Figure>,
    /// At each pipeline, every request over the time from the first start to the last exit.
    pub overall: Vec<Figure>,
}

/// One key space: the four sides in turns, then the cluster.
#[derive(Debug, Clone, Serialize)]
pub struct KeySpaceFigures {
    /// redis-benchmark's `-r`.
    pub keyspace: u32,
    /// In [`SIDES`] order.
    pub sides: Vec<SideFigures>,
    /// The cluster's shard nodes at once.
    pub cluster: ClusterFigures,
}

/// The step's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RespFigures {
    /// `-n` at each of [`PIPELINES`].
    pub requests: [u64; 3],
    /// One per key space.
    pub keyspaces: Vec<KeySpaceFigures>,
}

impl KeySpaceFigures {
    fn side(&self, side: Side) -> &[Figure] {
        let found = self.sides.iter().find(|s| s.side == side);
        found.map_or(&[], |s| &s.incr)
    }
}

/// The servers of one key space, stopped together.
#[derive(Default)]
struct Servers {
    redis: Vec<Redis>,
    clusters: Vec<Cluster>,
    /// Where each side of [`SIDES`] is driven, as started.
    addresses: Vec<SocketAddr>,
}

impl Servers {
    async fn stop(self) {
        for redis in self.redis {
            redis.stop().await;
        }
        for mut cluster in self.clusters {
            cluster.stop(topo::GRACE).await;
        }
    }

    /// Starts the side `side` under `dir`.
    async fn start(&mut self, side: Side, dir: &Path, bin_dir: &Path) -> anyhow::Result<()> {
        let persistence = match side {
            Side::RedisOff => Some(Persistence::Off),
            Side::RedisAlways => Some(Persistence::Always),
            Side::Sync | Side::Replicated => None,
        };
        if let Some(persistence) = persistence {
            let redis = Redis::start(persistence, &dir.join(format!("{side:?}"))).await?;
            self.addresses.push(redis.address());
            self.redis.push(redis);
            return Ok(());
        }
        let (shards, mode) = match side {
            Side::Sync => (1, Durability::Sync),
            _ => (2, Durability::Replicated),
        };
        let side_dir = dir.join(format!("{side:?}"));
        let text = topo::bench_datacenter(&side_dir.join("data"), shards, mode)?;
        let (text, resp) = topo::with_resp(&text)?;
        let running = topo::start(&side_dir, &text, bin_dir, is_shard).await?;
        self.clusters.push(running);
        for &address in &resp {
            redis::wait_pong(address).await?;
        }
        self.addresses.push(resp[0]);
        Ok(())
    }
}

/// The step: per key space, fresh servers of every side driven in turns, then a fresh cluster.
pub async fn resp(
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
) -> anyhow::Result<RespFigures> {
    let resp_dir = dir.join("resp");
    let mut keyspaces = Vec::new();
    for keyspace in KEY_SPACES {
        let mut servers = Servers::default();
        let mut started = Ok(());
        for side in SIDES {
            started = servers.start(side, &resp_dir, bin_dir).await;
            if started.is_err() {
                break;
            }
        }
        let sides = match started {
            Ok(()) => in_turns(plan, keyspace, &servers.addresses).await,
            Err(error) => Err(error),
        };
        servers.stop().await;
        remove(&resp_dir)?;
        let sides = sides.with_context(|| format!("-r {keyspace}"))?;
        let cluster = cluster(plan, &resp_dir, bin_dir, shape, keyspace).await;
        remove(&resp_dir)?;
        keyspaces.push(KeySpaceFigures {
            keyspace,
            sides,
            cluster: cluster.with_context(|| format!("the cluster, -r {keyspace}"))?,
        });
    }
    let figures = RespFigures {
        requests: plan.resp_requests,
        keyspaces,
    };
    println!("\n{}", matrix(&figures));
    Ok(figures)
}

fn remove(dir: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(error).with_context(|| format!("cannot remove {}", dir.display()))
        }
        _ => Ok(()),
    }
}

/// `plan.repeats` rounds; in each, every pipeline, and at each every side in turn.
async fn in_turns(
    plan: &Plan,
    keyspace: u32,
    addresses: &[SocketAddr],
) -> anyhow::Result<Vec<SideFigures>> {
    let mut samples = vec![vec![Vec::new(); PIPELINES.len()]; SIDES.len()];
    for _ in 0..plan.repeats {
        for (p, (pipeline, requests)) in PIPELINES.into_iter().zip(plan.resp_requests).enumerate() {
            for ((side, &address), samples) in SIDES.iter().zip(addresses).zip(&mut samples) {
                let rate = redis::incr(address, pipeline, keyspace, requests)
                    .await
                    .with_context(|| format!("{} at {address}", side.label()))?;
                println!(
                    "  -r {keyspace} -P {pipeline}, {}: {rate:.0} INCR/s",
                    side.label()
                );
                samples[p].push(rate);
            }
        }
    }
    Ok(SIDES
        .into_iter()
        .zip(samples)
        .map(|(side, per_pipeline)| SideFigures {
            side,
            incr: (per_pipeline.into_iter())
                .map(|s| Figure::new(Unit::PerSec, s))
                .collect(),
        })
        .collect())
}

/// A fresh cluster of `shape`'s datacenters (`sync`, one aggregator process per tier), every
/// shard node driven by its own redis-benchmark at once.
async fn cluster(
    plan: &Plan,
    dir: &Path,
    bin_dir: &Path,
    shape: &Topology,
    keyspace: u32,
) -> anyhow::Result<ClusterFigures> {
    let cluster_dir = dir.join("cluster");
    let text = topo::same_shape_with(
        shape,
        &cluster_dir.join("data"),
        Tiers::ONE,
        Durability::Sync,
    )?;
    let (text, resp) = topo::with_resp(&text)?;
    let mut running = topo::start(&cluster_dir, &text, bin_dir, |_| true).await?;
    let result = async {
        let shard_nodes = (running.processes.iter())
            .filter(|p| matches!(p.spec.member, Some(Member::Shard { .. })))
            .count();
        anyhow::ensure!(
            shard_nodes == resp.len(),
            "{shard_nodes} shard nodes, {} RESP ports",
            resp.len()
        );
        for &address in &resp {
            redis::wait_pong(address).await?;
            wait_incr(address).await?;
        }
        let split = plan.resp_requests.map(|n| n.div_ceil(resp.len() as u64));
        let mut summed = vec![Vec::new(); PIPELINES.len()];
        let mut overall = vec![Vec::new(); PIPELINES.len()];
        for _ in 0..plan.repeats {
            for (p, (pipeline, requests)) in PIPELINES.into_iter().zip(split).enumerate() {
                let started = Instant::now();
                let mut runs = tokio::task::JoinSet::new();
                for &address in &resp {
                    runs.spawn(redis::incr(address, pipeline, keyspace, requests));
                }
                let mut sum = 0.0;
                while let Some(rate) = runs.join_next().await {
                    sum += rate.context("a redis-benchmark task panicked")??;
                }
                let all = (requests * resp.len() as u64) as f64 / started.elapsed().as_secs_f64();
                println!(
                    "  -r {keyspace} -P {pipeline}, cluster, {} redis-benchmark at once: {sum:.0} INCR/s summed, {all:.0} overall",
                    resp.len()
                );
                summed[p].push(sum);
                overall[p].push(all);
            }
        }
        let figures = |samples: Vec<Vec<f64>>| {
            (samples.into_iter())
                .map(|s| Figure::new(Unit::PerSec, s))
                .collect()
        };
        anyhow::Ok(ClusterFigures {
            shard_nodes,
            requests_per_process: split.to_vec(),
            summed: figures(summed),
            overall: figures(overall),
        })
    }
    .await;
    running.stop(topo::GRACE).await;
    result
}

/// Waits until the shard node at `address` answers an INCR: a fresh cluster's node answers
/// one with an error until the global aggregator has heard from every datacenter.
async fn wait_incr(address: SocketAddr) -> anyhow::Result<()> {
    let args = [
        "-h",
        &address.ip().to_string(),
        "-p",
        &address.port().to_string(),
    ]
    .map(str::to_owned)
    .into_iter()
    .chain(["incr".to_owned(), "resp-bench-warm-up".to_owned()])
    .collect::<Vec<_>>();
    let mut last = String::new();
    for _ in 0..300 {
        let answer = output("redis-cli", &args, Duration::from_secs(5)).await?;
        if answer.trim().parse::<i64>().is_ok() {
            return Ok(());
        }
        last = answer;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("{address} never answered INCR with a number; the last answer: {last}")
}

/// The command line of `-r keyspace -P pipeline`, as run (the address aside).
fn command(requests: u64, keyspace: u32, pipeline: u32) -> String {
    format!("redis-benchmark -t incr -c {CLIENTS} -n {requests} -r {keyspace} -P {pipeline} -q")
}

/// Each pair side by side: `sync` against Redis `appendfsync always` (and against persistence
/// off), `replicated` against `appendfsync always`, and the cluster against both.
pub fn rows(rows: &mut Vec<Row>, figures: &RespFigures) {
    for space in &figures.keyspaces {
        let off = space.side(Side::RedisOff);
        let always = space.side(Side::RedisAlways);
        let sync = space.side(Side::Sync);
        let replicated = space.side(Side::Replicated);
        for (p, (pipeline, requests)) in PIPELINES.into_iter().zip(figures.requests).enumerate() {
            let (Some(off), Some(always), Some(sync), Some(replicated)) =
                (off.get(p), always.get(p), sync.get(p), replicated.get(p))
            else {
                continue;
            };
            let command = command(requests, space.keyspace, pipeline);
            let peer = |side: Side| format!("{}, the same command", side.label());
            rows.push(Row::against(
                format!("RESP: `{command}`, {}", Side::Sync.label()),
                sync.clone(),
                peer(Side::RedisAlways),
                always.clone(),
                Some(Goal::RatioAtLeast(SYNC_OVER_ALWAYS)),
            ));
            let goal = (pipeline == BEST_PIPELINE).then_some(Goal::RatioAtLeast(SYNC_OVER_OFF));
            rows.push(Row::against(
                "the same, sync",
                sync.clone(),
                peer(Side::RedisOff),
                off.clone(),
                goal,
            ));
            rows.push(Row::against(
                format!("the same, {}", Side::Replicated.label()),
                replicated.clone(),
                peer(Side::RedisAlways),
                always.clone(),
                Some(Goal::RatioAtLeast(REPLICATED_OVER_ALWAYS)),
            ));
            if let Some(cluster) = space.cluster.summed.get(p) {
                let n = space.cluster.shard_nodes;
                rows.push(Row::against(
                    format!(
                        "the same, every shard node of the cluster (sync) at once: {n} redis-benchmark with -n {}, rates summed",
                        space.cluster.requests_per_process[p]
                    ),
                    cluster.clone(),
                    peer(Side::RedisAlways),
                    always.clone(),
                    None,
                ));
            }
        }
    }
}

/// The figures as one compact table: a line per key space and pipeline, every side's median
/// and the ratios the targets judge.
pub fn matrix(figures: &RespFigures) -> String {
    let mut out = String::from(
        "| -r | -P | -n | Redis off | Redis always | sync | replicated | cluster, summed | sync / always | sync / off | replicated / always |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let median = |figures: &[Figure], p: usize| figures.get(p).map_or(f64::NAN, |f| f.median);
    for space in &figures.keyspaces {
        for (p, (pipeline, requests)) in PIPELINES.into_iter().zip(figures.requests).enumerate() {
            let [off, always, sync, replicated] = SIDES.map(|side| median(space.side(side), p));
            let cluster = median(&space.cluster.summed, p);
            let rate = |v| show_value(Unit::PerSec, v);
            out += &format!(
                "| {} | {pipeline} | {requests} | {} | {} | {} | {} | {} | {:.2}× | {:.2}× | {:.2}× |\n",
                space.keyspace,
                rate(off),
                rate(always),
                rate(sync),
                rate(replicated),
                rate(cluster),
                sync / always,
                sync / off,
                replicated / always,
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rates: [f64; 3]) -> Vec<Figure> {
        rates.map(|r| Figure::new(Unit::PerSec, vec![r])).to_vec()
    }

    #[test]
    fn each_pair_is_judged_against_its_target() {
        let side = |side, incr| SideFigures { side, incr };
        let figures = RespFigures {
            requests: [10, 100, 1000],
            keyspaces: vec![KeySpaceFigures {
                keyspace: 100_000,
                sides: vec![
                    side(Side::RedisOff, at([100.0, 800.0, 1500.0])),
                    side(Side::RedisAlways, at([50.0, 400.0, 700.0])),
                    side(Side::Sync, at([120.0, 800.0, 1600.0])),
                    side(Side::Replicated, at([40.0, 400.0, 900.0])),
                ],
                cluster: ClusterFigures {
                    shard_nodes: 6,
                    requests_per_process: vec![2, 17, 167],
                    summed: at([300.0, 2000.0, 3000.0]),
                    overall: at([290.0, 1900.0, 2900.0]),
                },
            }],
        };
        let mut rows = Vec::new();
        super::rows(&mut rows, &figures);
        assert_eq!(rows.len(), 12);
        let holds: Vec<Option<bool>> = rows.iter().map(|r| r.holds).collect();
        #[rustfmt::skip]
        assert_eq!(holds, [
            Some(true), None, Some(false), None,   // -P 1: 2.4×, —, 0.8×, cluster
            Some(true), None, Some(true), None,    // -P 16: 2×, —, 1×
            Some(true), Some(true), Some(true), None, // -P 128: 2.29×, 1.07×, 1.29×
        ]);
        assert!(
            rows[0]
                .what
                .contains("redis-benchmark -t incr -c 50 -n 10 -r 100000 -P 1 -q")
        );
        let table = matrix(&figures);
        assert!(table.contains("| 100000 | 128 | 1000 | 1.5k/s | 700/s | 1.6k/s | 900/s | 3.0k/s | 2.29× | 1.07× | 1.29× |"), "{table}");
    }
}
