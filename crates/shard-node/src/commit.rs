//! The commit loop: the one thread that changes the node's state, with group commit.
//!
//! HTTP handlers send [`Command`]s. The loop takes every command that is waiting (a group), works
//! out each write against the committed state (overflow checks, idempotency keys, new versions),
//! appends one [`LogRecord`] for the whole group, fsyncs it once, and only then installs the
//! result in the shared [`SlotTable`](crate::slot_table::SlotTable) and answers. While it
//! fsyncs, the next group gathers in the queue, so one fsync serves many writers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use geocount_model::{Clock, CounterDescription, CounterId, Durability, ShardDefaults, SlotState};
use tokio::sync::{mpsc, oneshot};

use crate::checkpoint::Checkpointer;
use crate::error::{ShardError, StorageError};
use crate::idempotency::{IdempotencyCache, IdempotencyRecord};
use crate::metrics::ShardMetrics;
use crate::recovery::LogState;
use crate::slot_table::{SharedSlotTable, SlotTable};
use crate::store::Checkpoint;
use crate::wal::{LogRecord, Wal};

/// A group stops gathering at this many writes, bounding one log record's size.
const MAX_GROUP_WRITES: usize = 200_000;

/// One write asked of the node.
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// The counter.
    pub id: CounterId,
    /// The signed change.
    pub delta: i64,
    /// Deduplicates retries of this write.
    pub idempotency_key: Option<Box<str>>,
    /// When the hit happened, in unix seconds (kept for rolling windows).
    pub timestamp_secs: u64,
}

/// The answer to each write of a [`Command::Write`], in order.
pub type WriteResults = Vec<Result<SlotState, ShardError>>;

/// What handlers ask of the commit loop.
#[derive(Debug)]
pub enum Command {
    /// Apply writes; answered once they are durable (or refused).
    Write {
        /// The writes, applied in order.
        writes: Vec<WriteRequest>,
        /// Where the results go.
        reply: oneshot::Sender<WriteResults>,
    },
    /// Create a counter with this description.
    Create {
        /// The new counter.
        description: CounterDescription,
        /// Where the result goes.
        reply: oneshot::Sender<Result<CounterDescription, ShardError>>,
    },
    /// Periodic: flush in async mode, expire idempotency keys, start due checkpoints.
    Tick,
    /// Flush, checkpoint, and stop.
    Shutdown,
}

impl Command {
    fn writes(&self) -> usize {
        match self {
            Command::Write { writes, .. } => writes.len(),
            _ => 1,
        }
    }
}

/// The node's health as the commit loop sees it, for `GET /healthz`.
#[derive(Debug, Default)]
pub struct NodeHealth {
    storage_error: Mutex<Option<String>>,
}

impl NodeHealth {
    /// The last storage failure, if the latest commit failed.
    pub fn storage_error(&self) -> Option<String> {
        self.storage_error.lock().expect("health lock").clone()
    }

    fn set(&self, error: Option<String>) {
        *self.storage_error.lock().expect("health lock") = error;
    }
}

/// The changes a group makes, before they are durable.
#[derive(Default)]
struct Staged {
    slots: HashMap<Box<str>, SlotState>,
    descriptions: Vec<CounterDescription>,
    idempotency: HashMap<Box<str>, IdempotencyRecord>,
}

enum Reply {
    Write(oneshot::Sender<WriteResults>, WriteResults),
    Create(
        oneshot::Sender<Result<CounterDescription, ShardError>>,
        Result<CounterDescription, ShardError>,
    ),
}

/// The state only the commit loop touches.
pub struct CommitLoop {
    table: SharedSlotTable,
    wal: Wal,
    idempotency: IdempotencyCache,
    next_version: u64,
    pending: Checkpoint,
    checkpointer: Checkpointer,
    settings: ShardDefaults,
    clock: Arc<dyn Clock>,
    metrics: Arc<ShardMetrics>,
    health: Arc<NodeHealth>,
    last_sync_ms: u64,
    last_checkpoint_ms: u64,
}

