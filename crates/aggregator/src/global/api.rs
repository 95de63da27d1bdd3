//! The global tier's HTTP API. Every answer comes from memory: no read waits on a
//! datacenter.
//!
//! | route | does |
//! |---|---|
//! | `GET /counter/{id}?max_staleness_ms=N&allow_partial=B` | the sum over datacenters (a unique counter's estimate of the union of every slot), or 503 naming the stale ones |
//! | `GET /topk?k=K&prefix=P[&window=S&at=T]&max_staleness_ms=N&allow_partial=B` | the world's K highest sum counters with ids starting with P (from every slot held here), with each datacenter's own top K |
//! | `GET /trending?prefix=P&max_staleness_ms=N&allow_partial=B` | the counters with a configured prefix at or over its threshold in `[trending] window_seconds`, worldwide and per datacenter |
//! | `GET /datacenters` | each datacenter's aggregator, freshness, counters and last error |
//! | `POST /sync` | postcard [`SyncRequest`] → [`SyncPage`], for datacenter aggregators pulling descriptions |
//! | `GET /healthz`, `GET /metrics` | health with each datacenter's staleness, Prometheus text |
//!
//! Every refusal is `{"error": ...}`; a stale read's 503 also carries `stale_datacenters` and
//! `datacenters`.
//!
//! [`SyncRequest`]: geocount_model::wire::SyncRequest
//! [`SyncPage`]: geocount_model::wire::SyncPage

use std::sync::Arc;

use geocount_http::routing::{self, Named, RequestError, Routed};
use geocount_http::{Allow, Need, parse_top_query, parse_trending_query};
use geocount_model::{CounterId, Right};
use geocount_net::{Response, json_response};
use geocount_sync::SourceHealth;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde::Serialize;

use super::query::{ReadQuery, StalenessKeys};
use super::state::{
    DatacenterStatus, GlobalRead, GlobalState, answer_read, datacenter_statuses, read_datacenters,
    read_unique_datacenters,
};
use super::trends;
use crate::error::AggregatorError;
use crate::routes::{GLOBAL_ONLY, ROUTES, Route};
use crate::tier::Core;

/// What each route needs of a request (README, "Access"): a client token with a right, a
/// tier process of the roles that call it, or nothing. `/sync` is pulled by the datacenter
/// aggregators (descriptions), a slot's copy (`slot`, the route's `{slot}`) only by the node of
/// that slot, which restores it.
pub fn need(route: Route, slot: Option<&str>) -> Need {
    match route {
        Route::Counter | Route::TopK | Route::Trending | Route::Datacenters => {
            Need::Right(Right::Read)
        }
        Route::Sync => Need::Tier(vec![Allow::Aggregators]),
        Route::SlotCopy => Need::Tier(Allow::slot_owner(slot, None)),
        Route::Health | Route::Metrics | Route::OpenApi => Need::Open,
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
                let query = ReadQuery::parse(query, state.config.max_staleness_ms, now_ms / 1000)?;
                read(state, &id, query, now_ms)
            }
            (Route::TopK, &Method::GET, _) => top_k(state, query, now_ms).await,
            (Route::Trending, &Method::GET, _) => trending(state, query, now_ms).await,
            (Route::Datacenters, &Method::GET, _) => Ok(datacenters(state, now_ms)),
            (Route::Sync, &Method::POST, _) => {
                let answer = core.sync(request, "global", now_ms, |_| Vec::new());
                Ok(answer.await?)
            }
            (Route::Health, &Method::GET, _) => Ok(health(state, now_ms)),
            (Route::OpenApi, &Method::GET, _) => Ok(Core::openapi(crate::openapi::global())),
            (Route::Metrics, &Method::GET, _) => Ok(core.scrape(now_ms)),
            _ => Err(AggregatorError::from(RequestError::method_not_allowed(
                &request,
            ))),
        }
    };
    let need =
        |routed: &Routed<Route>, _: &Request<Incoming>| need(routed.route, routed.slot.as_deref());
    routing::answer(&core.router, &core.access, need, request, dispatch).await
}

