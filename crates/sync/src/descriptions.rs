//! Versioned counter descriptions, merged by version on every node.

use geocount_model::wire::{Cursor, DescriptionPage};
use geocount_model::{CounterId, Hlc, HlcTimestamp, Partitions, VersionedDescription};
use std::collections::BTreeSet;

use indexmap::IndexMap;

use crate::journal::{ChangeJournal, Journaled};

/// The descriptions a node knows, with a change journal so they can be pulled in turn.
#[derive(Debug, Default)]
pub struct DescriptionTable {
    /// Looked up on every write a shard node takes, hence foldhash like the slot tables.
    entries: IndexMap<CounterId, (VersionedDescription, u64), foldhash::fast::RandomState>,
    journal: ChangeJournal,
    /// The live descriptions with an expiry, by when it passes: what [`Self::due_expiries`]
    /// looks at, so a node need not scan every description to find the ones that expired.
    expiring: BTreeSet<(u64, CounterId)>,
}

impl DescriptionTable {
    /// Merges a description; returns whether it replaced what was known.
    pub fn merge(&mut self, description: VersionedDescription) -> bool {
        let id = description.description.id.as_str();
        if let Some(at) = expiry_of(&description) {
            let known = self.entries.get(id).map(|(known, _)| known);
            if known.is_none_or(|known| known.is_older_than(&description)) {
                self.expiring
                    .insert((at, description.description.id.clone()));
            }
        }
        match self.entries.get_full_mut(id) {
            Some((index, _, (current, seq))) => {
                if !current.is_older_than(&description) {
                    return false;
                }
                if let Some(at) = expiry_of(current) {
                    self.expiring.remove(&(at, current.description.id.clone()));
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

    /// Merges a pulled page's valid descriptions ([`checked`]) newer than what is known here,
    /// but for those versioned more than `max_clock_skew_ms` ahead of `now_ms` (this process's
    /// clock), which are refused: one from a clock far ahead would win over every later change.
    pub fn apply_page(
        &mut self,
        page: &DescriptionPage,
        now_ms: u64,
        max_clock_skew_ms: u64,
    ) -> Intake {
        // Sifting against the table as it was refuses no more: a description a page item
        // replaces is no further ahead than that item.
        let mut intake = self.newer_in_page(page, now_ms, max_clock_skew_ms);
        intake
            .taken
            .retain(|description| self.merge(description.clone()));
        intake
    }

    /// The valid descriptions of a pulled page ([`checked`]) newer than what is known here, but
    /// for those versioned more than `max_clock_skew_ms` ahead of `now_ms`, refused as by
    /// [`DescriptionTable::apply_page`].
    pub fn newer_in_page(
        &self,
        page: &DescriptionPage,
        now_ms: u64,
        max_clock_skew_ms: u64,
    ) -> Intake {
        let fence = ClockFence::new(now_ms, max_clock_skew_ms);
        let mut intake = Intake::default();
        for description in checked(page) {
            if self.is_news(description) && intake.admit(description, &fence) {
                intake.taken.push(description.clone());
            }
        }
        intake
    }

    /// Whether `description` is newer than what is known of its counter.
    fn is_news(&self, description: &VersionedDescription) -> bool {
        self.get(description.description.id.as_str())
            .is_none_or(|known| known.is_older_than(description))
    }

    /// The tombstones of the descriptions whose expiry has passed at `now_ms`
    /// ([`VersionedDescription::expired_at`]), soonest first: what a node merges (and a shard
    /// node logs) to turn an expiry into the delete every node makes of it alike.
    pub fn due_expiries(&self, now_ms: u64) -> Vec<VersionedDescription> {
        self.expiring
            .iter()
            .take_while(|(at, _)| *at <= now_ms)
            .filter_map(|(_, id)| self.get(id.as_str())?.expired_at(now_ms))
            .collect()
    }

    /// Drops the tombstones of counters deleted (or expired) more than `retention_ms` before
    /// `now_ms`; returns their ids. The last description moves into each one's index and is
    /// journaled again there, so pullers see it moved; they drop the same tombstones by their
    /// own clocks.
    pub fn purge_tombstones(&mut self, now_ms: u64, retention_ms: u64) -> Vec<CounterId> {
        self.purge_tombstones_where(now_ms, retention_ms, |_| true)
    }

    /// [`Self::purge_tombstones`], of the counters `may_go` accepts only.
    pub fn purge_tombstones_where(
        &mut self,
        now_ms: u64,
        retention_ms: u64,
        may_go: impl Fn(&str) -> bool,
    ) -> Vec<CounterId> {
        let old = |d: &VersionedDescription| {
            d.description.deleted
                && d.description
                    .generation
                    .physical_ms
                    .saturating_add(retention_ms)
                    <= now_ms
                && may_go(d.description.id.as_str())
        };
        let mut purged = Vec::new();
        let mut index = 0;
        while index < self.entries.len() {
            if !old(&self.entries[index].0) {
                index += 1;
                continue;
            }
            let (id, _) = self.entries.swap_remove_index(index).expect("in range");
            if index < self.entries.len() {
                self.entries[index].1 = self.journal.record(index);
            }
            purged.push(id);
        }
        if self.entries.len() * 4 < self.entries.capacity() {
            self.entries.shrink_to_fit();
        }
        if !purged.is_empty() {
            self.journal.fit(self.entries.len());
        }
        purged
    }

    /// The latest version held, if any.
    pub fn latest_version(&self) -> Option<HlcTimestamp> {
        self.entries.values().map(|(d, _)| d.version).max()
    }

    /// Moves `hlc` past every version held. A node seeds its clock with the descriptions it
    /// recovered, so a change it makes after restarting with its clock behind still wins over
    /// the ones it made before. Not bounded by the clock: these were made or taken in here.
    pub fn seed_clock(&self, hlc: &Hlc) {
        if let Some(latest) = self.latest_version() {
            hlc.observe(latest);
        }
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
        self.page_of(cursor, limit, None)
    }

    /// Like [`DescriptionTable::page`], with only the counters of `partitions` (`None`: all).
    pub fn page_of(
        &self,
        cursor: Cursor,
        limit: usize,
        partitions: Option<&Partitions>,
    ) -> DescriptionPage {
        let keep = |item: &VersionedDescription| {
            partitions.is_none_or(|p| p.holds(item.description.id.as_str()))
        };
        let (items, next, caught_up) =
            crate::journal::page_where(self, &self.journal, cursor, limit, keep);
        DescriptionPage {
            items,
            next,
            caught_up,
        }
    }
}

/// When `description`'s expiry passes, if it is live with one.
fn expiry_of(description: &VersionedDescription) -> Option<u64> {
    let described = &description.description;
    described.expires_at_ms.filter(|_| !described.deleted)
}

/// The clock fence every description that enters a process passes, whatever carries it (a
/// pulled page, a pushed `RightsMessage::Describe`, a peer's replicated log), before any clock
/// observes it: one versioned more than `max_clock_skew_ms` ahead of this process's clock
/// would win over every later change and pull the receiver's clock ahead with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockFence {
    now_ms: u64,
    max_clock_skew_ms: u64,
}

impl ClockFence {
    /// The fence of a process whose clock reads `now_ms`, allowing `max_clock_skew_ms`
    /// (`sync.max_clock_skew_ms`).
    pub fn new(now_ms: u64, max_clock_skew_ms: u64) -> Self {
        Self {
            now_ms,
            max_clock_skew_ms,
        }
    }

    /// Whether `description` is versioned within the allowed skew of the clock.
    pub fn admit(&self, description: &VersionedDescription) -> Result<(), AheadOfClock> {
        let ahead_ms = description.version.physical_ms.saturating_sub(self.now_ms);
        if ahead_ms <= self.max_clock_skew_ms {
            return Ok(());
        }
        Err(AheadOfClock {
            id: description.description.id.clone(),
            ahead_ms,
            max_clock_skew_ms: self.max_clock_skew_ms,
        })
    }
}

/// A description the [`ClockFence`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the description of counter {id:?} is versioned {ahead_ms} ms ahead of the receiver's clock, \
     past sync.max_clock_skew_ms ({max_clock_skew_ms} ms): the sender's clock is ahead"
)]
pub struct AheadOfClock {
    /// The counter described.
    pub id: CounterId,
    /// How far ahead of the clock its version is, in milliseconds.
    pub ahead_ms: u64,
    /// The skew allowed.
    pub max_clock_skew_ms: u64,
}

/// What a table takes in from a pulled page of descriptions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intake {
    /// The valid descriptions newer than those known (merged, by
    /// [`DescriptionTable::apply_page`]).
    pub taken: Vec<VersionedDescription>,
    /// How many newer ones were refused, versioned too far ahead of this process's clock.
    pub refused: usize,
    /// How far ahead of the clock the furthest refused one was, in milliseconds.
    pub furthest_ahead_ms: u64,
}

