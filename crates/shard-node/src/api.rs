//! The shard node's HTTP API: routes, request parsing, and answers.
//!
//! | route | does |
//! |---|---|
//! | `POST /counter` | create a counter (`{"id"?, "numberOfShards"?, "windowSeconds"?, "type"?}`) |
//! | `GET /counter/{id}` | this slot's `{id, slot, value, version}` |
//! | `PATCH /counter/{id}/write?op=INCREMENT\|DECREMENT` | write `{"delta"?: n > 0, "timestamp"?}`, or `{"item", "timestamp"?}` (INCREMENT) to a unique counter |
//! | `POST /counters/{id}/increment` | write `{"delta"?: n ≠ 0, "timestamp"?}` or `{"item", "timestamp"?}` |
//! | `POST /batch` | many writes, postcard [`BatchRequest`] → [`BatchResponse`] (or [`BatchSummary`] with `Prefer: return=minimal`) |
//! | `POST /batch/items` | many items for unique counters, postcard [`ItemBatchRequest`] → [`BatchResponse`] (or [`BatchSummary`]) |
//! | `GET /counter/{id}/route` | the counter's slots in this datacenter and their nodes |
//! | `POST /sync` | replication: own-slot states and descriptions changed since a cursor |
//! | `GET /slots/{slot}/copy` | this node's copy of a slot of its datacenter (for restores) |
//! | `GET /slots/{slot}/keys` | this node's copy of a peer slot's idempotency keys (for restores) |
//! | `GET /healthz`, `GET /metrics` | health, Prometheus text |
//!
//! Writes may carry an `Idempotency-Key` header. A write for a counter whose slots do not include
//! this node's is forwarded to one that does ([`crate::routing`]). A unique counter's reads and
//! writes answer its slot's estimate as `value` with `standard_error`. Every refusal is
//! `{"error": ...}` with a 4xx.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use geocount_model::unique::STANDARD_ERROR;
use geocount_model::wire::{
    BatchRequest, BatchResponse, BatchSummary, EntryOutcome, ItemBatchRequest, ItemEntry,
    POSTCARD_CONTENT_TYPE,
};
use geocount_model::{CounterId, CounterType, Right, SlotRecord, SlotState};
use geocount_net::prefer::{PREFERENCE_APPLIED, RETURN_MINIMAL};
use geocount_net::{
    HttpError, Response, bytes_response, json_response, prefers_minimal_return, read_body,
};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, StatusCode};
use serde::Serialize;

use crate::copies;
use crate::error::ShardError;
use crate::key_scope::KeyScope;
use crate::requests::{parse_batch, parse_create, parse_item_batch, parse_write, parse_write_op};
use crate::restore::RestoreReport;
use crate::routing::{FORWARDED_HEADER, ForwardError};
use crate::server::NodeState;
use crate::write::{Change, Command, WriteRequest, WriteResults};
use geocount_model::wire::BatchEntry;
use geocount_sync::http::{self, RequestError, Routed, TokenName, WindowQuery};
use geocount_sync::{Allow, DescriptionTable, Need};

pub use crate::requests::MAX_SHARDS_PER_COUNTER;

/// The endpoints, as matched by the router.
#[derive(Debug, Clone, Copy)]
pub enum Route {
    /// `/counter`
    Create,
    /// `/counter/{id}`
    Counter,
    /// `/counter/{id}/write`
    Write,
    /// `/counters/{id}/increment`
    Increment,
    /// `/batch`
    Batch,
    /// `/batch/items`
    BatchItems,
    /// `/counter/{id}/route`
    Route,
    /// `/sync`
    Sync,
    /// `/slots/{slot}/copy`
    SlotCopy,
    /// `/slots/{slot}/keys`
    KeyCopy,
    /// `/healthz`
    Health,
    /// `/metrics`
    Metrics,
    /// `/openapi.json`
    OpenApi,
}

