//! The OpenAPI document each tier serves at `GET /openapi.json`.

use geocount_http::{ApiDoc, Operation};
use serde_json::json;

/// The document of the datacenter tier's HTTP API.
pub fn datacenter() -> ApiDoc {
    ApiDoc::new(
        "geocount datacenter aggregator",
        "Sums the slots of one datacenter's shard nodes, with each slot's staleness; ranks the \
         datacenter's counters.",
    )
    .aggregator_read(false)
    .rankings(false)
    .replication(true)
    .health_and_metrics("health, with each shard's staleness and whether it is over its byte bound")
}

/// The document of the global tier's HTTP API.
pub fn global() -> ApiDoc {
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
    use crate::routes::{GLOBAL_ONLY, ROUTES};

    #[test]
    fn each_document_lists_exactly_its_tiers_routed_paths() {
        let routed = ROUTES.iter().map(|(path, _)| *path);
        assert_eq!(datacenter().unmatched_paths(routed), (vec![], vec![]));
        let routed = ROUTES.iter().chain(GLOBAL_ONLY).map(|(path, _)| *path);
        assert_eq!(global().unmatched_paths(routed), (vec![], vec![]));
    }
}
