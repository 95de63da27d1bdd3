//! Top-K trends: an index of counters by total, kept up to date as slot copies merge, so the
//! highest counters of a tier (and, at the global tier, of each datacenter) are found without
//! sorting every counter on each request.
//!
//! [`TopIndex`] holds, per counter (by its stable index in [`crate::SlotCopies`]), its all-time
//! total over the slots the index covers, and at the global tier its total per datacenter
//! ("group") as well. Each total sits in an ordered set of `(total descending, counter index)`,
//! one set per ranking, so:
//!
//! - **all-time** top K with a prefix walks a set from the top, skips ids without the prefix and
//!   stops after K: O(K + skipped ids) per request; a changed counter costs O(log n) per
//!   ranking it moves in.
//! - **the live window** (the trending window, `[trending] window_seconds` ending now) is kept
//!   ordered too: per counter, its hits in `(now - seconds, now]` sit in a second set of
//!   rankings. Counts change as time passes, so each counter is also filed under the next
//!   second at which its live count changes (its oldest bucket in the window leaves, or a bucket
//!   timestamped ahead of `now` enters); [`TopIndex::advance`] moves `now` on and recomputes
//!   just the counters filed at or before it. Each bucket causes at most two such recomputes,
//!   so keeping the window costs O(slots + log n) per bucket and a top K or trending list over
//!   it is a walk from the top: O(K + skipped ids), as for all-time.
//! - **any other window** (another length, or one ending in the past) is answered by a scan:
//!   each counter's newest bucket second is indexed, so a request visits only the counters with
//!   a bucket after `at - seconds`, sums their windows exactly and keeps the best K in a bounded
//!   min-heap: O(visited · log K).
//!
//! Unique counters (whose copies carry a sketch) are left out: their values are estimates of
//! distinct items, not sums. Ties rank by id ascending.
//!
//! Merges only mark a counter as changed ([`TopIndex::mark`]); [`TopIndex::rank_pending`] moves
//! the marked counters in the rankings, each once however often it changed since. Aggregators
//! rank what is pending every [`RANK_INTERVAL`] and before answering a ranking, so a counter
//! merged from every pull of a busy second is ranked once in it, and answers are still exact.
//!
//! The sets order ties by counter index, not id: comparing two keys then never leaves the
//! B-tree node (ids sit elsewhere in memory, and a merge-heavy aggregator spent a quarter of its
//! time comparing them), and a key is 16 bytes. A walk sorts each run of equal totals it lists
//! by id, so answers still rank ties by id; a run is read whole, which costs O(run) only when K
//! ends inside a long run of equal totals.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use geocount_model::{SlotRecord, Window};
use serde::Serialize;

use crate::http::WindowQuery;

/// Which totals a ranking orders: over every slot the index covers, or one group's slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every slot (a datacenter aggregator's datacenter, the global aggregator's world).
    All,
    /// The slots of group `n` (a datacenter, at the global tier).
    Group(usize),
}

/// One counter of a ranking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ranked {
    /// The counter's id.
    pub id: String,
    /// Its total, or its hits in the window asked for.
    pub value: i128,
}

/// The counters a [`TopIndex`] ranks, by their stable index: each one's id and slot copies.
pub trait RankedCounters {
    /// Counter `index`'s id (empty when out of range).
    fn id(&self, index: usize) -> &str;
    /// Counter `index`'s copies, `(slot index, state)` (empty when out of range).
    fn records(&self, index: usize) -> &[(u16, SlotRecord)];
}

/// A total's place in a ranking: highest total first, then lowest counter index, packed in
/// one `u128` (16 bytes, against 24 for the total's two words and the index) so a ranking's
/// B-tree holds half as many keys again per node. The high 96 bits are the total, negated and
/// offset so a higher total sorts first; the low 32 the index. A total of valid copies fits in
/// 96 bits (at most 65,536 slots, `u16`, each an `i64` total or the hits of a window of at most
/// `shard.max_window_seconds` buckets); one beyond ±2^95, which only a faulty peer could send,
/// ranks as ±2^95.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct RankKey(u128);

/// What `RankKey` adds to a total so the lowest possible total packs as the largest key.
const RANK_OFFSET: i128 = 1 << 95;

impl RankKey {
    fn new(total: i128, index: u32) -> Self {
        let total = total.clamp(-RANK_OFFSET, RANK_OFFSET - 1);
        let descending = (RANK_OFFSET - 1 - total) as u128;
        Self((descending << 32) | u128::from(index))
    }

    fn total(&self) -> i128 {
        RANK_OFFSET - 1 - (self.0 >> 32) as i128
    }

    fn index(&self) -> u32 {
        self.0 as u32
    }

    /// Whether `other` has the same total.
    fn ties(&self, other: &RankKey) -> bool {
        self.0 >> 32 == other.0 >> 32
    }
}

/// A ranking: counters ordered by total.
type Ranking = BTreeSet<RankKey>;

