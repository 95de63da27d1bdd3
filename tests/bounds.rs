//! End-to-end tests of bounded counters (#40; docs/api.md, docs/architecture.md, "Bounded
//! counters"): a counter created with `"min"` and/or `"max"` never lets its world total out of
//! them, whichever datacenters write it, and refuses the writes that would with 409 naming the
//! bound. Each test starts the real binaries on loopback; those across regions of the
//! launcher's emulated WAN (a cut-off region, a slow one) are in `bounds/wan.rs`.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use geocount_model::wire::EntryOutcome;
use geocount_test_support::api::{encode_id, entry};
use geocount_test_support::{
    Api, Method, NodeProcess, TestCluster, TestTopology, eventually, resp,
};
use serde_json::{Value, json};

#[path = "bounds/stretch.rs"]
mod stretch;
#[path = "bounds/wan.rs"]
mod wan;

/// How long a total may take to reach the global aggregator.
const CONVERGE: Duration = Duration::from_secs(15);
/// A restarted shard node waits little for copies of its slot.
const SHARD_TOML: &str = "restore_timeout_ms = 200";

/// Datacenters named and sized as given, with [`SHARD_TOML`].
fn topology(datacenters: &[(&str, usize)]) -> TestTopology {
    TestTopology::new(datacenters, SHARD_TOML)
}

/// `POST /counter` of `id` with bounds `min` and `max`, which must answer 201 with them in the
/// description.
async fn create_bounded(api: &Api, id: &str, min: Option<i64>, max: Option<i64>) -> Value {
    let created = api
        .created(json!({ "id": id, "min": min, "max": max }))
        .await;
    assert_eq!(
        (&created["min"], &created["max"]),
        (&json!(min), &json!(max))
    );
    created
}

/// Checks that a write was refused for passing bound `bound` (`"min"` or `"max"`) at `limit`:
/// 409 with `{"error": <naming the bound>, "bound", "limit"}`.
fn assert_refused(status: u16, body: &Value, bound: &str, limit: i64) {
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        (&body["bound"], &body["limit"]),
        (&json!(bound), &json!(limit)),
        "{body}"
    );
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains(&format!("{bound} {limit}")), "{body}");
}

/// A write of `delta` to `id` through `api`: (status, JSON).
async fn write(api: &Api, id: &str, delta: i64) -> (u16, Value) {
    api.add(id, delta).await.expect("an answer to the write")
}

/// Writes `delta` to `id` through `api`, which must be acknowledged.
async fn applied(api: &Api, id: &str, delta: i64) {
    let (status, body) = write(api, id, delta).await;
    assert_eq!(status, 200, "{delta} to {id}: {body}");
}

/// Waits until the global aggregator's total of `id` is `value`, with every datacenter heard.
async fn global_total(cluster_global: &Api, id: &str, value: i64) {
    let path = format!("/counter/{}", encode_id(id));
    cluster_global
        .read_until(CONVERGE, &path, |status, body| {
            status == 200 && body["value"] == value && body["complete"] != false
        })
        .await;
}

