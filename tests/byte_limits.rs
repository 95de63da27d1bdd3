//! End-to-end tests of the byte limits: one counter's state (`shard.max_counter_bytes`), a
//! shard node's whole state (`shard.max_state_bytes`), and what each aggregator holds
//! (`aggregator.*_max_state_bytes`). Each starts the real binaries on loopback.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use geocount_model::wire::{BatchEntry, EntryOutcome, ItemEntry};
use geocount_test_support::api::entry;
use geocount_test_support::{Api, TestTopology};
use serde_json::{Value, json};

/// A node running without its datacenter aggregator need not wait long for a restore source.
const ALONE: &str = "restore_timeout_ms = 200";

/// How long a value may take to pass through the tiers.
const CONVERGE: Duration = Duration::from_secs(10);

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn hit(id: &str, timestamp: u64) -> BatchEntry<'_> {
    BatchEntry {
        timestamp: Some(timestamp),
        ..entry(id, 1)
    }
}

/// How many outcomes were applied, and the errors of the refused (each must be a 507).
fn outcomes(answer: &[EntryOutcome]) -> (usize, Vec<String>) {
    let mut applied = 0;
    let mut refused = Vec::new();
    for outcome in answer {
        match outcome {
            EntryOutcome::Applied { .. } => applied += 1,
            EntryOutcome::Refused { status, error } => {
                assert_eq!(*status, 507, "{error}");
                refused.push(error.clone());
            }
        }
    }
    (applied, refused)
}

