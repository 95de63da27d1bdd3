//! What every ranking shares: its scopes, its answers, the counters it ranks, and the hits of a
//! window. Both the kept index ([`crate::index`]) and full scans ([`crate::scan`]) build on it.

use geocount_model::{HlcTimestamp, SlotRecord, Window};
use serde::Serialize;

use geocount_model::WindowQuery;

/// Which totals a ranking orders: over every slot the index covers, or one group's slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every slot (a datacenter aggregator's datacenter, the global aggregator's world).
    All,
    /// The slots of group `n` (a datacenter, at the global tier).
    Group(usize),
}

/// One counter of a ranking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ranked {
    /// The counter's id.
    pub id: String,
    /// Its total, or its hits in the window asked for.
    pub value: i128,
}

/// The counters a ranking ranks, by their stable index: each one's id and slot copies.
/// Counters are only ever added, so an index keeps naming the same counter.
pub trait RankedCounters {
    /// How many counters there are: their indices are `0..len`.
    fn len(&self) -> usize;
    /// Whether there is none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Counter `index`'s id (empty when out of range).
    fn id(&self, index: usize) -> &str;
    /// Counter `index`'s copies, `(slot index, state)` (empty when out of range).
    fn records(&self, index: usize) -> &[(u16, SlotRecord)];
    /// The generation counter `index`'s records count from: one of an older generation reads
    /// as 0 with no hits (a reset or delete wiped it). `None` when the counter does not exist
    /// (deleted or expired): it ranks nowhere. By default every record counts.
    fn counts_from(&self, index: usize) -> Option<HlcTimestamp> {
        let _ = index;
        Some(HlcTimestamp::default())
    }
}

/// The window a record that does not count reads as: no hits.
static NO_HITS: Window = Window::EMPTY;

/// A counter's copies as a ranking counts them ([`RankedCounters::counts_from`]).
#[derive(Debug, Clone, Copy)]
pub struct Counted<'a> {
    /// Its copies, `(slot index, record)`.
    pub records: &'a [(u16, SlotRecord)],
    /// The generation its records count from; `None`: it does not exist, and counts nothing.
    pub from: Option<HlcTimestamp>,
}

impl<'a> Counted<'a> {
    /// `records`, every one counting.
    pub fn all(records: &'a [(u16, SlotRecord)]) -> Self {
        Self {
            records,
            from: Some(HlcTimestamp::default()),
        }
    }

    /// Counter `index` of `counters`, as its records count.
    pub fn of<C: RankedCounters + ?Sized>(counters: &'a C, index: usize) -> Self {
        Self {
            records: counters.records(index),
            from: counters.counts_from(index),
        }
    }

    /// Whether they are a unique counter's (they carry a sketch): ranked nowhere.
    pub(crate) fn is_unique(&self) -> bool {
        is_unique(self.records)
    }

    /// Each copy's slot, total and window as they count: a record of an older generation reads
    /// as 0 with no hits; a counter that does not exist has none.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u16, i64, &'a Window)> + use<'a> {
        let from = self.from;
        let records = if from.is_some() { self.records } else { &[] };
        records.iter().map(move |(slot, record)| {
            if from.is_some_and(|from| record.counts_in(from)) {
                (*slot, record.state.value, record.window())
            } else {
                (*slot, 0, &NO_HITS)
            }
        })
    }
}

/// Whether counter copies `slots` are a unique counter's (they carry a sketch).
pub(crate) fn is_unique(slots: &[(u16, SlotRecord)]) -> bool {
    slots.iter().any(|(_, record)| record.uniques().is_some())
}

/// The range of `buckets` (by second, rising) in `window`: `(start, end)`, empty when
/// `start == end`; `end` is the first bucket ahead of the window's end.
pub(crate) fn in_window(buckets: &[(u64, i64)], window: WindowQuery) -> (usize, usize) {
    let after = window.at.saturating_sub(u64::from(window.seconds));
    let start = buckets.partition_point(|(s, _)| *s <= after);
    let end = buckets.partition_point(|(s, _)| *s <= window.at);
    (start, end)
}

/// The hits of `buckets`, summed without overflow.
pub(crate) fn sum_hits(buckets: &[(u64, i64)]) -> i128 {
    buckets.iter().map(|(_, hits)| i128::from(*hits)).sum()
}

/// The hits of `w` in `window`, or `None` when it has no bucket there.
pub(crate) fn hits_in(w: &Window, window: WindowQuery) -> Option<i128> {
    let buckets = w.buckets();
    let (start, end) = in_window(&buckets, window);
    (start < end).then(|| sum_hits(&buckets[start..end]))
}
