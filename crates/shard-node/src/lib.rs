//! The geocount shard node: it owns slot `DC_<dc>_VAL_<n>` of every counter.
//!
//! A write's path through this crate, one folder per stage:
//!
//! - [`http`]: the request's path picks its route and what the caller must be allowed; the
//!   handler decodes and checks the body, query and keys into the [`write`] vocabulary every
//!   later stage names a write with ([`write::WriteRequest`]).
//! - [`node`]: the node's composition ([`node::NodeState`]) every handler shares, and the one
//!   way a write reaches the commit loop ([`node::submit`]), for HTTP, Redis and forwarded
//!   writes alike.
//! - [`resp`]: the Redis protocol beside [`http`] on the node's `resp` address: the same
//!   writes, lifecycle changes and access rights in Redis's commands and words.
//! - [`route`]: the slot the write goes to (consistent hashing over the datacenter's slots); a
//!   write for another node's slot is forwarded there, one for this node's goes to the commit
//!   loop.
//! - [`engine`]: the single-writer commit loop groups waiting writes, stages each against the
//!   committed state, appends the group to the write-ahead log and fsyncs once, then installs
//!   it in the slot table reads are served from and answers; a checkpointer folds closed log
//!   segments into the store.
//! - [`rights`]: a bounded counter's write its slot lacks the rights for asks the counter's
//!   other slots for rights (this datacenter's first) and is tried again; other nodes' asks
//!   are answered here.
//! - [`peer`]: the committed write reaches the datacenter's other nodes as they pull this
//!   node's slot (served by [`http`]); this node pulls theirs in turn (its peer copies, so that a
//!   peer that loses its disk can restore from them) and the counters' descriptions.
//! - [`read`]: a counter's world value, as Redis reads and `GET /counter/{id}/world` answer
//!   it: this datacenter's slots as this node holds them, the others' as the global tier
//!   reports them.
//! - [`startup`]: before the first write, the node rebuilds from its store and log exactly what
//!   was acknowledged, or restores a lost disk's slot from its datacenter's copies.
//!
//! Around them: [`server::run`] wires the stages to a listener (the binary and tests call it),
//! [`config`] resolves the node's slot from the topology, [`storage`] is the seam the log, the
//! store and the engine's workers run on (the OS's disk and threads in production, a simulated
//! host's under simulation), [`health`] holds what `/healthz` reports (set by the engine and the
//! peer pulls), [`metrics`] exports Prometheus text, and [`error`] maps every failure to its
//! HTTP status. [`check`] reads a data directory offline (`shard-node check`) without changing
//! it.

pub mod check;
pub(crate) mod config;
pub mod engine;
pub mod error;
pub mod health;
pub mod http;
pub mod metrics;
pub(crate) mod node;
pub(crate) mod peer;
pub mod read;
pub(crate) mod resp;
pub mod rights;
pub(crate) mod route;
pub(crate) mod server;
pub mod startup;
pub mod storage;
pub mod write;

pub use config::{NodeConfig, RestoreMode};
pub use error::{ShardError, StorageError};
pub use server::{run, run_with_resp};
pub use storage::{AppendFile, Disk, OsDisk, Storage, Workers};
