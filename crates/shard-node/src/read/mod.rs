//! What a shard node answers as a counter's world value (Redis `GET`/`MGET`/`PFCOUNT`, the
//! `INCR` reply, `GET /counter/{id}/world`).
//!
//! - [`world`]: the world value: this node's own datacenter computed here (its own slot as
//!   committed now and its copies of its peers' slots) plus the other datacenters' parts as the
//!   global aggregator last reported them, under the lifecycle rule every reader uses.
//! - [`parts`]: those other parts: cached per counter, refreshed when older than
//!   `shard.world_refresh_ms`, misses of many readers asked of the global tier in one
//!   `POST /parts`.

pub mod parts;
pub mod world;
