//! The commit loop: the one worker that changes the node's state, with group commit.
//!
//! HTTP handlers send [`Command`]s. The loop takes every command that is waiting (a group) and
//! commits it in named stages: [`stage`] works each write out against the committed state
//! without changing it, [`log`] appends one [`LogRecord`] for the whole group and fsyncs it
//! once, [`replicated`] (in `replicated` durability) waits for a peer to hold it, [`install`]
//! puts its changes in the shared [`SlotTable`](crate::engine::slot_table::SlotTable), and
//! [`replies`] answers. While it fsyncs, the next group gathers in the queue, so one fsync
//! serves many writers. Between groups, [`checkpoint`] writes the log into the store and
//! [`tombstones`] drops what deleted counters leave.
//!
//! The rest of the folder: [`context`] (what the loop is built from), [`group`] (the staged
//! group and its record), the concerns a write is staged by ([`keys`], [`sum`], [`unique`],
//! [`rights`], [`lifecycle`]), and [`restore`] (a lost slot's restored parts and keys).
//!
//! [`LogRecord`]: crate::engine::wal::LogRecord

use geocount_model::{CounterId, VersionedDescription, next_slot_version};
use tokio::sync::{mpsc, oneshot};

use crate::engine::budget::ByteBudget;
use crate::engine::held::HeldGroups;
use crate::engine::hot::HotCounters;
use crate::engine::idempotency::SharedKeys;
use crate::engine::store::Checkpoint;
use crate::engine::wal::Wal;
use crate::engine::write::Command;

mod checkpoint;
mod context;
mod group;
mod install;
mod keys;
mod lifecycle;
mod log;
mod replicated;
mod replies;
mod restore;
mod rights;
mod stage;
mod sum;
mod tombstones;
mod unique;

pub use context::{CommitContext, LogState, RightsPlace};
use replicated::{AwaitingPeers, Waited};
use replies::{answer, refuse_fenced, refuse_waiting_for_peers};
use tombstones::gone;

/// A group stops gathering at this many writes, bounding one log record's size.
const MAX_GROUP_WRITES: usize = 200_000;

/// The state only the commit loop touches.
pub struct CommitLoop {
    shared: CommitContext,
    wal: Wal,
    /// Shared with the sync handler, which pages the keys to the slot's peers.
    idempotency: SharedKeys,
    last_version: u64,
    /// The version of the group being staged.
    group_version: u64,
    pending: Checkpoint,
    hot: HotCounters,
    last_sync_ms: u64,
    last_checkpoint_ms: u64,
    /// Bytes of state held, against `shard.max_counter_bytes` and `shard.max_state_bytes`.
    budget: ByteBudget,
    /// Set once an fsync failed: the node takes no more writes until it restarts.
    fenced: Option<String>,
    /// Descriptions learned from other nodes whose group could not be logged (a full disk):
    /// staged again with the next group, since the puller that delivered them has moved on.
    learned_unlogged: Vec<VersionedDescription>,
    /// In `replicated` durability: where each durable group goes before its writes are
    /// answered.
    held_sender: Option<Box<dyn HeldGroups>>,
    /// Deleted counters whose rows go once no checkpoint is running (a running one names the
    /// rows it writes by index).
    doomed: Vec<CounterId>,
    /// When tombstones past their retention were last looked for.
    last_purge_ms: u64,
}

impl CommitLoop {
    /// The loop resuming from `log`; `shared.table` holds the state recovered with it.
    pub fn new(log: LogState, shared: CommitContext) -> Self {
        let now = shared.clock.now_unix_ms();
        let hot = HotCounters::new(
            shared.settings.hot_writes_per_slot,
            shared.settings.default_number_of_shards,
            now,
        );
        let budget = {
            let table = shared.table.read().expect("slot table lock");
            let descriptions = shared.descriptions.read().expect("descriptions lock");
            ByteBudget::recovered(&table, &descriptions, &shared.settings)
        };
        shared.metrics.state_bytes.set(budget.held() as i64);
        let keys = log.idempotency.read().expect("idempotency lock").len();
        shared.metrics.idempotency_keys.set(keys as i64);
        // Rows of counters deleted before the last stop, in the store or the log.
        let doomed = {
            let table = shared.table.read().expect("slot table lock");
            let descriptions = shared.descriptions.read().expect("descriptions lock");
            table
                .iter()
                .filter(|(id, record)| gone(&descriptions, id, record, now))
                .map(|(id, _)| CounterId::new(id).expect("a held id is valid"))
                .collect()
        };
        Self {
            budget,
            wal: log.wal,
            idempotency: log.idempotency,
            last_version: log.last_version,
            group_version: log.last_version,
            pending: log.pending,
            hot,
            last_sync_ms: now,
            last_checkpoint_ms: now,
            fenced: None,
            learned_unlogged: Vec::new(),
            held_sender: None,
            doomed,
            last_purge_ms: 0,
            shared,
        }
    }

