//! Answers: JSON bodies, postcard bodies, and the one error shape `{"error": "..."}`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::StatusCode;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use serde::Serialize;

/// The response type of every handler.
pub type Response = hyper::Response<Full<Bytes>>;

/// An error a tier can answer with: each tier's error enum says its status in one place.
pub trait HttpError: std::fmt::Display {
    /// The HTTP status this error is answered with.
    fn status(&self) -> StatusCode;

    /// Seconds a client should wait before trying again, sent as `Retry-After` (`None`: no
    /// such header).
    fn retry_after_secs(&self) -> Option<u32> {
        None
    }

    /// The answer `{"error": "<self>"}` with [`HttpError::status`], and `Retry-After` when the
    /// error says when to try again.
    fn to_response(&self) -> Response {
        error_answer(self)
    }
}

/// `error`'s plain answer: `{"error": "<error>"}` with its status, and `Retry-After` when it
/// says when to try again (what an override of [`HttpError::to_response`] falls back to).
pub fn error_answer<E: HttpError + ?Sized>(error: &E) -> Response {
    let mut response = error_response(error.status(), &error.to_string());
    if let Some(secs) = error.retry_after_secs() {
        response
            .headers_mut()
            .insert(hyper::header::RETRY_AFTER, secs.into());
    }
    response
}

/// What a JSON answer's buffer starts with: a read naming a few datacenters or slots fits
/// without growing it (serde_json's own start, 128 bytes, grows twice for one).
const JSON_START_BYTES: usize = 512;

/// A JSON answer.
pub fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    let mut bytes = Vec::with_capacity(JSON_START_BYTES);
    match serde_json::to_writer(&mut bytes, body) {
        Ok(()) => bytes_response(status, "application/json", bytes.into()),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot encode answer: {e}"),
        ),
    }
}

/// An answer with the given content type.
pub fn bytes_response(status: StatusCode, content_type: &'static str, body: Bytes) -> Response {
    let mut response = hyper::Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The JSON error answer `{"error": message}`.
pub fn error_response(status: StatusCode, message: &str) -> Response {
    #[derive(Serialize)]
    struct ErrorBody<'a> {
        error: &'a str,
    }
    let bytes = serde_json::to_vec(&ErrorBody { error: message }).unwrap_or_default();
    bytes_response(status, "application/json", bytes.into())
}