/// The worst of a windowed ranking's best K on top: a min-heap of `(value, Reverse(id))`,
/// where a larger pair ranks higher.
type Worst<'a> = BinaryHeap<Reverse<(i128, Reverse<&'a str>)>>;

/// A total that does not exist: the counter has no copy (or no bucket in the live window) in
/// that ranking's slots. No sum of at most 65,536 `i64` values comes near it.
const ABSENT: i128 = i128::MIN;

/// What the index knows of one counter.
#[derive(Debug)]
struct Tracked {
    /// Per ranking its all-time total, then per ranking its hits in the live window
    /// ([`ABSENT`]: none there).
    totals: Box<[i128]>,
    /// The newest second of any of its slots' windows.
    newest: MaybeSecond,
    /// The next second at which its live hits change, if any will.
    next_change: MaybeSecond,
}

/// An optional unix second in 8 bytes, where `Option<u64>` takes 16 (a [`Tracked`] per counter
/// is 32 bytes, not 48): `u64::MAX`, a second no client's timestamp reaches, stands for none.
#[derive(Debug, Clone, Copy)]
struct MaybeSecond(u64);

impl MaybeSecond {
    fn new(second: Option<u64>) -> Self {
        Self(second.unwrap_or(u64::MAX))
    }

    fn get(self) -> Option<u64> {
        (self.0 != u64::MAX).then_some(self.0)
    }
}

/// The live window: hits in `(now - seconds, now]`, ranked like the all-time totals.
#[derive(Debug)]
struct LiveWindow {
    seconds: u32,
    now: u64,
    /// Ordered like [`TopIndex::rankings`], by hits in the window.
    rankings: Vec<Ranking>,
    /// `(next change second, counter index)` of every counter whose live hits will change.
    changes: BTreeSet<(u64, usize)>,
}

/// How often an aggregator ranks the counters merges marked ([`TopIndex::rank_pending`]).
pub const RANK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

/// Counters ranked by total, per scope, and indexed by their newest hit. Holds up to 2³²
/// counters.
#[derive(Debug)]
pub struct TopIndex {
    /// The group of each slot, by slot index.
    slot_groups: Vec<usize>,
    /// How many groups; with one, [`Scope::All`] and [`Scope::Group`]`(0)` share a ranking.
    groups: usize,
    /// By counter index; `None` for a unique counter or an index not seen yet.
    counters: Vec<Option<Tracked>>,
    /// Ranking 0 is [`Scope::All`]; with several groups, ranking `n + 1` is group `n`.
    rankings: Vec<Ranking>,
    /// `(newest second, counter index)` of every counter with a window bucket.
    by_newest: BTreeSet<(u64, usize)>,
    live: LiveWindow,
    /// Where an update computes a counter's new totals, so it allocates nothing.
    scratch: Vec<i128>,
    /// Counters marked since they were last ranked.
    pending: Vec<usize>,
    /// One bit per counter index: whether it is in `pending`.
    pending_bits: Vec<u64>,
}

/// Counter `index`'s index in a [`RankKey`].
fn key_index(index: usize) -> u32 {
    u32::try_from(index).expect("a top-K index holds at most 2^32 counters")
}

impl TopIndex {
    /// An empty index of slots whose groups are `slot_groups` (by slot index; all 0 for one
    /// datacenter), keeping the live window of `live_seconds` ending at `now` (unix seconds)
    /// ranked.
    pub fn new(slot_groups: Vec<usize>, live_seconds: u32, now: u64) -> Self {
        let groups = slot_groups.iter().max().map_or(1, |g| g + 1);
        let rankings = if groups == 1 { 1 } else { groups + 1 };
        Self {
            slot_groups,
            groups,
            counters: Vec::new(),
            rankings: vec![Ranking::new(); rankings],
            by_newest: BTreeSet::new(),
            live: LiveWindow {
                seconds: live_seconds,
                now,
                rankings: vec![Ranking::new(); rankings],
                changes: BTreeSet::new(),
            },
            scratch: Vec::new(),
            pending: Vec::new(),
            pending_bits: Vec::new(),
        }
    }

    /// Marks counter `index` as changed: [`TopIndex::rank_pending`] will move it.
    pub fn mark(&mut self, index: usize) {
        let (word, bit) = (index / 64, 1u64 << (index % 64));
        if self.pending_bits.len() <= word {
            self.pending_bits.resize(word + 1, 0);
        }
        if self.pending_bits[word] & bit == 0 {
            self.pending_bits[word] |= bit;
            self.pending.push(index);
        }
    }

    /// How many marked counters wait to be ranked.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Ranks up to `max` marked counters from their copies in `counters`; returns whether none
    /// is left waiting.
    pub fn rank_pending(&mut self, counters: &impl RankedCounters, max: usize) -> bool {
        // Highest index last, so counters are ranked in index order: neighbours in memory.
        self.pending.sort_unstable_by(|a, b| b.cmp(a));
        for _ in 0..max {
            let Some(index) = self.pending.pop() else {
                break;
            };
            self.pending_bits[index / 64] &= !(1u64 << (index % 64));
            self.update(index, counters.records(index));
        }
        self.pending.is_empty()
    }

