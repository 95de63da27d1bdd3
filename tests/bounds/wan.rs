//! The cut-off region's test runs the launcher's emulated WAN (`geocount-cluster --wan`):
//! its topology, its start, cutting and healing one datacenter's links, and reading who a
//! refusal says could not be asked for rights.

use std::time::Duration;

use geocount_test_support::process::bin_dir;
use geocount_test_support::{Api, Method, NodeProcess, TestTopology};
use serde_json::Value;

/// USA_0 (with the global aggregator), EUROPE_0 and ASIA_0 (two shard nodes), each region
/// 5 ms from the others, with `shard_toml` in `[shard]`.
pub fn topology(shard_toml: &str) -> TestTopology {
    let control = geocount_test_support::ports::free_addr();
    let mut wan = format!("[wan]\nglobal_region = \"USA\"\ncontrol = \"{control}\"\n");
    for pair in [["ASIA", "USA"], ["EUROPE", "USA"], ["ASIA", "EUROPE"]] {
        wan.push_str(&format!(
            "\n[[wan.links]]\nbetween = {pair:?}\ndelay_ms = 5\n"
        ));
    }
    let datacenters = [("USA_0", 1), ("EUROPE_0", 1), ("ASIA_0", 2)];
    TestTopology::with_extra(&datacenters, shard_toml, &wan)
}

/// The launcher running `topology` behind the emulator, once every process is healthy; it
/// stops them all when dropped.
pub async fn start(topology: &TestTopology) -> NodeProcess {
    let args: Vec<String> = [
        "--config",
        &topology.path.display().to_string(),
        "--bin-dir",
        &bin_dir().display().to_string(),
        "--data-dir",
        &topology.dir().join("run").display().to_string(),
        "--wan",
        "--new-cluster",
    ]
    .map(str::to_owned)
    .to_vec();
    let global = topology.topology.global.listen;
    let mut launcher = NodeProcess::start(
        "geocount-cluster",
        "launcher",
        &args,
        global,
        topology.dir(),
    )
    .await;
    launcher.terminate_on_drop();
    launcher
        .wait_for_log("Ctrl-C stops the cluster", Duration::from_secs(60))
        .await;
    launcher
}

/// Cuts (`action` "cut") or heals every link of the emulator at `control` whose name has
/// `dc` in it (both ways, between the aggregators and between the shard nodes); their names.
pub async fn every_link_of(control: &Api, dc: &str, action: &str) -> Vec<String> {
    let (status, links) = control.get_json("/links").await;
    assert_eq!(status, 200, "{links}");
    let mut names = Vec::new();
    for link in links["links"].as_array().expect("links") {
        let name = link["name"].as_str().expect("name");
        if name.contains(dc) {
            let answer = control
                .send(Method::POST, &format!("/links/{name}/{action}"), &[], "")
                .await
                .expect("control API");
            assert_eq!(answer.status, 200, "{action} {name}: {}", answer.json());
            names.push(name.to_owned());
        }
    }
    names
}

/// Checks that a refusal names `datacenters` as not asked for their rights (none: says no
/// datacenter went unasked).
pub fn assert_unasked(body: &Value, datacenters: &[&str]) {
    let error = body["error"].as_str().unwrap_or_default();
    match error.split_once("(datacenters ") {
        None => assert!(
            datacenters.is_empty(),
            "no datacenter named unasked: {body}"
        ),
        Some((_, note)) => {
            let named = note.strip_suffix(" could not be asked for their rights)");
            let named: Vec<&str> = named.expect(error).split(", ").collect();
            assert_eq!(named, datacenters, "{body}");
        }
    }
}
