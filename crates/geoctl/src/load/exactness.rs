//! The exactness check: after the load, every written counter's global total must equal the sum
//! of its acknowledged deltas.
//!
//! [`Expected`] is what the load knows of one counter: the sum of its acknowledged deltas, and
//! the deltas whose outcome is unknown (sent, but no answer says whether they were applied).
//! [`judge`] compares one global reading with it; [`settle`] reads every written counter from
//! the global aggregator (`allow_partial=true`) until all agree or a deadline passes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cluster::ClusterClient;

/// What the load knows of one counter's total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Expected {
    /// The sum of its acknowledged deltas.
    pub acknowledged: i128,
    /// How many of its writes have an unknown outcome.
    pub unknown_writes: u64,
    /// The sum of the negative deltas among those (0 when none).
    pub unknown_negative: i128,
    /// The sum of the positive deltas among those (0 when none).
    pub unknown_positive: i128,
}

impl Expected {
    /// Counts an acknowledged delta.
    pub fn acknowledge(&mut self, delta: i64) {
        self.acknowledged += i128::from(delta);
    }

    /// Counts a delta whose outcome is unknown.
    pub fn unknown(&mut self, delta: i64) {
        self.unknown_writes += 1;
        if delta < 0 {
            self.unknown_negative += i128::from(delta);
        } else {
            self.unknown_positive += i128::from(delta);
        }
    }

    /// Adds what another tally knows of the same counter.
    pub fn merge(&mut self, other: &Expected) {
        self.acknowledged += other.acknowledged;
        self.unknown_writes += other.unknown_writes;
        self.unknown_negative += other.unknown_negative;
        self.unknown_positive += other.unknown_positive;
    }

    /// The lowest and highest totals the counter may have: the acknowledged sum plus any subset
    /// of the unknown deltas.
    pub fn possible_range(&self) -> (i128, i128) {
        (
            self.acknowledged + self.unknown_negative,
            self.acknowledged + self.unknown_positive,
        )
    }
}

/// How one global reading compares with what the load knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The total equals the acknowledged sum.
    Exact,
    /// The total differs from the acknowledged sum but some subset of the unknown-outcome
    /// writes explains it.
    WithinUnknown,
    /// Nothing the load sent explains the total (yet).
    Differs,
}

/// Compares a global total with what the load knows.
pub fn judge(expected: &Expected, observed: i128) -> Verdict {
    if observed == expected.acknowledged {
        return Verdict::Exact;
    }
    let (low, high) = expected.possible_range();
    if expected.unknown_writes > 0 && (low..=high).contains(&observed) {
        Verdict::WithinUnknown
    } else {
        Verdict::Differs
    }
}

/// A counter whose global total never agreed with the load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// The counter.
    pub id: String,
    /// The sum of its acknowledged deltas.
    pub expected: i128,
    /// The global aggregator's last total; `None` when the last read failed.
    pub observed: Option<i128>,
    /// How many of its writes had an unknown outcome.
    pub unknown_writes: u64,
    /// Why the last read failed, if it did.
    pub read_error: Option<String>,
}

/// The outcome of the exactness check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExactnessReport {
    /// Counters checked (every counter the load wrote to).
    pub counters: usize,
    /// Counters whose total equals their acknowledged sum.
    pub exact: usize,
    /// Counters whose total is explained only by writes of unknown outcome.
    pub within_unknown: usize,
    /// Counters that never agreed before the deadline.
    pub mismatches: Vec<Mismatch>,
    /// How long after the load it took until every counter agreed (or the deadline passed), ms.
    pub waited_ms: u64,
    /// How many times the remaining counters were read.
    pub rounds: u32,
}

