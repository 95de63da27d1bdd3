//! The sources a replica pulls ([`PullSource`]), what kind of process each is ([`SourceKind`]),
//! and what a page from each may carry ([`SourceFence`]).

use std::time::Duration;

use geocount_model::wire::SyncRequest;

/// What kind of process a source is, known from the configuration that names it: it says how
/// a page from it shows which slots are complete. Pages carry no kind of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// A shard node: its page holds its own slot, complete as of when the pull was sent once
    /// caught up, and names the node's incarnation.
    Shard,
    /// An aggregator (a datacenter's, or the global one): its page reports each slot's
    /// freshness as that aggregator holds it.
    Aggregator,
}

/// One source to pull: its name, where it listens, how often and what to pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullSource {
    /// Its name (a slot, a datacenter, `global`; `@<n>` after it for replica n > 0), for logs
    /// and metrics.
    pub name: String,
    /// The name its pages carry (a slot's, a datacenter's, `global`): a page under another name
    /// comes from a process configured for something else, and is refused.
    pub answers_as: String,
    /// What kind of process it is.
    pub kind: SourceKind,
    /// Its `host:port`.
    pub address: String,
    /// How often a pull starts once caught up.
    pub interval: Duration,
    /// The first pull: the streams asked for from the start (slot states, descriptions), and
    /// the partitions (`None`: every counter).
    pub first: SyncRequest,
    /// The slots whose states this source may deliver (a shard node its own, a datacenter
    /// aggregator its datacenter's): entries of any other slot are refused.
    pub delivers: Vec<String>,
}

/// What a replica lets through from one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFence {
    /// The name its pages must carry.
    pub answers_as: String,
    /// What kind of process it is.
    pub kind: SourceKind,
    /// The indices of the slots it may deliver.
    pub slots: Vec<u16>,
}

impl SourceFence {
    /// The fence of `source` over a replica of the slots named `slot_names`.
    pub fn of(source: &PullSource, slot_names: &[String]) -> Self {
        let slots = (source.delivers.iter())
            .filter_map(|name| slot_names.iter().position(|n| n == name))
            .map(|index| index as u16)
            .collect();
        Self {
            answers_as: source.answers_as.clone(),
            kind: source.kind,
            slots,
        }
    }
}
