//! The shard node's HTTP API: the handlers, which parse a request, hand it on
//! ([`crate::route::forward`], [`super::lifecycle`], [`super::copies`]) and answer. Every
//! path and what it needs of a caller is in [`super::routes`]; what each method does:
//!
//! | route | does |
//! |---|---|
//! | `POST /counter` | create a counter (`{"id"?, "numberOfShards"?, "windowSeconds"?, "type"?, "ttlSeconds"?, "history"?, "min"?, "max"?}`) |
//! | `GET /counter/{id}` | this slot's `{id, slot, value, version, generation}` |
//! | `DELETE /counter/{id}` | delete the counter ([`super::lifecycle`]) |
//! | `PATCH /counter/{id}` | change its expiry, `{"ttlSeconds": n \| null}` ([`super::lifecycle`]) |
//! | `POST /counter/{id}/reset` | reset it ([`super::lifecycle`]) |
//! | `PATCH /counter/{id}/write?op=INCREMENT\|DECREMENT` | write `{"delta"?: n > 0, "timestamp"?}`, or `{"item", "timestamp"?}` (INCREMENT) to a unique counter |
//! | `POST /counters/{id}/increment` | write `{"delta"?: n ≠ 0, "timestamp"?}` or `{"item", "timestamp"?}` |
//! | `POST /batch` | many writes, postcard [`BatchRequest`](geocount_model::wire::BatchRequest) → [`BatchResponse`] (or [`BatchSummary`] with `Prefer: return=minimal`) |
//! | `POST /batch/items` | many items for unique counters, postcard [`ItemBatchRequest`](geocount_model::wire::ItemBatchRequest) → [`BatchResponse`] (or [`BatchSummary`]) |
//! | `GET /counter/{id}/route` | the counter's slots in this datacenter and their nodes |
//! | `GET /counter/{id}/world` | the world value `{id, value, standard_error?, staleness_ms}` ([`crate::read::world`]) |
//! | `GET /counter/{id}/rights` | a bounded counter's rights as this slot holds them ([`crate::rights::serve`]) |
//! | `POST /rights` | another slot's ask for rights, or a bounded counter's description pushed ([`crate::rights::serve`]) |
//! | `POST /sync` | replication: own-slot states and descriptions changed since a cursor |
//! | `GET /slots/{slot}/copy` | this node's copy of a slot of its datacenter (for restores) |
//! | `GET /slots/{slot}/keys` | this node's copy of a peer slot's idempotency keys (for restores) |
//! | `POST /slots/{slot}/replicate` | a peer's groups, fsynced in this node's log of its slot (`replicated` durability) |
//! | `GET /slots/{slot}/replica` | that log, folded (for restores) |
//! | `GET /healthz`, `GET /metrics` | health, Prometheus text |
//! | `GET /openapi.json` | the API's OpenAPI document ([`super::openapi`]) |
//!
//! Writes may carry an `Idempotency-Key` header. A write for a counter whose slots do not include
//! this node's is forwarded to one that does ([`crate::route::forward`]). A unique counter's
//! reads and writes answer its slot's estimate as `value` with `standard_error`. Every refusal is
//! `{"error": ...}` with a 4xx.

use std::sync::{Arc, LazyLock};

use geocount_model::unique::STANDARD_ERROR;
use geocount_model::wire::{BatchResponse, BatchSummary, EntryOutcome, POSTCARD_CONTENT_TYPE};
use geocount_model::{CounterId, CounterType, HlcTimestamp, ShardDefaults, SlotRecord, SlotState};
use geocount_net::prefer::{PREFERENCE_APPLIED, RETURN_MINIMAL};
use geocount_net::{Response, bytes_response, json_response, prefers_minimal_return, read_body};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, StatusCode};
use serde::Serialize;

use crate::engine::key_scope::KeyScope;
use crate::engine::write::{Command, LifecycleRequest, RightsRequest, WriteRequest};
use crate::error::ShardError;
use crate::http::requests::{
    idempotency_key, is_forwarded, key_scope, parse_batch, parse_create, parse_item_batch,
    parse_write, parse_write_op,
};
use crate::http::routes::{Route, need};
use crate::http::{copies, held, lifecycle, world};
use crate::node::NodeState;
use crate::rights;
use crate::route::forward;
use crate::startup::restore::RestoreReport;
use geocount_http::routing::{self, Endpoint, RequestError, Routed};
use geocount_model::WindowQuery;

/// The endpoints, matched once per process.
static ROUTES: LazyLock<matchit::Router<Route>> = LazyLock::new(crate::http::routes::router);

