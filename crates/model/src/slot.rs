//! Slots: the one-writer parts a counter is split into, and how copies of them merge.
//!
//! Every counter has one slot per shard node, named `DC_<DATACENTER>_VAL_<n>`. Only the owning
//! shard node changes its slot, and each change raises the version, so any two copies of a slot
//! merge by keeping the higher version (last writer wins). Copies can therefore be sent, repeated
//! and reordered freely: the merge is commutative, associative and idempotent.

use serde::{Deserialize, Serialize};

use crate::error::checked_add;
use crate::history::{Rollup, RollupChange};
use crate::{HlcTimestamp, ModelError, RightsLedger, WindowQuery};

/// One copy of one slot of one counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SlotState {
    /// The slot's share of the counter's total.
    pub value: i64,
    /// Raised by the owner on every change; 0 means never written.
    pub version: u64,
}

impl SlotState {
    /// Merges another copy of the same slot into this one: the higher version wins.
    ///
    /// One writer per slot makes equal versions with different values impossible; should they
    /// still meet (a bug elsewhere), the larger value wins so that the merge stays commutative.
    /// Returns whether `self` changed.
    pub fn merge(&mut self, other: SlotState) -> bool {
        let newer = (other.version, other.value) > (self.version, self.value);
        if newer {
            *self = other;
        }
        newer
    }

    /// The state after the owner applies `delta` as change number `version`.
    ///
    /// Refuses a delta that would overflow and leaves nothing changed.
    pub fn apply(self, delta: i64, version: u64) -> Result<SlotState, ModelError> {
        let value = checked_add(self.value, delta)?;
        Ok(SlotState { value, version })
    }
}

/// The version of a slot's next change: above the last one, and at least the wall clock in
/// milliseconds shifted left by 10 bits.
///
/// Seeding versions from the clock means a node that lost its disk and restored an older copy
/// of its slot still numbers new changes above every version any other copy may hold, so its
/// new writes always win the merge. Up to 1,024 changes per millisecond follow the clock; more
/// just count on from the last. The result stays below 2^53 until the year 2248, so JSON clients
/// read it exactly. A version of `u64::MAX` (only a hostile or corrupt copy holds one) stays
/// there rather than wrap to a version below every other copy's.
pub fn next_slot_version(last: u64, now_unix_ms: u64) -> u64 {
    last.saturating_add(1).max(now_unix_ms << 10)
}

/// The highest slot version a copy may carry at `now_unix_ms`: what an owner whose clock runs
/// `skew_ms` ahead could have made. A version beyond it comes only from a corrupt or hostile
/// copy, and would pin the slot (every later change of the owner would lose to it).
pub fn max_slot_version(now_unix_ms: u64, skew_ms: u64) -> u64 {
    now_unix_ms.saturating_add(skew_ms).saturating_mul(1 << 10)
}

/// Everything a slot holds for one counter: its running total and version, and either its
/// window of per-second hits (a sum) or its sketch of the distinct items (a unique counter).
/// Only the owner changes it, raising the version, so copies merge as a whole by version like
/// [`SlotState`].
///
/// 32 bytes: every tier holds one per (counter, slot), so its size is a large part of the
/// memory per counter (docs/architecture.md, "Memory per counter"). On the wire it is the struct
/// `{state, window, uniques}` it always was.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "EncodedRecord")]
pub struct SlotRecord {
    /// The running total and its version. For a unique counter the value is this slot's
    /// estimate of its distinct items, and the version rises whenever the sketch changes.
    pub state: SlotState,
    held: Held,
}

/// What a record holds beside its state: a counter is a sum or unique, never both.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Held {
    /// A sum counter's rolling window.
    Window(crate::Window),
    /// A unique counter's sketch. Boxed: most counters are sums, and a sketch is up to 16 KiB.
    Sketch(Box<crate::UniqueSketch>),
    /// The record of a counter reset or deleted at least once, or keeping history: its
    /// generation and rollups beside what it holds (never itself `Extended`). Boxed: most
    /// counters are never reset and keep no history, and the record's size is part of every
    /// tier's memory per counter.
    Extended(Box<Extra>),
}

