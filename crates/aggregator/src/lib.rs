//! The geocount aggregators: one library for both aggregation tiers. The datacenter tier sums
//! one datacenter's slots of every counter; the global tier sums every datacenter's. Both pull
//! `POST /sync` from the tier below, merge every page by version into memory, and answer reads
//! from memory alone: a read never waits on the tier below, so it stays fast while a shard or
//! a datacenter is unreachable.
//!
//! What tells the tiers apart is how their slots group into parts ([`SlotGroups`]): the
//! datacenter tier holds its datacenter's slots as one part and each slot's staleness is its
//! shard's; the global tier holds every datacenter's slots, a part each, and each part's
//! staleness is its datacenter's. The top-K index ranks every part besides all slots.
//!
//! Neither keeps disk state. A restarted aggregator starts with empty copies and new cursors,
//! so the tier below sends it a full copy again; until a source has answered, its part reads
//! as never heard (`staleness_ms: null`, `complete: false`).
//!
//! Modules, leaves first:
//! - [`settings`]: what both tiers read from the topology ([`Settings`]) and [`SlotGroups`].
//! - [`routes`]: the endpoints both tiers route ([`routes::Route`]).
//! - [`lifecycle`]: the rule every read goes by: whether a counter exists (reset, delete,
//!   expiry) and which of its records count ([`lifecycle::Life`]).
//! - [`answers`]: the parts of an answer both tiers give alike: a counter's total, a ranking,
//!   what the aggregator holds.
//! - [`parts`]: each datacenter's part of a global answer and a stale read's 503 body.
//! - [`replica`]: what an aggregator holds of the tier below ([`replica::Replica`]): its copies,
//!   the one path a pulled page takes into them, the pullers that feed it, the top-K index
//!   beside the copies, ranking and sum scans and metrics.
//! - [`error`]: every refusal and its HTTP status ([`AggregatorError`]).
//! - [`openapi`]: the OpenAPI document each tier serves at `GET /openapi.json`.
//! - [`fanout`]: what the status routes ask of the tier below, many processes at once with a
//!   short timeout.
//! - [`page`]: the status page both tiers serve at `GET /`.
//! - [`ranking`]: what a ranking asks of a replica, and how replicas ask each other for parts.
//! - [`aggregate`]: the answer to a sum over an id prefix (`GET /aggregate`) and how its parts
//!   add.
//! - [`core`](mod@crate::core): what both tiers run alike ([`core::Core`]):
//!   the pullers, the top-K index, the answers that do not depend on the tier (metrics, slot
//!   copies, `POST /sync`, rankings, sums), and partitions held by the tier's other replicas
//!   (reads redirected there, rankings and sums merged from every group's part).
//! - [`datacenter`]: the datacenter tier ([`DatacenterSettings`], [`datacenter::run`]).
//! - [`global`]: the global tier, with its staleness rules, `allow_partial` and
//!   `GET /datacenters` ([`GlobalSettings`], [`global::run`]).
//! - [`history`]: `GET /counter/{id}/history` at both tiers.
//! - [`process`]: what the two binaries (`datacenter-aggregator`, `global-aggregator`) share.
//!
//! The pull loop and the tables it fills are `geocount_sync`'s; rankings are
//! `geocount_ranking`'s.

pub mod aggregate;
pub mod answers;
pub mod core;
pub mod datacenter;
pub mod error;
pub mod fanout;
pub mod global;
pub mod history;
pub mod lifecycle;
pub mod openapi;
pub mod page;
pub mod parts;
pub mod process;
pub mod ranking;
pub mod replica;
pub mod routes;
pub mod settings;

pub use datacenter::DatacenterSettings;
pub use error::AggregatorError;
pub use global::GlobalSettings;
pub use settings::{Settings, SlotGroups};
