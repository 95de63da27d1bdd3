//! `geoctl incr ID [--delta N] [--key KEY]`: one write through a random shard node
//! (`PATCH /counter/{id}/write?op=INCREMENT|DECREMENT`); prints the slot that took it, that
//! slot's value and its version.

use std::io::Write;

use bytes::Bytes;
use hyper::Method;
use serde::Deserialize;

use crate::cluster::{ClusterClient, ShardNode, counter_path, parse_body, status_error, write_op};
use crate::error::GeoctlError;

/// What `geoctl incr` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrOptions {
    /// The counter's id.
    pub id: String,
    /// The change: positive increments, negative decrements by its magnitude.
    pub delta: i64,
    /// An `Idempotency-Key`, so a retry is applied at most once.
    pub key: Option<String>,
}

/// A shard node's answer to a write: the share of the slot that took it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WriteAnswer {
    /// The counter's id.
    pub id: String,
    /// The slot that took the write, `DC_<dc>_VAL_<n>`.
    pub slot: String,
    /// That slot's value for the counter (not the counter's total).
    pub value: i64,
    /// That slot's version for the counter.
    pub version: u64,
}

/// Sends the write and prints the answer to `out`.
pub async fn run(
    cluster: &ClusterClient,
    options: &IncrOptions,
    out: &mut dyn Write,
) -> Result<(), GeoctlError> {
    let (op, magnitude) = write_op(options.delta)?;
    let path = format!("{}/write?op={op}", counter_path(&options.id));
    let body = Bytes::from(serde_json::json!({ "delta": magnitude }).to_string());
    let mut headers = vec![("content-type", "application/json")];
    if let Some(key) = &options.key {
        headers.push(("idempotency-key", key.as_str()));
    }
    let (node, url, answer) = cluster
        .send_to_any_shard(Method::PATCH, &path, &headers, body)
        .await?;
    if !answer.status.is_success() {
        return Err(status_error(&url, &answer));
    }
    let written: WriteAnswer = parse_body(&url, &answer)?;
    out.write_all(render_write(&node, options.delta, &written).as_bytes())?;
    Ok(())
}

/// The answer for people.
pub fn render_write(node: &ShardNode, delta: i64, written: &WriteAnswer) -> String {
    format!(
        "counter {} {delta:+} (through {} in {}, node {})\n  slot     {}\n  value    {}  (this slot's share; `geoctl get` sums every slot)\n  version  {}\n",
        written.id,
        node.address,
        node.datacenter,
        node.index,
        written.slot,
        written.value,
        written.version
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::shard;

    #[test]
    fn signed_deltas_become_an_op_and_a_positive_delta() {
        assert_eq!(write_op(5).unwrap(), ("INCREMENT", 5));
        assert_eq!(write_op(-5).unwrap(), ("DECREMENT", 5));
        assert_eq!(write_op(i64::MAX).unwrap(), ("INCREMENT", i64::MAX));
        assert_eq!(write_op(-i64::MAX).unwrap(), ("DECREMENT", i64::MAX));
        assert!(write_op(0).is_err());
        assert!(write_op(i64::MIN).is_err());
    }

    #[test]
    fn answer_names_slot_value_and_version() {
        let written: WriteAnswer = serde_json::from_str(
            r#"{"id":"a","slot":"DC_USA_0_VAL_1","value":-2,"version":1835000000000000}"#,
        )
        .unwrap();
        let node = shard(0);
        let text = render_write(&node, -3, &written);
        assert!(
            text.starts_with("counter a -3 (through 127.0.0.1:7101 in USA_0, node 0)\n"),
            "{text}"
        );
        assert!(text.contains("  slot     DC_USA_0_VAL_1\n"), "{text}");
        assert!(text.contains("  value    -2  "), "{text}");
        assert!(text.contains("  version  1835000000000000\n"), "{text}");
    }
}
