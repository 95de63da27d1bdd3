//! Partitioned clusters answer what an unpartitioned cluster answers for the same writes:
//! totals, windowed reads, `/topk` and `/trending`, at both tiers. One has the shape of
//! `config/partitioned.toml` (two partitions, two global replicas each, whole datacenter
//! aggregators); the other also splits each datacenter's aggregators by partition. Each
//! aggregator holds only its partition's counters; a read at one that does not hold the counter
//! is redirected to one that does.

use std::time::Duration;

use geocount_model::partition_of;
use geocount_test_support::api::encode_id;
use geocount_test_support::{Aggregation, Api, NodeProcess, TestTopology};
use serde_json::Value;

const DATACENTERS: [(&str, usize); 2] = [("USA_0", 2), ("ASIA_0", 1)];
const TRENDING: &str = "[trending]\nwindow_seconds = 300\nthresholds = {\"#\" = 20}\n";
const CONVERGE: Duration = Duration::from_secs(15);

/// Every process of one cluster, kept running.
struct Running {
    topology: TestTopology,
    shards: Vec<NodeProcess>,
    /// Datacenter `d`'s aggregator replicas at `aggregators[d]`.
    aggregators: Vec<Vec<NodeProcess>>,
    globals: Vec<NodeProcess>,
}

impl Running {
    async fn start(topology: TestTopology) -> Self {
        let mut shards = Vec::new();
        let mut aggregators = Vec::new();
        let datacenters: Vec<(String, usize)> = (topology.topology.datacenters.iter())
            .map(|dc| (dc.name.clone(), dc.shards.len()))
            .collect();
        for (dc, slots) in datacenters {
            let dc = dc.as_str();
            for slot in 0..slots {
                shards.push(topology.start_shard(dc, slot).await);
            }
            let replicas = topology
                .topology
                .datacenter(dc)
                .unwrap()
                .aggregators()
                .len();
            let mut started = Vec::new();
            for replica in 0..replicas {
                started.push(topology.start_aggregator_replica(dc, replica).await);
            }
            aggregators.push(started);
        }
        let mut globals = Vec::new();
        for replica in 0..topology.topology.global.addresses().len() {
            globals.push(topology.start_global_replica(replica).await);
        }
        Self {
            topology,
            shards,
            aggregators,
            globals,
        }
    }
}

/// The counters written, each with its total: ties, a trending prefix and one that does not.
fn counters() -> Vec<(String, i64)> {
    (0..40)
        .map(|n| {
            let prefix = if n % 2 == 0 { "#tag" } else { "item" };
            (format!("{prefix}-{n}"), (n * 37) % 30 + 1)
        })
        .collect()
}

/// Writes every counter through the shard nodes in turn.
async fn write_all(cluster: &Running) {
    for (n, (id, total)) in counters().into_iter().enumerate() {
        let shard = cluster.shards[n % cluster.shards.len()].api();
        let (status, body) = shard.add(&id, total).await.expect("write");
        assert_eq!(status, 200, "{body}");
    }
}

/// `GET path` at `api`, following one redirect to the replica that holds the counter.
async fn get_following(api: &Api, path: &str) -> (u16, Value) {
    let answer = api.get(path).await.expect("get");
    if answer.status != 307 {
        return (answer.status.as_u16(), answer.json());
    }
    let location = answer.headers["location"].to_str().unwrap().to_owned();
    let address = location.split('/').nth(2).unwrap().parse().unwrap();
    let answer = Api::new(address)
        .get(path)
        .await
        .expect("get after redirect");
    (answer.status.as_u16(), answer.json())
}

