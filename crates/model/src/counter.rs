//! A counter's description: what it counts and how it is spread over slots.

use serde::{Deserialize, Serialize};

use crate::{CounterId, HlcTimestamp};

/// What a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CounterType {
    /// A running total of signed deltas.
    #[default]
    Sum,
    /// The number of distinct items written, estimated by a HyperLogLog sketch per slot
    /// ([`crate::UniqueSketch`]); its writes carry an item, never a delta.
    Unique,
}

/// The description of a counter, returned by `POST /counter`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterDescription {
    /// The counter's id.
    pub id: CounterId,
    /// What it counts.
    #[serde(rename = "type")]
    pub counter_type: CounterType,
    /// How many of its datacenter's slots take its writes (capped at the datacenter's slot
    /// count); grows while the counter is hot.
    pub number_of_shards: u32,
    /// The `numberOfShards` it was created with: it never shrinks below this.
    pub base_number_of_shards: u32,
    /// The length of its rolling window, in seconds.
    pub window_seconds: u32,
    /// When it was created, in milliseconds since the unix epoch.
    pub created_at_ms: u64,
}

/// A description with the version every node orders changes by (last writer wins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionedDescription {
    /// The description.
    pub description: CounterDescription,
    /// When and where it was last changed.
    pub version: HlcTimestamp,
}

impl VersionedDescription {
    /// Whether `other` should replace `self`: a later version wins.
    pub fn is_older_than(&self, other: &VersionedDescription) -> bool {
        self.version < other.version
    }
}
