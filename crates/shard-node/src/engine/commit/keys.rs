//! Idempotency keys in a group: a write or change whose key was used before is answered as
//! it was the first time (or refused, 422, if the key was used for another), and a new key is
//! staged with the write's outcome, to be held once the group is durable.

use geocount_model::{IdempotencyRecord, SlotState};

use super::CommitLoop;
use super::group::Staged;
use crate::engine::idempotency::{KeyHash, asks_for, record_of};
use crate::engine::key_scope::unscoped;
use crate::engine::write::WriteRequest;
use crate::error::ShardError;

/// The refusal of a write or change whose key `key` was first used for `first`, another one.
/// Only a request of the same token can meet its key: the refusal shows its own.
pub(super) fn key_reused(key: &str, first: &IdempotencyRecord) -> ShardError {
    ShardError::IdempotencyKeyReused {
        key: unscoped(key).to_owned(),
        counter: first.counter.to_string(),
        write: first.describe_write(),
    }
}

impl CommitLoop {
    /// What key `key` (hashed `hash`) was first used for, in this group or before; `None` for a
    /// new key, refused (503) while keys the node may have lost could still be retried, and
    /// (507) past `shard.max_idempotency_keys`.
    pub(super) fn first_with_key(
        &self,
        staged: &Staged,
        hash: KeyHash,
        key: &str,
        now_ms: u64,
    ) -> Result<Option<IdempotencyRecord>, ShardError> {
        let keys = self.idempotency.read().expect("idempotency lock");
        let first = staged
            .idempotency
            .get(hash, key)
            .or_else(|| keys.get_hashed(hash, key));
        if let Some(first) = first {
            return Ok(Some(first.clone()));
        }
        if let Some(until) = keys.unknown_until(now_ms) {
            let retry_secs = until.saturating_sub(now_ms).div_ceil(1000);
            return Err(ShardError::KeysUnknown {
                retry_secs: u32::try_from(retry_secs).unwrap_or(u32::MAX),
            });
        }
        // A new key: held for the whole retention, so bounded.
        let limit = self.shared.settings.max_idempotency_keys;
        if keys.len() + staged.idempotency.len() >= limit {
            return Err(ShardError::IdempotencyKeyLimit { limit });
        }
        Ok(None)
    }

    /// The outcome of `write`'s first use of its key (hashed `hash`) if the write is a retry;
    /// `None` for a write without a key or with a new one.
    pub(super) fn replayed(
        &self,
        staged: &Staged,
        write: &WriteRequest,
        hash: Option<KeyHash>,
        now_ms: u64,
    ) -> Result<Option<SlotState>, ShardError> {
        let (Some(key), Some(hash)) = (&write.idempotency_key, hash) else {
            return Ok(None);
        };
        let Some(first) = self.first_with_key(staged, hash, key, now_ms)? else {
            return Ok(None);
        };
        if asks_for(&first, write.id.as_str(), &write.change) {
            self.shared.metrics.idempotent_replays.inc();
            return Ok(Some(first.outcome));
        }
        Err(key_reused(key, &first))
    }
}

/// Stages `write`'s key (hashed `hash`) with its outcome `next`, if it has one.
pub(super) fn remember_key(
    staged: &mut Staged,
    write: WriteRequest,
    hash: Option<KeyHash>,
    next: SlotState,
    now_ms: u64,
) {
    if let (Some(key), Some(hash)) = (write.idempotency_key, hash) {
        let record = record_of(&write.id, &write.change, next, now_ms);
        staged.idempotency.insert(hash, key, record);
    }
}
