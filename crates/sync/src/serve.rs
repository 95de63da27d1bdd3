//! The server side of replication, shared by every tier's HTTP API.

use geocount_model::wire::{POSTCARD_CONTENT_TYPE, SlotCopy, SyncPage, SyncRequest};
use geocount_net::{Response, bytes_response, error_response};
use hyper::StatusCode;

/// Answers a `POST /sync` body: decodes the [`SyncRequest`] (400 when malformed), builds the page
/// with `build`, and encodes it.
pub fn answer_sync(body: &[u8], build: impl FnOnce(&SyncRequest) -> SyncPage) -> Response {
    let request: SyncRequest = match postcard::from_bytes(body) {
        Ok(request) => request,
        Err(e) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                &format!("malformed postcard sync request: {e}"),
            );
        }
    };
    postcard_response(&build(&request))
}

/// Answers `GET /slots/{slot}/copy` with a [`SlotCopy`].
pub fn answer_slot_copy(copy: &SlotCopy) -> Response {
    postcard_response(copy)
}

fn postcard_response(value: &impl serde::Serialize) -> Response {
    match postcard::to_allocvec(value) {
        Ok(bytes) => bytes_response(StatusCode::OK, POSTCARD_CONTENT_TYPE, bytes.into()),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot encode the answer: {e}"),
        ),
    }
}
