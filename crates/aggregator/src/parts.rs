//! Each datacenter's part of a global answer, and the body of the 503 that refuses an answer
//! with stale datacenters: the crate's errors carry these bodies, so this module names no tier.

use geocount_http::routing::Named;
use serde::Serialize;

use crate::answers::Listed;

/// One datacenter's part of a counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatacenterReading {
    /// The sum of the datacenter's slots (its last known values when stale); for a unique
    /// counter, the estimate of the union of its slots' sketches.
    pub value: i128,
    /// The datacenter's staleness (`None`: never complete).
    pub staleness_ms: Option<u64>,
    /// Whether the datacenter's aggregator ever answered.
    pub heard: bool,
}

/// A read refused because datacenters are stale: the body of its 503 (`T`: what the read
/// reports per datacenter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StaleRead<T = DatacenterReading> {
    /// Which datacenters are stale and how.
    pub error: String,
    /// Their names.
    pub stale_datacenters: Vec<String>,
    /// Each datacenter's part, in topology order.
    pub datacenters: Named<T>,
}

/// One datacenter's own ranking: its counters ranked by its slots alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatacenterRanking {
    /// Its list, under the route's name (`top` or `trending`).
    #[serde(flatten)]
    pub list: Listed,
    /// Its staleness (`None`: never complete).
    pub staleness_ms: Option<u64>,
    /// Whether its aggregator ever answered.
    pub heard: bool,
}

/// One datacenter's sum over an id prefix (`GET /aggregate`): its slots alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DatacenterSum {
    /// The sum of its sum counters with the prefix (its last known values when stale).
    pub sum: i128,
    /// How many of those counters its slots hold.
    pub counters: u64,
    /// Its staleness (`None`: never complete).
    pub staleness_ms: Option<u64>,
    /// Whether its aggregator ever answered.
    pub heard: bool,
}
