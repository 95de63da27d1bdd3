//! Staging a bounded counter's rights: the share this slot starts a generation with, and the
//! transfers it gives and takes in (docs/architecture.md, "Bounded counters"). A transfer is
//! a change of the slot like a write: a new version, logged, and answered once durable, so
//! that rights given are never given twice and rights taken in are never lost.

use geocount_model::rights::portion;
use geocount_model::{
    Bound, Bounds, CounterId, CounterType, RightsAnswer, Room, SlotRecord, VersionedDescription,
};
use geocount_sync::DescriptionTable;

use super::CommitLoop;
use super::group::{Staged, StagedSlot, check_room};
use super::lifecycle::default_description;
use crate::engine::slot_table::SlotTable;
use crate::engine::write::RightsRequest;
use crate::error::ShardError;

impl CommitLoop {
    /// The share of a counter's room (bounded by `bounds`) this slot starts each generation
    /// with: its datacenter's, if it is the counter's home slot there.
    pub(super) fn share_of(&self, id: &CounterId, bounds: Option<Bounds>) -> Room {
        let Some(bounds) = bounds else {
            return Room::default();
        };
        let shared = &self.shared;
        let home = shared.placement.slots_for(id.as_str(), 1).first() == Some(&shared.own_slot);
        match home {
            true => bounds.share(shared.rights.datacenters, shared.rights.index),
            false => Room::default(),
        }
    }

    /// Gives rights to another slot, or takes in what another gave, and answers with what
    /// this slot then holds.
    pub(super) fn stage_rights(
        &mut self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        id: &CounterId,
        request: RightsRequest,
    ) -> Result<RightsAnswer, ShardError> {
        let request = match request {
            RightsRequest::Hold(description) => {
                return self.stage_held(table, descriptions, staged, description);
            }
            RightsRequest::Withdraw(created) => {
                return Ok(self.stage_withdrawn(descriptions, staged, created));
            }
            transfer => transfer,
        };
        let limit = self.shared.settings.max_counters;
        let held_records = table.len() + staged.new_records;
        // A slot gives only of a counter it holds live: a deleted or expired one's bounds
        // count in no generation, and its row, once wiped, would forget the gift.
        let live = (staged.description(id.as_str()))
            .or_else(|| descriptions.get(id.as_str()))
            .is_some_and(|described| described.is_live(staged.now_ms));
        let slot = staged.slot(table, descriptions, &self.shared.settings, id);
        let (bounds, share) = (slot.bounds, self.share_of(id, slot.bounds));
        let generation = slot.generation;
        let Some(bounds) = bounds.filter(|_| slot.known != Some(CounterType::Unique)) else {
            // Not a bounded counter here (yet): nothing to give or take in.
            return Ok(RightsAnswer::new(generation, Room::default(), (None, None)));
        };
        let committed = (slot.row)
            .filter(|_| !slot.renewed)
            .map(|row| table.row(row).1);
        let value = slot.state.value;
        let ledger = slot.ledger(committed);
        let (given, changed) = match request {
            RightsRequest::Give {
                to,
                generation: asked_in,
                need,
                want,
            } if asked_in == generation && live => {
                let (up, down) = bounds.available(share, ledger, value);
                let portion = Room {
                    up: portion(up, need.up, want.up),
                    down: portion(down, need.down, want.down),
                };
                let changed = !portion.is_empty();
                (ledger.give(&to, portion), changed)
            }
            RightsRequest::Receive {
                from,
                generation: given_in,
                total,
            } if given_in == generation => (Room::default(), ledger.receive(&from, total)),
            // A transfer of another generation counts in none this slot holds.
            RightsRequest::Give { .. } | RightsRequest::Receive { .. } => (Room::default(), false),
            RightsRequest::Hold(_) | RightsRequest::Withdraw(_) => unreachable!("staged above"),
        };
        let available = bounds.available(share, ledger, value);
        if changed {
            if slot.row.is_none() && !slot.changed {
                check_room(limit, held_records)?;
                staged.new_records += 1;
            }
            let slot = staged.slots.get_mut(id.as_str()).expect("staged above");
            slot.state.version = self.group_version;
            slot.changed = true;
            self.last_version = self.group_version;
        }
        Ok(RightsAnswer::new(generation, given, available))
    }

