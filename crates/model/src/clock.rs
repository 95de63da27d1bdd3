//! The time seam. Nodes never read the system clock directly, so a simulation can drive time.

use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the unix epoch.
    fn now_unix_ms(&self) -> u64;

    /// Seconds since the unix epoch.
    fn now_unix_secs(&self) -> u64 {
        self.now_unix_ms() / 1000
    }
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// The operating system's clock moved by a fixed offset: a node whose clock runs behind or
/// ahead of its peers' (`shard-node --clock-offset-ms`, for fault tests of clock skew).
#[derive(Debug, Clone, Copy, Default)]
pub struct OffsetClock {
    /// Milliseconds added to the system clock (negative: behind).
    pub offset_ms: i64,
}

impl Clock for OffsetClock {
    fn now_unix_ms(&self) -> u64 {
        SystemClock
            .now_unix_ms()
            .saturating_add_signed(self.offset_ms)
    }
}
