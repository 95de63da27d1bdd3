//! End-to-end tests of the shard node: the real `shard-node` binary on loopback ports, with
//! temporary data directories.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use geocount_model::wire::{BatchEntry, EntryOutcome};
use geocount_net::Answer;
use geocount_test_support::api::entry;
use geocount_test_support::process::{binary, config_error};
use geocount_test_support::{Api, Method, TestTopology};
use serde_json::json;

/// These tests run a shard node without its datacenter aggregator: a fresh node need not wait
/// long for a restore source that is not there.
const ALONE: &str = "restore_timeout_ms = 100";

/// `POST /counters/{id}/increment`, the alias taking a signed `delta`.
async fn alias_increment(api: &Api, id: &str, delta: i64) -> Answer {
    let path = format!("/counters/{id}/increment");
    let body = format!(r#"{{"delta": {delta}}}"#);
    api.send(Method::POST, &path, &[], body).await.unwrap()
}

#[tokio::test]
async fn create_write_and_read_round_trip() {
    let topology = TestTopology::single(ALONE);
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();

    let created = api
        .created(json!({"id": "tweet:1:likes", "numberOfShards": 4}))
        .await;
    assert_eq!(created["id"], "tweet:1:likes");
    assert_eq!(created["numberOfShards"], 4);
    assert_eq!(created["type"], "sum");
    assert_eq!(created["windowSeconds"], 300);

    let (status, body) = api.read("tweet:1:likes").await;
    assert_eq!(
        (status, body["value"].as_i64(), body["version"].as_u64()),
        (200, Some(0), Some(0))
    );
    assert_eq!(body["slot"], "DC_USA_0_VAL_0");

    let (status, body) = api
        .write(
            "tweet:1:likes",
            "INCREMENT",
            Some(json!({"delta": 5})),
            None,
        )
        .await
        .unwrap();
    assert_eq!((status, body["value"].as_i64()), (200, Some(5)));
    let first_version = body["version"].as_u64().unwrap();
    let (_, body) = api
        .write("tweet:1:likes", "INCREMENT", None, None)
        .await
        .unwrap();
    assert_eq!(body["value"], 6, "delta defaults to 1");
    assert!(
        body["version"].as_u64().unwrap() > first_version,
        "every change raises the version"
    );
    let (_, body) = api
        .write(
            "tweet:1:likes",
            "DECREMENT",
            Some(json!({"delta": 2, "timestamp": 1_700_000_000})),
            None,
        )
        .await
        .unwrap();
    assert_eq!(body["value"], 4);

    // The alias takes signed deltas.
    let answer = alias_increment(&api, "tweet:1:likes", -10).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["value"], -6);
    assert_eq!(api.value("tweet:1:likes").await, -6);

    // A second create of the same id conflicts; an id-less create generates one.
    let (status, _) = api.create(json!({"id": "tweet:1:likes"})).await;
    assert_eq!(status, 409);
    let generated = api.created(json!({})).await;
    let generated_id = generated["id"].as_str().unwrap().to_owned();
    assert_eq!(api.read(&generated_id).await.0, 200);

    // A write to a counter never created creates it with the defaults.
    let (status, body) = api
        .write("views:home", "INCREMENT", None, None)
        .await
        .unwrap();
    assert_eq!((status, body["value"].as_i64()), (200, Some(1)));
    assert_eq!(api.read("never-written").await.0, 404);

    // Ids with reserved characters travel percent-encoded.
    for id in ["a/b?c#d", "#日本", "with space"] {
        let (status, _) = api.add(id, 3).await.unwrap();
        assert_eq!(status, 200, "{id}");
        assert_eq!(api.value(id).await, 3, "{id}");
    }
}

