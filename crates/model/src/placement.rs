//! Where a counter's writes go inside a datacenter: consistent hashing with virtual nodes.
//!
//! Each slot of a datacenter owns `virtual_nodes` points on a 64-bit ring. A counter's slots
//! are the first `numberOfShards` distinct slots met walking the ring from the hash of its id, so
//! growing a counter from n to n+1 slots keeps its first n, and adding a slot to a datacenter
//! moves only a small share of counters. The hash is xxh3 with a fixed seed, so every binary and
//! every version agrees on placement.

use crate::SlotId;
use crate::hash::hash64;

/// The ring of one datacenter.
#[derive(Debug, Clone)]
pub struct Placement {
    ring: Vec<(u64, u32)>,
    slots: u32,
}

impl Placement {
    /// The ring of datacenter `datacenter` with `slots` slots.
    pub fn new(datacenter: &str, slots: u32, virtual_nodes: u32) -> Self {
        let mut ring = Vec::with_capacity(slots as usize * virtual_nodes as usize);
        for slot in 0..slots {
            let name = SlotId::new(datacenter, slot);
            for point in 0..virtual_nodes {
                let key = format!("{name}#{point}");
                ring.push((hash64(key.as_bytes()), slot));
            }
        }
        ring.sort_unstable();
        Self { ring, slots }
    }

    /// How many slots the datacenter has.
    pub fn slot_count(&self) -> u32 {
        self.slots
    }

    /// The slots counter `id` uses when spread over `number_of_shards` (capped at the
    /// datacenter's slot count), in ring order.
    pub fn slots_for(&self, id: &str, number_of_shards: u32) -> Vec<u32> {
        let wanted = number_of_shards.clamp(1, self.slots) as usize;
        let hash = hash64(id.as_bytes());
        let start = self.ring.partition_point(|(h, _)| *h < hash);
        let mut chosen = Vec::with_capacity(wanted);
        for i in 0..self.ring.len() {
            let slot = self.ring[(start + i) % self.ring.len()].1;
            if !chosen.contains(&slot) {
                chosen.push(slot);
                if chosen.len() == wanted {
                    break;
                }
            }
        }
        chosen
    }

    /// The one slot among `slots` that writes with idempotency key `key` always go to.
    pub fn slot_for_key(slots: &[u32], key: &str) -> u32 {
        slots[(hash64(key.as_bytes()) % slots.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_distinct_capped_and_stable_when_growing() {
        let placement = Placement::new("USA_0", 5, 64);
        for id in ["a", "tweet:1:likes", "#rust", "x".repeat(200).as_str()] {
            let one = placement.slots_for(id, 1);
            let three = placement.slots_for(id, 3);
            let all = placement.slots_for(id, 99);
            assert_eq!(one.len(), 1);
            assert_eq!(&three[..1], &one[..], "growing keeps the first slot");
            assert_eq!(&all[..3], &three[..]);
            let mut sorted = all.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, vec![0, 1, 2, 3, 4]);
        }
    }

    #[test]
    fn counters_spread_over_every_slot() {
        let placement = Placement::new("ASIA_0", 4, 64);
        let mut hits = [0u32; 4];
        for n in 0..4000 {
            hits[placement.slots_for(&format!("counter-{n}"), 1)[0] as usize] += 1;
        }
        for h in hits {
            assert!((600..1400).contains(&h), "{hits:?}");
        }
    }

    #[test]
    fn idempotency_keys_pick_one_slot() {
        let slots = [3, 1, 4];
        let chosen = Placement::slot_for_key(&slots, "retry-me");
        assert!(slots.contains(&chosen));
        assert_eq!(Placement::slot_for_key(&slots, "retry-me"), chosen);
    }
}
