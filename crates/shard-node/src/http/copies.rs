//! What a shard node hands the processes that hold copies of slots: its own slot's changes,
//! descriptions and idempotency keys as sync pages (`POST /sync`), and, for a node restoring
//! a lost slot, the copies it holds of it (`GET /slots/{slot}/copy`, `GET /slots/{slot}/keys`).

use geocount_model::wire::{SlotCopy, SyncPage};
use geocount_net::{Response, read_body};
use geocount_sync::{answer_key_copy, answer_slot_copy, answer_sync_encoded, parse_copy_query};
use hyper::Request;
use hyper::body::Incoming;

use crate::error::ShardError;
use crate::node::NodeState;

/// `POST /sync`: what changed in the own slot, the descriptions and the keys since the
/// puller's cursors.
pub async fn sync(state: &NodeState, request: Request<Incoming>) -> Result<Response, ShardError> {
    if !state.slot_shown.load(std::sync::atomic::Ordering::Acquire) {
        return Err(ShardError::Unavailable(
            "the slot is pulled once a peer holds the log this process started with".into(),
        ));
    }
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let limit = state.sync.page_entries;
    Ok(answer_sync_encoded(&body, |asked| {
        // Each changed row is encoded once for every puller, not cloned into each page.
        let mut entries = None;
        let page = SyncPage {
            source: state.slot_name.clone(),
            slots: asked.slots.map(|cursor| {
                let table = state.table.read().expect("slot table lock");
                let (page, encoded) =
                    table.encoded_page(&state.slot_name, cursor, limit, asked.partitions.as_ref());
                entries = Some(encoded);
                page
            }),
            descriptions: asked.descriptions.map(|cursor| {
                let descriptions = state.descriptions.read().expect("descriptions lock");
                descriptions.page_of(cursor, limit, asked.partitions.as_ref())
            }),
            freshness: Vec::new(),
            load: state.load.load(std::sync::atomic::Ordering::Relaxed),
            incarnation: state.incarnation,
            nonce: state.nonce,
            conflict: None,
            keys: asked.keys.map(|cursor| {
                state.keys.read().expect("idempotency lock").page(
                    cursor,
                    limit,
                    state.clock.now_unix_ms(),
                )
            }),
        };
        Ok((page, entries))
    }))
}

/// `GET /slots/{slot}/keys?from=N&limit=M` when `keys`, else `GET /slots/{slot}/copy?...`: a
/// page of what this node holds of `slot`, for a node restoring it.
pub fn copy_page(
    state: &NodeState,
    slot: &str,
    query: Option<&str>,
    keys: bool,
) -> Result<Response, ShardError> {
    let (from, limit) = parse_copy_query(query, state.sync.page_entries)?;
    if keys {
        key_copy(state, slot, from, limit)
    } else {
        slot_copy(state, slot, from, limit)
    }
}

/// A page of the own slot, or of this node's copy of a peer's.
fn slot_copy(
    state: &NodeState,
    slot: &str,
    from: u64,
    limit: usize,
) -> Result<Response, ShardError> {
    let copy = if slot == state.slot_name {
        // The owner holds its slot whole by definition.
        let table = state.table.read().expect("slot table lock");
        let (entries, next) = table.copy_page(from, limit);
        SlotCopy {
            slot: slot.to_owned(),
            entries,
            complete: true,
            complete_as_of_ms: Some(state.clock.now_unix_ms()),
            source_epoch: table.copy_epoch(state.incarnation),
            next,
            owner_incarnation: state.incarnation,
            partitions: None,
        }
    } else {
        let peer_copies = state.peer_copies.read().expect("peer copies lock");
        let index = peer_copies.slot_index(slot).ok_or_else(|| {
            ShardError::NotFound(format!("slot {slot} is not of this datacenter"))
        })?;
        let (entries, next) = peer_copies.copy_page(index, from, limit);
        let peer = state.sources.iter().find(|s| s.name() == slot);
        let complete_as_of_ms = peer.and_then(|p| p.complete_as_of_ms());
        SlotCopy {
            slot: slot.to_owned(),
            entries,
            complete: complete_as_of_ms.is_some(),
            complete_as_of_ms,
            source_epoch: peer_copies.copy_epoch(),
            next,
            owner_incarnation: peer.map_or(0, |p| p.incarnation()),
            partitions: None,
        }
    };
    Ok(answer_slot_copy(&copy))
}

/// A page of this node's copy of a peer slot's idempotency keys.
fn key_copy(
    state: &NodeState,
    slot: &str,
    from: u64,
    limit: usize,
) -> Result<Response, ShardError> {
    let source_epoch = state.peer_copies.read().expect("peer copies lock").epoch();
    let copy = state
        .sources
        .iter()
        .find(|source| source.name() == slot)
        .and_then(|peer| peer.key_copy(from, limit, source_epoch))
        .ok_or_else(|| ShardError::NotFound(format!("slot {slot} is no peer of this node")))?;
    Ok(answer_key_copy(&copy))
}
