//! Rolling windows: the per-second hit counts of one slot of one counter (the hit counter of the
//! design notes).
//!
//! A [`Window`] keeps one bucket per second that saw a hit, covering the counter's window length
//! back from the newest timestamp the slot has seen. Hits may arrive out of order: a hit lands in
//! its own second's bucket; a hit older than the window (relative to that newest timestamp) is
//! refused by [`Window::record`] so the caller can count it, never folded into a wrong bucket.
//! Only seconds that saw hits take space, so a quiet counter costs nothing and a busy one at most
//! one bucket per second of its window.

use std::fmt;
use std::ops::Deref;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};
use smallvec::SmallVec;
use thin_vec::ThinVec;

use crate::ModelError;

/// Per-second buckets, oldest first: `(unix second, hits)`.
///
/// A window read from the wire must keep that order, one bucket per second (strictly rising
/// seconds): [`Window::sum`] and [`Window::record`] search the buckets by second, so a decoded
/// window with buckets out of order or repeated is refused.
///
/// 16 bytes: one bucket is kept inline (most counters' windows hold one second), so a window
/// costs no heap block of its own until a second bucket arrives. Every slot record of every
/// tier holds one, so its size is a large part of the memory per counter (docs/architecture.md,
/// "Memory per counter").
#[derive(Clone, Default, Deserialize)]
#[serde(try_from = "EncodedWindow")]
pub struct Window {
    buckets: Buckets,
}

/// How a [`Window`] holds its buckets. Kept canonical ([`Buckets::normalize`]): `Many` only
/// for two buckets or more, or for one whose second does not fit 32 bits.
#[derive(Clone, Default)]
enum Buckets {
    #[default]
    Empty,
    /// One bucket of a second below 2^32 (every unix second until the year 2106): the second
    /// in 32 bits leaves room for the tag in 16 bytes.
    One { second: u32, hits: i64 },
    /// The buckets in one heap block, its length and capacity in the block (a thin pointer).
    Many(ThinVec<(u64, i64)>),
}

impl Buckets {
    /// One bucket, inline when its second fits.
    fn single(second: u64, hits: i64) -> Self {
        match u32::try_from(second) {
            Ok(second) => Buckets::One { second, hits },
            Err(_) => {
                let mut many = ThinVec::with_capacity(1);
                many.push((second, hits));
                Buckets::Many(many)
            }
        }
    }

    /// Buckets already in rising order.
    fn from_sorted(buckets: &[(u64, i64)]) -> Self {
        match buckets {
            [] => Buckets::Empty,
            [(second, hits)] => Buckets::single(*second, *hits),
            _ => Buckets::Many(ThinVec::from(buckets)),
        }
    }

    /// The buckets in a heap block, moving an inline one there first.
    fn make_many(&mut self) -> &mut ThinVec<(u64, i64)> {
        if !matches!(self, Buckets::Many(_)) {
            let mut many = ThinVec::with_capacity(4);
            if let Buckets::One { second, hits } = *self {
                many.push((u64::from(second), hits));
            }
            *self = Buckets::Many(many);
        }
        match self {
            Buckets::Many(many) => many,
            Buckets::Empty | Buckets::One { .. } => unreachable!("made many above"),
        }
    }

    /// Back inline (freeing the block) when at most one bucket is left.
    fn normalize(&mut self) {
        if let Buckets::Many(many) = self
            && many.len() <= 1
        {
            match many.first() {
                None => *self = Buckets::Empty,
                Some(&(second, hits)) => {
                    if let Ok(second) = u32::try_from(second) {
                        *self = Buckets::One { second, hits };
                    }
                }
            }
        }
    }
}

/// A window's buckets, oldest first, as a slice ([`Window::buckets`]).
#[derive(Clone, Copy)]
pub struct BucketSlice<'a> {
    inline: Option<(u64, i64)>,
    heap: &'a [(u64, i64)],
}

