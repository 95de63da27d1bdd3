//! A ranking by a scan of every counter, O(n · slots + visited · log K): what the kept leaders
//! of [`crate::TopIndex`] cannot answer (another window than the live one, a rare
//! prefix). A [`Scan`] owns its state and visits counters a run at a time, so its caller can
//! take the table's lock for each run alone and let merges and reads in between.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::ranked::{Counted, Ranked, RankedCounters, hits_in};
use geocount_model::WindowQuery;

/// What a scan ranks counters by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Measure {
    /// The all-time total.
    AllTime,
    /// The hits in a window.
    Hits(WindowQuery),
}

/// A ranking's best K so far, worst on top: a min-heap of `(value, Reverse(id))`, where a
/// larger pair ranks higher.
type Best = BinaryHeap<Reverse<(i128, Reverse<String>)>>;

/// A scan of every counter under way, for one or more rankings at once.
#[derive(Debug)]
pub struct Scan {
    /// Per list asked for, the ranking it orders (`None`: none, answered empty).
    rankings: Vec<Option<usize>>,
    /// Per slot index, the group ranking it counts in besides ranking 0, if any.
    slot_rankings: Vec<Option<usize>>,
    prefix: String,
    k: usize,
    min_value: Option<i128>,
    measure: Measure,
    best: Vec<Best>,
    /// One counter's total per ranking, reused.
    parts: Vec<Option<i128>>,
    /// The next counter index to visit.
    next: usize,
    /// Per list asked for, its answer found without a scan, if any.
    answered: Vec<Option<Vec<Ranked>>>,
}

impl Scan {
    /// A scan for `rankings` (of `ranking_count` rankings; slots count in ranking 0 and in
    /// `slot_rankings[slot]`), keeping the best `k` with ids starting with `prefix` counting at
    /// least `min_value`.
    pub(crate) fn new(
        rankings: Vec<Option<usize>>,
        ranking_count: usize,
        slot_rankings: Vec<Option<usize>>,
        (prefix, k, min_value): (&str, usize, Option<i128>),
        measure: Measure,
    ) -> Self {
        Self {
            best: vec![BinaryHeap::new(); rankings.len()],
            rankings,
            slot_rankings,
            prefix: prefix.to_owned(),
            k,
            min_value,
            measure,
            parts: vec![None; ranking_count],
            next: 0,
            answered: Vec::new(),
        }
    }

    /// This scan, with `lists` (per list asked for) already answered where `Some`: those are
    /// taken as they are rather than scanned.
    pub(crate) fn answered(mut self, lists: Vec<Option<Vec<Ranked>>>) -> Self {
        for (ranking, list) in self.rankings.iter_mut().zip(&lists) {
            if list.is_some() {
                *ranking = None;
            }
        }
        self.answered = lists;
        self
    }

    /// Visits up to `max` more counters of `counters`; returns whether every counter is
    /// visited. Counters added after the scan passed their index are not visited.
    pub fn visit(&mut self, counters: &impl RankedCounters, max: usize) -> bool {
        let end = self.next.saturating_add(max).min(counters.len());
        for index in self.next..end {
            self.visit_one(counters.id(index), Counted::of(counters, index));
        }
        self.next = end;
        end >= counters.len()
    }

    fn visit_one(&mut self, id: &str, counted: Counted<'_>) {
        if !id.starts_with(self.prefix.as_str()) || counted.is_unique() {
            return;
        }
        let parts = &mut self.parts;
        parts.iter_mut().for_each(|p| *p = None);
        for (slot, total, hits) in counted.iter() {
            let value = match self.measure {
                Measure::AllTime => Some(i128::from(total)),
                Measure::Hits(window) => hits_in(hits, window),
            };
            if let Some(value) = value {
                add_part(&mut parts[0], value);
                if let Some(Some(g)) = self.slot_rankings.get(usize::from(slot)) {
                    add_part(&mut parts[*g], value);
                }
            }
        }
        for (best, ranking) in self.best.iter_mut().zip(&self.rankings) {
            let Some(value) = ranking.and_then(|r| parts[r]) else {
                continue;
            };
            if self.min_value.is_some_and(|min| value < min) {
                continue;
            }
            // Most counters cannot beat the worst of a full heap: skip them before pushing.
            let beaten =
                |Reverse((worst, Reverse(worst_id))): &Reverse<(i128, Reverse<String>)>| {
                    value < *worst || (value == *worst && id >= worst_id.as_str())
                };
            if best.len() >= self.k && best.peek().is_some_and(beaten) {
                continue;
            }
            best.push(Reverse((value, Reverse(id.to_owned()))));
            if best.len() > self.k {
                best.pop();
            }
        }
    }