    /// The live window ranked: its length in seconds, and the second it ends at.
    pub fn live_window(&self) -> WindowQuery {
        WindowQuery {
            seconds: self.live.seconds,
            at: self.live.now,
        }
    }

    /// How many groups the index ranks separately.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// How many counters are ranked (unique counters are not).
    pub fn len(&self) -> usize {
        self.rankings[0].len()
    }

    /// Whether no counter is ranked.
    pub fn is_empty(&self) -> bool {
        self.rankings[0].is_empty()
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

    /// Counter `index` now has the copies `slots`: recomputes its totals and moves it in each
    /// ranking whose total changed. O(slots + log n per ranking moved).
    pub fn update(&mut self, index: usize, slots: &[(u16, SlotRecord)]) {
        let key = key_index(index);
        if self.counters.len() <= index {
            self.counters.resize_with(index + 1, || None);
        }
        let r = self.rankings.len();
        let mut totals = std::mem::take(&mut self.scratch);
        totals.clear();
        totals.resize(2 * r, ABSENT);
        let unique = slots.iter().any(|(_, record)| record.uniques.is_some());
        let mut newest = None;
        let mut next_change = None;
        if !unique {
            for (slot, record) in slots {
                let value = i128::from(record.state.value);
                add(&mut totals[0], value);
                if let Some(g) = self.group_ranking(*slot) {
                    add(&mut totals[g], value);
                }
                newest = newest.max(record.window.newest());
            }
            next_change = self.live_of(slots, &mut totals[r..]);
        }
        let tracked = &mut self.counters[index];
        let old = tracked.as_ref();
        let (old_all, old_live) = match old {
            Some(t) => (Some(&t.totals[..r]), Some(&t.totals[r..])),
            None => (None, None),
        };
        rerank(&mut self.rankings, key, old_all, &totals[..r]);
        rerank(&mut self.live.rankings, key, old_live, &totals[r..]);
        refile(
            &mut self.live.changes,
            index,
            old.and_then(|t| t.next_change.get()),
            next_change,
        );
        let old_newest = old.and_then(|t| t.newest.get());
        if old_newest != newest {
            if let Some(second) = old_newest {
                self.by_newest.remove(&(second, index));
            }
            if let Some(second) = newest {
                self.by_newest.insert((second, index));
            }
        }
        match tracked {
            _ if unique => *tracked = None,
            Some(t) => {
                t.totals.copy_from_slice(&totals);
                t.newest = MaybeSecond::new(newest);
                t.next_change = MaybeSecond::new(next_change);
            }
            None => {
                *tracked = Some(Tracked {
                    totals: totals.as_slice().into(),
                    newest: MaybeSecond::new(newest),
                    next_change: MaybeSecond::new(next_change),
                })
            }
        }
        self.scratch = totals;
    }

    /// Moves the live window on to end at `now` (an earlier `now` changes nothing): recomputes
    /// the live hits of each counter filed to change by then, from its copies in `counters`.
    /// O((slots + log n) per counter recomputed).
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
            live.clear();
            live.resize(r, ABSENT);
            let next_change = self.live_of(counters.records(index), &mut live);
            let Some(tracked) = self.counters.get_mut(index).and_then(Option::as_mut) else {
                self.live.changes.remove(&(second, index));
                continue;
            };
            rerank(
                &mut self.live.rankings,
                key_index(index),
                Some(&tracked.totals[r..]),
                &live,
            );
            refile(&mut self.live.changes, index, Some(second), next_change);
            tracked.totals[r..].copy_from_slice(&live);
            tracked.next_change = MaybeSecond::new(next_change);
        }
        self.scratch = live;
    }

    /// Writes the live hits of a counter with copies `slots` into `live` (per ranking, all
    /// [`ABSENT`] before), and returns the next second after the live window's end at which
    /// they change: when the oldest bucket in the window leaves it, or when the first bucket
    /// ahead of its end enters it.
    fn live_of(&self, slots: &[(u16, SlotRecord)], live: &mut [i128]) -> Option<u64> {
        let window = self.live_window();
        let after = window.at.saturating_sub(u64::from(window.seconds));
        let mut next_change: Option<u64> = None;
        for (slot, record) in slots {
            let buckets = record.window.buckets();
            let start = buckets.partition_point(|(s, _)| *s <= after);
            let end = buckets.partition_point(|(s, _)| *s <= window.at);
            if start < end {
                let hits = buckets[start..end]
                    .iter()
                    .map(|(_, hits)| i128::from(*hits))
                    .sum();
                add(&mut live[0], hits);
                if let Some(g) = self.group_ranking(*slot) {
                    add(&mut live[g], hits);
                }
                let leaves = buckets[start].0.saturating_add(u64::from(window.seconds));
                next_change = Some(next_change.map_or(leaves, |n| n.min(leaves)));
            }
            if let Some((enters, _)) = buckets.get(end) {
                next_change = Some(next_change.map_or(*enters, |n| n.min(*enters)));
            }
        }
        // A bucket within `seconds` of u64::MAX leaves at a saturated second that is no later
        // than the window's end: nothing can change after it, so nothing is filed (else
        // `advance` would recompute it forever).
        next_change.filter(|second| *second > window.at)
    }

    /// The `k` highest all-time totals in `scope` among ids starting with `prefix`, highest
    /// first (ties by id ascending), ids from `counters`. O(k + ids skipped for the prefix).
    pub fn all_time(
        &self,
        scope: Scope,
        prefix: &str,
        k: usize,
        counters: &impl RankedCounters,
    ) -> Vec<Ranked> {
        match self.ranking(scope) {
            Some(r) => walk(&self.rankings[r], prefix, k, None, counters),
            None => Vec::new(),
        }
    }

    /// For each of `scopes`, the `k` highest counts of hits in `window` among ids starting
    /// with `prefix` and counting at least `min_value` (when given), highest first (ties by id
    /// ascending). A counter is listed in a scope only if one of its slots there has a bucket
    /// in the window. Ids and copies come from `counters`.
    ///
    /// The live window ([`TopIndex::live_window`]) is walked from the top: O(k + ids skipped).
    /// Any other visits the counters with a bucket after `window.at - window.seconds`:
    /// O(visited · (slots + log k)).
    pub fn windowed(
        &self,
        scopes: &[Scope],
        prefix: &str,
        k: usize,
        min_value: Option<i128>,
        window: WindowQuery,
        counters: &impl RankedCounters,
    ) -> Vec<Vec<Ranked>> {
        let rankings: Vec<Option<usize>> = scopes.iter().map(|s| self.ranking(*s)).collect();
        if window == self.live_window() {
            return rankings
                .iter()
                .map(|ranking| match ranking {
                    Some(r) => walk(&self.live.rankings[*r], prefix, k, min_value, counters),
                    None => Vec::new(),
                })
                .collect();
        }
        self.scan(&rankings, prefix, k, min_value, window, counters)
    }

    /// [`TopIndex::windowed`] by a scan of the counters with a bucket in `window`, for
    /// `rankings` (by scope; `None` for a scope with no ranking).
    fn scan<'a>(
        &self,
        rankings: &[Option<usize>],
        prefix: &str,
        k: usize,
        min_value: Option<i128>,
        window: WindowQuery,
        counters: &'a impl RankedCounters,
    ) -> Vec<Vec<Ranked>> {
        let mut heaps: Vec<Worst<'a>> = vec![BinaryHeap::new(); rankings.len()];
        let after = window.at.saturating_sub(u64::from(window.seconds));
        let mut parts = vec![None; self.rankings.len()];
        for &(_, index) in self.by_newest.range((after.saturating_add(1), 0)..) {
            if self.counters.get(index).and_then(Option::as_ref).is_none() {
                continue;
            }
            let id = counters.id(index);
            if !id.starts_with(prefix) {
                continue;
            }
            parts.iter_mut().for_each(|p| *p = None);
            for (slot, record) in counters.records(index) {
                if let Some(hits) = hits_in(&record.window, window) {
                    add_part(&mut parts[0], hits);
                    if let Some(g) = self.group_ranking(*slot) {
                        add_part(&mut parts[g], hits);
                    }
                }
            }
            for (heap, ranking) in heaps.iter_mut().zip(rankings) {
                let Some(value) = ranking.and_then(|r| parts[r]) else {
                    continue;
                };
                if min_value.is_some_and(|min| value < min) {
                    continue;
                }
                // Most counters cannot beat the worst of a full heap: skip them before pushing.
                if heap.len() >= k
                    && heap
                        .peek()
                        .is_some_and(|Reverse(worst)| (value, Reverse(id)) <= *worst)
                {
                    continue;
                }
                heap.push(Reverse((value, Reverse(id))));
                if heap.len() > k {
                    heap.pop();
                }
            }
        }
        heaps
            .into_iter()
            .map(|heap| {
                heap.into_sorted_vec()
                    .into_iter()
                    .map(|Reverse((value, Reverse(id)))| Ranked {
                        id: id.to_owned(),
                        value,
                    })
                    .collect()
            })
            .collect()
    }
}

