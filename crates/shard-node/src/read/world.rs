//! A counter's world value as this node answers it (docs/api.md, "World reads at a shard
//! node").
//!
//! The value is this node's own datacenter, computed here at the read (its own slot as
//! committed now and its copies of its peers' slots), plus the other datacenters' parts as the
//! global aggregator last reported them ([`super::parts`]). So a write this node acknowledged
//! is in the next world read through it, however stale the other parts are.
//!
//! Both sides count by the lifecycle rule every reader uses: with `G` the newest of this node's
//! generation of the counter (its description's, its records') and the global aggregator's, a
//! record counts only if its generation is at least `G`; the node sends its own `G` with the
//! request so the other parts count from it too. A counter deleted or expired at `G` (by this
//! node's description or the global aggregator's) answers `Ok(None)`, as does one nobody
//! knows.
//!
//! A sum counter's write this node forwarded to a peer's slot counts here as the peer
//! acknowledged it until this node's copy of that slot is as new ([`WorldView::acknowledged`]),
//! so read-your-writes holds for those too; a unique counter's forwarded items count once the
//! copy has them (the peer pull, `sync.peer_ms`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use geocount_model::VersionedDescription;
use geocount_model::wire::{HeldParts, PartsPresence};
use geocount_model::{Clock, CounterId, CounterType, HlcTimestamp, SlotState, UniqueSketch};
use geocount_sync::{DescriptionTable, SlotCopies};

use super::parts::OtherParts;
use crate::engine::slot_table::SharedSlotTable;
use crate::error::ShardError;
use crate::startup::restore::RestoreProgress;

/// One counter's world value as this node answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorldValue {
    /// A sum counter's total over every datacenter.
    Sum(i128),
    /// A unique counter's estimate of the distinct items of every datacenter.
    Unique(u64),
}

impl WorldValue {
    /// The type of the counter it is the value of.
    pub fn counter_type(self) -> CounterType {
        match self {
            WorldValue::Sum(_) => CounterType::Sum,
            WorldValue::Unique(_) => CounterType::Unique,
        }
    }
}

/// A world value and how old its oldest part may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorldReading {
    /// The value.
    pub value: WorldValue,
    /// How long ago (milliseconds) the other datacenters' parts were last complete at most:
    /// the age of the cached answer plus the staleness the global aggregator reported. 0 with
    /// no other datacenter; this node's own datacenter is counted as of the read.
    pub staleness_ms: u64,
}

/// What this node holds of its own datacenter's slots.
pub struct LocalSlots {
    /// The own slot as committed.
    pub table: SharedSlotTable,
    /// The own slot's index among its datacenter's slots.
    pub own_slot: u16,
    /// The copies of the peers' slots.
    pub copies: Arc<RwLock<SlotCopies>>,
    /// The descriptions known.
    pub descriptions: Arc<RwLock<DescriptionTable>>,
    /// While the own slot is restored, no world read is answered.
    pub restore: Arc<RestoreProgress>,
}

/// Beyond this many forwarded writes not yet in the copies, the oldest knowledge is dropped.
const MAX_ACKNOWLEDGED: usize = 1 << 16;

/// Answers world reads.
pub struct WorldView {
    local: LocalSlots,
    /// A peer slot's state after a sum write this node forwarded to it, by counter and slot,
    /// until this node's copy of the slot is as new.
    acknowledged: Mutex<HashMap<(CounterId, u16), SlotState>>,
    /// The other datacenters' parts; `None` when the topology has no other datacenter.
    others: Option<OtherParts>,
    clock: Arc<dyn Clock>,
}

/// One slot's record of a counter, as far as a world read needs it.
#[derive(Debug, Clone)]
struct SlotPart {
    generation: HlcTimestamp,
    value: i64,
    sketch: Option<UniqueSketch>,
}

/// What this node holds of a counter: its description and its datacenter's slots' records.
#[derive(Debug, Clone, Default)]
struct Local {
    description: Option<VersionedDescription>,
    slots: Vec<SlotPart>,
    /// The generation this node counts the counter from.
    from: HlcTimestamp,
}

impl WorldView {
    /// A view over `local`, with `others` the other datacenters' parts (none without other
    /// datacenters); time from `clock`.
    pub fn new(local: LocalSlots, others: Option<OtherParts>, clock: Arc<dyn Clock>) -> Self {
        Self {
            local,
            acknowledged: Mutex::default(),
            others,
            clock,
        }
    }

