//! Bounded counters' rights: the room below `max` and above `min`, split between slots so that
//! each slot applies writes within its own rights without asking anyone (docs/architecture.md,
//! "Bounded counters").
//!
//! A slot's up-rights are the increments it may still apply, its down-rights the decrements.
//! Each datacenter's home slot starts with an even share of the room; a slot gives rights to
//! another by raising its cumulative `given` amount to it, and the receiver raises its
//! `received` amount from the giver to what the giver said. Every slot keeps
//! `share + received - given - value >= 0` (up) and `share + received - given + value >= 0`
//! (down), and a receiver never records more than its giver gave, so the sum over all slots
//! stays within the bounds.

use serde::{Deserialize, Serialize};

use crate::{ModelError, SlotId};

/// Rights in both directions (an amount of room, or a transfer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Room {
    /// Increments.
    pub up: u64,
    /// Decrements.
    pub down: u64,
}

impl Room {
    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.up == 0 && self.down == 0
    }

    /// Each direction's larger amount.
    pub fn max(self, other: Room) -> Room {
        Room {
            up: self.up.max(other.up),
            down: self.down.max(other.down),
        }
    }
}

/// A slot's transfers of rights, cumulative per other slot, in the record's generation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RightsLedger {
    /// What this slot gave each other slot, in all.
    pub given: Vec<(SlotId, Room)>,
    /// What this slot learned each other slot gave it, in all.
    pub received: Vec<(SlotId, Room)>,
}

impl RightsLedger {
    /// An empty ledger.
    pub const EMPTY: RightsLedger = RightsLedger {
        given: Vec::new(),
        received: Vec::new(),
    };

    /// Whether it records no transfer.
    pub fn is_empty(&self) -> bool {
        self.given.is_empty() && self.received.is_empty()
    }

    /// What was given to `slot`, in all.
    pub fn given_to(&self, slot: &SlotId) -> Room {
        find(&self.given, slot)
    }

    /// What `slot` is known to have given, in all.
    pub fn received_from(&self, slot: &SlotId) -> Room {
        find(&self.received, slot)
    }

    /// Gives `amount` more to `slot`; returns the new total given to it.
    pub fn give(&mut self, slot: &SlotId, amount: Room) -> Room {
        let entry = entry(&mut self.given, slot);
        entry.up = entry.up.saturating_add(amount.up);
        entry.down = entry.down.saturating_add(amount.down);
        *entry
    }

    /// Records that `slot` gave `total` in all (a smaller total than known changes nothing);
    /// returns whether it changed.
    pub fn receive(&mut self, slot: &SlotId, total: Room) -> bool {
        let entry = entry(&mut self.received, slot);
        let raised = entry.max(total);
        let changed = raised != *entry;
        *entry = raised;
        changed
    }

    /// The sums of `given` and `received`, each direction.
    fn totals(&self) -> (i128, i128, i128, i128) {
        let sum = |entries: &[(SlotId, Room)], up: bool| -> i128 {
            entries
                .iter()
                .map(|(_, room)| i128::from(if up { room.up } else { room.down }))
                .sum()
        };
        (
            sum(&self.given, true),
            sum(&self.given, false),
            sum(&self.received, true),
            sum(&self.received, false),
        )
    }

    /// Its size held in memory beyond the record, in bytes.
    pub fn held_bytes(&self) -> usize {
        let entry = |(slot, _): &(SlotId, Room)| slot.datacenter.len() + 48;
        self.given.iter().map(entry).sum::<usize>() + self.received.iter().map(entry).sum::<usize>()
    }
}

fn find(entries: &[(SlotId, Room)], slot: &SlotId) -> Room {
    entries
        .iter()
        .find(|(s, _)| s == slot)
        .map_or(Room::default(), |(_, room)| *room)
}

