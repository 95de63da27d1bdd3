//! End-to-end tests of top-K trends and trending thresholds: 2 datacenters × 2 shard nodes,
//! their aggregators and the global aggregator, real binaries on loopback ports; and
//! `geoctl top` and `geoctl status` on that cluster.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use geocount_test_support::process::binary;
use geocount_test_support::{Api, TestTopology};
use serde_json::{Value, json};

/// How long a tier may take to show what was written.
const CONVERGE: Duration = Duration::from_secs(8);

async fn write(api: &Api, id: &str, delta: i64, timestamp: u64) {
    let body = json!({"delta": delta, "timestamp": timestamp});
    let (status, answer) = api.write(id, "INCREMENT", Some(body), None).await.unwrap();
    assert_eq!(status, 200, "{id}: {answer}");
}

/// `[{"id", "value"}, ...]`.
fn ranked(entries: &[(&str, i64)]) -> Value {
    entries
        .iter()
        .map(|(id, value)| json!({"id": id, "value": value}))
        .collect()
}

#[tokio::test]
async fn top_k_and_trending_per_datacenter_and_worldwide() {
    let topology = TestTopology::with_extra(
        &[("USA_0", 2), ("ASIA_0", 2)],
        "restore_timeout_ms = 200",
        "[trending]\nwindow_seconds = 300\nthresholds = {\"#\" = 50}\n",
    );
    let mut shards = Vec::new();
    for dc in ["USA_0", "ASIA_0"] {
        for slot in 0..2 {
            shards.push(topology.start_shard(dc, slot).await);
        }
    }
    let usa_dc = topology.start_datacenter_aggregator("USA_0").await;
    let global = topology.start_global_aggregator().await;
    let (usa, asia, global_api) = (shards[0].api(), shards[2].api(), global.api());

    // ASIA has no aggregator yet: the world's ranking is refused unless partial.
    let refused = global_api
        .read_until(CONVERGE, "/topk", |s, _| s == 503)
        .await;
    let stale = refused["stale_datacenters"].as_array().unwrap();
    assert!(stale.contains(&json!("ASIA_0")), "{refused}");
    assert_eq!(
        refused["datacenters"]["ASIA_0"]["heard"], false,
        "{refused}"
    );
    let (status, partial) = global_api.get_json("/topk?allow_partial=true").await;
    assert_eq!(
        (status, &partial["complete"]),
        (200, &json!(false)),
        "{partial}"
    );
    let asia_dc = topology.start_datacenter_aggregator("ASIA_0").await;

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let old = now - 1_000;
    // USA: #rust 20, #go 30, #zig 5, other:x 100. ASIA: #rust 50, #go 25, and #zig 60 long ago.
    for (id, delta) in [("#rust", 20), ("#go", 30), ("#zig", 5), ("other:x", 100)] {
        write(&usa, id, delta, now).await;
    }
    for (id, delta) in [("#rust", 50), ("#go", 25)] {
        write(&asia, id, delta, now).await;
    }
    write(&asia, "#zig", 60, old).await;
    // A unique counter is never ranked.
    let item = json!({"item": "user-1"});
    let (status, answer) = usa
        .write("#uniq", "INCREMENT", Some(item), None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");

    // Worldwide, all-time: every slot of both datacenters.
    let world_all_time = ranked(&[("other:x", 100), ("#rust", 70), ("#zig", 65), ("#go", 55)]);
    let top = global_api
        .read_until(CONVERGE, "/topk", |s, b| {
            s == 200 && b["top"] == world_all_time && b["complete"] == true
        })
        .await;
    assert_eq!(top["k"], 10);
    assert_eq!(top["prefix"], "");
    assert!(top.get("window").is_none(), "{top}");
    assert!(top["staleness_ms"].is_u64(), "{top}");
    assert_eq!(
        top["datacenters"]["USA_0"]["top"],
        ranked(&[("other:x", 100), ("#go", 30), ("#rust", 20), ("#zig", 5)])
    );
    assert_eq!(
        top["datacenters"]["ASIA_0"]["top"],
        ranked(&[("#zig", 60), ("#rust", 50), ("#go", 25)])
    );
    assert_eq!(top["datacenters"]["ASIA_0"]["heard"], true);

    // The prefix and k.
    let (status, top) = global_api.get_json("/topk?k=2&prefix=%23").await;
    assert_eq!(status, 200, "{top}");
    assert_eq!(top["top"], ranked(&[("#rust", 70), ("#zig", 65)]));
    assert_eq!((&top["k"], &top["prefix"]), (&json!(2), &json!("#")));
    assert_eq!(
        top["datacenters"]["USA_0"]["top"],
        ranked(&[("#go", 30), ("#rust", 20)])
    );

    // In the last 300 s: #zig's old hit does not count; ASIA never saw #zig in the window.
    let (status, top) = global_api.get_json("/topk?window=300").await;
    assert_eq!(status, 200, "{top}");
    assert_eq!(
        top["top"],
        ranked(&[("other:x", 100), ("#rust", 70), ("#go", 55), ("#zig", 5)])
    );
    assert_eq!(top["window"]["seconds"], 300);
    assert_eq!(
        top["datacenters"]["ASIA_0"]["top"],
        ranked(&[("#rust", 50), ("#go", 25)])
    );
    // A window around the old hit finds it alone.
    let (status, top) = global_api
        .get_json(&format!("/topk?window=300&at={}", old + 100))
        .await;
    assert_eq!(status, 200, "{top}");
    assert_eq!(top["top"], ranked(&[("#zig", 60)]));
    assert_eq!(top["datacenters"]["USA_0"]["top"], json!([]));

    // A datacenter aggregator ranks its own datacenter the same way.
    let usa_api = usa_dc.api();
    let (status, top) = usa_api.get_json("/topk?prefix=%23&k=3").await;
    assert_eq!(status, 200, "{top}");
    assert_eq!(
        top["top"],
        ranked(&[("#go", 30), ("#rust", 20), ("#zig", 5)])
    );
    assert_eq!(top["complete"], true, "{top}");
    let asia_api = asia_dc.api();
    let asia_all_time = ranked(&[("#zig", 60), ("#rust", 50), ("#go", 25)]);
    asia_api
        .read_until(CONVERGE, "/topk", |s, b| {
            s == 200 && b["top"] == asia_all_time
        })
        .await;
    let (_, top) = asia_api.get_json("/topk?window=300&k=1").await;
    assert_eq!(top["top"], ranked(&[("#rust", 50)]));

    // Trending: the `#` counters with at least 50 in the last 300 s.
    let (status, trending) = global_api.get_json("/trending?prefix=%23").await;
    assert_eq!(status, 200, "{trending}");
    assert_eq!(trending["trending"], ranked(&[("#rust", 70), ("#go", 55)]));
    assert_eq!(
        (&trending["threshold"], &trending["window"]["seconds"]),
        (&json!(50), &json!(300))
    );
    assert_eq!(trending["datacenters"]["USA_0"]["trending"], json!([]));
    assert_eq!(
        trending["datacenters"]["ASIA_0"]["trending"],
        ranked(&[("#rust", 50)]),
        "at the threshold counts"
    );
    let (status, trending) = asia_api.get_json("/trending?prefix=%23").await;
    assert_eq!(status, 200, "{trending}");
    assert_eq!(trending["trending"], ranked(&[("#rust", 50)]));
    let (_, trending) = usa_api.get_json("/trending?prefix=%23").await;
    assert_eq!(trending["trending"], json!([]));

    // Bad queries: 400 at both tiers; a prefix without a threshold: 404 naming the configured.
    for api in [&global_api, &usa_api] {
        for query in [
            "/topk?k=0",
            "/topk?k=1001",
            "/topk?k=x",
            "/topk?k=1&k=2",
            "/topk?colour=red",
            "/topk?at=5",
            "/topk?window=0",
            "/trending",
            "/trending?prefix=%23&window=60",
        ] {
            let (status, body) = api.get_json(query).await;
            assert_eq!(status, 400, "{query}: {body}");
            assert!(body["error"].is_string(), "{query}: {body}");
        }
        let (status, body) = api.get_json("/trending?prefix=%40").await;
        assert_eq!(status, 404, "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("configured: \"#\""),
            "{body}"
        );
    }
    let (status, body) = usa_api.get_json("/topk?allow_partial=true").await;
    assert_eq!(
        status, 400,
        "a datacenter aggregator has no staleness keys: {body}"
    );

    // `geoctl top` prints the same rankings, each datacenter's own value beside the world's.
    let (ok, table) = geoctl(&topology, &["top", "--once", "--prefix", "#", "--k", "3"]).await;
    assert!(ok, "geoctl top failed");
    let rows = table_rows(&table);
    assert!(
        rows.contains(&"RANK ID VALUE USA_0 ASIA_0".to_owned()),
        "{table}"
    );
    for row in ["1 #rust 70 20 50", "2 #zig 65 5 60", "3 #go 55 30 25"] {
        assert!(rows.contains(&row.to_owned()), "{row}: {table}");
    }
    // The topology's one trending prefix, at one datacenter's aggregator.
    let args = ["top", "--once", "--trending", "--dc", "ASIA_0"];
    let (ok, table) = geoctl(&topology, &args).await;
    assert!(ok, "geoctl top --trending failed");
    assert!(table.starts_with("trending \"#\": at least 50"), "{table}");
    assert_eq!(
        table_rows(&table)[3..],
        ["RANK ID VALUE", "1 #rust 50"],
        "{table}"
    );

    // `geoctl status`: a line for each datacenter and process, all well; then one shard node
    // killed is DOWN and fails the command.
    let (ok, text) = geoctl(&topology, &["status", "--json"]).await;
    let report: Value = serde_json::from_str(&text).expect("JSON");
    assert!(ok && report["healthy"] == true, "{report:#}");
    let lines = report["lines"].as_array().unwrap();
    let tiers: Vec<&str> = lines.iter().map(|l| l["tier"].as_str().unwrap()).collect();
    assert_eq!(
        tiers,
        [
            "datacenter",
            "datacenter",
            "global",
            "aggregator",
            "shard",
            "shard",
            "aggregator",
            "shard",
            "shard"
        ]
    );
    assert_eq!(lines[4]["answer"]["slot"], "DC_USA_0_VAL_0", "{report:#}");
    shards[3].kill9();
    let (ok, text) = geoctl(&topology, &["status", "--json"]).await;
    let report: Value = serde_json::from_str(&text).expect("JSON");
    assert!(!ok, "{report:#}");
    assert_eq!(
        report["unhealthy"],
        json!(["shard DC_ASIA_0_VAL_1"]),
        "{report:#}"
    );
    assert_eq!(report["lines"][8]["status"], "no answer", "{report:#}");
}

/// Runs `geoctl --config <topology> args...`: whether it exited 0, and its standard output
/// (its standard error is passed through, for the test's log).
async fn geoctl(topology: &TestTopology, args: &[&str]) -> (bool, String) {
    let mut command = std::process::Command::new(binary("geoctl"));
    command.arg("--config").arg(&topology.path).args(args);
    let output = tokio::task::spawn_blocking(move || command.output().expect("run geoctl"))
        .await
        .expect("geoctl runs");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.success(), stdout)
}

/// A table's lines with their columns one space apart.
fn table_rows(table: &str) -> Vec<String> {
    (table.lines())
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}
