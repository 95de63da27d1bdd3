//! Top-K trends and trending counters of this datacenter: `GET /topk` and `GET /trending`,
//! answered from the [`geocount_sync::TopIndex`] its slot copies keep up to date.
//!
//! - All-time rankings and the live window walk the index's leaders from the top; other
//!   windows (and answers the leaders do not hold) scan every counter's copies, exactly, at
//!   request time, off the runtime and a run of counters per hold of the replica's lock
//!   ([`geocount_sync::Scans`]).
//! - Unique counters are left out (their values are estimates of distinct items).
//! - The answer carries the datacenter's staleness (the worst of its slots') like a read.

use geocount_http::TopQuery;
use geocount_http::routing::WindowQuery;
use geocount_sync::{Answer, Ranked, Replica, Scope, worst_staleness};
use serde::Serialize;

use super::state::slot_staleness;

/// The answer to `GET /topk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopAnswer {
    /// The counters, highest first (ties by id ascending).
    pub top: Vec<Ranked>,
    /// The most asked for.
    pub k: usize,
    /// The id prefix asked for.
    pub prefix: String,
    /// The window ranked by, when one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowQuery>,
    /// The datacenter's staleness (`None` if any slot was never heard).
    pub staleness_ms: Option<u64>,
    /// Whether every slot was heard.
    pub complete: bool,
}

/// The answer to `GET /trending`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrendingAnswer {
    /// The configured prefix asked for.
    pub prefix: String,
    /// Its threshold: the least count in the window that trends.
    pub threshold: i64,
    /// The window counted: `[trending] window_seconds` ending now.
    pub window: WindowQuery,
    /// Every counter with the prefix at or over the threshold, highest first.
    pub trending: Vec<Ranked>,
    /// The datacenter's staleness (`None` if any slot was never heard).
    pub staleness_ms: Option<u64>,
    /// Whether every slot was heard.
    pub complete: bool,
}

/// The ranking of counters with `prefix` counting at least `min_value`, all-time or in
/// `window`: the datacenter's K best, or the scan that finds them.
pub fn ranking(
    replica: &Replica,
    prefix: &str,
    k: usize,
    min_value: Option<i128>,
    window: Option<WindowQuery>,
) -> Answer {
    let mut index = replica.copies.top_index().expect("indexed at start");
    index.rank(&[Scope::All], prefix, k, min_value, window, &replica.copies)
}

/// The answer to `query` ranked as `lists` ([`ranking`]), at `now_ms`.
pub fn top_k(
    replica: &Replica,
    slots: usize,
    query: TopQuery,
    mut lists: Vec<Vec<Ranked>>,
    now_ms: u64,
) -> TopAnswer {
    let staleness_ms = worst_staleness(slot_staleness(replica, slots, now_ms));
    TopAnswer {
        top: lists.pop().unwrap_or_default(),
        k: query.k,
        prefix: query.prefix,
        window: query.window,
        staleness_ms,
        complete: staleness_ms.is_some(),
    }
}

/// The counters starting with `prefix` whose hits in `window` reach `threshold`, ranked as
/// `lists` ([`ranking`]), at `now_ms`.
pub fn trending(
    replica: &Replica,
    slots: usize,
    (prefix, threshold): (String, i64),
    window: WindowQuery,
    mut lists: Vec<Vec<Ranked>>,
    now_ms: u64,
) -> TrendingAnswer {
    let staleness_ms = worst_staleness(slot_staleness(replica, slots, now_ms));
    TrendingAnswer {
        prefix,
        threshold,
        window,
        trending: lists.pop().unwrap_or_default(),
        staleness_ms,
        complete: staleness_ms.is_some(),
    }
}
