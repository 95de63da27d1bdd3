//! Rolling windows: the per-second hit counts of one slot of one counter (the hit counter of the
//! design notes).
//!
//! A [`Window`] keeps one bucket per second that saw a hit, covering the counter's window length
//! back from the newest timestamp the slot has seen. Hits may arrive out of order: a hit lands in
//! its own second's bucket; a hit older than the window (relative to that newest timestamp) is
//! refused by [`Window::record`] so the caller can count it, never folded into a wrong bucket.
//! Only seconds that saw hits take space, so a quiet counter costs nothing and a busy one at most
//! one bucket per second of its window.

use serde::{Deserialize, Serialize};

use crate::ModelError;

/// Per-second buckets, oldest first: `(unix second, hits)`.
///
/// A window read from the wire must keep that order, one bucket per second (strictly rising
/// seconds): [`Window::sum`] and [`Window::record`] search the buckets by second, so a decoded
/// window with buckets out of order or repeated is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "EncodedWindow")]
pub struct Window {
    buckets: Vec<(u64, i64)>,
}

/// How a [`Window`] is read back before its order is checked (the same shape as `Window`).
#[derive(Deserialize)]
struct EncodedWindow {
    buckets: Vec<(u64, i64)>,
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
        Ok(Self { buckets })
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
    /// The newest second with a bucket.
    pub fn newest(&self) -> Option<u64> {
        self.buckets.last().map(|(second, _)| *second)
    }

    /// The buckets, oldest first.
    pub fn buckets(&self) -> &[(u64, i64)] {
        &self.buckets
    }

    /// Adds `delta` hits at unix second `second` to a window of `length` seconds, then drops the
    /// buckets that fell out of it. A hit at or before `newest - length` is [`Recorded::TooOld`];
    /// a bucket that would overflow is refused and nothing changes.
    pub fn record(&mut self, second: u64, delta: i64, length: u32) -> Result<Recorded, ModelError> {
        let newest = self.newest().unwrap_or(second).max(second);
        let oldest_kept = newest.saturating_sub(u64::from(length)) + 1;
        if second < oldest_kept {
            return Ok(Recorded::TooOld);
        }
        let at = self.buckets.partition_point(|(s, _)| *s < second);
        match self.buckets.get_mut(at) {
            Some((s, hits)) if *s == second => {
                *hits = crate::slot::checked_add(*hits, delta)?;
            }
            _ => self.buckets.insert(at, (second, delta)),
        }
        let expired = self.buckets.partition_point(|(s, _)| *s < oldest_kept);
        self.buckets.drain(..expired);
        Ok(Recorded::Counted)
    }

    /// The hits with `at - seconds < t <= at`.
    pub fn sum(&self, seconds: u32, at: u64) -> i128 {
        let after = at.saturating_sub(u64::from(seconds));
        let start = self.buckets.partition_point(|(s, _)| *s <= after);
        let end = self.buckets.partition_point(|(s, _)| *s <= at);
        self.buckets[start..end]
            .iter()
            .map(|(_, hits)| i128::from(*hits))
            .sum()
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
        assert_eq!(w.buckets(), &[(10, 3)]);
        assert_eq!(w.sum(1, 10), 3);
        assert_eq!(w.sum(1, 9), 0);
    }

    #[test]
    fn out_of_order_hits_land_in_their_own_second() {
        let w = window(&[(100, 1), (98, 2), (99, 3), (100, 1)], 60);
        assert_eq!(w.buckets(), &[(98, 2), (99, 3), (100, 2)]);
        assert_eq!(w.sum(2, 100), 5, "99 and 100");
    }

    #[test]
    fn hits_older_than_the_window_are_refused_not_misplaced() {
        let mut w = window(&[(1000, 1)], 300);
        assert_eq!(w.record(700, 5, 300).unwrap(), Recorded::TooOld);
        assert_eq!(w.record(701, 5, 300).unwrap(), Recorded::Counted);
        assert_eq!(w.sum(300, 1000), 6);
        assert_eq!(w.buckets(), &[(701, 5), (1000, 1)]);
    }

    #[test]
    fn a_gap_longer_than_the_window_empties_it() {
        let mut w = window(&[(10, 1), (11, 1), (12, 1)], 5);
        w.record(1000, 2, 5).unwrap();
        assert_eq!(w.buckets(), &[(1000, 2)], "everything before 996 is gone");
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

    /// Hostile input (issue #7, seen while writing the `wire_sync_page` and `wire_slot_copy`
    /// fuzz targets): a window decoded from a peer must keep its buckets in rising order, one
    /// per second, or every search by second ([`Window::sum`], [`Window::record`]) answers
    /// wrongly.
    #[test]
    fn decoded_windows_with_buckets_out_of_order_or_repeated_are_refused() {
        // postcard: the bucket count, then each (second, zigzag hits) as varints.
        let ordered = [2, 3, 2, 5, 4];
        let window: Window = postcard::from_bytes(&ordered).unwrap();
        assert_eq!(window.buckets(), &[(3, 1), (5, 2)]);
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
    fn a_bucket_overflow_is_refused_and_changes_nothing() {
        let mut w = window(&[(5, i64::MAX)], 10);
        assert!(w.record(5, 1, 10).is_err());
        assert_eq!(w.buckets(), &[(5, i64::MAX)]);
    }
}
