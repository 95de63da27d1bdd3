//! End-to-end: reads keep answering while rankings scan every counter. Tens of thousands of
//! counters in one datacenter, several loops of the worst-case ranking (a window ending long
//! ago: every counter visited, none listed) against the global aggregator, and a reader timing
//! each `GET /counter` meanwhile. Real binaries on loopback ports.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use geocount_model::wire::BatchEntry;
use geocount_test_support::api::entry;
use geocount_test_support::{Api, TestTopology};

/// Counters held; enough that one scan takes many runs of the replica's lock.
const COUNTERS: usize = 40_000;
/// Counters per batched write.
const BATCH: usize = 10_000;
/// Scans the aggregators run at once (`http.max_concurrent_scans`).
const MAX_SCANS: usize = 2;
/// Loops of the worst-case ranking, more than `MAX_SCANS` so some are refused.
const SCAN_LOOPS: usize = 4;
/// How long the scans and the reader run.
const LOADED: Duration = Duration::from_secs(3);
/// The slowest a read may answer while scans run (generous: a debug build on a shared box).
const READ_BOUND: Duration = Duration::from_secs(1);
/// The median read while scans run: a read waits for no scan, so it stays far under this.
const MEDIAN_READ_BOUND: Duration = Duration::from_millis(10);
/// How long a tier may take to show what was written.
const CONVERGE: Duration = Duration::from_secs(20);
/// Hits in the window of 60 s ending at unix second 1: none, after visiting every counter.
const WORST_SCAN: &str = "/topk?k=1000&window=60&at=1";

/// What one scan loop saw: answers 200, refusals 429 (each with `Retry-After` and a JSON
/// error), and any other status with its body.
#[derive(Debug, Default)]
struct ScanLoop {
    answered: usize,
    refused: usize,
    unexpected: Vec<(u16, String)>,
}

async fn scan_loop(api: Api, until: Instant) -> ScanLoop {
    let mut seen = ScanLoop::default();
    while Instant::now() < until {
        let answer = api.get(WORST_SCAN).await.expect("topk");
        match answer.status.as_u16() {
            200 => seen.answered += 1,
            429 => {
                let retry = answer
                    .headers
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap());
                assert_eq!(retry, Some("1"), "a refused scan says when to try again");
                let body = answer.json();
                assert!(body["error"].is_string(), "{body}");
                seen.refused += 1;
                // The refused loop tries again soon, as a client honouring it roughly would.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            status => seen
                .unexpected
                .push((status, String::from_utf8_lossy(&answer.body).into())),
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_keep_answering_while_rankings_scan_every_counter() {
    let topology =
        TestTopology::single_with("", &format!("[http]\nmax_concurrent_scans = {MAX_SCANS}\n"));
    let shard = topology.start_shard("USA_0", 0).await;
    let _datacenter = topology.start_datacenter_aggregator("USA_0").await;
    let global = topology.start_global_aggregator().await;
    let global_api = global.api();

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let ids: Vec<String> = (0..COUNTERS).map(|n| format!("scan:{n:06}")).collect();
    for chunk in ids.chunks(BATCH) {
        let entries: Vec<BatchEntry> = chunk
            .iter()
            .map(|id| BatchEntry {
                timestamp: Some(now),
                ..entry(id, 1)
            })
            .collect();
        shard.api().batch(&entries).await.expect("batch");
    }
    let last = format!("/counter/{}", ids[COUNTERS - 1]);
    global_api
        .read_until(CONVERGE, &last, |status, body| {
            status == 200 && body["value"] == 1
        })
        .await;

    let until = Instant::now() + LOADED;
    let loops: Vec<_> = (0..SCAN_LOOPS)
        .map(|_| tokio::spawn(scan_loop(global.api(), until)))
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut latencies = Vec::new();
    let mut refused_reads = Vec::new();
    let mut n = 0;
    while Instant::now() < until {
        let id = &ids[n * 7_919 % COUNTERS];
        n += 1;
        let started = Instant::now();
        let answer = global_api
            .get(&format!("/counter/{id}"))
            .await
            .expect("read");
        latencies.push(started.elapsed());
        if answer.status != 200 {
            refused_reads.push((answer.status.as_u16(), answer.json()));
        }
    }
    let mut seen = ScanLoop::default();
    for scans in loops {
        let scans = scans.await.expect("scan loop");
        seen.answered += scans.answered;
        seen.refused += scans.refused;
        seen.unexpected.extend(scans.unexpected);
    }

    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    eprintln!(
        "{} reads while scanning: p50 {:?}, p99 {:?}, max {:?}; scans answered {}, refused {}",
        latencies.len(),
        at(0.5),
        at(0.99),
        at(1.0),
        seen.answered,
        seen.refused
    );
    assert!(refused_reads.is_empty(), "reads refused: {refused_reads:?}");
    assert!(
        at(0.5) < MEDIAN_READ_BOUND,
        "the median read took {:?} while scans ran",
        at(0.5)
    );
    assert!(
        at(1.0) < READ_BOUND,
        "the slowest read took {:?} while scans ran",
        at(1.0)
    );
    assert!(seen.unexpected.is_empty(), "{:?}", seen.unexpected);
    assert!(seen.answered > 0, "scans run to their answer");
    assert!(
        seen.refused > 0,
        "{SCAN_LOOPS} loops against a bound of {MAX_SCANS}: some refused with 429"
    );
}
