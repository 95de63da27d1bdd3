//! Hot counters: a counter writing faster than the configured rate per slot is spread over more
//! of its datacenter's slots, and drawn back in once it cools.
//!
//! Each node counts the writes it applies to its own slot per one-second window. Only the node
//! owning a counter's first slot (in placement order) proposes changes for that counter, so one
//! node decides per datacenter; its own rate times the counter's slot count estimates the
//! counter's total (selection spreads writes evenly over the slots). A proposal is a new version
//! of the counter's description, which every node merges by version. Reads sum every slot that
//! ever held a value, so growing or shrinking never moves or loses a count.

use std::collections::HashMap;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use geocount_model::{CounterId, Placement, VersionedDescription};
use geocount_sync::DescriptionTable;

/// How long a grown counter must stay cool before it shrinks.
const COOL_DOWN_MS: u64 = 10_000;
/// The window writes are counted over.
const WINDOW_MS: u64 = 1_000;
/// Buckets of the coarse count that decides which counters are counted exactly.
const SKETCH_BUCKETS: usize = 4_096;

/// A change of a counter's slot count proposed by this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardChange {
    /// The counter.
    pub id: String,
    /// Its new `numberOfShards`.
    pub number_of_shards: u32,
}

/// Per-window write counts and the decisions drawn from them.
///
/// Counting every counter exactly would keep an entry for each counter written in the window,
/// which on a node of millions of counters written uniformly is millions of entries a second.
/// So writes are first counted per bucket of ids (a hash into [`SKETCH_BUCKETS`]); a counter is
/// counted exactly once its bucket passes an eighth of the threshold, and stays counted while it
/// is written. A counter that turns hot is thus counted short by at most that eighth in its first
/// hot window, and exactly from the next.
#[derive(Debug)]
pub struct HotCounters {
    threshold: u64,
    default_shards: u32,
    window_start_ms: u64,
    hasher: RandomState,
    /// Writes per bucket of ids in this window.
    sketch: Vec<u64>,
    /// Exact writes in this window of the counters counted exactly.
    counts: HashMap<CounterId, u64, RandomState>,
    window_writes: u64,
    last_hot_ms: HashMap<CounterId, u64>,
}

impl HotCounters {
    /// Tracks counters against `threshold` writes per second per slot.
    pub fn new(threshold: u64, default_shards: u32, now_ms: u64) -> Self {
        Self {
            threshold: threshold.max(1),
            default_shards,
            window_start_ms: now_ms,
            hasher: RandomState::default(),
            sketch: vec![0; SKETCH_BUCKETS],
            counts: HashMap::default(),
            window_writes: 0,
            last_hot_ms: HashMap::new(),
        }
    }

    /// Counts `writes` applied to counter `id` in this node's slot.
    pub fn count(&mut self, id: &CounterId, writes: u64) {
        self.window_writes += writes;
        if let Some(n) = self.counts.get_mut(id.as_str()) {
            *n += writes;
            return;
        }
        let bucket = (self.hasher.hash_one(id) % SKETCH_BUCKETS as u64) as usize;
        self.sketch[bucket] += writes;
        if self.sketch[bucket] > self.threshold / 8 {
            self.counts.insert(id.clone(), writes);
        }
    }

