//! The HTTP pieces every tier's API shares: matching a path to a route with its decoded
//! parameters, checking its access (the process a call between tiers proved goes into the
//! request's extensions, [`ProvenProcess`]), and answering the result ([`answer`]), the
//! refusals any route can give ([`RequestError`]), `GET /metrics`, and JSON objects whose keys
//! keep their order ([`Named`]).

use std::future::Future;

use geocount_model::{CounterId, ModelError, WindowQuery};
use geocount_net::{
    BodyError, HttpError, Peer, PeerProcess, Response, bytes_response, error_answer,
};
use hyper::body::Incoming;
use hyper::header::{ALLOW, HeaderValue};
use hyper::{HeaderMap, Method, Request, StatusCode};
use percent_encoding::percent_decode_str;
use prometheus_client::registry::Registry;
use serde::Serialize;

use crate::access::{Access, AccessError, Caller, Need};
use crate::exposition;

/// What any route of a tier's API refuses before its own logic runs, in the order the checks
/// happen: the path, the method, the counter id, then the query or body.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// A path no route matches.
    #[error("no such endpoint: {0}")]
    NoRoute(String),
    /// A known path with a method it does not take.
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed {
        /// The method used.
        method: Method,
        /// The path.
        path: String,
        /// The methods the path takes, sent as `Allow`.
        allowed: &'static [Method],
    },
    /// An invalid counter id in the path.
    #[error(transparent)]
    InvalidId(#[from] ModelError),
    /// A request that cannot be understood: a bad query, a malformed body.
    #[error("{0}")]
    BadRequest(String),
    /// The body could not be read or is too large.
    #[error(transparent)]
    Body(#[from] BodyError),
}

impl HttpError for RequestError {
    fn status(&self) -> StatusCode {
        match self {
            RequestError::NoRoute(_) => StatusCode::NOT_FOUND,
            RequestError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            RequestError::InvalidId(_) | RequestError::BadRequest(_) => StatusCode::BAD_REQUEST,
            RequestError::Body(refusal) => refusal.status(),
        }
    }

    /// `{"error": ...}`; a 405 also lists the methods its path takes in `Allow` (RFC 9110).
    fn to_response(&self) -> Response {
        let mut response = error_answer(self);
        if let RequestError::MethodNotAllowed { allowed, .. } = self {
            let allow: Vec<&str> = allowed.iter().map(Method::as_str).collect();
            let allow = HeaderValue::from_str(&allow.join(", "))
                .expect("method names are valid header values");
            response.headers_mut().insert(ALLOW, allow);
        }
        response
    }
}

impl RequestError {
    /// The refusal of `request`'s method on its path, which takes only `allowed`.
    pub fn method_not_allowed(request: &Request<Incoming>, allowed: &'static [Method]) -> Self {
        RequestError::MethodNotAllowed {
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            allowed,
        }
    }
}

/// A route of a tier's router: it says which methods its path takes.
pub trait Endpoint: Copy {
    /// The methods the route takes; any other is answered 405 with `Allow` listing these.
    fn methods(self) -> &'static [Method];
}

/// `GET` only.
pub const GET: &[Method] = &[Method::GET];
/// `POST` only.
pub const POST: &[Method] = &[Method::POST];
/// `PATCH` only.
pub const PATCH: &[Method] = &[Method::PATCH];

/// A path matched to a route, with its parameters decoded: `{id}` as a validated counter id,
/// `{slot}` as it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed<R> {
    /// The route.
    pub route: R,
    /// The `{id}` parameter, percent-decoded and validated.
    pub id: Option<CounterId>,
    /// The `{slot}` parameter.
    pub slot: Option<String>,
}

/// A router of `(path, route)` pairs.
pub fn router<R>(routes: impl IntoIterator<Item = (&'static str, R)>) -> matchit::Router<R> {
    let mut router = matchit::Router::new();
    for (path, route) in routes {
        router.insert(path, route).expect("routes do not conflict");
    }
    router
}

/// Matches `path` in `router`: 404 when no route matches, 400 when `{id}` is not a valid
/// counter id.
pub fn route<R: Copy>(router: &matchit::Router<R>, path: &str) -> Result<Routed<R>, RequestError> {
    decode(find(router, path)?)
}

/// Matches `request`'s path in `router` as [`route`] does, refusing a method its route does
/// not take (405) before its parameters are decoded: the method is wrong whatever they are.
pub fn route_request<R: Endpoint>(
    router: &matchit::Router<R>,
    request: &Request<Incoming>,
) -> Result<Routed<R>, RequestError> {
    let matched = find(router, request.uri().path())?;
    let allowed = matched.value.methods();
    if !allowed.contains(request.method()) {
        return Err(RequestError::method_not_allowed(request, allowed));
    }
    decode(matched)
}

fn find<'r, 'p, R>(
    router: &'r matchit::Router<R>,
    path: &'p str,
) -> Result<matchit::Match<'r, 'p, &'r R>, RequestError> {
    router
        .at(path)
        .map_err(|_| RequestError::NoRoute(path.to_owned()))
}

