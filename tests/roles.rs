//! End-to-end tests of roles between tiers (README, "Access"): every call between tiers proves
//! which process makes it (its client certificate with `[tls]`, its process key in any case),
//! and each route accepts only the roles that need it. Real binaries on loopback ports; with
//! `E2E_TLS=1` (scripts/test.sh) the same tests run over mutual TLS.
//!
//! Each caller here sends everything the process it plays holds: its certificate, its name and
//! key, and the cluster secret itself (in `x-geocount-cluster-secret`).

use std::time::Duration;

use geocount_model::CounterId;
use geocount_model::wire::{Cursor, PartsAnswer, PartsRequest, SlotCopy, SyncPage, SyncRequest};
use geocount_test_support::access::{
    ADMIN, READER, REFUSED, SECRET, SECRET_HEADER, WRITER, assert_refusal_logged, forward, topology,
};
use geocount_test_support::{Api, Method, NodeProcess, TestTopology};
use serde_json::{Value, json};

/// A client of `addr` holding everything process `name` holds.
fn as_process(t: &TestTopology, addr: std::net::SocketAddr, name: &str) -> Api {
    t.api_as(addr, name).with_header(SECRET_HEADER, SECRET)
}

/// A pull of everything, as an aggregator or a peer asks.
fn pull_everything() -> Vec<u8> {
    postcard::to_allocvec(&SyncRequest {
        slots: Some(Cursor::Start),
        descriptions: Some(Cursor::Start),
        ..SyncRequest::default()
    })
    .unwrap()
}

async fn sync(api: &Api) -> (u16, Vec<u8>) {
    let answer = api
        .send(Method::POST, "/sync", &[], pull_everything())
        .await
        .expect("an answer");
    (answer.status.as_u16(), answer.body.to_vec())
}

async fn get(api: &Api, path: &str) -> (u16, Vec<u8>) {
    let answer = api.get(path).await.expect("an answer");
    (answer.status.as_u16(), answer.body.to_vec())
}

/// The JSON of a refusal, asserting it is a 403 naming `process` and `route`.
fn assert_refused(answer: (u16, Vec<u8>), process: &str, route: &str) {
    let body: Value = serde_json::from_slice(&answer.1).unwrap_or(Value::Null);
    assert_eq!(answer.0, 403, "{route} as {process}: {body}");
    assert_eq!(body["process"], process, "{body}");
    assert_eq!(body["route"], route, "{body}");
}

async fn value(node: &NodeProcess, id: &str) -> Value {
    node.api().with_token(READER).read(id).await.1["value"].clone()
}

#[tokio::test]
async fn a_shard_node_of_another_datacenter_cannot_forward_writes_into_this_one() {
    let t = topology(&[("USA_0", 1), ("ASIA_0", 1)]);
    let mut shard = t.start_shard("USA_0", 0).await;
    let writer = shard.api().with_token(WRITER);
    assert_eq!(writer.add("roles:likes", 5).await.unwrap().0, 200);

    let foreign = as_process(&t, shard.addr, "DC_ASIA_0_VAL_0");
    let [single, batch] = forward(&foreign, "roles:likes", 100)
        .await
        .map(|a| (a.status.as_u16(), a.body.to_vec()));
    let route = "PATCH /counter/roles:likes/write";
    assert_refused(single, "DC_ASIA_0_VAL_0", route);
    assert_refused(batch, "DC_ASIA_0_VAL_0", "POST /batch");
    // Nothing changed, and the refusal is a warning naming the caller.
    assert_eq!(value(&shard, "roles:likes").await, json!(5));
    assert_refusal_logged(&mut shard, &["WARN", "DC_ASIA_0_VAL_0"]).await;
}

#[tokio::test]
async fn each_pull_and_copy_is_open_only_to_the_roles_that_need_it() {
    let t = topology(&[("USA_0", 2), ("ASIA_0", 1)]);
    let global = t.start_global_aggregator().await;
    let usa = t.start_datacenter_aggregator("USA_0").await;
    let shard = t.start_shard("USA_0", 0).await;
    let _peer = t.start_shard("USA_0", 1).await;
    let admin = shard.api().with_token(ADMIN);
    admin.created(json!({"id": "roles:views"})).await;
    assert_eq!(admin.add("roles:views", 4).await.unwrap().0, 200);
    global
        .api()
        .with_token(READER)
        .read_until(
            Duration::from_secs(10),
            "/counter/roles:views?allow_partial=true",
            |s, b| s == 200 && b["value"] == 4,
        )
        .await;

    // The global aggregator's /sync is for the datacenter aggregators (descriptions), its
    // slot copies for the node of the slot (restoring it): a shard node pulls neither.
    let at_global = |name| as_process(&t, global.addr, name);
    let node = "DC_USA_0_VAL_0";
    assert_refused(sync(&at_global(node)).await, node, "POST /sync");
    let copy_of_1 = "/slots/DC_USA_0_VAL_1/copy";
    assert_refused(
        get(&at_global(node), copy_of_1).await,
        node,
        &format!("GET {copy_of_1}"),
    );
    let aggregator = "aggregator_USA_0";
    let copy_of_0 = "/slots/DC_USA_0_VAL_0/copy";
    assert_refused(
        get(&at_global(aggregator), copy_of_0).await,
        aggregator,
        &format!("GET {copy_of_0}"),
    );
    // The roles that need them get them.
    let (code, page) = sync(&at_global(aggregator)).await;
    assert_eq!(code, 200);
    postcard::from_bytes::<SyncPage>(&page).expect("a sync page");
    let (code, copy) = get(&at_global(node), copy_of_0).await;
    assert_eq!(code, 200);
    let copy: SlotCopy = postcard::from_bytes(&copy).expect("a slot copy");
    assert_eq!(copy.slot, "DC_USA_0_VAL_0");
    // The other datacenters' parts are for the shard nodes' world reads only.
    let parts = postcard::to_allocvec(&PartsRequest {
        datacenter: "USA_0".into(),
        max_staleness_ms: None,
        counters: vec![(CounterId::new("roles:views").unwrap(), Default::default())],
    })
    .unwrap();
    let ask_parts = |name| {
        let api = at_global(name);
        let body = parts.clone();
        async move {
            let answer = api.send(Method::POST, "/parts", &[], body).await;
            let answer = answer.expect("an answer");
            (answer.status.as_u16(), answer.body.to_vec())
        }
    };
    assert_refused(ask_parts(aggregator).await, aggregator, "POST /parts");
    let (code, answer) = ask_parts(node).await;
    assert_eq!(code, 200);
    postcard::from_bytes::<PartsAnswer>(&answer).expect("the parts");

    // A datacenter aggregator is pulled by the global aggregator and its own shard nodes, not
    // by another datacenter's.
    let at_usa = |name| as_process(&t, usa.addr, name);
    for name in ["global", "DC_USA_0_VAL_1"] {
        assert_eq!(sync(&at_usa(name)).await.0, 200, "{name}");
    }
    for name in ["DC_ASIA_0_VAL_0", "aggregator_ASIA_0"] {
        assert_refused(sync(&at_usa(name)).await, name, "POST /sync");
    }
    // A shard node is pulled by its datacenter's aggregator and peers only.
    let at_shard = |name| as_process(&t, shard.addr, name);
    for name in ["aggregator_USA_0", "DC_USA_0_VAL_1"] {
        assert_eq!(sync(&at_shard(name)).await.0, 200, "{name}");
    }
    for name in ["global", "aggregator_ASIA_0", "DC_ASIA_0_VAL_0"] {
        assert_refused(sync(&at_shard(name)).await, name, "POST /sync");
    }
}

