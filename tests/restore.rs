//! A shard node that lost its disk restores its slot before it takes a write, whatever else
//! failed: its datacenter aggregator and its peer restarted just before (their copies are
//! empty), it was killed in the middle of its restore, or its slot is too large for one answer.

use std::collections::HashMap;
use std::time::Duration;

use geocount_model::wire::{BatchEntry, BatchRequest};
use geocount_test_support::api::entry;
use geocount_test_support::{Api, Method, NodeProcess, TestTopology, eventually};

/// How many counters the victim's slot gets, each with the value 57.
const COUNTERS: usize = 40;

/// A datacenter of two shard nodes, its aggregator and the global aggregator.
struct Datacenter {
    topology: TestTopology,
    global: NodeProcess,
    aggregator: NodeProcess,
    shards: Vec<NodeProcess>,
}

impl Datacenter {
    async fn start(shard_toml: &str) -> Self {
        let topology = TestTopology::new(&[("USA_0", 2)], shard_toml);
        let (global, aggregator, shards) = topology.start_datacenter_with_tiers("USA_0").await;
        Self {
            topology,
            global,
            aggregator,
            shards,
        }
    }

    /// Writes 57 to each of `ids` through shard 0, and returns what shard 0's own slot holds
    /// once the global aggregator holds every total.
    async fn write_57(&self, ids: &[String]) -> HashMap<String, i64> {
        let entries: Vec<BatchEntry> = ids.iter().map(|id| entry(id, 57)).collect();
        self.shards[0].api().batch(&entries).await.expect("batch");
        let global = self.global.api();
        for id in ids {
            global
                .read_until(
                    Duration::from_secs(10),
                    &format!("/counter/{id}"),
                    |s, b| s == 200 && b["value"] == 57 && b["complete"] == true,
                )
                .await;
        }
        let mut held = HashMap::new();
        for id in ids {
            let (status, body) = self.shards[0].api().read(id).await;
            if status == 200 && body["value"].as_i64() != Some(0) {
                held.insert(id.clone(), body["value"].as_i64().unwrap());
            }
        }
        assert!(
            held.len() > 5,
            "shard 0 holds too few counters: {}",
            held.len()
        );
        held
    }

    /// Kills shard 0, restarts the aggregator and the peer (their memory goes), and empties
    /// shard 0's data directory: a lost disk, right after the restarts.
    async fn lose_shard_0_after_restarting_its_datacenter(&mut self) {
        self.shards[0].kill9();
        self.aggregator.kill9();
        self.shards[1].kill9();
        self.aggregator.restart().await;
        self.shards[1].restart().await;
        std::fs::remove_dir_all(self.topology.shard_data_dir("USA_0", 0)).unwrap();
    }

    /// Every tier reads `value` for `id`.
    async fn every_tier_reads(&self, id: &str, value: i64) {
        let path = format!("/counter/{id}");
        for (tier, api) in [
            ("global", self.global.api()),
            ("aggregator", self.aggregator.api()),
        ] {
            let body = api
                .read_until(Duration::from_secs(10), &path, |s, b| {
                    s == 200 && b["value"] == value
                })
                .await;
            assert_eq!(body["value"], value, "{tier} reads {id}");
        }
    }
}

