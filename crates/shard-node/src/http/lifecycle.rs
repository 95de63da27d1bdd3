//! `DELETE /counter/{id}`, `POST /counter/{id}/reset` and `PATCH /counter/{id}`: changes of a
//! counter's life, made at any shard node and carried to every other by its description
//! (docs/architecture.md, "Reset, delete and expiry"). Each answers the counter's new
//! description once it is durable here.
//!
//! One carrying an `Idempotency-Key` is made where a keyed write to the counter would be
//! applied (the slot its key picks), so a retry through any node of the datacenter meets the
//! first and is answered without applying again.

use bytes::Bytes;
use geocount_model::CounterId;
use geocount_net::{Response, bytes_response, json_response, read_body};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};

use crate::engine::key_scope::{scope_of, unscoped};
use crate::engine::write::{Change, LifecycleChange, LifecycleRequest};
use crate::error::ShardError;
use crate::http::api::{KEY_SCOPE_HEADER, idempotency_key, is_forwarded};
use crate::http::requests::parse_ttl;
use crate::node::NodeState;
use crate::route::forward::FORWARDED_HEADER;

/// Makes `asked` of counter `id`, here or at the node its `Idempotency-Key` picks.
pub(super) async fn change(
    state: &NodeState,
    id: CounterId,
    asked: LifecycleRequest,
    request: Request<Incoming>,
) -> Result<Response, ShardError> {
    let key = idempotency_key(&request)?;
    let forwarded = is_forwarded(&request);
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let asked = match asked {
        LifecycleRequest::Expire(_) => LifecycleRequest::Expire(parse_ttl(&body)?),
        other => other,
    };
    if let (Some(key), false) = (&key, forwarded) {
        let target = {
            let descriptions = state.descriptions.read().expect("descriptions lock");
            let any = Change::Delta(1);
            (state.router).target(&descriptions, id.as_str(), &any, Some(unscoped(key)))
        };
        if target != state.router.own_slot() {
            return forward(state, target, (method, &path), key, body).await;
        }
    }
    let change = match asked {
        LifecycleRequest::Reset => LifecycleChange::Reset,
        LifecycleRequest::Delete => LifecycleChange::Delete,
        LifecycleRequest::Expire(ttl) => {
            let now_ms = state.clock.now_unix_ms();
            LifecycleChange::Expire(ttl.map(|ttl| now_ms + u64::from(ttl) * 1000))
        }
    };
    let key = key.map(|key| (key, LifecycleChange::asked(&asked)));
    let description = state.change_life(id, change, key).await?;
    Ok(json_response(StatusCode::OK, &description))
}

/// Sends the request on to slot `target`'s node, marked as forwarded, with the client's key
/// and its scope apart (a header cannot hold the scope separator), and answers as it did.
async fn forward(
    state: &NodeState,
    target: u32,
    (method, path): (Method, &str),
    key: &str,
    body: Bytes,
) -> Result<Response, ShardError> {
    let headers = [
        ("content-type", "application/json"),
        (FORWARDED_HEADER, "1"),
        ("idempotency-key", unscoped(key)),
        (KEY_SCOPE_HEADER, scope_of(key)),
    ];
    let slot = state.router.slot_name(target).to_owned();
    match state
        .router
        .send(target, method, path, &headers, body)
        .await
    {
        Ok(answer) => Ok(bytes_response(
            answer.status,
            "application/json",
            answer.body,
        )),
        Err(error) if error.is_connect() => Err(ShardError::Unreachable(format!(
            "{slot}, which takes changes with this Idempotency-Key, is unreachable ({error}); retry later"
        ))),
        Err(error) => Err(ShardError::OutcomeUnknown(format!(
            "forwarding to {slot} failed after sending ({error}); retry with the same Idempotency-Key"
        ))),
    }
}