fn entry<'a>(entries: &'a mut Vec<(SlotId, Room)>, slot: &SlotId) -> &'a mut Room {
    let at = match entries.iter().position(|(s, _)| s == slot) {
        Some(at) => at,
        None => {
            entries.push((slot.clone(), Room::default()));
            entries.len() - 1
        }
    };
    &mut entries[at].1
}

/// A counter's bounds: its world total stays within `[min, max]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The lowest total (`None`: no floor).
    pub min: Option<i64>,
    /// The highest total (`None`: no ceiling).
    pub max: Option<i64>,
}

/// Which bound a write would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// The ceiling.
    Max,
    /// The floor.
    Min,
}

impl Bound {
    /// `"max"` or `"min"`.
    pub fn name(self) -> &'static str {
        match self {
            Bound::Max => "max",
            Bound::Min => "min",
        }
    }
}

impl Bounds {
    /// Checks bounds a client asked for: `min <= 0 <= max` (a counter starts at zero).
    pub fn check(&self, id: &str) -> Result<(), ModelError> {
        let invalid = |message: String| ModelError::InvalidDescription(message);
        if let (Some(min), Some(max)) = (self.min, self.max)
            && min > max
        {
            return Err(invalid(format!(
                "counter {id}: min {min} is above max {max}"
            )));
        }
        if self.min.is_some_and(|min| min > 0) || self.max.is_some_and(|max| max < 0) {
            return Err(invalid(format!(
                "counter {id}: a counter starts at 0, so min must be at most 0 and max at least 0"
            )));
        }
        Ok(())
    }

    /// The whole room: `max` above zero and `min` below, in rights.
    pub fn room(&self) -> Room {
        Room {
            up: self.max.map_or(0, |max| max.unsigned_abs()),
            down: self.min.map_or(0, |min| min.unsigned_abs()),
        }
    }

    /// The share of the room the home slot of the `index`th of `datacenters` datacenters
    /// starts with: an even split, the remainder going to the first ones.
    pub fn share(&self, datacenters: usize, index: usize) -> Room {
        let split = |room: u64| {
            let n = datacenters.max(1) as u64;
            room / n + u64::from((index as u64) < room % n)
        };
        let room = self.room();
        Room {
            up: split(room.up),
            down: split(room.down),
        }
    }

    /// The rights a slot holding `value` with `share` and `ledger` has left: `None` in a
    /// direction without a bound. Negative only where a ledger was learned out of order (a
    /// slot that lost its disk restored an older copy): no write in that direction applies.
    pub fn available(
        &self,
        share: Room,
        ledger: &RightsLedger,
        value: i64,
    ) -> (Option<i128>, Option<i128>) {
        let (given_up, given_down, received_up, received_down) = ledger.totals();
        let value = i128::from(value);
        let up = self
            .max
            .map(|_| i128::from(share.up) + received_up - given_up - value);
        let down = self
            .min
            .map(|_| i128::from(share.down) + received_down - given_down + value);
        (up, down)
    }

    /// The bound a slot would pass by applying `delta` on `value`, if any.
    pub fn passed(
        &self,
        share: Room,
        ledger: &RightsLedger,
        value: i64,
        delta: i64,
    ) -> Option<Bound> {
        let (up, down) = self.available(share, ledger, value);
        let delta = i128::from(delta);
        if delta > 0 && up.is_some_and(|up| up < delta) {
            return Some(Bound::Max);
        }
        if delta < 0 && down.is_some_and(|down| down < -delta) {
            return Some(Bound::Min);
        }
        None
    }

    /// The limit of `bound`.
    pub fn limit(&self, bound: Bound) -> i64 {
        match bound {
            Bound::Max => self.max.unwrap_or(i64::MAX),
            Bound::Min => self.min.unwrap_or(i64::MIN),
        }
    }

    /// [`clamp`](Self::clamp) of a total summed wider than 64 bits.
    pub fn clamp_wide(&self, total: i128) -> i128 {
        let total = self.max.map_or(total, |max| total.min(i128::from(max)));
        self.min.map_or(total, |min| total.max(i128::from(min)))
    }