fn decode<R: Copy>(matched: matchit::Match<'_, '_, &R>) -> Result<Routed<R>, RequestError> {
    Ok(Routed {
        route: *matched.value,
        id: matched
            .params
            .get("id")
            .map(decode_counter_id)
            .transpose()?,
        slot: matched.params.get("slot").map(str::to_owned),
    })
}

/// Answers `request`: matches its path and method in `router` ([`route_request`]; a refusal
/// is answered at once), lets `access` check it against what `need` says its route needs
/// (before anything else runs: a refusal is answered at once and changes nothing), hands the
/// match to `dispatch`, and turns the result into the answer (server failures are logged).
pub async fn answer<R, E, F, Fut>(
    router: &matchit::Router<R>,
    access: &Access,
    need: impl FnOnce(&Routed<R>, &Request<Incoming>) -> Need,
    request: Request<Incoming>,
    dispatch: F,
) -> Response
where
    R: Endpoint,
    E: HttpError + From<RequestError>,
    F: FnOnce(Routed<R>, Request<Incoming>) -> Fut,
    Fut: Future<Output = Result<Response, E>>,
{
    let mut request = request;
    let result = match route_request(router, &request) {
        Ok(routed) => {
            let need = need(&routed, &request);
            let caller = Caller {
                headers: request.headers(),
                certified: request
                    .extensions()
                    .get::<PeerProcess>()
                    .map(|PeerProcess(name)| &**name),
                method: request.method(),
                path: request.uri().path(),
            };
            let proven = access.proven_process(&need, caller).map(str::to_owned);
            match access.check(&need, caller) {
                Ok(Some(token)) => {
                    let name = TokenName(token.to_owned());
                    request.extensions_mut().insert(name);
                }
                Ok(None) => {}
                Err(refusal) => {
                    log_refusal(&refusal, &request);
                    return refusal.to_response();
                }
            }
            if let Some(process) = proven {
                request.extensions_mut().insert(ProvenProcess(process));
            }
            dispatch(routed, request).await
        }
        Err(refusal) => return refusal.to_response(),
    };
    result.unwrap_or_else(|error| {
        // 503 is an expected answer (a stale read), not a failure of this process.
        let status = error.status();
        if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(%error, "request failed");
        }
        error.to_response()
    })
}

/// The name of the client token a request was let through with, in its extensions (absent
/// when no token was needed or none is configured): a shard node scopes idempotency keys by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenName(pub String);

/// The tier process a request between tiers proved to be, in its extensions (absent when
/// nothing proves a name: no `[tls]` and no cluster secret): an aggregator lets a shard node
/// announce only its own slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenProcess(pub String);

/// Logs a refused request: a refused call between tiers as a warning naming the caller's
/// process and address (a misconfigured tier, or someone probing), a client's refusal at debug
/// level.
fn log_refusal(refusal: &AccessError, request: &Request<Incoming>) {
    let peer = request
        .extensions()
        .get::<Peer>()
        .map_or_else(|| "unknown".to_owned(), |Peer(addr)| addr.to_string());
    let path = request.uri().path();
    if let AccessError::Tier { process, .. } = refusal {
        let process = process.as_deref().unwrap_or("(none)");
        tracing::warn!(%peer, process, path, "refused a call between tiers: {refusal}");
    } else {
        tracing::debug!(%peer, path, "refused a request: {refusal}");
    }
}

/// A counter id from a path segment: percent-decoded, then validated.
pub fn decode_counter_id(raw: &str) -> Result<CounterId, RequestError> {
    let decoded = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| ModelError::InvalidCounterId("it is not valid UTF-8"))?;
    Ok(CounterId::new(decoded)?)
}

/// The media type of `GET /metrics`: the OpenMetrics text format.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `GET /metrics`: `registry` in the OpenMetrics text format, or in the Prometheus text format
/// 0.0.4 for a request (with `headers`) that asks for that only ([`exposition::wants_text`]).
pub fn metrics_response(registry: &Registry, headers: &HeaderMap) -> Response {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    if exposition::wants_text(headers) {
        let text = exposition::openmetrics_to_text(&text);
        return bytes_response(StatusCode::OK, exposition::TEXT_CONTENT_TYPE, text.into());
    }
    bytes_response(StatusCode::OK, METRICS_CONTENT_TYPE, text.into())
}

