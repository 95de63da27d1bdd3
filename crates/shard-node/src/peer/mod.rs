//! The peers: after the log, a write reaches the other nodes of its datacenter as they pull it.
//!
//! - [`replication`]: this node's side: it pulls each peer's slot (its replicas), the peer's
//!   idempotency keys and the counters' descriptions.
//! - [`keys`]: the copy of a peer's idempotency keys held here, and how far it reaches.
//! - [`key_file`]: that copy on this node's disk, so that it outlives a restart.

pub(crate) mod key_file;
pub(crate) mod keys;
pub(crate) mod replication;
