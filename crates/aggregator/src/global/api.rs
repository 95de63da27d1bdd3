//! The global tier's HTTP API. Every answer comes from memory: no read waits on a
//! datacenter.
//!
//! | route | does |
//! |---|---|
//! | `GET /counter/{id}?max_staleness_ms=N&allow_partial=B` | the sum over datacenters (a unique counter's estimate of the union of every slot), or 503 naming the stale ones |
//! | `GET /topk?k=K&prefix=P[&window=S&at=T]&max_staleness_ms=N&allow_partial=B` | the world's K highest sum counters with ids starting with P (from every slot held here), with each datacenter's own top K |
//! | `GET /trending?prefix=P&max_staleness_ms=N&allow_partial=B` | the counters with a configured prefix at or over its threshold in `[trending] window_seconds`, worldwide and per datacenter |
//! | `GET /counter/{id}/history?step=S&from=T1&to=T2&max_staleness_ms=N&allow_partial=B` | one sum over datacenters per step of one of the counter's history levels, or 503 naming the stale ones |
//! | `GET /aggregate?prefix=P[&window=S&at=T]&max_staleness_ms=N&allow_partial=B` | the sum and the number of the sum counters with ids starting with P, worldwide and per datacenter (unique counters left out) |
//! | `GET /datacenters` | each datacenter's aggregator, freshness, counters and last error |
//! | `POST /parts` | postcard [`PartsRequest`] → [`PartsAnswer`]: the other datacenters' parts of many counters, for a shard node's world reads |
//! | `POST /sync` | postcard [`SyncRequest`] → [`SyncPage`], for datacenter aggregators pulling descriptions |
//! | `GET /healthz`, `GET /metrics` | health with each datacenter's staleness, Prometheus text |
//! | `GET /` | the status page (HTML), which reads the routes below and the reads above |
//! | `GET /status` | each datacenter as heard here and as its aggregator sees its slots, and the visibility lag ([`super::status`]) |
//! | `GET /counter/{id}/rights` | a bounded counter's rights held in each datacenter, asked of its aggregator |
//!
//! These two are the only routes that ask the tier below (at once, with a short timeout).
//! Every refusal is `{"error": ...}`; a stale read's 503 also carries `stale_datacenters` and
//! `datacenters`.
//!
//! [`SyncRequest`]: geocount_model::wire::SyncRequest
//! [`SyncPage`]: geocount_model::wire::SyncPage
//! [`PartsRequest`]: geocount_model::wire::PartsRequest
//! [`PartsAnswer`]: geocount_model::wire::PartsAnswer

use std::sync::Arc;

use geocount_http::routing::{self, Endpoint, Named, RequestError, Routed};
use geocount_http::{Allow, Need, parse_aggregate_query};
use geocount_model::role::GLOBAL_PROCESS;
use geocount_model::{CounterId, Right};
use geocount_net::Response;
use hyper::body::Incoming;
use hyper::{Method, Request};
use serde::Serialize;

use super::GlobalState;
use super::datacenters::{DatacenterStatus, datacenter_statuses};
use super::query::{ReadQuery, StalenessKeys};
use super::read::{self, GlobalRead};
use super::staleness::empty_readings;
use super::{status, sums, trends, world};
use crate::answers::Held;
use crate::error::AggregatorError;
use crate::fanout;
use crate::global::history::{GlobalHistoryRead, global_history, parse_global};
use crate::ranking::RankingRequest;
use crate::replica::SourceHealth;
use crate::routes::{GLOBAL_ONLY, ROUTES, Route};

/// What each route needs of a request (docs/operations.md, "Access"): a client token with a right, a
/// tier process of the roles that call it, or nothing. `/sync` is pulled by the datacenter
/// aggregators (descriptions), a slot's copy (`slot`, the route's `{slot}`) only by the node of
/// that slot, which restores it.
pub fn need(route: Route, slot: Option<&str>) -> Need {
    match route {
        Route::Counter
        | Route::History
        | Route::TopK
        | Route::Trending
        | Route::Aggregate
        | Route::Datacenters
        | Route::Status
        | Route::Rights => Need::Right(Right::Read),
        Route::Sync => Need::Tier(vec![Allow::Aggregators]),
        // Any datacenter's shard nodes answer world reads with the other datacenters' parts.
        Route::Parts => Need::Tier(vec![Allow::Shards]),
        Route::SlotCopy => Need::Tier(Allow::slot_owner(slot, None)),
        // The page itself tells nothing: its token field must be reachable without a token.
        Route::Health | Route::Metrics | Route::OpenApi | Route::Page => Need::Open,
    }
}

