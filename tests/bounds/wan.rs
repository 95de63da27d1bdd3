//! Bounded counters across regions of the launcher's emulated WAN (`geocount-cluster
//! --wan`): a region whose links are cut spends only the rights it held, and writes that wait
//! for another region's rights through a node that forwards them are answered.

use std::time::Duration;

use geocount_test_support::process::bin_dir;
use geocount_test_support::{Api, Method, NodeProcess, TestTopology};
use serde_json::{Value, json};

use super::{SHARD_TOML, applied, assert_refused, create_bounded, global_total, up_rights, write};

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

/// Writes 1 to `id` through `apis` in turn, `count` times: how many were acknowledged, and
/// the refusals' answers.
async fn spend_ones(apis: &[Api], id: &str, count: usize) -> (i64, Vec<(u16, Value)>) {
    let mut acknowledged = 0;
    let mut refused = Vec::new();
    for n in 0..count {
        match write(&apis[n % apis.len()], id, 1).await {
            (200, _) => acknowledged += 1,
            answer => refused.push(answer),
        }
    }
    (acknowledged, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_region_spends_only_its_rights() {
    const ID: &str = "quota:cut";
    const MAX: i64 = 30;
    let topology = topology(SHARD_TOML);
    let t = &topology.topology;
    let control = Api::plain(t.wan.as_ref().expect("[wan]").control);
    let mut launcher = start(&topology).await;
    let shard = |dc: &str, slot: usize| Api::new(topology.shard_addr(dc, slot));
    let (usa, europe) = (shard("USA_0", 0), shard("EUROPE_0", 0));
    let asia = [shard("ASIA_0", 0), shard("ASIA_0", 1)];
    let global = Api::new(t.global.listen);
    create_bounded(&usa, ID, None, Some(MAX)).await;
    applied(&asia[0], ID, 2).await;

    // What ASIA_0's slots hold before the cut is all it may spend during it.
    let held = up_rights(&asia, ID).await;
    assert_eq!(held, 8, "ASIA_0's share (10) less its 2 spent");
    let cut = every_link_of(&control, "ASIA_0", "cut").await;
    // Its shard nodes' calls to other regions' and theirs to it pass links too (rights asks).
    assert!(
        cut.iter().any(|l| l.starts_with("ASIA_0-to-DC_"))
            && cut.iter().any(|l| l.contains("-to-DC_ASIA_0_")),
        "no link between ASIA_0's shard nodes and the others: {cut:?}"
    );

    let (in_asia, refused) = spend_ones(&asia, ID, held as usize + 4).await;
    assert_eq!(
        in_asia, held,
        "ASIA_0 spends what it held, asking no one: {refused:?}"
    );
    for (status, body) in &refused {
        assert_refused(*status, body, "max", MAX);
        assert_unasked(body, &["USA_0", "EUROPE_0"]);
    }
    // The others spend theirs and each other's, never ASIA_0's.
    let (elsewhere, refused) = spend_ones(&[usa.clone(), europe.clone()], ID, 24).await;
    assert_eq!(elsewhere, 20, "{refused:?}");
    for (status, body) in &refused {
        assert_refused(*status, body, "max", MAX);
        assert_unasked(body, &["ASIA_0"]);
    }

    every_link_of(&control, "ASIA_0", "heal").await;
    let total = 2 + in_asia + elsewhere;
    assert!(total <= MAX);
    global_total(&global, ID, total).await;
    // Healed, every datacenter answers the asks: the room is spent, not out of reach. (A slot
    // that did not answer is skipped for 2 s.)
    tokio::time::sleep(Duration::from_secs(2)).await;
    for api in [&usa, &europe, &asia[1]] {
        let (status, body) = write(api, ID, 1).await;
        assert_refused(status, &body, "max", MAX);
        assert_unasked(&body, &[]);
    }
    let status = launcher.terminate();
    assert!(status.success(), "the launcher exited with {status}");
}

/// Sets the one-way delay of every link of the emulator at `control` to `delay_ms`.
async fn delay_every_link(control: &Api, delay_ms: u64) {
    let (status, links) = control.get_json("/links").await;
    assert_eq!(status, 200, "{links}");
    for link in links["links"].as_array().expect("links") {
        let name = link["name"].as_str().expect("name");
        let body = json!({ "delay_ms": delay_ms }).to_string();
        let answer = control
            .send(Method::PUT, &format!("/links/{name}"), &[], body)
            .await
            .expect("control API");
        assert_eq!(answer.status, 200, "{name}: {}", answer.json());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_forwarded_to_a_slot_asking_another_region_are_answered() {
    const ID: &str = "quota:forwarded";
    const WRITES: usize = 6;
    let topology = topology(SHARD_TOML);
    let t = &topology.topology;
    let control = Api::plain(t.wan.as_ref().expect("[wan]").control);
    let _launcher = start(&topology).await;
    let usa = Api::new(topology.shard_addr("USA_0", 0));
    create_bounded(&usa, ID, None, Some(30)).await;
    // ASIA_0's home slot spends its share; its other node forwards writes to it.
    let asia = Api::new(topology.shard_addr("ASIA_0", 0));
    let (_, route) = asia.get_json(&format!("/counter/{ID}/route")).await;
    let home = route["slots"][0]["address"].as_str().expect("home slot");
    let other = (0..2)
        .map(|slot| topology.shard_addr("ASIA_0", slot))
        .find(|addr| addr.to_string() != home)
        .expect("a node of another slot");
    applied(&Api::new(home.parse().expect("address")), ID, 10).await;

    // Regions 200 ms apart (an ask: one round trip, well within the 1 s per datacenter a
    // write waits): each concurrent write is answered, and the room is there.
    delay_every_link(&control, 200).await;
    let forwarder = Api::new(other);
    let writes = (0..WRITES).map(|_| {
        let forwarder = forwarder.clone();
        tokio::spawn(async move { write(&forwarder, ID, 1).await })
    });
    let mut answers = Vec::new();
    for writer in writes.collect::<Vec<_>>() {
        answers.push(writer.await.expect("writer"));
    }
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(statuses, [200; WRITES], "{answers:?}");
    let global = Api::new(t.global.listen);
    global_total(&global, ID, 10 + WRITES as i64).await;
}
