//! End-to-end tests of history beyond the window through three datacenters: writes with
//! timestamps spread over hours land in their minute's and hour's steps, read back per step at
//! every datacenter aggregator and at the global aggregator (with its staleness keys); a shard
//! node killed with SIGKILL and restarted keeps its rollups (the log replays them), and a reset
//! wipes them (docs/architecture.md, "History beyond the window").

use std::time::Duration;

use geocount_test_support::{Api, TestCluster, TestTopology, eventually};
use serde_json::{Value, json};

/// How long a change may take to reach every tier.
const CONVERGE: Duration = Duration::from_secs(15);

/// Two shard nodes in USA_0, one in EU_0 and in ASIA_0.
const DATACENTERS: &[(&str, usize)] = &[("USA_0", 2), ("EU_0", 1), ("ASIA_0", 1)];

const ID: &str = "hist:views";

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `delta` hits at unix second `at`, through `api`.
async fn hit(api: &Api, delta: i64, at: u64) {
    let body = json!({"delta": delta, "timestamp": at});
    let (status, answer) = api.write(ID, "INCREMENT", Some(body), None).await.unwrap();
    assert_eq!(status, 200, "write +{delta} at {at}: {answer}");
}

/// `GET /counter/{ID}/history?{query}` at `api` → (status, JSON).
async fn history(api: &Api, query: &str) -> (u16, Value) {
    api.get_json(&format!("/counter/{ID}/history?{query}"))
        .await
}

/// The points of an answer, as `(at, value)`, leaving out zeros.
fn nonzero(answer: &Value) -> Vec<(u64, i64)> {
    let points = answer["points"].as_array().expect("points");
    (points.iter())
        .map(|p| (p["at"].as_u64().unwrap(), p["value"].as_i64().unwrap()))
        .filter(|(_, value)| *value != 0)
        .collect()
}

