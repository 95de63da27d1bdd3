//! What a node does for its peers in `replicated` durability: it appends the groups a peer
//! slot's owner sends to its log of that slot, fsynced before it answers
//! (`POST /slots/{slot}/replicate`), and hands the owner, restoring a lost disk, that log
//! folded (`GET /slots/{slot}/replica`).

use std::sync::Arc;

use geocount_model::wire::{HeldBatch, HeldCopy, POSTCARD_CONTENT_TYPE};
use geocount_net::{
    DEFAULT_MAX_RESPONSE_BYTES, Response, bytes_response, json_response, read_body,
};
use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use crate::engine::wal::LogRecord;
use crate::error::ShardError;
use crate::node::NodeState;

/// `POST /slots/{slot}/replicate`: `{"groups": n}` once the groups are fsynced in this node's
/// log of `slot`.
pub async fn replicate(
    state: &NodeState,
    slot: &str,
    request: Request<Incoming>,
) -> Result<Response, ShardError> {
    peer_slot(state, slot)?;
    // A batch carries whole groups, each as large as the owner's log takes.
    let body = read_body(request, DEFAULT_MAX_RESPONSE_BYTES).await?;
    let batch: HeldBatch = postcard::from_bytes(&body)
        .map_err(|e| ShardError::bad_request(format!("undecodable replicated batch: {e}")))?;
    let groups = (batch.groups.iter())
        .map(|group| postcard::from_bytes::<LogRecord>(group))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ShardError::bad_request(format!("undecodable replicated group: {e}")))?;
    let count = groups.len();
    let starts = (batch.since_version, batch.made_through);
    let logs = Arc::clone(&state.held_logs);
    let (slot, now_ms) = (slot.to_owned(), state.clock.now_unix_ms());
    let fold = state
        .storage
        .blocking(move || logs.append(&slot, &groups, starts, now_ms))
        .await
        .map_err(|error| {
            tracing::error!(%error, "cannot log a peer's replicated groups");
            ShardError::from_storage(Arc::new(error))
        })?;
    if let Some(fold) = fold {
        // Not awaited: the owner waits for this answer, and a fold can take seconds.
        let logs = Arc::clone(&state.held_logs);
        state.storage.detach(move || {
            if let Err(error) = logs.fold_closed(fold) {
                tracing::error!(%error, "cannot fold a peer's replicated log (it keeps its segments)");
            }
        });
    }
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "groups": count }),
    ))
}

/// `GET /slots/{slot}/replica`: this node's log of `slot`, folded.
pub async fn replica(state: &NodeState, slot: &str) -> Result<Response, ShardError> {
    peer_slot(state, slot)?;
    let logs = Arc::clone(&state.held_logs);
    let (slot, now_ms) = (slot.to_owned(), state.clock.now_unix_ms());
    let (slot, fold) = state
        .storage
        .blocking(move || {
            let fold = (logs.fold(&slot, now_ms)).map(|fold| (fold, logs.starts(&slot)));
            (slot, fold)
        })
        .await;
    let (fold, starts) = fold.map_err(|error| ShardError::from_storage(Arc::new(error)))?;
    let copy = HeldCopy {
        slot,
        owner_since: starts.owner_since,
        holds_after: starts.holds_after,
        entries: (fold.slots.into_iter())
            .map(|(id, record)| (id.as_str().to_owned(), record))
            .collect(),
        descriptions: fold.descriptions,
        keys: (fold.idempotency.into_iter())
            .map(|(key, entry)| (key.into_string(), entry))
            .collect(),
    };
    let body = postcard::to_allocvec(&copy)
        .map_err(|e| ShardError::internal("encoding a replica copy", e))?;
    Ok(bytes_response(
        StatusCode::OK,
        POSTCARD_CONTENT_TYPE,
        body.into(),
    ))
}

fn peer_slot(state: &NodeState, slot: &str) -> Result<(), ShardError> {
    if state.held_logs.holds(slot) {
        Ok(())
    } else {
        Err(ShardError::NotFound(format!(
            "slot {slot} is no peer of this node"
        )))
    }
}
