//! A group's changes: each counter's staged beside its committed record while the group is
//! staged, then split into the one log record and what installing it does to the table.

use std::collections::HashMap;

use geocount_model::held_bytes::description_bytes;
use geocount_model::{
    Bounds, CounterId, CounterType, HlcTimestamp, RightsLedger, RollupChange, ShardDefaults,
    SlotRecord, SlotState, UniqueSketch, VersionedDescription, Window, WindowChange,
};
use geocount_sync::DescriptionTable;
use indexmap::IndexMap;

use super::replies::Reply;
use crate::engine::budget::row_bytes;
use crate::engine::idempotency::{KeyHash, StagedKeys};
use crate::engine::slot_table::SlotTable;
use crate::engine::wal::LogRecord;
use crate::error::ShardError;

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

    /// Marks a write applied to the slot (`describes`: it makes the counter's description);
    /// returns the slot's state after it.
    pub(super) fn took_write(&mut self, describes: bool) -> SlotState {
        self.changed = true;
        self.writes += 1;
        self.described |= describes;
        self.state
    }

    /// Whether a delta of `delta` at `second` fits every level of the counter's history:
    /// checked before any change, so that an overflow at one level changes none.
    pub(super) fn check_history(
        &self,
        committed: Option<&SlotRecord>,
        second: u64,
        delta: i64,
    ) -> Result<(), ShardError> {
        for change in &self.history {
            let level_base = rollup_base(committed, change.level.step_seconds);
            change.check(level_base, second, delta)?;
        }
        Ok(())
    }

    /// Records a delta of `delta` at `second` in every level of the counter's history.
    pub(super) fn record_history(
        &mut self,
        committed: Option<&SlotRecord>,
        second: u64,
        delta: i64,
    ) -> Result<(), ShardError> {
        for change in &mut self.history {
            let level_base = rollup_base(committed, change.level.step_seconds);
            change.record(level_base, second, delta)?;
        }
        Ok(())
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
            slot.bounds = description.description.bounds();
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
            bounds: described.and_then(|d| d.description.bounds()),
        };
        let (at, _) = self.slots.insert_full(counter.clone(), slot);
        &mut self.slots[at]
    }
}

impl Staged {
    /// Splits the staged group into its log record (each changed counter's state, sketch and
    /// changed window buckets, the descriptions and the keys) and what installing it does to
    /// the table's rows, which are changed in place once the record is durable.
    pub(super) fn into_record(self) -> (LogRecord, GroupChanges) {
        let mut changes = Vec::with_capacity(self.slots.len());
        let mut logged = Vec::with_capacity(self.slots.len());
        for (id, slot) in self.slots {
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
        let (keys, key_hashes) = self.idempotency.into_parts();
        let record = LogRecord {
            slots: logged,
            descriptions: self.descriptions,
            idempotency: keys,
        };
        let changes = GroupChanges {
            slots: changes,
            key_hashes,
            encoded_keys: Vec::new(),
        };
        (record, changes)
    }
}

/// A staged group: its changes, one reply per command that is answered, and the descriptions
/// learned from other nodes it stages (staged again with the next group if it is refused).
pub(super) struct StagedGroup {
    pub(super) staged: Staged,
    pub(super) replies: Vec<Reply>,
    pub(super) learned: Vec<VersionedDescription>,
}

/// Refuses (507) what would make this node hold more than `limit` counters, given that it
/// holds `held` (in its slot, or as descriptions it knows).
pub(super) fn check_room(limit: usize, held: usize) -> Result<(), ShardError> {
    if held >= limit {
        return Err(ShardError::CounterLimit { limit });
    }
    Ok(())
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

/// What installing a durable group does besides taking in its log record.
pub(super) struct GroupChanges {
    /// How the row of each of the record's counters changes, in the same order.
    pub(super) slots: Vec<SlotChange>,
    /// The hash of each of the record's idempotency keys, in the same order (worked out when
    /// staged).
    pub(super) key_hashes: Vec<KeyHash>,
    /// The record's keys as the log encoded them (set once the record is durable), for the
    /// checkpoint.
    pub(super) encoded_keys: Vec<u8>,
}

/// What installing a durable group does to one counter's row.
pub(super) struct SlotChange {
    pub(super) row: Option<usize>,
    pub(super) committed_bytes: u64,
    pub(super) window: WindowChange,
    pub(super) window_seconds: u32,
    pub(super) history: Vec<RollupChange>,
}