    /// Holds a bounded counter's description its creation pushed, as one learned from another
    /// node, unless this slot holds writes of the counter in its generation that the bounds
    /// never weighed: made before the node knew it bounded there, or leaving the slot short of
    /// rights under them (409: the rights of every slot could not account for them). Answers
    /// what the slot then holds.
    fn stage_held(
        &mut self,
        table: &SlotTable,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        description: VersionedDescription,
    ) -> Result<RightsAnswer, ShardError> {
        self.shared.hlc.observe(description.version);
        let id = description.description.id.clone();
        let now_ms = staged.now_ms;
        let generation = description.generation_at(now_ms);
        let bounds = description.description.bounds();
        let weighed = (staged.description(id.as_str()))
            .or_else(|| descriptions.get(id.as_str()))
            .is_some_and(|known| {
                known.is_live(now_ms)
                    && known.generation_at(now_ms) == generation
                    && known.description.bounds().is_some()
            });
        let share = self.share_of(&id, bounds);
        let slot = staged.slot(table, descriptions, &self.shared.settings, &id);
        let mut available = (None, None);
        if let Some(bounds) = bounds.filter(|_| slot.generation == generation) {
            let committed = (slot.row)
                .filter(|_| !slot.renewed)
                .map(|row| table.row(row).1);
            let value = slot.state.value;
            let written = value != 0 || committed.is_some_and(|record| !record.holds_nothing());
            available = bounds.available(share, slot.ledger(committed), value);
            let short =
                available.0.is_some_and(|up| up < 0) || available.1.is_some_and(|down| down < 0);
            if short || (written && !weighed) {
                return Err(ShardError::WrittenUnbounded {
                    counter: id.to_string(),
                    slots: Vec::new(),
                });
            }
        }
        self.stage_learned(table, descriptions, staged, description);
        Ok(RightsAnswer::new(generation, Room::default(), available))
    }

    /// Takes the bounds off `created`, the description of a bounded creation another slot
    /// refused, if it is still the one known: a newer version with the defaults, in its
    /// generation, so the counter stays what its writes made it everywhere.
    fn stage_withdrawn(
        &mut self,
        descriptions: &DescriptionTable,
        staged: &mut Staged,
        created: VersionedDescription,
    ) -> RightsAnswer {
        let made = &created.description;
        let generation = made.generation;
        let known =
            (staged.description(made.id.as_str())).or_else(|| descriptions.get(made.id.as_str()));
        if known == Some(&created) {
            let settings = &self.shared.settings;
            let mut description =
                default_description(settings, &made.id, made.counter_type, made.created_at_ms);
            description.generation = generation;
            staged.stage_description(VersionedDescription {
                description,
                version: self.shared.hlc.now(),
            });
        }
        RightsAnswer::new(generation, Room::default(), (None, None))
    }
}

/// Whether a delta of `delta` takes a bounded counter's `slot` past `bounds` with the rights
/// it holds (`share`: what it starts its generation with; `committed`: its base record): the
/// bound passed and how much more it needs. The write then goes back to the node to ask.
pub(super) fn shortage(
    bounds: Bounds,
    share: Room,
    slot: &mut StagedSlot,
    committed: Option<&SlotRecord>,
    delta: i64,
) -> Option<(Bound, u64)> {
    let value = slot.state.value;
    let ledger = slot.ledger(committed);
    let bound = bounds.passed(share, ledger, value, delta)?;
    let (up, down) = bounds.available(share, ledger, value);
    let held = match bound {
        Bound::Max => up,
        Bound::Min => down,
    };
    let need = i128::from(delta).abs() - held.unwrap_or(0).max(0);
    Some((bound, u64::try_from(need).unwrap_or(u64::MAX)))
}

#[cfg(test)]
mod tests {
    use geocount_model::{Bound, HlcTimestamp, RightsAnswer, Room, SlotId, SystemClock};
    use tokio::sync::oneshot;

    use crate::engine::commit::tests::Running;
    use crate::engine::write::{Change, Command, LifecycleChange, RightsRequest, WriteRequest};
    use crate::error::ShardError;
    use geocount_model::rights::portion;

