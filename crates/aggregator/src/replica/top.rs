//! The top-K index a replica keeps beside its copies: every merge that changes a counter marks
//! it, and the marked counters are ranked before a ranking is answered and every
//! [`geocount_ranking::RANK_INTERVAL`] in the background
//! ([`Pullers::keep_ranked`](super::Pullers::keep_ranked)).
//!
//! Counters rank by the lifecycle rule ([`crate::lifecycle`]) at the time of the ranking
//! ([`RankedAt`]): a description that arrives marks its counter, and so does its expiry
//! passing ([`Expiries`]), so a reset counter is ranked again by the records that count, and a
//! deleted or expired one leaves every ranking.

use std::collections::BTreeSet;
use std::sync::MutexGuard;

use geocount_model::wire::SlotEntry;
use geocount_model::{CounterId, HlcTimestamp, SlotRecord, VersionedDescription};
use geocount_ranking::{LiveRanking, RankedCounters, TopIndex};
use geocount_sync::{PageFence, PageMerge};

use super::{Replica, SharedReplica};
use crate::lifecycle::Life;

/// The expiries still to come of the counters described, soonest first: `(expiresAtMs, id)`.
/// Each marks its counter for the top-K index once it has passed. An entry left by a changed
/// expiry only marks its counter once more.
#[derive(Debug, Default)]
pub struct Expiries(BTreeSet<(u64, CounterId)>);

impl Expiries {
    /// Takes the expiries passed by `now_ms`.
    fn passed(&mut self, now_ms: u64) -> Vec<CounterId> {
        let mut passed = Vec::new();
        while let Some(first) = self.0.first()
            && first.0 <= now_ms
        {
            passed.extend(self.0.pop_first().map(|(_, id)| id));
        }
        passed
    }

    /// Whether an expiry passed by `now_ms` is still to be taken.
    fn any_passed(&self, now_ms: u64) -> bool {
        self.0.first().is_some_and(|(at, _)| *at <= now_ms)
    }
}

impl Replica {
    /// Starts ranking counters by total ([`TopIndex`]), the slots grouped by `slot_groups` (by
    /// slot index; all 0 for one datacenter), and by hits in the `live` window: marks what is
    /// held now, and from then on every merge that changes a counter marks it for
    /// [`Replica::rank_pending`].
    pub fn index_top(&mut self, slot_groups: Vec<usize>, live: LiveRanking) {
        let mut top = TopIndex::new(slot_groups, live);
        for index in 0..self.copies.len() {
            top.mark(index);
        }
        self.top = Some(std::sync::Mutex::new(top));
    }

    /// Notes descriptions merged at `now_ms` (`taken`): each marks its counter for the top-K
    /// index (a reset or delete changes what it ranks by), and an expiry still to come is
    /// filed to mark it again once it passes.
    pub fn note_descriptions(&mut self, taken: &[VersionedDescription], now_ms: u64) {
        let expiries = self.expiries.get_mut().expect("expiries lock");
        for description in taken {
            let id = &description.description.id;
            if let Some(expires) = description.description.expires_at_ms
                && expires > now_ms
            {
                expiries.0.insert((expires, id.clone()));
            }
            if let (Some(index), Some(top)) = (self.copies.index_of(id.as_str()), &mut self.top) {
                top.get_mut().expect("top-K lock").mark(index);
            }
        }
    }

    /// Marks for the top-K index each counter whose expiry has passed by `now_ms`.
    fn mark_expired(&self, top: &mut TopIndex, now_ms: u64) {
        let passed = self.expiries.lock().expect("expiries lock").passed(now_ms);
        for id in passed {
            if let Some(index) = self.copies.index_of(id.as_str()) {
                top.mark(index);
            }
        }
    }

