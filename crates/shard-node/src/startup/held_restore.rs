//! In `replicated` durability, the restore of a lost disk also reads every peer's log of the
//! slot's replicated groups (`GET /slots/{slot}/replica`, [`crate::peer::held_log`]): each
//! group the slot acknowledged is in at least one of them, values and keys together. So the
//! restore waits for every peer's, however long, as it waits for a complete copy.
//!
//! A group is shown to the slot's copies only once a peer holds it ([`crate::engine::commit`],
//! and a restarted node's log before it is pulled), so the logs hold the key of every write a
//! copy shows, save those of groups made before the owner's latest `since_version` (by a
//! process that may not have replicated) and those a peer held before its data directory
//! replaced a lost one: the peers' key copies need reach only that far
//! ([`HeldRestored::keys_needed_through`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use geocount_model::wire::HeldCopy;
use geocount_model::{
    CounterId, IdempotencyRecord, SlotId, SlotRecord, VersionedDescription, max_slot_version,
};
use geocount_sync::ClockFence;
use tokio::task::JoinSet;

use crate::startup::key_restore::KeysRestored;
use crate::startup::restore::{CopySource, RestoreRequest};

/// How long to wait before asking a peer again.
const ASK_AGAIN: Duration = Duration::from_millis(500);

/// How often the log says which peer the restore still waits for.
const REPORT_EVERY: Duration = Duration::from_secs(5);

/// What the peers' logs held of the slot, merged.
#[derive(Debug, Default)]
pub struct HeldRestored {
    /// Each counter's latest record.
    pub records: HashMap<CounterId, SlotRecord>,
    /// The counters the slot created.
    pub descriptions: Vec<VersionedDescription>,
    /// Each key with its latest record.
    pub keys: HashMap<String, IdempotencyRecord>,
    /// How far the logs hold every group some copy shows; `None` when no peer holds a log.
    pub logs_hold: Option<LogsHold>,
}

/// How far the peers' logs together hold every group of the slot some copy shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogsHold {
    /// From this slot version on, the owner showed only groups a peer held.
    pub owner_since: u64,
    /// After this slot version every peer holds every group it took.
    pub peers_hold_after: u64,
}

/// Reads the log of the slot of `request` from every peer shard node among
/// `request.key_sources`, each asked until it answers.
pub async fn restore_from_held(request: Arc<RestoreRequest>) -> HeldRestored {
    let mut asks = JoinSet::new();
    let peers = (request.key_sources.iter()).filter(|s| s.name.parse::<SlotId>().is_ok());
    for source in peers.cloned() {
        asks.spawn(held_copy_from(request.clone(), source));
    }
    let mut restored = HeldRestored::default();
    let (mut owner_since, mut peers_hold_after) = (None, 0);
    while let Some(done) = asks.join_next().await {
        match done {
            Ok(copy) => {
                owner_since = owner_since.max(copy.owner_since);
                peers_hold_after = peers_hold_after.max(copy.holds_after);
                restored.merge(&request, copy);
            }
            Err(error) => {
                // Its log unread, the others prove nothing of the groups only it holds.
                tracing::error!(%error, "a peer's held-log fetch failed");
                peers_hold_after = u64::MAX;
            }
        }
    }
    restored.logs_hold = owner_since.map(|owner_since| LogsHold {
        owner_since,
        peers_hold_after,
    });
    restored
}

/// Asks `source` for its log of the slot until it answers one.
async fn held_copy_from(request: Arc<RestoreRequest>, source: CopySource) -> HeldCopy {
    let url = (request.client).url(source.address, &format!("/slots/{}/replica", request.slot));
    let mut reported = tokio::time::Instant::now();
    loop {
        let error = match request.client.get(&url).await {
            Ok(answer) if answer.status.is_success() => {
                match postcard::from_bytes::<HeldCopy>(&answer.body) {
                    Ok(copy) if copy.slot == request.slot => {
                        tracing::info!(slot = %request.slot, source = %source.name, counters = copy.entries.len(), keys = copy.keys.len(), "read a peer's log of the slot's replicated writes");
                        return copy;
                    }
                    Ok(copy) => format!("answered slot {:?}", copy.slot),
                    Err(e) => format!("undecodable held copy: {e}"),
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

impl HeldRestored {
    /// The slot version the peers' key copies must reach for the keys to be those of every
    /// write up to `newest` (the newest restored version) at `now_ms`: `newest` without the
    /// logs; with them, only as far as they do not hold (before the owner's `since_version`,
    /// and up to what a peer whose data directory replaced a lost one may have lost), and not
    /// at all where those versions were made before `retention_ms` (`skew_ms` more: the
    /// owner's clock may have run ahead), their keys expired.
    pub fn keys_needed_through(
        &self,
        newest: u64,
        now_ms: u64,
        skew_ms: u64,
        retention_ms: u64,
    ) -> u64 {
        let Some(hold) = self.logs_hold else {
            return newest;
        };
        let expired_before_ms = now_ms.saturating_sub(retention_ms);
        let expired = |made_ms: u64| made_ms.saturating_add(skew_ms) <= expired_before_ms;
        let owner = match hold.owner_since {
            since if expired(since >> 10) => 0,
            since => since,
        };
        let peers = match hold.peers_hold_after {
            after if expired(after >> 10) => 0,
            after => after,
        };
        newest.min(owner.max(peers))
    }

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

    /// Merges one peer's log by version; records, keys and descriptions no clock made are
    /// refused.
    fn merge(&mut self, request: &RestoreRequest, copy: HeldCopy) {
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
        let fence = ClockFence::new(now_ms, request.max_clock_skew_ms);
        for description in copy.descriptions {
            match fence.admit(&description) {
                Ok(()) => self.descriptions.push(description),
                Err(_) => refused += 1,
            }
        }
        if refused > 0 {
            tracing::warn!(slot = %request.slot, refused, "refused replicated records, keys or descriptions: invalid ids, or versions beyond the clock");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(owner_since: u64, peers_hold_after: u64) -> HeldRestored {
        HeldRestored {
            logs_hold: Some(LogsHold {
                owner_since,
                peers_hold_after,
            }),
            ..HeldRestored::default()
        }
    }

    /// The key copies must reach the newest restored version without the logs; with them,
    /// the owner's latest `since_version` and what a replaced peer may have lost, and nothing
    /// once those versions are past the retention.
    #[test]
    fn the_key_copies_must_reach_as_far_as_the_logs_do_not() {
        let (now, skew, retention) = (1_000_000, 100, 600_000);
        let needed = |r: &HeldRestored, newest| r.keys_needed_through(newest, now, skew, retention);
        let newest = max_slot_version(now, 0);
        assert_eq!(needed(&HeldRestored::default(), newest), newest);
        assert_eq!(
            needed(&held(0, 0), newest),
            0,
            "a new slot, peers that lost nothing"
        );
        let restarted = max_slot_version(now - 5_000, 0);
        assert_eq!(needed(&held(restarted, 0), newest), restarted);
        let replaced = max_slot_version(now - 3_000, 0);
        assert_eq!(needed(&held(restarted, replaced), newest), replaced);
        assert_eq!(
            needed(&held(restarted, replaced), 7),
            7,
            "never past the newest"
        );
        let long_ago = max_slot_version(now - retention - skew, 0);
        assert_eq!(needed(&held(long_ago, long_ago), newest), 0, "keys expired");
        assert_eq!(
            needed(&held(0, u64::MAX), newest),
            newest,
            "a log unread or lost"
        );
    }
}