/// The router of this tier's paths.
pub fn router() -> matchit::Router<Route> {
    routing::router(ROUTES.iter().chain(GLOBAL_ONLY).copied())
}

/// Answers one request; every error (a stale read's 503 too) becomes its JSON answer.
pub async fn handle(state: Arc<GlobalState>, request: Request<Incoming>) -> Response {
    let state: &GlobalState = &state;
    let core = &state.core;
    let now_ms = core.clock.now_unix_ms();
    let dispatch = |routed: Routed<Route>, request: Request<Incoming>| async move {
        let query = request.uri().query();
        match (routed.route, request.method(), routed.id) {
            (Route::SlotCopy, &Method::GET, _) => {
                let slot = routed.slot.unwrap_or_default();
                core.slot_copy(slot, query, |slot| AggregatorError::UnknownSlot {
                    slot,
                    held_by: "any configured datacenter".to_owned(),
                })
            }
            (Route::Counter, &Method::GET, Some(id)) => {
                core.held_here(id.as_str(), &request)?;
                let query =
                    ReadQuery::parse(query, state.settings.max_staleness_ms, now_ms / 1000)?;
                read(state, &id, query, now_ms)
            }
            (Route::History, &Method::GET, Some(id)) => {
                core.held_here(id.as_str(), &request)?;
                history(state, &id, query, now_ms)
            }
            (route @ (Route::TopK | Route::Trending), &Method::GET, _) => {
                let ranking = RankingRequest::new(request.uri().path(), &request, now_ms)?;
                rank(state, route, ranking, now_ms).await
            }
            (Route::Aggregate, &Method::GET, _) => {
                let asked = RankingRequest::new(request.uri().path(), &request, now_ms)?;
                aggregate(state, asked, now_ms).await
            }
            (Route::Datacenters, &Method::GET, _) => Ok(datacenters(state, now_ms)),
            (Route::Parts, &Method::POST, _) => world::answer(state, request, now_ms).await,
            (Route::Sync, &Method::POST, _) => {
                let answer = core.sync(request, GLOBAL_PROCESS, now_ms, |_| Vec::new());
                Ok(answer.await?)
            }
            (Route::Health, &Method::GET, _) => Ok(health(state, now_ms)),
            (Route::Page, &Method::GET, _) => Ok(crate::page::document("global", "global")),
            (Route::Status, &Method::GET, _) => {
                crate::page::no_query(query)?;
                let authorization = fanout::authorization(&request);
                Ok(status::status(state, authorization.as_deref(), now_ms).await)
            }
            (Route::Rights, &Method::GET, Some(id)) => {
                crate::page::no_query(query)?;
                let authorization = fanout::authorization(&request);
                status::rights(state, id.as_str(), authorization.as_deref()).await
            }
            (Route::OpenApi, &Method::GET, _) => {
                Ok(core.openapi(crate::openapi::global(core.settings.max_window_seconds)))
            }
            (Route::Metrics, &Method::GET, _) => Ok(core.scrape(now_ms, request.headers())),
            (route, ..) => Err(AggregatorError::from(RequestError::method_not_allowed(
                &request,
                route.methods(),
            ))),
        }
    };
    let need =
        |routed: &Routed<Route>, _: &Request<Incoming>| need(routed.route, routed.slot.as_deref());
    core.mark(routing::answer(&core.router, &core.access, need, request, dispatch).await)
}

async fn rank(
    state: &GlobalState,
    route: Route,
    ranking: RankingRequest,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let mut staleness = StalenessKeys::default();
    let asked = (state.core).asked(route, &ranking, |key, value| staleness.take(key, value))?;
    let freshness = staleness.freshness(state.settings.max_staleness_ms);
    let datacenters = state.layout.names.len();
    let ask = |replica: &_| trends::rankings(replica, datacenters, &asked, ranking.at_ms);
    let lists = state.core.rank(ranking.at_ms, ask).await?;
    let list = asked.list();
    let answer = {
        let replica = state.core.replica.read().expect("replica lock");
        trends::answer(&replica, &state.layout, (asked, lists), freshness, now_ms)
    };
    match answer {
        Ok(answer) => state.core.reply_ranking(&answer, list, &ranking).await,
        Err(refusal) => Err(AggregatorError::StaleRanking(Box::new(refusal))),
    }
}

