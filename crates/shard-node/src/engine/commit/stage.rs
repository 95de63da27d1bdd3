//! Staging a group: each write worked out against the committed state (idempotency keys,
//! types, limits, overflow, a new version) without changing it, so that nothing is installed
//! before the group's log record is durable.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use geocount_model::held_bytes::description_bytes;
use geocount_model::{
    Bound, Bounds, CounterDescription, CounterId, CounterType, HlcTimestamp, IdempotencyRecord,
    Recorded, RightsLedger, RollupChange, ShardDefaults, SlotRecord, SlotState, UniqueSketch,
    VersionedDescription, Window, WindowChange,
};
use geocount_sync::DescriptionTable;
use indexmap::IndexMap;

use super::CommitLoop;
use crate::engine::budget::{self, row_bytes};
use crate::engine::hot::changed_description;
use crate::engine::idempotency::{KeyHash, StagedKeys, asks_for, record_of};
use crate::engine::key_scope::unscoped;
use crate::engine::slot_table::SlotTable;
use crate::engine::write::{Change, WriteRequest};
use crate::error::{ShardError, Shortage};

/// One counter's changes in a group, staged beside its committed record (which is neither
/// copied nor changed until the group is durable), and what is known of the counter, looked up
/// once.
pub(super) struct StagedSlot {
    /// The counter's row in the slot table; `None` if the node holds no record of it.
    pub(super) row: Option<usize>,
    /// The slot's state as of this group.
    pub(super) state: SlotState,
    /// The group's hits to the counter's window.
    pub(super) window: WindowChange,
    /// The group's hits to each level of the counter's history (its levels as of the
    /// counter's first change in the group).
    pub(super) history: Vec<RollupChange>,
    /// A unique counter's sketch as of this group, copied at its first item that changes it.
    pub(super) sketch: Option<Box<UniqueSketch>>,
    /// Whether a write of the group changed the slot (an item may change nothing).
    pub(super) changed: bool,
    /// The counter's type as this node knows it (see [`known_type`]).
    pub(super) known: Option<CounterType>,
    /// The length of the counter's rolling window.
    pub(super) window_seconds: u32,
    /// Writes the group applied to the counter (for hot-counter detection).
    pub(super) writes: u64,
    /// What its committed row holds, in bytes (0 without one).
    pub(super) committed_bytes: u64,
    /// What the counter holds with the group's changes, description included, in bytes (an
    /// upper bound: buckets that expire are not taken off until installed).
    pub(super) bytes: u64,
    /// Whether the counter has a description (known or staged).
    pub(super) described: bool,
    /// The counter's generation the staged record is in.
    pub(super) generation: HlcTimestamp,
    /// Whether the staged record starts from zero: its committed record is of an older
    /// generation than the one its description counts from.
    pub(super) renewed: bool,
    /// A bounded counter's ledger of rights as of this group, copied from the committed
    /// record at its first check; `None`: not looked at.
    pub(super) rights: Option<RightsLedger>,
    /// The counter's bounds as its description (staged or known) says.
    pub(super) bounds: Option<Bounds>,
}

impl StagedSlot {
    /// Starts the staged record again from zero in `generation`, as change number `version`:
    /// what the group staged of the older generation is wiped, as a reset wipes it anywhere.
    pub(super) fn renew(&mut self, generation: HlcTimestamp, version: u64, unique: bool) {
        self.generation = generation;
        self.renewed = true;
        self.state = SlotState { value: 0, version };
        self.window = WindowChange::default();
        for change in &mut self.history {
            *change = RollupChange::new(change.level, &Window::EMPTY);
        }
        self.sketch = unique.then(Box::default);
        self.rights = None;
        self.changed = true;
    }

    /// The slot's ledger of rights as of this group (`committed`: its committed record,
    /// `None` when renewed or new).
    pub(super) fn ledger(&mut self, committed: Option<&SlotRecord>) -> &mut RightsLedger {
        self.rights.get_or_insert_with(|| {
            committed
                .map(|record| record.rights().clone())
                .unwrap_or_default()
        })
    }
}

/// The changes a group makes, before they are durable.
#[derive(Default)]
pub(super) struct Staged {
    /// The node's clock when the group began: expiries are judged by it.
    pub(super) now_ms: u64,
    /// Indexed so that a counter's later writes in the group find it with one hash.
    pub(super) slots: IndexMap<CounterId, StagedSlot, foldhash::fast::RandomState>,
    pub(super) descriptions: Vec<VersionedDescription>,
    /// The index in `descriptions` of each counter's latest staged description.
    pub(super) described: HashMap<CounterId, usize>,
    pub(super) idempotency: StagedKeys,
    /// Counters the group adds to this node's slot (`shard.max_counters`).
    pub(super) new_records: usize,
    /// Descriptions the group creates itself (`shard.max_counters`).
    pub(super) new_descriptions: usize,
    /// Bytes the group's changes add to the node (`shard.max_state_bytes`).
    pub(super) grown: u64,
}

