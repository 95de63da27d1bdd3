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
    MAX_VIRTUAL_NODES, MAX_WAN_DELAY_MS, MIN_COUNTER_BYTES, MemorySettings, RegionLink, Selection,
    SyncSettings, Topology, TrendingConfig, WanSettings,
};
pub use shard::{HistoryLevelConfig, ShardDefaults};

#[cfg(test)]
mod tests;
