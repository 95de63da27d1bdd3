//! The global aggregator's HTTP API. Every answer comes from memory: no read waits on a
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

use crate::error::GlobalError;
use crate::state::{
    DatacenterStatus, GlobalRead, GlobalState, answer_read, datacenter_statuses, read_datacenters,
    read_unique_datacenters,
};
use crate::trends::{self, Freshness};

/// The endpoints, as matched by the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/counter/{id}`
    Counter,
    /// `/topk`
    TopK,
    /// `/trending`
    Trending,
    /// `/datacenters`
    Datacenters,
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
    ("/datacenters", Route::Datacenters),
    ("/sync", Route::Sync),
    ("/slots/{slot}/copy", Route::SlotCopy),
    ("/healthz", Route::Health),
    ("/metrics", Route::Metrics),
    ("/openapi.json", Route::OpenApi),
];

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

/// Builds the router once.
pub fn router() -> matchit::Router<Route> {
    http::router(ROUTES.iter().copied())
}

/// Answers one request; every error (a stale read's 503 too) becomes its JSON answer.
pub async fn handle(state: Arc<GlobalState>, request: Request<Incoming>) -> Response {
    let state: &GlobalState = &state;
    let now_ms = state.clock.now_unix_ms();
    let dispatch = |routed: Routed<Route>, request: Request<Incoming>| async move {
        match (routed.route, request.method(), routed.id) {
            (Route::SlotCopy, &Method::GET, _) => {
                let slot = routed.slot.unwrap_or_default();
                let limit = state.config.sync.page_entries;
                let (from, limit) = parse_copy_query(request.uri().query(), limit)?;
                let copy = state
                    .replica
                    .read()
                    .expect("replica lock")
                    .slot_copy(&slot, from, limit);
                match copy {
                    Some(copy) => Ok(answer_slot_copy(&copy)),
                    None => Err(GlobalError::UnknownSlot(slot)),
                }
            }
            (Route::Counter, &Method::GET, Some(id)) => {
                let query = ReadQuery::parse(
                    request.uri().query(),
                    state.config.max_staleness_ms,
                    now_ms / 1000,
                )?;
                read(state, &id, query, now_ms)
            }
            (Route::TopK, &Method::GET, _) => top_k(state, request.uri().query(), now_ms).await,
            (Route::Trending, &Method::GET, _) => {
                trending(state, request.uri().query(), now_ms).await
            }
            (Route::Datacenters, &Method::GET, _) => Ok(datacenters(state, now_ms)),
            (Route::Sync, &Method::POST, _) => {
                let limit = state.config.sync.page_entries;
                let answer = serve_sync(request, &state.replica, "global", limit, now_ms, |_| {
                    Vec::new()
                });
                Ok(answer.await?)
            }
            (Route::Health, &Method::GET, _) => Ok(health(state, now_ms)),
            (Route::OpenApi, &Method::GET, _) => Ok(json_response(
                StatusCode::OK,
                &crate::openapi::document().to_json(),
            )),
            (Route::Metrics, &Method::GET, _) => {
                let replica = state.replica.read().expect("replica lock");
                Ok(state.metrics.scrape(&replica, now_ms))
            }
            _ => Err(GlobalError::from(RequestError::method_not_allowed(
                &request,
            ))),
        }
    };
    let need =
        |routed: &Routed<Route>, _: &Request<Incoming>| need(routed.route, routed.slot.as_deref());
    http::answer(&state.router, &state.access, need, request, dispatch).await
}

/// The query of a global read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadQuery {
    /// A datacenter staler than this (milliseconds) is stale for this read.
    pub max_staleness_ms: u64,
    /// Whether stale datacenters give a partial answer (200, `complete: false`) rather than 503.
    pub allow_partial: bool,
    /// The rolling window asked for, if any (`window=S&at=T`).
    pub window: Option<WindowQuery>,
}

impl ReadQuery {
    /// Parses `max_staleness_ms=N&allow_partial=true|false&window=S&at=T`, all optional (`N`
    /// defaults to `default_max_staleness_ms`, partial answers to not allowed, `T` to
    /// `now_secs`). Any other key, a key given twice or a bad value is refused.
    pub fn parse(
        query: Option<&str>,
        default_max_staleness_ms: u64,
        now_secs: u64,
    ) -> Result<Self, RequestError> {
        let mut staleness = StalenessKeys::default();
        let window =
            http::parse_read_query(query, now_secs, |key, value| staleness.take(key, value))?;
        let freshness = staleness.freshness(default_max_staleness_ms);
        Ok(Self {
            max_staleness_ms: freshness.max_staleness_ms,
            allow_partial: freshness.allow_partial,
            window,
        })
    }
}

/// The staleness keys any global read takes: `max_staleness_ms=N&allow_partial=true|false`.
#[derive(Debug, Default)]
struct StalenessKeys {
    max_staleness_ms: Option<u64>,
    allow_partial: Option<bool>,
}

