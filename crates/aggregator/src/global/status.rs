//! `GET /status` and `GET /counter/{id}/rights` at the global tier: each datacenter as this
//! aggregator hears it (`GET /datacenters`) joined with its aggregator's own `GET /status`
//! (every slot, shard node health, restores, conflicts, durability, replication lag), asked of
//! every replica of every datacenter aggregator at once with a short timeout
//! ([`crate::fanout`]); and the visibility lag. What the status page of this tier shows.

use geocount_net::Response;
use serde::Serialize;
use serde_json::Value;

use super::GlobalState;
use super::datacenters::{DatacenterStatus, datacenter_statuses};
use crate::answers::Held;
use crate::error::AggregatorError;
use crate::fanout::{self, Reply};
use crate::page::TrendingSettings;

/// The answer to `GET /status` at the global tier.
#[derive(Debug, Clone, Serialize)]
pub struct GlobalView {
    /// `global`.
    pub tier: &'static str,
    /// This aggregator's clock when it answered (unix ms).
    pub at_ms: u64,
    /// This aggregator's health, as its `/healthz` says it.
    pub status: &'static str,
    /// Reads refuse datacenters staler than this unless partial answers are allowed.
    pub max_staleness_ms: u64,
    /// The visibility lag: how old a write may be and still be missing from the world's
    /// reads here, the worst of the datacenters' (`None`: one cannot be told).
    pub visibility_lag_ms: Option<u64>,
    /// What this aggregator holds.
    #[serde(flatten)]
    pub held: Held,
    /// The configured trending prefixes.
    pub trending: TrendingSettings,
    /// Each datacenter, in topology order.
    pub datacenters: Vec<DatacenterView>,
}

/// One datacenter in `GET /status`.
#[derive(Debug, Clone, Serialize)]
pub struct DatacenterView {
    /// Its name.
    pub name: String,
    /// How this aggregator hears it.
    #[serde(flatten)]
    pub heard_here: DatacenterStatus,
    /// Its staleness here plus its slowest slot's staleness at its aggregator: a write older
    /// than this shows in the world's reads (`None`: one of the two is unknown).
    pub visibility_lag_ms: Option<u64>,
    /// Its aggregator's `GET /status` (the freshest replica that answered), `None` if none did.
    pub view: Option<Value>,
    /// The replica whose `view` it is.
    pub view_from: Option<String>,
    /// Each replica of its aggregator that did not answer its `GET /status`, with why.
    pub unanswered: Vec<Unanswered>,
}

/// A replica of a datacenter's aggregator that gave no status.
#[derive(Debug, Clone, Serialize)]
pub struct Unanswered {
    /// Where it listens.
    pub address: String,
    /// Why there is no answer.
    pub error: String,
}

/// The health word of this aggregator, as `/healthz` says it.
pub fn health_word(incomplete: bool, refused_ahead: bool) -> &'static str {
    match (incomplete, refused_ahead) {
        (true, _) => "incomplete",
        (false, true) => "degraded",
        (false, false) => "ok",
    }
}

