//! `geoctl create ID [--shards N]`: `POST /counter` to a random shard node; prints the
//! description the node answers.

use std::io::Write;

use bytes::Bytes;
use geocount_model::CounterDescription;
use hyper::Method;
use serde::Serialize;

use crate::cluster::{ClusterClient, ShardNode, parse_body, status_error};
use crate::error::GeoctlError;

/// What `geoctl create` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOptions {
    /// The new counter's id.
    pub id: String,
    /// How many of each datacenter's slots take its writes; `None`: the nodes' default.
    pub shards: Option<u32>,
    /// The lowest world total its writes may reach (a bounded counter).
    pub min: Option<i64>,
    /// The highest world total its writes may reach (a bounded counter).
    pub max: Option<i64>,
}

/// The body of `POST /counter`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CreateBody<'a> {
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    number_of_shards: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<i64>,
}

/// Creates the counter and prints its description to `out`.
pub async fn run(
    cluster: &ClusterClient,
    options: &CreateOptions,
    out: &mut dyn Write,
) -> Result<(), GeoctlError> {
    let body = serde_json::to_vec(&CreateBody {
        id: &options.id,
        number_of_shards: options.shards,
        min: options.min,
        max: options.max,
    })
    .map_err(|e| GeoctlError::InvalidArgument(format!("cannot encode the request: {e}")))?;
    let (node, url, answer) = cluster
        .send_to_any_shard(
            Method::POST,
            "/counter",
            &[("content-type", "application/json")],
            Bytes::from(body),
        )
        .await?;
    if !answer.status.is_success() {
        return Err(status_error(&url, &answer));
    }
    let description: CounterDescription = parse_body(&url, &answer)?;
    out.write_all(render_description(&node, &description).as_bytes())?;
    Ok(())
}

/// The description for people, naming the node that created it.
pub fn render_description(node: &ShardNode, description: &CounterDescription) -> String {
    let counter_type = serde_json::to_value(description.counter_type)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", description.counter_type));
    let bound = |b: Option<i64>| b.map_or_else(|| "none".to_owned(), |b| b.to_string());
    format!(
        "created counter {} (through {} in {}, node {})\n  type                {counter_type}\n  numberOfShards      {}\n  baseNumberOfShards  {}\n  windowSeconds       {}\n  createdAtMs         {}\n  min                 {}\n  max                 {}\n",
        description.id,
        node.address,
        node.datacenter,
        node.index,
        description.number_of_shards,
        description.base_number_of_shards,
        description.window_seconds,
        description.created_at_ms,
        bound(description.min),
        bound(description.max),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::shard;

    #[test]
    fn body_omits_an_unset_shard_count() {
        let body = |shards| {
            serde_json::to_string(&CreateBody {
                id: "a",
                number_of_shards: shards,
                min: None,
                max: Some(10),
            })
            .unwrap()
        };
        assert_eq!(body(None), r#"{"id":"a","max":10}"#);
        assert_eq!(body(Some(3)), r#"{"id":"a","numberOfShards":3,"max":10}"#);
    }

    #[test]
    fn description_is_printed_field_by_field() {
        let description: CounterDescription = serde_json::from_str(
            r#"{"id":"a","type":"sum","numberOfShards":3,"baseNumberOfShards":3,
                "windowSeconds":300,"createdAtMs":1700000000000}"#,
        )
        .unwrap();
        let node = shard(1);
        let text = render_description(&node, &description);
        assert!(
            text.starts_with("created counter a (through 127.0.0.1:7102 in USA_0, node 1)\n"),
            "{text}"
        );
        assert!(text.contains("  type                sum\n"), "{text}");
        assert!(text.contains("  numberOfShards      3\n"), "{text}");
        assert!(
            text.contains("  createdAtMs         1700000000000\n"),
            "{text}"
        );
    }
}
