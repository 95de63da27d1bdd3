//! The server side of replication, shared by every tier's HTTP API: decoding a `POST /sync`
//! and encoding its page, and the paging of a slot's copy.

use geocount_http::AccessError;
use geocount_http::routing::RequestError;
use geocount_model::wire::{KeyCopy, POSTCARD_CONTENT_TYPE, SlotCopy, SyncPage, SyncRequest};
use geocount_net::{HttpError, Response, bytes_response, error_response};
use hyper::StatusCode;

use crate::encoded::{EncodedEntries, encode_sync_page};

/// The largest `POST /sync` body read (a request is a few bytes).
pub const MAX_SYNC_REQUEST_BYTES: usize = 64 * 1024;

/// Answers a `POST /sync` body: decodes the [`SyncRequest`] (400 when malformed), builds the page
/// with `build`, and encodes it; a request `build` refuses (a shard node announcing a slot not
/// its own) is answered with the refusal.
pub fn answer_sync(
    body: &[u8],
    build: impl FnOnce(&SyncRequest) -> Result<SyncPage, AccessError>,
) -> Response {
    answer_sync_encoded(body, |request| build(request).map(|page| (page, None)))
}

/// Like [`answer_sync`], with the page's slot entries already encoded
/// ([`encode_sync_page`]) when `build` hands them beside the page.
pub fn answer_sync_encoded(
    body: &[u8],
    build: impl FnOnce(&SyncRequest) -> Result<(SyncPage, Option<EncodedEntries>), AccessError>,
) -> Response {
    let request: SyncRequest = match postcard::from_bytes(body) {
        Ok(request) => request,
        Err(e) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                &format!("malformed postcard sync request: {e}"),
            );
        }
    };
    match build(&request) {
        Ok((page, entries)) => encoded_response(encode_sync_page(&page, entries.as_ref())),
        Err(refusal) => refusal.to_response(),
    }
}

/// Answers `GET /slots/{slot}/copy` with a [`SlotCopy`].
pub fn answer_slot_copy(copy: &SlotCopy) -> Response {
    postcard_response(copy)
}

/// Answers `GET /slots/{slot}/keys` with a [`KeyCopy`].
pub fn answer_key_copy(copy: &KeyCopy) -> Response {
    postcard_response(copy)
}

/// The page a `GET /slots/{slot}/copy?from=N&limit=M` asks for: where it starts (0 by
/// default) and how many counters it looks at (`page_entries` by default, and at most that).
pub fn parse_copy_query(
    query: Option<&str>,
    page_entries: usize,
) -> Result<(u64, usize), RequestError> {
    let mut from = 0;
    let mut limit = page_entries;
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let number = || {
            value.parse::<u64>().map_err(|_| {
                RequestError::BadRequest(format!("{key} must be a whole number, not {value:?}"))
            })
        };
        match &*key {
            "from" => from = number()?,
            "limit" => {
                limit = usize::try_from(number()?)
                    .unwrap_or(usize::MAX)
                    .clamp(1, page_entries)
            }
            _ => {
                return Err(RequestError::BadRequest(format!(
                    "unknown query parameter {key:?}: a slot copy takes from and limit"
                )));
            }
        }
    }
    Ok((from, limit))
}

fn postcard_response(value: &impl serde::Serialize) -> Response {
    encoded_response(postcard::to_allocvec(value))
}

fn encoded_response(encoded: postcard::Result<Vec<u8>>) -> Response {
    match encoded {
        Ok(bytes) => bytes_response(StatusCode::OK, POSTCARD_CONTENT_TYPE, bytes.into()),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot encode the answer: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::wire::Cursor;

    /// Hostile input (`fuzz/`, target `wire_sync_request`): a malformed or truncated request,
    /// or one whose length prefix claims more than it carries, is a 400, never a panic.
    #[test]
    fn malformed_sync_requests_are_refused() {
        let build = |_: &SyncRequest| Ok(SyncPage::default());
        let ok = postcard::to_allocvec(&SyncRequest {
            slots: Some(Cursor::Start),
            descriptions: None,
            ..SyncRequest::default()
        })
        .unwrap();
        assert_eq!(answer_sync(&ok, build).status(), StatusCode::OK);
        for bad in [
            &[][..],
            &[2],
            &[1, 3],
            &[
                1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ],
        ] {
            assert_eq!(
                answer_sync(bad, build).status(),
                StatusCode::BAD_REQUEST,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn copy_queries_default_and_bound_the_page() {
        assert_eq!(parse_copy_query(None, 500).unwrap(), (0, 500));
        assert_eq!(
            parse_copy_query(Some("from=7&limit=9"), 500).unwrap(),
            (7, 9)
        );
        assert_eq!(
            parse_copy_query(Some("limit=99999"), 500).unwrap(),
            (0, 500)
        );
        assert_eq!(parse_copy_query(Some("limit=0"), 500).unwrap(), (0, 1));
        assert!(parse_copy_query(Some("from=-1"), 500).is_err());
        assert!(parse_copy_query(Some("to=3"), 500).is_err());
    }

    /// A pulled page whose lengths claim more than the body carries is refused at once.
    #[test]
    fn pages_with_huge_length_prefixes_are_refused() {
        // source: a 2^32 - 1 byte name in a ten-byte body.
        let huge_source = [0xff, 0xff, 0xff, 0xff, 0x0f, b'a', 0, 0, 0, 0];
        assert!(postcard::from_bytes::<SyncPage>(&huge_source).is_err());
        // slots: Some, with 2^32 - 1 slot names.
        let huge_names = [1, b'a', 1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0];
        assert!(postcard::from_bytes::<SyncPage>(&huge_names).is_err());
        let huge_copy = [1, b'a', 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(postcard::from_bytes::<SlotCopy>(&huge_copy).is_err());
    }
}
