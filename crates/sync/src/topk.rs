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
//!
//! Unique counters (whose copies carry a sketch) are left out: their values are estimates of
//! distinct items, not sums. Ties rank by id ascending.
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

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use foldhash::fast::RandomState;
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
    /// How many counters there are: their indices are `0..len`.
    fn len(&self) -> usize;
    /// Whether there is none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
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

    /// The last place a counter with total `total` can hold (the highest index).
    fn last_of(total: i128) -> Self {
        Self::new(total, u32::MAX)
    }

    /// Whether no counter with this total ranks after this key: as a floor, every counter
    /// with its total then leads.
    fn closes_run(&self) -> bool {
        self.index() == u32::MAX
    }
}

/// How many leaders a ranking keeps when it is cut back or refilled: four times the largest K
/// a request may ask for ([`crate::top_query::MAX_K`]), so a top K of some prefix usually finds
/// its K among them, and thousands of leaders must fall under the floor before a refill.
pub const LEADERS: usize = 4 * crate::top_query::MAX_K;

/// Past how many entries of room the index hands back what a burst of merges left empty.
const SHRINK_PAST: usize = 65_536;

/// A total that does not exist: the counter has no copy (or no bucket in the live window) in
/// that ranking's slots. No sum of at most 65,536 `i64` values comes near it.
const ABSENT: i128 = i128::MIN;

/// The place of a counter's total in a ranking, if it has one there.
fn key_of(total: i128, index: u32) -> Option<RankKey> {
    (total != ABSENT).then(|| RankKey::new(total, index))
}

/// The leading counters of one ranking: exactly those ranked at or above `floor`.
#[derive(Debug, Clone, Default)]
struct Leaders {
    /// Their keys, best first.
    order: BTreeSet<RankKey>,
    /// Each one's key, by counter index.
    keys: HashMap<u32, RankKey, RandomState>,
    /// The lowest place a leader may hold; `None` while every counter ranked is a leader.
    floor: Option<RankKey>,
    /// A live ranking's trending bound: every counter at or above it leads (up to
    /// [`Leaders::held_at_most`] of them), so the floor stays at or under the smallest trending
    /// threshold and `/trending` walks rather than scans.
    hold: Option<RankKey>,
    /// Past how many leaders a change cuts them back (0: twice `keep`); raised after a cut
    /// that kept more than `keep` for `hold`, so that not every change cuts.
    cut_past: usize,
}

impl Leaders {
    /// Leaders that hold every counter at or over `hold_from` (a live ranking's smallest
    /// trending threshold), if any.
    fn holding(hold_from: Option<i128>) -> Self {
        Self {
            hold: hold_from.map(RankKey::last_of),
            ..Self::default()
        }
    }

    /// How many leaders a ranking keeps at most to hold every counter at or above its trending
    /// bound: four times `keep` (16,000 by default); past that the floor rises over the bound.
    fn held_at_most(keep: usize) -> usize {
        4 * keep
    }

    /// Counter `index` is now at `key` (`None`: not ranked here): joins, moves or leaves.
    /// Cuts the leaders back to `keep` past twice that many.
    fn set(&mut self, index: u32, key: Option<RankKey>, keep: usize) {
        let old = self.keys.get(&index).copied();
        let key = key.filter(|key| self.floor.is_none_or(|floor| *key <= floor));
        if old == key {
            return;
        }
        if let Some(old) = old {
            self.order.remove(&old);
            self.keys.remove(&index);
        }
        if let Some(key) = key {
            self.order.insert(key);
            self.keys.insert(index, key);
            if self.order.len() > self.cut_past.max(2 * keep) {
                self.cut(keep);
            }
        }
    }

