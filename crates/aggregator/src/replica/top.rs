//! The top-K index a replica keeps beside its copies: every merge that changes a counter marks
//! it, and the marked counters are ranked before a ranking is answered and every
//! [`geocount_ranking::RANK_INTERVAL`] in the background
//! ([`Pullers::keep_ranked`](super::Pullers::keep_ranked)).

use std::sync::MutexGuard;

use geocount_model::wire::SlotEntry;
use geocount_model::{CounterId, SlotRecord};
use geocount_ranking::{LiveRanking, RankedCounters, TopIndex};
use geocount_sync::{PageFence, PageMerge};

use super::{Replica, SharedReplica};

impl Replica {
    /// Starts ranking counters by total ([`TopIndex`]), the slots grouped by `slot_groups` (by
    /// slot index; all 0 for one datacenter), and by hits in the `live` window: indexes what is
    /// held now, and from then on every merge that changes a counter marks it for
    /// [`Replica::rank_pending`].
    pub fn index_top(&mut self, slot_groups: Vec<usize>, live: LiveRanking) {
        let mut top = TopIndex::new(slot_groups, live);
        for (index, (_, copies)) in self.copies.iter().enumerate() {
            top.update(index, copies);
        }
        self.top = Some(std::sync::Mutex::new(top));
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

    /// Brings the top-K index up to date for a ranking at `now` (unix seconds): moves the live
    /// window on to end at `now` ([`TopIndex::advance`]) and ranks every marked counter.
    pub fn rank_all(&self, now: u64) {
        if let Some(mut top) = self.top_index() {
            top.advance(now, self);
            top.rank_pending(self, usize::MAX);
        }
    }

    /// Moves the top-K index's live window on to end at `now` (unix seconds), before the
    /// counters marked since are ranked: their buckets of the seconds up to `now` then rank
    /// as hits in the window, not as hits waiting to enter it.
    pub fn advance_live(&self, now: u64) {
        if let Some(mut top) = self.top_index() {
            top.advance(now, self);
        }
    }

    /// Ranks up to `max` of the counters merges changed since they were last ranked
    /// ([`TopIndex::rank_pending`]); returns whether none is left waiting.
    pub fn rank_pending(&self, max: usize) -> bool {
        self.top_index()
            .is_none_or(|mut top| top.rank_pending(self, max))
    }

    /// Whether the top-K index ranks every merge and its live window ends at `now` or later,
    /// so a ranking can be answered from it as it is.
    pub fn ranking_is_current(&self, now: u64) -> bool {
        self.top_index()
            .is_none_or(|top| top.pending() == 0 && top.live_window().at >= now)
    }
}

/// A replica ranks its copies' counters, by their table index.
impl RankedCounters for Replica {
    fn len(&self) -> usize {
        self.copies.len()
    }

    fn id(&self, index: usize) -> &str {
        self.copies.get_index(index).map_or("", |(id, _)| id)
    }

    fn records(&self, index: usize) -> &[(u16, SlotRecord)] {
        self.copies
            .get_index(index)
            .map_or(&[], |(_, copies)| copies)
    }
}

/// Answers a ranking at `now` (unix seconds) with `answer`, given `replica` with its top-K
/// index current: every merge ranked, and the live window moved on to end at `now` (so a
/// ranking of the trending window ending now is a walk of the kept order rather than a scan).
/// A backlog of marked counters is ranked [`RANK_CHUNK`] per hold of the read lock first, so
/// merges wait for no long hold; the last few are ranked and `answer` runs under one read
/// lock, so no merge slips in between.
pub fn with_ranked<T>(replica: &SharedReplica, now: u64, answer: impl FnOnce(&Replica) -> T) -> T {
    let backlog = {
        let replica = replica.read().expect("replica lock");
        replica.advance_live(now);
        replica.top_index().map_or(0, |top| top.pending())
    };
    // Bounded by the backlog seen, so merges marking more meanwhile cannot keep it going.
    for _ in 0..backlog.div_ceil(RANK_CHUNK) {
        let replica = replica.read().expect("replica lock");
        if replica.rank_pending(RANK_CHUNK) {
            break;
        }
    }
    let replica = replica.read().expect("replica lock");
    replica.rank_all(now);
    answer(&replica)
}

/// How many marked counters the background ranker, and a ranking catching up, rank per hold
/// of the read lock. A merge waits for the hold to end, and reads that come after the merge
/// wait for both, so holds are kept short (docs/architecture.md, "Top-K and trending").
pub const RANK_CHUNK: usize = 32;
