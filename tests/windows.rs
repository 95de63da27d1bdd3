//! End-to-end tests of rolling windows (the hit counter of the design notes) through every tier:
//! real binaries on loopback ports.

use std::time::Duration;

use geocount_model::wire::{BatchEntry, EntryOutcome};
use geocount_test_support::api::entry;
use geocount_test_support::{Api, TestTopology};
use serde_json::json;

/// How long a tier may take to show what was written.
const CONVERGE: Duration = Duration::from_secs(8);

async fn hit(api: &Api, id: &str, timestamp: u64) {
    let body = json!({"delta": 1, "timestamp": timestamp});
    let (status, answer) = api.write(id, "INCREMENT", Some(body), None).await.unwrap();
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn the_design_notes_hit_counter_holds_through_the_global_aggregator() {
    let topology = TestTopology::new(
        &[("USA_0", 1), ("ASIA_0", 1), ("EUROPE_0", 1)],
        "restore_timeout_ms = 300",
    );
    let global = topology.start_global_aggregator().await;
    let mut aggregators = Vec::new();
    for dc in ["USA_0", "ASIA_0", "EUROPE_0"] {
        aggregators.push(topology.start_datacenter_aggregator(dc).await);
    }
    let usa = topology.start_shard("USA_0", 0).await;
    let asia = topology.start_shard("ASIA_0", 0).await;
    let europe = topology.start_shard("EUROPE_0", 0).await;

    // Hits at 1, 2, 3, each in another datacenter.
    hit(&usa.api(), "hits", 1).await;
    hit(&asia.api(), "hits", 2).await;
    hit(&europe.api(), "hits", 3).await;
    let global = global.api();
    global
        .read_until(CONVERGE, "/counter/hits", |s, b| {
            s == 200 && b["value"] == 3 && b["complete"] == true
        })
        .await;
    let at_4 = global
        .read_until(CONVERGE, "/counter/hits?window=300&at=4", |s, _| s == 200)
        .await;
    assert_eq!(at_4["value"], 3, "{at_4}");
    assert_eq!(at_4["window"], json!({"seconds": 300, "at": 4}));
    assert_eq!(at_4["datacenters"]["ASIA_0"]["value"], 1, "{at_4}");

    // A hit at 300.
    hit(&usa.api(), "hits", 300).await;
    global
        .read_until(CONVERGE, "/counter/hits", |s, b| {
            s == 200 && b["value"] == 4
        })
        .await;
    let at_300 = global.get_json("/counter/hits?window=300&at=300").await.1;
    assert_eq!(at_300["value"], 4, "{at_300}");
    let at_301 = global.get_json("/counter/hits?window=300&at=301").await.1;
    assert_eq!(at_301["value"], 3, "{at_301}");

    // The same holds at each tier for its own part.
    let usa_dc = aggregators[0].api();
    let part = usa_dc.get_json("/counter/hits?window=300&at=301").await.1;
    assert_eq!(
        part["value"], 1,
        "only the hit at 300 is USA's in (1, 301]: {part}"
    );
    let slot = usa
        .api()
        .get_json("/counter/hits?window=300&at=300")
        .await
        .1;
    assert_eq!(
        (slot["value"].as_i64(), slot["slot"].as_str()),
        (Some(2), Some("DC_USA_0_VAL_0"))
    );
    // Shorter windows count only their own seconds.
    let short = global.get_json("/counter/hits?window=2&at=3").await.1;
    assert_eq!(short["value"], 2, "hits at 2 and 3: {short}");
}

#[tokio::test]
async fn out_of_order_and_too_old_hits() {
    let topology = TestTopology::single("restore_timeout_ms = 100");
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    for timestamp in [1000, 998, 999, 1000] {
        hit(&api, "late", timestamp).await;
    }
    let window = |s: u32, at: u64| format!("/counter/late?window={s}&at={at}");
    assert_eq!(api.get(&window(1, 1000)).await.unwrap().json()["value"], 2);
    assert_eq!(
        api.get(&window(2, 999)).await.unwrap().json()["value"],
        2,
        "998 and 999"
    );
    assert_eq!(
        api.get(&window(300, 1000)).await.unwrap().json()["value"],
        4
    );
    // Older than the window behind the newest hit (1000 - 300): dropped from the window, never
    // put in a wrong bucket; the running total still counts it.
    hit(&api, "late", 700).await;
    assert_eq!(
        api.get(&window(300, 1000)).await.unwrap().json()["value"],
        4
    );
    assert_eq!(api.get(&window(1, 700)).await.unwrap().json()["value"], 0);
    assert_eq!(api.value("late").await, 5);
    let metrics = String::from_utf8(api.get("/metrics").await.unwrap().body.to_vec()).unwrap();
    assert!(
        metrics.contains("geocount_shard_window_too_old_total 1"),
        "{metrics}"
    );
    // The window follows the newest hit: a hit at 1301 leaves only itself in 300 s.
    hit(&api, "late", 1301).await;
    assert_eq!(
        api.get(&window(300, 1301)).await.unwrap().json()["value"],
        1
    );
}

#[tokio::test]
async fn timestamps_far_ahead_and_bad_window_reads_are_refused() {
    let topology = TestTopology::single("restore_timeout_ms = 100\nmax_future_skew_secs = 60");
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    hit(&api, "clock", now + 30).await;
    let body = json!({"delta": 1, "timestamp": now + 3600});
    let (status, answer) = api
        .write("clock", "INCREMENT", Some(body), None)
        .await
        .unwrap();
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("ahead"),
        "{answer}"
    );
    let entries = [
        BatchEntry {
            timestamp: Some(now + 3600),
            ..entry("clock", 1)
        },
        BatchEntry {
            timestamp: Some(now),
            ..entry("clock", 1)
        },
    ];
    let outcomes = api.batch(&entries).await.unwrap().outcomes;
    assert!(
        matches!(outcomes[0], EntryOutcome::Refused { status: 422, .. }),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], EntryOutcome::Applied { .. }),
        "{outcomes:?}"
    );
    assert_eq!(
        api.value("clock").await,
        2,
        "nothing of the refused hits was applied"
    );

    // A window longer than the counter's, `at` alone, or a bad number: 400.
    api.created(json!({"id": "short", "windowSeconds": 60}))
        .await;
    for query in [
        "window=61",
        "at=5",
        "window=0",
        "window=-5",
        "window=10&window=20",
        "colour=red",
    ] {
        let answer = api.get(&format!("/counter/short?{query}")).await.unwrap();
        assert_eq!(answer.status, 400, "{query}: {:?}", answer.body);
    }
    assert_eq!(
        api.get("/counter/short?window=60").await.unwrap().json()["value"],
        0
    );
    let (status, _) = api
        .create(json!({"id": "huge", "windowSeconds": 999_999}))
        .await;
    assert_eq!(status, 400, "above shard.max_window_seconds");
}