/// `GET /status`: every datacenter at `now_ms`, each aggregator asked with `authorization`.
pub async fn status(state: &GlobalState, authorization: Option<&str>, now_ms: u64) -> Response {
    let layout = &state.layout;
    let addresses = layout.source_addresses.iter().cloned();
    let answers = (state.core.fanout)
        .get_all(addresses, "/status", authorization)
        .await;
    let (statuses, order, held, word) = {
        let replica = state.core.replica.read().expect("replica lock");
        let statuses = datacenter_statuses(&replica, &state.settings, layout, now_ms);
        // Each datacenter's replicas, freshest first.
        let order: Vec<Vec<usize>> = (0..layout.names.len())
            .map(|dc| {
                let freshest = layout.freshest_source(&replica, dc, now_ms);
                let mut sources: Vec<usize> = layout.sources_of(dc).collect();
                sources.sort_by_key(|&s| s != freshest);
                sources
            })
            .collect();
        let held = Held::of(&replica);
        let incomplete =
            held.over_bound.is_some() || replica.sources.iter().any(|s| s.is_incomplete());
        let refused_ahead = replica.sources.iter().any(|s| s.refused_ahead() > 0);
        (
            statuses,
            order,
            held,
            health_word(incomplete, refused_ahead),
        )
    };
    let datacenters: Vec<DatacenterView> = (statuses.0.into_iter().zip(order))
        .map(|((name, heard_here), sources)| {
            let chosen = sources.iter().find_map(|&s| {
                let view = answers[s].ok_json()?;
                Some((view, layout.source_addresses[s].clone()))
            });
            let unanswered = (sources.iter())
                .filter_map(|&s| {
                    Some(Unanswered {
                        address: layout.source_addresses[s].clone(),
                        error: answers[s].error()?,
                    })
                })
                .collect();
            let slowest_slot =
                (chosen.as_ref()).and_then(|(view, _)| view["staleness_ms"].as_u64());
            let visibility_lag_ms = heard_here
                .staleness_ms
                .zip(slowest_slot)
                .map(|(here, there)| here + there);
            let (view, view_from) = chosen.unzip();
            DatacenterView {
                name,
                heard_here,
                visibility_lag_ms,
                view,
                view_from,
                unanswered,
            }
        })
        .collect();
    let visibility_lag_ms = (datacenters.iter())
        .map(|dc| dc.visibility_lag_ms)
        .reduce(|worst, next| Some(worst?.max(next?)))
        .flatten();
    state.core.answer(&GlobalView {
        tier: "global",
        at_ms: now_ms,
        status: word,
        max_staleness_ms: state.settings.max_staleness_ms,
        visibility_lag_ms,
        held,
        trending: TrendingSettings::of(&state.core.settings.trending),
        datacenters,
    })
}

/// `GET /counter/{id}/rights`: each datacenter's rights of bounded counter `id`, from the
/// first replica of its aggregator that answers, asked with `authorization`.
pub async fn rights(
    state: &GlobalState,
    id: &str,
    authorization: Option<&str>,
) -> Result<Response, AggregatorError> {
    #[derive(Serialize)]
    struct DatacenterRights {
        name: String,
        address: String,
        status: Option<u16>,
        rights: Option<Value>,
        error: Option<String>,
    }
    #[derive(Serialize)]
    struct Rights {
        id: String,
        /// The increments every datacenter's slots may apply without asking, together.
        up: Option<i128>,
        /// The decrements, together.
        down: Option<i128>,
        datacenters: Vec<DatacenterRights>,
    }
    let layout = &state.layout;
    let path = format!("/counter/{}/rights", fanout::path_segment(id));
    let addresses = layout.source_addresses.iter().cloned();
    let answers = state
        .core
        .fanout
        .get_all(addresses, &path, authorization)
        .await;
    // Each datacenter's first replica that answered at all, else its first.
    let chosen: Vec<usize> = (0..layout.names.len())
        .map(|dc| {
            let mut sources = layout.sources_of(dc);
            let first = sources.next().expect("every datacenter has an aggregator");
            std::iter::once(first)
                .chain(sources)
                .find(|&s| answers[s].status().is_some())
                .unwrap_or(first)
        })
        .collect();
    let picked: Vec<Reply> = chosen.iter().map(|&s| answers[s].clone()).collect();
    fanout::any_rights(&picked, id, || "any datacenter".to_owned())?;
    let datacenters: Vec<DatacenterRights> = (layout.names.iter().zip(&chosen))
        .zip(&picked)
        .map(|((name, &source), answer)| DatacenterRights {
            name: name.clone(),
            address: layout.source_addresses[source].clone(),
            status: answer.status(),
            rights: answer.ok_json(),
            error: (answer.status() != Some(404))
                .then(|| answer.error())
                .flatten(),
        })
        .collect();
    let total = |key: &str| -> Option<i128> {
        let parts: Vec<i128> = (datacenters.iter())
            .filter_map(|dc| dc.rights.as_ref()?[key].as_i64().map(i128::from))
            .collect();
        (!parts.is_empty()).then(|| parts.iter().sum())
    };
    let answer = Rights {
        id: id.to_owned(),
        up: total("up"),
        down: total("down"),
        datacenters,
    };
    Ok(state.core.answer(&answer))
}
