//! The model every geocount binary shares.
//!
//! A write travels: client → shard node (which owns one slot `DC_<dc>_VAL_<n>` of every counter)
//! → datacenter aggregator (sums its datacenter's slots) → global aggregator (sums datacenters).
//! Everything those processes must agree on lives here:
//!
//! - [`counter_id`]: what a counter id may be ([`CounterId`]).
//! - [`slot`]: slot names ([`SlotId`]), a slot's `(value, version)` state ([`SlotState`]) and its
//!   last-writer-wins merge, and overflow-checked deltas.
//! - [`counter`]: a counter's description (type, number of shards, window, creation time).
//! - [`topology`]: the TOML topology file every binary and script reads ([`Topology`]).
//! - [`wire`]: the postcard messages that cross process boundaries (the batched write path).
//! - [`clock`]: the time seam ([`Clock`]), so simulations can inject time.
//! - [`error`]: this crate's error enum ([`ModelError`]).

pub mod clock;
pub mod counter;
pub mod counter_id;
pub mod error;
pub mod slot;
pub mod topology;
pub mod wire;

pub use clock::{Clock, SystemClock};
pub use counter::{CounterDescription, CounterType};
pub use counter_id::CounterId;
pub use error::ModelError;
pub use slot::{SlotId, SlotState};
pub use topology::{DatacenterConfig, Durability, ShardDefaults, Topology, TopologyError};