/// A [`Held::Extended`] record's generation, rollups and contents.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Extra {
    generation: HlcTimestamp,
    history: Vec<Rollup>,
    held: Held,
    /// A bounded counter's transfers of rights, in this generation (boxed: most counters
    /// are unbounded).
    rights: Option<Box<RightsLedger>>,
}

/// A record's parts beside its state.
struct Parts {
    held: Held,
    generation: HlcTimestamp,
    history: Vec<Rollup>,
    rights: Option<Box<RightsLedger>>,
}

impl Held {
    /// What the record holds, past its generation and history.
    fn inner(&self) -> &Held {
        match self {
            Held::Extended(extra) => &extra.held,
            held => held,
        }
    }

    fn inner_mut(&mut self) -> &mut Held {
        match self {
            Held::Extended(extra) => &mut extra.held,
            held => held,
        }
    }

    /// What it holds, its generation, its rollups and its rights.
    fn into_parts(self) -> Parts {
        match self {
            Held::Extended(extra) => {
                let Extra {
                    generation,
                    history,
                    held,
                    rights,
                } = *extra;
                Parts {
                    held,
                    generation,
                    history,
                    rights,
                }
            }
            held => Parts {
                held,
                generation: HlcTimestamp::default(),
                history: Vec::new(),
                rights: None,
            },
        }
    }

    /// The parts as held: boxed only past the zero generation, with history or with rights.
    fn from_parts(parts: Parts) -> Held {
        let Parts {
            held,
            generation,
            history,
            rights,
        } = parts;
        let held = held.into_parts().held;
        let rights = rights.filter(|rights| !rights.is_empty());
        if generation == HlcTimestamp::default() && history.is_empty() && rights.is_none() {
            held
        } else {
            Held::Extended(Box::new(Extra {
                generation,
                history,
                held,
                rights,
            }))
        }
    }
}

impl Default for Held {
    fn default() -> Self {
        Held::Window(crate::Window::default())
    }
}

/// The ledger of a record with no transfers of rights.
static NO_RIGHTS: RightsLedger = RightsLedger::EMPTY;

/// The window a unique counter's record reads as: none.
static NO_WINDOW: crate::Window = crate::Window::EMPTY;

/// How a [`SlotRecord`] travels and is stored.
#[derive(Serialize)]
struct WireRecord<'a> {
    state: SlotState,
    window: &'a crate::Window,
    uniques: Option<&'a crate::UniqueSketch>,
    generation: HlcTimestamp,
    history: &'a [Rollup],
    rights: Option<&'a RightsLedger>,
}

/// How a [`SlotRecord`] is read back.
#[derive(Deserialize)]
struct EncodedRecord {
    state: SlotState,
    window: crate::Window,
    uniques: Option<Box<crate::UniqueSketch>>,
    generation: HlcTimestamp,
    history: Vec<Rollup>,
    rights: Option<Box<RightsLedger>>,
}

impl From<EncodedRecord> for SlotRecord {
    /// A record carrying a sketch is a unique counter's: a window or history beside it (no
    /// owner writes one) is dropped, as no read of a unique counter would count it.
    fn from(encoded: EncodedRecord) -> Self {
        let (held, history) = match encoded.uniques {
            Some(sketch) => (Held::Sketch(sketch), Vec::new()),
            None => (Held::Window(encoded.window), encoded.history),
        };
        Self {
            state: encoded.state,
            held: Held::from_parts(Parts {
                held,
                generation: encoded.generation,
                history,
                rights: encoded.rights,
            }),
        }
    }
}

impl Serialize for SlotRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WireRecord {
            state: self.state,
            window: self.window(),
            uniques: self.uniques(),
            generation: self.generation(),
            history: self.history(),
            rights: Some(self.rights()).filter(|rights| !rights.is_empty()),
        }
        .serialize(serializer)
    }
}

impl From<SlotState> for SlotRecord {
    /// A record with this state, an empty window and no sketch.
    fn from(state: SlotState) -> Self {
        Self {
            state,
            held: Held::default(),
        }
    }
}

impl SlotRecord {
    /// A sum counter's record: `state` and its `window`.
    pub fn sum(state: SlotState, window: crate::Window) -> Self {
        Self {
            state,
            held: Held::Window(window),
        }
    }

