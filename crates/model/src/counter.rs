//! A counter's description: what it counts and how it is spread over slots.

use serde::{Deserialize, Serialize};

use crate::{CounterId, HlcTimestamp, ModelError};

/// The most slots a counter may be spread over.
pub const MAX_SHARDS_PER_COUNTER: u32 = 1024;

/// What a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CounterType {
    /// A running total of signed deltas.
    #[default]
    Sum,
    /// The number of distinct items written, estimated by a HyperLogLog sketch per slot
    /// ([`crate::UniqueSketch`]); its writes carry an item, never a delta.
    Unique,
}

/// The description of a counter, returned by `POST /counter`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterDescription {
    /// The counter's id.
    pub id: CounterId,
    /// What it counts.
    #[serde(rename = "type")]
    pub counter_type: CounterType,
    /// How many of its datacenter's slots take its writes (capped at the datacenter's slot
    /// count); grows while the counter is hot.
    pub number_of_shards: u32,
    /// The `numberOfShards` it was created with: it never shrinks below this.
    pub base_number_of_shards: u32,
    /// The length of its rolling window, in seconds.
    pub window_seconds: u32,
    /// When it was created, in milliseconds since the unix epoch.
    pub created_at_ms: u64,
}

impl CounterDescription {
    /// Checks what a description must satisfy wherever it comes from: `1 <=
    /// baseNumberOfShards <= numberOfShards <= MAX_SHARDS_PER_COUNTER` (growth never takes a
    /// counter under its base) and a window of at least a second. A node checks the
    /// descriptions it learns from others with it: one with no slots or an empty window would
    /// refuse every write or count no hit in any window.
    pub fn check(&self) -> Result<(), ModelError> {
        let (base, shards) = (self.base_number_of_shards, self.number_of_shards);
        if base == 0 || base > shards || shards > MAX_SHARDS_PER_COUNTER {
            return Err(ModelError::InvalidDescription(format!(
                "counter {}: numberOfShards {shards} and baseNumberOfShards {base} must satisfy \
                 1 <= base <= numberOfShards <= {MAX_SHARDS_PER_COUNTER}",
                self.id
            )));
        }
        if self.window_seconds == 0 {
            return Err(ModelError::InvalidDescription(format!(
                "counter {}: windowSeconds must be at least 1",
                self.id
            )));
        }
        Ok(())
    }
}

/// A description with the version every node orders changes by (last writer wins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionedDescription {
    /// The description.
    pub description: CounterDescription,
    /// When and where it was last changed.
    pub version: HlcTimestamp,
}

impl VersionedDescription {
    /// Whether `other` should replace `self`: a later version wins.
    pub fn is_older_than(&self, other: &VersionedDescription) -> bool {
        self.version < other.version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn description(base: u32, shards: u32, window_seconds: u32) -> CounterDescription {
        CounterDescription {
            id: CounterId::new("c").unwrap(),
            counter_type: CounterType::Sum,
            number_of_shards: shards,
            base_number_of_shards: base,
            window_seconds,
            created_at_ms: 0,
        }
    }

    #[test]
    fn a_description_needs_slots_at_or_over_its_base_and_a_window() {
        for (base, shards, window) in [(1, 1, 1), (1, 3, 300), (2, 2, 60), (1, 1024, 1)] {
            assert!(description(base, shards, window).check().is_ok());
        }
        for (base, shards, window) in [
            (0, 1, 300),
            (1, 0, 300),
            (3, 2, 300),
            (1, 1025, 300),
            (1, 1, 0),
        ] {
            let refused = description(base, shards, window).check().unwrap_err();
            assert!(
                matches!(refused, ModelError::InvalidDescription(_)),
                "{base} {shards} {window}: {refused}"
            );
        }
    }
}
