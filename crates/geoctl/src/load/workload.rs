//! What the load writes: which counter each write goes to (uniform or Zipf-distributed over
//! `<prefix>-0..N`), the signed delta it carries, and the names of the load's counters.

use std::fmt;

use rand::Rng;
use rand_distr::{Distribution, Zipf};

use crate::error::GeoctlError;

/// How writes are spread over the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyDistribution {
    /// Every counter equally likely.
    Uniform,
    /// Counter `i` is picked with probability proportional to `1 / (i + 1)^exponent`: a few hot
    /// counters take most writes.
    Zipf,
}

impl fmt::Display for KeyDistribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyDistribution::Uniform => "uniform",
            KeyDistribution::Zipf => "zipf",
        })
    }
}

/// Which write API the load uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritePath {
    /// One write per request: `PATCH /counter/{id}/write?op=INCREMENT|DECREMENT`.
    Http,
    /// Many writes per request: postcard `POST /batch`.
    Batch,
}

impl fmt::Display for WritePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WritePath::Http => "http",
            WritePath::Batch => "batch",
        })
    }
}

/// Picks counter indices in `0..counters` with a [`KeyDistribution`].
#[derive(Debug, Clone, Copy)]
pub struct CounterPicker {
    counters: usize,
    zipf: Option<Zipf<f64>>,
}

impl CounterPicker {
    /// A picker over `counters` counters (at least 1); `exponent` is the Zipf exponent (finite,
    /// at least 0; 0 is uniform) and is ignored for [`KeyDistribution::Uniform`].
    pub fn new(
        distribution: KeyDistribution,
        counters: usize,
        exponent: f64,
    ) -> Result<Self, GeoctlError> {
        if counters == 0 {
            return Err(GeoctlError::InvalidArgument(
                "--counters must be at least 1".to_owned(),
            ));
        }
        let zipf = match distribution {
            KeyDistribution::Uniform => None,
            KeyDistribution::Zipf => {
                if !exponent.is_finite() || exponent < 0.0 {
                    return Err(GeoctlError::InvalidArgument(format!(
                        "--zipf-exponent must be a finite number at least 0, got {exponent}"
                    )));
                }
                let zipf = Zipf::new(counters as f64, exponent).map_err(|e| {
                    GeoctlError::InvalidArgument(format!("invalid Zipf distribution: {e}"))
                })?;
                Some(zipf)
            }
        };
        Ok(Self { counters, zipf })
    }

    /// How many counters it picks from.
    pub fn counters(&self) -> usize {
        self.counters
    }

    /// One counter index in `0..counters`; with Zipf, index 0 is the hottest.
    pub fn pick<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        match &self.zipf {
            None => rng.random_range(0..self.counters),
            // Zipf samples ranks 1..=n as floats.
            Some(zipf) => (zipf.sample(rng) as usize).clamp(1, self.counters) - 1,
        }
    }
}

/// The largest increment the load writes.
pub const MAX_INCREMENT: i64 = 10;
/// The largest decrement the load writes (by magnitude).
pub const MAX_DECREMENT: i64 = 5;
/// The share of writes that are decrements.
pub const DECREMENT_SHARE: f64 = 0.2;

/// A random non-zero delta: an increment in `1..=MAX_INCREMENT`, or with probability
/// [`DECREMENT_SHARE`] a decrement in `-MAX_DECREMENT..=-1`.
pub fn random_delta<R: Rng + ?Sized>(rng: &mut R) -> i64 {
    if rng.random_bool(DECREMENT_SHARE) {
        -rng.random_range(1..=MAX_DECREMENT)
    } else {
        rng.random_range(1..=MAX_INCREMENT)
    }
}

/// The id of load counter `index`: `<prefix>-<index>`.
pub fn counter_id(prefix: &str, index: usize) -> String {
    format!("{prefix}-{index}")
}

/// The id of visibility probe `k`: `<prefix>-probe-<k>`.
pub fn probe_id(prefix: &str, k: u64) -> String {
    format!("{prefix}-probe-{k}")
}

/// The random default prefix: `load-<16 hex digits>`, so every run writes fresh counters.
pub fn random_prefix() -> String {
    format!("load-{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn uniform_picks_stay_in_bounds_and_cover_every_counter() {
        let picker = CounterPicker::new(KeyDistribution::Uniform, 7, 1.1).unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        let mut seen = [0usize; 7];
        for _ in 0..7_000 {
            seen[picker.pick(&mut rng)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 700), "{seen:?}");
    }

    #[test]
    fn zipf_picks_stay_in_bounds_and_favour_the_first_counters() {
        let mut rng = StdRng::seed_from_u64(2);
        for counters in [1, 2, 10, 1000] {
            let picker = CounterPicker::new(KeyDistribution::Zipf, counters, 1.1).unwrap();
            assert_eq!(picker.counters(), counters);
            let mut seen = vec![0usize; counters];
            for _ in 0..20_000 {
                seen[picker.pick(&mut rng)] += 1;
            }
            if counters >= 10 {
                // Rank 1 is hit about 2^1.1 ≈ 2.1 times as often as rank 2, and far more than
                // the last.
                assert!(seen[0] > seen[1] * 3 / 2, "{seen:?}");
                assert!(seen[0] > 10 * seen[counters - 1].max(1), "{seen:?}");
            }
        }
        // Exponent 0 is uniform: the last counter is reached too.
        let flat = CounterPicker::new(KeyDistribution::Zipf, 4, 0.0).unwrap();
        let hits = (0..4_000).filter(|_| flat.pick(&mut rng) == 3).count();
        assert!(hits > 700, "{hits}");
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(CounterPicker::new(KeyDistribution::Uniform, 0, 1.0).is_err());
        assert!(CounterPicker::new(KeyDistribution::Zipf, 0, 1.0).is_err());
        assert!(CounterPicker::new(KeyDistribution::Zipf, 10, -0.5).is_err());
        assert!(CounterPicker::new(KeyDistribution::Zipf, 10, f64::NAN).is_err());
        assert!(CounterPicker::new(KeyDistribution::Zipf, 10, f64::INFINITY).is_err());
        // The exponent is not looked at for the uniform distribution.
        assert!(CounterPicker::new(KeyDistribution::Uniform, 10, -1.0).is_ok());
    }

    #[test]
    fn deltas_are_never_zero_and_mostly_increments() {
        let mut rng = StdRng::seed_from_u64(3);
        let deltas: Vec<i64> = (0..10_000).map(|_| random_delta(&mut rng)).collect();
        assert!(
            deltas
                .iter()
                .all(|&d| (1..=MAX_INCREMENT).contains(&d) || (-MAX_DECREMENT..=-1).contains(&d))
        );
        let decrements = deltas.iter().filter(|&&d| d < 0).count();
        assert!((1_500..2_500).contains(&decrements), "{decrements}");
    }

    #[test]
    fn names() {
        assert_eq!(counter_id("p", 12), "p-12");
        assert_eq!(probe_id("p", 3), "p-probe-3");
        let prefix = random_prefix();
        assert!(
            prefix.starts_with("load-") && prefix.len() == 21,
            "{prefix}"
        );
        assert_eq!(KeyDistribution::Zipf.to_string(), "zipf");
        assert_eq!(WritePath::Batch.to_string(), "batch");
    }
}
