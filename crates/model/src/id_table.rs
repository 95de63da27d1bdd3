//! A table keyed by counter id whose entries keep their index until one is removed (the last
//! entry then takes the removed one's index): what a shard node's slot table and every tier's
//! slot copies are built on, so a change journal can name an entry by its index.
//!
//! `indexmap::IndexMap` does the same but keeps each entry's 8-byte hash beside it and indexes
//! entries with `usize`s; this table keeps no hash (an id is hashed again when the index grows,
//! a few nanoseconds for ids of up to 24 bytes) and indexes with `u32`s. At 1,000,000 counters
//! that is about 16 bytes less per counter (docs/architecture.md, "Memory per counter"). The
//! entries are kept in fixed-size chunks ([`ChunkedVec`]), so a growing table never copies them.

use std::hash::BuildHasher;
use std::ops::{Index, IndexMut};

use hashbrown::HashTable;

use crate::CounterId;
use crate::chunked::ChunkedVec;

/// Values keyed by counter id, in insertion order, each at a stable index. Holds up to 2³²
/// entries.
#[derive(Debug, Clone)]
pub struct IdTable<V> {
    entries: ChunkedVec<(CounterId, V)>,
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        Self {
            entries: ChunkedVec::default(),
            index: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl<V> IdTable<V> {
    /// How many entries the table holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The index of counter `id`'s entry, if held.
    pub fn get_index_of(&self, id: &str) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(self.hasher.hash_one(id), |&at| {
                entries[at as usize].0.as_str() == id
            })
            .map(|&at| at as usize)
    }

    /// Counter `id`'s value, if held.
    pub fn get(&self, id: &str) -> Option<&V> {
        self.get_index_of(id).map(|at| &self.entries[at].1)
    }

    /// Counter `id`'s index and value, if held.
    pub fn get_full_mut(&mut self, id: &str) -> Option<(usize, &mut V)> {
        let at = self.get_index_of(id)?;
        Some((at, &mut self.entries[at].1))
    }

    /// Adds counter `id` with `value` at the next index, or replaces its value if it is held;
    /// returns its index.
    ///
    /// # Panics
    /// If the table already holds 2³² entries.
    pub fn insert(&mut self, id: CounterId, value: V) -> usize {
        let next = self.entries.len();
        let key = u32::try_from(next).expect("an id table holds at most 2^32 entries");
        let (entries, hasher) = (&self.entries, &self.hasher);
        // One probe finds the id or the place for it.
        let entry = self.index.entry(
            hasher.hash_one(id.as_str()),
            |&held| entries[held as usize].0 == id,
            |&held| hasher.hash_one(entries[held as usize].0.as_str()),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(held) => {
                let at = *held.get() as usize;
                self.entries[at].1 = value;
                at
            }
            hashbrown::hash_table::Entry::Vacant(place) => {
                place.insert(key);
                self.entries.push((id, value));
                next
            }
        }
    }

    /// Takes the entry at `index` out; the last entry moves into its place. Returns the removed
    /// entry, and the index the moved entry now has (`None` when the removed one was last), which
    /// a journaled table records as a change of that entry.
    ///
    /// # Panics
    /// If there is no entry at `index`.
    pub fn swap_remove(&mut self, index: usize) -> ((CounterId, V), Option<usize>) {
        let last = self.entries.len() - 1;
        let (entries, hasher) = (&self.entries, &self.hasher);
        let hash = hasher.hash_one(entries[index].0.as_str());
        if let Ok(held) = self.index.find_entry(hash, |&held| held as usize == index) {
            held.remove();
        }
        let moved = (index != last).then(|| {
            let hash = hasher.hash_one(entries[last].0.as_str());
            if let Some(held) = self.index.find_mut(hash, |&held| held as usize == last) {
                *held = index as u32;
            }
            index
        });
        let removed = self.entries.swap_remove(index);
        if self.index.len() * 4 < self.index.capacity() {
            let (entries, hasher) = (&self.entries, &self.hasher);
            self.index
                .shrink_to_fit(|&held| hasher.hash_one(entries[held as usize].0.as_str()));
        }
        (removed, moved)
    }

    /// The id and value at `index`, if there is one.
    pub fn get_index(&self, index: usize) -> Option<(&CounterId, &V)> {
        self.entries.get(index).map(|(id, value)| (id, value))
    }

    /// Every entry, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (&CounterId, &V)> {
        self.entries.iter().map(|(id, value)| (id, value))
    }

    /// Every value, in index order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, value)| value)
    }
}

impl<V> Index<usize> for IdTable<V> {
    type Output = V;

    fn index(&self, index: usize) -> &V {
        &self.entries[index].1
    }
}

impl<V> IndexMut<usize> for IdTable<V> {
    fn index_mut(&mut self, index: usize) -> &mut V {
        &mut self.entries[index].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> CounterId {
        CounterId::new(text).unwrap()
    }

    #[test]
    fn entries_keep_their_index_as_the_table_grows() {
        let mut table = IdTable::default();
        for n in 0..100_000u64 {
            assert_eq!(table.insert(id(&format!("counter-{n}")), n), n as usize);
        }
        assert_eq!(table.len(), 100_000);
        for n in (0..100_000u64).step_by(997) {
            let name = format!("counter-{n}");
            assert_eq!(table.get_index_of(&name), Some(n as usize));
            assert_eq!(table.get(&name), Some(&n));
            let (held, value) = table.get_index(n as usize).unwrap();
            assert_eq!((held.as_str(), *value), (name.as_str(), n));
        }
        assert_eq!(table.get("counter-100000"), None);
        assert!(table.get_index(100_000).is_none());
        assert!(table.values().copied().eq(0..100_000));
    }

    #[test]
    fn a_removed_entry_gives_its_index_to_the_last_one() {
        let mut table = IdTable::default();
        for n in 0..1_000u32 {
            table.insert(id(&format!("c-{n}")), n);
        }
        let ((gone, value), moved) = table.swap_remove(10);
        assert_eq!((gone.as_str(), value, moved), ("c-10", 10, Some(10)));
        assert_eq!(table.get_index_of("c-999"), Some(10));
        assert_eq!(table.get("c-10"), None);
        let ((gone, _), moved) = table.swap_remove(table.len() - 1);
        assert_eq!((gone.as_str(), moved), ("c-998", None));
        while !table.is_empty() {
            table.swap_remove(0);
        }
        assert_eq!(table.get("c-999"), None);
        assert_eq!(table.insert(id("again"), 1), 0);
        assert_eq!(table.get("again"), Some(&1));
    }

    #[test]
    fn inserting_a_held_id_replaces_its_value_in_place() {
        let mut table = IdTable::default();
        assert_eq!(table.insert(id("a"), 1), 0);
        assert_eq!(table.insert(id("b"), 2), 1);
        assert_eq!(table.insert(id("a"), 3), 0);
        assert_eq!(table.len(), 2);
        let (at, value) = table.get_full_mut("b").unwrap();
        *value += 10;
        assert_eq!(at, 1);
        table[0] += 100;
        let entries: Vec<(&str, i32)> = table.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(entries, vec![("a", 103), ("b", 12)]);
        assert!(!table.is_empty());
        assert!(IdTable::<i32>::default().is_empty());
    }
}
