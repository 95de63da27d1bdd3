//! End-to-end tests of a shard node's world reads (`GET /counter/{id}/world`, the value Redis
//! `GET` and `PFCOUNT` answer) through two datacenters: a write through a node is in its world
//! read at once (in its own slot or forwarded to a peer's), the other datacenter's writes once
//! the global aggregator has them, a deleted counter is 404, and with the global aggregator
//! gone the read is 503, never a stale number; with one global replica of two gone, the other
//! answers.

use std::time::Duration;

use geocount_test_support::{Api, Method, TestCluster, TestTopology, eventually};
use serde_json::{Value, json};

/// How long a write may take to reach the global aggregator and back to a world read.
const CONVERGE: Duration = Duration::from_secs(15);

/// USA_0 with two shard nodes (so some writes are forwarded), ASIA_0 with one.
const DATACENTERS: &[(&str, usize)] = &[("USA_0", 2), ("ASIA_0", 1)];

/// `GET /counter/{id}/world` at `api` → (status, JSON).
async fn world(api: &Api, id: &str) -> (u16, Value) {
    api.get_json(&format!("/counter/{id}/world")).await
}

/// `INCREMENT` by `delta` through `api`, which must acknowledge it.
async fn add(api: &Api, id: &str, delta: i64) {
    let (status, body) = api.add(id, delta).await.expect("write");
    assert_eq!(status, 200, "write {id} +{delta}: {body}");
}

/// Waits until `api`'s world read of `id` answers `status` (and `value`, when given).
async fn world_reads(api: &Api, id: &str, status: u16, value: Option<i64>) -> Value {
    eventually(
        CONVERGE,
        &format!("world read of {id}: {status} {value:?}"),
        || async {
            let (got, body) = world(api, id).await;
            let matches = got == status && (value.is_none() || body["value"].as_i64() == value);
            matches.then_some(body)
        },
    )
    .await
}

/// A world read that must answer `value` now, not eventually.
async fn reads_now(api: &Api, id: &str, value: i64) {
    let (status, body) = world(api, id).await;
    assert_eq!(
        (status, body["value"].as_i64()),
        (200, Some(value)),
        "{id}: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn world_reads_add_the_other_datacenters_to_this_one_as_it_is_now() {
    let topology = TestTopology::new(DATACENTERS, "world_refresh_ms = 200");
    let mut cluster = TestCluster::start(topology).await;
    let usa = cluster.shards[0][0].api();
    let asia = cluster.shards[1][0].api();
    // Once the global aggregator has heard ASIA_0, a counter nobody knows is 404, not 503.
    world_reads(&usa, "nobody", 404, None).await;

    // Read-your-writes: in USA's own slot, and in its peer's slot (forwarded there).
    let own = usa
        .ids_routed_to("own", "DC_USA_0_VAL_0", 1)
        .await
        .remove(0);
    let peer = usa
        .ids_routed_to("peer", "DC_USA_0_VAL_1", 1)
        .await
        .remove(0);
    for id in [&own, &peer] {
        add(&usa, id, 5).await;
        reads_now(&usa, id, 5).await;
        add(&usa, id, 2).await;
        reads_now(&usa, id, 7).await;
        let body = world(&usa, id).await.1;
        assert!(body["staleness_ms"].as_u64().is_some(), "{body}");
    }

    // ASIA's writes are in USA's world read once the global aggregator has them, and USA's in
    // ASIA's; each node's own write at once.
    add(&asia, &own, 100).await;
    let (status, body) = world(&asia, &own).await;
    let value = body["value"].as_i64();
    assert!(
        status == 200 && value >= Some(100),
        "ASIA's own write at once: {body}"
    );
    world_reads(&usa, &own, 200, Some(107)).await;
    world_reads(&asia, &own, 200, Some(107)).await;
    add(&usa, &own, 1).await;
    reads_now(&usa, &own, 108).await;

    // A unique counter: the union of both datacenters' items.
    let (status, body) = usa
        .create(json!({"id": "visitors", "type": "unique"}))
        .await;
    assert_eq!(status, 201, "{body}");
    for (api, item) in [(&usa, "ann"), (&usa, "bob"), (&asia, "bob"), (&asia, "cy")] {
        let body = Some(json!({"item": item}));
        let (status, body) = api
            .write("visitors", "INCREMENT", body, None)
            .await
            .expect("item");
        assert_eq!(status, 200, "{body}");
    }
    let body = world_reads(&usa, "visitors", 200, Some(3)).await;
    assert!(body["standard_error"].as_f64().is_some(), "{body}");

    // A deleted counter is 404 at once where it was deleted, and everywhere once it spread.
    let deleted = usa
        .send(Method::DELETE, &format!("/counter/{own}"), &[], "")
        .await
        .expect("delete");
    assert_eq!(deleted.status.as_u16(), 200, "{}", deleted.json());
    world_reads(&usa, &own, 404, None).await;
    world_reads(&asia, &own, 404, None).await;

    // Without the global aggregator the other datacenters' parts cannot be had: 503, not a
    // stale number, once the cached parts are due.
    cluster.global.kill9();
    add(&usa, &peer, 1).await;
    let refused = world_reads(&usa, &peer, 503, None).await;
    assert!(refused["error"].as_str().is_some(), "{refused}");
    let (status, body) = world(&usa, &peer).await;
    assert_eq!(status, 503, "{body}");
    let metrics = usa.metrics().await.expect("metrics");
    for name in [
        "geocount_shard_world_fetches_total",
        "geocount_shard_world_refused_total",
    ] {
        let count =
            (metrics.lines()).find_map(|line| line.strip_prefix(name)?.trim().parse::<u64>().ok());
        assert!(count > Some(0), "{name} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn world_reads_go_on_through_the_next_global_replica() {
    let topology = TestTopology::replicated(&[("USA_0", 1), ("ASIA_0", 1)], 1, 0);
    let mut cluster = TestCluster::start(topology).await;
    let _second = cluster.topology.start_global_replica(1).await;
    let usa = cluster.shards[0][0].api();
    let asia = cluster.shards[1][0].api();
    add(&asia, "spread", 4).await;
    world_reads(&usa, "spread", 200, Some(4)).await;
    // Replica 0 gone: the next one answers, with ASIA's later writes too.
    cluster.global.kill9();
    add(&asia, "spread", 6).await;
    world_reads(&usa, "spread", 200, Some(10)).await;
    add(&usa, "spread", 1).await;
    reads_now(&usa, "spread", 11).await;
}