    /// The replica's counters as they rank at `now_ms` ([`RankedAt`]).
    pub fn ranked_at(&self, now_ms: u64) -> RankedAt<'_> {
        RankedAt {
            replica: self,
            now_ms,
        }
    }

    /// The top-K index, locked, once [`Replica::index_top`] started it.
    pub fn top_index(&self) -> Option<MutexGuard<'_, TopIndex>> {
        self.top.as_ref().map(|top| top.lock().expect("top-K lock"))
    }

    /// Merges one slot record of counter `id`; returns whether anything changed. A change is
    /// journaled and marked for the top-K index.
    pub fn merge(&mut self, slot: u16, id: &CounterId, record: &SlotRecord) -> bool {
        let changed = self.copies.merge_at(slot, id, record);
        if let (Some(index), Some(top)) = (changed, &mut self.top) {
            top.get_mut().expect("top-K lock").mark(index);
        }
        changed.is_some()
    }

    /// Merges pulled `entries`, whose slots their page names `slot_names`, under `fence`
    /// ([`geocount_sync::SlotCopies::apply_entries`]); each counter changed is marked for the
    /// top-K index.
    pub fn merge_entries(
        &mut self,
        slot_names: &[String],
        entries: &[SlotEntry],
        fence: &PageFence,
    ) -> PageMerge {
        let mut top = self
            .top
            .as_mut()
            .map(|top| top.get_mut().expect("top-K lock"));
        self.copies
            .apply_entries(slot_names, entries, fence, |index| {
                if let Some(top) = &mut top {
                    top.mark(index);
                }
            })
    }

    /// Brings the top-K index up to date for a ranking at `now_ms`: moves the live window on
    /// to end at its second ([`TopIndex::advance`]) and ranks every marked counter, and every
    /// counter whose expiry has passed.
    pub fn rank_all(&self, now_ms: u64) {
        if let Some(mut top) = self.top_index() {
            let counters = self.ranked_at(now_ms);
            self.mark_expired(&mut top, now_ms);
            top.advance(now_ms / 1000, &counters);
            top.rank_pending(&counters, usize::MAX);
        }
    }

    /// Moves the top-K index's live window on to end at the second of `now_ms`, before the
    /// counters marked since are ranked: their buckets of the seconds up to then rank as hits
    /// in the window, not as hits waiting to enter it. Marks each counter whose expiry has
    /// passed.
    pub fn advance_live(&self, now_ms: u64) {
        if let Some(mut top) = self.top_index() {
            self.mark_expired(&mut top, now_ms);
            top.advance(now_ms / 1000, &self.ranked_at(now_ms));
        }
    }

    /// Ranks up to `max` of the counters marked since they were last ranked, as they stand at
    /// `now_ms` ([`TopIndex::rank_pending`]); returns whether none is left waiting.
    pub fn rank_pending(&self, max: usize, now_ms: u64) -> bool {
        self.top_index()
            .is_none_or(|mut top| top.rank_pending(&self.ranked_at(now_ms), max))
    }

    /// Whether the top-K index ranks every merge and every expiry passed by `now_ms`, and its
    /// live window ends at that second or later, so a ranking can be answered from it as it is.
    pub fn ranking_is_current(&self, now_ms: u64) -> bool {
        let expired = self
            .expiries
            .lock()
            .expect("expiries lock")
            .any_passed(now_ms);
        !expired
            && self
                .top_index()
                .is_none_or(|top| top.pending() == 0 && top.live_window().at >= now_ms / 1000)
    }
}

/// A replica's counters as they rank at one time: by their table index, each counting its
/// records by the lifecycle rule ([`Life`]) at `now_ms`.
#[derive(Debug, Clone, Copy)]
pub struct RankedAt<'a> {
    replica: &'a Replica,
    now_ms: u64,
}

impl RankedCounters for RankedAt<'_> {
    fn len(&self) -> usize {
        self.replica.copies.len()
    }

    fn id(&self, index: usize) -> &str {
        self.replica
            .copies
            .get_index(index)
            .map_or("", |(id, _)| id)
    }

    fn records(&self, index: usize) -> &[(u16, SlotRecord)] {
        (self.replica.copies.get_index(index)).map_or(&[], |(_, copies)| copies)
    }

    fn counts_from(&self, index: usize) -> Option<HlcTimestamp> {
        let (id, copies) = self.replica.copies.get_index(index)?;
        let description = self.replica.descriptions.get(id);
        Life::of(description, copies, self.now_ms).counts_from()
    }
}

/// Answers a ranking at `now_ms` with `answer`, given `replica` with its top-K index current:
/// every merge and passed expiry ranked, and the live window moved on to end at `now_ms`'s
/// second (so a ranking of the trending window ending now is a walk of the kept order rather
/// than a scan). A backlog of marked counters is ranked [`RANK_CHUNK`] per hold of the read
/// lock first, so merges wait for no long hold; the last few are ranked and `answer` runs
/// under one read lock, so no merge slips in between.
pub fn with_ranked<T>(
    replica: &SharedReplica,
    now_ms: u64,
    answer: impl FnOnce(&Replica) -> T,
) -> T {
    let backlog = {
        let replica = replica.read().expect("replica lock");
        replica.advance_live(now_ms);
        replica.top_index().map_or(0, |top| top.pending())
    };
    // Bounded by the backlog seen, so merges marking more meanwhile cannot keep it going.
    for _ in 0..backlog.div_ceil(RANK_CHUNK) {
        let replica = replica.read().expect("replica lock");
        if replica.rank_pending(RANK_CHUNK, now_ms) {
            break;
        }
    }
    let replica = replica.read().expect("replica lock");
    replica.rank_all(now_ms);
    answer(&replica)
}

/// How many marked counters the background ranker, and a ranking catching up, rank per hold
/// of the read lock. A merge waits for the hold to end, and reads that come after the merge
/// wait for both, so holds are kept short (docs/architecture.md, "Top-K and trending").
pub const RANK_CHUNK: usize = 32;
