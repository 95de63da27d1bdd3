//! The peers: replication of their slots.

pub mod replication;
