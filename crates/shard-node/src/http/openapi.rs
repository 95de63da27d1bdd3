//! The shard node's OpenAPI document, served at `GET /openapi.json`.

use geocount_http::openapi::{
    header_param, id_param, path_param, query_param, required_query_param,
};
use geocount_http::{ApiDoc, Operation};
use serde_json::{Value, json};

/// The answer to a write or a read of this node's slot.
fn slot_answer() -> Value {
    json!({"type": "object", "properties": {
        "id": {"type": "string"},
        "slot": {"type": "string", "description": "DC_<DATACENTER>_VAL_<n>"},
        "value": {"type": "integer", "description": "the slot's value, or a unique counter's \
                                                     estimate of its distinct items"},
        "version": {"type": "integer"},
        "standard_error": {"type": "number", "description": "unique counters only"},
        "window": {"$ref": "#/components/schemas/Window"},
    }})
}

/// The refusals any write can give.
const WRITE_ERRORS: &[(u16, &str)] = &[
    (
        400,
        "malformed input: a bad id, body or query; a delta on a unique counter",
    ),
    (413, "a body too large"),
    (
        422,
        "the 64-bit value would overflow, a reused idempotency key, or a timestamp too far \
           ahead",
    ),
    (503, "storage failed, or the slot's node is unreachable"),
    (504, "the forward's outcome is unknown"),
    (
        507,
        "the disk is full, or the node holds its limit of counters (shard.max_counters), of \
           idempotency keys (shard.max_idempotency_keys) or of bytes of state \
           (shard.max_state_bytes), or the write would grow its counter past \
           shard.max_counter_bytes",
    ),
];

/// `operation` answering as a single write does: the slot's new state, or one of
/// [`WRITE_ERRORS`].
fn answers_a_write(operation: Operation) -> Operation {
    operation
        .json_answer(
            200,
            "the state of the slot that took the write",
            slot_answer(),
        )
        .errors(WRITE_ERRORS)
}

/// A postcard batch of `body` entries, answered per entry or, with `Prefer: return=minimal`,
/// summed up.
fn a_batch(summary: &str, body: &str) -> Operation {
    Operation::new(summary)
        .param(header_param(
            "Prefer",
            "return=minimal: answer a BatchSummary (the count applied, the refused entries) \
             instead of every outcome",
        ))
        .postcard_body(body)
        .postcard_answer(
            200,
            "BatchResponse (every outcome), or BatchSummary with Prefer: return=minimal",
        )
        .errors(&[
            (400, "a malformed body"),
            (413, "a body or batch too large"),
        ])
}

/// The document of this tier's HTTP API.
pub fn document() -> ApiDoc {
    let key = header_param(
        "Idempotency-Key",
        "1-256 bytes: a retry with the same key is applied once and answered as the first was",
    );
    let write_body = json!({"type": "object", "properties": {
        "delta": {"type": "integer", "minimum": 1, "description": "default 1 (sum counters)"},
        "item": {"type": "string", "description": "unique counters: the item counted"},
        "timestamp": {"type": "integer", "description": "unix seconds (default: now)"},
    }});
    ApiDoc::new(
        "geocount shard node",
        "Owns one slot (DC_<DATACENTER>_VAL_<n>) per counter; acknowledges writes once durable.",
    )
    .operation(
        "/counter",
        "post",
        Operation::new("create a counter")
            .json_body(
                json!({"type": "object", "properties": {
                    "id": {"type": "string", "description": "generated when absent"},
                    "numberOfShards": {"type": "integer", "minimum": 1},
                    "windowSeconds": {"type": "integer", "minimum": 1},
                    "type": {"type": "string", "enum": ["sum", "unique"]},
                }}),
                json!({"id": "openapi-example", "numberOfShards": 2, "windowSeconds": 300}),
            )
            .json_answer(201, "the description", json!({"type": "object"}))
            .errors(&[
                (400, "malformed input"),
                (409, "the id exists"),
                (413, "a body too large"),
                (503, "storage failed"),
                (
                    507,
                    "the disk is full, or the node holds its limit of counters \
                       (shard.max_counters) or of bytes of state (shard.max_state_bytes)",
                ),
            ]),
    )
    .operation(
        "/counter/{id}",
        "get",
        Operation::new("this node's slot of the counter")
            .param(id_param())
            .window_params()
            .json_answer(200, "the slot's value and version", slot_answer())
            .errors(&[
                (400, "a bad id or query (window on a unique counter too)"),
                (404, "a counter this node has never seen"),
            ]),
    )
    .operation(
        "/counter/{id}/write",
        "patch",
        answers_a_write(
            Operation::new("add to a counter (a delta) or count an item (unique counters)")
                .param(id_param())
                .param(required_query_param(
                    "op",
                    "string",
                    "INCREMENT or DECREMENT",
                    "INCREMENT",
                ))
                .param(key.clone())
                .json_body(write_body.clone(), json!({"delta": 1})),
        ),
    )
    .operation(
        "/counters/{id}/increment",
        "post",
        answers_a_write(
            Operation::new("add a signed delta, or count an item")
                .param(id_param())
                .param(key)
                .json_body(write_body, json!({"delta": -2})),
        ),
    )
    .operation(
        "/batch",
        "post",
        a_batch(
            "many deltas in one request, answered per entry",
            "BatchRequest",
        ),
    )
    .operation(
        "/batch/items",
        "post",
        a_batch(
            "many items of unique counters in one request, answered per entry",
            "ItemBatchRequest",
        ),
    )
    .operation(
        "/counter/{id}/route",
        "get",
        Operation::new("where writes for the counter go in this datacenter")
            .param(id_param())
            .json_answer(200, "its slots and their nodes", json!({"type": "object"}))
            .errors(&[(400, "a bad id")]),
    )
    .replication(true)
    .operation(
        "/slots/{slot}/keys",
        "get",
        Operation::new(
            "a page of this node's copy of a peer slot's idempotency keys (restoring that peer): \
             the keys from record number `from` (0), at most `limit` (sync.page_entries); says \
             whether the copy holds every key the peer retains, and where the next page starts",
        )
        .param(path_param(
            "slot",
            "a peer's slot name, DC_<DATACENTER>_VAL_<n>",
        ))
        .param(query_param("from", "integer", "where the page starts (0)"))
        .param(query_param(
            "limit",
            "integer",
            "how many keys the page holds",
        ))
        .postcard_answer(200, "KeyCopy")
        .errors(&[(404, "a slot that is no peer of this node")]),
    )
    .health_and_metrics("health: 503 while storage fails, with each pulled source's staleness")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_lists_exactly_the_routed_paths() {
        let routed = crate::http::routes::ROUTES.iter().map(|(path, _)| *path);
        assert_eq!(document().unmatched_paths(routed), (vec![], vec![]));
    }
}