impl Deref for BucketSlice<'_> {
    type Target = [(u64, i64)];

    fn deref(&self) -> &[(u64, i64)] {
        match &self.inline {
            Some(bucket) => std::slice::from_ref(bucket),
            None => self.heap,
        }
    }
}

impl fmt::Debug for BucketSlice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl fmt::Debug for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window")
            .field("buckets", &self.buckets())
            .finish()
    }
}

impl PartialEq for Window {
    fn eq(&self, other: &Self) -> bool {
        *self.buckets() == *other.buckets()
    }
}

impl Eq for Window {}

/// The same shape as ever on the wire: a struct whose one field `buckets` is the sequence of
/// `(second, hits)`.
impl Serialize for Window {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut window = serializer.serialize_struct("Window", 1)?;
        window.serialize_field("buckets", &*self.buckets())?;
        window.end()
    }
}

/// How a [`Window`] is read back before its order is checked (the same shape as `Window`).
#[derive(Deserialize)]
struct EncodedWindow {
    buckets: SmallVec<[(u64, i64); 1]>,
}

impl TryFrom<EncodedWindow> for Window {
    type Error = ModelError;

    fn try_from(encoded: EncodedWindow) -> Result<Self, ModelError> {
        let buckets = encoded.buckets;
        if let Some(pair) = buckets.windows(2).find(|pair| pair[0].0 >= pair[1].0) {
            return Err(ModelError::InvalidWindow(format!(
                "bucket second {} follows {}: buckets must be in rising order, one per second",
                pair[1].0, pair[0].0
            )));
        }
        Ok(Self {
            buckets: Buckets::from_sorted(&buckets),
        })
    }
}

/// What [`Window::record`] did with a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Counted in its second's bucket.
    Counted,
    /// Older than the window: not counted (the running total still is).
    TooOld,
}

impl Window {
    /// A window with no bucket.
    pub const EMPTY: Window = Window {
        buckets: Buckets::Empty,
    };

    /// The newest second with a bucket.
    pub fn newest(&self) -> Option<u64> {
        match &self.buckets {
            Buckets::Empty => None,
            Buckets::One { second, .. } => Some(u64::from(*second)),
            Buckets::Many(many) => many.last().map(|(second, _)| *second),
        }
    }

