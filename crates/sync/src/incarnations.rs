//! Telling when two processes serve one slot at once.
//!
//! Every shard node's data directory has an incarnation: the time it was made, shifted left 16
//! bits, plus 16 random bits, so a later one compares higher. Every process start also draws a
//! nonce, so two processes started from one data directory (a copied directory) differ too: a
//! process serving a slot is its [`SlotProcess`]. A node announces its slot and process in
//! every pull of its datacenter aggregator, and carries its process in every page it answers.
//! The aggregator pulls each slot at the address its topology gives, so it hears the process
//! that serves there. When a node announces another process for a slot than the one the
//! aggregator then hears at the slot's address, both are alive at once: a second node started
//! for the slot (a stale topology, a moved slot, a copied data directory), and the one away
//! from the slot's address refuses writes, since no tier pulls it. A node that replaced a lost
//! disk, or restarted, does not look like this: after it starts, the address answers only it.

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

/// One process serving a slot: its data directory's incarnation, and the nonce it drew when
/// it started (0: none known).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotProcess {
    /// Its data directory's incarnation.
    pub incarnation: u64,
    /// Drawn at random when the process started.
    pub nonce: u64,
}

impl std::fmt::Display for SlotProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "incarnation {:016x} (made at {} ms, started as {:016x})",
            self.incarnation,
            incarnation_made_at_ms(self.incarnation),
            self.nonce
        )
    }
}

/// What one aggregator has lately seen of one slot's processes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotIncarnations {
    /// The process last heard at the slot's address: first and last time (since it last took
    /// over from another).
    heard: Option<Seen>,
    /// Processes that announced themselves for the slot: first and last time.
    announced: Vec<Seen>,
}

/// A process and when it was seen: first and last time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    process: SlotProcess,
    first_ms: u64,
    last_ms: u64,
}

/// Two processes serving one slot at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict {
    /// The one heard at the slot's address.
    pub at_address: SlotProcess,
    /// The one announcing itself from elsewhere.
    pub elsewhere: SlotProcess,
}

impl Conflict {
    /// The one that must refuse writes: the one away from the slot's address, whatever the
    /// ages of the two. Only what the address answers is pulled, so writes taken elsewhere
    /// would count nowhere.
    pub fn refusing(&self) -> SlotProcess {
        self.elsewhere
    }

    /// What the operator reads.
    pub fn describe(&self, slot: &str) -> String {
        let copied = if self.at_address.incarnation == self.elsewhere.incarnation {
            " (one data directory started twice: a copy)"
        } else {
            ""
        };
        format!(
            "slot {slot} is served by two processes at once{copied}: {} at its address, and {} elsewhere; the one elsewhere takes no writes until an operator stops one of them",
            self.at_address, self.elsewhere
        )
    }
}

impl SlotIncarnations {
    /// `process` answered a pull at the slot's address at `now_ms` (incarnation 0: an
    /// aggregator, or a node that says nothing).
    pub fn heard(&mut self, process: SlotProcess, now_ms: u64) {
        if process.incarnation == 0 {
            return;
        }
        match &mut self.heard {
            Some(heard) if heard.process == process => heard.last_ms = now_ms,
            _ => {
                self.heard = Some(Seen {
                    process,
                    first_ms: now_ms,
                    last_ms: now_ms,
                });
            }
        }
    }

    /// `process` announced itself for the slot in a pull at `now_ms`.
    pub fn announced(&mut self, process: SlotProcess, now_ms: u64) {
        self.announced
            .retain(|a| a.last_ms + CONFLICT_WINDOW_MS >= now_ms);
        match self.announced.iter_mut().find(|a| a.process == process) {
            Some(known) => known.last_ms = now_ms,
            None => self.announced.push(Seen {
                process,
                first_ms: now_ms,
                last_ms: now_ms,
            }),
        }
    }

    /// The conflict at `now_ms`: another process than the one at the slot's address announced
    /// itself, and their lives overlap (each was heard after the other was first heard), both
    /// within [`CONFLICT_WINDOW_MS`]. A process that died before the other first answered is
    /// no conflict, however recent.
    pub fn conflict(&self, now_ms: u64) -> Option<Conflict> {
        self.conflicts(now_ms).next()
    }

