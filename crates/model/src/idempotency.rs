//! What the first write with an `Idempotency-Key` did: kept by its slot's owner, logged with
//! the write, and copied to the slot's peers, so a retry is answered as the first write was
//! even after the owner lost its disk.

use serde::{Deserialize, Serialize};

use crate::{CounterId, SlotState};

/// The record of one keyed write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// The counter it wrote (inline up to 24 bytes: no heap block of its own).
    pub counter: CounterId,
    /// The signed delta it applied (0 for an item).
    pub delta: i64,
    /// The hash of the item it added, for a unique counter.
    pub item: Option<u64>,
    /// The slot's state right after it: the answer every retry gets.
    pub outcome: SlotState,
    /// When it was applied, in unix milliseconds.
    pub created_at_ms: u64,
}

impl IdempotencyRecord {
    /// The record of a keyed change of `counter`'s life (a reset, delete or expiry), in the
    /// shape of a write's that no write has (delta 0, no item): `change` is which change it
    /// was and its argument (a time to live), kept in `outcome`.
    pub fn of_life_change(counter: CounterId, change: (i64, u64), created_at_ms: u64) -> Self {
        Self {
            counter,
            delta: 0,
            item: None,
            outcome: SlotState {
                value: change.0,
                version: change.1,
            },
            created_at_ms,
        }
    }

    /// The change of a counter's life this records (as given to
    /// [`IdempotencyRecord::of_life_change`]), if it records one rather than a write.
    pub fn life_change(&self) -> Option<(i64, u64)> {
        (self.delta == 0 && self.item.is_none())
            .then_some((self.outcome.value, self.outcome.version))
    }

    /// Whether a retry asks for the same write: to `counter`, adding `delta` (with no item) or
    /// the item hashed to `item`.
    pub fn matches(&self, counter: &str, delta: i64, item: Option<u64>) -> bool {
        self.counter.as_str() == counter
            && match item {
                None => self.item.is_none() && self.delta == delta,
                Some(_) => self.item == item,
            }
    }

    /// The first write, as a refusal names it: `delta 5`, or `an item`.
    pub fn describe_write(&self) -> String {
        match (self.item, self.life_change()) {
            (Some(_), _) => "an item".to_owned(),
            (None, Some(_)) => "a reset, delete or expiry".to_owned(),
            (None, None) => format!("delta {}", self.delta),
        }
    }
}
