//! Aggregator replicas: a global replica keeps answering exact, complete and fresh totals while
//! the other global replica and a datacenter's aggregator replica are killed in the middle of
//! writes; a restarted replica calls its answers complete only once it holds every
//! datacenter's state again; a shard that lost its disk restores from the aggregator replica
//! that is up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use geocount_test_support::{Api, NodeProcess, TestTopology, eventually};
use serde_json::Value;

const COUNTER: &str = "likes";

/// How long a tier gets to show every acknowledged write.
const CONVERGE: Duration = Duration::from_secs(15);

/// Increments `COUNTER` by 1 through each shard in turn until stopped, counting the writes
/// acknowledged.
struct Writer {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicI64>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    fn start(shards: Vec<Api>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicI64::new(0));
        let (stopped, counted) = (stop.clone(), acknowledged.clone());
        let task = tokio::spawn(async move {
            for shard in shards.iter().cycle() {
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let answer = shard.add(COUNTER, 1).await;
                assert!(
                    matches!(answer, Ok((200, _))),
                    "no shard was harmed, yet a write failed: {answer:?}"
                );
                counted.fetch_add(1, Ordering::Relaxed);
            }
        });
        Self {
            stop,
            acknowledged,
            task,
        }
    }

    /// Stops writing; the writes acknowledged.
    async fn stop(self) -> i64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the writer panicked");
        self.acknowledged.load(Ordering::Relaxed)
    }
}

/// A 200 read of `COUNTER` at `global` that is complete and answered by replica `replica`.
fn complete_from(status: u16, body: &Value, replica: u64) -> bool {
    status == 200 && body["complete"] == true && body["replica"] == replica
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_replica_answers_exact_and_fresh_while_replicas_are_killed() {
    let topology = TestTopology::replicated(&[("USA_0", 2), ("ASIA_0", 1)], 1, 1);
    let mut shards = Vec::new();
    for (dc, slots) in [("USA_0", 2), ("ASIA_0", 1)] {
        for slot in 0..slots {
            shards.push(topology.start_shard(dc, slot).await);
        }
    }
    let mut aggregators = Vec::new();
    for dc in ["USA_0", "ASIA_0"] {
        for replica in 0..2 {
            aggregators.push(topology.start_aggregator_replica(dc, replica).await);
        }
    }
    let mut global_0 = topology.start_global_replica(0).await;
    let global_1 = topology.start_global_replica(1).await;
    let reader = global_1.api();

    let writer = Writer::start(shards.iter().map(NodeProcess::api).collect());
    reader
        .read_until(CONVERGE, &format!("/counter/{COUNTER}"), |s, b| {
            complete_from(s, b, 1)
        })
        .await;
    global_0.kill9();
    aggregators[0].kill9(); // USA_0's replica 0
    // Writes go on; replica 1 of the world answers complete and fresh throughout.
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(2) {
        let (status, body) = reader.global_read(COUNTER, "").await;
        assert!(complete_from(status, &body, 1), "{status} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let written = writer.stop().await;
    let body = reader
        .read_until(CONVERGE, &format!("/counter/{COUNTER}"), |s, b| {
            complete_from(s, b, 1) && b["value"] == written
        })
        .await;
    let max_staleness_ms = topology.topology.global.max_staleness_ms;
    assert!(
        body["staleness_ms"].as_u64().unwrap() <= max_staleness_ms,
        "{body}"
    );
    let usa = &body["datacenters"]["USA_0"];
    assert!(usa["staleness_ms"].as_u64().is_some(), "{body}");

    // A restarted replica is never complete with less than every acknowledged write.
    global_0.restart().await;
    let restarted = global_0.api();
    let seen_complete = eventually(CONVERGE, "the restarted replica to be complete", || {
        let restarted = restarted.clone();
        async move {
            let (status, body) = restarted.global_read(COUNTER, "allow_partial=true").await;
            if status == 200 && body["complete"] == true {
                return Some(body);
            }
            let (strict, refusal) = restarted.global_read(COUNTER, "").await;
            assert!(
                strict == 503 || (strict == 200 && refusal["value"] == written),
                "{strict} {refusal}"
            );
            None
        }
    })
    .await;
    assert_eq!(seen_complete["value"], written, "{seen_complete}");
    assert_eq!(seen_complete["replica"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_disk_restores_from_the_aggregator_replica_that_is_up() {
    let topology = TestTopology::replicated(&[("USA_0", 1)], 0, 1);
    let mut global = topology.start_global_aggregator().await;
    let mut aggregator_0 = topology.start_aggregator_replica("USA_0", 0).await;
    let aggregator_1 = topology.start_aggregator_replica("USA_0", 1).await;
    let mut shard = topology.start_shard("USA_0", 0).await;
    let ids: Vec<String> = (0..20).map(|n| format!("restored-{n}")).collect();
    for id in &ids {
        let answer = shard.api().add(id, 57).await.expect("write");
        assert_eq!(answer.0, 200, "{answer:?}");
    }
    for id in &ids {
        aggregator_1
            .api()
            .read_until(CONVERGE, &format!("/counter/{id}"), |s, b| {
                s == 200 && b["value"] == 57 && b["complete"] == true
            })
            .await;
    }

    // Its only other copies are replica 0 of its aggregator and the global aggregator: both
    // down while the disk is lost.
    shard.kill9();
    aggregator_0.kill9();
    global.kill9();
    std::fs::remove_dir_all(topology.shard_data_dir("USA_0", 0)).unwrap();
    shard.restart().await;
    for id in &ids {
        assert_eq!(shard.api().value(id).await, 57, "{id}");
    }
    let (_, health) = shard.api().get_json("/healthz").await;
    assert_eq!(health["status"], "ok", "{health}");
}
