//! Top-K trends and trending counters of this datacenter: `GET /topk` and `GET /trending`,
//! answered from the [`geocount_ranking::TopIndex`] its replica keeps up to date.
//!
//! - All-time rankings and the live window walk the index's leaders from the top; other
//!   windows (and answers the leaders do not hold) scan every counter's copies, exactly, at
//!   request time, off the runtime and a run of counters per hold of the replica's lock
//!   ([`crate::replica::Scans`]).
//! - Unique counters are left out (their values are estimates of distinct items).
//! - The answer carries the datacenter's staleness (the worst of its slots') like a read.

use geocount_ranking::{Answer, Ranked, Scope};
use geocount_sync::worst_staleness;

use super::state::slot_staleness;
use crate::answers::Ranking;
use crate::ranking::Asked;
use crate::replica::Replica;

/// The datacenter's ranking of what `asked` asks at `now_ms`, or the scan that finds it.
pub fn ranking(replica: &Replica, asked: &Asked, now_ms: u64) -> Answer {
    asked.rank(replica, &[Scope::All], now_ms)
}

/// The answer to `asked` from `lists` ([`ranking`]), with the staleness of the datacenter's
/// `slots` slots at `now_ms`.
pub fn answer(
    replica: &Replica,
    slots: usize,
    (asked, mut lists): (Asked, Vec<Vec<Ranked>>),
    now_ms: u64,
) -> Ranking {
    let staleness_ms = worst_staleness(slot_staleness(replica, slots, now_ms));
    let list = lists.pop().unwrap_or_default();
    asked.answer(list, staleness_ms, staleness_ms.is_some())
}
