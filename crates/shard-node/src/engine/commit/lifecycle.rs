//! Staging the changes of a counter's life: resets, deletes and expiries, the description
//! learned from another node that brings one, and the write that makes a deleted counter
//! again. The rule every tier reads by (docs/architecture.md, "Reset, delete and expiry"): a
//! slot's record of an older generation than the one its counter's reads count from counts as
//! zero, so when this node's slot learns of a newer generation it logs a zero record of it,
//! and every later write of the slot carries it.

use geocount_model::{
    CounterDescription, CounterId, CounterType, HlcTimestamp, IdempotencyRecord,
    VersionedDescription,
};
use geocount_sync::DescriptionTable;

use super::CommitLoop;
use super::stage::{Staged, default_description, key_reused, known_type};
use crate::engine::idempotency::KeyHash;
use crate::engine::slot_table::SlotTable;
use crate::engine::write::{LifecycleChange, WriteRequest};
use crate::error::ShardError;

impl CommitLoop {
    /// Stages a description learned from another node if it is newer than what is known, and
    /// renews this node's slot of the counter if it brings a newer generation. One whose
    /// expiry has passed here is staged as its tombstone, as an expiry passing on a held one
    /// is: a slot renewed for an expiry logs the delete that carries its generation, so that
    /// the descriptions learned after it (in the same group too) are weighed against it.
    pub(super) fn stage_learned(
        &mut self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        description: VersionedDescription,
    ) {
        let description = description.expired_at(staged.now_ms).unwrap_or(description);
        let id = description.description.id.clone();
        let known = staged
            .description(id.as_str())
            .or_else(|| descriptions.get(id.as_str()));
        if known.is_none_or(|known| known.is_older_than(&description)) {
            staged.stage_description(description);
            self.renew_if_behind(table, descriptions, staged, &id);
        }
    }

    /// Logs a zero record of the generation counter `id`'s reads count from, if this node's
    /// record of it is of an older one. A node with no record of it has nothing to wipe.
    pub(super) fn renew_if_behind(
        &mut self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        id: &CounterId,
    ) {
        let Some(described) = staged
            .description(id.as_str())
            .or_else(|| descriptions.get(id.as_str()))
        else {
            return;
        };
        let generation = described.generation_at(staged.now_ms);
        let version = self.group_version;
        if let Some(slot) = staged.slots.get_mut(id.as_str()) {
            if slot.generation < generation {
                let unique = slot.known == Some(CounterType::Unique);
                slot.renew(generation, version, unique);
                self.last_version = version;
            }
            return;
        }
        if table
            .get_record(id.as_str())
            .is_none_or(|r| r.generation() >= generation)
        {
            return;
        }
        let settings = &self.shared.settings;
        let slot = staged.slot(table, descriptions, settings, id);
        debug_assert!(
            slot.renewed,
            "a slot of an older generation starts from zero"
        );
        slot.state.version = version;
        slot.changed = true;
        self.last_version = version;
    }

    /// Resets, deletes or changes the expiry of counter `id`: the new description is staged,
    /// and this node's own slot renewed at once (other slots when they learn of it).
    pub(super) fn stage_lifecycle(
        &mut self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        id: &CounterId,
        change: LifecycleChange,
    ) -> Result<CounterDescription, ShardError> {
        let now_ms = staged.now_ms;
        if let LifecycleChange::ExpireUnlessSet {
            expires_at_ms,
            counter_type,
        } = change
        {
            let made =
                self.expire_unless_set(descriptions, staged, id, counter_type, expires_at_ms);
            self.renew_if_behind(table, descriptions, staged, id);
            return Ok(made);
        }
        let known = staged
            .description(id.as_str())
            .or_else(|| descriptions.get(id.as_str()));
        let current = match known {
            Some(known) if known.is_live(now_ms) => known.clone(),
            // Deleted or expired: gone, as a read says.
            Some(_) => return Err(ShardError::NotFound(id.to_string())),
            // A counter written without `POST /counter` has no description: its record here
            // says its type. A delete of one this node has not heard of needs no type.
            None => {
                let record = table.get_record(id.as_str());
                if record.is_none() && change != LifecycleChange::Delete {
                    return Err(ShardError::NotFound(id.to_string()));
                }
                let counter_type = known_type(None, record).unwrap_or_default();
                staged.new_descriptions += 1;
                VersionedDescription {
                    description: default_description(
                        &self.shared.settings,
                        id,
                        counter_type,
                        now_ms,
                    ),
                    version: HlcTimestamp::default(),
                }
            }
        };
        self.shared.hlc.observe(current.version);
        let at = self.shared.hlc.now();
        let next = match change {
            LifecycleChange::Reset => current.reset(at),
            LifecycleChange::Delete => current.delete(at),
            LifecycleChange::Expire(expires_at_ms) => {
                let mut next = current;
                next.description.expires_at_ms = expires_at_ms;
                next.version = at;
                next
            }
            LifecycleChange::ExpireUnlessSet { .. } => unreachable!("staged above"),
        };
        let description = next.description.clone();
        staged.stage_description(next);
        self.renew_if_behind(table, descriptions, staged, id);
        Ok(description)
    }