/// The value of metric line `name` (its whole name, labels included) in `api`'s `/metrics`.
async fn metric(api: &Api, name: &str) -> Option<f64> {
    let text = api.metrics().await?;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn a_write_past_a_counters_byte_bound_is_refused_and_changes_nothing() {
    let topology = TestTopology::single(&format!("max_counter_bytes = 1024\n{ALONE}"));
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    let now = now_secs();

    // One bucket per second: the window grows until the counter would pass its bound.
    let seconds: Vec<u64> = (0..100).map(|ago| now - ago).collect();
    let entries: Vec<BatchEntry> = seconds.iter().map(|&s| hit("w", s)).collect();
    let answer = api.batch(&entries).await.unwrap();
    let (applied, refused) = outcomes(&answer.outcomes);
    assert!((40..64).contains(&applied), "{applied} buckets of 16 bytes");
    assert_eq!(applied + refused.len(), 100);
    assert!(
        refused
            .iter()
            .all(|e| e.contains("shard.max_counter_bytes (1024)") && e.contains("\"w\"")),
        "{refused:?}"
    );
    assert_eq!(api.value("w").await, applied as i64);

    // On its own, a write in one more second gets a 507 naming the limit, and changes nothing.
    let older = seconds[applied + 1];
    let body = json!({"delta": 5, "timestamp": older});
    let (status, error) = api.write("w", "INCREMENT", Some(body), None).await.unwrap();
    assert_eq!(status, 507, "{error}");
    let error = error["error"].as_str().unwrap();
    assert!(
        error.contains("shard.max_counter_bytes (1024) reached"),
        "{error}"
    );
    assert_eq!(api.value("w").await, applied as i64, "nothing applied");

    // Hits in seconds it holds grow nothing and are taken; other counters too.
    let body = json!({"delta": 5, "timestamp": now});
    let (status, body) = api.write("w", "INCREMENT", Some(body), None).await.unwrap();
    assert_eq!(
        (status, body["value"].as_i64()),
        (200, Some(applied as i64 + 5))
    );
    assert_eq!(api.add("other", 2).await.unwrap().0, 200);

    // A unique counter's sketch grows a register per new item, up to the same bound.
    let items: Vec<String> = (0..400).map(|n| format!("user-{n}")).collect();
    let entries: Vec<ItemEntry> = items
        .iter()
        .map(|item| ItemEntry {
            id: "u",
            item,
            idempotency_key: None,
            timestamp: None,
        })
        .collect();
    let answer = api.batch_items(&entries).await.unwrap();
    let (_, refused) = outcomes(&answer.outcomes);
    assert!(!refused.is_empty(), "400 registers of 4 bytes do not fit");
    assert!(
        refused
            .iter()
            .all(|e| e.contains("shard.max_counter_bytes (1024)") && e.contains("\"u\"")),
        "{refused:?}"
    );
    let (status, body) = api.read("u").await;
    let estimate = body["value"].as_i64().unwrap();
    assert!(status == 200 && estimate < 300, "{body}");
    assert_eq!(api.get("/healthz").await.unwrap().status, 200);
}

#[tokio::test]
async fn a_node_at_its_state_byte_bound_refuses_new_state_and_keeps_serving() {
    let topology = TestTopology::single(&format!(
        "max_state_bytes = 4096\nmax_counter_bytes = 1024\n{ALONE}"
    ));
    let mut node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    let now = now_secs();

    let ids: Vec<String> = (0..60).map(|n| format!("n{n:02}")).collect();
    let entries: Vec<BatchEntry> = ids.iter().map(|id| hit(id, now)).collect();
    let answer = api.batch(&entries).await.unwrap();
    let (applied, refused) = outcomes(&answer.outcomes);
    assert!(
        (20..40).contains(&applied),
        "{applied} counters of about 115 bytes"
    );
    assert!(
        refused
            .iter()
            .all(|e| e.contains("shard.max_state_bytes (4096) reached")),
        "{refused:?}"
    );

    // New state is refused with a JSON error naming the limit: a new counter, a description,
    // one more bucket of a held counter.
    let (status, body) = api.add("fresh", 1).await.unwrap();
    assert_eq!(status, 507, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("shard.max_state_bytes (4096)"), "{error}");
    let (status, body) = api.create(json!({"id": "described"})).await;
    assert_eq!(status, 507, "{body}");
    let older: Vec<BatchEntry> = (1..=10).map(|ago| hit("n00", now - ago)).collect();
    let (buckets, refused) = outcomes(&api.batch(&older).await.unwrap().outcomes);
    assert!(
        buckets < 10 && !refused.is_empty(),
        "the last few bytes fill up"
    );
    assert_eq!(api.read("fresh").await.0, 404, "nothing of it applied");
    assert_eq!(api.value("n00").await, 1 + buckets as i64);

    // Writes that add no state keep working, and reads.
    let body = json!({"delta": 2, "timestamp": now});
    let (status, body) = api
        .write("n00", "INCREMENT", Some(body), None)
        .await
        .unwrap();
    let value = 3 + buckets as i64;
    assert_eq!(
        (status, body["value"].as_i64()),
        (200, Some(value)),
        "{body}"
    );
    let held = metric(&api, "geocount_shard_state_bytes").await.unwrap();
    assert!(held <= 4096.0 && held > 4096.0 - 200.0, "{held}");

    // After a crash the accounting is derived from the recovered state: the same.
    node.kill9();
    node.restart().await;
    assert_eq!(metric(&api, "geocount_shard_state_bytes").await, Some(held));
    assert_eq!(api.add("fresh", 1).await.unwrap().0, 507);
    let body = json!({"delta": 1, "timestamp": now});
    let (status, _) = api
        .write("n00", "INCREMENT", Some(body), None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(api.value("n00").await, value + 1);
    assert_eq!(api.get("/healthz").await.unwrap().status, 200);
}

/// Writes one counter per id in `ids` to `shard`, each one hit now.
async fn write_counters(shard: &Api, ids: &[String]) {
    let now = now_secs();
    let entries: Vec<BatchEntry> = ids.iter().map(|id| hit(id, now)).collect();
    let answer = shard.batch(&entries).await.unwrap();
    assert_eq!(outcomes(&answer.outcomes), (ids.len(), vec![]));
}

/// Waits until `api`'s `/healthz` says it refused entries past the bound `key` (`limit`).
async fn over_bound(api: &Api, key: &str, limit: u64) -> Value {
    let expected = format!("{key} ({limit}) reached");
    api.read_until(CONVERGE, "/healthz", |status, health| {
        status == 200
            && health["over_bound"]
                .as_str()
                .is_some_and(|s| s.contains(&expected))
    })
    .await
}

/// Writes counter `first` to `shard` and waits until `global` holds its sum complete (under
/// the bound, sums are complete at both tiers), then writes 40 more: `api`'s `/healthz` once
/// it says its bound `key` (2048) was reached.
async fn write_past_bound(shard: &Api, global: &Api, api: &Api, key: &str) -> Value {
    write_counters(shard, &["first".to_owned()]).await;
    global
        .read_until(CONVERGE, "/counter/first", |status, body| {
            status == 200 && body["complete"] == true
        })
        .await;
    let ids: Vec<String> = (0..40).map(|n| format!("c{n:02}")).collect();
    write_counters(shard, &ids).await;
    over_bound(api, key, 2048).await
}

#[tokio::test]
async fn a_datacenter_aggregator_past_its_byte_bound_reports_incomplete_sums() {
    let topology =
        TestTopology::single_with(ALONE, "[aggregator]\ndatacenter_max_state_bytes = 2048");
    let shard = topology.start_shard("USA_0", 0).await;
    let aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let global = topology.start_global_aggregator().await;
    let (shard, aggregator, global) = (shard.api(), aggregator.api(), global.api());

    // Past the bound the aggregator refuses, counts and reports, and no tier calls its sums
    // whole.
    let key = "aggregator.datacenter_max_state_bytes";
    let health = write_past_bound(&shard, &global, &aggregator, key).await;
    assert_eq!(health["status"], "over its byte bound", "{health}");
    assert_eq!(health["slots"]["DC_USA_0_VAL_0"]["incomplete"], true);
    assert_eq!(
        health["slots"]["DC_USA_0_VAL_0"]["staleness_ms"],
        Value::Null
    );
    assert!(health["state_bytes"].as_u64().unwrap() <= 2048, "{health}");
    let refused = "geocount_datacenter_entries_refused_total{reason=\"bytes\"}";
    assert!(metric(&aggregator, refused).await.unwrap() > 0.0);
    let (status, reading) = aggregator.read("first").await;
    assert_eq!(
        (status, &reading["complete"]),
        (200, &json!(false)),
        "{reading}"
    );

    global
        .read_until(CONVERGE, "/healthz", |_, health| {
            health["datacenters"]["USA_0"]["incomplete"] == true
        })
        .await;
    let (status, body) = global.global_read("first", "").await;
    assert_eq!(status, 503, "a stale answer, not a complete one: {body}");
    let (status, body) = global.global_read("first", "allow_partial=true").await;
    assert_eq!((status, &body["complete"]), (200, &json!(false)), "{body}");
}

#[tokio::test]
async fn the_global_aggregator_past_its_byte_bound_reports_incomplete_sums() {
    let topology = TestTopology::single_with(ALONE, "[aggregator]\nglobal_max_state_bytes = 2048");
    let shard = topology.start_shard("USA_0", 0).await;
    let _aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let global = topology.start_global_aggregator().await;
    let (shard, global) = (shard.api(), global.api());

    let key = "aggregator.global_max_state_bytes";
    let health = write_past_bound(&shard, &global, &global, key).await;
    assert_eq!(health["status"], "incomplete", "{health}");
    assert_eq!(health["datacenters"]["USA_0"]["incomplete"], true);
    let refused = "geocount_global_entries_refused_total{reason=\"bytes\"}";
    assert!(metric(&global, refused).await.unwrap() > 0.0);
    let (status, body) = global.global_read("first", "").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("byte bound"),
        "{body}"
    );
}
