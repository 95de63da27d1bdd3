//! A counter's description: what it counts and how it is spread over slots.

use serde::{Deserialize, Serialize};

use crate::history::{HistoryLevel, check_levels};
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
    /// The time of its latest reset or delete (zero: never). A slot's record of an older
    /// generation counts as zero at every tier (docs/architecture.md, "Reset, delete and
    /// expiry").
    #[serde(default)]
    pub generation: HlcTimestamp,
    /// Whether it is deleted: a tombstone, kept for `lifecycle.tombstone_retention_secs`.
    #[serde(default)]
    pub deleted: bool,
    /// When it is deleted by its expiry, in milliseconds since the unix epoch.
    #[serde(default)]
    pub expires_at_ms: Option<u64>,
    /// The rollups kept beyond its window, by rising step (a sum counter's only; none: no
    /// history).
    #[serde(default)]
    pub history: Vec<HistoryLevel>,
    /// The lowest world total its writes may reach (a sum counter's only; `None`: no floor).
    #[serde(default)]
    pub min: Option<i64>,
    /// The highest world total its writes may reach (a sum counter's only; `None`: no
    /// ceiling).
    #[serde(default)]
    pub max: Option<i64>,
}

impl CounterDescription {
    /// Its bounds, `None` for an unbounded counter.
    pub fn bounds(&self) -> Option<crate::Bounds> {
        let bounds = crate::Bounds {
            min: self.min,
            max: self.max,
        };
        (bounds.min.is_some() || bounds.max.is_some()).then_some(bounds)
    }

    /// Checks what a description must satisfy wherever it comes from: `1 <=
    /// baseNumberOfShards <= numberOfShards <= MAX_SHARDS_PER_COUNTER` (growth never takes a
    /// counter under its base), a window of at least a second, and history levels as
    /// [`check_levels`] has them, on a sum counter only. A node checks the
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
        if !self.history.is_empty() && self.counter_type == CounterType::Unique {
            return Err(ModelError::InvalidDescription(format!(
                "counter {}: a unique counter keeps no history",
                self.id
            )));
        }
        check_levels(&self.history).map_err(|message| {
            ModelError::InvalidDescription(format!("counter {}: {message}", self.id))
        })?;
        if let Some(bounds) = self.bounds() {
            if self.counter_type == CounterType::Unique {
                return Err(ModelError::InvalidDescription(format!(
                    "counter {}: only a sum counter takes min and max",
                    self.id
                )));
            }
            bounds.check(self.id.as_str())?;
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
    /// Whether `other` should replace `self`: a later generation wins, then a later version.
    /// A change made where a reset or delete had not yet arrived loses to it.
    pub fn is_older_than(&self, other: &VersionedDescription) -> bool {
        (self.description.generation, self.version) < (other.description.generation, other.version)
    }

    /// The tombstone this description becomes once its expiry has passed at `now_ms`: a
    /// delete of generation `(expiresAtMs, 0, 0)`, which every node makes alike from the same
    /// description. `None` while it has not expired, and for an expiry at or before its
    /// generation (a reset or delete after that time superseded it).
    pub fn expired_at(&self, now_ms: u64) -> Option<VersionedDescription> {
        let expires = self.description.expires_at_ms?;
        if expires > now_ms || self.description.deleted {
            return None;
        }
        let generation = HlcTimestamp {
            physical_ms: expires,
            logical: 0,
            node: 0,
        };
        if generation <= self.description.generation {
            return None;
        }
        let mut tombstone = self.clone();
        tombstone.description.generation = generation;
        tombstone.description.deleted = true;
        tombstone.description.expires_at_ms = None;
        Some(tombstone)
    }

    /// Whether the counter exists at `now_ms`: not deleted, and its expiry not passed.
    pub fn is_live(&self, now_ms: u64) -> bool {
        !self.description.deleted && self.expired_at(now_ms).is_none()
    }

    /// The generation reads count from at `now_ms`: the expiry's once it has passed.
    pub fn generation_at(&self, now_ms: u64) -> HlcTimestamp {
        self.expired_at(now_ms)
            .map_or(self.description.generation, |t| t.description.generation)
    }

    /// The reset of this counter at `at` (a time of the resetting node's clock, which must
    /// be after this description's version): every slot's record of an older generation
    /// counts as zero, and an expiry still to come is kept.
    pub fn reset(&self, at: HlcTimestamp) -> VersionedDescription {
        let mut reset = self.clone();
        reset.description.generation = at;
        reset.description.deleted = false;
        reset
            .description
            .expires_at_ms
            .take_if(|expires| *expires <= at.physical_ms);
        reset.version = at;
        reset
    }

    /// The delete of this counter at `at`: a tombstone of generation `at`.
    pub fn delete(&self, at: HlcTimestamp) -> VersionedDescription {
        let mut tombstone = self.reset(at);
        tombstone.description.deleted = true;
        tombstone.description.expires_at_ms = None;
        tombstone
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
            generation: HlcTimestamp::default(),
            deleted: false,
            expires_at_ms: None,
            history: Vec::new(),
            min: None,
            max: None,
        }
    }

