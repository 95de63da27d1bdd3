//! The topologies the benchmark runs: one shard node alone, and the shape of
//! `config/local.toml` on free loopback ports with data under the benchmark's directory.
//! Processes are started and stopped with the local launcher's library (`geocount-cluster`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use geocount_cluster::{Process, Role, process, roles};
use geocount_model::Topology;

use crate::procs::free_address;

/// How long the processes get to answer `/healthz`.
const STARTUP: Duration = Duration::from_secs(30);
/// How long they get to stop on SIGTERM.
const GRACE: Duration = Duration::from_secs(20);

/// A running topology.
pub struct Running {
    /// Its processes, in start order (global, datacenter aggregators, shard nodes).
    pub processes: Vec<Process>,
    /// The topology they run.
    pub topology: Topology,
    /// Its file.
    pub file: PathBuf,
}

impl Running {
    /// Writes `text` as `dir/topology.toml` (after emptying `dir`), starts `which` of its roles
    /// from `bin_dir`, and waits until they are healthy.
    pub async fn start(
        dir: &Path,
        text: &str,
        bin_dir: &Path,
        which: impl Fn(&Role) -> bool,
    ) -> anyhow::Result<Self> {
        let _ = std::fs::remove_dir_all(dir);
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs)
            .with_context(|| format!("cannot create {}", logs.display()))?;
        let file = dir.join("topology.toml");
        std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
        let topology = Topology::load(&file)?;
        let mut processes = Vec::new();
        for role in roles(&topology).into_iter().filter(|r| which(r)) {
            let launch = role.launch(&topology, &file, &dir.join("data"))?;
            let binary = process::find_binary(bin_dir, launch.binary)?;
            processes.push(process::spawn(role, &launch, &binary, &logs)?);
        }
        let mut running = Self {
            processes,
            topology,
            file,
        };
        if let Err(error) = process::wait_healthy(&mut running.processes, STARTUP).await {
            running.stop().await;
            return Err(error.into());
        }
        Ok(running)
    }

    /// The shard nodes' addresses, every datacenter's in turn.
    pub fn shard_addresses(&self) -> Vec<SocketAddr> {
        self.topology
            .datacenters
            .iter()
            .flat_map(|dc| dc.shards.iter().copied())
            .collect()
    }

    /// Stops every process.
    pub async fn stop(&mut self) {
        process::stop_all(&mut self.processes, GRACE).await;
    }
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
