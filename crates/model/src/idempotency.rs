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
        match self.item {
            Some(_) => "an item".to_owned(),
            None => format!("delta {}", self.delta),
        }
    }
}