impl ExactnessReport {
    /// Whether every counter agreed.
    pub fn is_exact(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// One read of one counter: its total (`Ok(0)` for a counter the aggregator has never seen) or
/// why the read failed.
pub type Reading = Result<i128, String>;

/// A counter (its id and what the load knows of it) with its last reading.
pub type Checked = ((String, Expected), Reading);

/// Sorts one round's readings of `(id, expected)` into the counters that agree (returned as
/// counts: exact, within unknown) and those still pending, each with its last reading.
pub fn sort_round(readings: Vec<Checked>) -> (usize, usize, Vec<Checked>) {
    let (mut exact, mut within) = (0, 0);
    let mut pending = Vec::new();
    for (counter, reading) in readings {
        match reading.as_ref().map(|&value| judge(&counter.1, value)) {
            Ok(Verdict::Exact) => exact += 1,
            Ok(Verdict::WithinUnknown) => within += 1,
            Ok(Verdict::Differs) | Err(_) => pending.push((counter, reading)),
        }
    }
    (exact, within, pending)
}

/// The mismatches left after the deadline, in the order the counters were given.
pub fn mismatches(pending: Vec<Checked>) -> Vec<Mismatch> {
    pending
        .into_iter()
        .map(|((id, expected), reading)| {
            let (observed, read_error) = match reading {
                Ok(value) => (Some(value), None),
                Err(error) => (None, Some(error)),
            };
            Mismatch {
                id,
                expected: expected.acknowledged,
                observed,
                unknown_writes: expected.unknown_writes,
                read_error,
            }
        })
        .collect()
}

/// How often the remaining counters are read again.
pub const SETTLE_POLL: Duration = Duration::from_millis(100);

/// Reads every counter from the global aggregator, `concurrency` reads at a time, again every
/// [`SETTLE_POLL`] for those that do not agree yet, until all agree or `timeout` has passed.
pub async fn settle(
    cluster: &ClusterClient,
    counters: Vec<(String, Expected)>,
    timeout: Duration,
    concurrency: usize,
) -> ExactnessReport {
    let started = Instant::now();
    let total = counters.len();
    let (mut exact, mut within, mut rounds) = (0, 0, 0);
    let mut pending: Vec<(String, Expected)> = counters;
    let mut last: Vec<Checked>;
    loop {
        rounds += 1;
        let readings = read_all(cluster, pending, concurrency).await;
        let (e, w, left) = sort_round(readings);
        exact += e;
        within += w;
        last = left;
        if last.is_empty() || started.elapsed() >= timeout {
            break;
        }
        tokio::time::sleep(SETTLE_POLL).await;
        pending = last.iter().map(|(counter, _)| counter.clone()).collect();
    }
    ExactnessReport {
        counters: total,
        exact,
        within_unknown: within,
        mismatches: mismatches(last),
        waited_ms: started.elapsed().as_millis() as u64,
        rounds,
    }
}

/// Reads every counter once, `concurrency` at a time, keeping their order.
async fn read_all(
    cluster: &ClusterClient,
    counters: Vec<(String, Expected)>,
    concurrency: usize,
) -> Vec<Checked> {
    let counters = Arc::new(counters);
    let next = Arc::new(AtomicUsize::new(0));
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.clamp(1, counters.len().max(1)) {
        let (cluster, counters, next) = (cluster.clone(), counters.clone(), next.clone());
        readers.spawn(async move {
            let mut read = Vec::new();
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some((id, _)) = counters.get(index) else {
                    return read;
                };
                read.push((index, cluster.read_total(id).await));
            }
        });
    }
    let mut readings: Vec<Option<Reading>> = vec![None; counters.len()];
    while let Some(joined) = readers.join_next().await {
        match joined {
            Ok(read) => read
                .into_iter()
                .for_each(|(index, reading)| readings[index] = Some(reading)),
            Err(error) => mark_unread(&mut readings, &error.to_string()),
        }
    }
    counters
        .iter()
        .cloned()
        .zip(readings)
        .map(|(counter, reading)| {
            let reading = reading.unwrap_or_else(|| Err("not read".to_owned()));
            (counter, reading)
        })
        .collect()
}

/// A reader task failed (it panicked): the counters it had not answered stay unread, and are
/// read again next round.
fn mark_unread(readings: &mut [Option<Reading>], error: &str) {
    for reading in readings.iter_mut().filter(|r| r.is_none()) {
        *reading = Some(Err(format!("a reading task failed: {error}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected(acknowledged: i128, unknown: &[i64]) -> Expected {
        let mut e = Expected {
            acknowledged,
            ..Expected::default()
        };
        unknown.iter().for_each(|&d| e.unknown(d));
        e
    }

    #[test]
    fn tallies_add_up() {
        let mut a = Expected::default();
        a.acknowledge(5);
        a.acknowledge(-2);
        a.unknown(7);
        a.unknown(-3);
        let mut b = expected(10, &[4]);
        b.merge(&a);
        assert_eq!(b.acknowledged, 13);
        assert_eq!(b.unknown_writes, 3);
        assert_eq!(b.possible_range(), (10, 24));
    }

    #[test]
    fn only_the_acknowledged_sum_is_exact() {
        let e = expected(42, &[]);
        assert_eq!(judge(&e, 42), Verdict::Exact);
        assert_eq!(judge(&e, 41), Verdict::Differs);
        assert_eq!(judge(&e, 43), Verdict::Differs);
        assert_eq!(judge(&expected(0, &[]), 0), Verdict::Exact);
    }

    #[test]
    fn unknown_writes_widen_what_is_accepted() {
        let e = expected(10, &[3, -2]);
        assert_eq!(judge(&e, 10), Verdict::Exact);
        assert_eq!(judge(&e, 13), Verdict::WithinUnknown);
        assert_eq!(judge(&e, 8), Verdict::WithinUnknown);
        assert_eq!(judge(&e, 11), Verdict::WithinUnknown);
        assert_eq!(judge(&e, 14), Verdict::Differs);
        assert_eq!(judge(&e, 7), Verdict::Differs);
    }

    #[test]
    fn rounds_keep_only_what_disagrees_in_order() {
        let readings = vec![
            (("c-2".to_owned(), expected(5, &[])), Ok(5)),
            (("c-1".to_owned(), expected(5, &[])), Ok(4)),
            (("c-3".to_owned(), expected(5, &[2])), Ok(7)),
            (
                ("c-0".to_owned(), expected(-1, &[])),
                Err("timed out".to_owned()),
            ),
        ];
        let (exact, within, pending) = sort_round(readings);
        assert_eq!((exact, within, pending.len()), (1, 1, 2));
        let list = mismatches(pending);
        assert_eq!(list[0].id, "c-1");
        assert_eq!(list[0].observed, Some(4));
        assert_eq!(list[1].id, "c-0");
        assert_eq!(list[1].expected, -1);
        assert_eq!(list[1].observed, None);
        assert_eq!(list[1].read_error.as_deref(), Some("timed out"));
        let report = ExactnessReport {
            counters: 4,
            exact,
            within_unknown: within,
            mismatches: list,
            waited_ms: 10,
            rounds: 1,
        };
        assert!(!report.is_exact());
    }
}
