//! Slots are fenced: a node started with a stale topology, listening at the address the
//! datacenter pulls for another slot, cannot feed its writes into the slot it believes it owns
//! (with TLS its certificate does not even let it be pulled there); a second process serving a
//! slot takes no writes; and a process announces no slot but its own.

use std::time::Duration;

use geocount_model::wire::{Cursor, Puller, SyncRequest};
use geocount_test_support::access::WRITER;
use geocount_test_support::{Method, NodeProcess, TestTopology, eventually};

/// Starts a new shard node `name` for slot `slot` of `USA_0` with its own data directory and a
/// copy of `topology` in which `from` reads `to`, listening at `listen`.
async fn start_misconfigured(
    topology: &TestTopology,
    name: &str,
    from: impl std::fmt::Display,
    to: impl std::fmt::Display,
    slot: u32,
    listen: std::net::SocketAddr,
) -> NodeProcess {
    let text = std::fs::read_to_string(&topology.path)
        .unwrap()
        .replace(&from.to_string(), &to.to_string());
    let file = topology.dir().join(format!("{name}.toml"));
    std::fs::write(&file, text).unwrap();
    let data_dir = topology.dir().join(format!("{name}-data"));
    let args = [
        "--config",
        file.to_str().unwrap(),
        "--dc",
        "USA_0",
        "--slot",
        &slot.to_string(),
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]
    .map(String::from);
    let first = ["--restore", "empty"].map(String::from);
    NodeProcess::start_first("shard-node", name, &args, &first, listen, topology.dir()).await
}

/// USA_0 of two slots: its topology, and the global aggregator, USA_0's and slot 0's node
/// running (slot 1 is each test's own).
async fn start_slot_0() -> (TestTopology, [NodeProcess; 3]) {
    let topology = TestTopology::new(&[("USA_0", 2)], "restore_timeout_ms = 200");
    let processes = [
        topology.start_global_aggregator().await,
        topology.start_datacenter_aggregator("USA_0").await,
        topology.start_shard("USA_0", 0).await,
    ];
    (topology, processes)
}

/// Waits until a metric line of `api` starting with `prefix` counts more than 0.
async fn until_counted(api: &geocount_test_support::Api, prefix: &str, what: &str) {
    eventually(Duration::from_secs(10), what, || async {
        let text = api.metrics().await?;
        text.lines()
            .any(|l| l.starts_with(prefix) && !l.ends_with(" 0"))
            .then_some(())
    })
    .await;
}