    /// A unique counter's record: `state` and its `sketch`.
    pub fn unique(state: SlotState, sketch: Box<crate::UniqueSketch>) -> Self {
        Self {
            state,
            held: Held::Sketch(sketch),
        }
    }

    /// The hits of the counter's rolling window (empty for a unique counter).
    pub fn window(&self) -> &crate::Window {
        match self.held.inner() {
            Held::Window(window) => window,
            _ => &NO_WINDOW,
        }
    }

    /// The value this record contributes to a read: its running total, or its hits in
    /// `window`.
    pub fn value_in(&self, window: Option<&WindowQuery>) -> i128 {
        match window {
            Some(window) => self.window().sum(window.seconds, window.at),
            None => i128::from(self.state.value),
        }
    }

    /// The window, to change it; `None` for a unique counter, which has none.
    pub fn window_mut(&mut self) -> Option<&mut crate::Window> {
        match self.held.inner_mut() {
            Held::Window(window) => Some(window),
            _ => None,
        }
    }

    /// The distinct items this slot has seen, for a unique counter; `None` for a sum.
    pub fn uniques(&self) -> Option<&crate::UniqueSketch> {
        match self.held.inner() {
            Held::Sketch(sketch) => Some(sketch),
            _ => None,
        }
    }

    /// The sketch, taken out of a unique counter's record; `None` for a sum.
    pub fn into_uniques(self) -> Option<Box<crate::UniqueSketch>> {
        match self.held.into_parts().held {
            Held::Sketch(sketch) => Some(sketch),
            _ => None,
        }
    }

    /// Makes this a unique counter's record holding `sketch` (any window goes).
    pub fn set_uniques(&mut self, sketch: Box<crate::UniqueSketch>) {
        *self.held.inner_mut() = Held::Sketch(sketch);
    }

    /// The counter's generation this record belongs to: the time of the latest reset or
    /// delete its slot had applied when it made the record (zero: none).
    pub fn generation(&self) -> HlcTimestamp {
        match &self.held {
            Held::Extended(extra) => extra.generation,
            _ => HlcTimestamp::default(),
        }
    }

    /// The slot's rollups of the counter's history, one per level (none for most counters).
    pub fn history(&self) -> &[Rollup] {
        match &self.held {
            Held::Extended(extra) => &extra.history,
            _ => &[],
        }
    }

    /// The slot's rollup of the history level of step `step`, if it keeps one.
    pub fn rollup(&self, step: u32) -> Option<&Rollup> {
        self.history().iter().find(|rollup| rollup.step == step)
    }

    /// Sets the slot's rollups, keeping the rest.
    pub fn set_history(&mut self, history: Vec<Rollup>) {
        let parts = std::mem::take(&mut self.held).into_parts();
        self.held = Held::from_parts(Parts { history, ..parts });
    }

    /// A bounded counter's transfers of rights this slot made and learned of, in its
    /// generation (empty for most counters).
    pub fn rights(&self) -> &RightsLedger {
        match &self.held {
            Held::Extended(extra) => extra.rights.as_deref().unwrap_or(&NO_RIGHTS),
            _ => &NO_RIGHTS,
        }
    }

    /// Sets the slot's transfers of rights, keeping the rest.
    pub fn set_rights(&mut self, rights: RightsLedger) {
        let parts = std::mem::take(&mut self.held).into_parts();
        self.held = Held::from_parts(Parts {
            rights: Some(Box::new(rights)),
            ..parts
        });
    }

    /// Installs a group's hits to the history ([`crate::history::apply_changes`]): its levels
    /// become those of `changes`.
    pub fn apply_history(&mut self, changes: &[RollupChange]) {
        match &mut self.held {
            Held::Extended(extra) => {
                crate::history::apply_changes(&mut extra.history, changes);
                if extra.history.is_empty()
                    && extra.generation == HlcTimestamp::default()
                    && extra.rights.is_none()
                {
                    self.held = std::mem::take(&mut self.held).into_parts().held;
                }
            }
            _ if changes.is_empty() => {}
            _ => {
                let mut history = Vec::with_capacity(changes.len());
                crate::history::apply_changes(&mut history, changes);
                self.set_history(history);
            }
        }
    }

