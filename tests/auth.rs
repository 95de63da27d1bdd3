//! End-to-end tests of access control (README, "Access"): client tokens and their rights at
//! every tier, the process keys between tiers, and the loopback rule. Real binaries on
//! loopback ports.

use std::process::Command;
use std::time::Duration;

use geocount_model::wire::BatchEntry;
use geocount_test_support::access::{
    ADMIN, READER, REFUSED, SECRET, SECRET_HEADER, WRITER, assert_refusal_logged, forward, topology,
};
use geocount_test_support::api::entry;
use geocount_test_support::ports::free_addr;
use geocount_test_support::process::{binary, config_error};
use geocount_test_support::{Api, Method, NodeProcess, TestTopology, eventually};
use serde_json::{Value, json};

const PROCESS_HEADER: &str = "x-geocount-process";
const PROCESS_KEY_HEADER: &str = "x-geocount-process-key";

/// Datacenter USA_0 of two shard nodes, with its aggregator and the global one.
async fn datacenter_of_two() -> (TestTopology, [NodeProcess; 2], [NodeProcess; 2]) {
    let t = topology(&[("USA_0", 2)]);
    let aggregators = [
        t.start_global_aggregator().await,
        t.start_datacenter_aggregator("USA_0").await,
    ];
    let shards = [
        t.start_shard("USA_0", 0).await,
        t.start_shard("USA_0", 1).await,
    ];
    (t, aggregators, shards)
}

async fn status(api: &Api, method: Method, path: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let answer = api
        .send(method, path, headers, Vec::new())
        .await
        .expect("an answer");
    (answer.status.as_u16(), answer.json())
}

#[tokio::test]
async fn client_tokens_need_their_rights_and_refusals_change_nothing() {
    let (t, _aggregators, shards) = datacenter_of_two().await;
    let anonymous = shards[0].api();
    let reader = shards[0].api().with_token(READER);
    let writer = shards[0].api().with_token(WRITER);
    let admin = shards[0].api().with_token(ADMIN);
    let stranger = shards[0].api().with_token(&READER.replace('r', "R"));

    // No token, or an unknown one: 401, whatever the route asks.
    let (code, body) = anonymous.add("auth:likes", 100).await.unwrap();
    assert_eq!(code, 401, "{body}");
    assert!(body["error"].as_str().unwrap().contains("Bearer"), "{body}");
    assert_eq!(anonymous.create(json!({"id": "auth:likes"})).await.0, 401);
    assert_eq!(anonymous.read("auth:likes").await.0, 401);
    assert_eq!(stranger.add("auth:likes", 100).await.unwrap().0, 401);
    assert_eq!(stranger.read("auth:likes").await.0, 401);
    // A valid token without the right: 403, naming the token.
    let (code, body) = reader.add("auth:likes", 100).await.unwrap();
    assert_eq!(code, 403, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("dashboard"),
        "{body}"
    );
    let (code, _) = reader.batch(&[entry("auth:likes", 100)]).await.unwrap_err();
    assert_eq!(code, 403);
    let (code, body) = writer
        .create(json!({"id": "auth:likes", "numberOfShards": 2}))
        .await;
    assert_eq!(code, 403, "{body}");
    // None of it reached the node: the counter is unknown.
    assert_eq!(reader.read("auth:likes").await.0, 404);

    // admin creates; write writes, on either node (forwarded between them with the secret).
    admin
        .created(json!({"id": "auth:likes", "numberOfShards": 2}))
        .await;
    for _ in 0..4 {
        assert_eq!(writer.add("auth:likes", 2).await.unwrap().0, 200);
        let (code, body) = shards[1]
            .api()
            .with_token(WRITER)
            .add("auth:likes", 3)
            .await
            .unwrap();
        assert_eq!(code, 200, "{body}");
    }
    assert_eq!(admin.add("auth:likes", 1).await.unwrap().0, 200);
    assert_eq!(reader.add("auth:likes", 100).await.unwrap().0, 403);

    // Every tier's pulls carry the secret: the writes reach the global aggregator, exactly.
    let global = Api::new(t.topology.global.listen);
    assert_eq!(global.read("auth:likes").await.0, 401);
    assert_eq!(
        status(&global, Method::GET, "/datacenters", &[]).await.0,
        401
    );
    let global = global.with_token(READER);
    let body = global
        .read_until(
            Duration::from_secs(10),
            "/counter/auth:likes",
            |code, body| code == 200 && body["value"] == 21,
        )
        .await;
    assert_eq!(body["datacenters"]["USA_0"]["value"], 21, "{body}");
    let aggregator = Api::new(t.topology.datacenters[0].aggregator);
    assert_eq!(aggregator.read("auth:likes").await.0, 401);
    assert_eq!(aggregator.with_token(READER).value("auth:likes").await, 21);
    let global_writer = Api::new(t.topology.global.listen).with_token(WRITER);
    assert_eq!(global_writer.read("auth:likes").await.0, 403);

    // Probes stay open.
    for path in ["/healthz", "/metrics", "/openapi.json"] {
        assert_eq!(
            status(&anonymous, Method::GET, path, &[]).await.0,
            200,
            "{path}"
        );
    }
}

