//! Checkpoint: once the log is big or old enough, the closed segments handed to the
//! [`Checkpointer`](crate::engine::checkpoint::Checkpointer), which writes what they hold
//! beyond the store while the loop goes on.

use super::CommitLoop;

/// How many times `checkpoint_log_bytes` the whole log, idempotency keys included, may reach
/// before a checkpoint. Keys do not count toward `checkpoint_log_bytes` itself: a restart
/// loads them as fast from the log as from the store, so they do not lengthen its replay the
/// way counters' changes do, and checkpointing every counter row again as often as keys fill
/// the log would cost a keyed write several times what its key does.
const LOG_BYTES_WITH_KEYS: u64 = 4;

impl CommitLoop {
    /// Starts a checkpoint if none runs and the log holds enough beyond the store, or has
    /// held it long enough.
    pub(super) fn checkpoint_if_due(&mut self, now_ms: u64) {
        if self.shared.checkpointer.is_busy() || self.pending.is_empty() {
            return;
        }
        let settings = &self.shared.settings;
        let big = log_is_big(
            self.wal.len(),
            self.wal.key_bytes(),
            settings.checkpoint_log_bytes,
        );
        let old = now_ms.saturating_sub(self.last_checkpoint_ms) >= settings.checkpoint_interval_ms;
        if big || old {
            self.start_checkpoint(now_ms);
        }
    }

    pub(super) fn start_checkpoint(&mut self, now_ms: u64) {
        match self.wal.rotate() {
            Ok(closed) => {
                let mut checkpoint = std::mem::take(&mut self.pending);
                checkpoint.through_segment = closed;
                self.shared.checkpointer.submit(checkpoint);
                self.last_checkpoint_ms = now_ms;
                self.last_sync_ms = now_ms;
            }
            Err(error) => {
                tracing::error!(%error, "cannot rotate the log for a checkpoint");
                self.fence_if_fsync_failed(&error);
            }
        }
    }
}

/// Whether a log of `len` bytes, `key_bytes` of them idempotency keys, is due a checkpoint
/// under `checkpoint_log_bytes`.
fn log_is_big(len: u64, key_bytes: u64, checkpoint_log_bytes: u64) -> bool {
    len - key_bytes >= checkpoint_log_bytes || len >= LOG_BYTES_WITH_KEYS * checkpoint_log_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_count_toward_the_log_size_only_past_four_times_it() {
        assert!(!log_is_big(1_000, 0, 2_000));
        assert!(log_is_big(2_000, 0, 2_000), "changes alone");
        assert!(!log_is_big(7_999, 7_000, 2_000), "mostly keys, under 4x");
        assert!(log_is_big(3_000, 900, 2_000), "the changes pass it");
        assert!(log_is_big(8_000, 7_999, 2_000), "keys: 4x");
    }
}
