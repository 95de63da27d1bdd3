//! Topology files for tests: every address a fresh loopback port, every data directory
//! temporary.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use geocount_cluster::Member;
use geocount_model::role::{GLOBAL_PROCESS, aggregator_process};
use geocount_model::{SlotId, Topology};
use tempfile::TempDir;

use geocount_http::{PROCESS_HEADER, PROCESS_KEY_HEADER, ProcessKeys};
use geocount_net::tcp_connector;
use geocount_net::tls::{tier_client_config, tls_connector};

use crate::Api;
use crate::ports::free_addr;
use crate::process::NodeProcess;

/// A topology written to a temporary directory, which also holds the nodes' data and logs.
#[derive(Debug)]
pub struct TestTopology {
    dir: TempDir,
    /// The topology file.
    pub path: PathBuf,
    /// Its parsed contents.
    pub topology: Topology,
}

/// The name of every process of a topology of `datacenters`, as `[tls] cert_dir` names their
/// certificates.
fn process_names(datacenters: &[(&str, usize)]) -> Vec<String> {
    let mut names = vec![GLOBAL_PROCESS.to_owned()];
    for (dc, shards) in datacenters {
        names.push(aggregator_process(dc));
        names.extend((0..*shards).map(|n| SlotId::new(*dc, n as u32).to_string()));
    }
    names
}

/// How a test topology's aggregators are replicated and partitioned.
#[derive(Debug, Clone, Default)]
pub struct Aggregation {
    /// `partitions` (written when above 1).
    pub partitions: u32,
    /// The partitions each global replica holds, one list per replica (empty lists: every
    /// partition); no lists: one global aggregator.
    pub global: Vec<Vec<u32>>,
    /// Likewise for each datacenter's aggregator replicas.
    pub aggregators: Vec<Vec<u32>>,
    /// Lines added to the `[shard]` table.
    pub shard_toml: String,
}

/// `lists` as a TOML array of arrays, when any holds partitions.
fn partition_lists(lists: &[Vec<u32>]) -> Option<String> {
    if lists.iter().all(Vec::is_empty) {
        return None;
    }
    let lists: Vec<String> = lists.iter().map(|list| format!("{list:?}")).collect();
    Some(format!("[{}]", lists.join(", ")))
}

impl TestTopology {
    /// Datacenters named and sized as given (`[("USA_0", 3), ("ASIA_0", 2)]`), with `shard_toml`
    /// (lines of `key = value`) added to the `[shard]` table.
    pub fn new(datacenters: &[(&str, usize)], shard_toml: &str) -> Self {
        Self::with_extra(datacenters, shard_toml, "")
    }

    /// Like [`TestTopology::new`], with `extra_toml` (whole tables, e.g. `[trending]` and its
    /// keys) appended after the datacenters.
    pub fn with_extra(datacenters: &[(&str, usize)], shard_toml: &str, extra_toml: &str) -> Self {
        Self::write(
            datacenters,
            shard_toml,
            extra_toml,
            &Aggregation::default(),
            false,
        )
    }

    /// Like [`TestTopology::with_extra`], with every shard node also serving the Redis
    /// protocol on a fresh port (`resp`, [`TestTopology::resp_addr`]).
    pub fn with_resp(datacenters: &[(&str, usize)], shard_toml: &str, extra_toml: &str) -> Self {
        Self::write(
            datacenters,
            shard_toml,
            extra_toml,
            &Aggregation::default(),
            true,
        )
    }

    /// Like [`TestTopology::new`], with `global` more global aggregator replicas
    /// (`global.replicas`) and `aggregators` more aggregator replicas in each datacenter
    /// (`aggregator_replicas`).
    pub fn replicated(datacenters: &[(&str, usize)], global: usize, aggregators: usize) -> Self {
        let shape = Aggregation {
            global: vec![Vec::new(); global + 1],
            aggregators: vec![Vec::new(); aggregators + 1],
            ..Aggregation::default()
        };
        Self::shaped(datacenters, &shape, "")
    }

    /// Datacenters named and sized as given, aggregated as `shape` says, with `extra_toml`
    /// (whole tables) appended.
    pub fn shaped(datacenters: &[(&str, usize)], shape: &Aggregation, extra_toml: &str) -> Self {
        Self::write(datacenters, &shape.shard_toml, extra_toml, shape, false)
    }

