//! `Idempotency-Key` records: a retried write is applied once and answered as the first was.
//!
//! Records are logged with the write they belong to, so they are exactly as durable as it is,
//! and kept for the configured retention.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use geocount_model::{CounterId, SlotState};
use hashbrown::HashTable;
use serde::{Deserialize, Serialize};

use crate::commit::Change;

/// The longest idempotency key accepted, in bytes.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;

/// What the first write with a key did.
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
    /// The record of a write to `counter` that made `change` and left the slot at `outcome`.
    pub fn new(
        counter: &CounterId,
        change: &Change,
        outcome: SlotState,
        created_at_ms: u64,
    ) -> Self {
        let (delta, item) = match change {
            Change::Delta(delta) => (*delta, None),
            Change::Item { hash, .. } => (0, Some(*hash)),
        };
        Self {
            counter: counter.clone(),
            delta,
            item,
            outcome,
            created_at_ms,
        }
    }

    /// Whether a retry asks for the same write.
    pub fn matches(&self, counter: &str, change: &Change) -> bool {
        self.counter.as_str() == counter
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
///
/// Each key is held once: the age queue names a key by its hash and creation time, not by a
/// second copy, so a key costs one heap block and a node taking keyed writes flat out does not
/// copy each key twice (ARCHITECTURE.md, "Seventh round").
#[derive(Debug)]
pub struct IdempotencyCache {
    records: HashTable<(Box<str>, IdempotencyRecord)>,
    hasher: foldhash::fast::RandomState,
    /// `(created_at_ms, hash of the key)`, oldest first.
    by_age: VecDeque<(u64, u64)>,
    retention_ms: u64,
}

impl IdempotencyCache {
    /// An empty cache keeping keys for `retention_ms`.
    pub fn new(retention_ms: u64) -> Self {
        Self {
            records: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            by_age: VecDeque::new(),
            retention_ms,
        }
    }

    /// The record for `key`, if it is still retained.
    pub fn get(&self, key: &str) -> Option<&IdempotencyRecord> {
        let hash = self.hasher.hash_one(key);
        self.records
            .find(hash, |(held, _)| **held == *key)
            .map(|(_, record)| record)
    }

    /// Remembers `key`, unless it is already past retention at `now_ms`.
    pub fn insert(&mut self, key: Box<str>, record: IdempotencyRecord, now_ms: u64) {
        if record.created_at_ms + self.retention_ms <= now_ms {
            return;
        }
        let hash = self.hasher.hash_one(&*key);
        self.by_age.push_back((record.created_at_ms, hash));
        let hasher = &self.hasher;
        match self.records.entry(
            hash,
            |(held, _)| *held == key,
            |(held, _)| hasher.hash_one(&**held),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut held) => held.get_mut().1 = record,
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert((key, record));
            }
        }
    }

    /// Forgets the keys older than the retention at `now_ms`, returning them.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Box<str>> {
        let mut expired = Vec::new();
        while let Some(&(created, hash)) = self.by_age.front() {
            if created + self.retention_ms > now_ms {
                break;
            }
            self.by_age.pop_front();
            // A key re-recorded later (after an earlier expiry) keeps its newer record. Two keys
            // of one hash created in the same millisecond are both due: either may go first.
            let hasher = &self.hasher;
            if let Ok(held) = self.records.find_entry(hash, |(key, record)| {
                record.created_at_ms == created && hasher.hash_one(&**key) == hash
            }) {
                let ((key, _), _) = held.remove();
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
        IdempotencyRecord::new(&id(counter), &Change::Delta(delta), outcome, at)
    }

    fn id(counter: &str) -> CounterId {
        CounterId::new(counter).unwrap()
    }

    fn item(item: &str) -> Change {
        Change::Item {
            item: item.into(),
            hash: geocount_model::unique::hash_item(item),
        }
    }

    #[test]
    fn an_item_matches_only_the_same_item() {
        let first = IdempotencyRecord::new(&id("u"), &item("a"), SlotState::default(), 0);
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
    fn a_key_recorded_again_keeps_its_newer_record() {
        let mut cache = IdempotencyCache::new(1000);
        cache.insert("a".into(), record("c", 1, 0), 0);
        cache.insert("a".into(), record("c", 5, 500), 500);
        assert_eq!(cache.len(), 1, "one key, held once");
        // The first record's time comes: the newer one stays.
        assert!(cache.expire(1000).is_empty());
        assert!(cache.get("a").unwrap().matches("c", &Change::Delta(5)));
        assert_eq!(cache.expire(1500), vec![Box::<str>::from("a")]);
        assert!(cache.is_empty());
    }

    #[test]
    fn many_keys_expire_in_age_order_and_only_theirs() {
        let mut cache = IdempotencyCache::new(100);
        for n in 0..10_000u64 {
            cache.insert(
                format!("k{n}").into(),
                record("c", n as i64, n / 10),
                n / 10,
            );
        }
        let expired = cache.expire(599);
        assert_eq!(expired.len(), 5_000, "keys created by 499 ms");
        assert!(
            expired
                .iter()
                .all(|key| key[1..].parse::<u64>().unwrap() < 5_000)
        );
        assert!(cache.get("k4999").is_none());
        assert!(
            cache
                .get("k5000")
                .unwrap()
                .matches("c", &Change::Delta(5_000))
        );
        assert_eq!(cache.len(), 5_000);
    }

    #[test]
    fn records_already_expired_are_not_kept() {
        let mut cache = IdempotencyCache::new(1000);
        cache.insert("old".into(), record("c", 1, 0), 5000);
        assert!(cache.get("old").is_none());
    }
}
