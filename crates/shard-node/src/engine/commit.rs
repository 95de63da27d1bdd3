//! The commit loop: the one worker that changes the node's state, with group commit.
//!
//! HTTP handlers send [`Command`]s. The loop takes every command that is waiting (a group), works
//! out each write against the committed state (overflow checks, idempotency keys, new versions),
//! appends one [`LogRecord`] for the whole group, fsyncs it once, and only then installs the
//! result in the shared [`SlotTable`](crate::engine::slot_table::SlotTable) and answers. While it
//! fsyncs, the next group gathers in the queue, so one fsync serves many writers.
//!
//! One file per concept: [`stage`] works a group's writes out without changing anything,
//! [`install`] makes the group durable and puts its changes in place, and [`restore`] takes in
//! a lost slot's restored parts and keys.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use geocount_model::{
    Clock, CounterDescription, CounterId, Hlc, Placement, RightsAnswer, RollupChange,
    ShardDefaults, SlotRecord, VersionedDescription, next_slot_version,
};
use geocount_sync::{DescriptionTable, SlotCopies};
use tokio::sync::{mpsc, oneshot};

use crate::engine::budget::ByteBudget;
use crate::engine::checkpoint::Checkpointer;
use crate::engine::hot::HotCounters;
use crate::engine::idempotency::SharedKeys;
use crate::engine::replication::GroupReplication;
use crate::engine::slot_table::SharedSlotTable;
use crate::engine::store::Checkpoint;
use crate::engine::wal::{LogRecord, Wal};
use crate::engine::write::{Command, WriteResults};
use crate::error::{ShardError, StorageError};
use crate::health::NodeHealth;
use crate::metrics::ShardMetrics;

mod install;
mod lifecycle;
mod replicated;
mod replies;
mod restore;
mod rights;
mod stage;

use install::{GroupChanges, SlotChange};
use replicated::{AwaitingPeers, Waited};
use replies::{
    answer, refuse_all, refuse_client_command, refuse_fenced, refuse_unreplicated,
    refuse_waiting_for_peers,
};
use stage::Staged;

/// A group stops gathering at this many writes, bounding one log record's size.
const MAX_GROUP_WRITES: usize = 200_000;

enum Reply {
    Write(oneshot::Sender<WriteResults>, WriteResults),
    Create(
        oneshot::Sender<Result<CounterDescription, ShardError>>,
        Result<CounterDescription, ShardError>,
    ),
    Rights(
        oneshot::Sender<Result<RightsAnswer, ShardError>>,
        Result<RightsAnswer, ShardError>,
    ),
}

/// What the commit loop shares with the rest of the node.
pub struct CommitContext {
    /// The committed slot states (the loop is their only writer).
    pub table: SharedSlotTable,
    /// The known descriptions (the loop is their only writer).
    pub descriptions: Arc<RwLock<DescriptionTable>>,
    /// The copies of the peers' slots held here: a tombstone goes only once no copy of its
    /// counter is held either, or the copy would count again without it.
    pub peer_copies: Arc<RwLock<SlotCopies>>,
    /// Writes the closed log segments into the store.
    pub checkpointer: Checkpointer,
    /// Shard settings.
    pub settings: ShardDefaults,
    /// The time seam.
    pub clock: Arc<dyn Clock>,
    /// Versions of descriptions.
    pub hlc: Arc<Hlc>,
    /// Where counters go in this datacenter.
    pub placement: Placement,
    /// This node's slot index.
    pub own_slot: u32,
    /// Writes per second applied lately, reported to peers.
    pub load: Arc<AtomicU64>,
    /// Metrics.
    pub metrics: Arc<ShardMetrics>,
    /// Health, for `/healthz`.
    pub health: Arc<NodeHealth>,
    /// How long a deleted counter's tombstone is kept (`sync.tombstone_retention_secs`).
    pub tombstone_retention_ms: u64,
    /// Where this node's datacenter is among the topology's, for bounded counters' shares.
    pub rights: RightsPlace,
}

/// This node's datacenter's place in the topology: its share of a bounded counter's room is
/// the `index`th of `datacenters`.
#[derive(Debug, Clone, Copy)]
pub struct RightsPlace {
    /// Its index in the topology's `datacenters`.
    pub index: usize,
    /// How many datacenters the topology has.
    pub datacenters: usize,
}