    async fn create(node: &Running, max: i64) {
        let mut description = geocount_model::fixtures::described("q", 1, 1, 1).description;
        description.max = Some(max);
        let (reply, answer) = oneshot::channel();
        let command = Command::Create { description, reply };
        node.commands.send(command).await.unwrap();
        answer.await.unwrap().unwrap();
    }

    async fn try_write(node: &Running, delta: i64) -> Result<i64, ShardError> {
        let (reply, answer) = oneshot::channel();
        let writes = vec![WriteRequest {
            id: geocount_model::CounterId::new("q").unwrap(),
            change: Change::Delta(delta),
            idempotency_key: None,
            timestamp_secs: geocount_model::Clock::now_unix_ms(&SystemClock) / 1000,
            ttl_secs: None,
        }];
        node.commands
            .send(Command::Write { writes, reply })
            .await
            .unwrap();
        let result = answer.await.unwrap().pop().unwrap();
        result.map(|state| state.value)
    }

    async fn rights(node: &Running, request: RightsRequest) -> RightsAnswer {
        let (reply, answer) = oneshot::channel();
        let id = geocount_model::CounterId::new("q").unwrap();
        let command = Command::Rights { id, request, reply };
        node.commands.send(command).await.unwrap();
        answer.await.unwrap().unwrap()
    }

    /// Slot `to`'s ask for one increment (and half of the rest), in `generation`.
    fn ask_for_one(to: SlotId, generation: HlcTimestamp) -> RightsRequest {
        RightsRequest::Give {
            to,
            generation,
            need: Room { up: 1, down: 0 },
            want: Room {
                up: u64::MAX,
                down: 0,
            },
        }
    }

    /// The only datacenter's home slot holds the whole room: it spends it, gives some away,
    /// takes some in, and never applies a write past what it holds.
    #[tokio::test]
    async fn a_slot_applies_writes_only_within_the_rights_it_holds() {
        let node = Running::start();
        create(&node, 10).await;
        assert_eq!(try_write(&node, 6).await.unwrap(), 6);
        let short = try_write(&node, 5).await.unwrap_err();
        let ShardError::ShortOfRights(shortage) = short else {
            panic!("{short:?}")
        };
        assert_eq!((shortage.bound, shortage.need), (Bound::Max, 1));
        assert_eq!(node.record("q").state.value, 6, "nothing applied");

        let other = SlotId::new("U", 0);
        let generation = HlcTimestamp::default();
        let given = rights(&node, ask_for_one(other.clone(), generation)).await;
        assert_eq!(
            (given.given.up, given.up),
            (2, Some(2)),
            "half of the 4 left"
        );
        let version = node.record("q").state.version;
        assert_eq!(node.record("q").rights().given_to(&other).up, 2);
        assert!(matches!(
            try_write(&node, 3).await,
            Err(ShardError::ShortOfRights(_))
        ));
        assert_eq!(try_write(&node, 2).await.unwrap(), 8);
        assert!(matches!(
            try_write(&node, 1).await,
            Err(ShardError::ShortOfRights(_))
        ));
        // A decrement makes room again.
        assert_eq!(try_write(&node, -3).await.unwrap(), 5);
        assert_eq!(try_write(&node, 3).await.unwrap(), 8);

        let from = SlotId::new("V", 0);
        let receive = |total| RightsRequest::Receive {
            from: from.clone(),
            generation,
            total: Room { up: total, down: 0 },
        };
        assert_eq!(rights(&node, receive(5)).await.up, Some(5));
        assert!(
            node.record("q").state.version > version,
            "a transfer is a change"
        );
        assert_eq!(
            rights(&node, receive(3)).await.up,
            Some(5),
            "totals only rise"
        );
        // Another generation's transfer counts in none this slot holds.
        let stale = RightsRequest::Receive {
            from,
            generation: HlcTimestamp {
                physical_ms: 1,
                logical: 0,
                node: 0,
            },
            total: Room { up: 100, down: 0 },
        };
        assert_eq!(rights(&node, stale).await.up, Some(5));
        assert_eq!(try_write(&node, 5).await.unwrap(), 13);
        assert!(matches!(
            try_write(&node, 1).await,
            Err(ShardError::ShortOfRights(_))
        ));
    }

