//! What both tiers read from the topology alike, and how a tier's slots group into parts.

use std::net::SocketAddr;
use std::path::Path;

use geocount_model::{
    AuthConfig, HttpSettings, Partitions, SlotId, SyncSettings, Topology, TopologyError,
    TrendingConfig,
};

/// The settings every aggregator runs with, whichever tier.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where it listens.
    pub listen: SocketAddr,
    /// How often it pulls, and the page size it answers with.
    pub sync: SyncSettings,
    /// The window of counters without a description (`shard.default_window_seconds`).
    pub default_window_seconds: u32,
    /// The longest window a counter may have (`shard.max_window_seconds`): no read's is longer.
    pub max_window_seconds: u32,
    /// What `GET /trending` lists (`[trending]`).
    pub trending: TrendingConfig,
    /// Limits of its HTTP listener (`[http]`).
    pub http: HttpSettings,
    /// Whether its heap may use transparent huge pages (`memory.huge_pages`).
    pub huge_pages: bool,
    /// The most bytes of copies it holds (`aggregator.datacenter_max_state_bytes` or
    /// `aggregator.global_max_state_bytes`).
    pub max_state_bytes: u64,
    /// Client tokens and the cluster secret (`[auth]`).
    pub auth: AuthConfig,
    /// Whether the topology has `[tls]`: the other tiers then prove their process by client
    /// certificate when they call this one.
    pub certificates: bool,
    /// Which replica of its tier it is (0: the first address); its answers say so.
    pub replica: usize,
    /// The partitions of the counter space it holds.
    pub partitions: Partitions,
    /// Every replica of its tier, itself included: where it listens and what it holds. Reads
    /// of counters held elsewhere are redirected there, and rankings ask them for the rest.
    pub tier: Vec<(SocketAddr, Partitions)>,
}

impl Settings {
    /// The settings of replica `replica` of a tier of `topology` whose replicas are `tier`,
    /// holding at most `max_state_bytes`; a replica the tier does not have is an error naming
    /// `file` and `key`, the key that lists the replicas past 0.
    pub fn of_replica(
        topology: &Topology,
        (file, key): (&Path, &str),
        tier: Vec<(SocketAddr, Partitions)>,
        replica: usize,
        max_state_bytes: u64,
    ) -> Result<Self, TopologyError> {
        let addresses: Vec<SocketAddr> = tier.iter().map(|(address, _)| *address).collect();
        let listen = replica_address(&addresses, replica, file, key)?;
        Ok(Self {
            replica,
            partitions: tier[replica].1.clone(),
            tier,
            ..Self::from_topology(topology, listen, max_state_bytes)
        })
    }

    /// The settings of an aggregator of `topology` listening on `listen`, holding every
    /// partition and at most `max_state_bytes`, the only replica of its tier.
    pub fn from_topology(topology: &Topology, listen: SocketAddr, max_state_bytes: u64) -> Self {
        let partitions = Partitions::all(topology.partitions);
        Self {
            tier: vec![(listen, partitions.clone())],
            partitions,
            listen,
            sync: topology.sync.clone(),
            default_window_seconds: topology.shard.default_window_seconds,
            max_window_seconds: topology.shard.max_window_seconds,
            trending: topology.trending.clone(),
            http: topology.http.clone(),
            huge_pages: topology.memory.huge_pages,
            max_state_bytes,
            auth: topology.auth.clone(),
            certificates: topology.tls.is_some(),
            replica: 0,
        }
    }
}

/// The slots a tier holds, by index, and the part each belongs to: the datacenter tier holds
/// one datacenter's slots in one part, the global tier every datacenter's, a part each. The
/// top-K index ranks each part besides all slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotGroups {
    /// Every slot's name, by index.
    pub names: Vec<String>,
    /// The index of each slot's part, by slot index.
    pub part_of: Vec<usize>,
}

impl SlotGroups {
    /// The slots of `datacenters` (name and slot count), in order: each datacenter a part.
    pub fn of_datacenters<'a>(datacenters: impl IntoIterator<Item = (&'a str, usize)>) -> Self {
        let mut groups = Self {
            names: Vec::new(),
            part_of: Vec::new(),
        };
        for (part, (datacenter, slots)) in datacenters.into_iter().enumerate() {
            groups.names.extend(slot_names(datacenter, slots));
            groups.part_of.extend(std::iter::repeat_n(part, slots));
        }
        groups
    }
}

/// The names of datacenter `datacenter`'s `slots` slots, by index.
pub fn slot_names(datacenter: &str, slots: usize) -> Vec<String> {
    (0..slots)
        .map(|n| SlotId::new(datacenter, n as u32).to_string())
        .collect()
}

/// Where replica `replica` of `addresses` (replica 0 first) listens; a replica not listed is
/// an error naming `file` and `key`, the key that lists the replicas past 0.
pub fn replica_address(
    addresses: &[SocketAddr],
    replica: usize,
    file: &Path,
    key: &str,
) -> Result<SocketAddr, TopologyError> {
    addresses
        .get(replica)
        .copied()
        .ok_or_else(|| TopologyError {
            file: file.to_owned(),
            key: key.to_owned(),
            message: format!(
                "no replica {replica}: the topology lists replicas 0 to {}",
                addresses.len() - 1
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_datacenter_is_a_part_of_its_slots() {
        let groups = SlotGroups::of_datacenters([("USA_0", 2), ("ASIA_0", 1)]);
        assert_eq!(
            groups.names,
            ["DC_USA_0_VAL_0", "DC_USA_0_VAL_1", "DC_ASIA_0_VAL_0"]
        );
        assert_eq!(groups.part_of, [0, 0, 1]);
    }
}
