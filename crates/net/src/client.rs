//! A small HTTP/1.1 client over hyper, for tools, tests and calls between tiers.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::connect::{ConnectService, Connector, tcp_connector};

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL or a header could not be used.
    #[error("bad request {0}")]
    Request(String),
    /// No connection could be made: the request was certainly not delivered.
    #[error("{url}: cannot connect: {message}")]
    Connect {
        /// The URL asked.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The connection broke after the request may have been delivered.
    #[error("{url}: {message}")]
    Transport {
        /// The URL asked.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// No answer in time.
    #[error("{0}: timed out")]
    Timeout(String),
    /// The answer's body is longer than the client takes
    /// ([`HttpClient::with_max_response_bytes`]); what arrived of it was dropped.
    #[error("{url}: the answer is larger than {limit} bytes")]
    TooLarge {
        /// The URL asked.
        url: String,
        /// The most bytes the client takes in one answer.
        limit: usize,
    },
}

/// A pooled keep-alive client.
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: Client<ConnectService, Full<Bytes>>,
    timeout: Duration,
    /// Sent with every request (credentials: [`HttpClient::with_header`]).
    headers: Arc<[(HeaderName, HeaderValue)]>,
    /// What the connector speaks: `http`, or `https` over TLS.
    scheme: &'static str,
    /// The longest answer body taken.
    max_response_bytes: usize,
}

/// An answer: its status, headers and body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// Every header of the answer.
    pub headers: hyper::HeaderMap,
    /// The whole body.
    pub body: Bytes,
}

impl Answer {
    /// The `Content-Type` header, if any (and readable as text).
    pub fn content_type(&self) -> Option<&str> {
        self.headers
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
    }

    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// `error` and what caused it, innermost last (`client error (Connect): <why>`): hyper's
/// own message does not say why a connection failed.
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        message.push_str(": ");
        message.push_str(&inner.to_string());
        cause = inner.source();
    }
    message
}

impl ClientError {
    /// Whether the request certainly never reached the server (safe to send elsewhere).
    pub fn is_connect(&self) -> bool {
        matches!(self, ClientError::Connect { .. })
    }
}

/// How long a pooled connection may sit idle: less than the servers' header read timeout
/// (`http.header_read_timeout_ms`, 10 s by default), which also closes idle keep-alive
/// connections, so a request is not sent on a connection the server is closing (a forwarded
/// write would then have an unknown outcome).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// The longest answer body a client takes unless told otherwise: far above any answer between
/// tiers but a whole slot's copy (a sync page holds `sync.page_entries`, 50,000 by default,
/// about 16 MiB with 256-byte ids), so that a faulty or hostile peer cannot make a node hold an
/// endless answer in memory.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 256 << 20;

impl HttpClient {
    /// A client over TCP whose requests give up after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self::with_connector(timeout, tcp_connector())
    }

    /// A client whose connections come from `connector` and whose requests give up after
    /// `timeout` (connecting included).
    pub fn with_connector(timeout: Duration, connector: Connector) -> Self {
        let scheme = connector.scheme();
        let connect = ConnectService::new(connector, timeout);
        Self {
            inner: Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .build(connect),
            timeout,
            headers: Arc::new([]),
            scheme,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// The same client, taking answer bodies of up to `limit` bytes (longer ones fail with
    /// [`ClientError::TooLarge`]); [`DEFAULT_MAX_RESPONSE_BYTES`] otherwise.
    pub fn with_max_response_bytes(mut self, limit: usize) -> Self {
        self.max_response_bytes = limit;
        self
    }

    /// The URL of `path` at `address` (`host:port`) with the scheme the connector speaks:
    /// `http://address/path`, or `https://` over TLS.
    pub fn url(&self, address: impl std::fmt::Display, path: &str) -> String {
        format!("{}://{address}{path}", self.scheme)
    }

    /// The same client, sending header `name: value` with every request (a credential such as
    /// `authorization` or a process key). An invalid name or value is a
    /// [`ClientError::Request`].
    pub fn with_header(mut self, name: &str, value: &str) -> Result<Self, ClientError> {
        let invalid = |what: &str| ClientError::Request(format!("header {name}: invalid {what}"));
        let name = HeaderName::try_from(name).map_err(|_| invalid("name"))?;
        let mut value = HeaderValue::try_from(value).map_err(|_| invalid("value"))?;
        value.set_sensitive(true);
        let mut headers = self.headers.to_vec();
        headers.push((name, value));
        self.headers = headers.into();
        Ok(self)
    }

    /// `GET url`.
    pub async fn get(&self, url: &str) -> Result<Answer, ClientError> {
        self.send(Method::GET, url, &[], Bytes::new()).await
    }

    /// Sends a request with the given headers and body and reads the whole answer.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, ClientError> {
        let mut request = Request::builder().method(method).uri(url);
        for (name, value) in self.headers.iter() {
            request = request.header(name, value);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| ClientError::Request(format!("{url}: {e}")))?;
        let transport = |e: &dyn std::fmt::Display| ClientError::Transport {
            url: url.to_owned(),
            message: e.to_string(),
        };
        let exchange = async {
            let response = self.inner.request(request).await.map_err(|e| {
                // The connector failed: nothing was sent, so the request may go elsewhere.
                if e.is_connect() {
                    ClientError::Connect {
                        url: url.to_owned(),
                        message: with_causes(&e),
                    }
                } else {
                    transport(&e)
                }
            })?;
            let (parts, body) = response.into_parts();
            let limit = self.max_response_bytes;
            let body = Limited::new(body, limit)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        ClientError::TooLarge {
                            url: url.to_owned(),
                            limit,
                        }
                    } else {
                        transport(&e)
                    }
                })?
                .to_bytes();
            Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout(url.to_owned()))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        // Bind then drop: nothing listens on the port any more.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = HttpClient::new(Duration::from_secs(2));
        let error = client
            .get(&format!("http://127.0.0.1:{port}/healthz"))
            .await
            .unwrap_err();
        assert!(error.is_connect(), "{error:?}");
    }

    #[tokio::test]
    async fn an_answer_longer_than_the_limit_is_refused() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/big", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(crate::serve(
            listener,
            |_request| async {
                crate::bytes_response(
                    StatusCode::OK,
                    "text/plain",
                    Bytes::from(vec![b'x'; 1 << 20]),
                )
            },
            async {
                let _ = stopped.await;
            },
        ));
        let client = HttpClient::new(Duration::from_secs(5));
        let whole = client.get(&url).await.unwrap();
        assert_eq!(whole.body.len(), 1 << 20);
        let error = client
            .clone()
            .with_max_response_bytes(64 << 10)
            .get(&url)
            .await
            .unwrap_err();
        assert!(
            matches!(error, ClientError::TooLarge { limit, .. } if limit == 64 << 10),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("larger than 65536 bytes"),
            "{error}"
        );
        // The client keeps working for answers within its limit.
        assert_eq!(client.get(&url).await.unwrap().body.len(), 1 << 20);
        let _ = stop.send(());
        server.await.unwrap();
    }
}