/// Answers one request; every error becomes its JSON answer.
pub async fn handle(state: Arc<NodeState>, request: Request<Incoming>) -> Response {
    let need = |routed: &Routed<Route>, request: &Request<Incoming>| {
        let slot = routed.slot.as_deref();
        let forwarded = is_forwarded(request);
        need(
            routed.route,
            request.method(),
            slot,
            forwarded,
            &state.datacenter,
        )
    };
    routing::answer(&ROUTES, &state.access, need, request, |routed, request| {
        dispatch(&state, routed, request)
    })
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
        Route::Write
        | Route::Increment
        | Route::Batch
        | Route::BatchItems
        | Route::Create
        | Route::Reset,
    ) = (state.health.conflict(), route)
    {
        return Err(ShardError::SlotServedTwice(conflict));
    }
    match (route, request.method().clone(), id, slot) {
        (Route::Create, Method::POST, _, _) => create(state, request).await,
        (Route::Counter, Method::GET, Some(id), _) => read(state, &id, request.uri().query()),
        (Route::Counter, Method::DELETE, Some(id), _) => {
            lifecycle::change(state, id, LifecycleRequest::Delete, request).await
        }
        (Route::Counter, Method::PATCH, Some(id), _) => {
            lifecycle::change(state, id, LifecycleRequest::Expire(None), request).await
        }
        (Route::Reset, Method::POST, Some(id), _) => {
            lifecycle::change(state, id, LifecycleRequest::Reset, request).await
        }
        (Route::Write, Method::PATCH, Some(id), _) => write(state, id, request).await,
        (Route::Increment, Method::POST, Some(id), _) => increment(state, id, request).await,
        (Route::Batch, Method::POST, _, _) => batch(state, request, parse_batch).await,
        (Route::BatchItems, Method::POST, _, _) => batch(state, request, parse_item_batch).await,
        (Route::Route, Method::GET, Some(id), _) => Ok(route_answer(state, &id)),
        (Route::World, Method::GET, Some(id), _) => world::answer(state, id).await,
        (Route::CounterRights, Method::GET, Some(id), _) => {
            rights::serve::read_rights(state.as_ref(), &id)
        }
        (Route::Rights, Method::POST, _, _) => {
            let body = read_body(request, state.settings.max_body_bytes).await?;
            rights::serve::answer_message(state.as_ref(), &body).await
        }
        (Route::Sync, Method::POST, _, _) => copies::sync(state, request).await,
        (Route::SlotCopy | Route::KeyCopy, Method::GET, _, Some(slot)) => {
            let keys = matches!(route, Route::KeyCopy);
            copies::copy_page(state, &slot, request.uri().query(), keys)
        }
        (Route::Replicate, Method::POST, _, Some(slot)) => {
            held::replicate(state, &slot, request).await
        }
        (Route::Replica, Method::GET, _, Some(slot)) => held::replica(state, &slot).await,
        (Route::Health, Method::GET, _, _) => Ok(health(state)),
        (Route::OpenApi, Method::GET, _, _) => Ok(json_response(
            StatusCode::OK,
            &crate::http::openapi::document(&state.settings, &state.access),
        )),
        (Route::Metrics, Method::GET, _, _) => {
            let staleness = state.sources.iter().map(|s| (s.name(), s.staleness_ms()));
            let held = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            let peers = state.peer_copies.read().expect("peer copies lock").len();
            state.metrics.peer_counters.set(held(peers));
            let descriptions = state.descriptions.read().expect("descriptions lock").len();
            state.metrics.descriptions_held.set(held(descriptions));
            let registry = state
                .metrics
                .scrape(staleness, state.restore.is_restoring());
            Ok(routing::metrics_response(registry, request.headers()))
        }
        _ => Err(RequestError::method_not_allowed(&request, route.methods()).into()),
    }
}

/// Whether a route is answered while the slot is restored: health, metrics, the API document,
/// and the peers' slots this node holds (a peer restoring at the same time may need them, and
/// a peer replicating its writes needs this node's log of them).
/// Nothing of the own slot is, neither writes nor reads nor pulls: it is not whole yet.
fn served_while_restoring(route: Route, slot: Option<&str>, state: &NodeState) -> bool {
    match route {
        Route::Health | Route::Metrics | Route::OpenApi => true,
        Route::SlotCopy | Route::KeyCopy | Route::Replicate | Route::Replica => {
            slot != Some(state.slot_name.as_str())
        }
        _ => false,
    }
}

