//! The index of a queue of idempotency records kept in the order recorded: each key's latest
//! record, found by 32 bits of the key's hash.
//!
//! An entry keeps those 32 bits beside the low 32 bits of its record's number (fewer than
//! 2^32 records are ever queued at once, so those bits name one), so that growing the index
//! reads no record and a lookup reads a record only when all 32 bits match: records live far
//! apart in memory, and reading one is a cache miss.

use hashbrown::HashTable;

/// Each key's latest record, by number.
#[derive(Debug, Default)]
pub struct KeyIndex {
    table: HashTable<Indexed>,
}

#[derive(Debug, Clone, Copy)]
struct Indexed {
    number: u32,
    hash: u32,
}

/// The hash the table files an entry by: the kept 32 bits are its bucket bits and its tag
/// bits alike.
fn spread(hash: u32) -> u64 {
    u64::from(hash) << 32 | u64::from(hash)
}

impl KeyIndex {
    /// The number of the record indexed for the key whose hash is `hash`; `is_key` tells
    /// whether a record's key is that key.
    pub fn find(&self, hash: u32, mut is_key: impl FnMut(u32) -> bool) -> Option<u32> {
        (self.table)
            .find(spread(hash), |e| e.hash == hash && is_key(e.number))
            .map(|e| e.number)
    }

    /// Indexes record `number` as its key's latest (the key's hash is `hash`, and `is_key`
    /// tells whether a record's key is it), unless `keep_earlier` keeps the record indexed for
    /// the key so far; whether `number` was indexed. An earlier record no longer indexed stays
    /// queued until it expires.
    pub fn index(
        &mut self,
        (hash, number): (u32, u32),
        mut is_key: impl FnMut(u32) -> bool,
        keep_earlier: impl FnOnce(u32) -> bool,
    ) -> bool {
        match self.table.entry(
            spread(hash),
            |e| e.hash == hash && is_key(e.number),
            |e| spread(e.hash),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut earlier) => {
                if keep_earlier(earlier.get().number) {
                    return false;
                }
                earlier.get_mut().number = number;
            }
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert(Indexed { number, hash });
            }
        }
        true
    }

    /// Drops the entry of record `number` if it is its key's latest (the key's hash is
    /// `hash`): the record expires.
    pub fn expire(&mut self, hash: u32, number: u32) {
        if let Ok(entry) = (self.table).find_entry(spread(hash), |e| e.number == number) {
            entry.remove();
        }
    }

    /// How many keys are indexed.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Hands back the room keys that expired left.
    pub fn shrink(&mut self) {
        self.table.shrink_to(0, |e| spread(e.hash));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys with one hash stay apart; a key indexed again points at its newer record unless
    /// the earlier one is kept; an expired record is dropped only while it is the latest.
    #[test]
    fn keys_find_their_latest_record() {
        fn is(key: &'static str) -> impl Fn(u32) -> bool {
            move |n: u32| ["a", "b", "a", "c"][n as usize] == key
        }
        let mut index = KeyIndex::default();
        assert!(index.index((7, 0), is("a"), |_| false));
        assert!(index.index((7, 1), is("b"), |_| false));
        assert_eq!(
            (index.find(7, is("a")), index.find(7, is("b"))),
            (Some(0), Some(1))
        );
        assert_eq!(index.find(8, is("a")), None, "another hash");
        assert!(!index.index((7, 2), is("a"), |earlier| earlier == 0));
        assert_eq!(index.find(7, is("a")), Some(0), "kept");
        assert!(index.index((7, 2), is("a"), |_| false));
        assert_eq!(index.find(7, is("a")), Some(2));
        assert_eq!(index.len(), 2);
        index.expire(7, 0);
        assert_eq!(
            index.find(7, is("a")),
            Some(2),
            "record 0 was no longer the latest"
        );
        index.expire(7, 2);
        assert_eq!(index.find(7, is("a")), None);
        index.shrink();
        assert_eq!((index.len(), index.find(7, is("b"))), (1, Some(1)));
    }
}