    /// The buckets, oldest first.
    pub fn buckets(&self) -> BucketSlice<'_> {
        match &self.buckets {
            Buckets::Empty => BucketSlice {
                inline: None,
                heap: &[],
            },
            Buckets::One { second, hits } => BucketSlice {
                inline: Some((u64::from(*second), *hits)),
                heap: &[],
            },
            Buckets::Many(many) => BucketSlice {
                inline: None,
                heap: many,
            },
        }
    }

    /// Adds `delta` hits at unix second `second` to a window of `length` seconds, then drops the
    /// buckets that fell out of it. A hit at or before `newest - length` is [`Recorded::TooOld`];
    /// a bucket that would overflow is refused and nothing changes.
    pub fn record(&mut self, second: u64, delta: i64, length: u32) -> Result<Recorded, ModelError> {
        // The common case, a hit in the newest second: nothing moves and nothing expires.
        let newest = match &mut self.buckets {
            Buckets::One {
                second: newest,
                hits,
            } if u64::from(*newest) == second => Some(hits),
            Buckets::Many(many) => many
                .last_mut()
                .filter(|(newest, _)| *newest == second)
                .map(|(_, hits)| hits),
            _ => None,
        };
        if let Some(hits) = newest {
            *hits = crate::error::checked_add(*hits, delta)?;
            return Ok(Recorded::Counted);
        }
        let mut change = WindowChange::new(self);
        let recorded = change.record(self, second, delta, length)?;
        self.apply(&change, length);
        Ok(recorded)
    }

    /// Applies hits gathered by a [`WindowChange`] made against this window: sets the buckets it
    /// changed, then drops those that fell out of a window of `length` seconds.
    pub fn apply(&mut self, change: &WindowChange, length: u32) {
        self.set_each(&change.buckets);
        if let Some(newest) = change.newest {
            let oldest_kept = newest.saturating_sub(u64::from(length)) + 1;
            match &mut self.buckets {
                Buckets::Empty => {}
                Buckets::One { second, .. } => {
                    if u64::from(*second) < oldest_kept {
                        self.buckets = Buckets::Empty;
                    }
                }
                Buckets::Many(many) => {
                    // Usually nothing or only the oldest bucket expires: look at it before
                    // searching.
                    let expired = match many.first() {
                        Some((oldest, _)) if *oldest >= oldest_kept => 0,
                        _ => many.partition_point(|(s, _)| *s < oldest_kept),
                    };
                    if expired > 0 {
                        many.drain(..expired);
                    }
                }
            }
        }
        self.buckets.normalize();
    }

    /// Sets each of `changed`'s buckets here to its hits (replaying a logged change, whose
    /// buckets carry their totals, so replaying it twice changes nothing more). Buckets that
    /// fell out of the window stay until the next [`record`](Self::record) drops them; reads
    /// never count them.
    pub fn set_buckets(&mut self, changed: &Window) {
        self.set_each(&changed.buckets());
        self.buckets.normalize();
    }

    /// Drops the buckets that fell out of a window of `length` seconds back from the newest
    /// (what [`apply`](Self::apply) drops; a replayed rollup knows its length).
    pub fn expire(&mut self, length: u32) {
        let change = WindowChange::new(self);
        self.apply(&change, length);
    }

    /// Sets the bucket of each `(second, hits)` to `hits`, keeping the buckets in order.
    fn set_each(&mut self, buckets: &[(u64, i64)]) {
        for &(second, hits) in buckets {
            match &mut self.buckets {
                Buckets::Empty => self.buckets = Buckets::single(second, hits),
                Buckets::One {
                    second: held,
                    hits: held_hits,
                } if u64::from(*held) == second => *held_hits = hits,
                _ => {
                    let many = self.buckets.make_many();
                    match bucket_of(many, second) {
                        Ok(at) => many[at].1 = hits,
                        Err(at) => many.insert(at, (second, hits)),
                    }
                }
            }
        }
    }

    /// The hits with `at - seconds < t <= at`.
    pub fn sum(&self, seconds: u32, at: u64) -> i128 {
        let after = at.saturating_sub(u64::from(seconds));
        let buckets = self.buckets();
        let start = buckets.partition_point(|(s, _)| *s <= after);
        let end = buckets.partition_point(|(s, _)| *s <= at);
        buckets[start..end]
            .iter()
            .map(|(_, hits)| i128::from(*hits))
            .sum()
    }
}

/// The span a read asks of a rolling window: `window=S&at=T` asks for the hits with
/// `T - S < t <= T` ([`Window::sum`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WindowQuery {
    /// The window length `S`, in seconds.
    pub seconds: u32,
    /// The end of the window `T`, in unix seconds.
    pub at: u64,
}

/// Where the bucket of `second` is in `buckets` (by second, rising), as
/// [`slice::binary_search_by_key`] answers. Hits nearly always land in the newest second or a
/// new one, so the newest bucket is looked at first: a busy counter's window holds hundreds
/// of buckets, and a search through them costs several cache misses.
fn bucket_of(buckets: &[(u64, i64)], second: u64) -> Result<usize, usize> {
    match buckets.last() {
        None => Err(0),
        Some((newest, _)) if *newest == second => Ok(buckets.len() - 1),
        Some((newest, _)) if *newest < second => Err(buckets.len()),
        Some(_) => buckets.binary_search_by_key(&second, |(s, _)| *s),
    }
}

/// Hits recorded against a window without changing it: the buckets they change, each with its
/// new total, to be applied later with [`Window::apply`]. The commit loop stages a group's hits
/// this way, so the committed window is neither copied nor changed until the group is durable,
/// and the same buckets are what the log keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowChange {
    /// The newest second of the window with these hits.
    newest: Option<u64>,
    /// The changed buckets with their new totals, in the order first changed.
    buckets: SmallVec<[(u64, i64); 2]>,
    /// How many of them the base window does not hold (what the change adds to its size).
    added: usize,
}