async fn aggregate(
    state: &GlobalState,
    asked: RankingRequest,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let mut staleness = StalenessKeys::default();
    let query = parse_aggregate_query(asked.query(), asked.at_ms / 1000, |key, value| {
        staleness.take(key, value)
    })?;
    let freshness = staleness.freshness(state.settings.max_staleness_ms);
    let layout = &state.layout;
    let slot_groups = layout.slot_datacenters.clone();
    let sums = (state
        .core
        .sum(&query, asked.at_ms, slot_groups, layout.names.len()))
    .await?;
    let readings = {
        let replica = state.core.replica.read().expect("replica lock");
        empty_readings(&replica, layout, now_ms)
    };
    match sums::answer(&layout.names, &readings, (query, sums), freshness) {
        Ok(answer) => state.core.reply_sum(answer, &asked).await,
        Err(refusal) => Err(AggregatorError::StaleSum(Box::new(refusal))),
    }
}

fn read(
    state: &GlobalState,
    id: &CounterId,
    query: ReadQuery,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let gathered = {
        let replica = state.core.replica.read().expect("replica lock");
        let counter = replica.counter(id.as_str());
        state.core.check_window(&counter, query.window.as_ref())?;
        read::gather(
            &replica,
            &state.layout,
            &counter,
            query.window.as_ref(),
            now_ms,
        )
    };
    match gathered.answer(id.as_str(), &state.layout.names, &query) {
        GlobalRead::Counter(reading) => Ok(state.core.answer(&reading)),
        GlobalRead::Stale(refusal) => Err(AggregatorError::Stale(Box::new(refusal))),
        GlobalRead::NotFound(presence) => Err(AggregatorError::not_found(
            id.to_string(),
            presence,
            "any datacenter",
        )),
    }
}

fn history(
    state: &GlobalState,
    id: &CounterId,
    query: Option<&str>,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let (asked, freshness) = parse_global(query, state.settings.max_staleness_ms)?;
    let answer = {
        let replica = state.core.replica.read().expect("replica lock");
        let layout = &state.layout;
        global_history(&replica, layout, id.as_str(), &asked, freshness, now_ms)
    };
    match answer {
        GlobalHistoryRead::History(history) => Ok(state.core.answer(&history)),
        GlobalHistoryRead::Bad(refusal) => Err(refusal.into()),
        GlobalHistoryRead::Stale(refusal) => Err(AggregatorError::Stale(Box::new(refusal))),
        GlobalHistoryRead::NotFound(presence) => Err(AggregatorError::not_found(
            id.to_string(),
            presence,
            "any datacenter",
        )),
    }
}

fn datacenters(state: &GlobalState, now_ms: u64) -> Response {
    #[derive(Serialize)]
    struct Datacenters {
        datacenters: Named<DatacenterStatus>,
    }
    let replica = state.core.replica.read().expect("replica lock");
    let datacenters = datacenter_statuses(&replica, &state.settings, &state.layout, now_ms);
    state.core.answer(&Datacenters { datacenters })
}

fn health(state: &GlobalState, now_ms: u64) -> Response {
    #[derive(Serialize)]
    struct Health {
        status: &'static str,
        #[serde(flatten)]
        held: Held,
        datacenters: Named<SourceHealth>,
        replicas: Named<SourceHealth>,
    }
    let replica = state.core.replica.read().expect("replica lock");
    let layout = &state.layout;
    let readings = empty_readings(&replica, layout, now_ms);
    // A datacenter is as healthy as the freshest replica of its aggregator.
    let datacenters = (layout.names.iter().enumerate())
        .map(|(dc, name)| {
            let freshest = layout.freshest_source(&replica, dc, now_ms);
            let health = SourceHealth {
                staleness_ms: readings[dc].staleness_ms,
                ..replica.source_health(freshest, now_ms)
            };
            (name.clone(), health)
        })
        .collect();
    let replicas = (state.core.source_names.iter().enumerate())
        .map(|(source, name)| (name.clone(), replica.source_health(source, now_ms)))
        .collect();
    let held = Held::of(&replica);
    // The aggregator serves either way: reads over incomplete copies are stale, not whole.
    let incomplete = held.over_bound.is_some() || replica.sources.iter().any(|s| s.is_incomplete());
    // Entries the clock fence refused leave their datacenters stale until they are taken.
    let refused_ahead = replica.sources.iter().any(|s| s.refused_ahead() > 0);
    state.core.answer(&Health {
        status: status::health_word(incomplete, refused_ahead),
        held,
        datacenters,
        replicas,
    })
}
