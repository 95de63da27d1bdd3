//! The commit loop: the one worker that changes the node's state, with group commit.
//!
//! HTTP handlers send [`Command`]s. The loop takes every command that is waiting (a group), works
//! out each write against the committed state (overflow checks, idempotency keys, new versions),
//! appends one [`LogRecord`] for the whole group, fsyncs it once, and only then installs the
//! result in the shared [`SlotTable`](crate::slot_table::SlotTable) and answers. While it
//! fsyncs, the next group gathers in the queue, so one fsync serves many writers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use geocount_model::held_bytes::description_bytes;
use geocount_model::{
    Clock, CounterDescription, CounterId, CounterType, Durability, Hlc, Placement, Recorded,
    ShardDefaults, SlotRecord, SlotState, UniqueSketch, VersionedDescription, Window, WindowChange,
    next_slot_version,
};
use geocount_sync::DescriptionTable;
use indexmap::IndexMap;
use tokio::sync::{mpsc, oneshot};

use crate::budget::{self, ByteBudget, row_bytes};
use crate::checkpoint::Checkpointer;
use crate::error::{ShardError, StorageError};
use crate::health::NodeHealth;
use crate::hot::{HotCounters, changed_description};
use crate::idempotency::{IdempotencyRecord, SharedKeys, asks_for, record_of};
use crate::metrics::ShardMetrics;
use crate::resume::LogState;
use crate::slot_table::{SharedSlotTable, SlotTable};
use crate::store::Checkpoint;
use crate::wal::{LogRecord, Wal};
use crate::write::{Command, WriteResults};

/// The write vocabulary, named here too for callers outside the crate (the fuzz targets).
pub use crate::write::{Change, WriteRequest};

/// A group stops gathering at this many writes, bounding one log record's size.
const MAX_GROUP_WRITES: usize = 200_000;

/// One counter's changes in a group, staged beside its committed record (which is neither
/// copied nor changed until the group is durable), and what is known of the counter, looked up
/// once.
struct StagedSlot {
    /// The counter's row in the slot table; `None` if the node holds no record of it.
    row: Option<usize>,
    /// The slot's state as of this group.
    state: SlotState,
    /// The group's hits to the counter's window.
    window: WindowChange,
    /// A unique counter's sketch as of this group, copied at its first item that changes it.
    sketch: Option<Box<UniqueSketch>>,
    /// Whether a write of the group changed the slot (an item may change nothing).
    changed: bool,
    /// The counter's type as this node knows it (see [`known_type`]).
    known: Option<CounterType>,
    /// The length of the counter's rolling window.
    window_seconds: u32,
    /// Writes the group applied to the counter (for hot-counter detection).
    writes: u64,
    /// What its committed row holds, in bytes (0 without one).
    committed_bytes: u64,
    /// What the counter holds with the group's changes, description included, in bytes (an
    /// upper bound: buckets that expire are not taken off until installed).
    bytes: u64,
    /// Whether the counter has a description (known or staged).
    described: bool,
}

/// What installing a durable group does to one counter's row.
struct SlotChange {
    row: Option<usize>,
    committed_bytes: u64,
    window: WindowChange,
    window_seconds: u32,
}

/// The changes a group makes, before they are durable.
#[derive(Default)]
struct Staged {
    /// Indexed so that a counter's later writes in the group find it with one hash.
    slots: IndexMap<CounterId, StagedSlot, foldhash::fast::RandomState>,
    descriptions: Vec<VersionedDescription>,
    /// The index in `descriptions` of each counter's latest staged description.
    described: HashMap<CounterId, usize>,
    idempotency: HashMap<Box<str>, IdempotencyRecord, foldhash::fast::RandomState>,
    /// Counters the group adds to this node's slot (`shard.max_counters`).
    new_records: usize,
    /// Descriptions the group creates itself (`shard.max_counters`).
    new_descriptions: usize,
    /// Bytes the group's changes add to the node (`shard.max_state_bytes`).
    grown: u64,
}