    /// [`Self::stage_lifecycle`] of a change carrying an `Idempotency-Key` (scoped) and what it
    /// asked: a retry is answered with the counter's description as it stands, without
    /// applying again; the same key used for another write or change is 422.
    pub(super) fn stage_keyed_lifecycle(
        &mut self,
        (table, descriptions): (&SlotTable, &DescriptionTable),
        staged: &mut Staged,
        id: &CounterId,
        change: LifecycleChange,
        (key, asked): (Box<str>, (i64, u64)),
    ) -> Result<CounterDescription, ShardError> {
        let hash = KeyHash::of(&key);
        if let Some(first) = self.first_with_key(staged, hash, &key, staged.now_ms)? {
            if first.counter == *id && first.life_change() == Some(asked) {
                self.shared.metrics.idempotent_replays.inc();
                let known = staged
                    .description(id.as_str())
                    .or_else(|| descriptions.get(id.as_str()));
                return known
                    .map(|known| known.description.clone())
                    .ok_or_else(|| ShardError::NotFound(id.to_string()));
            }
            return Err(key_reused(&key, &first));
        }
        let description = self.stage_lifecycle(table, descriptions, staged, id, change)?;
        let record = IdempotencyRecord::of_life_change(id.clone(), asked, staged.now_ms);
        staged.idempotency.insert(hash, key, record);
        Ok(description)
    }

    /// Before a write to a counter that is deleted or expired here: stages its description
    /// again, with the defaults and the write's type, in the generation its tombstone began,
    /// so the write makes a new counter counting from zero.
    pub(super) fn recreate_if_gone(
        &mut self,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        write: &WriteRequest,
    ) {
        let id = &write.id;
        let Some(gone) = staged
            .description(id.as_str())
            .or_else(|| descriptions.get(id.as_str()))
            .filter(|known| !known.is_live(staged.now_ms))
            .cloned()
        else {
            return;
        };
        let settings = &self.shared.settings;
        let counter_type = write.change.counter_type();
        let mut description = default_description(settings, id, counter_type, staged.now_ms);
        if gone.description.counter_type == counter_type {
            // A bounded counter made again by a write keeps its bounds: a quota with an expiry
            // is one again each period.
            description.min = gone.description.min;
            description.max = gone.description.max;
        }
        // Versioned just past the tombstone, so that a description made on purpose in the same
        // generation (a `POST /counter`, an expiry set before a forwarded write) wins over it.
        let version = HlcTimestamp {
            logical: gone.version.logical.saturating_add(1),
            node: self.shared.hlc.node(),
            ..gone.version
        };
        self.stage_again(staged, &gone, description, version);
    }

    /// `POST /counter` of a counter that is deleted or expired here: made again from zero.
    pub(super) fn make_again(
        &mut self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        gone: &VersionedDescription,
        description: CounterDescription,
    ) -> CounterDescription {
        self.shared.hlc.observe(gone.version);
        let version = self.shared.hlc.now();
        let made = self.stage_again(staged, gone, description, version);
        self.renew_if_behind(table, descriptions, staged, &made.id);
        made
    }

    /// Stages `description` as the counter `gone` (a tombstone, or a description whose expiry
    /// passed) made again at `version`: in the generation the tombstone began.
    fn stage_again(
        &mut self,
        staged: &mut Staged,
        gone: &VersionedDescription,
        mut description: CounterDescription,
        version: HlcTimestamp,
    ) -> CounterDescription {
        description.generation = gone.generation_at(staged.now_ms);
        description.deleted = false;
        staged.stage_description(VersionedDescription {
            description: description.clone(),
            version,
        });
        description
    }

    /// Sets counter `id`'s expiry unless it has one; makes it (again) with the defaults and
    /// `counter_type` when it is unknown or gone. Returns its description.
    fn expire_unless_set(
        &mut self,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        id: &CounterId,
        counter_type: CounterType,
        expires_at_ms: u64,
    ) -> CounterDescription {
        let now_ms = staged.now_ms;
        let known = staged
            .description(id.as_str())
            .or_else(|| descriptions.get(id.as_str()));
        let mut description = match known {
            Some(live) if live.is_live(now_ms) => {
                if live.description.expires_at_ms.is_some() {
                    return live.description.clone();
                }
                live.description.clone()
            }
            Some(gone) => {
                let gone = gone.clone();
                self.shared.hlc.observe(gone.version);
                let mut made = default_description(&self.shared.settings, id, counter_type, now_ms);
                made.generation = gone.generation_at(now_ms);
                made
            }
            None => {
                staged.new_descriptions += 1;
                default_description(&self.shared.settings, id, counter_type, now_ms)
            }
        };
        description.expires_at_ms = Some(expires_at_ms);
        staged.stage_description(VersionedDescription {
            description: description.clone(),
            version: self.shared.hlc.now(),
        });
        description
    }

    /// A write carrying `ttlSeconds` sets its counter's expiry in the write's own group, when
    /// the counter has none: the write and its expiry are logged in one record.
    pub(super) fn stage_expiry_of_write(
        &mut self,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        write: &WriteRequest,
        ttl_secs: u32,
    ) {
        let expires_at_ms = staged.now_ms + u64::from(ttl_secs) * 1000;
        let counter_type = write.change.counter_type();
        self.expire_unless_set(descriptions, staged, &write.id, counter_type, expires_at_ms);
    }
}
