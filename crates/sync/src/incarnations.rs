//! Telling when two processes serve one slot at once.
//!
//! Every shard node's data directory has an incarnation: the time it was made, shifted left 16
//! bits, plus 16 random bits, so a later one compares higher. A node announces its slot and
//! incarnation in every pull of its datacenter aggregator, and carries its incarnation in every
//! page it answers. The aggregator pulls each slot at the address its topology gives, so it
//! hears the incarnation that serves there. When a node announces an incarnation for a slot
//! and the aggregator then hears another one at the slot's address, both are alive at once: a
//! second node started for the slot (a stale topology, a copied data directory). A node that
//! replaced a lost disk does not look like this: after it starts, the address answers only it.

/// Events older than this are forgotten: a conflict lasts until one of the two processes has
/// been silent this long.
pub const CONFLICT_WINDOW_MS: u64 = 5_000;

/// When an incarnation drawn at `now_ms` with `random` bits was made.
pub fn new_incarnation(now_ms: u64, random: u16) -> u64 {
    (now_ms << 16) | u64::from(random)
}

/// When incarnation `incarnation` was made (unix ms).
pub fn incarnation_made_at_ms(incarnation: u64) -> u64 {
    incarnation >> 16
}

/// What one aggregator has lately seen of one slot's incarnations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotIncarnations {
    /// The incarnation last heard at the slot's address: first and last time (since it last
    /// took over from another).
    heard: Option<Heard>,
    /// Incarnations that announced themselves for the slot: first and last time.
    announced: Vec<Announced>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Heard {
    incarnation: u64,
    first_ms: u64,
    last_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Announced {
    incarnation: u64,
    first_ms: u64,
    last_ms: u64,
}

/// Two incarnations serving one slot at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict {
    /// The one heard at the slot's address.
    pub at_address: u64,
    /// The one announcing itself from elsewhere.
    pub elsewhere: u64,
}

impl Conflict {
    /// The newer of the two: the one that must refuse writes.
    pub fn newer(&self) -> u64 {
        self.at_address.max(self.elsewhere)
    }

    /// What the operator reads.
    pub fn describe(&self, slot: &str) -> String {
        format!(
            "slot {slot} is served by two processes at once: incarnation {:016x} (made at {} ms) at its address, and incarnation {:016x} (made at {} ms) elsewhere; the newer, {:016x}, takes no writes until an operator stops one of them",
            self.at_address,
            incarnation_made_at_ms(self.at_address),
            self.elsewhere,
            incarnation_made_at_ms(self.elsewhere),
            self.newer()
        )
    }
}

impl SlotIncarnations {
    /// `incarnation` answered a pull at the slot's address at `now_ms` (0: an aggregator, or a
    /// node that says nothing).
    pub fn heard(&mut self, incarnation: u64, now_ms: u64) {
        if incarnation == 0 {
            return;
        }
        match &mut self.heard {
            Some(heard) if heard.incarnation == incarnation => heard.last_ms = now_ms,
            _ => {
                self.heard = Some(Heard {
                    incarnation,
                    first_ms: now_ms,
                    last_ms: now_ms,
                });
            }
        }
    }

    /// `incarnation` announced itself for the slot in a pull at `now_ms`.
    pub fn announced(&mut self, incarnation: u64, now_ms: u64) {
        self.announced
            .retain(|a| a.last_ms + CONFLICT_WINDOW_MS >= now_ms);
        match self
            .announced
            .iter_mut()
            .find(|a| a.incarnation == incarnation)
        {
            Some(known) => known.last_ms = now_ms,
            None => self.announced.push(Announced {
                incarnation,
                first_ms: now_ms,
                last_ms: now_ms,
            }),
        }
    }

    /// The conflict at `now_ms`: another incarnation than the one at the slot's address
    /// announced itself, and their lives overlap (each was heard after the other was first
    /// heard), both within [`CONFLICT_WINDOW_MS`]. A process that died before the other first
    /// answered is no conflict, however recent.
    pub fn conflict(&self, now_ms: u64) -> Option<Conflict> {
        let heard = self.heard?;
        if heard.last_ms + CONFLICT_WINDOW_MS < now_ms {
            return None;
        }
        self.announced
            .iter()
            .filter(|a| a.last_ms + CONFLICT_WINDOW_MS >= now_ms)
            .find(|a| {
                a.incarnation != heard.incarnation
                    && heard.last_ms > a.first_ms
                    && a.last_ms > heard.first_ms
            })
            .map(|a| Conflict {
                at_address: heard.incarnation,
                elsewhere: a.incarnation,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incarnations_made_later_compare_higher() {
        let early = new_incarnation(1_000, u16::MAX);
        let late = new_incarnation(1_001, 0);
        assert!(late > early);
        assert_eq!(incarnation_made_at_ms(late), 1_001);
    }

    #[test]
    fn a_second_process_for_the_slot_is_a_conflict_while_both_are_heard() {
        let (owner, stray) = (new_incarnation(1, 7), new_incarnation(2, 9));
        let mut slot = SlotIncarnations::default();
        slot.heard(owner, 100);
        slot.announced(owner, 110);
        assert_eq!(slot.conflict(120), None, "the owner announcing itself");
        slot.announced(stray, 200);
        assert_eq!(slot.conflict(210), None, "not heard at the address since");
        slot.heard(owner, 250);
        let conflict = slot.conflict(260).expect("both alive at once");
        assert_eq!((conflict.at_address, conflict.newer()), (owner, stray));
        assert!(conflict.describe("DC_A_VAL_1").contains("DC_A_VAL_1"));
        // The stray stops: the conflict ends once it has been silent for the window.
        slot.heard(owner, 200 + CONFLICT_WINDOW_MS);
        assert!(slot.conflict(200 + CONFLICT_WINDOW_MS).is_some());
        slot.heard(owner, 201 + CONFLICT_WINDOW_MS + 1);
        assert_eq!(slot.conflict(201 + CONFLICT_WINDOW_MS + 1), None);
    }

    /// A node that lost its disk, the one replacing it at the same address, and their slot,
    /// which has heard of neither yet.
    fn lost_and_replacement() -> (u64, u64, SlotIncarnations) {
        let (lost, replacement) = (new_incarnation(1, 1), new_incarnation(5, 1));
        (lost, replacement, SlotIncarnations::default())
    }

    #[test]
    fn a_node_replacing_a_lost_disk_is_no_conflict() {
        let (lost, replacement, mut slot) = lost_and_replacement();
        slot.heard(lost, 100);
        // The replacement starts at the same address: it announces itself, and the address
        // answers only it from then on.
        slot.announced(replacement, 150);
        assert_eq!(slot.conflict(160), None);
        slot.heard(replacement, 400);
        slot.announced(replacement, 420);
        assert_eq!(slot.conflict(430), None);
    }

    #[test]
    fn a_node_that_died_before_its_replacement_answered_is_no_conflict() {
        let (lost, replacement, mut slot) = lost_and_replacement();
        // The lost node served and announced itself until it died at 1,000.
        slot.heard(lost, 900);
        slot.announced(lost, 1_000);
        // Its replacement answers at the same address soon after, well within the window.
        slot.heard(replacement, 1_500);
        slot.announced(replacement, 1_600);
        slot.heard(replacement, 1_700);
        assert_eq!(slot.conflict(1_800), None);
    }
}
