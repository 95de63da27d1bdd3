//! A client for the nodes' HTTP API, speaking JSON and the batched postcard path.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use geocount_model::wire::{
    BatchEntry, BatchRequest, BatchResponse, BatchSummary, ItemBatchRequest, ItemEntry,
    POSTCARD_CONTENT_TYPE,
};
use geocount_net::{Answer, ClientError, Connector, HttpClient, tcp_connector};
use hyper::Method;
use serde::Serialize;
use serde_json::Value;

/// A client bound to one node.
#[derive(Debug, Clone)]
pub struct Api {
    base: String,
    client: HttpClient,
}

/// Percent-encodes a counter id for use in a path.
pub fn encode_id(id: &str) -> String {
    let mut out = String::new();
    for byte in id.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~:".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A batch entry of `delta` to `id`, with no idempotency key and no timestamp.
pub fn entry(id: &str, delta: i64) -> BatchEntry<'_> {
    BatchEntry {
        id,
        delta,
        idempotency_key: None,
        timestamp: None,
    }
}

impl Api {
    /// A client for the node at `addr`: over TLS, trusting the test CA, when the test process
    /// runs with TLS ([`crate::tls::enabled`]).
    pub fn new(addr: SocketAddr) -> Self {
        if crate::tls::enabled() {
            Self::with_connector(addr, crate::tls::test_ca().connector())
        } else {
            Self::plain(addr)
        }
    }

    /// A plain-HTTP client for the node at `addr`, with or without TLS in the test process (a
    /// process that is not a tier, such as the WAN emulator's control API, never speaks TLS).
    pub fn plain(addr: SocketAddr) -> Self {
        Self::with_connector(addr, tcp_connector())
    }

    /// A client for the node at `addr` whose connections come from `connector`.
    pub fn with_connector(addr: SocketAddr, connector: Connector) -> Self {
        let client = HttpClient::with_connector(Duration::from_secs(10), connector);
        Self {
            base: client.url(addr, ""),
            client,
        }
    }

    /// The same client, sending `Authorization: Bearer <token>` with every request.
    pub fn with_token(self, token: &str) -> Self {
        self.with_header("authorization", &format!("Bearer {token}"))
    }

