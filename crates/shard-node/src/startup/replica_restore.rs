//! In `replicated` durability, the restore of a lost disk also reads every peer's log of the
//! slot's replicated groups (`GET /slots/{slot}/replica`, [`crate::peer::replica_log`]): each
//! group the slot acknowledged is in at least one of them, values and keys together. So the
//! restore waits for every peer's, however long, as it waits for a complete copy.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use geocount_model::wire::ReplicaCopy;
use geocount_model::{
    CounterId, IdempotencyRecord, SlotId, SlotRecord, VersionedDescription, max_slot_version,
};
use tokio::task::JoinSet;

use crate::startup::key_restore::KeysRestored;
use crate::startup::restore::{CopySource, RestoreRequest};

/// How long to wait before asking a peer again.
const ASK_AGAIN: Duration = Duration::from_millis(500);

/// How often the log says which peer the restore still waits for.
const REPORT_EVERY: Duration = Duration::from_secs(5);

/// What the peers' logs held of the slot, merged.
#[derive(Debug, Default)]
pub struct ReplicasRestored {
    /// Each counter's latest record.
    pub records: HashMap<CounterId, SlotRecord>,
    /// The counters the slot created.
    pub descriptions: Vec<VersionedDescription>,
    /// Each key with its latest record.
    pub keys: HashMap<String, IdempotencyRecord>,
}

/// Reads the log of the slot of `request` from every peer shard node among
/// `request.key_sources`, each asked until it answers.
pub async fn restore_from_replicas(request: Arc<RestoreRequest>) -> ReplicasRestored {
    let mut asks = JoinSet::new();
    let peers = (request.key_sources.iter()).filter(|s| s.name.parse::<SlotId>().is_ok());
    for source in peers.cloned() {
        asks.spawn(replica_from(request.clone(), source));
    }
    let mut restored = ReplicasRestored::default();
    while let Some(done) = asks.join_next().await {
        match done {
            Ok(copy) => restored.merge(&request, copy),
            Err(error) => tracing::error!(%error, "a peer's replica task failed"),
        }
    }
    restored
}

/// Asks `source` for its log of the slot until it answers one.
async fn replica_from(request: Arc<RestoreRequest>, source: CopySource) -> ReplicaCopy {
    let url = (request.client).url(source.address, &format!("/slots/{}/replica", request.slot));
    let mut reported = tokio::time::Instant::now();
    loop {
        let error = match request.client.get(&url).await {
            Ok(answer) if answer.status.is_success() => {
                match postcard::from_bytes::<ReplicaCopy>(&answer.body) {
                    Ok(copy) if copy.slot == request.slot => {
                        tracing::info!(slot = %request.slot, source = %source.name, counters = copy.entries.len(), keys = copy.keys.len(), "read a peer's log of the slot's replicated writes");
                        return copy;
                    }
                    Ok(copy) => format!("answered slot {:?}", copy.slot),
                    Err(e) => format!("undecodable replica: {e}"),
                }
            }
            Ok(answer) => format!(
                "answered {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            ),
            Err(error) => error.to_string(),
        };
        if reported.elapsed() >= REPORT_EVERY {
            tracing::warn!(slot = %request.slot, source = %source.name, %error, "restoring: waiting for this peer's log of the slot's replicated writes (an acknowledged write may be only there)");
            reported = tokio::time::Instant::now();
        }
        tokio::time::sleep(ASK_AGAIN).await;
    }
}

impl ReplicasRestored {
    /// Adds the keys the peers' logs held to those `keys` holds, keeping each key's latest.
    pub fn add_keys_to(self, keys: &mut KeysRestored) {
        if self.keys.is_empty() {
            return;
        }
        let mut merged: HashMap<Box<str>, IdempotencyRecord> =
            std::mem::take(&mut keys.keys).into_iter().collect();
        for (key, entry) in self.keys {
            match merged.get(key.as_str()) {
                Some(kept) if kept.created_at_ms >= entry.created_at_ms => {}
                _ => {
                    merged.insert(key.into(), entry);
                }
            }
        }
        keys.keys = merged.into_iter().collect();
    }

    /// Merges one peer's log by version; records and keys no clock made are refused.
    fn merge(&mut self, request: &RestoreRequest, copy: ReplicaCopy) {
        let now_ms = request.clock.now_unix_ms();
        let max_version = max_slot_version(now_ms, request.max_clock_skew_ms);
        let mut refused = 0;
        for (id, record) in copy.entries {
            match CounterId::new(id) {
                Ok(id) if record.state.version <= max_version => {
                    self.records.entry(id).or_default().merge(&record);
                }
                _ => refused += 1,
            }
        }
        for (key, entry) in copy.keys {
            if entry.created_at_ms > now_ms + request.max_clock_skew_ms {
                refused += 1;
                continue;
            }
            match self.keys.get(&key) {
                Some(kept) if kept.created_at_ms >= entry.created_at_ms => {}
                _ => {
                    self.keys.insert(key, entry);
                }
            }
        }
        self.descriptions.extend(copy.descriptions);
        if refused > 0 {
            tracing::warn!(slot = %request.slot, refused, "refused replicated records: invalid ids, or versions beyond the clock");
        }
    }
}
