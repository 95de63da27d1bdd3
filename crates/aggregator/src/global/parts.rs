//! Each datacenter's part of a global answer, and the body of the 503 that refuses an answer
//! with stale datacenters. A leaf module: the crate's errors carry these bodies.

use geocount_http::routing::Named;
use geocount_sync::Ranked;
use serde::Serialize;

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

/// One datacenter's own top counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatacenterTop {
    /// Its counters ranked by its slots alone.
    pub top: Vec<Ranked>,
    /// Its staleness (`None`: never complete).
    pub staleness_ms: Option<u64>,
    /// Whether its aggregator ever answered.
    pub heard: bool,
}

/// One datacenter's own trending counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatacenterTrending {
    /// Its counters at or over the threshold by its slots alone.
    pub trending: Vec<Ranked>,
    /// Its staleness (`None`: never complete).
    pub staleness_ms: Option<u64>,
    /// Whether its aggregator ever answered.
    pub heard: bool,
}
