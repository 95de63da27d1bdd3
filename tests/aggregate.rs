//! End-to-end test of `GET /aggregate`: sums over an id prefix at both tiers of a partitioned
//! cluster (USA_0 with two shard nodes, ASIA_0 with one; two partitions, each held by its own
//! global replica and its own aggregator replica in each datacenter), so every answer adds the
//! part another replica holds. Real binaries on loopback ports.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use geocount_model::partition_of;
use geocount_test_support::process::binary;
use geocount_test_support::{Aggregation, Api, TestTopology};
use serde_json::{Value, json};

const DATACENTERS: [(&str, usize); 2] = [("USA_0", 2), ("ASIA_0", 1)];
/// The datacenter of each shard node, in the order they are started.
const SHARD_DATACENTERS: [&str; 3] = ["USA_0", "USA_0", "ASIA_0"];
const CONVERGE: Duration = Duration::from_secs(20);
/// How long before now the old hits are: inside the counters' window (300 s by default), outside
/// the last minute.
const OLD_SECS: u64 = 200;

/// One write: counter, delta (negative: a decrement), through which shard node, how old.
struct Write {
    id: String,
    delta: i64,
    shard: usize,
    old: bool,
}

/// Counters under `alpha:` and `beta:` (one `alphabet` besides), written through every shard
/// node, some hits long ago and some decrements.
fn writes() -> Vec<Write> {
    let mut writes = Vec::new();
    for n in 0..12i64 {
        for (prefix, scale) in [("alpha:", 1), ("beta:", 100)] {
            writes.push(Write {
                id: format!("{prefix}{n}"),
                delta: scale * (n + 1),
                shard: n as usize % 3,
                old: false,
            });
            if n % 4 == 0 {
                writes.push(Write {
                    id: format!("{prefix}{n}"),
                    delta: -scale * 3,
                    shard: (n as usize + 1) % 3,
                    old: n % 8 == 0,
                });
            }
        }
    }
    writes.push(Write {
        id: "alphabet".into(),
        delta: 1_000,
        shard: 2,
        old: false,
    });
    writes
}

/// What `/aggregate` must answer for `prefix`: `(sum, counters)` in all and per datacenter,
/// counting the writes `counted` keeps.
fn expected(prefix: &str, counted: impl Fn(&Write) -> bool) -> Value {
    let mut world: BTreeMap<&str, i64> = BTreeMap::new();
    let mut datacenters: BTreeMap<&str, BTreeMap<&str, i64>> = BTreeMap::new();
    let writes = writes();
    for write in writes.iter().filter(|w| w.id.starts_with(prefix)) {
        let delta = if counted(write) { write.delta } else { 0 };
        *world.entry(&write.id).or_default() += delta;
        let datacenter = datacenters
            .entry(SHARD_DATACENTERS[write.shard])
            .or_default();
        *datacenter.entry(&write.id).or_default() += delta;
    }
    let sum =
        |counters: &BTreeMap<&str, i64>| json!([counters.values().sum::<i64>(), counters.len()]);
    json!({
        "all": sum(&world),
        "USA_0": sum(&datacenters.get("USA_0").cloned().unwrap_or_default()),
        "ASIA_0": sum(&datacenters.get("ASIA_0").cloned().unwrap_or_default()),
    })
}