impl CommitLoop {
    /// The loop resuming from `log`; `table` holds the state recovered with it.
    pub fn new(
        log: LogState,
        table: SharedSlotTable,
        checkpointer: Checkpointer,
        settings: ShardDefaults,
        clock: Arc<dyn Clock>,
        metrics: Arc<ShardMetrics>,
        health: Arc<NodeHealth>,
    ) -> Self {
        let now = clock.now_unix_ms();
        Self {
            table,
            wal: log.wal,
            idempotency: log.idempotency,
            next_version: log.next_version,
            pending: log.pending,
            checkpointer,
            settings,
            clock,
            metrics,
            health,
            last_sync_ms: now,
            last_checkpoint_ms: now,
        }
    }

    /// Runs until a [`Command::Shutdown`] arrives or every sender is gone, then flushes.
    pub fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let mut stopping = false;
        while !stopping {
            let Some(first) = commands.blocking_recv() else {
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
            self.commit_group(group);
        }
        self.stop();
    }

    fn commit_group(&mut self, group: Vec<Command>) {
        let now_ms = self.clock.now_unix_ms();
        let expired = self.idempotency.expire(now_ms);
        self.pending.idempotency_expired.extend(expired);

        let mut staged = Staged::default();
        let mut replies = Vec::with_capacity(group.len());
        let mut writes = 0u64;
        {
            let table = Arc::clone(&self.table);
            let table = table.read().expect("slot table lock");
            for command in group {
                match command {
                    Command::Write {
                        writes: requests,
                        reply,
                    } => {
                        writes += requests.len() as u64;
                        let results = requests
                            .into_iter()
                            .map(|w| self.stage_write(&table, &mut staged, w, now_ms))
                            .collect();
                        replies.push(Reply::Write(reply, results));
                    }
                    Command::Create { description, reply } => {
                        let result = stage_create(&table, &mut staged, description);
                        replies.push(Reply::Create(reply, result));
                    }
                    Command::Tick | Command::Shutdown => {}
                }
            }
        }
        if writes > 0 {
            self.metrics.group_commit_writes.observe(writes as f64);
        }

        let record = LogRecord {
            slots: staged.slots.into_iter().collect(),
            descriptions: staged.descriptions,
            idempotency: staged.idempotency.into_iter().collect(),
        };
        match self.make_durable(&record) {
            Ok(()) => {
                self.install(record, now_ms);
                answer(replies, &self.metrics);
            }
            Err(error) => {
                tracing::error!(%error, "group commit failed; its writes are refused");
                self.health.set(Some(error.to_string()));
                refuse_all(replies, &error, &self.metrics);
            }
        }
        self.flush_if_due(now_ms);
        self.checkpoint_if_due(now_ms);
    }

    fn stage_write(
        &mut self,
        table: &SlotTable,
        staged: &mut Staged,
        write: WriteRequest,
        now_ms: u64,
    ) -> Result<SlotState, ShardError> {
        let id = write.id.as_str();
        if let Some(key) = &write.idempotency_key {
            let first = staged
                .idempotency
                .get(key)
                .or_else(|| self.idempotency.get(key));
            if let Some(first) = first {
                if first.matches(id, write.delta) {
                    self.metrics.idempotent_replays.inc();
                    return Ok(first.outcome);
                }
                return Err(ShardError::IdempotencyKeyReused {
                    key: key.to_string(),
                    counter: first.counter.to_string(),
                    delta: first.delta,
                });
            }
        }
        let current = staged
            .slots
            .get(id)
            .copied()
            .or_else(|| table.get(id))
            .unwrap_or_default();
        let next = current.apply(write.delta, self.next_version)?;
        self.next_version += 1;
        match staged.slots.get_mut(id) {
            Some(slot) => *slot = next,
            None => {
                staged.slots.insert(id.into(), next);
            }
        }
        if let Some(key) = write.idempotency_key {
            let record = IdempotencyRecord {
                counter: id.into(),
                delta: write.delta,
                outcome: next,
                created_at_ms: now_ms,
            };
            staged.idempotency.insert(key, record);
        }
        Ok(next)
    }

    /// Appends the group's record and, in sync durability, fsyncs it.
    fn make_durable(&mut self, record: &LogRecord) -> Result<(), StorageError> {
        if record.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        self.wal.append(record)?;
        if self.settings.durability == Durability::Sync {
            self.wal.sync()?;
            self.last_sync_ms = self.clock.now_unix_ms();
        }
        self.metrics
            .commit_seconds
            .observe(started.elapsed().as_secs_f64());
        self.metrics.log_bytes.set(self.wal.len() as i64);
        self.health.set(None);
        Ok(())
    }