/// Every path this tier answers, with its route (its OpenAPI document lists the same).
pub const ROUTES: &[(&str, Route)] = &[
    ("/counter", Route::Create),
    ("/counter/{id}", Route::Counter),
    ("/counter/{id}/write", Route::Write),
    ("/counters/{id}/increment", Route::Increment),
    ("/batch", Route::Batch),
    ("/batch/items", Route::BatchItems),
    ("/counter/{id}/route", Route::Route),
    ("/sync", Route::Sync),
    ("/slots/{slot}/copy", Route::SlotCopy),
    ("/slots/{slot}/keys", Route::KeyCopy),
    ("/healthz", Route::Health),
    ("/metrics", Route::Metrics),
    ("/openapi.json", Route::OpenApi),
];

/// What each route needs of a request (README, "Access"): a client token with a right, a
/// tier process of the roles that call it, or nothing. `datacenter` is this node's, `slot` the
/// route's `{slot}`. A write another node forwarded (marked with [`FORWARDED_HEADER`]) needs a
/// shard node of this datacenter instead of a token: the first node checked the client's, and
/// the mark alone must not let a client skip it. `/sync` is pulled by this datacenter's
/// aggregator and its shard nodes (peers), a slot's copy only by the node of that slot, which
/// restores it.
pub fn need(route: Route, slot: Option<&str>, forwarded: bool, datacenter: &str) -> Need {
    let shards = || Allow::ShardsOf(datacenter.to_owned());
    match route {
        Route::Write | Route::Increment | Route::Batch | Route::BatchItems if forwarded => {
            Need::Tier(vec![shards()])
        }
        Route::Write | Route::Increment | Route::Batch | Route::BatchItems => {
            Need::Right(Right::Write)
        }
        Route::Create => Need::Right(Right::Admin),
        Route::Counter | Route::Route => Need::Right(Right::Read),
        Route::Sync => Need::Tier(vec![Allow::AggregatorOf(datacenter.to_owned()), shards()]),
        // Only the slot's own node asks for its copies: to restore them.
        Route::SlotCopy | Route::KeyCopy => Need::Tier(Allow::slot_owner(slot, Some(datacenter))),
        Route::Health | Route::Metrics | Route::OpenApi => Need::Open,
    }
}

/// Builds the router once per node.
pub fn router() -> matchit::Router<Route> {
    http::router(ROUTES.iter().copied())
}

/// Answers one request; every error becomes its JSON answer.
pub async fn handle(state: Arc<NodeState>, request: Request<Incoming>) -> Response {
    let need = |routed: &Routed<Route>, request: &Request<Incoming>| {
        let slot = routed.slot.as_deref();
        need(routed.route, slot, is_forwarded(request), &state.datacenter)
    };
    http::answer(
        &state.routes,
        &state.access,
        need,
        request,
        |routed, request| dispatch(&state, routed, request),
    )
    .await
}

