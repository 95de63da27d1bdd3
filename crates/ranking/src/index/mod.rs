//! Top-K trends: the leading counters of each ranking, kept up to date as slot copies merge, so
//! the highest counters of a tier (and, at the global tier, of each datacenter) are found
//! without sorting every counter on each request.
//!
//! A ranking orders counters by a total: all-time, over every slot the index covers or (at the
//! global tier) over one datacenter's ("group's") slots; or the hits of the live window (the
//! trending window, `[trending] window_seconds` ending now), likewise per scope. For each,
//! [`TopIndex`] keeps only its *leaders* ([`Leaders`]): every counter ranked at or above a
//! floor, in order. Nothing is held per counter below the floor, so the index costs a few
//! thousand entries per ranking however many counters there are (it cost 130 bytes per
//! counter and datacenter at the global tier when it ranked every counter).
//!
//! - **A change** recomputes the counter's totals from its copies and moves it among the
//!   leaders it is (or becomes) one of: O(slots + log leaders). A counter rising over the floor
//!   joins; one falling under it leaves. Leaders past twice [`LEADERS`] are cut back to
//!   [`LEADERS`], which raises the floor.
//! - **A top K** (with a prefix, or down to a trending threshold) walks the leaders from the
//!   top: O(K + ids skipped). The leaders are exactly the counters ranked at or above the
//!   floor, so a walk that lists K (or reaches under the threshold) before it reaches the
//!   floor's total is the exact answer. One that does not (a rare prefix, a low threshold, or
//!   leaders thinned by falling totals) refills the leaders from every counter when fewer than
//!   [`LEADERS`] are left, and else answers by a scan of every counter: O(n · slots).
//! - **The trending bound.** A live ranking also keeps every counter with at least the smallest
//!   configured trending threshold of hits ([`LiveRanking::hold_from`]), up to 16,000 of them
//!   when cut back: the floor stays at or under every threshold, so `/trending`, which lists
//!   every counter at or over its threshold, walks the leaders. Its floor is then the last place
//!   of its total (index `u32::MAX`), so every counter with that total leads, and a walk down
//!   to it is exact.
//! - **The live window** moves on as time passes ([`TopIndex::advance`]). A leader is filed
//!   under the next second at which its live hits change (its oldest bucket in the window
//!   leaves, or a bucket timestamped ahead of `now` enters), and any counter under the next
//!   second a bucket of it enters or a bucket of it with negative hits leaves; advancing
//!   recomputes just the counters filed by then. A counter below the floor need not be filed
//!   for other buckets leaving: that only lowers it.
//! - **Any other window** (another length, or one ending in the past) is answered by a scan of
//!   every counter, keeping the best K in a bounded min-heap: O(n · slots + visited · log K).
//!   [`TopIndex::rank`] hands every scan back as a [`Scan`] (`crate::scan`) for its caller to
//!   run a run of counters at a time, without holding the index or the copies meanwhile.
//!
//! Unique counters (whose copies carry a sketch) are left out: their values are estimates of
//! distinct items, not sums. A counter's records count from the generation
//! [`RankedCounters::counts_from`] gives (one wiped by a reset reads as 0 with no hits), and a
//! counter deleted or expired ranks nowhere. Ties rank by id ascending.
//!
//! Merges only mark a counter as changed ([`TopIndex::mark`]); [`TopIndex::rank_pending`] moves
//! the marked counters, each once however often it changed since. Aggregators rank what is
//! pending every [`RANK_INTERVAL`] and before answering a ranking, so a counter merged from
//! every pull of a busy second is ranked once in it, and answers are still exact.
//!
//! The leaders order ties by counter index, not id: comparing two keys then never leaves the
//! B-tree node (ids sit elsewhere in memory), and a key is 16 bytes. A walk sorts each run of
//! equal totals it lists by id, so answers still rank ties by id; a run is read whole, which
//! costs O(run) only when K ends inside a long run of equal totals. The floor's own run may
//! hold only some of the counters with its total (those of lower index), so a walk never lists
//! from it.

