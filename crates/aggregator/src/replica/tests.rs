//! Unit tests of the replica: merging pulled pages, rankings counting every merge, and the
//! clock bounds on what is taken in.

use super::*;
use geocount_model::fixtures::FixedClock;
use std::time::Duration;

use geocount_model::wire::{Cursor, SlotEntry, SlotPage};
use geocount_model::{CounterId, SlotState};
use geocount_ranking::{LiveRanking, RankedCounters, Scope};
use geocount_sync::{PageFence, PullSink};

use super::metrics::ReplicaMetrics;
use super::pulling::{Pullers, ReplicaSink};

fn page(value: i64, version: u64) -> SyncPage {
    SyncPage {
        source: "DC_A_VAL_0".into(),
        slots: Some(SlotPage {
            slot_names: vec!["DC_A_VAL_0".into()],
            entries: vec![SlotEntry {
                slot: 0,
                id: "c".into(),
                record: SlotState { value, version }.into(),
            }],
            next: Cursor::Seq { epoch: 1, seq: 1 },
            caught_up: true,
        }),
        ..SyncPage::default()
    }
}

#[test]
fn a_sink_merges_pages_and_tracks_its_source() {
    let names = vec!["DC_A_VAL_0".to_owned(), "DC_A_VAL_1".to_owned()];
    let sources: Vec<PullSource> = names
        .iter()
        .map(|name| PullSource {
            name: name.clone(),
            answers_as: name.clone(),
            kind: SourceKind::Shard,
            address: "127.0.0.1:1".into(),
            interval: Duration::from_millis(50),
            first: SyncRequest::from_start(true, false),
            delivers: vec![name.clone()],
        })
        .collect();
    let replica = Replica::new(names, &sources).shared();
    let metrics = ReplicaMetrics::new("test", &names_of(&sources));
    let sink = ReplicaSink {
        replica: replica.clone(),
        source: 0,
        clock: Arc::new(FixedClock(1_000)),
        metrics: metrics.pulls.clone(),
    };
    assert_eq!(sink.request().slots, Some(Cursor::Start));
    sink.apply(page(5, 2), 900);
    sink.apply(page(3, 1), 950);
    sink.failed("refused".into());
    let r = replica.read().unwrap();
    assert_eq!(
        r.copies().get("c").unwrap(),
        &[(
            0,
            SlotState {
                value: 5,
                version: 2
            }
            .into()
        )]
    );
    assert_eq!(r.source_health(0, 1_100).staleness_ms, Some(150));
    assert_eq!(
        r.source_health(0, 1_100).last_error.as_deref(),
        Some("refused")
    );
    assert_eq!(r.source_health(1, 1_100).staleness_ms, None, "never heard");
    assert_eq!(
        r.sources[0].next.slots,
        Some(Cursor::Seq { epoch: 1, seq: 1 })
    );
    let copy = r.slot_copy("DC_A_VAL_0", 0, 100).unwrap();
    assert!(copy.complete, "heard whole from its owner");
    assert!(!r.slot_copy("DC_A_VAL_1", 0, 100).unwrap().complete);
    assert_eq!(
        copy.entries,
        vec![(
            "c".to_owned(),
            SlotState {
                value: 5,
                version: 2
            }
            .into()
        )]
    );
    assert!(r.slot_copy("DC_B_VAL_0", 0, 100).is_none());
    let answer = r.sync_page(
        &SyncRequest {
            slots: None,
            descriptions: Some(Cursor::Start),
            ..SyncRequest::default()
        },
        "A",
        10,
        Vec::new(),
    );
    assert!(answer.slots.is_none() && answer.descriptions.is_some());
    assert_eq!(metrics.pulls.states_merged.get(), 1);
}