impl Staged {
    /// Counter `id`'s latest staged description.
    fn description(&self, id: &str) -> Option<&VersionedDescription> {
        self.described.get(id).map(|&at| &self.descriptions[at])
    }

    fn stage_description(&mut self, description: VersionedDescription) {
        let id = description.description.id.clone();
        if let Some(slot) = self.slots.get_mut(id.as_str()) {
            slot.described = true;
            slot.known = Some(description.description.counter_type);
            slot.window_seconds = description.description.window_seconds;
        }
        self.described.insert(id, self.descriptions.len());
        self.descriptions.push(description);
    }

    /// Whether counter `id` is known to be unique in this group: by its description (staged or
    /// known), else by a sketch (staged or committed).
    fn is_unique(&self, table: &SlotTable, descriptions: &DescriptionTable, id: &str) -> bool {
        let described = self.description(id).or_else(|| descriptions.get(id));
        let staged_sketch = self.slots.get(id).is_some_and(|slot| slot.sketch.is_some());
        staged_sketch || known_type(described, table.get_record(id)) == Some(CounterType::Unique)
    }

    /// Counter `id`'s staged slot, made from the committed record and description at its
    /// first write in the group.
    fn slot(
        &mut self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        settings: &ShardDefaults,
        counter: &CounterId,
    ) -> &mut StagedSlot {
        let id = counter.as_str();
        if let Some(at) = self.slots.get_index_of(id) {
            return &mut self.slots[at];
        }
        let row = table.row_index(id);
        let committed = row.map(|row| table.row(row).1);
        let described = self.description(id).or_else(|| descriptions.get(id));
        let committed_bytes = committed.map_or(0, |record| row_bytes(id, record));
        let description = described.map_or(0, |_| description_bytes(id) as u64);
        let slot = StagedSlot {
            row,
            state: committed.map(|record| record.state).unwrap_or_default(),
            window: committed.map_or_else(WindowChange::default, |record| {
                WindowChange::new(record.window())
            }),
            sketch: None,
            changed: false,
            known: known_type(described, committed),
            window_seconds: described.map_or(settings.default_window_seconds, |d| {
                d.description.window_seconds
            }),
            writes: 0,
            committed_bytes,
            bytes: committed_bytes + description,
            described: described.is_some(),
        };
        let (at, _) = self.slots.insert_full(counter.clone(), slot);
        &mut self.slots[at]
    }
}

/// A counter's type as this node knows it: its description's, else that of its record here (a
/// sketch makes it unique); `None` when the node has heard of neither.
fn known_type(
    described: Option<&VersionedDescription>,
    record: Option<&SlotRecord>,
) -> Option<CounterType> {
    if let Some(described) = described {
        return Some(described.description.counter_type);
    }
    record.map(|record| match record.uniques() {
        Some(_) => CounterType::Unique,
        None => CounterType::Sum,
    })
}

/// Refuses (507) what would make this node hold more than `limit` counters, given that it
/// holds `held` (in its slot, or as descriptions it knows).
fn check_room(limit: usize, held: usize) -> Result<(), ShardError> {
    if held >= limit {
        return Err(ShardError::CounterLimit { limit });
    }
    Ok(())
}

enum Reply {
    Write(oneshot::Sender<WriteResults>, WriteResults),
    Create(
        oneshot::Sender<Result<CounterDescription, ShardError>>,
        Result<CounterDescription, ShardError>,
    ),
}