    fn install(&mut self, record: LogRecord, now_ms: u64) {
        {
            let mut table = self.table.write().expect("slot table lock");
            for (id, state) in &record.slots {
                table.merge(id, *state);
            }
            for description in &record.descriptions {
                table.describe(description.clone());
            }
            self.metrics.counters_held.set(table.len() as i64);
        }
        for (id, state) in &record.slots {
            self.pending.record_slot(id, *state);
        }
        self.pending.descriptions.extend(record.descriptions);
        for (key, entry) in record.idempotency {
            self.idempotency.insert(key.clone(), entry.clone(), now_ms);
            self.pending.idempotency_added.push((key, entry));
        }
    }

    /// In async durability, fsyncs once the flush interval has passed since the last fsync.
    fn flush_if_due(&mut self, now_ms: u64) {
        if !self.wal.has_unsynced()
            || now_ms.saturating_sub(self.last_sync_ms) < self.settings.async_flush_interval_ms
        {
            return;
        }
        match self.wal.sync() {
            Ok(()) => self.last_sync_ms = now_ms,
            Err(error) => {
                tracing::error!(%error, "background flush failed");
                self.health.set(Some(error.to_string()));
            }
        }
    }

    fn checkpoint_if_due(&mut self, now_ms: u64) {
        if self.checkpointer.is_busy() || self.pending.is_empty() {
            return;
        }
        let big = self.wal.len() >= self.settings.checkpoint_log_bytes;
        let old =
            now_ms.saturating_sub(self.last_checkpoint_ms) >= self.settings.checkpoint_interval_ms;
        if big || old {
            self.start_checkpoint(now_ms);
        }
    }

    fn start_checkpoint(&mut self, now_ms: u64) {
        match self.wal.rotate() {
            Ok(closed) => {
                let mut checkpoint = std::mem::take(&mut self.pending);
                checkpoint.through_segment = closed;
                self.checkpointer.submit(checkpoint);
                self.last_checkpoint_ms = now_ms;
                self.last_sync_ms = now_ms;
            }
            Err(error) => tracing::error!(%error, "cannot rotate the log for a checkpoint"),
        }
    }

    fn stop(mut self) {
        if let Err(error) = self.wal.sync() {
            tracing::error!(%error, "final flush failed");
        }
        if !self.pending.is_empty() {
            let now_ms = self.clock.now_unix_ms();
            self.start_checkpoint(now_ms);
        }
        self.checkpointer.finish();
    }
}

fn stage_create(
    table: &SlotTable,
    staged: &mut Staged,
    description: CounterDescription,
) -> Result<CounterDescription, ShardError> {
    let id = description.id.as_str();
    let exists = table.contains(id)
        || staged.slots.contains_key(id)
        || staged.descriptions.iter().any(|d| d.id == description.id);
    if exists {
        return Err(ShardError::AlreadyExists(id.to_owned()));
    }
    staged.descriptions.push(description.clone());
    Ok(description)
}

fn answer(replies: Vec<Reply>, metrics: &ShardMetrics) {
    for reply in replies {
        match reply {
            Reply::Write(sender, results) => {
                let applied = results.iter().filter(|r| r.is_ok()).count() as u64;
                metrics.writes_applied.inc_by(applied);
                metrics
                    .writes_refused
                    .inc_by(results.len() as u64 - applied);
                // A handler that gave up waiting is not an error here.
                let _ = sender.send(results);
            }
            Reply::Create(sender, result) => {
                let _ = sender.send(result);
            }
        }
    }
}

fn refuse_all(replies: Vec<Reply>, error: &StorageError, metrics: &ShardMetrics) {
    for reply in replies {
        match reply {
            Reply::Write(sender, results) => {
                metrics.writes_refused.inc_by(results.len() as u64);
                let refused = results
                    .iter()
                    .map(|_| Err(ShardError::from_storage(error)))
                    .collect();
                let _ = sender.send(refused);
            }
            Reply::Create(sender, _) => {
                let _ = sender.send(Err(ShardError::from_storage(error)));
            }
        }
    }
}
