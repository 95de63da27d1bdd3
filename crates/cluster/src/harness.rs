//! [`Cluster`]: the processes of one topology, started from its file, a data directory and a
//! bin directory, watched and stopped together. The launcher and the benchmark run their
//! clusters through it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use geocount_model::Topology;
use geocount_net::tls::{client_config, tls_connector};
use geocount_net::{Connector, tcp_connector};

use crate::error::ClusterError;
use crate::member::{Member, members};
use crate::process::{self, Process, Spec};

/// A topology's running processes.
pub struct Cluster {
    /// Its processes, in start order.
    pub processes: Vec<Process>,
    /// The topology they run.
    pub topology: Topology,
    /// Its file, passed to every process.
    pub file: PathBuf,
    /// Where the processes keep their data.
    pub data_dir: PathBuf,
    /// Where their logs go.
    pub log_dir: PathBuf,
    /// Where the binaries are.
    pub bin_dir: PathBuf,
    /// How the tiers are reached: over TLS trusting the topology's CA with `[tls]`.
    tiers: Connector,
}

impl Cluster {
    /// A cluster of `topology` (read from `file`) with nothing started yet.
    pub fn new(
        file: PathBuf,
        topology: Topology,
        data_dir: PathBuf,
        log_dir: PathBuf,
        bin_dir: PathBuf,
    ) -> Result<Self, ClusterError> {
        let tiers = tier_connector(&topology, &file)?;
        Ok(Self {
            processes: Vec::new(),
            topology,
            file,
            data_dir,
            log_dir,
            bin_dir,
            tiers,
        })
    }

    /// Starts the members of the topology at `file` that `which` accepts, in start order, with
    /// data under `data_dir` and logs under `log_dir`, and waits (at most `timeout`) until all
    /// are healthy. On failure, those started are stopped again.
    pub async fn start(
        file: &Path,
        data_dir: PathBuf,
        log_dir: PathBuf,
        bin_dir: PathBuf,
        which: impl Fn(&Member) -> bool,
        timeout: Duration,
    ) -> Result<Self, ClusterError> {
        let topology = Topology::load(file)?;
        let mut cluster = Self::new(file.to_owned(), topology, data_dir, log_dir, bin_dir)?;
        create_dir(&cluster.log_dir)?;
        let wanted: Vec<Member> = members(&cluster.topology)
            .into_iter()
            .filter(|member| which(member))
            .collect();
        let started = async {
            for member in wanted {
                let spec = cluster.plan(member, &cluster.file)?;
                cluster.spawn(spec)?;
            }
            cluster.wait_healthy(timeout).await
        }
        .await;
        match started {
            Ok(()) => Ok(cluster),
            Err(error) => {
                cluster.stop(crate::STOP_GRACE).await;
                Err(error)
            }
        }
    }

    /// How to start `member` with the topology file `config` (the cluster's own, or a copy).
    pub fn plan(&self, member: Member, config: &Path) -> Result<Spec, ClusterError> {
        let launch = member.launch(&self.topology, config, &self.data_dir)?;
        let binary = process::find_binary(&self.bin_dir, launch.binary)?;
        Ok(Spec::of_member(member, launch, binary))
    }

    /// Starts `spec` without waiting for it.
    pub fn spawn(&mut self, spec: Spec) -> Result<(), ClusterError> {
        let process = process::spawn(spec, &self.log_dir)?;
        self.processes.push(process);
        Ok(())
    }

    /// Waits (at most `timeout`) until every process answers `/healthz`.
    pub async fn wait_healthy(&mut self, timeout: Duration) -> Result<(), ClusterError> {
        process::wait_healthy_over(&mut self.processes, timeout, &self.tiers).await
    }

    /// The process named `name` (a [`Member::name`]).
    pub fn process(&self, name: &str) -> Option<&Process> {
        self.processes.iter().find(|p| p.name() == name)
    }

    /// The first process that is a member `is` accepts.
    pub fn find(&self, is: impl Fn(&Member) -> bool) -> Option<&Process> {
        self.processes
            .iter()
            .find(|p| p.spec.member.as_ref().is_some_and(&is))
    }

    /// The shard nodes' addresses, every datacenter's in turn.
    pub fn shard_addresses(&self) -> Vec<SocketAddr> {
        self.topology
            .datacenters
            .iter()
            .flat_map(|dc| dc.shards.iter().copied())
            .collect()
    }

    /// Stops process `name` (SIGTERM, SIGKILL after `grace`).
    pub async fn stop_process(&mut self, name: &str, grace: Duration) {
        let named = self.processes.iter_mut().filter(|p| p.name() == name);
        process::stop_all(named, grace).await;
    }

    /// Starts process `name` again after it stopped, planned anew (its data directory may have
    /// changed), and waits (at most `timeout`) until it is healthy.
    pub async fn restart(&mut self, name: &str, timeout: Duration) -> Result<(), ClusterError> {
        let index = self
            .processes
            .iter()
            .position(|p| p.name() == name)
            .ok_or_else(|| ClusterError::Member {
                name: name.to_owned(),
                message: "no such process in the cluster".to_owned(),
            })?;
        let old = &self.processes[index].spec;
        let spec = match old.member.clone() {
            Some(member) => self.plan(member, &self.file)?,
            None => old.clone(),
        };
        self.processes[index] = process::spawn(spec, &self.log_dir)?;
        let restarted = &mut self.processes[index..=index];
        process::wait_healthy_over(restarted, timeout, &self.tiers).await
    }

    /// Stops every process still running, the WAN emulator last (the tiers keep their links
    /// while they shut down), each with `grace` after SIGTERM; returns how many were running.
    pub async fn stop(&mut self, grace: Duration) -> usize {
        let (emulator, tiers): (Vec<&mut Process>, Vec<&mut Process>) = self
            .processes
            .iter_mut()
            .partition(|p| p.spec.member == Some(Member::WanEmulator));
        process::stop_all(tiers, grace).await + process::stop_all(emulator, grace).await
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("processes", &self.processes)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// How the tiers are reached: over TLS trusting the topology's CA with `[tls]`, plain TCP
/// without.
fn tier_connector(topology: &Topology, config: &Path) -> Result<Connector, ClusterError> {
    let Some(tls) = &topology.tls else {
        return Ok(tcp_connector());
    };
    let trusted = client_config(&tls.ca).map_err(|e| tls.file_error(config, &e.file, e.message))?;
    Ok(tls_connector(tcp_connector(), trusted))
}

/// Creates `dir` and its parents.
pub fn create_dir(dir: &Path) -> Result<(), ClusterError> {
    std::fs::create_dir_all(dir).map_err(|source| ClusterError::Io {
        action: "create",
        path: dir.to_owned(),
        source,
    })
}
