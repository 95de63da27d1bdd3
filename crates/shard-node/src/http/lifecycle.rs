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
use hyper::{Request, StatusCode};

use crate::engine::key_scope::{KeyScope, unscoped};
use crate::engine::write::{LifecycleChange, LifecycleRequest};
use crate::error::ShardError;
use crate::http::requests::{idempotency_key, is_forwarded, parse_ttl};
use crate::node::NodeState;
use crate::route::forward::{self, ForwardedChange};

/// Makes `asked` of counter `id`, here or at the node its `Idempotency-Key` picks.
pub(super) async fn change(
    state: &NodeState,
    id: CounterId,
    asked: LifecycleRequest,
    request: Request<Incoming>,
) -> Result<Response, ShardError> {
    let forwarded = is_forwarded(&request);
    let client_key = if forwarded {
        None
    } else {
        idempotency_key(&request)?
    };
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let (key, body) = if forwarded {
        let change = ForwardedChange::decode(&body)?;
        let key = KeyScope::Forwarded.key(&change.idempotency_key)?;
        (Some(key), Bytes::from(change.body))
    } else {
        (client_key, body)
    };
    let asked = match asked {
        LifecycleRequest::Expire(_) => LifecycleRequest::Expire(parse_ttl(&body)?),
        other => other,
    };
    if let (Some(key), false) = (&key, forwarded) {
        let target = state.router.key_target(id.as_str(), unscoped(key));
        if target != state.router.own_slot() {
            let answer = forward::forward_change(state, target, (method, &path), key, body);
            let answer = answer.await?;
            let json = "application/json";
            return Ok(bytes_response(answer.status, json, answer.body));
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
