//! Answering `POST /sync` from a replica: the tier above pulls it, and a shard node announces
//! itself in its pulls of its datacenter's aggregator.

use geocount_http::routing::{ProvenProcess, RequestError};
use geocount_http::{AccessError, TierRefusal};
use geocount_model::wire::{Puller, SlotFreshness};
use geocount_net::{Response, read_body};
use geocount_sync::{MAX_SYNC_REQUEST_BYTES, answer_sync};
use hyper::Request;
use hyper::body::Incoming;

use super::{Replica, SharedReplica};

/// Answers `POST /sync` from `replica`: the streams the request asks for, at most `limit`
/// entries each, under the name `source` and with the freshness `freshness` reports. A shard
/// node that announces itself is noted at `now_ms` ([`Replica::announced`]); an announcement
/// of another slot than the one its caller proved to serve is refused (403) and noted nowhere.
pub async fn serve_sync(
    request: Request<Incoming>,
    replica: &SharedReplica,
    source: &str,
    limit: usize,
    now_ms: u64,
    freshness: impl FnOnce(&Replica) -> Vec<SlotFreshness>,
) -> Result<Response, RequestError> {
    let proven = request.extensions().get::<ProvenProcess>().cloned();
    let body = read_body(request, MAX_SYNC_REQUEST_BYTES).await?;
    Ok(answer_sync(&body, |asked| {
        if let Some(puller) = &asked.puller {
            own_slot(proven.as_ref(), puller)?;
        }
        // A shard node announcing itself is noted (briefly under the write lock), and told if
        // it is the one of two processes serving its slot that must take no writes.
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
        Ok(page)
    }))
}

/// Lets `puller` announce its slot if the caller proved to be that slot's process (`proven`),
/// or if nothing proves a caller's name (no `[tls]`, no cluster secret): any other process
/// allowed on `/sync` could otherwise make a slot's real node refuse its writes.
fn own_slot(proven: Option<&ProvenProcess>, puller: &Puller) -> Result<(), AccessError> {
    match proven {
        Some(ProvenProcess(process)) if *process != puller.slot => {
            let refusal = AccessError::Tier {
                process: Some(process.clone()),
                route: "POST /sync".to_owned(),
                why: TierRefusal::NotItsSlot {
                    slot: puller.slot.clone(),
                },
            };
            tracing::warn!(process, slot = %puller.slot, "refused an announcement: {refusal}");
            Err(refusal)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_net::HttpError;

    #[test]
    fn a_node_announces_only_its_own_slot() {
        let puller = Puller {
            slot: "DC_A_VAL_0".into(),
            incarnation: 7,
            nonce: 3,
        };
        let proven = |name: &str| ProvenProcess(name.into());
        assert!(own_slot(Some(&proven("DC_A_VAL_0")), &puller).is_ok());
        assert!(own_slot(None, &puller).is_ok(), "nothing proves a name");
        let refusal = own_slot(Some(&proven("DC_A_VAL_1")), &puller).unwrap_err();
        assert_eq!(refusal.status(), hyper::StatusCode::FORBIDDEN);
        assert!(refusal.to_string().contains("DC_A_VAL_0"), "{refusal}");
    }
}
