//! Deterministic simulation of a geocount cluster with turmoil.
//!
//! The real tiers (`shard_node::run`, `geocount_aggregator::datacenter::run`,
//! `geocount_aggregator::global::run`) run as turmoil hosts: the same code as the binaries,
//! given simulated seams instead of the operating system's ([`seams`]): a clock read from
//! simulated time, turmoil's TCP for incoming and outgoing connections, and for shard nodes
//! turmoil's per-host disk (where a crash loses what was not synced) with the commit loop and
//! checkpointer as tasks of the host.
//!
//! [`cluster`] builds two datacenters of two shard nodes, two replicas of each aggregation
//! tier and two partitions; [`workload`] writes through them with idempotency keys and watches
//! every tier; [`ledger`] records what the clients saw and what the tiers may show for it;
//! [`scenario`] draws a fault plan from a seed, runs it, and checks the invariants;
//! [`lifecycle`] resets, deletes and expires counters among the faults of one of them;
//! [`bounded`] creates bounded counters and watches their bounds while another runs. The same
//! seed always gives the same run.

pub mod bounded;
pub mod cluster;
pub mod disk_faults;
pub mod ledger;
pub mod lifecycle;
pub mod scenario;
pub mod seams;
pub mod workload;

pub use scenario::{Event, Fault, Report, Scenario, Violation, run};
