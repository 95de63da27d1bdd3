//! The global tier: every datacenter's slots, a part each. It pulls `POST /sync` from each
//! datacenter aggregator every `sync.datacenter_to_global_ms`. Each datacenter's staleness is
//! how long ago it last had that datacenter's complete state; a read refuses (503) when a
//! datacenter is staler than it allows, unless it allows a partial answer, which then counts
//! the stale datacenters with their last known values and says it is not complete.
//! Datacenter aggregators pull counter descriptions down from it.
//!
//! - [`state`]: the read rules: per-datacenter sums, stale datacenters, complete or partial
//!   answers, and `GET /datacenters`.
//! - [`parts`]: each datacenter's part of an answer, and the body of a stale read's 503.
//! - [`trends`]: the world's and each datacenter's top-K and trending counters under the same
//!   staleness rules.
//! - [`query`]: the staleness keys (`max_staleness_ms`, `allow_partial`) its reads take.
//! - [`api`]: its routes and who may call them.
//!
//! Its metrics are named `geocount_global_<name>`; its sources are the datacenters, each named
//! as in the topology.

pub mod api;
pub mod parts;
pub mod query;
pub mod state;
pub mod trends;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use geocount_model::role::GLOBAL_PROCESS;
use geocount_model::{Clock, Topology};
use geocount_net::{Connector, Listener};
use geocount_sync::PullSource;

use crate::routes::{GLOBAL_ONLY, ROUTES};
use crate::settings::{Settings, SlotGroups, slot_names};
use crate::tier::{self, Tier};
use state::GlobalState;

/// The prefix of the global tier's metric names.
pub const METRICS_PREFIX: &str = "geocount_global";

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
pub struct GlobalConfig {
    /// A read whose datacenters are staler than this is refused unless partial answers are
    /// allowed (`global.max_staleness_ms`; the query's `max_staleness_ms` overrides it).
    pub max_staleness_ms: u64,
    /// The datacenters, in topology order.
    pub datacenters: Vec<Datacenter>,
    /// What every aggregator runs with; it listens on `global.listen`.
    pub settings: Settings,
}

impl GlobalConfig {
    /// The global aggregator of `topology`.
    pub fn from_topology(topology: &Topology) -> Self {
        let max_state_bytes = topology.aggregator.global_max_state_bytes;
        Self {
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
            settings: Settings::from_topology(topology, topology.global.listen, max_state_bytes),
        }
    }

    /// Every slot of the topology, each datacenter a part: datacenters in order, each one's
    /// slots in order.
    pub fn slot_groups(&self) -> SlotGroups {
        SlotGroups::of_datacenters(
            self.datacenters
                .iter()
                .map(|dc| (dc.name.as_str(), dc.slots)),
        )
    }

    /// Every slot of the topology by index: datacenters in order, each one's slots in order.
    pub fn slot_names(&self) -> Vec<String> {
        self.slot_groups().names
    }

    /// The index of the datacenter of each slot, by slot index.
    pub fn slot_datacenters(&self) -> Vec<usize> {
        self.slot_groups().part_of
    }

    /// What it pulls: each datacenter aggregator (slot states and descriptions; source `n` is
    /// datacenter `n`) every `sync.datacenter_to_global_ms`.
    pub fn sources(&self) -> Vec<PullSource> {
        self.datacenters
            .iter()
            .map(|dc| PullSource {
                name: dc.name.clone(),
                address: dc.aggregator.to_string(),
                interval: Duration::from_millis(self.settings.sync.datacenter_to_global_ms),
                slots: true,
                descriptions: true,
                delivers: slot_names(&dc.name, dc.slots),
            })
            .collect()
    }
}

/// Starts pulling every datacenter aggregator (connecting through `connector`), and serves
/// `listener` until `shutdown` completes; then stops the pullers and drains requests. Time
/// comes from `clock`.
pub async fn run<L: Listener>(
    config: GlobalConfig,
    listener: L,
    clock: Arc<dyn Clock>,
    connector: Connector,
    shutdown: impl Future<Output = ()>,
) {
    let sources = config.sources();
    let groups = config.slot_groups();
    let routes: Vec<_> = ROUTES.iter().chain(GLOBAL_ONLY).copied().collect();
    let tier = Tier {
        process: GLOBAL_PROCESS,
        sources: &sources,
        groups: &groups,
        byte_bound_key: "aggregator.global_max_state_bytes",
        metrics_prefix: METRICS_PREFIX,
        routes: &routes,
    };
    let (core, pullers) = tier::start(tier, config.settings.clone(), clock, connector);
    tracing::info!(addr = %config.settings.listen, datacenters = sources.len(), "serving");
    let settings = config.settings.clone();
    let state = Arc::new(GlobalState {
        core,
        names: sources.into_iter().map(|source| source.name).collect(),
        slot_datacenters: groups.part_of,
        config,
    });
    let handler = move |request| api::handle(state.clone(), request);
    tier::serve(pullers, &settings, listener, handler, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_test_support::TestTopology;

    #[test]
    fn slots_are_numbered_across_datacenters_in_order() {
        let t = TestTopology::new(&[("USA_0", 2), ("ASIA_0", 1)], "");
        let config = GlobalConfig::from_topology(&t.topology);
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