    /// Keeps the best `keep` leaders, and every one at or above `hold` (up to
    /// [`Leaders::held_at_most`]): the floor rises to the last of them.
    fn cut(&mut self, keep: usize) {
        let Some(&last) = self.order.iter().nth(keep.saturating_sub(1)) else {
            return;
        };
        let most = Self::held_at_most(keep);
        let floor = match self.hold {
            Some(hold) if hold > last => {
                let mut held = self.order.range(..=hold);
                match (held.nth(most - 1), held.next()) {
                    // More than `most` at or above the bound: keep the best `most` of them.
                    (Some(&best_most), Some(_)) => best_most,
                    _ => hold,
                }
            }
            _ => last,
        };
        self.floor = Some(floor);
        // No key is above u128::MAX, so with `floor` there nothing is left to drop.
        if let Some(next) = floor.0.checked_add(1) {
            for dropped in self.order.split_off(&RankKey(next)) {
                self.keys.remove(&dropped.index());
            }
        }
        self.cut_past = 2 * self.order.len();
    }

    /// Whether counter `index` is a leader.
    fn holds(&self, index: u32) -> bool {
        self.keys.contains_key(&index)
    }

    /// Replaces the leaders by `best` (the best keys of every counter ranked here, at most
    /// `keep`), `full` when more were ranked than kept, or by `held` (every key at or above
    /// `hold`) when those are more.
    fn refill(
        &mut self,
        best: BinaryHeap<RankKey>,
        full: bool,
        mut held: Vec<RankKey>,
        keep: usize,
    ) {
        let worst = best.peek().copied().filter(|_| full);
        let (floor, leaders): (Option<RankKey>, Vec<RankKey>) = match (worst, self.hold) {
            // More counters at or above the bound than `keep`: they all lead, up to a limit.
            (Some(worst), Some(hold)) if hold > worst => {
                let most = Self::held_at_most(keep);
                if held.len() > most {
                    held.select_nth_unstable(most - 1);
                    held.truncate(most);
                    (held.iter().max().copied(), held)
                } else {
                    (Some(hold), held)
                }
            }
            _ => (worst, best.into_vec()),
        };
        self.floor = floor;
        self.keys = leaders.iter().map(|key| (key.index(), *key)).collect();
        self.order = leaders.into_iter().collect();
        self.cut_past = 2 * self.order.len();
    }
}

/// Keeps the best `keep` keys offered: a max-heap of keys, so its top is the worst kept.
/// Returns whether one was dropped.
fn offer(best: &mut BinaryHeap<RankKey>, key: RankKey, keep: usize) -> bool {
    if best.len() < keep {
        best.push(key);
        return false;
    }
    if best.peek().is_some_and(|worst| key < *worst) {
        best.pop();
        best.push(key);
    }
    true
}

/// The worst of a windowed ranking's best K on top: a min-heap of `(value, Reverse(id))`,
/// where a larger pair ranks higher.
type Worst<'a> = BinaryHeap<Reverse<(i128, Reverse<&'a str>)>>;

/// What a scan ranks counters by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// The all-time total.
    AllTime,
    /// The hits in a window.
    Hits(WindowQuery),
}

/// The live window: hits in `(now - seconds, now]`, its leaders ranked like the all-time ones.
#[derive(Debug)]
struct LiveWindow {
    seconds: u32,
    now: u64,
    /// Ordered like [`TopIndex::rankings`], by hits in the window.
    rankings: Vec<Leaders>,
    /// `(second, counter index)` of every counter whose live hits change then and matter: a
    /// leader's, when they next change; any counter's, when a bucket of it ahead of `now`
    /// enters.
    changes: BTreeSet<(u64, u32)>,
    /// The second each counter in `changes` is filed under.
    filed: HashMap<u32, u64, RandomState>,
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
}

