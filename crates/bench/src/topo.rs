//! The topologies the benchmark runs: one shard node alone, and the shape of
//! `config/local.toml` on free loopback ports with data under the benchmark's directory.
//! Processes are started and stopped as a [`Cluster`] of the local launcher's library.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use geocount_cluster::{Cluster, Role};
use geocount_model::Topology;

use crate::procs::free_address;

/// How long the processes get to answer `/healthz`.
const STARTUP: Duration = Duration::from_secs(30);
/// How long they get to stop on SIGTERM.
pub const GRACE: Duration = Duration::from_secs(20);

/// Writes `text` as `dir/topology.toml` (after emptying `dir`), starts `which` of its roles
/// from `bin_dir` with data under `dir/data` and logs under `dir/logs`, and waits until they
/// are healthy.
pub async fn start(
    dir: &Path,
    text: &str,
    bin_dir: &Path,
    which: impl Fn(&Role) -> bool,
) -> anyhow::Result<Cluster> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let file = dir.join("topology.toml");
    std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
    let (data, logs) = (dir.join("data"), dir.join("logs"));
    Ok(Cluster::start(&file, data, logs, bin_dir.to_owned(), which, STARTUP).await?)
}

/// One datacenter `BENCH` with one shard node; its aggregator and the global aggregator are
/// never started (the node's pulls of its aggregator just fail).
pub fn single_node(data_dir: &Path) -> anyhow::Result<String> {
    Ok(format!(
        "[global]\nlisten = \"{}\"\n\n[shard]\ndata_dir = \"{}\"\ndurability = \"sync\"\nrestore_timeout_ms = 200\n\n\
         [[datacenters]]\nname = \"BENCH\"\naggregator = \"{}\"\nshards = [\"{}\"]\n",
        free_address()?,
        data_dir.display(),
        free_address()?,
        free_address()?,
    ))
}

/// `shape`'s datacenters (names and shard counts) on free loopback ports, durable (`sync`),
/// with the default sync intervals.
pub fn same_shape(shape: &Topology, data_dir: &Path) -> anyhow::Result<String> {
    let mut text = format!(
        "[global]\nlisten = \"{}\"\n\n[shard]\ndata_dir = \"{}\"\ndurability = \"sync\"\n",
        free_address()?,
        data_dir.display()
    );
    for dc in &shape.datacenters {
        let shards = (0..dc.shards.len())
            .map(|_| free_address().map(|a| format!("\"{a}\"")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        text += &format!(
            "\n[[datacenters]]\nname = \"{}\"\naggregator = \"{}\"\nshards = [{}]\n",
            dc.name,
            free_address()?,
            shards.join(", ")
        );
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
    }
}
