//! The model every geocount binary shares.
//!
//! A write travels: client → shard node (which owns one slot `DC_<dc>_VAL_<n>` of every counter)
//! → datacenter aggregator (sums its datacenter's slots) → global aggregator (sums datacenters).
//! Everything those processes must agree on lives here:
//!
//! - [`counter_id`]: what a counter id may be ([`CounterId`]).
//! - [`id_table`]: values keyed by counter id at stable indices ([`IdTable`]), what the slot
//!   table and the slot copies are built on.
//! - [`chunked`]: the append-only vector in fixed-size chunks an [`IdTable`] keeps its entries in
//!   ([`chunked::ChunkedVec`]), so that growing never copies them.
//! - [`slot_id`]: slot names ([`SlotId`]).
//! - [`slot`]: a slot's `(value, version)` state ([`SlotState`]) and its
//!   last-writer-wins merge, and overflow-checked deltas.
//! - [`counter`]: a counter's description (type, number of shards, window, creation time) and
//!   its versioned form ([`VersionedDescription`]) that every node merges.
//! - [`rights`]: a bounded counter's bounds ([`Bounds`]) and the rights its slots hold and
//!   move between them ([`RightsLedger`]).
//! - [`hlc`]: hybrid logical clock timestamps, the versions of descriptions.
//! - [`idempotency`]: what a keyed write did ([`IdempotencyRecord`]), logged by its owner and
//!   copied to its peers.
//! - [`hash`]: the fixed-seed hash placement, partitions and unique items are taken from.
//! - [`placement`]: consistent hashing of counters onto a datacenter's slots.
//! - [`partition`]: partitions of the counter space, which aggregators may hold a share of
//!   ([`Partitions`]).
//! - [`window`]: per-second hit buckets of a rolling window ([`Window`]), and the span a read
//!   asks of one ([`WindowQuery`]).
//! - [`history`]: rollups kept beyond the window, one per level a description asks for
//!   ([`HistoryLevel`], [`Rollup`]).
//! - [`top_k`]: how many counters a ranking may list ([`top_k::MAX_K`]).
//! - [`unique`]: the HyperLogLog sketch of a unique counter's slot ([`UniqueSketch`]).
//! - [`topology`]: the TOML topology file every binary and script reads ([`Topology`]).
//! - [`access`]: its `[auth]` section: client tokens and their rights, the cluster secret
//!   ([`AuthConfig`]).
//! - [`tls`]: its `[tls]` section: the CA and where each process's certificate and key are
//!   ([`TlsSettings`]).
//! - [`role`]: the processes of a cluster by name (`global`, `aggregator_<DC>`, a shard node's
//!   slot), and what each one is ([`Role`]): what the routes between tiers check, and what the
//!   launcher and the tests name processes, logs and certificates after.
//! - [`wire`]: the postcard messages that cross process boundaries: batched writes, and the
//!   sync pages every tier pulls from the one below (and descriptions from the one above).
//! - [`encode`]: postcard encoding without a `memmove` call per number ([`encode::to_vec`]), for
//!   a batch's answer.
//! - [`clock`]: the time seam ([`Clock`]), so simulations can inject time.
//! - [`error`]: this crate's error enum ([`ModelError`]).

pub mod access;
pub mod chunked;
pub mod clock;
pub mod counter;
pub mod counter_id;
pub mod encode;
pub mod error;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod hash;
pub mod held_bytes;
pub mod history;
pub mod hlc;
pub mod id_table;
pub mod idempotency;
pub mod partition;
pub mod placement;
pub mod rights;
pub mod role;
pub mod slot;
pub mod slot_id;
pub mod tls;
pub mod top_k;
pub mod topology;
pub mod unique;
pub mod window;
pub mod wire;

pub use access::{AuthConfig, Right, Secret, TokenConfig};
pub use clock::{Clock, OffsetClock, SystemClock};
pub use counter::{CounterDescription, CounterType, MAX_SHARDS_PER_COUNTER, VersionedDescription};
pub use counter_id::CounterId;
pub use error::ModelError;
pub use history::{HistoryLevel, Rollup, RollupChange};
pub use hlc::{Hlc, HlcTimestamp};
pub use id_table::IdTable;
pub use idempotency::IdempotencyRecord;
pub use partition::{Partitions, partition_of};
pub use placement::Placement;
pub use rights::{Bound, Bounds, RightsLedger, Room};
pub use role::Role;
pub use slot::{SlotRecord, SlotState, max_slot_version, next_slot_version};
pub use slot_id::SlotId;
pub use tls::TlsSettings;
pub use topology::{
    AggregatorSettings, DatacenterConfig, Durability, GlobalConfig, HttpSettings, RegionLink,
    RespSettings, Selection, ShardDefaults, SyncSettings, Topology, TopologyError, TrendingConfig,
    WanSettings,
};
pub use unique::UniqueSketch;
pub use window::{BucketSlice, Recorded, Window, WindowChange, WindowQuery};
pub use wire::{RightsAnswer, RightsMessage};
