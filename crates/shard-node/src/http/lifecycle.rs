//! `DELETE /counter/{id}`, `POST /counter/{id}/reset` and `PATCH /counter/{id}`: changes of a
//! counter's life, made at any shard node and carried to every other by its description
//! (docs/architecture.md, "Reset, delete and expiry"). Each answers the counter's new
//! description once it is durable here.

use geocount_model::CounterId;
use geocount_net::{Response, json_response, read_body};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use crate::engine::write::LifecycleChange;
use crate::error::ShardError;
use crate::http::requests::parse_expiry;
use crate::http::state::NodeState;

/// Resets or deletes counter `id`.
pub(super) async fn change(
    state: &NodeState,
    id: CounterId,
    change: LifecycleChange,
) -> Result<Response, ShardError> {
    let description = state.change_life(id, change).await?;
    Ok(json_response(StatusCode::OK, &description))
}

/// Sets or clears counter `id`'s expiry from a `{"ttlSeconds": n | null}` body.
pub(super) async fn expire(
    state: &NodeState,
    id: CounterId,
    request: Request<Incoming>,
) -> Result<Response, ShardError> {
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let expires_at_ms = parse_expiry(&body, state.clock.now_unix_ms())?;
    change(state, id, LifecycleChange::Expire(expires_at_ms)).await
}