async fn create(state: &NodeState, request: Request<Incoming>) -> Result<Response, ShardError> {
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let description = parse_create(&body, &state.settings, state.clock.now_unix_ms())?;
    let bounded = description.bounds().is_some();
    let asked = (description.id.clone(), description.min, description.max);
    let (reply, answer) = tokio::sync::oneshot::channel();
    state.send(Command::Create { description, reply }).await?;
    let (status, created) = match answer.await.map_err(|_| state.stopped())? {
        Ok(created) => (StatusCode::CREATED, created),
        // The same bounded counter asked for again: its creation is finished below.
        Err(ShardError::AlreadyExists(_)) if bounded => match same_bounds(state, &asked) {
            Some(existing) => (StatusCode::OK, existing),
            None => return Err(ShardError::AlreadyExists(asked.0.to_string())),
        },
        Err(error) => return Err(error),
    };
    if bounded {
        finish_bounded(state, &created.id).await?;
    }
    Ok(json_response(status, &created))
}

/// Counter `id`'s live description if it has these bounds.
fn same_bounds(
    state: &NodeState,
    (id, min, max): &(CounterId, Option<i64>, Option<i64>),
) -> Option<geocount_model::CounterDescription> {
    let now_ms = state.clock.now_unix_ms();
    let descriptions = state.descriptions.read().expect("descriptions lock");
    let known = descriptions.get(id.as_str())?;
    let same =
        known.is_live(now_ms) && known.description.min == *min && known.description.max == *max;
    same.then(|| known.description.clone())
}

/// A bounded counter is answered as created once every shard node holds its description:
/// a node that did not would take writes past its bounds. 503 names those that did not, and
/// why; 409 those that hold writes of it made without bounds, and the bounds are then taken
/// off everywhere (the counter stays as those writes made it).
async fn finish_bounded(state: &NodeState, id: &CounterId) -> Result<(), ShardError> {
    let description = (state.descriptions.read().expect("descriptions lock"))
        .get(id.as_str())
        .cloned()
        .ok_or_else(|| ShardError::internal_message("a created counter has no description"))?;
    let pushed = rights::serve::push_description(state, &description).await;
    let names = |slots: &[geocount_model::SlotId]| slots.iter().map(ToString::to_string).collect();
    if !pushed.refused.is_empty() {
        let withdraw = RightsRequest::Withdraw(description);
        rights::serve::change_rights(state, id.clone(), withdraw).await?;
        // Every node learns it through the tiers too; pushed, the nodes that held the bounds
        // drop them at once.
        let withdrawn = (state.descriptions.read().expect("descriptions lock"))
            .get(id.as_str())
            .cloned();
        if let Some(withdrawn) = withdrawn {
            rights::serve::push_description(state, &withdrawn).await;
        }
        return Err(ShardError::WrittenUnbounded {
            counter: id.to_string(),
            slots: names(&pushed.refused),
        });
    }
    if pushed.missing.is_empty() {
        return Ok(());
    }
    let missing: Vec<String> = (pushed.missing.iter())
        .map(|(slot, why)| format!("{slot} ({why})"))
        .collect();
    Err(ShardError::Unavailable(format!(
        "counter {id} is created, but shard nodes {} do not hold its bounds yet and would not \
         keep its writes within them; send the same POST /counter again to finish",
        missing.join(", ")
    )))
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
    /// A read's: the generation the slot's record counts in (the latest reset or delete it
    /// applied), which tells whether it has learned of one.
    #[serde(skip_serializing_if = "Option::is_none")]
    generation: Option<HlcTimestamp>,
}

fn slot_answer(
    slot_name: &str,
    id: &CounterId,
    slot: SlotState,
    unique: bool,
    generation: Option<HlcTimestamp>,
) -> Response {
    json_response(
        StatusCode::OK,
        &SlotAnswer {
            id: id.as_str(),
            slot: slot_name,
            value: slot.value,
            version: slot.version,
            standard_error: unique.then_some(STANDARD_ERROR),
            generation,
        },
    )
}

