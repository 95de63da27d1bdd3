//! The geocount datacenter aggregator: it sums its datacenter's slots of every counter.
//!
//! It pulls `POST /sync` from each shard node of its datacenter every
//! `sync.shard_to_datacenter_ms` (slot states and descriptions) and from the global aggregator
//! every `sync.downward_ms` (descriptions flowing down), merges every page by version into
//! memory, and answers reads from memory alone: a read never waits on a shard. The global
//! aggregator pulls it in turn, and a shard node restoring a lost disk fetches its slot back
//! from it.
//!
//! It keeps no disk state. A restarted aggregator starts with empty copies and new cursors, so
//! each shard sends it a full copy again; until a shard has answered, its slot reads as never
//! heard (`staleness_ms: null`, `complete: false`).
//!
//! - [`config`]: the datacenter, its shards and the sync settings from the topology
//!   ([`AggregatorConfig`]), and the sources it pulls.
//! - [`state`]: what it holds ([`geocount_sync::Replica`]) and the rules it reads by: a slot's
//!   staleness is its shard's, the datacenter's the worst of its slots', a counter's value the
//!   sum of its slots.
//! - [`trends`]: top-K counters and trending counters (`/topk`, `/trending`).
//! - [`api`]: the routes.
//! - [`metrics`]: Prometheus text from its own registry.
//! - [`openapi`]: the OpenAPI document it serves at `GET /openapi.json`.
//! - [`error`]: every refusal and its HTTP status ([`AggregatorError`]).
//! - [`server::run`]: the pullers and the HTTP server on a listener, until shutdown.
//!
//! The pull loop and the sink that merges pages are shared with the global aggregator and live
//! in [`geocount_sync::replica`].

pub mod api;
pub mod config;
pub mod error;
pub mod metrics;
pub mod openapi;
pub mod server;
pub mod state;
pub mod trends;

pub use config::AggregatorConfig;
pub use error::AggregatorError;
pub use server::run;
