//! Unit tests of the top-K index: orders, ties, prefixes, updates, the live window, and that
//! the kept rankings answer what a scan answers.

use std::cmp::Reverse;

use super::*;

mod generations;

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
    let mut expected: Vec<(i128, u32)> = extremes.iter().flat_map(|&t| [(t, 2), (t, 9)]).collect();
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

/// Counters `(id, slots)` by index, and the generation some count from.
#[derive(Default)]
struct Counters {
    records: Vec<Vec<(u16, SlotRecord)>>,
    ids: Vec<String>,
    from: HashMap<usize, Option<geocount_model::HlcTimestamp>>,
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

    fn counts_from(&self, index: usize) -> Option<geocount_model::HlcTimestamp> {
        (self.from.get(&index).copied()).unwrap_or(Some(Default::default()))
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
        self.index.update_counted(n, Counted::of(&self.counters, n));
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
            .scan(&rankings, prefix, k, min, measure)
            .run(&self.counters)
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

/// Found by fuzzing (`fuzz/`, target `wire_sync_page`, a hang): a record with a bucket at
/// second `u64::MAX` was filed to change at a saturated second no later than the live window's
/// end, so moving the window to the end of time recomputed it forever. The same pulled into
/// an aggregator's replica is tested there (`geocount_aggregator::replica`).
#[test]
fn a_bucket_at_the_end_of_time_does_not_hang_the_live_window() {
    let mut t = Table::live(vec![0], 300, 1_000);
    t.set("c", 0, record(1, &[(u64::MAX, 1)]));
    t.advance(u64::MAX);
    let ranked = t.windowed(&[Scope::All], "", 10, None, 300, u64::MAX);
    assert_eq!(ranked[0].len(), 1);
}