    /// Answers each group's writes only once a peer holds it too (`replicated` durability).
    pub(crate) fn holding_through(mut self, held_sender: Box<dyn HeldGroups>) -> Self {
        self.held_sender = Some(held_sender);
        self
    }

    /// Runs until a [`Command::Shutdown`] arrives or every sender is gone, then flushes.
    ///
    /// It waits only for commands: the file calls of a group block, so in production it runs
    /// on a thread of its own ([`Storage::spawn`](crate::storage::Storage::spawn)).
    pub async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let mut stopping = false;
        while !stopping {
            let Some(first) = commands.recv().await else {
                break;
            };
            let group = gather(first, &mut commands);
            stopping = group.iter().any(|c| matches!(c, Command::Shutdown));
            let waited = match self.commit_group(group) {
                Some(awaiting) => (self.install_when_held(awaiting, &mut commands, stopping)).await,
                None => Waited::Installed,
            };
            if let Waited::Unheld = waited {
                // A group in the log and not in the table: a checkpoint now would drop it from
                // the disk. The next start sends it to the peers again.
                self.stop(false).await;
                return;
            }
            let now_ms = self.shared.clock.now_unix_ms();
            self.flush_if_due(now_ms);
            self.drop_gone_rows(now_ms);
            self.purge_tombstones_if_due(now_ms);
            self.checkpoint_if_due(now_ms);
        }
        self.stop(true).await;
    }

    /// Commits a group: stage, log, then install and answer; in `replicated` durability what
    /// is logged waits for a peer to hold it (returned), installed and answered then.
    fn commit_group(&mut self, mut group: Vec<Command>) -> Option<AwaitingPeers> {
        if let Some(reason) = &self.fenced {
            refuse_fenced(group, reason, &self.shared.metrics);
            return None;
        }
        self.restore_apart(&mut group);
        if let Some(reason) = self.held_sender.as_ref().and_then(|r| r.refusal()) {
            group = refuse_waiting_for_peers(group, &reason, &self.shared.metrics);
        }
        let now_ms = self.shared.clock.now_unix_ms();
        self.begin_group(now_ms);
        let staged = self.stage_group(group, now_ms);
        let replies = staged.replies;
        match self.log(staged.staged) {
            Ok((record, changes))
                if self.held_sender.is_some() && (!record.is_empty() || !replies.is_empty()) =>
            {
                Some(self.replicate(changes, record, replies, now_ms))
            }
            Ok((record, changes)) => {
                self.install(changes, record, now_ms);
                answer(replies, &self.shared.metrics);
                None
            }
            Err(error) => {
                self.refuse_unlogged(error, replies, staged.learned);
                None
            }
        }
    }

    /// Takes the group's restored parts and keys out of it, each logged as its own record: no
    /// write is taken while the slot is restored.
    fn restore_apart(&mut self, group: &mut Vec<Command>) {
        group.retain_mut(|command| match command {
            Command::Restore { records, reply } => {
                let records = std::mem::take(records);
                let (done, _) = oneshot::channel();
                let reply = std::mem::replace(reply, done);
                let _ = reply.send(self.restore(records));
                false
            }
            Command::RestoreKeys {
                keys,
                unknown_until_ms,
                reply,
            } => {
                let keys = std::mem::take(keys);
                let (done, _) = oneshot::channel();
                let reply = std::mem::replace(reply, done);
                let _ = reply.send(self.restore_keys(keys, *unknown_until_ms));
                false
            }
            _ => true,
        });
    }

    /// Opens a group at `now_ms`: its version, and the keys past their retention let go.
    fn begin_group(&mut self, now_ms: u64) {
        // Every change of the group shares one version: versions then follow the clock however
        // many writes a millisecond brings, and a copy's version can be bounded by the clock.
        self.group_version = next_slot_version(self.last_version, now_ms);
        let mut keys = self.idempotency.write().expect("idempotency lock");
        if keys.expire(now_ms) > 0 {
            self.pending.idempotency_expired_before_ms = keys.expired_before(now_ms);
            (self.shared.metrics.idempotency_keys).set(keys.len() as i64);
        }
    }

    /// Flushes the log and, with `checkpoint`, checkpoints what it holds beyond the store.
    async fn stop(mut self, checkpoint: bool) {
        if let Err(error) = self.wal.sync() {
            tracing::error!(%error, "final flush failed");
        }
        if checkpoint && !self.pending.is_empty() {
            let now_ms = self.shared.clock.now_unix_ms();
            self.start_checkpoint(now_ms);
        }
        self.shared.checkpointer.finish().await;
    }
}

/// Gather: `first` and every command waiting behind it, up to [`MAX_GROUP_WRITES`] writes.
fn gather(first: Command, commands: &mut mpsc::Receiver<Command>) -> Vec<Command> {
    let mut gathered = first.writes();
    let mut group = vec![first];
    while gathered < MAX_GROUP_WRITES {
        match commands.try_recv() {
            Ok(command) => {
                gathered += command.writes();
                group.push(command);
            }
            Err(_) => break,
        }
    }
    group
}

#[cfg(test)]
mod tests;
