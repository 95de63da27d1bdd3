//! A datacenter aggregator's resolved configuration: its datacenter, where it listens, whom it
//! pulls and how often.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use geocount_model::{
    AuthConfig, HttpSettings, SlotId, SyncSettings, Topology, TopologyError, TrendingConfig,
};
use geocount_sync::PullSource;

/// Everything a datacenter aggregator needs to run.
#[derive(Debug, Clone)]
pub struct AggregatorConfig {
    /// The datacenter's name, e.g. `USA_0`.
    pub datacenter: String,
    /// Where it listens (the datacenter's `aggregator` address).
    pub listen: SocketAddr,
    /// Its shard nodes; the one at index `n` owns slot `DC_<datacenter>_VAL_<n>`.
    pub shards: Vec<SocketAddr>,
    /// The global aggregator, which it pulls descriptions from.
    pub global: SocketAddr,
    /// How often it pulls, and the page size it answers with.
    pub sync: SyncSettings,
    /// The window of counters without a description (`shard.default_window_seconds`).
    pub default_window_seconds: u32,
    /// What `GET /trending` lists (`[trending]`).
    pub trending: TrendingConfig,
    /// Limits of its HTTP listener (`[http]`).
    pub http: HttpSettings,
    /// Whether its heap may use transparent huge pages (`memory.huge_pages`).
    pub huge_pages: bool,
    /// The most bytes of copies it holds (`aggregator.datacenter_max_state_bytes`).
    pub max_state_bytes: u64,
    /// Client tokens and the cluster secret (`[auth]`).
    pub auth: AuthConfig,
    /// Whether the topology has `[tls]`: the other tiers then prove their process by client
    /// certificate when they call this one.
    pub certificates: bool,
}

impl AggregatorConfig {
    /// Resolves datacenter `datacenter` in a topology read from `file`; an unknown datacenter
    /// is an error naming the file and the `datacenters` key.
    pub fn from_topology(
        topology: &Topology,
        file: &Path,
        datacenter: &str,
    ) -> Result<Self, TopologyError> {
        let dc = topology
            .datacenter(datacenter)
            .map_err(|message| TopologyError {
                file: file.to_owned(),
                key: "datacenters".to_owned(),
                message,
            })?;
        Ok(Self {
            datacenter: dc.name.clone(),
            listen: dc.aggregator,
            shards: dc.shards.clone(),
            global: topology.global.listen,
            sync: topology.sync.clone(),
            default_window_seconds: topology.shard.default_window_seconds,
            trending: topology.trending.clone(),
            http: topology.http.clone(),
            huge_pages: topology.memory.huge_pages,
            max_state_bytes: topology.aggregator.datacenter_max_state_bytes,
            auth: topology.auth.clone(),
            certificates: topology.tls.is_some(),
        })
    }

    /// The datacenter's slot names, by index.
    pub fn slot_names(&self) -> Vec<String> {
        (0..self.shards.len())
            .map(|n| SlotId::new(self.datacenter.as_str(), n as u32).to_string())
            .collect()
    }

    /// What it pulls: each shard node (slot states and descriptions; source `n` is slot `n`),
    /// then the global aggregator (descriptions only, flowing down).
    pub fn sources(&self) -> Vec<PullSource> {
        let every = Duration::from_millis;
        let mut sources: Vec<PullSource> = self
            .slot_names()
            .into_iter()
            .zip(&self.shards)
            .map(|(name, addr)| PullSource {
                delivers: vec![name.clone()],
                name,
                address: addr.to_string(),
                interval: every(self.sync.shard_to_datacenter_ms),
                slots: true,
                descriptions: true,
            })
            .collect();
        sources.push(PullSource {
            name: "global".to_owned(),
            address: self.global.to_string(),
            interval: every(self.sync.downward_ms),
            slots: false,
            descriptions: true,
            delivers: Vec::new(),
        });
        sources
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_test_support::TestTopology;

    #[test]
    fn resolves_its_datacenter_and_sources() {
        let t = TestTopology::new(&[("ASIA_0", 1), ("USA_0", 2)], "");
        let config = AggregatorConfig::from_topology(&t.topology, &t.path, "USA_0").unwrap();
        assert_eq!(config.listen, t.topology.datacenters[1].aggregator);
        assert_eq!(config.slot_names(), ["DC_USA_0_VAL_0", "DC_USA_0_VAL_1"]);
        let sources = config.sources();
        assert_eq!(sources.len(), 3, "two shards, then the global aggregator");
        assert_eq!(sources[1].address, t.shard_addr("USA_0", 1).to_string());
        assert!(sources[1].slots && sources[1].descriptions);
        assert_eq!(sources[2].address, t.topology.global.listen.to_string());
        assert!(!sources[2].slots && sources[2].descriptions);
    }

    #[test]
    fn an_unknown_datacenter_names_file_and_key() {
        let t = TestTopology::new(&[("USA_0", 1)], "");
        let error = AggregatorConfig::from_topology(&t.topology, &t.path, "MARS")
            .unwrap_err()
            .to_string();
        let file_and_key = format!("{}: datacenters: ", t.path.display());
        assert!(error.starts_with(&file_and_key), "{error}");
        assert!(error.contains("MARS") && error.contains("USA_0"), "{error}");
    }
}
