//! `shard.durability = "replicated"`: a write is acknowledged only once a peer shard node of
//! its datacenter holds it durably too, so a disk lost under load loses nothing acknowledged
//! and applies no keyed retry twice; with no peer to hold it, a write is refused; and a
//! datacenter of one shard node cannot run it.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use geocount_test_support::process::{binary, config_error};
use geocount_test_support::{Api, NodeProcess, TestTopology, eventually};
use serde_json::json;

const REPLICATED: &str = "durability = \"replicated\"\nrestore_timeout_ms = 500";

/// The counters written.
const COUNTERS: usize = 9;

/// Writers per shard node.
const WRITERS_PER_NODE: usize = 2;

/// What a writer saw of one keyed +1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Answered 200: it must count, once.
    Acknowledged,
    /// Any other answer, or none: it may or may not count.
    Unknown,
}

/// One keyed +1 a writer sent, and what it saw.
#[derive(Debug, Clone)]
struct Sent {
    node: usize,
    id: String,
    key: String,
    outcome: Outcome,
    /// What the acknowledgement answered (its slot's value right after it).
    value: Option<i64>,
}

/// Writes keyed +1s through shard node `node` (round the counters) until `stop`.
async fn write_until(api: Api, node: usize, writer: usize, stop: Arc<AtomicBool>) -> Vec<Sent> {
    let mut sent = Vec::new();
    let mut n = 0usize;
    while !stop.load(Ordering::Acquire) {
        let id = format!("r{}", (n + writer) % COUNTERS);
        let key = format!("n{node}-w{writer}-{n}");
        n += 1;
        let (outcome, value) = match api
            .write(&id, "INCREMENT", Some(json!({"delta": 1})), Some(&key))
            .await
        {
            Ok((200, body)) => (Outcome::Acknowledged, body["value"].as_i64()),
            _ => (Outcome::Unknown, None),
        };
        sent.push(Sent {
            node,
            id,
            key,
            outcome,
            value,
        });
    }
    sent
}

