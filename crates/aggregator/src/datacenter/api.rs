//! The datacenter tier's HTTP API. Every answer comes from memory: no read waits on a
//! shard.
//!
//! | route | does |
//! |---|---|
//! | `GET /counter/{id}` | the datacenter's sum (a unique counter's estimate), with every slot's value, version and staleness |
//! | `GET /counter/{id}/history?step=S&from=T1&to=T2` | one sum over the datacenter's slots per step of one of the counter's history levels |
//! | `GET /topk?k=K&prefix=P[&window=S&at=T]` | the datacenter's K highest sum counters with ids starting with P, all-time or in the window |
//! | `GET /trending?prefix=P` | the counters with a configured prefix at or over its threshold in `[trending] window_seconds` |
//! | `GET /aggregate?prefix=P[&window=S&at=T]` | the datacenter's sum and number of the sum counters with ids starting with P (unique counters left out) |
//! | `POST /sync` | postcard [`SyncRequest`] → [`SyncPage`], for the global aggregator |
//! | `GET /slots/{slot}/copy` | postcard [`SlotCopy`] of one slot, for a shard node restoring it |
//! | `GET /healthz`, `GET /metrics` | health with each slot's staleness, Prometheus text |
//! | `GET /` | the status page (HTML), which reads the routes below and the reads above |
//! | `GET /status` | each slot as this aggregator and its shard node see it ([`super::status`]) |
//! | `GET /counter/{id}/rights` | a bounded counter's rights held by each slot, asked of its shard node |
//!
//! Every refusal is `{"error": ...}` with a 4xx (503 when no shard node answers a status
//! route).
//!
//! [`SyncRequest`]: geocount_model::wire::SyncRequest
//! [`SyncPage`]: geocount_model::wire::SyncPage
//! [`SlotCopy`]: geocount_model::wire::SlotCopy

use std::sync::Arc;

use geocount_http::routing::{self, Endpoint, Named, RequestError, Routed};
use geocount_http::{Allow, Need, parse_aggregate_query};
use geocount_model::{CounterId, Right};
use geocount_net::Response;
use geocount_sync::worst_staleness;
use hyper::body::Incoming;
use hyper::{Method, Request};
use serde::Serialize;

use super::state::{DatacenterState, freshness, read_counter, slot_staleness};
use super::{status, trends};
use crate::aggregate::SumAnswer;
use crate::answers::Held;
use crate::datacenter::history::datacenter_history;
use crate::error::AggregatorError;
use crate::fanout;
use crate::history::{HistoryQuery, Unanswered};
use crate::ranking::RankingRequest;
use crate::replica::SourceHealth;
use crate::routes::{ROUTES, Route};

/// What each route needs of a request (docs/operations.md, "Access"): a client token with a right, a
/// tier process of the roles that call it, or nothing. `datacenter` is this aggregator's,
/// `slot` the route's `{slot}`: `/sync` is pulled by the global aggregator (slot states) and
/// this datacenter's shard nodes (descriptions), a slot's copy only by the node of that slot,
/// which restores it.
pub fn need(route: Route, slot: Option<&str>, datacenter: &str) -> Need {
    match route {
        Route::Counter
        | Route::History
        | Route::TopK
        | Route::Trending
        | Route::Aggregate
        | Route::Status
        | Route::Rights => Need::Right(Right::Read),
        Route::Sync => Need::Tier(vec![Allow::Global, Allow::ShardsOf(datacenter.to_owned())]),
        Route::SlotCopy => Need::Tier(Allow::slot_owner(slot, Some(datacenter))),
        // Not routed at this tier: the router answers 404 first.
        Route::Datacenters | Route::Parts => Need::Right(Right::Read),
        // The page itself tells nothing: its token field must be reachable without a token.
        Route::Health | Route::Metrics | Route::OpenApi | Route::Page => Need::Open,
    }
}

/// The router of this tier's paths.
pub fn router() -> matchit::Router<Route> {
    routing::router(ROUTES.iter().copied())
}

/// Answers one request; every error becomes its JSON answer.
pub async fn handle(state: Arc<DatacenterState>, request: Request<Incoming>) -> Response {
    let need = |routed: &Routed<Route>, _: &Request<Incoming>| {
        need(routed.route, routed.slot.as_deref(), &state.datacenter)
    };
    let answer = routing::answer(
        &state.core.router,
        &state.core.access,
        need,
        request,
        |routed, request| dispatch(&state, routed, request),
    );
    state.core.mark(answer.await)
}