#[tokio::test]
async fn a_process_cannot_pose_as_another() {
    let t = topology(&[("USA_0", 1), ("ASIA_0", 1)]);
    let shard = t.start_shard("USA_0", 0).await;
    assert_eq!(
        shard
            .api()
            .with_token(WRITER)
            .add("roles:pose", 3)
            .await
            .unwrap()
            .0,
        200
    );
    let (stranger, pulls_here) = ("DC_ASIA_0_VAL_0", "aggregator_USA_0");
    // ASIA's node, with its own certificate and key, names itself USA's aggregator.
    let own_key = t
        .api_posing(shard.addr, stranger, pulls_here, stranger)
        .with_header(SECRET_HEADER, SECRET);
    // With TLS: ASIA's node's certificate, with the name and the key of USA's aggregator
    // (every process can derive any key from the cluster secret; the certificate decides).
    let its_key = t
        .api_posing(shard.addr, stranger, pulls_here, pulls_here)
        .with_header(SECRET_HEADER, SECRET);
    let posers = if t.topology.tls.is_some() {
        vec![own_key, its_key]
    } else {
        vec![own_key]
    };
    for poser in &posers {
        let (code, body) = sync(poser).await;
        assert_eq!(code, 403, "{}", String::from_utf8_lossy(&body));
        let [single, batch] = forward(poser, "roles:pose", 100).await;
        assert_eq!((single.status.as_u16(), batch.status.as_u16()), (403, 403));
    }
    assert_eq!(value(&shard, "roles:pose").await, json!(3));
    // The process itself is let in.
    assert_eq!(sync(&as_process(&t, shard.addr, pulls_here)).await.0, 200);
}

#[tokio::test]
async fn the_cluster_replicates_aggregates_and_restores_under_roles() {
    let t = topology(&[("USA_0", 2), ("ASIA_0", 1)]);
    let global = t.start_global_aggregator().await;
    let mut usa = t.start_datacenter_aggregator("USA_0").await;
    let mut asia = t.start_datacenter_aggregator("ASIA_0").await;
    let mut shards = [
        t.start_shard("USA_0", 0).await,
        t.start_shard("USA_0", 1).await,
        t.start_shard("ASIA_0", 0).await,
    ];
    let admin = shards[0].api().with_token(ADMIN);
    admin
        .created(json!({"id": "roles:total", "numberOfShards": 2}))
        .await;
    // Round robin over two slots: half of USA's writes are forwarded to the peer.
    for shard in &shards {
        for _ in 0..4 {
            let answer = shard.api().with_token(WRITER).add("roles:total", 2).await;
            assert_eq!(answer.unwrap().0, 200);
        }
    }
    let reader = global.api().with_token(READER);
    let body = reader
        .read_until(Duration::from_secs(10), "/counter/roles:total", |s, b| {
            s == 200 && b["value"] == 24
        })
        .await;
    assert_eq!(body["datacenters"]["USA_0"]["value"], 16, "{body}");
    // The description went up and back down to ASIA's node.
    let route = shards[2]
        .api()
        .with_token(READER)
        .get_json("/counter/roles:total/route")
        .await;
    assert_eq!(route.0, 200, "{}", route.1);

    // USA's slot 1 loses its disk and restores from the copies of its aggregator, the global
    // aggregator and its peer.
    let before = value(&shards[1], "roles:total").await;
    shards[1].kill9();
    std::fs::remove_dir_all(t.shard_data_dir("USA_0", 1)).unwrap();
    shards[1].restart().await;
    assert_eq!(value(&shards[1], "roles:total").await, before);

    // No process refused another.
    for process in shards.iter_mut().chain([&mut usa, &mut asia]) {
        let log = process.log_tail();
        assert!(!log.contains(REFUSED), "{log}");
    }
}