/// Waits until every counter reads its total, complete, at the global tier of `cluster`.
async fn converge(cluster: &Running) {
    let api = cluster.globals[0].api();
    for (id, total) in counters() {
        let path = format!("/counter/{}", encode_id(&id));
        let deadline = std::time::Instant::now() + CONVERGE;
        loop {
            let (status, body) = get_following(&api, &path).await;
            if status == 200 && body["value"] == total && body["complete"] == true {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{id}: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What two answers of a ranking must share: the lists, the world's and each datacenter's.
fn ranking(body: &Value, list: &str) -> Value {
    let mut datacenters = serde_json::Map::new();
    if let Some(parts) = body["datacenters"].as_object() {
        for (name, part) in parts {
            datacenters.insert(name.clone(), part[list].clone());
        }
    }
    serde_json::json!({ "list": body[list], "datacenters": datacenters })
}

/// The aggregation of `config/partitioned.toml`: its partitions, its global replicas' lists,
/// and as many aggregator replicas per datacenter as it has (holding every partition).
fn shipped() -> (Vec<(String, usize)>, Aggregation) {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/partitioned.toml");
    let topology = geocount_model::Topology::load(std::path::Path::new(file)).unwrap();
    let datacenters = (topology.datacenters.iter())
        .map(|dc| (dc.name.clone(), dc.shards.len()))
        .collect();
    let aggregators = topology.datacenters[0].aggregators().len();
    let shape = Aggregation {
        partitions: topology.partitions,
        global: topology.global.partitions.clone(),
        aggregators: vec![Vec::new(); aggregators],
        shard_toml: String::new(),
    };
    (datacenters, shape)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_partitioned_topology_answers_what_an_unpartitioned_one_does() {
    let (datacenters, shape) = shipped();
    assert!(shape.partitions > 1 && shape.global.len() > 2, "{shape:?}");
    let datacenters: Vec<(&str, usize)> =
        datacenters.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    answers_like_a_whole_cluster(&datacenters, &shape).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_datacenter_aggregators_answer_what_whole_ones_do() {
    let shape = Aggregation {
        partitions: 2,
        global: vec![vec![0], vec![0], vec![1], vec![1]],
        aggregators: vec![vec![0], vec![1]],
        shard_toml: String::new(),
    };
    answers_like_a_whole_cluster(&DATACENTERS, &shape).await;
}

/// A cluster of `datacenters` aggregated as `shape` answers, after the same writes, what one
/// unpartitioned aggregator per tier answers.
async fn answers_like_a_whole_cluster(datacenters: &[(&str, usize)], shape: &Aggregation) {
    let whole = Running::start(TestTopology::with_extra(datacenters, "", TRENDING)).await;
    let split = Running::start(TestTopology::shaped(datacenters, shape, TRENDING)).await;
    write_all(&whole).await;
    write_all(&split).await;
    converge(&whole).await;
    converge(&split).await;

    // A read at a replica without the counter's partition is redirected to one with it.
    let (first, _) = counters()
        .into_iter()
        .partition::<Vec<_>, _>(|(id, _)| partition_of(id, 2) == 0);
    let (elsewhere, _) = (counters().into_iter())
        .find(|(id, _)| partition_of(id, 2) == 1)
        .unwrap();
    let answer = split.globals[0]
        .api()
        .get(&format!("/counter/{}", encode_id(&elsewhere)))
        .await
        .unwrap();
    assert_eq!(answer.status, 307);
    let holder = split.topology.topology.global.addresses()[2];
    let location = answer.headers["location"].to_str().unwrap();
    assert!(location.contains(&holder.to_string()), "{location}");

    // Each global replica holds only its partition's counters.
    let (_, health) = split.globals[0].api().get_json("/healthz").await;
    assert_eq!(health["counters"], first.len(), "{health}");

    let (whole_global, split_global) = (whole.globals[0].api(), split.globals[0].api());
    for (id, _) in counters() {
        let path = format!("/counter/{}?window=60", encode_id(&id));
        let (_, expected) = get_following(&whole_global, &path).await;
        let (status, body) = get_following(&split_global, &path).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["value"], expected["value"], "{id} in the last minute");
    }
    let rankings = [
        ("/topk?k=7&prefix=item", "top"),
        ("/topk?k=5&window=60", "top"),
        ("/topk?k=1000", "top"),
        ("/trending?prefix=%23", "trending"),
    ];
    let tiers = [
        (whole_global, split_global),
        (whole.aggregators[0][0].api(), split.aggregators[0][1].api()),
    ];
    for (expected_at, asked_at) in &tiers {
        for (path, list) in rankings {
            let (status, expected) = expected_at.get_json(path).await;
            assert_eq!(status, 200, "{path}: {expected}");
            let (status, body) = asked_at.get_json(path).await;
            assert_eq!(status, 200, "{path}: {body}");
            assert_eq!(ranking(&body, list), ranking(&expected, list), "{path}");
            assert!(!expected[list].as_array().unwrap().is_empty(), "{path}");
            assert_eq!(body["complete"], true, "{path}: {body}");
        }
    }
}
