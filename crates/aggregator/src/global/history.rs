//! The global aggregator's `GET /counter/{id}/history` ([`crate::history`]): the world's
//! points, with each datacenter's part and staleness as `GET /counter/{id}` gives them.

use geocount_http::routing::RequestError;
use serde::Serialize;

use crate::global::layout::Layout;
use crate::global::query::StalenessKeys;
use crate::global::read::{CounterReading, GlobalRead, answer_read};
use crate::global::staleness::empty_readings;
use crate::history::{HistoryQuery, Points, Unanswered, resolve};
use crate::lifecycle::Presence;
use crate::parts::StaleRead;
use crate::replica::Replica;

/// The global tier's answer: the world's points, and the read's total over them with each
/// datacenter's part and staleness as `GET /counter/{id}` gives them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GlobalHistory {
    /// The steps and their sums over every datacenter.
    #[serde(flatten)]
    pub points: Points,
    /// `value`: the sum of the points; each datacenter's part is its sum of them.
    #[serde(flatten)]
    pub reading: CounterReading,
}

/// What a global history read answers.
#[derive(Debug)]
pub enum GlobalHistoryRead {
    /// 200.
    History(Box<GlobalHistory>),
    /// 503: stale datacenters and no partial answer allowed.
    Stale(StaleRead),
    /// 404: as for `GET /counter/{id}`.
    NotFound(Presence),
    /// 400.
    Bad(RequestError),
}

/// Counter `id`'s history at the global tier: `query` with the staleness keys in `staleness`
/// (default bound `max_staleness_ms`), datacenters laid out in `layout`.
pub fn global_history(
    replica: &Replica,
    layout: &Layout,
    id: &str,
    query: &HistoryQuery,
    freshness: crate::global::staleness::Freshness,
    now_ms: u64,
) -> GlobalHistoryRead {
    let counter = replica.counter(id);
    let mut readings = empty_readings(replica, layout, now_ms);
    let life = counter.life(now_ms);
    let (range, values) = match life.exists().then(|| resolve(&counter, query, now_ms)) {
        Some(Err(Unanswered::Bad(refusal))) => return GlobalHistoryRead::Bad(refusal),
        Some(Ok((range, copies))) => {
            let mut values = vec![0i128; range.len()];
            let mut part = vec![0i128; range.len()];
            for (slot, record) in copies {
                part.iter_mut().for_each(|v| *v = 0);
                range.add(record, &mut part);
                let dc = layout.slot_datacenters[usize::from(*slot)];
                readings[dc].value += part.iter().sum::<i128>();
                for (value, hits) in values.iter_mut().zip(&part) {
                    *value += hits;
                }
            }
            (Some(range), values)
        }
        Some(Err(Unanswered::NotFound(_))) | None => (None, Vec::new()),
    };
    let mut answer = answer_read(
        id,
        &layout.names,
        life.exists(),
        readings,
        None,
        freshness.max_staleness_ms,
        freshness.allow_partial,
    );
    if let GlobalRead::NotFound(presence) = &mut answer {
        *presence = life.presence;
    }
    match (answer, range) {
        (GlobalRead::Counter(reading), Some(range)) => {
            GlobalHistoryRead::History(Box::new(GlobalHistory {
                points: Points::of(range, values),
                reading,
            }))
        }
        // Held nowhere but a stale datacenter may hold it: a partial answer has no levels.
        (GlobalRead::Counter(_), None) => GlobalHistoryRead::Bad(RequestError::BadRequest(
            "no datacenter has reported the counter yet, so its history levels are unknown".into(),
        )),
        (GlobalRead::Stale(refusal), _) => GlobalHistoryRead::Stale(refusal),
        (GlobalRead::NotFound(presence), _) => GlobalHistoryRead::NotFound(presence),
    }
}

/// Parses a global history read's query: the history keys and the staleness keys.
pub fn parse_global(
    query: Option<&str>,
    default_max_staleness_ms: u64,
) -> Result<(HistoryQuery, crate::global::staleness::Freshness), RequestError> {
    let mut staleness = StalenessKeys::default();
    let asked = HistoryQuery::parse(query, |key, value| staleness.take(key, value))?;
    Ok((asked, staleness.freshness(default_max_staleness_ms)))
}
