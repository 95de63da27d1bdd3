//! Every tier's OpenAPI document is true: each documented operation of the shard node, the
//! datacenter aggregator and the global aggregator is sent a request (its path parameters
//! filled, its required query parameters and JSON body from the document's examples), and must
//! answer with one of the statuses the document lists for it, never "no such endpoint" or
//! "method not allowed". A method a path does not take is refused with `Allow`; the documents
//! state parameter bounds, and ask for credentials exactly when the topology has `[auth]`.

use std::time::Duration;

use geocount_test_support::access::{self, ADMIN};
use geocount_test_support::openapi;
use geocount_test_support::{Api, NodeProcess, TestTopology};
use hyper::Method;
use serde_json::{Value, json};

/// The counter every `{id}` names.
const ID: &str = "openapi-doc";

/// Sends one request per documented operation of the tier behind `api`; returns what failed.
async fn check_document(tier: &str, api: &Api, slot: &str) -> Vec<String> {
    let (status, doc) = api.get_json("/openapi.json").await;
    assert_eq!(status, 200, "{tier}: {doc}");
    assert_eq!(doc["openapi"], "3.0.3", "{tier}");
    let operations = openapi::operations(&doc, ID, slot);
    assert!(!operations.is_empty(), "{tier}: no paths");
    let mut failures = Vec::new();
    for operation in operations {
        let (method, url) = (&operation.method, &operation.url);
        let (headers, body) = operation.json_body();
        let answer = api
            .send(method.clone(), url, &headers, body)
            .await
            .unwrap_or_else(|e| panic!("{tier} {method} {url}: {e}"));
        let status = answer.status.as_u16().to_string();
        let documented = operation.operation["responses"]
            .as_object()
            .expect("responses");
        if !documented.contains_key(&status) {
            failures.push(format!(
                "{tier} {method} {url}: {status} is not documented ({:?}): {}",
                documented.keys().collect::<Vec<_>>(),
                String::from_utf8_lossy(&answer.body)
            ));
        }
    }
    failures
}

#[tokio::test]
async fn every_documented_operation_of_every_tier_answers_as_documented() {
    let topology = TestTopology::single_with(
        "restore_timeout_ms = 200",
        "[trending]\nwindow_seconds = 300\nthresholds = {\"#\" = 5}\n",
    );
    let shard = topology.start_shard("USA_0", 0).await;
    let datacenter = topology.start_datacenter_aggregator("USA_0").await;
    let global = topology.start_global_aggregator().await;
    let (shard, datacenter, global) = (shard.api(), datacenter.api(), global.api());
    shard.created(json!({"id": ID})).await;
    let (status, written) = shard.add(ID, 3).await.unwrap();
    assert_eq!(status, 200, "{written}");
    // The aggregators' documented 200s need the counter to have reached them.
    let within = Duration::from_secs(8);
    datacenter
        .read_until(within, &format!("/counter/{ID}"), |s, _| s == 200)
        .await;
    global
        .read_until(within, &format!("/counter/{ID}"), |s, _| s == 200)
        .await;

    let slot = "DC_USA_0_VAL_0";
    let mut failures = check_document("shard node", &shard, slot).await;
    failures.extend(check_document("datacenter aggregator", &datacenter, slot).await);
    failures.extend(check_document("global aggregator", &global, slot).await);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The shard node, datacenter aggregator and global aggregator of `topology`'s USA_0.
async fn tiers(topology: &TestTopology) -> [(&'static str, NodeProcess); 3] {
    [
        ("shard node", topology.start_shard("USA_0", 0).await),
        (
            "datacenter aggregator",
            topology.start_datacenter_aggregator("USA_0").await,
        ),
        (
            "global aggregator",
            topology.start_global_aggregator().await,
        ),
    ]
}

/// The schema of query parameter `name` of `operation`.
fn query_schema<'a>(operation: &'a Value, name: &str) -> &'a Value {
    let parameters = operation["parameters"].as_array().expect("parameters");
    let parameter = parameters.iter().find(|p| p["name"] == name);
    &parameter.unwrap_or_else(|| panic!("no parameter {name}"))["schema"]
}