#[tokio::test]
async fn idempotent_retries_apply_once_even_across_a_crash() {
    let topology = TestTopology::single(ALONE);
    let mut node = topology.start_shard("USA_0", 0).await;
    let api = node.api();

    let first = api.write_keyed("likes", json!({"delta": 7}), "req-1").await;
    assert_eq!(first.0, 200);
    let retry = api.write_keyed("likes", json!({"delta": 7}), "req-1").await;
    assert_eq!(retry, first, "a retry answers as the first write did");
    api.write("likes", "INCREMENT", None, None).await.unwrap();
    // The retry after another write still answers with the first write's state.
    let late_retry = api.write_keyed("likes", json!({"delta": 7}), "req-1").await;
    assert_eq!(late_retry, first);
    assert_eq!(api.value("likes").await, 8);

    let (status, body) = api.write_keyed("likes", json!({"delta": 9}), "req-1").await;
    assert_eq!(status, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("req-1"));
    let (status, _) = api.write_keyed("other", json!({"delta": 7}), "req-1").await;
    assert_eq!(status, 422, "a key is bound to its counter");
    assert_eq!(
        api.read("other").await.0,
        404,
        "the refused write created nothing"
    );

    // Keys are durable: after kill -9 a retry is still recognised.
    node.kill9();
    node.restart().await;
    let after_crash = api.write_keyed("likes", json!({"delta": 7}), "req-1").await;
    assert_eq!(after_crash, first);
    assert_eq!(api.value("likes").await, 8);

    // Concurrent retries of one key race into one application.
    let racers: Vec<_> = (0..16)
        .map(|_| {
            let api = api.clone();
            tokio::spawn(async move {
                api.write_keyed("race", json!({"delta": 5}), "race-key")
                    .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for racer in racers {
        answers.push(racer.await.unwrap());
    }
    assert!(
        answers.iter().all(|a| *a == answers[0] && a.0 == 200),
        "{answers:?}"
    );
    assert_eq!(api.value("race").await, 5);
}

#[tokio::test]
async fn idempotency_keys_expire_after_the_retention() {
    let topology = TestTopology::single("idempotency_retention_secs = 1\nrestore_timeout_ms = 100");
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    api.write("c", "INCREMENT", None, Some("k")).await.unwrap();
    api.write("c", "INCREMENT", None, Some("k")).await.unwrap();
    assert_eq!(api.value("c").await, 1);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    api.write("c", "INCREMENT", None, Some("k")).await.unwrap();
    assert_eq!(api.value("c").await, 2, "an expired key is a new write");
}

/// Sends a request and checks the answer is the given 4xx with a JSON error.
async fn expect_refusal(
    api: &Api,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    status: u16,
) {
    let answer = api
        .send(method.clone(), path, headers, body.to_owned())
        .await
        .unwrap();
    assert_eq!(
        answer.status.as_u16(),
        status,
        "{method} {path} {body:?}: {:?}",
        answer.body
    );
    assert_eq!(answer.content_type(), Some("application/json"));
    let error = answer.json();
    assert!(
        error["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{method} {path}: {error}"
    );
}

#[tokio::test]
async fn bad_input_is_refused_with_a_json_error_and_changes_nothing() {
    let topology = TestTopology::single(
        "max_body_bytes = 2048\nmax_batch_entries = 10\nrestore_timeout_ms = 100",
    );
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    api.add("c", 10).await.unwrap();
    let (_, before) = api.read("c").await;

    let long_write = format!("/counter/{}/write?op=INCREMENT", "x".repeat(257));
    let too_big = format!(r#"{{"delta": 1, "pad": "{}"}}"#, "p".repeat(4096));
    const WRITE: &str = "/counter/c/write?op=INCREMENT";
    const INCREMENT: &str = "/counters/c/increment";
    // (method, path, body, status)
    let refusals: &[(Method, &str, &str, u16)] = &[
        (Method::PATCH, &long_write, "", 400),
        (Method::PATCH, "/counter/a%0Ab/write?op=INCREMENT", "", 400),
        (Method::PATCH, "/counter/%FF%FE/write?op=INCREMENT", "", 400),
        (Method::GET, "/counter/a%00b", "", 400),
        (Method::PATCH, "/counter/c/write", "", 400),
        (Method::PATCH, "/counter/c/write?op=MULTIPLY", "", 400),
        (Method::PATCH, WRITE, r#"{"delta": 0}"#, 400),
        (Method::PATCH, WRITE, r#"{"delta": -3}"#, 400),
        (Method::PATCH, WRITE, r#"{"delta": 1.5}"#, 400),
        (Method::PATCH, WRITE, r#"{"delta": "5"}"#, 400),
        (
            Method::PATCH,
            WRITE,
            r#"{"delta": 99999999999999999999}"#,
            400,
        ),
        (Method::PATCH, WRITE, r#"{"delta": 1"#, 400),
        (Method::PATCH, WRITE, r#"{"detla": 1}"#, 400),
        (Method::PATCH, WRITE, r#"{"timestamp": -1}"#, 400),
        (Method::PATCH, WRITE, &too_big, 413),
        (Method::POST, INCREMENT, r#"{"delta": 0}"#, 400),
        (Method::POST, INCREMENT, "[]", 400),
        (Method::POST, "/counter", r#"{"id": ""}"#, 400),
        (
            Method::POST,
            "/counter",
            r#"{"id": "n", "numberOfShards": 0}"#,
            400,
        ),
        (
            Method::POST,
            "/counter",
            r#"{"id": "n", "windowSeconds": 0}"#,
            400,
        ),
        (
            Method::POST,
            "/counter",
            r#"{"id": "n", "type": "product"}"#,
            400,
        ),
        (Method::POST, "/counter", "not json", 400),
        (Method::POST, "/batch", "\u{ff}garbage", 400),
        (Method::PUT, "/counter/c", "", 405),
        (Method::GET, "/no/such/endpoint", "", 404),
    ];
    for (method, path, body, status) in refusals {
        expect_refusal(&api, method.clone(), path, &[], body, *status).await;
    }
    expect_refusal(
        &api,
        Method::PATCH,
        WRITE,
        &[("Idempotency-Key", "")],
        "",
        400,
    )
    .await;
    // Overflow: refused with 422 and nothing applied.
    let (status, _) = api.add("big", i64::MAX).await.unwrap();
    assert_eq!(status, 200);
    let (status, body) = api.add("big", 1).await.unwrap();
    assert_eq!(status, 422, "{body}");
    assert_eq!(api.value("big").await, i64::MAX);
    assert_eq!(alias_increment(&api, "neg", i64::MIN).await.status, 200);
    assert_eq!(alias_increment(&api, "neg", -1).await.status, 422);
    assert_eq!(api.value("neg").await, i64::MIN);

    // Too many batch entries: 413 for the whole batch.
    let entries: Vec<BatchEntry> = (0..11).map(|_| entry("c", 1)).collect();
    let (status, error) = api.batch(&entries).await.unwrap_err();
    assert_eq!(status, 413, "{error}");
    // Trailing bytes after a valid batch are malformed.
    let mut body = postcard::to_allocvec(&geocount_model::wire::BatchRequest {
        entries: entries[..1].to_vec(),
    })
    .unwrap();
    body.push(0);
    expect_refusal(
        &api,
        Method::POST,
        "/batch",
        &[],
        &String::from_utf8_lossy(&body),
        400,
    )
    .await;

    // Nothing of any refused request was applied, and the node still serves.
    let (_, after) = api.read("c").await;
    assert_eq!(after, before);
    for id in ["n", "x"] {
        assert_eq!(api.read(id).await.0, 404);
    }
    assert_eq!(api.get("/healthz").await.unwrap().status, 200);
}

#[tokio::test]
async fn batches_are_answered_per_entry() {
    let topology = TestTopology::single(ALONE);
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    let long = "y".repeat(300);
    api.add("near-max", i64::MAX - 1).await.unwrap();
    let entries = [
        entry("a", 5),
        entry(&long, 1),
        BatchEntry {
            id: "a",
            delta: -2,
            idempotency_key: Some("batch-key"),
            timestamp: Some(1_700_000_000),
        },
        entry("b", 0),
        entry("near-max", 2),
        BatchEntry {
            id: "a",
            delta: -2,
            idempotency_key: Some("batch-key"),
            timestamp: None,
        },
        entry("b", 4),
    ];
    let answer = api.batch(&entries).await.unwrap();
    assert_eq!(answer.slot, "DC_USA_0_VAL_0");
    let statuses: Vec<Option<u16>> = answer
        .outcomes
        .iter()
        .map(|o| match o {
            EntryOutcome::Applied { .. } => None,
            EntryOutcome::Refused { status, .. } => Some(*status),
        })
        .collect();
    assert_eq!(
        statuses,
        vec![None, Some(400), None, Some(400), Some(422), None, None]
    );
    assert!(matches!(
        answer.outcomes[0],
        EntryOutcome::Applied { value: 5, .. }
    ));
    assert_eq!(
        answer.outcomes[2], answer.outcomes[5],
        "a repeated key in one batch applies once"
    );
    assert!(matches!(
        answer.outcomes[2],
        EntryOutcome::Applied { value: 3, .. }
    ));
    assert_eq!(api.value("a").await, 3);
    assert_eq!(api.value("b").await, 4);
    assert_eq!(api.value("near-max").await, i64::MAX - 1);

    // Retrying the whole batch's keyed entry in a later batch is still deduplicated.
    let again = api.batch(&entries[2..3]).await.unwrap();
    assert_eq!(again.outcomes[0], answer.outcomes[2]);
    assert_eq!(api.value("a").await, 3);
}

#[tokio::test]
async fn a_batch_preferring_a_minimal_return_is_answered_with_a_summary() {
    let topology = TestTopology::single(ALONE);
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    let entry = |id, delta| BatchEntry {
        id,
        delta,
        idempotency_key: None,
        timestamp: None,
    };
    let entries = [
        entry("m", 3),
        entry("bad\u{7}id", 1),
        entry("m", 4),
        entry("n", 0),
        entry("n", 2),
    ];
    let (summary, applied) = api.batch_minimal(&entries).await.unwrap();
    assert_eq!(applied.as_deref(), Some("return=minimal"));
    assert_eq!(summary.slot, "DC_USA_0_VAL_0");
    assert_eq!(summary.applied, 3);
    let refused: Vec<(u32, u16)> = summary
        .refused
        .iter()
        .map(|r| (r.index, r.status))
        .collect();
    assert_eq!(refused, vec![(1, 400), (3, 400)]);
    assert!(summary.refused.iter().all(|r| !r.error.is_empty()));
    assert_eq!(api.value("m").await, 7);
    assert_eq!(api.value("n").await, 2);
    // Without the preference the same node answers every outcome.
    let full = api.batch(&entries[..1]).await.unwrap();
    assert!(matches!(
        full.outcomes[..],
        [EntryOutcome::Applied { value: 10, .. }]
    ));
}

/// Runs writers against `api` until `stop`; each writer owns counters and writes them one at a
/// time, so at any moment each counter has at most one write in flight. Returns, per counter,
/// (acknowledged sum, delta in flight when stopped).
async fn write_until_stopped(
    api: Api,
    stop: Arc<AtomicBool>,
    writer: usize,
) -> HashMap<String, (i64, i64)> {
    let mut sums: HashMap<String, (i64, i64)> = HashMap::new();
    let mut n = 0i64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let id = format!("w{writer}-c{}", n % 5);
        let delta = 1 + n % 7;
        let entry = sums.entry(id.clone()).or_default();
        entry.1 = delta;
        let acknowledged = if n % 2 == 0 {
            matches!(api.add(&id, delta).await, Ok((200, _)))
        } else {
            let e = [BatchEntry {
                id: &id,
                delta,
                idempotency_key: None,
                timestamp: None,
            }];
            matches!(api.batch(&e).await, Ok(a) if matches!(a.outcomes[0], EntryOutcome::Applied { .. }))
        };
        let entry = sums.get_mut(&id).unwrap();
        if !acknowledged {
            // The node died under this write: it may or may not have been applied.
            break;
        }
        entry.0 += delta;
        entry.1 = 0;
    }
    sums
}

/// kill -9 under concurrent writes, restart, and check every acknowledged write is there and
/// nothing is doubled.
async fn crash_under_load(shard_toml: &str) {
    let topology = TestTopology::single(&format!("{shard_toml}\n{ALONE}"));
    let mut node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..8)
        .map(|w| tokio::spawn(write_until_stopped(api.clone(), stop.clone(), w)))
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    node.kill9();
    stop.store(true, Ordering::Relaxed);
    let mut expected = HashMap::new();
    for writer in writers {
        expected.extend(writer.await.unwrap());
    }
    let acknowledged: i64 = expected.values().map(|(sum, _)| sum).sum();
    assert!(
        acknowledged > 100,
        "the load was too light to test anything: {acknowledged}"
    );

    node.restart().await;
    for (id, (sum, in_flight)) in &expected {
        let value = match api.read(id).await {
            (200, body) => body["value"].as_i64().unwrap(),
            (404, _) => 0,
            other => panic!("{id}: {other:?}"),
        };
        assert!(
            value == *sum || value == sum + in_flight,
            "{id}: value {value} but acknowledged {sum} (+{in_flight} in flight)"
        );
    }
    // The node keeps working, and versions keep rising.
    let (_, before) = api.read("w0-c1").await;
    let (status, after) = api.add("w0-c1", 1).await.unwrap();
    assert_eq!(status, 200);
    assert!(after["version"].as_u64() > before["version"].as_u64());
}

#[tokio::test]
async fn kill9_under_load_loses_no_acknowledged_write() {
    crash_under_load("").await;
}

#[tokio::test]
async fn kill9_during_frequent_checkpoints_loses_no_acknowledged_write() {
    // Tiny segments and a short interval: checkpoints and segment deletions run all the time.
    crash_under_load("checkpoint_log_bytes = 2048\ncheckpoint_interval_ms = 20").await;
}

#[tokio::test]
async fn async_durability_survives_a_process_crash() {
    // In async mode a write reaches the OS before it is acknowledged: a process crash loses
    // nothing (a machine crash may lose the last flush interval).
    crash_under_load("durability = \"async\"\nasync_flush_interval_ms = 50").await;
}

#[tokio::test]
async fn graceful_shutdown_exits_zero_and_keeps_state() {
    let topology = TestTopology::single(ALONE);
    let mut node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    api.created(json!({"id": "kept", "numberOfShards": 2, "windowSeconds": 60}))
        .await;
    api.add("kept", 41).await.unwrap();
    api.add("kept", 1).await.unwrap();
    let status = node.terminate();
    assert!(status.success(), "{status}\n{}", node.log_tail());
    // The final checkpoint folded the log into the store.
    let segments = std::fs::read_dir(topology.shard_data_dir("USA_0", 0))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("wal-")
        })
        .count();
    assert!(
        segments <= 1,
        "{segments} log segments left after a clean stop"
    );
    node.restart().await;
    assert_eq!(api.value("kept").await, 42);
    let (status, _) = api.create(json!({"id": "kept"})).await;
    assert_eq!(status, 409, "the description survived the restart");
}

#[tokio::test]
async fn metrics_and_health_are_served() {
    let topology = TestTopology::single(ALONE);
    let node = topology.start_shard("USA_0", 0).await;
    let api = node.api();
    api.add("m", 1).await.unwrap();
    let entries = [entry("m", 2)];
    api.batch(&entries).await.unwrap();
    let health = api.get("/healthz").await.unwrap();
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["counters"], 1);
    let metrics = String::from_utf8(api.get("/metrics").await.unwrap().body.to_vec()).unwrap();
    for line in [
        "geocount_shard_writes_applied_total 2",
        "geocount_shard_counters 1",
        "geocount_shard_batch_entries_count 1",
        "geocount_shard_commit_seconds_count",
        "geocount_shard_group_commit_writes_count",
        "geocount_shard_writes_forwarded_total 0",
        "geocount_shard_replica_merges_total",
        "geocount_shard_shard_count_changes_total",
        "geocount_shard_source_staleness_seconds{source=",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
}

#[tokio::test]
async fn topology_errors_exit_with_one_line_naming_file_and_key() {
    let topology = TestTopology::new(&[("USA_0", 2)], ALONE);
    let binary = binary("shard-node");
    // Runs `shard-node --config CONFIG --dc DC --slot SLOT` with extra environment variables:
    // the one line it refuses them with.
    let run = |config: &str, dc: &str, slot: &str, env: &[(&str, &str)]| {
        config_error(
            Command::new(&binary)
                .args(["--config", config, "--dc", dc, "--slot", slot])
                .envs(env.iter().copied()),
        )
    };
    let config = topology.path.to_str().unwrap();
    let stderr = run(config, "MARS_0", "0", &[]);
    assert!(
        stderr.contains(config) && stderr.contains("datacenters") && stderr.contains("MARS_0"),
        "{stderr}"
    );

    let stderr = run(config, "USA_0", "2", &[]);
    assert!(
        stderr.contains("datacenters[0].shards") && stderr.contains("out of range"),
        "{stderr}"
    );

    let environment = [("GEOCOUNT_SHARD__DURABILITY", "sometimes")];
    let stderr = run(config, "USA_0", "0", &environment);
    assert!(
        stderr.contains("shard.durability") && stderr.contains("GEOCOUNT_SHARD__DURABILITY"),
        "{stderr}"
    );

    let text = std::fs::read_to_string(&topology.path).unwrap();
    let dc = &topology.topology.datacenters[0];
    let duplicate = text.replace(&dc.shards[1].to_string(), &dc.shards[0].to_string());
    let path = topology.dir().join("duplicate.toml");
    std::fs::write(&path, duplicate).unwrap();
    let stderr = run(path.to_str().unwrap(), "USA_0", "0", &[]);
    assert!(
        stderr.contains("duplicate.toml: datacenters[0].shards[1]: duplicate address"),
        "{stderr}"
    );

    let path = topology.dir().join("broken.toml");
    std::fs::write(&path, "[global\nlisten = 1").unwrap();
    let stderr = run(path.to_str().unwrap(), "USA_0", "0", &[]);
    assert!(stderr.contains("broken.toml"), "{stderr}");
}
