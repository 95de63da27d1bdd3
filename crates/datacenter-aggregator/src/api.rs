//! The datacenter aggregator's HTTP API. Every answer comes from memory: no read waits on a
//! shard.
//!
//! | route | does |
//! |---|---|
//! | `GET /counter/{id}` | the datacenter's sum (a unique counter's estimate), with every slot's value, version and staleness |
//! | `GET /topk?k=K&prefix=P[&window=S&at=T]` | the datacenter's K highest sum counters with ids starting with P, all-time or in the window |
//! | `GET /trending?prefix=P` | the counters with a configured prefix at or over its threshold in `[trending] window_seconds` |
//! | `POST /sync` | postcard [`SyncRequest`] → [`SyncPage`], for the global aggregator |
//! | `GET /slots/{slot}/copy` | postcard [`SlotCopy`] of one slot, for a shard node restoring it |
//! | `GET /healthz`, `GET /metrics` | health with each slot's staleness, Prometheus text |
//!
//! Every refusal is `{"error": ...}` with a 4xx.
//!
//! [`SyncRequest`]: geocount_model::wire::SyncRequest
//! [`SyncPage`]: geocount_model::wire::SyncPage
//! [`SlotCopy`]: geocount_model::wire::SlotCopy

use std::sync::Arc;

use geocount_model::{CounterId, Right};
use geocount_net::{Response, json_response};
use geocount_sync::http::{self, Named, RequestError, Routed, WindowQuery, serve_sync};
use geocount_sync::{
    Allow, Need, SourceHealth, answer_slot_copy, parse_copy_query, parse_top_query,
    parse_trending_query,
};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde::Serialize;

use crate::error::AggregatorError;
use crate::state::{AggregatorState, freshness, read_counter};
use crate::trends;

/// The endpoints, as matched by the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/counter/{id}`
    Counter,
    /// `/topk`
    TopK,
    /// `/trending`
    Trending,
    /// `/sync`
    Sync,
    /// `/slots/{slot}/copy`
    SlotCopy,
    /// `/healthz`
    Health,
    /// `/metrics`
    Metrics,
    /// `/openapi.json`
    OpenApi,
}

/// Every path this tier answers, with its route (its OpenAPI document lists the same).
pub const ROUTES: &[(&str, Route)] = &[
    ("/counter/{id}", Route::Counter),
    ("/topk", Route::TopK),
    ("/trending", Route::Trending),
    ("/sync", Route::Sync),
    ("/slots/{slot}/copy", Route::SlotCopy),
    ("/healthz", Route::Health),
    ("/metrics", Route::Metrics),
    ("/openapi.json", Route::OpenApi),
];

/// What each route needs of a request (README, "Access"): a client token with a right, a
/// tier process of the roles that call it, or nothing. `datacenter` is this aggregator's,
/// `slot` the route's `{slot}`: `/sync` is pulled by the global aggregator (slot states) and
/// this datacenter's shard nodes (descriptions), a slot's copy only by the node of that slot,
/// which restores it.
pub fn need(route: Route, slot: Option<&str>, datacenter: &str) -> Need {
    match route {
        Route::Counter | Route::TopK | Route::Trending => Need::Right(Right::Read),
        Route::Sync => Need::Tier(vec![Allow::Global, Allow::ShardsOf(datacenter.to_owned())]),
        Route::SlotCopy => Need::Tier(Allow::slot_owner(slot, Some(datacenter))),
        Route::Health | Route::Metrics | Route::OpenApi => Need::Open,
    }
}

/// Builds the router once per aggregator.
pub fn router() -> matchit::Router<Route> {
    http::router(ROUTES.iter().copied())
}

/// Answers one request; every error becomes its JSON answer.
pub async fn handle(state: Arc<AggregatorState>, request: Request<Incoming>) -> Response {
    let need = |routed: &Routed<Route>, _: &Request<Incoming>| {
        need(
            routed.route,
            routed.slot.as_deref(),
            &state.config.datacenter,
        )
    };
    http::answer(
        &state.router,
        &state.access,
        need,
        request,
        |routed, request| dispatch(&state, routed, request),
    )
    .await
}

async fn dispatch(
    state: &AggregatorState,
    Routed { route, id, slot }: Routed<Route>,
    request: Request<Incoming>,
) -> Result<Response, AggregatorError> {
    match (route, request.method(), id, slot) {
        (Route::Counter, &Method::GET, Some(id), _) => read(state, &id, request.uri().query()),
        (Route::TopK, &Method::GET, _, _) => top_k(state, request.uri().query()).await,
        (Route::Trending, &Method::GET, _, _) => trending(state, request.uri().query()).await,
        (Route::Sync, &Method::POST, _, _) => Ok(sync(state, request).await?),
        (Route::SlotCopy, &Method::GET, _, Some(slot)) => {
            slot_copy(state, slot, request.uri().query())
        }
        (Route::Health, &Method::GET, _, _) => Ok(health(state)),
        (Route::OpenApi, &Method::GET, _, _) => Ok(json_response(
            StatusCode::OK,
            &crate::openapi::document().to_json(),
        )),
        (Route::Metrics, &Method::GET, _, _) => {
            let replica = state.replica.read().expect("replica lock");
            Ok(state.metrics.scrape(&replica, state.clock.now_unix_ms()))
        }
        _ => Err(RequestError::method_not_allowed(&request).into()),
    }
}

