//! This node's copy of one peer slot's idempotency keys, handed back to the peer should it lose
//! its disk, and how far the copy reaches: the peer's slot version up to which it holds every
//! key the peer recorded within the retention.
//!
//! The reach is what the peer's last caught-up page said while the peer held all of its own
//! keys ([`KeyPage::reach`]); a page from another process of the peer starts it over at 0
//! until that process's pages catch up, and a page of a peer missing keys of its own sets it
//! to 0. A restore whose values are newer than the reach may lack keys of their writes.

use geocount_model::IdempotencyRecord;
use geocount_model::wire::{Cursor, KeyPage};

use crate::engine::idempotency::IdempotencyCache;

/// The keys of one peer slot held here, with their reach.
#[derive(Debug)]
pub struct PeerKeys {
    cache: IdempotencyCache,
    reach: u64,
    /// The key epoch of the peer process the last page came from (`None`: none since this
    /// node started).
    owner_epoch: Option<u64>,
    /// Record numbers below this one are in the key file ([`crate::peer::key_file`]).
    persisted_through: u64,
    /// The reach the key file holds.
    persisted_reach: u64,
}

/// What the key file lacks of a copy: the records it has not got, and the current reach.
#[derive(Debug)]
pub struct Unpersisted {
    /// The records not yet in the file, oldest first.
    pub keys: Vec<(String, IdempotencyRecord)>,
    /// The reach to write after them.
    pub reach: u64,
    /// The record number after the last of `keys`.
    pub through: u64,
}

impl PeerKeys {
    /// An empty copy keeping keys for `retention_ms`.
    pub fn new(retention_ms: u64) -> Self {
        Self {
            cache: IdempotencyCache::new(retention_ms),
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
        for (key, record) in keys {
            copy.hold(&key, record, now_ms);
        }
        copy.reach = reach;
        copy.persisted_through = copy.end();
        copy.persisted_reach = reach;
        copy
    }

    /// Takes in a pulled page of the peer's keys at `now_ms`; whether the copy changed.
    pub fn take(&mut self, page: &KeyPage, now_ms: u64) -> bool {
        self.cache.expire(now_ms);
        let before = (self.end(), self.reach);
        for (key, record) in &page.keys {
            self.hold(key, record.clone(), now_ms);
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

    /// Holds `record` for `key` unless the same record is held already (a peer's process that
    /// starts over sends every key again).
    fn hold(&mut self, key: &str, record: IdempotencyRecord, now_ms: u64) {
        if self.cache.get(key) != Some(&record) {
            self.cache.insert(key, record, now_ms);
        }
    }

    /// The record number after the newest one.
    fn end(&self) -> u64 {
        self.cache.end()
    }

    /// The peer's slot version up to which this copy holds every key (0: none).
    pub fn reach(&self) -> u64 {
        self.reach
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Up to `limit` records from record number `from` on, and the number of the next one
    /// (`None` past the newest).
    pub fn copy_page(
        &self,
        from: u64,
        limit: usize,
    ) -> (Vec<(String, IdempotencyRecord)>, Option<u64>) {
        self.cache.copy_page(from, limit)
    }

    /// What the key file lacks (`None`: nothing), or, with `whole`, every record held.
    pub fn unpersisted(&self, whole: bool) -> Option<Unpersisted> {
        let from = if whole { 0 } else { self.persisted_through };
        let through = self.end();
        if !whole && from >= through && self.reach == self.persisted_reach {
            return None;
        }
        let (keys, _) = self.cache.copy_page(from, usize::MAX);
        Some(Unpersisted {
            keys,
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
        assert!(copy.take(&page(1, &[("a", 5)], false, 0), 20));
        assert_eq!(copy.reach(), 0, "not caught up yet");
        assert!(copy.take(&page(1, &[("b", 7)], true, 7), 20));
        assert_eq!(copy.reach(), 7);
        assert!(!copy.take(&page(1, &[], true, 7), 20), "nothing new");
        assert!(copy.take(&page(2, &[("a", 5)], false, 0), 20));
        assert_eq!(
            copy.reach(),
            0,
            "a restarted peer's pages have not caught up"
        );
        assert_eq!(copy.len(), 2, "a key sent again is held once");
        assert!(copy.take(&page(2, &[("c", 9)], true, 9), 20));
        assert_eq!(copy.reach(), 9);
        let missing = KeyPage {
            whole: false,
            ..page(2, &[], true, 0)
        };
        assert!(copy.take(&missing, 20));
        assert_eq!(copy.reach(), 0, "the peer itself lacks keys");
    }

    /// What the key file lacks: the records since the last write, or all of them when the
    /// file is written whole; a copy read back holds as much and reaches as far.
    #[test]
    fn the_file_gets_what_it_lacks() {
        let mut copy = PeerKeys::new(1_000);
        copy.take(&page(1, &[("a", 5), ("b", 6)], true, 6), 20);
        let first = copy.unpersisted(false).unwrap();
        assert_eq!((first.keys.len(), first.reach), (2, 6));
        copy.persisted(&first);
        assert!(copy.unpersisted(false).is_none());
        copy.take(&page(1, &[("c", 8)], true, 8), 20);
        let next = copy.unpersisted(false).unwrap();
        assert_eq!(next.keys[0].0, "c");
        assert_eq!((next.keys.len(), next.reach), (1, 8));
        let all = copy.unpersisted(true).unwrap();
        assert_eq!(all.keys.len(), 3);
        let back = PeerKeys::recovered(1_000, all.keys, all.reach, 20);
        assert_eq!((back.len(), back.reach()), (3, 8));
        assert!(back.unpersisted(false).is_none());
    }
}
