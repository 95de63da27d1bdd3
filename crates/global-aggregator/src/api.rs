//! The global aggregator's HTTP API. Every answer comes from memory: no read waits on a
//! datacenter.
//!
//! | route | does |
//! |---|---|
//! | `GET /counter/{id}?max_staleness_ms=N&allow_partial=B` | the sum over datacenters, or 503 naming the stale ones |
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

use geocount_model::CounterId;
use geocount_net::{Response, json_response};
use geocount_sync::SourceHealth;
use geocount_sync::http::{self, Named, RequestError, Routed, serve_sync};
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde::Serialize;

use crate::error::GlobalError;
use crate::state::{
    DatacenterStatus, GlobalRead, GlobalState, answer_read, datacenter_statuses, read_datacenters,
};

/// The endpoints, as matched by the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/counter/{id}`
    Counter,
    /// `/datacenters`
    Datacenters,
    /// `/sync`
    Sync,
    /// `/healthz`
    Health,
    /// `/metrics`
    Metrics,
}

/// Builds the router once.
pub fn router() -> matchit::Router<Route> {
    http::router([
        ("/counter/{id}", Route::Counter),
        ("/datacenters", Route::Datacenters),
        ("/sync", Route::Sync),
        ("/healthz", Route::Health),
        ("/metrics", Route::Metrics),
    ])
}

/// Answers one request; every error (a stale read's 503 too) becomes its JSON answer.
pub async fn handle(state: Arc<GlobalState>, request: Request<Incoming>) -> Response {
    let state: &GlobalState = &state;
    let now_ms = state.clock.now_unix_ms();
    let dispatch = |routed: Routed<Route>, request: Request<Incoming>| async move {
        match (routed.route, request.method(), routed.id) {
            (Route::Counter, &Method::GET, Some(id)) => {
                let query = ReadQuery::parse(request.uri().query(), state.config.max_staleness_ms)?;
                read(state, &id, query, now_ms)
            }
            (Route::Datacenters, &Method::GET, _) => Ok(datacenters(state, now_ms)),
            (Route::Sync, &Method::POST, _) => {
                let limit = state.config.sync.page_entries;
                let answer = serve_sync(request, &state.replica, "global", limit, |_| Vec::new());
                Ok(answer.await?)
            }
            (Route::Health, &Method::GET, _) => Ok(health(state, now_ms)),
            (Route::Metrics, &Method::GET, _) => {
                let replica = state.replica.read().expect("replica lock");
                Ok(state.metrics.scrape(&replica, now_ms))
            }
            _ => Err(GlobalError::from(RequestError::method_not_allowed(
                &request,
            ))),
        }
    };
    http::answer(&state.router, request, dispatch).await
}

/// The query of a global read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadQuery {
    /// A datacenter staler than this (milliseconds) is stale for this read.
    pub max_staleness_ms: u64,
    /// Whether stale datacenters give a partial answer (200, `complete: false`) rather than 503.
    pub allow_partial: bool,
}

impl ReadQuery {
    /// Parses `max_staleness_ms=N&allow_partial=true|false`, both optional (`N` defaults to
    /// `default_max_staleness_ms`, partial answers to not allowed). Any other key, a key given
    /// twice or a bad value is refused.
    pub fn parse(query: Option<&str>, default_max_staleness_ms: u64) -> Result<Self, RequestError> {
        let mut max_staleness_ms = None;
        let mut allow_partial = None;
        let bad = |message: String| RequestError::BadRequest(message);
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match key.as_ref() {
                "max_staleness_ms" if max_staleness_ms.is_none() => {
                    max_staleness_ms = Some(value.parse::<u64>().map_err(|_| {
                        bad(format!(
                            "max_staleness_ms must be a whole number of milliseconds, got {value:?}"
                        ))
                    })?);
                }
                "allow_partial" if allow_partial.is_none() => {
                    allow_partial = Some(match value.as_ref() {
                        "true" => true,
                        "false" => false,
                        _ => {
                            return Err(bad(format!(
                                "allow_partial must be true or false, got {value:?}"
                            )));
                        }
                    });
                }
                "max_staleness_ms" | "allow_partial" => {
                    return Err(bad(format!("query parameter {key} is given twice")));
                }
                _ => {
                    return Err(bad(format!(
                        "unknown query parameter {key:?}: expected max_staleness_ms or allow_partial"
                    )));
                }
            }
        }
        Ok(Self {
            max_staleness_ms: max_staleness_ms.unwrap_or(default_max_staleness_ms),
            allow_partial: allow_partial.unwrap_or(false),
        })
    }
}

fn read(
    state: &GlobalState,
    id: &CounterId,
    query: ReadQuery,
    now_ms: u64,
) -> Result<Response, GlobalError> {
    let (held, readings) = {
        let replica = state.replica.read().expect("replica lock");
        read_datacenters(&replica, &state.slot_datacenters, id.as_str(), now_ms)
    };
    let answer = answer_read(
        id.as_str(),
        &state.names,
        held,
        readings,
        query.max_staleness_ms,
        query.allow_partial,
    );
    match answer {
        GlobalRead::Counter(reading) => Ok(json_response(StatusCode::OK, &reading)),
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
        datacenters: Named<SourceHealth>,
    }
    let replica = state.replica.read().expect("replica lock");
    let datacenters = (state.names.iter().enumerate())
        .map(|(dc, name)| (name.clone(), replica.source_health(dc, now_ms)))
        .collect();
    json_response(
        StatusCode::OK,
        &Health {
            status: "ok",
            counters: replica.copies.len(),
            datacenters,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use geocount_net::HttpError;

    #[test]
    fn the_query_takes_two_optional_keys() {
        assert_eq!(
            ReadQuery::parse(None, 5000).unwrap(),
            ReadQuery {
                max_staleness_ms: 5000,
                allow_partial: false
            }
        );
        assert_eq!(
            ReadQuery::parse(Some("allow_partial=true&max_staleness_ms=300"), 5000).unwrap(),
            ReadQuery {
                max_staleness_ms: 300,
                allow_partial: true
            }
        );
        for bad in [
            "max_staleness_ms=soon",
            "max_staleness_ms=-1",
            "allow_partial=yes",
            "colour=blue",
            "max_staleness_ms=1&max_staleness_ms=2",
        ] {
            let error = ReadQuery::parse(Some(bad), 5000).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{bad}");
        }
    }
}
