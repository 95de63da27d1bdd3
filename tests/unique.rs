//! End-to-end tests of unique counts (HyperLogLog) through every tier: real shard nodes,
//! datacenter aggregators and the global aggregator on loopback ports, two datacenters of two
//! shards each.

use std::time::{Duration, Instant};

use geocount_model::SlotId;
use geocount_model::unique::STANDARD_ERROR;
use geocount_model::wire::{EntryOutcome, ItemEntry};
use geocount_test_support::api::entry;
use geocount_test_support::{Method, TestCluster, TestTopology};
use serde_json::{Value, json};

const DATACENTERS: [&str; 2] = ["USA_0", "ASIA_0"];
const SHARDS_PER_DATACENTER: usize = 2;
const DISTINCT_ITEMS: usize = 1_000_000;
const BATCH: usize = 10_000;
/// How long a change may take to reach every tier.
const CONVERGE: Duration = Duration::from_secs(8);

/// Both datacenters of [`SHARDS_PER_DATACENTER`] shards each.
fn topology() -> TestTopology {
    TestTopology::new(
        &[
            (DATACENTERS[0], SHARDS_PER_DATACENTER),
            (DATACENTERS[1], SHARDS_PER_DATACENTER),
        ],
        "restore_timeout_ms = 200",
    )
}

fn item(n: usize) -> String {
    format!("user-{n}")
}

/// Sends the distinct items in batches of [`BATCH`], batch `b` to shard node `b % 4` (so both
/// datacenters take half), four at a time; panics unless every entry is applied. Returns the
/// highest version an entry's answer carried.
async fn write_items(cluster: &TestCluster, id: &str) -> u64 {
    let mut tasks = tokio::task::JoinSet::new();
    let nodes = cluster.shard_count();
    for node in 0..nodes {
        let api = cluster.nth_shard(node).api();
        let id = id.to_owned();
        tasks.spawn(async move {
            let mut highest = 0;
            for batch in (node..DISTINCT_ITEMS / BATCH).step_by(nodes) {
                let mut items: Vec<String> =
                    (batch * BATCH..(batch + 1) * BATCH).map(item).collect();
                // Entries whose outcome is unknown (a forward that timed out on a loaded
                // machine) are sent again, as a client would: an item counts once however often
                // it is written.
                for attempt in 1.. {
                    let entries: Vec<ItemEntry> = items
                        .iter()
                        .map(|item| ItemEntry {
                            id: &id,
                            item,
                            idempotency_key: None,
                            timestamp: None,
                        })
                        .collect();
                    let answer = api.batch_items(&entries).await.expect("item batch");
                    assert_eq!(answer.outcomes.len(), items.len());
                    let mut unknown = Vec::new();
                    for (item, outcome) in items.iter().zip(&answer.outcomes) {
                        match outcome {
                            EntryOutcome::Applied { version, .. } => {
                                highest = highest.max(*version)
                            }
                            EntryOutcome::Refused { status, .. }
                                if matches!(status, 503 | 504) && attempt < 5 =>
                            {
                                unknown.push(item.clone())
                            }
                            refused => panic!("batch {batch}: {refused:?}"),
                        }
                    }
                    if unknown.is_empty() {
                        break;
                    }
                    items = unknown;
                }
            }
            highest
        });
    }
    let mut highest = 0;
    while let Some(done) = tasks.join_next().await {
        highest = highest.max(done.unwrap());
    }
    highest
}

/// Every shard node's `(value, version)` of counter `id`, and its log size.
async fn shard_states(cluster: &TestCluster, id: &str) -> Vec<(i64, u64, String)> {
    let mut states = Vec::new();
    for node in 0..cluster.shard_count() {
        let api = cluster.nth_shard(node).api();
        let (status, body) = api.read(id).await;
        assert_eq!(status, 200, "{body}");
        assert!(body["standard_error"].is_f64(), "{body}");
        let metrics = String::from_utf8(api.get("/metrics").await.unwrap().body.to_vec()).unwrap();
        let log_bytes = metrics
            .lines()
            .find(|l| l.starts_with("geocount_shard_log_bytes "))
            .expect("log size metric")
            .to_owned();
        states.push((
            body["value"].as_i64().unwrap(),
            body["version"].as_u64().unwrap(),
            log_bytes,
        ));
    }
    states
}

fn within_two_percent(value: &Value, truth: usize) -> bool {
    let value = value.as_f64().expect("a number");
    (value - truth as f64).abs() / (truth as f64) < 0.02
}