    /// Whether this record counts in reads of a counter whose reads count from `generation`:
    /// a record of an older generation was made before its slot applied that reset or delete.
    pub fn counts_in(&self, generation: HlcTimestamp) -> bool {
        self.generation() >= generation
    }

    /// The owner's record after it applies a reset or delete of `generation` as change number
    /// `version`: zero, an empty window or sketch (of the same kind) and no history, in that
    /// generation.
    pub fn renewed(&self, generation: HlcTimestamp, version: u64) -> SlotRecord {
        let held = match self.held.inner() {
            Held::Sketch(_) => Held::Sketch(Box::default()),
            _ => Held::Window(crate::Window::default()),
        };
        SlotRecord {
            state: SlotState { value: 0, version },
            held: Held::from_parts(Parts {
                held,
                generation,
                history: Vec::new(),
                rights: None,
            }),
        }
    }

    /// Whether the record holds nothing a read counts: a zero value, no hits, no items (what an
    /// owner logs when it applies a reset or delete).
    pub fn holds_nothing(&self) -> bool {
        self.state.value == 0
            && self.window().buckets().is_empty()
            && self.uniques().is_none_or(|sketch| sketch.count() == 0)
    }

    /// Whether this record, of a counter deleted in `generation`, can go with nothing lost:
    /// it is of an older generation (the delete wiped it), or it is the zero record its slot
    /// logged on learning of the delete. A record of the delete's generation that holds writes
    /// or transfers of rights was made after its slot learned of it: the counter was made
    /// again, and its description saying so may not have arrived yet (dropped, its ledger
    /// would let the slot count its share again).
    pub fn wiped_by(&self, generation: HlcTimestamp) -> bool {
        self.generation() < generation
            || (self.generation() == generation && self.holds_nothing() && self.rights().is_empty())
    }

    /// Sets this record's generation, keeping what it holds.
    pub fn set_generation(&mut self, generation: HlcTimestamp) {
        let parts = std::mem::take(&mut self.held).into_parts();
        self.held = Held::from_parts(Parts {
            generation,
            ..parts
        });
    }

    /// Merges another copy of the same slot: the higher version wins. Returns whether `self`
    /// changed.
    pub fn merge(&mut self, other: &SlotRecord) -> bool {
        let mut state = self.state;
        if !state.merge(other.state) {
            return false;
        }
        *self = other.clone();
        true
    }

    /// [`merge`](Self::merge), taking `other` over instead of copying it.
    pub fn merge_owned(&mut self, other: SlotRecord) -> bool {
        let mut state = self.state;
        if !state.merge(other.state) {
            return false;
        }
        *self = other;
        true
    }

    /// Replays a logged change of this slot: if it is newer, takes its state, sets the window
    /// and rollup buckets it carries and takes its sketch. Returns whether `self` changed.
    pub fn apply_logged(&mut self, logged: SlotRecord) -> bool {
        let mut state = self.state;
        if !state.merge(logged.state) {
            return false;
        }
        self.state = logged.state;
        let Parts {
            held: logged_held,
            generation,
            history: logged_history,
            rights,
        } = logged.held.into_parts();
        let (mut held, mut history, mut kept_rights) = if generation == self.generation() {
            let parts = std::mem::take(&mut self.held).into_parts();
            (parts.held, parts.history, parts.rights)
        } else {
            // A record of another generation holds nothing of this one's window or history.
            (Held::default(), Vec::new(), None)
        };
        match logged_held {
            Held::Sketch(sketch) => held = Held::Sketch(sketch),
            Held::Window(buckets) => {
                if let Held::Window(window) = &mut held {
                    window.set_buckets(&buckets);
                }
            }
            Held::Extended(_) => unreachable!("parts never hold another"),
        }
        crate::history::apply_logged(&mut history, &logged_history);
        // A ledger only grows within a generation: a logged record carries its slot's whole
        // ledger, or none when the group left it as it was.
        if rights.as_ref().is_some_and(|rights| !rights.is_empty()) {
            kept_rights = rights;
        }
        self.held = Held::from_parts(Parts {
            held,
            generation,
            history,
            rights: kept_rights,
        });
        true
    }

