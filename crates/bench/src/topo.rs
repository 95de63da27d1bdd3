//! The topologies the benchmark runs: one shard node alone, one with a peer (a datacenter of
//! two), and the shape of `config/local.toml` on free loopback ports with data under the
//! benchmark's directory, in the durability asked for.
//! Processes are started and stopped as a [`Cluster`] of the local launcher's library.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use geocount_cluster::{Cluster, Member};
use geocount_model::{Durability, Topology};

use crate::procs::free_address;

/// How long the processes get to answer `/healthz`.
const STARTUP: Duration = Duration::from_secs(30);
/// How long they get to stop on SIGTERM.
pub const GRACE: Duration = Duration::from_secs(20);

/// Writes `text` as `dir/topology.toml` (after emptying `dir`), starts `which` of its members
/// from `bin_dir` with data under `dir/data` and logs under `dir/logs`, and waits until they
/// are healthy.
pub async fn start(
    dir: &Path,
    text: &str,
    bin_dir: &Path,
    which: impl Fn(&Member) -> bool,
) -> anyhow::Result<Cluster> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let file = dir.join("topology.toml");
    std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
    let (data, logs) = (dir.join("data"), dir.join("logs"));
    Ok(Cluster::start(&file, data, logs, bin_dir.to_owned(), which, STARTUP).await?)
}

/// One datacenter `BENCH` with one shard node, `sync`; its aggregator and the global aggregator
/// are never started (the node's pulls of its aggregator just fail).
pub fn single_node(data_dir: &Path) -> anyhow::Result<String> {
    bench_datacenter(data_dir, 1, Durability::Sync)
}

