//! The operations several tiers share: replication, probes, and the aggregators' reads,
//! rankings and sums.

use serde_json::json;

use super::{ApiDoc, Operation, id_param, integer, path_param, query_param, required_query_param};
use crate::exposition::TEXT_CONTENT_TYPE;
use crate::routing::METRICS_CONTENT_TYPE;
use geocount_model::counter_id::MAX_COUNTER_ID_BYTES;
use geocount_model::top_k::MAX_K;

impl ApiDoc {
    /// Adds `/sync` and, with `slot_copies`, `/slots/{slot}/copy`: the replication routes a tier
    /// serves to the tiers that pull it and to shard nodes restoring a lost slot.
    pub fn replication(self, slot_copies: bool) -> Self {
        let doc = self.operation(
            "/sync",
            "post",
            Operation::new("a page of changes from a cursor (replication between tiers)")
                .between_tiers()
                .postcard_body("SyncRequest")
                .postcard_answer(200, "SyncPage")
                .errors(&[
                    (400, "a malformed request"),
                    (413, "a request too large"),
                    (
                        503,
                        "a shard node restoring its slot, or in replicated durability before a \
                         peer holds the log it started with",
                    ),
                ]),
        );
        if !slot_copies {
            return doc;
        }
        doc.operation(
            "/slots/{slot}/copy",
            "get",
            Operation::new(
                "a page of the records this tier holds of one slot (restoring a shard node): the \
                 counters from table index `from` (0), at most `limit` (sync.page_entries) looked \
                 at; says whether this tier has held the slot whole since it started, and where \
                 the next page starts",
            )
            .between_tiers()
            .param(path_param("slot", "a slot name, DC_<DATACENTER>_VAL_<n>"))
            .page_params("counters")
            .postcard_answer(200, "SlotCopy")
            .errors(&[
                (400, "a bad or unknown query key"),
                (404, "a slot this tier does not hold"),
            ]),
        )
    }

    /// Adds `/healthz` and `/metrics`.
    pub fn health_and_metrics(self, health: &str) -> Self {
        self.operation(
            "/healthz",
            "get",
            Operation::new(health)
                .open()
                .json_answer(200, "serving", json!({"type": "object"}))
                .json_answer(503, "not able to serve", json!({"type": "object"})),
        )
        .operation(
            "/metrics",
            "get",
            Operation::new("Prometheus metrics").open().text_answers(
                200,
                "the OpenMetrics text format; the Prometheus text format 0.0.4 for an `Accept` \
                 naming text/plain and not OpenMetrics",
                &[METRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE],
            ),
        )
        .operation(
            "/openapi.json",
            "get",
            Operation::new("this document").open().json_answer(
                200,
                "the OpenAPI document",
                json!({"type": "object"}),
            ),
        )
    }

    /// Adds an aggregator's `GET /counter/{id}` (the datacenter's or, when `global`, the
    /// world's value, with each part's staleness); windows are at most `max_window_seconds`.
    pub fn aggregator_read(self, global: bool, max_window_seconds: u32) -> Self {
        let (scope, parts) = if global {
            ("the world's value: the sum over datacenters", "datacenters")
        } else {
            ("the datacenter's value: the sum over its slots", "slots")
        };
        let mut read = Operation::new(scope)
            .param(id_param())
            .window_params(max_window_seconds);
        let mut errors = vec![
            (400, "a bad id or query (window on a unique counter too)"),
            (
                404,
                "a counter no part has reported, or one deleted or expired",
            ),
        ];
        if global {
            read = read.staleness_params();
            errors.push((503, "stale datacenters, named (unless allow_partial=true)"));
        }
        let answer = json!({"type": "object", "properties": {
            "id": {"type": "string"},
            "value": {"type": "integer", "description": "the sum, or a unique counter's estimate"},
            "standard_error": {"type": "number", "description": "unique counters only"},
            "expiresAtMs": {"type": "integer", "minimum": 0,
                            "description": "when the counter expires (unix ms), if it has an expiry"},
            "window": {"$ref": "#/components/schemas/Window"},
            "staleness_ms": {"type": "integer", "nullable": true,
                             "description": "the stalest part's; null if one was never complete"},
            "complete": {"type": "boolean"},
            parts: {"type": "object", "description": "each part's value and staleness"},
        }});
        self.operation(
            "/counter/{id}",
            "get",
            read.json_answer(200, "the value and how fresh it is", answer)
                .errors(&errors),
        )
    }

