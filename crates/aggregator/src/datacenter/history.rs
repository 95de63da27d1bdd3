//! A datacenter aggregator's `GET /counter/{id}/history` ([`crate::history`]): the points
//! summed over the datacenter's slots, with its staleness.

use geocount_sync::worst_staleness;
use serde::Serialize;

use crate::datacenter::state::slot_staleness;
use crate::history::{HistoryQuery, Points, Unanswered, resolve};
use crate::replica::Replica;

/// The datacenter tier's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatacenterHistory {
    /// The counter's id.
    pub id: String,
    /// The steps and their sums over the datacenter's slots.
    #[serde(flatten)]
    pub points: Points,
    /// This datacenter.
    pub datacenter: String,
    /// The datacenter's staleness (`None` if any slot was never heard).
    pub staleness_ms: Option<u64>,
    /// Whether every slot was heard.
    pub complete: bool,
}

/// Counter `id`'s history as one datacenter's `replica` holds it (slots named `slot_names`).
pub fn datacenter_history(
    replica: &Replica,
    datacenter: &str,
    slots: usize,
    id: &str,
    query: &HistoryQuery,
    now_ms: u64,
) -> Result<DatacenterHistory, Unanswered> {
    let counter = replica.counter(id);
    let (range, copies) = resolve(&counter, query, now_ms)?;
    let mut values = vec![0i128; range.len()];
    for (_, record) in copies {
        range.add(record, &mut values);
    }
    let staleness = worst_staleness(slot_staleness(replica, slots, now_ms));
    Ok(DatacenterHistory {
        id: id.to_owned(),
        points: Points::of(range, values),
        datacenter: datacenter.to_owned(),
        staleness_ms: staleness,
        complete: staleness.is_some(),
    })
}