/// Merges only mark counters; a ranking answered through `with_ranked` still counts every
/// merge, whether the background ranker ran or not.
#[tokio::test]
async fn rankings_count_every_merge_with_or_without_the_ranker() {
    let names = vec!["DC_A_VAL_0".to_owned()];
    let replica = Replica::new(names, &[]).shared();
    replica
        .write()
        .unwrap()
        .index_top(vec![0], LiveRanking::new(300, 1_000));
    let top = |replica: &SharedReplica| {
        with_ranked(replica, 1_000_000, |r| {
            let mut index = r.top_index().unwrap();
            let ranked = index.all_time(Scope::All, "", 10, &r.ranked_at(1_000_000));
            ranked
                .into_iter()
                .map(|r| (r.id, r.value))
                .collect::<Vec<_>>()
        })
    };
    let merge = |id: &str, value, version| {
        let record = SlotState { value, version }.into();
        replica
            .write()
            .unwrap()
            .merge(0, &geocount_model::CounterId::new(id).unwrap(), &record);
    };
    merge("a", 5, 1);
    merge("b", 7, 1);
    assert_eq!(top(&replica), [("b".into(), 7), ("a".into(), 5)]);
    merge("a", 9, 2);
    let mut pullers = Pullers(Vec::new());
    pullers.keep_ranked(&replica, Arc::new(FixedClock(2_000_000)));
    // The ranker's first round runs at once; wait for it, not for the next interval.
    let ranked = async {
        while !replica.read().unwrap().ranking_is_current(2_000_000) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), ranked)
        .await
        .expect("the ranker ranks the merge");
    assert_eq!(top(&replica), [("a".into(), 9), ("b".into(), 7)]);
    // ... and moved the live window on to the clock's second.
    let live = replica.read().unwrap().top_index().unwrap().live_window();
    assert_eq!(live.at, 2_000);
}

/// A description versioned far ahead of the aggregator's clock would pin its counter's
/// description everywhere: the sink refuses it, counts it, and takes the rest of the page.
#[test]
fn a_sink_refuses_descriptions_from_far_ahead_of_its_clock() {
    use geocount_model::wire::DescriptionPage;
    use geocount_model::{CounterDescription, CounterId, HlcTimestamp};

    let sources = [PullSource {
        name: "DC_A_VAL_0".into(),
        answers_as: "DC_A_VAL_0".into(),
        kind: SourceKind::Shard,
        address: "127.0.0.1:1".into(),
        interval: Duration::from_millis(50),
        first: SyncRequest::from_start(false, true),
        delivers: Vec::new(),
    }];
    let replica = Replica::new(vec!["DC_A_VAL_0".to_owned()], &sources).shared();
    let metrics = ReplicaMetrics::new("test", &names_of(&sources));
    let now = 1_800_000_000_000;
    let sink = ReplicaSink {
        replica: replica.clone(),
        source: 0,
        clock: Arc::new(FixedClock(now)),
        metrics: metrics.pulls.clone(),
    };
    let skew = replica.read().unwrap().max_clock_skew_ms;
    let described = |id: &str, physical_ms| VersionedDescription {
        description: CounterDescription {
            id: CounterId::new(id).unwrap(),
            counter_type: CounterType::Sum,
            number_of_shards: 1,
            base_number_of_shards: 1,
            window_seconds: 300,
            created_at_ms: now,
            generation: Default::default(),
            deleted: false,
            expires_at_ms: None,
            history: Vec::new(),
            min: None,
            max: None,
        },
        version: HlcTimestamp {
            physical_ms,
            logical: 0,
            node: 1,
        },
    };
    let page = SyncPage {
        source: "DC_A_VAL_0".into(),
        descriptions: Some(DescriptionPage {
            items: vec![
                described("ahead", now + skew + 1),
                described("near", now + skew),
            ],
            next: Cursor::Seq { epoch: 1, seq: 2 },
            caught_up: true,
        }),
        ..SyncPage::default()
    };
    sink.apply(page, now - 10);
    let r = replica.read().unwrap();
    assert!(r.descriptions.get("ahead").is_none(), "refused");
    assert!(r.descriptions.get("near").is_some(), "within the bound");
    assert_eq!(metrics.pulls.descriptions_refused.get(), 1);
    assert_eq!(metrics.pulls.descriptions_merged.get(), 1);
}

/// The names of `sources`, as the metrics label them.
fn names_of(sources: &[PullSource]) -> Vec<String> {
    sources.iter().map(|source| source.name.clone()).collect()
}

fn state(value: i64, version: u64) -> SlotRecord {
    SlotState { value, version }.into()
}

