//! The datacenter aggregator's Prometheus metrics: those every aggregator exports, in a registry of
//! its own ([`geocount_sync::ReplicaMetrics`]), named `geocount_datacenter_<name>`.
//!
//! Its sources are its shards, each named by its slot, and `global`:
//! `pulls_succeeded_total{source}`, `pulls_failed_total{source}`, each slot's
//! `staleness_ms{source}`, `states_merged_total`, `counters` and `descriptions` held.

/// The prefix of every metric name.
pub const PREFIX: &str = "geocount_datacenter";
