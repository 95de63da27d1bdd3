//! Hybrid logical clock timestamps: the versions of counter descriptions.
//!
//! A description can be changed at any node, so its version must order changes made on
//! different machines: a hybrid logical clock gives timestamps that follow wall-clock time, never
//! go backwards on a node, move past every timestamp the node has seen, and end in the node's id,
//! so two changes never tie. Written here rather than taken from a crate because it must read
//! time through the [`Clock`] seam (simulations drive time), which the crates' clocks do not allow.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::Clock;

/// One HLC timestamp; ordered by physical time, then logical counter, then node.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct HlcTimestamp {
    /// Milliseconds since the unix epoch (the largest seen).
    pub physical_ms: u64,
    /// Orders events within the same millisecond.
    pub logical: u32,
    /// The node that made the timestamp: breaks ties between nodes.
    pub node: u32,
}

/// A node's hybrid logical clock.
pub struct Hlc {
    node: u32,
    clock: Arc<dyn Clock>,
    last: Mutex<HlcTimestamp>,
}

impl std::fmt::Debug for Hlc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hlc").field("node", &self.node).finish()
    }
}

impl Hlc {
    /// A clock for the node named `node_name` (its id is a hash of the name).
    pub fn new(node_name: &str, clock: Arc<dyn Clock>) -> Self {
        Self {
            node: crate::hash::hash32(node_name),
            clock,
            last: Mutex::new(HlcTimestamp::default()),
        }
    }

    /// The node id its timestamps end in.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// A timestamp later than every one this clock made or observed.
    pub fn now(&self) -> HlcTimestamp {
        let wall = self.clock.now_unix_ms();
        let mut last = self.last.lock().expect("hlc lock");
        *last = if wall > last.physical_ms {
            HlcTimestamp {
                physical_ms: wall,
                logical: 0,
                node: self.node,
            }
        } else if let Some(logical) = last.logical.checked_add(1) {
            HlcTimestamp {
                physical_ms: last.physical_ms,
                logical,
                node: self.node,
            }
        } else {
            // The logical counter is spent (a peer sent `u32::MAX`): move on to the next
            // millisecond rather than wrap to a timestamp below the last; at the very end of
            // time, stay there.
            match last.physical_ms.checked_add(1) {
                Some(physical_ms) => HlcTimestamp {
                    physical_ms,
                    logical: 0,
                    node: self.node,
                },
                None => HlcTimestamp {
                    node: self.node,
                    ..*last
                },
            }
        };
        *last
    }

    /// Moves the clock past a timestamp received from another node.
    pub fn observe(&self, remote: HlcTimestamp) {
        let mut last = self.last.lock().expect("hlc lock");
        if remote > *last {
            *last = HlcTimestamp {
                node: self.node,
                ..remote
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct FixedClock(AtomicU64);
    impl Clock for FixedClock {
        fn now_unix_ms(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn timestamps_only_move_forward_and_pass_observed_ones() {
        let clock = Arc::new(FixedClock(AtomicU64::new(1000)));
        let hlc = Hlc::new("a", clock.clone());
        let t1 = hlc.now();
        let t2 = hlc.now();
        assert!(t2 > t1, "same millisecond still advances");
        clock.0.store(500, Ordering::SeqCst);
        let t3 = hlc.now();
        assert!(t3 > t2, "a clock going back does not");
        let remote = HlcTimestamp {
            physical_ms: 9000,
            logical: 4,
            node: 1,
        };
        hlc.observe(remote);
        assert!(hlc.now() > remote);
        let other = Hlc::new("b", clock);
        assert_ne!(other.now().node, t1.node, "nodes break ties");
    }

    /// Hostile input (the `wire_sync_page` fuzz target): a
    /// description version from a peer with a spent logical counter overflowed `logical + 1`
    /// (a panic with overflow checks, a wrap to an older timestamp without).
    #[test]
    fn an_observed_timestamp_with_a_spent_logical_counter_still_moves_forward() {
        let clock = Arc::new(FixedClock(AtomicU64::new(1000)));
        let hlc = Hlc::new("a", clock);
        let spent = HlcTimestamp {
            physical_ms: 5000,
            logical: u32::MAX,
            node: 7,
        };
        hlc.observe(spent);
        let next = hlc.now();
        assert!(next > spent, "{next:?}");
        let end = HlcTimestamp {
            physical_ms: u64::MAX,
            logical: u32::MAX,
            node: 7,
        };
        hlc.observe(end);
        let last = hlc.now();
        assert_eq!((last.physical_ms, last.logical), (u64::MAX, u32::MAX));
        assert!(hlc.now() >= last, "never back");
    }
}