#[tokio::test]
async fn routes_between_tiers_need_a_proven_process() {
    // One slot: every write is this node's, so a refused forward is easy to see.
    let t = topology(&[("USA_0", 1)]);
    let mut shard = t.start_shard("USA_0", 0).await;
    let writer = shard.api().with_token(WRITER);
    assert_eq!(writer.add("fake:peer", 5).await.unwrap().0, 200);

    // A fake peer: naming no process, naming one with a wrong key, sending the cluster secret
    // itself, or a client's (admin) token.
    let plain = shard.api();
    let wrong = shard
        .api()
        .with_header(PROCESS_HEADER, "DC_USA_0_VAL_0")
        .with_header(PROCESS_KEY_HEADER, &"0".repeat(64));
    let secret = shard.api().with_header(SECRET_HEADER, SECRET);
    let admin = shard.api().with_token(ADMIN);
    for fake in [&plain, &wrong, &secret, &admin] {
        let (code, body) = status(fake, Method::POST, "/sync", &[]).await;
        assert_eq!(code, 403, "{body}");
        assert_eq!(body["route"], "POST /sync", "{body}");
        let copy = "/slots/DC_USA_0_VAL_0/copy";
        assert_eq!(status(fake, Method::GET, copy, &[]).await.0, 403);
    }
    // As the slot's own node (restoring it) the copy answers.
    let own = t.api_as(t.shard_addr("USA_0", 0), "DC_USA_0_VAL_0");
    let copy = status(&own, Method::GET, "/slots/DC_USA_0_VAL_0/copy", &[]).await;
    assert_eq!(copy.0, 200);

    // A write marked as forwarded needs a shard node of the datacenter, even with a client's
    // write token.
    for fake in [&writer, &wrong] {
        for answer in forward(fake, "fake:peer", 100).await {
            assert_eq!(answer.status, 403, "{}", answer.json());
        }
    }
    let (code, body) = shard.api().with_token(READER).read("fake:peer").await;
    assert_eq!((code, &body["value"]), (200, &json!(5)), "{body}");

    // Each refusal is logged with the peer's address.
    assert_refusal_logged(&mut shard, &["peer", "127.0.0.1:"]).await;
}