/// Reads `/healthz` of a node that may not listen yet until `done` accepts it; panics after
/// `within` with the last answer.
async fn health_until(
    api: &Api,
    within: Duration,
    done: impl Fn(u16, &serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        let last = match api.get("/healthz").await {
            Ok(answer) => {
                let body = answer.json();
                if done(answer.status.as_u16(), &body) {
                    return body;
                }
                format!("{} {body}", answer.status)
            }
            Err(error) => error.to_string(),
        };
        assert!(
            std::time::Instant::now() < deadline,
            "the node's health after {within:?}: {last}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many counters `api`'s complete copy of `slot` holds, paged as a restore reads it
/// (`None` while it is not complete).
async fn copy_len(api: &Api, slot_name: &str) -> Option<u64> {
    let slot = slot_name;
    let mut from = 0;
    let mut counters = 0;
    loop {
        let answer = api
            .get(&format!("/slots/{slot}/copy?from={from}"))
            .await
            .ok()?;
        let Ok(copy) = postcard::from_bytes::<geocount_model::wire::SlotCopy>(&answer.body) else {
            // A source of the previous protocol answers the whole copy at once, and nothing
            // about its completeness: read what it holds, so the test runs against it too.
            let (slot, entries): (String, Vec<(String, geocount_model::SlotRecord)>) =
                postcard::take_from_bytes(&answer.body).ok()?.0;
            return (slot == slot_name).then_some(entries.len() as u64);
        };
        if !copy.complete {
            return None;
        }
        counters += copy.entries.len() as u64;
        match copy.next {
            Some(next) => from = next,
            None => return Some(counters),
        }
    }
}

fn ids(prefix: &str) -> Vec<String> {
    (0..COUNTERS).map(|n| format!("{prefix}-{n}")).collect()
}

/// Its aggregator and peer hold nothing of the slot after their restarts; the global
/// aggregator still holds it whole, and the node restores from it: a write after the restore
/// adds to 57 rather than start again from 0. The peer does not answer during the restore, so
/// no copy of the keys comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_disk_restores_from_the_global_aggregator_when_the_datacenter_forgot() {
    let mut dc = Datacenter::start("restore_timeout_ms = 500").await;
    let ids = ids("empty-sources");
    let held = dc.write_57(&ids).await;
    dc.lose_shard_0_after_restarting_its_datacenter().await;
    dc.shards[1].pause();
    dc.shards[0].restart().await;
    dc.shards[1].resume();
    for (id, value) in &held {
        assert_eq!(dc.shards[0].api().value(id).await, *value, "{id} restored");
    }
    let id = held.keys().next().unwrap().clone();
    let (status, answer) = dc.shards[0].api().add(&id, 1).await.unwrap();
    assert_eq!(status, 200, "{answer}");
    dc.every_tier_reads(&id, 58).await;
    // No copy of the keys reached the restored values: keys the slot does not hold may be
    // retries of writes it applied, refused until they would have expired, across restarts.
    new_keys_are_refused_by_slot_0(&dc).await;
    dc.shards[0].kill9();
    dc.shards[0].restart().await;
    new_keys_are_refused_by_slot_0(&dc).await;
}

/// Keyed writes with new keys: those whose key belongs to slot 0 are refused with 503 and
/// `Retry-After`, the others are applied.
async fn new_keys_are_refused_by_slot_0(dc: &Datacenter) {
    let mut refused = 0;
    for n in 0..24 {
        let answer = dc.shards[0]
            .api()
            .send(
                Method::PATCH,
                &format!("/counter/fenced-{n}/write?op=INCREMENT"),
                &[("Idempotency-Key", &format!("new-{n}-{}", rand_suffix()))],
                r#"{"delta":1}"#.to_owned(),
            )
            .await
            .unwrap();
        let body = answer.json();
        match answer.status.as_u16() {
            200 => assert_eq!(body["slot"], "DC_USA_0_VAL_1", "{body}"),
            503 => {
                let error = body["error"].as_str().unwrap();
                assert!(error.contains("idempotency keys"), "{body}");
                let retry: u64 = answer.headers["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(retry > 500 && retry <= 600, "Retry-After {retry}");
                refused += 1;
            }
            status => panic!("{status} {body}"),
        }
    }
    assert!(refused > 0, "no key of the 24 belongs to slot 0");
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// No source holds the slot whole (the global aggregator is stopped): the node waits,
/// refusing writes with 503 and `Retry-After`, saying why in `/healthz`. Killed there, it
/// comes back still restoring, and restores once a source can give the whole slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_in_its_restore_resumes_it() {
    let mut dc = Datacenter::start("restore_timeout_ms = 500").await;
    let ids = ids("crash-in-restore");
    let held = dc.write_57(&ids).await;
    dc.global.pause();
    dc.lose_shard_0_after_restarting_its_datacenter().await;
    dc.shards[0].respawn();
    let node = dc.shards[0].api();
    let health = health_until(&node, Duration::from_secs(10), |s, b| {
        s == 503 && b["status"] == "restoring"
    })
    .await;
    assert!(
        health["restore"]["sources"].as_array().unwrap().len() == 3,
        "{health}"
    );
    let metrics = node.metrics().await.unwrap();
    assert!(
        metrics.contains("\ngeocount_shard_restoring 1\n"),
        "{metrics}"
    );
    let id = held.keys().next().unwrap().clone();
    let answer = node
        .send(
            Method::PATCH,
            &format!("/counter/{id}/write?op=INCREMENT"),
            &[],
            r#"{"delta":1}"#.to_owned(),
        )
        .await
        .unwrap();
    assert_eq!(answer.status, 503);
    assert_eq!(answer.headers["retry-after"], "1");
    assert!(
        answer.json()["error"]
            .as_str()
            .unwrap()
            .contains("restoring"),
        "{}",
        answer.json()
    );
    // Through its peer too: refused (nothing applied), not of unknown outcome.
    let (status, answer) = dc.shards[1].api().add(&id, 1).await.unwrap();
    assert_eq!(status, 503, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("restoring"),
        "{answer}"
    );
    let dir = dc.topology.shard_data_dir("USA_0", 0);
    assert!(
        dir.join("restore.pending").exists(),
        "the restore is on disk"
    );

    dc.shards[0].kill9();
    dc.shards[0].respawn();
    health_until(&node, Duration::from_secs(10), |s, b| {
        s == 503 && b["status"] == "restoring"
    })
    .await;
    dc.global.resume();
    dc.shards[0].wait_healthy().await;
    assert!(!dir.join("restore.pending").exists());
    let metrics = node.metrics().await.unwrap();
    assert!(
        metrics.contains("\ngeocount_shard_restoring 0\n"),
        "{metrics}"
    );
    for (id, value) in &held {
        assert_eq!(node.value(id).await, *value, "{id} restored");
    }
    let (status, _) = node.add(&id, 1).await.unwrap();
    assert_eq!(status, 200);
    dc.every_tier_reads(&id, 58).await;
}

/// One source is down for good (the global aggregator) while the others hand over complete
/// copies: the restore waits `restore_timeout_ms` for more pages, then finishes, however that
/// timeout compares with the restore's 5 s progress report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_with_a_source_down_ends_after_its_timeout() {
    const TIMEOUT_MS: u64 = 6_000;
    let mut dc = Datacenter::start(&format!("restore_timeout_ms = {TIMEOUT_MS}")).await;
    let ids = ids("source-down");
    let held = dc.write_57(&ids).await;
    dc.global.kill9();
    dc.shards[0].kill9();
    std::fs::remove_dir_all(dc.topology.shard_data_dir("USA_0", 0)).unwrap();
    let respawned = std::time::Instant::now();
    dc.shards[0].respawn();
    let node = dc.shards[0].api();
    // The copies come in well under a second; the rest is the wait for the source down.
    let within = Duration::from_millis(TIMEOUT_MS + 5_000);
    let health = health_until(&node, within, |_, b| {
        b["status"].is_string() && b["status"] != "restoring"
    })
    .await;
    assert_eq!(health["status"], "ok", "{health}");
    assert!(
        respawned.elapsed() >= Duration::from_millis(TIMEOUT_MS),
        "the restore waited for the source down: {:?}",
        respawned.elapsed()
    );
    for (id, value) in &held {
        assert_eq!(node.value(id).await, *value, "{id} restored");
    }
}

/// An unfinished restore given up with `--restore empty` leaves the slot without the keys it
/// had: keys it does not hold are refused until they would have expired, as after a restore
/// without a whole copy of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_given_up_refuses_the_keys_it_lost() {
    let mut dc = Datacenter::start("restore_timeout_ms = 500").await;
    dc.write_57(&ids("given-up")).await;
    dc.global.pause();
    dc.lose_shard_0_after_restarting_its_datacenter().await;
    dc.shards[0].respawn();
    health_until(&dc.shards[0].api(), Duration::from_secs(10), |s, b| {
        s == 503 && b["status"] == "restoring"
    })
    .await;
    dc.shards[0].kill9();
    dc.shards[0] = dc.topology.start_shard("USA_0", 0).await;
    let dir = dc.topology.shard_data_dir("USA_0", 0);
    assert!(
        !dir.join("restore.pending").exists(),
        "the restore is given up"
    );
    new_keys_are_refused_by_slot_0(&dc).await;
    dc.shards[0].kill9();
    dc.shards[0].restart().await;
    new_keys_are_refused_by_slot_0(&dc).await;
    dc.global.resume();
}

/// Sources that answer slowly (here, not at all for a while: every one is stopped) hold the
/// restore up, however long, rather than let the node start empty; a slot of many pages then
/// comes over page by page, each page within the client's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_large_restore_waits_and_pages() {
    const LARGE: usize = 150_000;
    let topology = TestTopology::with_extra(
        &[("USA_0", 2)],
        "restore_timeout_ms = 500",
        "[sync]\ntimeout_ms = 250\npage_entries = 1000",
    );
    let global = topology.start_global_aggregator().await;
    let aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let mut shards = Vec::new();
    for slot in 0..2 {
        shards.push(topology.start_shard("USA_0", slot).await);
    }
    let ids: Vec<String> = (0..LARGE).map(|n| format!("large-{n}")).collect();
    for chunk in ids.chunks(10_000) {
        let batch = BatchRequest::increments(chunk);
        shards[0].api().batch(&batch.entries).await.expect("batch");
    }
    let held = {
        let (_, health) = shards[0].api().get_json("/healthz").await;
        health["counters"].as_u64().unwrap()
    };
    for source in [aggregator.api(), shards[1].api()] {
        eventually(
            Duration::from_secs(60),
            "every source holds shard 0 whole",
            || async { (copy_len(&source, "DC_USA_0_VAL_0").await? == held).then_some(()) },
        )
        .await;
    }
    shards[0].kill9();
    std::fs::remove_dir_all(topology.shard_data_dir("USA_0", 0)).unwrap();
    let peer = shards.pop().expect("two shards");
    let sources = [&global, &aggregator, &peer];
    for source in sources {
        source.pause();
    }
    shards[0].respawn();
    let node = shards[0].api();
    // Well past `restore_timeout_ms`, the node still waits for its sources.
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(750)).await;
        health_until(&node, Duration::from_secs(10), |s, b| {
            s == 503 && b["status"] == "restoring"
        })
        .await;
    }
    for source in sources {
        source.resume();
    }
    let health = health_until(&node, Duration::from_secs(60), |s, b| {
        s == 200 && b["counters"].as_u64() == Some(held)
    })
    .await;
    assert_eq!(health["status"], "ok");
}

