//! `Idempotency-Key` records: a retried write is applied once and answered as the first was.
//!
//! Records are logged with the write they belong to, so they are exactly as durable as it is,
//! and kept for the configured retention.

use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};
use std::sync::LazyLock;

use geocount_model::wire::{Cursor, KeyPage};
use geocount_model::{CounterId, SlotState};
use hashbrown::HashTable;

pub use geocount_model::IdempotencyRecord;

use crate::engine::key_index::KeyIndex;
use crate::engine::write::Change;

/// The keys, shared by the commit loop (their only writer) and the sync handler.
pub type SharedKeys = std::sync::Arc<std::sync::RwLock<IdempotencyCache>>;

/// The longest idempotency key accepted, in bytes.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 256;

/// The record of a write to `counter` that made `change` and left the slot at `outcome`.
pub fn record_of(
    counter: &CounterId,
    change: &Change,
    outcome: SlotState,
    created_at_ms: u64,
) -> IdempotencyRecord {
    let (delta, item) = key_parts(change);
    IdempotencyRecord {
        counter: counter.clone(),
        delta,
        item,
        outcome,
        created_at_ms,
    }
}

/// Whether a retry of `change` to `counter` asks for the write `first` records.
pub fn asks_for(first: &IdempotencyRecord, counter: &str, change: &Change) -> bool {
    let (delta, item) = key_parts(change);
    first.matches(counter, delta, item)
}

/// What a record keeps of a change: its delta (0 for an item), and its item's hash.
fn key_parts(change: &Change) -> (i64, Option<u64>) {
    match change {
        Change::Delta(delta) => (*delta, None),
        Change::Item { hash, .. } => (0, Some(*hash)),
    }
}

/// A key's hash: SipHash-1-3 under a random key drawn once per process, so clients cannot
/// pick keys that pile up in one bucket. A write works it out once, for its lookups in the
/// group's keys ([`StagedKeys`]) and the cache and for its insert in both; keys are then
/// compared in full, so two keys with one hash stay apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(u64);

impl KeyHash {
    pub fn of(key: &str) -> Self {
        static HASHER: LazyLock<RandomState> = LazyLock::new(RandomState::new);
        Self(HASHER.hash_one(key))
    }

