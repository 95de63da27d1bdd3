//! What the status routes ask of the tier below: JSON or text from many processes at once,
//! each with a short timeout, so a status answer never waits on a process that hangs. The
//! caller's `Authorization` header is passed on: the routes asked need the read right the
//! caller already proved here.

use std::time::Duration;

use geocount_net::{Connector, HttpClient};
use hyper::Request;
use hyper::body::Incoming;
use prometheus_client::metrics::counter::Counter;
use serde_json::Value;

use crate::error::AggregatorError;

/// How long the datacenter tier's status routes wait for a shard node.
pub const SHARD_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long the global tier's status routes wait for a datacenter aggregator: longer than
/// [`SHARD_TIMEOUT`], so that a hung shard node shows in its datacenter's answer rather than
/// hiding the whole datacenter.
pub const AGGREGATOR_TIMEOUT: Duration = Duration::from_millis(2000);

/// The longest answer a status route takes from one process below.
const FANOUT_MAX_BYTES: usize = 4 << 20;

/// How the status routes ask the tier below: each request given up after a timeout, and
/// every call counted (`fanout_calls_total`).
pub struct Fanout {
    client: HttpClient,
    calls: Counter,
}

impl Fanout {
    /// Asks through `connector`, each request given up after `timeout`, counting calls in
    /// `calls`.
    pub fn new(connector: Connector, timeout: Duration, calls: Counter) -> Self {
        let client = HttpClient::with_connector(timeout, connector)
            .with_max_response_bytes(FANOUT_MAX_BYTES);
        Self { client, calls }
    }

    /// `GET path` at every address of `addresses` at once, with `authorization`; the answers
    /// in the order of `addresses`.
    pub async fn get_all(
        &self,
        addresses: impl IntoIterator<Item = String>,
        path: &str,
        authorization: Option<&str>,
    ) -> Vec<Asked> {
        get_all(&self.client, &self.calls, addresses, path, authorization).await
    }
}

/// The caller's `Authorization` header, to pass on.
pub fn authorization(request: &Request<Incoming>) -> Option<String> {
    let value = request.headers().get(hyper::header::AUTHORIZATION)?;
    value.to_str().ok().map(str::to_owned)
}

/// One answer from a process below: its status and body, or why there is none.
#[derive(Debug, Clone)]
pub enum Asked {
    /// It answered: the status and the body.
    Answered(u16, bytes::Bytes),
    /// It did not answer in time, or could not be reached.
    Failed(String),
}

impl Asked {
    /// The body as JSON when it answered 2xx with JSON.
    pub fn ok_json(&self) -> Option<Value> {
        match self {
            Asked::Answered(status, body) if (200..300).contains(status) => {
                serde_json::from_slice(body).ok()
            }
            _ => None,
        }
    }

    /// The body as JSON whatever the status (a 503 health answer says why).
    pub fn json(&self) -> Option<Value> {
        match self {
            Asked::Answered(_, body) => serde_json::from_slice(body).ok(),
            Asked::Failed(_) => None,
        }
    }

    /// The status it answered with.
    pub fn status(&self) -> Option<u16> {
        match self {
            Asked::Answered(status, _) => Some(*status),
            Asked::Failed(_) => None,
        }
    }

    /// Why it gave no usable answer: the failure, or the error of a refusal.
    pub fn error(&self) -> Option<String> {
        match self {
            Asked::Failed(why) => Some(why.clone()),
            Asked::Answered(status, _) if (200..300).contains(status) => None,
            Asked::Answered(status, body) => {
                let why = serde_json::from_slice::<Value>(body)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_owned));
                Some(why.unwrap_or_else(|| format!("answered {status}")))
            }
        }
    }
}

/// `GET path` at every address of `addresses` at once, with `authorization`, each call
/// counted in `calls`; the answers in the order of `addresses`.
async fn get_all(
    client: &HttpClient,
    calls: &Counter,
    addresses: impl IntoIterator<Item = String>,
    path: &str,
    authorization: Option<&str>,
) -> Vec<Asked> {
    let asks: Vec<_> = addresses
        .into_iter()
        .map(|address| {
            let client = client.clone();
            let url = client.url(&address, path);
            let authorization = authorization.map(str::to_owned);
            calls.inc();
            tokio::spawn(async move {
                let headers: Vec<(&str, &str)> = authorization
                    .iter()
                    .map(|value| ("authorization", value.as_str()))
                    .collect();
                match client
                    .send(hyper::Method::GET, &url, &headers, bytes::Bytes::new())
                    .await
                {
                    Ok(answer) => Asked::Answered(answer.status.as_u16(), answer.body),
                    Err(error) => Asked::Failed(error.to_string()),
                }
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(asks.len());
    for ask in asks {
        answers.push(
            ask.await
                .unwrap_or_else(|e| Asked::Failed(format!("the request failed: {e}"))),
        );
    }
    answers
}

/// Refuses the answers to a rights request unless one holds rights (answered 200): a 404
/// when every one answered 404 (`held_by`'s slots do not hold counter `id` bounded), else a
/// 503 naming why they failed.
pub fn any_rights(
    answers: &[Asked],
    id: &str,
    held_by: impl FnOnce() -> String,
) -> Result<(), AggregatorError> {
    if answers.iter().any(|a| a.status() == Some(200)) {
        return Ok(());
    }
    if answers.iter().all(|a| a.status() == Some(404)) {
        return Err(AggregatorError::NotBounded {
            id: id.to_owned(),
            held_by: held_by(),
        });
    }
    let why: Vec<String> = answers.iter().filter_map(Asked::error).collect();
    Err(AggregatorError::BelowUnreachable(why.join("; ")))
}

/// `id` as one path segment: every byte but the unreserved ones percent-encoded.
pub fn path_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The value of the Prometheus sample `name` (no labels) in `text`, if it is there.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (key, value) = line.split_once(' ')?;
            (key == name).then(|| value.split(' ').next()?.parse().ok())?
        })
}

/// The sum of every sample of `name` in `text`, whatever its labels.
pub fn metric_sum(text: &str, name: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let bare = key.split('{').next().unwrap_or(key);
        if bare == name
            && let Ok(value) = value.parse::<f64>()
        {
            *total.get_or_insert(0.0) += value;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_become_one_path_segment() {
        assert_eq!(path_segment("tweet:1 likes/x"), "tweet%3A1%20likes%2Fx");
        assert_eq!(path_segment("a-b_c.d~e"), "a-b_c.d~e");
        assert_eq!(path_segment("é"), "%C3%A9");
    }

    #[test]
    fn metrics_are_read_by_name() {
        let text = "# HELP x\nx_total 12\nx_total_other 3\ny{source=\"a\"} 2\ny{source=\"b\"} 5\n";
        assert_eq!(metric(text, "x_total"), Some(12.0));
        assert_eq!(metric(text, "z"), None);
        assert_eq!(metric_sum(text, "y"), Some(7.0));
        assert_eq!(metric_sum(text, "z"), None);
    }
}
