//! The datacenter tier: one datacenter's slots in one part. It pulls `POST /sync` from each
//! shard node of its datacenter every `sync.shard_to_datacenter_ms` (slot states and
//! descriptions) and from the global aggregator every `sync.downward_ms` (descriptions flowing
//! down). The global aggregator pulls it in turn, and a shard node restoring a lost disk
//! fetches its slot back from it.
//!
//! - [`state`]: the read rules: a slot's staleness is its shard's, the datacenter's the worst
//!   of its slots', a counter's value the sum of its slots.
//! - [`trends`]: the datacenter's top-K and trending counters.
//! - [`status`]: `GET /status` and `GET /counter/{id}/rights`: each slot as this aggregator
//!   and its shard node see it, for the status page.
//! - [`api`]: its routes and who may call them.
//!
//! Its metrics are named `geocount_datacenter_<name>`; its sources are its shards, each named
//! by its slot, and `global`.

pub mod api;
pub mod history;
pub mod state;
pub mod status;
pub mod trends;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use geocount_model::role::{GLOBAL_PROCESS, aggregator_process, replica_name};
use geocount_model::wire::SyncRequest;
use geocount_model::{Clock, Durability, Partitions, Topology, TopologyError};
use geocount_net::{Connector, Listener};

use crate::replica::{PullSource, SourceKind};

use crate::core::{self, Tier};
use crate::routes::ROUTES;
use crate::settings::{Settings, SlotGroups, slot_names};
use state::DatacenterState;

/// The prefix of the datacenter tier's metric names.
pub const METRICS_PREFIX: &str = "geocount_datacenter";

/// Everything a datacenter aggregator needs to run, resolved from its datacenter's entry in
/// the topology (`geocount_model::DatacenterConfig`) and the rest of it.
#[derive(Debug, Clone)]
pub struct DatacenterSettings {
    /// The datacenter's name, e.g. `USA_0`.
    pub datacenter: String,
    /// Its shard nodes; the one at index `n` owns slot `DC_<datacenter>_VAL_<n>`.
    pub shards: Vec<SocketAddr>,
    /// When its shard nodes acknowledge a write.
    pub durability: Durability,
    /// Every global aggregator replica, which it pulls descriptions from, with the partitions
    /// each holds.
    pub global: Vec<(SocketAddr, Partitions)>,
    /// What every aggregator runs with; replica `n` listens on the datacenter's `aggregator`
    /// (0) or `aggregator_replicas[n - 1]`.
    pub settings: Settings,
}

impl DatacenterSettings {
    /// Resolves replica `replica` of datacenter `datacenter`'s aggregator in a topology read
    /// from `file`; an unknown datacenter or replica is an error naming the file and the key.
    pub fn from_topology(
        topology: &Topology,
        file: &Path,
        datacenter: &str,
        replica: usize,
    ) -> Result<Self, TopologyError> {
        let dc = topology
            .datacenter(datacenter)
            .map_err(|message| TopologyError {
                file: file.to_owned(),
                key: "datacenters".to_owned(),
                message,
            })?;
        let index = topology.datacenter_index(&dc.name).expect("found by name");
        let key = format!("datacenters[{index}].aggregator_replicas");
        let tier = dc.aggregator_replicas_of(topology.partitions);
        let max_state_bytes = topology.aggregator.datacenter_max_state_bytes;
        let at = (file, key.as_str());
        let settings = Settings::of_replica(topology, at, tier, replica, max_state_bytes)?;
        Ok(Self {
            datacenter: dc.name.clone(),
            shards: dc.shards.clone(),
            durability: dc.durability(&topology.shard),
            global: topology.global.replicas_of(topology.partitions),
            settings,
        })
    }

    /// The datacenter's slot names, by index.
    pub fn slot_names(&self) -> Vec<String> {
        slot_names(&self.datacenter, self.shards.len())
    }

