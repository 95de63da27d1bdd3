//! A small HTTP/1.1 client over hyper, for tools, tests and calls between tiers.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
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
}

/// An answer: its status, content type and body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The whole body.
    pub body: Bytes,
}

impl Answer {
    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
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
        }
    }

    /// The URL of `path` at `address` (`host:port`) with the scheme the connector speaks:
    /// `http://address/path`, or `https://` over TLS.
    pub fn url(&self, address: impl std::fmt::Display, path: &str) -> String {
        format!("{}://{address}{path}", self.scheme)
    }

    /// The same client, sending header `name: value` with every request (a credential such as
    /// `authorization` or the cluster secret). An invalid name or value is a
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
                        message: e.to_string(),
                    }
                } else {
                    transport(&e)
                }
            })?;
            let status = response.status();
            let content_type = response
                .headers()
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| transport(&e))?
                .to_bytes();
            Ok(Answer {
                status,
                content_type,
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
}