/// Counter `index`'s index in a [`RankKey`].
fn key_index(index: usize) -> u32 {
    u32::try_from(index).expect("a top-K index holds at most 2^32 counters")
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
struct LiveChange {
    leaves: Option<u64>,
    rises: Option<u64>,
    enters: Option<u64>,
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
            self.update(index, counters.records(index));
        }
        if self.pending.is_empty() && self.pending.capacity() > SHRINK_PAST {
            // A burst of merges marked many; hand their room back.
            self.pending = Vec::new();
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

    /// Writes the all-time totals of a counter with copies `slots` into `totals` (per ranking,
    /// all [`ABSENT`] before); a unique counter has none.
    fn totals_of(&self, slots: &[(u16, SlotRecord)], totals: &mut [i128]) {
        if is_unique(slots) {
            return;
        }
        for (slot, record) in slots {
            let value = i128::from(record.state.value);
            add(&mut totals[0], value);
            if let Some(g) = self.group_ranking(*slot) {
                add(&mut totals[g], value);
            }
        }
    }

    /// Counter `index` now has the copies `slots`: recomputes its totals and moves it among
    /// the leaders of each ranking. O(slots + log leaders per ranking it leads).
    pub fn update(&mut self, index: usize, slots: &[(u16, SlotRecord)]) {
        let key = key_index(index);
        let r = self.rankings.len();
        let mut totals = std::mem::take(&mut self.scratch);
        totals.clear();
        totals.resize(2 * r, ABSENT);
        self.totals_of(slots, &mut totals[..r]);
        let change = self.live_of(slots, &mut totals[r..]);
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

    /// Files counter `index` under the second its live hits next change, if that matters:
    /// always when a bucket enters, and when one leaves only if it leads a live ranking.
    fn refile(&mut self, index: u32, change: LiveChange) {
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
            let change = self.live_of(counters.records(index as usize), &mut live);
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

    /// Writes the live hits of a counter with copies `slots` into `live` (per ranking, all
    /// [`ABSENT`] before; a unique counter has none), and returns when they next change after
    /// the live window's end.
    fn live_of(&self, slots: &[(u16, SlotRecord)], live: &mut [i128]) -> LiveChange {
        let mut change = LiveChange::default();
        if is_unique(slots) {
            return change;
        }
        let window = self.live_window();
        let earliest = |a: Option<u64>, b: u64| Some(a.map_or(b, |a| a.min(b)));
        for (slot, record) in slots {
            let buckets = record.window().buckets();
            let (start, end) = in_window(&buckets, window);
            if start < end {
                let hits = sum_hits(&buckets[start..end]);
                add(&mut live[0], hits);
                if let Some(g) = self.group_ranking(*slot) {
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
        let rankings = [self.ranking(scope)];
        self.answer(None, &rankings, prefix, k, None, counters)
            .pop()
            .unwrap_or_default()
    }

    /// For each of `scopes`, the `k` highest counts of hits in `window` among ids starting
    /// with `prefix` and counting at least `min_value` (when given), highest first (ties by id
    /// ascending). A counter is listed in a scope only if one of its slots there has a bucket
    /// in the window. Ids and copies come from `counters`.
    ///
    /// The live window ([`TopIndex::live_window`]) is a walk of its leaders, O(k + ids
    /// skipped), when they hold the answer. Any other window, or an answer the leaders do not
    /// hold, is a scan of every counter: O(n · slots + visited · log k).
    pub fn windowed(
        &mut self,
        scopes: &[Scope],
        prefix: &str,
        k: usize,
        min_value: Option<i128>,
        window: WindowQuery,
        counters: &impl RankedCounters,
    ) -> Vec<Vec<Ranked>> {
        let rankings: Vec<Option<usize>> = scopes.iter().map(|s| self.ranking(*s)).collect();
        if window == self.live_window() {
            let live = Some(window);
            return self.answer(live, &rankings, prefix, k, min_value, counters);
        }
        self.scan(
            &rankings,
            prefix,
            k,
            min_value,
            Measure::Hits(window),
            counters,
        )
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
    ) -> Vec<Vec<Ranked>> {
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
            return lists.into_iter().map(Option::unwrap_or_default).collect();
        }
        // One list per ranking, empty for those already answered.
        let measure = live.map_or(Measure::AllTime, Measure::Hits);
        let scanned = self.scan(&short, prefix, k, min_value, measure, counters);
        lists
            .into_iter()
            .zip(scanned)
            .map(|(list, scanned)| list.unwrap_or(scanned))
            .collect()
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
            let records = counters.records(index);
            if live {
                self.live_of(records, &mut totals);
            } else {
                self.totals_of(records, &mut totals);
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
                let change = self.live_of(counters.records(index as usize), &mut totals);
                self.refile(index, change);
            }
        }
    }

    /// The `k` best of `rankings` (by scope; `None` for a scope with no ranking) by `measure`,
    /// from a scan of every counter in `counters`.
    fn scan<'a>(
        &self,
        rankings: &[Option<usize>],
        prefix: &str,
        k: usize,
        min_value: Option<i128>,
        measure: Measure,
        counters: &'a impl RankedCounters,
    ) -> Vec<Vec<Ranked>> {
        let mut heaps: Vec<Worst<'a>> = vec![BinaryHeap::new(); rankings.len()];
        let mut parts = vec![None; self.rankings.len()];
        for index in 0..counters.len() {
            let id = counters.id(index);
            let records = counters.records(index);
            if !id.starts_with(prefix) || is_unique(records) {
                continue;
            }
            parts.iter_mut().for_each(|p| *p = None);
            for (slot, record) in records {
                let value = match measure {
                    Measure::AllTime => Some(i128::from(record.state.value)),
                    Measure::Hits(window) => hits_in(record.window(), window),
                };
                if let Some(value) = value {
                    add_part(&mut parts[0], value);
                    if let Some(g) = self.group_ranking(*slot) {
                        add_part(&mut parts[g], value);
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

/// Whether counter copies `slots` are a unique counter's (they carry a sketch).
fn is_unique(slots: &[(u16, SlotRecord)]) -> bool {
    slots.iter().any(|(_, record)| record.uniques().is_some())
}

/// The first `k` of `leaders` with ids starting with `prefix`, down to `min_value` (when
/// given), ties by id: O(k + ids skipped + the run of equal totals `k` ends in). `None` when
/// the leaders do not hold the answer: it reaches the floor's total first.
fn walk(
    leaders: &Leaders,
    prefix: &str,
    k: usize,
    min_value: Option<i128>,
    counters: &impl RankedCounters,
) -> Option<Vec<Ranked>> {
    let mut listed = Vec::new();
    let mut run: Vec<&str> = Vec::new();
    let mut keys = leaders.order.iter().peekable();
    while listed.len() < k {
        let Some(first) = keys.next() else {
            // Past the last leader: the answer, unless counters under the floor may follow.
            let complete = leaders.floor.is_none_or(|floor| {
                floor.closes_run() && min_value.is_some_and(|min| min >= floor.total())
            });
            return complete.then_some(listed);
        };
        let value = first.total();
        if min_value.is_some_and(|min| value < min) {
            break;
        }
        if leaders
            .floor
            .is_some_and(|floor| floor.ties(first) && !floor.closes_run())
        {
            // Counters of higher index may share the floor's total without leading.
            return None;
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
    Some(listed)
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

/// The range of `buckets` (by second, rising) in `window`: `(start, end)`, empty when
/// `start == end`; `end` is the first bucket ahead of the window's end.
fn in_window(buckets: &[(u64, i64)], window: WindowQuery) -> (usize, usize) {
    let after = window.at.saturating_sub(u64::from(window.seconds));
    let start = buckets.partition_point(|(s, _)| *s <= after);
    let end = buckets.partition_point(|(s, _)| *s <= window.at);
    (start, end)
}

/// The hits of `buckets`, summed without overflow.
fn sum_hits(buckets: &[(u64, i64)]) -> i128 {
    buckets.iter().map(|(_, hits)| i128::from(*hits)).sum()
}

/// The hits of `w` in `window`, or `None` when it has no bucket there.
fn hits_in(w: &Window, window: WindowQuery) -> Option<i128> {
    let buckets = w.buckets();
    let (start, end) = in_window(&buckets, window);
    (start < end).then(|| sum_hits(&buckets[start..end]))
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
        // What a leader costs a ranking's order.
        assert_eq!(std::mem::size_of::<RankKey>(), 16);
    }
    use geocount_model::SlotState;

    /// A record of `value` whose window holds `hits` (second, hits).
    fn record(value: i64, hits: &[(u64, i64)]) -> SlotRecord {
        let mut record = SlotRecord::from(SlotState { value, version: 1 });
        for (second, delta) in hits {
            record
                .window_mut()
                .unwrap()
                .record(*second, *delta, 3_600)
                .unwrap();
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
        fn len(&self) -> usize {
            self.ids.len()
        }

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
            Self::leading(slot_groups, seconds, now, LEADERS)
        }

        /// [`Table::live`] keeping `keep` leaders per ranking.
        fn leading(slot_groups: Vec<usize>, seconds: u32, now: u64, keep: usize) -> Self {
            Self::holding(slot_groups, LiveRanking::new(seconds, now), keep)
        }

        /// A table whose index ranks `live`, keeping `keep` leaders per ranking.
        fn holding(slot_groups: Vec<usize>, live: LiveRanking, keep: usize) -> Self {
            Self {
                index: TopIndex::with_leaders(slot_groups, live, keep),
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

        fn all_time(&mut self, scope: Scope, prefix: &str, k: usize) -> Vec<Ranked> {
            self.index.all_time(scope, prefix, k, &self.counters)
        }

        fn windowed(
            &mut self,
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
            let window = Measure::Hits(self.index.live_window());
            self.scan_by(window, scopes, prefix, k, min)
        }

        /// What a scan answers all-time.
        fn scanned_all_time(&self, scopes: &[Scope], prefix: &str, k: usize) -> Vec<Vec<Ranked>> {
            self.scan_by(Measure::AllTime, scopes, prefix, k, None)
        }

        fn scan_by(
            &self,
            measure: Measure,
            scopes: &[Scope],
            prefix: &str,
            k: usize,
            min: Option<i128>,
        ) -> Vec<Vec<Ranked>> {
            let rankings: Vec<_> = scopes.iter().map(|s| self.index.ranking(*s)).collect();
            self.index
                .scan(&rankings, prefix, k, min, measure, &self.counters)
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
        assert_eq!(t.index.leaders(), 4);
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
        assert_eq!(t.index.leaders(), 3, "no stale entry left behind");
    }

    #[test]
    fn marks_between_partial_rankings_are_all_ranked_once() {
        let mut t = Table::new(vec![0]);
        // Counter `cN` at index N, worth N, marked as a merge would.
        let hold = |t: &mut Table, n: usize| {
            t.counters.ids.push(format!("c{n}"));
            t.counters.records.push(vec![(0, record(n as i64, &[]))]);
            t.index.mark(n);
        };
        for n in 0..6 {
            hold(&mut t, n);
        }
        assert!(!t.index.rank_pending(&t.counters, 2));
        // Marks that arrive between two partial rankings, one of them already pending.
        hold(&mut t, 6);
        t.index.mark(5);
        assert_eq!(t.index.pending(), 5, "5 was pending already");
        assert!(!t.index.rank_pending(&t.counters, 4));
        assert!(t.index.rank_pending(&t.counters, 4));
        assert_eq!(t.index.pending(), 0);
        assert_eq!(
            ids(&t.all_time(Scope::All, "", 3)),
            [("c6", 6), ("c5", 5), ("c4", 4)]
        );
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
        assert_eq!(t.index.leaders(), 2);
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

    #[test]
    fn leaders_stay_few_and_answers_stay_exact_as_totals_fall_under_the_floor() {
        // Keep 4 leaders: cut back to 4 past 8.
        let mut t = Table::leading(vec![0], 300, 1_000, 4);
        for n in 0..100 {
            t.set(&format!("c{n:03}"), 0, record(n, &[(1_000, n)]));
        }
        assert!(t.index.leaders() <= 8, "{} leaders", t.index.leaders());
        let top = t.all_time(Scope::All, "", 3);
        assert_eq!(ids(&top), [("c099", 99), ("c098", 98), ("c097", 97)]);
        let floor = t.index.rankings[0].floor.expect("a floor once cut");
        assert!(
            floor.total() >= 91,
            "the floor rose to the leaders: {}",
            floor.total()
        );
        // The leaders fall under everything else: a walk falls short, and the refill finds
        // the new leaders among all the counters.
        for n in 92..100 {
            t.set(&format!("c{n:03}"), 0, record(-n, &[(1_000, 1)]));
        }
        assert_eq!(
            ids(&t.all_time(Scope::All, "", 3)),
            [("c091", 91), ("c090", 90), ("c089", 89)]
        );
        assert!(t.index.leaders() >= 4, "refilled");
        // A prefix no leader has is answered by a scan, exactly.
        t.set("#rare", 0, record(1, &[(1_000, 1)]));
        assert_eq!(ids(&t.all_time(Scope::All, "#", 3)), [("#rare", 1)]);
        // The live window's leaders: the most hits, even though c092..c099 fell all-time.
        let live = t.windowed(&[Scope::All], "c", 2, None, 300, 1_000);
        assert_eq!(ids(&live[0]), [("c091", 91), ("c090", 90)]);
        // Hits leave the window: nothing is left, and no counter stays filed.
        t.advance(1_300);
        assert!(t.windowed(&[Scope::All], "", 5, None, 300, 1_300)[0].is_empty());
        assert!(t.index.live.changes.is_empty());
    }

    #[test]
    fn a_counter_under_the_floor_rises_when_its_decrements_leave_the_window() {
        // Two leaders kept, cut back past four: the floor rises to the second best, 8 hits.
        let mut t = Table::leading(vec![0], 10, 100, 2);
        for (id, hits) in [("a", 9), ("b", 8), ("c", 7), ("x", 6), ("y", 5)] {
            t.set(id, 0, record(hits, &[(100, hits)]));
        }
        // 10 hits now after 5 decrements at 95: 5 in (90, 100], under the floor.
        t.set("d", 0, record(5, &[(95, -5), (100, 10)]));
        assert_eq!(
            ids(&t.windowed(&[Scope::All], "", 1, None, 10, 100)[0]),
            [("a", 9)]
        );
        // At 105 the decrements have left the window: 10 hits, the best.
        t.advance(105);
        let top = t.windowed(&[Scope::All], "", 1, None, 10, 105);
        assert_eq!(ids(&top[0]), [("d", 10)]);
        assert_eq!(top, t.scanned(&[Scope::All], "", 1, None));
    }

    #[test]
    fn live_leaders_hold_every_counter_over_the_smallest_trending_threshold() {
        // Four leaders kept, cut back past eight: without the bound the live floor would rise
        // to the fourth best, and `/trending` at 5 would scan every counter.
        let live = LiveRanking {
            seconds: 60,
            now: 100,
            hold_from: Some(5),
        };
        let mut t = Table::holding(vec![0], live, 4);
        for n in 0..20 {
            t.set(&format!("#{n:02}"), 0, record(n, &[(100, n)]));
        }
        let trending = |t: &Table, min| {
            walk(
                &t.index.live.rankings[0],
                "#",
                usize::MAX,
                Some(min),
                &t.counters,
            )
        };
        let leaders = &t.index.live.rankings[0];
        assert_eq!(
            leaders.order.len(),
            15,
            "the 15 counters with 5 to 19 hits lead"
        );
        assert_eq!(leaders.floor, Some(RankKey::last_of(5)));
        let listed = trending(&t, 5).expect("a walk holds the answer");
        assert_eq!(listed.len(), 15);
        assert_eq!((listed[0].value, listed[14].value), (19, 5));
        assert!(
            trending(&t, 4).is_none(),
            "under the bound the leaders do not hold it"
        );
        // All-time rankings keep no such bound: four to eight leaders.
        assert!(t.index.rankings[0].order.len() <= 8);

        // Past 16 (four times the leaders kept) over the bound, the next cut (past twice what
        // the last one kept) raises the floor over it.
        for n in 20..40 {
            t.set(&format!("#{n:02}"), 0, record(n, &[(100, n)]));
        }
        let leaders = &t.index.live.rankings[0];
        assert!(leaders.order.len() <= 32, "at most twice 16 between cuts");
        let floor = leaders.floor.expect("a floor").total();
        assert!(floor > 5, "the floor rose over the bound: {floor}");
        assert!(trending(&t, 5).is_none());
        let over = usize::try_from(39 - floor).unwrap();
        assert_eq!(trending(&t, floor + 1).map(|l| l.len()), Some(over));
        // Whatever the leaders hold, the answer is exact.
        let window = (60, 100);
        for min in [1, 5, 24, 25, 39] {
            let answer = t.windowed(
                &[Scope::All],
                "#",
                usize::MAX,
                Some(min),
                window.0,
                window.1,
            );
            assert_eq!(answer, t.scanned(&[Scope::All], "#", usize::MAX, Some(min)));
            assert_eq!(answer[0].len(), 40 - min as usize);
        }
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
            /// After any merges and any moves of time, the leaders (however few are kept, so
            /// floors rise, leaders leave and refills and scans happen, and whatever trending
            /// bound the live rankings hold) answer exactly what a scan of every counter
            /// answers: all-time, and over the live window, for every scope, prefix, k and
            /// threshold.
            #[test]
            fn after_any_steps(
                steps in prop::collection::vec(step(), 1..60),
                seconds in 1..12u32,
                keep in 1..5usize,
                hold_from in prop::option::of(1..8i128),
            ) {
                let live = LiveRanking { seconds, now: 20, hold_from };
                let mut t = Table::holding(vec![0, 0, 1], live, keep);
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
                    // The last two as `/trending` asks: every counter at or over a threshold.
                    let trending = [("", usize::MAX, hold_from.or(Some(3))), ("#", usize::MAX, Some(6))];
                    let queries = [("", 100, None), ("#", 3, None), ("@", 100, Some(5))];
                    for (prefix, k, min) in queries.into_iter().chain(trending) {
                        let live = t.windowed(&scopes, prefix, k, min, seconds, now);
                        prop_assert_eq!(live, t.scanned(&scopes, prefix, k, min));
                    }
                    for (prefix, k) in [("", 100), ("", 2), ("#", 3), ("@", 1)] {
                        let all_time: Vec<_> =
                            scopes.iter().map(|s| t.all_time(*s, prefix, k)).collect();
                        prop_assert_eq!(all_time, t.scanned_all_time(&scopes, prefix, k));
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
        const PAGE: [u8; 113] = [
            1, 65, 1, 3, 10, 68, 67, 95, 65, 95, 86, 65, 76, 95, 48, 10, 68, 67, 95, 65, 65, 86,
            95, 95, 76, 49, 10, 68, 67, 95, 66, 95, 86, 65, 76, 95, 48, 3, 0, 2, 35, 97, 20, 5, 3,
            184, 162, 167, 218, 6, 4, 246, 163, 167, 218, 6, 236, 255, 163, 167, 218, 6, 255, 255,
            255, 255, 255, 255, 255, 255, 255, 1, 247, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 94, 0, 0, 0, 45, 1, 40, 0, 35,
            // The page's source incarnation.
            0,
        ];
        let page: geocount_model::wire::SyncPage = postcard::from_bytes(&PAGE).unwrap();
        let names = ["DC_A_VAL_0", "DC_A_VAL_1", "DC_B_VAL_0"].map(str::to_owned);
        let mut copies = crate::SlotCopies::new(names.to_vec());
        copies.index_top(vec![0, 0, 1], LiveRanking::new(300, 1_800_000_000));
        let all = crate::PageFence::open(3);
        assert!(
            copies
                .apply_page(page.slots.as_ref().unwrap(), &all)
                .changed
                > 0
        );
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