    #[test]
    fn history_is_checked_and_only_for_sums() {
        let mut d = description(1, 1, 300);
        d.history = vec![HistoryLevel {
            step_seconds: 60,
            keep_seconds: 3_600,
        }];
        assert!(d.check().is_ok());
        d.history[0].keep_seconds = 90;
        assert!(d.check().unwrap_err().to_string().contains("multiple"));
        d.history[0].keep_seconds = 3_600;
        d.counter_type = CounterType::Unique;
        assert!(d.check().unwrap_err().to_string().contains("unique"));
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

    fn at(physical_ms: u64, node: u32) -> HlcTimestamp {
        HlcTimestamp {
            physical_ms,
            logical: 0,
            node,
        }
    }

    fn versioned(version: HlcTimestamp) -> VersionedDescription {
        VersionedDescription {
            description: description(1, 1, 300),
            version,
        }
    }

    #[test]
    fn a_reset_or_delete_wins_over_a_later_change_made_without_it() {
        let created = versioned(at(1_000, 1));
        let reset = created.reset(at(2_000, 2));
        let mut grown = versioned(at(3_000, 3));
        grown.description.number_of_shards = 2;
        assert!(grown.is_older_than(&reset));
        assert!(!reset.is_older_than(&grown));
        let deleted = reset.delete(at(2_500, 1));
        assert!(reset.is_older_than(&deleted));
        assert!(!deleted.is_live(u64::MAX));
        assert!(reset.is_live(u64::MAX));
        // A write after the delete makes it again in the same generation, at a later version.
        let mut again = deleted.clone();
        again.description.deleted = false;
        again.version = at(2_600, 3);
        assert!(deleted.is_older_than(&again));
    }

    #[test]
    fn an_expiry_is_a_delete_every_node_makes_alike() {
        let mut described = versioned(at(1_000, 1));
        described.description.expires_at_ms = Some(5_000);
        assert!(described.is_live(4_999));
        assert_eq!(described.expired_at(4_999), None);
        let tombstone = described.expired_at(5_000).unwrap();
        assert_eq!(tombstone, described.expired_at(9_000).unwrap());
        assert!(tombstone.description.deleted);
        assert_eq!(tombstone.description.generation, at(5_000, 0));
        assert_eq!(described.generation_at(5_000), at(5_000, 0));
        assert!(described.is_older_than(&tombstone));
        // A reset after the expiry time drops the expiry; one before keeps it.
        assert_eq!(
            described.reset(at(6_000, 2)).description.expires_at_ms,
            None
        );
        let kept = described.reset(at(2_000, 2));
        assert_eq!(kept.description.expires_at_ms, Some(5_000));
        assert_eq!(
            kept.expired_at(5_000).unwrap().description.generation,
            at(5_000, 0)
        );
        // An expiry at or before the latest reset never deletes.
        let mut stale = described.reset(at(6_000, 2));
        stale.description.expires_at_ms = Some(5_000);
        assert!(stale.is_live(10_000));
    }
}