/// Waits until `api`'s node says it serves `slot` twice (503), naming the slot.
async fn told_served_twice(api: &geocount_test_support::Api, slot: &str) {
    let health = api
        .read_until(Duration::from_secs(10), "/healthz", |s, b| {
            s == 503 && b["status"] == "slot served twice"
        })
        .await;
    assert!(
        health["conflict"].as_str().unwrap().contains(slot),
        "{health}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_stale_topology_cannot_feed_another_slot() {
    let (topology, processes) = start_slot_0().await;
    let [_global, aggregator, owner] = processes;

    // The same topology with the two shard addresses swapped: the stale node believes it owns
    // slot 0 and listens where the datacenter pulls slot 1.
    let (a0, a1) = (
        topology.shard_addr("USA_0", 0),
        topology.shard_addr("USA_0", 1),
    );
    let (from, to) = (format!("\"{a0}\", \"{a1}\""), format!("\"{a1}\", \"{a0}\""));
    let ids = owner
        .api()
        .ids_routed_to("fenced", "DC_USA_0_VAL_0", 5)
        .await;
    for id in &ids {
        assert_eq!(owner.api().add(id, 5).await.unwrap().0, 200);
    }
    // The owner is stopped while the stale node starts and writes: heard by the owner, the
    // stale node would soon be told that its slot is served twice and refuse the writes, and
    // this test is about writes it did take.
    owner.pause();
    let stale = start_misconfigured(&topology, "stale", from, to, 0, a1).await;
    // Later, so newer by version: on its own copy of "slot 0".
    for id in &ids {
        assert_eq!(stale.api().add(id, 100).await.unwrap().0, 200);
    }
    owner.resume();

    let agg = aggregator.api();
    for id in &ids {
        agg.read_until(
            Duration::from_secs(10),
            &format!("/counter/{id}"),
            |s, _| s == 200,
        )
        .await;
    }
    // Several pulls of both addresses later, only the owner's writes count.
    tokio::time::sleep(Duration::from_millis(600)).await;
    for id in &ids {
        let (_, body) = agg.read(id).await;
        assert_eq!(
            body["value"], 5,
            "{id}: only the owner's writes count: {body}"
        );
    }
    // Without TLS the stale node's pages arrive and are refused, being of another slot. With
    // TLS no page does: its certificate names slot 0's process, not the one configured at the
    // address it listens at, and the aggregator and the owner hang up before asking.
    let tls = topology.topology.tls.is_some();
    if !tls {
        let prefix = "geocount_datacenter_entries_refused_total{reason=\"slot\"}";
        until_counted(&agg, prefix, "the aggregator refuses the stale pages").await;
    }
    let (_, health) = agg.get_json("/healthz").await;
    let error = health["slots"]["DC_USA_0_VAL_1"]["last_error"].to_string();
    assert!(error.contains("DC_USA_0_VAL_0"), "{health}");
    if !tls {
        // The owner refuses the stale node's pages too.
        let prefix = "geocount_shard_entries_refused_total";
        until_counted(&owner.api(), prefix, "the owner refuses the stale pages").await;
    }
    for id in &ids {
        assert_eq!(owner.api().value(id).await, 5);
    }
}

/// A second node started for a slot another node already serves (its topology gives it another
/// address): the datacenter aggregator hears both at once, says so in `/healthz` and its
/// metrics, and the one not at the slot's address takes no writes until the operator stops
/// one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_for_a_served_slot_is_detected_and_takes_no_writes() {
    let (topology, processes) = start_slot_0().await;
    let [_global, aggregator, _owner0] = processes;
    let owner = topology.start_shard("USA_0", 1).await;

    let served = topology.shard_addr("USA_0", 1);
    let elsewhere = geocount_test_support::ports::free_addr();
    let mut second =
        start_misconfigured(&topology, "second", &served, &elsewhere, 1, elsewhere).await;

    let second_api = second.api();
    told_served_twice(&second_api, "DC_USA_0_VAL_1").await;
    let (status, body) = second_api.add("twice", 1).await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("two processes"),
        "{body}"
    );

    let (_, agg_health) = aggregator.api().get_json("/healthz").await;
    assert_eq!(agg_health["status"], "slot served twice", "{agg_health}");
    let text = aggregator.api().metrics().await.unwrap();
    assert!(
        text.lines()
            .any(|l| l == "geocount_datacenter_slot_conflicts 1"),
        "{text}"
    );
    // The node that served the slot first keeps taking writes.
    let (_, owner_health) = owner.api().get_json("/healthz").await;
    assert_eq!(owner_health["status"], "ok", "{owner_health}");
    let (status, _) = owner.api().add("twice", 1).await.unwrap();
    assert_eq!(status, 200);

    // The operator stops the second node: the conflict ends once it has been silent a while.
    second.kill9();
    aggregator
        .api()
        .read_until(Duration::from_secs(15), "/healthz", |s, b| {
            s == 200 && b["status"] == "ok"
        })
        .await;
}