#[tokio::test]
async fn a_node_with_another_secret_never_reaches_the_aggregator() {
    let t = topology(&[("USA_0", 2)]);
    let _global = t.start_global_aggregator().await;
    let mut aggregator = t.start_datacenter_aggregator("USA_0").await;
    let _good = t.start_shard("USA_0", 0).await;
    // Slot 1 runs with the same topology but another secret.
    let other = t.dir().join("other-secret.toml");
    let text = std::fs::read_to_string(&t.path).unwrap();
    std::fs::write(&other, text.replace(SECRET, &SECRET.replace('c', "k"))).unwrap();
    let args = [
        "--config",
        &other.display().to_string(),
        "--dc",
        "USA_0",
        "--slot",
        "1",
    ]
    .map(str::to_owned);
    let mut stray = t.start_shard_with_args("USA_0", 1, &args).await;

    // Find a counter whose one slot is the stray node's, and write it there.
    let stray_reader = stray.api().with_token(READER);
    let mut ids = (0..100).map(|n| format!("stray:{n}"));
    let id = loop {
        let id = ids.next().expect("some counter routes to slot 1");
        let (code, route) = stray_reader.get_json(&format!("/counter/{id}/route")).await;
        assert_eq!(code, 200, "{route}");
        if route["slots"][0]["slot"] == "DC_USA_0_VAL_1" {
            break id;
        }
    };
    let (code, body) = stray.api().with_token(WRITER).add(&id, 7).await.unwrap();
    assert_eq!(code, 200, "{body}");

    // Both sides refuse the other and say so.
    aggregator
        .wait_for_log(REFUSED, Duration::from_secs(5))
        .await;
    stray.wait_for_log(REFUSED, Duration::from_secs(5)).await;
    // The good slot is heard; the stray one never is, and its counter never arrives.
    let aggregator = aggregator.api().with_token(READER);
    let health = eventually(Duration::from_secs(5), "slot 0 heard", || async {
        let (_, body) = aggregator.get_json("/healthz").await;
        (!body["slots"]["DC_USA_0_VAL_0"]["staleness_ms"].is_null()).then_some(body)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, health_later) = aggregator.get_json("/healthz").await;
    for body in [&health, &health_later] {
        let stray_slot = &body["slots"]["DC_USA_0_VAL_1"];
        assert!(stray_slot["staleness_ms"].is_null(), "{body}");
    }
    let error = health_later["slots"]["DC_USA_0_VAL_1"]["last_error"].to_string();
    assert!(error.contains("403"), "{error}");
    assert_eq!(aggregator.read(&id).await.0, 404);
}

#[test]
fn a_public_address_without_tokens_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("public.toml");
    let public = format!("0.0.0.0:{}", free_addr().port());
    let text = format!(
        "[global]\nlisten = \"{}\"\n\n[shard]\ndata_dir = \"{}\"\n\n\
         [[datacenters]]\nname = \"USA_0\"\naggregator = \"{}\"\nshards = [\"{}\", \"{public}\"]\n",
        free_addr(),
        dir.path().join("data").display(),
        free_addr(),
        free_addr(),
    );
    std::fs::write(&path, text).unwrap();
    let config = path.display().to_string();
    // Runs binary `name` on the file, which it must refuse: its one line on stderr.
    let refused = |name: &str, args: &[&str]| {
        config_error(
            Command::new(binary(name))
                .args(["--config", &config])
                .args(args),
        )
    };
    // Slot 1 is on 0.0.0.0: refused, naming the file and the key.
    let stderr = refused("shard-node", &["--dc", "USA_0", "--slot", "1"]);
    let expected = format!("shard-node: {config}: datacenters[0].shards[1]: {public} ");
    assert!(stderr.starts_with(&expected), "{stderr}");
    assert!(stderr.contains("auth.insecure_public = true"), "{stderr}");

    // Tokens without a cluster secret are refused too.
    let tokens =
        format!("\n[[auth.tokens]]\nname = \"web\"\ntoken = \"{WRITER}\"\nrights = [\"write\"]\n");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&tokens);
    std::fs::write(&path, text).unwrap();
    let stderr = refused("global-aggregator", &[]);
    let expected = format!("global-aggregator: {config}: auth.cluster_secret: ");
    assert!(stderr.starts_with(&expected), "{stderr}");

    // Tokens and a secret on a public address without [tls]: they would cross the network in
    // clear text. Refused, unless the operator says so.
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&format!("\n[auth]\ncluster_secret = \"{SECRET}\"\n"));
    std::fs::write(&path, &text).unwrap();
    let stderr = refused("shard-node", &["--dc", "USA_0", "--slot", "1"]);
    let expected = format!("shard-node: {config}: datacenters[0].shards[1]: {public} ");
    assert!(stderr.starts_with(&expected), "{stderr}");
    assert!(
        stderr.contains("auth.insecure_plaintext = true"),
        "{stderr}"
    );
    assert!(stderr.contains("clear text"), "{stderr}");
    std::fs::write(&path, text + "insecure_plaintext = true\n").unwrap();
    let mut node = Command::new(binary("shard-node"))
        .args([
            "--config",
            &config,
            "--dc",
            "USA_0",
            "--slot",
            "1",
            "--restore",
            "empty",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run shard-node");
    std::thread::sleep(Duration::from_millis(500));
    let running = node.try_wait().unwrap().is_none();
    node.kill().unwrap();
    let output = node.wait_with_output().unwrap();
    assert!(running, "{}", String::from_utf8_lossy(&output.stderr));
}

/// Two tenants that pick the same `Idempotency-Key` never meet: each one's write with key `1`
/// is applied, through either node and in batches too, and a refusal of a reused key names only
/// the tenant's own first write.
#[tokio::test]
async fn idempotency_keys_are_scoped_by_the_token_that_sent_them() {
    let (_topology, _aggregators, shards) = datacenter_of_two().await;
    let tenant_a = shards[0].api().with_token(WRITER);
    let tenant_b = shards[1].api().with_token(ADMIN);
    let reader = shards[0].api().with_token(READER);
    let total = |api: &Api, id: &'static str| {
        let api = api.clone();
        async move {
            let path = format!("/counter/{id}/route");
            let (_, route) = api.get_json(&path).await;
            let mut total = 0;
            for slot in route["slots"].as_array().unwrap() {
                let node =
                    Api::new(slot["address"].as_str().unwrap().parse().unwrap()).with_token(READER);
                let (code, body) = node.read(id).await;
                if code == 200 {
                    total += body["value"].as_i64().unwrap();
                }
            }
            total
        }
    };

    let (code, body) = tenant_a
        .write_keyed("scoped:m", json!({"delta": 3}), "1")
        .await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = tenant_b
        .write_keyed("scoped:m", json!({"delta": 1}), "1")
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        total(&reader, "scoped:m").await,
        4,
        "both tenants' writes applied"
    );
    // A's retry is still A's: answered as its first write, applied once.
    let (code, _) = tenant_a
        .write_keyed("scoped:m", json!({"delta": 3}), "1")
        .await;
    assert_eq!(code, 200);
    assert_eq!(total(&reader, "scoped:m").await, 4);
    // Key 1 on another counter of the same slot: each tenant is refused naming its own write.
    let slot_of = |id: String| {
        let reader = reader.clone();
        async move {
            let (_, route) = reader.get_json(&format!("/counter/{id}/route")).await;
            route["slots"][0]["slot"].as_str().unwrap().to_owned()
        }
    };
    let slot = slot_of("scoped:m".into()).await;
    let mut other = String::new();
    for n in 0.. {
        other = format!("scoped:other-{n}");
        if slot_of(other.clone()).await == slot {
            break;
        }
    }
    let (code, body) = tenant_b.write_keyed(&other, json!({"delta": 7}), "1").await;
    assert_eq!(code, 422, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.contains("delta 1") && !error.contains("delta 3"),
        "{body}"
    );
    let (code, body) = tenant_a.write_keyed(&other, json!({"delta": 7}), "1").await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("delta 3"),
        "{body}"
    );
    // Batches are scoped the same way.
    let entry = |key| BatchEntry {
        id: "scoped:batch",
        delta: 5,
        idempotency_key: Some(key),
        timestamp: None,
    };
    for api in [&tenant_a, &tenant_b] {
        let answer = api.batch(&[entry("k")]).await.expect("batch");
        assert!(
            matches!(
                answer.outcomes[0],
                geocount_model::wire::EntryOutcome::Applied { .. }
            ),
            "{answer:?}"
        );
    }
    assert_eq!(total(&reader, "scoped:batch").await, 10);
    // A key holding the scope separator could pose as another scope: refused (a header
    // cannot carry it; a batch entry can).
    let answer = tenant_a.batch(&[entry("ops\u{1f}k")]).await.expect("batch");
    assert!(
        matches!(
            answer.outcomes[0],
            geocount_model::wire::EntryOutcome::Refused { status: 400, .. }
        ),
        "{answer:?}"
    );
}

