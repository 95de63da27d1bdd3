//! The datacenter tier's HTTP API. Every answer comes from memory: no read waits on a
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

use geocount_http::routing::{self, Named, RequestError, Routed};
use geocount_http::{Allow, Need, parse_top_query, parse_trending_query};
use geocount_model::{CounterId, Right};
use geocount_net::{Response, json_response};
use geocount_sync::SourceHealth;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde::Serialize;

use super::state::{DatacenterState, freshness, read_counter};
use super::trends;
use crate::error::AggregatorError;
use crate::routes::{ROUTES, Route};
use crate::tier::Core;

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
        // Not routed at this tier: the router answers 404 first.
        Route::Datacenters => Need::Right(Right::Read),
        Route::Health | Route::Metrics | Route::OpenApi => Need::Open,
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
    routing::answer(
        &state.core.router,
        &state.core.access,
        need,
        request,
        |routed, request| dispatch(&state, routed, request),
    )
    .await
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
        (Route::Counter, &Method::GET, Some(id), _) => read(state, &id, query, now_ms),
        (Route::TopK, &Method::GET, _, _) => top_k(state, query, now_ms).await,
        (Route::Trending, &Method::GET, _, _) => trending(state, query, now_ms).await,
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
        (Route::OpenApi, &Method::GET, _, _) => Ok(Core::openapi(crate::openapi::datacenter())),
        (Route::Metrics, &Method::GET, _, _) => Ok(core.scrape(now_ms)),
        _ => Err(RequestError::method_not_allowed(&request).into()),
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
    let reading = reading.ok_or_else(|| AggregatorError::CounterNotFound {
        id: id.to_string(),
        held_by: "this datacenter",
    })?;
    Ok(json_response(StatusCode::OK, &reading))
}

async fn top_k(
    state: &DatacenterState,
    query: Option<&str>,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let query = parse_top_query(query, now_ms / 1000, |_, _| Ok(false))?;
    let (prefix, k, window) = (&query.prefix, query.k, query.window);
    let ask = |replica: &_| trends::ranking(replica, prefix, k, None, window);
    let lists = state.core.rank(now_ms, ask).await?;
    let slots = state.slot_names.len();
    let replica = state.core.replica.read().expect("replica lock");
    let answer = trends::top_k(&replica, slots, query, lists, now_ms);
    Ok(json_response(StatusCode::OK, &answer))
}

async fn trending(
    state: &DatacenterState,
    query: Option<&str>,
    now_ms: u64,
) -> Result<Response, AggregatorError> {
    let prefix = parse_trending_query(query, |_, _| Ok(false))?;
    let (threshold, window) = state.core.trending_window(&prefix, now_ms)?;
    let min = Some(i128::from(threshold));
    let ask = |replica: &_| trends::ranking(replica, &prefix, usize::MAX, min, Some(window));
    let lists = state.core.rank(now_ms, ask).await?;
    let slots = state.slot_names.len();
    let replica = state.core.replica.read().expect("replica lock");
    let answer = trends::trending(&replica, slots, (prefix, threshold), window, lists, now_ms);
    Ok(json_response(StatusCode::OK, &answer))
}

fn health(state: &DatacenterState, now_ms: u64) -> Response {
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
            datacenter: &state.datacenter,
            counters: replica.copies.len(),
            state_bytes: replica.copies.bytes().held(),
            max_state_bytes: replica.copies.bytes().max(),
            over_bound,
            slots,
            conflicts,
        },
    )
}
