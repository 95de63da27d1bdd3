//! The HTTP layer every geocount tier shares, whatever it replicates.
//!
//! Modules, leaves first:
//! - [`exposition`]: `GET /metrics` in the Prometheus text format 0.0.4 when asked for, and the
//!   process's resident memory.
//! - [`roles`]: how a tier process proves its name, and which processes a route between tiers
//!   accepts ([`Allow`]).
//! - [`access`]: the checks of client tokens and of the processes calling between tiers
//!   ([`Access`]).
//! - [`routing`]: matching a path and method to a route ([`routing::Endpoint`]: the methods it
//!   takes; any other is refused 405 with `Allow`) with its decoded parameters, checking its
//!   access (noting the process a call between tiers proved, [`routing::ProvenProcess`]) and
//!   answering the result ([`routing::answer`]), the refusals any route can give
//!   ([`RequestError`]), `GET /metrics`, a read's rolling-window query
//!   ([`routing::parse_read_query`]) and JSON objects whose keys keep their order ([`Named`]).
//! - [`top_query`]: the queries of `GET /topk`, `GET /trending` ([`TopQuery`]) and
//!   `GET /aggregate` ([`AggregateQuery`]).
//! - [`tls`]: a tier's TLS as its topology's `[tls]` says ([`tls::tier_tls`]).
//! - [`openapi`]: the OpenAPI documents every tier serves at `GET /openapi.json`, built from
//!   shared parts ([`ApiDoc`]) and rendered for the serving process's `[auth]`.

pub mod access;
pub mod exposition;
pub mod openapi;
pub mod roles;
pub mod routing;
pub mod tls;
pub mod top_query;

pub use access::{Access, AccessError, Caller, Need, TierRefusal};
pub use openapi::{ApiDoc, Operation};
pub use roles::{Allow, PROCESS_HEADER, PROCESS_KEY_HEADER, ProcessKeys};
pub use routing::{Named, RequestError};
pub use top_query::{
    AggregateQuery, TopQuery, parse_aggregate_query, parse_top_query, parse_trending_query,
};
