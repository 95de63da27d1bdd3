//! The leaders of one ranking: every counter ranked at or above a floor, in order, keyed by a
//! packed total and counter index ([`RankKey`]), and the walk that answers a top K from them.
//! [`crate::TopIndex`] keeps one per scope, all-time and in the live window.

use std::collections::{BTreeSet, BinaryHeap, HashMap};

use foldhash::fast::RandomState;

use crate::ranked::{Ranked, RankedCounters};

/// A total's place in a ranking: highest total first, then lowest counter index, packed in
/// one `u128` (16 bytes, against 24 for the total's two words and the index) so a ranking's
/// B-tree holds half as many keys again per node. The high 96 bits are the total, negated and
/// offset so a higher total sorts first; the low 32 the index. A total of valid copies fits in
/// 96 bits (at most 65,536 slots, `u16`, each an `i64` total or the hits of a window of at most
/// `shard.max_window_seconds` buckets); one beyond ±2^95, which only a faulty peer could send,
/// ranks as ±2^95.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RankKey(u128);

/// What `RankKey` adds to a total so the lowest possible total packs as the largest key.
const RANK_OFFSET: i128 = 1 << 95;

impl RankKey {
    pub(crate) fn new(total: i128, index: u32) -> Self {
        let total = total.clamp(-RANK_OFFSET, RANK_OFFSET - 1);
        let descending = (RANK_OFFSET - 1 - total) as u128;
        Self((descending << 32) | u128::from(index))
    }

    pub(crate) fn total(&self) -> i128 {
        RANK_OFFSET - 1 - (self.0 >> 32) as i128
    }

    pub(crate) fn index(&self) -> u32 {
        self.0 as u32
    }

    /// Whether `other` has the same total.
    pub(crate) fn ties(&self, other: &RankKey) -> bool {
        self.0 >> 32 == other.0 >> 32
    }

    /// The last place a counter with total `total` can hold (the highest index).
    pub(crate) fn last_of(total: i128) -> Self {
        Self::new(total, u32::MAX)
    }

    /// Whether no counter with this total ranks after this key: as a floor, every counter
    /// with its total then leads.
    pub(crate) fn closes_run(&self) -> bool {
        self.index() == u32::MAX
    }
}

/// How many leaders a ranking keeps when it is cut back or refilled: four times the largest K
/// a request may ask for ([`geocount_model::top_k::MAX_K`]), so a top K of some prefix usually finds
/// its K among them, and thousands of leaders must fall under the floor before a refill.
pub const LEADERS: usize = 4 * geocount_model::top_k::MAX_K;

/// Past how many entries of room the index hands back what a burst of merges left empty.
pub(crate) const SHRINK_PAST: usize = 65_536;

/// A total that does not exist: the counter has no copy (or no bucket in the live window) in
/// that ranking's slots. No sum of at most 65,536 `i64` values comes near it.
pub(crate) const ABSENT: i128 = i128::MIN;

/// The place of a counter's total in a ranking, if it has one there.
pub(crate) fn key_of(total: i128, index: u32) -> Option<RankKey> {
    (total != ABSENT).then(|| RankKey::new(total, index))
}

/// The leading counters of one ranking: exactly those ranked at or above `floor`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Leaders {
    /// Their keys, best first.
    pub(crate) order: BTreeSet<RankKey>,
    /// Each one's key, by counter index.
    pub(crate) keys: HashMap<u32, RankKey, RandomState>,
    /// The lowest place a leader may hold; `None` while every counter ranked is a leader.
    pub(crate) floor: Option<RankKey>,
    /// A live ranking's trending bound: every counter at or above it leads (up to
    /// [`Leaders::held_at_most`] of them), so the floor stays at or under the smallest trending
    /// threshold and `/trending` walks rather than scans.
    pub(crate) hold: Option<RankKey>,
    /// Past how many leaders a change cuts them back (0: twice `keep`); raised after a cut
    /// that kept more than `keep` for `hold`, so that not every change cuts.
    pub(crate) cut_past: usize,
}

impl Leaders {
    /// Leaders that hold every counter at or over `hold_from` (a live ranking's smallest
    /// trending threshold), if any.
    pub(crate) fn holding(hold_from: Option<i128>) -> Self {
        Self {
            hold: hold_from.map(RankKey::last_of),
            ..Self::default()
        }
    }

    /// How many leaders a ranking keeps at most to hold every counter at or above its trending
    /// bound: four times `keep` (16,000 by default); past that the floor rises over the bound.
    pub(crate) fn held_at_most(keep: usize) -> usize {
        4 * keep
    }

    /// Counter `index` is now at `key` (`None`: not ranked here): joins, moves or leaves.
    /// Cuts the leaders back to `keep` past twice that many.
    pub(crate) fn set(&mut self, index: u32, key: Option<RankKey>, keep: usize) {
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
    pub(crate) fn cut(&mut self, keep: usize) {
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
    pub(crate) fn holds(&self, index: u32) -> bool {
        self.keys.contains_key(&index)
    }

    /// Replaces the leaders by `best` (the best keys of every counter ranked here, at most
    /// `keep`), `full` when more were ranked than kept, or by `held` (every key at or above
    /// `hold`) when those are more.
    pub(crate) fn refill(
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
pub(crate) fn offer(best: &mut BinaryHeap<RankKey>, key: RankKey, keep: usize) -> bool {
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
/// The first `k` of `leaders` with ids starting with `prefix`, down to `min_value` (when
/// given), ties by id: O(k + ids skipped + the run of equal totals `k` ends in). `None` when
/// the leaders do not hold the answer: it reaches the floor's total first.
pub(crate) fn walk(
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