async fn dispatch(
    state: &Arc<NodeState>,
    Routed { route, id, slot }: Routed<Route>,
    request: Request<Incoming>,
) -> Result<Response, ShardError> {
    if state.restore.is_restoring() && !served_while_restoring(route, slot.as_deref(), state) {
        return Err(ShardError::Restoring {
            slot: state.slot_name.clone(),
            progress: state.restore.summary(),
        });
    }
    if let (
        Some(conflict),
        Route::Write | Route::Increment | Route::Batch | Route::BatchItems | Route::Create,
    ) = (state.health.conflict(), route)
    {
        return Err(ShardError::SlotServedTwice(conflict));
    }
    match (route, request.method().clone(), id, slot) {
        (Route::Create, Method::POST, _, _) => create(state, request).await,
        (Route::Counter, Method::GET, Some(id), _) => read(state, &id, request.uri().query()),
        (Route::Write, Method::PATCH, Some(id), _) => write(state, id, request).await,
        (Route::Increment, Method::POST, Some(id), _) => increment(state, id, request).await,
        (Route::Batch, Method::POST, _, _) => batch(state, request).await,
        (Route::BatchItems, Method::POST, _, _) => batch_items(state, request).await,
        (Route::Route, Method::GET, Some(id), _) => Ok(route_answer(state, &id)),
        (Route::Sync, Method::POST, _, _) => copies::sync(state, request).await,
        (Route::SlotCopy, Method::GET, _, Some(slot)) => {
            copies::slot_copy(state, &slot, request.uri().query())
        }
        (Route::KeyCopy, Method::GET, _, Some(slot)) => {
            copies::key_copy(state, &slot, request.uri().query())
        }
        (Route::Health, Method::GET, _, _) => Ok(health(state)),
        (Route::OpenApi, Method::GET, _, _) => Ok(json_response(
            StatusCode::OK,
            &crate::openapi::document().to_json(),
        )),
        (Route::Metrics, Method::GET, _, _) => {
            let staleness = state.sources.iter().map(|s| (s.name(), s.staleness_ms()));
            Ok(http::metrics_response(state.metrics.scrape(staleness)))
        }
        _ => Err(RequestError::method_not_allowed(&request).into()),
    }
}

/// Whether a route is answered while the slot is restored: health, metrics, the API document,
/// and the peers' slots this node holds (a peer restoring at the same time may need them).
/// Nothing of the own slot is, neither writes nor reads nor pulls: it is not whole yet.
fn served_while_restoring(route: Route, slot: Option<&str>, state: &NodeState) -> bool {
    match route {
        Route::Health | Route::Metrics | Route::OpenApi => true,
        Route::SlotCopy | Route::KeyCopy => slot != Some(state.slot_name.as_str()),
        _ => false,
    }
}

/// Whether another node forwarded this write here: it is applied here, never sent on.
fn is_forwarded(request: &Request<Incoming>) -> bool {
    request.headers().contains_key(FORWARDED_HEADER)
}

/// Whose the request's idempotency keys are: the token that sent it, or the node that
/// forwarded it (its keys come scoped already).
fn key_scope(request: &Request<Incoming>) -> KeyScope {
    if is_forwarded(request) {
        return KeyScope::Forwarded;
    }
    KeyScope::Token(
        request
            .extensions()
            .get::<TokenName>()
            .map_or_else(String::new, |TokenName(name)| name.clone()),
    )
}

fn idempotency_key(request: &Request<Incoming>) -> Result<Option<Box<str>>, ShardError> {
    let Some(value) = request.headers().get("idempotency-key") else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .map_err(|_| ShardError::BadRequest("Idempotency-Key must be visible ASCII".into()))?;
    key_scope(request).key(key).map(Some)
}

async fn create(state: &NodeState, request: Request<Incoming>) -> Result<Response, ShardError> {
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let description = parse_create(&body, &state.settings, state.clock.now_unix_ms())?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    state.send(Command::Create { description, reply }).await?;
    let created = answer.await.map_err(|_| state.stopped())??;
    Ok(json_response(StatusCode::CREATED, &created))
}

/// The answer to a read or a write: this slot's share of the counter (for a unique counter,
/// its estimate of the distinct items the slot has seen, with the estimate's relative standard
/// error).
#[derive(Debug, Serialize)]
struct SlotAnswer<'a> {
    id: &'a str,
    slot: &'a str,
    value: i64,
    version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    standard_error: Option<f64>,
}

fn slot_answer(slot_name: &str, id: &CounterId, slot: SlotState, unique: bool) -> Response {
    json_response(
        StatusCode::OK,
        &SlotAnswer {
            id: id.as_str(),
            slot: slot_name,
            value: slot.value,
            version: slot.version,
            standard_error: unique.then_some(STANDARD_ERROR),
        },
    )
}