impl StalenessKeys {
    /// Takes `key` if it is a staleness key (refusing a bad value); returns whether it did.
    fn take(&mut self, key: &str, value: &str) -> Result<bool, RequestError> {
        let bad = |message: String| RequestError::BadRequest(message);
        match key {
            "max_staleness_ms" => {
                self.max_staleness_ms = Some(value.parse::<u64>().map_err(|_| {
                    bad(format!(
                        "max_staleness_ms must be a whole number of milliseconds, got {value:?}"
                    ))
                })?);
                Ok(true)
            }
            "allow_partial" => {
                self.allow_partial = Some(match value {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(bad(format!(
                            "allow_partial must be true or false, got {value:?}"
                        )));
                    }
                });
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The freshness asked for: `max_staleness_ms` defaults to `default_max_staleness_ms`,
    /// partial answers to not allowed.
    fn freshness(&self, default_max_staleness_ms: u64) -> Freshness {
        Freshness {
            max_staleness_ms: self.max_staleness_ms.unwrap_or(default_max_staleness_ms),
            allow_partial: self.allow_partial.unwrap_or(false),
        }
    }
}

async fn top_k(
    state: &GlobalState,
    query: Option<&str>,
    now_ms: u64,
) -> Result<Response, GlobalError> {
    let mut staleness = StalenessKeys::default();
    let query = parse_top_query(query, now_ms / 1000, |key, value| {
        staleness.take(key, value)
    })?;
    let freshness = staleness.freshness(state.config.max_staleness_ms);
    let (datacenters, prefix, k, window) =
        (state.names.len(), &query.prefix, query.k, query.window);
    let ask = |replica: &_| trends::rankings(replica, datacenters, prefix, k, None, window);
    let lists = state.scans.rank(&state.replica, now_ms / 1000, ask).await?;
    let answer = {
        let replica = state.replica.read().expect("replica lock");
        trends::top_k(&replica, &state.names, (query, lists), freshness, now_ms)
    };
    match answer {
        Ok(answer) => Ok(json_response(StatusCode::OK, &answer)),
        Err(refusal) => Err(GlobalError::StaleTop(Box::new(refusal))),
    }
}

async fn trending(
    state: &GlobalState,
    query: Option<&str>,
    now_ms: u64,
) -> Result<Response, GlobalError> {
    let mut staleness = StalenessKeys::default();
    let prefix = parse_trending_query(query, |key, value| staleness.take(key, value))?;
    let freshness = staleness.freshness(state.config.max_staleness_ms);
    let config = &state.config.trending;
    let threshold = config
        .threshold(&prefix)
        .map_err(GlobalError::NoTrendingPrefix)?;
    let window = WindowQuery {
        seconds: config.window_seconds,
        at: now_ms / 1000,
    };
    let (datacenters, min) = (state.names.len(), Some(i128::from(threshold)));
    let ask = |replica: &_| {
        trends::rankings(replica, datacenters, &prefix, usize::MAX, min, Some(window))
    };
    let lists = state.scans.rank(&state.replica, now_ms / 1000, ask).await?;
    let answer = {
        let replica = state.replica.read().expect("replica lock");
        let asked = (prefix, threshold, lists);
        trends::trending(&replica, &state.names, asked, window, freshness, now_ms)
    };
    match answer {
        Ok(answer) => Ok(json_response(StatusCode::OK, &answer)),
        Err(refusal) => Err(GlobalError::StaleTrending(Box::new(refusal))),
    }
}

fn read(
    state: &GlobalState,
    id: &CounterId,
    query: ReadQuery,
    now_ms: u64,
) -> Result<Response, GlobalError> {
    let (held, readings, unique) = {
        let replica = state.replica.read().expect("replica lock");
        let counter = replica.counter(id.as_str());
        let unique = counter.is_unique();
        if let Some(window) = &query.window {
            if unique {
                return Err(http::no_window_for_unique().into());
            }
            window.check(counter.window_seconds(state.config.default_window_seconds))?;
        }
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
        GlobalRead::Stale(refusal) => Err(GlobalError::Stale(Box::new(refusal))),
        GlobalRead::NotFound => Err(GlobalError::CounterNotFound(id.to_string())),
    }
}

fn datacenters(state: &GlobalState, now_ms: u64) -> Response {
    #[derive(Serialize)]
    struct Datacenters {
        datacenters: Named<DatacenterStatus>,
    }
    let replica = state.replica.read().expect("replica lock");
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
    let replica = state.replica.read().expect("replica lock");
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

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_net::HttpError;

    #[test]
    fn the_query_takes_optional_staleness_partial_and_window_keys() {
        assert_eq!(
            ReadQuery::parse(None, 5000, 77).unwrap(),
            ReadQuery {
                max_staleness_ms: 5000,
                allow_partial: false,
                window: None,
            }
        );
        assert_eq!(
            ReadQuery::parse(
                Some("allow_partial=true&max_staleness_ms=300&window=60"),
                5000,
                77
            )
            .unwrap(),
            ReadQuery {
                max_staleness_ms: 300,
                allow_partial: true,
                window: Some(WindowQuery {
                    seconds: 60,
                    at: 77
                }),
            }
        );
        let query = ReadQuery::parse(Some("window=300&at=4"), 5000, 77).unwrap();
        assert_eq!(
            query.window,
            Some(WindowQuery {
                seconds: 300,
                at: 4
            })
        );
        for bad in [
            "max_staleness_ms=soon",
            "max_staleness_ms=-1",
            "allow_partial=yes",
            "colour=blue",
            "max_staleness_ms=1&max_staleness_ms=2",
            "window=0",
            "window=x",
            "at=5",
            "window=5&at=-1",
            "window=5&window=6",
        ] {
            let error = ReadQuery::parse(Some(bad), 5000, 77).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{bad}");
        }
    }
}