/// Named values that serialize as one JSON object, keys in list order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Named<T>(pub Vec<(String, T)>);

impl<T: Serialize> Serialize for Named<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|(name, value)| (name, value)))
    }
}

impl<T> FromIterator<(String, T)> for Named<T> {
    fn from_iter<I: IntoIterator<Item = (String, T)>>(iter: I) -> Self {
        Named(iter.into_iter().collect())
    }
}

/// Refuses a `window` longer than the counter's (`window_seconds`).
pub fn check_window_length(window: &WindowQuery, window_seconds: u32) -> Result<(), RequestError> {
    if window.seconds > window_seconds {
        return Err(RequestError::BadRequest(format!(
            "window={} is longer than the counter's window of {window_seconds} s",
            window.seconds
        )));
    }
    Ok(())
}

/// The refusal of a `window=` read of a unique counter: its sketch counts distinct items over
/// all time and keeps no per-second buckets.
pub fn no_window_for_unique() -> RequestError {
    RequestError::BadRequest(
        "a unique counter keeps no rolling window: read it without window= and at=".into(),
    )
}

/// Parses a read's query string: `window=S` (1 or more seconds) and `at=T` (unix seconds,
/// default `now_secs`; only with `window`) are understood here; every other key goes to
/// `other`, which returns whether it took it. Unknown keys, repeated keys and bad values are
/// refused with 400.
pub fn parse_read_query(
    query: Option<&str>,
    now_secs: u64,
    mut other: impl FnMut(&str, &str) -> Result<bool, RequestError>,
) -> Result<Option<WindowQuery>, RequestError> {
    let bad = |message: String| RequestError::BadRequest(message);
    let (mut seconds, mut at) = (None, None);
    let mut seen = std::collections::HashSet::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if !seen.insert(key.clone()) {
            return Err(bad(format!("query parameter {key} is given twice")));
        }
        match key.as_ref() {
            "window" => {
                let s = value.parse::<u32>().ok().filter(|s| *s > 0);
                seconds = Some(s.ok_or_else(|| {
                    bad(format!(
                        "window must be a whole number of seconds above 0, got {value:?}"
                    ))
                })?);
            }
            "at" => {
                at = Some(value.parse::<u64>().map_err(|_| {
                    bad(format!(
                        "at must be a time in whole unix seconds, got {value:?}"
                    ))
                })?);
            }
            key => {
                if !other(key, &value)? {
                    return Err(bad(format!("unknown query parameter {key:?}")));
                }
            }
        }
    }
    match (seconds, at) {
        (Some(seconds), at) => Ok(Some(WindowQuery {
            seconds,
            at: at.unwrap_or(now_secs),
        })),
        (None, Some(_)) => Err(bad("at is only meaningful with window".into())),
        (None, None) => Ok(None),
    }
}

/// The accept loop's limits from the topology's `[http]` section: every tier serves under them.
pub fn serve_limits(settings: &geocount_model::HttpSettings) -> geocount_net::ServeLimits {
    geocount_net::ServeLimits {
        max_connections: settings.max_connections,
        max_connections_per_peer: settings.max_connections_per_peer,
        header_read_timeout: std::time::Duration::from_millis(settings.header_read_timeout_ms),
        body_read_timeout: std::time::Duration::from_millis(settings.body_read_timeout_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Route {
        Counter,
        Copy,
    }

    #[test]
    fn routes_decode_and_validate_their_parameters() {
        let router = router([
            ("/counter/{id}", Route::Counter),
            ("/slots/{slot}/copy", Route::Copy),
        ]);
        let routed = route(&router, "/counter/a%2Fb%20%E6%97%A5").unwrap();
        assert_eq!(routed.route, Route::Counter);
        assert_eq!(routed.id.unwrap().as_str(), "a/b 日");
        let routed = route(&router, "/slots/DC_A_VAL_0/copy").unwrap();
        assert_eq!(routed.slot.as_deref(), Some("DC_A_VAL_0"));
        let bad = route(&router, "/counter/%0A").unwrap_err();
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        let bad = route(&router, "/counter/%FF").unwrap_err();
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        let none = route(&router, "/nothing").unwrap_err();
        assert_eq!(none.status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn named_values_keep_their_order() {
        let named: Named<u32> = [("b".to_owned(), 1), ("a".to_owned(), 2)]
            .into_iter()
            .collect();
        assert_eq!(serde_json::to_string(&named).unwrap(), r#"{"b":1,"a":2}"#);
    }
}