fn read(state: &NodeState, id: &CounterId, query: Option<&str>) -> Result<Response, ShardError> {
    let window = http::parse_read_query(query, state.clock.now_unix_secs(), |_, _| Ok(false))?;
    let record = state
        .table
        .read()
        .expect("slot table lock")
        .get_record(id.as_str())
        .cloned();
    let descriptions = state.descriptions.read().expect("descriptions lock");
    let description = descriptions.get(id.as_str());
    // A counter described (created here or elsewhere) but not yet written here reads as 0.
    let record = match record {
        Some(record) => record,
        None if description.is_some() => SlotRecord::default(),
        None => return Err(ShardError::NotFound(id.to_string())),
    };
    let unique = description.map_or(record.uniques().is_some(), |d| {
        d.description.counter_type == CounterType::Unique
    });
    if unique {
        if window.is_some() {
            return Err(http::no_window_for_unique().into());
        }
        let slot = SlotState {
            value: record.uniques().map_or(0, |sketch| sketch.count()),
            version: record.state.version,
        };
        return Ok(slot_answer(&state.slot_name, id, slot, true));
    }
    let Some(window) = window else {
        return Ok(slot_answer(&state.slot_name, id, record.state, false));
    };
    let window_seconds = description.map_or(state.settings.default_window_seconds, |d| {
        d.description.window_seconds
    });
    window.check(window_seconds)?;
    #[derive(Serialize)]
    struct WindowAnswer<'a> {
        id: &'a str,
        slot: &'a str,
        value: i128,
        version: u64,
        window: WindowQuery,
    }
    Ok(json_response(
        StatusCode::OK,
        &WindowAnswer {
            id: id.as_str(),
            slot: &state.slot_name,
            value: WindowQuery::value_of(Some(&window), &record),
            version: record.state.version,
            window,
        },
    ))
}

async fn write(
    state: &NodeState,
    id: CounterId,
    request: Request<Incoming>,
) -> Result<Response, ShardError> {
    let sign = parse_write_op(request.uri().query())?;
    let key = idempotency_key(&request)?;
    let forwarded = is_forwarded(&request);
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let now_secs = state.clock.now_unix_secs();
    let (change, timestamp_secs) = parse_write(&body, sign, false, &state.settings, now_secs)?;
    let write = WriteRequest {
        id,
        change,
        idempotency_key: key,
        timestamp_secs,
    };
    write_one(state, write, forwarded).await
}

async fn increment(
    state: &NodeState,
    id: CounterId,
    request: Request<Incoming>,
) -> Result<Response, ShardError> {
    let key = idempotency_key(&request)?;
    let forwarded = is_forwarded(&request);
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let now_secs = state.clock.now_unix_secs();
    let (change, timestamp_secs) = parse_write(&body, 1, true, &state.settings, now_secs)?;
    let write = WriteRequest {
        id,
        change,
        idempotency_key: key,
        timestamp_secs,
    };
    write_one(state, write, forwarded).await
}

/// Refuses a write whose kind does not fit the counter's type as `descriptions` know it, before
/// it is forwarded (the commit loop where it lands checks again, against what it knows then).
fn check_type(descriptions: &DescriptionTable, write: &WriteRequest) -> Result<(), ShardError> {
    match descriptions.get(write.id.as_str()) {
        Some(d) if d.description.counter_type != write.change.counter_type() => Err(
            ShardError::wrong_type(write.id.as_str(), d.description.counter_type),
        ),
        _ => Ok(()),
    }
}

/// Applies one write here, or forwards it to the node owning the slot it is routed to.
async fn write_one(
    state: &NodeState,
    write: WriteRequest,
    forwarded: bool,
) -> Result<Response, ShardError> {
    let target = {
        let descriptions = state.descriptions.read().expect("descriptions lock");
        check_type(&descriptions, &write)?;
        if forwarded {
            state.router.own_slot()
        } else {
            state.router.target_of(&descriptions, &write)
        }
    };
    if target != state.router.own_slot() {
        // `None`: the target was unreachable before anything was sent, so the write is taken here.
        if let Some(response) = forward_one(state, target, &write).await? {
            return Ok(response);
        }
    }
    let id = write.id.clone();
    let unique = write.change.counter_type() == CounterType::Unique;
    let mut results = state.submit(vec![write]).await?;
    let slot = results.pop().ok_or_else(|| state.stopped())??;
    Ok(slot_answer(&state.slot_name, &id, slot, unique))
}