#[test]
fn merges_keep_the_top_index_up_to_date() {
    let names = vec!["DC_A_VAL_0".to_owned(), "DC_A_VAL_1".to_owned()];
    let mut table = Replica::new(names, &[]);
    table.merge(0, &CounterId::new("a").unwrap(), &state(5, 1));
    table.index_top(vec![0, 0], LiveRanking::new(300, 1_000));
    table.merge(1, &CounterId::new("a").unwrap(), &state(2, 1));
    table.merge(0, &CounterId::new("b").unwrap(), &state(6, 1));
    table.merge(0, &CounterId::new("b").unwrap(), &state(1, 0));
    assert!(
        !table.ranking_is_current(1_000_000),
        "merges wait to be ranked"
    );
    assert!(!table.rank_pending(1, 1_000_000), "one of two ranked");
    assert!(table.rank_pending(usize::MAX, 1_000_000));
    assert!(table.ranking_is_current(1_000_000));
    let mut top = table.top_index().unwrap();
    let ranked: Vec<_> = top
        .all_time(Scope::All, "", 10, &table.ranked_at(1_000_000))
        .into_iter()
        .map(|r| (r.id, r.value))
        .collect();
    assert_eq!(ranked, [("a".to_owned(), 7), ("b".to_owned(), 6)]);
    let counters = table.ranked_at(1_000_000);
    assert_eq!(counters.records(1).len(), 1);
    assert!(counters.records(9).is_empty());
}