impl Staged {
    /// Counter `id`'s latest staged description.
    pub(super) fn description(&self, id: &str) -> Option<&VersionedDescription> {
        self.described.get(id).map(|&at| &self.descriptions[at])
    }

    pub(super) fn stage_description(&mut self, description: VersionedDescription) {
        let id = description.description.id.clone();
        if let Some(slot) = self.slots.get_mut(id.as_str()) {
            slot.described = true;
            slot.known = Some(description.description.counter_type);
            slot.window_seconds = description.description.window_seconds;
            slot.bounds = Bounds::of(&description.description);
        }
        self.described.insert(id, self.descriptions.len());
        self.descriptions.push(description);
    }

    /// Whether counter `id` is known to be unique in this group: by its description (staged or
    /// known), else by a sketch (staged or committed).
    pub(super) fn is_unique(
        &self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        id: &str,
    ) -> bool {
        let described = self.description(id).or_else(|| descriptions.get(id));
        let staged_sketch = self.slots.get(id).is_some_and(|slot| slot.sketch.is_some());
        staged_sketch || known_type(described, table.get_record(id)) == Some(CounterType::Unique)
    }

    /// Counter `id`'s staged slot, made from the committed record and description at its
    /// first write in the group.
    pub(super) fn slot(
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
        let held_generation = committed.map(SlotRecord::generation).unwrap_or_default();
        let generation = described
            .map(|d| d.generation_at(self.now_ms))
            .unwrap_or_default()
            .max(held_generation);
        let renewed = generation > held_generation;
        let base = committed.filter(|_| !renewed);
        let levels = match described {
            Some(d) => d.description.history.clone(),
            None => settings.default_history_levels(),
        };
        let history = (levels.into_iter())
            .map(|level| RollupChange::new(level, rollup_base(base, level.step_seconds)))
            .collect();
        let slot = StagedSlot {
            row,
            state: SlotState {
                value: base.map_or(0, |record| record.state.value),
                version: committed.map_or(0, |record| record.state.version),
            },
            window: base.map_or_else(WindowChange::default, |record| {
                WindowChange::new(record.window())
            }),
            history,
            sketch: committed
                .filter(|record| renewed && record.uniques().is_some())
                .map(|_| Box::default()),
            changed: false,
            known: known_type(described, committed),
            window_seconds: described.map_or(settings.default_window_seconds, |d| {
                d.description.window_seconds
            }),
            writes: 0,
            committed_bytes,
            bytes: committed_bytes + description,
            described: described.is_some(),
            generation,
            renewed,
            rights: None,
            bounds: described.and_then(|d| Bounds::of(&d.description)),
        };
        let (at, _) = self.slots.insert_full(counter.clone(), slot);
        &mut self.slots[at]
    }
}

/// The committed buckets of the history level of step `step` in `record` (none: empty).
pub(super) fn rollup_base(record: Option<&SlotRecord>, step: u32) -> &Window {
    record
        .and_then(|record| record.rollup(step))
        .map_or(&Window::EMPTY, |rollup| &rollup.buckets)
}

