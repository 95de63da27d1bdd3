//! Which datacenter each slot and each source of the global tier belongs to ([`Layout`]), and
//! which replica of a datacenter's aggregator its part comes from.

use crate::replica::Replica;

/// Which datacenter each slot and each source (a replica of a datacenter's aggregator) of the
/// global tier belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The datacenters' names, by index.
    pub names: Vec<String>,
    /// The index of the datacenter of each slot, by slot index.
    pub slot_datacenters: Vec<usize>,
    /// The index of the datacenter of each source, by source index.
    pub source_datacenters: Vec<usize>,
    /// Where each source listens, by source index.
    pub source_addresses: Vec<String>,
}

impl Layout {
    /// The sources of datacenter `datacenter`, by source index.
    pub fn sources_of(&self, datacenter: usize) -> impl Iterator<Item = usize> + '_ {
        (self.source_datacenters.iter().enumerate())
            .filter(move |(_, dc)| **dc == datacenter)
            .map(|(source, _)| source)
    }

    /// The source a datacenter's part comes from at `now_ms`: the freshest replica of its
    /// aggregator, else its first.
    pub fn freshest_source(&self, replica: &Replica, datacenter: usize, now_ms: u64) -> usize {
        let staleness = |source: usize| replica.sources[source].staleness_ms(now_ms);
        (self.sources_of(datacenter))
            .filter(|&s| staleness(s).is_some())
            .min_by_key(|&s| staleness(s))
            .or_else(|| self.sources_of(datacenter).next())
            .expect("every datacenter has an aggregator")
    }
}
