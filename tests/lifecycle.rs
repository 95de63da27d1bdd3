//! End-to-end tests of a counter's life through three datacenters: reset, delete, expiry and
//! the write that sets an expiry, with a region cut off from the global tier while a reset and
//! a delete are issued (the WAN emulator's cut), and a delete followed by a lost disk.
//!
//! The rule they check (docs/architecture.md, "Reset, delete and expiry"): a reset or delete
//! wipes, in each slot, every write that slot applied before it learned of it, and none it
//! applied after; every tier agrees by the generations the records carry.

use std::time::Duration;

use geocount_test_support::process::bin_dir;
use geocount_test_support::{
    Api, Method, NodeProcess, TestCluster, TestTopology, eventually, resp,
};
use serde_json::{Value, json};

/// How long a change may take to reach every tier (descriptions go up and back down).
const CONVERGE: Duration = Duration::from_secs(15);
/// How long the launcher may take until its table is printed.
const STARTUP: Duration = Duration::from_secs(60);

/// The three datacenters: two shard nodes in USA_0, one in EU_0 and in ASIA_0.
const DATACENTERS: &[(&str, usize)] = &[("USA_0", 2), ("EU_0", 1), ("ASIA_0", 1)];

/// `INCREMENT` by `delta` through `api`, which must acknowledge it.
async fn add(api: &Api, id: &str, delta: i64) {
    let (status, body) = api.add(id, delta).await.expect("write");
    assert_eq!(status, 200, "write {id} +{delta}: {body}");
}

/// A request that must answer `want`; its JSON.
async fn expect(api: &Api, method: Method, path: &str, body: &str, want: u16) -> Value {
    let answer = api.send(method, path, &[], body.to_owned()).await.unwrap();
    assert_eq!(answer.status.as_u16(), want, "{path}: {}", answer.json());
    answer.json()
}

/// Waits until `api`'s `GET /counter/{id}` answers `status` (and `value`, for 200): for a
/// shard node, its own slot has learned of the change.
async fn reads(api: &Api, id: &str, query: &str, status: u16, value: Option<i64>) -> Value {
    eventually(
        CONVERGE,
        &format!("{id} reads {status} {value:?}"),
        || async {
            let (got, body) = api.global_read(id, query).await;
            let matches = got == status && (value.is_none() || body["value"].as_i64() == value);
            matches.then_some(body)
        },
    )
    .await
}

