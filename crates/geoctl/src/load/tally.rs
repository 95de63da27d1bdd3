//! What one load worker counts: request latencies (an HDR histogram), every write's outcome,
//! each counter's acknowledged deltas, per-second throughput, and the errors seen. Workers keep
//! their own tally and the tallies are merged at the end, so the hot path takes no lock.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::load::exactness::Expected;

/// The longest latency the histogram holds, in microseconds.
pub const LATENCY_MAX_MICROS: u64 = 120_000_000;
/// The histogram's precision, in significant figures.
pub const LATENCY_SIGNIFICANT_FIGURES: u8 = 3;

/// How one write ended, after its retry if it had one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// A node acknowledged it: it is durable and counted.
    Acknowledged,
    /// Every attempt was refused: nothing of it was applied.
    Refused,
    /// No answer says whether it was applied (e.g. the connection broke after sending).
    Unknown,
}

/// Counts of one second of the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Second {
    /// Writes acknowledged in that second.
    pub writes: u64,
    /// Requests answered in that second.
    pub requests: u64,
}

/// One worker's (or, merged, the whole run's) counts.
#[derive(Debug, Clone)]
pub struct Tally {
    /// Latency of every answered request, in microseconds.
    pub latency: Histogram<u64>,
    /// Per counter index: what the load knows of its total. Every counter written to has an
    /// entry, even if none of its writes was acknowledged.
    pub counters: HashMap<usize, Expected>,
    /// Writes acknowledged.
    pub acknowledged: u64,
    /// Writes refused (nothing applied).
    pub refused: u64,
    /// Writes whose outcome is unknown.
    pub unknown: u64,
    /// Writes sent a second time.
    pub retried: u64,
    /// HTTP requests sent, retries included.
    pub requests_sent: u64,
    /// HTTP requests that got an answer (any status).
    pub requests_answered: u64,
    /// Per second since the start: acknowledged writes and answered requests.
    pub seconds: Vec<Second>,
    /// How many times each kind of error was seen (`"HTTP 503"`, `"transport error"`, ...).
    pub errors: BTreeMap<String, u64>,
    /// The first error's full message.
    pub first_error: Option<String>,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            latency: Histogram::new_with_bounds(1, LATENCY_MAX_MICROS, LATENCY_SIGNIFICANT_FIGURES)
                .expect("valid histogram bounds"),
            counters: HashMap::new(),
            acknowledged: 0,
            refused: 0,
            unknown: 0,
            retried: 0,
            requests_sent: 0,
            requests_answered: 0,
            seconds: Vec::new(),
            errors: BTreeMap::new(),
            first_error: None,
        }
    }
}

impl Tally {
    fn second(&mut self, at: Duration) -> &mut Second {
        let index = at.as_secs() as usize;
        if self.seconds.len() <= index {
            self.seconds.resize(index + 1, Second::default());
        }
        &mut self.seconds[index]
    }

    /// Counts a request sent.
    pub fn sent(&mut self) {
        self.requests_sent += 1;
    }

    /// Counts a request answered after `latency`, at `at` since the start.
    pub fn answered(&mut self, latency: Duration, at: Duration) {
        self.requests_answered += 1;
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency.saturating_record(micros.max(1));
        self.second(at).requests += 1;
    }

    /// Counts an error of kind `kind` (a short label) with its full `message`.
    pub fn error(&mut self, kind: &str, message: impl FnOnce() -> String) {
        *self.errors.entry(kind.to_owned()).or_default() += 1;
        if self.first_error.is_none() {
            self.first_error = Some(message());
        }
    }

    /// Counts the final outcome of one write of `delta` to counter `counter`, at `at`.
    pub fn outcome(&mut self, counter: usize, delta: i64, outcome: WriteOutcome, at: Duration) {
        let expected = self.counters.entry(counter).or_default();
        match outcome {
            WriteOutcome::Acknowledged => {
                expected.acknowledge(delta);
                self.acknowledged += 1;
                self.second(at).writes += 1;
            }
            WriteOutcome::Refused => self.refused += 1,
            WriteOutcome::Unknown => {
                expected.unknown(delta);
                self.unknown += 1;
            }
        }
    }

    /// Adds another tally's counts to this one.
    pub fn merge(&mut self, other: Tally) {
        self.latency
            .add(&other.latency)
            .expect("histograms with the same bounds add");
        for (counter, expected) in &other.counters {
            self.counters.entry(*counter).or_default().merge(expected);
        }
        self.acknowledged += other.acknowledged;
        self.refused += other.refused;
        self.unknown += other.unknown;
        self.retried += other.retried;
        self.requests_sent += other.requests_sent;
        self.requests_answered += other.requests_answered;
        if self.seconds.len() < other.seconds.len() {
            self.seconds.resize(other.seconds.len(), Second::default());
        }
        for (mine, theirs) in self.seconds.iter_mut().zip(&other.seconds) {
            mine.writes += theirs.writes;
            mine.requests += theirs.requests;
        }
        for (kind, count) in other.errors {
            *self.errors.entry(kind).or_default() += count;
        }
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_go_to_their_counters_and_seconds() {
        let mut tally = Tally::default();
        let at = Duration::from_millis(1500);
        tally.outcome(3, 5, WriteOutcome::Acknowledged, at);
        tally.outcome(3, -2, WriteOutcome::Acknowledged, Duration::ZERO);
        tally.outcome(4, 7, WriteOutcome::Refused, at);
        tally.outcome(5, -4, WriteOutcome::Unknown, at);
        assert_eq!(
            (tally.acknowledged, tally.refused, tally.unknown),
            (2, 1, 1)
        );
        assert_eq!(tally.counters[&3].acknowledged, 3);
        // A counter whose only write was refused is still checked (it must read 0).
        assert_eq!(tally.counters[&4], Expected::default());
        assert_eq!(tally.counters[&5].possible_range(), (-4, 0));
        assert_eq!(tally.seconds.len(), 2);
        assert_eq!(tally.seconds[0].writes, 1);
        assert_eq!(tally.seconds[1].writes, 1);
    }

    #[test]
    fn merging_adds_everything() {
        let mut a = Tally::default();
        a.sent();
        a.answered(Duration::from_millis(2), Duration::from_millis(100));
        a.outcome(1, 2, WriteOutcome::Acknowledged, Duration::from_millis(100));
        a.error("HTTP 503", || "first".to_owned());
        let mut b = Tally::default();
        b.sent();
        b.sent();
        b.retried = 1;
        b.answered(Duration::from_millis(8), Duration::from_millis(2100));
        b.outcome(
            1,
            3,
            WriteOutcome::Acknowledged,
            Duration::from_millis(2100),
        );
        b.outcome(2, 1, WriteOutcome::Unknown, Duration::from_millis(2100));
        b.error("HTTP 503", || "second".to_owned());
        b.error("transport error", || "third".to_owned());
        a.merge(b);
        assert_eq!(a.requests_sent, 3);
        assert_eq!(a.requests_answered, 2);
        assert_eq!(a.retried, 1);
        assert_eq!(a.latency.len(), 2);
        assert_eq!(a.counters[&1].acknowledged, 5);
        assert_eq!(a.counters[&2].unknown_writes, 1);
        assert_eq!(
            a.seconds,
            [
                Second {
                    writes: 1,
                    requests: 1
                },
                Second::default(),
                Second {
                    writes: 1,
                    requests: 1
                }
            ]
        );
        assert_eq!(a.errors["HTTP 503"], 2);
        assert_eq!(a.errors["transport error"], 1);
        assert_eq!(a.first_error.as_deref(), Some("first"));
    }
}