    /// Adds an aggregator's `GET /counter/{id}/history`; `global` adds the global
    /// aggregator's staleness parameters, refusal and datacenter parts.
    pub fn aggregator_history(self, global: bool) -> Self {
        let scope = if global {
            "the counter's history: one value per step of one of its history levels, summed \
             over every datacenter"
        } else {
            "the counter's history: one value per step of one of its history levels, summed \
             over the datacenter's slots"
        };
        let mut read = Operation::new(scope)
            .param(id_param())
            .param(required_query_param(
                "step",
                integer(1, u64::from(u32::MAX)),
                "the step, in seconds: one of the counter's history levels (else 400)",
                "60",
            ))
            .param(query_param(
                "from",
                integer(0, u64::MAX),
                "the first step, unix seconds, taken to its step's start (default: as far back \
                 as the level keeps)",
            ))
            .param(query_param(
                "to",
                integer(0, u64::MAX),
                "the last step, unix seconds, taken to its step's start (default: now)",
            ));
        let mut errors = vec![
            (
                400,
                "a bad id or query: a step the counter keeps no level of, from after to, more \
                 than 10000 points, a unique counter",
            ),
            (404, "a counter no part has reported, or a deleted one"),
        ];
        let point = json!({"type": "object", "properties": {
            "at": {"type": "integer", "description": "the step's start, unix seconds"},
            "value": {"type": "integer", "description": "the hits in that step"},
        }});
        let mut properties = json!({
            "id": {"type": "string"},
            "step": {"type": "integer"},
            "from": {"type": "integer", "description": "the first step's start"},
            "to": {"type": "integer", "description": "the last step's start"},
            "points": {"type": "array", "items": point, "description": "one per step, oldest first"},
            "staleness_ms": {"type": "integer", "nullable": true,
                             "description": "the stalest part's; null if one was never complete"},
            "complete": {"type": "boolean"},
        });
        if global {
            read = read.staleness_params();
            errors.push((503, "stale datacenters, named (unless allow_partial=true)"));
            properties["value"] =
                json!({"type": "integer", "description": "the sum of the points"});
            properties["datacenters"] = json!({"type": "object",
                "description": "each datacenter's sum of the points and its staleness"});
        } else {
            properties["datacenter"] = json!({"type": "string"});
        }
        let answer = json!({"type": "object", "properties": properties});
        self.operation(
            "/counter/{id}/history",
            "get",
            read.json_answer(200, "the points and how fresh they are", answer)
                .errors(&errors),
        )
    }