/// A write of `body` to `id` through `api` (`POST /counters/{id}/increment`): its status.
async fn increment(api: &Api, id: &str, body: Value) -> (u16, Value) {
    let path = format!("/counters/{id}/increment");
    let answer = api
        .send(Method::POST, &path, &[], body.to_string())
        .await
        .expect("an answer");
    (answer.status.as_u16(), answer.json())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_only_token_cannot_give_a_live_counter_an_expiry() {
    let (_t, _aggregators, shards) = datacenter_of_two().await;
    let writers = [0, 1].map(|n| shards[n].api().with_token(WRITER));
    let admin = shards[0].api().with_token(ADMIN);
    let reader = shards[1].api().with_token(READER);
    // One counter created by admin, one made by writes alone (no description anywhere).
    admin.created(json!({"id": "auth:kept"})).await;
    for id in ["auth:kept", "auth:written"] {
        let (code, body) = increment(&writers[0], id, json!({"delta": 100})).await;
        assert_eq!(code, 200, "{body}");
    }
    let path = "/counter/auth:kept";
    let (code, body) = writers[0]
        .send(Method::PATCH, path, &[], r#"{"ttlSeconds": 1}"#)
        .await
        .map(|a| (a.status.as_u16(), a.json()))
        .unwrap();
    assert_eq!(code, 403, "{body}");
    assert_eq!(status(&writers[0], Method::DELETE, path, &[]).await.0, 403);
    // A write's `ttlSeconds` through either node (the slot's, and one forwarding to it) is
    // applied, but gives neither live counter an expiry.
    for id in ["auth:kept", "auth:written"] {
        for writer in &writers {
            let (code, body) = increment(writer, id, json!({"delta": 1, "ttlSeconds": 1})).await;
            assert_eq!(code, 200, "{body}");
        }
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for id in ["auth:kept", "auth:written"] {
        let (code, body) = reader.get_json(&format!("/counter/{id}/world")).await;
        assert_eq!((code, &body["value"]), (200, &json!(102)), "{id}: {body}");
    }
    // A counter a write makes takes the write's expiry.
    let (code, body) = increment(&writers[1], "auth:made", json!({"ttlSeconds": 1})).await;
    assert_eq!(code, 200, "{body}");
    eventually(Duration::from_secs(10), "auth:made to expire", || async {
        let (code, _) = reader.get_json("/counter/auth:made/world").await;
        (code == 404).then_some(())
    })
    .await;
}

/// A token's name may be any text (`café` and a line break, which no header holds): a keyed
/// change of a counter's life it sends is forwarded to the node its key picks with the key's
/// scope intact, so a retry through the other node is answered as the first.
#[tokio::test]
async fn a_keyed_lifecycle_change_forwarded_under_a_token_name_no_header_holds_applies_once() {
    let auth = format!(
        "[auth]\ncluster_secret = \"{SECRET}\"\n\n\
         [[auth.tokens]]\nname = \"café\\n\"\ntoken = \"{ADMIN}\"\nrights = [\"admin\"]\n"
    );
    let t = TestTopology::with_extra(&[("USA_0", 2)], "restore_timeout_ms = 200", &auth);
    let _aggregators = [
        t.start_global_aggregator().await,
        t.start_datacenter_aggregator("USA_0").await,
    ];
    let shards = [
        t.start_shard("USA_0", 0).await,
        t.start_shard("USA_0", 1).await,
    ];
    let apis = [
        shards[0].api().with_token(ADMIN),
        shards[1].api().with_token(ADMIN),
    ];
    let (code, body) = apis[0]
        .write_keyed("life:cafe", json!({"delta": 5}), "w-1")
        .await;
    assert_eq!(code, 200, "{body}");
    let path = "/counter/life:cafe/reset";
    let headers = [("Idempotency-Key", "reset-1")];
    // Through both nodes: the key picks one slot, so one of the two forwards.
    let mut generations = Vec::new();
    for api in &apis {
        let answer = api
            .send(Method::POST, path, &headers, Vec::new())
            .await
            .expect("an answer");
        let body = answer.json();
        assert_eq!(answer.status.as_u16(), 200, "{body}");
        generations.push(body["generation"].clone());
    }
    assert_eq!(generations[0], generations[1], "{generations:?}");
}