/// The log keeps only the window buckets each commit touched: after kill -9 the window is
/// rebuilt from the checkpoint (none here) and those logged parts, one second at a time.
#[tokio::test]
async fn a_window_written_over_many_commits_survives_kill9() {
    let topology = TestTopology::single("restore_timeout_ms = 100");
    let mut node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    // Each hit is its own request, so its own commit: most commits touch one earlier bucket.
    for (n, timestamp) in [500, 501, 500, 502, 502, 501, 503, 500].iter().enumerate() {
        for _ in 0..=n {
            hit(&api, "survivor", *timestamp).await;
        }
    }
    let window = |s: u32, at: u64| format!("/counter/survivor?window={s}&at={at}");
    let read_all = async || {
        let mut sums = Vec::new();
        for at in 500..=503 {
            sums.push(api.get(&window(1, at)).await.unwrap().json()["value"].clone());
        }
        sums.push(api.get(&window(300, 503)).await.unwrap().json()["value"].clone());
        sums
    };
    let before = read_all().await;
    assert_eq!(
        before,
        [
            json!(1 + 3 + 8),
            json!(2 + 6),
            json!(4 + 5),
            json!(7),
            json!(36)
        ]
    );
    node.kill9();
    node.restart().await;
    assert_eq!(read_all().await, before);
}
