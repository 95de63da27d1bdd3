//! The peers: after the log, a write reaches the other nodes of its datacenter as they pull it,
//! and in `replicated` durability as the owner sends it before answering.
//!
//! - [`pulls`]: this node's side of the pulls: it pulls each peer's slot (its peer copies),
//!   the peer's idempotency keys and the counters' descriptions.
//! - [`keys`]: the copy of a peer's idempotency keys held here, and how far it reaches.
//! - [`key_file`]: that copy on this node's disk, so that it outlives a restart.
//! - [`held_sender`]: the owner's side of `replicated` durability: each durable group is sent to
//!   the peers, and its writes answered once one holds it.
//! - [`held_log`]: the peer's side: the groups each peer slot's owner sent, in a log of
//!   their own, fsynced before the owner is answered, and read back by a restore.
//! - [`held_fold`]: such a log's records merged into one, as a restore reads it and as the
//!   log is compacted.
//! - [`reclaim`]: deleted counters' copies of the peers' slots handed back.

pub(crate) mod held_fold;
pub(crate) mod held_log;
pub(crate) mod held_sender;
pub(crate) mod key_file;
pub(crate) mod keys;
pub(crate) mod pulls;
pub(crate) mod reclaim;
