//! The monitoring files under `deploy/` against a running cluster (docs/operations.md,
//! "Monitoring"): every metric the Grafana dashboard and the Prometheus alert rules (and their
//! unit tests) name is exported by some tier, the dashboard is a whole Grafana document, and
//! every tier's `/metrics` in the Prometheus text format passes `promtool check metrics`. That
//! last check runs where promtool is installed; `E2E_PROMTOOL=1` (scripts/test.sh) requires it.

use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use geocount_test_support::{Method, NodeProcess, TestCluster, TestTopology};
use serde_json::Value;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

fn read(path: &str) -> String {
    let full = repository().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The sample names a scrape in the OpenMetrics format can hold, from its `# TYPE` lines: a
/// counter's `_total`, a histogram's `_bucket`, `_sum` and `_count`, any other's own name.
fn sample_names(openmetrics: &str, names: &mut BTreeSet<String>) {
    for line in openmetrics.lines() {
        let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|t| t.split_once(' '))
        else {
            continue;
        };
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_owned());
            }
        }
    }
}

/// Every `geocount_...` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("geocount_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// Every query of the dashboard, checking on the way that it is a whole Grafana dashboard:
/// a uid, a title, a schema version, panels with distinct ids placed on the 24-column grid,
/// each query with a `refId` and the dashboard's datasource variable.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    assert_eq!(dashboard["uid"], "geocount");
    assert!(dashboard["title"].is_string());
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("variables");
    assert!(
        variables
            .iter()
            .any(|v| v["name"] == "datasource" && v["query"] == "prometheus"),
        "no Prometheus datasource variable"
    );
    let mut ids = HashSet::new();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let id = panel["id"].as_u64().expect("a panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(x + w <= 24 && grid["h"].as_u64().unwrap() > 0, "{panel}");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{panel}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{panel}");
        for target in targets {
            assert!(target["refId"].is_string(), "{target}");
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{target}");
            queries.push(target["expr"].as_str().expect("a query").to_owned());
        }
    }
    queries
}

/// `promtool check metrics` of `process`'s `/metrics`, asked for in the text format 0.0.4:
/// `None` when promtool is not installed and not required.
async fn lint(process: &NodeProcess) -> Option<()> {
    let installed = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !installed {
        assert!(
            std::env::var_os("E2E_PROMTOOL").is_none(),
            "E2E_PROMTOOL is set and promtool is not installed"
        );
        return None;
    }
    let accept = [("accept", "text/plain; version=0.0.4")];
    let answer = process
        .api()
        .send(Method::GET, "/metrics", &accept, Vec::new())
        .await
        .expect("an answer");
    let content_type = answer.headers["content-type"].to_str().unwrap();
    assert!(content_type.starts_with("text/plain; version=0.0.4"));
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(&answer.body)
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics of {}:\n{said}",
        process.addr
    );
    Some(())
}

#[tokio::test]
async fn the_dashboard_and_the_alerts_use_only_exported_metrics_and_each_scrape_is_clean() {
    let cluster = TestCluster::start(TestTopology::new(&[("USA_0", 2), ("ASIA_0", 1)], "")).await;
    let shard = cluster.nth_shard(0).api();
    assert_eq!(shard.add("deploy:likes", 3).await.unwrap().0, 200);
    let processes: Vec<&NodeProcess> = cluster
        .shards
        .iter()
        .flatten()
        .chain(cluster.aggregators.iter().flatten())
        .chain([&cluster.global])
        .collect();
    let mut exported = BTreeSet::new();
    let mut linted = 0;
    for process in &processes {
        let text = process.api().metrics().await.expect("metrics");
        sample_names(&text, &mut exported);
        linted += usize::from(lint(process).await.is_some());
    }
    assert!(linted == 0 || linted == processes.len());

    let dashboard: Value = serde_json::from_str(&read("deploy/grafana/geocount.json")).unwrap();
    let queries = dashboard_queries(&dashboard);
    let mut used = metric_names(&queries.join("\n"));
    assert!(used.len() >= 20, "the dashboard names only {used:?}");
    for rules in [
        "deploy/prometheus/alerts.yml",
        "deploy/prometheus/alerts.test.yml",
    ] {
        used.extend(metric_names(&read(rules)));
    }
    let missing: Vec<&String> = used.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "named in deploy/ but exported by no tier: {missing:?}\nexported: {exported:?}"
    );
    // Every role's metrics are on the dashboard.
    for prefix in [
        "geocount_shard_",
        "geocount_datacenter_",
        "geocount_global_",
    ] {
        assert!(used.iter().any(|name| name.starts_with(prefix)), "{prefix}");
    }
}
