//! Top-K trends and trending counters of the world and of each datacenter: `GET /topk` and
//! `GET /trending`, answered from the [`geocount_sync::TopIndex`] over every slot this
//! aggregator holds (so the worldwide ranking is exact at this tier, not a merge of the
//! datacenters' own top lists), under the same staleness rules as a read.
//!
//! - A datacenter is stale when its staleness is unknown or above `max_staleness_ms`; stale
//!   datacenters refuse the answer (503 naming them) unless `allow_partial=true`, which answers
//!   with `complete: false` and ranks their last known values.
//! - A ranking the index's leaders cannot answer is a scan of every counter, run off the
//!   runtime a run of counters per hold of the replica's lock ([`geocount_sync::Scans`]).
//! - Unique counters are left out (their values are estimates of distinct items).

use geocount_http::TopQuery;
use geocount_http::routing::{Named, WindowQuery};
use geocount_sync::{Answer, Ranked, Replica, Scope, worst_staleness};
use serde::Serialize;

use super::parts::{DatacenterReading, DatacenterTop, DatacenterTrending, StaleRead};
use super::state::{empty_readings, named, stale_datacenters, stale_reasons};

/// The answer to the global `GET /topk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GlobalTop {
    /// The world's counters, highest first (ties by id ascending).
    pub top: Vec<Ranked>,
    /// The most asked for.
    pub k: usize,
    /// The id prefix asked for.
    pub prefix: String,
    /// The window ranked by, when one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowQuery>,
    /// The largest datacenter staleness (`None` if any was never complete).
    pub staleness_ms: Option<u64>,
    /// Whether no datacenter is stale.
    pub complete: bool,
    /// Each datacenter's own top counters, in topology order.
    pub datacenters: Named<DatacenterTop>,
}

/// The answer to the global `GET /trending`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GlobalTrending {
    /// The configured prefix asked for.
    pub prefix: String,
    /// Its threshold: the least count in the window that trends.
    pub threshold: i64,
    /// The window counted: `[trending] window_seconds` ending now.
    pub window: WindowQuery,
    /// Every counter with the prefix at or over the threshold worldwide, highest first.
    pub trending: Vec<Ranked>,
    /// The largest datacenter staleness (`None` if any was never complete).
    pub staleness_ms: Option<u64>,
    /// Whether no datacenter is stale.
    pub complete: bool,
    /// Each datacenter's own trending counters, in topology order.
    pub datacenters: Named<DatacenterTrending>,
}

/// How fresh a ranking must be: a datacenter staler than `max_staleness_ms` is stale, and
/// stale datacenters refuse the answer unless `allow_partial`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freshness {
    /// The staleness bound, in milliseconds.
    pub max_staleness_ms: u64,
    /// Whether stale datacenters give a partial answer rather than a refusal.
    pub allow_partial: bool,
}

/// The world's ranking, then each datacenter's: `k` counters with `prefix` counting at least
/// `min_value`, all-time or in `window`; or the scan that finds them.
pub fn rankings(
    replica: &Replica,
    datacenters: usize,
    prefix: &str,
    k: usize,
    min_value: Option<i128>,
    window: Option<WindowQuery>,
) -> Answer {
    let mut index = replica.copies.top_index().expect("indexed at start");
    let scopes: Vec<Scope> = std::iter::once(Scope::All)
        .chain((0..datacenters).map(Scope::Group))
        .collect();
    index.rank(&scopes, prefix, k, min_value, window, &replica.copies)
}

/// A ranking split into the world's and each datacenter's parts, with the staleness rules
/// applied.
struct Split<T> {
    world: Vec<Ranked>,
    parts: Named<T>,
    staleness_ms: Option<u64>,
    /// The stale datacenters' names.
    stale: Vec<String>,
    /// Why the answer is refused, when stale datacenters refuse it.
    refusal: Option<String>,
}

/// Splits `lists` (the world's, then each datacenter's, as [`rankings`] gives them) and
/// applies the staleness rules at `now_ms`.
fn split<T>(
    replica: &Replica,
    names: &[String],
    mut lists: Vec<Vec<Ranked>>,
    freshness: Freshness,
    now_ms: u64,
    part: impl Fn(Vec<Ranked>, &DatacenterReading) -> T,
) -> Split<T> {
    let readings = empty_readings(replica, now_ms);
    let world = lists.remove(0);
    let parts: Vec<T> = lists
        .into_iter()
        .zip(&readings)
        .map(|(list, reading)| part(list, reading))
        .collect();
    let stale = stale_datacenters(&readings, freshness.max_staleness_ms);
    let refusal = (!stale.is_empty() && !freshness.allow_partial)
        .then(|| stale_reasons(names, &readings, &stale, freshness.max_staleness_ms));
    Split {
        world,
        parts: named(names, parts),
        staleness_ms: worst_staleness(readings.iter().map(|r| r.staleness_ms)),
        stale: stale.into_iter().map(|dc| names[dc].clone()).collect(),
        refusal,
    }
}

impl<T> Split<T> {
    /// The refusal of a read with stale datacenters, if it is refused.
    fn refused(&mut self) -> Option<StaleRead<T>> {
        let error = self.refusal.take()?;
        Some(StaleRead {
            error,
            stale_datacenters: std::mem::take(&mut self.stale),
            datacenters: Named(std::mem::take(&mut self.parts.0)),
        })
    }
}

/// The world's and each datacenter's top counters for `query` at `now_ms`, ranked as `lists`
/// ([`rankings`]), or the refusal naming the stale datacenters.
pub fn top_k(
    replica: &Replica,
    names: &[String],
    (query, lists): (TopQuery, Vec<Vec<Ranked>>),
    freshness: Freshness,
    now_ms: u64,
) -> Result<GlobalTop, StaleRead<DatacenterTop>> {
    let mut split = split(replica, names, lists, freshness, now_ms, |top, r| {
        DatacenterTop {
            top,
            staleness_ms: r.staleness_ms,
            heard: r.heard,
        }
    });
    if let Some(refusal) = split.refused() {
        return Err(refusal);
    }
    Ok(GlobalTop {
        top: split.world,
        k: query.k,
        prefix: query.prefix,
        window: query.window,
        staleness_ms: split.staleness_ms,
        complete: split.stale.is_empty(),
        datacenters: split.parts,
    })
}

/// The world's and each datacenter's counters starting with `prefix` whose hits in `window`
/// reach `threshold`, ranked as `lists` ([`rankings`]), or the refusal naming the stale
/// datacenters.
pub fn trending(
    replica: &Replica,
    names: &[String],
    (prefix, threshold, lists): (String, i64, Vec<Vec<Ranked>>),
    window: WindowQuery,
    freshness: Freshness,
    now_ms: u64,
) -> Result<GlobalTrending, StaleRead<DatacenterTrending>> {
    let mut split = split(replica, names, lists, freshness, now_ms, |trending, r| {
        DatacenterTrending {
            trending,
            staleness_ms: r.staleness_ms,
            heard: r.heard,
        }
    });
    if let Some(refusal) = split.refused() {
        return Err(refusal);
    }
    Ok(GlobalTrending {
        prefix,
        threshold,
        window,
        trending: split.world,
        staleness_ms: split.staleness_ms,
        complete: split.stale.is_empty(),
        datacenters: split.parts,
    })
}
