//! The global aggregator's OpenAPI document, served at `GET /openapi.json`.

use geocount_sync::{ApiDoc, Operation};
use serde_json::json;

/// The document of this tier's HTTP API.
pub fn document() -> ApiDoc {
    ApiDoc::new(
        "geocount global aggregator",
        "Sums the datacenters, with each datacenter's staleness; refuses (503) an answer with a \
         stale datacenter unless allow_partial=true; ranks the world's counters.",
    )
    .aggregator_read(true)
    .rankings(true)
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
    .replication(true)
    .health_and_metrics(
        "health, with each datacenter's staleness and whether it is over its byte bound",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_lists_exactly_the_routed_paths() {
        let routed = crate::api::ROUTES.iter().map(|(path, _)| *path);
        assert_eq!(document().unmatched_paths(routed), (vec![], vec![]));
    }
}