use std::collections::{BTreeSet, BinaryHeap, HashMap};

use geocount_model::SlotRecord;

pub mod leaders;
pub mod live;

use geocount_model::WindowQuery;
pub use leaders::LEADERS;
use leaders::{ABSENT, Leaders, RankKey, SHRINK_PAST, key_of, offer, walk};
pub use live::LiveRanking;
use live::LiveWindow;

use crate::ranked::{Counted, Ranked, RankedCounters, Scope};
use crate::scan::{Measure, Scan};

/// What [`TopIndex::rank`] answers: the lists, or a scan that finishes them.
#[derive(Debug)]
#[must_use]
pub enum Answer {
    /// Every list, from the leaders.
    Ready(Vec<Vec<Ranked>>),
    /// Some lists need a scan of every counter ([`Scan::visit`], then [`Scan::finish`]).
    Scan(Scan),
}

impl Answer {
    /// The lists, any scan run over every counter of `counters` at once.
    pub fn run(self, counters: &impl RankedCounters) -> Vec<Vec<Ranked>> {
        match self {
            Answer::Ready(lists) => lists,
            Answer::Scan(scan) => scan.run(counters),
        }
    }
}

/// How often an aggregator ranks the counters merges marked ([`TopIndex::rank_pending`]).
pub const RANK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// The leading counters by total, per scope, all-time and in the live window. Holds up to
/// 2³² counters.
#[derive(Debug)]
pub struct TopIndex {
    /// The group of each slot, by slot index.
    slot_groups: Vec<usize>,
    /// How many groups; with one, [`Scope::All`] and [`Scope::Group`]`(0)` share a ranking.
    groups: usize,
    /// Ranking 0 is [`Scope::All`]; with several groups, ranking `n + 1` is group `n`.
    rankings: Vec<Leaders>,
    live: LiveWindow,
    /// How many leaders a ranking keeps when cut back or refilled ([`LEADERS`]).
    keep: usize,
    /// Where an update computes a counter's new totals, so it allocates nothing.
    scratch: Vec<i128>,
    /// Counters marked since they were last ranked.
    pending: Vec<u32>,
    /// One bit per counter index: whether it is in `pending`.
    pending_bits: Vec<u64>,
    /// Whether `pending` is in ranking order (highest index first): the ranker ranks a few
    /// counters per call, so it sorts again only after new marks.
    pending_sorted: bool,
    /// The live rankings' trending bound it was made with ([`LiveRanking::hold_from`]).
    hold_from: Option<i128>,
}

/// Counter `index`'s index in a [`RankKey`].
fn key_index(index: usize) -> u32 {
    u32::try_from(index).expect("a top-K index holds at most 2^32 counters")
}

impl TopIndex {
    /// An empty index of slots whose groups are `slot_groups` (by slot index; all 0 for one
    /// datacenter), keeping the live window of `live.seconds` ending at `live.now` (unix
    /// seconds) ranked, and [`LEADERS`] leaders per ranking.
    pub fn new(slot_groups: Vec<usize>, live: LiveRanking) -> Self {
        Self::with_leaders(slot_groups, live, LEADERS)
    }

    /// [`TopIndex::new`], keeping `keep` leaders per ranking (at least 1) rather than
    /// [`LEADERS`]: the tests keep a few, so floors rise and refills happen.
    fn with_leaders(slot_groups: Vec<usize>, live: LiveRanking, keep: usize) -> Self {
        let groups = slot_groups.iter().max().map_or(1, |g| g + 1);
        let rankings = if groups == 1 { 1 } else { groups + 1 };
        Self {
            slot_groups,
            groups,
            rankings: vec![Leaders::default(); rankings],
            live: LiveWindow {
                seconds: live.seconds,
                now: live.now,
                rankings: vec![Leaders::holding(live.hold_from); rankings],
                changes: BTreeSet::new(),
                filed: HashMap::default(),
            },
            keep: keep.max(1),
            scratch: Vec::new(),
            pending: Vec::new(),
            pending_bits: Vec::new(),
            pending_sorted: true,
            hold_from: live.hold_from,
        }
    }

