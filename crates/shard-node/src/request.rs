//! What a write asks ([`WriteRequest`]): a counter, a delta or an item ([`Change`]), a key,
//! a time. Every stage names writes with it, and a refusal may carry one back
//! ([`crate::error::Shortage`]), so it depends on nothing of the node.

use geocount_model::{CounterId, CounterType};

/// What a write changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Adds a signed delta to a sum counter's total.
    Delta(i64),
    /// Adds an item to a unique counter's sketch.
    Item {
        /// The item, as written (forwarded writes carry it on).
        item: Box<str>,
        /// Its hash ([`geocount_model::unique::hash_item`]).
        hash: u64,
    },
}

impl Change {
    /// An item change, hashed.
    pub fn item(item: &str) -> Self {
        Change::Item {
            item: item.into(),
            hash: geocount_model::unique::hash_item(item),
        }
    }

    /// The counter type this change is for.
    pub fn counter_type(&self) -> CounterType {
        match self {
            Change::Delta(_) => CounterType::Sum,
            Change::Item { .. } => CounterType::Unique,
        }
    }
}

/// One write asked of the node.
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// The counter.
    pub id: CounterId,
    /// A delta or an item.
    pub change: Change,
    /// Deduplicates retries of this write.
    pub idempotency_key: Option<Box<str>>,
    /// When the hit happened, in unix seconds (kept for rolling windows).
    pub timestamp_secs: u64,
    /// Sets the counter's expiry this many seconds ahead, in the same group as the write,
    /// when it has none (increment with expiry).
    pub ttl_secs: Option<u32>,
}
