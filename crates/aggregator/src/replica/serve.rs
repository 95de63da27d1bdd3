//! Answering `POST /sync` from a replica: the tier above pulls it, and a shard node announces
//! itself in its pulls of its datacenter's aggregator.

use geocount_http::routing::RequestError;
use geocount_model::wire::SlotFreshness;
use geocount_net::{Response, read_body};
use geocount_sync::{MAX_SYNC_REQUEST_BYTES, answer_sync};
use hyper::Request;
use hyper::body::Incoming;

use super::{Replica, SharedReplica};

/// Answers `POST /sync` from `replica`: the streams the request asks for, at most `limit`
/// entries each, under the name `source` and with the freshness `freshness` reports. A shard
/// node that announces itself is noted at `now_ms` ([`Replica::announced`]).
pub async fn serve_sync(
    request: Request<Incoming>,
    replica: &SharedReplica,
    source: &str,
    limit: usize,
    now_ms: u64,
    freshness: impl FnOnce(&Replica) -> Vec<SlotFreshness>,
) -> Result<Response, RequestError> {
    let body = read_body(request, MAX_SYNC_REQUEST_BYTES).await?;
    Ok(answer_sync(&body, |asked| {
        // A shard node announcing itself is noted (briefly under the write lock), and told if
        // it is the newer of two processes serving its slot.
        let conflict = asked.puller.as_ref().and_then(|_| {
            replica
                .write()
                .expect("replica lock")
                .announced(asked, now_ms)
        });
        let replica = replica.read().expect("replica lock");
        let mut page = replica.sync_page(asked, source, limit, freshness(&replica));
        if let Some(conflict) = &conflict {
            tracing::warn!(%conflict, "told a shard node it serves its slot beside another process");
        }
        page.conflict = conflict;
        page
    }))
}