impl Intake {
    /// Whether `description` passes `fence`; counts it if not.
    pub fn admit(&mut self, description: &VersionedDescription, fence: &ClockFence) -> bool {
        match fence.admit(description) {
            Ok(()) => true,
            Err(refusal) => {
                self.refused += 1;
                self.furthest_ahead_ms = self.furthest_ahead_ms.max(refusal.ahead_ms);
                false
            }
        }
    }

    /// Logs the refused descriptions, if any, once for the page pulled from `source`.
    pub fn warn_refused(&self, source: &str) {
        if self.refused > 0 {
            tracing::warn!(
                source,
                refused = self.refused,
                furthest_ahead_ms = self.furthest_ahead_ms,
                "refused pulled counter descriptions versioned too far ahead of this clock"
            );
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

    fn latest_seq(&self, index: usize) -> Option<u64> {
        self.entries.get_index(index).map(|(_, (_, seq))| *seq)
    }

    fn items(&self, index: usize, out: &mut Vec<VersionedDescription>) {
        out.push(self.entries[index].0.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::CounterId;
    use geocount_model::fixtures::FixedClock;

    #[test]
    fn the_clock_fence_refuses_only_past_the_allowed_skew() {
        let fence = ClockFence::new(10_000, 1_000);
        let at = |physical_ms| geocount_model::fixtures::described("c", 1, physical_ms, 1);
        assert_eq!(fence.admit(&at(11_000)), Ok(()));
        let refusal = fence.admit(&at(11_001)).unwrap_err();
        assert_eq!(
            (refusal.ahead_ms, refusal.max_clock_skew_ms),
            (1_001, 1_000)
        );
        let mut intake = Intake::default();
        assert!(intake.admit(&at(9_000), &fence));
        assert!(!intake.admit(&at(15_000), &fence));
        assert_eq!((intake.refused, intake.furthest_ahead_ms), (1, 5_000));
    }

    #[test]
    fn old_tombstones_go_and_a_puller_still_gets_every_description() {
        let mut table = DescriptionTable::default();
        for n in 0..10 {
            table.merge(geocount_model::fixtures::described(
                &format!("c{n}"),
                1,
                10,
                1,
            ));
        }
        let page = table.page(Cursor::Start, 100);
        let cursor = page.next;
        for (n, at) in [(2, 1_000), (5, 5_000)] {
            let id = format!("c{n}");
            let at = HlcTimestamp {
                physical_ms: at,
                logical: 0,
                node: 1,
            };
            let tombstone = table.get(&id).unwrap().delete(at);
            table.merge(tombstone);
        }
        assert!(table.purge_tombstones(1_500, 1_000).is_empty());
        let purged = table.purge_tombstones(2_000, 1_000);
        assert_eq!(purged, vec![CounterId::new("c2").unwrap()]);
        assert_eq!(table.len(), 9);
        assert!(table.get("c2").is_none());
        // The moved description is sent again at its new index, with the other tombstone.
        let page = table.page(cursor, 100);
        let ids: Vec<&str> = page
            .items
            .iter()
            .map(|d| d.description.id.as_str())
            .collect();
        assert!(ids.contains(&"c9") && ids.contains(&"c5"), "{ids:?}");
        assert!(table.get("c9").is_some());
    }

    #[test]
    fn expiries_come_due_by_time_and_leave_once_replaced() {
        let mut table = DescriptionTable::default();
        let mut soon = geocount_model::fixtures::described("soon", 1, 10, 1);
        soon.description.expires_at_ms = Some(1_000);
        let mut later = geocount_model::fixtures::described("later", 1, 10, 1);
        later.description.expires_at_ms = Some(2_000);
        table.merge(soon.clone());
        table.merge(later.clone());
        assert!(table.due_expiries(999).is_empty());
        let due = table.due_expiries(1_500);
        assert_eq!(due, vec![soon.expired_at(1_500).unwrap()]);
        // The tombstone replaces it: nothing more is due for it.
        table.merge(due[0].clone());
        assert!(table.due_expiries(1_500).is_empty());
        // An expiry cleared is no longer due.
        let mut kept = later.clone();
        kept.description.expires_at_ms = None;
        kept.version.physical_ms += 1;
        table.merge(kept);
        assert!(table.due_expiries(5_000).is_empty());
    }

    fn described(shards: u32, physical_ms: u64, node: u32) -> VersionedDescription {
        geocount_model::fixtures::described("c", shards, physical_ms, node)
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
        assert_eq!(
            table.newer_in_page(&page, 10, SKEW).taken,
            vec![valid.clone()]
        );
        assert_eq!(table.apply_page(&page, 10, SKEW).taken, vec![valid]);
        assert_eq!(table.len(), 1);
        assert!(table.newer_in_page(&page, 10, SKEW).taken.is_empty());
    }

    const SKEW: u64 = 60_000;

    fn page_of(items: Vec<VersionedDescription>) -> DescriptionPage {
        DescriptionPage {
            items,
            next: Cursor::Start,
            caught_up: true,
        }
    }

    #[test]
    fn a_description_from_far_ahead_of_the_clock_is_refused() {
        let now = 1_000_000;
        let mut table = DescriptionTable::default();
        let within = described(2, now + SKEW, 1);
        let mut ahead = described(3, now + SKEW + 1, 2);
        ahead.description.id = CounterId::new("ahead").unwrap();
        let page = page_of(vec![ahead.clone(), within.clone()]);
        let expected = Intake {
            taken: vec![within.clone()],
            refused: 1,
            furthest_ahead_ms: SKEW + 1,
        };
        assert_eq!(table.newer_in_page(&page, now, SKEW), expected);
        assert_eq!(table.apply_page(&page, now, SKEW), expected);
        assert_eq!(table.get("c"), Some(&within));
        assert_eq!(table.get("ahead"), None, "never merged");

        // A later version of a known counter from far ahead does not replace it either.
        let pinning = described(1, u64::MAX, 3);
        let refused = table.apply_page(&page_of(vec![pinning]), now, SKEW);
        assert_eq!((refused.taken.len(), refused.refused), (0, 1));
        assert_eq!(table.get("c"), Some(&within));

        // Once the clock has caught up, the same page is taken.
        let later = table.apply_page(&page, now + 1, SKEW);
        assert_eq!((later.taken, later.refused), (vec![ahead], 0));
        // What is not news is neither taken nor counted as refused.
        assert_eq!(table.apply_page(&page, 0, SKEW), Intake::default());
    }

    #[test]
    fn a_clock_seeded_with_the_table_versions_later_changes_above_every_held_one() {
        let mut table = DescriptionTable::default();
        assert_eq!(table.latest_version(), None);
        let made_at = 1_800_000_000_000;
        table.merge(described(2, made_at, 1));
        let mut other = described(1, made_at - 5, 7);
        other.description.id = CounterId::new("other").unwrap();
        table.merge(other);
        assert_eq!(
            table.latest_version(),
            Some(described(2, made_at, 1).version)
        );

        // Restarted ten minutes behind: unseeded, its next change loses to its last.
        let behind = std::sync::Arc::new(FixedClock(made_at - 600_000));
        let unseeded = Hlc::new("DC_A_VAL_0", behind.clone());
        let lost = VersionedDescription {
            version: unseeded.now(),
            ..described(4, 0, 0)
        };
        assert!(!table.merge(lost));
        let seeded = Hlc::new("DC_A_VAL_0", behind);
        table.seed_clock(&seeded);
        let change = VersionedDescription {
            version: seeded.now(),
            ..described(4, 0, 0)
        };
        assert!(change.version > table.latest_version().unwrap());
        assert!(table.merge(change.clone()), "the change wins");
        assert_eq!(table.get("c"), Some(&change));
    }
}