fn read(state: &NodeState, id: &CounterId, query: Option<&str>) -> Result<Response, ShardError> {
    let window = routing::parse_read_query(query, state.clock.now_unix_secs(), |_, _| Ok(false))?;
    let record = state
        .table
        .read()
        .expect("slot table lock")
        .get_record(id.as_str())
        .cloned();
    let descriptions = state.descriptions.read().expect("descriptions lock");
    let description = descriptions.get(id.as_str());
    let now_ms = state.clock.now_unix_ms();
    if description.is_some_and(|d| !d.is_live(now_ms)) {
        return Err(ShardError::NotFound(id.to_string()));
    }
    // A counter described (created here or elsewhere) but not yet written here reads as 0.
    let record = match record {
        Some(record) => record,
        None if description.is_some() => SlotRecord::default(),
        None => return Err(ShardError::NotFound(id.to_string())),
    };
    // A record of an older generation than the latest reset's was wiped by it.
    let generation = description.map(|d| d.generation_at(now_ms));
    let record = match generation {
        Some(generation) if !record.counts_in(generation) => {
            record.renewed(generation, record.state.version)
        }
        _ => record,
    };
    let unique = description.map_or(record.uniques().is_some(), |d| {
        d.description.counter_type == CounterType::Unique
    });
    if unique {
        if window.is_some() {
            return Err(routing::no_window_for_unique().into());
        }
        let slot = SlotState {
            value: record.uniques().map_or(0, |sketch| sketch.count()),
            version: record.state.version,
        };
        let generation = Some(record.generation());
        return Ok(slot_answer(&state.slot_name, id, slot, true, generation));
    }
    let Some(window) = window else {
        let generation = Some(record.generation());
        return Ok(slot_answer(
            &state.slot_name,
            id,
            record.state,
            false,
            generation,
        ));
    };
    let window_seconds = description.map_or(state.settings.default_window_seconds, |d| {
        d.description.window_seconds
    });
    routing::check_window_length(&window, window_seconds)?;
    #[derive(Serialize)]
    struct WindowAnswer<'a> {
        id: &'a str,
        slot: &'a str,
        value: i128,
        version: u64,
        generation: HlcTimestamp,
        window: WindowQuery,
    }
    Ok(json_response(
        StatusCode::OK,
        &WindowAnswer {
            id: id.as_str(),
            slot: &state.slot_name,
            value: record.value_in(Some(&window)),
            version: record.state.version,
            generation: record.generation(),
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
    write_body(state, id, request, sign, false).await
}

async fn increment(
    state: &NodeState,
    id: CounterId,
    request: Request<Incoming>,
) -> Result<Response, ShardError> {
    write_body(state, id, request, 1, true).await
}

/// Applies the write of a JSON body to counter `id` (`sign` and `signed` as for [`parse_write`]).
async fn write_body(
    state: &NodeState,
    id: CounterId,
    request: Request<Incoming>,
    sign: i64,
    signed: bool,
) -> Result<Response, ShardError> {
    let key = idempotency_key(&request)?;
    let forwarded = is_forwarded(&request);
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let now_secs = state.clock.now_unix_secs();
    let parsed = parse_write(&body, sign, signed, &state.settings, now_secs)?;
    let write = WriteRequest {
        id,
        change: parsed.change,
        idempotency_key: key,
        timestamp_secs: parsed.timestamp_secs,
        ttl_secs: parsed.ttl_secs,
    };
    write_one(state, write, forwarded).await
}

/// Applies one write here, or forwards it to the node owning the slot it is routed to, and
/// answers as that slot did.
async fn write_one(
    state: &NodeState,
    write: WriteRequest,
    forwarded: bool,
) -> Result<Response, ShardError> {
    let id = write.id.clone();
    let unique = write.change.counter_type() == CounterType::Unique;
    let applied = forward::apply_one(state, write, forwarded).await?;
    Ok(slot_answer(applied.slot, &id, applied.state, unique, None))
}

/// How a batch body of one kind becomes its checked writes.
type ParseBatch = fn(
    &[u8],
    &ShardDefaults,
    u64,
    &KeyScope,
) -> Result<Vec<Result<WriteRequest, ShardError>>, ShardError>;

/// Applies the writes of a postcard batch body of the kind `parse` reads.
async fn batch(
    state: &Arc<NodeState>,
    request: Request<Incoming>,
    parse: ParseBatch,
) -> Result<Response, ShardError> {
    let forwarded = is_forwarded(&request);
    let scope = key_scope(&request);
    let minimal = prefers_minimal_return(request.headers());
    let body = read_body(request, state.settings.max_body_bytes).await?;
    let writes = parse(&body, &state.settings, state.clock.now_unix_secs(), &scope)?;
    state.metrics.batch_entries.observe(writes.len() as f64);
    let outcomes = forward::apply_batch(state, writes, forwarded).await?;
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
    let bytes = encoded.map_err(|e| ShardError::internal("cannot encode the batch answer", e))?;
    let mut response = bytes_response(StatusCode::OK, POSTCARD_CONTENT_TYPE, bytes.into());
    if minimal {
        response
            .headers_mut()
            .insert(PREFERENCE_APPLIED, HeaderValue::from_static(RETURN_MINIMAL));
    }
    Ok(response)
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