#[tokio::test]
async fn a_method_a_path_does_not_take_is_refused_with_allow() {
    let topology = TestTopology::single("restore_timeout_ms = 200");
    for (tier, process) in tiers(&topology).await {
        let api = process.api();
        // A shard node also deletes a counter and changes its expiry there.
        let counter = if tier == "shard node" {
            "DELETE, GET, PATCH"
        } else {
            "GET"
        };
        for (method, path, allowed) in [
            (Method::PUT, "/counter/x", counter),
            (Method::PUT, "/sync", "POST"),
            (Method::POST, "/healthz", "GET"),
            // The method is refused whatever the id: it is never decoded.
            (Method::PUT, "/counter/%FF", counter),
        ] {
            let answer = api
                .send(method.clone(), path, &[], Vec::new())
                .await
                .unwrap();
            assert_eq!(answer.status, 405, "{tier} {method} {path}");
            assert_eq!(answer.headers["allow"], allowed, "{tier} {method} {path}");
            let body = answer.json();
            assert!(
                body["error"].as_str().unwrap().contains("not allowed"),
                "{body}"
            );
        }
        if tier == "shard node" {
            let answer = api
                .send(Method::GET, "/counter/x/write", &[], Vec::new())
                .await
                .unwrap();
            assert_eq!(answer.status, 405);
            assert_eq!(answer.headers["allow"], "PATCH");
        }
    }
}

#[tokio::test]
async fn documents_state_bounds_and_no_credentials_without_auth() {
    let topology = TestTopology::single("restore_timeout_ms = 200");
    for (tier, process) in tiers(&topology).await {
        let (status, doc) = process.api().get_json("/openapi.json").await;
        assert_eq!(status, 200, "{tier}");
        assert!(doc["security"].is_null(), "{tier}: {}", doc["security"]);
        assert!(doc["components"]["securitySchemes"].is_null(), "{tier}");
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let responses = &operation["responses"];
                assert!(
                    responses["401"].is_null() && responses["403"].is_null(),
                    "{tier} {method} {path}: no credential is asked for"
                );
            }
        }
        let read = &doc["paths"]["/counter/{id}"]["get"];
        assert_eq!(query_schema(read, "window")["minimum"], 1, "{tier}");
        assert_eq!(read["parameters"][0]["schema"]["maxLength"], 256, "{tier}");
        let metrics = &doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
        let (media_type, _) = metrics.as_object().unwrap().iter().next().unwrap();
        assert!(
            media_type.starts_with("application/openmetrics-text"),
            "{tier}"
        );
        if tier != "shard node" {
            let top = &doc["paths"]["/topk"]["get"];
            assert_eq!(query_schema(top, "k")["minimum"], 1, "{tier}");
            assert_eq!(query_schema(top, "k")["maximum"], 1000, "{tier}");
        }
        if tier == "global aggregator" {
            let staleness = query_schema(read, "max_staleness_ms");
            assert_eq!(staleness["minimum"], 0, "{tier}");
        }
    }
}

#[tokio::test]
async fn documents_ask_for_credentials_with_auth() {
    let topology = access::topology(&[("USA_0", 1)]);
    for (tier, process) in tiers(&topology).await {
        // The document itself is open.
        let (status, doc) = process.api().get_json("/openapi.json").await;
        assert_eq!(status, 200, "{tier}");
        assert_eq!(doc["security"], json!([{"bearer": []}]), "{tier}");
        let schemes = &doc["components"]["securitySchemes"];
        assert_eq!(schemes["bearer"]["scheme"], "bearer", "{tier}");
        assert_eq!(schemes["process"]["in"], "header", "{tier}");
        let read = &doc["paths"]["/counter/{id}"]["get"];
        assert!(
            read["security"].is_null(),
            "{tier}: the bearer requirement holds"
        );
        assert!(read["responses"]["401"].is_object(), "{tier}");
        assert!(read["responses"]["403"].is_object(), "{tier}");
        let sync = &doc["paths"]["/sync"]["post"];
        assert_eq!(
            sync["security"],
            json!([{"process": [], "processKey": []}]),
            "{tier}"
        );
        assert!(sync["responses"]["403"].is_object(), "{tier}");
        let health = &doc["paths"]["/healthz"]["get"];
        assert_eq!(health["security"], json!([]), "{tier}");
        assert!(health["responses"]["401"].is_null(), "{tier}");
        // What the document says holds: no token, 401; the admin token reads.
        let (status, _) = process.api().get_json("/counter/x").await;
        assert_eq!(status, 401, "{tier}");
        let (status, body) = process.api().with_token(ADMIN).get_json("/counter/x").await;
        assert!(![401, 403].contains(&status), "{tier}: {status} {body}");
    }
}
