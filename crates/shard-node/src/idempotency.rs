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

/// The remembered keys, expiring in the order they were recorded.
///
/// A key is held as a 128-bit keyed hash, not its bytes: two SipHash-1-3 digests under random
/// keys chosen at startup, so no client can make two keys collide on purpose, and by chance two
/// of even billions of keys collide with odds under 10^-20. Records are kept in one queue in the
/// order recorded, which is both their store and the age order they expire in; a hash table
/// maps each key to its record's number in the queue. A key costs one queue slot and one table
/// slot, with no heap block of its own (ARCHITECTURE.md, "Tenth round"). The key strings stay
/// in the log and the checkpoint store, which hash them again at startup.
#[derive(Debug)]
pub struct IdempotencyCache {
    /// Records in the order recorded, oldest first. A record whose key was recorded again
    /// later is no longer indexed and waits here until it expires.
    held: VecDeque<Held>,
    /// How many records were ever taken off the front: `held[i]` is record number
    /// `popped + i`.
    popped: u64,
    /// Each key's latest record number, found by the key's hash.
    index: HashTable<u64>,
    hashers: [std::hash::RandomState; 2],
    retention_ms: u64,
}

/// One record and the hash of its key.
#[derive(Debug)]
struct Held {
    key: KeyHash,
    record: IdempotencyRecord,
}

/// A key's 128-bit hash, as two halves (a `u128` would align every record to 16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KeyHash([u64; 2]);

impl KeyHash {
    /// The hash the index finds a key by.
    fn slot(self) -> u64 {
        self.0[0]
    }
}

impl IdempotencyCache {
    /// An empty cache keeping keys for `retention_ms`.
    pub fn new(retention_ms: u64) -> Self {
        Self {
            held: VecDeque::new(),
            popped: 0,
            index: HashTable::new(),
            hashers: [std::hash::RandomState::new(), std::hash::RandomState::new()],
            retention_ms,
        }
    }

    fn hash(&self, key: &str) -> KeyHash {
        KeyHash(self.hashers.each_ref().map(|hasher| hasher.hash_one(key)))
    }

    /// The record for `key`, if it is still retained.
    pub fn get(&self, key: &str) -> Option<&IdempotencyRecord> {
        let key = self.hash(key);
        let (held, popped) = (&self.held, self.popped);
        self.index
            .find(key.slot(), |&number| {
                held[(number - popped) as usize].key == key
            })
            .map(|&number| &held[(number - popped) as usize].record)
    }