/// The first `k` of `ranking` with ids starting with `prefix`, down to `min_value` (when
/// given), ties by id: O(k + ids skipped + the run of equal totals `k` ends in).
fn walk(
    ranking: &Ranking,
    prefix: &str,
    k: usize,
    min_value: Option<i128>,
    counters: &impl RankedCounters,
) -> Vec<Ranked> {
    let mut listed = Vec::new();
    let mut run: Vec<&str> = Vec::new();
    let mut keys = ranking.iter().peekable();
    while listed.len() < k {
        let Some(first) = keys.next() else {
            break;
        };
        let value = first.total();
        if min_value.is_some_and(|min| value < min) {
            break;
        }
        // The run of counters with this total, sorted by id.
        run.clear();
        run.extend(
            std::iter::once(first)
                .chain(std::iter::from_fn(|| keys.next_if(|key| key.ties(first))))
                .map(|key| counters.id(key.index() as usize))
                .filter(|id| id.starts_with(prefix)),
        );
        let room = k - listed.len();
        if run.len() > room {
            run.select_nth_unstable(room);
            run.truncate(room);
        }
        run.sort_unstable();
        listed.extend(run.iter().map(|id| Ranked {
            id: (*id).to_owned(),
            value,
        }));
    }
    listed
}

/// Moves counter `index` in each of `rankings` whose total changed from `before` (`None`: not
/// ranked before) to `after`.
fn rerank(rankings: &mut [Ranking], index: u32, before: Option<&[i128]>, after: &[i128]) {
    for (r, after) in after.iter().enumerate() {
        let before = before.map_or(ABSENT, |b| b[r]);
        if before == *after {
            continue;
        }
        if before != ABSENT {
            rankings[r].remove(&RankKey::new(before, index));
        }
        if *after != ABSENT {
            rankings[r].insert(RankKey::new(*after, index));
        }
    }
}

