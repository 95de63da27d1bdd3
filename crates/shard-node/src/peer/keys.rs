//! This node's copy of one peer slot's idempotency keys, handed back to the peer should it lose
//! its disk, and how far the copy reaches: the peer's slot version up to which it holds every
//! key the peer recorded within the retention.
//!
//! The reach is what the peer's last caught-up page said while the peer held all of its own
//! keys ([`KeyPage::reach`]); a page from another process of the peer starts it over at 0
//! until that process's pages catch up, and a page of a peer missing keys of its own sets it
//! to 0. A restore whose values are newer than the reach may lack keys of their writes.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use geocount_model::IdempotencyRecord;
use geocount_model::wire::{Cursor, KeyPage};

use crate::engine::key_index::KeyIndex;

use crate::peer::key_file::{self, Unpersisted};

/// The keys of one peer slot held here, with their reach.
///
/// The copy is read back only in the order taken in ([`PeerKeys::copy_page`]), so the records
/// are a queue in that order, expiring from the front. The index only lets a key the peer
/// sends again (a process of the peer that starts its pages over) be held once.
#[derive(Debug)]
pub struct PeerKeys {
    /// Records in the order taken in, oldest first: `held[i]` is record number `popped + i`.
    /// A record whose key was taken in again later, with another record, is no longer indexed
    /// and waits here until it expires.
    held: VecDeque<(Box<str>, IdempotencyRecord)>,
    /// How many records were ever taken off the front.
    popped: u64,
    /// Each key's latest record, by the key's [`PeerKeys::hash`].
    index: KeyIndex,
    /// Hashes keys for `index`: seeded per process, as the peer's clients pick the keys.
    hasher: RandomState,
    retention_ms: u64,
    reach: u64,
    /// The key epoch of the peer process the last page came from (`None`: none since this
    /// node started).
    owner_epoch: Option<u64>,
    /// Record numbers below this one are in the key file ([`crate::peer::key_file`]).
    persisted_through: u64,
    /// The reach the key file holds.
    persisted_reach: u64,
}

impl PeerKeys {
    /// An empty copy keeping keys for `retention_ms`.
    pub fn new(retention_ms: u64) -> Self {
        Self {
            held: VecDeque::new(),
            popped: 0,
            index: KeyIndex::default(),
            hasher: RandomState::default(),
            retention_ms,
            reach: 0,
            owner_epoch: None,
            persisted_through: 0,
            persisted_reach: 0,
        }
    }

    /// A copy read back from the key file at startup: `keys`, oldest first, complete up to
    /// `reach`; everything in it is in the file.
    pub fn recovered(
        retention_ms: u64,
        keys: Vec<(String, IdempotencyRecord)>,
        reach: u64,
        now_ms: u64,
    ) -> Self {
        let mut copy = Self::new(retention_ms);
        copy.held.reserve(keys.len());
        for (key, record) in keys {
            copy.hold(key, record, now_ms);
        }
        copy.reach = reach;
        copy.persisted_through = copy.end();
        copy.persisted_reach = reach;
        copy
    }

    /// Takes in a pulled page of the peer's keys at `now_ms`, its keys and all; whether the
    /// copy changed.
    pub fn take(&mut self, page: KeyPage, now_ms: u64) -> bool {
        self.expire(now_ms);
        let before = (self.end(), self.reach);
        for (key, record) in page.keys {
            self.hold(key, record, now_ms);
        }
        if let Cursor::Seq { epoch, .. } = page.next
            && self.owner_epoch.replace(epoch) != Some(epoch)
        {
            // Another process of the peer: what it recorded is not here until its pages catch up.
            self.reach = 0;
        }
        if !page.whole {
            self.reach = 0;
        } else if page.caught_up {
            self.reach = page.reach;
        }
        (self.end(), self.reach) != before
    }