/// One datacenter `BENCH` of `shards` shard nodes in `durability`; its aggregator and the
/// global aggregator are never started (the nodes' pulls of their aggregator just fail).
pub fn bench_datacenter(
    data_dir: &Path,
    shards: usize,
    durability: Durability,
) -> anyhow::Result<String> {
    let shards = (0..shards)
        .map(|_| free_address().map(|a| format!("\"{a}\"")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(format!(
        "[global]\nlisten = \"{}\"\n\n[shard]\ndata_dir = \"{}\"\ndurability = \"{durability}\"\nrestore_timeout_ms = 200\n\n\
         [[datacenters]]\nname = \"BENCH\"\naggregator = \"{}\"\nshards = [{}]\n",
        free_address()?,
        data_dir.display(),
        free_address()?,
        shards.join(", "),
    ))
}

/// `text` (a topology of this module) with a `resp` list beside each datacenter's `shards`, on
/// free loopback ports: every shard node also serves the Redis protocol. Returns the text and
/// the RESP addresses, datacenter by datacenter, in the order of their shards.
pub fn with_resp(text: &str) -> anyhow::Result<(String, Vec<SocketAddr>)> {
    let mut out = String::new();
    let mut resp = Vec::new();
    for line in text.lines() {
        out += line;
        out.push('\n');
        if let Some(list) = line.strip_prefix("shards = [") {
            let shards = list.matches(',').count() + 1;
            let addresses = (0..shards)
                .map(|_| free_address())
                .collect::<anyhow::Result<Vec<_>>>()?;
            let quoted: Vec<String> = addresses.iter().map(|a| format!("\"{a}\"")).collect();
            out += &format!("resp = [{}]\n", quoted.join(", "));
            resp.extend(addresses);
        }
    }
    Ok((out, resp))
}

/// How many aggregator processes each tier runs and how the counter space is split.
#[derive(Debug, Clone, Copy)]
pub struct Tiers {
    /// `partitions`; global replica `r` holds partition `r` when it is above 1.
    pub partitions: u32,
    /// Global aggregator replicas (at least `partitions`).
    pub global_replicas: usize,
    /// Aggregator replicas per datacenter, each holding every partition.
    pub aggregator_replicas: usize,
}

impl Tiers {
    /// One process per tier holding every counter: `config/local.toml`'s tiers.
    pub const ONE: Tiers = Tiers {
        partitions: 1,
        global_replicas: 1,
        aggregator_replicas: 1,
    };
}

/// `shape`'s datacenters (names and shard counts) on free loopback ports, durable (`sync`),
/// with the default sync intervals.
pub fn same_shape(shape: &Topology, data_dir: &Path) -> anyhow::Result<String> {
    same_shape_with(shape, data_dir, Tiers::ONE, Durability::Sync)
}

/// [`same_shape`] with the aggregator processes and partitions of `tiers`, in `durability`; a
/// datacenter of one shard node says `sync` itself under `replicated` (it has no peer), as
/// `config/local.toml`'s does.
pub fn same_shape_with(
    shape: &Topology,
    data_dir: &Path,
    tiers: Tiers,
    durability: Durability,
) -> anyhow::Result<String> {
    let addresses = |n: usize| {
        (0..n)
            .map(|_| free_address().map(|a| format!("\"{a}\"")))
            .collect::<anyhow::Result<Vec<_>>>()
    };
    let mut text = format!(
        "partitions = {}\n\n[global]\nlisten = \"{}\"\nreplicas = [{}]\n",
        tiers.partitions,
        free_address()?,
        addresses(tiers.global_replicas.saturating_sub(1))?.join(", "),
    );
    if tiers.partitions > 1 {
        let held = (0..tiers.global_replicas)
            .map(|r| format!("[{}]", r % tiers.partitions as usize))
            .collect::<Vec<_>>();
        text += &format!("partitions = [{}]\n", held.join(", "));
    }
    text += &format!(
        "\n[shard]\ndata_dir = \"{}\"\ndurability = \"{durability}\"\n",
        data_dir.display()
    );
    for dc in &shape.datacenters {
        text += &format!(
            "\n[[datacenters]]\nname = \"{}\"\naggregator = \"{}\"\naggregator_replicas = [{}]\nshards = [{}]\n",
            dc.name,
            free_address()?,
            addresses(tiers.aggregator_replicas.saturating_sub(1))?.join(", "),
            addresses(dc.shards.len())?.join(", ")
        );
        if durability == Durability::Replicated && dc.shards.len() < 2 {
            text += "durability = \"sync\"\n";
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topologies_parse() {
        let one = single_node(Path::new("/tmp/x")).expect("ports");
        let topology = Topology::from_toml("one", &one).expect("valid");
        assert_eq!(topology.datacenters[0].shards.len(), 1);
        let local = Topology::load(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/local.toml"
        )))
        .expect("config/local.toml");
        let copy = Topology::from_toml(
            "copy",
            &same_shape(&local, Path::new("/tmp/y")).expect("ports"),
        )
        .expect("valid");
        let counts = |t: &Topology| {
            t.datacenters
                .iter()
                .map(|d| (d.name.clone(), d.shards.len()))
                .collect::<Vec<_>>()
        };
        assert_eq!(counts(&copy), counts(&local));
        let tiers = Tiers {
            partitions: 4,
            global_replicas: 4,
            aggregator_replicas: 2,
        };
        let split = Topology::from_toml(
            "split",
            &same_shape_with(&local, Path::new("/tmp/z"), tiers, Durability::Sync).expect("ports"),
        )
        .expect("valid");
        assert_eq!(split.global.replicas_of(4)[3].1.held, vec![3]);
        assert_eq!(split.datacenters[0].aggregators().len(), 2);
        let replicated = Topology::from_toml(
            "replicated",
            &same_shape_with(
                &local,
                Path::new("/tmp/r"),
                Tiers::ONE,
                Durability::Replicated,
            )
            .expect("ports"),
        )
        .expect("a lone shard node says sync itself");
        assert_eq!(counts(&replicated), counts(&local));
        for dc in &replicated.datacenters {
            let expected = if dc.shards.len() > 1 {
                Durability::Replicated
            } else {
                Durability::Sync
            };
            assert_eq!(dc.durability(&replicated.shard), expected, "{}", dc.name);
        }
        let pair = Topology::from_toml(
            "pair",
            &bench_datacenter(Path::new("/tmp/p"), 2, Durability::Replicated).expect("ports"),
        )
        .expect("valid");
        assert_eq!(pair.datacenters[0].shards.len(), 2);
        let (text, resp) =
            with_resp(&same_shape(&local, Path::new("/tmp/s")).expect("ports")).expect("ports");
        let shards: usize = local.datacenters.iter().map(|d| d.shards.len()).sum();
        assert_eq!(resp.len(), shards);
        assert_eq!(text.matches("\nresp = [").count(), local.datacenters.len());
        assert!(text.contains(&format!("resp = [\"{}\"", resp[0])));
        assert_eq!(
            pair.datacenters[0].durability(&pair.shard),
            Durability::Replicated
        );
    }
}