    /// Adds an aggregator's `/topk` and `/trending`; `global` adds the global aggregator's
    /// staleness parameters and refusals.
    pub fn rankings(self, global: bool) -> Self {
        let mut top = Operation::new(
            "the K highest counters by all-time total, or by hits in a window (sum counters \
             only; highest first, ties by id ascending)",
        )
        .param(query_param(
            "k",
            integer(1, MAX_K as u64),
            "how many (default 10)",
        ))
        .param(query_param(
            "prefix",
            json!({"type": "string"}),
            "only ids starting with this (default: any)",
        ))
        // A ranking's window is no counter's: any length is taken.
        .window_params(u32::MAX);
        let mut trending = Operation::new(
            "every counter with a configured prefix whose hits in the [trending] window ending \
             now reach the prefix's threshold",
        )
        .param(required_query_param(
            "prefix",
            json!({"type": "string"}),
            "one of the configured prefixes",
            "#",
        ));
        let mut errors = vec![
            (400, "a bad or unknown query key"),
            (
                429,
                "a ranking that scans every counter while http.max_concurrent_scans are under way (Retry-After)",
            ),
        ];
        if global {
            top = top.staleness_params();
            trending = trending.staleness_params();
            errors.push((503, "stale datacenters, named (unless allow_partial=true)"));
        }
        let ranked = json!({"type": "array", "items": {"$ref": "#/components/schemas/Ranked"}});
        let top_answer = json!({"type": "object", "properties": {
            "top": ranked, "k": {"type": "integer"}, "prefix": {"type": "string"},
            "window": {"$ref": "#/components/schemas/Window"},
            "staleness_ms": {"type": "integer", "nullable": true},
            "complete": {"type": "boolean"},
            "datacenters": {"type": "object", "description": "global: each datacenter's own"},
        }});
        let trending_answer = json!({"type": "object", "properties": {
            "prefix": {"type": "string"}, "threshold": {"type": "integer"},
            "window": {"$ref": "#/components/schemas/Window"}, "trending": ranked,
            "staleness_ms": {"type": "integer", "nullable": true},
            "complete": {"type": "boolean"},
            "datacenters": {"type": "object", "description": "global: each datacenter's own"},
        }});
        let mut trending_errors = errors.clone();
        trending_errors.push((404, "a prefix with no configured threshold"));
        self.operation(
            "/topk",
            "get",
            top.json_answer(200, "the ranking", top_answer)
                .errors(&errors),
        )
        .operation(
            "/trending",
            "get",
            trending
                .json_answer(200, "the trending counters", trending_answer)
                .errors(&trending_errors),
        )
    }

    /// Adds an aggregator's `/aggregate`; `global` adds the global aggregator's staleness
    /// parameters, refusals and each datacenter's sum.
    pub fn aggregate(self, global: bool) -> Self {
        let mut sum = Operation::new(
            "the sum and the number of the sum counters whose id starts with prefix, by all-time \
             total or by hits in a window (unique counters left out)",
        )
        .param(required_query_param(
            "prefix",
            json!({"type": "string", "maxLength": MAX_COUNTER_ID_BYTES}),
            "only ids starting with this (empty: every counter); one holding a control \
             character is refused with 400",
            "#",
        ))
        // A sum's window is no counter's: any length is taken.
        .window_params(u32::MAX);
        let mut errors = vec![
            (400, "a bad or unknown query key, or no prefix"),
            (
                429,
                "a sum scans every counter: refused while http.max_concurrent_scans are under way (Retry-After)",
            ),
        ];
        if global {
            sum = sum.staleness_params();
            errors.push((503, "stale datacenters, named (unless allow_partial=true)"));
        }
        let answer = json!({"type": "object", "properties": {
            "prefix": {"type": "string"},
            "sum": {"type": "integer", "description": "may be beyond 64 bits"},
            "counters": {"type": "integer", "description": "the sum counters added"},
            "window": {"$ref": "#/components/schemas/Window"},
            "staleness_ms": {"type": "integer", "nullable": true},
            "complete": {"type": "boolean"},
            "datacenters": {"type": "object", "description": "global: each datacenter's sum"},
        }});
        self.operation(
            "/aggregate",
            "get",
            sum.json_answer(200, "the sum", answer).errors(&errors),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Access;
    use serde_json::Value;

    #[test]
    fn sums_take_the_staleness_keys_and_refuse_stale_reads_at_the_global_tier_only() {
        let sums = |global| {
            let doc = ApiDoc::new("t", "d").aggregate(global);
            doc.to_json(&Access::default())["paths"]["/aggregate"]["get"].clone()
        };
        let (global, datacenter) = (sums(true), sums(false));
        assert!(global["responses"]["503"].is_object());
        assert!(datacenter["responses"]["503"].is_null());
        assert!(datacenter["responses"]["429"].is_object());
        let names = |op: &Value| -> Vec<String> {
            (op["parameters"].as_array().unwrap().iter())
                .map(|p| p["name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(names(&datacenter), ["prefix", "window", "at"]);
        let staleness = ["max_staleness_ms", "allow_partial"];
        assert_eq!(names(&global)[3..], staleness);
        assert_eq!(datacenter["parameters"][0]["required"], true);
    }
}