/// Waits until `api` answers `query` with these nonzero points; the answer.
async fn shows(api: &Api, query: &str, want: &[(u64, i64)]) -> Value {
    let started = std::time::Instant::now();
    loop {
        let (status, body) = history(api, query).await;
        if status == 200 && nonzero(&body) == want {
            return body;
        }
        assert!(
            started.elapsed() < CONVERGE,
            "history {query} never showed {want:?}: last {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_sums_every_slot_and_datacenter_survives_a_kill_and_goes_with_a_reset() {
    let topology = TestTopology::new(DATACENTERS, "");
    let mut cluster = TestCluster::start(topology).await;
    let usa = cluster.shards[0][0].api();
    let eu = cluster.shards[1][0].api();
    let asia = cluster.shards[2][0].api();
    let global = cluster.global.api();
    let aggregators: Vec<Api> = (0..3).map(|dc| cluster.aggregator(dc).api()).collect();

    let created = usa
        .created(json!({"id": ID, "history": [
            {"stepSeconds": 60, "keepSeconds": 7200},
            {"stepSeconds": 3600, "keepSeconds": 86400},
        ]}))
        .await;
    assert_eq!(created["history"][1]["stepSeconds"], 3600, "{created}");
    let (status, refused) = usa
        .create(json!({"id": "hist:bad", "history": [{"stepSeconds": 60, "keepSeconds": 90}]}))
        .await;
    assert_eq!(status, 400, "{refused}");

    // A write that arrives before its description keeps no history (it is not known yet):
    // wait until every shard node has the description.
    for shards in &cluster.shards {
        for node in shards {
            let api = node.api();
            eventually(CONVERGE, "the description everywhere", || async {
                (api.read(ID).await.0 == 200).then_some(())
            })
            .await;
        }
    }

    // Hits over the last five hours, in every datacenter; the window (300 s) keeps only the
    // newest.
    let hour = now_secs() / 3_600 * 3_600;
    let (h5, h3, h1) = (hour - 5 * 3_600, hour - 3 * 3_600, hour - 3_600);
    hit(&usa, 1, h5 + 10).await;
    hit(&eu, 2, h5 + 3_000).await;
    hit(&asia, 4, h3 + 61).await;
    hit(&usa, 8, h1 + 120).await;
    hit(&eu, 16, h1 + 150).await;
    hit(&asia, 32, hour + 1).await;

    let hours = format!("step=3600&from={h5}&to={hour}");
    let want_hours = [(h5, 3), (h3, 4), (h1, 24), (hour, 32)];
    let body = shows(&global, &hours, &want_hours).await;
    assert_eq!(body["value"], 63, "the sum of the points: {body}");
    assert_eq!(body["points"].as_array().unwrap().len(), 6, "one per step");
    assert_eq!(body["datacenters"]["USA_0"]["value"], 9, "{body}");
    assert_eq!(body["datacenters"]["EU_0"]["value"], 18, "{body}");
    assert_eq!(body["complete"], true, "{body}");
    // Each datacenter aggregator sums its own slots.
    shows(&aggregators[0], &hours, &[(h5, 1), (h1, 8)]).await;
    shows(&aggregators[1], &hours, &[(h5, 2), (h1, 16)]).await;
    let asia_body = shows(&aggregators[2], &hours, &[(h3, 4), (hour, 32)]).await;
    assert_eq!(asia_body["datacenter"], "ASIA_0", "{asia_body}");
    // The minute level keeps two hours back from its newest minute: only the last hour's
    // hits and this hour's are left of it.
    let minutes = format!("step=60&from={}&to={}", h1, hour + 60);
    shows(&global, &minutes, &[(h1 + 120, 24), (hour, 32)]).await;
    // By default: as far back as the level keeps, up to now.
    let (status, body) = history(&global, "step=3600").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["points"].as_array().unwrap().len(), 24, "{body}");
    assert_eq!(nonzero(&body), want_hours);
    // A step the counter keeps no level of, and too many points, are refused.
    for bad in ["step=120", "step=60&from=0", "from=5"] {
        let (status, body) = history(&global, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, _) = history(&aggregators[0], "step=120").await;
    assert_eq!(status, 400);
    let (status, _) = global.get_json("/counter/hist:none/history?step=60").await;
    assert_eq!(status, 404);

    // SIGKILL the USA node owning the counter's slot, restart it, and write once more there:
    // its new record carries the rollups the log replayed, so no point is lost.
    let mut owner = None;
    for n in 0..2 {
        let (status, body) = cluster.shards[0][n].api().read(ID).await;
        if status == 200 && body["value"].as_i64().unwrap_or(0) != 0 {
            owner = Some(n);
        }
    }
    let owner = owner.expect("a USA slot holds the hits");
    cluster.shards[0][owner].kill9();
    cluster.shards[0][owner].restart().await;
    hit(&usa, 64, h1 + 121).await;
    let want_after = [(h5, 3), (h3, 4), (h1, 88), (hour, 32)];
    shows(&global, &hours, &want_after).await;
    shows(&aggregators[0], &hours, &[(h5, 1), (h1, 72)]).await;

    // A reset wipes the history with the values; later hits count from zero.
    let (status, body) = usa
        .send(
            geocount_test_support::Method::POST,
            &format!("/counter/{ID}/reset"),
            &[],
            String::new(),
        )
        .await
        .map(|a| (a.status.as_u16(), a.json()))
        .unwrap();
    assert_eq!(status, 200, "{body}");
    shows(&global, &hours, &[]).await;
    // A write EU applies before it learns of the reset is wiped by it too: write once it has.
    eventually(CONVERGE, "EU learns of the reset", || async {
        let (status, body) = eu.read(ID).await;
        (status == 200 && body["value"] == 0).then_some(())
    })
    .await;
    hit(&eu, 5, hour + 2).await;
    shows(&global, &hours, &[(hour, 5)]).await;
    shows(&aggregators[1], &hours, &[(hour, 5)]).await;
}
