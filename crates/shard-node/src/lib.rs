//! The geocount shard node: it owns slot `DC_<dc>_VAL_<n>` of every counter.
//!
//! A write's path through this crate, one file per step:
//!
//! - [`routes`]: the request's path picks its handler and what the caller must be allowed.
//! - [`api`]: the handler parses and validates it ([`requests`] decodes and checks the bodies,
//!   queries and keys, scoped by the token that sent them in [`key_scope`]) into the
//!   [`write`] vocabulary every later step names a write with.
//! - [`forward`]: sends each write to the node of the slot [`routing`] picks for it (consistent
//!   hashing; [`hot`] spreads hot counters over more slots), or, when that is this node, through
//!   [`state`] (what the handlers share) to the commit loop as a [`write::Command`].
//! - [`commit`]: the single-writer commit loop groups waiting writes and stages each against the
//!   committed state (overflow, [`idempotency`] keys, the [`budget`] of bytes held, a new
//!   version), then
//! - [`wal`]: appends the group to the write-ahead log and fsyncs once (group commit); then
//! - [`slot_table`]: the commit loop installs the result in the in-memory table that reads are
//!   served from, and answers.
//! - [`checkpoint`]: a worker folds closed log segments into the [`store`] (redb) and deletes
//!   them.
//! - [`recovery`]: at startup, reads the store and the log as plain records, and [`resume`]
//!   rebuilds from them exactly what was acknowledged.
//!
//! Replication: [`replication`] pulls the peers' slots (replicas) and descriptions,
//! [`restore`] rebuilds a lost disk's slot from the datacenter's copies and [`key_restore`] its
//! idempotency keys from the peers' ([`copies`] serves both).
//!
//! [`storage`] is the seam under all of it: the disk the log and the store live on, and where
//! the commit loop and the checkpointer run (their own threads in production, tasks of a
//! simulated host under simulation).
//!
//! Around them: [`server::run`] wires it all to a listener (the binary and tests call it),
//! [`config`] resolves the node's slot from the topology, [`metrics`] exports Prometheus text,
//! [`openapi`] documents the API (`GET /openapi.json`), [`health`] holds what `/healthz`
//! reports, and [`error`] maps every failure to its HTTP status. [`check`] reads a data
//! directory offline (`shard-node check`) without changing it.

pub mod check;
pub(crate) mod config;
pub mod engine;
pub mod error;
pub mod health;
pub mod http;
pub mod metrics;
pub(crate) mod peer;
pub(crate) mod route;
pub(crate) mod server;
pub mod startup;
pub mod storage;

pub use config::{NodeConfig, RestoreMode};
pub use error::{ShardError, StorageError};
pub use server::run;
pub use storage::{AppendFile, Disk, OsDisk, Storage, Workers};
