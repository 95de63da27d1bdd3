//! The global tier: every datacenter's slots, a part each. It pulls `POST /sync` from each
//! datacenter aggregator every `sync.datacenter_to_global_ms`. Each datacenter's staleness is
//! how long ago it last had that datacenter's complete state; a read refuses (503) when a
//! datacenter is staler than it allows, unless it allows a partial answer, which then counts
//! the stale datacenters with their last known values and says it is not complete.
//! Datacenter aggregators pull counter descriptions down from it.
//!
//! Modules, leaves first:
//! - [`layout`]: which datacenter each slot and each source belongs to ([`Layout`]).
//! - [`staleness`]: the staleness rules its reads and rankings share: each datacenter's
//!   staleness, stale datacenters, and why ([`staleness::Freshness`]).
//! - [`query`]: the staleness keys (`max_staleness_ms`, `allow_partial`) its reads take.
//! - [`read`]: a counter's read: the sum over datacenters, complete or partial.
//! - [`trends`]: the world's and each datacenter's top-K and trending counters under the same
//!   staleness rules.
//! - [`sums`]: the world's and each datacenter's sum over an id prefix under the same
//!   staleness rules.
//! - [`datacenters`]: `GET /datacenters`.
//! - [`world`]: `POST /parts`: the other datacenters' parts of counters, for a shard node's
//!   world reads.
//! - [`status`]: `GET /status` and `GET /counter/{id}/rights`: each datacenter as heard here
//!   and as its aggregator sees its slots, for the status page.
//! - [`api`]: its routes and who may call them.
//!
//! Its metrics are named `geocount_global_<name>`; its sources are the datacenters, each named
//! as in the topology.

pub mod api;
pub mod datacenters;
pub mod history;
pub mod layout;
pub mod query;
pub mod read;
pub mod staleness;
pub mod status;
pub mod sums;
pub mod trends;
pub mod world;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use geocount_model::role::{GLOBAL_PROCESS, replica_name};
use geocount_model::wire::SyncRequest;
use geocount_model::{Clock, Partitions, Topology, TopologyError};
use geocount_net::{Connector, Listener};

use crate::core::{self, Core, Tier};
use crate::replica::{PullSource, SourceKind};
use crate::routes::{GLOBAL_ONLY, ROUTES};
use crate::settings::{Settings, SlotGroups, slot_names};
pub use layout::Layout;

/// The prefix of the global tier's metric names.
pub const METRICS_PREFIX: &str = "geocount_global";

/// One datacenter, as the global aggregator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datacenter {
    /// Its name, e.g. `USA_0`.
    pub name: String,
    /// Each replica of its aggregator, replica 0 first: where it listens and the partitions it
    /// holds.
    pub aggregators: Vec<(SocketAddr, Partitions)>,
    /// How many slots (shard nodes) it has.
    pub slots: usize,
}

/// Everything the global aggregator needs to run, resolved from the topology's `[global]`
/// (`geocount_model::GlobalConfig`) and the rest of it.
#[derive(Debug, Clone)]
pub struct GlobalSettings {
    /// A read whose datacenters are staler than this is refused unless partial answers are
    /// allowed (`global.max_staleness_ms`; the query's `max_staleness_ms` overrides it).
    pub max_staleness_ms: u64,
    /// The datacenters, in topology order.
    pub datacenters: Vec<Datacenter>,
    /// What every aggregator runs with; replica `n` listens on `global.listen` (0) or
    /// `global.replicas[n - 1]`.
    pub settings: Settings,
}