    /// Remembers `key`, unless it is already past retention at `now_ms`.
    pub fn insert(&mut self, key: &str, record: IdempotencyRecord, now_ms: u64) {
        if record.created_at_ms + self.retention_ms <= now_ms {
            return;
        }
        let key = self.hash(key);
        let number = self.popped + self.held.len() as u64;
        self.held.push_back(Held { key, record });
        let (held, popped) = (&self.held, self.popped);
        let record_of = |number: u64| &held[(number - popped) as usize];
        match self.index.entry(
            key.slot(),
            |&earlier| record_of(earlier).key == key,
            |&other| record_of(other).key.slot(),
        ) {
            // The earlier record stays queued, unindexed, until it expires.
            hashbrown::hash_table::Entry::Occupied(mut earlier) => *earlier.get_mut() = number,
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert(number);
            }
        }
    }

    /// Forgets the records older than the retention at `now_ms`; returns how many it dropped
    /// (records of keys recorded again later included). Records are queued in the order
    /// recorded, which is their age order (at startup: the store's, oldest first, then the
    /// log's), so it stops at the first record still retained.
    pub fn expire(&mut self, now_ms: u64) -> usize {
        let mut dropped = 0;
        while let Some(oldest) = self.held.front() {
            if oldest.record.created_at_ms + self.retention_ms > now_ms {
                break;
            }
            let number = self.popped;
            if let Ok(indexed) = self.index.find_entry(oldest.key.slot(), |&n| n == number) {
                indexed.remove();
            }
            self.held.pop_front();
            self.popped += 1;
            dropped += 1;
        }
        if self.held.capacity() > 2 * self.held.len() + 1024 {
            // After a burst of keys has expired, hand the room back.
            self.held.shrink_to(self.held.len() * 3 / 2);
            let (held, popped) = (&self.held, self.popped);
            self.index
                .shrink_to(0, |&n| held[(n - popped) as usize].key.slot());
        }
        dropped
    }

    /// The time before which every record has expired at `now_ms` (`None`: none has).
    pub fn expired_before(&self, now_ms: u64) -> Option<u64> {
        now_ms.checked_sub(self.retention_ms).map(|t| t + 1)
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
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
        cache.insert("a", record("c", 1, 0), 0);
        cache.insert("b", record("c", 2, 500), 500);
        assert_eq!(cache.expire(999), 0);
        assert_eq!(cache.expired_before(999), None);
        assert_eq!(cache.expire(1000), 1);
        assert_eq!(
            cache.expired_before(1000),
            Some(1),
            "created at 0 has expired"
        );
        assert!(cache.get("a").is_none());
        assert!(cache.get("b").unwrap().matches("c", &Change::Delta(2)));
        assert!(!cache.get("b").unwrap().matches("c", &Change::Delta(3)));
        assert_eq!(cache.expire(1500), 1);
        assert!(cache.is_empty());
    }

    #[test]
    fn a_key_recorded_again_keeps_its_newer_record() {
        let mut cache = IdempotencyCache::new(1000);
        cache.insert("a", record("c", 1, 0), 0);
        cache.insert("a", record("c", 5, 500), 500);
        assert_eq!(cache.len(), 1, "one key, held once");
        // The first record's time comes: the newer one stays.
        assert_eq!(cache.expire(1000), 1);
        assert!(cache.get("a").unwrap().matches("c", &Change::Delta(5)));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.expire(1500), 1);
        assert!(cache.is_empty());
    }

    #[test]
    fn many_keys_expire_in_age_order_and_only_theirs() {
        let mut cache = IdempotencyCache::new(100);
        for n in 0..10_000u64 {
            cache.insert(&format!("k{n}"), record("c", n as i64, n / 10), n / 10);
        }
        assert_eq!(cache.expire(599), 5_000, "keys created by 499 ms");
        assert!(cache.get("k4999").is_none());
        for n in [5_000u64, 7_777, 9_999] {
            let held = cache.get(&format!("k{n}")).unwrap();
            assert!(held.matches("c", &Change::Delta(n as i64)), "k{n}");
        }
        assert_eq!(cache.len(), 5_000);
        // Every key stays found as the queue's room is handed back.
        assert_eq!(cache.expire(1_099), 5_000);
        assert!(cache.is_empty());
        cache.insert("late", record("c", 1, 2_000), 2_000);
        assert!(cache.get("late").is_some());
    }

    #[test]
    fn keys_are_told_apart_by_their_whole_bytes() {
        let mut cache = IdempotencyCache::new(1000);
        let keys: Vec<String> = (0..50_000).map(|n| format!("order-{n:08}")).collect();
        for (n, key) in keys.iter().enumerate() {
            cache.insert(key, record("c", n as i64, 0), 0);
        }
        assert_eq!(cache.len(), keys.len());
        for (n, key) in keys.iter().enumerate() {
            assert!(
                cache
                    .get(key)
                    .unwrap()
                    .matches("c", &Change::Delta(n as i64))
            );
        }
        assert!(cache.get("order-").is_none());
        assert!(cache.get("order-000000000").is_none());
    }

    #[test]
    fn records_already_expired_are_not_kept() {
        let mut cache = IdempotencyCache::new(1000);
        cache.insert("old", record("c", 1, 0), 5000);
        assert!(cache.get("old").is_none());
    }
}