    fn write(
        datacenters: &[(&str, usize)],
        shard_toml: &str,
        extra_toml: &str,
        shape: &Aggregation,
        with_resp: bool,
    ) -> Self {
        let global_replicas = shape.global.len().saturating_sub(1);
        let aggregator_replicas = shape.aggregators.len().saturating_sub(1);
        let addresses = |n: usize| -> String {
            let quoted: Vec<String> = (0..n).map(|_| format!("\"{}\"", free_addr())).collect();
            quoted.join(", ")
        };
        let dir = tempfile::Builder::new()
            .prefix("geocount-test-")
            .tempdir()
            .expect("temporary directory");
        let mut text = String::new();
        if shape.partitions > 1 {
            writeln!(text, "partitions = {}", shape.partitions).unwrap();
        }
        writeln!(text, "[global]\nlisten = \"{}\"", free_addr()).unwrap();
        if global_replicas > 0 {
            writeln!(text, "replicas = [{}]", addresses(global_replicas)).unwrap();
        }
        if let Some(lists) = partition_lists(&shape.global) {
            writeln!(text, "partitions = {lists}").unwrap();
        }
        writeln!(text).unwrap();
        writeln!(
            text,
            "[shard]\ndata_dir = \"{}\"\n{shard_toml}\n",
            dir.path().join("data").display()
        )
        .unwrap();
        for (name, shards) in datacenters {
            writeln!(
                text,
                "[[datacenters]]\nname = \"{name}\"\naggregator = \"{}\"\nshards = [{}]",
                free_addr(),
                addresses(*shards)
            )
            .unwrap();
            if with_resp {
                writeln!(text, "resp = [{}]", addresses(*shards)).unwrap();
            }
            if aggregator_replicas > 0 {
                let replicas = addresses(aggregator_replicas);
                writeln!(text, "aggregator_replicas = [{replicas}]").unwrap();
            }
            if let Some(lists) = partition_lists(&shape.aggregators) {
                writeln!(text, "aggregator_partitions = {lists}").unwrap();
            }
            writeln!(text).unwrap();
        }
        if crate::tls::enabled() {
            text.push_str(&crate::tls::write_certificates(
                dir.path(),
                &process_names(datacenters),
            ));
        }
        writeln!(text, "{extra_toml}").unwrap();
        let path = dir.path().join("topology.toml");
        std::fs::write(&path, &text).expect("write topology");
        let topology = Topology::load(&path).expect("generated topology is valid");
        Self {
            dir,
            path,
            topology,
        }
    }

    /// One datacenter `USA_0` with one shard.
    pub fn single(shard_toml: &str) -> Self {
        Self::new(&[("USA_0", 1)], shard_toml)
    }

    /// Like [`TestTopology::single`], with `extra_toml` as in [`TestTopology::with_extra`].
    pub fn single_with(shard_toml: &str, extra_toml: &str) -> Self {
        Self::with_extra(&[("USA_0", 1)], shard_toml, extra_toml)
    }

    /// The temporary directory everything lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The address of shard `slot` of datacenter `dc`.
    pub fn shard_addr(&self, dc: &str, slot: usize) -> SocketAddr {
        self.topology
            .datacenter(dc)
            .expect("known datacenter")
            .shards[slot]
    }

    /// The RESP address of shard `slot` of datacenter `dc`, of a topology made with
    /// [`TestTopology::with_resp`].
    pub fn resp_addr(&self, dc: &str, slot: usize) -> SocketAddr {
        self.topology
            .datacenter(dc)
            .expect("known datacenter")
            .resp_address(slot as u32)
            .expect("a topology made with TestTopology::with_resp")
    }

    /// The default data directory of a shard node.
    pub fn shard_data_dir(&self, dc: &str, slot: usize) -> PathBuf {
        self.dir
            .path()
            .join("data")
            .join(SlotId::new(dc, slot as u32).to_string())
    }

    /// Starts shard node `slot` of `dc` and waits until it is healthy. Its first start begins
    /// the slot empty (`--restore empty`, a new cluster); a restart on an empty data directory
    /// restores it.
    pub async fn start_shard(&self, dc: &str, slot: usize) -> NodeProcess {
        let member = Member::Shard {
            datacenter: dc.to_owned(),
            slot: slot as u32,
        };
        let args = [
            self.config_flag(),
            dc_flag(dc),
            vec!["--slot".to_owned(), slot.to_string()],
        ];
        let first = ["--restore".to_owned(), "empty".to_owned()];
        let addr = self.shard_addr(dc, slot);
        NodeProcess::start_member(member, &args.concat(), &first, addr, self.dir()).await
    }

