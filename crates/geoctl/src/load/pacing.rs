//! Global pacing: every worker claims its next writes from one shared schedule, so the whole
//! load runs at the target rate however many workers there are.
//!
//! Write `n` of the run (counting from 0) is due `n / rate` seconds after the start. A worker
//! claims a request's writes (1 for a single write, up to the batch size for a batch), waits
//! until the first of them is due, and sends. A worker that falls behind sends at once, so the
//! schedule catches up (an open-loop load). The schedule ends after `rate × duration` writes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// When write `unit` (0-based) is due, counted from the start, at `rate` writes per second.
pub fn due_offset(unit: u64, rate: u64) -> Duration {
    assert!(rate > 0, "a paced schedule has a positive rate");
    let nanos = u128::from(unit) * 1_000_000_000 / u128::from(rate);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// How many writes a schedule of `rate` writes per second holds in `duration`.
pub fn planned_writes(rate: u64, duration: Duration) -> u64 {
    let writes = u128::from(rate) * duration.as_nanos() / 1_000_000_000;
    u64::try_from(writes).unwrap_or(u64::MAX)
}

/// A claim on the schedule: `count` writes, the first of which is due at `due`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// How many writes the request carries (at least 1).
    pub count: u64,
    /// When the first is due, from the start.
    pub due: Duration,
}

/// The shared schedule of a paced run.
#[derive(Debug)]
pub struct Pacer {
    rate: u64,
    total: u64,
    claimed: AtomicU64,
}

impl Pacer {
    /// A schedule of `rate` writes per second (at least 1) for `duration`.
    pub fn new(rate: u64, duration: Duration) -> Self {
        Self {
            rate,
            total: planned_writes(rate, duration),
            claimed: AtomicU64::new(0),
        }
    }

    /// How many writes the schedule holds.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Claims the next writes for one request of up to `up_to` writes; `None` once the schedule
    /// is used up. The last claim may hold fewer than `up_to`.
    pub fn claim(&self, up_to: u64) -> Option<Claim> {
        let first = self.claimed.fetch_add(up_to, Ordering::Relaxed);
        if first >= self.total {
            return None;
        }
        Some(Claim {
            count: up_to.min(self.total - first),
            due: due_offset(first, self.rate),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_due_evenly() {
        assert_eq!(due_offset(0, 2000), Duration::ZERO);
        assert_eq!(due_offset(1, 2000), Duration::from_micros(500));
        assert_eq!(due_offset(2000, 2000), Duration::from_secs(1));
        assert_eq!(due_offset(3, 3), Duration::from_secs(1));
        assert_eq!(due_offset(1, 3), Duration::from_nanos(333_333_333));
        // No overflow at absurd numbers.
        assert_eq!(
            due_offset(u64::MAX, 1),
            Duration::from_nanos(u64::MAX),
            "saturates"
        );
    }

    #[test]
    fn the_plan_is_rate_times_duration() {
        assert_eq!(planned_writes(2000, Duration::from_secs(8)), 16_000);
        assert_eq!(planned_writes(3, Duration::from_millis(1500)), 4);
        assert_eq!(planned_writes(1, Duration::from_millis(999)), 0);
    }

    #[test]
    fn claims_cover_the_schedule_exactly_once() {
        let pacer = Pacer::new(1000, Duration::from_secs(2));
        assert_eq!(pacer.total(), 2000);
        let mut claims = Vec::new();
        while let Some(claim) = pacer.claim(300) {
            claims.push(claim);
        }
        assert_eq!(claims.len(), 7);
        assert_eq!(claims.iter().map(|c| c.count).sum::<u64>(), 2000);
        assert_eq!(claims[1].due, Duration::from_millis(300));
        // The last claim is cut to what is left.
        assert_eq!(claims[6].count, 200);
        assert_eq!(claims[6].due, Duration::from_millis(1800));
        assert_eq!(pacer.claim(1), None);
    }

    #[test]
    fn single_writes_are_due_one_interval_apart() {
        let pacer = Pacer::new(4, Duration::from_secs(1));
        let dues: Vec<Duration> = std::iter::from_fn(|| pacer.claim(1).map(|c| c.due)).collect();
        assert_eq!(dues, [0, 250, 500, 750].map(Duration::from_millis).to_vec());
    }
}
