//! A small HTTP/1.1 client over hyper, for tools, tests and calls between tiers.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

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

impl HttpClient {
    /// A client over TCP whose requests give up after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self::with_connector(timeout, tcp_connector())
    }

    /// A client whose connections come from `connector` and whose requests give up after
    /// `timeout` (connecting included).
    pub fn with_connector(timeout: Duration, connector: Connector) -> Self {
        let connect = ConnectService::new(connector, timeout);
        Self {
            inner: Client::builder(TokioExecutor::new()).build(connect),
            timeout,
        }
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