    /// An index with this one's settings and live window over a table of `counters` counters
    /// whose indices changed (some were removed, others moved into their places), every one
    /// marked: ranked again from their copies, it ranks what this one would.
    pub fn renumbered(&self, counters: usize) -> Self {
        let live = LiveRanking {
            seconds: self.live.seconds,
            now: self.live.now,
            hold_from: self.hold_from,
        };
        let mut index = Self::with_leaders(self.slot_groups.clone(), live, self.keep);
        for counter in 0..counters {
            index.mark(counter);
        }
        index
    }

    /// Marks counter `index` as changed: [`TopIndex::rank_pending`] will move it.
    pub fn mark(&mut self, index: usize) {
        let (word, bit) = (index / 64, 1u64 << (index % 64));
        if self.pending_bits.len() <= word {
            self.pending_bits.resize(word + 1, 0);
        }
        if self.pending_bits[word] & bit == 0 {
            self.pending_bits[word] |= bit;
            self.pending.push(key_index(index));
            self.pending_sorted = false;
        }
    }

    /// How many marked counters wait to be ranked.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Ranks up to `max` marked counters from their copies in `counters`; returns whether none
    /// is left waiting.
    pub fn rank_pending(&mut self, counters: &impl RankedCounters, max: usize) -> bool {
        // Highest index first, popped from the end, so counters are ranked in index order:
        // neighbours in memory.
        if !self.pending_sorted {
            self.pending.sort_unstable_by(|a, b| b.cmp(a));
            self.pending_sorted = true;
        }
        for _ in 0..max {
            let Some(index) = self.pending.pop() else {
                break;
            };
            let index = index as usize;
            self.pending_bits[index / 64] &= !(1u64 << (index % 64));
            self.update_counted(index, Counted::of(counters, index));
        }
        if self.pending.is_empty() && self.pending.capacity() > SHRINK_PAST {
            // A burst of merges marked many; hand their room back.
            self.pending = Vec::new();
        }
        self.pending.is_empty()
    }

    /// How many groups the index ranks separately.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// How many counters lead the all-time ranking of [`Scope::All`] (every counter ranked
    /// while there are at most twice [`LEADERS`]).
    pub fn leaders(&self) -> usize {
        self.rankings[0].order.len()
    }

    fn ranking(&self, scope: Scope) -> Option<usize> {
        match scope {
            Scope::All => Some(0),
            Scope::Group(g) if g < self.groups && self.groups == 1 => Some(0),
            Scope::Group(g) if g < self.groups => Some(g + 1),
            Scope::Group(_) => None,
        }
    }

    /// The ranking of slot `slot`'s group besides [`Scope::All`], if it has its own.
    fn group_ranking(&self, slot: u16) -> Option<usize> {
        if self.groups == 1 {
            return None;
        }
        self.slot_groups.get(usize::from(slot)).map(|g| g + 1)
    }

    /// Writes the all-time totals of a counter with copies `counted` into `totals` (per
    /// ranking, all [`ABSENT`] before); a unique counter, or one that does not exist, has none.
    fn totals_of(&self, counted: Counted<'_>, totals: &mut [i128]) {
        if counted.is_unique() {
            return;
        }
        for (slot, value, _) in counted.iter() {
            let value = i128::from(value);
            add(&mut totals[0], value);
            if let Some(g) = self.group_ranking(slot) {
                add(&mut totals[g], value);
            }
        }
    }

    /// Counter `index` now has the copies `slots`, every one counting: [`TopIndex::update_counted`].
    pub fn update(&mut self, index: usize, slots: &[(u16, SlotRecord)]) {
        self.update_counted(index, Counted::all(slots));
    }