    /// At the end of a window: the writes per second of the window that ended, and the slot
    /// count changes this node proposes. `None` while the window runs.
    pub fn end_window_if_due(
        &mut self,
        now_ms: u64,
        descriptions: &DescriptionTable,
        placement: &Placement,
        own_slot: u32,
    ) -> Option<(u64, Vec<ShardChange>)> {
        let elapsed = now_ms.saturating_sub(self.window_start_ms);
        if elapsed < WINDOW_MS {
            return None;
        }
        // Counters written in this window stay counted exactly in the next.
        let mut counts = std::mem::take(&mut self.counts);
        self.counts = counts
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(id, _)| (id.clone(), 0))
            .collect();
        counts.retain(|_, n| *n > 0);
        self.sketch.fill(0);
        let per_second = |count: u64| count * 1000 / elapsed.max(1);
        let load = per_second(std::mem::take(&mut self.window_writes));
        self.window_start_ms = now_ms;
        let slot_count = placement.slot_count();
        let shards_of = |id: &str| -> (u32, u32) {
            descriptions
                .get(id)
                .map_or((self.default_shards, self.default_shards), |d| {
                    (
                        d.description.number_of_shards,
                        d.description.base_number_of_shards,
                    )
                })
        };
        let mut changes = Vec::new();
        // Growth: any counter hot in this window whose first slot is ours.
        for (id, count) in &counts {
            let rate = per_second(*count);
            if rate <= self.threshold {
                continue;
            }
            let (shards, _) = shards_of(id.as_str());
            let current = shards.min(slot_count);
            if placement.slots_for(id.as_str(), current)[0] != own_slot {
                continue;
            }
            self.last_hot_ms.insert(id.clone(), now_ms);
            let wanted = (rate * u64::from(current)).div_ceil(self.threshold);
            let wanted = (wanted.min(u64::from(slot_count)) as u32).max(current + 1);
            if current < slot_count {
                changes.push(ShardChange {
                    id: id.to_string(),
                    number_of_shards: wanted.min(slot_count),
                });
            }
        }
        // Shrinking: counters grown past their base, ours to decide, cool for long enough.
        for (id, description) in descriptions.iter() {
            let d = &description.description;
            if d.number_of_shards <= d.base_number_of_shards {
                continue;
            }
            let current = d.number_of_shards.min(slot_count);
            if placement.slots_for(id, current)[0] != own_slot {
                continue;
            }
            let rate = per_second(counts.get(id).copied().unwrap_or(0));
            let last_hot = *self.last_hot_ms.entry(d.id.clone()).or_insert(now_ms);
            let cool = rate * u64::from(current) * 4 < self.threshold * u64::from(current);
            if cool && now_ms.saturating_sub(last_hot) >= COOL_DOWN_MS {
                let wanted = (rate * u64::from(current)).div_ceil(self.threshold) as u32;
                changes.push(ShardChange {
                    id: id.to_owned(),
                    number_of_shards: wanted.max(d.base_number_of_shards).min(current - 1).max(1),
                });
                self.last_hot_ms.remove(id);
            }
        }
        Some((load, changes))
    }
}

/// The description after `change`, from the current one (or the defaults).
pub fn changed_description(
    current: Option<&VersionedDescription>,
    defaults: geocount_model::CounterDescription,
    change: &ShardChange,
) -> geocount_model::CounterDescription {
    let mut description = current.map_or(defaults, |d| d.description.clone());
    description.number_of_shards = change.number_of_shards;
    description
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::{CounterDescription, CounterId, CounterType, HlcTimestamp};

    fn first_slot_owner(placement: &Placement, id: &str, shards: u32) -> u32 {
        placement.slots_for(id, shards)[0]
    }

    #[test]
    fn a_hot_counter_grows_and_a_cool_one_shrinks_back() {
        let placement = Placement::new("USA_0", 4, 16);
        let owner = first_slot_owner(&placement, "hot", 1);
        let mut hot = HotCounters::new(100, 1, 0);
        let mut descriptions = DescriptionTable::default();
        hot.count(&CounterId::new("hot").unwrap(), 450);
        hot.count(&CounterId::new("cold").unwrap(), 5);
        assert!(
            hot.end_window_if_due(500, &descriptions, &placement, owner)
                .is_none()
        );
        let (load, changes) = hot
            .end_window_if_due(1000, &descriptions, &placement, owner)
            .unwrap();
        assert_eq!(load, 455);
        assert_eq!(
            changes,
            vec![ShardChange {
                id: "hot".into(),
                number_of_shards: 4
            }]
        );

        // Another node never proposes for a counter whose first slot it does not own.
        let other = (owner + 1) % 4;
        let mut elsewhere = HotCounters::new(100, 1, 0);
        elsewhere.count(&CounterId::new("hot").unwrap(), 450);
        assert!(
            elsewhere
                .end_window_if_due(1000, &descriptions, &placement, other)
                .unwrap()
                .1
                .is_empty()
        );

        descriptions.merge(VersionedDescription {
            description: CounterDescription {
                id: CounterId::new("hot").unwrap(),
                counter_type: CounterType::Sum,
                number_of_shards: 4,
                base_number_of_shards: 1,
                window_seconds: 300,
                created_at_ms: 0,
                generation: Default::default(),
                deleted: false,
                expires_at_ms: None,
                history: Vec::new(),
                min: None,
                max: None,
            },
            version: HlcTimestamp {
                physical_ms: 1,
                logical: 0,
                node: 0,
            },
        });
        let owner = first_slot_owner(&placement, "hot", 4);
        // Cool, but not for long enough yet.
        let (_, changes) = hot
            .end_window_if_due(2000, &descriptions, &placement, owner)
            .unwrap();
        assert!(changes.is_empty());
        let (_, changes) = hot
            .end_window_if_due(12_500, &descriptions, &placement, owner)
            .unwrap();
        assert_eq!(
            changes,
            vec![ShardChange {
                id: "hot".into(),
                number_of_shards: 1
            }]
        );
    }
}
