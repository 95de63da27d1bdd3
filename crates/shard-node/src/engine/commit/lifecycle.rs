//! Staging the changes of a counter's life: resets, deletes and expiries, the description
//! learned from another node that brings one, and the write that makes a deleted counter
//! again. The rule every tier reads by (docs/architecture.md, "Reset, delete and expiry"): a
//! slot's record of an older generation than the one its counter's reads count from counts as
//! zero, so when this node's slot learns of a newer generation it logs a zero record of it,
//! and every later write of the slot carries it.

use geocount_model::{
    CounterDescription, CounterId, CounterType, HlcTimestamp, IdempotencyRecord, ShardDefaults,
    VersionedDescription,
};
use geocount_sync::DescriptionTable;

use super::CommitLoop;
use super::group::{Staged, known_type};
use super::keys::key_reused;
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
    /// `elsewhere`: the type the world knows the counter by, when this node has heard of it
    /// neither by a description nor by a record of its slot.
    pub(super) fn stage_lifecycle(
        &mut self,
        (table, descriptions): (&SlotTable, &DescriptionTable),
        staged: &mut Staged,
        id: &CounterId,
        change: LifecycleChange,
        elsewhere: Option<CounterType>,
    ) -> Result<CounterDescription, ShardError> {
        let now_ms = staged.now_ms;
        if let LifecycleChange::ExpireIfMade {
            expires_at_ms,
            counter_type,
        } = change
        {
            let made =
                self.expire_if_made(table, descriptions, staged, id, counter_type, expires_at_ms);
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
            // says its type, or the world's knowledge of it. A delete of one no one knows
            // needs no type.
            None => {
                let record = table.get_record(id.as_str());
                let counter_type = known_type(None, record).or(elsewhere);
                if counter_type.is_none() && change != LifecycleChange::Delete {
                    return Err(ShardError::NotFound(id.to_string()));
                }
                let counter_type = counter_type.unwrap_or_default();
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
            LifecycleChange::ExpireIfMade { .. } => unreachable!("staged above"),
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
        (id, elsewhere): (&CounterId, Option<CounterType>),
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
        let description =
            self.stage_lifecycle((table, descriptions), staged, id, change, elsewhere)?;
        let record = IdempotencyRecord::of_life_change(id.clone(), asked, staged.now_ms);
        staged.idempotency.insert(hash, key, record);
        Ok(description)
    }

    /// Before a write of `counter_type` to counter `id`, deleted or expired here: stages the
    /// counter made again ([`made_again`]) with the write's expiry `expires_at_ms`, so the write
    /// makes a new counter counting from zero. Versioned just past the tombstone (a write with
    /// an expiry one step further, so its expiry wins over a plain write's making), so that a
    /// description made on purpose in the same generation (a `POST /counter`, a change of its
    /// life) wins over it. `None` when the counter is not gone here.
    pub(super) fn recreate_if_gone(
        &mut self,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        (id, counter_type): (&CounterId, CounterType),
        expires_at_ms: Option<u64>,
    ) -> Option<CounterDescription> {
        let gone = staged
            .description(id.as_str())
            .or_else(|| descriptions.get(id.as_str()))
            .filter(|known| !known.is_live(staged.now_ms))
            .cloned()?;
        let settings = &self.shared.settings;
        let mut description = made_again(settings, &gone, counter_type, staged.now_ms);
        description.expires_at_ms = expires_at_ms;
        let steps = if expires_at_ms.is_some() { 2 } else { 1 };
        let version = HlcTimestamp {
            logical: gone.version.logical.saturating_add(steps),
            node: self.shared.hlc.node(),
            ..gone.version
        };
        Some(self.stage_again(staged, &gone, description, version))
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

    /// What a node does before it forwards a write of `counter_type` carrying an expiry: makes
    /// counter `id` with it when the write will make the counter (gone here, or unheard of
    /// here), so the expiry is durable before the write. A live counter is left as it is: a
    /// write's expiry is only for a counter it makes. Returns the counter's description.
    fn expire_if_made(
        &mut self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        id: &CounterId,
        counter_type: CounterType,
        expires_at_ms: u64,
    ) -> CounterDescription {
        let expires = Some(expires_at_ms);
        if let Some(made) = self.recreate_if_gone(descriptions, staged, (id, counter_type), expires)
        {
            return made;
        }
        let known = staged
            .description(id.as_str())
            .or_else(|| descriptions.get(id.as_str()));
        if let Some(live) = known {
            return live.description.clone();
        }
        let settings = &self.shared.settings;
        let written = staged
            .slots
            .get(id.as_str())
            .is_some_and(|slot| slot.changed);
        if written || table.get_record(id.as_str()).is_some() {
            // Live without a description: its defaults, as they stand.
            return default_description(settings, id, counter_type, staged.now_ms);
        }
        self.stage_made(staged, id, counter_type, expires)
    }

    /// Stages the description a write makes for counter `id`, which this node has heard
    /// nothing of: the defaults, the write's type and its expiry. With an expiry it is
    /// versioned at time zero, below every description made on purpose, so that a live
    /// counter this node had not heard of keeps its own description, and no expiry, wherever
    /// the two meet; without one (an item making a unique counter) by this node's clock.
    pub(super) fn stage_made(
        &mut self,
        staged: &mut Staged,
        id: &CounterId,
        counter_type: CounterType,
        expires_at_ms: Option<u64>,
    ) -> CounterDescription {
        let settings = &self.shared.settings;
        let mut description = default_description(settings, id, counter_type, staged.now_ms);
        description.expires_at_ms = expires_at_ms;
        let version = match expires_at_ms {
            Some(_) => HlcTimestamp {
                node: self.shared.hlc.node(),
                ..HlcTimestamp::default()
            },
            None => self.shared.hlc.now(),
        };
        staged.new_descriptions += 1;
        staged.stage_description(VersionedDescription {
            description: description.clone(),
            version,
        });
        description
    }
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

/// When a write's counter expires if the write makes it: `ttl_secs` after `now_ms`.
pub(super) fn expiry_of(write: &WriteRequest, now_ms: u64) -> Option<u64> {
    write.ttl_secs.map(|ttl| now_ms + u64::from(ttl) * 1000)
}

/// The counter made again by a write of `counter_type` from `gone`, its tombstone (or a
/// description whose expiry passed): the defaults, and the bounds of the counter gone when it
/// was of the same type (a quota with an expiry is one again each period, at whichever node a
/// write makes it). Staged in the generation the tombstone began.
fn made_again(
    settings: &ShardDefaults,
    gone: &VersionedDescription,
    counter_type: CounterType,
    now_ms: u64,
) -> CounterDescription {
    let id = &gone.description.id;
    let mut description = default_description(settings, id, counter_type, now_ms);
    if gone.description.counter_type == counter_type {
        description.min = gone.description.min;
        description.max = gone.description.max;
    }
    description
}
