//! The global aggregator's resolved configuration: where it listens, every datacenter's
//! aggregator and slots, and the sync settings.

use std::net::SocketAddr;
use std::time::Duration;

use geocount_model::{AuthConfig, HttpSettings, SlotId, SyncSettings, Topology, TrendingConfig};
use geocount_sync::PullSource;

/// One datacenter, as the global aggregator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datacenter {
    /// Its name, e.g. `USA_0`.
    pub name: String,
    /// Where its aggregator listens.
    pub aggregator: SocketAddr,
    /// How many slots (shard nodes) it has.
    pub slots: usize,
}

/// Everything the global aggregator needs to run.
#[derive(Debug, Clone)]
pub struct GlobalAggregatorConfig {
    /// Where it listens (`global.listen`).
    pub listen: SocketAddr,
    /// A read whose datacenters are staler than this is refused unless partial answers are
    /// allowed (`global.max_staleness_ms`; the query's `max_staleness_ms` overrides it).
    pub max_staleness_ms: u64,
    /// The datacenters, in topology order.
    pub datacenters: Vec<Datacenter>,
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
    /// The most bytes of copies it holds (`aggregator.global_max_state_bytes`).
    pub max_state_bytes: u64,
    /// Client tokens and the cluster secret (`[auth]`).
    pub auth: AuthConfig,
    /// Whether the topology has `[tls]`: the other tiers then prove their process by client
    /// certificate when they call this one.
    pub certificates: bool,
}

impl GlobalAggregatorConfig {
    /// The global aggregator of `topology`.
    pub fn from_topology(topology: &Topology) -> Self {
        Self {
            listen: topology.global.listen,
            max_staleness_ms: topology.global.max_staleness_ms,
            datacenters: topology
                .datacenters
                .iter()
                .map(|dc| Datacenter {
                    name: dc.name.clone(),
                    aggregator: dc.aggregator,
                    slots: dc.shards.len(),
                })
                .collect(),
            sync: topology.sync.clone(),
            default_window_seconds: topology.shard.default_window_seconds,
            trending: topology.trending.clone(),
            http: topology.http.clone(),
            huge_pages: topology.memory.huge_pages,
            max_state_bytes: topology.aggregator.global_max_state_bytes,
            auth: topology.auth.clone(),
            certificates: topology.tls.is_some(),
        }
    }

    /// Every slot of the topology by index: datacenters in order, each one's slots in order.
    pub fn slot_names(&self) -> Vec<String> {
        self.datacenters
            .iter()
            .flat_map(|dc| {
                (0..dc.slots).map(|n| SlotId::new(dc.name.as_str(), n as u32).to_string())
            })
            .collect()
    }

    /// The index of the datacenter of each slot, by slot index.
    pub fn slot_datacenters(&self) -> Vec<usize> {
        self.datacenters
            .iter()
            .enumerate()
            .flat_map(|(index, dc)| std::iter::repeat_n(index, dc.slots))
            .collect()
    }

    /// What it pulls: each datacenter aggregator (slot states and descriptions; source `n` is
    /// datacenter `n`) every `sync.datacenter_to_global_ms`.
    pub fn sources(&self) -> Vec<PullSource> {
        self.datacenters
            .iter()
            .map(|dc| PullSource {
                name: dc.name.clone(),
                address: dc.aggregator.to_string(),
                interval: Duration::from_millis(self.sync.datacenter_to_global_ms),
                slots: true,
                descriptions: true,
                delivers: (0..dc.slots)
                    .map(|n| SlotId::new(dc.name.as_str(), n as u32).to_string())
                    .collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_test_support::TestTopology;

    #[test]
    fn slots_are_numbered_across_datacenters_in_order() {
        let t = TestTopology::new(&[("USA_0", 2), ("ASIA_0", 1)], "");
        let config = GlobalAggregatorConfig::from_topology(&t.topology);
        assert_eq!(config.max_staleness_ms, t.topology.global.max_staleness_ms);
        assert_eq!(
            config.slot_names(),
            ["DC_USA_0_VAL_0", "DC_USA_0_VAL_1", "DC_ASIA_0_VAL_0"]
        );
        assert_eq!(config.slot_datacenters(), [0, 0, 1]);
        let sources = config.sources();
        assert_eq!(sources[1].name, "ASIA_0");
        assert_eq!(
            sources[1].address,
            t.topology.datacenters[1].aggregator.to_string()
        );
    }
}
