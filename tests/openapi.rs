//! Every tier's OpenAPI document is true: each documented operation of the shard node, the
//! datacenter aggregator and the global aggregator is sent a request (its path parameters
//! filled, its required query parameters and JSON body from the document's examples), and must
//! answer with one of the statuses the document lists for it, never "no such endpoint" or
//! "method not allowed".

use std::time::Duration;

use geocount_test_support::{Api, TestTopology};
use hyper::Method;
use serde_json::{Value, json};

/// The counter every `{id}` names.
const ID: &str = "openapi-doc";

/// Sends one request per documented operation of the tier behind `api`; returns what failed.
async fn check_document(tier: &str, api: &Api, slot: &str) -> Vec<String> {
    let (status, doc) = api.get_json("/openapi.json").await;
    assert_eq!(status, 200, "{tier}: {doc}");
    assert_eq!(doc["openapi"], "3.0.3", "{tier}");
    let paths = doc["paths"].as_object().expect("paths");
    assert!(!paths.is_empty(), "{tier}: no paths");
    let mut failures = Vec::new();
    for (path, item) in paths {
        for (method, operation) in item.as_object().expect("path item") {
            let mut url = path.replace("{id}", ID).replace("{slot}", slot);
            let query: Vec<String> = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query" && p["required"] == true)
                .map(|p| {
                    let example = p["example"]
                        .as_str()
                        .expect("required params have examples");
                    let encoded: String =
                        form_urlencoded::byte_serialize(example.as_bytes()).collect();
                    format!("{}={encoded}", p["name"].as_str().unwrap())
                })
                .collect();
            if !query.is_empty() {
                url = format!("{url}?{}", query.join("&"));
            }
            let content = &operation["requestBody"]["content"];
            let (headers, body) = match &content["application/json"]["example"] {
                Value::Null => (vec![], Vec::new()),
                example => (
                    vec![("content-type", "application/json")],
                    serde_json::to_vec(example).unwrap(),
                ),
            };
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let answer = api
                .send(method.clone(), &url, &headers, body)
                .await
                .unwrap_or_else(|e| panic!("{tier} {method} {url}: {e}"));
            let status = answer.status.as_u16().to_string();
            let documented = operation["responses"].as_object().expect("responses");
            if !documented.contains_key(&status) {
                failures.push(format!(
                    "{tier} {method} {url}: {status} is not documented ({:?}): {}",
                    documented.keys().collect::<Vec<_>>(),
                    String::from_utf8_lossy(&answer.body)
                ));
            }
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
    let (status, created) = shard.create(json!({"id": ID})).await;
    assert_eq!(status, 201, "{created}");
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
