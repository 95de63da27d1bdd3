//! End-to-end test of `geoctl load`: the real binary against one datacenter of three shard
//! nodes, its aggregator and the global aggregator on loopback ports. The load's own exactness
//! check must pass, and `--route` decides whether the shard nodes forward writes to each other.

use std::path::Path;

use geocount_test_support::process::binary;
use geocount_test_support::{NodeProcess, TestTopology};
use serde_json::Value;

/// A counter's shard-node metric, summed over `nodes`.
async fn metric_sum(nodes: &[NodeProcess], name: &str) -> u64 {
    let mut sum = 0;
    for node in nodes {
        let answer = node.api().get("/metrics").await.expect("metrics");
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        let line = text
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing from\n{text}"));
        sum += line
            .rsplit(' ')
            .next()
            .and_then(|value| value.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{line}"));
    }
    sum
}

/// Runs `geoctl load` for one second at a modest rate with `route` and `extra` arguments; its
/// JSON report.
async fn load(
    topology: &Path,
    (route, extra): (&str, &[&str]),
    prefix: &str,
    json: &Path,
) -> Value {
    let mut args: Vec<String> = [
        "--config",
        &topology.display().to_string(),
        "load",
        "--duration-secs",
        "1",
        "--rate",
        "3000",
        "--path",
        "batch",
        "--batch-size",
        "100",
        "--counters",
        "300",
        "--concurrency",
        "4",
        "--route",
        route,
        "--counter-prefix",
        prefix,
        "--json",
        &json.display().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(extra.iter().map(|&a| a.to_owned()));
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(binary("geoctl"))
            .args(&args)
            .output()
            .expect("run geoctl")
    })
    .await
    .expect("geoctl runs");
    assert!(
        output.status.success(),
        "geoctl load --route {route}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(json).expect("report")).expect("JSON report")
}

#[tokio::test]
async fn load_is_exact_and_owner_routing_forwards_nothing() {
    let topology = TestTopology::new(&[("USA_0", 3)], "restore_timeout_ms = 200");
    let mut shards = Vec::new();
    for slot in 0..3 {
        shards.push(topology.start_shard("USA_0", slot).await);
    }
    let _aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let _global = topology.start_global_aggregator().await;
    let forwarded = "geocount_shard_writes_forwarded_total";

    let json = topology.dir().join("owner.json");
    let report = load(&topology.path, ("owner", &[]), "owner", &json).await;
    assert_eq!(report["settings"]["route"], "owner", "{report}");
    assert_eq!(report["settings"]["keyed"], true, "{report}");
    let acknowledged = report["writes"]["acknowledged"].as_u64().unwrap();
    assert!(acknowledged >= 1_000, "{report}");
    assert_eq!(report["writes"]["unknown"], 0, "{report}");
    assert_eq!(report["exactness"]["mismatches"], Value::Array(vec![]));
    assert_eq!(
        report["exactness"]["exact"], report["exactness"]["counters"],
        "every written counter's global total equals its acknowledged deltas"
    );
    // Only the lag probes (single writes to a random node) may have been forwarded.
    let probes = report["visibility_lag"]["probes"].as_u64().unwrap();
    let after_owner = metric_sum(&shards, forwarded).await;
    assert!(
        after_owner <= probes,
        "{after_owner} writes forwarded with --route owner ({probes} probes)"
    );

    let json = topology.dir().join("any.json");
    let report = load(&topology.path, ("any", &[]), "any", &json).await;
    let acknowledged = report["writes"]["acknowledged"].as_u64().unwrap();
    assert_eq!(report["exactness"]["mismatches"], Value::Array(vec![]));
    // Each request goes whole to one node, which owns about a third of its writes.
    let by_any = metric_sum(&shards, forwarded).await - after_owner;
    assert!(
        by_any >= acknowledged / 3,
        "{by_any} of {acknowledged} writes forwarded with --route any"
    );

    // Without keys the writes still land exactly, on the node owning their slot.
    let json = topology.dir().join("keyless.json");
    let report = load(
        &topology.path,
        ("owner", &["--without-keys"]),
        "keyless",
        &json,
    )
    .await;
    assert_eq!(report["settings"]["keyed"], false, "{report}");
    assert!(
        report["writes"]["acknowledged"].as_u64().unwrap() >= 1_000,
        "{report}"
    );
    assert_eq!(report["exactness"]["mismatches"], Value::Array(vec![]));
    let probes = report["visibility_lag"]["probes"].as_u64().unwrap();
    let by_keyless = metric_sum(&shards, forwarded).await - after_owner - by_any;
    assert!(
        by_keyless <= probes,
        "{by_keyless} writes forwarded with --route owner --without-keys ({probes} probes)"
    );
}