    /// The 32 bits the cache's index keeps.
    fn short(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// The remembered keys, expiring in the order they were recorded.
///
/// Records are kept in one queue in the order recorded, which is their store, the age order
/// they expire in, and the change stream the slot's peers pull ([`IdempotencyCache::page`]); an
/// index ([`KeyIndex`], by 32 bits of the key's [`KeyHash`]) finds each key's latest record.
#[derive(Debug)]
pub struct IdempotencyCache {
    /// Records in the order recorded, oldest first. A record whose key was recorded again
    /// later is no longer indexed and waits here until it expires.
    held: VecDeque<Held>,
    /// How many records were ever taken off the front: `held[i]` is record number
    /// `popped + i`.
    popped: u64,
    /// Each key's latest record, by the low 32 bits of its number.
    index: KeyIndex,
    retention_ms: u64,
    /// Drawn at startup: record numbers start again at 0 in every process, so a peer's cursor
    /// from another process starts over.
    epoch: u64,
    /// Until when (unix ms) keys recorded before may be missing: the slot was restored
    /// without a whole copy of its keys, or its restore has not brought them yet.
    unknown_until_ms: Option<u64>,
    /// The newest slot version whose writes' keys are all here (those within the retention):
    /// what a peer's copy reaches once it has paged through them.
    reach: u64,
}

/// One record, its key and the 32 bits of the key's hash the index keeps.
#[derive(Debug)]
struct Held {
    key: Box<str>,
    record: IdempotencyRecord,
    hash: u32,
}

impl IdempotencyCache {
    /// An empty cache keeping keys for `retention_ms`.
    pub fn new(retention_ms: u64) -> Self {
        Self {
            held: VecDeque::new(),
            popped: 0,
            index: KeyIndex::default(),
            retention_ms,
            epoch: rand::random(),
            unknown_until_ms: None,
            reach: 0,
        }
    }

    /// The record for `key`, if it is still retained.
    pub fn get(&self, key: &str) -> Option<&IdempotencyRecord> {
        self.get_hashed(KeyHash::of(key), key)
    }

    /// The record for `key`, whose hash is `hash`, if it is still retained.
    pub fn get_hashed(&self, hash: KeyHash, key: &str) -> Option<&IdempotencyRecord> {
        let number = self.index.find(hash.short(), |n| *self.at(n).key == *key)?;
        Some(&self.at(number).record)
    }

    /// The record whose number's low 32 bits are `number`.
    fn at(&self, number: u32) -> &Held {
        &self.held[number.wrapping_sub(self.popped as u32) as usize]
    }

    /// Remembers `key`, unless it is already past retention at `now_ms`.
    pub fn insert(&mut self, key: &str, record: IdempotencyRecord, now_ms: u64) {
        self.insert_hashed(KeyHash::of(key), key.into(), record, now_ms);
    }

    /// Remembers `key`, whose hash is `hash`, unless it is already past retention at `now_ms`.
    pub fn insert_hashed(
        &mut self,
        hash: KeyHash,
        key: Box<str>,
        record: IdempotencyRecord,
        now_ms: u64,
    ) {
        if record.created_at_ms + self.retention_ms <= now_ms {
            return;
        }
        let number = self.end() as u32;
        let hash = hash.short();
        self.held.push_back(Held { key, record, hash });
        let (held, popped) = (&self.held, self.popped as u32);
        let key = &*held.back().expect("just queued").key;
        let is_key = |n: u32| *held[n.wrapping_sub(popped) as usize].key == *key;
        self.index.index((hash, number), is_key, |_| false);
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
            self.index.expire(oldest.hash, self.popped as u32);
            self.held.pop_front();
            self.popped += 1;
            dropped += 1;
        }
        if self.held.capacity() > 2 * self.held.len() + 1024 {
            // After a burst of keys has expired, hand the room back.
            self.held.shrink_to(self.held.len() * 3 / 2);
            self.index.shrink();
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

    /// Keys recorded before may be missing until `until_ms` (`None`: every retained key is
    /// here).
    pub fn set_unknown_until(&mut self, until_ms: Option<u64>) {
        self.unknown_until_ms = until_ms;
    }

    /// Until when a key that is not here may still have been recorded, at `now_ms` (`None`:
    /// a key not here never was, within the retention).
    pub fn unknown_until(&self, now_ms: u64) -> Option<u64> {
        self.unknown_until_ms.filter(|&until| now_ms < until)
    }

    /// Every key of a write at slot version `version` or below is here now (versions only
    /// grow: an older one changes nothing).
    pub fn reached(&mut self, version: u64) {
        self.reach = self.reach.max(version);
    }

    /// The newest slot version whose writes' keys are all here ([`IdempotencyCache::reached`]).
    pub fn reach(&self) -> u64 {
        self.reach
    }

    /// The number the next record recorded gets.
    pub fn end(&self) -> u64 {
        self.popped + self.held.len() as u64
    }

    /// Up to `limit` records from record number `from` on (older ones have expired), oldest
    /// first, and the number of the next one (`None` past the newest).
    pub fn copy_page(
        &self,
        from: u64,
        limit: usize,
    ) -> (Vec<(String, IdempotencyRecord)>, Option<u64>) {
        let start = from.max(self.popped);
        let skip = (start - self.popped) as usize;
        let keys: Vec<_> = self
            .held
            .iter()
            .skip(skip)
            .take(limit.max(1))
            .map(|held| (String::from(&*held.key), held.record.clone()))
            .collect();
        let next = start + keys.len() as u64;
        let more = next < self.popped + self.held.len() as u64;
        (keys, more.then_some(next))
    }

    /// The records recorded since `cursor`, for a peer's pull at `now_ms`: a cursor of another
    /// process gets every record still retained.
    pub fn page(&self, cursor: Cursor, limit: usize, now_ms: u64) -> KeyPage {
        let from = match cursor {
            Cursor::Seq { epoch, seq } if epoch == self.epoch => seq,
            _ => 0,
        };
        let (keys, next) = self.copy_page(from, limit);
        let end = self.end();
        let caught_up = next.is_none();
        let whole = self.unknown_until(now_ms).is_none();
        KeyPage {
            keys,
            next: Cursor::Seq {
                epoch: self.epoch,
                seq: next.unwrap_or(end),
            },
            caught_up,
            whole,
            reach: if caught_up && whole { self.reach } else { 0 },
        }
    }
}

/// The keys a group records, in the order staged, found by the hash their write worked out.
#[derive(Debug, Default)]
pub struct StagedKeys {
    keys: Vec<(Box<str>, IdempotencyRecord)>,
    hashes: Vec<KeyHash>,
    /// Each key's place in `keys`.
    index: HashTable<usize>,
}

impl StagedKeys {
    /// The record staged for `key`, whose hash is `hash`.
    pub fn get(&self, hash: KeyHash, key: &str) -> Option<&IdempotencyRecord> {
        let (keys, hashes) = (&self.keys, &self.hashes);
        self.index
            .find(hash.0, |&at| hashes[at] == hash && *keys[at].0 == *key)
            .map(|&at| &keys[at].1)
    }

    /// Stages `key`, whose hash is `hash`, which is not staged yet.
    pub fn insert(&mut self, hash: KeyHash, key: Box<str>, record: IdempotencyRecord) {
        debug_assert!(self.get(hash, &key).is_none(), "{key} staged twice");
        let hashes = &self.hashes;
        self.index
            .insert_unique(hash.0, self.keys.len(), |&at| hashes[at].0);
        self.keys.push((key, record));
        self.hashes.push(hash);
    }

    /// How many keys are staged.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The staged keys with their records, in the order staged, and their hashes in that order.
    pub fn into_parts(self) -> (Vec<(Box<str>, IdempotencyRecord)>, Vec<KeyHash>) {
        (self.keys, self.hashes)
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
        record_of(&id(counter), &Change::Delta(delta), outcome, at)
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
        let first = record_of(&id("u"), &item("a"), SlotState::default(), 0);
        assert!(asks_for(&first, "u", &item("a")));
        assert!(!asks_for(&first, "u", &item("b")));
        assert!(!asks_for(&first, "v", &item("a")));
        assert!(!asks_for(&first, "u", &Change::Delta(0)));
        assert_eq!(first.describe_write(), "an item");
        assert!(!asks_for(&record("u", 1, 0), "u", &item("a")));
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
        assert!(asks_for(cache.get("b").unwrap(), "c", &Change::Delta(2)));
        assert!(!asks_for(cache.get("b").unwrap(), "c", &Change::Delta(3)));
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
        assert!(asks_for(cache.get("a").unwrap(), "c", &Change::Delta(5)));
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
            assert!(asks_for(held, "c", &Change::Delta(n as i64)), "k{n}");
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
            assert!(asks_for(
                cache.get(key).unwrap(),
                "c",
                &Change::Delta(n as i64)
            ));
        }
        assert!(cache.get("order-").is_none());
        assert!(cache.get("order-000000000").is_none());
    }

    #[test]
    fn peers_page_through_the_keys_in_the_order_recorded() {
        let mut cache = IdempotencyCache::new(1000);
        for n in 0..5u64 {
            cache.insert(&format!("k{n}"), record("c", n as i64, n * 100), n * 100);
        }
        let first = cache.page(Cursor::Start, 2, 0);
        let names = |page: &KeyPage| page.keys.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        assert_eq!(names(&first), ["k0", "k1"]);
        assert!(!first.caught_up);
        let rest = cache.page(first.next, 10, 0);
        assert_eq!(names(&rest), ["k2", "k3", "k4"]);
        assert!(rest.caught_up);
        assert!(cache.page(rest.next, 10, 0).keys.is_empty());
        // Expired keys are behind every cursor; another process's cursor starts over.
        assert_eq!(cache.expire(1150), 2);
        assert_eq!(names(&cache.page(first.next, 10, 0)), ["k2", "k3", "k4"]);
        let elsewhere = Cursor::Seq {
            epoch: cache.epoch.wrapping_add(1),
            seq: 4,
        };
        assert_eq!(names(&cache.page(elsewhere, 10, 0)), ["k2", "k3", "k4"]);
        cache.insert("k5", record("c", 5, 1200), 1200);
        assert_eq!(names(&cache.page(rest.next, 10, 0)), ["k5"]);
    }

    /// A page promises the cache's reach only when it is the last one and the cache holds
    /// every key it recorded.
    #[test]
    fn only_a_caught_up_page_of_a_whole_cache_says_how_far_it_reaches() {
        let mut cache = IdempotencyCache::new(1000);
        cache.insert("k0", record("c", 1, 0), 0);
        cache.insert("k1", record("c", 2, 0), 0);
        cache.reached(40);
        cache.reached(30);
        assert_eq!(cache.reach(), 40, "versions only grow");
        let first = cache.page(Cursor::Start, 1, 0);
        assert_eq!((first.caught_up, first.reach), (false, 0));
        let rest = cache.page(first.next, 10, 0);
        assert_eq!((rest.caught_up, rest.whole, rest.reach), (true, true, 40));
        cache.set_unknown_until(Some(100));
        let missing = cache.page(Cursor::Start, 10, 0);
        assert_eq!(
            (missing.caught_up, missing.whole, missing.reach),
            (true, false, 0)
        );
        assert_eq!(cache.page(Cursor::Start, 10, 100).reach, 40);
    }

    /// Keys whose hashes are equal are still told apart, in the cache and in a group's keys,
    /// and the group's keys come out in the order staged, each with its hash.
    #[test]
    fn keys_of_one_hash_stay_apart() {
        let same = KeyHash(7);
        let mut cache = IdempotencyCache::new(1000);
        cache.insert_hashed(same, "a".into(), record("c", 1, 0), 0);
        cache.insert_hashed(same, "b".into(), record("c", 2, 0), 0);
        cache.insert_hashed(same, "a".into(), record("c", 3, 0), 0);
        assert_eq!(cache.len(), 2);
        assert!(asks_for(
            cache.get_hashed(same, "a").unwrap(),
            "c",
            &Change::Delta(3)
        ));
        assert!(asks_for(
            cache.get_hashed(same, "b").unwrap(),
            "c",
            &Change::Delta(2)
        ));
        assert!(cache.get_hashed(same, "x").is_none());
        assert_eq!(cache.expire(1000), 3);
        assert!(cache.get_hashed(same, "a").is_none());

        let mut staged = StagedKeys::default();
        staged.insert(same, "b".into(), record("c", 1, 0));
        staged.insert(same, "a".into(), record("c", 2, 0));
        staged.insert(KeyHash::of("z"), "z".into(), record("c", 3, 0));
        assert_eq!(staged.len(), 3);
        assert!(asks_for(
            staged.get(same, "a").unwrap(),
            "c",
            &Change::Delta(2)
        ));
        assert!(staged.get(same, "z").is_none());
        assert!(staged.get(KeyHash::of("z"), "z").is_some());
        let (keys, hashes) = staged.into_parts();
        let names: Vec<&str> = keys.iter().map(|(key, _)| &**key).collect();
        assert_eq!(names, ["b", "a", "z"]);
        assert_eq!(hashes, [same, same, KeyHash::of("z")]);
    }

    #[test]
    fn records_already_expired_are_not_kept() {
        let mut cache = IdempotencyCache::new(1000);
        cache.insert("old", record("c", 1, 0), 5000);
        assert!(cache.get("old").is_none());
    }
}