impl GlobalSettings {
    /// Global replica `replica` of `topology` (read from `file`); a replica the topology does
    /// not list is an error naming the file and `global.replicas`.
    pub fn from_topology(
        topology: &Topology,
        file: &Path,
        replica: usize,
    ) -> Result<Self, TopologyError> {
        let tier = topology.global.replicas_of(topology.partitions);
        let max_state_bytes = topology.aggregator.global_max_state_bytes;
        let at = (file, "global.replicas");
        let settings = Settings::of_replica(topology, at, tier, replica, max_state_bytes)?;
        Ok(Self {
            max_staleness_ms: topology.global.max_staleness_ms,
            datacenters: topology
                .datacenters
                .iter()
                .map(|dc| Datacenter {
                    name: dc.name.clone(),
                    aggregators: dc.aggregator_replicas_of(topology.partitions),
                    slots: dc.shards.len(),
                })
                .collect(),
            settings,
        })
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

    /// The index of the datacenter of each source and the source, by source index: every
    /// replica of each datacenter aggregator that holds every partition this replica holds
    /// (slot states and descriptions of those partitions), each pulled on its own every
    /// `sync.datacenter_to_global_ms`; datacenters in order, each one's replicas in order.
    pub fn datacenter_sources(&self) -> Vec<(usize, PullSource)> {
        let every = Duration::from_millis(self.settings.sync.datacenter_to_global_ms);
        let held = &self.settings.partitions;
        let mut sources = Vec::new();
        for (index, dc) in self.datacenters.iter().enumerate() {
            for (n, (address, theirs)) in dc.aggregators.iter().enumerate() {
                if !theirs.covers(held) {
                    continue;
                }
                let source = PullSource {
                    name: replica_name(&dc.name, n),
                    answers_as: dc.name.clone(),
                    kind: SourceKind::Aggregator,
                    address: address.to_string(),
                    interval: every,
                    first: SyncRequest {
                        partitions: held.filter(),
                        ..SyncRequest::from_start(true, true)
                    },
                    delivers: slot_names(&dc.name, dc.slots),
                };
                sources.push((index, source));
            }
        }
        sources
    }

    /// What it pulls ([`GlobalSettings::datacenter_sources`]).
    pub fn sources(&self) -> Vec<PullSource> {
        let sources = self.datacenter_sources().into_iter();
        sources.map(|(_, source)| source).collect()
    }
}

impl AsRef<Settings> for GlobalSettings {
    fn as_ref(&self) -> &Settings {
        &self.settings
    }
}

/// What the global tier's HTTP handlers share.
pub struct GlobalState {
    /// What either tier's handlers share.
    pub core: Core,
    /// The settings it runs with.
    pub settings: GlobalSettings,
    /// Which datacenter each slot and each source belongs to.
    pub layout: Layout,
}

/// Starts pulling every datacenter aggregator (connecting through `connector`), and serves
/// `listener` until `shutdown` completes; then stops the pullers and drains requests. Time
/// comes from `clock`.
pub async fn run<L: Listener>(
    global: GlobalSettings,
    listener: L,
    clock: Arc<dyn Clock>,
    connector: Connector,
    shutdown: impl Future<Output = ()>,
) {
    let (source_datacenters, sources): (Vec<usize>, Vec<PullSource>) =
        global.datacenter_sources().into_iter().unzip();
    let groups = global.slot_groups();
    let routes: Vec<_> = ROUTES.iter().chain(GLOBAL_ONLY).copied().collect();
    let tier = Tier {
        process: GLOBAL_PROCESS,
        sources: &sources,
        groups: &groups,
        byte_bound_key: "aggregator.global_max_state_bytes",
        metrics_prefix: METRICS_PREFIX,
        routes: &routes,
        fanout_timeout: crate::fanout::AGGREGATOR_TIMEOUT,
    };
    let (mut core, pullers) = core::start(tier, global.settings.clone(), clock, connector);
    core.metrics.bound_staleness(global.max_staleness_ms);
    let replica = global.settings.replica;
    tracing::info!(addr = %global.settings.listen, replica, sources = sources.len(), "serving");
    let settings = global.settings.clone();
    let state = Arc::new(GlobalState {
        core,
        layout: Layout {
            names: global
                .datacenters
                .iter()
                .map(|dc| dc.name.clone())
                .collect(),
            slot_datacenters: groups.part_of,
            source_datacenters,
            source_addresses: sources.iter().map(|s| s.address.clone()).collect(),
        },
        settings: global,
    });
    let handler = move |request| api::handle(state.clone(), request);
    core::serve(pullers, &settings, listener, handler, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_test_support::TestTopology;

    #[test]
    fn slots_are_numbered_across_datacenters_in_order() {
        let t = TestTopology::new(&[("USA_0", 2), ("ASIA_0", 1)], "");
        let global = GlobalSettings::from_topology(&t.topology, &t.path, 0).unwrap();
        assert_eq!(global.max_staleness_ms, t.topology.global.max_staleness_ms);
        assert_eq!(
            global.slot_names(),
            ["DC_USA_0_VAL_0", "DC_USA_0_VAL_1", "DC_ASIA_0_VAL_0"]
        );
        assert_eq!(global.slot_datacenters(), [0, 0, 1]);
        let sources = global.sources();
        assert_eq!(sources[1].name, "ASIA_0");
        assert_eq!(
            sources[1].address,
            t.topology.datacenters[1].aggregator.to_string()
        );
    }
}
