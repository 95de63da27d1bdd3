//! The topology file: which datacenters exist, where their aggregators and shard nodes listen,
//! and the settings of each tier.
//!
//! Read with figment from TOML; any key can be overridden from the environment with a
//! `GEOCOUNT_` prefix and `__` between levels (`GEOCOUNT_SHARD__DURABILITY=async`). Every error
//! names the file and the key ([`TopologyError`]).
//!
//! - `schema`: the sections and keys, their defaults and bounds, and the lookups the binaries
//!   make in a loaded topology.
//! - `shard`: the `[shard]` section, every shard node's settings.
//! - `durability`: when a shard node acknowledges a write, and the shard count it needs.
//! - `validate`: what serde cannot check (names, sizes, duplicate addresses, bounds, the WAN).
//! - `resp`: the Redis protocol's addresses (`datacenters[i].resp`) and limits (`[resp]`).
//! - `partitions`: which partitions of the counter space each aggregator replica holds.
//! - `load`: reading a file or a string, environment overrides, one-line errors.

mod durability;
mod load;
mod partitions;
mod resp;
mod schema;
mod shard;
mod validate;

pub use crate::error::TopologyError;
pub use durability::Durability;
pub use partitions::MAX_PARTITIONS;
pub use resp::{MAX_RESP_FRAME_BYTES, MIN_RESP_FRAME_BYTES, RespSettings};
pub use schema::{
    AggregatorSettings, DatacenterConfig, GlobalConfig, HttpSettings, MAX_CONCURRENT_SCANS,
    MAX_VIRTUAL_NODES, MAX_WAN_DELAY_MS, MIN_COUNTER_BYTES, MemorySettings, RegionLink,
    SyncSettings, TrendingConfig, WanSettings,
};
pub use shard::{HistoryLevelConfig, Selection, ShardDefaults};

use serde::{Deserialize, Serialize};

use crate::access::AuthConfig;
use crate::tls::TlsSettings;

/// The whole topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// The global aggregator.
    pub global: GlobalConfig,
    /// Settings shared by every shard node.
    #[serde(default)]
    pub shard: ShardDefaults,
    /// How often each tier pulls from its neighbours.
    #[serde(default)]
    pub sync: SyncSettings,
    /// The datacenters; each runs one aggregator and one shard node per slot.
    pub datacenters: Vec<DatacenterConfig>,
    /// What `GET /trending` lists at both aggregators.
    #[serde(default)]
    pub trending: TrendingConfig,
    /// The WAN `geocount-cluster --wan` emulates between regions; the tiers ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wan: Option<WanSettings>,
    /// TLS between every tier (`[tls]`); plain HTTP without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSettings>,
    /// Limits of every tier's HTTP listener: connections and slow clients.
    #[serde(default)]
    pub http: HttpSettings,
    /// Who may call the client API, and the secret between tiers (docs/operations.md, "Access").
    #[serde(default)]
    pub auth: AuthConfig,
    /// How every tier's process uses memory (`[memory]`).
    #[serde(default)]
    pub memory: MemorySettings,
    /// How much state each aggregator holds (`[aggregator]`).
    #[serde(default)]
    pub aggregator: AggregatorSettings,
    /// Limits of every shard node's RESP listener (`[resp]`).
    #[serde(default)]
    pub resp: RespSettings,
    /// How many partitions the counter space is split into (by placement hash); each
    /// aggregator replica may hold only some (`global.partitions`,
    /// `datacenters[i].aggregator_partitions`). Default 1: every aggregator holds every
    /// counter. At most 1024.
    #[serde(default = "one_partition")]
    pub partitions: u32,
}

fn one_partition() -> u32 {
    1
}

#[cfg(test)]
mod tests;