    /// Every conflict at `now_ms`, as [`conflict`](Self::conflict) tells them: one per process
    /// announced beside the one at the address.
    pub fn conflicts(&self, now_ms: u64) -> impl Iterator<Item = Conflict> + '_ {
        let heard = self
            .heard
            .filter(|heard| heard.last_ms + CONFLICT_WINDOW_MS >= now_ms);
        heard.into_iter().flat_map(move |heard| {
            self.announced
                .iter()
                .filter(move |a| {
                    a.last_ms + CONFLICT_WINDOW_MS >= now_ms
                        && a.process != heard.process
                        && heard.last_ms > a.first_ms
                        && a.last_ms > heard.first_ms
                })
                .map(move |a| Conflict {
                    at_address: heard.process,
                    elsewhere: a.process,
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The process of incarnation `incarnation` started with nonce `nonce`.
    fn started(incarnation: u64, nonce: u64) -> SlotProcess {
        SlotProcess { incarnation, nonce }
    }

    #[test]
    fn incarnations_made_later_compare_higher() {
        let early = new_incarnation(1_000, u16::MAX);
        let late = new_incarnation(1_001, 0);
        assert!(late > early);
        assert_eq!(incarnation_made_at_ms(late), 1_001);
    }

    #[test]
    fn a_second_process_for_the_slot_is_a_conflict_while_both_are_heard() {
        let owner = started(new_incarnation(1, 7), 3);
        let stray = started(new_incarnation(2, 9), 4);
        let mut slot = SlotIncarnations::default();
        slot.heard(owner, 100);
        slot.announced(owner, 110);
        assert_eq!(slot.conflict(120), None, "the owner announcing itself");
        slot.announced(stray, 200);
        assert_eq!(slot.conflict(210), None, "not heard at the address since");
        slot.heard(owner, 250);
        let conflict = slot.conflict(260).expect("both alive at once");
        assert_eq!((conflict.at_address, conflict.refusing()), (owner, stray));
        assert!(conflict.describe("DC_A_VAL_1").contains("DC_A_VAL_1"));
        // The stray stops: the conflict ends once it has been silent for the window.
        slot.heard(owner, 200 + CONFLICT_WINDOW_MS);
        assert!(slot.conflict(200 + CONFLICT_WINDOW_MS).is_some());
        slot.heard(owner, 201 + CONFLICT_WINDOW_MS + 1);
        assert_eq!(slot.conflict(201 + CONFLICT_WINDOW_MS + 1), None);
    }

    #[test]
    fn the_one_away_from_the_address_refuses_however_old() {
        let old = started(new_incarnation(1, 7), 3);
        let new = started(new_incarnation(2, 9), 4);
        let mut slot = SlotIncarnations::default();
        // The slot moved: its new process answers at its address, the old one runs on.
        slot.announced(old, 100);
        slot.heard(new, 150);
        slot.announced(old, 200);
        slot.heard(new, 250);
        let conflict = slot.conflict(260).expect("both alive at once");
        assert_eq!((conflict.at_address, conflict.refusing()), (new, old));
    }

    #[test]
    fn two_processes_of_one_data_directory_are_a_conflict() {
        let incarnation = new_incarnation(1, 7);
        let (owner, copy) = (started(incarnation, 3), started(incarnation, 4));
        let mut slot = SlotIncarnations::default();
        slot.heard(owner, 100);
        slot.announced(copy, 150);
        slot.heard(owner, 200);
        let conflict = slot.conflict(210).expect("both alive at once");
        assert_eq!((conflict.at_address, conflict.elsewhere), (owner, copy));
        assert_eq!(conflict.refusing(), copy);
        assert!(conflict.describe("DC_A_VAL_1").contains("copy"));
    }

    /// A node that lost its disk, the one replacing it at the same address, and their slot,
    /// which has heard of neither yet.
    fn lost_and_replacement() -> (SlotProcess, SlotProcess, SlotIncarnations) {
        let lost = started(new_incarnation(1, 1), 1);
        let replacement = started(new_incarnation(5, 1), 2);
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

    #[test]
    fn a_restart_on_the_same_data_directory_is_no_conflict() {
        let incarnation = new_incarnation(1, 7);
        let (before, after) = (started(incarnation, 3), started(incarnation, 4));
        let mut slot = SlotIncarnations::default();
        slot.heard(before, 900);
        slot.announced(before, 1_000);
        // Restarted: it announces itself before the aggregator next pulls it.
        slot.announced(after, 1_200);
        slot.heard(after, 1_300);
        slot.announced(after, 1_400);
        assert_eq!(slot.conflict(1_500), None);
    }
}
