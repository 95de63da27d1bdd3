//! A node that lost its disk takes its idempotency keys back from its peer's copy, which says
//! how far it reaches: a retry whose key the copy does not reach is refused until it would have
//! expired, never applied a second time; and the copy outlives the peer's restart.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use geocount_test_support::{Api, Method, NodeProcess, TestTopology};
use serde_json::Value;

/// The restore's settle: short, the sources are all on loopback.
const SHARD_TOML: &str = "restore_timeout_ms = 500";

/// How many of the last keys are retried after the restore.
const RETRIED: usize = 40;

/// A datacenter of two shard nodes, its aggregator and the global aggregator.
struct Datacenter {
    topology: TestTopology,
    _global: NodeProcess,
    _aggregator: NodeProcess,
    shards: Vec<NodeProcess>,
}

impl Datacenter {
    async fn start() -> Self {
        let topology = TestTopology::new(&[("USA_0", 2)], SHARD_TOML);
        let (global, aggregator, shards) = topology.start_datacenter_with_tiers("USA_0").await;
        Self {
            topology,
            _global: global,
            _aggregator: aggregator,
            shards,
        }
    }

    /// A counter placed on slot 0 alone.
    fn counter_of_slot_0(&self, prefix: &str) -> String {
        let dc = self.topology.topology.datacenter("USA_0").unwrap();
        let placement = geocount_model::Placement::new(
            "USA_0",
            dc.shards.len() as u32,
            self.topology.topology.shard.virtual_nodes,
        );
        (0..)
            .map(|n| format!("{prefix}-{n}"))
            .find(|id| placement.slots_for(id, 1) == [0])
            .expect("some counter lands on slot 0")
    }

    fn data_dir(&self, slot: usize) -> std::path::PathBuf {
        self.topology.shard_data_dir("USA_0", slot)
    }
}

/// A keyed `+1` to `id`: its status and answer, or `None` when no answer came.
async fn keyed_increment(api: &Api, id: &str, key: &str) -> Option<(u16, Value)> {
    api.write(
        id,
        "INCREMENT",
        Some(serde_json::json!({"delta": 1})),
        Some(key),
    )
    .await
    .ok()
}

/// What slot 0 holds of `id`, read from its owner.
async fn own_value(api: &Api, id: &str) -> i64 {
    let (status, body) = api.read(id).await;
    assert_eq!(status, 200, "{body}");
    body["value"].as_i64().unwrap()
}

fn keys_unknown_file(dir: &Path) -> std::path::PathBuf {
    dir.join("keys.unknown-until")
}

