//! The global aggregator's Prometheus metrics: those every aggregator exports, in a registry of
//! its own ([`geocount_sync::ReplicaMetrics`]), named `geocount_global_<name>`.
//!
//! Its sources are the datacenters, each named as in the topology:
//! `pulls_succeeded_total{source}`, `pulls_failed_total{source}`, each datacenter's
//! `staleness_ms{source}`, `states_merged_total`, `counters` held.

/// The prefix of every metric name.
pub const PREFIX: &str = "geocount_global";
