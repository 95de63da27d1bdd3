//! `POST /batch` and `POST /batch/items` bodies (postcard `BatchRequest` / `ItemBatchRequest`),
//! decoded and checked by the shard node's own functions, then routed and applied to slot
//! records as the commit loop does; and the `BatchResponse` a forwarding node decodes.

use std::collections::HashMap;

use crate::{NOW_MS, NOW_SECS, WINDOW_SECONDS, drive_record};
use geocount_model::wire::{BatchResponse, EntryOutcome};
use geocount_model::{Placement, ShardDefaults, SlotRecord, next_slot_version};
use hyper::StatusCode;
use shard_node::engine::key_scope::KeyScope;
use shard_node::engine::write::{Change, WriteRequest};
use shard_node::error::ShardError;
use shard_node::http::requests::{parse_batch, parse_item_batch};

/// Routes and applies checked writes to one slot's records, as the commit loop would.
fn apply(writes: Vec<Result<WriteRequest, ShardError>>) {
    let placement = Placement::new("A", 3, 8);
    let mut records: HashMap<String, SlotRecord> = HashMap::new();
    for write in writes.into_iter().flatten() {
        let id = write.id.as_str();
        let slots = placement.slots_for(id, 3);
        if let Some(key) = &write.idempotency_key {
            let _ = Placement::slot_for_key(&slots, key);
        }
        let record = records.entry(id.to_owned()).or_default();
        let version = next_slot_version(record.state.version, NOW_MS);
        match write.change {
            Change::Delta(delta) => {
                if let Ok(state) = record.state.apply(delta, version) {
                    if let Some(window) = record.window_mut() {
                        let _ = window.record(write.timestamp_secs, delta, WINDOW_SECONDS);
                    }
                    record.state = state;
                }
            }
            Change::Item { hash, .. } => {
                record.add_item(hash, version);
            }
        }
    }
    for record in records.values() {
        drive_record(record);
    }
}

/// Runs one input through the target; whether it decoded.
pub fn run(data: &[u8]) -> bool {
    let settings = ShardDefaults::default();
    let mut decoded = false;
    if let Ok(writes) = parse_batch(data, &settings, NOW_SECS, &KeyScope::Forwarded) {
        decoded = true;
        apply(writes);
    }
    if let Ok(writes) = parse_item_batch(data, &settings, NOW_SECS, &KeyScope::Token(String::new()))
    {
        decoded = true;
        apply(writes);
    }
    // What a node that forwarded a batch decodes (`routing::WriteRouter::forward`) and answers.
    if let Ok(answer) = postcard::from_bytes::<BatchResponse>(data) {
        decoded = true;
        for outcome in answer.outcomes {
            if let EntryOutcome::Refused { status, error } = outcome {
                let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
                let _ = geocount_net::error_response(status, &error);
            }
        }
    }
    decoded
}