/// Found by fuzzing (`fuzz/`, target `wire_sync_page`, a hang): a pulled record with a
/// bucket at second `u64::MAX` was filed to change at a saturated second no later than the
/// live window's end, so moving the window to the end of time recomputed it forever. The same
/// on the index alone is tested with it (`geocount_ranking::index`).
#[test]
fn a_bucket_at_the_end_of_time_does_not_hang_the_live_window() {
    // A `SyncPage` from slot DC_A_VAL_0: counter `#a` with buckets up to second u64::MAX, its
    // records of generation zero, without history and without rights (the page's last fields
    // all zero).
    const PAGE: [u8; 110] = [
        1, 65, 1, 3, 10, 68, 67, 95, 65, 95, 86, 65, 76, 95, 48, 10, 68, 67, 95, 65, 65, 86, 95,
        95, 76, 49, 10, 68, 67, 95, 66, 95, 86, 65, 76, 95, 48, 3, 0, 2, 35, 97, 20, 5, 3, 184,
        162, 167, 218, 6, 4, 246, 163, 167, 218, 6, 236, 255, 163, 167, 218, 6, 255, 255, 255, 255,
        255, 255, 255, 255, 255, 1, 119, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let (page, rest) = postcard::take_from_bytes::<SyncPage>(&PAGE).unwrap();
    assert!(rest.is_empty(), "the whole page is read");
    let names = ["DC_A_VAL_0", "DC_A_VAL_1", "DC_B_VAL_0"].map(str::to_owned);
    let mut replica = Replica::new(names.to_vec(), &[]);
    replica.index_top(vec![0, 0, 1], LiveRanking::new(300, 1_800_000_000));
    let slots = page.slots.as_ref().unwrap();
    let all = PageFence::open(3);
    assert!(
        replica
            .merge_entries(&slots.slot_names, &slots.entries, &all)
            .changed
            > 0
    );
    // Times are unix ms: the window ends at second u64::MAX / 1000 at most (the index's own
    // test takes it to u64::MAX).
    for now in [
        1_800_000_001,
        1_800_010_000,
        u64::MAX / 1000 - 1,
        u64::MAX / 1000,
    ] {
        replica.rank_all(now * 1000);
    }
    let live = replica.top_index().unwrap().live_window();
    assert_eq!(live.at, u64::MAX / 1000);
}

/// An aggregator's page says how complete each slot is; a shard node's page is its own slot,
/// complete as of the pull. Which one a page is comes from the configured source's kind.
#[test]
fn an_aggregator_source_reports_each_slot_as_it_holds_it() {
    use geocount_model::wire::SlotFreshness;
    let names = vec!["DC_A_VAL_0".to_owned(), "DC_A_VAL_1".to_owned()];
    let sources = [PullSource {
        name: "A".into(),
        answers_as: "A".into(),
        kind: SourceKind::Aggregator,
        address: "127.0.0.1:1".into(),
        interval: Duration::from_millis(50),
        first: SyncRequest::from_start(true, true),
        delivers: names.clone(),
    }];
    let replica = Replica::new(names, &sources).shared();
    let heard = |slot: &str, staleness_ms| SlotFreshness {
        slot: slot.into(),
        staleness_ms,
        owner_incarnation: 7,
        incomplete: false,
    };
    let from_a = SyncPage {
        source: "A".into(),
        freshness: vec![heard("DC_A_VAL_0", Some(100)), heard("DC_A_VAL_1", None)],
        incarnation: 9,
        ..page(5, 2)
    };
    merge_pulled(&replica, 0, &from_a, 1_000, 1_010).unwrap();
    let r = replica.read().unwrap();
    assert_eq!(r.slots[0].complete_as_of_ms, Some(900));
    assert_eq!(
        r.slots[0].owner_incarnation, 7,
        "the owner's, not the aggregator's"
    );
    assert_eq!(r.slots[1].complete_as_of_ms, None, "never heard below");
    assert_eq!(r.copies().get("c").unwrap().len(), 1);
    // Under another name, the page is refused whole.
    drop(r);
    let other = SyncPage {
        source: "B".into(),
        ..from_a
    };
    assert!(matches!(
        merge_pulled(&replica, 0, &other, 2_000, 2_010),
        Err(geocount_sync::SyncError::WrongSource { .. })
    ));
}

/// A replica of slot DC_A_VAL_0, pulled from its shard node, ranking by total and by hits in
/// the 300 s window ending at second 1_000.
fn ranked_replica() -> SharedReplica {
    let name = "DC_A_VAL_0".to_owned();
    let sources = [PullSource {
        name: name.clone(),
        answers_as: name.clone(),
        kind: SourceKind::Shard,
        address: "127.0.0.1:1".into(),
        interval: Duration::from_millis(50),
        first: SyncRequest::from_start(true, true),
        delivers: vec![name.clone()],
    }];
    let mut replica = Replica::new(vec![name], &sources);
    replica.index_top(vec![0], LiveRanking::new(300, 1_000));
    replica.shared()
}

/// A page of the shard node's `records` (id, value, version, generation; each with its value
/// in hits at second 990) and `descriptions`.
fn lifecycle_page(
    records: &[(&str, i64, u64, geocount_model::HlcTimestamp)],
    descriptions: Vec<VersionedDescription>,
) -> SyncPage {
    let entries = records
        .iter()
        .map(|&(id, value, version, generation)| {
            let mut record = state(value, version);
            (record.window_mut().unwrap().record(990, value, 300)).unwrap();
            record.set_generation(generation);
            SlotEntry {
                slot: 0,
                id: id.into(),
                record,
            }
        })
        .collect();
    SyncPage {
        source: "DC_A_VAL_0".into(),
        slots: Some(SlotPage {
            slot_names: vec!["DC_A_VAL_0".into()],
            entries,
            next: Cursor::Seq { epoch: 1, seq: 1 },
            caught_up: true,
        }),
        descriptions: Some(geocount_model::wire::DescriptionPage {
            items: descriptions,
            next: Cursor::Seq { epoch: 1, seq: 1 },
            caught_up: true,
        }),
        ..SyncPage::default()
    }
}

/// The all-time top 10, the live window's and a past window's (a scan), at `now_ms`.
async fn rankings(replica: &SharedReplica, now_ms: u64) -> Vec<Vec<(String, i128)>> {
    let scans = Scans::new(1);
    let mut lists = Vec::new();
    for window in [None, Some(300), Some(299)] {
        let ask = |r: &Replica| {
            let mut index = r.top_index().unwrap();
            let window = window.map(|seconds| geocount_model::WindowQuery {
                seconds,
                at: now_ms / 1000,
            });
            index.rank(&[Scope::All], "", 10, None, window, &r.ranked_at(now_ms))
        };
        let ranked = scans.rank(replica, now_ms, ask).await.unwrap();
        lists.push(ranked[0].iter().map(|r| (r.id.clone(), r.value)).collect());
    }
    lists
}

fn ranked(list: &[(&str, i128)]) -> Vec<(String, i128)> {
    list.iter().map(|&(id, v)| (id.to_owned(), v)).collect()
}

/// Descriptions arriving re-rank their counters: a reset one by the records of its
/// generation, a deleted one nowhere; an expiry passing takes its counter out of every ranking
/// with no message.
#[tokio::test]
async fn rankings_follow_resets_deletes_and_expiries() {
    use geocount_model::HlcTimestamp;
    use geocount_model::fixtures::described;
    let replica = ranked_replica();
    let zero = HlcTimestamp::default();
    let mut c = described("c", 1, 900_000, 1);
    c.description.expires_at_ms = Some(1_002_000);
    let page = lifecycle_page(
        &[("a", 10, 1, zero), ("b", 7, 1, zero), ("c", 3, 1, zero)],
        vec![c],
    );
    merge_pulled(&replica, 0, &page, 999_000, 1_000_000).unwrap();
    let all = ranked(&[("a", 10), ("b", 7), ("c", 3)]);
    assert_eq!(
        rankings(&replica, 1_000_000).await,
        [all.clone(), all.clone(), all]
    );

    let at = |physical_ms| HlcTimestamp {
        physical_ms,
        logical: 0,
        node: 2,
    };
    let a = described("a", 1, 900_000, 1).reset(at(999_500));
    let b = described("b", 1, 900_000, 1).delete(at(999_600));
    merge_pulled(
        &replica,
        0,
        &lifecycle_page(&[], vec![a, b]),
        1_000_000,
        1_000_000,
    )
    .unwrap();
    let hits = ranked(&[("c", 3)]);
    assert_eq!(
        rankings(&replica, 1_000_000).await,
        [ranked(&[("c", 3), ("a", 0)]), hits.clone(), hits],
        "a reads 0 with no hits; b is gone"
    );
    // The owner's record of the reset's generation counts.
    let page = lifecycle_page(&[("a", 2, 2, at(999_500))], Vec::new());
    merge_pulled(&replica, 0, &page, 1_000_500, 1_000_500).unwrap();
    let both = ranked(&[("c", 3), ("a", 2)]);
    assert_eq!(
        rankings(&replica, 1_000_500).await,
        [both.clone(), both.clone(), both]
    );

    // c's expiry passes by the clock: no message, and the background ranker's round drops it.
    assert!(replica.read().unwrap().ranking_is_current(1_000_900));
    assert!(!replica.read().unwrap().ranking_is_current(1_002_000));
    let mut pullers = Pullers(Vec::new());
    pullers.keep_ranked(&replica, Arc::new(FixedClock(1_002_000)));
    let ranked_by_the_clock = async {
        while !replica.read().unwrap().ranking_is_current(1_002_000) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), ranked_by_the_clock)
        .await
        .expect("the ranker drops the expired counter");
    drop(pullers);
    let only_a = ranked(&[("a", 2)]);
    assert_eq!(
        rankings(&replica, 1_002_000).await,
        [only_a.clone(), only_a.clone(), only_a]
    );
}

/// A ranking answered with no background ranker still drops a counter whose expiry passed.
#[tokio::test]
async fn a_ranking_drops_a_counter_expired_since_the_last_round() {
    use geocount_model::HlcTimestamp;
    use geocount_model::fixtures::described;
    let replica = ranked_replica();
    let mut c = described("c", 1, 900_000, 1);
    c.description.expires_at_ms = Some(1_000_001);
    let zero = HlcTimestamp::default();
    let page = lifecycle_page(&[("c", 3, 1, zero), ("d", 1, 1, zero)], vec![c]);
    merge_pulled(&replica, 0, &page, 999_000, 1_000_000).unwrap();
    assert_eq!(
        rankings(&replica, 1_000_000).await[0],
        ranked(&[("c", 3), ("d", 1)])
    );
    assert_eq!(rankings(&replica, 1_000_001).await[0], ranked(&[("d", 1)]));
}