impl WindowChange {
    /// No hits yet, against `base`.
    pub fn new(base: &Window) -> Self {
        Self {
            newest: base.newest(),
            buckets: SmallVec::new(),
            added: 0,
        }
    }

    /// How many buckets the change adds to its base window (before any expire).
    pub fn added(&self) -> usize {
        self.added
    }

    /// The hits of `second` with this change applied to `base`.
    pub fn hits_at(&self, base: &Window, second: u64) -> i64 {
        match self.buckets.iter().find(|(s, _)| *s == second) {
            Some((_, hits)) => *hits,
            None => {
                let held = base.buckets();
                bucket_of(&held, second).map_or(0, |at| held[at].1)
            }
        }
    }

    /// Whether recording a hit at `second` against `base` would add a bucket: a second
    /// neither changed yet nor held, and not too old for a window of `length` seconds.
    pub fn would_add(&self, base: &Window, second: u64, length: u32) -> bool {
        let newest = self.newest.unwrap_or(second).max(second);
        let oldest_kept = newest.saturating_sub(u64::from(length)) + 1;
        second >= oldest_kept
            && !self.buckets.iter().any(|(s, _)| *s == second)
            && bucket_of(&base.buckets(), second).is_err()
    }

    /// Records `delta` hits at `second` against `base` (the window this change was made for)
    /// as [`Window::record`] would; a bucket that would overflow is refused and nothing changes.
    pub fn record(
        &mut self,
        base: &Window,
        second: u64,
        delta: i64,
        length: u32,
    ) -> Result<Recorded, ModelError> {
        let newest = self.newest.unwrap_or(second).max(second);
        let oldest_kept = newest.saturating_sub(u64::from(length)) + 1;
        if second < oldest_kept {
            return Ok(Recorded::TooOld);
        }
        match self.buckets.iter_mut().find(|(s, _)| *s == second) {
            Some((_, hits)) => *hits = crate::error::checked_add(*hits, delta)?,
            None => {
                let held = base.buckets();
                let at = bucket_of(&held, second);
                let before = at.map_or(0, |at| held[at].1);
                let hits = crate::error::checked_add(before, delta)?;
                self.buckets.push((second, hits));
                self.added += usize::from(at.is_err());
            }
        }
        self.newest = Some(newest);
        Ok(Recorded::Counted)
    }

