//! The live window of the top-K index: the trending window ending now, its leaders ranked
//! like the all-time ones, and the counters filed under the second their live hits next
//! change, so that moving the window on recomputes just those.

use std::collections::{BTreeSet, HashMap};

use foldhash::fast::RandomState;
use geocount_model::WindowQuery;

use super::leaders::{ABSENT, Leaders, SHRINK_PAST, key_of};
use super::{TopIndex, add};
use crate::ranked::{Counted, RankedCounters, in_window, sum_hits};

/// The live window: hits in `(now - seconds, now]`, its leaders ranked like the all-time ones.
#[derive(Debug)]
pub(super) struct LiveWindow {
    pub(super) seconds: u32,
    pub(super) now: u64,
    /// Ordered like [`TopIndex::rankings`], by hits in the window.
    pub(super) rankings: Vec<Leaders>,
    /// `(second, counter index)` of every counter whose live hits change then and matter: a
    /// leader's, when they next change; any counter's, when a bucket of it ahead of `now`
    /// enters.
    pub(super) changes: BTreeSet<(u64, u32)>,
    /// The second each counter in `changes` is filed under.
    pub(super) filed: HashMap<u32, u64, RandomState>,
}

/// The live window a [`TopIndex`] ranks: the trending window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveRanking {
    /// Its length in seconds (`[trending] window_seconds`).
    pub seconds: u32,
    /// The unix second it ends at when the index starts.
    pub now: u64,
    /// Every counter with at least this many hits in it leads its live rankings (up to 16,000
    /// per ranking when cut back, twice that between cuts), so that `/trending` at any
    /// configured threshold walks the leaders rather than scanning every counter: the smallest
    /// configured trending threshold, if any.
    pub hold_from: Option<i128>,
}

impl LiveRanking {
    /// The window of `seconds` ending at `now`, no trending threshold configured.
    pub fn new(seconds: u32, now: u64) -> Self {
        Self {
            seconds,
            now,
            hold_from: None,
        }
    }
}

/// When a counter's live hits next change: when its oldest bucket in the window leaves, when
/// its oldest bucket in the window with negative hits leaves (which raises it), and when its
/// first bucket ahead of the window's end enters.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LiveChange {
    leaves: Option<u64>,
    rises: Option<u64>,
    enters: Option<u64>,
}

impl TopIndex {
    /// The live window ranked: its length in seconds, and the second it ends at.
    pub fn live_window(&self) -> WindowQuery {
        WindowQuery {
            seconds: self.live.seconds,
            at: self.live.now,
        }
    }

    /// Files counter `index` under the second its live hits next change, if that matters:
    /// always when a bucket enters, and when one leaves only if it leads a live ranking.
    pub(super) fn refile(&mut self, index: u32, change: LiveChange) {
        // A bucket leaving lowers a counter unless its hits are negative: a counter under the
        // floor is filed only for buckets entering and negative ones leaving, which may lift
        // it over. Whether it leads is looked up only when a bucket of it will leave.
        let leaves = change
            .leaves
            .filter(|_| self.live.rankings.iter().any(|l| l.holds(index)));
        let second = [change.enters, leaves, change.rises]
            .into_iter()
            .flatten()
            .min();
        let live = &mut self.live;
        let before = live.filed.get(&index).copied();
        if before == second {
            return;
        }
        if let Some(before) = before {
            live.changes.remove(&(before, index));
            live.filed.remove(&index);
        }
        if let Some(second) = second {
            live.changes.insert((second, index));
            live.filed.insert(index, second);
        }
    }

    /// Moves the live window on to end at `now` (an earlier `now` changes nothing): recomputes
    /// the live hits of each counter filed to change by then, from its copies in `counters`.
    /// O((slots + log leaders) per counter recomputed).
    pub fn advance(&mut self, now: u64, counters: &impl RankedCounters) {
        if now <= self.live.now {
            return;
        }
        self.live.now = now;
        let r = self.rankings.len();
        let mut live = std::mem::take(&mut self.scratch);
        while let Some(&(second, index)) = self.live.changes.first() {
            if second > now {
                break;
            }
            self.live.changes.remove(&(second, index));
            self.live.filed.remove(&index);
            live.clear();
            live.resize(r, ABSENT);
            let change = self.live_of(Counted::of(counters, index as usize), &mut live);
            for (leaders, hits) in self.live.rankings.iter_mut().zip(&live) {
                leaders.set(index, key_of(*hits, index), self.keep);
            }
            self.refile(index, change);
        }
        self.scratch = live;
        let filed = &mut self.live.filed;
        if filed.capacity() > SHRINK_PAST.max(4 * filed.len()) {
            // A burst of merges filed many counters for hits entering; hand their room back.
            filed.shrink_to(2 * filed.len());
        }
    }

    /// Writes the live hits of a counter with copies `counted` into `live` (per ranking, all
    /// [`ABSENT`] before; a unique counter, or one that does not exist, has none), and returns
    /// when they next change after the live window's end.
    pub(super) fn live_of(&self, counted: Counted<'_>, live: &mut [i128]) -> LiveChange {
        let mut change = LiveChange::default();
        if counted.is_unique() {
            return change;
        }
        let window = self.live_window();
        let earliest = |a: Option<u64>, b: u64| Some(a.map_or(b, |a| a.min(b)));
        for (slot, _, window_of_slot) in counted.iter() {
            let buckets = window_of_slot.buckets();
            let (start, end) = in_window(&buckets, window);
            if start < end {
                let hits = sum_hits(&buckets[start..end]);
                add(&mut live[0], hits);
                if let Some(g) = self.group_ranking(slot) {
                    add(&mut live[g], hits);
                }
                let leaves = buckets[start].0.saturating_add(u64::from(window.seconds));
                change.leaves = earliest(change.leaves, leaves);
                if let Some((second, _)) = buckets[start..end].iter().find(|(_, h)| *h < 0) {
                    let rises = second.saturating_add(u64::from(window.seconds));
                    change.rises = earliest(change.rises, rises);
                }
            }
            if let Some((enters, _)) = buckets.get(end) {
                change.enters = earliest(change.enters, *enters);
            }
        }
        // A bucket within `seconds` of u64::MAX leaves at a saturated second that is no later
        // than the window's end: nothing can change after it, so nothing is filed (else
        // `advance` would recompute it forever).
        change.leaves = change.leaves.filter(|second| *second > window.at);
        change.rises = change.rises.filter(|second| *second > window.at);
        change
    }
}
