//! End-to-end test of `geocount-cluster --wan`: the launcher starts the WAN emulator and a
//! two-region topology (the global aggregator and USA_0 in USA, ASIA_0 in ASIA, 60 ms apart),
//! every pull between ASIA_0 and the global aggregator goes through the emulator's links, and so
//! does a shard node's ask for a bounded counter's rights in the other region.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use geocount_test_support::process::bin_dir;
use geocount_test_support::{Api, Method, NodeProcess, TestTopology, eventually};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

/// The one-way delay between USA and ASIA.
const DELAY_MS: u64 = 60;
/// How long the launcher may take until its table is printed.
const STARTUP: Duration = Duration::from_secs(60);
/// How long a value or a staleness change may take to reach the global aggregator.
const CONVERGE: Duration = Duration::from_secs(10);
const COUNTER: &str = "wan:likes";

/// USA_0 and ASIA_0, one shard each, with a `[wan]` section whose control API is on a free port.
fn topology() -> TestTopology {
    let control = geocount_test_support::ports::free_addr();
    let wan = format!(
        "[wan]\nglobal_region = \"USA\"\ncontrol = \"{control}\"\n\n\
         [[wan.links]]\nbetween = [\"ASIA\", \"USA\"]\ndelay_ms = {DELAY_MS}\n"
    );
    TestTopology::with_extra(
        &[("USA_0", 1), ("ASIA_0", 1)],
        "restore_timeout_ms = 200",
        &wan,
    )
}

/// The emulator's view of link `name`.
async fn link(control: &Api, name: &str) -> Value {
    let (status, body) = control.get_json(&format!("/links/{name}")).await;
    assert_eq!(status, 200, "{name}: {body}");
    body
}