    /// Notes that peer slot `slot` acknowledged a sum write of counter `id`, its state after
    /// it `state`: world reads here count it until the copy of the slot is as new. A batch's
    /// writes are noted in the order they were applied.
    pub fn acknowledged(&self, id: &CounterId, slot: u16, state: SlotState) {
        let mut acknowledged = self.acknowledged.lock().expect("acknowledged lock");
        if acknowledged.len() >= MAX_ACKNOWLEDGED {
            acknowledged.clear();
        }
        let known = acknowledged.entry((id.clone(), slot)).or_insert(state);
        // A commit group gives all its changes one version, so a batch's outcomes for one
        // counter share it and are noted in the order applied: at an equal version the state
        // noted last is the later one.
        if state.version >= known.version {
            *known = state;
        }
    }

    /// The world value of each id, in order: `Ok(None)` when no live counter has the id,
    /// `Err` when the staleness bound refuses the answer or the global tier cannot be reached.
    pub async fn values(&self, ids: &[CounterId]) -> Vec<Result<Option<WorldValue>, ShardError>> {
        let readings = self.read(ids).await;
        readings
            .into_iter()
            .map(|reading| reading.map(|r| r.map(|r| r.value)))
            .collect()
    }

    /// [`WorldView::values`] with how stale each value's other parts may be.
    pub async fn read(&self, ids: &[CounterId]) -> Vec<Result<Option<WorldReading>, ShardError>> {
        if self.local.restore.is_restoring() {
            let restoring = || ShardError::Unavailable("the node's slot is being restored".into());
            return ids.iter().map(|_| Err(restoring())).collect();
        }
        let now_ms = self.clock.now_unix_ms();
        let locals = self.gather(ids, now_ms);
        let Some(others) = &self.others else {
            let alone = |local: &Local| {
                let value = combine(local, None, now_ms)?;
                Some(WorldReading {
                    value,
                    staleness_ms: 0,
                })
            };
            return locals.iter().map(|local| Ok(alone(local))).collect();
        };
        let wanted: Vec<(CounterId, HlcTimestamp)> = (ids.iter().cloned())
            .zip(locals.iter().map(|local| local.from))
            .collect();
        let fetched = others.get(&wanted).await;
        locals
            .iter()
            .zip(fetched)
            .map(|(local, fetched)| {
                let (at_ms, parts) = fetched?;
                let Some(value) = combine(local, Some(&parts), now_ms) else {
                    return Ok(None);
                };
                let age_ms = now_ms.saturating_sub(at_ms);
                let staleness_ms = age_ms.saturating_add(parts.staleness_ms.unwrap_or(0));
                Ok(Some(WorldReading {
                    value,
                    staleness_ms,
                }))
            })
            .collect()
    }

    /// What this node holds of each id at `now_ms`.
    fn gather(&self, ids: &[CounterId], now_ms: u64) -> Vec<Local> {
        let part = |record: &geocount_model::SlotRecord| SlotPart {
            generation: record.generation(),
            value: record.state.value,
            sketch: record.uniques().cloned(),
        };
        let own = self.local.own_slot;
        let table = self.local.table.read().expect("slot table lock");
        let copies = self.local.copies.read().expect("peer copies lock");
        let descriptions = self.local.descriptions.read().expect("descriptions lock");
        let mut acknowledged = self.acknowledged.lock().expect("acknowledged lock");
        ids.iter()
            .map(|id| {
                let description = descriptions.get(id.as_str()).cloned();
                let described = description.as_ref().map(|d| d.generation_at(now_ms));
                let mut slots: Vec<SlotPart> = table
                    .get_record(id.as_str())
                    .map(part)
                    .into_iter()
                    .collect();
                let peers = copies.get(id.as_str()).unwrap_or_default();
                let peers = peers.iter().filter(|(slot, _)| *slot != own);
                for (slot, record) in peers.clone() {
                    let mut part = part(record);
                    let key = (id.clone(), *slot);
                    match acknowledged.get(&key) {
                        Some(ack) if ack.version > record.state.version => part.value = ack.value,
                        Some(_) => drop(acknowledged.remove(&key)),
                        None => {}
                    }
                    slots.push(part);
                }
                if !acknowledged.is_empty() {
                    // Acknowledged by a peer whose slot's copy does not hold the counter yet.
                    let copied = |slot: u16| peers.clone().any(|(s, _)| *s == slot);
                    for slot in (0..copies.slot_names().len() as u16).filter(|s| *s != own) {
                        if let Some(ack) = acknowledged.get(&(id.clone(), slot))
                            && !copied(slot)
                        {
                            slots.push(SlotPart {
                                generation: described.unwrap_or_default(),
                                value: ack.value,
                                sketch: None,
                            });
                        }
                    }
                }
                let newest = slots.iter().map(|s| s.generation).max();
                Local {
                    from: described.max(newest).unwrap_or_default(),
                    description,
                    slots,
                }
            })
            .collect()
    }
}

