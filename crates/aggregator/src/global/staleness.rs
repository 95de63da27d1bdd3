//! The global tier's staleness rules, which its reads and its rankings share.
//!
//! - A datacenter's staleness is how long ago this aggregator last had that datacenter's
//!   complete state ([`geocount_sync::SourceStatus::staleness_ms`]): a datacenter whose own
//!   aggregator has a slot never heard stays incomplete. `None`: never. Copies merge by
//!   version, so a datacenter is as fresh as the freshest replica of its aggregator.
//! - A datacenter is stale for an answer when its staleness is `None` or above the
//!   `max_staleness_ms` asked for ([`Freshness`]); stale datacenters refuse the answer (503
//!   naming them) unless partial answers are allowed.

use geocount_http::routing::Named;

use super::layout::Layout;
use crate::parts::DatacenterReading;
use crate::replica::Replica;

/// How fresh a read or a ranking must be: a datacenter staler than `max_staleness_ms` is stale,
/// and stale datacenters refuse the answer unless `allow_partial`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    /// The staleness bound, in milliseconds.
    pub max_staleness_ms: u64,
    /// Whether stale datacenters give a partial answer rather than a refusal.
    pub allow_partial: bool,
}

/// Every datacenter's staleness at `now_ms`, with no value yet. Copies merge by version, so
/// a datacenter is as fresh as the freshest replica of its aggregator; but entries refused
/// past this aggregator's byte bound are lacking whichever replica sent them.
pub fn empty_readings(replica: &Replica, layout: &Layout, now_ms: u64) -> Vec<DatacenterReading> {
    let mut readings = vec![
        DatacenterReading {
            value: 0,
            staleness_ms: None,
            heard: false,
        };
        layout.names.len()
    ];
    let mut refused = vec![false; layout.names.len()];
    for (source, &dc) in replica.sources.iter().zip(&layout.source_datacenters) {
        let reading = &mut readings[dc];
        reading.heard |= source.last_heard_ms.is_some();
        reading.staleness_ms = freshest(reading.staleness_ms, source.staleness_ms(now_ms));
        refused[dc] |= source.refused_past_bound;
    }
    for (reading, refused) in readings.iter_mut().zip(refused) {
        if refused {
            reading.staleness_ms = None;
        }
    }
    readings
}

/// The fresher of two stalenesses (`None`: never complete).
fn freshest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The datacenters stale for a read allowing `max_staleness_ms`: never complete, or staler.
pub fn stale_datacenters(readings: &[DatacenterReading], max_staleness_ms: u64) -> Vec<usize> {
    readings
        .iter()
        .enumerate()
        .filter(|(_, r)| r.staleness_ms.is_none_or(|ms| ms > max_staleness_ms))
        .map(|(index, _)| index)
        .collect()
}

/// Why the datacenters `stale` (indices into `readings`, named by `names`) are stale for a read
/// allowing `max_staleness_ms`: `stale datacenters: ASIA_0 (staleness 5123 ms > 1000 ms), ...`.
pub fn stale_reasons(
    names: &[String],
    readings: &[DatacenterReading],
    stale: &[usize],
    max_staleness_ms: u64,
) -> String {
    let reasons: Vec<String> = stale
        .iter()
        .map(|&dc| {
            let reading = &readings[dc];
            let why = match (reading.staleness_ms, reading.heard) {
                (Some(ms), _) => format!("staleness {ms} ms > {max_staleness_ms} ms"),
                (None, false) => "never heard".to_owned(),
                (None, true) => "never complete: some of its slots never heard, or held incompletely past a byte bound (see /healthz)".to_owned(),
            };
            format!("{} ({why})", names[dc])
        })
        .collect();
    format!("stale datacenters: {}", reasons.join(", "))
}

/// `values` under the datacenters' `names`, in order.
pub fn named<T>(names: &[String], values: Vec<T>) -> Named<T> {
    names.iter().cloned().zip(values).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A datacenter's reading, for the tests of the global read too.
    pub(crate) fn reading(
        value: i128,
        staleness_ms: Option<u64>,
        heard: bool,
    ) -> DatacenterReading {
        DatacenterReading {
            value,
            staleness_ms,
            heard,
        }
    }

    #[test]
    fn stale_means_never_complete_or_staler_than_allowed() {
        let readings = [
            reading(1, Some(1000), true),
            reading(2, Some(1001), true),
            reading(3, None, false),
        ];
        assert_eq!(stale_datacenters(&readings, 1000), [1, 2]);
        assert_eq!(stale_datacenters(&readings, 5000), [2]);
    }
}