/// Refiles counter `index` in `changes` from second `before` to `after`.
fn refile(
    changes: &mut BTreeSet<(u64, usize)>,
    index: usize,
    before: Option<u64>,
    after: Option<u64>,
) {
    if before == after {
        return;
    }
    if let Some(second) = before {
        changes.remove(&(second, index));
    }
    if let Some(second) = after {
        changes.insert((second, index));
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

/// Adds `value` to a part of a scan that may not exist yet.
fn add_part(total: &mut Option<i128>, value: i128) {
    *total = Some(total.unwrap_or(0) + value);
}

/// The hits of `w` in `window`, or `None` when it has no bucket there.
fn hits_in(w: &Window, window: WindowQuery) -> Option<i128> {
    let buckets = w.buckets();
    let after = window.at.saturating_sub(u64::from(window.seconds));
    let start = buckets.partition_point(|(s, _)| *s <= after);
    let end = buckets.partition_point(|(s, _)| *s <= window.at);
    (start < end).then(|| {
        buckets[start..end]
            .iter()
            .map(|(_, hits)| i128::from(*hits))
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_keys_order_by_total_descending_then_index() {
        let extremes = [-(1i128 << 95), -(1 << 79), -1, 0, 1, 1 << 64, (1 << 95) - 1];
        for total in extremes {
            for index in [0, 7, u32::MAX] {
                let key = RankKey::new(total, index);
                assert_eq!((key.total(), key.index()), (total, index));
            }
        }
        let mut keys: Vec<RankKey> = extremes
            .iter()
            .flat_map(|&t| [RankKey::new(t, 9), RankKey::new(t, 2)])
            .collect();
        keys.sort();
        let order: Vec<(i128, u32)> = keys.iter().map(|k| (k.total(), k.index())).collect();
        let mut expected: Vec<(i128, u32)> =
            extremes.iter().flat_map(|&t| [(t, 2), (t, 9)]).collect();
        expected.sort_by_key(|&(total, index)| (Reverse(total), index));
        assert_eq!(order, expected);
        assert!(RankKey::new(5, 1).ties(&RankKey::new(5, 9)));
        assert!(!RankKey::new(5, 1).ties(&RankKey::new(4, 1)));
        // Beyond what valid copies can sum to: clamped, still in order.
        assert_eq!(RankKey::new(i128::MAX, 0).total(), (1 << 95) - 1);
        assert!(RankKey::new(i128::MIN + 1, 0) > RankKey::new(-(1 << 95) + 1, 0));
        // What a counter costs the index: a key per ranking it is in, and its entry.
        assert_eq!(std::mem::size_of::<RankKey>(), 16);
        assert_eq!(std::mem::size_of::<Option<Tracked>>(), 32);
    }
    use geocount_model::SlotState;

    /// A record of `value` whose window holds `hits` (second, hits).
    fn record(value: i64, hits: &[(u64, i64)]) -> SlotRecord {
        let mut record = SlotRecord::from(SlotState { value, version: 1 });
        for (second, delta) in hits {
            record.window.record(*second, *delta, 3_600).unwrap();
        }
        record
    }

    fn ids(ranked: &[Ranked]) -> Vec<(&str, i128)> {
        ranked.iter().map(|r| (r.id.as_str(), r.value)).collect()
    }

    /// Counters `(id, slots)` by index.
    #[derive(Default)]
    struct Counters {
        records: Vec<Vec<(u16, SlotRecord)>>,
        ids: Vec<String>,
    }

    impl RankedCounters for Counters {
        fn id(&self, index: usize) -> &str {
            self.ids.get(index).map_or("", String::as_str)
        }

        fn records(&self, index: usize) -> &[(u16, SlotRecord)] {
            self.records.get(index).map_or(&[], Vec::as_slice)
        }
    }

    /// Counters indexed in order.
    struct Table {
        index: TopIndex,
        counters: Counters,
    }

    impl Table {
        fn new(slot_groups: Vec<usize>) -> Self {
            Self::live(slot_groups, 300, 0)
        }

        /// A table whose index keeps the live window of `seconds` ending at `now`.
        fn live(slot_groups: Vec<usize>, seconds: u32, now: u64) -> Self {
            Self {
                index: TopIndex::new(slot_groups, seconds, now),
                counters: Counters::default(),
            }
        }

        fn set(&mut self, id: &str, slot: u16, record: SlotRecord) {
            let c = &mut self.counters;
            let n = match c.ids.iter().position(|i| i == id) {
                Some(n) => n,
                None => {
                    c.ids.push(id.to_owned());
                    c.records.push(Vec::new());
                    c.ids.len() - 1
                }
            };
            let copies = &mut c.records[n];
            match copies.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, r)) => *r = record,
                None => copies.push((slot, record)),
            }
            self.index.update(n, copies);
        }

        fn all_time(&self, scope: Scope, prefix: &str, k: usize) -> Vec<Ranked> {
            self.index.all_time(scope, prefix, k, &self.counters)
        }

        fn windowed(
            &self,
            scopes: &[Scope],
            prefix: &str,
            k: usize,
            min: Option<i128>,
            seconds: u32,
            at: u64,
        ) -> Vec<Vec<Ranked>> {
            let window = WindowQuery { seconds, at };
            self.index
                .windowed(scopes, prefix, k, min, window, &self.counters)
        }

        fn advance(&mut self, now: u64) {
            self.index.advance(now, &self.counters);
        }

        /// What a scan answers for the live window.
        fn scanned(
            &self,
            scopes: &[Scope],
            prefix: &str,
            k: usize,
            min: Option<i128>,
        ) -> Vec<Vec<Ranked>> {
            let rankings: Vec<_> = scopes.iter().map(|s| self.index.ranking(*s)).collect();
            let window = self.index.live_window();
            self.index
                .scan(&rankings, prefix, k, min, window, &self.counters)
        }
    }

    #[test]
    fn all_time_ranks_highest_first_ties_by_id_and_filters_prefixes() {
        let mut t = Table::new(vec![0, 0]);
        t.set("#zig", 0, record(5, &[]));
        t.set("#rust", 0, record(7, &[]));
        t.set("#go", 0, record(5, &[]));
        t.set("other", 0, record(100, &[]));
        t.set("#rust", 1, record(3, &[]));
        assert_eq!(
            ids(&t.all_time(Scope::All, "", 10)),
            [("other", 100), ("#rust", 10), ("#go", 5), ("#zig", 5)]
        );
        assert_eq!(
            ids(&t.all_time(Scope::All, "#", 2)),
            [("#rust", 10), ("#go", 5)]
        );
        assert_eq!(
            t.all_time(Scope::Group(0), "#", 2),
            t.all_time(Scope::All, "#", 2),
            "one group: the same ranking"
        );
        assert!(t.all_time(Scope::All, "nothing", 10).is_empty());
        assert!(t.all_time(Scope::Group(1), "", 10).is_empty());
        assert_eq!(t.index.len(), 4);
    }

    #[test]
    fn updates_move_counters_up_and_down_and_negatives_rank_last() {
        let mut t = Table::new(vec![0]);
        t.set("a", 0, record(5, &[]));
        t.set("b", 0, record(3, &[]));
        t.set("c", 0, record(-4, &[]));
        t.set("b", 0, record(9, &[]));
        assert_eq!(
            ids(&t.all_time(Scope::All, "", 10)),
            [("b", 9), ("a", 5), ("c", -4)]
        );
        t.set("b", 0, record(-10, &[]));
        t.set("c", 0, record(0, &[]));
        assert_eq!(
            ids(&t.all_time(Scope::All, "", 10)),
            [("a", 5), ("c", 0), ("b", -10)]
        );
        assert_eq!(t.index.len(), 3, "no stale entry left behind");
    }

    #[test]
    fn groups_rank_their_own_slots_and_unique_counters_are_left_out() {
        // Slots 0 and 1 are group 0 (USA), slot 2 group 1 (ASIA).
        let mut t = Table::new(vec![0, 0, 1]);
        t.set("x", 0, record(4, &[]));
        t.set("x", 2, record(10, &[]));
        t.set("y", 1, record(6, &[]));
        assert_eq!(ids(&t.all_time(Scope::All, "", 10)), [("x", 14), ("y", 6)]);
        assert_eq!(
            ids(&t.all_time(Scope::Group(0), "", 10)),
            [("y", 6), ("x", 4)]
        );
        assert_eq!(
            ids(&t.all_time(Scope::Group(1), "", 10)),
            [("x", 10)],
            "y has no copy in group 1"
        );
        let mut unique = record(50, &[]);
        unique.add_item(geocount_model::unique::hash_item("u"), 2);
        t.set("u", 0, unique);
        assert_eq!(t.index.len(), 2);
        assert!(t.all_time(Scope::All, "u", 10).is_empty());
        assert_eq!(t.index.groups(), 2);
    }

    #[test]
    fn windowed_counts_only_hits_in_the_window_and_skips_old_counters() {
        let mut t = Table::new(vec![0, 0, 1]);
        t.set("#rust", 0, record(3, &[(1_000, 3)]));
        t.set("#rust", 2, record(2, &[(990, 2)]));
        t.set("#go", 1, record(10, &[(500, 4), (995, 6)]));
        t.set("#old", 0, record(100, &[(100, 100)]));
        t.set("#zig", 2, record(5, &[(1_000, 5)]));
        let scopes = [Scope::All, Scope::Group(0), Scope::Group(1)];
        let lists = t.windowed(&scopes, "#", 10, None, 300, 1_000);
        assert_eq!(
            ids(&lists[0]),
            [("#go", 6), ("#rust", 5), ("#zig", 5)],
            "the hit at 500 and the counter at 100 are out of (700, 1000]"
        );
        assert_eq!(ids(&lists[1]), [("#go", 6), ("#rust", 3)]);
        assert_eq!(ids(&lists[2]), [("#zig", 5), ("#rust", 2)]);
        let lists = t.windowed(&[Scope::All], "#", 2, None, 300, 1_000);
        assert_eq!(ids(&lists[0]), [("#go", 6), ("#rust", 5)], "k bounds it");
        let lists = t.windowed(&[Scope::All], "#", 10, None, 10, 999);
        assert_eq!(ids(&lists[0]), [("#go", 6), ("#rust", 2)], "(989, 999]");
        let lists = t.windowed(&[Scope::All], "#", usize::MAX, Some(5), 300, 1_000);
        assert_eq!(
            ids(&lists[0]),
            [("#go", 6), ("#rust", 5), ("#zig", 5)],
            "at or over the threshold"
        );
        let lists = t.windowed(&[Scope::All], "#", usize::MAX, Some(6), 300, 1_000);
        assert_eq!(ids(&lists[0]), [("#go", 6)]);
        let lists = t.windowed(&[Scope::All], "#o", 10, None, 1_000, 1_000);
        assert_eq!(ids(&lists[0]), [("#old", 100)], "(0, 1000]: every hit");
        // A counter whose newest hit moves on stays indexed once.
        t.set("#old", 0, record(101, &[(100, 100), (2_000, 1)]));
        let lists = t.windowed(&[Scope::All], "", 10, None, 300, 2_000);
        assert_eq!(ids(&lists[0]), [("#old", 1)]);
        let lists = t.windowed(&[Scope::Group(7)], "", 10, None, 300, 2_000);
        assert!(lists[0].is_empty(), "no such group");
    }

    #[test]
    fn the_live_window_follows_hits_in_and_out_as_time_passes() {
        // Slots 0 and 1 are group 0, slot 2 group 1; the live window is (700, 1000].
        let mut t = Table::live(vec![0, 0, 1], 300, 1_000);
        t.set("#rust", 0, record(3, &[(1_000, 3)]));
        t.set("#rust", 2, record(2, &[(701, 2)]));
        t.set("#go", 1, record(10, &[(500, 4), (995, 6)]));
        t.set("#soon", 2, record(9, &[(1_010, 9)]));
        t.set("#old", 0, record(100, &[(100, 100)]));
        let scopes = [Scope::All, Scope::Group(0), Scope::Group(1)];
        let lists = t.windowed(&scopes, "#", 10, None, 300, 1_000);
        assert_eq!(ids(&lists[0]), [("#go", 6), ("#rust", 5)]);
        assert_eq!(ids(&lists[1]), [("#go", 6), ("#rust", 3)]);
        assert_eq!(
            ids(&lists[2]),
            [("#rust", 2)],
            "#soon's hit is ahead of 1000"
        );
        assert_eq!(lists, t.scanned(&scopes, "#", 10, None));

        // At 1001 the hit at 701 has left; at 1010 the hit at 1010 has entered.
        t.advance(1_001);
        let lists = t.windowed(&scopes, "#", 10, None, 300, 1_001);
        assert_eq!(ids(&lists[0]), [("#go", 6), ("#rust", 3)]);
        assert!(lists[2].is_empty(), "no bucket of group 1 in (701, 1001]");
        t.advance(1_010);
        let lists = t.windowed(&[Scope::All], "#", 10, Some(6), 300, 1_010);
        assert_eq!(ids(&lists[0]), [("#soon", 9), ("#go", 6)], "at or over 6");
        // An earlier `now` changes nothing; a window other than the live one is scanned.
        t.advance(900);
        assert_eq!(
            t.index.live_window(),
            WindowQuery {
                seconds: 300,
                at: 1_010
            }
        );
        let lists = t.windowed(&[Scope::All], "#", 10, None, 300, 1_000);
        assert_eq!(ids(&lists[0]), [("#go", 6), ("#rust", 5)]);
        // Everything leaves by 1310 but the hit at 1010, which leaves at 1310 itself.
        t.advance(1_309);
        let lists = t.windowed(&[Scope::All], "", 10, None, 300, 1_309);
        assert_eq!(ids(&lists[0]), [("#soon", 9)]);
        t.advance(1_310);
        assert!(t.windowed(&[Scope::All], "", 10, None, 300, 1_310)[0].is_empty());
        assert!(t.index.live.changes.is_empty(), "nothing left to change");
        // A merge after the window moved is ranked at the new end.
        t.set("#go", 1, record(11, &[(1_305, 1)]));
        let lists = t.windowed(&[Scope::All], "", 10, None, 300, 1_310);
        assert_eq!(ids(&lists[0]), [("#go", 1)]);
        // A counter turning unique leaves the live rankings too.
        let mut unique = record(50, &[(1_310, 50)]);
        unique.add_item(geocount_model::unique::hash_item("u"), 2);
        t.set("#go", 1, unique);
        assert!(t.windowed(&[Scope::All], "", 10, None, 300, 1_310)[0].is_empty());
        assert!(t.index.live.changes.is_empty());
    }

    mod live_equals_scan {
        use super::*;
        use proptest::prelude::*;

        /// One step: a slot copy of a counter replaced, or time moving on.
        #[derive(Debug, Clone)]
        enum Step {
            Set {
                counter: usize,
                slot: u16,
                hits: Vec<(u64, i64)>,
            },
            Advance(u64),
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                3 => (0..12usize, 0..3u16, prop::collection::vec((0..40u64, -3..20i64), 0..6))
                    .prop_map(|(counter, slot, hits)| Step::Set { counter, slot, hits }),
                1 => (0..15u64).prop_map(Step::Advance),
            ]
        }

        proptest! {
            /// After any merges and any moves of time, the kept live rankings answer exactly
            /// what a scan of every counter answers, for every scope, prefix, k and threshold.
            #[test]
            fn after_any_steps(steps in prop::collection::vec(step(), 1..60), seconds in 1..12u32) {
                let mut t = Table::live(vec![0, 0, 1], seconds, 20);
                let mut now: u64 = 20;
                for step in steps {
                    match step {
                        Step::Set { counter, slot, hits } => {
                            // Buckets around now: some out, some in, some ahead of it.
                            let base = now.saturating_sub(20);
                            let hits: Vec<_> = hits.iter().map(|(s, d)| (base + s, *d)).collect();
                            let value = hits.iter().map(|(_, d)| d).sum();
                            let id = format!("{}{counter}", if counter % 2 == 0 { "#" } else { "@" });
                            t.set(&id, slot, record(value, &hits));
                        }
                        Step::Advance(by) => {
                            now += by;
                            t.advance(now);
                        }
                    }
                    let scopes = [Scope::All, Scope::Group(0), Scope::Group(1)];
                    for (prefix, k, min) in [("", 100, None), ("#", 3, None), ("@", 100, Some(5))] {
                        let live = t.windowed(&scopes, prefix, k, min, seconds, now);
                        prop_assert_eq!(live, t.scanned(&scopes, prefix, k, min));
                    }
                }
            }
        }
    }

    /// Found by fuzzing (`fuzz/`, target `wire_sync_page`, a hang): a pulled record with a
    /// bucket at second `u64::MAX` was filed to change at a saturated second no later than the
    /// live window's end, so moving the window to the end of time recomputed it forever.
    #[test]
    fn a_bucket_at_the_end_of_time_does_not_hang_the_live_window() {
        // A `SyncPage` from slot DC_A_VAL_0: counter `#a` with buckets up to second u64::MAX.
        const PAGE: [u8; 112] = [
            1, 65, 1, 3, 10, 68, 67, 95, 65, 95, 86, 65, 76, 95, 48, 10, 68, 67, 95, 65, 65, 86,
            95, 95, 76, 49, 10, 68, 67, 95, 66, 95, 86, 65, 76, 95, 48, 3, 0, 2, 35, 97, 20, 5, 3,
            184, 162, 167, 218, 6, 4, 246, 163, 167, 218, 6, 236, 255, 163, 167, 218, 6, 255, 255,
            255, 255, 255, 255, 255, 255, 255, 1, 247, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 94, 0, 0, 0, 45, 1, 40, 0, 35,
        ];
        let page: geocount_model::wire::SyncPage = postcard::from_bytes(&PAGE).unwrap();
        let names = ["DC_A_VAL_0", "DC_A_VAL_1", "DC_B_VAL_0"].map(str::to_owned);
        let mut copies = crate::SlotCopies::new(names.to_vec());
        copies.index_top(vec![0, 0, 1], 300, 1_800_000_000);
        assert!(copies.apply_page(page.slots.as_ref().unwrap()) > 0);
        for now in [1_800_000_001, 1_800_010_000, u64::MAX - 1, u64::MAX] {
            copies.rank_all(now);
        }
        let live = copies.top_index().unwrap().live_window();
        assert_eq!(live.at, u64::MAX);
        // The same with one bucket, on the index alone.
        let mut t = Table::live(vec![0], 300, 1_000);
        t.set("c", 0, record(1, &[(u64::MAX, 1)]));
        t.advance(u64::MAX);
        let ranked = t.windowed(&[Scope::All], "", 10, None, 300, u64::MAX);
        assert_eq!(ranked[0].len(), 1);
    }
}