/// The world value of a counter this node holds as `local` and the global aggregator reports
/// as `others` (`None`: no other datacenter) at `now_ms`; `None` when it does not exist.
fn combine(local: &Local, others: Option<&HeldParts>, now_ms: u64) -> Option<WorldValue> {
    let from = others.map_or(local.from, |o| o.from.max(local.from));
    let described_at_from = local
        .description
        .as_ref()
        .filter(|d| d.generation_at(now_ms) == from);
    let gone_here = described_at_from.is_some_and(|d| !d.is_live(now_ms));
    let gone_there = others.is_some_and(|o| o.presence == PartsPresence::Gone && o.from >= from);
    if gone_here || gone_there {
        return None;
    }
    let counting: Vec<&SlotPart> = local
        .slots
        .iter()
        .filter(|s| s.generation >= from)
        .collect();
    let exists = described_at_from.is_some()
        || !counting.is_empty()
        || others.is_some_and(|o| o.presence == PartsPresence::Exists);
    if !exists {
        return None;
    }
    let unique = match &local.description {
        Some(d) => d.description.counter_type == CounterType::Unique,
        None => {
            local.slots.iter().any(|s| s.sketch.is_some())
                || others.is_some_and(|o| o.sketch.is_some())
        }
    };
    // Parts counted from an older generation than `from` were wiped by a reset this node
    // knows of and the global aggregator does not yet: they count as nothing.
    let others = others.filter(|o| o.from >= from);
    if unique {
        let mut union = UniqueSketch::new();
        for sketch in counting.iter().filter_map(|s| s.sketch.as_ref()) {
            union.union_with(sketch);
        }
        if let Some(sketch) = others.and_then(|o| o.sketch.as_ref()) {
            union.union_with(sketch);
        }
        return Some(WorldValue::Unique(
            u64::try_from(union.count()).unwrap_or(0),
        ));
    }
    let here: i128 = counting.iter().map(|s| i128::from(s.value)).sum();
    let total = here + others.map_or(0, |o| o.value);
    // Parts of different ages can add up past a bound the true total never passes.
    let bounds = (local.description.as_ref()).and_then(|d| d.description.bounds());
    Some(WorldValue::Sum(match bounds {
        Some(bounds) => bounds.clamp_wide(total),
        None => total,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_model::fixtures::described;

    fn at(physical_ms: u64) -> HlcTimestamp {
        HlcTimestamp {
            physical_ms,
            logical: 0,
            node: 1,
        }
    }

    fn slot(generation: HlcTimestamp, value: i64) -> SlotPart {
        SlotPart {
            generation,
            value,
            sketch: None,
        }
    }

    fn others(from: HlcTimestamp, presence: PartsPresence, value: i128) -> HeldParts {
        HeldParts {
            from,
            presence,
            value,
            sketch: None,
            staleness_ms: Some(10),
        }
    }

    #[test]
    fn the_world_is_this_datacenter_now_plus_the_others_as_reported() {
        let local = Local {
            description: Some(described("c", 1, 1_000, 1)),
            slots: vec![slot(at(0), 5), slot(at(0), 2)],
            from: HlcTimestamp::default(),
        };
        let held = others(HlcTimestamp::default(), PartsPresence::Exists, 100);
        assert_eq!(
            combine(&local, Some(&held), 2_000),
            Some(WorldValue::Sum(107))
        );
        assert_eq!(combine(&local, None, 2_000), Some(WorldValue::Sum(7)));
        let unknown = others(HlcTimestamp::default(), PartsPresence::Unknown, 0);
        assert_eq!(combine(&Local::default(), Some(&unknown), 2_000), None);
        let only_there = others(HlcTimestamp::default(), PartsPresence::Exists, 4);
        assert_eq!(
            combine(&Local::default(), Some(&only_there), 2_000),
            Some(WorldValue::Sum(4))
        );
    }

    #[test]
    fn records_count_only_from_the_newest_generation_and_gone_counters_are_none() {
        let created = described("c", 1, 1_000, 1);
        let reset = created.reset(at(1_500));
        // Reset here: the old record is wiped, the global's parts count from the reset too.
        let local = Local {
            from: reset.generation_at(2_000),
            description: Some(reset.clone()),
            slots: vec![
                slot(HlcTimestamp::default(), 5),
                slot(reset.generation_at(2_000), 3),
            ],
        };
        let behind = others(HlcTimestamp::default(), PartsPresence::Exists, 100);
        assert_eq!(
            combine(&local, Some(&behind), 2_000),
            Some(WorldValue::Sum(3)),
            "parts of an older generation count as nothing"
        );
        // Deleted where the global heard it: gone, whatever this node holds.
        let gone = others(at(1_800), PartsPresence::Gone, 0);
        assert_eq!(combine(&local, Some(&gone), 2_000), None);
        // Deleted here.
        let deleted = Local {
            description: Some(created.delete(at(1_700))),
            ..local
        };
        let fresh = others(at(1_700), PartsPresence::Exists, 1);
        assert_eq!(combine(&deleted, Some(&fresh), 2_000), None);
    }
}