/// The global aggregator's complete total of `id`, once it reaches `at_least` (panics with the
/// last answer after 20 s).
async fn global_total(global: &Api, id: &str, at_least: i64) -> i64 {
    let within = Duration::from_secs(20);
    let deadline = std::time::Instant::now() + within;
    loop {
        let (status, body) = global.global_read(id, "").await;
        let total = body["value"].as_i64();
        if status == 200 && body["complete"] == true && total >= Some(at_least) {
            return total.unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{id}: after {within:?} the global total is below its {at_least} acknowledged +1s: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The global total of `id` once it reached `at_least` and held still for a second: every
/// write the tiers still carry has arrived.
async fn settled_total(global: &Api, id: &str, at_least: i64) -> i64 {
    let mut total = global_total(global, id, at_least).await;
    loop {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let again = global_total(global, id, total).await;
        if again == total {
            return total;
        }
        total = again;
    }
}

/// Six writers keep writing keyed +1s through the three shard nodes of a datacenter while one
/// node is killed -9 and its data directory wiped at once, with no pause, then another. After
/// the restores,
/// every counter's global total is at least its acknowledged +1s and at most those plus the
/// ones whose outcome was unknown; the restored node holds the key of every write it restored
/// (the peers' logs hold every group a copy showed), so retrying every acknowledged write with
/// its key is answered as the first attempt was and changes nothing.
#[tokio::test]
async fn a_disk_lost_under_load_loses_no_acknowledged_write() {
    // The peers pull each other's keys seldom: their key copies lag what the aggregator shows
    // by up to two seconds, so only the peers' logs can vouch for the newest keys.
    let topology = TestTopology::with_extra(&[("USA_0", 3)], REPLICATED, "[sync]\npeer_ms = 2000");
    let global = topology.start_global_aggregator().await;
    let _aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let mut shards: Vec<NodeProcess> = Vec::new();
    for slot in 0..3 {
        shards.push(topology.start_shard("USA_0", slot).await);
    }
    let apis: Vec<Api> = shards.iter().map(NodeProcess::api).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for (node, api) in apis.iter().enumerate() {
        for writer in 0..WRITERS_PER_NODE {
            let (api, stop) = (api.clone(), stop.clone());
            writers.push(tokio::spawn(write_until(api, node, writer, stop)));
        }
    }
    // Node 1's disk, then node 2's while node 1's replaced logs are young: each restore
    // vouches for every key.
    for lost in [1, 2] {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        shards[lost].kill9();
        std::fs::remove_dir_all(topology.shard_data_dir("USA_0", lost)).unwrap();
        shards[lost].respawn();
        shards[lost]
            .wait_for_log(
                "restored the slot from the datacenter",
                Duration::from_secs(30),
            )
            .await;
        let unknown_keys = topology
            .shard_data_dir("USA_0", lost)
            .join("keys.unknown-until");
        assert!(
            !unknown_keys.exists(),
            "node {lost}'s restore could not vouch for every key: {}",
            std::fs::read_to_string(&shards[lost].log).unwrap_or_default()
        );
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Release);
    let mut sent = Vec::new();
    for writer in writers {
        sent.extend(writer.await.unwrap());
    }

    let mut acknowledged: HashMap<&str, i64> = HashMap::new();
    let mut unknown: HashMap<&str, i64> = HashMap::new();
    for write in &sent {
        let tally = match write.outcome {
            Outcome::Acknowledged => &mut acknowledged,
            Outcome::Unknown => &mut unknown,
        };
        *tally.entry(&write.id).or_default() += 1;
    }
    let acked_in_all: i64 = acknowledged.values().sum();
    assert!(
        acked_in_all > 100,
        "too few writes acknowledged to tell anything: {acked_in_all} of {}",
        sent.len()
    );
    let global = global.api();
    let mut totals = HashMap::new();
    for n in 0..COUNTERS {
        let id = format!("r{n}");
        let acked = acknowledged.get(id.as_str()).copied().unwrap_or(0);
        let most = acked + unknown.get(id.as_str()).copied().unwrap_or(0);
        let total = settled_total(&global, &id, acked).await;
        assert!(
            total <= most,
            "{id}: {total} counted, more than its {acked} acknowledged and unknown +1s ({most})"
        );
        totals.insert(id, total);
    }

    // Every acknowledged write again, with its key, through the node it went through.
    for write in sent.iter().filter(|w| w.outcome == Outcome::Acknowledged) {
        let (status, body) = apis[write.node]
            .write_keyed(&write.id, json!({"delta": 1}), &write.key)
            .await;
        assert_eq!(status, 200, "retry of {}: {body}", write.key);
        assert_eq!(
            body["value"].as_i64(),
            write.value,
            "the retry of {} through node {} was not answered as its first attempt: {body}",
            write.key,
            write.node
        );
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (id, total) in &totals {
        let after = global_total(&global, id, *total).await;
        assert_eq!(after, *total, "{id}: the keyed retries changed its total");
    }
}

/// With every peer stopped, a write cannot be held by a second disk: it is refused 503 with
/// `Retry-After` and says why, and so is every write after it until a peer is back, a restart
/// in between included.
#[tokio::test]
async fn with_every_peer_stopped_a_write_is_refused() {
    let topology = TestTopology::new(&[("USA_0", 3)], REPLICATED);
    let mut shards: Vec<NodeProcess> = Vec::new();
    for slot in 0..3 {
        shards.push(topology.start_shard("USA_0", slot).await);
    }
    let api = shards[0].api();
    let ids = api.ids_routed_to("own", "DC_USA_0_VAL_0", 3).await;
    let (status, body) = api.write_keyed(&ids[0], json!({"delta": 1}), "k-up").await;
    assert_eq!(status, 200, "{body}");

    shards[1].kill9();
    shards[2].kill9();
    let path = format!("/counter/{}/write?op=INCREMENT", ids[1]);
    let answer = api
        .send(
            geocount_test_support::Method::PATCH,
            &path,
            &[("Idempotency-Key", "k-down")],
            json!({"delta": 1}).to_string(),
        )
        .await
        .expect("an answer");
    let body = answer.json();
    assert_eq!(answer.status.as_u16(), 503, "{body}");
    assert!(
        answer.headers.contains_key("retry-after"),
        "{:?}",
        answer.headers
    );
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("peer") && error.contains("outcome is unknown"),
        "{body}"
    );
    // Refused up front while the refused write waits for a peer.
    let (status, body) = api.write(&ids[2], "INCREMENT", None, None).await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"].as_str().unwrap_or_default().contains("peer"),
        "{body}"
    );

    // Restarted, the node still owes its peers the refused write: its retry, answered from
    // its key, is not acknowledged on this disk alone.
    shards[0].kill9();
    shards[0].restart().await;
    let (status, body) = api
        .write_keyed(&ids[1], json!({"delta": 1}), "k-down")
        .await;
    assert_eq!(status, 503, "{body}");
    // Nor is the slot pulled: what it recovered holds a group no peer holds yet.
    let pulled = || async {
        let answer = (api.send(
            geocount_test_support::Method::POST,
            "/sync",
            &[],
            Vec::new(),
        ))
        .await
        .expect("an answer");
        (answer.status.as_u16(), answer.json())
    };
    let (status, body) = pulled().await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("peer holds"),
        "{body}"
    );

    // Back with a peer: the refused write's retry applies it at most once.
    shards[1].restart().await;
    let (status, body) = eventually(Duration::from_secs(10), "a write taken again", || async {
        let answer = api
            .write_keyed(&ids[1], json!({"delta": 1}), "k-down")
            .await;
        (answer.0 == 200).then_some(answer)
    })
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["value"], 1, "{body}");
    // Pulled again (an empty body is then refused as malformed, not as unavailable).
    assert_eq!(pulled().await.0, 400);
}

