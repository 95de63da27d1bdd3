//! Restoring the own slot's idempotency keys after its disk was lost, from the peers that hold
//! copies of them ([`crate::peer::replication::PeerSink::holding_keys`]), page by page
//! (`GET /slots/{slot}/keys?from=N`).
//!
//! A retry of a write acknowledged before the loss must find its key, or be refused: so the
//! restore waits for one peer that has held every key of the slot since it started. With none
//! (no peer, or every peer restarted since), the keys that could be missing are those recorded
//! within the retention before the restore, and the slot refuses keys it does not hold until
//! they would have expired ([`crate::engine::idempotency::IdempotencyCache::unknown_until`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use geocount_model::IdempotencyRecord;
use geocount_model::wire::KeyCopy;
use tokio::task::JoinSet;

use crate::startup::restore::{CopySource, RestoreRequest};
use crate::startup::settle::LastPage;

/// The keys a restore found.
#[derive(Debug, Default)]
pub struct KeysRestored {
    /// Each key with its latest record.
    pub keys: Vec<(Box<str>, IdempotencyRecord)>,
    /// Whether one peer handed over every key of the slot.
    pub whole: bool,
}

/// What the peers' tasks share.
#[derive(Default)]
struct Gathered {
    keys: Mutex<HashMap<String, IdempotencyRecord>>,
    whole: AtomicBool,
    last_page: LastPage,
}

/// Gathers the slot's keys from `request.key_sources` until one hands over a whole copy, or
/// `request.settle` passes with no page from any of them.
pub async fn restore_keys(request: Arc<RestoreRequest>) -> KeysRestored {
    let gathered = Arc::new(Gathered::default());
    let mut asks = JoinSet::new();
    for source in request.key_sources.clone() {
        asks.spawn(keys_from(request.clone(), source, gathered.clone()));
    }
    let settled = gathered.last_page.settled(request.settle);
    tokio::pin!(settled);
    while !asks.is_empty() && !gathered.whole.load(Ordering::Acquire) {
        tokio::select! {
            _ = asks.join_next() => {}
            () = &mut settled => break,
        }
    }
    asks.abort_all();
    let keys = std::mem::take(&mut *gathered.keys.lock().expect("restored keys lock"));
    KeysRestored {
        keys: keys.into_iter().map(|(k, r)| (k.into(), r)).collect(),
        whole: gathered.whole.load(Ordering::Acquire),
    }
}

/// Asks `source` for its whole copy of the keys until it answers one pass; every page's keys
/// are kept whatever the pass's outcome (each records a real write).
async fn keys_from(request: Arc<RestoreRequest>, source: CopySource, gathered: Arc<Gathered>) {
    loop {
        match whole_key_copy(&request, &source, &gathered).await {
            Ok(true) => {
                tracing::info!(slot = %request.slot, source = %source.name, "received a whole copy of the slot's idempotency keys");
                gathered.whole.store(true, Ordering::Release);
                return;
            }
            // It started after the owner last held its keys: its copy cannot become whole
            // while the owner restores.
            Ok(false) => {
                tracing::info!(slot = %request.slot, source = %source.name, "its copy of the slot's idempotency keys is not whole");
                return;
            }
            Err(error) => tracing::debug!(source = %source.name, %error, "asking for keys failed"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// One pass over `source`'s copy; `Ok(complete)` once its last page came.
async fn whole_key_copy(
    request: &RestoreRequest,
    source: &CopySource,
    gathered: &Gathered,
) -> Result<bool, String> {
    let mut from = 0u64;
    let mut epoch = None;
    let mut complete = true;
    loop {
        let url = request.client.url(
            source.address,
            &format!("/slots/{}/keys?from={from}", request.slot),
        );
        let answer = request.client.get(&url).await.map_err(|e| e.to_string())?;
        if !answer.status.is_success() {
            return Err(format!(
                "answered {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            ));
        }
        let page: KeyCopy =
            postcard::from_bytes(&answer.body).map_err(|e| format!("undecodable keys: {e}"))?;
        if page.slot != request.slot {
            return Err(format!("answered slot {:?}", page.slot));
        }
        if *epoch.get_or_insert(page.source_epoch) != page.source_epoch {
            return Err("restarted while its keys were paged".into());
        }
        complete &= page.complete;
        gathered.last_page.received();
        merge(&gathered.keys, page.keys);
        match page.next {
            Some(next) if next > from => from = next,
            Some(_) => return Err("its pages do not advance".into()),
            None => return Ok(complete),
        }
    }
}

/// Keeps the latest record of each key.
fn merge(into: &Mutex<HashMap<String, IdempotencyRecord>>, keys: Vec<(String, IdempotencyRecord)>) {
    let mut held = into.lock().expect("restored keys lock");
    for (key, record) in keys {
        match held.get(&key) {
            Some(kept) if kept.created_at_ms >= record.created_at_ms => {}
            _ => {
                held.insert(key, record);
            }
        }
    }
}
