//! The datacenter aggregator's OpenAPI document, served at `GET /openapi.json`.

use geocount_sync::ApiDoc;

/// The document of this tier's HTTP API.
pub fn document() -> ApiDoc {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_lists_exactly_the_routed_paths() {
        let routed = crate::api::ROUTES.iter().map(|(path, _)| *path);
        assert_eq!(document().unmatched_paths(routed), (vec![], vec![]));
    }
}
