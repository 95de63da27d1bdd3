//! The shard node's OpenAPI document, served at `GET /openapi.json`.

use geocount_http::openapi::{
    header_param, id_param, id_schema, integer, path_param, required_query_param,
};
use geocount_http::{Access, ApiDoc, Operation};
use geocount_model::unique::MAX_ITEM_BYTES;
use geocount_model::{MAX_SHARDS_PER_COUNTER, ShardDefaults};
use serde_json::{Value, json};

use crate::engine::idempotency::MAX_IDEMPOTENCY_KEY_BYTES;

/// The answer to a write or a read of this node's slot.
fn slot_answer() -> Value {
    json!({"type": "object", "properties": {
        "id": {"type": "string"},
        "slot": {"type": "string", "description": "DC_<DATACENTER>_VAL_<n>"},
        "value": {"type": "integer", "description": "the slot's value, or a unique counter's \
                                                     estimate of its distinct items"},
        "version": {"type": "integer"},
        "standard_error": {"type": "number", "description": "unique counters only"},
        "generation": {"type": "object", "description": "reads only: the generation the slot's \
                                                         record counts in (its latest reset or \
                                                         delete; zero: none)",
                       "properties": {
            "physical_ms": {"type": "integer"},
            "logical": {"type": "integer"},
            "node": {"type": "integer"},
        }},
        "window": {"$ref": "#/components/schemas/Window"},
    }})
}