    /// The same client, sending header `name: value` with every request (e.g. the cluster
    /// secret, to act as a peer).
    pub fn with_header(self, name: &str, value: &str) -> Self {
        Self {
            base: self.base,
            client: self
                .client
                .with_header(name, value)
                .expect("a valid header"),
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Answer, ClientError> {
        self.client.get(&format!("{}{path}", self.base)).await
    }

    /// The text of `GET /metrics` (`None` when no answer came).
    pub async fn metrics(&self) -> Option<String> {
        let answer = self.get("/metrics").await.ok()?;
        Some(String::from_utf8_lossy(&answer.body).into_owned())
    }

    /// Any request, with a raw body.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<Answer, ClientError> {
        self.client
            .send(
                method,
                &format!("{}{path}", self.base),
                headers,
                body.into(),
            )
            .await
    }

    /// Reads `path` until `done` accepts the status and JSON answer, or panics after `within`
    /// with the last answer.
    pub async fn read_until(
        &self,
        within: Duration,
        path: &str,
        done: impl Fn(u16, &Value) -> bool,
    ) -> Value {
        let deadline = std::time::Instant::now() + within;
        loop {
            let answer = self.get(path).await.expect("read");
            let body = answer.json();
            if done(answer.status.as_u16(), &body) {
                return body;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{path}: last answer {} {body}",
                answer.status
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// `GET /counter/{id}` → (status, JSON).
    pub async fn read(&self, id: &str) -> (u16, Value) {
        let answer = self
            .get(&format!("/counter/{}", encode_id(id)))
            .await
            .expect("read");
        (answer.status.as_u16(), answer.json())
    }

    /// A global aggregator's `GET /counter/{id}?{query}` → (status, JSON); `query` may be empty.
    pub async fn global_read(&self, id: &str, query: &str) -> (u16, Value) {
        let separator = if query.is_empty() { "" } else { "?" };
        let path = format!("/counter/{}{separator}{query}", encode_id(id));
        let answer = self.get(&path).await.expect("global read");
        (answer.status.as_u16(), answer.json())
    }

    /// `GET path` → (status, JSON).
    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let answer = self.get(path).await.expect("get");
        (answer.status.as_u16(), answer.json())
    }

    /// The first `want` counters named `prefix-<n>` whose first slot (as this node's
    /// `GET /counter/{id}/route` answers) is `slot`.
    pub async fn ids_routed_to(&self, prefix: &str, slot: &str, want: usize) -> Vec<String> {
        let mut ids = Vec::new();
        for n in 0.. {
            let id = format!("{prefix}-{n}");
            let (_, route) = self.get_json(&format!("/counter/{id}/route")).await;
            if route["slots"][0]["slot"] == slot {
                ids.push(id);
                if ids.len() == want {
                    break;
                }
            }
        }
        ids
    }

    /// The value of counter `id` (panics unless the read answers 200).
    pub async fn value(&self, id: &str) -> i64 {
        let (status, body) = self.read(id).await;
        assert_eq!(status, 200, "read {id}: {body}");
        body["value"].as_i64().expect("value is a number")
    }

    /// `PATCH /counter/{id}/write?op=..` with an optional JSON body and idempotency key.
    pub async fn write(
        &self,
        id: &str,
        op: &str,
        body: Option<Value>,
        idempotency_key: Option<&str>,
    ) -> Result<(u16, Value), ClientError> {
        let headers: Vec<(&str, &str)> = idempotency_key
            .map(|k| ("Idempotency-Key", k))
            .into_iter()
            .collect();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let answer = self
            .send(
                Method::PATCH,
                &format!("/counter/{}/write?op={op}", encode_id(id)),
                &headers,
                body,
            )
            .await?;
        Ok((answer.status.as_u16(), answer.json()))
    }

    /// An `INCREMENT` with a JSON `body` and an `Idempotency-Key`; panics if no answer comes.
    pub async fn write_keyed(&self, id: &str, body: Value, key: &str) -> (u16, Value) {
        self.write(id, "INCREMENT", Some(body), Some(key))
            .await
            .expect("keyed write")
    }

    /// `INCREMENT` by `delta` (> 0) or `DECREMENT` by `-delta`.
    pub async fn add(&self, id: &str, delta: i64) -> Result<(u16, Value), ClientError> {
        let op = if delta >= 0 { "INCREMENT" } else { "DECREMENT" };
        self.write(
            id,
            op,
            Some(serde_json::json!({ "delta": delta.abs() })),
            None,
        )
        .await
    }

    /// `POST /counter` with a JSON body.
    pub async fn create(&self, body: Value) -> (u16, Value) {
        let answer = self
            .send(Method::POST, "/counter", &[], body.to_string())
            .await
            .expect("create");
        (answer.status.as_u16(), answer.json())
    }

    /// `POST /counter` with `body`, which must create the counter (201): its description.
    pub async fn created(&self, body: Value) -> Value {
        let (status, created) = self.create(body).await;
        assert_eq!(status, 201, "{created}");
        created
    }

    /// `POST /batch` with postcard entries; the decoded answer, or the status and JSON error.
    pub async fn batch(&self, entries: &[BatchEntry<'_>]) -> Result<BatchResponse, (u16, Value)> {
        let entries = entries.to_vec();
        self.post_batch("/batch", &BatchRequest { entries }).await
    }

    /// `POST /batch/items` with postcard item entries; the decoded answer, or the status and
    /// JSON error.
    pub async fn batch_items(
        &self,
        entries: &[ItemEntry<'_>],
    ) -> Result<BatchResponse, (u16, Value)> {
        let entries = entries.to_vec();
        self.post_batch("/batch/items", &ItemBatchRequest { entries })
            .await
    }

    /// `POST /batch` with `Prefer: return=minimal`: the decoded summary and the answer's
    /// `Preference-Applied` header, or the status and JSON error.
    pub async fn batch_minimal(
        &self,
        entries: &[BatchEntry<'_>],
    ) -> Result<(BatchSummary, Option<String>), (u16, Value)> {
        let entries = entries.to_vec();
        let answer = self
            .post_postcard(
                "/batch",
                &[
                    ("content-type", POSTCARD_CONTENT_TYPE),
                    ("prefer", "respond-async, return=minimal"),
                ],
                &BatchRequest { entries },
            )
            .await?;
        let applied = answer
            .headers
            .get("preference-applied")
            .map(|v| v.to_str().expect("an ASCII header").to_owned());
        Ok((
            postcard::from_bytes(&answer.body).expect("decode batch summary"),
            applied,
        ))
    }

    async fn post_batch(
        &self,
        path: &str,
        request: &impl Serialize,
    ) -> Result<BatchResponse, (u16, Value)> {
        let headers = [("content-type", POSTCARD_CONTENT_TYPE)];
        let answer = self.post_postcard(path, &headers, request).await?;
        Ok(postcard::from_bytes(&answer.body).expect("decode batch answer"))
    }

    /// `POST path` with `request` in postcard: the answer if it is a 200, else the status and
    /// JSON error (status 0 when no answer came).
    async fn post_postcard(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        request: &impl Serialize,
    ) -> Result<Answer, (u16, Value)> {
        let body = postcard::to_allocvec(request).expect("encode the request");
        let answer = self
            .send(Method::POST, path, headers, body)
            .await
            .map_err(|e| (0, Value::String(e.to_string())))?;
        if answer.status != 200 {
            return Err((answer.status.as_u16(), answer.json()));
        }
        Ok(answer)
    }
}