async fn top_k(
    state: &GlobalState,
    query: Option<&str>,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let mut staleness = StalenessKeys::default();
    let query = parse_top_query(query, now_ms / 1000, |key, value| {
        staleness.take(key, value)
    })?;
    let freshness = staleness.freshness(state.config.max_staleness_ms);
    let (datacenters, prefix, k, window) =
        (state.names.len(), &query.prefix, query.k, query.window);
    let ask = |replica: &_| trends::rankings(replica, datacenters, prefix, k, None, window);
    let lists = state.core.rank(now_ms, ask).await?;
    let answer = {
        let replica = state.core.replica.read().expect("replica lock");
        trends::top_k(&replica, &state.names, (query, lists), freshness, now_ms)
    };
    match answer {
        Ok(answer) => Ok(json_response(StatusCode::OK, &answer)),
        Err(refusal) => Err(AggregatorError::StaleTop(Box::new(refusal))),
    }
}

async fn trending(
    state: &GlobalState,
    query: Option<&str>,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let mut staleness = StalenessKeys::default();
    let prefix = parse_trending_query(query, |key, value| staleness.take(key, value))?;
    let freshness = staleness.freshness(state.config.max_staleness_ms);
    let (threshold, window) = state.core.trending_window(&prefix, now_ms)?;
    let (datacenters, min) = (state.names.len(), Some(i128::from(threshold)));
    let ask = |replica: &_| {
        trends::rankings(replica, datacenters, &prefix, usize::MAX, min, Some(window))
    };
    let lists = state.core.rank(now_ms, ask).await?;
    let answer = {
        let replica = state.core.replica.read().expect("replica lock");
        let asked = (prefix, threshold, lists);
        trends::trending(&replica, &state.names, asked, window, freshness, now_ms)
    };
    match answer {
        Ok(answer) => Ok(json_response(StatusCode::OK, &answer)),
        Err(refusal) => Err(AggregatorError::StaleTrending(Box::new(refusal))),
    }
}

fn read(
    state: &GlobalState,
    id: &CounterId,
    query: ReadQuery,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let (held, readings, unique) = {
        let replica = state.core.replica.read().expect("replica lock");
        let counter = replica.counter(id.as_str());
        state.core.check_window(&counter, query.window.as_ref())?;
        let unique = counter.is_unique();
        let slot_datacenters = &state.slot_datacenters;
        if unique {
            let (held, readings, union) =
                read_unique_datacenters(&replica, slot_datacenters, counter.copies, now_ms);
            (held, readings, Some(union))
        } else {
            let window = query.window.as_ref();
            let (held, readings) =
                read_datacenters(&replica, slot_datacenters, counter.copies, window, now_ms);
            (held, readings, None)
        }
    };
    let answer = answer_read(
        id.as_str(),
        &state.names,
        held,
        readings,
        unique.as_ref(),
        query.max_staleness_ms,
        query.allow_partial,
    );
    match answer {
        GlobalRead::Counter(mut reading) => {
            reading.window = query.window;
            Ok(json_response(StatusCode::OK, &reading))
        }
        GlobalRead::Stale(refusal) => Err(AggregatorError::Stale(Box::new(refusal))),
        GlobalRead::NotFound => Err(AggregatorError::CounterNotFound {
            id: id.to_string(),
            held_by: "any datacenter",
        }),
    }
}

fn datacenters(state: &GlobalState, now_ms: u64) -> Response {
    #[derive(Serialize)]
    struct Datacenters {
        datacenters: Named<DatacenterStatus>,
    }
    let replica = state.core.replica.read().expect("replica lock");
    let datacenters = datacenter_statuses(&replica, &state.config, &state.slot_datacenters, now_ms);
    json_response(StatusCode::OK, &Datacenters { datacenters })
}

fn health(state: &GlobalState, now_ms: u64) -> Response {
    #[derive(Serialize)]
    struct Health {
        status: &'static str,
        counters: usize,
        state_bytes: u64,
        max_state_bytes: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        over_bound: Option<String>,
        datacenters: Named<SourceHealth>,
    }
    let replica = state.core.replica.read().expect("replica lock");
    let datacenters = (state.names.iter().enumerate())
        .map(|(dc, name)| (name.clone(), replica.source_health(dc, now_ms)))
        .collect();
    let over_bound = replica.over_bound();
    // The aggregator serves either way: reads over incomplete copies are stale, not whole.
    let incomplete = over_bound.is_some() || replica.sources.iter().any(|s| s.is_incomplete());
    json_response(
        StatusCode::OK,
        &Health {
            status: if incomplete { "incomplete" } else { "ok" },
            counters: replica.copies.len(),
            state_bytes: replica.copies.bytes().held(),
            max_state_bytes: replica.copies.bytes().max(),
            over_bound,
            datacenters,
        },
    )
}
