//! The peers: after the log, a write reaches the other nodes of its datacenter as they pull it.
//!
//! - [`replication`]: this node's side: it pulls each peer's slot (its replicas) and the
//!   counters' descriptions.

pub(crate) mod replication;
