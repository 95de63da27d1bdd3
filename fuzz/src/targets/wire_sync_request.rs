//! `POST /sync` bodies (postcard `SyncRequest`) as every tier answers them: decoded by
//! `answer_sync` and paged from a populated replica's journals, with the cursors as sent and
//! with their epochs set to the source's (a puller that learnt them), page after page.

use std::sync::OnceLock;

use crate::populated_replica;
use geocount_model::wire::{Cursor, SyncPage, SyncRequest};
use geocount_aggregator::replica::Replica;
use geocount_sync::{Journaled, answer_sync};

fn replica() -> &'static Replica {
    static REPLICA: OnceLock<Replica> = OnceLock::new();
    REPLICA.get_or_init(populated_replica)
}

/// `cursor` with its epoch replaced by `epoch`.
fn with_epoch(cursor: Cursor, epoch: u64) -> Cursor {
    match cursor {
        Cursor::Start => Cursor::Start,
        Cursor::Scan {
            resume_seq,
            next_index,
            ..
        } => Cursor::Scan {
            epoch,
            resume_seq,
            next_index,
        },
        Cursor::Seq { seq, .. } => Cursor::Seq { epoch, seq },
    }
}

/// Pulls from `request` until caught up (a bounded number of pages).
fn pull(replica: &Replica, mut request: SyncRequest) {
    for _ in 0..8 {
        let page: SyncPage = replica.sync_page(&request, "A", 2, Vec::new());
        let more = page.slots.as_ref().is_some_and(|p| !p.caught_up)
            || page.descriptions.as_ref().is_some_and(|p| !p.caught_up);
        request.slots = page.slots.map(|p| p.next);
        request.descriptions = page.descriptions.map(|p| p.next);
        if !more {
            return;
        }
    }
}

/// Runs one input through the target; whether it decoded.
pub fn run(data: &[u8]) -> bool {
    let replica = replica();
    let _ = answer_sync(data, |request| {
        replica.sync_page(request, "A", 2, Vec::new())
    });
    let Ok(request) = postcard::from_bytes::<SyncRequest>(data) else {
        return false;
    };
    pull(replica, request.clone());
    let slots_epoch = replica.copies().journal().epoch();
    let descriptions_epoch = replica.descriptions.journal().epoch();
    pull(
        replica,
        SyncRequest {
            slots: request.slots.map(|c| with_epoch(c, slots_epoch)),
            descriptions: request
                .descriptions
                .map(|c| with_epoch(c, descriptions_epoch)),
            puller: request.puller.clone(),
        },
    );
    true
}