/// The PID the launcher's table gives the process named `name`.
fn pid_in_table(output: &str, name: &str) -> i32 {
    output
        .lines()
        .find_map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            if cells.get(1) == Some(&name) {
                cells.get(3)?.parse().ok()
            } else {
                None
            }
        })
        .unwrap_or_else(|| panic!("no row for {name} in:\n{output}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_region_pulls_pass_through_the_emulated_wan() {
    let topology = topology();
    let t = &topology.topology;
    let control_addr = t.wan.as_ref().expect("[wan]").control;
    let asia = t.datacenter("ASIA_0").expect("ASIA_0");
    let args: Vec<String> = [
        "--config",
        &topology.path.display().to_string(),
        "--bin-dir",
        &bin_dir().display().to_string(),
        "--data-dir",
        &topology.dir().join("run").display().to_string(),
        "--wan",
    ]
    .map(str::to_owned)
    .to_vec();
    // Healthy once the global aggregator answers (over TLS with `E2E_TLS=1`; the emulator it
    // starts first never speaks TLS). The table comes when all are healthy.
    let mut launcher = NodeProcess::start(
        "geocount-cluster",
        "launcher",
        &args,
        t.global.listen,
        topology.dir(),
    )
    .await;
    launcher.terminate_on_drop();
    let output = launcher
        .wait_for_log("Ctrl-C stops the cluster", STARTUP)
        .await;
    let emulator_row = output.lines().find(|l| l.starts_with("wan-emulator"));
    assert!(
        emulator_row.is_some_and(|row| row.contains(&control_addr.to_string())),
        "{output}"
    );

    // Only ASIA_0's connections cross regions: one link each way between the aggregators and
    // between the shard nodes, shaped as [wan] says.
    let control = Api::plain(control_addr);
    let (_, links) = control.get_json("/links").await;
    let names: Vec<&str> = links["links"]
        .as_array()
        .expect("links")
        .iter()
        .map(|l| l["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "global-to-ASIA_0",
            "ASIA_0-to-global",
            "USA_0-to-DC_ASIA_0_VAL_0",
            "ASIA_0-to-DC_USA_0_VAL_0"
        ]
    );
    let to_asia = link(&control, "USA_0-to-DC_ASIA_0_VAL_0").await;
    let to_usa = link(&control, "ASIA_0-to-DC_USA_0_VAL_0").await;
    assert_eq!(to_asia["target"], asia.shards[0].to_string());
    assert_eq!(
        to_usa["target"],
        topology.shard_addr("USA_0", 0).to_string()
    );
    assert_eq!(
        (to_asia["delay_ms"].as_u64(), to_usa["delay_ms"].as_u64()),
        (Some(DELAY_MS), Some(DELAY_MS))
    );
    let down = link(&control, "global-to-ASIA_0").await;
    let up = link(&control, "ASIA_0-to-global").await;
    assert_eq!(down["target"], asia.aggregator.to_string());
    assert_eq!(up["target"], t.global.listen.to_string());
    assert_eq!(
        (down["delay_ms"].as_u64(), up["delay_ms"].as_u64()),
        (Some(DELAY_MS), Some(DELAY_MS))
    );

    // (a) A write in the remote region reaches the global aggregator, with one in USA.
    let usa_shard = Api::new(topology.shard_addr("USA_0", 0));
    let asia_shard = Api::new(topology.shard_addr("ASIA_0", 0));
    let (status, body) = asia_shard.add(COUNTER, 5).await.expect("write ASIA_0");
    assert_eq!(status, 200, "{body}");
    let (status, body) = usa_shard.add(COUNTER, 2).await.expect("write USA_0");
    assert_eq!(status, 200, "{body}");
    let global = Api::new(t.global.listen);
    let path = format!("/counter/{COUNTER}?max_staleness_ms=2000");
    let body = global
        .read_until(CONVERGE, &path, |status, body| {
            status == 200 && body["value"] == 7
        })
        .await;
    assert_eq!(body["datacenters"]["ASIA_0"]["value"], 5, "{body}");

    // (b) Both tiers' pulls went through the links (the downward pull of descriptions runs on
    // its own interval, so it may cross its link after the sums have converged)...
    for name in ["global-to-ASIA_0", "ASIA_0-to-global"] {
        let control = &control;
        eventually(
            CONVERGE,
            &format!("a pull answered through {name}"),
            || async move {
                let link = link(control, name).await;
                let carried = link["bytes_to_target"].as_u64().expect("bytes_to_target");
                let answered = link["bytes_to_client"].as_u64().expect("bytes_to_client");
                (carried > 0 && answered > 0).then_some(())
            },
        )
        .await;
    }
    // ...and paid the delay: a request through the proxy takes a round trip of it,
    let proxy: SocketAddr = up["listen"]
        .as_str()
        .expect("listen")
        .parse()
        .expect("address");
    let through_wan = Api::new(proxy);
    let sent = Instant::now();
    let answer = through_wan
        .get("/healthz")
        .await
        .expect("healthz through the WAN");
    let round_trip = sent.elapsed();
    assert_eq!(answer.status, 200);
    assert!(
        round_trip >= Duration::from_millis(2 * DELAY_MS),
        "a round trip through the link took {round_trip:?}"
    );
    // and each of the global aggregator's pulls of ASIA_0 does too: its copy is as old as the
    // pull's request (less ASIA_0's own staleness), heard when the answer arrived, so the two
    // differ by at least a round trip (2 × 60 ms; 1 ms for the clock's rounding). Without the
    // emulator the smallest difference would be a loopback round trip plus ASIA_0's staleness.
    let mut least = u64::MAX;
    for _ in 0..8 {
        let (status, body) = global.get_json("/datacenters").await;
        assert_eq!(status, 200, "{body}");
        let asia = &body["datacenters"]["ASIA_0"];
        let staleness = asia["staleness_ms"].as_u64().expect("staleness_ms");
        let heard = asia["last_heard_ms_ago"]
            .as_u64()
            .expect("last_heard_ms_ago");
        least = least.min(staleness.saturating_sub(heard));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        least >= 2 * DELAY_MS - 1,
        "ASIA_0's copy lagged its last answer by only {least} ms"
    );

    // (b2) A shard node's ask for rights crosses its link: with max 2, ASIA_0's home slot
    // holds 1; once spent, the next increment there waits for USA_0's through
    // ASIA_0-to-DC_USA_0_VAL_0, a round trip at least; then both shares are spent.
    let bounded = "wan:bounded";
    let (status, body) = asia_shard
        .create(serde_json::json!({"id": bounded, "max": 2}))
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = asia_shard.add(bounded, 1).await.expect("write ASIA_0");
    assert_eq!(status, 200, "{body}");
    let sent = Instant::now();
    let (status, body) = asia_shard.add(bounded, 1).await.expect("write ASIA_0");
    let waited = sent.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(
        waited >= Duration::from_millis(2 * DELAY_MS),
        "rights from USA_0 came in {waited:?}"
    );
    let asked = link(&control, "ASIA_0-to-DC_USA_0_VAL_0").await;
    assert!(
        asked["bytes_to_target"].as_u64() > Some(0),
        "nothing crossed ASIA_0-to-DC_USA_0_VAL_0: {asked}"
    );
    let (status, body) = asia_shard.add(bounded, 1).await.expect("write ASIA_0");
    assert_eq!(
        (status, &body["bound"]),
        (409, &Value::from("max")),
        "{body}"
    );

    // (c) Cut: ASIA_0 goes stale at the global aggregator, and a write there is held back.
    let cut = control
        .send(Method::POST, "/links/global-to-ASIA_0/cut", &[], "")
        .await
        .expect("cut");
    assert_eq!(cut.status, 200);
    let (status, body) = asia_shard.add(COUNTER, 3).await.expect("write ASIA_0");
    assert_eq!(status, 200, "{body}");
    let path = format!("/counter/{COUNTER}?max_staleness_ms=1000");
    let body = global
        .read_until(CONVERGE, &path, |status, _| status == 503)
        .await;
    assert_eq!(
        body["stale_datacenters"],
        serde_json::json!(["ASIA_0"]),
        "{body}"
    );
    assert!(
        body["error"].as_str().is_some_and(|e| e.contains("ASIA_0")),
        "{body}"
    );
    let (status, partial) = global
        .global_read(COUNTER, "max_staleness_ms=1000&allow_partial=true")
        .await;
    assert_eq!(
        (status, &partial["complete"]),
        (200, &Value::Bool(false)),
        "{partial}"
    );
    assert_eq!(partial["value"], 7, "{partial}");

    // Heal: fresh again, with the exact total.
    let heal = control
        .send(Method::POST, "/links/global-to-ASIA_0/heal", &[], "")
        .await
        .expect("heal");
    assert_eq!(heal.status, 200);
    let body = global
        .read_until(CONVERGE, &path, |status, body| {
            status == 200 && body["value"] == 10
        })
        .await;
    assert_eq!(body["complete"], true, "{body}");

    // A dying emulator is reported like any other process; the launcher keeps running.
    let emulator = pid_in_table(&output, "wan-emulator");
    kill(Pid::from_raw(emulator), Signal::SIGKILL).expect("kill the emulator");
    launcher
        .wait_for_log("wan-emulator exited unexpectedly", CONVERGE)
        .await;
    eventually(CONVERGE, "ASIA_0 stale without the emulator", || async {
        let (status, _) = global.global_read(COUNTER, "max_staleness_ms=1000").await;
        (status == 503).then_some(())
    })
    .await;

    let status = launcher.terminate();
    assert!(status.success(), "the launcher exited with {status}");
    let output = std::fs::read_to_string(&launcher.log).expect("launcher log");
    assert!(output.contains("stopped 5 processes"), "{output}");
}