    /// The best K of each list asked for, highest first (ties by id ascending).
    pub fn finish(self) -> Vec<Vec<Ranked>> {
        let mut answered = self.answered.into_iter();
        self.best
            .into_iter()
            .map(|best| match answered.next().flatten() {
                Some(list) => list,
                None => best
                    .into_sorted_vec()
                    .into_iter()
                    .map(|Reverse((value, Reverse(id)))| Ranked { id, value })
                    .collect(),
            })
            .collect()
    }

    /// Every counter of `counters` visited at once.
    pub(crate) fn run(mut self, counters: &impl RankedCounters) -> Vec<Vec<Ranked>> {
        self.visit(counters, usize::MAX);
        self.finish()
    }
}

/// Adds `value` to a part of a scan that may not exist yet.
fn add_part(total: &mut Option<i128>, value: i128) {
    *total = Some(total.unwrap_or(0) + value);
}

#[cfg(test)]
mod tests {
    use geocount_model::{SlotRecord, SlotState};

    use super::*;

    /// Counters `n` with a total of `n % 97` in slot 0 and `n % 89` in slot 1.
    struct Counters(Vec<(String, Vec<(u16, SlotRecord)>)>);

    impl Counters {
        fn new(n: usize) -> Self {
            let record = |value: usize| {
                SlotRecord::from(SlotState {
                    value: value as i64,
                    version: 1,
                })
            };
            Self(
                (0..n)
                    .map(|i| {
                        (
                            format!("c{i}"),
                            vec![(0, record(i % 97)), (1, record(i % 89))],
                        )
                    })
                    .collect(),
            )
        }
    }

    impl RankedCounters for Counters {
        fn len(&self) -> usize {
            self.0.len()
        }

        fn id(&self, index: usize) -> &str {
            self.0.get(index).map_or("", |(id, _)| id)
        }

        fn records(&self, index: usize) -> &[(u16, SlotRecord)] {
            self.0.get(index).map_or(&[], |(_, records)| records)
        }
    }

    /// Rankings 0 (every slot), 1 (slot 0's group) and 2 (slot 1's group), top 5 of `c1...`.
    fn scan() -> Scan {
        let rankings = vec![Some(0), Some(1), Some(2), None];
        let slot_rankings = vec![Some(1), Some(2)];
        Scan::new(
            rankings,
            3,
            slot_rankings,
            ("c1", 5, None),
            Measure::AllTime,
        )
    }

    /// A scan visited a few counters per call (as under short lock holds) answers what one
    /// visit of every counter answers, and what a sort of every counter answers.
    #[test]
    fn a_scan_in_runs_answers_what_one_pass_does() {
        let counters = Counters::new(5_000);
        let whole = scan().run(&counters);
        let mut runs = scan();
        let mut visits = 0;
        while !runs.visit(&counters, 7) {
            visits += 1;
        }
        assert!(visits > 700, "{visits}");
        assert_eq!(runs.finish(), whole);
        let mut sorted: Vec<Ranked> = counters
            .0
            .iter()
            .filter(|(id, _)| id.starts_with("c1"))
            .map(|(id, records)| Ranked {
                id: id.clone(),
                value: records.iter().map(|(_, r)| i128::from(r.state.value)).sum(),
            })
            .collect();
        sorted.sort_by(|a, b| b.value.cmp(&a.value).then_with(|| a.id.cmp(&b.id)));
        sorted.truncate(5);
        assert_eq!(whole[0], sorted);
        assert_eq!(whole[1][0].value, 96);
        assert_eq!(whole[2][0].value, 88);
        assert!(whole[3].is_empty(), "no ranking, no list");
    }

    /// Lists already answered are kept as they are, not scanned.
    #[test]
    fn answered_lists_are_kept() {
        let counters = Counters::new(100);
        let kept = vec![Ranked {
            id: "x".into(),
            value: 1,
        }];
        let lists = scan()
            .answered(vec![Some(kept.clone()), None, None, None])
            .run(&counters);
        assert_eq!(lists[0], kept);
        assert!(!lists[1].is_empty());
    }
}