    /// Counter `index` now has the copies `counted`: recomputes its totals and moves it among
    /// the leaders of each ranking (out of all of them when it does not exist). O(slots + log
    /// leaders per ranking it leads).
    pub fn update_counted(&mut self, index: usize, counted: Counted<'_>) {
        let key = key_index(index);
        let r = self.rankings.len();
        let mut totals = std::mem::take(&mut self.scratch);
        totals.clear();
        totals.resize(2 * r, ABSENT);
        self.totals_of(counted, &mut totals[..r]);
        let change = self.live_of(counted, &mut totals[r..]);
        let (all_time, live) = totals.split_at(r);
        for (leaders, total) in self.rankings.iter_mut().zip(all_time) {
            leaders.set(key, key_of(*total, key), self.keep);
        }
        for (leaders, hits) in self.live.rankings.iter_mut().zip(live) {
            leaders.set(key, key_of(*hits, key), self.keep);
        }
        self.refile(key, change);
        self.scratch = totals;
    }

    /// The `k` highest all-time totals in `scope` among ids starting with `prefix`, highest
    /// first (ties by id ascending), ids and copies from `counters`. A walk of the leaders,
    /// O(k + ids skipped), when they hold the answer; else a refill or a scan, O(n · slots).
    pub fn all_time(
        &mut self,
        scope: Scope,
        prefix: &str,
        k: usize,
        counters: &impl RankedCounters,
    ) -> Vec<Ranked> {
        self.rank(&[scope], prefix, k, None, None, counters)
            .run(counters)
            .pop()
            .unwrap_or_default()
    }

    /// [`TopIndex::rank`] in `window`, any scan it leaves run at once.
    pub fn windowed(
        &mut self,
        scopes: &[Scope],
        prefix: &str,
        k: usize,
        min_value: Option<i128>,
        window: WindowQuery,
        counters: &impl RankedCounters,
    ) -> Vec<Vec<Ranked>> {
        self.rank(scopes, prefix, k, min_value, Some(window), counters)
            .run(counters)
    }

    /// For each of `scopes`, the `k` highest all-time totals (`window` `None`) or counts of
    /// hits in `window` among ids starting with `prefix` and counting at least `min_value`
    /// (when given), highest first (ties by id ascending). A counter is listed in a windowed
    /// scope only if one of its slots there has a bucket in the window. Ids and copies come
    /// from `counters`.
    ///
    /// All-time and the live window ([`TopIndex::live_window`]) are walks of the leaders,
    /// O(k + ids skipped), when they hold the answer. Any other window, or an answer the
    /// leaders do not hold, is left as a [`Scan`] of every counter (O(n · slots + visited ·
    /// log k)) for the caller to run, so it need not hold the index meanwhile.
    pub fn rank(
        &mut self,
        scopes: &[Scope],
        prefix: &str,
        k: usize,
        min_value: Option<i128>,
        window: Option<WindowQuery>,
        counters: &impl RankedCounters,
    ) -> Answer {
        let rankings: Vec<Option<usize>> = scopes.iter().map(|s| self.ranking(*s)).collect();
        match window {
            Some(window) if window != self.live_window() => {
                let answered = vec![None; rankings.len()];
                let scan = self.scan(&rankings, prefix, k, min_value, Measure::Hits(window));
                Answer::Scan(scan.answered(answered))
            }
            live => self.answer(live, &rankings, prefix, k, min_value, counters),
        }
    }

    /// The leaders of the all-time rankings (`live` `None`) or the live window's.
    fn leaders_of(&self, live: Option<WindowQuery>) -> &[Leaders] {
        match live {
            None => &self.rankings,
            Some(_) => &self.live.rankings,
        }
    }