    /// What it pulls, of the partitions it holds: each shard node (slot states and
    /// descriptions; source `n` is slot `n`), then every global aggregator replica holding
    /// some of them (descriptions only, flowing down).
    pub fn sources(&self) -> Vec<PullSource> {
        let every = Duration::from_millis;
        let sync = &self.settings.sync;
        let held = &self.settings.partitions;
        let mut sources: Vec<PullSource> = self
            .slot_names()
            .into_iter()
            .zip(&self.shards)
            .map(|(name, addr)| PullSource {
                delivers: vec![name.clone()],
                answers_as: name.clone(),
                kind: SourceKind::Shard,
                name,
                address: addr.to_string(),
                interval: every(sync.shard_to_datacenter_ms),
                first: SyncRequest {
                    partitions: held.filter(),
                    ..SyncRequest::from_start(true, true)
                },
            })
            .collect();
        for (n, (global, theirs)) in self.global.iter().enumerate() {
            let both = Partitions {
                count: held.count,
                held: (held.held.iter().copied())
                    .filter(|p| theirs.held.contains(p))
                    .collect(),
            };
            if both.held.is_empty() {
                continue;
            }
            sources.push(PullSource {
                name: replica_name(GLOBAL_PROCESS, n),
                answers_as: GLOBAL_PROCESS.to_owned(),
                kind: SourceKind::Aggregator,
                address: global.to_string(),
                interval: every(sync.downward_ms),
                first: SyncRequest {
                    partitions: both.filter(),
                    ..SyncRequest::from_start(false, true)
                },
                delivers: Vec::new(),
            });
        }
        sources
    }
}

impl AsRef<Settings> for DatacenterSettings {
    fn as_ref(&self) -> &Settings {
        &self.settings
    }
}

/// Starts pulling every shard of the datacenter and the global aggregator (connecting through
/// `connector`), and serves `listener` until `shutdown` completes; then stops the pullers and
/// drains requests. Time comes from `clock`.
pub async fn run<L: Listener>(
    dc: DatacenterSettings,
    listener: L,
    clock: Arc<dyn Clock>,
    connector: Connector,
    shutdown: impl Future<Output = ()>,
) {
    let groups = SlotGroups::of_datacenters([(dc.datacenter.as_str(), dc.shards.len())]);
    let process = aggregator_process(&dc.datacenter);
    let tier = Tier {
        process: &process,
        sources: &dc.sources(),
        groups: &groups,
        byte_bound_key: "aggregator.datacenter_max_state_bytes",
        metrics_prefix: METRICS_PREFIX,
        routes: ROUTES,
        fanout_timeout: crate::fanout::SHARD_TIMEOUT,
    };
    let (core, pullers) = core::start(tier, dc.settings.clone(), clock, connector);
    let replica = dc.settings.replica;
    tracing::info!(addr = %dc.settings.listen, datacenter = %dc.datacenter, replica, "serving");
    let settings = dc.settings.clone();
    let state = Arc::new(DatacenterState {
        core,
        slot_names: groups.names,
        shards: dc.shards,
        durability: dc.durability,
        datacenter: dc.datacenter,
    });
    let handler = move |request| api::handle(state.clone(), request);
    core::serve(pullers, &settings, listener, handler, shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_test_support::TestTopology;

    #[test]
    fn resolves_its_datacenter_and_sources() {
        let t = TestTopology::new(&[("ASIA_0", 1), ("USA_0", 2)], "");
        let dc = DatacenterSettings::from_topology(&t.topology, &t.path, "USA_0", 0).unwrap();
        assert_eq!(dc.settings.listen, t.topology.datacenters[1].aggregator);
        assert_eq!(dc.slot_names(), ["DC_USA_0_VAL_0", "DC_USA_0_VAL_1"]);
        let sources = dc.sources();
        assert_eq!(sources.len(), 3, "two shards, then the global aggregator");
        assert_eq!(sources[1].address, t.shard_addr("USA_0", 1).to_string());
        assert_eq!(sources[1].first, SyncRequest::from_start(true, true));
        assert_eq!(sources[2].address, t.topology.global.listen.to_string());
        assert_eq!(
            sources[2].first,
            SyncRequest::from_start(false, true),
            "descriptions only, of every counter"
        );
    }

    #[test]
    fn an_unknown_datacenter_names_file_and_key() {
        let t = TestTopology::new(&[("USA_0", 1)], "");
        let error = DatacenterSettings::from_topology(&t.topology, &t.path, "MARS", 0)
            .unwrap_err()
            .to_string();
        let file_and_key = format!("{}: datacenters: ", t.path.display());
        assert!(error.starts_with(&file_and_key), "{error}");
        assert!(error.contains("MARS") && error.contains("USA_0"), "{error}");
    }
}