/// What the commit loop shares with the rest of the node.
pub struct CommitContext {
    /// The committed slot states (the loop is their only writer).
    pub table: SharedSlotTable,
    /// The known descriptions (the loop is their only writer).
    pub descriptions: Arc<RwLock<DescriptionTable>>,
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
            shared,
        }
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
            self.commit_group(group);
        }
        self.stop().await;
    }

    fn commit_group(&mut self, mut group: Vec<Command>) {
        if let Some(reason) = &self.fenced {
            refuse_fenced(group, reason, &self.shared.metrics);
            return;
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
        let now_ms = self.shared.clock.now_unix_ms();
        // Every change of the group shares one version: versions then follow the clock however
        // many writes a millisecond brings, and a copy's version can be bounded by the clock.
        self.group_version = next_slot_version(self.last_version, now_ms);
        {
            let mut keys = self.idempotency.write().expect("idempotency lock");
            if keys.expire(now_ms) > 0 {
                self.pending.idempotency_expired_before_ms = keys.expired_before(now_ms);
            }
        }

        let mut staged = Staged::default();
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
                stage_description(&descriptions, &mut staged, description.clone());
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
                    Command::Describe(newly_learned) => {
                        for description in newly_learned {
                            self.shared.hlc.observe(description.version);
                            learned.push(description.clone());
                            stage_description(&descriptions, &mut staged, description);
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
            let change = match slot.sketch {
                Some(sketch) => SlotRecord::unique(slot.state, sketch),
                None => SlotRecord::sum(slot.state, slot.window.changed()),
            };
            logged.push((id, change));
            changes.push(SlotChange {
                row: slot.row,
                committed_bytes: slot.committed_bytes,
                window: slot.window,
                window_seconds: slot.window_seconds,
            });
        }
        let record = LogRecord {
            slots: logged,
            descriptions: staged.descriptions,
            idempotency: staged.idempotency.into_iter().collect(),
        };
        match self.make_durable(&record) {
            Ok(()) => {
                self.install(changes, record, now_ms);
                answer(replies, &self.shared.metrics);
            }
            Err(error) => {
                tracing::error!(%error, "group commit failed; its writes are refused");
                self.shared.health.set(Some(error.to_string()));
                refuse_all(replies, &error, &self.shared.metrics);
                self.learned_unlogged = learned;
                self.fence_if_fsync_failed(&error);
            }
        }
        self.flush_if_due(now_ms);
        self.checkpoint_if_due(now_ms);
    }

    fn stage_write(
        &mut self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        write: WriteRequest,
        now_ms: u64,
    ) -> Result<SlotState, ShardError> {
        let id = write.id.as_str();
        if let Some(key) = &write.idempotency_key {
            let keys = self.idempotency.read().expect("idempotency lock");
            let first = staged.idempotency.get(key).or_else(|| keys.get(key));
            if let Some(first) = first {
                if asks_for(first, id, &write.change) {
                    self.shared.metrics.idempotent_replays.inc();
                    return Ok(first.outcome);
                }
                // Only a write of the same token can meet its key: the refusal shows its own.
                return Err(ShardError::IdempotencyKeyReused {
                    key: crate::key_scope::unscoped(key).to_owned(),
                    counter: first.counter.to_string(),
                    write: first.describe_write(),
                });
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
        }
        let limit = self.shared.settings.max_counters;
        let held_records = table.len() + staged.new_records;
        let held_descriptions = descriptions.len() + staged.new_descriptions;
        let grown = staged.grown;
        let slot = staged.slot(table, descriptions, &self.shared.settings, &write.id);
        if let Some(counter_type) = slot.known
            && counter_type != write.change.counter_type()
        {
            return Err(ShardError::wrong_type(id, counter_type));
        }
        let adds_record = slot.row.is_none() && !slot.changed;
        if adds_record {
            check_room(limit, held_records)?;
        }
        let committed = slot.row.map(|row| table.row(row).1);
        let version = self.group_version;
        let mut creates_unique = false;
        let bytes_before = slot.bytes;
        match &write.change {
            Change::Delta(delta) => {
                let next = slot.state.apply(*delta, version)?;
                // The hit lands in its own second's bucket of the counter's window.
                let empty = Window::default();
                let base = committed.map_or(&empty, |record| record.window());
                let (second, length) = (write.timestamp_secs, slot.window_seconds);
                let hit = budget::Hit::new(&slot.window, second, length);
                let after = budget::sum_bytes_after(id, base, hit, slot.described);
                self.budget.check(id, slot.bytes, after, grown)?;
                let recorded =
                    slot.window
                        .record(base, write.timestamp_secs, *delta, slot.window_seconds)?;
                if recorded == Recorded::TooOld {
                    self.shared.metrics.window_too_old.inc();
                }
                slot.state = next;
                slot.bytes = slot.bytes.max(after);
                // A delta makes a counter no one described a sum, as its record does in later
                // groups: an item for it later in this group is refused like one then, rather
                // than turn it unique and leave this acknowledged delta out of its value.
                slot.known.get_or_insert(CounterType::Sum);
            }
            Change::Item { hash, .. } => {
                creates_unique = slot.known.is_none();
                if creates_unique {
                    check_room(limit, held_descriptions)?;
                }
                let current = slot
                    .sketch
                    .as_deref()
                    .or_else(|| committed.and_then(|record| record.uniques()));
                if current.is_some_and(|sketch| !sketch.would_change(*hash)) {
                    // Nothing changed: no version, no log record, no key to remember.
                    return Ok(slot.state);
                }
                let described = slot.described || creates_unique;
                let after = budget::unique_bytes_after(id, current, *hash, described);
                self.budget.check(id, slot.bytes, after, grown)?;
                slot.bytes = slot.bytes.max(after);
                let sketch = slot.sketch.get_or_insert_with(|| {
                    committed
                        .and_then(|record| record.uniques().cloned().map(Box::new))
                        .unwrap_or_default()
                });
                sketch.add_hash(*hash);
                slot.state = SlotState {
                    value: sketch.count(),
                    version,
                };
            }
        }
        slot.changed = true;
        slot.writes += 1;
        slot.described |= creates_unique;
        let next = slot.state;
        let growth = slot.bytes - bytes_before;
        staged.grown += growth;
        self.last_version = next.version;
        if adds_record {
            staged.new_records += 1;
        }
        if creates_unique {
            // An item for a counter this node has not heard of creates it as unique.
            self.stage_unique_description(&write.id, staged, now_ms);
        }
        if let Some(key) = write.idempotency_key {
            let record = record_of(&write.id, &write.change, next, now_ms);
            staged.idempotency.insert(key, record);
        }
        Ok(next)
    }

    /// Stages the description of a unique counter created by an item write: the defaults,
    /// versioned by this node's clock like `POST /counter`.
    fn stage_unique_description(&self, id: &CounterId, staged: &mut Staged, now_ms: u64) {
        let settings = &self.shared.settings;
        staged.new_descriptions += 1;
        staged.stage_description(VersionedDescription {
            description: CounterDescription {
                id: id.clone(),
                counter_type: CounterType::Unique,
                number_of_shards: settings.default_number_of_shards,
                base_number_of_shards: settings.default_number_of_shards,
                window_seconds: settings.default_window_seconds,
                created_at_ms: now_ms,
            },
            version: self.shared.hlc.now(),
        });
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
        self.fenced = Some(reason);
    }

    /// Logs and fsyncs a restored part of the slot, then merges it into the table; later
    /// versions go above every restored one.
    fn restore(&mut self, records: Vec<(CounterId, SlotRecord)>) -> Result<(), StorageError> {
        let record = LogRecord {
            slots: records,
            ..LogRecord::default()
        };
        self.wal.append(&record)?;
        self.wal.sync()?;
        let mut table = self.shared.table.write().expect("slot table lock");
        for (id, slot) in record.slots {
            self.last_version = self.last_version.max(slot.state.version);
            let before = table
                .get_record(id.as_str())
                .map_or(0, |record| row_bytes(id.as_str(), record));
            if let Some(row) = table.merge_owned(id, slot) {
                let (id, merged) = table.row(row);
                self.budget.changed(before, row_bytes(id, merged));
                self.pending.rows.mark(row);
            }
        }
        self.shared.metrics.counters_held.set(table.len() as i64);
        self.shared
            .metrics
            .state_bytes
            .set(self.budget.held() as i64);
        Ok(())
    }

    /// Logs and fsyncs the slot's restored keys, oldest first (the order they expire in), and
    /// holds them.
    fn restore_keys(
        &mut self,
        mut keys: Vec<(Box<str>, IdempotencyRecord)>,
        unknown_until_ms: Option<u64>,
    ) -> Result<(), StorageError> {
        keys.sort_by_key(|(_, record)| record.created_at_ms);
        let record = LogRecord {
            idempotency: keys,
            ..LogRecord::default()
        };
        self.wal.append(&record)?;
        self.wal.sync()?;
        let now_ms = self.shared.clock.now_unix_ms();
        let mut held = self.idempotency.write().expect("idempotency lock");
        for (key, entry) in record.idempotency {
            held.insert(&key, entry.clone(), now_ms);
            self.pending.idempotency_added.push((key, entry));
        }
        held.set_unknown_until(unknown_until_ms);
        Ok(())
    }

    /// Appends the group's record and, in sync durability, fsyncs it.
    fn make_durable(&mut self, record: &LogRecord) -> Result<(), StorageError> {
        if record.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        self.wal.append(record)?;
        if self.shared.settings.durability == Durability::Sync {
            self.wal.sync()?;
            self.last_sync_ms = self.shared.clock.now_unix_ms();
        }
        let metrics = &self.shared.metrics;
        metrics
            .commit_seconds
            .observe(started.elapsed().as_secs_f64());
        metrics.log_bytes.set(self.wal.len() as i64);
        self.shared.health.set(None);
        Ok(())
    }

    /// Installs a durable group: `changes` says how to change the row of each of
    /// `record.slots`, in the same order.
    fn install(&mut self, changes: Vec<SlotChange>, record: LogRecord, now_ms: u64) {
        {
            let mut table = self.shared.table.write().expect("slot table lock");
            for (change, (id, logged)) in changes.into_iter().zip(record.slots) {
                let row = table.apply_change(
                    change.row,
                    id,
                    logged,
                    &change.window,
                    change.window_seconds,
                );
                let (id, installed) = table.row(row);
                self.budget
                    .changed(change.committed_bytes, row_bytes(id, installed));
                self.pending.rows.mark(row);
            }
            self.shared.metrics.counters_held.set(table.len() as i64);
        }
        if !record.descriptions.is_empty() {
            let mut descriptions = self.shared.descriptions.write().expect("descriptions lock");
            for description in &record.descriptions {
                let known = descriptions.len();
                descriptions.merge(description.clone());
                if descriptions.len() > known {
                    self.budget
                        .add(description_bytes(description.description.id.as_str()) as u64);
                }
            }
        }
        self.shared
            .metrics
            .state_bytes
            .set(self.budget.held() as i64);
        self.pending.descriptions.extend(record.descriptions);
        let mut keys = self.idempotency.write().expect("idempotency lock");
        for (key, entry) in record.idempotency {
            keys.insert(&key, entry.clone(), now_ms);
            self.pending.idempotency_added.push((key, entry));
        }
    }

    /// In async durability, fsyncs once the flush interval has passed since the last fsync.
    fn flush_if_due(&mut self, now_ms: u64) {
        if !self.wal.has_unsynced()
            || now_ms.saturating_sub(self.last_sync_ms)
                < self.shared.settings.async_flush_interval_ms
        {
            return;
        }
        match self.wal.flush() {
            Ok(()) => self.last_sync_ms = now_ms,
            Err(error) => {
                tracing::error!(%error, "background flush failed");
                self.shared.health.set(Some(error.to_string()));
                self.fence_if_fsync_failed(&error);
            }
        }
    }

    fn checkpoint_if_due(&mut self, now_ms: u64) {
        if self.shared.checkpointer.is_busy() || self.pending.is_empty() {
            return;
        }
        let settings = &self.shared.settings;
        let big = self.wal.len() >= settings.checkpoint_log_bytes;
        let old = now_ms.saturating_sub(self.last_checkpoint_ms) >= settings.checkpoint_interval_ms;
        if big || old {
            self.start_checkpoint(now_ms);
        }
    }

    fn start_checkpoint(&mut self, now_ms: u64) {
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

    async fn stop(mut self) {
        if let Err(error) = self.wal.sync() {
            tracing::error!(%error, "final flush failed");
        }
        if !self.pending.is_empty() {
            let now_ms = self.shared.clock.now_unix_ms();
            self.start_checkpoint(now_ms);
        }
        self.shared.checkpointer.finish().await;
    }

    fn stage_create(
        &self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        description: CounterDescription,
    ) -> Result<CounterDescription, ShardError> {
        let id = description.id.as_str();
        let exists = table.contains(id)
            || descriptions.get(id).is_some()
            || staged.slots.get(id).is_some_and(|slot| slot.changed)
            || staged.description(id).is_some();
        if exists {
            return Err(ShardError::AlreadyExists(id.to_owned()));
        }
        check_room(
            self.shared.settings.max_counters,
            descriptions.len() + staged.new_descriptions,
        )?;
        let bytes = description_bytes(id) as u64;
        self.budget.check_growth(bytes, staged.grown)?;
        staged.grown += bytes;
        staged.new_descriptions += 1;
        staged.stage_description(VersionedDescription {
            description: description.clone(),
            version: self.shared.hlc.now(),
        });
        Ok(description)
    }

    /// At the end of each load window: report the load, and version the slot-count changes of
    /// hot and cooled counters.
    fn propose_shard_changes(
        &mut self,
        now_ms: u64,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
    ) {
        let shared = &self.shared;
        let Some((load, changes)) =
            self.hot
                .end_window_if_due(now_ms, descriptions, &shared.placement, shared.own_slot)
        else {
            return;
        };
        shared.load.store(load, Ordering::Relaxed);
        for change in changes {
            let Ok(id) = CounterId::new(change.id.as_str()) else {
                continue;
            };
            // A unique counter's items go to its base slots by their hash (so an item written
            // again lands where it did): more slots would take none of them.
            let current = staged
                .description(&change.id)
                .or_else(|| descriptions.get(&change.id));
            if staged.is_unique(table, descriptions, &change.id) {
                continue;
            }
            let defaults = CounterDescription {
                id,
                counter_type: Default::default(),
                number_of_shards: shared.settings.default_number_of_shards,
                base_number_of_shards: shared.settings.default_number_of_shards,
                window_seconds: shared.settings.default_window_seconds,
                created_at_ms: now_ms,
            };
            let description = changed_description(current, defaults, &change);
            tracing::info!(counter = %change.id, shards = change.number_of_shards, "changing a counter's slot count");
            shared.metrics.shard_count_changes.inc();
            staged.stage_description(VersionedDescription {
                description,
                version: shared.hlc.now(),
            });
        }
    }
}

/// Stages a learned description if it is newer than what is known.
fn stage_description(
    descriptions: &DescriptionTable,
    staged: &mut Staged,
    description: VersionedDescription,
) {
    let id = description.description.id.as_str();
    let known = staged.description(id).or_else(|| descriptions.get(id));
    if known.is_none_or(|k| k.is_older_than(&description)) {
        staged.stage_description(description);
    }
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

/// Refuses every command of a group that arrives after the node was fenced (503); learned
/// descriptions are dropped (peers hand them again after the restart).
fn refuse_fenced(group: Vec<Command>, reason: &str, metrics: &ShardMetrics) {
    let refusal = || ShardError::Unavailable(reason.to_owned());
    for command in group {
        match command {
            Command::Write { writes, reply } => {
                metrics.writes_refused.inc_by(writes.len() as u64);
                let _ = reply.send(writes.iter().map(|_| Err(refusal())).collect());
            }
            Command::Create { reply, .. } => {
                let _ = reply.send(Err(refusal()));
            }
            Command::Restore { reply, .. } | Command::RestoreKeys { reply, .. } => {
                let _ = reply.send(Err(StorageError::io(
                    "restoring the slot",
                    std::io::Error::other(reason.to_owned()),
                )));
            }
            Command::Describe(_) | Command::Tick | Command::Shutdown => {}
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

#[cfg(test)]
mod tests {
    use geocount_model::SystemClock;

    use super::*;
    use crate::storage::{OsDisk, Storage, Workers};

    /// A commit loop on a fresh data directory `dir` (its files on the OS disk, its checkpointer
    /// a task), and the table it installs into.
    fn commit_loop(dir: &std::path::Path) -> (CommitLoop, SharedSlotTable) {
        let storage = Storage {
            disk: Arc::new(OsDisk),
            workers: Workers::Tasks,
        };
        let settings = ShardDefaults::default();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let recovered = crate::resume::recover(
            storage.disk.clone(),
            dir,
            &settings,
            clock.now_unix_ms(),
            crate::RestoreMode::Empty,
        )
        .expect("a fresh data directory");
        let table: SharedSlotTable = Arc::new(RwLock::new(recovered.table));
        let metrics = Arc::new(ShardMetrics::default());
        let checkpointer = Checkpointer::spawn(
            &storage,
            recovered.store,
            table.clone(),
            dir.to_owned(),
            metrics.clone(),
        );
        let context = CommitContext {
            table: table.clone(),
            descriptions: Arc::new(RwLock::new(recovered.descriptions)),
            checkpointer,
            settings,
            clock: clock.clone(),
            hlc: Arc::new(Hlc::new("DC_T_VAL_0", clock)),
            placement: Placement::new("T", 1, 16),
            own_slot: 0,
            load: Arc::new(AtomicU64::new(0)),
            metrics,
            health: Arc::new(NodeHealth::default()),
        };
        (CommitLoop::new(recovered.log, context), table)
    }

    /// One group: a delta to a counter no one described, then an item for it. The item is
    /// refused as it would be in a later group, and the delta stays in the counter's value.
    #[tokio::test]
    async fn an_item_after_a_delta_in_the_same_group_is_the_wrong_type() {
        let dir = tempfile::tempdir().unwrap();
        let (commit, table) = commit_loop(dir.path());
        let (commands, receiver) = mpsc::channel(8);
        let now_secs = SystemClock.now_unix_ms() / 1000;
        let write = |change| WriteRequest {
            id: CounterId::new("fresh").unwrap(),
            change,
            idempotency_key: None,
            timestamp_secs: now_secs,
        };
        let (delta_reply, delta_answer) = oneshot::channel();
        let (item_reply, item_answer) = oneshot::channel();
        // Both wait in the queue before the loop starts, so its first group takes both.
        for (change, reply) in [
            (Change::Delta(5), delta_reply),
            (Change::item("user-1"), item_reply),
        ] {
            let writes = vec![write(change)];
            commands
                .send(Command::Write { writes, reply })
                .await
                .unwrap();
        }
        drop(commands);
        commit.run(receiver).await;

        let delta = delta_answer.await.unwrap();
        assert_eq!(delta[0].as_ref().unwrap().value, 5);
        let item = item_answer.await.unwrap();
        assert!(matches!(item[0], Err(ShardError::WrongType(_))), "{item:?}");
        let table = table.read().unwrap();
        let record = table.get_record("fresh").unwrap();
        assert_eq!(record.state.value, 5);
        assert!(record.uniques().is_none(), "still a sum");
    }
}