/// The refusals any write can give.
const WRITE_ERRORS: &[(u16, &str)] = &[
    (
        400,
        "malformed input: a bad id, body or query; a delta on a unique counter",
    ),
    (
        409,
        "a bounded counter's write that would take its world total past min or max: \
           {\"error\", \"bound\": \"min\"|\"max\", \"limit\"}",
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
            json!({"type": "string"}),
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

/// `schema`, or null.
fn nullable(mut schema: Value) -> Value {
    schema["nullable"] = true.into();
    schema
}

/// The body of a single write: a delta following `delta` or an item, and a timestamp.
fn write_body(delta: Value) -> Value {
    // A null field is an absent one; only a delta and an item both given conflict.
    json!({"type": "object", "additionalProperties": false,
           "not": {"required": ["delta", "item"],
                   "properties": {"delta": {"type": "integer"}, "item": {"type": "string"}}},
           "description": "a delta (sum counters) or an item (unique counters), not both",
           "properties": {
        "delta": delta,
        "item": {"type": "string", "nullable": true, "minLength": 1, "maxLength": MAX_ITEM_BYTES,
                 "description": format!("unique counters: the item counted, 1-{MAX_ITEM_BYTES} \
                                         bytes of UTF-8")},
        "timestamp": {"type": "integer", "nullable": true, "minimum": 0, "maximum": u64::MAX,
                      "description": "unix seconds (default: now; at most shard.max_future_skew_secs \
                                      ahead of the node's clock, else 422)"},
        "ttlSeconds": ttl_seconds("when the counter has no expiry, it expires this many seconds \
                                   after the write (set in the write's own log record)"),
    }})
}

/// A time to live in seconds, or null.
fn ttl_seconds(description: &str) -> Value {
    json!({"type": "integer", "nullable": true, "minimum": 1, "maximum": u32::MAX,
           "description": description})
}

/// The answer of an operation changing a counter's life: its new description. It takes an
/// `Idempotency-Key` (`key`) as a write does.
fn lifecycle_answer(operation: Operation, key: &Value) -> Operation {
    operation
        .param(id_param())
        .param(key.clone())
        .json_answer(
            200,
            "the counter's new description",
            json!({"type": "object"}),
        )
        .errors(&[
            (400, "a bad id, body or Idempotency-Key"),
            (
                404,
                "a counter this node has not heard of, or one deleted or expired",
            ),
            (413, "a body too large"),
            (422, "an Idempotency-Key used for another write or change"),
            (
                503,
                "storage failed, or the node the Idempotency-Key picks is unreachable",
            ),
            (504, "the forward's outcome is unknown"),
            (
                507,
                "the disk is full, or the node holds its limit of idempotency keys",
            ),
        ])
}

/// The document of this tier's HTTP API, as a node with `settings` serves it; `access` says
/// which credentials its routes ask for.
pub fn document(settings: &ShardDefaults, access: &Access) -> Value {
    api(settings).to_json(access)
}

/// The operations of this tier's HTTP API, for a node with `settings`.
fn api(settings: &ShardDefaults) -> ApiDoc {
    let key = header_param(
        "Idempotency-Key",
        json!({"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY_BYTES,
               "pattern": "^[^\\u001f]*$"}),
        "1-256 bytes without the unit separator (0x1f): a retry with the same key is applied \
         once and answered as the first was",
    );
    let max_window = settings.max_window_seconds;
    ApiDoc::new(
        "geocount shard node",
        "Owns one slot (DC_<DATACENTER>_VAL_<n>) per counter; acknowledges writes once durable.",
    )
    .operation(
        "/counter",
        "post",
        Operation::new("create a counter")
            .json_body(
                json!({"type": "object", "additionalProperties": false,
                       "description": "a null field takes its default", "properties": {
                    "id": nullable(id_schema()),
                    "numberOfShards": nullable(integer(1, MAX_SHARDS_PER_COUNTER.into())),
                    "windowSeconds": nullable(integer(1, max_window.into())),
                    "type": {"type": "string", "nullable": true, "enum": ["sum", "unique", null]},
                    "ttlSeconds": ttl_seconds("deleted this many seconds after it is made"),
                    "history": {"type": "array", "nullable": true,
                        "maxItems": settings.max_history_levels,
                        "description": "rollups kept beyond the window, by rising step (a sum \
                            counter's only; default shard.default_history); keepSeconds a \
                            multiple of stepSeconds, at most shard.max_history_buckets steps",
                        "items": {"type": "object", "additionalProperties": false,
                                  "required": ["stepSeconds", "keepSeconds"], "properties": {
                            "stepSeconds": integer(1, u32::MAX.into()),
                            "keepSeconds": integer(1, u32::MAX.into()),
                        }}},
                    "min": {"type": "integer", "nullable": true, "minimum": i64::MIN,
                            "maximum": 0, "description": "the lowest world total its writes                             may reach (a sum counter's only)"},
                    "max": {"type": "integer", "nullable": true, "minimum": 0,
                            "maximum": i64::MAX, "description": "the highest world total its                             writes may reach (a sum counter's only); at least min"},
                }}),
                json!({"id": "openapi-example", "numberOfShards": 2, "windowSeconds": 300}),
            )
            .json_answer(201, "the description", json!({"type": "object"}))
            .json_answer(
                200,
                "a bounded counter created before with the same bounds: every shard node \
                 holds it now",
                json!({"type": "object"}),
            )
            .errors(&[
                (400, "malformed input, or bounds that do not hold 0"),
                (409, "the id exists"),
                (413, "a body too large"),
                (
                    503,
                    "storage failed, or a bounded counter is created but some shard node \
                     could not be told its bounds (send it again)",
                ),
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
            .window_params(max_window)
            .json_answer(200, "the slot's value and version", slot_answer())
            .errors(&[
                (400, "a bad id or query (window on a unique counter too)"),
                (
                    404,
                    "a counter this node has never seen, or one deleted or expired",
                ),
            ]),
    )
    .operation(
        "/counter/{id}",
        "delete",
        lifecycle_answer(
            Operation::new(
                "delete a counter everywhere (admin): a later write makes it again from zero",
            ),
            &key,
        ),
    )
    .operation(
        "/counter/{id}",
        "patch",
        lifecycle_answer(
            Operation::new("set or clear a counter's expiry (admin)").json_body(
                json!({"type": "object", "additionalProperties": false,
                       "required": ["ttlSeconds"], "properties": {
                    "ttlSeconds": ttl_seconds("deleted this many seconds from now; null: never"),
                }}),
                json!({"ttlSeconds": 3600}),
            ),
            &key,
        ),
    )
    .operation(
        "/counter/{id}/reset",
        "post",
        lifecycle_answer(
            Operation::new(
                "reset a counter to zero everywhere (admin): later writes count from zero",
            ),
            &key,
        ),
    )
    .operation(
        "/counter/{id}/write",
        "patch",
        answers_a_write(
            Operation::new("add to a counter (a delta) or count an item (unique counters)")
                .param(id_param())
                .param(required_query_param(
                    "op",
                    json!({"type": "string", "enum": ["INCREMENT", "DECREMENT"]}),
                    "INCREMENT or DECREMENT (items only with INCREMENT)",
                    "INCREMENT",
                ))
                .param(key.clone())
                .json_body(
                    write_body(json!({"type": "integer", "nullable": true,
                                      "minimum": 1, "maximum": i64::MAX,
                                      "description": "default 1 (sum counters)"})),
                    json!({"delta": 1}),
                ),
        ),
    )
    .operation(
        "/counters/{id}/increment",
        "post",
        answers_a_write(
            Operation::new("add a signed delta, or count an item")
                .param(id_param())
                .param(key)
                .json_body(
                    write_body(
                        json!({"type": "integer", "nullable": true, "minimum": i64::MIN,
                                      "maximum": i64::MAX, "not": {"enum": [0]},
                                      "description": "default 1; not 0 (sum counters)"}),
                    ),
                    json!({"delta": -2}),
                ),
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
        "/counter/{id}/world",
        "get",
        Operation::new(
            "the counter's world value as this node answers it (the value of Redis GET and \
             PFCOUNT): its own datacenter as this node holds it now (its own slot, its copies \
             of its peers'), plus the other datacenters' parts as the global aggregator last \
             reported them (cached for shard.world_refresh_ms)",
        )
        .param(id_param())
        .json_answer(
            200,
            "the world value",
            json!({"type": "object", "required": ["id", "value", "staleness_ms"], "properties": {
                "id": {"type": "string"},
                "value": {"type": "integer", "description": "the sum over every datacenter, or \
                                                             a unique counter's estimate of the \
                                                             union of every slot's items"},
                "standard_error": {"type": "number", "description": "unique counters only"},
                "staleness_ms": {"type": "integer", "description": "how old the other \
                    datacenters' parts may be: the cached answer's age plus the staleness the \
                    global aggregator reported (0 with no other datacenter)"},
            }}),
        )
        .errors(&[
            (400, "a bad id"),
            (
                404,
                "a counter no datacenter knows, or one deleted or expired",
            ),
            (
                503,
                "another datacenter is staler than global.max_staleness_ms, no global \
                 aggregator replica answered, or the node is restoring its slot",
            ),
        ]),
    )
    .operation(
        "/counter/{id}/rights",
        "get",
        Operation::new(
            "a bounded counter's rights held by this node's slot: the increments (up) and \
             decrements (down) it may apply without asking another slot, its share, and the \
             rights it gave and received",
        )
        .param(id_param())
        .json_answer(
            200,
            "the slot's rights",
            json!({"type": "object", "required": ["counter", "slot", "value", "share", "given", "received"],
                   "properties": {
                "counter": {"type": "string"},
                "slot": {"type": "string"},
                "min": {"type": "integer", "nullable": true},
                "max": {"type": "integer", "nullable": true},
                "value": {"type": "integer"},
                "up": {"type": "integer", "nullable": true},
                "down": {"type": "integer", "nullable": true},
                "share": {"type": "object"},
                "given": {"type": "array", "items": {"type": "object"}},
                "received": {"type": "array", "items": {"type": "object"}},
            }}),
        )
        .errors(&[(400, "a bad id"), (404, "no live bounded counter has the id")]),
    )
    .operation(
        "/rights",
        "post",
        Operation::new(
            "another shard node asks this node's slot for a bounded counter's rights (given \
             once durable), or hands it a bounded counter's description to hold",
        )
        .between_tiers()
        .postcard_body("RightsMessage")
        .postcard_answer(200, "RightsAnswer")
        .errors(&[
            (400, "an undecodable message"),
            (503, "storage failed, or the node is restoring its slot"),
        ]),
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
             the peer's slot version up to which the copy holds every key it recorded (its \
             reach), and where the next page starts",
        )
        .between_tiers()
        .param(path_param(
            "slot",
            "a peer's slot name, DC_<DATACENTER>_VAL_<n>",
        ))
        .page_params("keys")
        .postcard_answer(200, "KeyCopy")
        .errors(&[
            (400, "a bad or unknown query key"),
            (404, "a slot that is no peer of this node"),
        ]),
    )
    .operation(
        "/slots/{slot}/replicate",
        "post",
        Operation::new(
            "groups the slot's owner logged (shard.durability = \"replicated\"): appended to \
             this node's log of that slot and fsynced before the answer",
        )
        .between_tiers()
        .param(path_param(
            "slot",
            "the caller's slot name, DC_<DATACENTER>_VAL_<n>",
        ))
        .postcard_body("ReplicateBatch")
        .json_answer(
            200,
            "the groups are fsynced here: {\"groups\": n}",
            json!({"type": "object"}),
        )
        .errors(&[
            (400, "an undecodable batch"),
            (404, "a slot that is no peer of this node"),
            (500, "the log could not hold them"),
        ]),
    )
    .operation(
        "/slots/{slot}/replica",
        "get",
        Operation::new(
            "everything this node's log of a peer slot's replicated groups holds, folded: each \
             counter's latest record, the counters created and the keys within retention \
             (restoring that peer)",
        )
        .between_tiers()
        .param(path_param(
            "slot",
            "the caller's slot name, DC_<DATACENTER>_VAL_<n>",
        ))
        .postcard_answer(200, "ReplicaCopy")
        .errors(&[
            (404, "a slot that is no peer of this node"),
            (500, "the log could not be read"),
        ]),
    )
    .health_and_metrics("health: 503 while storage fails, with each pulled source's staleness")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::routes::{ROUTES, need};

    #[test]
    fn the_document_lists_exactly_the_routed_operations_and_their_callers() {
        let doc = api(&ShardDefaults::default());
        // Every method of a route is called by the same kind of caller (the rights differ).
        let get = hyper::Method::GET;
        doc.assert_routes(ROUTES, |route| {
            need(route, &get, Some("DC_A_VAL_1"), false, "A")
        });
    }
}
