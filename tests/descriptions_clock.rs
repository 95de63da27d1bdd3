//! End-to-end tests of description versions against skewed clocks: a node restarted with its
//! clock behind still changes its counters' descriptions, and a description from a clock far
//! ahead is refused rather than pinning its counter. Real binaries on loopback.

use std::time::{Duration, Instant};

use geocount_model::VersionedDescription;
use geocount_model::wire::{Cursor, SyncPage, SyncRequest};
use geocount_test_support::{Api, Method, NodeProcess, TestTopology, eventually};
use serde_json::json;

/// Ten minutes: far beyond the default `sync.max_clock_skew_ms` (a minute).
const TEN_MINUTES_MS: i64 = 600_000;

/// The shard node's arguments for slot `slot` of `USA_0`, with its clock moved by `offset_ms`.
fn shard_args(topology: &TestTopology, slot: usize, offset_ms: i64) -> Vec<String> {
    [
        "--config",
        &topology.path.display().to_string(),
        "--dc",
        "USA_0",
        "--slot",
        &slot.to_string(),
        "--clock-offset-ms",
        &offset_ms.to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Counter `id`'s `numberOfShards` as a node routes it.
async fn routed_shards(api: &Api, id: &str) -> u64 {
    let answer = api.get(&format!("/counter/{id}/route")).await.unwrap();
    assert_eq!(answer.status, 200);
    answer.json()["numberOfShards"].as_u64().unwrap()
}

/// Every description a node or aggregator holds, as its tier below would pull them.
async fn descriptions_at(api: &Api) -> Vec<VersionedDescription> {
    let request = SyncRequest {
        slots: None,
        descriptions: Some(Cursor::Start),
        ..SyncRequest::default()
    };
    let body = postcard::to_allocvec(&request).unwrap();
    let answer = api.send(Method::POST, "/sync", &[], body).await.unwrap();
    assert_eq!(answer.status, 200);
    let page: SyncPage = postcard::from_bytes(&answer.body).unwrap();
    page.descriptions.unwrap().items
}

/// Counter `id`'s `numberOfShards` in the descriptions `api` holds (`None`: not held).
async fn held_shards(api: &Api, id: &str) -> Option<u32> {
    descriptions_at(api)
        .await
        .into_iter()
        .find(|d| d.description.id.as_str() == id)
        .map(|d| d.description.number_of_shards)
}

/// The value of the unlabelled metric `name` at `api`'s `/metrics` (0 if absent).
async fn metric(api: &Api, name: &str) -> u64 {
    let answer = api.get("/metrics").await.unwrap();
    String::from_utf8_lossy(&answer.body)
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0, |value| value.parse().unwrap())
}

/// `USA_0`'s aggregator, its node 0 with its clock ten minutes ahead, and its node 1.
async fn start_with_one_ahead(topology: &TestTopology) -> (NodeProcess, NodeProcess, NodeProcess) {
    let aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let ahead = NodeProcess::start_first(
        "shard-node",
        "DC_USA_0_VAL_0",
        &shard_args(topology, 0, TEN_MINUTES_MS),
        &["--restore".to_owned(), "empty".to_owned()],
        topology.shard_addr("USA_0", 0),
        topology.dir(),
    )
    .await;
    let peer = topology.start_shard("USA_0", 1).await;
    (aggregator, ahead, peer)
}

#[tokio::test]
async fn a_change_made_after_a_restart_with_the_clock_behind_wins() {
    let topology = TestTopology::new(&[("USA_0", 2)], "hot_writes_per_slot = 20");
    let aggregator = topology.start_datacenter_aggregator("USA_0").await;
    let mut node = topology.start_shard("USA_0", 0).await;
    let peer = topology.start_shard("USA_0", 1).await;
    // A counter whose one slot is node 0's: node 0 decides when it grows.
    let dc = topology.topology.datacenter("USA_0").unwrap();
    let placement = dc.placement(topology.topology.shard.virtual_nodes);
    let id = (0..)
        .map(|n| format!("skewed-{n}"))
        .find(|id| placement.slots_for(id, 1) == [0])
        .unwrap();
    node.api()
        .created(json!({"id": id, "numberOfShards": 1, "windowSeconds": 60}))
        .await;
    let peer_api = peer.api();
    eventually(
        Duration::from_secs(5),
        "the description at the peer",
        || async { (held_shards(&peer_api, &id).await == Some(1)).then_some(()) },
    )
    .await;

    // Restarted on the same data with its clock ten minutes behind.
    assert!(node.terminate().success(), "{}", node.log_tail());
    let node = NodeProcess::start(
        "shard-node",
        &node.name,
        &shard_args(&topology, 0, -TEN_MINUTES_MS),
        node.addr,
        topology.dir(),
    )
    .await;
    let api = node.api();
    assert_eq!(routed_shards(&api, &id).await, 1, "recovered");

    // Hot: the node grows the counter, a new version of its description.
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut shards = 1;
    while shards < 2 && Instant::now() < deadline {
        for _ in 0..25 {
            let (status, body) = api.add(&id, 1).await.unwrap();
            assert_eq!(status, 200, "{body}");
        }
        shards = routed_shards(&api, &id).await;
    }
    let proposed = metric(&api, "geocount_shard_shard_count_changes_total").await;
    assert_eq!(
        shards,
        2,
        "the node's change after its restart is kept ({proposed} proposed):\n{}",
        node.log_tail()
    );
    for (api, at) in [
        (peer.api(), "the peer"),
        (aggregator.api(), "the aggregator"),
    ] {
        eventually(
            Duration::from_secs(5),
            &format!("the change at {at}"),
            || async { (held_shards(&api, &id).await == Some(2)).then_some(()) },
        )
        .await;
    }
    assert_eq!(routed_shards(&peer.api(), &id).await, 2);
}

#[tokio::test]
async fn a_description_from_a_clock_far_ahead_is_refused_by_peers_and_the_aggregator() {
    let topology = TestTopology::new(&[("USA_0", 2)], "");
    let (aggregator, ahead, peer) = start_with_one_ahead(&topology).await;
    ahead
        .api()
        .created(json!({"id": "from-ahead", "numberOfShards": 2}))
        .await;
    // A description from a sound clock still flows everywhere, the skewed node included.
    peer.api()
        .created(json!({"id": "from-peer", "numberOfShards": 2}))
        .await;

    let shard_metric = "geocount_shard_descriptions_refused_total";
    let aggregator_metric = "geocount_datacenter_descriptions_refused_total";
    for (api, name) in [
        (peer.api(), shard_metric),
        (aggregator.api(), aggregator_metric),
    ] {
        eventually(Duration::from_secs(5), name, || {
            let api = api.clone();
            async move { (metric(&api, name).await >= 1).then_some(()) }
        })
        .await;
    }
    for api in [ahead.api(), aggregator.api(), peer.api()] {
        eventually(Duration::from_secs(5), "from-peer everywhere", || {
            let api = api.clone();
            async move { (held_shards(&api, "from-peer").await == Some(2)).then_some(()) }
        })
        .await;
    }
    assert_eq!(held_shards(&ahead.api(), "from-ahead").await, Some(2));
    assert_eq!(held_shards(&peer.api(), "from-ahead").await, None);
    assert_eq!(held_shards(&aggregator.api(), "from-ahead").await, None);
    assert_eq!(
        routed_shards(&peer.api(), "from-ahead").await,
        1,
        "defaults"
    );
}

#[tokio::test]
async fn a_bounded_description_pushed_from_a_clock_far_ahead_leaves_the_peer_clock_alone() {
    let topology = TestTopology::new(&[("USA_0", 2)], "");
    let (aggregator, ahead, peer) = start_with_one_ahead(&topology).await;
    // A bounded creation pushes its description to the peer through POST /rights.
    let (status, answer) = ahead
        .api()
        .create(json!({"id": "bounded-ahead", "min": 0, "max": 10}))
        .await;

    // The peer's clock did not move: a counter it makes still reaches its aggregator.
    peer.api()
        .created(json!({"id": "made-at-peer", "numberOfShards": 2}))
        .await;
    let aggregator_api = aggregator.api();
    let deadline = Instant::now() + Duration::from_secs(5);
    while held_shards(&aggregator_api, "made-at-peer").await.is_none() && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (read_status, read) = aggregator_api.read("made-at-peer").await;
    assert_eq!(
        read_status,
        200,
        "the peer's counter at the aggregator: {read}\n{}",
        aggregator.log_tail()
    );
    assert_eq!(held_shards(&aggregator_api, "made-at-peer").await, Some(2));
    // Only the creator's own description is refused there, pulled from its clock.
    assert_eq!(held_shards(&aggregator_api, "bounded-ahead").await, None);

    // The creator is told which node refused its description, and why.
    assert_eq!(status, 503, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(
        error.contains("DC_USA_0_VAL_1") && error.contains("ahead of the receiver's clock"),
        "the refusal names the peer and why: {error}"
    );
    let peer_api = peer.api();
    let shard_metric = "geocount_shard_descriptions_refused_total";
    assert!(metric(&peer_api, shard_metric).await >= 1);
    assert_eq!(held_shards(&peer_api, "bounded-ahead").await, None);
}