/// What the commit loop resumes from: what startup read of the log and the store.
#[derive(Debug)]
pub struct LogState {
    /// A fresh log segment after the replayed ones.
    pub wal: Wal,
    /// Idempotency keys still within retention.
    pub idempotency: SharedKeys,
    /// What the log holds beyond the store: the next checkpoint must write it.
    pub pending: Checkpoint,
    /// The highest version of the slot so far.
    pub last_version: u64,
}

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
    replicator: Option<Box<dyn GroupReplication>>,
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
            replicator: None,
            doomed,
            last_purge_ms: 0,
            shared,
        }
    }

    /// Answers each group's writes only once a peer holds it too (`replicated` durability).
    pub(crate) fn replicating_through(mut self, replicator: Box<dyn GroupReplication>) -> Self {
        self.replicator = Some(replicator);
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

    /// Stages, logs and installs a group, and answers its writes; in `replicated` durability
    /// what is logged waits for a peer to hold it (returned), installed and answered then.
    fn commit_group(&mut self, mut group: Vec<Command>) -> Option<AwaitingPeers> {
        if let Some(reason) = &self.fenced {
            refuse_fenced(group, reason, &self.shared.metrics);
            return None;
        }
        // A restored part is its own record: no write is taken while the slot is restored.
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
        if let Some(reason) = self.replicator.as_ref().and_then(|r| r.refusal()) {
            group = refuse_waiting_for_peers(group, &reason, &self.shared.metrics);
        }
        let now_ms = self.shared.clock.now_unix_ms();
        // Every change of the group shares one version: versions then follow the clock however
        // many writes a millisecond brings, and a copy's version can be bounded by the clock.
        self.group_version = next_slot_version(self.last_version, now_ms);
        {
            let mut keys = self.idempotency.write().expect("idempotency lock");
            if keys.expire(now_ms) > 0 {
                self.pending.idempotency_expired_before_ms = keys.expired_before(now_ms);
                (self.shared.metrics.idempotency_keys).set(keys.len() as i64);
            }
        }

        let mut staged = Staged {
            now_ms,
            ..Staged::default()
        };
        let mut replies = Vec::with_capacity(group.len());
        let mut writes = 0u64;
        // Kept until the group is durable, to be staged again if it is refused.
        let mut learned = std::mem::take(&mut self.learned_unlogged);
        {
            let table = Arc::clone(&self.shared.table);
            let table = table.read().expect("slot table lock");
            let descriptions = Arc::clone(&self.shared.descriptions);
            let descriptions = descriptions.read().expect("descriptions lock");
            for description in &learned {
                self.stage_learned(&table, &descriptions, &mut staged, description.clone());
            }
            // An expiry that passed is the delete every node makes alike: logged here, it
            // wipes this slot's record and travels as a tombstone.
            for tombstone in descriptions.due_expiries(now_ms) {
                self.stage_learned(&table, &descriptions, &mut staged, tombstone);
            }
            for command in group {
                match command {
                    Command::Write {
                        writes: requests,
                        reply,
                    } => {
                        writes += requests.len() as u64;
                        let results = requests
                            .into_iter()
                            .map(|w| {
                                self.stage_write(&table, &descriptions, &mut staged, w, now_ms)
                            })
                            .collect();
                        replies.push(Reply::Write(reply, results));
                    }
                    Command::Create { description, reply } => {
                        let result =
                            self.stage_create(&table, &descriptions, &mut staged, description);
                        replies.push(Reply::Create(reply, result));
                    }
                    Command::Lifecycle {
                        id,
                        change,
                        elsewhere,
                        key,
                        reply,
                    } => {
                        let result = match key {
                            Some((key, asked)) => self.stage_keyed_lifecycle(
                                (&table, &descriptions),
                                &mut staged,
                                (&id, elsewhere),
                                change,
                                (key, asked),
                            ),
                            None => self.stage_lifecycle(
                                (&table, &descriptions),
                                &mut staged,
                                &id,
                                change,
                                elsewhere,
                            ),
                        };
                        replies.push(Reply::Create(reply, result));
                    }
                    Command::Rights { id, request, reply } => {
                        let result =
                            self.stage_rights(&table, &descriptions, &mut staged, &id, request);
                        replies.push(Reply::Rights(reply, result));
                    }
                    Command::Describe(newly_learned) => {
                        for description in newly_learned {
                            self.shared.hlc.observe(description.version);
                            learned.push(description.clone());
                            self.stage_learned(&table, &descriptions, &mut staged, description);
                        }
                    }
                    Command::Tick
                    | Command::Shutdown
                    | Command::Restore { .. }
                    | Command::RestoreKeys { .. } => {}
                }
            }
            for (id, slot) in &staged.slots {
                if slot.writes > 0 {
                    self.hot.count(id, slot.writes);
                }
            }
            self.propose_shard_changes(now_ms, &table, &descriptions, &mut staged);
        }
        if writes > 0 {
            self.shared
                .metrics
                .group_commit_writes
                .observe(writes as f64);
        }

        // The log gets each changed counter's state, sketch and changed window buckets; the
        // table's rows are changed in place once the record is durable.
        let mut changes = Vec::with_capacity(staged.slots.len());
        let mut logged = Vec::with_capacity(staged.slots.len());
        for (id, slot) in staged.slots {
            if !slot.changed {
                continue;
            }
            let mut change = match slot.sketch {
                Some(sketch) => SlotRecord::unique(slot.state, sketch),
                None => {
                    let mut change = SlotRecord::sum(slot.state, slot.window.changed());
                    change.set_history(slot.history.iter().map(RollupChange::logged).collect());
                    change
                }
            };
            change.set_generation(slot.generation);
            if let Some(rights) = slot.rights {
                change.set_rights(rights);
            }
            logged.push((id, change));
            changes.push(SlotChange {
                row: slot.row,
                committed_bytes: slot.committed_bytes,
                window: slot.window,
                window_seconds: slot.window_seconds,
                history: slot.history,
            });
        }
        let (keys, key_hashes) = staged.idempotency.into_parts();
        let record = LogRecord {
            slots: logged,
            descriptions: staged.descriptions,
            idempotency: keys,
        };
        let mut changes = GroupChanges {
            slots: changes,
            key_hashes,
            encoded_keys: Vec::new(),
        };
        let durable = self.make_durable(&record);
        if durable.is_ok() && !record.idempotency.is_empty() {
            changes.encoded_keys = self.wal.last_keys().to_vec();
        }
        match durable {
            Ok(()) if self.replicator.is_some() && (!record.is_empty() || !replies.is_empty()) => {
                return Some(self.replicate(changes, record, replies, now_ms));
            }
            Ok(()) => {
                self.install(changes, record, now_ms);
                answer(replies, &self.shared.metrics);
            }
            Err(error) => {
                tracing::error!(%error, "group commit failed; its writes are refused");
                self.shared.health.set(Some(error.to_string()));
                let full = i64::from(error.is_disk_full());
                self.shared.metrics.storage_full.set(full);
                let error = Arc::new(error);
                refuse_all(replies, &error, &self.shared.metrics);
                self.learned_unlogged = learned;
                self.fence_if_fsync_failed(&error);
            }
        }
        None
    }

    /// After a failed fsync the log's state on disk is unknown (the kernel may have dropped
    /// the pages it could not write and will not report it again), so the node stops taking
    /// writes: every later write is 503 and `/healthz` says why, until a restart replays the
    /// log from what the disk really holds. A full disk on append is not this: the record is
    /// cut off and the next group may succeed.
    fn fence_if_fsync_failed(&mut self, error: &StorageError) {
        if self.fenced.is_some() || !self.wal.fsync_failed() {
            return;
        }
        let reason = format!(
            "the log could not be fsynced ({error}); this node takes no more writes until it is restarted"
        );
        tracing::error!("{reason}");
        self.shared.health.set(Some(reason.clone()));
        self.shared.metrics.fsync_failed.set(1);
        self.fenced = Some(reason);
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

/// Whether counter `id`'s row here belongs to a deleted or expired counter, and to a generation
/// the delete wiped: it holds nothing any read counts, and goes.
pub(crate) fn gone(
    descriptions: &DescriptionTable,
    id: &str,
    record: &SlotRecord,
    now_ms: u64,
) -> bool {
    descriptions.get(id).is_some_and(|described| {
        !described.is_live(now_ms) && record.wiped_by(described.generation_at(now_ms))
    })
}

#[cfg(test)]
mod tests;