    /// Holds `record` for `key` unless it is past retention at `now_ms` or the same record is
    /// held already (a peer's process that starts over sends every key again).
    fn hold(&mut self, key: String, record: IdempotencyRecord, now_ms: u64) {
        if record.created_at_ms + self.retention_ms <= now_ms {
            return;
        }
        let hash = self.hash(&key);
        let (held, popped) = (&self.held, self.popped);
        let at = |number: u32| &held[number.wrapping_sub(popped as u32) as usize];
        let number = self.end() as u32;
        let is_key = |n: u32| *at(n).0 == *key;
        if !(self.index).index((hash, number), is_key, |earlier| at(earlier).1 == record) {
            return;
        }
        // A decoded key's capacity is its length: boxing it keeps its bytes where they are.
        self.held.push_back((key.into_boxed_str(), record));
    }

    /// The 32 bits of `key`'s hash the index keeps.
    fn hash(&self, key: &str) -> u32 {
        self.hasher.hash_one(key) as u32
    }

    /// Forgets the records older than the retention at `now_ms`. The queue is in the order
    /// the peer recorded them, which is their age order, so it stops at the first record
    /// still retained.
    fn expire(&mut self, now_ms: u64) {
        while let Some((key, oldest)) = self.held.front() {
            if oldest.created_at_ms + self.retention_ms > now_ms {
                break;
            }
            self.index.expire(self.hash(key), self.popped as u32);
            self.held.pop_front();
            self.popped += 1;
        }
        if self.held.capacity() > 2 * self.held.len() + 1024 {
            // After a burst of keys has expired, hand the room back.
            self.held.shrink_to(self.held.len() * 3 / 2);
            self.index.shrink();
        }
    }

    /// The record number after the newest one.
    fn end(&self) -> u64 {
        self.popped + self.held.len() as u64
    }