/// Forwards one write. `None` when the target could not be reached and the write carries no
/// idempotency key, so it may safely be applied here instead.
async fn forward_one(
    state: &NodeState,
    target: u32,
    write: &WriteRequest,
) -> Result<Option<Response>, ShardError> {
    let (path, body) = encode_forward(&[write])?;
    state.metrics.writes_forwarded.inc();
    let slot_name = state.router.slot_name(target);
    let unique = write.change.counter_type() == CounterType::Unique;
    match state.router.forward(target, path, body).await {
        Ok(mut answer) => match answer.outcomes.pop() {
            Some(EntryOutcome::Applied { value, version }) => Ok(Some(slot_answer(
                slot_name,
                &write.id,
                SlotState { value, version },
                unique,
            ))),
            Some(EntryOutcome::Refused { status, error }) => {
                Ok(Some(geocount_net::error_response(
                    StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                    &error,
                )))
            }
            None => Err(ShardError::OutcomeUnknown(format!(
                "{slot_name} answered no outcome"
            ))),
        },
        Err(ForwardError::Refused { status, error }) => Err(ShardError::TargetRefused {
            slot: slot_name.to_owned(),
            status,
            error,
        }),
        Err(error) if error.is_connect() && write.idempotency_key.is_none() => {
            tracing::warn!(%error, "forwarding target unreachable; applying the write here");
            Ok(None)
        }
        Err(error) if error.is_connect() => Err(ShardError::Unreachable(format!(
            "{slot_name}, which takes writes with this Idempotency-Key, is unreachable ({error}); retry later"
        ))),
        Err(error) => Err(ShardError::OutcomeUnknown(format!(
            "forwarding to {slot_name} failed after sending ({error}); retry with an Idempotency-Key to be safe"
        ))),
    }
}

