//! End-to-end tests of the aggregators' status fan-outs: many callers of `GET /status` or
//! `GET /counter/{id}/rights` at once share one gathering of the processes below per
//! interval, as the calls each aggregator counts (`fanout_calls_total`) show, and a node hung
//! after a shared answer still shows as unreachable soon after. Real binaries on loopback.

use std::time::{Duration, Instant};

use geocount_test_support::{Api, TestCluster, TestTopology};
use serde_json::json;

/// Callers at once in each burst.
const CALLERS: usize = 40;

/// How long one gathered answer is shared (`geocount_aggregator::fanout::SHARED_FOR`).
const SHARED_FOR: Duration = Duration::from_secs(1);

/// The calls `api`'s status routes made below, as it exports them (`prefix` is its tier's).
async fn fanout_calls(api: &Api, prefix: &str) -> u64 {
    let text = api.metrics().await.expect("metrics answered");
    let name = format!("{prefix}_fanout_calls_total");
    text.lines()
        .find_map(|line| line.strip_prefix(&name)?.strip_prefix(' '))
        .map_or(0, |value| value.parse().unwrap())
}

/// `GET path` at `api` by [`CALLERS`] callers at once, each answered 200; how long they took.
async fn burst(api: &Api, path: &str) -> Duration {
    let started = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..CALLERS {
        let (api, path) = (api.clone(), path.to_owned());
        callers.spawn(async move { api.get(&path).await.expect("answered") });
    }
    while let Some(answer) = callers.join_next().await {
        let answer = answer.expect("caller finished");
        assert_eq!(answer.status, 200, "{path}: {}", answer.json());
    }
    started.elapsed()
}

/// Asserts that a burst of `path` at `api` made at least one gathering and at most one per
/// [`SHARED_FOR`] begun while it ran, each of `per_fanout` calls below.
async fn shares_one_fanout(api: &Api, prefix: &str, path: &str, per_fanout: u64) {
    let before = fanout_calls(api, prefix).await;
    let took = burst(api, path).await;
    let calls = fanout_calls(api, prefix).await - before;
    let intervals = took.as_millis().div_ceil(SHARED_FOR.as_millis()) as u64 + 1;
    assert!(
        calls >= per_fanout && calls <= intervals * per_fanout,
        "{CALLERS} callers of {path} in {took:?} made {calls} calls below; \
         at most {intervals} gatherings of {per_fanout} were expected"
    );
}

#[tokio::test]
async fn concurrent_status_callers_share_one_fanout_per_interval() {
    let topology = TestTopology::new(&[("USA_0", 2), ("EU_0", 2)], "");
    let cluster = TestCluster::start(topology).await;
    let created = json!({"id": "bounded", "min": 0, "max": 100});
    cluster.nth_shard(0).api().created(created).await;

    // A datacenter aggregator asks each shard node's /healthz and /metrics for its status.
    let datacenter = cluster.aggregator(0).api();
    let prefix = "geocount_datacenter";
    shares_one_fanout(&datacenter, prefix, "/status", 4).await;
    shares_one_fanout(&datacenter, prefix, "/counter/bounded/rights", 2).await;
    // The global aggregator asks each datacenter aggregator.
    let global = cluster.global.api();
    shares_one_fanout(&global, "geocount_global", "/status", 2).await;
    shares_one_fanout(&global, "geocount_global", "/counter/bounded/rights", 2).await;

    // A shared answer ages out: a node hung after it shows as unreachable soon after.
    let hung = &cluster.shards[0][1];
    hung.pause();
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut status = serde_json::Value::Null;
    while Instant::now() < deadline {
        let (code, answer) = datacenter.get_json("/status").await;
        assert_eq!(code, 200, "{answer}");
        status = answer;
        if status["slots"][1]["error"].is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    hung.resume();
    assert!(status["slots"][1]["error"].is_string(), "{status}");
    assert_eq!(status["slots"][0]["health"]["status"], "ok", "{status}");
}