/// `[sum, counters]` of an answer, or of one of its datacenters.
fn summed(part: &Value) -> Value {
    json!([part["sum"], part["counters"]])
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sums_over_a_prefix_are_exact_across_partitions_at_both_tiers() {
    let shape = Aggregation {
        partitions: 2,
        global: vec![vec![0], vec![1]],
        aggregators: vec![vec![0], vec![1]],
        shard_toml: String::new(),
    };
    let topology = TestTopology::shaped(&DATACENTERS, &shape, "");
    let ids: Vec<String> = writes().into_iter().map(|w| w.id).collect();
    for partition in 0..2 {
        assert!(
            ids.iter()
                .any(|id| id.starts_with("alpha:") && partition_of(id, 2) == partition),
            "every partition holds a part of the sums"
        );
    }
    let mut shards = Vec::new();
    for (dc, slots) in DATACENTERS {
        for slot in 0..slots {
            shards.push(topology.start_shard(dc, slot).await);
        }
    }
    let usa = [
        topology.start_aggregator_replica("USA_0", 0).await,
        topology.start_aggregator_replica("USA_0", 1).await,
    ];
    let globals = [
        topology.start_global_replica(0).await,
        topology.start_global_replica(1).await,
    ];
    let global_apis: Vec<Api> = globals.iter().map(|g| g.api()).collect();

    // ASIA_0 has no aggregator yet: the world's sum is refused unless partial.
    let refused = global_apis[0]
        .read_until(CONVERGE, "/aggregate?prefix=alpha:", |s, _| s == 503)
        .await;
    assert_eq!(refused["stale_datacenters"], json!(["ASIA_0"]), "{refused}");
    assert_eq!(refused["datacenters"]["ASIA_0"]["heard"], false);
    let (status, partial) = global_apis[1]
        .get_json("/aggregate?prefix=alpha:&allow_partial=true")
        .await;
    assert_eq!(
        (status, &partial["complete"]),
        (200, &json!(false)),
        "{partial}"
    );
    let asia = [
        topology.start_aggregator_replica("ASIA_0", 0).await,
        topology.start_aggregator_replica("ASIA_0", 1).await,
    ];

    let now = now_secs();
    for write in writes() {
        let (op, delta) = match write.delta {
            d if d < 0 => ("DECREMENT", -d),
            d => ("INCREMENT", d),
        };
        let timestamp = if write.old { now - OLD_SECS } else { now };
        let body = json!({"delta": delta, "timestamp": timestamp});
        let api = shards[write.shard].api();
        let (status, answer) = api.write(&write.id, op, Some(body), None).await.unwrap();
        assert_eq!(status, 200, "{}: {answer}", write.id);
    }
    // A unique counter with the prefix is left out of the sums.
    let item = json!({"item": "user-1", "timestamp": now});
    let (status, answer) = (shards[0].api())
        .write("alpha:visitors", "INCREMENT", Some(item), None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");

    // All-time, the window of the last minute, and a minute around the old hits.
    let around_old = format!("&window=60&at={}", now - OLD_SECS + 30);
    let sums = [
        ("alpha:", "", expected("alpha:", |_| true)),
        ("beta:", "", expected("beta:", |_| true)),
        ("alpha", "", expected("alpha", |_| true)),
        ("", "", expected("", |_| true)),
        ("nothing", "", expected("nothing", |_| true)),
        ("alpha:", "&window=60", expected("alpha:", |w| !w.old)),
        ("beta:", "&window=60", expected("beta:", |w| !w.old)),
        ("beta:", around_old.as_str(), expected("beta:", |w| w.old)),
    ];
    assert_eq!(sums[0].2["all"], json!([78 - 9, 12]), "the test's own sums");
    for (replica, api) in global_apis.iter().enumerate() {
        for (prefix, more, expected) in &sums {
            let path = format!("/aggregate?prefix={prefix}{more}");
            let body = api
                .read_until(CONVERGE, &path, |s, b| {
                    s == 200 && summed(b) == expected["all"] && b["complete"] == true
                })
                .await;
            for dc in ["USA_0", "ASIA_0"] {
                let part = &body["datacenters"][dc];
                assert_eq!(summed(part), expected[dc], "{path} {dc}: {body}");
                assert_eq!(part["heard"], true, "{body}");
            }
            assert_eq!(
                (&body["prefix"], &body["replica"]),
                (&json!(prefix), &json!(replica))
            );
            assert!(body["staleness_ms"].is_u64(), "{body}");
            assert_eq!(body.get("window").is_some(), !more.is_empty(), "{body}");
        }
    }

    // Each datacenter aggregator sums its own datacenter, its replicas adding each other's part.
    for (dc, replicas) in [("USA_0", &usa), ("ASIA_0", &asia)] {
        for replica in replicas {
            let api = replica.api();
            for (prefix, more, expected) in &sums {
                let path = format!("/aggregate?prefix={prefix}{more}");
                let body = api
                    .read_until(CONVERGE, &path, |s, b| {
                        s == 200 && summed(b) == expected[dc] && b["complete"] == true
                    })
                    .await;
                assert!(body.get("datacenters").is_none(), "{body}");
                assert!(body["staleness_ms"].is_u64(), "{body}");
            }
        }
    }

    // Bad queries: 400 with a JSON error at both tiers.
    let long = format!("/aggregate?prefix={}", "a".repeat(300));
    let bad = [
        "/aggregate",
        "/aggregate?window=60",
        "/aggregate?prefix=a&window=0",
        "/aggregate?prefix=a&window=x",
        "/aggregate?prefix=a&at=5",
        "/aggregate?prefix=a&prefix=b",
        "/aggregate?prefix=a%0Ab",
        "/aggregate?prefix=a&k=3",
        long.as_str(),
    ];
    for api in [&global_apis[0], &usa[1].api()] {
        for path in bad {
            let (status, body) = api.get_json(path).await;
            assert_eq!(status, 400, "{path}: {body}");
            assert!(body["error"].is_string(), "{path}: {body}");
        }
    }
    let (status, body) = global_apis[1]
        .get_json("/aggregate?prefix=a&max_staleness_ms=soon")
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = asia[0]
        .api()
        .get_json("/aggregate?prefix=a&allow_partial=true")
        .await;
    assert_eq!(
        status, 400,
        "a datacenter aggregator has no staleness keys: {body}"
    );

    // `geoctl sum` asks the global tier and prints the same sums.
    let expected = &sums[5].2;
    let stdout = geoctl(&topology, &["sum", "alpha:", "--window", "60"]).await;
    assert!(
        stdout.contains(&format!("\nsum        {}\n", expected["all"][0])),
        "{stdout}"
    );
    assert!(stdout.contains("\ncounters   12\n"), "{stdout}");
    assert!(stdout.contains("\ncomplete   yes\n"), "{stdout}");
    let stdout = geoctl(&topology, &["sum", "beta:", "--json"]).await;
    let body: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(summed(&body), sums[1].2["all"], "{body}");
}

/// Runs `geoctl --config <topology> args...`, which must succeed; its standard output.
async fn geoctl(topology: &TestTopology, args: &[&str]) -> String {
    let mut command = std::process::Command::new(binary("geoctl"));
    command.arg("--config").arg(&topology.path).args(args);
    let output = tokio::task::spawn_blocking(move || command.output().expect("run geoctl"))
        .await
        .expect("geoctl runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "geoctl {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
