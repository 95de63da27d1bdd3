//! End-to-end tests of the clock fence on slot states: entries versioned further ahead of an
//! aggregator's clock than `sync.max_clock_skew_ms` are refused, and until they are taken the
//! slot is stale, never complete and fresh, and its datacenter aggregator says it is degraded.
//! The aggregator pulls them again from where it refused them, so once its clock allows them
//! they count. Real binaries on loopback, one shard node with its clock moved ahead.

use std::time::{Duration, Instant};

use geocount_test_support::{TestTopology, eventually};

/// How far ahead of an aggregator's clock a version may be, in the topology below.
const MAX_SKEW_MS: u64 = 1_000;
/// How far ahead of the others the shard node's clock runs: its writes are refused for about
/// five seconds after they are made.
const AHEAD_MS: u64 = 6_000;
/// The writes made through the node whose clock is ahead.
const WRITES: i64 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_refused_by_the_clock_fence_leave_the_slot_stale_until_taken() {
    let topology = TestTopology::with_extra(
        &[("USA_0", 1)],
        "restore_timeout_ms = 200",
        &format!("[sync]\nmax_clock_skew_ms = {MAX_SKEW_MS}"),
    );
    let global = topology.start_global_aggregator().await;
    let aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let args = [
        "--config",
        &topology.path.display().to_string(),
        "--dc",
        "USA_0",
        "--slot",
        "0",
        "--clock-offset-ms",
        &AHEAD_MS.to_string(),
    ]
    .map(str::to_owned);
    let ahead = topology.start_shard_with_args("USA_0", 0, &args).await;
    // The global aggregator has the whole, empty slot before the writes.
    let global_api = global.api();
    eventually(Duration::from_secs(10), "a fresh global copy", || async {
        let (_, health) = global_api.get_json("/healthz").await;
        let staleness = health["datacenters"]["USA_0"]["staleness_ms"].as_u64()?;
        (staleness < MAX_SKEW_MS).then_some(())
    })
    .await;

    // A pull that began before the first write was durable may answer without it, and be fresh
    // as of then: the slot is stale at most since that acknowledgement.
    let mut written = None;
    for _ in 0..WRITES {
        let (status, body) = ahead.api().add("ahead", 1).await.unwrap();
        assert_eq!(status, 200, "{body}");
        written.get_or_insert_with(Instant::now);
    }
    let written = written.expect("a write");
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    // Refused, for now: the datacenter aggregator says so, and the slot is stale.
    let (_, health) = aggregator.api().get_json("/healthz").await;
    assert_eq!(health["status"], "degraded", "{health}");
    let slot = &health["slots"]["DC_USA_0_VAL_0"];
    assert!(slot["refused_ahead"].as_u64().unwrap() > 0, "{health}");
    let since_written = written.elapsed().as_millis() as u64;
    let (status, body) = global_api
        .global_read("ahead", "max_staleness_ms=1000&allow_partial=true")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["complete"], false, "{body}");
    assert!(
        body["staleness_ms"].as_u64().unwrap() >= since_written,
        "as of before the writes: {body}"
    );

    // Once the aggregators' clocks allow them, the refused entries are pulled again and count.
    eventually(
        Duration::from_secs(15),
        "the refused writes counted",
        || async {
            let (status, body) = global_api.global_read("ahead", "").await;
            (status == 200 && body["value"] == WRITES && body["complete"] == true).then_some(())
        },
    )
    .await;
    let aggregator_api = aggregator.api();
    eventually(
        Duration::from_secs(5),
        "the aggregator ok again",
        || async {
            let (_, health) = aggregator_api.get_json("/healthz").await;
            (health["status"] == "ok").then_some(())
        },
    )
    .await;
}