fn read(
    state: &AggregatorState,
    id: &CounterId,
    query: Option<&str>,
) -> Result<Response, AggregatorError> {
    let now_ms = state.clock.now_unix_ms();
    let window = http::parse_read_query(query, now_ms / 1000, |_, _| Ok(false))?;
    let reading = {
        let replica = state.replica.read().expect("replica lock");
        if let Some(window) = &window {
            let counter = replica.counter(id.as_str());
            if counter.is_unique() {
                return Err(http::no_window_for_unique().into());
            }
            window.check(counter.window_seconds(state.config.default_window_seconds))?;
        }
        read_counter(
            &replica,
            &state.config.datacenter,
            &state.slot_names,
            id.as_str(),
            window.as_ref(),
            now_ms,
        )
    };
    let reading = reading.ok_or_else(|| AggregatorError::CounterNotFound(id.to_string()))?;
    Ok(json_response(StatusCode::OK, &reading))
}

async fn top_k(state: &AggregatorState, query: Option<&str>) -> Result<Response, AggregatorError> {
    let now_ms = state.clock.now_unix_ms();
    let query = parse_top_query(query, now_ms / 1000, |_, _| Ok(false))?;
    let (prefix, k, window) = (&query.prefix, query.k, query.window);
    let ask = |replica: &_| trends::ranking(replica, prefix, k, None, window);
    let lists = state.scans.rank(&state.replica, now_ms / 1000, ask).await?;
    let slots = state.slot_names.len();
    let replica = state.replica.read().expect("replica lock");
    let answer = trends::top_k(&replica, slots, query, lists, now_ms);
    Ok(json_response(StatusCode::OK, &answer))
}

async fn trending(
    state: &AggregatorState,
    query: Option<&str>,
) -> Result<Response, AggregatorError> {
    let now_ms = state.clock.now_unix_ms();
    let prefix = parse_trending_query(query, |_, _| Ok(false))?;
    let trending = &state.config.trending;
    let threshold = trending
        .threshold(&prefix)
        .map_err(AggregatorError::NoTrendingPrefix)?;
    let window = WindowQuery {
        seconds: trending.window_seconds,
        at: now_ms / 1000,
    };
    let min = Some(i128::from(threshold));
    let ask = |replica: &_| trends::ranking(replica, &prefix, usize::MAX, min, Some(window));
    let lists = state.scans.rank(&state.replica, now_ms / 1000, ask).await?;
    let slots = state.slot_names.len();
    let replica = state.replica.read().expect("replica lock");
    let answer = trends::trending(&replica, slots, (prefix, threshold), window, lists, now_ms);
    Ok(json_response(StatusCode::OK, &answer))
}

async fn sync(
    state: &AggregatorState,
    request: Request<Incoming>,
) -> Result<Response, RequestError> {
    let now_ms = state.clock.now_unix_ms();
    serve_sync(
        request,
        &state.replica,
        &state.config.datacenter,
        state.config.sync.page_entries,
        now_ms,
        |replica| freshness(replica, &state.slot_names, now_ms),
    )
    .await
}

fn slot_copy(
    state: &AggregatorState,
    slot: String,
    query: Option<&str>,
) -> Result<Response, AggregatorError> {
    let (from, limit) = parse_copy_query(query, state.config.sync.page_entries)?;
    let copy = state
        .replica
        .read()
        .expect("replica lock")
        .slot_copy(&slot, from, limit);
    let copy = copy.ok_or_else(|| AggregatorError::UnknownSlot {
        slot,
        datacenter: state.config.datacenter.clone(),
    })?;
    Ok(answer_slot_copy(&copy))
}

fn health(state: &AggregatorState) -> Response {
    #[derive(Serialize)]
    struct Health<'a> {
        status: &'a str,
        datacenter: &'a str,
        counters: usize,
        state_bytes: u64,
        max_state_bytes: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        over_bound: Option<String>,
        slots: Named<SourceHealth>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        conflicts: Vec<String>,
    }
    let now_ms = state.clock.now_unix_ms();
    let replica = state.replica.read().expect("replica lock");
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
    let over_bound = replica.over_bound();
    json_response(
        StatusCode::OK,
        &Health {
            // The aggregator serves either way; a conflict is the shard nodes' to resolve, and
            // sums past the byte bound are marked incomplete in every answer.
            status: match (conflicts.is_empty(), over_bound.is_none()) {
                (false, _) => "slot served twice",
                (true, false) => "over its byte bound",
                (true, true) => "ok",
            },
            datacenter: &state.config.datacenter,
            counters: replica.copies.len(),
            state_bytes: replica.copies.bytes().held(),
            max_state_bytes: replica.copies.bytes().max(),
            over_bound,
            slots,
            conflicts,
        },
    )
}