    /// The changed buckets as a window, oldest first: what the log keeps of the change.
    /// Replaying it with [`Window::set_buckets`] sets them again.
    pub fn changed(&self) -> Window {
        let mut buckets = self.buckets.clone();
        buckets.sort_unstable_by_key(|(second, _)| *second);
        Window {
            buckets: Buckets::from_sorted(&buckets),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(hits: &[(u64, i64)], length: u32) -> Window {
        let mut w = Window::default();
        for (second, delta) in hits {
            w.record(*second, *delta, length).unwrap();
        }
        w
    }

    #[test]
    fn the_design_notes_example() {
        let mut w = window(&[(1, 1), (2, 1), (3, 1)], 300);
        assert_eq!(w.sum(300, 4), 3);
        w.record(300, 1, 300).unwrap();
        assert_eq!(w.sum(300, 300), 4);
        assert_eq!(w.sum(300, 301), 3, "the hit at 1 left the window");
    }

    #[test]
    fn equal_timestamps_share_a_bucket() {
        let w = window(&[(10, 1), (10, 4), (10, -2)], 60);
        assert_eq!(*w.buckets(), [(10, 3)]);
        assert_eq!(w.sum(1, 10), 3);
        assert_eq!(w.sum(1, 9), 0);
    }

    #[test]
    fn out_of_order_hits_land_in_their_own_second() {
        let w = window(&[(100, 1), (98, 2), (99, 3), (100, 1)], 60);
        assert_eq!(*w.buckets(), [(98, 2), (99, 3), (100, 2)]);
        assert_eq!(w.sum(2, 100), 5, "99 and 100");
    }

    #[test]
    fn hits_older_than_the_window_are_refused_not_misplaced() {
        let mut w = window(&[(1000, 1)], 300);
        assert_eq!(w.record(700, 5, 300).unwrap(), Recorded::TooOld);
        assert_eq!(w.record(701, 5, 300).unwrap(), Recorded::Counted);
        assert_eq!(w.sum(300, 1000), 6);
        assert_eq!(*w.buckets(), [(701, 5), (1000, 1)]);
    }

    #[test]
    fn a_gap_longer_than_the_window_empties_it() {
        let mut w = window(&[(10, 1), (11, 1), (12, 1)], 5);
        w.record(1000, 2, 5).unwrap();
        assert_eq!(*w.buckets(), [(1000, 2)], "everything before 996 is gone");
        assert_eq!(w.sum(5, 1000), 2);
        assert_eq!(w.sum(5, 12), 0);
    }

    #[test]
    fn the_window_slides_bucket_by_bucket() {
        // Wrap-around of the ring: one hit per second for three window lengths.
        let mut w = Window::default();
        for second in 1..=30 {
            w.record(second, 1, 10).unwrap();
            assert!(w.buckets().len() <= 10);
            assert_eq!(w.sum(10, second), second.min(10) as i128);
        }
        assert_eq!(w.buckets().first(), Some(&(21, 1)));
        assert_eq!(w.sum(3, 30), 3);
        assert_eq!(w.sum(10, 40), 0, "nothing in (30, 40]");
    }

    /// Hostile input (the `wire_sync_page` and `wire_slot_copy`
    /// fuzz targets): a window decoded from a peer must keep its buckets in rising order, one
    /// per second, or every search by second ([`Window::sum`], [`Window::record`]) answers
    /// wrongly.
    #[test]
    fn decoded_windows_with_buckets_out_of_order_or_repeated_are_refused() {
        // postcard: the bucket count, then each (second, zigzag hits) as varints.
        let ordered = [2, 3, 2, 5, 4];
        let window: Window = postcard::from_bytes(&ordered).unwrap();
        assert_eq!(*window.buckets(), [(3, 1), (5, 2)]);
        assert_eq!(postcard::to_allocvec(&window).unwrap(), ordered);
        let backwards = [2, 5, 2, 3, 2];
        let repeated = [2, 5, 2, 5, 2];
        for bytes in [backwards, repeated] {
            let error = postcard::from_bytes::<Window>(&bytes).unwrap_err();
            assert!(matches!(error, postcard::Error::SerdeDeCustom), "{error:?}");
        }
        // Inside a slot record, as pages and slot copies carry it: state (value 1, version 1),
        // the backwards window, no sketch.
        let record = [2, 1, 2, 5, 2, 3, 2, 0];
        assert!(postcard::from_bytes::<crate::SlotRecord>(&record).is_err());
        let json = serde_json::from_str::<Window>(r#"{"buckets":[[9,1],[8,1]]}"#);
        assert!(json.unwrap_err().to_string().contains("rising order"));
    }

    #[test]
    fn a_staged_change_applies_and_its_logged_part_replays_onto_an_older_copy() {
        let mut owner = window(&[(100, 1), (101, 2)], 60);
        let older = owner.clone();
        let mut change = WindowChange::new(&owner);
        change.record(&owner, 103, 4, 60).unwrap();
        change.record(&owner, 101, 3, 60).unwrap();
        assert_eq!(change.record(&owner, 43, 1, 60).unwrap(), Recorded::TooOld);
        let logged = change.changed();
        assert_eq!(*logged.buckets(), [(101, 5), (103, 4)]);
        owner.apply(&change, 60);
        assert_eq!(*owner.buckets(), [(100, 1), (101, 5), (103, 4)]);
        let mut replayed = older.clone();
        replayed.set_buckets(&logged);
        assert_eq!(replayed, owner);
        replayed.set_buckets(&logged);
        assert_eq!(replayed, owner, "replaying twice changes nothing more");
    }

    proptest::proptest! {
        /// The newest-bucket shortcut finds what a binary search finds.
        #[test]
        fn bucket_of_agrees_with_a_binary_search(
            seconds in proptest::collection::btree_set(0u64..100, 0..20),
            second in 0u64..110,
        ) {
            let buckets: Vec<(u64, i64)> = seconds.into_iter().map(|s| (s, 1)).collect();
            proptest::prop_assert_eq!(
                bucket_of(&buckets, second),
                buckets.binary_search_by_key(&second, |(s, _)| *s)
            );
        }

        /// Any hits, in any order, leave the buckets a plain map of second → hits would hold:
        /// near second 0 and across 2^32, where a lone bucket stops fitting inline.
        #[test]
        fn recorded_hits_match_a_map_of_seconds(
            hits in proptest::collection::vec((0u64..200, -5i64..5), 0..60),
            length in 1u32..50,
            base in proptest::prop_oneof![
                proptest::strategy::Just(0u64),
                proptest::strategy::Just(u64::from(u32::MAX) - 100),
            ],
        ) {
            let mut window = Window::default();
            let mut model = std::collections::BTreeMap::new();
            let mut newest: Option<u64> = None;
            for (second, delta) in hits {
                let second = base + second;
                let top = newest.map_or(second, |n| n.max(second));
                let oldest_kept = top.saturating_sub(u64::from(length)) + 1;
                let expected = if second < oldest_kept {
                    Recorded::TooOld
                } else {
                    *model.entry(second).or_insert(0) += delta;
                    model.retain(|s, _| *s >= oldest_kept);
                    newest = Some(top);
                    Recorded::Counted
                };
                proptest::prop_assert_eq!(window.record(second, delta, length).unwrap(), expected);
                let buckets: Vec<(u64, i64)> = model.iter().map(|(s, h)| (*s, *h)).collect();
                proptest::prop_assert_eq!(&*window.buckets(), &buckets[..]);
            }
        }
    }

    /// The size every slot record of every tier pays (docs/architecture.md, "Memory per counter").
    #[test]
    fn a_window_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Window>(), 16);
    }

    /// A lone bucket whose second needs more than 32 bits is held on the heap, and reads,
    /// compares, encodes and decodes like one held inline.
    #[test]
    fn a_lone_bucket_past_2106_reads_like_any_other() {
        let far = u64::from(u32::MAX) + 7;
        let mut w = window(&[(far, 2)], 60);
        assert_eq!(*w.buckets(), [(far, 2)]);
        assert_eq!(w.newest(), Some(far));
        let decoded: Window = postcard::from_bytes(&postcard::to_allocvec(&w).unwrap()).unwrap();
        assert_eq!(decoded, w);
        w.record(far + 100, 1, 60).unwrap();
        assert_eq!(*w.buckets(), [(far + 100, 1)], "the old one expired");
        assert_eq!(w.sum(60, far + 100), 1);
    }

    /// A window shrinks back inline once its older buckets expire, and a replay that leaves
    /// one bucket does too.
    #[test]
    fn windows_go_back_inline_when_one_bucket_is_left() {
        let mut w = window(&[(10, 1), (11, 2), (12, 3)], 5);
        assert!(matches!(w.buckets, Buckets::Many(_)));
        w.record(100, 4, 5).unwrap();
        assert!(matches!(
            w.buckets,
            Buckets::One {
                second: 100,
                hits: 4
            }
        ));
        let mut copy = Window::default();
        copy.set_buckets(&w);
        assert!(matches!(
            copy.buckets,
            Buckets::One {
                second: 100,
                hits: 4
            }
        ));
        assert_eq!(copy, w);
    }

    #[test]
    fn a_bucket_overflow_is_refused_and_changes_nothing() {
        let mut w = window(&[(5, i64::MAX)], 10);
        assert!(w.record(5, 1, 10).is_err());
        assert_eq!(*w.buckets(), [(5, i64::MAX)]);
    }
}