    /// A deleted counter's bounds count in no generation: asked in the delete's, its slot
    /// gives nothing, and a transfer it takes in there keeps its row (and ledger) past the
    /// delete.
    #[tokio::test]
    async fn a_slot_gives_no_rights_of_a_deleted_counter() {
        let node = Running::start();
        create(&node, 10).await;
        let deleted = node.change("q", LifecycleChange::Delete).await.unwrap();
        let generation = deleted.generation;
        let answer = rights(&node, ask_for_one(SlotId::new("U", 0), generation)).await;
        assert_eq!(answer.given, Room::default(), "{answer:?}");
        let receive = RightsRequest::Receive {
            from: SlotId::new("V", 0),
            generation,
            total: Room { up: 3, down: 0 },
        };
        rights(&node, receive).await;
        node.write("barrier", 1, None).await;
        node.write("barrier", 1, None).await;
        let record = node.record("q");
        assert_eq!(record.rights().received_from(&SlotId::new("V", 0)).up, 3);
        assert!(record.rights().given.is_empty());
    }

    /// Hands `q`'s bounded description (`max`) to the node as a creation pushes it.
    async fn hold(node: &Running, max: i64) -> Result<RightsAnswer, ShardError> {
        let mut pushed = geocount_model::fixtures::described("q", 1, 1, 1);
        pushed.description.max = Some(max);
        let (reply, answer) = oneshot::channel();
        let id = geocount_model::CounterId::new("q").unwrap();
        let request = RightsRequest::Hold(pushed);
        let command = Command::Rights { id, request, reply };
        node.commands.send(command).await.unwrap();
        answer.await.unwrap()
    }

    /// Bounds pushed by a creation are held only where no write of the counter went unweighed
    /// by them: a slot written before it knew them refuses them and keeps taking writes.
    #[tokio::test]
    async fn a_slot_written_without_bounds_refuses_them() {
        let written = Running::start();
        assert_eq!(try_write(&written, 5).await.unwrap(), 5);
        let refused = hold(&written, 10).await;
        assert!(
            matches!(refused, Err(ShardError::WrittenUnbounded { .. })),
            "{refused:?}"
        );
        assert_eq!(
            try_write(&written, 20).await.unwrap(),
            25,
            "no bounds taken"
        );

        let fresh = Running::start();
        assert_eq!(hold(&fresh, 10).await.unwrap().up, Some(10));
        assert!(matches!(
            try_write(&fresh, 11).await,
            Err(ShardError::ShortOfRights(_))
        ));
        assert_eq!(try_write(&fresh, 4).await.unwrap(), 4);
        assert_eq!(hold(&fresh, 10).await.unwrap().up, Some(6), "pushed again");

        // Learned through the tiers after its writes: the slot is short of rights under them.
        let learned = Running::start();
        assert_eq!(try_write(&learned, 12).await.unwrap(), 12);
        let mut description = geocount_model::fixtures::described("q", 1, 1, 1);
        description.description.max = Some(10);
        let describe = Command::Describe(vec![description]);
        learned.commands.send(describe).await.unwrap();
        let refused = hold(&learned, 10).await;
        assert!(
            matches!(refused, Err(ShardError::WrittenUnbounded { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn a_donor_gives_the_need_and_keeps_half_of_the_rest_or_gives_nothing() {
        assert_eq!(portion(Some(100), 10, 80), 50);
        assert_eq!(portion(Some(100), 60, 80), 60);
        assert_eq!(
            portion(Some(5), 10, 80),
            0,
            "nothing when it holds less than the need"
        );
        assert_eq!(
            portion(Some(10), 10, 80),
            10,
            "all it holds when that is the need"
        );
        assert_eq!(portion(Some(0), 10, 80), 0);
        assert_eq!(
            portion(Some(-3), 10, 80),
            0,
            "a negative balance gives nothing"
        );
        assert_eq!(portion(None, 10, 80), 0, "no bound in that direction");
        assert_eq!(portion(Some(100), 0, 0), 0);
    }
}
