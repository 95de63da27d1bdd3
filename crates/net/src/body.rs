//! Reading request bodies under a size limit and a time limit.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

/// How long [`read_body`] waits for a whole body when the request carries no
/// [`BodyReadTimeout`] ([`serve`](crate::serve) gives each request its own).
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The body read timeout of a request, put in its extensions by the accept loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyReadTimeout(pub Duration);

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The body is larger than the limit.
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The client stopped sending or the connection failed.
    #[error("could not read the request body: {0}")]
    Read(String),
    /// The whole body did not arrive in time: nothing of it is used.
    #[error("the request body did not arrive within {} ms", .after.as_millis())]
    TimedOut {
        /// The body read timeout.
        after: Duration,
    },
}

impl crate::HttpError for BodyError {
    fn status(&self) -> hyper::StatusCode {
        match self {
            BodyError::TooLarge { .. } => hyper::StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Read(_) => hyper::StatusCode::BAD_REQUEST,
            BodyError::TimedOut { .. } => hyper::StatusCode::REQUEST_TIMEOUT,
        }
    }
}

/// Reads the whole body, refusing one larger than `limit` bytes before reading it when the
/// client declared its length, and as soon as it passes the limit otherwise; and one that does
/// not arrive within the request's [`BodyReadTimeout`] (default [`DEFAULT_BODY_READ_TIMEOUT`]).
pub async fn read_body(
    request: hyper::Request<Incoming>,
    limit: usize,
) -> Result<Bytes, BodyError> {
    let declared = request
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(BodyError::TooLarge { limit });
    }
    let after = request
        .extensions()
        .get::<BodyReadTimeout>()
        .map_or(DEFAULT_BODY_READ_TIMEOUT, |timeout| timeout.0);
    let collected = tokio::time::timeout(after, Limited::new(request.into_body(), limit).collect())
        .await
        .map_err(|_| BodyError::TimedOut { after })?;
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge { limit }),
        Err(e) => Err(BodyError::Read(e.to_string())),
    }
}
