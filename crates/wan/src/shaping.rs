//! What a link does to the bytes of one direction: delay them, jitter them, and cap their rate.
//!
//! - [`Shaping`]: a link's settings (one-way delay, jitter, bandwidth), the same both ways.
//! - [`DelayLine`]: when each chunk read from one direction is released: its read time plus the
//!   delay and a jitter sample, but never before the chunk before it, so jitter never reorders
//!   the bytes of a direction.
//! - [`Pacer`]: the bandwidth cap of one direction of a link, shared by all its connections:
//!   each piece of data occupies the link for `len / bandwidth` seconds, one after another.

use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// The longest delay or jitter a link takes, in milliseconds (a minute: far beyond any real
/// WAN, and short enough that a typo is refused rather than hanging every connection).
pub const MAX_DELAY_MS: u64 = 60_000;

/// The most a chunk is cut into under a bandwidth cap: a piece is written when its last byte
/// would have arrived, so smaller pieces give a smoother rate.
const MAX_PIECE_BYTES: usize = 16 * 1024;
/// The least a chunk is cut into: smaller pieces only cost system calls.
const MIN_PIECE_BYTES: usize = 512;
/// A piece carries about this many milliseconds of the capped rate.
const PIECE_MS: u64 = 10;

/// How a link shapes its traffic; each direction gets the same settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Shaping {
    /// One-way delay added to every byte, in milliseconds (a round trip through the link takes
    /// twice this).
    #[serde(default)]
    pub delay_ms: u64,
    /// Each chunk's delay varies uniformly within ± this many milliseconds (never below zero,
    /// and never reordering bytes).
    #[serde(default)]
    pub jitter_ms: u64,
    /// The most bytes per second each direction carries, shared by every connection of the
    /// link; 0 means no cap.
    #[serde(default)]
    pub bandwidth_bytes_per_sec: u64,
}

impl Shaping {
    /// Checks the bounds serde cannot; the error names the offending key.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        for (key, value) in [("delay_ms", self.delay_ms), ("jitter_ms", self.jitter_ms)] {
            if value > MAX_DELAY_MS {
                return Err((key, format!("{value} is more than {MAX_DELAY_MS} ms")));
            }
        }
        Ok(())
    }

    /// The delay of one chunk: `delay_ms` plus a uniform sample of ± `jitter_ms`, in
    /// microseconds, never below zero.
    pub fn sample_delay(&self, rng: &mut impl Rng) -> Duration {
        let delay_us = self.delay_ms.saturating_mul(1000);
        if self.jitter_ms == 0 {
            return Duration::from_micros(delay_us);
        }
        let jitter_us = self.jitter_ms.saturating_mul(1000);
        let offset = rng.random_range(0..=2 * jitter_us);
        // delay + (offset - jitter), clamped at zero.
        Duration::from_micros((delay_us + offset).saturating_sub(jitter_us))
    }
}

/// The release schedule of one direction of one connection.
#[derive(Debug, Default)]
pub struct DelayLine {
    last_release: Option<Instant>,
}

impl DelayLine {
    /// A direction that has released nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// When a chunk read at `read_at` with a sampled `delay` may be written: `read_at + delay`,
    /// but never before the chunk released before it.
    pub fn release_at(&mut self, read_at: Instant, delay: Duration) -> Instant {
        let due = read_at + delay;
        let release = self.last_release.map_or(due, |last| due.max(last));
        self.last_release = Some(release);
        release
    }
}

/// The bandwidth cap of one direction of a link: the link is busy until the last piece given
/// to it has been transmitted, and every new piece waits for that.
#[derive(Debug, Default)]
pub struct Pacer {
    busy_until: Mutex<Option<Instant>>,
}

impl Pacer {
    /// An idle link.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reserves the link for `bytes` at `bandwidth` bytes per second, starting no earlier than
    /// `ready_at` nor before the previous reservation ends, and gives the instant the last of
    /// those bytes has been transmitted: when they may be written. With no cap (0) it is
    /// `ready_at`.
    pub fn reserve(&self, ready_at: Instant, bytes: usize, bandwidth: u64) -> Instant {
        if bandwidth == 0 {
            return ready_at;
        }
        let mut busy_until = self.busy_until.lock().expect("pacer lock");
        let start = busy_until.map_or(ready_at, |busy| busy.max(ready_at));
        let transmit = Duration::from_secs_f64(bytes as f64 / bandwidth as f64);
        let done = start + transmit;
        *busy_until = Some(done);
        done
    }
}

