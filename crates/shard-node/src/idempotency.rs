//! `Idempotency-Key` records: a retried write is applied once and answered as the first was.
//!
//! Records are logged with the write they belong to, so they are exactly as durable as it is,
//! and kept for the configured retention.

use std::collections::{HashMap, VecDeque};

use geocount_model::SlotState;
use serde::{Deserialize, Serialize};

use crate::commit::Change;

/// The longest idempotency key accepted, in bytes.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;

/// What the first write with a key did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// The counter it wrote.
    pub counter: Box<str>,
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
    /// The record of a write to `counter` that made `change` and left the slot at `outcome`.
    pub fn new(counter: &str, change: &Change, outcome: SlotState, created_at_ms: u64) -> Self {
        let (delta, item) = match change {
            Change::Delta(delta) => (*delta, None),
            Change::Item { hash, .. } => (0, Some(*hash)),
        };
        Self {
            counter: counter.into(),
            delta,
            item,
            outcome,
            created_at_ms,
        }
    }

    /// Whether a retry asks for the same write.
    pub fn matches(&self, counter: &str, change: &Change) -> bool {
        &*self.counter == counter
            && match change {
                Change::Delta(delta) => self.item.is_none() && self.delta == *delta,
                Change::Item { hash, .. } => self.item == Some(*hash),
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

/// The remembered keys, expiring in the order they were created.
#[derive(Debug)]
pub struct IdempotencyCache {
    records: HashMap<Box<str>, IdempotencyRecord>,
    by_age: VecDeque<(u64, Box<str>)>,
    retention_ms: u64,
}

impl IdempotencyCache {
    /// An empty cache keeping keys for `retention_ms`.
    pub fn new(retention_ms: u64) -> Self {
        Self {
            records: HashMap::new(),
            by_age: VecDeque::new(),
            retention_ms,
        }
    }

    /// The record for `key`, if it is still retained.
    pub fn get(&self, key: &str) -> Option<&IdempotencyRecord> {
        self.records.get(key)
    }

    /// Remembers `key`, unless it is already past retention at `now_ms`.
    pub fn insert(&mut self, key: Box<str>, record: IdempotencyRecord, now_ms: u64) {
        if record.created_at_ms + self.retention_ms <= now_ms {
            return;
        }
        self.by_age.push_back((record.created_at_ms, key.clone()));
        self.records.insert(key, record);
    }

    /// Forgets the keys older than the retention at `now_ms`, returning them.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Box<str>> {
        let mut expired = Vec::new();
        while let Some((created, _)) = self.by_age.front() {
            if created + self.retention_ms > now_ms {
                break;
            }
            let (created, key) = self.by_age.pop_front().expect("front exists");
            // A key re-recorded later (after an earlier expiry) keeps its newer record.
            if self
                .records
                .get(&key)
                .is_some_and(|r| r.created_at_ms == created)
            {
                self.records.remove(&key);
                expired.push(key);
            }
        }
        expired
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(counter: &str, delta: i64, at: u64) -> IdempotencyRecord {
        let outcome = SlotState {
            value: delta,
            version: 1,
        };
        IdempotencyRecord::new(counter, &Change::Delta(delta), outcome, at)
    }

    fn item(item: &str) -> Change {
        Change::Item {
            item: item.into(),
            hash: geocount_model::unique::hash_item(item),
        }
    }

    #[test]
    fn an_item_matches_only_the_same_item() {
        let first = IdempotencyRecord::new("u", &item("a"), SlotState::default(), 0);
        assert!(first.matches("u", &item("a")));
        assert!(!first.matches("u", &item("b")));
        assert!(!first.matches("v", &item("a")));
        assert!(!first.matches("u", &Change::Delta(0)));
        assert_eq!(first.describe_write(), "an item");
        assert!(!record("u", 1, 0).matches("u", &item("a")));
    }

    #[test]
    fn keys_expire_after_retention() {
        let mut cache = IdempotencyCache::new(1000);
        cache.insert("a".into(), record("c", 1, 0), 0);
        cache.insert("b".into(), record("c", 2, 500), 500);
        assert!(cache.expire(999).is_empty());
        assert_eq!(cache.expire(1000), vec![Box::<str>::from("a")]);
        assert!(cache.get("a").is_none());
        assert!(cache.get("b").unwrap().matches("c", &Change::Delta(2)));
        assert!(!cache.get("b").unwrap().matches("c", &Change::Delta(3)));
        assert_eq!(cache.expire(1500).len(), 1);
        assert!(cache.is_empty());
    }

    #[test]
    fn records_already_expired_are_not_kept() {
        let mut cache = IdempotencyCache::new(1000);
        cache.insert("old".into(), record("c", 1, 0), 5000);
        assert!(cache.get("old").is_none());
    }
}
