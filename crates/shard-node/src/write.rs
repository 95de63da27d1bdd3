//! The write vocabulary: what a write asks ([`WriteRequest`], [`Change`]) and what a
//! lifecycle change asks ([`LifecycleRequest`], [`LifecycleChange`]). Parsing, routing,
//! forwarding, errors and the commit loop all name writes; this room depends on none of them,
//! so a refusal ([`crate::error::Shortage`]) may carry a write back without an import cycle.

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

impl LifecycleChange {
    /// What a retry with the same `Idempotency-Key` must ask again: which change, and for an
    /// expiry the time to live it was asked with (`u64::MAX`: none), not the time it gave.
    pub fn asked(request: &LifecycleRequest) -> (i64, u64) {
        match request {
            LifecycleRequest::Reset => (1, 0),
            LifecycleRequest::Delete => (2, 0),
            LifecycleRequest::Expire(ttl) => (3, ttl.map_or(u64::MAX, u64::from)),
        }
    }
}

/// A change of a counter's life as a client asks it, before this node's clock turns a time to
/// live into a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleRequest {
    /// `POST /counter/{id}/reset`.
    Reset,
    /// `DELETE /counter/{id}`.
    Delete,
    /// `PATCH /counter/{id}` with `{"ttlSeconds": n | null}`.
    Expire(Option<u32>),
}

/// A change of a counter's life: what `DELETE /counter/{id}`, `POST /counter/{id}/reset` and
/// `PATCH /counter/{id}` ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleChange {
    /// Every slot counts from zero once it learns of it.
    Reset,
    /// The counter is gone; a later write makes it again from zero.
    Delete,
    /// Deleted at this time (unix ms), or never (`None`).
    Expire(Option<u64>),
    /// Deleted at this time (unix ms) if the write it comes with makes the counter: made with
    /// it (the defaults and this type, or again from its tombstone) when it is unknown here or
    /// gone; a live counter is left as it is. What a node does before it forwards a write
    /// carrying `ttlSeconds` to another slot: the expiry is durable before the write.
    ExpireIfMade {
        /// When it is deleted.
        expires_at_ms: u64,
        /// The forwarded write's counter type.
        counter_type: CounterType,
    },
}
