//! The peers: replication of their slots.

pub(crate) mod replication;