/// Encodes writes of one kind for forwarding: deltas as a [`BatchRequest`] for `/batch`, items
/// as an [`ItemBatchRequest`] for `/batch/items`. Returns the path and the body.
fn encode_forward(writes: &[&WriteRequest]) -> Result<(&'static str, Bytes), ShardError> {
    let items: Option<Vec<ItemEntry<'_>>> = writes
        .iter()
        .map(|w| match &w.change {
            Change::Item { item, .. } => Some(ItemEntry {
                id: w.id.as_str(),
                item,
                idempotency_key: w.idempotency_key.as_deref(),
                timestamp: Some(w.timestamp_secs),
            }),
            Change::Delta(_) => None,
        })
        .collect();
    let encoded = match items {
        Some(entries) if !entries.is_empty() => {
            postcard::to_allocvec(&ItemBatchRequest { entries }).map(|b| ("/batch/items", b))
        }
        _ => {
            let entries = writes
                .iter()
                .map(|w| match w.change {
                    Change::Delta(delta) => Ok(BatchEntry {
                        id: w.id.as_str(),
                        delta,
                        idempotency_key: w.idempotency_key.as_deref(),
                        timestamp: Some(w.timestamp_secs),
                    }),
                    Change::Item { .. } => Err(ShardError::BadRequest(
                        "cannot forward deltas and items in one batch".into(),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?;
            postcard::to_allocvec(&BatchRequest { entries }).map(|b| ("/batch", b))
        }
    };
    encoded
        .map(|(path, bytes)| (path, Bytes::from(bytes)))
        .map_err(|e| ShardError::BadRequest(format!("cannot encode a forwarded batch: {e}")))
}

async fn batch(state: &Arc<NodeState>, request: Request<Incoming>) -> Result<Response, ShardError> {
    let forwarded = is_forwarded(&request);
    let scope = key_scope(&request);
    let minimal = prefers_minimal_return(request.headers());
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let writes = parse_batch(&body, &state.settings, state.clock.now_unix_secs(), &scope)?;
    state.metrics.batch_entries.observe(writes.len() as f64);
    let outcomes = apply_batch(state, writes, forwarded).await?;
    batch_answer(state, outcomes, minimal)
}

async fn batch_items(
    state: &Arc<NodeState>,
    request: Request<Incoming>,
) -> Result<Response, ShardError> {
    let forwarded = is_forwarded(&request);
    let scope = key_scope(&request);
    let minimal = prefers_minimal_return(request.headers());
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let writes = parse_item_batch(&body, &state.settings, state.clock.now_unix_secs(), &scope)?;
    state.metrics.batch_entries.observe(writes.len() as f64);
    let outcomes = apply_batch(state, writes, forwarded).await?;
    batch_answer(state, outcomes, minimal)
}

/// The postcard answer to a batch: a [`BatchResponse`] with every outcome, or, when the request
/// preferred `return=minimal`, a [`BatchSummary`] of them.
fn batch_answer(
    state: &NodeState,
    outcomes: Vec<EntryOutcome>,
    minimal: bool,
) -> Result<Response, ShardError> {
    let slot = state.slot_name.clone();
    let encoded = if minimal {
        postcard::to_allocvec(&BatchSummary::of(slot, outcomes))
    } else {
        geocount_model::encode::to_vec(&BatchResponse { slot, outcomes })
    };
    let bytes =
        encoded.map_err(|e| ShardError::Storage(format!("cannot encode the batch answer: {e}")))?;
    let mut response = bytes_response(StatusCode::OK, POSTCARD_CONTENT_TYPE, bytes.into());
    if minimal {
        response
            .headers_mut()
            .insert(PREFERENCE_APPLIED, HeaderValue::from_static(RETURN_MINIMAL));
    }
    Ok(response)
}

/// Applies a batch's checked writes (in request order; refused ones answered as such): entries
/// for other slots go to their nodes, concurrently with the local ones. Gives each entry's
/// outcome, in order.
async fn apply_batch(
    state: &Arc<NodeState>,
    checked: Vec<Result<WriteRequest, ShardError>>,
    forwarded: bool,
) -> Result<Vec<EntryOutcome>, ShardError> {
    let count = checked.len();
    // The writes for this node's slot and their positions in the batch, apart, so that the
    // common batch (every entry local) goes to the commit loop and back without a copy.
    let mut local = Vec::with_capacity(count);
    let mut local_positions = Vec::with_capacity(count);
    let mut refusals = Vec::new();
    let mut remote: HashMap<u32, Vec<(usize, WriteRequest)>> = HashMap::new();
    let own = state.router.own_slot();
    {
        // Each entry checked and routed under one read of the descriptions, released before
        // anything waits.
        let descriptions = state.descriptions.read().expect("descriptions lock");
        for (position, write) in checked.into_iter().enumerate() {
            let write = match write.and_then(|w| check_type(&descriptions, &w).map(|()| w)) {
                Ok(write) => write,
                Err(error) => {
                    refusals.push((position, refused(&error)));
                    continue;
                }
            };
            let target = if forwarded {
                own
            } else {
                state.router.target_of(&descriptions, &write)
            };
            if target == own {
                local.push(write);
                local_positions.push(position);
            } else {
                remote.entry(target).or_default().push((position, write));
            }
        }
    }
    let all_local = local.len() == count;
    let mut forwards = tokio::task::JoinSet::new();
    for (target, group) in remote {
        let state = Arc::clone(state);
        forwards.spawn(async move {
            state.metrics.writes_forwarded.inc_by(group.len() as u64);
            let writes: Vec<&WriteRequest> = group.iter().map(|(_, w)| w).collect();
            let result = match encode_forward(&writes) {
                Ok((path, body)) => state.router.forward(target, path, body).await,
                Err(error) => Err(geocount_net::ClientError::Request(error.to_string()).into()),
            };
            (target, group, result)
        });
    }
    let local_results = if local.is_empty() {
        Vec::new()
    } else {
        state.submit(local).await?
    };
    Ok(if all_local {
        local_results.into_iter().map(outcome_of).collect()
    } else {
        let mut outcomes: Vec<Option<EntryOutcome>> = vec![None; count];
        for (position, outcome) in refusals {
            outcomes[position] = Some(outcome);
        }
        for (position, result) in local_positions.into_iter().zip(local_results) {
            outcomes[position] = Some(outcome_of(result));
        }
        collect_forwarded(state, forwards, &mut outcomes).await?;
        outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| refused(&state.stopped())))
            .collect()
    })
}

/// Fills in the outcomes of the entries forwarded to other slots' nodes as their answers
/// arrive. Unkeyed entries whose node could not be reached are applied here instead.
async fn collect_forwarded(
    state: &NodeState,
    mut forwards: tokio::task::JoinSet<ForwardedGroup>,
    outcomes: &mut [Option<EntryOutcome>],
) -> Result<(), ShardError> {
    while let Some(joined) = forwards.join_next().await {
        let (target, group, result) =
            joined.map_err(|e| ShardError::OutcomeUnknown(e.to_string()))?;
        let slot_name = state.router.slot_name(target).to_owned();
        match result {
            Ok(answer) if answer.outcomes.len() == group.len() => {
                for ((position, _), outcome) in group.iter().zip(answer.outcomes) {
                    outcomes[*position] = Some(outcome);
                }
            }
            Ok(_) => {
                let error = ShardError::OutcomeUnknown(format!(
                    "{slot_name} answered a different number of outcomes"
                ));
                for (position, _) in &group {
                    outcomes[*position] = Some(refused(&error));
                }
            }
            Err(ForwardError::Refused { status, error }) => {
                let refusal = ShardError::TargetRefused {
                    slot: slot_name.clone(),
                    status,
                    error,
                };
                for (position, _) in &group {
                    outcomes[*position] = Some(refused(&refusal));
                }
            }
            Err(error) if error.is_connect() => {
                // Nothing reached the target: unkeyed entries may be taken here; keyed ones
                // must wait for their slot so retries stay deduplicated.
                let (keyed, unkeyed): (Vec<_>, Vec<_>) = group
                    .into_iter()
                    .partition(|(_, w)| w.idempotency_key.is_some());
                let unreachable = ShardError::Unreachable(format!(
                    "{slot_name} is unreachable ({error}); retry later"
                ));
                for (position, _) in &keyed {
                    outcomes[*position] = Some(refused(&unreachable));
                }
                apply_locally(state, unkeyed, outcomes).await?;
            }
            Err(error) => {
                let unknown = ShardError::OutcomeUnknown(format!(
                    "forwarding to {slot_name} failed after sending ({error}); retry with an Idempotency-Key to be safe"
                ));
                for (position, _) in &group {
                    outcomes[*position] = Some(refused(&unknown));
                }
            }
        }
    }
    Ok(())
}

/// What a forwarding task gives back: the target slot, the entries it was sent (with their
/// positions in the batch), and the target's answer.
type ForwardedGroup = (
    u32,
    Vec<(usize, WriteRequest)>,
    Result<BatchResponse, ForwardError>,
);

/// Applies writes to this node's slot, filling in their outcomes.
async fn apply_locally(
    state: &NodeState,
    writes: Vec<(usize, WriteRequest)>,
    outcomes: &mut [Option<EntryOutcome>],
) -> Result<(), ShardError> {
    if writes.is_empty() {
        return Ok(());
    }
    let (positions, writes): (Vec<usize>, Vec<WriteRequest>) = writes.into_iter().unzip();
    let results = state.submit(writes).await?;
    for (position, result) in positions.into_iter().zip(results) {
        outcomes[position] = Some(outcome_of(result));
    }
    Ok(())
}

/// A write's result as a batch answers it.
fn outcome_of(result: Result<SlotState, ShardError>) -> EntryOutcome {
    match result {
        Ok(slot) => EntryOutcome::Applied {
            value: slot.value,
            version: slot.version,
        },
        Err(error) => refused(&error),
    }
}

fn refused(error: &ShardError) -> EntryOutcome {
    EntryOutcome::Refused {
        status: error.status().as_u16(),
        error: error.to_string(),
    }
}

fn route_answer(state: &NodeState, id: &CounterId) -> Response {
    #[derive(Serialize)]
    struct SlotRoute<'a> {
        slot: &'a str,
        address: String,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct RouteAnswer<'a> {
        id: &'a str,
        number_of_shards: u32,
        slots: Vec<SlotRoute<'a>>,
    }
    let (number_of_shards, slots) = {
        let descriptions = state.descriptions.read().expect("descriptions lock");
        let router = &state.router;
        (
            router.number_of_shards(&descriptions, id.as_str()),
            router.slots_of(&descriptions, id.as_str()),
        )
    };
    json_response(
        StatusCode::OK,
        &RouteAnswer {
            id: id.as_str(),
            number_of_shards,
            slots: slots
                .iter()
                .map(|s| SlotRoute {
                    slot: state.router.slot_name(*s),
                    address: state.router.address(*s).to_string(),
                })
                .collect(),
        },
    )
}

fn health(state: &NodeState) -> Response {
    #[derive(Serialize)]
    struct Health<'a> {
        status: &'a str,
        slot: &'a str,
        incarnation: String,
        counters: usize,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        restore: Option<RestoreReport>,
        #[serde(skip_serializing_if = "Option::is_none")]
        conflict: Option<String>,
        sources: Vec<Source>,
    }
    #[derive(Serialize)]
    struct Source {
        source: String,
        staleness_ms: Option<u64>,
        last_error: Option<String>,
    }
    let counters = state.table.read().expect("slot table lock").len();
    let error = state.health.storage_error();
    let restore = state.restore.is_restoring().then(|| state.restore.report());
    let conflict = state.health.conflict();
    let (status, word) = match (&error, &restore, &conflict) {
        (Some(_), _, _) => (StatusCode::SERVICE_UNAVAILABLE, "storage failing"),
        (None, Some(_), _) => (StatusCode::SERVICE_UNAVAILABLE, "restoring"),
        (None, None, Some(_)) => (StatusCode::SERVICE_UNAVAILABLE, "slot served twice"),
        (None, None, None) => (StatusCode::OK, "ok"),
    };
    json_response(
        status,
        &Health {
            status: word,
            slot: &state.slot_name,
            incarnation: format!("{:016x}", state.incarnation),
            counters,
            error,
            restore,
            conflict,
            sources: state
                .sources
                .iter()
                .map(|s| Source {
                    source: s.name().to_owned(),
                    staleness_ms: s.staleness_ms(),
                    last_error: s.last_error(),
                })
                .collect(),
        },
    )
}

impl NodeState {
    async fn send(&self, command: Command) -> Result<(), ShardError> {
        self.commands
            .send(command)
            .await
            .map_err(|_| self.stopped())
    }

    async fn submit(&self, writes: Vec<WriteRequest>) -> Result<WriteResults, ShardError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.send(Command::Write { writes, reply }).await?;
        answer.await.map_err(|_| self.stopped())
    }

    fn stopped(&self) -> ShardError {
        ShardError::Unavailable("the node is shutting down".into())
    }
}
