//! The OpenAPI document each tier serves at `GET /openapi.json`, rendered for the process
//! serving it (its `[auth]` decides the credentials it lists).

use geocount_http::openapi::id_param;
use geocount_http::{ApiDoc, Operation};
use serde_json::{Value, json};

use crate::page::HTML_CONTENT_TYPE;

/// The document of the datacenter tier's HTTP API; no window is longer than
/// `max_window_seconds`.
pub fn datacenter(max_window_seconds: u32) -> ApiDoc {
    ApiDoc::new(
        "geocount datacenter aggregator",
        "Sums the slots of one datacenter's shard nodes, with each slot's staleness; ranks the \
         datacenter's counters and sums them over an id prefix.",
    )
    .aggregator_read(false, max_window_seconds)
    .aggregator_history(false)
    .rankings(false)
    .aggregate(false)
    .status_page(false)
    .replication(true)
    .health_and_metrics(
        "health, with each shard's staleness, byte bound and entries refused ahead of the clock",
    )
}

/// The document of the global tier's HTTP API; no window is longer than `max_window_seconds`.
pub fn global(max_window_seconds: u32) -> ApiDoc {
    ApiDoc::new(
        "geocount global aggregator",
        "Sums the datacenters, with each datacenter's staleness; refuses (503) an answer with a \
         stale datacenter unless allow_partial=true; ranks the world's counters and sums them over \
         an id prefix.",
    )
    .aggregator_read(true, max_window_seconds)
    .aggregator_history(true)
    .rankings(true)
    .aggregate(true)
    .status_page(true)
    .operation(
        "/datacenters",
        "get",
        Operation::new("each datacenter's state: heard, last heard, staleness, counters, error")
            .json_answer(
                200,
                "every datacenter, in topology order",
                json!({"type": "object"}),
            ),
    )
    .operation(
        "/parts",
        "post",
        Operation::new(
            "the parts of every datacenter but the asker's of many counters (a shard node \
             answering world reads): each counter's sum or sketch union counted from the newer \
             of its generation here and the asker's, whether it exists, and the other \
             datacenters' worst staleness; stale when one of them is staler than the bound",
        )
        .between_tiers()
        .postcard_body("PartsRequest")
        .postcard_answer(200, "PartsAnswer")
        .errors(&[
            (400, "a malformed request, an unknown datacenter, or too many counters"),
            (413, "a request too large"),
        ]),
    )
    .replication(true)
    .health_and_metrics(
        "health, with each datacenter's staleness, byte bound and entries refused ahead of the clock",
    )
}

/// The status page's routes: `/`, `/status` and `/counter/{id}/rights`.
trait StatusPage {
    /// Adds them as the global tier (`global`) or the datacenter tier answers them.
    fn status_page(self, global: bool) -> Self;
}

impl StatusPage for ApiDoc {
    fn status_page(self, global: bool) -> Self {
        let (status, parts, rights) = if global {
            (
                "each datacenter as heard here (staleness, counters, last error, each replica of \
                 its aggregator) with its aggregator's own status (the freshest replica that \
                 answered, each asked with a 2 s timeout), and the visibility lag",
                ("datacenters", "each datacenter, in topology order"),
                "a bounded counter's rights in each datacenter (asked of the first replica of its \
                 aggregator that answers), with the increments and decrements they allow together",
            )
        } else {
            (
                "each slot as this aggregator pulls it (staleness, last error) and as its shard \
                 node reports itself (its /healthz: restore, conflict, storage error; writes \
                 applied; each asked with a 1 s timeout), the replication lag of each slot, \
                 the datacenter's durability and fencing alarms",
                ("slots", "each slot, in slot order"),
                "a bounded counter's rights held by each slot (asked of its shard node), with the \
                 increments and decrements they allow together",
            )
        };
        let lag = json!({"type": "integer", "minimum": 0, "nullable": true});
        let mut properties = json!({
            "tier": {"type": "string", "enum": [if global { "global" } else { "datacenter" }]},
            "at_ms": {"type": "integer", "minimum": 0},
            "status": {"type": "string"},
            "counters": {"type": "integer", "minimum": 0},
            "trending": {"type": "object", "required": ["prefixes", "window_seconds"],
                         "properties": {"prefixes": {"type": "array", "items": {"type": "string"}},
                                        "window_seconds": {"type": "integer"}}},
            parts.0: {"type": "array", "description": parts.1, "items": {"type": "object"}},
        });
        let mut required = vec!["tier", "at_ms", "status", "trending", parts.0];
        if global {
            properties["visibility_lag_ms"] = lag;
            properties["max_staleness_ms"] = json!({"type": "integer", "minimum": 0});
            required.push("visibility_lag_ms");
        } else {
            properties["staleness_ms"] = lag;
            properties["durability"] =
                json!({"type": "string", "enum": ["sync", "async", "replicated"]});
            properties["conflicts"] = json!({"type": "array", "items": {"type": "string"}});
            required.extend(["datacenter", "durability", "conflicts"]);
            properties["datacenter"] = json!({"type": "string"});
        }
        let view: Value = json!({"type": "object", "required": required, "properties": properties});
        let total = json!({"type": "integer", "nullable": true});
        let rights_schema = json!({"type": "object", "required": ["id", "up", "down"],
            "properties": {"id": {"type": "string"}, "up": total, "down": total,
                           parts.0: {"type": "array", "items": {"type": "object"}}}});
        let no_query = (400, "a query key (this route takes none)");
        self.operation(
            "/",
            "get",
            Operation::new(
                "the status page: HTML with its style and script inside, reading this \
                 process's /status and read routes (with the token typed into it under [auth])",
            )
            .open()
            .text_answers(200, "the page", &[HTML_CONTENT_TYPE]),
        )
        .operation(
            "/status",
            "get",
            Operation::new(status)
                .json_answer(200, "the status", view)
                .errors(&[no_query]),
        )
        .operation(
            "/counter/{id}/rights",
            "get",
            Operation::new(rights)
                .param(id_param())
                .json_answer(200, "the rights, per part", rights_schema)
                .errors(&[
                    (400, "a bad id, or a query key (this route takes none)"),
                    (404, "a counter no part holds as a bounded counter"),
                    (503, "no part answered in time"),
                ]),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::{GLOBAL_ONLY, ROUTES, Route};

    #[test]
    fn each_document_lists_exactly_its_tiers_routed_operations() {
        let slot = Some("DC_A_VAL_0");
        datacenter(300).assert_routes(ROUTES, |route| {
            crate::datacenter::api::need(route, slot, "A")
        });
        let routes: Vec<(&str, Route)> = ROUTES.iter().chain(GLOBAL_ONLY).copied().collect();
        global(300).assert_routes(&routes, |route| crate::global::api::need(route, slot));
    }
}