#[tokio::test]
async fn a_million_distinct_items_count_once_through_every_tier() {
    let started = Instant::now();
    let cluster = TestCluster::start(topology()).await;
    let global = cluster.global.api();

    let created = cluster
        .nth_shard(0)
        .api()
        .created(json!({"id": "visitors", "type": "unique", "numberOfShards": 2}))
        .await;
    assert_eq!(created["type"], "unique");
    // Every node learns the description before it takes an item, so none creates the counter
    // with the defaults instead.
    for node in 0..cluster.shard_count() {
        cluster
            .nth_shard(node)
            .api()
            .read_until(CONVERGE, "/counter/visitors/route", |s, b| {
                s == 200 && b["numberOfShards"] == 2
            })
            .await;
    }

    let described = Instant::now();
    write_items(&cluster, "visitors").await;
    let written = Instant::now();
    // Every slot took a share of the items: both slots of both datacenters.
    let before = shard_states(&cluster, "visitors").await;
    for (node, (value, version, _)) in before.iter().enumerate() {
        assert!(*value > 100_000 && *version > 0, "node {node}: {before:?}");
    }
    // Each datacenter aggregator answers the union of its slots, once it holds their last
    // versions; the global aggregator the union of everything, once it holds theirs.
    let mut parts = Vec::new();
    for (dc, aggregator) in cluster.aggregators.iter().flatten().enumerate() {
        let versions: Vec<u64> = (0..SHARDS_PER_DATACENTER)
            .map(|n| before[dc * SHARDS_PER_DATACENTER + n].1)
            .collect();
        let part = aggregator
            .api()
            .read_until(CONVERGE, "/counter/visitors", |s, b| {
                s == 200
                    && (0..SHARDS_PER_DATACENTER).all(|n| {
                        let slot = SlotId::new(DATACENTERS[dc], n as u32).to_string();
                        b["slots"][&slot]["version"] == versions[n]
                    })
            })
            .await;
        assert!(
            within_two_percent(&part["value"], DISTINCT_ITEMS / 2),
            "{part}"
        );
        assert_eq!(part["standard_error"], json!(STANDARD_ERROR), "{part}");
        parts.push(part["value"].clone());
    }
    let reading = global
        .read_until(CONVERGE, "/counter/visitors", |s, b| {
            s == 200
                && b["complete"] == true
                && DATACENTERS
                    .iter()
                    .zip(&parts)
                    .all(|(dc, part)| b["datacenters"][dc]["value"] == *part)
        })
        .await;
    println!(
        "cluster up and described in {:?}, 1,000,000 distinct items written in {:?}, all of \
         them at the global aggregator {:?} later: estimate {} (standard error {})",
        described - started,
        written - described,
        written.elapsed(),
        reading["value"],
        reading["standard_error"]
    );
    assert!(
        within_two_percent(&reading["value"], DISTINCT_ITEMS),
        "{reading}"
    );
    assert_eq!(
        reading["standard_error"],
        json!(STANDARD_ERROR),
        "{reading}"
    );

    // The same items again, each batch to the node that took it: nothing changes anywhere.
    let rewriting = Instant::now();
    let newest = write_items(&cluster, "visitors").await;
    println!("the same items again: {:?}", rewriting.elapsed());
    assert!(
        before.iter().any(|(_, version, _)| *version == newest),
        "every answer is a state from before: {newest} {before:?}"
    );
    assert_eq!(
        shard_states(&cluster, "visitors").await,
        before,
        "no version, value or log record moved"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let after = global.read("visitors").await.1;
    assert_eq!(after["value"], reading["value"], "{after}");
    for dc in DATACENTERS {
        let (now, then) = (&after["datacenters"][dc], &reading["datacenters"][dc]);
        assert_eq!(now["value"], then["value"], "{dc}: {after}");
    }

    // Windows are refused at every tier.
    let windowed = "/counter/visitors?window=60";
    for api in [
        cluster.nth_shard(3).api(),
        cluster.aggregator(1).api(),
        global.clone(),
    ] {
        let (status, body) = api.get_json(windowed).await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"].as_str().unwrap().contains("unique"), "{body}");
    }
    println!("whole test: {:?}", started.elapsed());
}

#[tokio::test]
async fn writes_that_do_not_fit_the_counter_are_refused_and_items_create_unique_counters() {
    let cluster = TestCluster::start(topology()).await;
    let usa = cluster.nth_shard(0).api();
    let asia = cluster.nth_shard(2).api();
    usa.created(json!({"id": "visitors", "type": "unique"}))
        .await;
    usa.created(json!({"id": "likes"})).await;
    // Every node knows both before they are written (a node that had not heard of `likes`
    // would take an item for it as the first write of a new unique counter).
    for node in 0..cluster.shard_count() {
        for id in ["visitors", "likes"] {
            cluster
                .nth_shard(node)
                .api()
                .read_until(CONVERGE, &format!("/counter/{id}"), |s, _| s == 200)
                .await;
        }
    }

    // A delta on a unique counter, or an item on a sum counter: 400, nothing applied.
    let unique_error =
        r#"counter "visitors" is a unique counter: its writes carry an "item", not a "delta""#;
    let sum_error =
        r#"counter "likes" is a sum counter: its writes carry a "delta", not an "item""#;
    let refused = [
        (
            "visitors",
            "INCREMENT",
            Some(json!({"delta": 3})),
            "a delta",
            Some(unique_error),
        ),
        (
            "visitors",
            "INCREMENT",
            None,
            "a write without item is a delta of 1",
            None,
        ),
        (
            "likes",
            "INCREMENT",
            Some(json!({"item": "user-1"})),
            "an item",
            Some(sum_error),
        ),
        (
            "visitors",
            "INCREMENT",
            Some(json!({"item": "a", "delta": 1})),
            "both",
            None,
        ),
        (
            "visitors",
            "INCREMENT",
            Some(json!({"item": ""})),
            "empty",
            None,
        ),
        (
            "visitors",
            "INCREMENT",
            Some(json!({"item": "x".repeat(1025)})),
            "too long",
            None,
        ),
        (
            "visitors",
            "INCREMENT",
            Some(json!({"item": 5})),
            "not a string",
            None,
        ),
        (
            "visitors",
            "DECREMENT",
            Some(json!({"item": "a"})),
            "a decrement",
            None,
        ),
    ];
    for (id, op, body, why, error) in refused {
        let (status, answer) = usa.write(id, op, body, None).await.unwrap();
        assert_eq!(status, 400, "{why}: {answer}");
        if let Some(error) = error {
            assert_eq!(answer["error"], error, "{why}");
        }
    }
    // The same refusals inside batches, entry by entry.
    let answer = usa
        .batch_items(&[
            ItemEntry {
                id: "likes",
                item: "user-1",
                idempotency_key: None,
                timestamp: None,
            },
            ItemEntry {
                id: "visitors",
                item: "user-1",
                idempotency_key: None,
                timestamp: None,
            },
        ])
        .await
        .unwrap();
    assert!(
        matches!(&answer.outcomes[0], EntryOutcome::Refused { status: 400, error } if error.contains("sum counter")),
        "{answer:?}"
    );
    assert!(
        matches!(answer.outcomes[1], EntryOutcome::Applied { value: 1, .. }),
        "{answer:?}"
    );
    let answer = usa.batch(&[entry("visitors", 1)]).await.unwrap();
    assert!(
        matches!(&answer.outcomes[0], EntryOutcome::Refused { status: 400, error } if error.contains("unique counter")),
        "{answer:?}"
    );
    let garbage = usa
        .send(Method::POST, "/batch/items", &[], "\u{ff}garbage")
        .await
        .unwrap();
    assert_eq!(garbage.status, 400);

    // An item for a counter no node has heard of creates it as a unique counter, on the node
    // owning the slot the item went to.
    let (status, body) = asia
        .write(
            "new:visitors",
            "INCREMENT",
            Some(json!({"item": "u1"})),
            None,
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["value"].as_i64(), body["standard_error"].is_f64()),
        (Some(1), true)
    );
    let first_version = body["version"].as_u64().unwrap();
    let slot = body["slot"].as_str().unwrap();
    let owner = match slot {
        "DC_ASIA_0_VAL_0" => cluster.nth_shard(2).api(),
        "DC_ASIA_0_VAL_1" => cluster.nth_shard(3).api(),
        other => panic!("an ASIA_0 slot took it, not {other}"),
    };
    let (status, body) = owner.create(json!({"id": "new:visitors"})).await;
    assert_eq!(status, 409, "it exists now: {body}");
    let (status, body) = asia.add("new:visitors", 1).await.unwrap();
    assert_eq!(status, 400, "{body}");
    // The same item again changes nothing, a key included; a new one does.
    let (_, again) = asia
        .write_keyed("new:visitors", json!({"item": "u1"}), "k1")
        .await;
    assert_eq!(
        (again["value"].as_i64(), again["version"].as_u64()),
        (Some(1), Some(first_version)),
        "{again}"
    );
    let (_, second) = asia
        .write_keyed("new:visitors", json!({"item": "u2"}), "k2")
        .await;
    assert_eq!(second["value"], 2, "{second}");
    assert!(second["version"].as_u64() > again["version"].as_u64());
    let (status, retry) = asia
        .write_keyed("new:visitors", json!({"item": "u2"}), "k2")
        .await;
    assert_eq!(
        (status, &retry["version"]),
        (200, &second["version"]),
        "{retry}"
    );
    let (status, reused) = asia
        .write_keyed("new:visitors", json!({"item": "u3"}), "k2")
        .await;
    assert_eq!(status, 422, "a key reused for another item: {reused}");

    // The description reaches every tier and the other datacenter as unique.
    let global = cluster.global.api();
    let reading = global
        .read_until(CONVERGE, "/counter/new:visitors", |s, b| {
            s == 200 && b["value"] == 2 && b["complete"] == true
        })
        .await;
    assert!(reading["standard_error"].is_f64(), "{reading}");
    cluster
        .nth_shard(1)
        .api()
        .read_until(CONVERGE, "/counter/new:visitors", |s, b| {
            s == 200 && b["standard_error"].is_f64() && b["value"] == 0
        })
        .await;
    let (status, body) = cluster
        .nth_shard(1)
        .api()
        .add("new:visitors", 1)
        .await
        .unwrap();
    assert_eq!(status, 400, "USA knows it is unique too: {body}");
    // A sum counter reads as before: no standard_error.
    let (_, likes) = usa.read("likes").await;
    assert!(likes.get("standard_error").is_none(), "{likes}");
}