async fn dispatch(
    state: &DatacenterState,
    Routed { route, id, slot }: Routed<Route>,
    request: Request<Incoming>,
) -> Result<Response, AggregatorError> {
    let core = &state.core;
    let now_ms = core.clock.now_unix_ms();
    let query = request.uri().query();
    match (route, request.method(), id, slot) {
        (Route::Counter, &Method::GET, Some(id), _) => {
            core.held_here(id.as_str(), &request)?;
            read(state, &id, query, now_ms)
        }
        (Route::History, &Method::GET, Some(id), _) => {
            core.held_here(id.as_str(), &request)?;
            history(state, &id, query, now_ms)
        }
        (Route::TopK | Route::Trending, &Method::GET, _, _) => {
            let ranking = RankingRequest::new(request.uri().path(), &request, now_ms)?;
            rank(state, route, ranking, now_ms).await
        }
        (Route::Aggregate, &Method::GET, _, _) => {
            let asked = RankingRequest::new(request.uri().path(), &request, now_ms)?;
            aggregate(state, asked, now_ms).await
        }
        (Route::Sync, &Method::POST, _, _) => {
            let freshness = |replica: &_| freshness(replica, &state.slot_names, now_ms);
            Ok(core
                .sync(request, &state.datacenter, now_ms, freshness)
                .await?)
        }
        (Route::SlotCopy, &Method::GET, _, Some(slot)) => {
            core.slot_copy(slot, query, |slot| AggregatorError::UnknownSlot {
                slot,
                held_by: format!("datacenter {}", state.datacenter),
            })
        }
        (Route::Health, &Method::GET, _, _) => Ok(health(state, now_ms)),
        (Route::Page, &Method::GET, _, _) => {
            Ok(crate::page::document("datacenter", &state.datacenter))
        }
        (Route::Status, &Method::GET, _, _) => {
            crate::page::no_query(query)?;
            let authorization = fanout::authorization(&request);
            Ok(status::status(state, authorization.as_deref(), now_ms).await)
        }
        (Route::Rights, &Method::GET, Some(id), _) => {
            crate::page::no_query(query)?;
            let authorization = fanout::authorization(&request);
            status::rights(state, id.as_str(), authorization.as_deref()).await
        }
        (Route::OpenApi, &Method::GET, _, _) => {
            Ok(core.openapi(crate::openapi::datacenter(core.settings.max_window_seconds)))
        }
        (Route::Metrics, &Method::GET, _, _) => Ok(core.scrape(now_ms, request.headers())),
        _ => Err(RequestError::method_not_allowed(&request, route.methods()).into()),
    }
}

fn read(
    state: &DatacenterState,
    id: &CounterId,
    query: Option<&str>,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let window = routing::parse_read_query(query, now_ms / 1000, |_, _| Ok(false))?;
    let reading = {
        let replica = state.core.replica.read().expect("replica lock");
        if window.is_some() {
            let counter = replica.counter(id.as_str());
            state.core.check_window(&counter, window.as_ref())?;
        }
        read_counter(
            &replica,
            &state.datacenter,
            &state.slot_names,
            id.as_str(),
            window.as_ref(),
            now_ms,
        )
    };
    let reading = reading.map_err(|presence| {
        AggregatorError::not_found(id.to_string(), presence, "this datacenter")
    })?;
    Ok(state.core.answer(&reading))
}

fn history(
    state: &DatacenterState,
    id: &CounterId,
    query: Option<&str>,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let asked = HistoryQuery::parse(query, |_, _| Ok(false))?;
    let answer = {
        let replica = state.core.replica.read().expect("replica lock");
        let slots = state.slot_names.len();
        datacenter_history(
            &replica,
            &state.datacenter,
            slots,
            id.as_str(),
            &asked,
            now_ms,
        )
    };
    match answer {
        Ok(history) => Ok(state.core.answer(&history)),
        Err(Unanswered::Bad(refusal)) => Err(refusal.into()),
        Err(Unanswered::NotFound(presence)) => Err(AggregatorError::not_found(
            id.to_string(),
            presence,
            "this datacenter",
        )),
    }
}

async fn rank(
    state: &DatacenterState,
    route: Route,
    ranking: RankingRequest,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let asked = state.core.asked(route, &ranking, |_, _| Ok(false))?;
    let lists = (state.core)
        .rank(ranking.at_ms, |replica| {
            trends::ranking(replica, &asked, ranking.at_ms)
        })
        .await?;
    let list = asked.list();
    let answer = {
        let replica = state.core.replica.read().expect("replica lock");
        trends::answer(&replica, state.slot_names.len(), (asked, lists), now_ms)
    };
    state.core.reply_ranking(&answer, list, &ranking).await
}

async fn aggregate(
    state: &DatacenterState,
    asked: RankingRequest,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let query = parse_aggregate_query(asked.query(), asked.at_ms / 1000, |_, _| Ok(false))?;
    let slots = state.slot_names.len();
    let sums = state
        .core
        .sum(&query, asked.at_ms, vec![0; slots], 1)
        .await?;
    let staleness_ms = {
        let replica = state.core.replica.read().expect("replica lock");
        worst_staleness(slot_staleness(&replica, slots, now_ms))
    };
    let answer = SumAnswer::new(query, sums.all, staleness_ms, staleness_ms.is_some());
    state.core.reply_sum(answer, &asked).await
}

fn health(state: &DatacenterState, now_ms: u64) -> Response {
    #[derive(Serialize)]
    struct Health<'a> {
        status: &'a str,
        datacenter: &'a str,
        #[serde(flatten)]
        held: Held,
        slots: Named<SourceHealth>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        conflicts: Vec<String>,
    }
    let replica = state.core.replica.read().expect("replica lock");
    let conflicts: Vec<String> = replica
        .conflicts(now_ms)
        .iter()
        .map(|(slot, conflict)| conflict.describe(slot))
        .collect();
    let slots = state
        .slot_names
        .iter()
        .enumerate()
        .map(|(slot, name)| (name.clone(), replica.source_health(slot, now_ms)))
        .collect();
    let held = Held::of(&replica);
    let refused_ahead = replica.sources.iter().any(|s| s.refused_ahead() > 0);
    state.core.answer(&Health {
        status: status::health_word(
            !conflicts.is_empty(),
            held.over_bound.is_some(),
            refused_ahead,
        ),
        datacenter: &state.datacenter,
        held,
        slots,
        conflicts,
    })
}
