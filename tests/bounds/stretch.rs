//! Rights that cannot be stretched: a node that holds a bounded counter only as a tombstone
//! gives none of its rights, bounds are refused on an id some node already holds writes of,
//! and a write the whole room cannot hold is refused without moving anyone's rights. Each
//! test reads every datacenter's part from the global aggregator, not only the clamped total.

use geocount_test_support::api::encode_id;
use geocount_test_support::{Api, Method, TestCluster, eventually};
use serde_json::{Value, json};

use super::{CONVERGE, applied, assert_refused, create_bounded, rights, topology, write};

/// Waits until the global aggregator has heard every datacenter of `id` and their parts add
/// up to `total`; the parts, by datacenter.
async fn parts(global: &Api, id: &str, total: i64) -> Vec<(String, i64)> {
    let path = format!("/counter/{}", encode_id(id));
    let body = global
        .read_until(CONVERGE, &path, |status, body| {
            status == 200 && body["complete"] != false && sum_of_parts(body) == total
        })
        .await;
    let parts = body["datacenters"].as_object().expect("parts");
    (parts.iter())
        .map(|(dc, part)| (dc.clone(), part["value"].as_i64().expect("a part")))
        .collect()
}

/// The sum of a global read's datacenters' parts.
fn sum_of_parts(body: &Value) -> i64 {
    (body["datacenters"].as_object().into_iter().flatten())
        .filter_map(|(_, part)| part["value"].as_i64())
        .sum()
}

/// Waits until `api`'s slot reads counter `id` as `status` (404: gone; 200: live).
async fn reads_as(api: &Api, id: &str, status: u16) {
    eventually(CONVERGE, "a shard node's read of the counter", || async {
        (api.read(id).await.0 == status).then_some(())
    })
    .await;
}

/// Writes 1 to `id` through each of `apis` in turn, `rounds` times: how many were
/// acknowledged (the others must be refused at max `max`).
async fn spend(apis: &[&Api], id: &str, rounds: usize, max: i64) -> i64 {
    let mut acknowledged = 0;
    for _ in 0..rounds {
        for api in apis {
            match write(api, id, 1).await {
                (200, _) => acknowledged += 1,
                (status, body) => assert_refused(status, &body, "max", max),
            }
        }
    }
    acknowledged
}

/// Max 2 over USA_0 and ASIA_0 (1 each). The counter goes (`end`: deleted, or expired), ASIA_0
/// learns it is gone, then USA_0's writes make it again and ask ASIA_0 for rights before
/// ASIA_0 has heard of the new one: ASIA_0 gives nothing of a counter it holds only as gone, so
/// its share is spent once, here or there.
async fn gone_and_made_again(id: &str, end: &str) {
    let cluster = TestCluster::start(topology(&[("USA_0", 1), ("ASIA_0", 1)])).await;
    let [usa, asia] = [0, 1].map(|d| cluster.shards[d][0].api());
    let mut body = json!({"id": id, "max": 2});
    if end == "expired" {
        body["ttlSeconds"] = json!(2);
    }
    assert_eq!(usa.created(body).await["max"], 2);
    if end == "deleted" {
        let path = format!("/counter/{}", encode_id(id));
        let deleted = usa.send(Method::DELETE, &path, &[], "").await;
        assert_eq!(deleted.expect("delete").status, 200);
    }
    reads_as(&asia, id, 404).await;
    reads_as(&usa, id, 404).await;

    // Made again by a write at USA_0 (with its bounds), which spends USA_0's share; the next
    // one asks ASIA_0 at once.
    applied(&usa, id, 1).await;
    let mut acknowledged = 1 + spend(&[&usa], id, 1, 2).await;
    eventually(
        CONVERGE,
        "ASIA_0 to hold the counter made again",
        || async {
            let (status, _) = asia
                .get_json(&format!("/counter/{}/rights", encode_id(id)))
                .await;
            (status == 200).then_some(())
        },
    )
    .await;
    acknowledged += spend(&[&asia, &usa], id, 2, 2).await;
    let parts = parts(&cluster.global.api(), id, acknowledged).await;
    assert_eq!(
        acknowledged,
        2,
        "{end}, made again: writes acknowledged past max 2; parts {parts:?}; ASIA_0's slot: {}",
        rights(&asia, id).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_counter_made_again_spends_its_room_once() {
    gone_and_made_again("quota:deleted", "deleted").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_counter_made_again_spends_its_room_once() {
    gone_and_made_again("quota:expired", "expired").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_on_an_id_written_elsewhere_are_refused() {
    const ID: &str = "quota:late";
    let cluster = TestCluster::start(topology(&[("USA_0", 1), ("ASIA_0", 1)])).await;
    let [usa, asia] = [0, 1].map(|d| cluster.shards[d][0].api());
    // Written at ASIA_0 with no description; USA_0 has not heard of it.
    applied(&asia, ID, 1000).await;
    let (status, refused) = usa.create(json!({"id": ID, "max": 10})).await;
    assert_eq!(status, 409, "bounds on an id written elsewhere: {refused}");
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(error.contains("DC_ASIA_0_VAL_0"), "{refused}");
    // The bounds are in use nowhere: USA_0 writes past them, and neither slot holds rights.
    applied(&usa, ID, 20).await;
    let rights_path = format!("/counter/{}/rights", encode_id(ID));
    for api in [&usa, &asia] {
        eventually(CONVERGE, "no bounds held", || async {
            (api.get_json(&rights_path).await.0 == 404).then_some(())
        })
        .await;
    }
    let mut parts = parts(&cluster.global.api(), ID, 1020).await;
    parts.sort();
    assert_eq!(
        parts,
        [("ASIA_0".to_owned(), 1000), ("USA_0".to_owned(), 20)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_past_the_whole_room_moves_no_rights() {
    const ID: &str = "quota:oversized";
    let datacenters = [("USA_0", 1), ("EUROPE_0", 1), ("ASIA_0", 1)];
    let cluster = TestCluster::start(topology(&datacenters)).await;
    let [usa, europe, asia] = [0, 1, 2].map(|d| cluster.shards[d][0].api());
    create_bounded(&usa, ID, None, Some(90)).await;
    let held = || async {
        let mut up = Vec::new();
        for api in [&usa, &europe, &asia] {
            up.push(rights(api, ID).await["up"].as_i64().expect("up-rights"));
        }
        up
    };
    assert_eq!(held().await, [30, 30, 30]);
    for api in [&usa, &asia] {
        let (status, body) = write(api, ID, 91).await;
        assert_refused(status, &body, "max", 90);
    }
    assert_eq!(
        held().await,
        [30, 30, 30],
        "rights moved for refused writes"
    );
    // A write no other slot holds the rights for alone takes them from both.
    applied(&usa, ID, 70).await;
    assert_eq!(held().await.iter().sum::<i64>(), 20, "{:?}", held().await);
    applied(&asia, ID, 20).await;
    let (status, body) = write(&europe, ID, 1).await;
    assert_refused(status, &body, "max", 90);
    let mut parts = parts(&cluster.global.api(), ID, 90).await;
    parts.sort();
    assert_eq!(
        parts,
        [
            ("ASIA_0".to_owned(), 20),
            ("EUROPE_0".to_owned(), 0),
            ("USA_0".to_owned(), 70)
        ]
    );
}
