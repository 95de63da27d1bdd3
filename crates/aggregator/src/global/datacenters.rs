//! `GET /datacenters`: each datacenter's aggregator, as the global tier hears it.

use geocount_http::routing::Named;
use serde::Serialize;

use super::GlobalSettings;
use super::layout::Layout;
use super::staleness::empty_readings;
use crate::replica::{Replica, SourceHealth};

/// One datacenter as `GET /datacenters` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatacenterStatus {
    /// Where the freshest replica of its aggregator listens: the one its part comes from.
    pub aggregator: String,
    /// Whether any replica of its aggregator ever answered.
    pub heard: bool,
    /// How long ago a replica last answered.
    pub last_heard_ms_ago: Option<u64>,
    /// How long ago this aggregator last had its complete state (`None`: never).
    pub staleness_ms: Option<u64>,
    /// Counters with any copy from it.
    pub counters: usize,
    /// The freshest replica's last pull failure, cleared by its next success.
    pub last_error: Option<String>,
    /// Each replica of its aggregator, by address: its own staleness and last failure.
    pub replicas: Named<SourceHealth>,
}

/// Every datacenter's status at `now_ms`. Counts counters by walking every copy: meant for an
/// operator's occasional look, not for a hot path.
pub fn datacenter_statuses(
    replica: &Replica,
    settings: &GlobalSettings,
    layout: &Layout,
    now_ms: u64,
) -> Named<DatacenterStatus> {
    let mut counters = vec![0usize; settings.datacenters.len()];
    // The last counter counted for each datacenter, so a counter counts once per datacenter.
    let mut counted = vec![usize::MAX; settings.datacenters.len()];
    for (n, (_, copies)) in replica.copies().iter().enumerate() {
        for (slot, _) in copies {
            let dc = layout.slot_datacenters[usize::from(*slot)];
            if counted[dc] != n {
                counted[dc] = n;
                counters[dc] += 1;
            }
        }
    }
    let readings = empty_readings(replica, layout, now_ms);
    (settings.datacenters.iter().enumerate())
        .zip(counters)
        .map(|((index, dc), counters)| {
            let sources: Vec<usize> = layout.sources_of(index).collect();
            let freshest = layout.freshest_source(replica, index, now_ms);
            let status = DatacenterStatus {
                aggregator: layout.source_addresses[freshest].clone(),
                heard: readings[index].heard,
                last_heard_ms_ago: (sources.iter())
                    .filter_map(|&s| replica.sources[s].last_heard_ms)
                    .max()
                    .map(|t| now_ms.saturating_sub(t)),
                staleness_ms: readings[index].staleness_ms,
                counters,
                last_error: replica.sources[freshest].last_error.clone(),
                replicas: (sources.iter())
                    .map(|&s| {
                        let address = layout.source_addresses[s].clone();
                        (address, replica.source_health(s, now_ms))
                    })
                    .collect(),
            };
            (dc.name.clone(), status)
        })
        .collect()
}