/// The size a chunk is cut into under a cap of `bandwidth` bytes per second (0: no cap, so
/// chunks are not cut).
pub fn piece_size(bandwidth: u64) -> usize {
    if bandwidth == 0 {
        return usize::MAX;
    }
    let per_piece =
        usize::try_from(bandwidth.saturating_mul(PIECE_MS) / 1000).unwrap_or(usize::MAX);
    per_piece.clamp(MIN_PIECE_BYTES, MAX_PIECE_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn delay_without_jitter_is_exact() {
        let shaping = Shaping {
            delay_ms: 40,
            ..Shaping::default()
        };
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(shaping.sample_delay(&mut rng), 40 * MS);
    }

    #[test]
    fn jitter_stays_within_its_bounds_and_never_goes_negative() {
        let mut rng = StdRng::seed_from_u64(7);
        let shaping = Shaping {
            delay_ms: 40,
            jitter_ms: 10,
            ..Shaping::default()
        };
        let samples: Vec<Duration> = (0..10_000)
            .map(|_| shaping.sample_delay(&mut rng))
            .collect();
        assert!(samples.iter().all(|d| (30 * MS..=50 * MS).contains(d)));
        // Uniform: both halves of the range are used.
        assert!(samples.iter().any(|d| *d < 32 * MS));
        assert!(samples.iter().any(|d| *d > 48 * MS));

        let wide = Shaping {
            delay_ms: 5,
            jitter_ms: 20,
            ..Shaping::default()
        };
        let samples: Vec<Duration> = (0..10_000).map(|_| wide.sample_delay(&mut rng)).collect();
        assert!(samples.iter().all(|d| *d <= 25 * MS));
        assert!(samples.contains(&Duration::ZERO));
    }

    #[test]
    fn the_delay_line_never_releases_a_chunk_before_the_one_before_it() {
        let start = Instant::now();
        let mut line = DelayLine::new();
        let mut rng = StdRng::seed_from_u64(3);
        let shaping = Shaping {
            delay_ms: 40,
            jitter_ms: 30,
            ..Shaping::default()
        };
        let mut previous = start;
        for i in 0..1_000u64 {
            let read_at = start + Duration::from_micros(i * 500);
            let release = line.release_at(read_at, shaping.sample_delay(&mut rng));
            assert!(
                release >= previous,
                "chunk {i} released before its predecessor"
            );
            assert!(release >= read_at + 10 * MS, "chunk {i} is early");
            previous = release;
        }
        // A long gap lets the schedule fall back to the chunk's own delay.
        let late = start + Duration::from_secs(10);
        assert_eq!(line.release_at(late, 40 * MS), late + 40 * MS);
    }

    #[test]
    fn the_pacer_spreads_bytes_at_the_capped_rate() {
        let start = Instant::now();
        let pacer = Pacer::new();
        // 100 KB at 100 KB/s, in 1 KB pieces all ready at once: the last is done after 1 s.
        let mut done = start;
        for _ in 0..100 {
            done = pacer.reserve(start, 1_000, 100_000);
        }
        assert_eq!(done, start + Duration::from_secs(1));
        // An idle link starts at the new piece's ready time.
        let later = start + Duration::from_secs(5);
        assert_eq!(pacer.reserve(later, 500, 1_000), later + 500 * MS);
        // No cap: ready at once.
        assert_eq!(pacer.reserve(later, 1 << 30, 0), later);
    }

    #[test]
    fn pieces_carry_about_ten_milliseconds() {
        assert_eq!(piece_size(0), usize::MAX);
        assert_eq!(piece_size(100_000), 1_000);
        assert_eq!(piece_size(1_000), MIN_PIECE_BYTES);
        assert_eq!(piece_size(1_000_000_000), MAX_PIECE_BYTES);
    }

    #[test]
    fn delays_past_a_minute_are_refused() {
        let ok = Shaping {
            delay_ms: 200,
            jitter_ms: 20,
            bandwidth_bytes_per_sec: 1_000_000,
        };
        assert!(ok.validate().is_ok());
        let bad = Shaping {
            jitter_ms: MAX_DELAY_MS + 1,
            ..ok
        };
        assert_eq!(bad.validate().unwrap_err().0, "jitter_ms");
    }
}
