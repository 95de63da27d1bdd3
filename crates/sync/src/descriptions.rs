//! Versioned counter descriptions, merged by version on every node.

use geocount_model::wire::{Cursor, DescriptionPage};
use geocount_model::{CounterId, VersionedDescription};
use indexmap::IndexMap;

use crate::journal::{ChangeJournal, Journaled};

/// The descriptions a node knows, with a change journal so they can be pulled in turn.
#[derive(Debug, Default)]
pub struct DescriptionTable {
    /// Looked up on every write a shard node takes, hence foldhash like the slot tables.
    entries: IndexMap<CounterId, (VersionedDescription, u64), foldhash::fast::RandomState>,
    journal: ChangeJournal,
}

impl DescriptionTable {
    /// Merges a description; returns whether it replaced what was known.
    pub fn merge(&mut self, description: VersionedDescription) -> bool {
        let id = description.description.id.as_str();
        match self.entries.get_full_mut(id) {
            Some((index, _, (current, seq))) => {
                if !current.is_older_than(&description) {
                    return false;
                }
                *current = description;
                *seq = self.journal.record(index);
            }
            None => {
                let key = description.description.id.clone();
                let (index, _) = self.entries.insert_full(key, (description, 0));
                self.entries[index].1 = self.journal.record(index);
            }
        }
        true
    }

    /// Merges a pulled page's valid descriptions ([`checked`]); returns those that changed.
    pub fn apply_page(&mut self, page: &DescriptionPage) -> Vec<VersionedDescription> {
        checked(page)
            .filter(|d| self.merge((*d).clone()))
            .cloned()
            .collect()
    }

    /// The valid descriptions of a pulled page ([`checked`]) newer than what is known here.
    pub fn newer_in_page(&self, page: &DescriptionPage) -> Vec<VersionedDescription> {
        checked(page)
            .filter(|d| {
                self.get(d.description.id.as_str())
                    .is_none_or(|known| known.is_older_than(d))
            })
            .cloned()
            .collect()
    }

    /// The description of counter `id`.
    pub fn get(&self, id: &str) -> Option<&VersionedDescription> {
        self.entries.get(id).map(|(d, _)| d)
    }

    /// Every description, by counter id.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &VersionedDescription)> {
        self.entries.iter().map(|(id, (d, _))| (id.as_str(), d))
    }

    /// How many descriptions are known.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A page of the descriptions changed since `cursor`.
    pub fn page(&self, cursor: Cursor, limit: usize) -> DescriptionPage {
        let (items, next, caught_up) = crate::journal::page(self, cursor, limit);
        DescriptionPage {
            items,
            next,
            caught_up,
        }
    }
}

/// The descriptions of `page` that pass [`CounterDescription::check`]; the others are logged
/// and left out (a later version from a sound node can still replace them).
///
/// [`CounterDescription::check`]: geocount_model::CounterDescription::check
fn checked(page: &DescriptionPage) -> impl Iterator<Item = &VersionedDescription> {
    page.items.iter().filter(|d| match d.description.check() {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(%error, "ignoring a pulled counter description");
            false
        }
    })
}

impl Journaled for DescriptionTable {
    type Item = VersionedDescription;

    fn journal(&self) -> &ChangeJournal {
        &self.journal
    }

    fn entry_count(&self) -> usize {
        self.entries.len()
    }

    fn latest_seq(&self, index: usize) -> u64 {
        self.entries[index].1
    }

    fn items(&self, index: usize, out: &mut Vec<VersionedDescription>) {
        out.push(self.entries[index].0.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::{CounterDescription, CounterId, CounterType, HlcTimestamp};

    fn described(shards: u32, physical_ms: u64, node: u32) -> VersionedDescription {
        VersionedDescription {
            description: CounterDescription {
                id: CounterId::new("c").unwrap(),
                counter_type: CounterType::Sum,
                number_of_shards: shards,
                base_number_of_shards: 1,
                window_seconds: 300,
                created_at_ms: 1,
            },
            version: HlcTimestamp {
                physical_ms,
                logical: 0,
                node,
            },
        }
    }

    #[test]
    fn the_later_version_wins_in_any_order() {
        let (a, b) = (described(2, 10, 1), described(5, 10, 2));
        let mut one = DescriptionTable::default();
        let mut two = DescriptionTable::default();
        assert!(one.merge(a.clone()) && one.merge(b.clone()));
        assert!(two.merge(b.clone()) && !two.merge(a));
        assert_eq!(one.get("c"), two.get("c"));
        assert_eq!(one.get("c").unwrap().description.number_of_shards, 5);
        let page = one.page(Cursor::Start, 10);
        assert_eq!(page.items, vec![b]);
    }

    #[test]
    fn invalid_descriptions_of_a_pulled_page_are_left_out() {
        let mut table = DescriptionTable::default();
        let valid = described(2, 10, 1);
        let mut no_slots = described(0, 20, 1);
        no_slots.description.id = CounterId::new("none").unwrap();
        let mut no_window = described(1, 20, 1);
        no_window.description.id = CounterId::new("empty").unwrap();
        no_window.description.window_seconds = 0;
        let page = DescriptionPage {
            items: vec![no_slots, valid.clone(), no_window],
            next: Cursor::Start,
            caught_up: true,
        };
        assert_eq!(table.newer_in_page(&page), vec![valid.clone()]);
        assert_eq!(table.apply_page(&page), vec![valid]);
        assert_eq!(table.len(), 1);
        assert!(table.newer_in_page(&page).is_empty());
    }
}
