//! The top-K index over counters reset or deleted: records count from the generation
//! [`RankedCounters::counts_from`] gives.

use super::*;

/// A counter reset counts only the records of its new generation, in every ranking and every
/// scan; a counter deleted leaves them all.
#[test]
fn a_reset_counts_only_its_generation_and_a_delete_leaves_every_ranking() {
    use geocount_model::HlcTimestamp;
    let mut t = Table::live(vec![0, 1], 60, 1_000);
    t.set("a", 0, record(5, &[(990, 5)]));
    t.set("b", 0, record(7, &[(995, 7)]));
    t.set("b", 1, record(1, &[(995, 1)]));
    let reset = HlcTimestamp {
        physical_ms: 999_000,
        logical: 0,
        node: 1,
    };
    let b = 1;
    t.counters.from.insert(b, Some(reset));
    t.index.mark(b);
    assert!(t.index.rank_pending(&t.counters, usize::MAX));
    let all = [Scope::All, Scope::Group(0), Scope::Group(1)];
    let expected = [
        vec![("a", 5), ("b", 0)],
        vec![("a", 5), ("b", 0)],
        vec![("b", 0)],
    ];
    let lists = t
        .index
        .rank(&all, "", 10, None, None, &t.counters)
        .run(&t.counters);
    assert_eq!(lists.iter().map(|l| ids(l)).collect::<Vec<_>>(), expected);
    assert_eq!(t.scanned_all_time(&all, "", 10), lists);
    assert_eq!(ids(&t.scanned(&all, "", 10, None)[0]), [("a", 5)]);
    // A record of the new generation counts.
    let mut renewed = record(2, &[(999, 2)]);
    renewed.set_generation(reset);
    t.set("b", 1, renewed);
    let lists = t
        .index
        .rank(&all, "", 10, None, None, &t.counters)
        .run(&t.counters);
    assert_eq!(ids(&lists[0]), [("a", 5), ("b", 2)]);
    assert_eq!(ids(&lists[2]), [("b", 2)]);
    let live = t.index.live_window();
    let trending = t.windowed(&all, "", 10, None, live.seconds, live.at);
    assert_eq!(ids(&trending[0]), [("a", 5), ("b", 2)]);
    assert_eq!(trending, t.scanned(&all, "", 10, None));
    // Deleted: ranked nowhere, all-time or live.
    t.counters.from.insert(0, None);
    t.index.mark(0);
    assert!(t.index.rank_pending(&t.counters, usize::MAX));
    let lists = t
        .index
        .rank(&all, "", 10, None, None, &t.counters)
        .run(&t.counters);
    assert_eq!(ids(&lists[0]), [("b", 2)]);
    assert_eq!(
        ids(&lists[1]),
        [("b", 0)],
        "its old record in group 0 reads as 0"
    );
    assert_eq!(t.scanned_all_time(&all, "", 10), lists);
    let trending = t.windowed(&all, "", 10, None, live.seconds, live.at);
    assert_eq!(ids(&trending[0]), [("b", 2)]);
    t.advance(1_049);
    assert_eq!(ids(&t.scanned(&all, "", 10, None)[0]), [("b", 2)]);
}
