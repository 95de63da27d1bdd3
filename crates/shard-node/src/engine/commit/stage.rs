//! Stage: each command of a group worked out against the committed state (idempotency keys,
//! types, limits, rights, overflow, bytes, a new version) without changing it, so that nothing
//! is installed before the group's log record is durable.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use geocount_model::held_bytes::description_bytes;
use geocount_model::{CounterDescription, CounterId, CounterType, SlotState, VersionedDescription};
use geocount_sync::DescriptionTable;

use super::CommitLoop;
use super::group::{Staged, StagedGroup, check_room};
use super::keys::remember_key;
use super::lifecycle::{default_description, expiry_of};
use super::replies::Reply;
use super::rights::shortage;
use crate::engine::hot::changed_description;
use crate::engine::idempotency::KeyHash;
use crate::engine::slot_table::SlotTable;
use crate::engine::write::{Change, Command, WriteRequest};
use crate::error::{ShardError, Shortage};

impl CommitLoop {
    /// Stage: works out every command of `group` against the committed state, with the
    /// descriptions learned before and the expiries that passed, without changing anything.
    pub(super) fn stage_group(&mut self, group: Vec<Command>, now_ms: u64) -> StagedGroup {
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
                if let Command::Write {
                    writes: requests, ..
                } = &command
                {
                    writes += requests.len() as u64;
                }
                let view = (&*table, &*descriptions);
                let reply = self.stage_command(view, &mut staged, command, &mut learned);
                replies.extend(reply);
            }
            for (id, slot) in &staged.slots {
                if slot.writes > 0 {
                    self.hot.count(id, slot.writes);
                }
            }
            self.propose_shard_changes(now_ms, &table, &descriptions, &mut staged);
        }
        if writes > 0 {
            (self.shared.metrics.group_commit_writes).observe(writes as f64);
        }
        StagedGroup {
            staged,
            replies,
            learned,
        }
    }

    /// Stages one command of a group; returns its reply, if it is answered.
    fn stage_command(
        &mut self,
        (table, descriptions): (&SlotTable, &DescriptionTable),
        staged: &mut Staged,
        command: Command,
        learned: &mut Vec<VersionedDescription>,
    ) -> Option<Reply> {
        match command {
            Command::Write { writes, reply } => {
                let now_ms = staged.now_ms;
                let results = (writes.into_iter())
                    .map(|w| self.stage_write(table, descriptions, staged, w, now_ms))
                    .collect();
                Some(Reply::Write(reply, results))
            }
            Command::Create { description, reply } => {
                let result = self.stage_create(table, descriptions, staged, description);
                Some(Reply::Create(reply, result))
            }
            Command::Lifecycle {
                id,
                change,
                elsewhere,
                key,
                reply,
            } => {
                let view = (table, descriptions);
                let result = match key {
                    Some(key) => {
                        self.stage_keyed_lifecycle(view, staged, (&id, elsewhere), change, key)
                    }
                    None => self.stage_lifecycle(view, staged, &id, change, elsewhere),
                };
                Some(Reply::Create(reply, result))
            }
            Command::Rights { id, request, reply } => {
                let result = self.stage_rights(table, descriptions, staged, &id, request);
                Some(Reply::Rights(reply, result))
            }
            Command::Describe(newly_learned) => {
                for description in newly_learned {
                    self.shared.hlc.observe(description.version);
                    learned.push(description.clone());
                    self.stage_learned(table, descriptions, staged, description);
                }
                None
            }
            Command::Tick
            | Command::Shutdown
            | Command::Restore { .. }
            | Command::RestoreKeys { .. } => None,
        }
    }

    /// Works `write` out against the committed state and what the group staged before it:
    /// a retry answered as it was first, else the write checked (type, limits, rights,
    /// overflow, bytes) and staged, with its key.
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
        if let Some(outcome) = self.replayed(staged, &write, key_hash, now_ms)? {
            return Ok(outcome);
        }
        // Only a write applied, not a retry answered, makes a deleted counter again.
        let counter_type = write.change.counter_type();
        let expires_at_ms = expiry_of(&write, now_ms);
        let made = (&write.id, counter_type);
        self.recreate_if_gone(descriptions, staged, made, expires_at_ms);
        let limit = self.shared.settings.max_counters;
        let held_records = table.len() + staged.new_records;
        let held_descriptions = descriptions.len() + staged.new_descriptions;
        let grown = staged.grown;
        let slot = staged.slot(table, descriptions, &self.shared.settings, &write.id);
        let (bounds, share) = (slot.bounds, self.share_of(&write.id, slot.bounds));
        if let Some(known) = slot.known
            && known != counter_type
        {
            return Err(ShardError::wrong_type(id, known));
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
        let committed = (slot.row)
            .filter(|_| !slot.renewed)
            .map(|row| table.row(row).1);
        let bytes_before = slot.bytes;
        if let (Change::Delta(delta), Some(bounds)) = (&write.change, bounds)
            && let Some((bound, need)) = shortage(bounds, share, slot, committed, *delta)
        {
            let short = Shortage { write, bound, need };
            return Err(ShardError::ShortOfRights(Box::new(short)));
        }
        let mut creates_unique = false;
        match &write.change {
            Change::Delta(delta) => {
                let described = slot.described || makes_with_expiry;
                self.stage_delta(slot, committed, (&write, *delta), described, grown)?;
            }
            Change::Item { hash, .. } => {
                creates_unique = slot.known.is_none();
                if creates_unique {
                    check_room(limit, held_descriptions)?;
                }
                let described = slot.described || creates_unique;
                if !self.stage_item((id, *hash), slot, committed, described, grown)? {
                    // Nothing changed: no version, no log record, no key to remember.
                    return Ok(slot.state);
                }
            }
        }
        let makes = creates_unique || makes_with_expiry;
        let next = slot.took_write(makes);
        staged.grown += slot.bytes - bytes_before;
        self.last_version = next.version;
        if adds_record {
            staged.new_records += 1;
        }
        if makes {
            // A counter this node has not heard of is described when an item makes it unique
            // or the write brings its expiry.
            self.stage_made(staged, &write.id, counter_type, expires_at_ms);
        }
        remember_key(staged, write, key_hash, next, now_ms);
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
