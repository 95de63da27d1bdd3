//! `POST /sync` bodies (postcard `SyncRequest`) as every tier answers them: decoded by
//! `answer_sync`, the shard node announcing itself noted, and paged from a populated replica's
//! journals, with the cursors as sent and with their epochs set to the source's (a puller that
//! learnt them), page after page.

use std::sync::OnceLock;

use crate::{NOW_MS, populated_replica, slot_names};
use geocount_aggregator::replica::Replica;
use geocount_model::wire::{Cursor, Puller, SyncPage, SyncRequest};
use geocount_sync::answer_sync;

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

/// The epoch of `cursor`, if it has one.
fn epoch_of(cursor: Cursor) -> Option<u64> {
    match cursor {
        Cursor::Start => None,
        Cursor::Scan { epoch, .. } | Cursor::Seq { epoch, .. } => Some(epoch),
    }
}

/// The epochs of `replica`'s slot and description journals, as a puller learns them: from
/// the cursors of its first page.
fn epochs(replica: &Replica) -> (u64, u64) {
    let first = replica.sync_page(&SyncRequest::from_start(true, true), "A", 1, Vec::new());
    let epoch = |next: Option<Cursor>| next.and_then(epoch_of).expect("a populated journal");
    (
        epoch(first.slots.map(|p| p.next)),
        epoch(first.descriptions.map(|p| p.next)),
    )
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
        Ok(replica.sync_page(request, "A", 2, Vec::new()))
    });
    let Ok(request) = postcard::from_bytes::<SyncRequest>(data) else {
        return false;
    };
    // A shard node announcing itself is noted before its page is served (`serve_sync`); a
    // second process announcing the same slot makes a conflict.
    let mut noted = Replica::new(slot_names(), &[]);
    let _ = noted.announced(&request, NOW_MS);
    if let Some(puller) = &request.puller {
        let other = Puller {
            slot: puller.slot.clone(),
            incarnation: puller.incarnation.wrapping_add(1),
            nonce: puller.nonce,
        };
        let second = SyncRequest {
            puller: Some(other),
            ..SyncRequest::default()
        };
        let _ = noted.announced(&second, NOW_MS + 1);
        let _ = noted.conflicts(NOW_MS + 1);
    }
    pull(replica, request.clone());
    let (slots_epoch, descriptions_epoch) = epochs(replica);
    pull(
        replica,
        SyncRequest {
            slots: request.slots.map(|c| with_epoch(c, slots_epoch)),
            descriptions: request
                .descriptions
                .map(|c| with_epoch(c, descriptions_epoch)),
            ..request
        },
    );
    true
}