/// The launcher with `--wan`: USA holds the global aggregator; EU and ASIA reach it through
/// the emulator's links.
async fn wan_cluster(topology: &TestTopology) -> NodeProcess {
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
    let listen = topology.topology.global.listen;
    let mut launcher = NodeProcess::start(
        "geocount-cluster",
        "launcher",
        &args,
        listen,
        topology.dir(),
    )
    .await;
    launcher.terminate_on_drop();
    launcher
        .wait_for_log("Ctrl-C stops the cluster", STARTUP)
        .await;
    launcher
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_and_a_delete_while_a_region_is_cut_off_converge_by_the_rule() {
    let control_addr = geocount_test_support::ports::free_addr();
    let wan = format!(
        "[wan]\nglobal_region = \"USA\"\ncontrol = \"{control_addr}\"\n\n\
         [[wan.links]]\nbetween = [\"ASIA\", \"USA\"]\ndelay_ms = 5\n\n\
         [[wan.links]]\nbetween = [\"EU\", \"USA\"]\ndelay_ms = 5\n"
    );
    let topology = TestTopology::with_extra(DATACENTERS, "", &wan);
    let _launcher = wan_cluster(&topology).await;
    let control = Api::plain(control_addr);
    let shard = |dc: &str, n: usize| Api::new(topology.shard_addr(dc, n));
    let (usa, eu, asia) = (shard("USA_0", 0), shard("EU_0", 0), shard("ASIA_0", 0));
    let connected = [shard("USA_0", 0), shard("USA_0", 1), shard("EU_0", 0)];
    let global = Api::new(topology.topology.global.listen);
    let usa_aggregator = Api::new(topology.topology.datacenters[0].aggregator);
    let fresh = "max_staleness_ms=3000";
    let partial = "max_staleness_ms=3000&allow_partial=true";
    let (reset, deleted) = ("life:reset", "life:delete");

    for id in [reset, deleted] {
        add(&usa, id, 5).await;
        add(&eu, id, 7).await;
        add(&asia, id, 11).await;
        reads(&global, id, fresh, 200, Some(23)).await;
    }

    // ASIA is cut off from the global tier both ways; its writes are acknowledged locally.
    for link in ["global-to-ASIA_0", "ASIA_0-to-global"] {
        expect(
            &control,
            Method::POST,
            &format!("/links/{link}/cut"),
            "",
            200,
        )
        .await;
    }
    add(&asia, reset, 100).await;
    add(&asia, deleted, 100).await;

    // A reset issued in EU, a delete in USA, while ASIA cannot hear of either.
    let path = format!("/counter/{reset}/reset");
    let description = expect(&eu, Method::POST, &path, "", 200).await;
    assert_eq!(description["deleted"], false, "{description}");
    let path = format!("/counter/{deleted}");
    let description = expect(&usa, Method::DELETE, &path, "", 200).await;
    assert_eq!(description["deleted"], true, "{description}");

    // Every connected slot learns of both: the reset reads 0, the delete 404.
    for api in &connected {
        reads(api, reset, "", 200, Some(0)).await;
        reads(api, deleted, "", 404, None).await;
    }
    // The tiers that know of them agree at once, ASIA's stale copies included: its records
    // are of the older generation.
    reads(&global, deleted, partial, 404, None).await;
    reads(&usa_aggregator, deleted, "", 404, None).await;
    reads(&global, reset, partial, 200, Some(0)).await;

    // Writes after the connected slots learned count from zero; one makes the deleted
    // counter again.
    add(&usa, reset, 2).await;
    add(&eu, reset, 3).await;
    add(&usa, deleted, 6).await;
    reads(&global, reset, partial, 200, Some(5)).await;
    reads(&global, deleted, partial, 200, Some(6)).await;
    // ASIA still reads its own slot by the generation it knows.
    let (status, body) = asia.read(reset).await;
    assert_eq!((status, body["value"].as_i64()), (200, Some(111)), "{body}");

    // Heal: ASIA learns of both and wipes what it applied before; later writes count.
    for link in ["global-to-ASIA_0", "ASIA_0-to-global"] {
        expect(
            &control,
            Method::POST,
            &format!("/links/{link}/heal"),
            "",
            200,
        )
        .await;
    }
    reads(&asia, reset, "", 200, Some(0)).await;
    reads(&asia, deleted, "", 200, Some(0)).await;
    add(&asia, reset, 4).await;
    add(&asia, deleted, 1).await;
    // Every acknowledged write is accounted for by the rule: 5, 7, 11 and ASIA's 100 wiped by
    // the reset; 2 + 3 + 4 after it. The deleted counter holds 6 + 1, written after.
    let body = reads(&global, reset, fresh, 200, Some(9)).await;
    assert_eq!(body["datacenters"]["ASIA_0"]["value"], 4, "{body}");
    assert_eq!(body["complete"], true, "{body}");
    let body = reads(&global, deleted, fresh, 200, Some(7)).await;
    assert_eq!(body["datacenters"]["ASIA_0"]["value"], 1, "{body}");
    for dc in 0..DATACENTERS.len() {
        let aggregator = Api::new(topology.topology.datacenters[dc].aggregator);
        let (_, want) = [(0, 2), (1, 3), (2, 4)][dc];
        reads(&aggregator, reset, "", 200, Some(want)).await;
    }
    // A sum over the prefix counts both by the same rule.
    let (status, sum) = global
        .get_json("/aggregate?prefix=life:&max_staleness_ms=3000")
        .await;
    assert_eq!(status, 200, "{sum}");
    assert_eq!(
        (sum["sum"].as_i64(), sum["counters"].as_u64()),
        (Some(16), Some(2)),
        "{sum}"
    );
    // Deleted again: it leaves the sum.
    expect(
        &asia,
        Method::DELETE,
        &format!("/counter/{deleted}"),
        "",
        200,
    )
    .await;
    reads(&global, deleted, fresh, 404, None).await;
    let (_, sum) = global
        .get_json("/aggregate?prefix=life:&max_staleness_ms=3000")
        .await;
    assert_eq!(
        (sum["sum"].as_i64(), sum["counters"].as_u64()),
        (Some(9), Some(1)),
        "{sum}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_expire_everywhere_and_a_write_can_set_its_own_expiry() {
    let topology = TestTopology::new(DATACENTERS, "");
    let cluster = TestCluster::start(topology).await;
    let usa = cluster.shards[0][0].api();
    let eu = cluster.shards[1][0].api();
    let global = cluster.global.api();
    let aggregators: Vec<Api> = cluster
        .aggregators
        .iter()
        .map(|a| a.as_ref().expect("started").api())
        .collect();
    let fresh = "max_staleness_ms=3000";

    // Created with an expiry: read everywhere until it passes, then gone everywhere.
    let created = usa
        .created(json!({"id": "life:ttl", "ttlSeconds": 3}))
        .await;
    let expires = created["expiresAtMs"].as_u64().expect("expiresAtMs");
    add(&usa, "life:ttl", 5).await;
    add(&eu, "life:ttl", 2).await;
    let body = reads(&global, "life:ttl", fresh, 200, Some(7)).await;
    assert_eq!(body["expiresAtMs"].as_u64(), Some(expires), "{body}");
    reads(&global, "life:ttl", fresh, 404, None).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(now >= expires, "gone only once the expiry passed");
    for api in aggregators.iter().chain([&usa, &eu]) {
        reads(api, "life:ttl", "", 404, None).await;
    }
    // Written again: a new counter from zero, with no expiry.
    add(&eu, "life:ttl", 1).await;
    let body = reads(&global, "life:ttl", fresh, 200, Some(1)).await;
    assert!(body["expiresAtMs"].is_null(), "{body}");

    // A write that sets the expiry of the counter it makes, through a node that forwards it or
    // not: the counter is never seen without its expiry.
    let body = json!({"delta": 3, "ttlSeconds": 2});
    for (api, id) in [(&usa, "life:incrx-usa"), (&eu, "life:incrx-eu")] {
        let (status, answer) = api
            .write(id, "INCREMENT", Some(body.clone()), None)
            .await
            .unwrap();
        assert_eq!(status, 200, "{answer}");
        let seen = reads(&global, id, fresh, 200, Some(3)).await;
        assert!(seen["expiresAtMs"].as_u64().is_some(), "{seen}");
        reads(&global, id, fresh, 404, None).await;
    }

    // An expiry cleared before it passes: the counter stays.
    usa.created(json!({"id": "life:kept"})).await;
    add(&usa, "life:kept", 1).await;
    reads(&eu, "life:kept", "", 200, None).await;
    let path = "/counter/life:kept";
    let set = expect(&eu, Method::PATCH, path, r#"{"ttlSeconds": 1}"#, 200).await;
    assert!(set["expiresAtMs"].as_u64().is_some(), "{set}");
    let cleared = expect(&eu, Method::PATCH, path, r#"{"ttlSeconds": null}"#, 200).await;
    assert!(cleared["expiresAtMs"].is_null(), "{cleared}");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    reads(&global, "life:kept", fresh, 200, Some(1)).await;

    // A unique counter's reset empties its sketches: an item counted before counts again.
    usa.created(json!({"id": "life:uniq", "type": "unique"}))
        .await;
    for item in ["a", "b", "c"] {
        let body = Some(json!({ "item": item }));
        let (status, answer) = usa
            .write("life:uniq", "INCREMENT", body, None)
            .await
            .unwrap();
        assert_eq!(status, 200, "{answer}");
    }
    let counted = reads(&global, "life:uniq", fresh, 200, None).await;
    assert!(counted["value"].as_i64() >= Some(2), "{counted}");
    reads(&eu, "life:uniq", "", 200, None).await;
    expect(&eu, Method::POST, "/counter/life:uniq/reset", "", 200).await;
    reads(&global, "life:uniq", fresh, 200, Some(0)).await;
    let body = Some(json!({ "item": "a" }));
    let (status, answer) = eu
        .write("life:uniq", "INCREMENT", body, None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");
    reads(&global, "life:uniq", fresh, 200, Some(1)).await;

    // Bad input changes nothing and is a JSON 4xx.
    for (method, path, body, want) in [
        (Method::PATCH, path, r#"{"ttlSeconds": 0}"#, 400),
        (Method::PATCH, path, r#"{"ttl": 5}"#, 400),
        (Method::PATCH, path, "", 400),
        (Method::POST, "/counter/life:never-seen/reset", "", 404),
        (
            Method::PATCH,
            "/counter/life:never-seen",
            r#"{"ttlSeconds": 5}"#,
            404,
        ),
        (Method::PUT, path, "", 405),
    ] {
        let error = expect(&usa, method, path, body, want).await;
        assert!(error["error"].is_string(), "{error}");
    }
    reads(&global, "life:kept", fresh, 200, Some(1)).await;
}

/// `request` with an `Idempotency-Key`; its status and JSON.
async fn keyed(api: &Api, method: Method, path: &str, body: &str, key: &str) -> (u16, Value) {
    let headers = [("Idempotency-Key", key)];
    let answer = api
        .send(method, path, &headers, body.to_owned())
        .await
        .unwrap();
    (answer.status.as_u16(), answer.json())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_delete_or_reset_retried_through_another_node_applies_once() {
    let topology = TestTopology::new(&[("USA_0", 2)], "");
    let cluster = TestCluster::start(topology).await;
    let (one, two) = (cluster.shards[0][0].api(), cluster.shards[0][1].api());
    let global = cluster.global.api();
    let fresh = "max_staleness_ms=3000";
    add(&one, "life:keyed", 5).await;
    reads(&two, "life:keyed", "", 200, None).await;
    let path = "/counter/life:keyed";
    let (status, first) = keyed(&one, Method::DELETE, path, "", "del-1").await;
    assert_eq!(status, 200, "{first}");
    // Written again after the delete, then the delete retried through the other node: it is
    // answered as the first was, and the counter made again stays.
    reads(&two, "life:keyed", "", 404, None).await;
    add(&two, "life:keyed", 2).await;
    reads(&global, "life:keyed", fresh, 200, Some(2)).await;
    let (status, again) = keyed(&two, Method::DELETE, path, "", "del-1").await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["generation"], first["generation"], "{again}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    reads(&global, "life:keyed", fresh, 200, Some(2)).await;
    // The same key for a reset is refused: it was used for the delete.
    let reset = format!("{path}/reset");
    let (status, refused) = keyed(&one, Method::POST, &reset, "", "del-1").await;
    assert_eq!(status, 422, "{refused}");
    // A keyed reset, retried: applied once.
    let (status, _) = keyed(&two, Method::POST, &reset, "", "reset-1").await;
    assert_eq!(status, 200);
    reads(&global, "life:keyed", fresh, 200, Some(0)).await;
    add(&one, "life:keyed", 4).await;
    let (status, _) = keyed(&one, Method::POST, &reset, "", "reset-1").await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    reads(&global, "life:keyed", fresh, 200, Some(4)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_counter_stays_deleted_through_a_lost_disk() {
    let topology = TestTopology::new(&[("USA_0", 2)], "restore_timeout_ms = 300");
    let mut cluster = TestCluster::start(topology).await;
    let node = cluster.shards[0][0].api();
    let peer = cluster.shards[0][1].api();
    let global = cluster.global.api();
    let fresh = "max_staleness_ms=3000";
    // Spread over both slots, so the lost node held part of it.
    node.created(json!({"id": "life:lost", "numberOfShards": 2}))
        .await;
    for _ in 0..20 {
        add(&node, "life:lost", 1).await;
    }
    let (status, own) = node.read("life:lost").await;
    assert_eq!(status, 200, "{own}");
    assert!(own["value"].as_i64() > Some(0), "node 0 holds part: {own}");
    reads(&global, "life:lost", fresh, 200, Some(20)).await;

    expect(&peer, Method::DELETE, "/counter/life:lost", "", 200).await;
    reads(&node, "life:lost", "", 404, None).await;
    reads(&global, "life:lost", fresh, 404, None).await;

    // Node 0 loses its disk and restores its slot from the copies: the counter stays gone.
    let shard = &mut cluster.shards[0][0];
    shard.kill9();
    std::fs::remove_dir_all(cluster.topology.shard_data_dir("USA_0", 0)).unwrap();
    shard.respawn();
    shard.wait_healthy().await;
    reads(&node, "life:lost", "", 404, None).await;
    reads(&global, "life:lost", fresh, 404, None).await;
    // A write makes it again from zero.
    add(&node, "life:lost", 1).await;
    reads(&global, "life:lost", fresh, 200, Some(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_saw_a_counter_changes_its_life() {
    let datacenters = [("USA_0", 1), ("EUROPE_0", 1), ("ASIA_0", 1)];
    let cluster = TestCluster::start(TestTopology::with_resp(&datacenters, "", "")).await;
    let [usa, europe, asia] = [0, 1, 2].map(|d| cluster.shards[d][0].api());
    let global = cluster.global.api();
    let fresh = "max_staleness_ms=3000";
    // Made by writes in USA_0 and ASIA_0 alone: EUROPE_0 holds neither a record nor a
    // description of them.
    let ids = [
        "far:reset",
        "far:ttl",
        "far:written",
        "far:delete",
        "far:resp-expire",
        "far:resp-del",
    ];
    for id in ids {
        add(&usa, id, 5).await;
        add(&asia, id, 7).await;
        reads(&global, id, fresh, 200, Some(12)).await;
    }

    // A reset, an expiry and a delete issued at EUROPE_0.
    let reset = expect(&europe, Method::POST, "/counter/far:reset/reset", "", 200).await;
    assert_eq!(reset["deleted"], false, "{reset}");
    let body = r#"{"ttlSeconds": 1}"#;
    let expiring = expect(&europe, Method::PATCH, "/counter/far:ttl", body, 200).await;
    assert!(expiring["expiresAtMs"].as_u64().is_some(), "{expiring}");
    expect(&europe, Method::DELETE, "/counter/far:delete", "", 200).await;
    // And on its Redis port.
    let mut redis = resp::connect(&cluster.topology, "EUROPE_0", 0).await;
    let expire = ["EXPIRE", "far:resp-expire", "1"];
    assert_eq!(resp::line(&mut redis, &expire).await, ":1");
    assert_eq!(resp::line(&mut redis, &["DEL", "far:resp-del"]).await, ":1");
    let never = ["EXPIRE", "far:never", "1"];
    assert_eq!(resp::line(&mut redis, &never).await, ":0");
    // A write carrying an expiry at EUROPE_0 does not give the live counter one.
    let ttl = Some(json!({"delta": 1, "ttlSeconds": 1}));
    let (status, answer) = europe
        .write("far:written", "INCREMENT", ttl, None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{answer}");

    let body = reads(&global, "far:reset", fresh, 200, Some(0)).await;
    for dc in ["USA_0", "ASIA_0"] {
        assert_eq!(body["datacenters"][dc]["value"], 0, "{body}");
    }
    for id in ["far:ttl", "far:delete", "far:resp-expire", "far:resp-del"] {
        reads(&global, id, fresh, 404, None).await;
    }
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let body = reads(&global, "far:written", fresh, 200, Some(13)).await;
    assert!(body["expiresAtMs"].is_null(), "{body}");
    assert_eq!(body["datacenters"]["EUROPE_0"]["value"], 1, "{body}");
    // Writes after the reset count from zero everywhere.
    add(&europe, "far:reset", 2).await;
    add(&usa, "far:reset", 3).await;
    reads(&global, "far:reset", fresh, 200, Some(5)).await;
    // A counter nobody knows stays 404.
    expect(&europe, Method::POST, "/counter/far:never/reset", "", 404).await;
    let ttl = r#"{"ttlSeconds": 1}"#;
    expect(&europe, Method::PATCH, "/counter/far:never", ttl, 404).await;
}