/// `GET /counter/{id}/rights` at `api`: this node's slot's rights.
async fn rights(api: &Api, id: &str) -> Value {
    let (status, body) = api
        .get_json(&format!("/counter/{}/rights", encode_id(id)))
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The up-rights the nodes `apis` hold for `id`, together.
async fn up_rights(apis: &[Api], id: &str) -> i64 {
    let mut up = 0;
    for api in apis {
        let body = rights(api, id).await;
        up += body["up"]
            .as_i64()
            .unwrap_or_else(|| panic!("no up-rights: {body}"));
    }
    up
}

/// The shard nodes of datacenter `d` of `cluster`.
fn shard_apis(cluster: &TestCluster, d: usize) -> Vec<Api> {
    cluster.shards[d].iter().map(NodeProcess::api).collect()
}

const QUOTA: i64 = 1000;
/// Concurrent writers per datacenter.
const WRITERS: usize = 4;

/// What the writers of [`three_datacenters_spend_a_quota_of_1000_exactly_once`] saw.
#[derive(Default)]
struct Tally {
    acknowledged: AtomicI64,
    refused: AtomicI64,
    stop: AtomicBool,
    /// Every answer that was neither 200 nor a 409 naming the bound.
    unexpected: Mutex<Vec<String>>,
}

/// Whether `body` is the refusal of a write past [`QUOTA`], naming it.
fn refused_at_quota(body: &Value) -> bool {
    let error = body["error"].as_str().unwrap_or_default();
    body["bound"] == "max" && body["limit"] == QUOTA && error.contains("max 1000")
}

/// Increments `id` by 1 through `api` until the tally says stop.
async fn keep_writing(api: Api, id: &'static str, tally: Arc<Tally>) {
    while !tally.stop.load(Ordering::SeqCst) {
        match api.add(id, 1).await {
            Ok((200, _)) => {
                tally.acknowledged.fetch_add(1, Ordering::SeqCst);
            }
            Ok((409, body)) if refused_at_quota(&body) => {
                tally.refused.fetch_add(1, Ordering::SeqCst);
            }
            Ok((status, body)) => tally
                .unexpected
                .lock()
                .unwrap()
                .push(format!("{status} {body}")),
            Err(error) => tally.unexpected.lock().unwrap().push(error.to_string()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_datacenters_spend_a_quota_of_1000_exactly_once() {
    const ID: &str = "quota:1000";
    let datacenters = [("USA_0", 2), ("EUROPE_0", 2), ("ASIA_0", 2)];
    let cluster = TestCluster::start(topology(&datacenters)).await;
    create_bounded(&cluster.shards[0][0].api(), ID, None, Some(QUOTA)).await;
    // The room split evenly in topology order, the remainder to the first: each held by its
    // datacenter's home slot.
    let mut shares = Vec::new();
    for d in 0..datacenters.len() {
        shares.push(up_rights(&shard_apis(&cluster, d), ID).await);
    }
    assert_eq!(shares, [334, 333, 333]);

    let tally = Arc::new(Tally::default());
    let mut writers = Vec::new();
    for d in 0..datacenters.len() {
        for w in 0..WRITERS {
            let api = cluster.shards[d][w % 2].api();
            writers.push(tokio::spawn(keep_writing(api, ID, tally.clone())));
        }
    }
    // Meanwhile the global aggregator never reads past the quota.
    let global = cluster.global.api();
    let reader = tokio::spawn({
        let tally = tally.clone();
        async move {
            let mut highest = 0;
            while !tally.stop.load(Ordering::SeqCst) {
                if let (200, total) = global.global_read(ID, "").await {
                    highest = highest.max(total["value"].as_i64().expect("a total"));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            highest
        }
    });
    // Everyone writes until the quota is spent, and on for a while after: all refused. (An
    // answer of unknown outcome fails the test below: it may have spent a unit no one counts.)
    let deadline = Instant::now() + Duration::from_secs(60);
    while tally.acknowledged.load(Ordering::SeqCst) < QUOTA
        && tally.unexpected.lock().unwrap().is_empty()
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused_at_quota = tally.refused.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    tally.stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.await.expect("writer");
    }
    let highest = reader.await.expect("reader");
    assert!(highest <= QUOTA, "the global aggregator read {highest}");
    let unexpected = tally.unexpected.lock().unwrap().clone();
    assert!(
        unexpected.is_empty(),
        "answers other than 200 or 409: {unexpected:?}"
    );
    let refused = tally.refused.load(Ordering::SeqCst);
    assert_eq!(
        tally.acknowledged.load(Ordering::SeqCst),
        QUOTA,
        "acknowledged (refused {refused}, {refused_at_quota} of them before the quota was spent)"
    );
    assert!(
        refused > refused_at_quota,
        "no write refused once the quota was spent"
    );

    global_total(&cluster.global.api(), ID, QUOTA).await;
    // Spent everywhere: each datacenter refuses the next write.
    for d in 0..datacenters.len() {
        let (status, body) = write(&cluster.shards[d][1].api(), ID, 1).await;
        assert_refused(status, &body, "max", QUOTA);
    }
    let (status, total) = cluster.global.api().global_read(ID, "").await;
    assert_eq!((status, &total["value"]), (200, &json!(QUOTA)), "{total}");
    // And a shard node's world read, its datacenter now and the others from the global tier.
    let path = format!("/counter/{}/world", encode_id(ID));
    cluster.shards[2][0]
        .api()
        .read_until(CONVERGE, &path, |status, body| {
            status == 200 && body["value"] == QUOTA
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decrement_frees_room_another_datacenter_spends() {
    const ID: &str = "quota:freed";
    let cluster =
        TestCluster::start(topology(&[("USA_0", 1), ("EUROPE_0", 1), ("ASIA_0", 1)])).await;
    let [usa, europe, asia] = [0, 1, 2].map(|d| cluster.shards[d][0].api());
    create_bounded(&usa, ID, None, Some(30)).await;
    // USA spends its share and the others' (it asks them).
    for _ in 0..6 {
        applied(&usa, ID, 5).await;
    }
    for api in [&usa, &europe, &asia] {
        let (status, body) = write(api, ID, 1).await;
        assert_refused(status, &body, "max", 30);
    }
    // A decrement in EUROPE makes room there, which ASIA asks for and spends.
    applied(&europe, ID, -5).await;
    applied(&asia, ID, 5).await;
    let (status, body) = write(&asia, ID, 1).await;
    assert_refused(status, &body, "max", 30);
    global_total(&cluster.global.api(), ID, 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_short_of_rights_are_applied_while_room_is_left() {
    const ID: &str = "quota:queued";
    const WRITES: usize = 12;
    let cluster =
        TestCluster::start(topology(&[("USA_0", 1), ("EUROPE_0", 1), ("ASIA_0", 1)])).await;
    let usa = cluster.shards[0][0].api();
    create_bounded(&usa, ID, None, Some(30)).await;
    applied(&usa, ID, 10).await;
    // Each needs rights from the others, which hold 20: every one fits.
    let writes: Vec<_> = (0..WRITES)
        .map(|_| {
            let usa = usa.clone();
            tokio::spawn(async move { write(&usa, ID, 1).await })
        })
        .collect();
    let mut answers = Vec::new();
    for writer in writes {
        answers.push(writer.await.expect("writer"));
    }
    let refused: Vec<&(u16, Value)> = answers.iter().filter(|(s, _)| *s != 200).collect();
    let held = rights(&usa, ID).await;
    assert!(
        refused.is_empty(),
        "{} of {WRITES} refused: {refused:?}; USA_0's slot then: {held}",
        refused.len()
    );
    global_total(&cluster.global.api(), ID, 10 + WRITES as i64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_refuses_a_decrement_past_it() {
    const ID: &str = "stock:min";
    let cluster = TestCluster::start(topology(&[("USA_0", 1), ("ASIA_0", 1)])).await;
    let [usa, asia] = [0, 1].map(|d| cluster.shards[d][0].api());
    create_bounded(&usa, ID, Some(0), None).await;
    let (status, body) = write(&usa, ID, -1).await;
    assert_refused(status, &body, "min", 0);
    // Increments in USA make the room below that ASIA's decrements ask for.
    applied(&usa, ID, 5).await;
    applied(&asia, ID, -3).await;
    applied(&asia, ID, -2).await;
    for api in [&usa, &asia] {
        let (status, body) = write(api, ID, -1).await;
        assert_refused(status, &body, "min", 0);
    }
    // With both bounds, each one refuses on its side.
    create_bounded(&usa, "stock:both", Some(-4), Some(4)).await;
    for _ in 0..4 {
        applied(&asia, "stock:both", -1).await;
    }
    let (status, body) = write(&usa, "stock:both", -1).await;
    assert_refused(status, &body, "min", -4);
    applied(&usa, "stock:both", 8).await;
    let (status, body) = write(&asia, "stock:both", 1).await;
    assert_refused(status, &body, "max", 4);
    global_total(&cluster.global.api(), ID, 0).await;
    global_total(&cluster.global.api(), "stock:both", 4).await;
}

#[tokio::test]
async fn a_batch_refuses_only_the_entries_past_the_bound() {
    let cluster = TestCluster::start(topology(&[("USA_0", 1)])).await;
    let api = cluster.shards[0][0].api();
    create_bounded(&api, "batch:bounded", None, Some(5)).await;
    let entries = [
        entry("batch:bounded", 3),
        entry("batch:free", 7),
        entry("batch:bounded", 3),
        entry("batch:bounded", 2),
    ];
    let answer = api.batch(&entries).await.expect("batch");
    let outcomes = answer.outcomes;
    assert!(
        matches!(outcomes[0], EntryOutcome::Applied { value: 3, .. }),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], EntryOutcome::Applied { value: 7, .. }),
        "{outcomes:?}"
    );
    match &outcomes[2] {
        EntryOutcome::Refused { status, error } => {
            assert_eq!(*status, 409, "{error}");
            assert!(error.contains("max 5"), "{error}");
        }
        other => panic!("the entry past the bound: {other:?}"),
    }
    assert!(
        matches!(outcomes[3], EntryOutcome::Applied { value: 5, .. }),
        "{outcomes:?}"
    );
    // The short answer keeps the refused entry with its position.
    let (summary, _) = api
        .batch_minimal(&[entry("batch:free", 1), entry("batch:bounded", 1)])
        .await
        .expect("batch");
    assert_eq!(summary.applied, 1, "{summary:?}");
    assert_eq!(summary.refused.len(), 1, "{summary:?}");
    assert_eq!(summary.refused[0].index, 1, "{summary:?}");
    assert_eq!(summary.refused[0].status, 409, "{summary:?}");
    assert_eq!(api.value("batch:bounded").await, 5);
    assert_eq!(api.value("batch:free").await, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_keyed_bounded_write_applies_once() {
    const ID: &str = "quota:keyed";
    let cluster = TestCluster::start(topology(&[("USA_0", 1), ("ASIA_0", 1)])).await;
    let usa = cluster.shards[0][0].api();
    create_bounded(&usa, ID, None, Some(10)).await;
    let first = usa.write_keyed(ID, json!({"delta": 6}), "spend-6").await;
    assert_eq!(first.0, 200, "{}", first.1);
    assert_eq!(
        usa.write_keyed(ID, json!({"delta": 6}), "spend-6").await,
        first
    );
    // Applied once: 4 more reach the bound exactly, and a retry at the bound is still answered
    // as the first was.
    applied(&usa, ID, 4).await;
    let (status, body) = write(&usa, ID, 1).await;
    assert_refused(status, &body, "max", 10);
    assert_eq!(
        usa.write_keyed(ID, json!({"delta": 6}), "spend-6").await,
        first
    );
    global_total(&cluster.global.api(), ID, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_hands_the_room_back() {
    const ID: &str = "quota:reset";
    let cluster = TestCluster::start(topology(&[("USA_0", 1), ("ASIA_0", 1)])).await;
    let [usa, asia] = [0, 1].map(|d| cluster.shards[d][0].api());
    create_bounded(&usa, ID, None, Some(6)).await;
    for _ in 0..6 {
        applied(&usa, ID, 1).await;
    }
    let (status, body) = write(&asia, ID, 1).await;
    assert_refused(status, &body, "max", 6);
    global_total(&cluster.global.api(), ID, 6).await;

    let reset = usa
        .send(Method::POST, &format!("/counter/{ID}/reset"), &[], "")
        .await
        .expect("reset");
    assert_eq!(reset.status, 200, "{}", reset.json());
    // Once ASIA_0's slot has learned of the reset (its share back, its gift to USA_0
    // forgotten), the whole quota can be spent again.
    eventually(
        CONVERGE,
        "ASIA_0's slot in the reset's generation",
        || async {
            let held = rights(&asia, ID).await;
            (held["up"] == 3 && held["given"] == json!([])).then_some(())
        },
    )
    .await;
    for _ in 0..6 {
        applied(&usa, ID, 1).await;
    }
    for api in [&usa, &asia] {
        let (status, body) = write(api, ID, 1).await;
        assert_refused(status, &body, "max", 6);
    }
    global_total(&cluster.global.api(), ID, 6).await;
}

/// `POST /counters/{id}/increment` of 1 with `"ttlSeconds": ttl`: (status, JSON).
async fn increment_with_ttl(api: &Api, id: &str, ttl: u32) -> (u16, Value) {
    let answer = api
        .send(
            Method::POST,
            &format!("/counters/{}/increment", encode_id(id)),
            &[],
            json!({"delta": 1, "ttlSeconds": ttl}).to_string(),
        )
        .await
        .expect("increment");
    (answer.status.as_u16(), answer.json())
}

#[tokio::test]
async fn an_expired_quota_is_made_again_with_its_bounds() {
    const ID: &str = "quota:window";
    const TTL: u32 = 3;
    let cluster = TestCluster::start(topology(&[("USA_0", 1)])).await;
    let api = cluster.shards[0][0].api();
    let created = api
        .created(json!({"id": ID, "max": 3, "ttlSeconds": TTL}))
        .await;
    assert_eq!(created["max"], 3, "{created}");
    // A fixed-window quota: 3 a window, each write setting the expiry of the counter it makes.
    for window in 0..2 {
        for n in 1..=3 {
            let (status, body) = increment_with_ttl(&api, ID, TTL).await;
            assert_eq!(
                (status, &body["value"]),
                (200, &json!(n)),
                "window {window}: {body}"
            );
        }
        let (status, body) = increment_with_ttl(&api, ID, TTL).await;
        assert_refused(status, &body, "max", 3);
        eventually(CONVERGE, "the quota's window to end", || async {
            (api.read(ID).await.0 == 404).then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_quota_made_again_through_a_node_not_its_slot_keeps_its_bounds() {
    let cluster = TestCluster::start(topology(&[("USA_0", 2)])).await;
    let [slot_node, other] = [0, 1].map(|n| cluster.shards[0][n].api());
    // The counter's one slot is node 0's: node 1 forwards its writes.
    let id = other
        .ids_routed_to("quota:fwd", "DC_USA_0_VAL_0", 1)
        .await
        .remove(0);
    let id = id.as_str();
    let created = slot_node
        .created(json!({"id": id, "max": 3, "ttlSeconds": 1}))
        .await;
    assert_eq!(created["max"], 3, "{created}");
    applied(&other, id, 1).await;
    for api in [&slot_node, &other] {
        eventually(CONVERGE, "the quota to expire", || async {
            (api.read(id).await.0 == 404).then_some(())
        })
        .await;
    }
    // Made again by a write carrying an expiry, through the node that forwards it.
    let (status, body) = increment_with_ttl(&other, id, 30).await;
    assert_eq!(status, 200, "{body}");
    let mut acknowledged = 1;
    for _ in 0..8 {
        let (status, body) = write(&other, id, 1).await;
        match status {
            200 => acknowledged += 1,
            _ => assert_refused(status, &body, "max", 3),
        }
    }
    assert_eq!(acknowledged, 3, "the bound holds in the new generation");
    // Both nodes keep the bounds, once each has heard the other's description.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    for api in [&slot_node, &other] {
        let held = rights(api, id).await;
        assert_eq!(held["max"], 3, "{held}");
        let (status, body) = write(api, id, 1).await;
        assert_refused(status, &body, "max", 3);
    }
    // The datacenter's part: its slots hold 3, the bound.
    let aggregator = cluster.aggregator(0).api();
    let path = format!("/counter/{}", encode_id(id));
    aggregator
        .read_until(CONVERGE, &path, |status, body| {
            status == 200 && body["value"] == 3
        })
        .await;
    let (_, own) = slot_node.read(id).await;
    assert_eq!(own["value"], 3, "the slot's part: {own}");
}

#[tokio::test]
async fn invalid_bounds_are_refused_with_400() {
    let cluster = TestCluster::start(topology(&[("USA_0", 1)])).await;
    let api = cluster.shards[0][0].api();
    for (n, body) in [
        json!({"min": 5, "max": 3}),
        json!({"min": 1}),
        json!({"max": -1}),
        json!({"min": 2, "max": 8}),
        json!({"min": -8, "max": -2}),
        json!({"type": "unique", "max": 10}),
        json!({"type": "unique", "min": -10}),
        json!({"max": "ten"}),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("invalid:{n}");
        let mut request = body.clone();
        request["id"] = json!(id);
        let (status, answer) = api.create(request).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(answer["error"].is_string(), "{body}: {answer}");
        assert_eq!(api.read(&id).await.0, 404, "{body} made {id}");
    }
    // Both bounds at zero: valid, and every write is refused.
    create_bounded(&api, "bounds:zero", Some(0), Some(0)).await;
    let (status, body) = write(&api, "bounds:zero", 1).await;
    assert_refused(status, &body, "max", 0);
    let (status, body) = write(&api, "bounds:zero", -1).await;
    assert_refused(status, &body, "min", 0);
    // An unbounded counter's description shows both as null; the same bounded create again
    // is 200.
    let free = api.created(json!({"id": "bounds:none"})).await;
    assert_eq!(
        (&free["min"], &free["max"]),
        (&Value::Null, &Value::Null),
        "{free}"
    );
    let (status, again) = api
        .create(json!({"id": "bounds:zero", "min": 0, "max": 0}))
        .await;
    assert_eq!(status, 200, "{again}");
    let (status, other) = api
        .create(json!({"id": "bounds:zero", "min": 0, "max": 5}))
        .await;
    assert_eq!(status, 409, "other bounds for an existing counter: {other}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_some_node_missed_is_503_until_sent_again() {
    const ID: &str = "quota:pushed";
    let cluster = TestCluster::start(topology(&[("USA_0", 1), ("ASIA_0", 2)])).await;
    let usa = cluster.shards[0][0].api();
    let body = json!({"id": ID, "max": 10});
    cluster.shards[1][1].pause();
    let (status, missed) = usa.create(body.clone()).await;
    cluster.shards[1][1].resume();
    assert_eq!(status, 503, "{missed}");
    let error = missed["error"].as_str().unwrap_or_default();
    assert!(error.contains("DC_ASIA_0_VAL_1"), "{missed}");
    assert!(!error.contains("DC_ASIA_0_VAL_0"), "{missed}");
    let (status, finished) = usa.create(body).await;
    assert_eq!((status, &finished["max"]), (200, &json!(10)), "{finished}");
    let (status, held) = cluster.shards[1][1]
        .api()
        .get_json(&format!("/counter/{ID}/rights"))
        .await;
    assert_eq!((status, &held["max"]), (200, &json!(10)), "{held}");
}

#[tokio::test]
async fn incrby_past_the_bound_is_an_error_reply_naming_it() {
    let topology = TestTopology::with_resp(&[("USA_0", 1)], SHARD_TOML, "");
    let cluster = TestCluster::start(topology).await;
    let api = cluster.shards[0][0].api();
    create_bounded(&api, "resp:quota", None, Some(10)).await;
    let mut stream = resp::connect(&cluster.topology, "USA_0", 0).await;
    assert_eq!(
        resp::line(&mut stream, &["INCRBY", "resp:quota", "7"]).await,
        ":7"
    );
    let refused = resp::line(&mut stream, &["INCRBY", "resp:quota", "4"]).await;
    assert!(
        refused.starts_with("-ERR ") && refused.contains("max 10"),
        "{refused}"
    );
    for total in 8..=10 {
        let reply = resp::line(&mut stream, &["INCR", "resp:quota"]).await;
        assert_eq!(reply, format!(":{total}"));
    }
    let refused = resp::line(&mut stream, &["INCR", "resp:quota"]).await;
    assert!(
        refused.starts_with("-ERR ") && refused.contains("max 10"),
        "{refused}"
    );
    assert_eq!(api.value("resp:quota").await, 10);
    create_bounded(&api, "resp:floor", Some(-2), None).await;
    let reply = resp::line(&mut stream, &["DECRBY", "resp:floor", "2"]).await;
    assert_eq!(reply, ":-2");
    let refused = resp::line(&mut stream, &["DECR", "resp:floor"]).await;
    assert!(
        refused.starts_with("-ERR ") && refused.contains("min -2"),
        "{refused}"
    );
}
