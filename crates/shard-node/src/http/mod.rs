//! The HTTP side of the node: where a write comes in, and what it is turned into.
//!
//! - [`routes`]: every path the node answers, and what each needs of a caller.
//! - [`api`]: the handlers: each checks access, decodes its request and hands it on (to
//!   forwarding, the commit loop, or the tables for reads), and answers.
//! - [`lifecycle`]: deletes, resets and expiries, made here or at the node a key picks.
//! - [`requests`]: decodes and checks what clients send (bodies, queries, keys, the forward
//!   mark) into the write vocabulary; the fuzz targets call it too.
//! - [`copies`]: what the node serves the processes that copy its slot: sync pages to its peers
//!   and its datacenter aggregator, and a restoring peer's copies.
//! - [`held`]: what the node keeps for its peers in `replicated` durability: their groups,
//!   appended to its logs of their slots, and those logs folded for a peer restoring.
//! - [`world`]: `GET /counter/{id}/world`, a counter's world value ([`crate::read`]).
//! - [`openapi`]: the API's OpenAPI document (`GET /openapi.json`).

pub(crate) mod api;
pub(crate) mod copies;
pub(crate) mod held;
pub(crate) mod lifecycle;
pub(crate) mod openapi;
pub mod requests;
pub mod routes;
pub(crate) mod world;
