//! Partitions of the counter space: the aggregators of a tier may each hold only some of them,
//! so that no one process must hold every counter.
//!
//! A counter's partition is its placement hash modulo the topology's `partitions`. Pulls name
//! the partitions they want ([`Partitions`] in a `SyncRequest`) and the tier below sends only
//! those counters; shard nodes need no partition setting of their own.

use serde::{Deserialize, Serialize};

use crate::hash::hash64;

/// The partition of counter `id` when the counter space has `count` partitions.
pub fn partition_of(id: &str, count: u32) -> u32 {
    (hash64(id.as_bytes()) % u64::from(count.max(1))) as u32
}

/// Some partitions of a counter space of `count`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Partitions {
    /// How many partitions the counter space has.
    pub count: u32,
    /// The partitions held, ascending.
    pub held: Vec<u32>,
}

impl Partitions {
    /// Every partition of `count`.
    pub fn all(count: u32) -> Self {
        Self {
            count,
            held: (0..count).collect(),
        }
    }

    /// Whether every partition is held.
    pub fn is_all(&self) -> bool {
        self.held.len() as u64 >= u64::from(self.count)
    }

    /// Whether counter `id` falls in a held partition.
    pub fn holds(&self, id: &str) -> bool {
        self.is_all()
            || self
                .held
                .binary_search(&partition_of(id, self.count))
                .is_ok()
    }

    /// Whether every partition of `other` is held here.
    pub fn covers(&self, other: &Partitions) -> bool {
        other
            .held
            .iter()
            .all(|p| self.held.binary_search(p).is_ok())
    }

    /// What a pull of these partitions asks for: `None` (every counter) when all are held.
    pub fn filter(&self) -> Option<Partitions> {
        (!self.is_all()).then(|| self.clone())
    }
}

impl std::fmt::Display for Partitions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held: Vec<String> = self.held.iter().map(u32::to_string).collect();
        write!(f, "[{}] of {}", held.join(", "), self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_split_counters_evenly_and_disjointly() {
        let ids: Vec<String> = (0..10_000).map(|n| format!("tweet:{n}:likes")).collect();
        let halves = [0, 1].map(|p| Partitions {
            count: 2,
            held: vec![p],
        });
        let held: Vec<usize> = halves
            .iter()
            .map(|half| ids.iter().filter(|id| half.holds(id)).count())
            .collect();
        assert_eq!(held[0] + held[1], ids.len(), "each counter in exactly one");
        assert!(held[0].abs_diff(held[1]) < 500, "{held:?}");
        assert!(ids.iter().all(|id| Partitions::all(2).holds(id)));
        assert!(Partitions::all(2).covers(&halves[1]));
        assert!(!halves[0].covers(&halves[1]));
        assert_eq!(Partitions::all(1).filter(), None);
        assert_eq!(halves[0].filter(), Some(halves[0].clone()));
    }
}