/// Shard 0 is killed -9 in the middle of sequential keyed `+1`s while its peer lags (stopped
/// for the last part of the run), and loses its disk. The aggregators hold values the peer's
/// copy of the keys does not reach: retrying the last keys after the restore either finds the
/// first answer or is refused (503, keys unknown), and never applies a write counted in the
/// restored value again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_the_peers_copy_does_not_reach_is_refused_not_applied_twice() {
    let mut dc = Datacenter::start().await;
    let id = dc.counter_of_slot_0("lagging");
    let node = dc.shards[0].api();
    let writer = {
        let (node, id) = (node.clone(), id.clone());
        tokio::spawn(async move {
            let mut acknowledged: Vec<(String, Value)> = Vec::new();
            for n in 0.. {
                let key = format!("lagging-{n}");
                match keyed_increment(&node, &id, &key).await {
                    Some((200, answer)) => acknowledged.push((key, answer)),
                    // Killed: this write's outcome is unknown.
                    _ => return (acknowledged, key),
                }
            }
            unreachable!("the writer runs until the node is killed")
        })
    };
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    dc.shards[1].pause();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    dc.shards[0].kill9();
    let (acknowledged, in_flight) = writer.await.unwrap();
    assert!(
        acknowledged.len() > RETRIED * 2,
        "too few writes before the kill: {}",
        acknowledged.len()
    );
    std::fs::remove_dir_all(dc.data_dir(0)).unwrap();
    dc.shards[1].resume();
    dc.shards[0].restart().await;

    assert!(
        keys_unknown_file(&dc.data_dir(0)).exists(),
        "the peer's copy lags the restored values: the keys it lacks are unknown, durably"
    );
    let restored = own_value(&node, &id).await;
    let mut refused = 0;
    let last = &acknowledged[acknowledged.len() - RETRIED..];
    for (key, first) in last {
        let (status, answer) = keyed_increment(&node, &id, key).await.expect("an answer");
        let counted = first["value"].as_i64().unwrap() <= restored;
        match status {
            200 if counted => assert_eq!(
                &answer, first,
                "the retry of {key}, counted in the restored value {restored}, is applied again"
            ),
            // Lost with the disk (acknowledged but pulled by no copy): applied now, once.
            200 => {}
            503 => {
                let error = answer["error"].as_str().unwrap_or_default();
                assert!(error.contains("idempotency keys"), "{answer}");
                refused += 1;
            }
            status => panic!("the retry of {key}: {status} {answer}"),
        }
    }
    let (status, answer) = keyed_increment(&node, &id, &in_flight)
        .await
        .expect("an answer");
    assert!(status == 200 || status == 503, "{status} {answer}");
    let total = own_value(&node, &id).await;
    assert!(
        total <= acknowledged.len() as i64 + 1,
        "{} acknowledged (and one of unknown outcome) became {total}",
        acknowledged.len()
    );
    assert!(refused > 0, "the peer's copy reached every retried key");
}

/// The peer is killed -9 once it has caught up, and the owner loses its disk while the peer is
/// down; the peer comes back first. Its copy of the keys survived its restart, so the restore
/// takes every key back: each retry is answered as the first write was, and new keys are
/// taken at once rather than refused for the retention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_restarted_before_the_owners_restore_still_hands_its_keys_back() {
    let mut dc = Datacenter::start().await;
    let id = dc.counter_of_slot_0("rolling");
    let node = dc.shards[0].api();
    let mut first = HashMap::new();
    for n in 0..20 {
        let key = format!("rolling-{n}");
        let (status, answer) = keyed_increment(&node, &id, &key).await.unwrap();
        assert_eq!(status, 200, "{answer}");
        first.insert(key, answer);
    }
    let peer = dc.shards[1].api();
    geocount_test_support::eventually(
        Duration::from_secs(10),
        "the peer holds slot 0's last value",
        || async {
            let answer = peer.get("/slots/DC_USA_0_VAL_0/copy").await.ok()?;
            let copy: geocount_model::wire::SlotCopy = postcard::from_bytes(&answer.body).ok()?;
            let held = copy.entries.iter().find(|(held, _)| *held == id)?;
            (held.1.state.value == 20).then_some(())
        },
    )
    .await;
    // Its next pulls find nothing new: the copy of the keys is as far as the values.
    tokio::time::sleep(Duration::from_millis(500)).await;
    dc.shards[1].kill9();
    dc.shards[0].kill9();
    std::fs::remove_dir_all(dc.data_dir(0)).unwrap();
    dc.shards[1].restart().await;
    dc.shards[0].restart().await;

    for (key, answer) in &first {
        let (status, retried) = keyed_increment(&node, &id, key).await.unwrap();
        assert_eq!(status, 200, "the retry of {key}: {retried}");
        assert_eq!(
            &retried, answer,
            "the retry of {key} is answered as the first"
        );
    }
    assert_eq!(own_value(&node, &id).await, 20);
    for n in 0..24 {
        let answer = node
            .send(
                Method::PATCH,
                &format!("/counter/after-{n}/write?op=INCREMENT"),
                &[("Idempotency-Key", &format!("after-{n}"))],
                r#"{"delta":1}"#.to_owned(),
            )
            .await
            .unwrap();
        assert_eq!(answer.status, 200, "new key after-{n}: {}", answer.json());
    }
    assert!(!keys_unknown_file(&dc.data_dir(0)).exists());
}
