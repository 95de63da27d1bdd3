//! The OpenAPI document each tier serves at `GET /openapi.json`, rendered for the process
//! serving it (its `[auth]` decides the credentials it lists).

use geocount_http::{ApiDoc, Operation};
use serde_json::json;

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
