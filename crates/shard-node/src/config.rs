//! A shard node's resolved configuration: which slot it owns, where it listens and keeps data.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use geocount_model::role::replica_name;

use crate::engine::commit::RightsPlace;
use geocount_model::{
    AuthConfig, DatacenterConfig, HttpSettings, Partitions, RespSettings, ShardDefaults, SlotId,
    SyncSettings, Topology, TopologyError,
};

/// Everything a shard node needs to run.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The slot this node owns.
    pub slot: SlotId,
    /// Where it listens (the topology's address for its slot).
    pub listen: SocketAddr,
    /// Its data directory: the log segments and the checkpoint store.
    pub data_dir: PathBuf,
    /// The shard settings from the topology, `durability` the datacenter's.
    pub settings: ShardDefaults,
    /// This node's datacenter: its aggregator and its peers.
    pub datacenter: DatacenterConfig,
    /// Every global aggregator replica: sources of a restore.
    pub global: Vec<SocketAddr>,
    /// Every global aggregator replica with the partitions it holds, replica 0 first: where a
    /// world read asks for the other datacenters' parts of a counter.
    pub global_tier: Vec<(SocketAddr, Partitions)>,
    /// How many datacenters the topology has (with no other, a world read is answered here).
    pub datacenter_count: usize,
    /// Every datacenter of the topology, in its order: its name and its shard nodes'
    /// addresses (bounded counters' slots ask each other for rights).
    pub datacenters: Vec<(String, Vec<SocketAddr>)>,
    /// How often to pull peers and descriptions.
    pub sync: SyncSettings,
    /// Limits of its HTTP listener (`[http]`).
    pub http: HttpSettings,
    /// Where it serves the Redis protocol (`datacenters[i].resp[n]`), if anywhere.
    pub resp: Option<SocketAddr>,
    /// Limits of its RESP listener (`[resp]`).
    pub resp_settings: RespSettings,
    /// Whether its heap may use transparent huge pages (`memory.huge_pages`).
    pub huge_pages: bool,
    /// Client tokens and the cluster secret (`[auth]`).
    pub auth: AuthConfig,
    /// Whether the topology has `[tls]`: the other tiers then prove their process by client
    /// certificate when they call this one.
    pub certificates: bool,
    /// What to do when the data directory holds nothing: restore the slot, or start it empty.
    pub restore: RestoreMode,
}

/// What a node does with an empty data directory (`shard-node --restore`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestoreMode {
    /// Restore the slot from the datacenter's complete copies before taking writes, however
    /// long that takes: an empty directory is a lost disk until an operator says otherwise.
    #[default]
    Required,
    /// Start the slot empty: the first start of a new slot, or giving up a restore no source
    /// can complete, decided by its operator. A directory that holds a slot is used as it is.
    Empty,
}

impl NodeConfig {
    /// This node's datacenter's place among the topology's, for bounded counters' shares.
    pub fn rights_place(&self) -> RightsPlace {
        RightsPlace {
            index: (self.datacenters.iter())
                .position(|(name, _)| *name == self.datacenter.name)
                .unwrap_or_default(),
            datacenters: self.datacenters.len(),
        }
    }

    /// The names of every slot of this node's datacenter, by index.
    pub fn slot_names(&self) -> Vec<String> {
        (0..self.datacenter.shards.len())
            .map(|n| SlotId::new(&self.datacenter.name, n as u32).to_string())
            .collect()
    }

    /// Resolves slot `DC_<dc>_VAL_<slot>` in a topology read from `file`.
    pub fn from_topology(
        topology: &Topology,
        file: &Path,
        datacenter: &str,
        slot: u32,
        data_dir: Option<PathBuf>,
    ) -> Result<Self, TopologyError> {
        let slot = SlotId::new(datacenter, slot);
        let listen = topology
            .shard_address(&slot)
            .map_err(|(key, message)| TopologyError {
                file: file.to_owned(),
                key,
                message,
            })?;
        let data_dir = data_dir.unwrap_or_else(|| topology.shard.data_dir.join(slot.to_string()));
        let datacenter = topology
            .datacenter(datacenter)
            .expect("shard_address found the datacenter")
            .clone();
        let resp = datacenter.resp_address(slot.index);
        Ok(Self {
            slot,
            listen,
            data_dir,
            // The datacenter's own durability, where it says one.
            settings: ShardDefaults {
                durability: datacenter.durability(&topology.shard),
                ..topology.shard.clone()
            },
            datacenter,
            global: topology.global.addresses(),
            global_tier: topology.global.replicas_of(topology.partitions),
            datacenter_count: topology.datacenters.len(),
            datacenters: (topology.datacenters.iter())
                .map(|dc| (dc.name.clone(), dc.shards.clone()))
                .collect(),
            sync: topology.sync.clone(),
            http: topology.http.clone(),
            resp,
            resp_settings: topology.resp.clone(),
            huge_pages: topology.memory.huge_pages,
            auth: topology.auth.clone(),
            certificates: topology.tls.is_some(),
            restore: RestoreMode::default(),
        })
    }
}

/// The name of replica `replica` of datacenter `datacenter`'s aggregator, as a source.
pub(crate) fn aggregator_source(datacenter: &str, replica: usize) -> String {
    replica_name(&format!("aggregator {datacenter}"), replica)
}
