//! Values tests of several crates build alike (feature `fixtures`).

use crate::{
    Clock, CounterDescription, CounterId, CounterType, HlcTimestamp, VersionedDescription,
};

/// A topology of two datacenters on the default local ports: USA_0 of two shard nodes
/// (7101, 7102), ASIA_0 of one (7201); the global aggregator on 7000.
pub const TWO_DATACENTERS: &str = r#"
[global]
listen = "127.0.0.1:7000"

[[datacenters]]
name = "USA_0"
aggregator = "127.0.0.1:7100"
shards = ["127.0.0.1:7101", "127.0.0.1:7102"]

[[datacenters]]
name = "ASIA_0"
aggregator = "127.0.0.1:7200"
shards = ["127.0.0.1:7201"]
"#;

/// A clock standing still at its unix milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub u64);

impl Clock for FixedClock {
    fn now_unix_ms(&self) -> u64 {
        self.0
    }
}

/// Sum counter `id` over `shards` slots (base 1, a 300 s window), versioned at `physical_ms`
/// by `node`.
///
/// # Panics
/// If `id` is not a valid counter id.
pub fn described(id: &str, shards: u32, physical_ms: u64, node: u32) -> VersionedDescription {
    VersionedDescription {
        description: CounterDescription {
            id: CounterId::new(id).expect("a valid fixture id"),
            counter_type: CounterType::Sum,
            number_of_shards: shards,
            base_number_of_shards: 1,
            window_seconds: 300,
            created_at_ms: 1,
            generation: Default::default(),
            deleted: false,
            expires_at_ms: None,
            history: Vec::new(),
            min: None,
            max: None,
        },
        version: HlcTimestamp {
            physical_ms,
            logical: 0,
            node,
        },
    }
}

/// This process's resident memory in bytes (Linux `/proc/self/statm`; 0 elsewhere), for the
/// benchmarks' bytes-per-entry figures.
pub fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}