/// A process allowed on `/sync` (with `[auth]`: another slot's node, proving its own name)
/// announces a slot that is not its own: the aggregator refuses the announcement (403 naming
/// the caller) and nothing changes, so the slot's real node keeps taking writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announcement_of_another_slot_is_refused_and_changes_nothing() {
    let topology = geocount_test_support::access::topology(&[("USA_0", 2)]);
    let aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let owner = topology.start_shard("USA_0", 0).await;
    let _other = topology.start_shard("USA_0", 1).await;

    // Slot 1's process, with its own key (and certificate), announces slot 0 as an older
    // incarnation, a few times over several of the aggregator's pulls of slot 0.
    let posing = topology.api_as(aggregator.addr, "DC_USA_0_VAL_1");
    let request = SyncRequest {
        descriptions: Some(Cursor::Start),
        puller: Some(Puller {
            slot: "DC_USA_0_VAL_0".to_owned(),
            incarnation: 1,
            nonce: 1,
        }),
        ..SyncRequest::default()
    };
    let body = postcard::to_allocvec(&request).unwrap();
    for _ in 0..10 {
        let answer = posing
            .send(Method::POST, "/sync", &[], body.clone())
            .await
            .unwrap();
        let refusal = answer.json();
        assert_eq!(answer.status, 403, "{refusal}");
        assert_eq!(refusal["process"], "DC_USA_0_VAL_1", "{refusal}");
        assert!(
            refusal["error"]
                .as_str()
                .unwrap()
                .contains("DC_USA_0_VAL_0"),
            "{refusal}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (_, health) = aggregator.api().get_json("/healthz").await;
    assert_eq!(health["status"], "ok", "{health}");
    let (_, owner_health) = owner.api().get_json("/healthz").await;
    assert_eq!(owner_health["status"], "ok", "{owner_health}");
    let writer = owner.api().with_token(WRITER);
    let (status, body) = writer.add("announced", 1).await.unwrap();
    assert_eq!(status, 200, "{body}");
}

/// Waits until one of `nodes` says in `/healthz` that it serves its slot beside another
/// process.
async fn until_one_is_told(nodes: [&NodeProcess; 2]) {
    eventually(
        Duration::from_secs(10),
        "one of the two takes no writes",
        || async {
            for node in nodes {
                let (_, health) = node.api().get_json("/healthz").await;
                if health["status"] == "slot served twice" {
                    return Some(());
                }
            }
            None
        },
    )
    .await;
}

/// A slot moved to a new address while its old process kept running at the old one: of the
/// two, the one not at the slot's configured address refuses writes, though it is the older,
/// and the node at the address keeps taking them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_processes_of_a_slot_the_one_not_at_its_address_takes_no_writes() {
    let (topology, processes) = start_slot_0().await;
    let [_global, aggregator, _owner0] = processes;
    // The old process of slot 1, still at its old address (its topology says so).
    let served = topology.shard_addr("USA_0", 1);
    let old_address = geocount_test_support::ports::free_addr();
    let old = start_misconfigured(&topology, "old", &served, &old_address, 1, old_address).await;
    assert_eq!(old.api().add("moved", 1).await.unwrap().0, 200);
    // The slot's process at its configured address, started later.
    let new = topology.start_shard("USA_0", 1).await;

    aggregator
        .api()
        .read_until(Duration::from_secs(10), "/healthz", |_, b| {
            b["status"] == "slot served twice"
        })
        .await;
    until_one_is_told([&old, &new]).await;
    let (_, old_health) = old.api().get_json("/healthz").await;
    assert_eq!(old_health["status"], "slot served twice", "{old_health}");
    let (_, new_health) = new.api().get_json("/healthz").await;
    assert_eq!(new_health["status"], "ok", "{new_health}");
    let (status, body) = new.api().add("moved", 1).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = old.api().add("moved", 1).await.unwrap();
    assert_eq!(status, 503, "{body}");
}

/// Copies directory `from` to `to`, with everything under it.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A copy of a node's data directory started elsewhere beside the node: both carry the same
/// incarnation, yet the aggregator tells the two processes apart, and the copy (not at the
/// slot's address) takes no writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_data_directory_is_detected_and_the_copy_takes_no_writes() {
    let (topology, processes) = start_slot_0().await;
    let [_global, aggregator, _owner0] = processes;
    let mut owner = topology.start_shard("USA_0", 1).await;
    assert_eq!(owner.api().add("copied", 1).await.unwrap().0, 200);
    // The operator copies the stopped node's data directory, starts the node again, and a
    // second process from the copy with a topology giving the slot another address.
    assert!(owner.terminate().success(), "{}", owner.log_tail());
    copy_dir(
        &topology.shard_data_dir("USA_0", 1),
        &topology.dir().join("copy-data"),
    );
    owner.restart().await;
    let served = topology.shard_addr("USA_0", 1);
    let elsewhere = geocount_test_support::ports::free_addr();
    let copy = start_misconfigured(&topology, "copy", &served, &elsewhere, 1, elsewhere).await;
    let (_, owner_health) = owner.api().get_json("/healthz").await;
    let (_, copy_health) = copy.api().get_json("/healthz").await;
    assert_eq!(copy_health["incarnation"], owner_health["incarnation"]);

    told_served_twice(&copy.api(), "DC_USA_0_VAL_1").await;
    let (status, body) = copy.api().add("copied", 1).await.unwrap();
    assert_eq!(status, 503, "{body}");
    let (_, agg_health) = aggregator.api().get_json("/healthz").await;
    assert_eq!(agg_health["status"], "slot served twice", "{agg_health}");
    let (_, owner_health) = owner.api().get_json("/healthz").await;
    assert_eq!(owner_health["status"], "ok", "{owner_health}");
    assert_eq!(owner.api().add("copied", 1).await.unwrap().0, 200);
}
