//! Visibility lag, shared by `geoctl lag` and the probes of `geoctl load`: write +1 to a fresh
//! counter through a random shard node, take the instant the write is acknowledged, poll the
//! global aggregator until the counter reads 1 ([`write_and_watch`]), and count how the
//! writes ended ([`Outcomes`]).

use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use hyper::Method;
use tokio::time::MissedTickBehavior;

use crate::cluster::{ClusterClient, counter_path, status_error};

/// The largest lag the histogram holds, in microseconds (well above any watch's timeout).
const HISTOGRAM_MAX_MICROS: u64 = 60_000_000;
/// The histogram's precision: 4 significant figures (0.01%), finer than the printed 0.1 ms.
const HISTOGRAM_SIGNIFICANT_FIGURES: u8 = 4;

/// How one write's wait for visibility ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The global aggregator showed the write this long after its acknowledgement.
    Visible(Duration),
    /// Not visible within the watch's timeout.
    TimedOut,
    /// The write was refused or got no answer, or the counter was not fresh.
    Failed(String),
}

/// How [`write_and_watch`] writes and polls.
#[derive(Debug, Clone, Copy)]
pub struct Watch<'a> {
    /// Headers sent with the write beside its content type (e.g. an idempotency key).
    pub headers: &'a [(&'a str, &'a str)],
    /// How often the global aggregator is polled.
    pub poll: Duration,
    /// How long after the acknowledgement the write counts as timed out.
    pub timeout: Duration,
    /// What a failure calls the counter when it reads more than 1 (e.g. `"probe counter"`).
    pub counter: &'a str,
    /// Appended to that failure (e.g. what to do about it).
    pub stale_hint: &'a str,
}

/// Writes +1 to counter `id` through a random shard node, then polls the global aggregator
/// until it reads 1. Returns when the write was acknowledged (or failed) and how it ended.
pub async fn write_and_watch(
    cluster: &ClusterClient,
    id: &str,
    watch: &Watch<'_>,
) -> (Instant, Outcome) {
    let shard = cluster.random_shard();
    let url = shard.url(&format!("{}/write?op=INCREMENT", counter_path(id)));
    let mut headers = vec![("content-type", "application/json")];
    headers.extend_from_slice(watch.headers);
    let written = cluster
        .client()
        .send(
            Method::PATCH,
            &url,
            &headers,
            Bytes::from_static(br#"{"delta":1}"#),
        )
        .await;
    let acknowledged = Instant::now();
    match written {
        Ok(answer) if answer.status.is_success() => {}
        Ok(answer) => {
            let error = status_error(&url, &answer).to_string();
            return (acknowledged, Outcome::Failed(error));
        }
        Err(error) => return (acknowledged, Outcome::Failed(error.to_string())),
    }
    let mut ticks = tokio::time::interval(watch.poll);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(remaining) = watch.timeout.checked_sub(acknowledged.elapsed()) else {
            return (acknowledged, Outcome::TimedOut);
        };
        // Not yet seen (404), a partial 0, or no answer: poll again until the deadline.
        match tokio::time::timeout(remaining, cluster.read_total(id)).await {
            Ok(Ok(1)) => return (acknowledged, Outcome::Visible(acknowledged.elapsed())),
            Ok(Ok(value)) if value > 1 => {
                let (counter, hint) = (watch.counter, watch.stale_hint);
                let error =
                    format!("{counter} {id:?} reads {value} after one +1: it was not fresh{hint}");
                return (acknowledged, Outcome::Failed(error));
            }
            _ => {}
        }
    }
}

/// How a set of writes ended: their lags in an HDR histogram of microseconds, and the rest
/// counted.
#[derive(Debug, Clone)]
pub struct Outcomes {
    /// The lag of every visible write, in microseconds.
    pub histogram: Histogram<u64>,
    /// Writes not visible in time.
    pub timed_out: usize,
    /// Writes that failed.
    pub failed: usize,
    /// The first failure's message.
    pub first_failure: Option<String>,
}

impl Outcomes {
    /// Counts `outcomes`.
    pub fn count<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Self {
        let mut counted = Self {
            histogram: Histogram::new_with_bounds(
                1,
                HISTOGRAM_MAX_MICROS,
                HISTOGRAM_SIGNIFICANT_FIGURES,
            )
            .expect("valid histogram bounds"),
            timed_out: 0,
            failed: 0,
            first_failure: None,
        };
        for outcome in outcomes {
            match outcome {
                Outcome::Visible(lag) => {
                    counted.histogram.saturating_record(micros(*lag).max(1));
                }
                Outcome::TimedOut => counted.timed_out += 1,
                Outcome::Failed(message) => {
                    counted.failed += 1;
                    counted.first_failure.get_or_insert_with(|| message.clone());
                }
            }
        }
        counted
    }

    /// Writes that became visible.
    pub fn visible(&self) -> usize {
        self.histogram.len() as usize
    }

    /// The lag at `quantile` in milliseconds with one decimal; `None` when none was visible.
    pub fn ms_at(&self, quantile: f64) -> Option<f64> {
        let some = !self.histogram.is_empty();
        some.then(|| ms_one_decimal(self.histogram.value_at_quantile(quantile)))
    }

    /// The largest lag in milliseconds with one decimal; `None` when none was visible.
    pub fn max_ms(&self) -> Option<f64> {
        let some = !self.histogram.is_empty();
        some.then(|| ms_one_decimal(self.histogram.max()))
    }
}

/// A duration in whole microseconds, saturating.
pub fn micros(lag: Duration) -> u64 {
    u64::try_from(lag.as_micros()).unwrap_or(u64::MAX)
}

/// Microseconds as milliseconds rounded half up to one decimal: `262149` → `262.1`.
pub fn ms_one_decimal(micros: u64) -> f64 {
    (micros.saturating_add(50) / 100) as f64 / 10.0
}

/// A lag for the text report: one decimal, or `n/a` when no write became visible.
pub fn show_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "n/a".to_owned(), |ms| format!("{ms:.1}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_have_one_decimal_rounded_half_up() {
        let shown = |micros| show_ms(Some(ms_one_decimal(micros)));
        assert_eq!(shown(0), "0.0");
        assert_eq!(shown(49), "0.0");
        assert_eq!(shown(50), "0.1");
        assert_eq!(shown(262_149), "262.1");
        assert_eq!(shown(262_150), "262.2");
        assert_eq!(shown(999_950), "1000.0");
        assert_eq!(shown(5_000_000), "5000.0");
        assert_eq!(ms_one_decimal(262_149), 262.1);
        assert_eq!(show_ms(None), "n/a");
    }
}