    /// `total` clamped to the bounds: parts of different ages can add up past one, the true
    /// total never does.
    pub fn clamp(&self, total: i64) -> i64 {
        let total = self.max.map_or(total, |max| total.min(max));
        self.min.map_or(total, |min| total.max(min))
    }
}

/// What a slot holding `available` gives an asker that lacks `need` and would take `want`:
/// the need and beyond it up to half of the rest (a slot spending its own rights keeps
/// some), or nothing when it holds less than the need, so that a write no slot can meet
/// alone moves no rights unless the asker found enough between them (`rights/ask.rs`).
pub fn portion(available: Option<i128>, need: u64, want: u64) -> u64 {
    let Some(available) = available else {
        return 0;
    };
    let available = u64::try_from(available.max(0)).unwrap_or(u64::MAX);
    if available < need || (need == 0 && want == 0) {
        return 0;
    }
    need.max(want.min(available / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(n: u32) -> SlotId {
        SlotId::new("A", n)
    }

    #[test]
    fn shares_split_the_room_evenly_with_the_remainder_first() {
        let bounds = Bounds {
            min: Some(-10),
            max: Some(1_000),
        };
        let shares: Vec<Room> = (0..3).map(|i| bounds.share(3, i)).collect();
        assert_eq!(
            shares.iter().map(|s| s.up).collect::<Vec<_>>(),
            [334, 333, 333]
        );
        assert_eq!(shares.iter().map(|s| s.down).collect::<Vec<_>>(), [4, 3, 3]);
        let extreme = Bounds {
            min: Some(i64::MIN),
            max: Some(i64::MAX),
        };
        assert_eq!(extreme.share(1, 0).down, 1 << 63);
    }

    #[test]
    fn bounds_must_hold_zero() {
        let check = |min, max| Bounds { min, max }.check("c");
        assert!(check(Some(0), Some(5)).is_ok());
        assert!(check(None, Some(0)).is_ok());
        assert!(check(Some(1), None).is_err());
        assert!(check(None, Some(-1)).is_err());
        assert!(check(Some(0), Some(0)).is_ok());
        let message = check(Some(-1), Some(-2)).unwrap_err().to_string();
        assert!(message.contains("above max"), "{message}");
    }

    #[test]
    fn a_slot_spends_its_share_and_what_it_received() {
        let bounds = Bounds {
            min: Some(0),
            max: Some(10),
        };
        let share = bounds.share(2, 0);
        let mut ledger = RightsLedger::default();
        assert_eq!(bounds.passed(share, &ledger, 0, 5), None);
        assert_eq!(bounds.passed(share, &ledger, 0, 6), Some(Bound::Max));
        assert_eq!(bounds.passed(share, &ledger, 0, -1), Some(Bound::Min));
        assert_eq!(
            bounds.passed(share, &ledger, 5, -5),
            None,
            "increments make down-rights"
        );
        assert!(ledger.receive(&slot(1), Room { up: 3, down: 0 }));
        assert!(
            !ledger.receive(&slot(1), Room { up: 2, down: 0 }),
            "totals only rise"
        );
        assert_eq!(bounds.passed(share, &ledger, 5, 3), None);
        assert_eq!(bounds.passed(share, &ledger, 5, 4), Some(Bound::Max));
        assert_eq!(ledger.give(&slot(2), Room { up: 8, down: 0 }).up, 8);
        assert_eq!(bounds.available(share, &ledger, 0), (Some(0), Some(0)));
    }

    #[test]
    fn totals_clamp_to_the_bounds() {
        let bounds = Bounds {
            min: Some(-5),
            max: None,
        };
        assert_eq!(bounds.clamp(-9), -5);
        assert_eq!(bounds.clamp(i64::MAX), i64::MAX);
        assert_eq!(bounds.room(), Room { up: 0, down: 5 });
    }
}