    /// The peer's slot version up to which this copy holds every key (0: none).
    pub fn reach(&self) -> u64 {
        self.reach
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Up to `limit` records from record number `from` on (older ones have expired), oldest
    /// first, and the number of the next one (`None` past the newest).
    pub fn copy_page(
        &self,
        from: u64,
        limit: usize,
    ) -> (Vec<(String, IdempotencyRecord)>, Option<u64>) {
        let start = from.clamp(self.popped, self.end());
        let skip = (start - self.popped) as usize;
        let keys: Vec<_> = self
            .held
            .range(skip..)
            .take(limit.max(1))
            .map(|(key, record)| (String::from(&**key), record.clone()))
            .collect();
        let next = start + keys.len() as u64;
        (keys, (next < self.end()).then_some(next))
    }

    /// What the key file lacks (`None`: nothing), or, with `whole`, every record held.
    pub fn unpersisted(&self, whole: bool) -> Option<Unpersisted> {
        let from = if whole { 0 } else { self.persisted_through };
        let through = self.end();
        if !whole && from >= through && self.reach == self.persisted_reach {
            return None;
        }
        // Encoded here, where the records are: a copy of them would cost as much again.
        let skip = (from.clamp(self.popped, through) - self.popped) as usize;
        let keys = self.held.range(skip..);
        Some(Unpersisted {
            keys: keys.len() as u64,
            record: key_file::encode(keys, self.reach),
            reach: self.reach,
            through,
        })
    }

    /// The key file now holds `written`.
    pub fn persisted(&mut self, written: &Unpersisted) {
        self.persisted_through = self.persisted_through.max(written.through);
        self.persisted_reach = written.reach;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::{CounterId, SlotState};

    fn record(version: u64, at: u64) -> IdempotencyRecord {
        IdempotencyRecord {
            counter: CounterId::new("c").unwrap(),
            delta: 1,
            item: None,
            outcome: SlotState { value: 1, version },
            created_at_ms: at,
        }
    }

    fn page(epoch: u64, keys: &[(&str, u64)], caught_up: bool, reach: u64) -> KeyPage {
        KeyPage {
            keys: keys
                .iter()
                .map(|&(key, version)| (key.to_owned(), record(version, 10)))
                .collect(),
            next: Cursor::Seq { epoch, seq: 0 },
            caught_up,
            whole: true,
            reach,
        }
    }

    /// The reach is the last caught-up page's, never a latch: another process of the peer,
    /// or a peer missing keys of its own, starts it over.
    #[test]
    fn the_reach_follows_the_peers_caught_up_pages() {
        let mut copy = PeerKeys::new(1_000);
        assert!(copy.take(page(1, &[("a", 5)], false, 0), 20));
        assert_eq!(copy.reach(), 0, "not caught up yet");
        assert!(copy.take(page(1, &[("b", 7)], true, 7), 20));
        assert_eq!(copy.reach(), 7);
        assert!(!copy.take(page(1, &[], true, 7), 20), "nothing new");
        assert!(copy.take(page(2, &[("a", 5)], false, 0), 20));
        assert_eq!(
            copy.reach(),
            0,
            "a restarted peer's pages have not caught up"
        );
        assert_eq!(copy.len(), 2, "a key sent again is held once");
        assert!(copy.take(page(2, &[("c", 9)], true, 9), 20));
        assert_eq!(copy.reach(), 9);
        let missing = KeyPage {
            whole: false,
            ..page(2, &[], true, 0)
        };
        assert!(copy.take(missing, 20));
        assert_eq!(copy.reach(), 0, "the peer itself lacks keys");
    }

    /// What the key file lacks: the records since the last write, or all of them when the
    /// file is written whole; a copy read back holds as much and reaches as far.
    #[test]
    fn the_file_gets_what_it_lacks() {
        let mut copy = PeerKeys::new(1_000);
        copy.take(page(1, &[("a", 5), ("b", 6)], true, 6), 20);
        let first = copy.unpersisted(false).unwrap();
        assert_eq!((first.keys, first.reach), (2, 6));
        copy.persisted(&first);
        assert!(copy.unpersisted(false).is_none());
        copy.take(page(1, &[("c", 8)], true, 8), 20);
        let next = copy.unpersisted(false).unwrap();
        assert_eq!(names(&key_file::keys_in(&next.record)), ["c"]);
        assert_eq!((next.keys, next.reach), (1, 8));
        let all = copy.unpersisted(true).unwrap();
        let keys = key_file::keys_in(&all.record);
        assert_eq!((names(&keys), all.keys), (vec!["a", "b", "c"], 3));
        let back = PeerKeys::recovered(1_000, keys, all.reach, 20);
        assert_eq!((back.len(), back.reach()), (3, 8));
        assert!(back.unpersisted(false).is_none());
    }

    /// A page of `keys` with their own versions and creation times.
    fn timed(epoch: u64, keys: &[(String, u64, u64)]) -> KeyPage {
        KeyPage {
            keys: keys
                .iter()
                .map(|(key, version, at)| (key.clone(), record(*version, *at)))
                .collect(),
            ..page(epoch, &[], false, 0)
        }
    }

    fn names(keys: &[(String, IdempotencyRecord)]) -> Vec<&str> {
        keys.iter().map(|(key, _)| key.as_str()).collect()
    }

    /// Keys expire from the front as their time comes, record numbers going on; the keys left
    /// are still found as the room is handed back, so a key sent again is still held once.
    #[test]
    fn keys_expire_in_the_order_taken_in_and_stay_found() {
        let mut copy = PeerKeys::new(100);
        let keys: Vec<_> = (0..10_000u64)
            .map(|n| (format!("order-{n:08}"), n, n / 10))
            .collect();
        assert!(copy.take(timed(1, &keys), 0));
        assert_eq!(
            copy.len(),
            10_000,
            "keys are told apart by their whole bytes"
        );
        // Keys created by 499 ms expire; the copy the key file holds needs no change for that.
        assert!(!copy.take(timed(1, &[]), 599));
        assert_eq!(copy.len(), 5_000);
        let (first, next) = copy.copy_page(0, 2);
        assert_eq!(names(&first), ["order-00005000", "order-00005001"]);
        assert_eq!(next, Some(5_002));
        assert_eq!(copy.copy_page(9_999, 10).1, None);
        assert!(copy.copy_page(20_000, 10).0.is_empty());
        // A restarted peer sends every key it still holds again, one past the retention here.
        let mut again = keys[4_999..].to_vec();
        again.push(("order-late".into(), 1, 1_000));
        assert!(copy.take(timed(2, &again), 599));
        assert_eq!(copy.len(), 5_001, "only the new key is taken in");
        assert_eq!(copy.copy_page(10_000, 10).0[0].0, "order-late");
        assert!(!copy.take(timed(2, &again), 599), "nothing new");
        copy.take(timed(2, &[]), 1_099);
        assert_eq!(copy.len(), 1);
        copy.take(timed(2, &[]), 1_100);
        assert_eq!(copy.len(), 0);
    }

    /// A key taken in again with another record is held once, with its newer record, which
    /// a restoring peer gets after the older one; each expires in its own time.
    #[test]
    fn a_key_taken_in_again_keeps_its_newer_record() {
        let mut copy = PeerKeys::new(1_000);
        let key = |version, at| ("a".to_owned(), version, at);
        assert!(copy.take(timed(1, &[key(5, 0)]), 0));
        assert!(copy.take(timed(1, &[key(6, 500)]), 500));
        assert_eq!(copy.len(), 1, "one key, held once");
        let (both, _) = copy.copy_page(0, 10);
        let versions: Vec<u64> = both.iter().map(|(_, r)| r.outcome.version).collect();
        assert_eq!(versions, [5, 6]);
        assert!(
            !copy.take(timed(2, &[key(6, 500)]), 500),
            "the newer one is held"
        );
        copy.take(timed(2, &[]), 1_000);
        assert_eq!(copy.len(), 1, "the newer record stays");
        assert!(!copy.take(timed(2, &[key(6, 500)]), 1_000));
        copy.take(timed(2, &[]), 1_500);
        assert_eq!(copy.len(), 0);
    }
}

/// What a held key costs: memory and the time to take it in, measured, not asserted. Run
/// alone in release: `cargo test -p shard-node --release --lib -- --ignored
/// peer_keys_cost --nocapture --test-threads=1`.
#[cfg(test)]
mod cost {
    use super::*;
    use geocount_model::{CounterId, SlotState};
    use std::time::{Duration, Instant};

    const KEYS: u64 = 1_000_000;
    const PAGE: u64 = 1_000;

    /// Resident bytes of this process (`/proc/self/statm`).
    fn resident() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    /// A page of keys as geoctl names them, numbers `first..first + PAGE`.
    fn page(epoch: u64, first: u64, now: u64) -> KeyPage {
        let counter = CounterId::new("load-counter-17").unwrap();
        KeyPage {
            keys: (first..first + PAGE)
                .map(|n| {
                    let record = IdempotencyRecord {
                        counter: counter.clone(),
                        delta: 1,
                        item: None,
                        outcome: SlotState {
                            value: n as i64,
                            version: n + 1,
                        },
                        created_at_ms: now,
                    };
                    // As decoded: capacity and length alike.
                    let key = format!("k-1764160000123-{n:06}");
                    (key.as_str().to_owned(), record)
                })
                .collect(),
            next: Cursor::Seq {
                epoch,
                seq: first + PAGE,
            },
            caught_up: first + PAGE == KEYS,
            whole: true,
            reach: first + PAGE,
        }
    }

    /// Takes every key in pages of `epoch`, timing the takes alone.
    fn take_all(copy: &mut PeerKeys, epoch: u64, now: u64) -> Duration {
        let mut spent = Duration::ZERO;
        for first in (0..KEYS).step_by(PAGE as usize) {
            let page = page(epoch, first, now);
            let start = Instant::now();
            copy.take(page, now);
            spent += start.elapsed();
        }
        spent
    }

    #[test]
    #[ignore = "a measurement: run alone, in release"]
    fn peer_keys_cost() {
        let now = 1_764_160_000_000;
        let before = resident();
        let mut copy = PeerKeys::new(3_600_000);
        let fill = take_all(&mut copy, 1, now);
        let after = resident();
        assert_eq!(copy.len(), KEYS as usize);
        let again = take_all(&mut copy, 2, now);
        assert_eq!(copy.len(), KEYS as usize);
        let per_key = |spent: Duration| spent.as_nanos() as f64 / KEYS as f64;
        println!(
            "held {KEYS} keys: {:.1} bytes/key resident; take {:.1} ns/key new, {:.1} ns/key sent again",
            (after - before) as f64 / KEYS as f64,
            per_key(fill),
            per_key(again),
        );
    }
}
