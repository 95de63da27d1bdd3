//! Top-K trends and trending counters of the world and of each datacenter: `GET /topk` and
//! `GET /trending`, answered from the [`geocount_ranking::TopIndex`] over every slot this
//! aggregator holds (so the worldwide ranking is exact at this tier, not a merge of the
//! datacenters' own top lists), under the same staleness rules as a read.
//!
//! - A datacenter is stale when its staleness is unknown or above `max_staleness_ms`; stale
//!   datacenters refuse the answer (503 naming them) unless `allow_partial=true`, which answers
//!   with `complete: false` and ranks their last known values.
//! - A ranking the index's leaders cannot answer is a scan of every counter, run off the
//!   runtime a run of counters per hold of the replica's lock ([`crate::replica::Scans`]).
//! - Unique counters are left out (their values are estimates of distinct items).

use geocount_http::routing::Named;
use geocount_ranking::{Answer, Ranked, Scope};
use geocount_sync::worst_staleness;
use serde::Serialize;

use super::layout::Layout;
use super::staleness::{Freshness, empty_readings, named, stale_datacenters, stale_reasons};
use crate::answers::Ranking;
use crate::parts::{DatacenterRanking, StaleRead};
use crate::ranking::Asked;
use crate::replica::Replica;

/// The answer to the global `GET /topk` or `GET /trending`: the world's ranking, then each
/// datacenter's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GlobalRanking {
    /// The world's counters; its staleness is the largest datacenter staleness, and it is
    /// complete when no datacenter is stale.
    #[serde(flatten)]
    pub world: Ranking,
    /// Each datacenter's own ranking, in topology order.
    pub datacenters: Named<DatacenterRanking>,
}

/// The world's ranking, then each of `datacenters`' of what `asked` asks at `now_ms`; or the
/// scan that finds them.
pub fn rankings(replica: &Replica, datacenters: usize, asked: &Asked, now_ms: u64) -> Answer {
    let scopes: Vec<Scope> = std::iter::once(Scope::All)
        .chain((0..datacenters).map(Scope::Group))
        .collect();
    asked.rank(replica, &scopes, now_ms)
}

/// The answer to `asked` from `lists` (the world's, then each datacenter's, as [`rankings`]
/// gives them) with the staleness rules applied at `now_ms`, or the refusal naming the stale
/// datacenters.
pub fn answer(
    replica: &Replica,
    layout: &Layout,
    (asked, mut lists): (Asked, Vec<Vec<Ranked>>),
    freshness: Freshness,
    now_ms: u64,
) -> Result<GlobalRanking, StaleRead<DatacenterRanking>> {
    let names = &layout.names;
    let readings = empty_readings(replica, layout, now_ms);
    let world = lists.remove(0);
    let parts: Vec<DatacenterRanking> = (lists.into_iter().zip(&readings))
        .map(|(list, reading)| DatacenterRanking {
            list: asked.listed(list),
            staleness_ms: reading.staleness_ms,
            heard: reading.heard,
        })
        .collect();
    let datacenters = named(names, parts);
    let stale = stale_datacenters(&readings, freshness.max_staleness_ms);
    if !stale.is_empty() && !freshness.allow_partial {
        return Err(StaleRead {
            error: stale_reasons(names, &readings, &stale, freshness.max_staleness_ms),
            stale_datacenters: stale.into_iter().map(|dc| names[dc].clone()).collect(),
            datacenters,
        });
    }
    let staleness_ms = worst_staleness(readings.iter().map(|r| r.staleness_ms));
    Ok(GlobalRanking {
        world: asked.answer(world, staleness_ms, stale.is_empty()),
        datacenters,
    })
}