    /// The owner adds the item with hash `hash` ([`crate::unique::hash_item`]) to the slot's
    /// sketch as change number `version`: the value becomes the slot's estimate. An item that
    /// raises no register changes nothing, the version included; returns whether it changed.
    pub fn add_item(&mut self, hash: u64, version: u64) -> bool {
        if let Held::Window(_) = self.held.inner() {
            *self.held.inner_mut() = Held::Sketch(Box::default());
        }
        let Held::Sketch(sketch) = self.held.inner_mut() else {
            unreachable!("made a sketch above")
        };
        if !sketch.add_hash(hash) {
            return false;
        }
        self.state = SlotState {
            value: sketch.count(),
            version,
        };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn merged(mut a: SlotState, b: SlotState) -> SlotState {
        a.merge(b);
        a
    }

    fn state() -> impl Strategy<Value = SlotState> {
        (any::<i64>(), 0u64..8).prop_map(|(value, version)| SlotState { value, version })
    }

    proptest! {
        #[test]
        fn merge_is_commutative(a in state(), b in state()) {
            prop_assert_eq!(merged(a, b), merged(b, a));
        }

        #[test]
        fn merge_is_associative(a in state(), b in state(), c in state()) {
            prop_assert_eq!(merged(merged(a, b), c), merged(a, merged(b, c)));
        }

        #[test]
        fn merge_is_idempotent(a in state(), b in state()) {
            prop_assert_eq!(merged(a, a), a);
            let ab = merged(a, b);
            prop_assert_eq!(merged(ab, b), ab);
        }

        #[test]
        fn any_delivery_order_converges_to_the_newest(deltas in proptest::collection::vec(-1000i64..1000, 1..20), seed in any::<u64>()) {
            // The owner's successive states, then delivered to a copy in a shuffled order with repeats.
            let mut owner = SlotState::default();
            let mut history = Vec::new();
            for (i, delta) in deltas.iter().enumerate() {
                owner = owner.apply(*delta, i as u64 + 1).unwrap();
                history.push(owner);
            }
            let mut order: Vec<usize> = (0..history.len()).chain(0..history.len()).collect();
            let mut x = seed | 1;
            for i in (1..order.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                order.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let mut copy = SlotState::default();
            for i in order {
                copy.merge(history[i]);
            }
            prop_assert_eq!(copy, owner);
            prop_assert_eq!(copy.value, deltas.iter().sum::<i64>());
        }
    }

    #[test]
    fn versions_rise_and_follow_the_clock() {
        assert_eq!(next_slot_version(0, 1), 1024);
        assert_eq!(next_slot_version(5000, 1), 5001);
        let v = next_slot_version(0, 1_800_000_000_000);
        assert!(v > 1_800_000_000_000 * 1000 && v < 1 << 53);
        assert!(
            next_slot_version(v, 1_700_000_000_000) > v,
            "a clock going back never lowers it"
        );
    }

    /// Found by fuzzing (`fuzz/`, target `wire_slot_copy`): a restored copy whose record has
    /// version `u64::MAX` overflowed the owner's next version (a panic with overflow checks; a
    /// wrap to a version that loses every merge without).
    #[test]
    fn the_version_after_the_last_one_never_overflows() {
        // A `SlotCopy` of slot "" holding counter "" at value 0, version u64::MAX, generation 0,
        // no history, no rights. Then complete: false, complete_as_of_ms: None, source_epoch: 0, next:
        // None, owner_incarnation: 0, partitions: None.
        const COPY: [u8; 27] = [
            0, 1, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255, 255, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0,
        ];
        let copy: crate::wire::SlotCopy = postcard::from_bytes(&COPY).unwrap();
        let record = &copy.entries[0].1;
        assert_eq!(record.state.version, u64::MAX);
        assert_eq!(
            next_slot_version(record.state.version, 1_800_000_000_000),
            u64::MAX
        );
        assert_eq!(next_slot_version(u64::MAX - 1, 0), u64::MAX);
    }

    #[test]
    fn merge_reports_change() {
        let mut a = SlotState {
            value: 1,
            version: 1,
        };
        assert!(a.merge(SlotState {
            value: 5,
            version: 2
        }));
        assert!(!a.merge(SlotState {
            value: 9,
            version: 1
        }));
        assert_eq!(
            a,
            SlotState {
                value: 5,
                version: 2
            }
        );
    }

    #[test]
    fn overflow_is_refused_and_changes_nothing() {
        let top = SlotState {
            value: i64::MAX - 1,
            version: 7,
        };
        assert_eq!(top.apply(1, 8).unwrap().value, i64::MAX);
        assert_eq!(
            top.apply(2, 8),
            Err(ModelError::Overflow {
                value: i64::MAX - 1,
                delta: 2
            })
        );
        let bottom = SlotState {
            value: i64::MIN + 1,
            version: 3,
        };
        assert!(bottom.apply(-1, 4).is_ok());
        assert!(bottom.apply(-2, 4).is_err());
        assert!(bottom.apply(i64::MIN, 4).is_err());
        assert_eq!(top.version, 7);
    }

    #[test]
    fn a_sketch_changes_with_the_version_and_merges_with_the_record() {
        let mut owner = SlotRecord::default();
        let hash = crate::unique::hash_item("user-1");
        assert!(owner.add_item(hash, 10));
        assert_eq!(
            owner.state,
            SlotState {
                value: 1,
                version: 10
            }
        );
        assert!(!owner.add_item(hash, 11), "a repeated item changes nothing");
        assert_eq!(owner.state.version, 10);
        let older = owner.clone();
        assert!(owner.add_item(crate::unique::hash_item("user-2"), 12));
        assert_eq!(owner.state.value, 2);

        let mut copy = older.clone();
        assert!(copy.merge(&owner));
        assert_eq!(copy, owner, "the newer sketch comes with the newer version");
        assert!(!copy.merge(&older));
        assert_eq!(copy.uniques(), owner.uniques());
        let bytes = postcard::to_allocvec(&owner).unwrap();
        assert_eq!(postcard::from_bytes::<SlotRecord>(&bytes).unwrap(), owner);
    }

    /// The size every (counter, slot) of every tier pays (docs/architecture.md, "Memory per
    /// counter").
    #[test]
    fn a_slot_record_is_thirty_two_bytes() {
        assert_eq!(std::mem::size_of::<SlotRecord>(), 32);
    }

    #[test]
    fn a_read_takes_the_total_or_the_hits_in_its_window() {
        let mut window = crate::Window::default();
        window.record(10, 2, 60).unwrap();
        window.record(12, 5, 60).unwrap();
        let record = SlotRecord::sum(
            SlotState {
                value: 40,
                version: 1,
            },
            window,
        );
        assert_eq!(record.value_in(None), 40);
        let window = |seconds, at| Some(WindowQuery { seconds, at });
        assert_eq!(record.value_in(window(60, 12).as_ref()), 7);
        assert_eq!(
            record.value_in(window(2, 12).as_ref()),
            5,
            "10 is not after 12 - 2"
        );
        assert_eq!(record.value_in(window(60, 11).as_ref()), 2);
    }

    /// The record travels and is stored as the struct `{state, window, uniques, generation,
    /// history}`.
    #[test]
    fn records_keep_their_wire_shape() {
        let mut window = crate::Window::default();
        window.record(3, 1, 60).unwrap();
        let sum = SlotRecord::sum(
            SlotState {
                value: 1,
                version: 1,
            },
            window,
        );
        // value 1 (zigzag 2), version 1, one bucket (3, zigzag 1), no sketch, generation 0, no
        // history, no rights.
        let bytes = [2, 1, 1, 3, 2, 0, 0, 0, 0, 0, 0];
        assert_eq!(postcard::to_allocvec(&sum).unwrap(), bytes);
        assert_eq!(postcard::from_bytes::<SlotRecord>(&bytes).unwrap(), sum);

        let mut unique = SlotRecord::default();
        assert!(unique.add_item(crate::unique::hash_item("user-1"), 5));
        assert!(unique.window().buckets().is_empty());
        let encoded = postcard::to_allocvec(&unique).unwrap();
        assert_eq!(
            postcard::from_bytes::<SlotRecord>(&encoded).unwrap(),
            unique
        );
        // A sketch with a window beside it (no owner writes one) reads as the sketch alone.
        let mut both = encoded.clone();
        both.splice(2..3, [1, 3, 2]);
        let read = postcard::from_bytes::<SlotRecord>(&both).unwrap();
        assert_eq!(read.uniques(), unique.uniques());
        assert!(read.window().buckets().is_empty());
    }

    #[test]
    fn a_renewed_record_keeps_its_generation_and_size() {
        let generation = HlcTimestamp {
            physical_ms: 7,
            logical: 1,
            node: 2,
        };
        let mut window = crate::Window::default();
        window.record(3, 5, 60).unwrap();
        let old = SlotRecord::sum(
            SlotState {
                value: 5,
                version: 10,
            },
            window,
        );
        assert!(old.counts_in(HlcTimestamp::default()));
        assert!(!old.counts_in(generation));
        let renewed = old.renewed(generation, 11);
        assert_eq!(
            renewed.state,
            SlotState {
                value: 0,
                version: 11
            }
        );
        assert_eq!(renewed.generation(), generation);
        assert!(renewed.window().buckets().is_empty());
        assert!(renewed.counts_in(generation));
        let bytes = postcard::to_allocvec(&renewed).unwrap();
        assert_eq!(postcard::from_bytes::<SlotRecord>(&bytes).unwrap(), renewed);
        // Replaying the renewed record over the old one drops the old window.
        let mut replayed = old.clone();
        assert!(replayed.apply_logged(renewed.clone()));
        assert_eq!(replayed, renewed);
        let mut unique = SlotRecord::default();
        unique.add_item(crate::unique::hash_item("a"), 1);
        let unique = unique.renewed(generation, 2);
        assert_eq!(unique.uniques().map(|s| s.count()), Some(0));
        assert_eq!(std::mem::size_of::<SlotRecord>(), 32);
    }

    /// A logged change carries its slot's whole ledger, or none when the group left it as it
    /// was: replaying one without keeps the ledger; a new generation starts without one.
    #[test]
    fn replayed_changes_keep_the_ledger_of_rights_within_a_generation() {
        let state = |version| SlotState { value: 1, version };
        let mut ledger = RightsLedger::default();
        ledger.give(&crate::SlotId::new("A", 1), crate::Room { up: 3, down: 0 });
        let mut record = SlotRecord::from(state(1));
        let mut with = SlotRecord::from(state(2));
        with.set_rights(ledger.clone());
        let bytes = postcard::to_allocvec(&with).unwrap();
        assert_eq!(postcard::from_bytes::<SlotRecord>(&bytes).unwrap(), with);
        assert!(record.apply_logged(with));
        assert_eq!(record.rights(), &ledger);
        assert!(record.apply_logged(SlotRecord::from(state(3))));
        assert_eq!(
            record.rights(),
            &ledger,
            "a change without a ledger keeps it"
        );
        let renewed = record.renewed(
            HlcTimestamp {
                physical_ms: 9,
                logical: 0,
                node: 0,
            },
            4,
        );
        assert!(renewed.rights().is_empty());
    }

    /// A zero record of a delete's generation goes with the delete, unless it holds transfers
    /// of rights: what its slot gave or took in counts once the counter is made again.
    #[test]
    fn a_record_with_transfers_of_rights_outlives_the_delete_of_its_generation() {
        let generation = HlcTimestamp {
            physical_ms: 9,
            logical: 0,
            node: 0,
        };
        let zero = SlotRecord::from(SlotState::default()).renewed(generation, 4);
        assert!(zero.wiped_by(generation));
        let mut gave = zero.clone();
        let mut ledger = RightsLedger::default();
        ledger.give(&crate::SlotId::new("A", 1), crate::Room { up: 1, down: 0 });
        gave.set_rights(ledger);
        assert!(gave.holds_nothing(), "no value, hits or items");
        assert!(!gave.wiped_by(generation), "its ledger counts");
        let later = HlcTimestamp {
            physical_ms: 10,
            ..generation
        };
        assert!(
            gave.wiped_by(later),
            "a newer generation starts every ledger again"
        );
    }

    /// What history adds to a record (docs/architecture.md, "Memory per counter"): one box
    /// shared with the generation, a rollup per level, 16 bytes per bucket.
    #[test]
    fn the_history_box_and_rollups_have_their_stated_sizes() {
        assert_eq!(std::mem::size_of::<Extra>(), 64);
        assert_eq!(std::mem::size_of::<Rollup>(), 24);
        assert_eq!(std::mem::size_of::<(u64, i64)>(), 16);
    }
}