    /// Answers `rankings` (by scope; `None` for a scope with no ranking) from their leaders,
    /// all-time (`live` `None`) or over the live window: walks each; refills the leaders of a
    /// walk that fell short once some have left; scans for what is still short.
    fn answer(
        &mut self,
        live: Option<WindowQuery>,
        rankings: &[Option<usize>],
        prefix: &str,
        k: usize,
        min_value: Option<i128>,
        counters: &impl RankedCounters,
    ) -> Answer {
        let walk_all = |index: &Self| -> Vec<Option<Vec<Ranked>>> {
            let leaders = index.leaders_of(live);
            rankings
                .iter()
                .map(|ranking| match ranking {
                    Some(r) => walk(&leaders[*r], prefix, k, min_value, counters),
                    None => Some(Vec::new()),
                })
                .collect()
        };
        let mut lists = walk_all(self);
        let thinned = rankings.iter().zip(&lists).any(|(ranking, list)| {
            list.is_none()
                && ranking.is_some_and(|r| self.leaders_of(live)[r].order.len() < self.keep)
        });
        if thinned {
            self.refill(live.is_some(), counters);
            lists = walk_all(self);
        }
        let short: Vec<Option<usize>> = rankings
            .iter()
            .zip(&lists)
            .map(|(ranking, list)| ranking.filter(|_| list.is_none()))
            .collect();
        if short.iter().all(Option::is_none) {
            return Answer::Ready(lists.into_iter().map(Option::unwrap_or_default).collect());
        }
        let measure = live.map_or(Measure::AllTime, Measure::Hits);
        let scan = self.scan(&short, prefix, k, min_value, measure);
        Answer::Scan(scan.answered(lists))
    }

    /// A scan for `rankings` (by scope; `None` for a scope with no ranking) by `measure`.
    fn scan(
        &self,
        rankings: &[Option<usize>],
        prefix: &str,
        k: usize,
        min_value: Option<i128>,
        measure: Measure,
    ) -> Scan {
        let slot_rankings = (0..self.slot_groups.len())
            .map(|slot| self.group_ranking(slot as u16))
            .collect();
        Scan::new(
            rankings.to_vec(),
            self.rankings.len(),
            slot_rankings,
            (prefix, k, min_value),
            measure,
        )
    }

    /// Refills the leaders of every all-time ranking (or every live one) from every counter in
    /// `counters`: the best [`TopIndex::keep`] of each. O(n · (slots + log keep)).
    fn refill(&mut self, live: bool, counters: &impl RankedCounters) {
        let r = self.rankings.len();
        let mut best: Vec<BinaryHeap<RankKey>> = vec![BinaryHeap::new(); r];
        let mut full = vec![false; r];
        let mut totals = vec![ABSENT; r];
        // Every key at or above each live ranking's trending bound.
        let holds: Vec<Option<RankKey>> = if live {
            self.live.rankings.iter().map(|l| l.hold).collect()
        } else {
            vec![None; r]
        };
        let mut held: Vec<Vec<RankKey>> = vec![Vec::new(); r];
        for index in 0..counters.len() {
            let key = key_index(index);
            totals.fill(ABSENT);
            let counted = Counted::of(counters, index);
            if live {
                self.live_of(counted, &mut totals);
            } else {
                self.totals_of(counted, &mut totals);
            }
            let ranked = best.iter_mut().zip(&mut full).zip(&mut held).zip(&holds);
            for ((((best, full), held), hold), total) in ranked.zip(&totals) {
                if let Some(key) = key_of(*total, key) {
                    *full |= offer(best, key, self.keep);
                    if hold.is_some_and(|hold| key <= hold) {
                        held.push(key);
                    }
                }
            }
        }
        let leaders = if live {
            &mut self.live.rankings
        } else {
            &mut self.rankings
        };
        let refills = leaders.iter_mut().zip(best).zip(full).zip(held);
        for (((leaders, best), full), held) in refills {
            leaders.refill(best, full, held, self.keep);
        }
        if live {
            // New leaders are filed for their hits leaving.
            let mut joined: Vec<u32> = self
                .live
                .rankings
                .iter()
                .flat_map(|l| l.keys.keys().copied())
                .collect();
            joined.sort_unstable();
            joined.dedup();
            for index in joined {
                totals.fill(ABSENT);
                let change = self.live_of(Counted::of(counters, index as usize), &mut totals);
                self.refile(index, change);
            }
        }
    }
}

/// Adds `value` to a total that may be [`ABSENT`] yet.
fn add(total: &mut i128, value: i128) {
    *total = if *total == ABSENT {
        value
    } else {
        *total + value
    };
}

#[cfg(test)]
mod tests;
