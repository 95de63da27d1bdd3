//! The geocount global aggregator: it sums every datacenter of every counter.
//!
//! It pulls `POST /sync` from each datacenter aggregator every `sync.datacenter_to_global_ms`,
//! merges every page by version into memory, and answers reads from memory alone: a read
//! never waits on a datacenter, so it stays fast while one is unreachable. Each datacenter's
//! staleness is how long ago this aggregator last had its complete state; a read refuses (503)
//! when a datacenter is staler than it allows, unless it allows a partial answer, which then
//! counts the stale datacenters with their last known values and says it is not complete.
//! Datacenter aggregators pull counter descriptions down from it.
//!
//! It keeps no disk state: a restarted global aggregator pulls everything again.
//!
//! - [`config`]: the datacenters and their slots, numbered across the topology
//!   ([`GlobalAggregatorConfig`]), and the sources it pulls.
//! - [`state`]: what it holds ([`geocount_sync::Replica`]) and the read rules: per-datacenter
//!   sums, stale datacenters, complete or partial answers.
//! - [`trends`]: the world's and each datacenter's top-K and trending counters (`/topk`,
//!   `/trending`) under the same staleness rules.
//! - [`api`]: the routes and their query parameters.
//! - [`metrics`]: Prometheus text from its own registry.
//! - [`openapi`]: the OpenAPI document it serves at `GET /openapi.json`.
//! - [`error`]: every refusal and its HTTP status ([`GlobalError`]).
//! - [`server::run`]: the pullers and the HTTP server on a listener, until shutdown.
//!
//! The pull loop and the sink that merges pages are shared with the datacenter aggregator and
//! live in [`geocount_sync::replica`].

pub mod api;
pub mod config;
pub mod error;
pub mod metrics;
pub mod openapi;
pub mod server;
pub mod state;
pub mod trends;

pub use config::GlobalAggregatorConfig;
pub use error::GlobalError;
pub use server::run;