    /// Starts shard node `slot` of `dc` with the command line `args` in place of the one
    /// [`Self::start_shard`] builds, beginning the slot empty as it does.
    pub async fn start_shard_with_args(
        &self,
        dc: &str,
        slot: usize,
        args: &[String],
    ) -> NodeProcess {
        NodeProcess::start_first(
            "shard-node",
            &format!("DC_{dc}_VAL_{slot}"),
            args,
            &["--restore".to_owned(), "empty".to_owned()],
            self.shard_addr(dc, slot),
            self.dir(),
        )
        .await
    }

    /// Starts the global aggregator, the aggregator of `dc` and every shard node of `dc`, in
    /// that order, each waited for until healthy: (global, aggregator, shards by slot).
    pub async fn start_datacenter_with_tiers(
        &self,
        dc: &str,
    ) -> (NodeProcess, NodeProcess, Vec<NodeProcess>) {
        let global = self.start_global_aggregator().await;
        let aggregator = self.start_datacenter_aggregator(dc).await;
        let slots = self
            .topology
            .datacenter(dc)
            .expect("known datacenter")
            .shards
            .len();
        let mut shards = Vec::new();
        for slot in 0..slots {
            shards.push(self.start_shard(dc, slot).await);
        }
        (global, aggregator, shards)
    }

    /// Starts the aggregator of datacenter `dc` and waits until it is healthy.
    pub async fn start_datacenter_aggregator(&self, dc: &str) -> NodeProcess {
        self.start_aggregator_replica(dc, 0).await
    }

    /// Starts replica `replica` of the aggregator of datacenter `dc` and waits until it is
    /// healthy.
    pub async fn start_aggregator_replica(&self, dc: &str, replica: usize) -> NodeProcess {
        let addr = self
            .topology
            .datacenter(dc)
            .expect("known datacenter")
            .aggregators()[replica];
        let member = Member::DatacenterAggregator {
            datacenter: dc.to_owned(),
            replica,
        };
        let args = [self.config_flag(), dc_flag(dc), Self::replica_flag(replica)].concat();
        NodeProcess::start_member(member, &args, &[], addr, self.dir()).await
    }

    /// Starts the global aggregator and waits until it is healthy.
    pub async fn start_global_aggregator(&self) -> NodeProcess {
        self.start_global_replica(0).await
    }

    /// Starts global aggregator replica `replica` and waits until it is healthy.
    pub async fn start_global_replica(&self, replica: usize) -> NodeProcess {
        let addr = self.topology.global.addresses()[replica];
        let args = [self.config_flag(), Self::replica_flag(replica)].concat();
        let member = Member::GlobalAggregator { replica };
        NodeProcess::start_member(member, &args, &[], addr, self.dir()).await
    }

    /// `--replica <n>`, or nothing for replica 0 (the flag's default).
    fn replica_flag(replica: usize) -> Vec<String> {
        match replica {
            0 => Vec::new(),
            n => vec!["--replica".to_owned(), n.to_string()],
        }
    }

    /// A client of the process at `addr` that calls it as tier process `name` does: with its
    /// name and process key (with a cluster secret) and, with `[tls]`, its client certificate.
    pub fn api_as(&self, addr: SocketAddr, name: &str) -> Api {
        self.api_posing(addr, name, name, name)
    }

    /// A client of the process at `addr` that presents the client certificate of process
    /// `certificate` (with `[tls]`) but names itself `claimed`, with the process key of
    /// `key_of` (with a cluster secret): one process posing as another.
    pub fn api_posing(
        &self,
        addr: SocketAddr,
        certificate: &str,
        claimed: &str,
        key_of: &str,
    ) -> Api {
        let api = match &self.topology.tls {
            Some(tls) => {
                let (cert, key) = (tls.cert(certificate), tls.key(certificate));
                let config =
                    tier_client_config(&tls.ca, &cert, &key).expect("the test certificates load");
                Api::with_connector(addr, tls_connector(tcp_connector(), config))
            }
            None => Api::plain(addr),
        };
        match &self.topology.auth.cluster_secret {
            Some(secret) => api
                .with_header(PROCESS_HEADER, claimed)
                .with_header(PROCESS_KEY_HEADER, &ProcessKeys::new(secret).key_of(key_of)),
            None => api,
        }
    }

    /// `--config <topology file>`.
    fn config_flag(&self) -> Vec<String> {
        vec!["--config".to_owned(), self.path.display().to_string()]
    }
}

/// `--dc <dc>`.
fn dc_flag(dc: &str) -> Vec<String> {
    vec!["--dc".to_owned(), dc.to_owned()]
}