/// A counter's type as this node knows it: its description's, else that of its record here (a
/// sketch makes it unique); `None` when the node has heard of neither.
pub(super) fn known_type(
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

/// A new counter's description with the topology's defaults, in the zero generation.
pub(super) fn default_description(
    settings: &ShardDefaults,
    id: &CounterId,
    counter_type: CounterType,
    now_ms: u64,
) -> CounterDescription {
    CounterDescription {
        id: id.clone(),
        counter_type,
        number_of_shards: settings.default_number_of_shards,
        base_number_of_shards: settings.default_number_of_shards,
        window_seconds: settings.default_window_seconds,
        created_at_ms: now_ms,
        generation: HlcTimestamp::default(),
        deleted: false,
        expires_at_ms: None,
        history: match counter_type {
            CounterType::Sum => settings.default_history_levels(),
            CounterType::Unique => Vec::new(),
        },
        min: None,
        max: None,
    }
}

/// The refusal of a write or change whose key `key` was first used for `first`, another one.
/// Only a request of the same token can meet its key: the refusal shows its own.
pub(super) fn key_reused(key: &str, first: &IdempotencyRecord) -> ShardError {
    ShardError::IdempotencyKeyReused {
        key: unscoped(key).to_owned(),
        counter: first.counter.to_string(),
        write: first.describe_write(),
    }
}

/// Refuses (507) what would make this node hold more than `limit` counters, given that it
/// holds `held` (in its slot, or as descriptions it knows).
pub(super) fn check_room(limit: usize, held: usize) -> Result<(), ShardError> {
    if held >= limit {
        return Err(ShardError::CounterLimit { limit });
    }
    Ok(())
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

    pub(super) fn stage_write(
        &mut self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        write: WriteRequest,
        now_ms: u64,
    ) -> Result<SlotState, ShardError> {
        let id = write.id.as_str();
        let key_hash = write.idempotency_key.as_deref().map(KeyHash::of);
        if let (Some(key), Some(hash)) = (&write.idempotency_key, key_hash)
            && let Some(first) = self.first_with_key(staged, hash, key, now_ms)?
        {
            if asks_for(&first, id, &write.change) {
                self.shared.metrics.idempotent_replays.inc();
                return Ok(first.outcome);
            }
            return Err(key_reused(key, &first));
        }
        // Only a write applied, not a retry answered, makes a deleted counter again.
        let counter_type = write.change.counter_type();
        let expires_at_ms = write.ttl_secs.map(|ttl| now_ms + u64::from(ttl) * 1000);
        self.recreate_if_gone(
            descriptions,
            staged,
            (&write.id, counter_type),
            expires_at_ms,
        );
        let limit = self.shared.settings.max_counters;
        let held_records = table.len() + staged.new_records;
        let held_descriptions = descriptions.len() + staged.new_descriptions;
        let grown = staged.grown;
        let slot = staged.slot(table, descriptions, &self.shared.settings, &write.id);
        let (bounds, share) = (slot.bounds, self.share_of(&write.id, slot.bounds));
        if let Some(counter_type) = slot.known
            && counter_type != write.change.counter_type()
        {
            return Err(ShardError::wrong_type(id, counter_type));
        }
        let adds_record = slot.row.is_none() && !slot.changed;
        if adds_record {
            check_room(limit, held_records)?;
        }
        // A write's expiry is only for a counter it makes.
        let makes_with_expiry = adds_record && !slot.described && expires_at_ms.is_some();
        if makes_with_expiry {
            check_room(limit, held_descriptions)?;
        }
        // A renewed slot counts from zero: nothing of its committed record is a base.
        let committed = slot
            .row
            .filter(|_| !slot.renewed)
            .map(|row| table.row(row).1);
        let version = self.group_version;
        let mut creates_unique = false;
        let bytes_before = slot.bytes;
        // A bounded counter's delta applies only within the rights its slot holds; the
        // write goes back to the node to ask for more.
        if let (Change::Delta(delta), Some(bounds)) = (&write.change, bounds) {
            let (delta, value) = (*delta, slot.state.value);
            let ledger = slot.ledger(committed);
            if let Some(bound) = bounds.passed(share, ledger, value, delta) {
                let (up, down) = bounds.available(share, ledger, value);
                let held = match bound {
                    Bound::Max => up,
                    Bound::Min => down,
                };
                let need = i128::from(delta).abs() - held.unwrap_or(0).max(0);
                return Err(ShardError::ShortOfRights(Box::new(Shortage {
                    write,
                    bound,
                    need: u64::try_from(need).unwrap_or(u64::MAX),
                })));
            }
        }
        match &write.change {
            Change::Delta(delta) => {
                let next = slot.state.apply(*delta, version)?;

                // The hit lands in its own second's bucket of the counter's window.
                let empty = Window::default();
                let base = committed.map_or(&empty, |record| record.window());
                let (second, length) = (write.timestamp_secs, slot.window_seconds);
                let hit = budget::Hit::new(&slot.window, second, length);
                let described = slot.described || makes_with_expiry;
                let after = budget::sum_bytes_after(id, base, hit, described)
                    + budget::history_bytes_after(&slot.history, committed, second);
                self.budget.check(id, slot.bytes, after, grown)?;
                // Every level's step takes the hit too: refused before any changes if one
                // would overflow.
                for change in &slot.history {
                    let level_base = rollup_base(committed, change.level.step_seconds);
                    change.check(level_base, second, *delta)?;
                }
                let recorded =
                    slot.window
                        .record(base, write.timestamp_secs, *delta, slot.window_seconds)?;
                if recorded == Recorded::TooOld {
                    self.shared.metrics.window_too_old.inc();
                }
                for change in &mut slot.history {
                    let level_base = rollup_base(committed, change.level.step_seconds);
                    change.record(level_base, second, *delta)?;
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
        slot.described |= creates_unique || makes_with_expiry;
        let next = slot.state;
        let growth = slot.bytes - bytes_before;
        staged.grown += growth;
        self.last_version = next.version;
        if adds_record {
            staged.new_records += 1;
        }
        if creates_unique || makes_with_expiry {
            // A counter this node has not heard of is described when an item makes it unique
            // or the write brings its expiry.
            self.stage_made(staged, &write.id, counter_type, expires_at_ms);
        }
        if let (Some(key), Some(hash)) = (write.idempotency_key, key_hash) {
            let record = record_of(&write.id, &write.change, next, now_ms);
            staged.idempotency.insert(hash, key, record);
        }
        Ok(next)
    }

    pub(super) fn stage_create(
        &mut self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        description: CounterDescription,
    ) -> Result<CounterDescription, ShardError> {
        let id = description.id.as_str();
        let known = staged.description(id).or_else(|| descriptions.get(id));
        if let Some(gone) = known.filter(|known| !known.is_live(staged.now_ms)).cloned() {
            return Ok(self.make_again(table, descriptions, staged, &gone, description));
        }
        let exists = table.contains(id)
            || known.is_some()
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
    pub(super) fn propose_shard_changes(
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
            let defaults = default_description(&shared.settings, &id, CounterType::Sum, now_ms);
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