/// A datacenter of one shard node has no peer to replicate to: `replicated` there is a
/// one-line error naming the file and the key.
#[tokio::test]
async fn replicated_in_a_datacenter_of_one_shard_is_a_one_line_config_error() {
    let topology = TestTopology::new(&[("USA_0", 2), ("ASIA_0", 1)], "");
    let config = topology.path.to_str().unwrap();
    let stderr = config_error(
        Command::new(binary("shard-node"))
            .args(["--config", config, "--dc", "USA_0", "--slot", "0"])
            .env("GEOCOUNT_SHARD__DURABILITY", "replicated"),
    );
    assert!(
        stderr.contains(config)
            && stderr.contains("shard.durability")
            && stderr.contains("ASIA_0")
            && stderr.contains("datacenters[1].durability"),
        "{stderr}"
    );
}

/// Under `[auth]`, a node's groups reach its peers with its own process key, and a client
/// token cannot write into a peer's log of a slot.
#[tokio::test]
async fn under_auth_only_the_slot_s_own_node_replicates_it() {
    use geocount_test_support::access::{READER, SECRET, WRITER, auth_toml};

    let topology = TestTopology::with_extra(&[("USA_0", 2)], REPLICATED, &auth_toml(SECRET));
    let mut shards = [
        topology.start_shard("USA_0", 0).await,
        topology.start_shard("USA_0", 1).await,
    ];
    // Started before its peer, the first node takes writes once the peer holds its start.
    let held = "a peer holds the log this process started with";
    shards[0].wait_for_log(held, Duration::from_secs(5)).await;
    let writer = shards[0].api().with_token(WRITER);
    let ids = shards[0]
        .api()
        .with_token(READER)
        .ids_routed_to("auth", "DC_USA_0_VAL_0", 1)
        .await;
    let (status, body) = writer
        .write_keyed(&ids[0], json!({"delta": 2}), "k-auth")
        .await;
    assert_eq!(status, 200, "{body}");

    let batch = postcard::to_allocvec(&geocount_model::wire::HeldBatch::default()).unwrap();
    let path = "/slots/DC_USA_0_VAL_0/replicate";
    let answer = writer
        .send(geocount_test_support::Method::POST, path, &[], batch)
        .await
        .unwrap();
    assert_eq!(answer.status.as_u16(), 403, "{}", answer.json());
}
