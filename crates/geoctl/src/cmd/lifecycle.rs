//! `geoctl delete ID`, `geoctl reset ID` and `geoctl expire ID (SECONDS | --never)`: change a
//! counter's life through a random shard node (the admin right); each prints what the node
//! answered. The change reaches every other node with the counter's description.

use std::io::Write;

use bytes::Bytes;
use geocount_model::CounterDescription;
use hyper::Method;

use crate::cluster::{ClusterClient, counter_path, parse_body, status_error};
use crate::error::GeoctlError;

/// What happens to the counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifeChange {
    /// `DELETE /counter/{id}`.
    Delete,
    /// `POST /counter/{id}/reset`.
    Reset,
    /// `PATCH /counter/{id}` with `{"ttlSeconds": n}`, or `null` for `None`.
    Expire(Option<u32>),
}

/// What `geoctl delete|reset|expire` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleOptions {
    /// The counter's id.
    pub id: String,
    /// The change.
    pub change: LifeChange,
}

/// The request `change` is sent as: method, path and JSON body.
fn request(id: &str, change: &LifeChange) -> (Method, String, Bytes) {
    let path = counter_path(id);
    match change {
        LifeChange::Delete => (Method::DELETE, path, Bytes::new()),
        LifeChange::Reset => (Method::POST, format!("{path}/reset"), Bytes::new()),
        LifeChange::Expire(ttl) => {
            let body = serde_json::json!({ "ttlSeconds": ttl }).to_string();
            (Method::PATCH, path, Bytes::from(body))
        }
    }
}

/// Sends the change and prints the counter's new description to `out`.
pub async fn run(
    cluster: &ClusterClient,
    options: &LifecycleOptions,
    out: &mut dyn Write,
) -> Result<(), GeoctlError> {
    let (method, path, body) = request(&options.id, &options.change);
    let headers = [("content-type", "application/json")];
    let (node, url, answer) = cluster
        .send_to_any_shard(method, &path, &headers, body)
        .await?;
    if !answer.status.is_success() {
        return Err(status_error(&url, &answer));
    }
    let description: CounterDescription = parse_body(&url, &answer)?;
    let through = format!("through {} in {}", node.address, node.datacenter);
    out.write_all(render(&options.change, &description, &through).as_bytes())?;
    Ok(())
}

/// What the change did, for people.
fn render(change: &LifeChange, description: &CounterDescription, through: &str) -> String {
    let id = &description.id;
    let generation = description.generation.physical_ms;
    match change {
        LifeChange::Delete => format!(
            "deleted counter {id} ({through}); every slot drops what it applied before it \
             learns of it (generation {generation})\n"
        ),
        LifeChange::Reset => format!(
            "reset counter {id} ({through}); every slot counts from zero once it learns of it \
             (generation {generation})\n"
        ),
        LifeChange::Expire(_) => match description.expires_at_ms {
            Some(at) => format!("counter {id} expires at {at} ms since the epoch ({through})\n"),
            None => format!("counter {id} never expires ({through})\n"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_is_its_request() {
        let (method, path, body) = request("a b", &LifeChange::Delete);
        assert_eq!(
            (method, path.as_str(), body.len()),
            (Method::DELETE, "/counter/a%20b", 0)
        );
        let (method, path, _) = request("a", &LifeChange::Reset);
        assert_eq!((method, path.as_str()), (Method::POST, "/counter/a/reset"));
        let (method, _, body) = request("a", &LifeChange::Expire(Some(60)));
        assert_eq!(
            (method, &body[..]),
            (Method::PATCH, &br#"{"ttlSeconds":60}"#[..])
        );
        let (_, _, body) = request("a", &LifeChange::Expire(None));
        assert_eq!(&body[..], br#"{"ttlSeconds":null}"#);
    }

    #[test]
    fn an_expiry_is_printed_with_its_time() {
        let mut description: CounterDescription = serde_json::from_str(
            r#"{"id":"a","type":"sum","numberOfShards":1,"baseNumberOfShards":1,
                "windowSeconds":300,"createdAtMs":1}"#,
        )
        .unwrap();
        description.expires_at_ms = Some(5_000);
        let text = render(&LifeChange::Expire(Some(5)), &description, "through x");
        assert_eq!(
            text,
            "counter a expires at 5000 ms since the epoch (through x)\n"
        );
        description.expires_at_ms = None;
        let text = render(&LifeChange::Expire(None), &description, "through x");
        assert_eq!(text, "counter a never expires (through x)\n");
    }
}
