//! Restoring the own slot's idempotency keys after its disk was lost, from the peers that hold
//! copies of them ([`crate::peer::pulls::PeerSink::holding_keys`]), page by page
//! (`GET /slots/{slot}/keys?from=N`).
//!
//! A retry of a write acknowledged before the loss must find its key, or be refused. Each
//! peer's copy says how far it reaches: the slot version up to which it holds every key
//! ([`crate::peer::keys`]). The restore waits for a copy that reaches the version it needs
//! (the newest it restored; in `replicated` durability no further than the peers' logs do not
//! reach, [`crate::startup::held_restore`]), or until no peer has handed over a page for
//! the settle. The copies together reach as far as the furthest of them; when that is short
//! (no peer, every peer lagging, or restarted since the owner last held its keys), the keys
//! that could be missing are those recorded within the retention before the restore, and the
//! slot refuses keys it does not hold until they would have expired
//! ([`crate::engine::idempotency::IdempotencyCache::unknown_until`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// The slot version up to which they are every key the slot recorded (0: none).
    pub reach: u64,
}

impl KeysRestored {
    /// Whether they hold the key of every write up to `version`.
    pub fn reach_past(&self, version: u64) -> bool {
        self.reach >= version
    }
}

/// What the peers' tasks share.
#[derive(Default)]
struct Gathered {
    keys: Mutex<HashMap<String, IdempotencyRecord>>,
    /// The furthest reach of the copies handed over whole.
    reach: AtomicU64,
    last_page: LastPage,
}

/// Gathers the slot's keys from `request.key_sources` until the copies reach `version` (what
/// the restore needs), every peer handed its copy over, or `request.settle` passes with no
/// page from any of them.
pub async fn restore_keys(request: Arc<RestoreRequest>, version: u64) -> KeysRestored {
    let gathered = Arc::new(Gathered::default());
    let mut asks = JoinSet::new();
    for source in request.key_sources.clone() {
        asks.spawn(keys_from(request.clone(), source, gathered.clone()));
    }
    let settled = gathered.last_page.settled(request.settle);
    tokio::pin!(settled);
    while !asks.is_empty() && gathered.reach.load(Ordering::Acquire) < version {
        tokio::select! {
            _ = asks.join_next() => {}
            () = &mut settled => break,
        }
    }
    asks.abort_all();
    let keys = std::mem::take(&mut *gathered.keys.lock().expect("restored keys lock"));
    KeysRestored {
        keys: keys.into_iter().map(|(k, r)| (k.into(), r)).collect(),
        reach: gathered.reach.load(Ordering::Acquire),
    }
}

/// Asks `source` for its whole copy of the keys until it answers one pass; every page's keys
/// are kept whatever the pass's outcome (each records a real write), and the pass's reach once
/// it is whole.
async fn keys_from(request: Arc<RestoreRequest>, source: CopySource, gathered: Arc<Gathered>) {
    loop {
        match whole_key_copy(&request, &source, &gathered).await {
            Ok(reach) => {
                tracing::info!(slot = %request.slot, source = %source.name, reach, "received a copy of the slot's idempotency keys");
                gathered.reach.fetch_max(reach, Ordering::AcqRel);
                return;
            }
            Err(error) => tracing::debug!(source = %source.name, %error, "asking for keys failed"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// One pass over `source`'s copy; `Ok(reach)` once its last page came: the lowest reach its
/// pages said (the copy cannot grow while its owner restores, but a page never promises more
/// than it said).
async fn whole_key_copy(
    request: &RestoreRequest,
    source: &CopySource,
    gathered: &Gathered,
) -> Result<u64, String> {
    let mut from = 0u64;
    let mut epoch = None;
    let mut reach = u64::MAX;
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
        reach = reach.min(page.reach);
        gathered.last_page.received();
        merge(&gathered.keys, page.keys);
        match page.next {
            Some(next) if next > from => from = next,
            Some(_) => return Err("its pages do not advance".into()),
            None => return Ok(reach),
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