/// A keyed write acknowledged before the disk was lost is answered as it was the first time
/// when its client retries after the restore, and applied once: its key came back with the
/// slot, from the peer that held a copy of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_after_a_lost_disk_is_applied_once() {
    let mut dc = Datacenter::start("restore_timeout_ms = 500").await;
    let node = dc.shards[0].api();
    let writes: Vec<(String, String)> = (0..COUNTERS)
        .map(|n| (format!("retried-{n}"), format!("order-{n}")))
        .collect();
    let mut first = HashMap::new();
    for (id, key) in &writes {
        let (status, answer) = node
            .write_keyed(id, serde_json::json!({"delta": 5}), key)
            .await;
        assert_eq!(status, 200, "{answer}");
        first.insert(id.clone(), answer);
    }
    let held = {
        let (_, health) = node.get_json("/healthz").await;
        health["counters"].as_u64().unwrap()
    };
    assert!(held > 5, "shard 0 took too few of the keyed writes: {held}");
    let peer = dc.shards[1].api();
    eventually(
        Duration::from_secs(10),
        "the peer holds shard 0 whole",
        || async { (copy_len(&peer, "DC_USA_0_VAL_0").await? == held).then_some(()) },
    )
    .await;
    dc.shards[0].kill9();
    std::fs::remove_dir_all(dc.topology.shard_data_dir("USA_0", 0)).unwrap();
    dc.shards[0].restart().await;
    for (id, key) in &writes {
        let (status, answer) = node
            .write_keyed(id, serde_json::json!({"delta": 5}), key)
            .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            answer, first[id],
            "the retry of {id} is answered as the first write"
        );
    }
    // Each slot's own value, read from its owner: a retry applied again shows at once.
    for (id, _) in &writes {
        let mut total = 0;
        for shard in &dc.shards {
            let (status, body) = shard.api().read(id).await;
            if status == 200 {
                total += body["value"].as_i64().unwrap();
            }
        }
        assert_eq!(total, 5, "{id} counted once");
    }
}
